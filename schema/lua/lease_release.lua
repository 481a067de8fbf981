-- Give the refresh lease back, only if the caller still holds it (compare-and-delete): a holder
-- whose lease expired must not delete its successor's.
--
-- KEYS[1] lease     quiver:{ns}:lease:<cid>:<principal>
-- ARGV[1] "<fence>:<token>" of the caller's lease
--
-- Replies {"released"} or {"lease_lost"}.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {'released'}
end
return {'lease_lost'}
