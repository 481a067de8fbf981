#include "native-agent/cli/cli_support.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "native-agent/cli/cli.h"
#include "native-agent/engine/agent.h"
#include "shared/caller_token.h"
#include "shared/numbers.h"

extern char** environ;

namespace quiver {

std::optional<std::string> CliArgs::value(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> CliArgs::all(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? std::vector<std::string>{} : it->second;
}

Result<CliArgs> parse_cli_args(const std::vector<std::string>& args,
                               const std::vector<CliOption>& options) {
  CliArgs out;
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-' || a == "-") {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      out.values["help"].push_back("");
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      return Error(ErrorCode::kInvalidArgument, "unknown option `" + a + "`");
    }
    std::string name = a.substr(2);
    std::optional<std::string> inline_value;
    if (std::size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    const CliOption* spec = nullptr;
    for (const CliOption& o : options) {
      if (name == o.name) spec = &o;
    }
    if (spec == nullptr)
      return Error(ErrorCode::kInvalidArgument, "unknown option `--" + name + "`");
    if (!spec->repeatable && out.values.count(name) > 0) {
      return Error(ErrorCode::kInvalidArgument, "`--" + name + "` given twice");
    }
    if (!spec->takes_value) {
      if (inline_value) {
        return Error(ErrorCode::kInvalidArgument, "`--" + name + "` takes no value");
      }
      out.values[name].push_back("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        return Error(ErrorCode::kInvalidArgument, "`--" + name + "` needs a value");
      }
      inline_value = args[++i];
    }
    out.values[name].push_back(*inline_value);
  }
  return out;
}

Result<int64_t> parse_duration_ms(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string_view unit = text.substr(digits);
  if (digits == 0 || digits > 12) {
    return Error(ErrorCode::kInvalidArgument,
                 "`" + std::string(text) + "` is not a duration (e.g. 90s, 15m, 1h, 7d)");
  }
  const auto n = static_cast<int64_t>(*parse_decimal_u64(text.substr(0, digits)));  // <= 12 digits
  int64_t scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else if (unit == "d") {
    scale = 86'400'000;
  } else {
    return Error(ErrorCode::kInvalidArgument,
                 "`" + std::string(text) + "`: unknown unit (use ms, s, m, h or d)");
  }
  if (n <= 0) return Error(ErrorCode::kInvalidArgument, "a duration must be positive");
  return n * scale;
}

std::string format_duration_ms(int64_t ms) {
  char buf[64];
  if (ms < 0) ms = 0;
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%lld ms", static_cast<long long>(ms));
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  } else if (ms < 3'600'000) {
    std::snprintf(buf, sizeof buf, "%lld min", static_cast<long long>(ms / 60'000));
  } else if (ms % 3'600'000 == 0 && ms <= 48 * 3'600'000LL) {
    std::snprintf(buf, sizeof buf, "%lld h", static_cast<long long>(ms / 3'600'000));
  } else if (ms < 86'400'000) {
    std::snprintf(buf, sizeof buf, "%.1f h", static_cast<double>(ms) / 3'600'000.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f d", static_cast<double>(ms) / 86'400'000.0);
  }
  return buf;
}

int cli_usage_error(const char* command, const std::string& message) {
  std::fprintf(stderr, "quiver-agent %s: %s\n(see quiver-agent %s --help)\n", command,
               message.c_str(), command);
  return kExitUsage;
}

std::optional<CliArgs> cli_begin(const char* command, const std::vector<std::string>& argv,
                                 const std::vector<CliOption>& options, const char* usage,
                                 bool positional, int* exit_code) {
  Result<CliArgs> args = parse_cli_args(argv, options);
  if (!args.ok()) {
    *exit_code = cli_usage_error(command, args.error().message);
    return std::nullopt;
  }
  if (args->has("help")) {
    std::fputs(usage, stdout);
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (!positional && !args->positional.empty()) {
    *exit_code = cli_usage_error(command, "unexpected argument `" + args->positional[0] + "`");
    return std::nullopt;
  }
  return std::move(args).value();
}

int cli_fail(const char* command, const std::string& message, int exit_code) {
  std::fprintf(stderr, "quiver-agent %s: %s\n", command, message.c_str());
  return exit_code;
}

int store_exit_code(const Error& error) {
  return error.code == ErrorCode::kStoreUnavailable || error.code == ErrorCode::kUnauthenticated
             ? kExitStoreUnavailable
             : kExitFailed;
}

std::optional<AgentConfig> load_cli_config(const char* command, const CliArgs& args,
                                           int* exit_code) {
  EnvMap env = env_from_environ(environ);
  std::string path;
  if (std::optional<std::string> p = args.value("config")) {
    path = *p;
  } else if (auto it = env.find(kConfigPathEnv); it != env.end() && !it->second.empty()) {
    path = it->second;
  } else {
    *exit_code = cli_usage_error(
        command, std::string("no configuration: pass --config FILE or set ") + kConfigPathEnv);
    return std::nullopt;
  }
  Result<AgentConfig> config = load_config_file(path, env);
  if (!config.ok()) {
    std::fprintf(stderr, "quiver-agent %s: invalid configuration (%s):\n", command, path.c_str());
    std::istringstream lines(config.error().message);
    for (std::string line; std::getline(lines, line);) std::fprintf(stderr, "  %s\n", line.c_str());
    *exit_code = kConfigExitCode;
    return std::nullopt;
  }
  for (const std::string& w : config->warnings) {
    std::fprintf(stderr, "quiver-agent %s: warning: %s\n", command, w.c_str());
  }
  return std::move(config).value();
}

std::unique_ptr<Agent> create_cli_agent(const char* command, const AgentConfig& config,
                                        int* exit_code) {
  AgentOptions options = AgentOptions::on_demand();
  options.log_level = LogLevel::kWarn;
  Result<std::unique_ptr<Agent>> created = Agent::create(config, options);
  if (!created.ok()) {
    *exit_code = cli_fail(command, created.error().message, store_exit_code(created.error()));
    return nullptr;
  }
  return std::move(*created);
}

const ConnectionConfig* find_connection_named(const AgentConfig& config,
                                              std::string_view name_or_id) {
  if (const ConnectionConfig* c = config.find_connection_by_name(name_or_id)) return c;
  return config.find_connection(name_or_id);
}

std::optional<std::string> default_member(const AgentConfig& config) {
  if (config.members.size() == 1) return *config.members.begin();
  if (config.members.count("local") > 0) return std::string("local");
  return std::nullopt;
}

Result<std::string> mint_token_from_config(const AgentConfig& config, const std::string& member_id,
                                           int64_t now_ms, int64_t ttl_ms, bool operator_role) {
  if (Status s = validate_member_id(member_id); !s.ok()) return s.error();
  if (!config.members.empty() && config.members.count(member_id) == 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "`" + member_id + "` is not a member (quiver.members, or named in grants)");
  }
  if (config.caller_token_keys.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "no caller token key: add quiver.caller_token_keys to the configuration");
  }
  std::string kid = config.caller_token_signing_kid;
  if (kid.empty()) {
    if (config.caller_token_keys.size() > 1) {
      return Error(ErrorCode::kInvalidArgument,
                   "several caller_token_keys and no quiver.caller_token_signing_kid");
    }
    kid = config.caller_token_keys.begin()->first;
  }
  auto key = config.caller_token_keys.find(kid);
  if (key == config.caller_token_keys.end()) {
    return Error(ErrorCode::kInvalidArgument,
                 "caller_token_signing_kid `" + kid + "` names no key");
  }
  MintOptions options;
  options.ns = config.ns;
  if (operator_role) options.role = kOperatorRole;
  return mint_caller_token(member_id, key->second.reveal(), kid, now_ms, ttl_ms, options);
}

}  // namespace quiver
