#include "native-agent/engine/oauth_manager.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "native-agent/base/clock.h"
#include "native-agent/engine/agent_context.h"
#include "native-agent/store/store.h"
#include "native-agent/upstream/oauth_http.h"
#include "shared/oauth_internal.h"

namespace quiver {

namespace {

// How often a waiter looks at the store while another agent (or thread) refreshes.
constexpr int64_t kRefreshPollMs = 50;
// A refresh lock outlives its request's deadline by this much at most (a holder that died frees
// the others after it).
constexpr int64_t kRefreshLockSlackMs = 5000;

int64_t wall_now_ms() { return system_clock_ms()(); }

Error authorization_required(const std::string& cid, const Principal& principal,
                             const std::string& why) {
  return Error(ErrorCode::kAuthorizationRequired,
               "connection `" + cid + "` (" + principal.str() + "): " + why +
                   "; connect it through POST /v1/mcp-connections/" + cid + "/authorize");
}

}  // namespace

struct OAuthManager::Impl {
  std::unique_ptr<TokenStore> tokens;
  std::string holder;

  std::mutex config_mu;
  std::shared_ptr<const AgentConfig> config;
  Hooks hooks;

  // One refresh per (connection, principal) in this process; the token store's lock does the same
  // across processes (its holder is this agent, so threads of one agent need this one too).
  std::mutex keys_mu;
  std::map<std::string, std::shared_ptr<std::timed_mutex>> key_locks;

  std::shared_ptr<const AgentConfig> current() {
    std::lock_guard<std::mutex> lock(config_mu);
    return config;
  }

  std::shared_ptr<std::timed_mutex> key_lock(const std::string& cid, const Principal& principal) {
    std::lock_guard<std::mutex> lock(keys_mu);
    std::shared_ptr<std::timed_mutex>& m = key_locks[cid + "\n" + principal.str()];
    if (!m) m = std::make_shared<std::timed_mutex>();
    return m;
  }

  // The authorization server's requests of one flow (discovery, registration, the token
  // endpoint) share the caller's deadline, cut to the connection's own listing timeout: a hung
  // authorization server costs what a hung upstream would, not a fixed budget.
  OAuthHttpOptions http_options(const ConnectionConfig& c, int64_t deadline_ms) {
    OAuthHttpOptions o;
    o.allow_private = c.endpoint.allow_private_addresses;
    o.deadline_ms = deadline_ms;
    if (std::shared_ptr<const AgentConfig> cfg = current()) {
      o.deadline_ms = std::min(deadline_ms, steady_ms() + list_timeout_for(c, cfg->runtime));
    }
    return o;
  }

  Result<oauth::OAuthHost> host_for(const ConnectionConfig& c) const {
    return make_oauth_host(c.oauth && c.oauth->private_key ? c.oauth->private_key->reveal() : "");
  }

  std::string redirect_uri() {
    std::shared_ptr<const AgentConfig> cfg = current();
    return cfg ? cfg->oauth.redirect_uri : std::string();
  }

  int64_t refresh_ahead_ms() {
    std::shared_ptr<const AgentConfig> cfg = current();
    return cfg ? cfg->oauth.refresh_ahead_ms : 60000;
  }

  // Runs `flow` to its end; the authorization it produced, or its error.
  Result<oauth::Authorization> finish(oauth::OAuthFlow& flow, const OAuthHttpOptions& options) {
    drive_oauth_flow(flow, options);
    switch (flow.step()) {
      case oauth::FlowStep::kDone:
        return flow.authorization();
      case oauth::FlowStep::kFailed:
        return flow.error();
      default:
        return Error(ErrorCode::kInvalidReply,
                     "the authorization server asked for a user where none can answer");
    }
  }

