-- Extend the refresh lease, only if the caller still holds it (compare-and-PEXPIRE).
--
-- KEYS[1] lease     quiver:{ns}:lease:<cid>:<principal>
-- ARGV[1] "<fence>:<token>" of the caller's lease
-- ARGV[2] lease_ms  the new time to live
--
-- Replies {"renewed"} or {"lease_lost"}.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {'renewed'}
end
return {'lease_lost'}
