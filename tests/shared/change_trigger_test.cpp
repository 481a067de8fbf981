#include "shared/change_trigger.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

constexpr int64_t kHorizon = 1000;
constexpr char kHash[] = "hash-now";

// A virtual clock: the horizon runs on `now`, changes are stamped with data time `t`.
struct Clock {
  int64_t now = 50'000;
  void advance(int64_t ms) { now += ms; }
};

CacheEntryMeta stored(int64_t fetched_at, const std::string& hash = kHash) {
  CacheEntryMeta m;
  m.has_data = true;
  m.fetched_at_ms = fetched_at;
  m.config_hash = hash;
  return m;
}

TEST(ChangeTrigger, NamesRoundTripAndOtherReasonsAreNotChanges) {
  for (ChangeTrigger t : {ChangeTrigger::kListChanged, ChangeTrigger::kWebhook,
                          ChangeTrigger::kEvidence, ChangeTrigger::kConfig}) {
    EXPECT_EQ(change_trigger_from_reason(change_trigger_name(t)), t);
  }
  for (const char* other : {"stale", "miss", "manual", "maintenance", "seed", "retry", ""}) {
    EXPECT_FALSE(change_trigger_from_reason(other)) << other;
  }
}

TEST(ChangeTrigger, OnlyAnUnservedQueueAnswerIsFollowedUp) {
  struct Row {
    QueueAnswer answer;
    FollowupDecision decision;
    std::size_t pending;
  };
  for (const Row& r : {Row{QueueAnswer::kQueued, FollowupDecision::kNone, 0},
                       Row{QueueAnswer::kAlreadyQueued, FollowupDecision::kWait, 1},
                       Row{QueueAnswer::kInProgress, FollowupDecision::kWait, 1},
                       Row{QueueAnswer::kNotQueued, FollowupDecision::kWait, 1}}) {
    ChangeFollowups f(kHorizon);
    EXPECT_EQ(f.on_trigger("t", Principal::shared(), ChangeTrigger::kWebhook, 10, r.answer, 0),
              r.decision);
    EXPECT_EQ(f.size(), r.pending);
  }
}

// Each look at a pending follow-up, as a table: what the host saw → the decision, and whether
// the follow-up is still pending.
TEST(ChangeTrigger, CheckTable) {
  struct Row {
    FollowupCheck check;
    FollowupDecision decision;
    bool pending;
  };
  for (const Row& r : {Row{FollowupCheck::kConnectionRemoved, FollowupDecision::kDone, false},
                       Row{FollowupCheck::kStoredAfterChange, FollowupDecision::kDone, false},
                       Row{FollowupCheck::kStoreFailed, FollowupDecision::kWait, true},
                       Row{FollowupCheck::kRefreshed, FollowupDecision::kDone, false},
                       Row{FollowupCheck::kRefreshInProgress, FollowupDecision::kWait, true},
                       Row{FollowupCheck::kCannotRun, FollowupDecision::kDropped, false}}) {
    Clock clock;
    ChangeFollowups f(kHorizon);
    f.on_trigger("t", Principal::shared(), ChangeTrigger::kListChanged, 10,
                 QueueAnswer::kAlreadyQueued, clock.now);
    ASSERT_EQ(f.pending().size(), 1u);
    EXPECT_EQ(f.on_checked(f.pending()[0], r.check, clock.now), r.decision)
        << followup_decision_name(r.decision);
    EXPECT_EQ(f.size(), r.pending ? 1u : 0u);
  }
}

TEST(ChangeTrigger, SatisfiedOnlyByAListingThatStartedAfterTheChangeUnderThisConfig) {
  EXPECT_FALSE(ChangeFollowups::satisfied_by(std::nullopt, 100, kHash));
  CacheEntryMeta no_data = stored(200);
  no_data.has_data = false;
  EXPECT_FALSE(ChangeFollowups::satisfied_by(no_data, 100, kHash));
  EXPECT_FALSE(ChangeFollowups::satisfied_by(stored(99), 100, kHash));
  EXPECT_TRUE(ChangeFollowups::satisfied_by(stored(100), 100, kHash));
  EXPECT_TRUE(ChangeFollowups::satisfied_by(stored(101), 100, kHash));
  EXPECT_FALSE(ChangeFollowups::satisfied_by(stored(101, "old"), 100, kHash));
}

