// `quiver-agent token`: mint a caller token (shared/caller_token.h) from the configuration's key
// ring, for trying the API with curl and for tests. It prints the token alone on stdout, so that
// `TOKEN=$(quiver-agent token --member alice)` works.
#include <cstdio>
#include <string>
#include <vector>

#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/store/store.h"

namespace quiver {
namespace {

constexpr char kTokenUsage[] =
    R"(usage: quiver-agent token [--member M] [--operator] [--ttl 1h] [--config FILE]

Mints a caller token (an HS256 JWT) for member M with the configuration's caller token key
(quiver.caller_token_signing_kid, or the only key) and prints it on stdout. Callers send it as
`Authorization: Bearer <token>` to the agent's API and to the edge.

options:
  --member M       the member the token identifies (default: the only configured member, or
                   `local`); it must be one of quiver.members when members are listed
  --operator       the token claims the operator role ("role": "operator"): it may use the
                   admin API (/v1/admin/..., `quiver-agent members|grants|connections`)
  --ttl DURATION   lifetime: 90s, 15m, 1h (default), 7d; at most 30d
  --config FILE    the configuration (default: $QUIVER_CONFIG)
  --help           this text

Exit status: 0 printed, 2 usage or configuration error.
)";

constexpr int64_t kMaxTokenTtlMs = int64_t{30} * 86'400'000;

}  // namespace

int cmd_token(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args = cli_begin(
      "token", argv, {{"member", true}, {"operator", false}, {"ttl", true}, {"config", true}},
      kTokenUsage, false, &code);
  if (!args) return code;
  int64_t ttl_ms = 3'600'000;
  if (std::optional<std::string> ttl = args->value("ttl")) {
    Result<int64_t> parsed = parse_duration_ms(*ttl);
    if (!parsed.ok()) return cli_usage_error("token", "--ttl: " + parsed.error().message);
    if (*parsed > kMaxTokenTtlMs) return cli_usage_error("token", "--ttl: at most 30d");
    ttl_ms = *parsed;
  }
  std::optional<AgentConfig> config = load_cli_config("token", *args, &code);
  if (!config) return code;
  std::optional<std::string> member = args->value("member");
  if (!member) member = default_member(*config);
  if (!member) return cli_usage_error("token", "which member? pass --member M");
  Result<std::string> token =
      mint_token_from_config(*config, *member, system_clock_ms()(), ttl_ms, args->has("operator"));
  if (!token.ok()) return cli_fail("token", token.error().message, kExitUsage);
  std::printf("%s\n", token->c_str());
  return kExitOk;
}

}  // namespace quiver
