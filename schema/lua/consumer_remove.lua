-- Remove one dead consumer from the revalidation consumer group, only if nothing is pending for it.
--
-- Every agent start and every reload joins the group under a new consumer name; the old names stay
-- in the group until removed. The agent's maintenance pass lists the group's consumers
-- (XINFO CONSUMERS) and, for each one idle long enough, runs this script: XGROUP DELCONSUMER
-- would drop the consumer's pending entries with it, so a consumer that still has any is kept
-- (claim_stale_revalidations takes them over first; a later pass removes it). Checking and
-- removing in one script leaves no gap for a delivery in between.
--
-- KEYS[1] stream    quiver:{ns}:revalidate
-- ARGV[1] group     quiver-agents
-- ARGV[2] consumer  the consumer to remove
--
-- Replies 1 when removed, 0 when kept (entries pending) or not a member of the group.
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #pending > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
