-- Discovery read on key layout v2, one connection's part (shared/discovery_spread.h; docs/design.md
-- "The discovery read on v2, round by round"). Every key is the connection's, {<ns>:c:<cid>}, and
-- declared: the script touches one slot and builds no key.
--
-- KEYS[1] conn      the connection record (HASH)
-- KEYS[2] version   the connection's version (STRING counter)
-- KEYS[3] marked    the connection-wide webhook mark (STRING of epoch ms)
-- KEYS[4..7]        only when the reader reads the `shared` principal here (the member's grant
--                   says `shared`): its manifest (HASH), disabled overlay (SET), lease and mark
--
-- Read-only (EVAL_RO). One script, so the record, its version and the manifest it serves are one
-- snapshot of the slot: a manifest's config_hash is compared with the record it was read with.
-- Replies
--   {'quiver.discovery.conn.v1', conn_fields, version, marked, shared}
-- conn_fields a flat HGETALL array (empty: the connection is removed), version '' when never
-- written, marked false when absent, and shared {} when KEYS[4..7] were not given, else
--   {manifest_fields, disabled_members, lease_exists, invalidated}   (invalidated false: none)
if #KEYS ~= 3 and #KEYS ~= 7 then
  return redis.error_reply('ERR discovery_conn_read: 3 or 7 keys expected')
end
local conn = redis.call('HGETALL', KEYS[1])
local version = redis.call('GET', KEYS[2]) or ''
local marked = redis.call('GET', KEYS[3])
local shared = {}
if #KEYS == 7 and #conn > 0 then
  shared = {redis.call('HGETALL', KEYS[4]), redis.call('SMEMBERS', KEYS[5]),
            redis.call('EXISTS', KEYS[6]), redis.call('GET', KEYS[7])}
end
return {'quiver.discovery.conn.v1', conn, version, marked, shared}