  // The token endpoint, once, under both locks. `seen`: the access token the caller saw (empty:
  // none stored). Answers the authorization to use.
  Result<oauth::Authorization> renew(const ConnectionConfig& c, const Principal& principal,
                                     const std::optional<oauth::Authorization>& current,
                                     int64_t deadline_ms) {
    Result<oauth::OAuthHost> host = host_for(c);
    if (!host.ok()) return host.error();
    const oauth::OAuthClientSettings settings = c.oauth->client_settings(redirect_uri());
    const bool client_credentials = c.oauth->grant == oauth::GrantType::kClientCredentials;
    std::optional<oauth::OAuthFlow> flow;
    if (current.has_value() && (!current->tokens.refresh_token.empty() || client_credentials)) {
      flow.emplace(oauth::OAuthFlow::refresh(*current, settings, *host));
    } else if (client_credentials) {
      Result<std::optional<oauth::BearerChallenge>> challenge =
          fetch_bearer_challenge(c.endpoint.url, http_options(c, deadline_ms));
      if (!challenge.ok()) return challenge.error();
      flow.emplace(oauth::OAuthFlow::authorize(c.endpoint.url, settings, *host, *challenge));
    } else if (current.has_value()) {
      // Expired or refused, and nothing to renew it with: the tokens are dead.
      (void)tokens->delete_authorization(c.id, principal);
      return authorization_required(
          c.id, principal,
          "the access token expired or was refused and no refresh token was issued");
    } else {
      return authorization_required(c.id, principal, "not authorized");
    }
    Result<oauth::Authorization> done = finish(*flow, http_options(c, deadline_ms));
    if (!done.ok()) {
      if (done.error().code == ErrorCode::kAuthorizationRequired) {
        // The refresh token is dead: the tokens go, so that nobody asks the token endpoint
        // again with it; the manifest the listing recorded stays, stale.
        (void)tokens->delete_authorization(c.id, principal);
        return authorization_required(c.id, principal,
                                      "the authorization server refused the refresh token ("
                                      "invalid_grant)");
      }
      return done.error();
    }
    if (Status st = tokens->put_authorization(c.id, principal, *done, wall_now_ms()); !st.ok()) {
      return st.error();
    }
    return done;
  }

  // A usable access token for (connection, principal): the stored one unless it is about to
  // expire or is `rejected`; else `renewal` runs once, under this process's lock for the key and
  // the token store's lock (every agent sharing the file), while the others wait for its token.
  using Renewal = std::function<Result<oauth::Authorization>(
      const std::optional<oauth::Authorization>& latest)>;
  Result<Secret> obtain(const ConnectionConfig& connection, const Principal& principal,
                        int64_t deadline_ms, const std::optional<Secret>& rejected,
                        const Renewal& renewal, bool fall_back_to_usable = true);

  // A step-up of the client_credentials grant (under obtain()'s locks): a new token asking for
  // `scopes`.
  Result<oauth::Authorization> client_credentials_step_up(
      const ConnectionConfig& c, const Principal& principal,
      const std::optional<oauth::Authorization>& current, const oauth::BearerChallenge& challenge,
      const std::vector<std::string>& scopes, int attempt, int64_t deadline_ms) {
    Result<oauth::OAuthHost> host = host_for(c);
    if (!host.ok()) return host.error();
    oauth::OAuthClientSettings settings = c.oauth->client_settings(redirect_uri());
    settings.scopes = scopes;
    oauth::OAuthFlow flow =
        current.has_value()
            ? oauth::OAuthFlow::step_up(*current, challenge, attempt, c.endpoint.url, settings,
                                        *host)
            : oauth::OAuthFlow::authorize(c.endpoint.url, settings, *host, challenge);
    Result<oauth::Authorization> done = finish(flow, http_options(c, deadline_ms));
    if (!done.ok()) return done.error();
    if (Status st = tokens->put_authorization(c.id, principal, *done, wall_now_ms()); !st.ok()) {
      return st.error();
    }
    return done;
  }
};

OAuthManager::OAuthManager(const AgentConfig& config, std::unique_ptr<TokenStore> tokens,
                           std::string holder)
    : impl_(std::make_unique<Impl>()) {
  impl_->tokens = std::move(tokens);
  impl_->holder = std::move(holder);
  set_config(config);
}

OAuthManager::~OAuthManager() = default;

void OAuthManager::set_config(const AgentConfig& config) {
  auto copy = std::make_shared<const AgentConfig>(config);
  std::lock_guard<std::mutex> lock(impl_->config_mu);
  impl_->config = std::move(copy);
}

void OAuthManager::set_hooks(Hooks hooks) {
  std::lock_guard<std::mutex> lock(impl_->config_mu);
  impl_->hooks = std::move(hooks);
}

TokenStore& OAuthManager::tokens() { return *impl_->tokens; }

Result<Secret> OAuthManager::access_token(const ConnectionConfig& connection,
                                          const Principal& principal, int64_t deadline_ms,
                                          const std::optional<Secret>& rejected) {
  if (connection.auth != AuthType::kOAuth || !connection.oauth.has_value()) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + connection.id + "` does not use auth oauth");
  }
  if (Status st = check_principal(connection, principal); !st.ok()) return st.error();
  Impl& m = *impl_;
  return m.obtain(connection, principal, deadline_ms, rejected,
                  [&](const std::optional<oauth::Authorization>& latest) {
                    return m.renew(connection, principal, latest, deadline_ms);
                  });
}

