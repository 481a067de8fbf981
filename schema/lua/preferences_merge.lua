-- Preference merge: rows of one (connection, principal) into the namespace's preference authority,
-- and that principal's disabled overlay rebuilt from the result (shared/preferences_redis.h).
--
-- KEYS[1] prefs     quiver:{ns}:prefs:<cid>:<principal>     HASH <type>:<key> -> row value
-- KEYS[2] disabled  quiver:{ns}:disabled:<cid>:<principal>  SET: the fields whose row is disabled
-- KEYS[3] version   quiver:{ns}:conn-version:<cid> (`shared`) or member-version:<member>: INCR
--                   when the overlay changes (the discovery reads check it)
-- KEYS[4] epoch     quiver:{ns}:epoch, key layout v1 only: INCR with the version. Layout v2 has
--                   no epoch and declares three keys, all in the slot of (cid, principal)'s
--                   overlay: `{<ns>:c:<cid>}` for `shared`, `{<ns>:m:<member id>}` for a member
-- ARGV    field, value, field, value, ...: the rows to merge (none: only check the overlay)
--
-- A row value is '<enabled 0|1>,<toggled_at>,<first_seen_at>,<last_seen_at>' (decimal ms). The
-- merge is merge_preference() of shared/preferences.h, exactly: enabled and toggled_at of the later
-- toggle, on equal toggled_at disabled wins; first_seen_at the earliest, last_seen_at the latest.
-- It is commutative and idempotent, so every agent may push its whole local copy at any time
-- (start-up, maintenance, after a Redis that came back empty) without undoing a newer toggle.
--
-- The overlay is compared with what the rows say on every call and rewritten (with a version bump,
-- and on v1 an epoch bump, so edges drop their L1 copies) only when it differs: a wiped or stale overlay is repaired by
-- the next merge of any agent, and a merge that changes nothing visible costs readers nothing.
--
-- Times are compared as numbers (exact below 2^53) but written back as the strings received, so
-- Lua's number formatting never reaches the hash. A malformed stored value is replaced by the
-- incoming one; a malformed argument is an error and nothing is written.
--
-- Replies {'merged', epoch, overlay_changed 0|1, {field, value, ...}}: the hash after the merge;
-- epoch 0 on v2.
local function parse(v)
  if type(v) ~= 'string' then return nil end
  local e, t, f, l = string.match(v, '^([01]),(%d+),(%d+),(%d+)$')
  if not e or #t > 18 or #f > 18 or #l > 18 then return nil end
  if tonumber(l) < tonumber(f) then return nil end
  return {e = e, t = t, f = f, l = l}
end

local function valid_field(field)
  local kind, key = string.match(field, '^([a-z_]+):(.+)$')
  if not kind or #key > 2048 then return false end
  return kind == 'tool' or kind == 'resource' or kind == 'resource_template' or kind == 'prompt'
end

if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR preferences_merge: ARGV must be field, value pairs')
end
local incoming = {}
for i = 1, #ARGV, 2 do
  local row = parse(ARGV[i + 1])
  if not valid_field(ARGV[i]) or not row then
    return redis.error_reply('ERR preferences_merge: malformed row ' .. tostring((i + 1) / 2))
  end
  incoming[#incoming + 1] = {ARGV[i], row}
end

local function pick_min(a, b) if tonumber(b) < tonumber(a) then return b end return a end
local function pick_max(a, b) if tonumber(b) > tonumber(a) then return b end return a end

for _, item in ipairs(incoming) do
  local field, b = item[1], item[2]
  local a = parse(redis.call('HGET', KEYS[1], field))
  local m = b
  if a then
    m = {e = a.e, t = a.t, f = pick_min(a.f, b.f), l = pick_max(a.l, b.l)}
    local ta, tb = tonumber(a.t), tonumber(b.t)
    if tb > ta then
      m.e, m.t = b.e, b.t
    elseif tb == ta and b.e == '0' then
      m.e = '0'
    end
  end
  local value = m.e .. ',' .. m.t .. ',' .. m.f .. ',' .. m.l
  if not a or value ~= (a.e .. ',' .. a.t .. ',' .. a.f .. ',' .. a.l) then
    redis.call('HSET', KEYS[1], field, value)
  end
end

local all = redis.call('HGETALL', KEYS[1])
local want, want_n = {}, 0
for i = 1, #all, 2 do
  local row = parse(all[i + 1])
  if row and row.e == '0' then
    want[all[i]] = true
    want_n = want_n + 1
  end
end
local have = redis.call('SMEMBERS', KEYS[2])
local same = #have == want_n
if same then
  for _, m in ipairs(have) do
    if not want[m] then same = false break end
  end
end
local changed = 0
if not same then
  redis.call('DEL', KEYS[2])
  local batch = {}
  for m in pairs(want) do
    batch[#batch + 1] = m
    if #batch == 1000 then
      redis.call('SADD', KEYS[2], unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then redis.call('SADD', KEYS[2], unpack(batch)) end
  if KEYS[4] then
    redis.call('INCR', KEYS[4])
    redis.call('INCR', KEYS[3])
  elseif redis.call('EXISTS', KEYS[3]) == 1 then
    -- Layout v2: only where the version exists; a missing one tells readers the slot lost its
    -- data (docs/design.md "A part of the store that lost its data"), which this must not hide.
    redis.call('INCR', KEYS[3])
  end
  changed = 1
end
local epoch = 0
if KEYS[4] then epoch = tonumber(redis.call('GET', KEYS[4])) or 0 end
return {'merged', epoch, changed, all}
