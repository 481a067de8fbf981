-- Runtime catalog write (native-agent/store/catalog.h, RedisStore::catalog_write): one entry of one
-- kind, with its paging index and its kind's version, and for a config file's item the file rule
-- decided here, on what is stored at this instant, so two agents seeding at once cannot interleave.
--
-- KEYS[1] entries   quiver:{ns}:catalog:<kind>       HASH key -> entry JSON
-- KEYS[2] keys      quiver:{ns}:catalog:<kind>:keys  ZSET key, score 0
-- KEYS[3] versions  quiver:{ns}:catalog:versions     HASH <kind> -> counter
-- ARGV[1] kind      ARGV[2] key   ARGV[3] mode: 'always' (the admin API), 'seed' (the file rule)
--                                 or 'restore' (only when nothing is stored: an agent's copy put back)
-- ARGV[4] file_hash of the item ('' for a removal)  ARGV[5] its revision (decimal ms)
-- ARGV[6] the entry JSON to store: {"by","file_hash","origin","rev_ms","updated_at","value"}
--
-- The file rule is catalog_seed_applies() of native-agent/store/catalog.cpp, exactly: nothing
-- stored -> apply unless it is a removal; the stored file_hash equals the item's -> refuse (the
-- file says nothing new); else apply only when the item's revision is greater than the stored
-- rev_ms. Revisions are below 2^53 (the store refuses others), so Lua's numbers compare them
-- exactly. A stored entry that does not decode is an error and nothing is written.
--
-- Replies {1, version}: written, the kind's new version; {0, stored}: refused, the stored entry
-- JSON (nil when nothing is stored).
local stored = redis.call('HGET', KEYS[1], ARGV[2])
if ARGV[3] == 'seed' then
  local applies
  if not stored then
    applies = ARGV[4] ~= ''
  else
    local ok, entry = pcall(cjson.decode, stored)
    if not ok or type(entry) ~= 'table' or type(entry.file_hash) ~= 'string'
        or type(entry.rev_ms) ~= 'number' then
      return redis.error_reply('ERR catalog_write: the stored entry ' .. ARGV[2] ..
                               ' is unreadable')
    end
    if entry.file_hash == ARGV[4] then
      applies = false
    else
      applies = tonumber(ARGV[5]) > entry.rev_ms
    end
  end
  if not applies then return {0, stored} end
elseif ARGV[3] == 'restore' then
  if stored then return {0, stored} end
elseif ARGV[3] ~= 'always' then
  return redis.error_reply('ERR catalog_write: mode must be always, seed or restore')
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[6])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
return {1, redis.call('HINCRBY', KEYS[3], ARGV[1], 1)}