Result<Secret> OAuthManager::Impl::obtain(const ConnectionConfig& connection,
                                          const Principal& principal, int64_t deadline_ms,
                                          const std::optional<Secret>& rejected,
                                          const Renewal& renewal, bool fall_back_to_usable) {
  Impl& m = *this;
  const std::string source = "oauth:" + connection.id;
  const int64_t ahead_ms = m.refresh_ahead_ms();
  // Whether `a` must be renewed before use.
  auto stale = [&](const std::optional<oauth::Authorization>& a) {
    if (!a.has_value()) return true;
    if (rejected.has_value() && rejected->reveal() == a->tokens.access_token) return true;
    if (a->tokens.expires_at_ms == 0) return false;  // refreshed on a 401 only
    // Ahead by refresh_ahead_ms, at most half the token's lifetime (a server handing out 30 s
    // tokens must not make every call refresh).
    int64_t ahead = ahead_ms;
    if (a->tokens.obtained_at_ms > 0 && a->tokens.expires_at_ms > a->tokens.obtained_at_ms) {
      ahead = std::min(ahead, (a->tokens.expires_at_ms - a->tokens.obtained_at_ms) / 2);
    }
    return a->tokens.expires_at_ms - wall_now_ms() <= ahead;
  };
  auto read = [&]() -> Result<std::optional<oauth::Authorization>> {
    Result<std::optional<AuthorizationRecord>> r =
        m.tokens->authorization(connection.id, principal);
    if (!r.ok()) return r.error();
    if (!r->has_value()) return std::optional<oauth::Authorization>();
    return std::optional<oauth::Authorization>((*r)->authorization);
  };
  // A token about to expire (not yet expired) that cannot be renewed is still good for now.
  auto usable = [&](const std::optional<oauth::Authorization>& a) {
    return a.has_value() &&
           !(rejected.has_value() && rejected->reveal() == a->tokens.access_token) &&
           (a->tokens.expires_at_ms == 0 || a->tokens.expires_at_ms > wall_now_ms());
  };

  Result<std::optional<oauth::Authorization>> seen = read();
  if (!seen.ok()) return seen.error();
  if (!stale(*seen)) return Secret(seen->value().tokens.access_token, source);
  const bool client_credentials = connection.oauth->grant == oauth::GrantType::kClientCredentials;
  if (!seen->has_value() && !client_credentials) {
    return authorization_required(connection.id, principal, "not authorized");
  }

  // One renewal per key in this process ...
  std::shared_ptr<std::timed_mutex> key = m.key_lock(connection.id, principal);
  std::unique_lock<std::timed_mutex> in_process(*key, std::defer_lock);
  if (!in_process.try_lock_for(
          std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms - steady_ms())))) {
    return Error(ErrorCode::kTimeout, "connection `" + connection.id + "` (" + principal.str() +
                                          "): waiting for another token refresh");
  }
  // ... and across every agent sharing the token store.
  for (;;) {
    Result<std::optional<oauth::Authorization>> now = read();
    if (!now.ok()) return now.error();
    if (!stale(*now)) return Secret(now->value().tokens.access_token, source);
    if (!now->has_value() && !client_credentials) {
      return authorization_required(connection.id, principal, "not authorized");
    }
    const int64_t ttl = std::max<int64_t>(0, deadline_ms - steady_ms()) + kRefreshLockSlackMs;
    Result<bool> locked =
        m.tokens->try_lock_refresh(connection.id, principal, m.holder, wall_now_ms(), ttl);
    if (!locked.ok()) return locked.error();
    if (*locked) {
      // Read once more under the lock: another agent may have written between the two.
      Result<std::optional<oauth::Authorization>> latest = read();
      Result<oauth::Authorization> renewed = Error(ErrorCode::kInternal, "not renewed");
      if (!latest.ok()) {
        renewed = latest.error();
      } else if (!stale(*latest)) {
        renewed = latest->value();
      } else if (!client_credentials && latest->has_value() &&
                 latest->value().tokens.refresh_token.empty() && usable(*latest)) {
        renewed = latest->value();  // about to expire, cannot be renewed: good until it does
      } else {
        renewed = renewal(*latest);
        if (fall_back_to_usable && !renewed.ok() &&
            renewed.error().code != ErrorCode::kAuthorizationRequired && usable(*latest)) {
          renewed = latest->value();  // the authorization server failed; the token still works
        }
      }
      (void)m.tokens->unlock_refresh(connection.id, principal, m.holder);
      if (!renewed.ok()) return renewed.error();
      return Secret(renewed->tokens.access_token, source);
    }
    // Another agent refreshes: wait for its token (the loop re-reads), or for its lock to lapse.
    if (steady_ms() + kRefreshPollMs > deadline_ms) {
      if (usable(*now)) return Secret(now->value().tokens.access_token, source);
      return Error(ErrorCode::kTimeout, "connection `" + connection.id + "` (" + principal.str() +
                                            "): another agent's token refresh did not finish");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kRefreshPollMs));
  }
}

