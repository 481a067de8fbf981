-- A call the edge relays to the agents (shared/call_relay.h relay_call_commands), first of the
-- edge's two-command pipeline (the second is BLPOP on KEYS[2]).
--
-- KEYS[1] stream   quiver:{ns}:calls                XADD MAXLEN ~ maxlen
-- KEYS[2] reply    quiver:{ns}:call-reply:<rid>     the list the edge waits on (64 hex digits)
-- ARGV[1] agents   quiver:{ns}:call-agents, read only. Not declared: Redis 7 checks the keys an
--                  EVAL declares for write access, and the edge's user (schema/redis-acl-edge.txt)
--                  may only read it. Same hash tag, same slot.
-- ARGV[2] maxlen   XADD MAXLEN ~ bound of the stream
-- ARGV[3] ttl      PEXPIRE of the reply list, in ms
-- ARGV[4] record   the agent_unreachable reply record (shared/call_relay.h)
-- ARGV[5..] the stream entry, field/value pairs: rid, cid, member, method, params, deadline, at
--
-- No agent alive (`call-agents` absent: no agent has consumed calls within its TTL): nothing is
-- queued, the reply list gets the agent_unreachable record at once, so the BLPOP that follows in
-- the same round trip returns without waiting; replies {'no_agent'}. Else the request is queued:
-- {'queued', stream_id}.
if not string.find(ARGV[1], 'call-agents', 1, true) then
  return redis.error_reply('ERR call_enqueue: ARGV[1] is not the call-agents key')
end
if redis.call('EXISTS', ARGV[1]) == 0 then
  redis.call('RPUSH', KEYS[2], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {'no_agent'}
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 5))
return {'queued', id}
