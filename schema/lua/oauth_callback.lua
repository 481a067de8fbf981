-- An OAuth redirect the edge received (GET /v1/oauth/callback, shared/oauth_callback.h), in one
-- round trip: the outcome an agent already reported for its state, else the callback queued for
-- the agents (shared/discovery_redis.h oauth_callback_command).
--
-- KEYS[1] stream   quiver:{ns}:oauth-callbacks      XADD MAXLEN ~ maxlen
-- ARGV[1] result   quiver:{ns}:oauth-result:<sha256 of state>, read only. Not declared: Redis 7
--                  checks the keys an EVAL declares for write access, and the edge's user
--                  (schema/redis-acl-edge.txt) may only read result keys. Same hash tag, same slot.
-- ARGV[2] maxlen   XADD MAXLEN ~ bound of the stream
-- ARGV[3..] the stream entry, field/value pairs: state, code, iss, error, error_description, at
--
-- Replies {'result', <record>} when an agent wrote the outcome (nothing queued: a reload of the
-- page, or a replayed URL, shows it again), else {'queued', stream_id}. The entry holds the
-- short-lived authorization code, useless without the PKCE verifier that only the agents' token
-- store keeps; never a token.
if not string.find(ARGV[1], 'oauth-result:', 1, true) then
  return redis.error_reply('ERR oauth_callback: ARGV[1] is not an oauth-result key')
end
local result = redis.call('GET', ARGV[1])
if result then
  return {'result', result}
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
return {'queued', id}
