// CLI support: what every `quiver-agent` command that works on a configuration does the same way —
// read its options, find and load the configuration, open a one-shot agent, name connections, parse
// durations, and turn an error into one of cli.h's exit codes.
//
// Options are GNU style: `--name value` or `--name=value`, flags without a value, `--` ends the
// options, `-h` is `--help`. Each command lists the options it knows; anything else is a usage
// error (exit 2) that names the option.
//
// The configuration comes from `--config FILE`, else from the file named by $QUIVER_CONFIG
// (config.h: kConfigPathEnv); neither is a usage error. Its warnings go to stderr, one per line.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/config.h"
#include "shared/status.h"

namespace quiver {

class Agent;

struct CliOption {
  const char* name;  // without the dashes: "config"
  bool takes_value;
  bool repeatable = false;
};

struct CliArgs {
  std::map<std::string, std::vector<std::string>> values;  // option -> its values (flags: "")
  std::vector<std::string> positional;

  bool has(const std::string& name) const { return values.count(name) > 0; }
  // The last value given, or nullopt.
  std::optional<std::string> value(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
};

// kInvalidArgument naming the option for an unknown option, a missing value, a value given to a
// flag, or a non-repeatable option given twice. `help` (and `-h`) is always known.
Result<CliArgs> parse_cli_args(const std::vector<std::string>& args,
                               const std::vector<CliOption>& options);

// "90s", "15m", "1h", "7d", "500ms" or a bare number of seconds -> milliseconds (> 0).
Result<int64_t> parse_duration_ms(std::string_view text);
// "1.2 s", "850 ms", "3 min", "2 h", "4 d": short, for progress lines.
std::string format_duration_ms(int64_t ms);

// Prints `quiver-agent <command>: <message>` and a pointer to --help on stderr; returns kExitUsage.
int cli_usage_error(const char* command, const std::string& message);
// Prints `quiver-agent <command>: <message>` on stderr and returns `exit_code`.
int cli_fail(const char* command, const std::string& message, int exit_code);

// The start every command shares: its options parsed (parse_cli_args; an error is a usage error),
// --help answered with `usage` on stdout and, unless `positional`, a positional argument refused.
// Nothing, with the exit code in `*exit_code`, when the command has nothing more to do.
std::optional<CliArgs> cli_begin(const char* command, const std::vector<std::string>& argv,
                                 const std::vector<CliOption>& options, const char* usage,
                                 bool positional, int* exit_code);

// The exit code for an error of the store (kStoreUnavailable, kUnauthenticated -> 3) or anything
// else
// (-> 1).
int store_exit_code(const Error& error);

// Loads the configuration named by --config or $QUIVER_CONFIG with the process environment.
// On failure, prints why (one line per problem) and returns the exit code in `*exit_code`.
std::optional<AgentConfig> load_cli_config(const char* command, const CliArgs& args,
                                           int* exit_code);

// The agent of a one-shot command (status, prefs, refresh): it logs warnings and worse, watches
// no upstream and runs no revalidation workers and no maintenance loop. On failure, prints why and
// returns nullptr with the exit code (store_exit_code) in `*exit_code`.
std::unique_ptr<Agent> create_cli_agent(const char* command, const AgentConfig& config,
                                        int* exit_code);

// The connection named `name_or_id` (a server name as written, or a connection id), or nullptr.
const ConnectionConfig* find_connection_named(const AgentConfig& config,
                                              std::string_view name_or_id);

// The member a command acts for when none is given: the only member, else "local" when it is one,
// else nullopt.
std::optional<std::string> default_member(const AgentConfig& config);

// A caller token for `member_id` from the configuration's key ring: the signing key
// (caller_token_signing_kid, or the only key). kInvalidArgument when there is no key, several keys
// and none chosen, or the member is not one of the configured members (when members are listed).
// `operator_role`: the token claims the operator role (`"role": "operator"`: the admin API).
Result<std::string> mint_token_from_config(const AgentConfig& config, const std::string& member_id,
                                           int64_t now_ms, int64_t ttl_ms,
                                           bool operator_role = false);

}  // namespace quiver
