-- Record a failed refresh, fenced like a commit. The last good manifest stays as it is (it is
-- still served while stale); only the error fields and attempt_at change. This script never
-- writes config_hash: a failure must not make rows listed under an older config look current,
-- and a row created here (no manifest yet) carries no config_hash at all.
--
-- KEYS[1] manifest    quiver:{ns}:manifest:<cid>:<principal>  HASH
-- KEYS[2] lease       quiver:{ns}:lease:<cid>:<principal>
-- KEYS[3] fence       quiver:{ns}:fence:<cid>:<principal>
-- KEYS[4] connection  quiver:{ns}:conn:<cid>                  HASH (its `config_hash` is read)
-- KEYS[5] due         quiver:{ns}:due                         ZSET, the refresh-due index
-- KEYS[6] version     quiver:{ns}:conn-version:<cid> for `shared`, member-version:<member> for a
--                     member: INCR (the error fields are read by discovery_read.lua)
-- ARGV[1] fence  ARGV[2] token  ARGV[3] config_hash the listing started under (compared only)
-- ARGV[4] error_code  ARGV[5] error_message  ARGV[6] error_at  ARGV[7] attempt_at
-- ARGV[8] release the lease afterwards ('0'/'1')
-- ARGV[9] due_at: when maintenance next has work on this key (ms; '0': at once; the retry time)
-- ARGV[10] the key's member of the due index, `<cid>:<principal>` (scored with the record)
--
-- No TTL (schema/redis-keys.md): the last good manifest and this error record stay until the
-- connection goes, so readers see `expired` with the last error, never `pending`. PERSIST drops a
-- TTL that agents before this rule set.
--
-- Replies {"recorded"}, or the refusals of manifest_commit.lua. A failure seen under a config
-- that has since changed says nothing about the current one, so it is refused too.
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
  'error_code', ARGV[4], 'error_message', ARGV[5], 'error_at', ARGV[6], 'attempt_at', ARGV[7])
redis.call('PERSIST', KEYS[1])
redis.call('ZADD', KEYS[5], ARGV[9], ARGV[10])
redis.call('INCR', KEYS[6])
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[2])
end
return {'recorded'}
