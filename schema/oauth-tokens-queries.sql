-- The statements the token store (native-agent/store/token_store.cpp) runs against
-- schema/oauth-tokens.sql; named blocks as in schema/sqlite-queries.sql (shared/sql_queries.h:
-- sql_query_in("oauth-tokens-queries.sql", name)). Times are ms since the epoch.

-- name: token_authorization_select
-- The newest authorization of (connection, principal), whichever issuer.
SELECT issuer, sealed, updated_at FROM authorizations
WHERE connection_id = :connection_id AND principal = :principal
ORDER BY updated_at DESC LIMIT 1;

-- name: token_authorization_upsert
INSERT INTO authorizations (connection_id, principal, issuer, sealed, updated_at)
VALUES (:connection_id, :principal, :issuer, :sealed, :updated_at)
ON CONFLICT (connection_id, principal, issuer)
DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at;

-- name: token_authorization_delete_other_issuers
-- A new authorization replaces those of another issuer (the server moved).
DELETE FROM authorizations
WHERE connection_id = :connection_id AND principal = :principal AND issuer <> :issuer;

-- name: token_authorization_delete
DELETE FROM authorizations WHERE connection_id = :connection_id AND principal = :principal;

-- name: token_authorization_pairs
-- Every (connection, principal) with an authorization.
SELECT DISTINCT connection_id, principal FROM authorizations ORDER BY connection_id, principal;

-- name: token_client_select
SELECT issuer, sealed FROM clients WHERE connection_id = :connection_id AND issuer = :issuer;

-- name: token_client_upsert
INSERT INTO clients (connection_id, issuer, sealed, updated_at)
VALUES (:connection_id, :issuer, :sealed, :updated_at)
ON CONFLICT (connection_id, issuer)
DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at;

-- name: token_pending_insert
INSERT INTO pending (state_hash, connection_id, principal, sealed, expires_at)
VALUES (:state_hash, :connection_id, :principal, :sealed, :expires_at);

-- name: token_pending_select
SELECT connection_id, principal, sealed, expires_at FROM pending WHERE state_hash = :state_hash;

-- name: token_pending_delete
DELETE FROM pending WHERE state_hash = :state_hash;

-- name: token_pending_delete_expired
DELETE FROM pending WHERE expires_at <= :now_ms;

-- name: token_lock_acquire
-- Taken when free, expired, or already this holder's; changes() = 1 when taken.
INSERT INTO refresh_locks (connection_id, principal, holder, until_ms)
VALUES (:connection_id, :principal, :holder, :until_ms)
ON CONFLICT (connection_id, principal) DO UPDATE SET holder = excluded.holder,
  until_ms = excluded.until_ms
WHERE refresh_locks.until_ms <= :now_ms OR refresh_locks.holder = excluded.holder;

-- name: token_lock_release
DELETE FROM refresh_locks
WHERE connection_id = :connection_id AND principal = :principal AND holder = :holder;

-- name: token_client_latest
SELECT issuer, sealed FROM clients WHERE connection_id = :connection_id
ORDER BY updated_at DESC LIMIT 1;

-- name: token_step_up_select
SELECT scope, attempts, updated_at FROM step_ups
WHERE connection_id = :connection_id AND principal = :principal;

-- name: token_step_up_upsert
INSERT INTO step_ups (connection_id, principal, scope, attempts, updated_at)
VALUES (:connection_id, :principal, :scope, :attempts, :updated_at)
ON CONFLICT (connection_id, principal)
DO UPDATE SET scope = excluded.scope, attempts = excluded.attempts,
  updated_at = excluded.updated_at;

-- name: token_step_up_delete
DELETE FROM step_ups WHERE connection_id = :connection_id AND principal = :principal;
