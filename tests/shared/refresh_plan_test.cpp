#include "shared/refresh_plan.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/freshness.h"
#include "shared/manifest.h"

namespace quiver {
namespace {

constexpr int64_t kT0 = 1'780'000'000'000;
constexpr char kHash[] = "hash-now";

Listing good_listing() {
  Listing l;
  l.protocol_version = "2025-11-25";
  l.server_info = {{"name", "demo"}, {"version", "1.0.0"}};
  l.server_capabilities = {{"tools", Json::object()}, {"prompts", Json::object()}};
  l.list(ListKind::kTools).state = ListState::kOk;
  l.list(ListKind::kTools).items = {{{"name", "echo"}, {"inputSchema", {{"type", "object"}}}},
                                    {{"name", "add"}, {"inputSchema", {{"type", "object"}}}}};
  l.list(ListKind::kResources).state = ListState::kAbsent;
  l.list(ListKind::kResourceTemplates).state = ListState::kAbsent;
  l.list(ListKind::kPrompts).state = ListState::kOk;
  return l;
}

Listing tools_failed() {
  Listing l = good_listing();
  ListOutcome& tools = l.list(ListKind::kTools);
  tools.state = ListState::kFailed;
  tools.error = Error(ErrorCode::kTimeout, "deadline passed");
  tools.items = {{{"name", "half"}}};
  tools.pages = 1;
  return l;
}

LastGoodManifest last_good(const std::string& hash, int64_t fetched_at) {
  Result<Manifest> m = manifest_from_listing(good_listing());
  EXPECT_TRUE(m.ok());
  Result<EncodedManifest> e = encode_manifest(*m);
  EXPECT_TRUE(e.ok());
  return LastGoodManifest{true, hash, fetched_at, e->bytes};
}

// ---- already_answered ----

struct AnsweredCase {
  const char* name;
  bool stored;
  bool has_data;
  int64_t fetched_at;
  std::optional<int64_t> queued_at;
  const char* hash;
  int64_t now;
  bool answered;
};

TEST(RefreshPlan, AlreadyAnsweredTable) {
  const FreshnessPolicy policy;
  const std::vector<AnsweredCase> cases = {
      {"not a queued request", true, true, kT0, std::nullopt, kHash, kT0, false},
      {"nothing stored", false, false, 0, kT0, kHash, kT0, false},
      {"an error record only", true, false, kT0, kT0, kHash, kT0, false},
      {"listed before the request", true, true, kT0 - 1, kT0, kHash, kT0, false},
      {"listed at the request", true, true, kT0, kT0, kHash, kT0, true},
      {"listed after the request", true, true, kT0 + 5, kT0, kHash, kT0 + 10, true},
      {"listed after, but under another config", true, true, kT0 + 5, kT0, "old", kT0 + 10, false},
      {"listed after, but stale by now", true, true, kT0, kT0, kHash, kT0 + policy.fresh_ttl_ms + 1,
       false},
  };
  for (const AnsweredCase& c : cases) {
    std::optional<CacheEntryMeta> stored;
    if (c.stored) {
      CacheEntryMeta m;
      m.has_data = c.has_data;
      m.fetched_at_ms = c.fetched_at;
      m.config_hash = c.hash;
      stored = m;
    }
    EXPECT_EQ(already_answered(stored, c.queued_at, policy, kHash, c.now), c.answered) << c.name;
  }
}

// ---- plan_refresh ----

enum class Last { kNone, kSameConfig, kOtherConfig, kUnreadable };

struct PlanCase {
  const char* name;
  bool listing_ok;
  bool tools_fail;
  Last last;
  int64_t max_bytes;
  RefreshWrite write;
  bool error;
  bool release_with_commit;
  bool tools_incomplete;  // plan.incomplete is {kTools}, else empty
  LastGoodUse last_good;
  bool never_fresh;
};

TEST(RefreshPlan, PlanTable) {
  const std::vector<PlanCase> cases = {
      {"complete listing", true, false, Last::kNone, 262144, RefreshWrite::kCommit, false, true,
       false, LastGoodUse::kNotNeeded, false},
      {"listing failed", false, false, Last::kSameConfig, 262144, RefreshWrite::kRecordFailure,
       true, true, false, LastGoodUse::kNotNeeded, false},
      {"a list failed, no last good", true, true, Last::kNone, 262144, RefreshWrite::kCommit, true,
       false, true, LastGoodUse::kNone, true},
      {"a list failed, last good kept", true, true, Last::kSameConfig, 262144,
       RefreshWrite::kCommit, true, false, true, LastGoodUse::kKept, true},
      {"a list failed, last good under another config", true, true, Last::kOtherConfig, 262144,
       RefreshWrite::kCommit, true, false, true, LastGoodUse::kNone, true},
      {"a list failed, last good unreadable", true, true, Last::kUnreadable, 262144,
       RefreshWrite::kCommit, true, false, true, LastGoodUse::kUnreadable, true},
      {"over the manifest bound", true, false, Last::kNone, 16, RefreshWrite::kRecordFailure, true,
       true, false, LastGoodUse::kNotNeeded, false},
  };
  for (const PlanCase& c : cases) {
    Listing listing = c.tools_fail ? tools_failed() : good_listing();
    LastGoodManifest last;
    if (c.last == Last::kSameConfig) last = last_good(kHash, kT0 - 1000);
    if (c.last == Last::kOtherConfig) last = last_good("old", kT0 - 1000);
    if (c.last == Last::kUnreadable) last = LastGoodManifest{true, kHash, kT0 - 1000, "{"};
    RefreshInputs in;
    in.listing = c.listing_ok ? &listing : nullptr;
    in.listing_error = Error(ErrorCode::kTimeout, "no answer");
    in.last_good = c.last == Last::kNone ? nullptr : &last;
    in.config_hash = kHash;
    in.max_manifest_bytes = c.max_bytes;
    in.lease_ms = 1000;
    in.fetched_at_ms = kT0;
    EXPECT_EQ(needs_last_good(listing), c.tools_fail) << c.name;

    RefreshPlan plan = plan_refresh(in);
    EXPECT_EQ(plan.write, c.write) << c.name;
    EXPECT_EQ(plan.error.has_value(), c.error) << c.name;
    EXPECT_EQ(plan.incomplete, c.tools_incomplete ? std::vector<ListKind>{ListKind::kTools}
                                                  : std::vector<ListKind>{})
        << c.name;
    EXPECT_EQ(plan.last_good, c.last_good) << c.name;
    EXPECT_EQ(plan.renew_after_ms, 500) << c.name;
    if (c.write != RefreshWrite::kCommit) continue;
    EXPECT_EQ(plan.release_with_commit, c.release_with_commit) << c.name;
    EXPECT_EQ(plan.manifest.config_hash, kHash) << c.name;
    EXPECT_EQ(plan.manifest.fetched_at_ms, kT0) << c.name;
    EXPECT_EQ(plan.manifest.expires_at_ms, kT0 + in.policy.max_age_ms) << c.name;
    EXPECT_EQ(plan.manifest.fresh_until_ms == kT0, c.never_fresh) << c.name;
    EXPECT_FALSE(plan.manifest.etag.empty()) << c.name;
  }
}

TEST(RefreshPlan, AFailedListIsNamedCountedAndNeverShownAsItsPartialPages) {
  Listing listing = tools_failed();
  listing.list(ListKind::kPrompts).state = ListState::kFailed;
  RefreshInputs in;
  in.listing = &listing;
  in.config_hash = kHash;
  in.fetched_at_ms = kT0;
  RefreshPlan plan = plan_refresh(in);
  EXPECT_EQ(plan.failed_lists, (std::vector<ListKind>{ListKind::kTools, ListKind::kPrompts}));
  ASSERT_TRUE(plan.error);
  EXPECT_EQ(plan.error->code, ErrorCode::kTimeout);  // the first failed list's
  EXPECT_EQ(plan.error->message,
            "tools/list could not be loaded: deadline passed (1 items on 1 pages arrived before; "
            "not kept)");
  Result<Manifest> written = decode_manifest(plan.manifest.manifest);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->tools.state, ListState::kFailed);
  EXPECT_TRUE(written->tools.items.empty());
}

TEST(RefreshPlan, KeptListsComeFromTheLastGoodManifest) {
  Listing listing = tools_failed();
  LastGoodManifest last = last_good(kHash, kT0 - 1000);
  RefreshInputs in;
  in.listing = &listing;
  in.last_good = &last;
  in.config_hash = kHash;
  in.fetched_at_ms = kT0;
  RefreshPlan plan = plan_refresh(in);
  ASSERT_EQ(plan.last_good, LastGoodUse::kKept);
  Result<Manifest> written = decode_manifest(plan.manifest.manifest);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(written->tools.items.size(), 2u);
  EXPECT_EQ(written->tools.items[0].name, "echo");
  // Too old to keep: shown failed.
  in.fetched_at_ms = kT0 - 1000 + in.policy.max_age_ms + 1;
  EXPECT_EQ(plan_refresh(in).last_good, LastGoodUse::kNone);
}

TEST(RefreshPlan, FailureRecordIsCutAndNeverBeforeTheAttempt) {
  Error e(ErrorCode::kTimeout, std::string(3000, 'x'));
  RefreshFailure f = failure_record(e, kHash, kT0, kT0 - 5);
  EXPECT_EQ(f.error_code, "TIMEOUT");
  EXPECT_EQ(f.error_message.size(), kMaxErrorMessageBytes);
  EXPECT_EQ(f.attempt_at_ms, kT0);
  EXPECT_EQ(f.error_at_ms, kT0);
  EXPECT_EQ(f.config_hash, kHash);
  EXPECT_EQ(failure_record(e, kHash, kT0, kT0 + 7).error_at_ms, kT0 + 7);
}

// ---- settle_refresh ----

struct SettleCase {
  const char* name;
  RefreshWrite write;
  bool incomplete;
  LeaseOutcome written;
  const char* text;
  const char* label;
  RetryAction retry;
};

// The refresh-due index scores of the fenced writes are exactly when decide_refresh next has work
// on the entry as written: never later (a refresh would wait), for a commit not earlier either.
TEST(RefreshPlan, DueTimesAreWhenDecideRefreshNextHasWork) {
  const int64_t t0 = 1'780'000'000'000;
  for (double ratio : {0.8, 0.5, 1.0}) {
    FreshnessPolicy policy;
    policy.refresh_ahead_ratio = ratio;
    for (int64_t ttl : {int64_t{0}, int64_t{60'000}, int64_t{900'000}}) {
      ManifestWrite w;
      w.config_hash = "h";
      w.fetched_at_ms = t0;
      w.fresh_until_ms = t0 + ttl;  // 0: never fresh (a list failed)
      w.expires_at_ms = t0 + policy.max_age_ms;
      CacheEntryMeta meta;
      meta.has_data = true;
      meta.fetched_at_ms = t0;
      meta.config_hash = "h";
      meta.never_fresh = ttl == 0;
      if (ttl != 0 && ttl != policy.fresh_ttl_ms) meta.upstream_ttl_ms = ttl;
      const int64_t due = commit_due_at_ms(w, policy);
      SCOPED_TRACE("ratio " + std::to_string(ratio) + " ttl " + std::to_string(ttl));
      EXPECT_TRUE(decide_refresh(meta, policy, "h", due).refresh);
      if (due > t0) EXPECT_FALSE(decide_refresh(meta, policy, "h", due - 1).refresh);
    }
  }
  FreshnessPolicy policy;
  RefreshFailure f;
  f.error_code = "TIMEOUT";
  f.attempt_at_ms = t0;
  f.error_at_ms = t0 + 3'500;
  CacheEntryMeta errored;  // an error-only record: a miss, backing off after the failure
  errored.last_error = RefreshError{"TIMEOUT", "timed out", f.error_at_ms};
  errored.last_attempt_at_ms = f.attempt_at_ms;
  const int64_t due = failure_due_at_ms(f, policy);
  EXPECT_EQ(due, t0 + 3'500 + policy.retry_after_failure_ms);
  EXPECT_TRUE(decide_refresh(errored, policy, "h", due).refresh);
  RefreshDecision before = decide_refresh(errored, policy, "h", due - 1);
  EXPECT_FALSE(before.refresh);
  EXPECT_EQ(before.next_check_at_ms, due);
}

TEST(RefreshPlan, SettleTable) {
  const std::vector<SettleCase> cases = {
      {"committed", RefreshWrite::kCommit, false, LeaseOutcome::kOk, "committed", "committed",
       RetryAction::kSettle},
      {"partial", RefreshWrite::kCommit, true, LeaseOutcome::kOk, "partial", "partial",
       RetryAction::kSchedule},
      {"failed", RefreshWrite::kRecordFailure, false, LeaseOutcome::kOk, "failed", "failed",
       RetryAction::kSchedule},
      {"lease lost", RefreshWrite::kCommit, false, LeaseOutcome::kLeaseLost, "refused:lease_lost",
       "refused_lease_lost", RetryAction::kNone},
      {"config changed", RefreshWrite::kRecordFailure, false, LeaseOutcome::kConfigChanged,
       "refused:config_changed", "refused_config_changed", RetryAction::kNone},
      {"stale fence", RefreshWrite::kCommit, true, LeaseOutcome::kStaleFence, "refused:stale_fence",
       "refused_stale_fence", RetryAction::kNone},
  };
  for (const SettleCase& c : cases) {
    RefreshPlan plan;
    plan.write = c.write;
    if (c.incomplete) plan.incomplete = {ListKind::kTools};
    FencedWriteResult written;
    written.outcome = c.written;
    RefreshSettlement s = settle_refresh(plan, written);
    EXPECT_EQ(s.text(), c.text) << c.name;
    EXPECT_EQ(refresh_outcome_label(s.outcome, s.refused), c.label) << c.name;
    EXPECT_EQ(s.retry, c.retry) << c.name;
  }
  EXPECT_EQ(refused_settlement(LeaseOutcome::kLeaseLost).text(), "refused:lease_lost");
  EXPECT_EQ(refresh_outcome_text(RefreshOutcome::kInProgress), "in_progress");
  EXPECT_EQ(refresh_outcome_text(RefreshOutcome::kUpToDate), "up_to_date");
}

}  // namespace
}  // namespace quiver
