-- Mark one cached manifest stale: what a refresh webhook does to each (connection, principal) on
-- the agent (webhook_refresh.lua does the same for the edge, with its replay guard and queuing).
-- Data listed by a listing that started before `at` then reads as stale (shared/freshness.h).
--
-- KEYS[1] manifest  quiver:{ns}:manifest:<cid>:<principal>
-- KEYS[2] epoch     quiver:{ns}:epoch   (INCR: edges drop L1 copies of the fresh answer)
-- ARGV[1] at        now (the caller's clock)
--
-- Replies 1 when the hash held data and is marked, 0 when there was nothing to mark (no key is
-- created).
if redis.call('HEXISTS', KEYS[1], 'manifest') == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'invalidated_at', ARGV[1])
redis.call('INCR', KEYS[2])
return 1
