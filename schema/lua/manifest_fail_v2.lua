-- Record a failed refresh, fenced, in key layout v2: the one-slot half of manifest_fail.lua, as
-- manifest_commit_v2.lua is of manifest_commit.lua (the same keys, the same refusals; the caller
-- scores the refresh-due entry afterwards, on the connection's shard, only when it recorded). The
-- last good manifest stays; only the error fields and attempt_at change, and config_hash is never
-- written (a failure must not make data listed under an older config look current).
--
-- KEYS[1] manifest  KEYS[2] lease  KEYS[3] fence  KEYS[4] version (INCR where it exists: readers render the error)
-- KEYS[5] connection  quiver:{ns:c:<cid>}:conn, `shared` only (a member's slot cannot see it)
-- ARGV[1] fence  ARGV[2] token  ARGV[3] config_hash the listing started under (compared only)
-- ARGV[4] error_code  ARGV[5] error_message  ARGV[6] error_at  ARGV[7] attempt_at
-- ARGV[8] release the lease afterwards ('0'/'1')
--
-- A member's failure under a config changed since lands on a record whose data predates the change
-- (a newer listing would have taken a newer fence), which readers treat as a miss anyway.
--
-- Replies {"recorded"}, or the refusals of manifest_commit_v2.lua.
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
  'error_code', ARGV[4], 'error_message', ARGV[5], 'error_at', ARGV[6], 'attempt_at', ARGV[7])
redis.call('PERSIST', KEYS[1])
if redis.call('EXISTS', KEYS[4]) == 1 then  -- missing: the slot lost its data; not hidden
  redis.call('INCR', KEYS[4])
end
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[2])
end
return {'recorded'}
