-- Acquire the refresh lease of one (connection, principal), with a fencing number.
--
-- KEYS[1] lease     quiver:{ns}:lease:<cid>:<principal>     STRING "<fence>:<token>", PX lease_ms
-- KEYS[2] fence     quiver:{ns}:fence:<cid>:<principal>     STRING counter
-- KEYS[3] manifest  quiver:{ns}:manifest:<cid>:<principal>  HASH (only its `fence` is read)
-- ARGV[1] token     random hex from the caller
-- ARGV[2] lease_ms
--
-- Replies {"acquired", fence} or {"held", remaining_ms, holder_fence}.
-- The fence counter moves only when the lease is granted: a refused attempt must not make the
-- current holder's fence stale. Should the counter have been lost (evicted, flushed), it is moved
-- past the fence of the last committed manifest, so fences stay monotonic for that manifest.
local holder = redis.call('GET', KEYS[1])
if holder then
  local holder_fence = tonumber(string.match(holder, '^(%d+):')) or 0
  return {'held', redis.call('PTTL', KEYS[1]), holder_fence}
end
local fence = redis.call('INCR', KEYS[2])
local committed = tonumber(redis.call('HGET', KEYS[3], 'fence'))
if committed and committed >= fence then
  fence = committed + 1
  redis.call('SET', KEYS[2], string.format('%d', fence))
end
redis.call('SET', KEYS[1], string.format('%d', fence) .. ':' .. ARGV[1], 'PX', ARGV[2])
return {'acquired', fence}
