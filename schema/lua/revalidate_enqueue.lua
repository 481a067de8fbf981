-- Queue one revalidation of a (connection, principal): at most once per key per window, and not
-- while a refresh lease is held (shared/discovery_redis.h). Stale readers call it in the
-- background, however many edges ask at once; the agents consume the stream.
--
-- KEYS[1] gate    quiver:{ns}:revalidate-gate:<cid>:<principal>  STRING `at`, PX window_ms
-- KEYS[2] stream  quiver:{ns}:revalidate
-- Read beyond KEYS: the lease quiver:{ns}:lease:<cid>:<principal>, spelled from KEYS[1] (same
-- namespace hash tag, same slot). It is not declared because Redis 7 checks the keys an EVAL
-- declares for write access, and the edge's least-privilege user (schema/redis-acl-edge.txt) may
-- only read leases.
-- ARGV[1] window_ms         how long one queued request stands for the key
-- ARGV[2] maxlen            XADD MAXLEN ~ bound of the stream
-- ARGV[3] at                now (the caller's clock), the gate's value
-- ARGV[4] requeue_after_ms  -1: the gate decides alone (readers). >= 0 (a manual refresh): queue
--                           again when the gate was set at least this long ago, and restart it
-- ARGV[5..] the stream entry, field/value pairs: cid, principal, reason, at
--
-- Replies {'in_progress'} (lease held: the refresh is under way, nothing queued),
-- {'queued', stream_id} or {'already_queued'} (a request within the window stands).
local gate_at = string.find(KEYS[1], 'revalidate-gate:', 1, true)
if not gate_at then
  return redis.error_reply('ERR revalidate_enqueue: KEYS[1] is not a revalidation gate')
end
local lease = string.sub(KEYS[1], 1, gate_at - 1) .. 'lease:' .. string.sub(KEYS[1], gate_at + 16)
if redis.call('EXISTS', lease) == 1 then
  return {'in_progress'}
end
if not redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[1]) then
  local requeue = tonumber(ARGV[4]) or -1
  local since = tonumber(redis.call('GET', KEYS[1]))
  if requeue < 0 or (since and tonumber(ARGV[3]) - since < requeue) then
    return {'already_queued'}
  end
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 5))
return {'queued', id}
