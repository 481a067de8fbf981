-- A signed refresh webhook, in one round trip (shared/discovery_redis.h webhook_refresh_command):
-- the replay guard, then for each target every (connection, principal) it names is marked stale
-- and its refresh queued for the agents.
--
-- KEYS[1] replay   quiver:{ns}:replay:<sha256>   STRING, SET NX PX retain_ms
-- KEYS[2] stream   quiver:{ns}:revalidate
-- KEYS[3] epoch    quiver:{ns}:epoch             INCR when anything was marked stale
-- ARGV[1] prefix            quiver:{ns}:          (KEYS must use it)
-- ARGV[2] retain_ms         how long the replay key stands
-- ARGV[3] at                now (the caller's clock): invalidated_at, the gate's value, the entry's `at`
-- ARGV[4] window_ms         the revalidation gate's window (as revalidate_enqueue.lua)
-- ARGV[5] maxlen            XADD MAXLEN ~ bound of the stream
-- ARGV[6] requeue_after_ms  a request stands for this long; after it the refresh is queued again
-- ARGV[7] reason            the stream entries' `reason` (a short token: 'webhook'; the agent
--                           that takes one treats it as a change, shared with list_changed)
-- ARGV[8..] targets, two values each: cid, principal ('' = every principal the connection is
--           cached under: `shared`, or, on a per_member connection, the connection as a whole)
--
-- Keys read and written beyond KEYS, built from ARGV[1] exactly as RedisKeys spells them (the
-- {ns} hash tag keeps them in KEYS[1]'s slot, as in discovery_read.lua): conn:<cid>,
-- grantees:<cid>, marked:<cid>, the versions a mark moves (conn-version:<cid> for `shared` and a
-- connection-wide mark, member-version:<member> for a member's own; INCR with the mark), and per principal manifest: (read), lease: (read), invalidated:
-- and revalidate-gate:<cid>:<principal>. Every key it writes is one the edge's least-privilege Redis
-- user may write (schema/redis-acl-edge.txt): it never writes a manifest hash.
--
-- Per (connection, principal):
--   marked stale: when the manifest hash holds data, invalidated:<cid>:<principal> = at (a later
--     mark only moves it forward). Data listed by
--     a listing that started before `at` stays stale even when it commits later
--     (shared/freshness.h): a webhook means "what you have may predate a change".
--   queued: unlike a stale read's revalidation, also while a lease is held (the listing under way
--     may have started before the change; the agent that takes the entry lists again only if the
--     data still predates `at`). Otherwise the gate admits one request per requeue_after_ms.
--
-- A per_member connection as a whole (principal ''): marked once, in O(1) whatever its number of
-- grantees. marked:<cid> = at (only ever moved forward); readers apply it to each principal
-- lazily (the effective invalidated_at of (cid, p) is the later of invalidated:<cid>:<p> and
-- marked:<cid>: discovery_read.lua, the agent's manifest reads), so each member's data reads stale
-- and its refresh is queued through that member's gate when it is next read, or by the agent's
-- maintenance when due. No stream entry and no per-member key: one result
--   cid, '', 'marked', marked   marked '1' when the connection has grantees (data that now
--                               reads stale may exist), '0' when it has none (the mark stands all
--                               the same, for data a later grantee would find).
--
-- The namespace record (quiver:{ns}:namespace, spelled from ARGV[1]) is read first, as
-- discovery_read.lua does: unless it says `ready:<at>` (a Redis restarted empty, a FLUSHALL, an
-- agent restoring it) nothing is written, not even the replay guard, so the sender may retry the
-- same signed request once the namespace is back; the reply is then
--   {'quiver.namespace.v1', state}      state 'missing' or 'restoring'
-- which the host answers 503 STORE_UNAVAILABLE, never 202 with every target unknown_connection.
-- The key layout record (quiver:{ns}:layout, shared/layout.h) is read before it, as
-- discovery_read.lua does: unless it is absent or `v1:...`, the namespace is in a layout this
-- script does not write, nothing is written and the reply is
--   {'quiver.layout.v1', value, key}    the record as stored, and its key
-- (503 STORE_UNAVAILABLE too).
-- Replies {'replay'} when KEYS[1] existed (nothing else done), else
--   {'accepted', results} with results flat, four values per (connection, principal):
--   cid, principal ('' for an unknown connection or a connection-wide mark), status, marked
--   ('1'/'0'); status one of queued, already_queued, in_progress (lease held; queued behind it),
--   unknown_connection, unknown_principal, marked (a per_member connection as a whole).
local prefix = ARGV[1]
if string.sub(KEYS[1], 1, #prefix + 7) ~= prefix .. 'replay:' or
   KEYS[2] ~= prefix .. 'revalidate' or KEYS[3] ~= prefix .. 'epoch' then
  return redis.error_reply('ERR webhook_refresh: KEYS do not belong to ARGV[1]')
end
local retain, at = ARGV[2], tonumber(ARGV[3])
local window, maxlen, requeue_after, reason = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
if not at or not requeue_after then
  return redis.error_reply('ERR webhook_refresh: at and requeue_after_ms must be numbers')
end
local layout = redis.call('GET', prefix .. 'layout')
if layout and string.sub(layout, 1, 3) ~= 'v1:' then
  return {'quiver.layout.v1', layout, prefix .. 'layout'}
end
local record = redis.call('GET', prefix .. 'namespace')
if not record or string.sub(record, 1, 6) ~= 'ready:' then
  local state = 'missing'
  if record then state = string.match(record, '^[a-z]+') or 'unknown' end
  return {'quiver.namespace.v1', state}
end
if not redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', retain) then
  return {'replay'}
end

local function valid_cid(cid)
  return #cid >= 1 and #cid <= 128 and not string.find(cid, '[^A-Za-z0-9._-]')
end

local results, marked_any = {}, false
local function grantees_key(cid) return prefix .. 'grantees:' .. cid end
-- What a discovery read of the marked data checks (discovery_read.lua): a principal's mark is
-- read by that member alone (`shared`: by every grantee of the connection).
local function bump_version(cid, principal)
  if principal == 'shared' or principal == '' then
    redis.call('INCR', prefix .. 'conn-version:' .. cid)
  else
    redis.call('INCR', prefix .. 'member-version:' .. principal)
  end
end
local function refresh(cid, principal)
  local mkey = prefix .. 'manifest:' .. cid .. ':' .. principal
  local marked = '0'
  -- Data: a body by reference (`body`), or inline (`manifest`, the layout before bodies apart).
  if redis.call('HEXISTS', mkey, 'body') == 1 or redis.call('HEXISTS', mkey, 'manifest') == 1 then
    local mark = prefix .. 'invalidated:' .. cid .. ':' .. principal
    local before = tonumber(redis.call('GET', mark))
    if not before or before < at then
      redis.call('SET', mark, ARGV[3])
      bump_version(cid, principal)
    end
    marked, marked_any = '1', true
  end
  local status
  if redis.call('EXISTS', prefix .. 'lease:' .. cid .. ':' .. principal) == 1 then
    status = 'in_progress'
  else
    local gate = prefix .. 'revalidate-gate:' .. cid .. ':' .. principal
    status = 'queued'
    if not redis.call('SET', gate, ARGV[3], 'NX', 'PX', window) then
      local since = tonumber(redis.call('GET', gate))
      if since and at - since < requeue_after then
        status = 'already_queued'
      else
        redis.call('SET', gate, ARGV[3], 'PX', window)
      end
    end
  end
  if status ~= 'already_queued' then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*',
               'cid', cid, 'principal', principal, 'reason', reason, 'at', ARGV[3])
  end
  table.insert(results, cid)
  table.insert(results, principal)
  table.insert(results, status)
  table.insert(results, marked)
end

for i = 8, #ARGV, 2 do
  local cid, principal = ARGV[i], ARGV[i + 1]
  local mode = valid_cid(cid) and redis.call('HGET', prefix .. 'conn:' .. cid, 'credential_mode')
  if mode ~= 'shared' and mode ~= 'per_member' then
    mode = nil
  end
  local principals = {}
  if mode == 'shared' then
    if principal == '' or principal == 'shared' then
      principals = {'shared'}
    end
  elseif mode == 'per_member' then
    local grantees = grantees_key(cid)
    if principal ~= '' and redis.call('SISMEMBER', grantees, principal) == 1 then
      principals = {principal}
    end
  end
  if mode == 'per_member' and principal == '' then
    local mark = prefix .. 'marked:' .. cid
    local before = tonumber(redis.call('GET', mark))
    if not before or before < at then
      redis.call('SET', mark, ARGV[3])
      bump_version(cid, '')
    end
    local marked = '0'
    if redis.call('EXISTS', grantees_key(cid)) == 1 then marked, marked_any = '1', true end
    for _, v in ipairs({cid, '', 'marked', marked}) do table.insert(results, v) end
  elseif not mode then
    for _, v in ipairs({cid, '', 'unknown_connection', '0'}) do table.insert(results, v) end
  elseif #principals == 0 and principal ~= '' then
    for _, v in ipairs({cid, principal, 'unknown_principal', '0'}) do table.insert(results, v) end
  else
    for _, p in ipairs(principals) do refresh(cid, p) end
  end
end
if marked_any then
  redis.call('INCR', KEYS[3])
end
return {'accepted', results}