// The race the agent test staged with list_changed twice in a row: a second change arrives
// while the first one's follow-up is being looked at. The look satisfied the first change only,
// so the follow-up stays, now for the newer change, until a listing after that one is stored.
TEST(ChangeTrigger, ANewerChangeDuringALookKeepsTheFollowUp) {
  Clock clock;
  ChangeFollowups f(kHorizon);
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kListChanged, 100,
               QueueAnswer::kAlreadyQueued, clock.now);
  PendingChange looked_at = f.pending()[0];
  clock.advance(10);
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kListChanged, 200,
               QueueAnswer::kAlreadyQueued, clock.now);
  EXPECT_EQ(f.size(), 1u);  // one per key
  EXPECT_EQ(f.on_checked(looked_at, FollowupCheck::kRefreshed, clock.now), FollowupDecision::kWait);
  ASSERT_EQ(f.size(), 1u);
  PendingChange next = f.pending()[0];
  EXPECT_EQ(next.changed_at_ms, 200);
  EXPECT_FALSE(ChangeFollowups::satisfied_by(stored(150), next.changed_at_ms, kHash));
  EXPECT_EQ(f.on_checked(next, FollowupCheck::kStoredAfterChange, clock.now),
            FollowupDecision::kDone);
  EXPECT_EQ(f.size(), 0u);
  // An older change arriving late does not move the newer one back.
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kWebhook, 300, QueueAnswer::kInProgress,
               clock.now);
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kWebhook, 250, QueueAnswer::kInProgress,
               clock.now);
  EXPECT_EQ(f.pending()[0].changed_at_ms, 300);
}

// A refresh held elsewhere (the concurrent-refresh race): looked at again on every tick until the
// horizon, then given up; a new trigger moves the horizon.
TEST(ChangeTrigger, HeldElsewhereWaitsAndIsGivenUpAtTheHorizon) {
  Clock clock;
  ChangeFollowups f(kHorizon);
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kEvidence, 100, QueueAnswer::kInProgress,
               clock.now);
  const int64_t started = clock.now;
  for (int tick = 0; tick < 9; ++tick) {
    clock.advance(100);
    EXPECT_EQ(f.on_checked(f.pending()[0], FollowupCheck::kRefreshInProgress, clock.now),
              FollowupDecision::kWait)
        << tick;
  }
  // A new trigger at 900 ms: the horizon counts from it.
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kEvidence, 120, QueueAnswer::kInProgress,
               clock.now);
  clock.advance(kHorizon - 1);
  EXPECT_EQ(f.on_checked(f.pending()[0], FollowupCheck::kStoreFailed, clock.now),
            FollowupDecision::kWait);
  clock.advance(1);
  EXPECT_GT(clock.now - started, kHorizon);
  EXPECT_EQ(f.on_checked(f.pending()[0], FollowupCheck::kStoreFailed, clock.now),
            FollowupDecision::kGiveUp);
  EXPECT_EQ(f.size(), 0u);
}

TEST(ChangeTrigger, KeysArePerConnectionAndPrincipal) {
  ChangeFollowups f(kHorizon);
  Principal alice = *Principal::member("alice");
  f.on_trigger("t", Principal::shared(), ChangeTrigger::kWebhook, 1, QueueAnswer::kAlreadyQueued,
               0);
  f.on_trigger("t", alice, ChangeTrigger::kWebhook, 1, QueueAnswer::kAlreadyQueued, 0);
  f.on_trigger("u", alice, ChangeTrigger::kWebhook, 1, QueueAnswer::kAlreadyQueued, 0);
  EXPECT_EQ(f.size(), 3u);
  PendingChange first = f.pending()[0];
  EXPECT_EQ(f.on_checked(first, FollowupCheck::kRefreshed, 0), FollowupDecision::kDone);
  EXPECT_EQ(f.size(), 2u);
  // A look at a follow-up already gone (done by another look) decides nothing more.
  EXPECT_EQ(f.on_checked(first, FollowupCheck::kRefreshed, 0), FollowupDecision::kNone);
}

}  // namespace
}  // namespace quiver