Result<AuthorizationStart> OAuthManager::begin(const ConnectionConfig& connection,
                                               const Principal& principal, int64_t deadline_ms,
                                               const std::optional<std::string>& redirect_uri) {
  Impl& m = *impl_;
  if (connection.auth != AuthType::kOAuth || !connection.oauth.has_value()) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + connection.id + "` does not use auth oauth");
  }
  if (connection.oauth->grant == oauth::GrantType::kClientCredentials) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + connection.id +
                     "` uses the client_credentials grant: the agent obtains its token itself");
  }
  if (Status st = check_principal(connection, principal); !st.ok()) return st.error();
  const OAuthHttpOptions http = m.http_options(connection, deadline_ms);
  // A dynamic registration is bound to its redirect URI: only the configured one's are kept and
  // reused (a `login` on a loopback port registers anew).
  const bool default_redirect = !redirect_uri.has_value() || *redirect_uri == m.redirect_uri();
  const std::string redirect = redirect_uri.value_or(m.redirect_uri());
  std::optional<oauth::RegisteredClient> known;
  if (default_redirect) {
    Result<std::optional<oauth::RegisteredClient>> c = m.tokens->latest_client(connection.id);
    if (!c.ok()) return c.error();
    known = *c;
  }
  Result<std::optional<oauth::BearerChallenge>> challenge =
      fetch_bearer_challenge(connection.endpoint.url, http);
  if (!challenge.ok()) return challenge.error();
  Result<oauth::OAuthHost> host = m.host_for(connection);
  if (!host.ok()) return host.error();
  oauth::OAuthClientSettings settings = connection.oauth->client_settings(redirect);
  // After a 403 insufficient_scope the new authorization asks for the step-up's union of scopes.
  Result<std::optional<StepUpRecord>> step_up = m.tokens->step_up(connection.id, principal);
  if (!step_up.ok()) return step_up.error();
  if (step_up->has_value()) {
    settings.scopes = oauth::internal::scope_union(
        settings.scopes, oauth::internal::split_scopes((*step_up)->scope));
  }
  oauth::OAuthFlow flow =
      oauth::OAuthFlow::authorize(connection.endpoint.url, settings, *host, *challenge, known);
  drive_oauth_flow(flow, http);
  if (flow.step() == oauth::FlowStep::kFailed) return flow.error();
  if (flow.step() != oauth::FlowStep::kNeedsUser) {
    return Error(ErrorCode::kInvalidReply, "connection `" + connection.id +
                                               "`: the authorization flow did not ask for a user");
  }
  const oauth::PendingAuthorization& pending = flow.pending();
  if (pending.client.dynamic && default_redirect) {
    if (Status st = m.tokens->put_client(connection.id, pending.client); !st.ok()) {
      return st.error();
    }
  }
  if (Status st = m.tokens->put_pending(connection.id, principal, pending); !st.ok()) {
    return st.error();
  }
  return AuthorizationStart{flow.authorization_url(), pending.expires_at_ms};
}

