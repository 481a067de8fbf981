-- Discovery read on key layout v2, one member's per-member data (shared/discovery_spread.h;
-- docs/design.md "The discovery read on v2, round by round"). Every key is the member's,
-- {<ns>:m:<id>}, and declared: the script touches one slot and builds no key.
--
-- KEYS, four per per-member connection of the page, in page order: the member's manifest on that
-- connection (HASH), its disabled overlay (SET), its lease and its webhook mark (STRINGs).
--
-- Read-only (EVAL_RO). Replies
--   {'quiver.discovery.member.v1', {{manifest_fields, disabled_members, lease_exists,
--                                    invalidated}, ...}}
-- one element per connection, in KEYS order (invalidated false: no mark).
if #KEYS == 0 or #KEYS % 4 ~= 0 then
  return redis.error_reply('ERR discovery_member_read: four keys per connection expected')
end
local out = {}
for i = 1, #KEYS, 4 do
  out[#out + 1] = {redis.call('HGETALL', KEYS[i]), redis.call('SMEMBERS', KEYS[i + 1]),
                   redis.call('EXISTS', KEYS[i + 2]), redis.call('GET', KEYS[i + 3])}
end
return {'quiver.discovery.member.v1', out}
