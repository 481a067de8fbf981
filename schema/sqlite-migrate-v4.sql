-- Migration of the agent's SQLite file from schema version 3 to 4 (PRAGMA user_version). Run by
-- the agent in the transaction that then applies sqlite.sql, only when user_version is 3.
--
-- Version 4 only adds: the runtime catalog (`catalog`, `catalog_versions`), the audit log
-- (`audit_log`) and the index `grants_by_connection` (a connection's grantees without a scan of
-- every grant). sqlite.sql creates each of them (CREATE ... IF NOT EXISTS) right after this file
-- in the same transaction, so nothing existing changes shape and no row moves. The catalog starts
-- empty: the agent seeds it from its config file by the file rule on its next start.
SELECT 1;
