-- Quiver's SQLite schema: the agent's preference database and, for the embedded default (no
-- Redis), the same records the Redis key layout holds (each table names its Redis key).
--
-- Applying this file is idempotent: every statement is CREATE ... IF NOT EXISTS or an INSERT that
-- ignores what is already there, so the agent runs it on every start. Apply it in one transaction
-- (BEGIN IMMEDIATE ... COMMIT). The connection is the host's business: journal_mode=WAL,
-- busy_timeout and synchronous=NORMAL are set when the file is opened, not here (journal_mode
-- cannot change inside a transaction).
--
-- Version: PRAGMA user_version (last statement), now 6. The agent reads user_version first and,
-- in the same transaction, runs each migration from it (sqlite-migrate-v2.sql: 1 -> 2,
-- sqlite-migrate-v3.sql: 2 -> 3, sqlite-migrate-v4.sql: 3 -> 4, sqlite-migrate-v5.sql: 4 -> 5,
-- sqlite-migrate-v6.sql: 5 -> 6)
-- before this file; this file alone brings a new database to the current version.
--
-- Conventions: times are INTEGER milliseconds since the Unix epoch; booleans are INTEGER 0/1;
-- tables are STRICT (a value of the wrong type is an error, not a silent conversion). Identifier
-- CHECKs repeat the contract: connection id [A-Za-z0-9._-]{1,128}; principal `shared` or
-- `member/<id>` with id [A-Za-z0-9._@+-]{1,128}. There are no foreign keys: like the Redis layout,
-- a record may name a connection that was removed (preferences deliberately outlive it).
--
-- The statements the code runs against these tables live in sqlite-queries.sql.

