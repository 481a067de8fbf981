-- Migration of the agent's SQLite file from schema version 5 to 6 (PRAGMA user_version). Run by
-- the agent in the transaction that then applies sqlite.sql, only when user_version is 5.
--
-- Version 6 adds the refresh-due index of the embedded store: manifests.due_at (when maintenance
-- next has work on the row, epoch ms; the Redis store's ZSET quiver:{ns}:due) and its index
-- `manifests_by_due` (created by sqlite.sql right after this file). Every existing row gets 0:
-- due at once, so the next maintenance pass looks at each row once and scores it with when
-- decide_refresh next has work on it. That is the backfill: nothing else changes.
ALTER TABLE manifests ADD COLUMN due_at INTEGER NOT NULL DEFAULT 0 CHECK (due_at >= 0);
