// quiver-agent's command line: one table of subcommands, each in its own file (cmd_<name>.cpp).
//
// Exit codes (stable, for scripts): 0 ok, 1 the command ran and failed (upstream unreachable,
// refresh failed), 2 usage or configuration error, 3 a store (Redis/SQLite) is unavailable.
#pragma once

#include <string>
#include <vector>

namespace quiver {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitStoreUnavailable = 3;

struct CliCommand {
  const char* name;
  const char* summary;                               // one line for `quiver-agent --help`
  int (*run)(const std::vector<std::string>& args);  // args after the command name
};

const std::vector<CliCommand>& cli_commands();
int run_cli(int argc, char** argv);

// Commands (each defined in its cmd_<name>.cpp).
int cmd_serve(const std::vector<std::string>& args);
int cmd_refresh(const std::vector<std::string>& args);
int cmd_status(const std::vector<std::string>& args);
int cmd_prefs(const std::vector<std::string>& args);
int cmd_probe(const std::vector<std::string>& args);
int cmd_token(const std::vector<std::string>& args);

}  // namespace quiver
