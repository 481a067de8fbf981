#include "shared/edge_cache.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace quiver {
namespace {

constexpr int64_t kT0 = 1'800'000'000'000;

EdgeCacheOptions small(std::size_t max_bytes = 4096) {
  EdgeCacheOptions o;
  o.ttl_ms = 2'000;
  o.stale_if_error_ms = 60'000;
  o.max_bytes = max_bytes;
  o.max_entry_bytes = max_bytes;
  return o;
}

std::string value_of(const EdgeCache::Value& v) { return v ? *v : std::string("<none>"); }

TEST(EdgeCache, ServesAFreshEntryUntilItsTtlThenMisses) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("alice", "reply-1", 7, kT0));
  EXPECT_EQ(value_of(cache.get_fresh("alice", kT0)), "reply-1");
  EXPECT_EQ(value_of(cache.get_fresh("alice", kT0 + 1'999)), "reply-1");
  EXPECT_EQ(cache.get_fresh("alice", kT0 + 2'000), nullptr);  // the TTL is the bound
  EXPECT_EQ(cache.get_fresh("bob", kT0), nullptr);
  EdgeCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.entries, 1u);
}

TEST(EdgeCache, AnEntryWithItsOwnFreshUntilStopsBeingFreshThenButStaysForStaleIfError) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("answer", "rendered", 1, kT0, kT0 + 700));
  int64_t age = -1;
  EXPECT_EQ(value_of(cache.get_fresh("answer", kT0 + 699, &age)), "rendered");
  EXPECT_EQ(age, 699);
  EXPECT_EQ(cache.get_fresh("answer", kT0 + 700), nullptr);  // before the TTL: its own bound
  EXPECT_EQ(value_of(cache.get_stale("answer", kT0 + 700)), "rendered");
}

TEST(EdgeCache, AClockThatGoesBackwardsCountsAsAgeZero) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("alice", "r", 1, kT0));
  EXPECT_EQ(value_of(cache.get_fresh("alice", kT0 - 50'000)), "r");
}

TEST(EdgeCache, PastItsTtlAnEntryIsStillThereForStaleIfErrorUntilItsBound) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("alice", "reply", 3, kT0));
  int64_t age = -1;
  EXPECT_EQ(value_of(cache.get_stale("alice", kT0 + 30'000, &age)), "reply");
  EXPECT_EQ(age, 30'000);
  EXPECT_EQ(value_of(cache.get_stale("alice", kT0 + 59'999)), "reply");
  EXPECT_EQ(cache.get_stale("alice", kT0 + 60'000), nullptr);
  EXPECT_EQ(cache.get_stale("bob", kT0), nullptr);
  EXPECT_EQ(cache.stats().stale_served, 2u);
}

TEST(EdgeCache, ANewerEpochDropsEveryOlderEntryEvenForStaleIfError) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("alice", "a@5", 5, kT0));
  ASSERT_TRUE(cache.put("bob", "b@5", 5, kT0));
  // Another caller's read saw epoch 6: a grant or a preference changed somewhere.
  ASSERT_TRUE(cache.put("carol", "c@6", 6, kT0 + 1));
  EXPECT_EQ(cache.get_fresh("alice", kT0 + 2), nullptr);
  EXPECT_EQ(cache.get_stale("bob", kT0 + 2), nullptr);
  EXPECT_EQ(value_of(cache.get_fresh("carol", kT0 + 2)), "c@6");
  EXPECT_EQ(cache.stats().epoch, 6);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().superseded, 2u);
}

TEST(EdgeCache, AReadOlderThanTheNewestEpochSeenIsNotKept) {
  EdgeCache cache(small());
  cache.observe_epoch(9);
  EXPECT_FALSE(cache.put("alice", "a@8", 8, kT0));  // a slow request finishing late
  EXPECT_EQ(cache.get_stale("alice", kT0), nullptr);
  EXPECT_TRUE(cache.put("alice", "a@9", 9, kT0));
  cache.observe_epoch(8);  // going back changes nothing
  EXPECT_EQ(value_of(cache.get_fresh("alice", kT0)), "a@9");
}

TEST(EdgeCache, ObservingANewerEpochWithoutStoringDropsOlderEntries) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("alice", "a", 1, kT0));
  cache.observe_epoch(2);
  EXPECT_EQ(cache.get_fresh("alice", kT0), nullptr);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST(EdgeCache, PutReplacesTheEntryUnderTheSameKey) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("alice", "old", 1, kT0));
  ASSERT_TRUE(cache.put("alice", "new", 1, kT0 + 1'500));
  EXPECT_EQ(cache.stats().entries, 1u);
  // The TTL runs from the newer store.
  EXPECT_EQ(value_of(cache.get_fresh("alice", kT0 + 3'000)), "new");
}

TEST(EdgeCache, StaysWithinItsByteBoundByEvictingTheLeastRecentlyUsed) {
  EdgeCache cache(small(1'000));
  std::string v(200, 'x');
  ASSERT_TRUE(cache.put("a", v, 1, kT0));
  ASSERT_TRUE(cache.put("b", v, 1, kT0));
  ASSERT_TRUE(cache.put("c", v, 1, kT0));
  ASSERT_NE(cache.get_fresh("a", kT0), nullptr);  // a is now the most recently used
  ASSERT_TRUE(cache.put("d", v, 1, kT0));         // no room for four: b goes
  EXPECT_NE(cache.get_fresh("a", kT0), nullptr);
  EXPECT_EQ(cache.get_fresh("b", kT0), nullptr);
  EXPECT_NE(cache.get_fresh("c", kT0), nullptr);
  EXPECT_NE(cache.get_fresh("d", kT0), nullptr);
  EXPECT_LE(cache.stats().bytes, 1'000u);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

TEST(EdgeCache, AValueOverTheEntryBoundIsNotKeptAndDropsAnOlderCopy) {
  EdgeCacheOptions o = small(10'000);
  o.max_entry_bytes = 1'000;
  EdgeCache cache(o);
  ASSERT_TRUE(cache.put("alice", "small", 1, kT0));
  EXPECT_FALSE(cache.put("alice", std::string(2'000, 'x'), 1, kT0));
  EXPECT_EQ(cache.get_stale("alice", kT0), nullptr);  // never the outdated small one
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST(EdgeCache, TtlZeroNeverHitsButKeepsACopyForStaleIfError) {
  EdgeCacheOptions o = small();
  o.ttl_ms = 0;
  EdgeCache cache(o);
  ASSERT_TRUE(cache.put("alice", "r", 1, kT0));
  EXPECT_EQ(cache.get_fresh("alice", kT0), nullptr);
  EXPECT_EQ(value_of(cache.get_stale("alice", kT0 + 10)), "r");
}

TEST(EdgeCache, MaxBytesZeroTurnsItOff) {
  EdgeCache cache(small(0));
  EXPECT_FALSE(cache.put("alice", "r", 1, kT0));
  EXPECT_EQ(cache.get_stale("alice", kT0), nullptr);
}

TEST(EdgeCache, AHandedOutValueOutlivesItsEviction) {
  EdgeCache cache(small(600));
  ASSERT_TRUE(cache.put("a", std::string(300, 'a'), 1, kT0));
  EdgeCache::Value held = cache.get_fresh("a", kT0);
  ASSERT_TRUE(cache.put("b", std::string(300, 'b'), 1, kT0));  // evicts a
  EXPECT_EQ(cache.get_fresh("a", kT0), nullptr);
  EXPECT_EQ(*held, std::string(300, 'a'));
}

TEST(EdgeCache, ARevalidationIsClaimedOncePerPeriod) {
  EdgeCache cache(small());
  EXPECT_TRUE(cache.claim_revalidation("github\nshared", kT0));
  EXPECT_FALSE(cache.claim_revalidation("github\nshared", kT0 + 1));
  EXPECT_FALSE(cache.claim_revalidation("github\nshared", kT0 + 4'999));
  EXPECT_TRUE(cache.claim_revalidation("jira\nshared", kT0 + 1));  // per key
  EXPECT_TRUE(cache.claim_revalidation("github\nshared", kT0 + 5'000));
}

TEST(EdgeCache, AReleasedClaimCanBeClaimedAgainAtOnce) {
  EdgeCache cache(small());
  EXPECT_TRUE(cache.claim_revalidation("k", kT0));
  cache.release_revalidation("k");  // queuing it failed: Redis was down
  EXPECT_TRUE(cache.claim_revalidation("k", kT0 + 1));
}

TEST(EdgeCache, ClaimsStayBounded) {
  EdgeCacheOptions o = small();
  o.max_claims = 3;
  EdgeCache cache(o);
  EXPECT_TRUE(cache.claim_revalidation("a", kT0));
  EXPECT_TRUE(cache.claim_revalidation("b", kT0));
  EXPECT_TRUE(cache.claim_revalidation("c", kT0));
  // Full: expired claims are pruned first; the live one stays claimed.
  EXPECT_TRUE(cache.claim_revalidation("d", kT0 + 6'000));
  EXPECT_FALSE(cache.claim_revalidation("d", kT0 + 6'001));
  EXPECT_TRUE(cache.claim_revalidation("a", kT0 + 6'001));
  EXPECT_TRUE(cache.claim_revalidation("x", kT0 + 6'002));
  // Full of live claims: they are forgotten (more round trips to the Redis gate), never refused.
  EXPECT_TRUE(cache.claim_revalidation("y", kT0 + 6'003));
  EXPECT_TRUE(cache.claim_revalidation("d", kT0 + 6'004));
}

TEST(EdgeCache, ClearEmptiesEverything) {
  EdgeCache cache(small());
  ASSERT_TRUE(cache.put("a", "r", 1, kT0));
  EXPECT_TRUE(cache.claim_revalidation("k", kT0));
  cache.clear();
  EXPECT_EQ(cache.get_stale("a", kT0), nullptr);
  EXPECT_TRUE(cache.claim_revalidation("k", kT0));
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST(EdgeCache, OptionsAreValidated) {
  EXPECT_TRUE(validate_edge_cache_options(EdgeCacheOptions{}).ok());
  EdgeCacheOptions o;
  o.ttl_ms = -1;
  EXPECT_FALSE(validate_edge_cache_options(o).ok());
  o = EdgeCacheOptions{};
  o.stale_if_error_ms = o.ttl_ms - 1;
  EXPECT_FALSE(validate_edge_cache_options(o).ok());
  o = EdgeCacheOptions{};
  o.max_entry_bytes = o.max_bytes + 1;
  EXPECT_FALSE(validate_edge_cache_options(o).ok());
  o = EdgeCacheOptions{};
  o.revalidation_claim_ms = -5;
  EXPECT_FALSE(validate_edge_cache_options(o).ok());
}

// ---- BodyCache: manifest bodies by content ----------------------------------------------------

TEST(BodyCache, KeepsABodyWithoutExpiryUntilTheByteBoundEvictsTheLeastRecentlyUsed) {
  const std::string a(64, 'a'), b(64, 'b'), c(64, 'c');
  BodyCache cache(3 * 1024);
  ASSERT_TRUE(cache.put(a, std::string(700, 'A')));
  ASSERT_TRUE(cache.put(b, std::string(700, 'B')));
  EXPECT_EQ(cache.entries(), 2u);
  // No clock at all: content named by its hash never goes stale.
  EXPECT_EQ(value_of(cache.find(a)), std::string(700, 'A'));  // now the most recently used
  ASSERT_TRUE(cache.put(c, std::string(1500, 'C')));          // b, the least recently used, goes
  EXPECT_EQ(cache.find(b), nullptr);
  EXPECT_NE(cache.find(a), nullptr);
  EXPECT_NE(cache.find(c), nullptr);
  EXPECT_LE(cache.bytes(), 3u * 1024);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TEST(BodyCache, ABodyOverTheBoundIsNotKeptAndABoundOfZeroTurnsItOff) {
  BodyCache cache(1024);
  EXPECT_FALSE(cache.put(std::string(64, 'a'), std::string(2048, 'x')));
  EXPECT_EQ(cache.entries(), 0u);
  BodyCache off(0);
  EXPECT_FALSE(off.put(std::string(64, 'a'), "{}"));
  EXPECT_EQ(off.find(std::string(64, 'a')), nullptr);
}

TEST(BodyCache, AHandedOutBodyOutlivesItsEviction) {
  BodyCache cache(1024);
  ASSERT_TRUE(cache.put(std::string(64, 'a'), std::string(600, 'A')));
  BodyCache::Value held = cache.find(std::string(64, 'a'));
  ASSERT_TRUE(cache.put(std::string(64, 'b'), std::string(600, 'B')));  // evicts a
  EXPECT_EQ(cache.find(std::string(64, 'a')), nullptr);
  EXPECT_EQ(value_of(held), std::string(600, 'A'));  // a request still rendering it keeps it
}

}  // namespace
}  // namespace quiver
