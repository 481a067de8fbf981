-- Store a manifest body by its content, or move its expiry (key layout v2, where the body is a slot
-- of its own and the fenced commit cannot touch it: docs/design.md "What crosses slots"). Sent
-- before manifest_commit_v2.lua, so that a commit never names a body Redis lacks on the happy
-- path; what it keeps is manifest_commit.lua's rule for the body, unchanged.
--
-- KEYS[1] body  quiver:{ns:b:<sha256>}  STRING, the body, once per content
-- ARGV[1] the body ('' = the digest alone: see below)
-- ARGV[2] the body's SHA-256 (hex; KEYS[1] names it)
-- ARGV[3] expires_at of the manifest that names it (ms)
-- ARGV[4] grace (ms): the body is kept until at least max(expires_at, Redis's now) + grace
--
-- Present with these bytes: only its expiry moves (PEXPIREAT GT: later, never earlier). Absent:
-- written. Other bytes, which no writer stores (the caller checks that ARGV[2] is the SHA-256 of
-- ARGV[1]): repaired. ARGV[1] = '' (a manifest is never empty) names the body by its digest alone:
-- present, its expiry moves; absent, the script answers {"need_body"} and writes nothing, and the
-- caller sends the bytes. A refresh that found the content unchanged, or content another principal
-- stored, so sends the SHA-256, not the body.
--
-- Unfenced, unlike v1's commit, which wrote the body after its fenced checks: a writer whose commit
-- is then refused has stored (or kept) content that nothing may name. It costs nothing a body
-- nobody names does not cost already: it expires at max(expires_at, now) + grace.
--
-- Replies {"stored"} or {"need_body"}.
if not string.find(KEYS[1], ARGV[2], 1, true) then
  return redis.error_reply('ERR body_store: KEYS[1] is not the body key of ARGV[2]')
end
local time = redis.call('TIME')
local keep = math.max(tonumber(ARGV[3]), tonumber(time[1]) * 1000 + math.floor(time[2] / 1000))
keep = string.format('%.0f', keep + tonumber(ARGV[4]))
if ARGV[1] == '' then
  -- PEXPIREAT answers 0 for a key that is absent and for one whose expiry is already later.
  if redis.call('PEXPIREAT', KEYS[1], keep, 'GT') == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
    return {'need_body'}
  end
elseif redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIREAT', KEYS[1], keep, 'GT')
else
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', keep)
end
return {'stored'}
