// `quiver-agent connections`: the connections of the runtime catalog through a running agent's
// admin API (native-agent/cli/admin_client.h).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "native-agent/cli/admin_client.h"
#include "native-agent/cli/cli.h"

namespace quiver {
namespace {

constexpr char kConnectionsUsage[] =
    R"(usage: quiver-agent connections list [--cursor C] [--limit N]
       quiver-agent connections get ID
       quiver-agent connections put ID --file FILE
       quiver-agent connections delete|disable|enable ID
       (each with [--url URL] [--token TOKEN | --as M] [--config FILE])

Manages connections through a running agent's admin API (operators only); agents pick a change
up from the catalog. `put` adds or replaces connection ID with the definition in FILE (`-`: stdin):
  {"name": "github", "server": {"url": "https://host/mcp", "headers": {"Authorization": "${GH}"}},
   "settings": {"auth": "headers"}}
`server` is the mcpServers entry, `settings` the quiver.connections entry; secrets are references
only ({"env": "NAME"}, {"file": "/path"} or "${NAME}"), resolved by each agent: a literal is
refused. `disable` keeps the definition but lists and grants it no more; `enable` undoes it.

options:
  --file FILE      (put) the definition, JSON
  --cursor C       (list) the page after C
  --limit N        (list) at most N connections (1..1000, default 100)
)";

constexpr std::size_t kMaxDefinitionBytes = 64 * 1024;

}  // namespace

int cmd_connections(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args = cli_begin(
      "connections", argv, admin_cli_options({{"file", true}, {"cursor", true}, {"limit", true}}),
      (std::string(kConnectionsUsage) + kAdminCliOptionsUsage).c_str(), true, &code);
  if (!args) return code;
  const std::vector<std::string>& p = args->positional;
  const std::string verb = p.empty() ? "" : p[0];
  if (verb == "list" && p.size() == 1) {
    return run_admin_call("connections", *args,
                          {"GET", "/v1/admin/connections" + admin_page_query(*args), std::nullopt});
  }
  if (p.size() != 2) {
    return cli_usage_error("connections", "expected list, or get|put|delete|disable|enable ID");
  }
  const std::string path = "/v1/admin/connections/" + admin_escape(p[1]);
  if (verb == "get") return run_admin_call("connections", *args, {"GET", path, std::nullopt});
  if (verb == "delete") {
    return run_admin_call("connections", *args, {"DELETE", path, std::nullopt});
  }
  if (verb == "disable" || verb == "enable") {
    return run_admin_call("connections", *args,
                          {"PATCH", path, Json::object({{"disabled", verb == "disable"}})});
  }
  if (verb != "put") return cli_usage_error("connections", "unknown subcommand `" + verb + "`");
  std::optional<std::string> file = args->value("file");
  if (!file) return cli_usage_error("connections", "put needs --file FILE (the definition)");
  std::ostringstream text;
  if (*file == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(*file, std::ios::binary);
    if (!in) return cli_usage_error("connections", "--file: cannot read " + *file);
    text << in.rdbuf();
  }
  if (text.str().size() > kMaxDefinitionBytes) {
    return cli_usage_error("connections", "--file: over 64 KiB");
  }
  // The parser's message may quote the text (a secret a definition should not hold): not shown.
  Result<Json> definition = parse_json(text.str(), kMaxDefinitionBytes);
  if (!definition.ok() || !definition->is_object()) {
    return cli_usage_error("connections", "--file: not a JSON object");
  }
  return run_admin_call("connections", *args, {"PUT", path, std::move(*definition)});
}

}  // namespace quiver
