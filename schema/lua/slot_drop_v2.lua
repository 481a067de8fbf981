-- Key layout v2: keys of one slot dropped with the slot's version, as one write (shared/
-- redis_keys.h; docs/design.md "A part of the store that lost its data"). A removed connection's
-- sweep (its keys, and each grantee's grant and keys of it) and a dropped manifest
-- (native-agent/store/redis_store.cpp) run it in place of a MULTI, so that the version is INCRed
-- only where it exists: a version is created only by the writes that create what it versions (a
-- connection's record, a member's grants), so one missing tells readers and the agent's store
-- check that the slot lost its data, and a drop after that loss must not hide it.
--
-- KEYS[1]      the slot's version (quiver:{ns:c:<cid>}:version or quiver:{ns:m:<id>}:version)
-- KEYS[2..n]   keys deleted (UNLINK); with ARGV[1], KEYS[2] is a HASH that only loses that field
-- ARGV[1]      '' or a field of KEYS[2] to HDEL (a member's grant of the removed connection)
--
-- Replies the number of keys deleted (the HDEL not counted).
if #KEYS < 1 or #ARGV ~= 1 then
  return redis.error_reply('ERR slot_drop_v2: a version key and one argument expected')
end
local first = 2
if ARGV[1] ~= '' then
  if #KEYS < 2 then
    return redis.error_reply('ERR slot_drop_v2: a field to HDEL needs its HASH as KEYS[2]')
  end
  redis.call('HDEL', KEYS[2], ARGV[1])
  first = 3
end
local deleted = 0
for i = first, #KEYS do
  deleted = deleted + redis.call('UNLINK', KEYS[i])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCR', KEYS[1])
end
return deleted