-- Coffer ADR-004: the user's choice per capability, the only persisted capability state. Rows are
-- inserted by reconciliation after a successful list and never deleted by it; `enabled` is
-- changed only by the user (toggled_at says when). capability_key is a tool's or prompt's name, a
-- resource's uri or a resource template's uriTemplate (at most 2048 bytes, kMaxCapabilityKeyBytes).
-- principal is whose listing fed the row and whose choice it is: `shared` on a shared connection,
-- `member/<id>` on a per-member one (v3: one member's rows never answer for another).
--
-- On Redis this table is each agent's durable copy of the namespace's preferences; the authority
-- is quiver:{ns}:prefs:<cid>:<principal>, and the two are merged row by row (merge_preference,
-- shared/preferences.h: the later toggled_at wins, a tie disables). On the embedded default this
-- table is the authority itself (query preferences_merge applies the same rule).
CREATE TABLE IF NOT EXISTS mcp_capability_preferences (
  resource_id     TEXT NOT NULL
                  CHECK (length(resource_id) BETWEEN 1 AND 128
                         AND resource_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  principal       TEXT NOT NULL DEFAULT 'shared'
                  CHECK (principal = 'shared'
                         OR (substr(principal, 1, 7) = 'member/'
                             AND length(principal) BETWEEN 8 AND 135
                             AND substr(principal, 8) NOT GLOB '*[^A-Za-z0-9._@+-]*')),
  capability_type TEXT NOT NULL
                  CHECK (capability_type IN ('tool', 'resource', 'resource_template', 'prompt')),
  capability_key  TEXT NOT NULL
                  CHECK (length(capability_key) >= 1
                         AND length(CAST(capability_key AS BLOB)) <= 2048),
  enabled         INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  toggled_at      INTEGER NOT NULL DEFAULT 0 CHECK (toggled_at >= 0),  -- 0: never toggled
  first_seen_at   INTEGER NOT NULL CHECK (first_seen_at >= 0),
  last_seen_at    INTEGER NOT NULL CHECK (last_seen_at >= first_seen_at),
  PRIMARY KEY (resource_id, principal, capability_type, capability_key)
) STRICT, WITHOUT ROWID;

-- The disabled overlay of each (connection, principal), as the Redis set
-- quiver:{ns}:disabled:<cid>:<principal> holds it (members `<type>:<key>`).
CREATE VIEW IF NOT EXISTS disabled_capabilities AS
  SELECT resource_id AS connection_id, principal, capability_type || ':' || capability_key AS member
  FROM mcp_capability_preferences
  WHERE enabled = 0;

-- quiver:{ns}:conns and quiver:{ns}:conn:<cid>: the non-secret connection record.
CREATE TABLE IF NOT EXISTS connections (
  id              TEXT PRIMARY KEY
                  CHECK (length(id) BETWEEN 1 AND 128 AND id NOT GLOB '*[^A-Za-z0-9._-]*'),
  config_hash     TEXT NOT NULL CHECK (length(config_hash) >= 1),
  credential_mode TEXT NOT NULL CHECK (credential_mode IN ('shared', 'per_member')),
  name            TEXT NOT NULL,
  transport       TEXT NOT NULL CHECK (length(transport) >= 1),
  updated_at      INTEGER NOT NULL CHECK (updated_at >= 0)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:grants:member/<id>: the connections a member may use.
CREATE TABLE IF NOT EXISTS grants (
  principal     TEXT NOT NULL
                CHECK (substr(principal, 1, 7) = 'member/'
                       AND length(principal) BETWEEN 8 AND 135
                       AND substr(principal, 8) NOT GLOB '*[^A-Za-z0-9._@+-]*'),
  connection_id TEXT NOT NULL
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  PRIMARY KEY (principal, connection_id)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:grantees:<cid>: the members granted a connection, read through this index (v4).
CREATE INDEX IF NOT EXISTS grants_by_connection ON grants (connection_id, principal);

-- quiver:{ns}:manifest:<cid>:<principal>: the cached manifest and its metadata.
-- A row is a good manifest (manifest IS NOT NULL, with everything a reader needs to classify it),
-- possibly with the error of a later failed refresh, or an error-only row (no good listing yet).
-- An error-only row never carries a config_hash: a failed refresh must not make a listing that
-- never happened look current. retain_until: set only by agents before manifests lost their
-- retention (a Redis hash has no TTL); every commit and failure record now clears it, and rows
-- that still carry one are purged past it.
CREATE TABLE IF NOT EXISTS manifests (
  connection_id TEXT NOT NULL
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  principal     TEXT NOT NULL
                CHECK (principal = 'shared'
                       OR (substr(principal, 1, 7) = 'member/'
                           AND length(principal) BETWEEN 8 AND 135
                           AND substr(principal, 8) NOT GLOB '*[^A-Za-z0-9._@+-]*')),
  manifest      TEXT,
  etag          TEXT,
  config_hash   TEXT,
  fence         INTEGER CHECK (fence > 0),
  fetched_at    INTEGER CHECK (fetched_at >= 0),
  fresh_until   INTEGER,  -- = fetched_at: never fresh, a list of it failed (schema/redis-keys.md)
  expires_at    INTEGER,
  cache_scope   TEXT CHECK (cache_scope IN ('public', 'private')),
  truncated     INTEGER NOT NULL DEFAULT 0 CHECK (truncated IN (0, 1)),
  error_code    TEXT CHECK (length(error_code) >= 1),
  error_message TEXT,
  error_at      INTEGER,
  attempt_at    INTEGER,
  invalidated_at INTEGER,  -- a refresh webhook marked the data stale then (v2)
  retain_until  INTEGER,
  -- The refresh-due index (v5; the Redis ZSET quiver:{ns}:due): when maintenance next has work on
  -- the row, set by every fenced write and by maintenance; 0: at once.
  due_at        INTEGER NOT NULL DEFAULT 0 CHECK (due_at >= 0),
  PRIMARY KEY (connection_id, principal),
  CHECK (manifest IS NULL
         OR (etag IS NOT NULL AND config_hash IS NOT NULL AND fence IS NOT NULL
             AND fetched_at IS NOT NULL AND fresh_until IS NOT NULL AND expires_at IS NOT NULL)),
  CHECK (manifest IS NOT NULL OR (config_hash IS NULL AND etag IS NULL AND error_code IS NOT NULL)),
  CHECK (fetched_at <= fresh_until AND fresh_until <= expires_at),
  CHECK ((error_code IS NULL) = (error_at IS NULL))
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS manifests_by_fresh_until ON manifests (fresh_until);

-- Maintenance reads what is due (manifest_list_due: due_at <= now) through this index, so a pass
-- costs what is due, not the table.
CREATE INDEX IF NOT EXISTS manifests_by_due ON manifests (due_at);

-- quiver:{ns}:lease:<cid>:<principal>: the current refresh holder. A row past expires_at is no
-- lease at all (Redis' PX); writers compare (token, fence) exactly as the Lua scripts do.
CREATE TABLE IF NOT EXISTS leases (
  connection_id TEXT NOT NULL
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  principal     TEXT NOT NULL CHECK (length(principal) >= 1),
  token         TEXT NOT NULL
                CHECK (length(token) BETWEEN 32 AND 128 AND token NOT GLOB '*[^0-9a-f]*'),
  fence         INTEGER NOT NULL CHECK (fence > 0),
  expires_at    INTEGER NOT NULL CHECK (expires_at >= 0),
  PRIMARY KEY (connection_id, principal)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:fence:<cid>:<principal>: the fencing counter; only ever grows.
CREATE TABLE IF NOT EXISTS fences (
  connection_id TEXT NOT NULL
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  principal     TEXT NOT NULL CHECK (length(principal) >= 1),
  fence         INTEGER NOT NULL CHECK (fence >= 0),
  PRIMARY KEY (connection_id, principal)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:revalidate (stream, consumer group quiver-agents): revalidation requests. Delivering
-- a request to a consumer sets claimed_by and claimed_at (XREADGROUP: it is pending from then on);
-- acknowledging deletes it (XACK). A request claimed at least min_idle ago and not acknowledged
-- belongs to a consumer that crashed or hangs: another consumer may take it over (XAUTOCLAIM).
CREATE TABLE IF NOT EXISTS revalidation_queue (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  connection_id TEXT NOT NULL
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  principal     TEXT NOT NULL CHECK (length(principal) >= 1),
  reason        TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 64),
  at            INTEGER NOT NULL CHECK (at >= 0),
  claimed_by    TEXT CHECK (length(claimed_by) BETWEEN 1 AND 128),
  claimed_at    INTEGER CHECK (claimed_at >= 0),
  CHECK ((claimed_by IS NULL) = (claimed_at IS NULL))
) STRICT;

CREATE INDEX IF NOT EXISTS revalidation_queue_by_claim ON revalidation_queue (claimed_at, id);

-- quiver:{ns}:revalidate-gate:<cid>:<principal>: at most one queued request per key per window.
CREATE TABLE IF NOT EXISTS revalidation_gates (
  connection_id TEXT NOT NULL,
  principal     TEXT NOT NULL,
  until         INTEGER NOT NULL CHECK (until >= 0),
  taken_at      INTEGER NOT NULL DEFAULT 0 CHECK (taken_at >= 0),  -- the Redis gate's value (v2)
  PRIMARY KEY (connection_id, principal)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:marked:<cid>: a refresh webhook marked a per_member connection as a whole (v5).
-- Readers apply it to every row of the connection: a row's effective invalidated_at is the later
-- of its own and this (manifest_select, manifest_list_meta), so marking costs one row whatever
-- the number of grantees. Goes with the connection.
CREATE TABLE IF NOT EXISTS connection_marks (
  connection_id TEXT PRIMARY KEY
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  marked_at     INTEGER NOT NULL CHECK (marked_at >= 0)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:disabled:<cid>:<principal>: the disabled overlay as last published (members
-- `<type>:<key>`). Readers use this copy, as the edge reads the Redis set; a merge rewrites it
-- whole when the preferences say otherwise (the disabled_capabilities view is what it copies).
CREATE TABLE IF NOT EXISTS published_disabled (
  connection_id TEXT NOT NULL
                CHECK (length(connection_id) BETWEEN 1 AND 128
                       AND connection_id NOT GLOB '*[^A-Za-z0-9._-]*'),
  principal     TEXT NOT NULL CHECK (length(principal) >= 1),
  member        TEXT NOT NULL CHECK (instr(member, ':') > 1),
  PRIMARY KEY (connection_id, principal, member)
) STRICT, WITHOUT ROWID;

-- Webhook replay guard: the SHA-256 hex of every key seen, until its time to live runs out (the
-- Redis store's SET NX PX). A key seen again before `until` is a replay.
CREATE TABLE IF NOT EXISTS replay_guard (
  digest TEXT PRIMARY KEY CHECK (length(digest) = 64 AND digest NOT GLOB '*[^0-9a-f]*'),
  until  INTEGER NOT NULL CHECK (until >= 0)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS replay_guard_by_until ON replay_guard (until);

-- quiver:{ns}:epoch: bumped on every commit, grant or preference change.
CREATE TABLE IF NOT EXISTS epoch (
  id    INTEGER PRIMARY KEY CHECK (id = 1),
  value INTEGER NOT NULL CHECK (value >= 0)
) STRICT;

INSERT OR IGNORE INTO epoch (id, value) VALUES (1, 0);

-- The runtime catalog (native-agent/store/catalog.h, v4): quiver:{ns}:catalog:<kind> and its
-- :keys index. One row per (kind, key): a member (key: member id), a grant (key: member id or `*`,
-- everyone) or a connection definition (key: connection id). `value` is the entry's canonical JSON,
-- NULL for a tombstone (a deleted entry keeps its revision, so an older config file cannot bring it
-- back). origin 'file' (seeded from a config file by the file rule) or 'api' (the admin API);
-- rev_ms the change's revision; file_hash the sha256 hex of the file definition last seeded ('':
-- never from a file); changed_by who ("operator:<id>", "key:<name>", "file:<path>"); updated_at
-- when the store wrote it. catalog_list pages by key within a kind (the primary key's order).
CREATE TABLE IF NOT EXISTS catalog (
  kind       TEXT NOT NULL CHECK (kind IN ('member', 'grant', 'connection')),
  key        TEXT NOT NULL
             CHECK (length(key) BETWEEN 1 AND 128
                    AND ((kind = 'member' AND key NOT GLOB '*[^A-Za-z0-9._@+-]*')
                         OR (kind = 'grant' AND (key = '*' OR key NOT GLOB '*[^A-Za-z0-9._@+-]*'))
                         OR (kind = 'connection' AND key NOT GLOB '*[^A-Za-z0-9._-]*'))),
  value      TEXT CHECK (length(CAST(value AS BLOB)) BETWEEN 1 AND 65536),
  origin     TEXT NOT NULL CHECK (origin IN ('file', 'api')),
  rev_ms     INTEGER NOT NULL CHECK (rev_ms >= 0),
  file_hash  TEXT NOT NULL DEFAULT ''
             CHECK (file_hash = '' OR (length(file_hash) = 64 AND file_hash NOT GLOB '*[^0-9a-f]*')),
  changed_by TEXT NOT NULL CHECK (length(changed_by) BETWEEN 1 AND 512),
  updated_at INTEGER NOT NULL CHECK (updated_at >= 0),
  PRIMARY KEY (kind, key)
) STRICT, WITHOUT ROWID;

-- quiver:{ns}:catalog:versions: one counter per kind, bumped by every applied catalog write.
CREATE TABLE IF NOT EXISTS catalog_versions (
  kind    TEXT PRIMARY KEY CHECK (kind IN ('member', 'grant', 'connection')),
  version INTEGER NOT NULL CHECK (version >= 0)
) STRICT, WITHOUT ROWID;

INSERT OR IGNORE INTO catalog_versions (kind, version)
VALUES ('member', 0), ('grant', 0), ('connection', 0);

-- quiver:{ns}:audit: who changed what in the catalog, newest last (the row id orders it). Bounded:
-- each append deletes the rows older than the newest kMaxAuditEntries (catalog.h). detail is a
-- JSON object, never a secret value.
CREATE TABLE IF NOT EXISTS audit_log (
  id     INTEGER PRIMARY KEY CHECK (id > 0),
  at     INTEGER NOT NULL CHECK (at >= 0),
  actor  TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 512),
  action TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 64),
  target TEXT NOT NULL CHECK (length(target) <= 256),
  detail TEXT NOT NULL DEFAULT '{}' CHECK (substr(detail, 1, 1) = '{')
) STRICT;

PRAGMA user_version = 6;
