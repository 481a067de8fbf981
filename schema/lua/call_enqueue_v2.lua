-- A call the edge relays to the agents on key layout v2 (shared/call_relay.h
-- relay_call_commands_v2), first of the edge's two-command pipeline (the second is BLPOP on
-- KEYS[2]). Every key is on the shard of the call's connection, `{<ns>:s:<k>}` with
-- k = crc16(cid) mod S: one slot, so the XADD and the BLPOP share a node and a round trip.
--
-- KEYS[1] stream   quiver:{ns:s:<k>}:calls               XADD MAXLEN ~ maxlen
-- KEYS[2] reply    quiver:{ns:s:<k>}:call-reply:<rid>    the list the edge waits on (64 hex digits)
-- KEYS[3] agents   quiver:{ns:s:<k>}:call-agents         EXISTS only. Declared: on v2 the edge's
--                  user may read and write it (schema/redis-acl-edge.txt), since Redis 7 checks
--                  the keys an EVAL declares for write access.
-- ARGV[1] maxlen   XADD MAXLEN ~ bound of the stream
-- ARGV[2] ttl      PEXPIRE of the reply list, in ms
-- ARGV[3] record   the agent_unreachable reply record (shared/call_relay.h)
-- ARGV[4..] the stream entry, field/value pairs: rid, cid, member, method, params, deadline, at
--
-- No agent alive (the shard's `call-agents` absent: no agent has marked it within its TTL;
-- agents mark every shard's at once): nothing is queued, the reply list gets the
-- agent_unreachable record at once, so the BLPOP that follows in the same round trip returns
-- without waiting; replies {'no_agent'}. Else the request is queued: {'queued', stream_id}.
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('RPUSH', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {'no_agent'}
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 4))
return {'queued', id}