Result<AuthorizationDone> OAuthManager::complete(const oauth::CallbackParams& callback,
                                                 int64_t deadline_ms) {
  Impl& m = *impl_;
  Result<std::optional<PendingRecord>> taken =
      m.tokens->take_pending(callback.state, wall_now_ms());
  if (!taken.ok()) return taken.error();
  if (!taken->has_value()) {
    return Error(ErrorCode::kNotFound,
                 "unknown, already used or expired OAuth state: start the authorization again");
  }
  PendingRecord& rec = **taken;
  std::shared_ptr<const AgentConfig> cfg = m.current();
  const ConnectionConfig* connection = cfg ? cfg->find_connection(rec.connection_id) : nullptr;
  if (connection == nullptr || connection->auth != AuthType::kOAuth || !connection->oauth) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + rec.connection_id + "` is no longer configured with auth oauth");
  }
  Result<oauth::OAuthHost> host = m.host_for(*connection);
  if (!host.ok()) return host.error();
  const std::string redirect = rec.pending.redirect_uri;
  oauth::OAuthFlow flow = oauth::OAuthFlow::resume(
      std::move(rec.pending), callback, connection->oauth->client_settings(redirect), *host);
  Result<oauth::Authorization> done = m.finish(flow, m.http_options(*connection, deadline_ms));
  if (!done.ok()) return done.error();
  if (Status st =
          m.tokens->put_authorization(rec.connection_id, rec.principal, *done, wall_now_ms());
      !st.ok()) {
    return st.error();
  }
  PrincipalHook hook;
  {
    std::lock_guard<std::mutex> lock(m.config_mu);
    hook = m.hooks.connected;
  }
  if (hook) hook(rec.connection_id, rec.principal);
  return AuthorizationDone{rec.connection_id, rec.principal};
}

Result<bool> OAuthManager::disconnect(const std::string& connection_id,
                                      const Principal& principal) {
  Impl& m = *impl_;
  Result<bool> deleted = m.tokens->delete_authorization(connection_id, principal);
  if (!deleted.ok()) return deleted;
  if (Result<bool> step_up = m.tokens->delete_step_up(connection_id, principal); !step_up.ok()) {
    return step_up.error();
  }
  PrincipalHook hook;
  {
    std::lock_guard<std::mutex> lock(m.config_mu);
    hook = m.hooks.disconnected;
  }
  if (hook) hook(connection_id, principal);
  return deleted;
}

Result<bool> OAuthManager::connected(const std::string& connection_id, const Principal& principal) {
  Result<std::vector<std::pair<std::string, Principal>>> all = impl_->tokens->authorized();
  if (!all.ok()) return all.error();
  return std::any_of(all->begin(), all->end(), [&](const auto& p) {
    return p.first == connection_id && p.second == principal;
  });
}

