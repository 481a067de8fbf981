#include "native-agent/cli/admin_client.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include <httplib.h>

#include "native-agent/cli/cli.h"
#include "native-agent/store/store.h"

namespace quiver {
namespace {

constexpr char kTokenEnv[] = "QUIVER_TOKEN";
constexpr int64_t kMintedTokenTtlMs = 5 * 60'000;  // one command's worth
constexpr int kTimeoutSeconds = 30;                // an everyone-grant change pages every member

struct Target {
  std::string host;
  int port = 0;
};

// The agent's address: --url (http only: the agent serves plain HTTP on a local address), else
// the configuration's listen address.
std::optional<Target> target_of(const char* command, const CliArgs& args,
                                const std::optional<AgentConfig>& config, int* code) {
  Target t{"127.0.0.1", 8787};
  if (std::optional<std::string> url = args.value("url")) {
    constexpr std::string_view kScheme = "http://";
    std::string rest = url->substr(0, kScheme.size()) == kScheme ? url->substr(kScheme.size()) : "";
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    Result<ListenAddress> address = parse_listen_address(rest);
    if (rest.empty() || !address.ok()) {
      *code =
          cli_usage_error(command, "--url must be http://HOST:PORT (the agent's listen address)");
      return std::nullopt;
    }
    t = Target{address->host, address->port};
  } else if (config) {
    t = Target{config->listen.host, config->listen.port};
  }
  if (t.host == "0.0.0.0") t.host = "127.0.0.1";
  if (t.host == "::") t.host = "::1";
  return t;
}

}  // namespace

const char kAdminCliOptionsUsage[] =
    R"(  --url URL        the agent's API (default: http:// + quiver.listen of the configuration)
  --token TOKEN    an operator's caller token (default: $QUIVER_TOKEN, else one minted from the
                   configuration's caller token key with the operator role)
  --as M           the operator a minted token names (default: the only one of quiver.operators,
                   else the only member, or `local`)
  --config FILE    the configuration (default: $QUIVER_CONFIG)
  --help           this text
)";

std::vector<CliOption> admin_cli_options(std::vector<CliOption> own) {
  for (CliOption o : {CliOption{"url", true}, CliOption{"token", true}, CliOption{"as", true},
                      CliOption{"config", true}}) {
    own.push_back(o);
  }
  return own;
}

std::string admin_escape(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

std::string admin_page_query(const CliArgs& args) {
  std::string q;
  for (const char* name : {"cursor", "limit"}) {
    if (std::optional<std::string> v = args.value(name)) {
      q += std::string(q.empty() ? "?" : "&") + name + "=" + admin_escape(*v);
    }
  }
  return q;
}

int run_admin_call(const char* command, const CliArgs& args, const AdminCall& call) {
  int code = kExitOk;
  std::optional<AgentConfig> config;
  std::optional<std::string> token = args.value("token");
  if (!token) {
    if (const char* env = std::getenv(kTokenEnv); env != nullptr && *env != '\0') token = env;
  }
  const bool config_named = args.has("config") || std::getenv(kConfigPathEnv) != nullptr;
  if (!token || (!args.has("url") && config_named)) {
    config = load_cli_config(command, args, &code);
    if (!config) return code;
  }
  if (!token) {
    std::optional<std::string> as = args.value("as");
    if (!as && config->operators.size() == 1) as = *config->operators.begin();
    if (!as) as = default_member(*config);
    if (!as) return cli_usage_error(command, "which operator? pass --as M (or --token)");
    Result<std::string> minted =
        mint_token_from_config(*config, *as, system_clock_ms()(), kMintedTokenTtlMs, true);
    if (!minted.ok()) return cli_fail(command, minted.error().message, kExitUsage);
    token = std::move(*minted);
  }
  std::optional<Target> target = target_of(command, args, config, &code);
  if (!target) return code;

  httplib::Client client(target->host, target->port);
  client.set_connection_timeout(5);
  client.set_read_timeout(kTimeoutSeconds);
  client.set_write_timeout(kTimeoutSeconds);
  const httplib::Headers headers = {{"Authorization", "Bearer " + *token}};
  const std::string body = call.body ? call.body->dump() : std::string();
  httplib::Result r =
      call.method == "GET"     ? client.Get(call.path, headers)
      : call.method == "PUT"   ? client.Put(call.path, headers, body, "application/json")
      : call.method == "PATCH" ? client.Patch(call.path, headers, body, "application/json")
                               : client.Delete(call.path, headers);
  const std::string where = "http://" + ListenAddress{target->host, target->port}.describe();
  if (!r) {
    return cli_fail(
        command,
        "the agent's API at " + where + " did not answer (" + httplib::to_string(r.error()) + ")",
        kExitFailed);
  }
  Result<Json> answer = parse_json(r->body);
  if (r->status >= 200 && r->status < 300) {
    std::printf("%s\n", answer.ok() ? answer->dump(2).c_str() : r->body.c_str());
    return kExitOk;
  }
  std::string message = "HTTP " + std::to_string(r->status);
  if (answer.ok()) {
    if (const Json* error = json_field(*answer, "error")) {
      if (std::optional<std::string> m = json_string(*error, "message")) message += ": " + *m;
    }
  }
  if (r->status == 400) return cli_fail(command, message, kExitUsage);
  if (r->status == 503) return cli_fail(command, message, kExitStoreUnavailable);
  return cli_fail(command, message, kExitFailed);
}

}  // namespace quiver
