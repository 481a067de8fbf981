-- One step of the key layout migration (`quiver-agent migrate-layout v2`, docs/design.md
-- "Migration from v1, and the `layout` record"): the layout record moves from what the migration
-- read to what it writes, only if nobody moved it meanwhile (another migration, an operator).
--
-- KEYS[1] layout  quiver:{<ns>}:layout  STRING `<version>:<state>:<at>` (shared/layout.h)
-- ARGV[1] the value expected now: '' for no record (layout v1)
-- ARGV[2] the value to write
--
-- Replies {1, ARGV[2]} when written, {0, current} when the record is not ARGV[1] (current '' for
-- no record): nothing written.
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[1] then
  return {0, current or ''}
end
redis.call('SET', KEYS[1], ARGV[2])
return {1, ARGV[2]}
