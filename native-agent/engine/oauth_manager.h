// OAuthManager: the agent's OAuth side. Connects members' (and operators') accounts to upstream MCP
// servers with `auth: "oauth"`, keeps their tokens fresh, and hands the upstream connections a
// valid access token for each (connection, principal).
//
// Flows (the protocol is shared/oauth.h; requests go out through
// native-agent/upstream/oauth_http.h):
//   begin(cid, principal)       POST /v1/mcp-connections/{id}/authorize, `quiver-agent login`:
//                               discovery from the server's 401, the client (pre-registered,
//                               CIMD or a dynamic registration reused per issuer), a pending
//                               authorization in the token store; answers the URL for the user
//   complete(callback)          GET /v1/oauth/callback at the agent, or a callback the edge
//                               queued in Redis (`oauth:callbacks`, schema/redis-keys.md): takes
//                               the pending row (single use, expiring), exchanges the code, stores
//                               the authorization and lists that principal's manifest at once
//   disconnect(cid, principal)  DELETE /v1/mcp-connections/{id}/authorization: tokens and the
//                               principal's manifest go
//   client credentials          a `shared` connection with grant client_credentials needs no user:
//                               access_token() obtains and renews its token itself
//
// Tokens. access_token() answers the stored token, refreshing first when it expires within
// `quiver.oauth.refresh_ahead_ms` (at most half the token's lifetime); after an upstream 401 the
// caller asks again with `rejected` set and gets a refreshed token (or kAuthorizationRequired).
// One refresh in flight per (connection, principal) across every agent sharing the token store
// (TokenStore::try_lock_refresh, held by the agent's consumer name; threads of one agent take
// turns in memory): the others wait for it and read the new token. A refresh answered
// `invalid_grant` (or an expired or refused token without a refresh token) deletes the dead
// tokens, so the next call answers kAuthorizationRequired without asking the token endpoint
// again: the principal's status becomes authorization_required while its last good manifest stays
// visible as stale (the listing records the error; the agent does not retry it by backoff).
// Deadlines (`deadline_ms`) are on the steady clock (native-agent/base/clock.h).
//
// kAuthorizationRequired (shared/status.h) is what the upstream connection, the listing, the
// manifest's error, the API, the edge, `status` and `/metrics` report for a principal without a
// usable authorization.
//
// Secrets. Tokens, codes, verifiers and client secrets live in the token store (encrypted) and in
// memory for the request that uses them; never in a log line, a metric, an error or the store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "native-agent/base/config.h"
#include "native-agent/store/token_store.h"
#include "shared/identity.h"
#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

struct AgentContext;

struct AuthorizationStart {
  std::string authorization_url;
  int64_t expires_at_ms = 0;  // the pending authorization's end (wall clock)
};

struct AuthorizationDone {
  std::string connection_id;
  Principal principal;
};

class OAuthManager {
 public:
  // `holder` names this agent in refresh locks (its consumer name).
  OAuthManager(const AgentConfig& config, std::unique_ptr<TokenStore> tokens, std::string holder);
  ~OAuthManager();

  // The connection's configuration changed (reload): flows use the new settings.
  void set_config(const AgentConfig& config);

  // A bearer token for (connection, principal). kAuthorizationRequired when there is none or it
  // cannot be refreshed; other codes when the authorization server failed (the token is kept).
  // `rejected`: the token the upstream just refused with 401 (refresh unless the stored one is
  // already newer).
  Result<Secret> access_token(const ConnectionConfig& connection, const Principal& principal,
                              int64_t deadline_ms, const std::optional<Secret>& rejected = {});

  // Step-up (MCP authorization, "Scope Challenge Handling"): the upstream refused `refused` with
  // 403 `insufficient_scope` (`challenge`, its WWW-Authenticate). The scopes to ask for are the
  // union of the configured, the granted, earlier step-ups' and the challenge's.
  // client_credentials: a new token with them (once across agents sharing the token store),
  // answered for the next listing. authorization_code: a person must consent, so the refused tokens
  // go, the union is kept for the next begin(), and the answer is kAuthorizationRequired. At most
  // oauth::kMaxStepUps step-ups until a listing succeeds (listed()); then kUnauthenticated, with
  // no request to the authorization server.
  Result<Secret> step_up(const ConnectionConfig& connection, const Principal& principal,
                         int64_t deadline_ms, const Secret& refused,
                         const oauth::BearerChallenge& challenge);
  // A listing of (connection, principal) succeeded with its token: a step-up in progress is done.
  void listed(const std::string& connection_id, const Principal& principal);

  // `redirect_uri`: where the authorization server sends the browser back; nullopt:
  // `quiver.oauth.redirect_uri` (`quiver-agent login` passes its loopback address, RFC 8252, and
  // registers as a native application).
  Result<AuthorizationStart> begin(const ConnectionConfig& connection, const Principal& principal,
                                   int64_t deadline_ms,
                                   const std::optional<std::string>& redirect_uri = std::nullopt);
  // kNotFound for an unknown, used or expired state (no pending authorization of this token store:
  // another agent's, or none); kInvalidArgument for an `error` from the authorization server, a
  // wrong `iss`, a connection no longer configured; the token endpoint's failures as they are.
  // Nothing stored on failure.
  Result<AuthorizationDone> complete(const oauth::CallbackParams& callback, int64_t deadline_ms);
  // True when an authorization was deleted.
  Result<bool> disconnect(const std::string& connection_id, const Principal& principal);

  // Whether (connection, principal) has a stored authorization (no secret read).
  Result<bool> connected(const std::string& connection_id, const Principal& principal);

  // What the agent does when an authorization arrives or goes. Agent::create sets them:
  // `connected` (after complete() stored the tokens) lists that principal's manifest at once
  // (Agent::refresh_now, trigger "authorized", synchronously: complete() returns after the
  // listing); `disconnected` (after disconnect() deleted tokens) drops the principal's manifest
  // (ManifestStore::drop_manifest). Called on the calling thread, outside the manager's locks;
  // a hook's failure is the hook's to log, never complete()'s or disconnect()'s. Unset: nothing.
  using PrincipalHook = std::function<void(const std::string& connection_id, const Principal&)>;
  struct Hooks {
    PrincipalHook connected;
    PrincipalHook disconnected;
  };
  void set_hooks(Hooks hooks);

  TokenStore& tokens();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
