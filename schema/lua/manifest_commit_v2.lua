-- Commit a freshly listed manifest, fenced, in key layout v2: the one-slot half of
-- manifest_commit.lua (docs/design.md "What crosses slots, and what it changes"). Every key is in
-- the slot of the record: the connection's `{ns:c:<cid>}` for `shared`, the member's `{ns:m:<id>}`
-- for a member. What v1's script also wrote lives in other slots and is written by the caller,
-- each its own idempotent command: the body BEFORE this script (body_store.lua: a commit never
-- names a body Redis lacks on the happy path), the refresh-due entry AFTER it, only when it
-- committed (ZADD on the connection's shard `due`). There is no epoch: the version of this slot
-- moves instead.
--
-- KEYS[1] manifest    quiver:{ns:c:<cid>}:manifest, or quiver:{ns:m:<id>}:manifest:<cid>  HASH
-- KEYS[2] lease       ...:lease (:lease:<cid> for a member)
-- KEYS[3] fence       ...:fence (:fence:<cid>)
-- KEYS[4] version     quiver:{ns:c:<cid>}:version, or quiver:{ns:m:<id>}:version: INCR (only if it exists)
-- KEYS[5] connection  quiver:{ns:c:<cid>}:conn  HASH (its `config_hash` is read); `shared` only
-- ARGV[1] fence  ARGV[2] token  ARGV[3] config_hash the listing started under
-- ARGV[4] etag  ARGV[5] fetched_at  ARGV[6] fresh_until  ARGV[7] expires_at
-- ARGV[8] cache_scope ('' = none)  ARGV[9] truncated ('0'/'1')
-- ARGV[10] release the lease afterwards ('0'/'1')
-- ARGV[11] the body's SHA-256 (hex), the record's `body`
--
-- A member's record is in the member's slot and cannot read the connection's record: a member's
-- commit is given no KEYS[5] and checks neither config_hash nor the connection's existence. It
-- stores the config_hash the listing started under, as every commit does, and readers compare it
-- with the record's: a listing that lost the race with a config change is a miss, never served;
-- one committed after its connection was removed is an orphan no reader reaches (the record is
-- gone), deleted with the connection's keys.
--
-- Replies {"committed", version}, or a refusal that writes nothing:
--   {"lease_lost"}              the lease expired (or was released) and nobody newer holds it
--   {"stale_fence", fence}      a newer holder acquired the lease (its fence is given)
--   {"config_changed"}          `shared` only: the connection's config_hash is no longer ARGV[3]
--   {"connection_removed"}      `shared` only: the connection record is gone
local holder = redis.call('GET', KEYS[2])
local counter = redis.call('GET', KEYS[3])
if holder ~= ARGV[1] .. ':' .. ARGV[2] then
  if counter and tonumber(counter) > tonumber(ARGV[1]) then
    return {'stale_fence', tonumber(counter)}
  end
  return {'lease_lost'}
end
if counter ~= ARGV[1] then
  return {'stale_fence', tonumber(counter) or 0}
end
if #KEYS >= 5 then
  local current = redis.call('HGET', KEYS[5], 'config_hash')
  if not current then
    return {'connection_removed'}
  end
  if current ~= ARGV[3] then
    return {'config_changed'}
  end
end

redis.call('HSET', KEYS[1],
  'body', ARGV[11], 'etag', ARGV[4], 'config_hash', ARGV[3], 'fence', ARGV[1],
  'fetched_at', ARGV[5], 'fresh_until', ARGV[6], 'expires_at', ARGV[7],
  'truncated', ARGV[9], 'attempt_at', ARGV[5])
if ARGV[8] == '' then
  redis.call('HDEL', KEYS[1], 'cache_scope', 'error_code', 'error_message', 'error_at')
else
  redis.call('HSET', KEYS[1], 'cache_scope', ARGV[8])
  redis.call('HDEL', KEYS[1], 'error_code', 'error_message', 'error_at')
end
redis.call('HDEL', KEYS[1], 'manifest')
redis.call('PERSIST', KEYS[1])
-- Only where the version exists: a missing one tells readers the slot lost its data (docs/design.md
-- "A part of the store that lost its data"); this commit must not hide that. Then 0.
local version = 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  version = redis.call('INCR', KEYS[4])
end
if ARGV[10] == '1' then
  redis.call('DEL', KEYS[2])
end
return {'committed', version}
