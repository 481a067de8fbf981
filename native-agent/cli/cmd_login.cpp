// `quiver-agent login NAME`: an operator authorizes a shared OAuth connection from this machine,
// the native-application flow of RFC 8252: a loopback listener on 127.0.0.1 and an ephemeral
// port is the redirect URI; the authorization URL is printed on stderr (`authorize: <URL>`) for
// the operator to open; the redirect back is completed here (OAuthManager::complete) and the
// tokens go to the agent's token store (the same file a running agent reads). Per-member
// connections are refused: members connect through the API (POST .../{id}/authorize).
//
// stdout: one JSON line, never a token: {"connection", "connection_id", "principal", "status":
// "connected"}. The shared principal is listed at once (the manager's `connected` hook).
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/base/clock.h"
#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/cli/oauth_loopback.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/oauth_callbacks.h"
#include "native-agent/engine/oauth_manager.h"
#include "native-agent/store/token_store.h"
#include "shared/oauth_callback.h"

namespace quiver {
namespace {

constexpr char kLoginUsage[] =
    R"(usage: quiver-agent login NAME [--timeout DURATION] [--config FILE]

Authorizes the shared OAuth connection NAME (a server name from mcpServers, or a connection id)
for everyone: prints `authorize: <URL>` on stderr; open it in a browser and sign in. The
authorization server sends the browser back to a listener on 127.0.0.1 (an ephemeral port, RFC
8252); the tokens go to the agent's encrypted token store (quiver.oauth.token_store) and a
running agent lists the connection. Prints one JSON line on stdout (never a token).
Per-member connections are refused: each member connects through the API
(POST /v1/mcp-connections/{id}/authorize).

options:
  --timeout DURATION  how long to wait for the browser (default 5m)
  --config FILE       the configuration (default: $QUIVER_CONFIG)
  --help              this text

Exit status: 0 connected, 1 the authorization failed or timed out, 2 usage or configuration
error, 3 the store is unavailable.
)";

constexpr int64_t kDefaultTimeoutMs = 5 * 60 * 1000;
constexpr int64_t kFlowBudgetMs = 30'000;

}  // namespace

int cmd_login(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args =
      cli_begin("login", argv, {{"timeout", true}, {"config", true}}, kLoginUsage, true, &code);
  if (!args) return code;
  if (args->positional.size() != 1) {
    return cli_usage_error("login", "name one connection");
  }
  int64_t timeout_ms = kDefaultTimeoutMs;
  if (std::optional<std::string> t = args->value("timeout")) {
    Result<int64_t> ms = parse_duration_ms(*t);
    if (!ms.ok()) return cli_usage_error("login", "--timeout: " + ms.error().message);
    timeout_ms = *ms;
  }
  std::optional<AgentConfig> config = load_cli_config("login", *args, &code);
  if (!config) return code;
  const std::string& name = args->positional[0];
  const ConnectionConfig* c = find_connection_named(*config, name);
  if (c == nullptr) return cli_usage_error("login", "no connection named `" + name + "`");
  if (c->auth != AuthType::kOAuth || !c->oauth) {
    return cli_usage_error("login", "`" + c->name + "` does not authorize with OAuth");
  }
  if (c->credential_mode == CredentialMode::kPerMember) {
    return cli_usage_error("login", "`" + c->name +
                                        "` is per_member: each member connects through the API "
                                        "(POST /v1/mcp-connections/" +
                                        c->id + "/authorize)");
  }
  if (c->oauth->grant == oauth::GrantType::kClientCredentials) {
    return cli_usage_error("login", "`" + c->name +
                                        "` uses the client_credentials grant: the agent obtains "
                                        "its tokens itself, no login needed");
  }
  std::unique_ptr<Agent> agent = create_cli_agent("login", *config, &code);
  if (!agent) return code;
  // start() syncs the connection records: the listing that follows the authorization commits
  // through the same fenced write as a running agent's (background threads stay off).
  if (Status st = agent->start(); !st.ok()) {
    return cli_fail("login", "the store: " + st.error().message, store_exit_code(st.error()));
  }
  OAuthManager* oauth = agent->oauth();
  if (oauth == nullptr) {
    return cli_fail("login", "the agent has no OAuth manager (is quiver.oauth.key set?)",
                    kExitUsage);
  }

  // The loopback redirect: the first redirect of this login is completed and answered; anything
  // else (a bad query, another authorization's state) is refused and the wait goes on.
  std::optional<FinishedCallback> done;  // written by the handler before the wait ends
  Result<std::unique_ptr<OAuthLoopbackListener>> listener = OAuthLoopbackListener::start(
      [&](const Result<oauth::CallbackParams>& redirect) -> OAuthLoopbackListener::Answer {
        if (!redirect.ok()) return {oauth_callback_refusal(400, redirect.error().message), false};
        FinishedCallback f =
            finish_oauth_callback(*agent, *oauth, *redirect, steady_ms() + kFlowBudgetMs);
        if (f.unknown_state) {
          return {oauth_callback_refusal(400, "This is not the login Quiver is waiting for"),
                  false};
        }
        HttpResponse page = oauth_callback_page(f.result);
        done = std::move(f);
        return {std::move(page), true};
      });
  if (!listener.ok()) return cli_fail("login", listener.error().message, kExitFailed);

  const std::string& redirect = (*listener)->redirect_uri();
  Result<AuthorizationStart> start =
      oauth->begin(*c, Principal::shared(), steady_ms() + kFlowBudgetMs, redirect);
  if (!start.ok()) {
    return cli_fail("login",
                    "cannot start the authorization of `" + c->name +
                        "`: " + error_code_name(start.error().code) + ": " +
                        config->redact(start.error().message),
                    kExitFailed);
  }
  std::fprintf(stderr, "authorize: %s\n", start->authorization_url.c_str());
  std::fflush(stderr);

  (void)(*listener)->wait(timeout_ms);
  listener->reset();  // stopped: no handler runs any more
  if (!done) {
    return cli_fail(
        "login",
        "no redirect came back within " + format_duration_ms(timeout_ms) + "; nothing was stored",
        kExitFailed);
  }
  if (done->result.outcome != OAuthCallbackOutcome::kConnected) {
    return cli_fail("login", "the authorization failed: " + done->result.message, kExitFailed);
  }
  Json out = Json::object({{"connection", c->name},
                           {"connection_id", c->id},
                           {"principal", Principal::shared().str()},
                           {"status", "connected"}});
  std::printf("%s\n", json_text(out).c_str());
  return kExitOk;
}

}  // namespace quiver
