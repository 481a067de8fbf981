-- The SQL statements Quiver runs against schema/sqlite.sql, one place for all of them.
--
-- Each statement follows a line `-- name: <name>` and runs up to the next such line; code looks it
-- up by name (shared/sql_queries.h: sql_query("preferences_touch")). Parameters are named
-- (:resource_id); bind them with sqlite3_bind_parameter_index. Types: capability_type is
-- capability_type_name() ('tool', 'resource', 'resource_template', 'prompt'), booleans 0/1, times
-- milliseconds since the epoch. A test prepares every statement against the schema.

-- name: preferences_select
-- Every preference row of one (connection, principal), in the order reconcile() emits.
SELECT resource_id, capability_type, capability_key, enabled, first_seen_at, last_seen_at,
       toggled_at, principal
FROM mcp_capability_preferences
WHERE resource_id = :resource_id AND principal = :principal
ORDER BY CASE capability_type
           WHEN 'tool' THEN 0 WHEN 'resource' THEN 1 WHEN 'resource_template' THEN 2 ELSE 3
         END,
         capability_key;

-- name: preferences_select_groups
-- Every (connection, principal) that has rows: what an agent merges into the store.
SELECT DISTINCT resource_id, principal FROM mcp_capability_preferences
ORDER BY resource_id, principal;

-- name: preferences_insert_seen
-- One row of Reconciliation::rows_to_insert (first_seen_at = last_seen_at = :seen_at, never
-- toggled). Should a concurrent writer have inserted the row first, only last_seen_at moves: an
-- existing `enabled` is never overwritten by reconciliation.
INSERT INTO mcp_capability_preferences
  (resource_id, principal, capability_type, capability_key, enabled, toggled_at, first_seen_at,
   last_seen_at)
VALUES (:resource_id, :principal, :capability_type, :capability_key, :enabled, 0, :seen_at,
        :seen_at)
ON CONFLICT (resource_id, principal, capability_type, capability_key)
DO UPDATE SET last_seen_at = max(last_seen_at, excluded.last_seen_at);

-- name: preferences_touch
-- One row of Reconciliation::rows_to_update: last_seen_at moves forward, nothing else changes.
UPDATE mcp_capability_preferences
SET last_seen_at = max(last_seen_at, :seen_at)
WHERE resource_id = :resource_id
  AND principal = :principal
  AND capability_type = :capability_type
  AND capability_key = :capability_key;

-- name: preferences_set_enabled
-- The user's toggle, the only statement that changes `enabled` besides the merge. toggled_at
-- never moves backwards. sqlite3_changes() == 0 means no such capability was ever seen.
UPDATE mcp_capability_preferences
SET enabled = :enabled, toggled_at = max(toggled_at, :toggled_at)
WHERE resource_id = :resource_id
  AND principal = :principal
  AND capability_type = :capability_type
  AND capability_key = :capability_key;

-- name: preferences_merge
-- One row merged in, merge_preference() of shared/preferences.h in SQL: `enabled` and toggled_at
-- of the later toggle (a tie: disabled wins), the earliest first_seen_at, the latest last_seen_at.
-- Inside DO UPDATE a bare column is the stored row, `excluded.` the incoming one.
INSERT INTO mcp_capability_preferences
  (resource_id, principal, capability_type, capability_key, enabled, toggled_at, first_seen_at,
   last_seen_at)
VALUES (:resource_id, :principal, :capability_type, :capability_key, :enabled, :toggled_at,
        :first_seen_at, :last_seen_at)
ON CONFLICT (resource_id, principal, capability_type, capability_key)
DO UPDATE SET
  enabled = CASE WHEN excluded.toggled_at > toggled_at THEN excluded.enabled
                 WHEN excluded.toggled_at < toggled_at THEN enabled
                 ELSE min(enabled, excluded.enabled) END,
  toggled_at = max(toggled_at, excluded.toggled_at),
  first_seen_at = min(first_seen_at, excluded.first_seen_at),
  last_seen_at = max(last_seen_at, excluded.last_seen_at);

-- name: preferences_delete_principal
-- Every row of one (connection, principal): the agent drops the `shared` rows of a connection
-- configured per_member (rows from before schema v3 that no member can be told apart in).
DELETE FROM mcp_capability_preferences WHERE resource_id = :resource_id AND principal = :principal;

-- name: preferences_select_disabled
-- The members of one (connection, principal)'s disabled overlay (`<type>:<key>`), as
-- disabled_overlay() gives.
SELECT member
FROM disabled_capabilities
WHERE connection_id = :resource_id AND principal = :principal
ORDER BY member;

