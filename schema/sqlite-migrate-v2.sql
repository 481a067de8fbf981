-- Migration of the agent's SQLite file from schema version 1 to 2 (PRAGMA user_version). Run by
-- the agent in the transaction that then applies sqlite.sql, only when user_version is 1.
--   manifests.invalidated_at: a refresh webhook marks cached data stale (redis-keys.md, the
--     manifest hash's `invalidated_at`).
--   revalidation_gates.taken_at: when the gate was taken (the Redis gate's value), so that a
--     manual refresh is queued again once the gate is a second old, as on Redis.
ALTER TABLE manifests ADD COLUMN invalidated_at INTEGER;
ALTER TABLE revalidation_gates ADD COLUMN taken_at INTEGER NOT NULL DEFAULT 0 CHECK (taken_at >= 0);