Result<Secret> OAuthManager::step_up(const ConnectionConfig& connection, const Principal& principal,
                                     int64_t deadline_ms, const Secret& refused,
                                     const oauth::BearerChallenge& challenge) {
  using oauth::internal::join_scopes;
  using oauth::internal::scope_union;
  using oauth::internal::split_scopes;
  if (connection.auth != AuthType::kOAuth || !connection.oauth.has_value()) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + connection.id + "` does not use auth oauth");
  }
  if (Status st = check_principal(connection, principal); !st.ok()) return st.error();
  Impl& m = *impl_;
  const std::string who = "connection `" + connection.id + "` (" + principal.str() + ")";
  const std::string asked = challenge.scope.value_or("");
  // The scopes to ask for: configured, granted, asked by earlier step-ups, and now.
  auto wanted_scopes = [&](const std::optional<oauth::Authorization>& current,
                           const std::optional<StepUpRecord>& earlier) {
    std::vector<std::string> s = connection.oauth->scopes;
    if (current.has_value()) s = scope_union(std::move(s), split_scopes(current->tokens.scope));
    if (earlier.has_value()) s = scope_union(std::move(s), split_scopes(earlier->scope));
    return scope_union(std::move(s), split_scopes(asked));
  };
  auto too_many = [&](int attempts) {
    return Error(ErrorCode::kUnauthenticated,
                 who + ": the upstream still answers 403 insufficient_scope (asking for '" +
                     oauth::internal::clip_text(asked) + "') after " +
                     std::to_string(attempts - 1) +
                     " step-ups; it stays refused until a listing succeeds (check the "
                     "authorization server's scopes, or disconnect and authorize again)");
  };

  if (connection.oauth->grant == oauth::GrantType::kClientCredentials) {
    // The agent can ask for the scopes itself, once across every agent sharing the token store
    // (an agent that finds a token newer than the refused one uses it).
    return m.obtain(
        connection, principal, deadline_ms, refused,
        [&](const std::optional<oauth::Authorization>& latest) -> Result<oauth::Authorization> {
          Result<std::optional<StepUpRecord>> earlier = m.tokens->step_up(connection.id, principal);
          if (!earlier.ok()) return earlier.error();
          const int attempts = earlier->has_value() ? (*earlier)->attempts + 1 : 1;
          if (attempts > oauth::kMaxStepUps) return too_many(attempts);
          const std::vector<std::string> wanted = wanted_scopes(latest, *earlier);
          if (Status st =
                  m.tokens->put_step_up(connection.id, principal,
                                        StepUpRecord{join_scopes(wanted), attempts, wall_now_ms()});
              !st.ok()) {
            return st.error();
          }
          return m.client_credentials_step_up(connection, principal, latest, challenge, wanted,
                                              attempts, deadline_ms);
        },
        /*fall_back_to_usable=*/false);
  }

  // Authorization code: a person must consent to the wider scopes. The refused tokens go (nobody
  // lists with them again), the union waits for the next begin(), and until then the principal is
  // authorization_required (its last good manifest stays, stale).
  std::shared_ptr<std::timed_mutex> key = m.key_lock(connection.id, principal);
  std::unique_lock<std::timed_mutex> in_process(*key, std::defer_lock);
  if (!in_process.try_lock_for(
          std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms - steady_ms())))) {
    return Error(ErrorCode::kTimeout, who + ": waiting for another token refresh");
  }
  Result<std::optional<AuthorizationRecord>> current =
      m.tokens->authorization(connection.id, principal);
  if (!current.ok()) return current.error();
  if (!current->has_value()) {
    return authorization_required(
        connection.id, principal,
        "the upstream asks for more scope ('" + oauth::internal::clip_text(asked) + "')");
  }
  if ((*current)->authorization.tokens.access_token != refused.reveal()) {
    // Another thread or agent already has a newer token: try that one.
    return Secret((*current)->authorization.tokens.access_token, "oauth:" + connection.id);
  }
  Result<std::optional<StepUpRecord>> earlier = m.tokens->step_up(connection.id, principal);
  if (!earlier.ok()) return earlier.error();
  const int attempts = earlier->has_value() ? (*earlier)->attempts + 1 : 1;
  if (attempts > oauth::kMaxStepUps) return too_many(attempts);
  const std::vector<std::string> wanted = wanted_scopes((*current)->authorization, *earlier);
  if (Status st = m.tokens->put_step_up(connection.id, principal,
                                        StepUpRecord{join_scopes(wanted), attempts, wall_now_ms()});
      !st.ok()) {
    return st.error();
  }
  if (Result<bool> gone = m.tokens->delete_authorization(connection.id, principal); !gone.ok()) {
    return gone.error();
  }
  return authorization_required(connection.id, principal,
                                "the upstream needs more scope (403 insufficient_scope; the next "
                                "authorization asks for '" +
                                    oauth::internal::clip_text(join_scopes(wanted)) + "')");
}

void OAuthManager::listed(const std::string& connection_id, const Principal& principal) {
  // A failure here only means the count goes on from where it was; never the listing's concern.
  (void)impl_->tokens->delete_step_up(connection_id, principal);
}

}  // namespace quiver
