-- Migration of the agent's SQLite file from schema version 2 to 3 (PRAGMA user_version). Run by
-- the agent in the transaction that then applies sqlite.sql, only when user_version is 2.
--   mcp_capability_preferences gains `principal` (in its primary key) and `toggled_at`: rows are
--     kept per (connection, principal), so a per-member connection's rows and overlay are each
--     member's own, and agents merge their copies by toggle time (shared/preferences.h).
--   published_disabled gains `principal`; it is a copy, rebuilt by the next merge.
--
-- Existing rows: version 2 kept one set of rows per connection, fed by every member's listing.
-- They all move to principal `shared` with toggled_at 0 (never toggled: on a tie with another
-- agent's copy, disabled wins). On a shared connection that is exactly what they were. On a
-- per-member connection they cannot be attributed to a member: discovery, the API and the store
-- never read a per-member connection's `shared` rows, and the agent deletes them when it starts
-- (PreferencesDb::forget, for every connection configured per_member), so no member's names or
-- choices reach another. Each member's rows are built again from their own next listing, with the
-- connection's auto_enable policy; choices made there before version 3 are not carried over.
-- The old published sets (one per connection) are dropped with the table.
CREATE TABLE mcp_capability_preferences_v3 (
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
  toggled_at      INTEGER NOT NULL DEFAULT 0 CHECK (toggled_at >= 0),
  first_seen_at   INTEGER NOT NULL CHECK (first_seen_at >= 0),
  last_seen_at    INTEGER NOT NULL CHECK (last_seen_at >= first_seen_at),
  PRIMARY KEY (resource_id, principal, capability_type, capability_key)
) STRICT, WITHOUT ROWID;
INSERT INTO mcp_capability_preferences_v3
  (resource_id, principal, capability_type, capability_key, enabled, toggled_at, first_seen_at,
   last_seen_at)
SELECT resource_id, 'shared', capability_type, capability_key, enabled, 0, first_seen_at,
       last_seen_at
FROM mcp_capability_preferences;
DROP VIEW IF EXISTS disabled_capabilities;
DROP TABLE mcp_capability_preferences;
ALTER TABLE mcp_capability_preferences_v3 RENAME TO mcp_capability_preferences;
DROP TABLE IF EXISTS published_disabled;