-- name: lease_select_live
-- From here on: the embedded store (native-agent/store/sqlite_store.cpp), the Redis layout's operations.
-- Expiry runs on the time the store passes as :now (its injected clock): a lease, gate or replay
-- row whose time has passed counts as absent, like a Redis key past its PX. Multi-statement steps
-- run inside BEGIN IMMEDIATE, so they are atomic across every agent on the file, as a Lua script
-- is in Redis.
--
-- The current holder of a lease, if its time has not run out.
SELECT token, fence, expires_at
FROM leases
WHERE connection_id = :connection_id AND principal = :principal AND expires_at > :now;

-- name: lease_upsert
-- Grants the lease (the caller checked that no live holder exists).
INSERT INTO leases (connection_id, principal, token, fence, expires_at)
VALUES (:connection_id, :principal, :token, :fence, :expires_at)
ON CONFLICT (connection_id, principal)
DO UPDATE SET token = excluded.token, fence = excluded.fence, expires_at = excluded.expires_at;

-- name: lease_extend
-- Compare-and-extend (lease_renew.lua): sqlite3_changes() == 0 means the lease was lost.
UPDATE leases
SET expires_at = :expires_at
WHERE connection_id = :connection_id AND principal = :principal
  AND token = :token AND fence = :fence AND expires_at > :now;

-- name: lease_delete_held
-- Compare-and-delete (lease_release.lua): sqlite3_changes() == 0 means the lease was lost.
DELETE FROM leases
WHERE connection_id = :connection_id AND principal = :principal
  AND token = :token AND fence = :fence AND expires_at > :now;

