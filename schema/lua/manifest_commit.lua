-- Commit a freshly listed manifest, fenced: only the current lease holder, with the newest fence,
-- listing under the connection's current config_hash, may write.
--
-- KEYS[1] manifest    quiver:{ns}:manifest:<cid>:<principal>  HASH
-- KEYS[2] lease       quiver:{ns}:lease:<cid>:<principal>
-- KEYS[3] fence       quiver:{ns}:fence:<cid>:<principal>
-- KEYS[4] connection  quiver:{ns}:conn:<cid>                  HASH (its `config_hash` is read)
-- KEYS[5] epoch       quiver:{ns}:epoch
-- KEYS[6] body        quiver:{ns}:body:<sha256>               STRING, the body, once per content
-- KEYS[7] due         quiver:{ns}:due                         ZSET, the refresh-due index
-- KEYS[8] version     quiver:{ns}:conn-version:<cid> for `shared`, member-version:<member> for a
--                     member: INCR with the epoch (a discovery read checks it: discovery_read.lua)
-- ARGV[1] fence  ARGV[2] token  ARGV[3] config_hash the listing started under
-- ARGV[4] manifest ('' = the digest alone: see below)  ARGV[5] etag  ARGV[6] fetched_at  ARGV[7] fresh_until  ARGV[8] expires_at
-- ARGV[9] cache_scope ('' = none)  ARGV[10] truncated ('0'/'1')
-- ARGV[11] release the lease afterwards ('0'/'1')
-- ARGV[12] the body's SHA-256 (hex; KEYS[6] ends with it)
-- ARGV[13] grace (ms): the body is kept until at least max(expires_at, Redis's now) + grace
-- ARGV[14] due_at: when maintenance next has work on this key (ms; '0': at once)
-- ARGV[15] the key's member of the due index, `<cid>:<principal>`
--
-- The due index entry is scored in the same step as the data it describes, so maintenance
-- (ZRANGEBYSCORE due -inf <now>) never misses a committed manifest and never walks the namespace.
--
-- The body goes to its own key, written only when absent: it is immutable, named by its
-- content, and shared by every record that lists the same bytes (deduplicated across principals).
-- The record keeps the metadata and `body`, the SHA-256 naming it; a body still inline in
-- `manifest` (the layout before) is dropped from the record here. The body key lives until the
-- manifest's expires_at (or Redis's clock, if later: an agent's clock may lag) plus the grace,
-- moved later, never earlier, by every commit that names it: a body no record names any more
-- expires; a record past its expires_at (never served as data) may outlive its body.
--
-- The body's bytes go only when needed: a commit may send ARGV[4] = '' (a manifest is never empty,
-- shared/lease.cpp refuses one) and name the body by ARGV[12] alone. Then the body key present
-- commits as above (its expiry moved); absent (new content, or the key evicted or deleted), the
-- script answers {"need_body"} after the fenced checks and writes nothing, and the caller sends
-- the same commit again with the bytes (native-agent/store/redis_store.cpp). A refresh that found
-- the content unchanged, or content another principal stored, so sends the SHA-256, not the body.
-- A body key holding other bytes is repaired only by a commit that sends the bytes.
--
-- The hash gets no TTL (schema/redis-keys.md): an expired manifest still answers with its status
-- and its last error, however long the upstream stays down. PERSIST drops a TTL that agents
-- before this rule set.
--
-- Replies {"committed", epoch}, or a refusal that writes nothing:
--   {"lease_lost"}              the lease expired (or was released) and nobody newer holds it
--   {"stale_fence", fence}      a newer holder acquired the lease (its fence is given)
--   {"config_changed"}          the connection's config_hash is no longer ARGV[3]
--   {"connection_removed"}      the connection record is gone
--   {"need_body"}               ARGV[4] is '' and the body key is absent: send the body
local holder = redis.call('GET', KEYS[2])
local counter = redis.call('GET', KEYS[3])
if holder ~= ARGV[1] .. ':' .. ARGV[2] then
  if counter and tonumber(counter) > tonumber(ARGV[1]) then
    return {'stale_fence', tonumber(counter)}
  end
  return {'lease_lost'}
end
if counter ~= ARGV[1] then
  return {'stale_fence', tonumber(counter) or 0}
end
local current = redis.call('HGET', KEYS[4], 'config_hash')
if not current then
  return {'connection_removed'}
end
if current ~= ARGV[3] then
  return {'config_changed'}
end

if string.sub(KEYS[6], -#ARGV[12] - 1) ~= ':' .. ARGV[12] then
  return redis.error_reply('ERR manifest_commit: KEYS[6] is not the body key of ARGV[12]')
end
-- Present with these bytes (the usual case: the same content listed again, or by another
-- principal): only its expiry moves. Absent: written. Other bytes, which no commit writes (KEYS[6]
-- names the SHA-256 of ARGV[4], checked by the caller): repaired, not kept.
local time = redis.call('TIME')
local keep = math.max(tonumber(ARGV[8]), tonumber(time[1]) * 1000 + math.floor(time[2] / 1000))
keep = string.format('%.0f', keep + tonumber(ARGV[13]))
if ARGV[4] == '' then
  -- PEXPIREAT answers 0 for a key that is absent and for one whose expiry is already later.
  if redis.call('PEXPIREAT', KEYS[6], keep, 'GT') == 0 and redis.call('EXISTS', KEYS[6]) == 0 then
    return {'need_body'}
  end
elseif redis.call('GET', KEYS[6]) == ARGV[4] then
  redis.call('PEXPIREAT', KEYS[6], keep, 'GT')
else
  redis.call('SET', KEYS[6], ARGV[4], 'PXAT', keep)
end
redis.call('HSET', KEYS[1],
  'body', ARGV[12], 'etag', ARGV[5], 'config_hash', ARGV[3], 'fence', ARGV[1],
  'fetched_at', ARGV[6], 'fresh_until', ARGV[7], 'expires_at', ARGV[8],
  'truncated', ARGV[10], 'attempt_at', ARGV[6])
if ARGV[9] == '' then
  redis.call('HDEL', KEYS[1], 'cache_scope', 'error_code', 'error_message', 'error_at')
else
  redis.call('HSET', KEYS[1], 'cache_scope', ARGV[9])
  redis.call('HDEL', KEYS[1], 'error_code', 'error_message', 'error_at')
end
redis.call('HDEL', KEYS[1], 'manifest')
redis.call('PERSIST', KEYS[1])
redis.call('ZADD', KEYS[7], ARGV[14], ARGV[15])
local epoch = redis.call('INCR', KEYS[5])
redis.call('INCR', KEYS[8])
if ARGV[11] == '1' then
  redis.call('DEL', KEYS[2])
end
return {'committed', epoch}
