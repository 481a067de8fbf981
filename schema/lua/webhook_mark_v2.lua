-- A signed refresh webhook on key layout v2, one (connection, principal) (shared/webhook_spread.h;
-- docs/design.md "The refresh webhook on v2"): the one-slot part of webhook_refresh.lua's
-- refresh(), on the manifest's slot: the connection's for `shared`, the member's for a member.
-- Every key is declared and of that slot; the script builds none.
--
-- KEYS[1] invalidated  the mark: quiver:{ns:c:<cid>}:invalidated, quiver:{ns:m:<id>}:invalidated:<cid>
-- KEYS[2] version      the slot's version: quiver:{ns:c:<cid>}:version, quiver:{ns:m:<id>}:version
-- KEYS[3] gate         the revalidation gate: quiver:{ns:c:<cid>}:gate, quiver:{ns:m:<id>}:gate:<cid>
-- ARGV[1] at                now (the caller's clock): the mark's value, the gate's
-- ARGV[2] window_ms         the gate's window (as revalidate_enqueue.lua)
-- ARGV[3] requeue_after_ms  a request stands this long; after it the refresh is queued again
-- ARGV[4] has_data          '1' when the manifest hash holds data (a `body`, or an inline
--                           `manifest`), read by the caller in the round before
-- ARGV[5] lease_held        '1' when the lease existed, read by the caller in the round before
--
-- The manifest and the lease are read by the caller (HEXISTS, EXISTS: plain reads in the round
-- before) and not declared here: Redis 7 checks the keys an EVAL declares for write access, and
-- the edge's Redis user may only read them (schema/redis-acl-edge.txt; it writes no manifest).
-- What that leaves between the two reads is said in docs/design.md.
--
-- As refresh(): the mark only moves forward, and the version moves with it; a lease held answers
-- in_progress (queued behind the listing, which may predate the change); otherwise the gate admits
-- one request per requeue_after_ms. The caller XADDs the request to the connection's shard unless
-- the status is already_queued.
-- Replies {status, marked}: status queued, already_queued or in_progress; marked '1' when the
-- data now reads stale.
local at, requeue_after = tonumber(ARGV[1]), tonumber(ARGV[3])
if not at or not requeue_after then
  return redis.error_reply('ERR webhook_mark_v2: at and requeue_after_ms must be numbers')
end
local marked = '0'
if ARGV[4] == '1' then
  local before = tonumber(redis.call('GET', KEYS[1]))
  if not before or before < at then
    redis.call('SET', KEYS[1], ARGV[1])
    if redis.call('EXISTS', KEYS[2]) == 1 then  -- missing: the slot lost its data; not hidden
      redis.call('INCR', KEYS[2])
    end
  end
  marked = '1'
end
local status
if ARGV[5] == '1' then
  status = 'in_progress'
else
  status = 'queued'
  if not redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local since = tonumber(redis.call('GET', KEYS[3]))
    if since and at - since < requeue_after then
      status = 'already_queued'
    else
      redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
    end
  end
end
return {status, marked}
