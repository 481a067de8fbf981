-- Commit a freshly listed manifest, fenced: only the current lease holder, with the newest fence,
-- listing under the connection's current config_hash, may write.
--
-- KEYS[1] manifest    quiver:{ns}:manifest:<cid>:<principal>  HASH
-- KEYS[2] lease       quiver:{ns}:lease:<cid>:<principal>
-- KEYS[3] fence       quiver:{ns}:fence:<cid>:<principal>
-- KEYS[4] connection  quiver:{ns}:conn:<cid>                  HASH (its `config_hash` is read)
-- KEYS[5] epoch       quiver:{ns}:epoch
-- ARGV[1] fence  ARGV[2] token  ARGV[3] config_hash the listing started under
-- ARGV[4] manifest  ARGV[5] etag  ARGV[6] fetched_at  ARGV[7] fresh_until  ARGV[8] expires_at
-- ARGV[9] cache_scope ('' = none)  ARGV[10] truncated ('0'/'1')
-- ARGV[11] release the lease afterwards ('0'/'1')
--
-- The hash gets no TTL (schema/redis-keys.md): an expired manifest still answers with its status
-- and its last error, however long the upstream stays down. PERSIST drops a TTL that agents
-- before this rule set.
--
-- Replies {"committed", epoch}, or a refusal that writes nothing:
--   {"lease_lost"}              the lease expired (or was released) and nobody newer holds it
--   {"stale_fence", fence}      a newer holder acquired the lease (its fence is given)
--   {"config_changed"}          the connection's config_hash is no longer ARGV[3]
--   {"connection_removed"}      the connection record is gone
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
local current = redis.call('HGET', KEYS[4], 'config_hash')
if not current then
  return {'connection_removed'}
end
if current ~= ARGV[3] then
  return {'config_changed'}
end

redis.call('HSET', KEYS[1],
  'manifest', ARGV[4], 'etag', ARGV[5], 'config_hash', ARGV[3], 'fence', ARGV[1],
  'fetched_at', ARGV[6], 'fresh_until', ARGV[7], 'expires_at', ARGV[8],
  'truncated', ARGV[10], 'attempt_at', ARGV[6])
if ARGV[9] == '' then
  redis.call('HDEL', KEYS[1], 'cache_scope', 'error_code', 'error_message', 'error_at')
else
  redis.call('HSET', KEYS[1], 'cache_scope', ARGV[9])
  redis.call('HDEL', KEYS[1], 'error_code', 'error_message', 'error_at')
end
redis.call('PERSIST', KEYS[1])
local epoch = redis.call('INCR', KEYS[5])
if ARGV[11] == '1' then
  redis.call('DEL', KEYS[2])
end
return {'committed', epoch}
