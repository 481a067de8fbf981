#include "shared/freshness.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

constexpr int64_t kT0 = 1'800'000'000'000;  // fetched_at of the entry under test
constexpr int64_t kMinute = 60'000;
constexpr int64_t kFresh = 15 * kMinute;
constexpr int64_t kMaxAge = 24 * 60 * kMinute;
constexpr char kHash[] = "c0ffee";

CacheEntryMeta entry_at(int64_t fetched_at) {
  CacheEntryMeta e;
  e.has_data = true;
  e.fetched_at_ms = fetched_at;
  e.config_hash = kHash;
  return e;
}

struct Row {
  const char* name;
  std::function<void(CacheEntryMeta&)> edit;  // applied to entry_at(kT0)
  int64_t now;
  Freshness state;
  bool servable;
  bool revalidate;
  bool refresh;  // decide_refresh, with no attempt recorded
};

// Every boundary of the default policy (15 min fresh, 24 h max age, refresh ahead at 12 min,
// 60 s floor for upstream ttlMs, 60 s clock skew tolerance). Fresh is [fetched_at, fresh_until),
// stale is [fresh_until, expires_at), expired from expires_at on.
const std::vector<Row>& rows() {
  auto none = [](CacheEntryMeta&) {};
  auto ttl = [](int64_t v) { return [v](CacheEntryMeta& e) { e.upstream_ttl_ms = v; }; };
  static const std::vector<Row> kRows = {
      {"just fetched", none, kT0, Freshness::kFresh, true, false, false},
      {"one ms before refresh_at", none, kT0 + 720'000 - 1, Freshness::kFresh, true, false, false},
      {"exactly at refresh_at", none, kT0 + 720'000, Freshness::kFresh, true, false, true},
      {"one ms before fresh_until", none, kT0 + kFresh - 1, Freshness::kFresh, true, false, true},
      {"exactly at fresh_until", none, kT0 + kFresh, Freshness::kStale, true, true, true},
      {"one ms before max age", none, kT0 + kMaxAge - 1, Freshness::kStale, true, true, true},
      {"exactly at max age", none, kT0 + kMaxAge, Freshness::kExpired, false, true, true},
      {"a year later", none, kT0 + 365 * 24 * 60 * kMinute, Freshness::kExpired, false, true, true},
      {"skew: 1 ms in the future", none, kT0 - 1, Freshness::kFresh, true, false, false},
      {"skew: exactly at tolerance", none, kT0 - kMinute, Freshness::kFresh, true, false, false},
      {"skew: beyond tolerance", none, kT0 - kMinute - 1, Freshness::kStale, true, true, true},
      {"upstream ttl below floor, before", ttl(30'000), kT0 + kMinute - 1, Freshness::kFresh, true,
       false, true},
      {"upstream ttl below floor, at floor", ttl(30'000), kT0 + kMinute, Freshness::kStale, true,
       true, true},
      {"upstream ttlMs 0 is floored", ttl(0), kT0 + kMinute - 1, Freshness::kFresh, true, false,
       true},
      {"negative upstream ttl is floored", ttl(-5), kT0 + kMinute - 1, Freshness::kFresh, true,
       false, true},
      {"upstream ttl 2 min, before refresh_at", ttl(120'000), kT0 + 96'000 - 1, Freshness::kFresh,
       true, false, false},
      {"upstream ttl 2 min, at refresh_at", ttl(120'000), kT0 + 96'000, Freshness::kFresh, true,
       false, true},
      {"upstream ttl 2 min, at fresh_until", ttl(120'000), kT0 + 120'000, Freshness::kStale, true,
       true, true},
      {"upstream ttl longer than policy", ttl(kMaxAge * 10), kT0 + kFresh, Freshness::kStale, true,
       true, true},
      {"short upstream ttl keeps max age", ttl(0), kT0 + kMaxAge - 1, Freshness::kStale, true, true,
       true},
      {"config changed", [](CacheEntryMeta& e) { e.config_hash = "0ld"; }, kT0, Freshness::kMiss,
       false, true, true},
      {"config hash never recorded", [](CacheEntryMeta& e) { e.config_hash.clear(); }, kT0,
       Freshness::kMiss, false, true, true},
      {"no data yet", [](CacheEntryMeta& e) { e.has_data = false; }, kT0, Freshness::kMiss, false,
       true, true},
  };
  return kRows;
}

TEST(Freshness, StateTableAtEveryBoundary) {
  const FreshnessPolicy policy;
  for (const Row& row : rows()) {
    CacheEntryMeta e = entry_at(kT0);
    row.edit(e);
    const Classification c = classify(e, policy, kHash, row.now);
    EXPECT_EQ(freshness_name(c.state), std::string(freshness_name(row.state))) << row.name;
    EXPECT_EQ(c.servable, row.servable) << row.name;
    EXPECT_EQ(c.revalidate, row.revalidate) << row.name;
    EXPECT_EQ(needs_refresh_ahead(e, policy, kHash, row.now), row.refresh) << row.name;
    if (c.state != Freshness::kMiss) {
      EXPECT_EQ(c.miss_reason, MissReason::kNone) << row.name;
      // The derived times agree with the state.
      EXPECT_LE(c.refresh_at_ms, c.fresh_until_ms) << row.name;
      EXPECT_LE(c.fresh_until_ms, c.expires_at_ms) << row.name;
      EXPECT_EQ(c.state == Freshness::kFresh, row.now < c.fresh_until_ms) << row.name;
      EXPECT_EQ(c.state == Freshness::kExpired, row.now >= c.expires_at_ms) << row.name;
    }
  }
}

TEST(Freshness, DefaultPolicyIsTheDesignBrief) {
  const FreshnessPolicy p;
  EXPECT_EQ(p.fresh_ttl_ms, 900000);
  EXPECT_EQ(p.max_age_ms, 86400000);
  EXPECT_DOUBLE_EQ(p.refresh_ahead_ratio, 0.8);
  EXPECT_EQ(p.min_upstream_ttl_ms, 60000);
  EXPECT_TRUE(validate_freshness_policy(p).ok());
}

TEST(Freshness, DerivedTimesOfAFreshEntry) {
  const Classification c = classify(entry_at(kT0), FreshnessPolicy{}, kHash, kT0 + 5 * kMinute);
  EXPECT_EQ(c.state, Freshness::kFresh);
  EXPECT_EQ(c.effective_fresh_ttl_ms, kFresh);
  EXPECT_EQ(c.age_ms, 5 * kMinute);
  EXPECT_EQ(c.fresh_until_ms, kT0 + kFresh);
  EXPECT_EQ(c.refresh_at_ms, kT0 + 12 * kMinute);  // 0.8 x 15 min
  EXPECT_EQ(c.expires_at_ms, kT0 + kMaxAge);
  EXPECT_FALSE(c.clock_skewed);
  EXPECT_FALSE(c.last_refresh_failed);
  EXPECT_TRUE(c.shareable_across_principals);
}

TEST(Freshness, WalkingTheClockOnlyEverMovesForward) {
  // fresh -> stale -> expired, each exactly once, at the documented instants.
  const FreshnessPolicy policy;
  const CacheEntryMeta e = entry_at(kT0);
  std::vector<int64_t> instants;
  for (int64_t t : {kT0, kT0 + 720'000, kT0 + kFresh, kT0 + kMaxAge}) {
    for (int64_t d = -2; d <= 2; ++d) instants.push_back(t + d);
  }
  Freshness previous = Freshness::kFresh;
  int changes = 0;
  for (int64_t now : instants) {
    const Freshness s = classify(e, policy, kHash, now).state;
    ASSERT_NE(s, Freshness::kMiss);
    ASSERT_GE(static_cast<int>(s), static_cast<int>(previous)) << "at " << now - kT0;
    if (s != previous) {
      ++changes;
      EXPECT_TRUE(now == kT0 + kFresh || now == kT0 + kMaxAge) << "changed at " << now - kT0;
    }
    previous = s;
  }
  EXPECT_EQ(changes, 2);
}

TEST(Freshness, MissesSayWhyAndCarryNoTimes) {
  const FreshnessPolicy policy;
  Classification none = classify(std::nullopt, policy, kHash, kT0);
  EXPECT_EQ(none.state, Freshness::kMiss);
  EXPECT_STREQ(miss_reason_name(none.miss_reason), "no_entry");
  EXPECT_FALSE(none.servable);
  EXPECT_TRUE(none.revalidate);
  EXPECT_FALSE(none.shareable_across_principals);
  EXPECT_EQ(none.fresh_until_ms, 0);
  EXPECT_EQ(none.expires_at_ms, 0);

  CacheEntryMeta changed = entry_at(kT0);
  changed.config_hash = "other";
  Classification c = classify(changed, policy, kHash, kT0 + 1);
  EXPECT_EQ(c.miss_reason, MissReason::kConfigChanged);
  EXPECT_FALSE(c.servable);  // data there, but listed under another configuration
  EXPECT_EQ(c.refresh_at_ms, 0);

  // An empty current hash never matches, not even an empty recorded one.
  CacheEntryMeta blank = entry_at(kT0);
  blank.config_hash.clear();
  EXPECT_EQ(classify(blank, policy, "", kT0).miss_reason, MissReason::kConfigChanged);
}

TEST(Freshness, CouldNotLoadIsNotNotLoadedYet) {
  const FreshnessPolicy policy;
  CacheEntryMeta pending;
  pending.last_attempt_at_ms = kT0;
  Classification p = classify(pending, policy, kHash, kT0 + 1);
  EXPECT_EQ(p.miss_reason, MissReason::kNoData);
  EXPECT_FALSE(p.last_refresh_failed);

  CacheEntryMeta failed = pending;
  failed.last_error = RefreshError{"UPSTREAM_UNAVAILABLE", "connection refused", kT0};
  Classification f = classify(failed, policy, kHash, kT0 + 1);
  EXPECT_EQ(f.miss_reason, MissReason::kNoData);
  EXPECT_TRUE(f.last_refresh_failed);
}

TEST(Freshness, AFailedRefreshKeepsServingTheLastGoodData) {
  CacheEntryMeta e = entry_at(kT0);
  e.last_error = RefreshError{"TIMEOUT", "listing deadline of 3500 ms passed", kT0 + kFresh + 5};
  const Classification c = classify(e, FreshnessPolicy{}, kHash, kT0 + kFresh + 10);
  EXPECT_EQ(c.state, Freshness::kStale);
  EXPECT_TRUE(c.servable);
  EXPECT_TRUE(c.last_refresh_failed);

  // An error older than the data is history, not the current state.
  e.last_error->at_ms = kT0 - 1;
  EXPECT_FALSE(classify(e, FreshnessPolicy{}, kHash, kT0 + 1).last_refresh_failed);
}

// ADR-004: data committed while a list failed is stored as never fresh; served (stale),
// revalidated, then expires on the usual schedule.
TEST(Freshness, DataWithAFailedListIsNeverFresh) {
  CacheEntryMeta e = entry_at(kT0);
  e.never_fresh = true;
  e.upstream_ttl_ms = 0;
  e.last_error = RefreshError{"TIMEOUT", "prompts/list could not be loaded", kT0 + 5};
  for (int64_t now : {kT0, kT0 + 1, kT0 + kMinute, kT0 + kFresh}) {
    const Classification c = classify(e, FreshnessPolicy{}, kHash, now);
    EXPECT_EQ(c.state, Freshness::kStale) << now - kT0;
    EXPECT_TRUE(c.servable);
    EXPECT_TRUE(c.revalidate);
    EXPECT_TRUE(c.last_refresh_failed);
    EXPECT_EQ(c.fresh_until_ms, kT0);
    EXPECT_EQ(c.refresh_at_ms, kT0);
  }
  EXPECT_EQ(classify(e, FreshnessPolicy{}, kHash, kT0 + kMaxAge).state, Freshness::kExpired);
  // The maintenance loop: due, but backing off while the failure is recent.
  RefreshDecision d = decide_refresh(e, FreshnessPolicy{}, kHash, kT0 + 10);
  EXPECT_FALSE(d.refresh);
  EXPECT_EQ(d.reason, RefreshReason::kBackingOff);
  EXPECT_TRUE(decide_refresh(e, FreshnessPolicy{}, kHash, kT0 + 5 + kMinute).refresh);
  // The same data without the mark is fresh.
  e.never_fresh = false;
  EXPECT_EQ(classify(e, FreshnessPolicy{}, kHash, kT0 + 1).state, Freshness::kFresh);
}

TEST(Freshness, RetryBackoffDoublesUpToItsBound) {
  EXPECT_EQ(retry_backoff_ms(1, 300'000), 2'000);
  EXPECT_EQ(retry_backoff_ms(2, 300'000), 4'000);
  EXPECT_EQ(retry_backoff_ms(3, 300'000), 8'000);
  EXPECT_EQ(retry_backoff_ms(8, 300'000), 256'000);
  EXPECT_EQ(retry_backoff_ms(9, 300'000), 300'000);
  EXPECT_EQ(retry_backoff_ms(1'000'000, 300'000), 300'000);  // no overflow
  EXPECT_EQ(retry_backoff_ms(1, 500), 500);                  // the bound applies from the start
  EXPECT_EQ(retry_backoff_ms(0, 0), 1);
}

TEST(Freshness, UpstreamTtlIsFlooredAndCapped) {
  const FreshnessPolicy p;
  EXPECT_EQ(effective_fresh_ttl_ms(p, std::nullopt), kFresh);
  EXPECT_EQ(effective_fresh_ttl_ms(p, 0), kMinute);
  EXPECT_EQ(effective_fresh_ttl_ms(p, -1), kMinute);
  EXPECT_EQ(effective_fresh_ttl_ms(p, kMinute - 1), kMinute);
  EXPECT_EQ(effective_fresh_ttl_ms(p, 5 * kMinute), 5 * kMinute);
  EXPECT_EQ(effective_fresh_ttl_ms(p, kFresh + 1), kFresh);
  EXPECT_EQ(effective_fresh_ttl_ms(p, std::numeric_limits<int64_t>::max()), kFresh);

  CacheEntryMeta e = entry_at(kT0);
  e.upstream_ttl_ms = 2 * kMinute;
  const Classification c = classify(e, p, kHash, kT0);
  EXPECT_EQ(c.effective_fresh_ttl_ms, 2 * kMinute);
  EXPECT_EQ(c.refresh_at_ms, kT0 + 96'000);
  EXPECT_EQ(c.expires_at_ms, kT0 + kMaxAge);
}

TEST(Freshness, PrivateScopeIsNeverShareable) {
  const FreshnessPolicy policy;
  CacheEntryMeta e = entry_at(kT0);
  for (const char* scope : {"", "public", "private", "PRIVATE", "shared"}) {
    e.cache_scope = cache_scope_from_string(scope);
    const bool expect_shareable = std::string(scope).empty() || std::string(scope) == "public";
    EXPECT_EQ(classify(e, policy, kHash, kT0).shareable_across_principals, expect_shareable)
        << "cacheScope '" << scope << "'";
  }
  EXPECT_STREQ(cache_scope_name(cache_scope_from_string("private")), "private");
  EXPECT_STREQ(cache_scope_name(cache_scope_from_string("public")), "public");
  EXPECT_STREQ(cache_scope_name(cache_scope_from_string("")), "");
}

TEST(Freshness, ClockSkewBeyondToleranceIsServedButRevalidated) {
  const FreshnessPolicy policy;
  const int64_t now = kT0 - 10 * kMinute;  // the writer's clock runs 10 min ahead
  const Classification c = classify(entry_at(kT0), policy, kHash, now);
  EXPECT_EQ(c.state, Freshness::kStale);
  EXPECT_TRUE(c.clock_skewed);
  EXPECT_TRUE(c.servable);
  EXPECT_TRUE(c.revalidate);
  EXPECT_EQ(c.age_ms, 0);
  EXPECT_EQ(c.fresh_until_ms, now);
  EXPECT_GT(c.expires_at_ms, now);

  // Within tolerance: ordinary skew, age 0, fresh.
  const Classification ok = classify(entry_at(kT0), policy, kHash, kT0 - 1000);
  EXPECT_EQ(ok.state, Freshness::kFresh);
  EXPECT_FALSE(ok.clock_skewed);
  EXPECT_EQ(ok.age_ms, 0);
}

TEST(Freshness, AWebhookMarksDataListedBeforeItStale) {
  const FreshnessPolicy policy;
  CacheEntryMeta e = entry_at(kT0);
  e.invalidated_at_ms = kT0 + kMinute;  // a webhook a minute after the listing started
  Classification before = classify(e, policy, kHash, kT0 + kMinute - 1);
  EXPECT_EQ(before.state, Freshness::kFresh);
  EXPECT_EQ(before.fresh_until_ms, kT0 + kMinute);
  EXPECT_EQ(before.refresh_at_ms, kT0 + kMinute);
  Classification after = classify(e, policy, kHash, kT0 + kMinute);
  EXPECT_EQ(after.state, Freshness::kStale);
  EXPECT_TRUE(after.servable);
  EXPECT_TRUE(after.revalidate);
  EXPECT_EQ(after.expires_at_ms, kT0 + kMaxAge);  // stale, not expired: still served
  EXPECT_EQ(decide_refresh(e, policy, kHash, kT0 + kMinute).reason, RefreshReason::kStale);

  // A listing that started at the webhook's millisecond or before does not clear it.
  e.invalidated_at_ms = kT0;
  EXPECT_EQ(classify(e, policy, kHash, kT0 + 1).state, Freshness::kStale);
  // One that started after it does: the mark is history.
  e.invalidated_at_ms = kT0 - 1;
  EXPECT_EQ(classify(e, policy, kHash, kT0 + 1).state, Freshness::kFresh);
  EXPECT_EQ(classify(e, policy, kHash, kT0 + 1).fresh_until_ms, kT0 + kFresh);
}

TEST(Freshness, ExtremeTimestampsSaturateInsteadOfOverflowing) {
  const FreshnessPolicy policy;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  Classification far = classify(entry_at(kMax - 5), policy, kHash, kMax - 10);
  EXPECT_EQ(far.state, Freshness::kFresh);
  EXPECT_EQ(far.fresh_until_ms, kMax);
  EXPECT_EQ(far.expires_at_ms, kMax);

  Classification ancient = classify(entry_at(kMin), policy, kHash, kMax);
  EXPECT_EQ(ancient.state, Freshness::kExpired);
  EXPECT_EQ(ancient.age_ms, kMax);

  Classification bogus = classify(entry_at(kMax), policy, kHash, kMin);
  EXPECT_EQ(bogus.state, Freshness::kStale);
  EXPECT_TRUE(bogus.clock_skewed);
}

TEST(Freshness, PolicyValidationNamesTheBadSetting) {
  struct Case {
    std::function<void(FreshnessPolicy&)> edit;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {[](FreshnessPolicy& p) { p.fresh_ttl_ms = 0; }, "fresh_ttl_ms"},
      {[](FreshnessPolicy& p) { p.max_age_ms = p.fresh_ttl_ms - 1; }, "max_age_ms"},
      {[](FreshnessPolicy& p) { p.refresh_ahead_ratio = 0; }, "refresh_ahead_ratio"},
      {[](FreshnessPolicy& p) { p.refresh_ahead_ratio = 1.01; }, "refresh_ahead_ratio"},
      {[](FreshnessPolicy& p) { p.refresh_ahead_ratio = std::nan(""); }, "refresh_ahead_ratio"},
      {[](FreshnessPolicy& p) { p.min_upstream_ttl_ms = -1; }, "min_upstream_ttl_ms"},
      {[](FreshnessPolicy& p) { p.min_upstream_ttl_ms = p.fresh_ttl_ms + 1; },
       "min_upstream_ttl_ms"},
      {[](FreshnessPolicy& p) { p.clock_skew_tolerance_ms = -1; }, "clock_skew_tolerance_ms"},
      {[](FreshnessPolicy& p) { p.retry_after_failure_ms = -1; }, "retry_after_failure_ms"},
  };
  for (const Case& c : cases) {
    FreshnessPolicy p;
    c.edit(p);
    Status s = validate_freshness_policy(p);
    ASSERT_FALSE(s.ok()) << c.mentions;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message.find(c.mentions), std::string::npos) << s.error().message;
  }
  FreshnessPolicy edge;
  edge.refresh_ahead_ratio = 1.0;
  edge.min_upstream_ttl_ms = edge.fresh_ttl_ms;
  edge.max_age_ms = edge.fresh_ttl_ms;
  EXPECT_TRUE(validate_freshness_policy(edge).ok());
}

TEST(Freshness, AnInvalidPolicyIsClampedNotObeyed) {
  FreshnessPolicy p;
  p.fresh_ttl_ms = -5;                   // -> 1 ms
  p.max_age_ms = -5;                     // -> fresh_ttl
  p.refresh_ahead_ratio = std::nan("");  // -> 1
  p.min_upstream_ttl_ms = kMaxAge;       // -> fresh_ttl
  const Classification c = classify(entry_at(kT0), p, kHash, kT0);
  EXPECT_EQ(c.state, Freshness::kFresh);
  EXPECT_EQ(c.fresh_until_ms, kT0 + 1);
  EXPECT_EQ(c.refresh_at_ms, kT0 + 1);
  EXPECT_EQ(c.expires_at_ms, kT0 + 1);
  EXPECT_EQ(classify(entry_at(kT0), p, kHash, kT0 + 1).state, Freshness::kExpired);

  FreshnessPolicy big_ratio;
  big_ratio.refresh_ahead_ratio = 7;
  EXPECT_EQ(classify(entry_at(kT0), big_ratio, kHash, kT0).refresh_at_ms, kT0 + kFresh);
}

TEST(Freshness, RefreshDecisionForTheMaintenanceLoop) {
  const FreshnessPolicy policy;
  // Not due: look again at refresh_at.
  RefreshDecision d = decide_refresh(entry_at(kT0), policy, kHash, kT0 + kMinute);
  EXPECT_FALSE(d.refresh);
  EXPECT_STREQ(refresh_reason_name(d.reason), "none");
  EXPECT_EQ(d.next_check_at_ms, kT0 + 12 * kMinute);

  struct Case {
    const char* name;
    std::optional<CacheEntryMeta> entry;
    int64_t now;
    RefreshReason reason;
  };
  CacheEntryMeta changed = entry_at(kT0);
  changed.config_hash = "old";
  const std::vector<Case> cases = {
      {"ahead", entry_at(kT0), kT0 + 12 * kMinute, RefreshReason::kAhead},
      {"stale", entry_at(kT0), kT0 + kFresh, RefreshReason::kStale},
      {"expired", entry_at(kT0), kT0 + kMaxAge, RefreshReason::kExpired},
      {"no entry", std::nullopt, kT0, RefreshReason::kMiss},
      {"config changed", changed, kT0 + 1, RefreshReason::kMiss},
  };
  for (const Case& c : cases) {
    d = decide_refresh(c.entry, policy, kHash, c.now);
    EXPECT_TRUE(d.refresh) << c.name;
    EXPECT_EQ(d.reason, c.reason) << c.name;
    EXPECT_EQ(d.next_check_at_ms, c.now) << c.name;
  }
}

TEST(Freshness, RefreshBacksOffAfterAFailureNewerThanTheData) {
  const FreshnessPolicy policy;
  CacheEntryMeta e = entry_at(kT0);
  const int64_t failed_at = kT0 + kFresh + 1000;
  e.last_attempt_at_ms = failed_at - 3500;
  e.last_error = RefreshError{"UPSTREAM_UNAVAILABLE", "503", failed_at};

  RefreshDecision d = decide_refresh(e, policy, kHash, failed_at + kMinute - 1);
  EXPECT_FALSE(d.refresh);
  EXPECT_STREQ(refresh_reason_name(d.reason), "backing_off");
  EXPECT_EQ(d.next_check_at_ms, failed_at + kMinute);
  d = decide_refresh(e, policy, kHash, failed_at + kMinute);
  EXPECT_TRUE(d.refresh);
  EXPECT_EQ(d.reason, RefreshReason::kStale);

  // An attempt still running (started, no data, no error yet) is not doubled either.
  CacheEntryMeta running = entry_at(kT0);
  running.last_attempt_at_ms = kT0 + kFresh;
  EXPECT_FALSE(needs_refresh_ahead(running, policy, kHash, kT0 + kFresh + 1));

  // The attempt that produced the current data does not delay the next refresh.
  CacheEntryMeta done = entry_at(kT0);
  done.last_attempt_at_ms = kT0 - 2000;
  EXPECT_TRUE(needs_refresh_ahead(done, policy, kHash, kT0 + 12 * kMinute));

  // A first listing that failed backs off too.
  CacheEntryMeta never;
  never.last_error = RefreshError{"TRANSPORT", "spawn failed", kT0};
  EXPECT_FALSE(needs_refresh_ahead(never, policy, kHash, kT0 + 1));
  EXPECT_TRUE(needs_refresh_ahead(never, policy, kHash, kT0 + kMinute));

  // A failure stamped far in the future (bad clock) must not block the key forever.
  CacheEntryMeta future = entry_at(kT0);
  future.last_error = RefreshError{"TIMEOUT", "", kT0 + 1000 * kMaxAge};
  EXPECT_TRUE(needs_refresh_ahead(future, policy, kHash, kT0 + kFresh));
}

TEST(Freshness, NamesAreStable) {
  EXPECT_STREQ(freshness_name(Freshness::kFresh), "fresh");
  EXPECT_STREQ(freshness_name(Freshness::kStale), "stale");
  EXPECT_STREQ(freshness_name(Freshness::kExpired), "expired");
  EXPECT_STREQ(freshness_name(Freshness::kMiss), "miss");
  EXPECT_STREQ(miss_reason_name(MissReason::kNoData), "no_data");
  EXPECT_STREQ(miss_reason_name(MissReason::kConfigChanged), "config_changed");
  EXPECT_STREQ(refresh_reason_name(RefreshReason::kAhead), "ahead");
  EXPECT_STREQ(refresh_reason_name(RefreshReason::kExpired), "expired");
}

}  // namespace
}  // namespace quiver
