-- A signed refresh webhook on key layout v2, a per_member connection as a whole (principal ''):
-- the connection-wide mark (shared/webhook_spread.h; docs/design.md "The refresh webhook on v2"),
-- O(1) whatever the connection's number of grantees, on the connection's slot.
--
-- KEYS[1] marked   quiver:{ns:c:<cid>}:marked   STRING of epoch ms, only ever moved forward
-- KEYS[2] version  quiver:{ns:c:<cid>}:version  INCR when the mark moved (and it exists)
-- ARGV[1] at       now (the caller's clock)
--
-- Readers apply the mark to each principal lazily (the effective invalidated_at of (cid, p) is the
-- later of its own mark and this one: discovery_conn_read.lua reads it with the record). No stream
-- entry and no per-member key. Replies 1 when the mark moved, 0 when it stood at `at` or later.
local at = tonumber(ARGV[1])
if not at then
  return redis.error_reply('ERR webhook_conn_mark_v2: at must be a number')
end
local before = tonumber(redis.call('GET', KEYS[1]))
if before and before >= at then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then  -- missing: the slot lost its data; not hidden
  redis.call('INCR', KEYS[2])
end
return 1
