// The member's side of OAuth connections (issue 12): connect, the redirect back, disconnect.
// The protocol and the tokens are the OAuthManager's (native-agent/engine/oauth_manager.h); this
// file authenticates, picks the principal, and answers.
//
//   POST   /v1/mcp-connections/{id}/authorize      the caller's token. 200 {"authorization_url",
//          "expires_at", "connection_id", "principal"}. The principal is the caller on a
//          per_member connection; on a shared one only an operator may authorize (403). 404 as
//          discovery for an unknown or ungranted connection, 400 NOT_OAUTH for a connection that
//          does not use OAuth, 409 NO_USER_STEP for a client_credentials one.
//   GET    /v1/oauth/callback?state&code&iss        no caller token: the state authenticates the
//          browser. A small HTML page (shared/oauth_callback.h): 200 connected, 400 failed.
//          Connected: the principal's manifest is listed at once (the manager's hook).
//   DELETE /v1/mcp-connections/{id}/authorization  the caller's token: the principal's tokens
//          and manifest go, 204; 404 when nothing was connected.
#include <optional>
#include <string>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "native-agent/base/clock.h"
#include "native-agent/engine/oauth_callbacks.h"
#include "native-agent/engine/oauth_manager.h"
#include "shared/oauth_callback.h"

namespace quiver::api {

namespace {

// How long the authorization server's requests of one API call may take (discovery,
// registration, the token exchange).
constexpr int64_t kOAuthCallBudgetMs = 20000;

HttpResponse coded_error(int status, const char* code, const std::string& message) {
  return json_response(
      status, Json::object({{"error", Json::object({{"code", code}, {"message", message}})}}));
}

// The OAuth connection `cid` of the request, granted to the caller, with the principal it
// authorizes for; nullopt when the refusal has been sent.
struct OAuthTarget {
  const ConnectionConfig* config = nullptr;
  Principal principal;
  OAuthManager* oauth = nullptr;
};

std::optional<OAuthTarget> oauth_target(ApiContext& api, const httplib::Request& req,
                                        httplib::Response& res, const Caller& caller,
                                        const char* what) {
  std::optional<GrantedConnection> conn = api.connection_of(req, res, caller.member, what);
  if (!conn) return std::nullopt;
  const ConnectionConfig* cfg = api.agent.config().find_connection(conn->id);
  if (cfg == nullptr || !conn->principal) {  // granted, but not (yet) this agent's
    send_error(res, HttpErrorCode::kNotFound, "no such connection");
    return std::nullopt;
  }
  if (cfg->auth != AuthType::kOAuth || !cfg->oauth) {
    send(coded_error(400, "NOT_OAUTH", "connection " + cfg->id + " does not authorize with OAuth"),
         res);
    return std::nullopt;
  }
  if (cfg->oauth->grant == oauth::GrantType::kClientCredentials) {
    send(coded_error(409, "NO_USER_STEP",
                     "connection " + cfg->id +
                         " uses the client_credentials grant: Quiver obtains its tokens itself"),
         res);
    return std::nullopt;
  }
  if (conn->principal->is_shared()) {
    Result<bool> op = api.is_operator(caller);
    if (!op.ok()) {
      api.fail_store(res, op.error(), what);
      return std::nullopt;
    }
    if (!*op) {
      send_error(res, HttpErrorCode::kForbidden,
                 "connection " + cfg->id + " is shared: only an operator may authorize it");
      return std::nullopt;
    }
  }
  OAuthManager* oauth = api.agent.oauth();
  if (oauth == nullptr) {
    api.log(std::string("api: ") + what + ": no OAuth manager although " + cfg->id +
            " authorizes with OAuth");
    send_error(res, HttpErrorCode::kInternal, "internal error");
    return std::nullopt;
  }
  return OAuthTarget{cfg, *conn->principal, oauth};
}

// An OAuthManager failure as the API answers it: the authorization server's or the upstream's
// trouble is 503 UPSTREAM_UNAVAILABLE with its (secret-free, redacted) message; ours is 500.
void send_oauth_failure(ApiContext& api, httplib::Response& res, const Error& e,
                        const std::string& what) {
  const std::string message = api.agent.config().redact(e.message);
  api.log("api: " + what + " failed: " + std::string(error_code_name(e.code)) + ": " + message);
  switch (e.code) {
    case ErrorCode::kInternal:
    case ErrorCode::kStoreUnavailable:
      return send_error(res, HttpErrorCode::kInternal, "internal error");
    case ErrorCode::kInvalidArgument:
      return send_error(res, HttpErrorCode::kBadRequest, message);
    default:
      return send_error(res, HttpErrorCode::kUpstreamUnavailable,
                        std::string(error_code_name(e.code)) + ": " + message);
  }
}

}  // namespace

void oauth_authorize(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Caller& caller) {
  std::optional<OAuthTarget> t = oauth_target(api, req, res, caller, "authorize");
  if (!t) return;
  Result<AuthorizationStart> start =
      t->oauth->begin(*t->config, t->principal, steady_ms() + kOAuthCallBudgetMs);
  const std::string who = t->config->id + " (" + t->principal.str() + ")";
  if (!start.ok()) return send_oauth_failure(api, res, start.error(), "authorize " + who);
  api.note("api: authorization of " + who + " started by " + caller.member.str());
  send(json_response(200, Json::object({{"authorization_url", start->authorization_url},
                                        {"expires_at", start->expires_at_ms},
                                        {"connection_id", t->config->id},
                                        {"principal", t->principal.str()}})),
       res);
}

void oauth_disconnect(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller) {
  std::optional<OAuthTarget> t = oauth_target(api, req, res, caller, "disconnect");
  if (!t) return;
  const std::string who = t->config->id + " (" + t->principal.str() + ")";
  Result<bool> gone = t->oauth->disconnect(t->config->id, t->principal);
  if (!gone.ok()) return send_oauth_failure(api, res, gone.error(), "disconnect " + who);
  // The manager's `disconnected` hook (Agent::create) dropped the manifest listed with those
  // tokens: the next read lists again, and finds that someone must authorize.
  if (!*gone) return send_error(res, HttpErrorCode::kNotFound, "not connected");
  api.note("api: " + who + " disconnected by " + caller.member.str());
  res.status = 204;
  res.set_header("Cache-Control", "no-store");
}

void oauth_callback(ApiContext& api, const httplib::Request& req, httplib::Response& res) {
  Result<oauth::CallbackParams> params = parse_oauth_callback(raw_query(req));
  if (!params.ok()) return send(oauth_callback_refusal(400, params.error().message), res);
  OAuthManager* oauth = api.agent.oauth();
  if (oauth == nullptr) {
    return send(oauth_callback_refusal(400, "No OAuth connection is configured here"), res);
  }
  FinishedCallback f =
      finish_oauth_callback(api.agent, *oauth, *params, steady_ms() + kOAuthCallBudgetMs);
  if (f.result.outcome == OAuthCallbackOutcome::kConnected) {
    api.note("api: oauth callback connected " + f.result.connection);
  } else {
    api.log("api: oauth callback failed: " + f.result.message);
  }
  send(oauth_callback_page(f.result), res);
}

}  // namespace quiver::api
