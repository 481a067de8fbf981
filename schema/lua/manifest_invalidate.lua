-- Mark one cached manifest stale: what a refresh webhook does to each (connection, principal) on
-- the agent (webhook_refresh.lua does the same for the edge, with its replay guard and queuing).
-- Data listed by a listing that started before `at` then reads as stale (shared/freshness.h).
--
-- KEYS[1] manifest     quiver:{ns}:manifest:<cid>:<principal>   (read: does it hold data)
-- KEYS[2] epoch        quiver:{ns}:epoch   (INCR: edges drop L1 copies of the fresh answer)
-- KEYS[3] invalidated  quiver:{ns}:invalidated:<cid>:<principal>   STRING `at`; only moves forward
-- ARGV[1] at        now (the caller's clock)
--
-- Replies 1 when the hash held data and is marked, 0 when there was nothing to mark (no key is
-- created).
if redis.call('HEXISTS', KEYS[1], 'manifest') == 0 then
  return 0
end
local before = tonumber(redis.call('GET', KEYS[3]))
if not before or before < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[3], ARGV[1])
end
redis.call('INCR', KEYS[2])
return 1
