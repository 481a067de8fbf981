-- Maintenance settles one refresh-due index entry it examined, only if nobody moved it meanwhile
-- (a commit or a failure record rescores it in its own script; that newer score wins).
--
-- KEYS[1] due       quiver:{ns}:due                          ZSET, the refresh-due index
-- KEYS[2] manifest  quiver:{ns}:manifest:<cid>:<principal>   HASH, the record the entry is for;
--                   layout v1 only. In key layout v2 the index is on the connection's shard
--                   (quiver:{ns:s:<k>}:due) and the record in another slot: the caller reads the
--                   record absent first and sends no KEYS[2] (a commit between the two rescores
--                   the entry after writing the record, so its newer score still wins, unless it
--                   scored the very ms read here).
-- ARGV[1] the member, `<cid>:<principal>`
-- ARGV[2] the score maintenance read (ms)
-- ARGV[3] the new score (ms), or '' to forget the entry when its record is gone
--
-- Replies 1 when the entry was moved (or forgotten), 0 when it was left: its score is no longer
-- ARGV[2] (rescored by a write, or already gone), or its record exists again (not forgotten).
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not current or tonumber(current) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == '' then
  if #KEYS >= 2 and redis.call('EXISTS', KEYS[2]) == 1 then
    return 0
  end
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1])
return 1