-- name: lease_delete
-- Drops the lease after a fenced write that holds it (the script's DEL).
DELETE FROM leases WHERE connection_id = :connection_id AND principal = :principal;

-- name: fence_select
SELECT fence FROM fences WHERE connection_id = :connection_id AND principal = :principal;

-- name: fence_set
INSERT INTO fences (connection_id, principal, fence)
VALUES (:connection_id, :principal, :fence)
ON CONFLICT (connection_id, principal) DO UPDATE SET fence = excluded.fence;

-- name: manifest_purge_one
-- Drops a manifest row past its retention (the Redis key's PEXPIRE), before it is looked at.
DELETE FROM manifests
WHERE connection_id = :connection_id AND principal = :principal AND retain_until <= :now;

-- name: manifest_drop
-- A principal the connection is no longer cached under (store.h drop_manifest): the row goes,
-- whatever its retention. The fence stays, so fencing stays monotonic if it comes back.
DELETE FROM manifests WHERE connection_id = :connection_id AND principal = :principal;

-- name: revalidation_gate_drop
DELETE FROM revalidation_gates WHERE connection_id = :connection_id AND principal = :principal;

-- name: manifest_select_fence
SELECT fence FROM manifests WHERE connection_id = :connection_id AND principal = :principal;

-- name: manifest_due_now
-- A member lost its grant of the connection: its row (if any) is due now (the ZADD XX 0 of the
-- Redis store's grant writes), so maintenance drops it.
UPDATE manifests SET due_at = 0 WHERE connection_id = :connection_id AND principal = :principal;

-- name: manifests_due_now_connection
-- A connection's record changed (config_hash, credential mode, ...): every row of it is due now.
UPDATE manifests SET due_at = 0 WHERE connection_id = :connection_id;

-- name: manifest_exists
SELECT 1 FROM manifests WHERE connection_id = :connection_id AND principal = :principal;

-- name: manifest_commit
-- manifest_commit.lua's write: the data fields, the error fields cleared, attempt_at = fetched_at.
-- No retention (retain_until NULL, also clearing one an older agent set): like the Redis hash, the
-- row stays until its connection or principal goes.
-- due_at: the refresh-due index's score, in the same statement (the script's ZADD).
INSERT INTO manifests
  (connection_id, principal, manifest, etag, config_hash, fence, fetched_at, fresh_until,
   expires_at, cache_scope, truncated, error_code, error_message, error_at, attempt_at,
   retain_until, due_at)
VALUES
  (:connection_id, :principal, :manifest, :etag, :config_hash, :fence, :fetched_at, :fresh_until,
   :expires_at, :cache_scope, :truncated, NULL, NULL, NULL, :fetched_at, NULL, :due_at)
ON CONFLICT (connection_id, principal) DO UPDATE SET
  manifest = excluded.manifest, etag = excluded.etag, config_hash = excluded.config_hash,
  fence = excluded.fence, fetched_at = excluded.fetched_at, fresh_until = excluded.fresh_until,
  expires_at = excluded.expires_at, cache_scope = excluded.cache_scope,
  truncated = excluded.truncated, error_code = NULL, error_message = NULL, error_at = NULL,
  attempt_at = excluded.attempt_at, retain_until = NULL, due_at = excluded.due_at;

-- name: manifest_record_failure
-- manifest_fail.lua's write: only the error fields and attempt_at. A new row is error-only (no
-- manifest, no config_hash); an existing row keeps its data and its config_hash. No retention
-- either way (retain_until NULL): the last good manifest and its error stay.
-- due_at as in manifest_commit.
INSERT INTO manifests
  (connection_id, principal, error_code, error_message, error_at, attempt_at, retain_until,
   due_at)
VALUES (:connection_id, :principal, :error_code, :error_message, :error_at, :attempt_at, NULL,
        :due_at)
ON CONFLICT (connection_id, principal) DO UPDATE SET
  error_code = excluded.error_code, error_message = excluded.error_message,
  error_at = excluded.error_at, attempt_at = excluded.attempt_at, retain_until = NULL,
  due_at = excluded.due_at;

-- name: manifest_select
-- One manifest row unless past its retention, its body only when :with_body is 1. Has data: a
-- manifest that is not empty (the core's rule, as on Redis), compared with '', never measured:
-- length() counts the characters of the whole body on every read. invalidated_at: the later of
-- the row's own mark and its connection's (connection_marks), either absent.
SELECT m.connection_id, principal, coalesce(manifest <> '', 0), etag, config_hash, fence,
       fetched_at, fresh_until, expires_at, cache_scope, truncated, error_code, error_message,
       error_at, attempt_at,
       max(coalesce(invalidated_at, k.marked_at), coalesce(k.marked_at, invalidated_at)),
       CASE WHEN :with_body = 1 THEN manifest END
FROM manifests m LEFT JOIN connection_marks k ON k.connection_id = m.connection_id
WHERE m.connection_id = :connection_id AND principal = :principal
  AND (retain_until IS NULL OR retain_until > :now);

-- name: manifest_list_meta
-- The maintenance walk: the next :limit rows after the cursor (connection_id, principal), in key
-- order, without bodies. Columns as manifest_select.
SELECT m.connection_id, principal, coalesce(manifest <> '', 0), etag, config_hash, fence,
       fetched_at, fresh_until, expires_at, cache_scope, truncated, error_code, error_message,
       error_at, attempt_at,
       max(coalesce(invalidated_at, k.marked_at), coalesce(k.marked_at, invalidated_at)), NULL
FROM manifests m LEFT JOIN connection_marks k ON k.connection_id = m.connection_id
WHERE (m.connection_id, principal) > (:after_connection_id, :after_principal)
  AND (retain_until IS NULL OR retain_until > :now)
ORDER BY m.connection_id, principal
LIMIT :limit;

-- name: manifest_list_due
-- The refresh-due index (manifests_by_due): rows due at :now, soonest first, skipping :offset.
-- Columns as manifest_select (the later of the row's own mark and its connection's), then
-- due_at (17).
SELECT m.connection_id, principal, coalesce(manifest <> '', 0), etag, config_hash, fence,
       fetched_at, fresh_until, expires_at, cache_scope, truncated, error_code, error_message,
       error_at, attempt_at,
       max(coalesce(invalidated_at, k.marked_at), coalesce(k.marked_at, invalidated_at)), NULL,
       due_at
FROM manifests m LEFT JOIN connection_marks k ON k.connection_id = m.connection_id
WHERE due_at <= :now AND (retain_until IS NULL OR retain_until > :now)
ORDER BY due_at, m.connection_id, principal
LIMIT :limit OFFSET :offset;

-- name: manifest_settle_due
-- due_settle.lua: the row's due_at moves only while it is still the one maintenance read.
UPDATE manifests SET due_at = :due_at
WHERE connection_id = :connection_id AND principal = :principal AND due_at = :seen_due_at;

-- name: manifests_purge_retained
-- Rows past their retention (housekeeping of the maintenance walk).
DELETE FROM manifests WHERE retain_until <= :now;

-- name: connections_select
SELECT id, config_hash, credential_mode, name, transport, updated_at FROM connections ORDER BY id;

-- name: connection_select
SELECT id, config_hash, credential_mode, name, transport, updated_at FROM connections
WHERE id = :id;

-- name: connection_upsert
INSERT INTO connections (id, config_hash, credential_mode, name, transport, updated_at)
VALUES (:id, :config_hash, :credential_mode, :name, :transport, :updated_at)
ON CONFLICT (id) DO UPDATE SET
  config_hash = excluded.config_hash, credential_mode = excluded.credential_mode,
  name = excluded.name, transport = excluded.transport, updated_at = excluded.updated_at;

-- name: connection_delete
DELETE FROM connections WHERE id = :id;

-- name: manifests_delete_unconfigured
-- After a config sync: what names a connection that is no longer configured goes (the seven
-- statements below). Preferences stay: the user's choice outlives the connection.
DELETE FROM manifests WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: leases_delete_unconfigured
DELETE FROM leases WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: fences_delete_unconfigured
DELETE FROM fences WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: gates_delete_unconfigured
DELETE FROM revalidation_gates WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: connection_marks_delete_unconfigured
DELETE FROM connection_marks WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: grants_delete_unconfigured
DELETE FROM grants WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: published_disabled_delete_unconfigured
DELETE FROM published_disabled WHERE connection_id NOT IN (SELECT id FROM connections);

-- name: grants_select_all
SELECT principal, connection_id FROM grants ORDER BY principal, connection_id;

-- name: grants_select_member
SELECT connection_id FROM grants WHERE principal = :principal ORDER BY connection_id;

-- name: grants_delete_member
DELETE FROM grants WHERE principal = :principal;

-- name: grant_insert
INSERT OR IGNORE INTO grants (principal, connection_id) VALUES (:principal, :connection_id);

-- name: published_disabled_select
SELECT member FROM published_disabled
WHERE connection_id = :connection_id AND principal = :principal
ORDER BY member;

-- name: published_disabled_delete
DELETE FROM published_disabled WHERE connection_id = :connection_id AND principal = :principal;

-- name: published_disabled_insert
INSERT OR IGNORE INTO published_disabled (connection_id, principal, member)
VALUES (:connection_id, :principal, :member);

-- name: epoch_bump
UPDATE epoch SET value = value + 1 WHERE id = 1 RETURNING value;

-- name: epoch_select
SELECT value FROM epoch WHERE id = 1;

-- name: revalidation_gate_take
-- SET gate NX PX window: sqlite3_changes() == 1 when the gate was free (absent or expired) and is
-- now taken until :until; 0 when it is still held.
INSERT INTO revalidation_gates (connection_id, principal, until, taken_at)
VALUES (:connection_id, :principal, :until, :now)
ON CONFLICT (connection_id, principal) DO UPDATE SET until = excluded.until,
  taken_at = excluded.taken_at
WHERE revalidation_gates.until <= :now;

-- name: revalidation_gate_take_manual
-- As revalidation_gate_take, and also taken again (restarted) when it was taken at least
-- :requeue_after ms ago: a user's refresh is not swallowed by a reader's gate for a whole window
-- (revalidate_enqueue.lua with requeue_after_ms >= 0).
INSERT INTO revalidation_gates (connection_id, principal, until, taken_at)
VALUES (:connection_id, :principal, :until, :now)
ON CONFLICT (connection_id, principal) DO UPDATE SET until = excluded.until,
  taken_at = excluded.taken_at
WHERE revalidation_gates.until <= :now OR revalidation_gates.taken_at <= :now - :requeue_after;

-- name: revalidation_gates_purge
DELETE FROM revalidation_gates WHERE until <= :now;

-- name: revalidation_enqueue
INSERT INTO revalidation_queue (connection_id, principal, reason, at)
VALUES (:connection_id, :principal, :reason, :at);

-- name: revalidation_deliver
-- XREADGROUP ... >: the oldest :limit requests no consumer has received, now pending for
-- :consumer. RETURNING gives no order: the caller sorts by id.
UPDATE revalidation_queue
SET claimed_by = :consumer, claimed_at = :now
WHERE id IN (SELECT id FROM revalidation_queue WHERE claimed_by IS NULL ORDER BY id LIMIT :limit)
RETURNING id, connection_id, principal, reason, at;

-- name: revalidation_claim_stale
-- XAUTOCLAIM: the oldest :limit requests delivered at or before :idle_since and never
-- acknowledged, now pending for :consumer.
UPDATE revalidation_queue
SET claimed_by = :consumer, claimed_at = :now
WHERE id IN (SELECT id FROM revalidation_queue
             WHERE claimed_at <= :idle_since ORDER BY id LIMIT :limit)
RETURNING id, connection_id, principal, reason, at;

-- name: revalidation_ack
DELETE FROM revalidation_queue WHERE id = :id;

-- name: replay_remember
-- SET key NX PX ttl: sqlite3_changes() == 1 the first time :digest is seen (or once its previous
-- sighting expired), 0 for a replay.
INSERT INTO replay_guard (digest, until) VALUES (:digest, :until)
ON CONFLICT (digest) DO UPDATE SET until = excluded.until WHERE replay_guard.until <= :now;

-- name: replay_purge
DELETE FROM replay_guard WHERE until <= :now;

-- name: webhook_connection_mode
-- The refresh webhook (store.h apply_webhook: schema/lua/webhook_refresh.lua's rules in one
-- transaction, with replay_purge, replay_remember, lease_select_live, revalidation_enqueue and
-- epoch_bump). A target's connection and how it is cached; no row: unknown_connection.
SELECT credential_mode FROM connections WHERE id = :id;

-- name: webhook_grantees
-- A per_member target's principal (grantees:<cid>): the member it names when granted the
-- connection (none: unknown_principal). A target without one marks the connection instead
-- (webhook_mark_connection).
SELECT principal FROM grants
WHERE connection_id = :connection_id AND principal = :principal;

-- name: webhook_mark_stale
-- Cached data of (connection, principal) reads as stale from :at on (shared/freshness.h); a later
-- mark only moves it forward. Rows without data (or past their retention) are left alone:
-- sqlite3_changes() says whether there was data to mark.
UPDATE manifests SET invalidated_at = max(coalesce(invalidated_at, :at), :at)
WHERE connection_id = :connection_id AND principal = :principal AND manifest IS NOT NULL
  AND (retain_until IS NULL OR retain_until > :now);

-- name: webhook_mark_connection
-- A per_member connection as a whole (a target without a principal): one row, whatever its
-- number of grantees, only ever moved forward; readers apply it to every principal.
INSERT INTO connection_marks (connection_id, marked_at) VALUES (:connection_id, :at)
ON CONFLICT (connection_id) DO UPDATE SET marked_at = max(marked_at, excluded.marked_at);

-- name: webhook_has_grantees
-- Whether the connection has grantees (the `marked` result's marked_stale), through
-- grants_by_connection.
SELECT EXISTS (SELECT 1 FROM grants WHERE connection_id = :connection_id);

-- name: webhook_gate_take
-- The gate for a webhook's request: taken until :until when free (absent or expired at the store's
-- :now), or taken again when it was taken at least :requeue_after ms before :at (the webhook's
-- time, which the gate then holds). sqlite3_changes() == 0: already_queued, nothing is queued.
INSERT INTO revalidation_gates (connection_id, principal, until, taken_at)
VALUES (:connection_id, :principal, :until, :at)
ON CONFLICT (connection_id, principal) DO UPDATE SET until = excluded.until,
  taken_at = excluded.taken_at
WHERE revalidation_gates.until <= :now OR revalidation_gates.taken_at <= :at - :requeue_after;

-- name: grantees_select
-- The members granted a connection (store.h read_grantees), through grants_by_connection.
SELECT principal FROM grants WHERE connection_id = :connection_id ORDER BY principal;

-- name: catalog_select
-- One catalog entry (store.h catalog_read; catalog_write reads it in its transaction for the file
-- rule). value NULL: a tombstone.
SELECT kind, key, value, origin, rev_ms, file_hash, changed_by, updated_at
FROM catalog WHERE kind = :kind AND key = :key;

-- name: catalog_upsert
INSERT INTO catalog (kind, key, value, origin, rev_ms, file_hash, changed_by, updated_at)
VALUES (:kind, :key, :value, :origin, :rev_ms, :file_hash, :changed_by, :updated_at)
ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value, origin = excluded.origin,
  rev_ms = excluded.rev_ms, file_hash = excluded.file_hash, changed_by = excluded.changed_by,
  updated_at = excluded.updated_at;

-- name: catalog_list
-- One page of a kind in key order, after :cursor ('' from the start): a range of the primary key.
SELECT kind, key, value, origin, rev_ms, file_hash, changed_by, updated_at
FROM catalog WHERE kind = :kind AND key > :cursor ORDER BY key LIMIT :limit;

-- name: catalog_version_bump
UPDATE catalog_versions SET version = version + 1 WHERE kind = :kind;

-- name: catalog_versions_select
SELECT kind, version FROM catalog_versions;

-- name: audit_insert
INSERT INTO audit_log (at, actor, action, target, detail)
VALUES (:at, :actor, :action, :target, :detail);

-- name: audit_trim
-- Keeps the newest :max rows (ids only grow: the newest row is never deleted, so a new row's id
-- is always past every id handed out before).
DELETE FROM audit_log WHERE id <= (SELECT max(id) FROM audit_log) - :max;

-- name: audit_page
-- Newest first, from just before :before (a row id; max int64 from the newest).
SELECT id, at, actor, action, target, detail FROM audit_log
WHERE id < :before ORDER BY id DESC LIMIT :limit;
