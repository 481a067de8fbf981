-- The gate of one revalidation on key layout v2: step (a) of the enqueue, on the manifest's slot
-- (docs/design.md, "What crosses slots": Enqueue). The stream lives on the connection's shard, in
-- another slot, so the XADD is step (b), sent by the caller only when this script answers `won`
-- (revalidate_xadd_command, shared/discovery_redis.h). A crash between the two loses that one
-- request: the gate expires after its window and the next stale read queues it again.
--
-- KEYS[1] gate   quiver:{ns:c:<cid>}:gate, or quiver:{ns:m:<id>}:gate:<cid>  STRING `at`, PX window
-- KEYS[2] lease  optional: the manifest's lease (same slot). The agent declares it; the edge does
--                not (its Redis user may only read leases, and Redis 7 checks declared keys for
--                write access): it asks nothing for an entry whose snapshot says a lease is held.
-- ARGV[1] window_ms         how long one queued request stands for the key
-- ARGV[2] at                now (the caller's clock), the gate's value
-- ARGV[3] requeue_after_ms  -1: the gate decides alone (readers). >= 0 (a manual refresh): won
--                           again when the gate was set at least this long ago, and restarted
--
-- Replies {'in_progress'} (lease held: nothing set), {'won'} (the caller XADDs now) or
-- {'already_queued'} (a request within the window stands).
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  return {'in_progress'}
end
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[1]) then
  local requeue = tonumber(ARGV[3]) or -1
  local since = tonumber(redis.call('GET', KEYS[1]))
  if requeue < 0 or (since and tonumber(ARGV[2]) - since < requeue) then
    return {'already_queued'}
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
end
return {'won'}
