// quiver-agent's command line: one table of subcommands, each in its own file (cmd_<name>.cpp).
// Exit codes: exit_codes.h.
#pragma once

#include <string>
#include <vector>

#include "native-agent/base/exit_codes.h"

namespace quiver {

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
int cmd_login(const std::vector<std::string>& args);
int cmd_status(const std::vector<std::string>& args);
int cmd_prefs(const std::vector<std::string>& args);
int cmd_probe(const std::vector<std::string>& args);
int cmd_token(const std::vector<std::string>& args);
int cmd_members(const std::vector<std::string>& args);
int cmd_grants(const std::vector<std::string>& args);
int cmd_connections(const std::vector<std::string>& args);
int cmd_layout(const std::vector<std::string>& args);
int cmd_migrate_layout(const std::vector<std::string>& args);

}  // namespace quiver
