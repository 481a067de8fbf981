-- The agent's OAuth token store (native-agent/store/token_store.h): a SQLite file of its own
-- (`quiver.oauth.token_store`, default <data_dir>/oauth-tokens.db, mode 0600), never the
-- namespace's store. Its statements are in schema/oauth-tokens-queries.sql.
--
-- Every `sealed` column is `v1:` + base64url(nonce || ciphertext || tag): the JSON of an
-- oauth::Authorization / RegisteredClient / PendingAuthorization sealed with AES-256-GCM under
-- `quiver.oauth.key`, a fresh 96-bit nonce per write, the row's key columns as additional
-- authenticated data (so a blob copied to another row does not open). Nothing else in a row is
-- secret: a pending authorization's `state` is stored only as its SHA-256 (hex).
--
-- Applying this file is idempotent (CREATE ... IF NOT EXISTS), in one transaction
-- (BEGIN IMMEDIATE ... COMMIT); journal_mode=WAL and busy_timeout are set when the file is opened.
-- Version: PRAGMA user_version (last statement), now 2 (1 + step_ups; applying this file to a
-- version 1 file adds the table); an agent refuses a newer file.
-- Conventions as schema/sqlite.sql: times INTEGER ms since the Unix epoch, STRICT tables.

-- (connection, principal, issuer) -> the sealed oauth::Authorization (tokens, client, metadata).
CREATE TABLE IF NOT EXISTS authorizations (
  connection_id TEXT NOT NULL,
  principal TEXT NOT NULL,
  issuer TEXT NOT NULL,
  sealed TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (connection_id, principal, issuer)
) STRICT, WITHOUT ROWID;

-- (connection, issuer) -> the sealed oauth::RegisteredClient of a dynamic registration (reused).
CREATE TABLE IF NOT EXISTS clients (
  connection_id TEXT NOT NULL,
  issuer TEXT NOT NULL,
  sealed TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (connection_id, issuer)
) STRICT, WITHOUT ROWID;

-- SHA-256(state) -> the sealed oauth::PendingAuthorization (PKCE verifier, client) until the
-- callback takes it (single use) or it expires.
CREATE TABLE IF NOT EXISTS pending (
  state_hash TEXT NOT NULL PRIMARY KEY,
  connection_id TEXT NOT NULL,
  principal TEXT NOT NULL,
  sealed TEXT NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pending_by_expiry ON pending (expires_at);

-- One refresh in flight per (connection, principal) among every process sharing the file.
CREATE TABLE IF NOT EXISTS refresh_locks (
  connection_id TEXT NOT NULL,
  principal TEXT NOT NULL,
  holder TEXT NOT NULL,
  until_ms INTEGER NOT NULL,
  PRIMARY KEY (connection_id, principal)
) STRICT, WITHOUT ROWID;

-- (connection, principal) -> a step-up in progress (MCP authorization, "Scope Challenge
-- Handling"): the upstream answered 403 `insufficient_scope`, `scope` is the union of what was
-- granted, configured and challenged (what the next authorization asks for), `attempts` counts the
-- step-ups since the last listing that succeeded (at most oauth::kMaxStepUps). Not secret.
-- Added in version 2.
CREATE TABLE IF NOT EXISTS step_ups (
  connection_id TEXT NOT NULL,
  principal TEXT NOT NULL,
  scope TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (connection_id, principal)
) STRICT, WITHOUT ROWID;

PRAGMA user_version = 2;
