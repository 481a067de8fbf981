-- The SQL statements Quiver runs against schema/sqlite.sql, one place for all of them.
--
-- Each statement follows a line `-- name: <name>` and runs up to the next such line; code looks it
-- up by name (shared/sql_queries.h: sql_query("preferences_touch")). Parameters are named
-- (:resource_id); bind them with sqlite3_bind_parameter_index. Types: capability_type is
-- capability_type_name() ('tool', 'resource', 'resource_template', 'prompt'), booleans 0/1, times
-- milliseconds since the epoch. A test prepares every statement against the schema.

-- name: preferences_select
-- Every preference row of one connection, in the order reconcile() emits.
SELECT resource_id, capability_type, capability_key, enabled, first_seen_at, last_seen_at
FROM mcp_capability_preferences
WHERE resource_id = :resource_id
ORDER BY CASE capability_type
           WHEN 'tool' THEN 0 WHEN 'resource' THEN 1 WHEN 'resource_template' THEN 2 ELSE 3
         END,
         capability_key;

-- name: preferences_insert_seen
-- One row of Reconciliation::rows_to_insert (first_seen_at = last_seen_at = :seen_at). Should a
-- concurrent writer have inserted the row first, only last_seen_at moves: an existing `enabled`
-- is never overwritten by reconciliation.
INSERT INTO mcp_capability_preferences
  (resource_id, capability_type, capability_key, enabled, first_seen_at, last_seen_at)
VALUES (:resource_id, :capability_type, :capability_key, :enabled, :seen_at, :seen_at)
ON CONFLICT (resource_id, capability_type, capability_key)
DO UPDATE SET last_seen_at = max(last_seen_at, excluded.last_seen_at);

-- name: preferences_touch
-- One row of Reconciliation::rows_to_update: last_seen_at moves forward, nothing else changes.
UPDATE mcp_capability_preferences
SET last_seen_at = max(last_seen_at, :seen_at)
WHERE resource_id = :resource_id
  AND capability_type = :capability_type
  AND capability_key = :capability_key;

-- name: preferences_set_enabled
-- The user's toggle, the only statement that changes `enabled`. sqlite3_changes() == 0 means no
-- such capability was ever seen.
UPDATE mcp_capability_preferences
SET enabled = :enabled
WHERE resource_id = :resource_id
  AND capability_type = :capability_type
  AND capability_key = :capability_key;

-- name: preferences_select_disabled
-- The members of the connection's disabled overlay (`<type>:<key>`), as disabled_overlay() gives.
SELECT member
FROM disabled_capabilities
WHERE connection_id = :resource_id
ORDER BY member;
