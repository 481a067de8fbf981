// TokenStore: the OAuth tokens, client registrations and pending authorizations of the agent, the
// most sensitive data Quiver holds, encrypted at rest.
//
// Where. A SQLite file of its own (`quiver.oauth.token_store`, default
// `<data_dir>/oauth-tokens.db`, created mode 0600), tables in schema/oauth-tokens.sql. Never the
// namespace's store: no token, code verifier or client secret is ever written to Redis (the edge's
// callback queue carries only the short-lived authorization code, which is useless without the
// verifier kept here). Agents of one namespace that should share members' authorizations share
// this file (one host, or a shared volume); an agent without the file sees no authorization and
// reports `authorization_required`.
//
// How. Every value row is the JSON of an oauth::Authorization / PendingAuthorization /
// RegisteredClient sealed with AES-256-GCM (OpenSSL EVP): a fresh 96-bit nonce per write, the
// row's key columns as additional authenticated data (a blob moved to another row does not
// open), stored as `v1:` + base64(nonce || ciphertext || tag). The key is `quiver.oauth.key`, a
// secret reference holding 32 bytes as 64 hex digits or base64; without it no OAuth connection
// is accepted (config error). A row that does not open (wrong key, tampered) is kInvalidArgument
// naming the row, never its content; it is not deleted (a key mistake must not lose the data).
//
// Rows:
//   authorizations (connection_id, principal, issuer) → sealed Authorization, updated_at
//   clients (connection_id, issuer) → sealed RegisteredClient (dynamic registrations are reused)
//   pending (state_hash) → sealed PendingAuthorization + connection_id, principal, expires_at;
//     the state itself is stored only as its SHA-256, and `take_pending` deletes the row in the
//     same transaction that reads it (single use, across agents sharing the file)
//   refresh_locks (connection_id, principal) → holder, until_ms: one refresh in flight per
//     (connection, principal) across every process sharing the file
//   step_ups (connection_id, principal) → scope, attempts: a step-up after a 403
//     `insufficient_scope` (OAuthManager::step_up), until a listing succeeds
//
// Thread-safe: one connection behind a mutex; every write one short BEGIN IMMEDIATE transaction
// (WAL, busy timeout), so agents sharing the file take turns.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/base/config.h"
#include "shared/identity.h"
#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

class SqliteDb;

struct TokenStoreOptions {
  std::string path;  // the SQLite file
  Secret key;        // 32 bytes, hex or base64 (parse_token_key)
  int64_t busy_timeout_ms = 5000;
};

// 32 key bytes from 64 hex digits or base64 (standard or URL alphabet); kInvalidArgument otherwise
// (the message never holds the value).
Result<std::string> parse_token_key(const Secret& key);

// What `pending` rows say besides the sealed PendingAuthorization.
struct PendingRecord {
  std::string connection_id;
  Principal principal;
  oauth::PendingAuthorization pending;
};

// A step-up in progress (not secret): the scopes the next authorization asks for and how many
// step-ups there were since the last listing that succeeded.
struct StepUpRecord {
  std::string scope;  // space-separated
  int attempts = 0;
  int64_t updated_at_ms = 0;
};

struct AuthorizationRecord {
  std::string connection_id;
  Principal principal;
  oauth::Authorization authorization;
  int64_t updated_at_ms = 0;
};

class TokenStore {
 public:
  static Result<std::unique_ptr<TokenStore>> open(const TokenStoreOptions& options);
  ~TokenStore();

  // The authorization of (connection, principal), whichever issuer; nullopt when none.
  Result<std::optional<AuthorizationRecord>> authorization(const std::string& connection_id,
                                                           const Principal& principal);
  Status put_authorization(const std::string& connection_id, const Principal& principal,
                           const oauth::Authorization& authorization, int64_t now_ms);
  // Every row of (connection, principal) goes; true when there was one.
  Result<bool> delete_authorization(const std::string& connection_id, const Principal& principal);
  // Rows of connections no longer configured, or principals no longer granted, go (maintenance).
  Result<int> delete_authorizations_except(
      const std::vector<std::pair<std::string, Principal>>& keep);
  // (connection, principal) pairs with an authorization (status, metrics): no secrets.
  Result<std::vector<std::pair<std::string, Principal>>> authorized();

  Result<std::optional<oauth::RegisteredClient>> client(const std::string& connection_id,
                                                        const std::string& issuer);
  Status put_client(const std::string& connection_id, const oauth::RegisteredClient& client);
  // The connection's most recently stored client registration, whichever issuer (begin() offers
  // it to OAuthFlow::authorize, which reuses it only for the same issuer); nullopt when none.
  Result<std::optional<oauth::RegisteredClient>> latest_client(const std::string& connection_id);

  Status put_pending(const std::string& connection_id, const Principal& principal,
                     const oauth::PendingAuthorization& pending);
  // Reads and deletes the pending authorization of `state` in one transaction. nullopt when none
  // (unknown, already used, expired: expired rows are deleted too).
  Result<std::optional<PendingRecord>> take_pending(const std::string& state, int64_t now_ms);

  // One refresh at a time per (connection, principal) among every process sharing the file:
  // true when `holder` now holds the lock until now + ttl (it was free, expired, or its own).
  Result<bool> try_lock_refresh(const std::string& connection_id, const Principal& principal,
                                const std::string& holder, int64_t now_ms, int64_t ttl_ms);
  Status unlock_refresh(const std::string& connection_id, const Principal& principal,
                        const std::string& holder);

  Result<std::optional<StepUpRecord>> step_up(const std::string& connection_id,
                                              const Principal& principal);
  Status put_step_up(const std::string& connection_id, const Principal& principal,
                     const StepUpRecord& record);
  // True when there was one.
  Result<bool> delete_step_up(const std::string& connection_id, const Principal& principal);

 private:
  TokenStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
