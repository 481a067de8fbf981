-- A connection's credential mode written into one grantee's grants (key layout v2 only;
-- docs/design.md "The discovery read on v2, round by round": grants are a HASH cid -> mode).
--
-- KEYS[1] grants  quiver:{<ns>:m:<member id>}:grants  HASH connection id -> credential mode
-- ARGV[1] the connection id, ARGV[2] its credential mode ('shared' or 'per_member')
--
-- sync_connections runs it once per grantee after a connection's mode changed (and after the
-- connection's own transaction moved its version), each its own idempotent command on the
-- member's slot. It writes the field only where the member still holds the grant: a plain HSET
-- racing a revocation (the grantees set read before the member's grant write took the
-- connection out) would grant the connection again. The member's version does not move: the
-- connection's did, which a reader that kept this answer compares, and a reader that sees the
-- new record with an old field reads that connection again as the record says.
--
-- Replies 1 when the field was written (or already said so), 0 when the member holds no grant
-- of the connection.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
