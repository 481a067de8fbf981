-- Migration of the agent's SQLite file from schema version 4 to 5 (PRAGMA user_version). Run by
-- the agent in the transaction that then applies sqlite.sql, only when user_version is 4.
--
-- Version 5 only adds the table `connection_marks` (a refresh webhook for a per_member connection
-- as a whole marks it once, schema/redis-keys.md `marked:<cid>`). sqlite.sql creates it (CREATE
-- TABLE IF NOT EXISTS) right after this file in the same transaction, so nothing existing changes
-- shape and no row moves; an agent of version 4 refuses the file from then on.
SELECT 1;
