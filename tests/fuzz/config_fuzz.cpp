// Fuzzes the agent's configuration parser (native-agent/base/config.h: parse_config) from text,
// with a fake environment and secret-file reader: nothing touches the real file system. Input: the
// config text, optionally followed by a NUL byte and "NAME=value" lines that extend the
// environment (QUIVER_* overrides included). An accepted configuration must keep its promises:
// every connection's id is valid and unique, upstream_for works for each of its principals, and
// the secrets handed in through the environment or files never show in the effective
// configuration (`quiver-agent status`), a connection's description or redacted text.
#include <cstddef>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "native-agent/base/config.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

constexpr char kEnvSecret[] = "env-secret-Qw7Er8Ty9Ui0";
constexpr char kFileSecret[] = "file-secret-Zx1Cv2Bn3Mm4-0123456789abcdef";

EnvMap base_env() {
  return {{"TOKEN", kEnvSecret},
          {"GITHUB_TOKEN", kEnvSecret},
          {"REDIS_PASSWORD", kEnvSecret},
          {"QUIVER_TOKEN_KEY", std::string(kEnvSecret) + "-and-32-bytes-long-key"},
          {"HOME", "/home/fuzz"},
          {"PORT", "8080"}};
}

void no_leak(const std::string& shown, std::string_view input, const char* where) {
  for (const std::string& secret : {std::string(kEnvSecret), std::string(kFileSecret)}) {
    if (input.find(secret) != std::string_view::npos) continue;  // written in the config itself
    fuzz::check(shown.find(secret) == std::string::npos, where, "a secret value is shown");
  }
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  std::size_t nul = input.find('\0');
  std::string_view text = input.substr(0, nul);
  EnvMap env = base_env();
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty()) {
      std::size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      std::size_t eq = line.find('=');
      if (eq != std::string_view::npos && eq > 0) {
        env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
      }
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 1);
    }
  }

  ConfigSources sources;
  sources.text = text;
  sources.origin = "fuzz.json";
  sources.env = env;
  sources.working_dir = "/srv/quiver";
  sources.read_file = [](const std::string& path) -> Result<std::string> {
    if (path.rfind("/run/secrets/", 0) == 0) return std::string(kFileSecret);
    return Error(ErrorCode::kNotFound, "No such file or directory");
  };
  auto config = parse_config(sources);
  if (!config.ok()) {
    fuzz::check(!config.error().message.empty(), "parse_config: a refusal without a reason");
    no_leak(config.error().message, input, "parse_config: the error message");
    return 0;
  }

  no_leak(config->effective_config_json().dump(-1, ' ', false, Json::error_handler_t::replace),
          input, "effective_config_json");
  std::set<std::string> ids;
  for (const ConnectionConfig& c : config->connections) {
    fuzz::check(validate_connection_id(c.id).ok(), "parse_config: an invalid connection id", c.id);
    fuzz::check(ids.insert(c.id).second, "parse_config: a repeated connection id", c.id);
    no_leak(c.describe(), input, "ConnectionConfig::describe");
    std::ostringstream printed;
    printed << c;
    no_leak(printed.str(), input, "operator<<(ConnectionConfig)");
    for (const Principal& p : c.principals()) {
      auto upstream = c.upstream_for(p);
      fuzz::check(upstream.ok(), "upstream_for refused one of the connection's principals",
                  upstream.ok() ? "" : upstream.error().message);
    }
    for (const std::string& member : c.granted_members) {
      auto p = config->principal_for(member, c.id);
      fuzz::check(p.ok(), "principal_for refused a granted member", member);
    }
  }
  for (const Secret& s : config->secrets()) {
    const std::string& v = s.reveal();
    if (v.size() < kMinRedactedSecretBytes || v.find('*') != std::string::npos) continue;
    std::string redacted = config->redact("upstream said: " + v + ".");
    fuzz::check(redacted.find(v) == std::string::npos, "AgentConfig::redact left a secret",
                s.source());
  }
  if (config->redis) no_leak(config->redis->describe(), input, "RedisConfig::describe");
  return 0;
}
