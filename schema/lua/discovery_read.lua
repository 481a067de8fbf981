-- Discovery read: everything one member may see, in one round trip (shared/discovery_redis.h).
--
-- KEYS[1] grants   quiver:{ns}:grants:member/<id>   SET of the connection ids granted to the member
-- ARGV[1] prefix   quiver:{ns}:                     the namespace prefix (KEYS[1] must use it)
-- ARGV[2] member   member/<id>                      the caller (KEYS[1] must be its grants key)
-- ARGV[3] only     one connection id to read alone, if granted ('' = every granted one)
-- ARGV[4] after    read only ids sorting after this one, byte order ('' = from the start)
-- ARGV[5] limit    at most this many connections
-- ARGV[6] held     '' for a full read; 'if-unchanged' for a conditional read (below)
-- ARGV[7..]        a conditional read only: what the reader holds from a full read of the same
--                  ARGV[1..5]: its versions (the reply's last element: namespace record, member
--                  version, one connection version per entry), as ARGV[7] record, ARGV[8] member
--                  version, ARGV[9] n, then n pairs (cid, connection version) in entry order, then
--                  pairs (cid, principal) whose lease the reader needs to know (entries not fresh
--                  at its `now`: only those render differently with a lease held)
--
-- Versions (schema/redis-keys.md): member-version:<member> is INCRed by every write that changes
-- what this script reads for the member alone (its grants, a per-member commit, failure, overlay
-- or webhook mark), conn-version:<cid> by every write that changes what it reads for the
-- connection as a whole (its record, a shared commit, failure, overlay or mark, a connection-wide
-- mark). A conditional read reads all of them, the namespace record, the layout record, the epoch
-- and the named leases in ONE MGET; when each equals what the reader holds the reply is
--   {'quiver.discovery.unchanged', member, epoch, leases}     leases: 0/1 per named pair
-- and the reader renders from what it holds (a full read now would return the same records, the
-- leases aside, which it was given); otherwise the script goes on as a full read, in the same
-- round trip. A version key is never deleted (a removed connection's stays), so a value is never
-- seen twice; a namespace that lost its data (FLUSHALL, a restart) has a new record value.
--
-- Keys read beyond KEYS. Which connections to read is only known once KEYS[1] is read, so the
-- script builds their keys itself, from ARGV[1], exactly as RedisKeys (shared/identity.h) spells
-- them: conn:<cid>, manifest:<cid>:<principal>, disabled:<cid>:<principal>,
-- lease:<cid>:<principal>, invalidated:<cid>:<principal>, marked:<cid>, epoch, member-version:<member>,
-- conn-version:<cid>, namespace, layout.
-- Every key of a namespace carries the same {ns} hash tag, so they all live in KEYS[1]'s slot:
-- on Redis Cluster the script never leaves its node. Granted ids outside the connection id
-- charset are skipped (and counted): they could not carry the hash tag safely.
--
-- The principal whose manifest is read follows the connection's credential_mode: 'shared' for
-- shared, the member for per_member, none for anything else. shared/discovery.h's
-- applicable_principal is the authority; the decoder checks this script's choice against it.
-- The disabled overlay is that principal's own: on a per-member connection a member's toggles hide
-- capabilities from that member alone.
--
-- The key layout record (quiver:{ns}:layout, shared/layout.h) is read before anything else, then
-- the namespace record (in the conditional path, in its one MGET): absent, `v1:...` or
-- `v2:filling:...` the namespace is read in layout v1, which this script reads; any other value
-- (`v2:ready:<at>`, garbage) names a layout it does not read, and the reply is
--   {'quiver.layout.v1', value, key}
-- which readers answer as the store being unavailable, never as an empty list. A conditional
-- read never answers "unchanged" unless the layout is v1.
--
-- Read-only, and sent as EVAL_RO / EVALSHA_RO (Redis 7): a Redis user with read-only access to the
-- namespace (the edge's least-privilege ACL, schema/redis-acl-edge.txt) may run it.
-- The namespace record (quiver:{ns}:namespace, spelled from ARGV[1] like the keys below) is read
-- first: unless it says `ready:<at>`, the namespace lost its data (a Redis restarted empty, a
-- FLUSHALL) or an agent is restoring it, and nothing else is read: the reply is
--   {'quiver.namespace.v1', state}      state 'missing' or 'restoring'
-- which readers answer as the store being unavailable, never as "no grants" or "no connection".
-- Replies
--   {'quiver.discovery.v2', member, epoch, granted_total, next_after, ignored, entries, versions}
-- with versions {namespace record, member version, connection version per entry} ('' for a
-- version never written), next_after '' when nothing is left after this page, and each entry
--   {cid, conn_fields, principal, manifest_fields, disabled_members, lease_exists, invalidated_at}
-- (fields as flat HGETALL arrays; principal '' when none applies; a removed connection has empty
-- conn_fields and nothing else read; invalidated_at is the mark of a refresh webhook, false when
-- there is none: the later of the principal's own mark, invalidated:<cid>:<principal>, and the
-- connection's, marked:<cid> (a webhook for a per_member connection as a whole marks it once;
-- each member reads it here, so its data reads stale and its refresh goes through its gate)).
local prefix, member = ARGV[1], ARGV[2]
if string.sub(member, 1, 7) ~= 'member/' or KEYS[1] ~= prefix .. 'grants:' .. member then
  return redis.error_reply('ERR discovery_read: KEYS[1] is not the grants key of ARGV[2]')
end
local limit = tonumber(ARGV[5])
if not limit or limit < 1 then
  return redis.error_reply('ERR discovery_read: limit must be a positive number')
end

local function valid_cid(cid)
  return #cid >= 1 and #cid <= 128 and not string.find(cid, '[^A-Za-z0-9._-]')
end

-- Read in layout v1 (shared/layout.h layout_readable): no layout record, one naming v1, or
-- `v2:filling:<at>` (the copy to v2 is under way; v1 holds the data until the switch).
local function v1_layout(value)
  return not value or string.sub(value, 1, 3) == 'v1:' or string.sub(value, 1, 11) == 'v2:filling:'
end

if ARGV[6] == 'if-unchanged' then
  local n = tonumber(ARGV[9])
  if not n or n < 0 then
    return redis.error_reply('ERR discovery_read: ARGV[9] is not a count')
  end
  local leases_at = 10 + 2 * n
  if #ARGV < leases_at - 1 or (#ARGV - leases_at + 1) % 2 ~= 0 then
    return redis.error_reply('ERR discovery_read: held versions and leases do not pair up')
  end
  local keys = {prefix .. 'namespace', prefix .. 'epoch', prefix .. 'member-version:' .. member,
                prefix .. 'layout'}
  for i = 10, leases_at - 1, 2 do
    if not valid_cid(ARGV[i]) then
      return redis.error_reply('ERR discovery_read: a held connection id is not valid')
    end
    keys[#keys + 1] = prefix .. 'conn-version:' .. ARGV[i]
  end
  for i = leases_at, #ARGV, 2 do
    if not valid_cid(ARGV[i]) or (ARGV[i + 1] ~= 'shared' and ARGV[i + 1] ~= member) then
      return redis.error_reply('ERR discovery_read: a lease to check is not the caller\'s')
    end
    keys[#keys + 1] = prefix .. 'lease:' .. ARGV[i] .. ':' .. ARGV[i + 1]
  end
  local got = redis.call('MGET', unpack(keys))
  local same = got[1] and got[1] == ARGV[7] and string.sub(got[1], 1, 6) == 'ready:' and
               (got[3] or '') == ARGV[8] and v1_layout(got[4])
  local at = 5
  for i = 11, leases_at - 1, 2 do
    if not same then break end
    same = (got[at] or '') == ARGV[i]
    at = at + 1
  end
  if same then
    local leases = {}
    for i = 5 + n, #got do
      leases[#leases + 1] = got[i] and 1 or 0
    end
    return {'quiver.discovery.unchanged', member, tonumber(got[2]) or 0, leases}
  end
end

local layout = redis.call('GET', prefix .. 'layout')
if not v1_layout(layout) then return {'quiver.layout.v1', layout, prefix .. 'layout'} end
local record = redis.call('GET', prefix .. 'namespace')
if not record or string.sub(record, 1, 6) ~= 'ready:' then
  local state = 'missing'
  if record then state = string.match(record, '^[a-z]+') or 'unknown' end
  return {'quiver.namespace.v1', state}
end

-- Byte order, whatever the server's locale (Lua's string '<' uses strcoll).
local function byte_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local ids, ignored = {}, 0
if ARGV[3] ~= '' then
  if valid_cid(ARGV[3]) and redis.call('SISMEMBER', KEYS[1], ARGV[3]) == 1 then
    ids[1] = ARGV[3]
  end
else
  for _, cid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    if valid_cid(cid) then ids[#ids + 1] = cid else ignored = ignored + 1 end
  end
  table.sort(ids, byte_less)
end

local entries, next_after = {}, ''
for _, cid in ipairs(ids) do
  if ARGV[4] == '' or byte_less(ARGV[4], cid) then
    if #entries == limit then
      next_after = entries[#entries][1]
      break
    end
    local conn = redis.call('HGETALL', prefix .. 'conn:' .. cid)
    local principal, manifest, disabled, lease, invalidated = '', {}, {}, 0, false
    if #conn > 0 then
      local mode
      for i = 1, #conn, 2 do
        if conn[i] == 'credential_mode' then mode = conn[i + 1] end
      end
      if mode == 'shared' then
        principal = 'shared'
      elseif mode == 'per_member' then
        principal = member
      end
      if principal ~= '' then
        disabled = redis.call('SMEMBERS', prefix .. 'disabled:' .. cid .. ':' .. principal)
        manifest = redis.call('HGETALL', prefix .. 'manifest:' .. cid .. ':' .. principal)
        lease = redis.call('EXISTS', prefix .. 'lease:' .. cid .. ':' .. principal)
        local own = redis.call('GET', prefix .. 'invalidated:' .. cid .. ':' .. principal)
        local whole = redis.call('GET', prefix .. 'marked:' .. cid)
        invalidated = own
        if whole and (not own or (tonumber(whole) or 0) > (tonumber(own) or 0)) then
          invalidated = whole
        end
      end
    end
    entries[#entries + 1] = {cid, conn, principal, manifest, disabled, lease, invalidated}
  end
end

-- The versions of what was read, with the epoch, in one MGET.
local keys = {prefix .. 'epoch', prefix .. 'member-version:' .. member}
for _, e in ipairs(entries) do keys[#keys + 1] = prefix .. 'conn-version:' .. e[1] end
local got = redis.call('MGET', unpack(keys))
local versions = {record, got[2] or ''}
for i = 3, #got do versions[#versions + 1] = got[i] or '' end
local epoch = tonumber(got[1]) or 0
return {'quiver.discovery.v2', member, epoch, #ids, next_after, ignored, entries, versions}
