#include "native-agent/cli/cli.h"

#include <cstdio>
#include <cstring>

#include "native-agent/upstream/child_process.h"

namespace quiver {

const std::vector<CliCommand>& cli_commands() {
  static const std::vector<CliCommand> commands = {
      {"serve", "run the agent: keep manifests fresh and serve the local HTTP API", cmd_serve},
      {"refresh", "list connections now and store their manifests (NAME... or --all)", cmd_refresh},
      {"status", "connections, principals, freshness, errors and the effective configuration",
       cmd_status},
      {"prefs", "show or toggle a connection's capabilities (--enable/--disable TYPE:KEY)",
       cmd_prefs},
      {"login", "authorize a shared OAuth connection from this machine (browser, loopback)",
       cmd_login},
      {"probe", "list one upstream MCP server live and print its manifest (test connection)",
       cmd_probe},
      {"token", "mint a caller token for a member from the configured key ring (for testing)",
       cmd_token},
      {"members", "list, show, add or remove members through a running agent (operators)",
       cmd_members},
      {"grants", "show or change a member's grants, or everyone's, through a running agent",
       cmd_grants},
      {"connections", "list, show, add, change, disable or remove connections (operators)",
       cmd_connections},
      {"layout", "the namespace's key layout record and the layouts of the agents seen",
       cmd_layout},
      {"migrate-layout", "move the Redis namespace to key layout v2 (spread over a cluster)",
       cmd_migrate_layout},
  };
  return commands;
}

namespace {

void print_usage(FILE* out) {
  std::fprintf(out,
               "usage: quiver-agent <command> [options]\n\n"
               "Quiver's agent: lists upstream MCP servers and keeps their manifests cached.\n\n"
               "commands:\n");
  for (const CliCommand& c : cli_commands()) std::fprintf(out, "  %-15s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`quiver-agent <command> --help` describes a command.\n");
}

}  // namespace

int run_cli(int argc, char** argv) {
  ignore_sigpipe();  // a dead upstream socket or pipe is an error value, not the agent's death
  if (argc < 2) {
    print_usage(stderr);
    return kExitUsage;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return kExitOk;
  }
  for (const CliCommand& c : cli_commands()) {
    if (name == c.name) return c.run(std::vector<std::string>(argv + 2, argv + argc));
  }
  std::fprintf(stderr, "quiver-agent: unknown command '%s' (see quiver-agent --help)\n",
               name.c_str());
  return kExitUsage;
}

}  // namespace quiver
