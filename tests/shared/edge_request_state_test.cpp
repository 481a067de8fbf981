#include "shared/edge_request_state.h"

#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/state_tables.h"

namespace quiver {
namespace {

using P = EdgePhase;
using E = EdgeEvent;

// The table's properties and the paths a request takes, rather than a second copy of the table.

std::vector<P> all_phases() { return quiver::testing::enum_values<P>(kEdgePhaseCount); }
std::vector<E> all_events() { return quiver::testing::enum_values<E>(kEdgeEventCount); }

// Where `events` take a request that starts deciding; nullopt at the first refused one.
std::optional<P> walk(std::initializer_list<E> events) {
  return quiver::testing::walk_table(edge_transition, P::kDeciding, events);
}

TEST(EdgeRequestTable, TheRequestsPathsEndDone) {
  // An L1 hit: answered at once, nothing to queue.
  EXPECT_EQ(walk({E::kRespond, E::kNothingLeft}), P::kDone);
  // A snapshot read, revalidations queued before the answer, more of them after it.
  EXPECT_EQ(walk({E::kReadSnapshot, E::kRedisAnswered, E::kQueue, E::kRedisAnswered, E::kRespond,
                  E::kBackground, E::kRedisAnswered}),
            P::kDone);
  // A snapshot whose bodies the isolate lacks: a second round for them, then the answer.
  EXPECT_EQ(walk({E::kReadSnapshot, E::kRedisAnswered, E::kReadBodies, E::kRedisAnswered,
                  E::kRespond, E::kNothingLeft}),
            P::kDone);
  // A /mcp call: the snapshot read, the relay round (one per call of a batch), the answer.
  EXPECT_EQ(walk({E::kReadSnapshot, E::kRedisAnswered, E::kRelay, E::kRedisAnswered, E::kRelay,
                  E::kStoreFailed, E::kRespond, E::kNothingLeft}),
            P::kDone);
  // A webhook whose store failed is still answered (the error), and the request ends.
  EXPECT_EQ(walk({E::kSendWebhook, E::kStoreFailed, E::kRespond, E::kNothingLeft}), P::kDone);
  // Background failures are released, never answered again.
  EXPECT_EQ(walk({E::kRespond, E::kBackground, E::kStoreFailed}), P::kDone);
  // Ending twice is harmless; answering twice is refused.
  EXPECT_EQ(walk({E::kRespond, E::kNothingLeft, E::kNothingLeft}), P::kDone);
  EXPECT_EQ(walk({E::kRespond, E::kRespond}), std::nullopt);
}

TEST(EdgeRequestTable, EachRoundBeforeTheAnswerOpensItsPhaseAndReturnsToDeciding) {
  const std::pair<E, P> rounds[] = {
      {E::kReadSnapshot, P::kReadingSnapshot}, {E::kQueue, P::kQueueing},
      {E::kSendWebhook, P::kWebhook},          {E::kSendOAuthCallback, P::kOAuthCallback},
      {E::kReadBodies, P::kReadingBodies},     {E::kRelay, P::kRelaying}};
  for (const auto& [open, phase] : rounds) {
    EXPECT_EQ(edge_transition(P::kDeciding, open), phase) << edge_event_name(open);
    for (E end : {E::kRedisAnswered, E::kStoreFailed}) {
      EXPECT_EQ(edge_transition(phase, end), P::kDeciding)
          << edge_phase_name(phase) << " + " << edge_event_name(end);
    }
    // One round at a time: an open round opens no other and answers nothing.
    for (E e : {E::kReadSnapshot, E::kQueue, E::kSendWebhook, E::kSendOAuthCallback, E::kReadBodies,
                E::kRelay, E::kRespond, E::kBackground}) {
      EXPECT_EQ(edge_transition(phase, e), std::nullopt)
          << edge_phase_name(phase) << " + " << edge_event_name(e);
    }
  }
}

TEST(EdgeRequestTable, OnlyADecidingRequestAnswers) {
  for (P from : all_phases()) {
    EXPECT_EQ(edge_transition(from, E::kRespond),
              from == P::kDeciding ? std::optional<P>(P::kResponded) : std::nullopt)
        << edge_phase_name(from);
  }
}

TEST(EdgeRequestTable, AfterTheAnswerOnlyTheBackgroundRoundAndTheEndRemain) {
  EXPECT_EQ(edge_transition(P::kResponded, E::kBackground), P::kBackground);
  EXPECT_EQ(edge_transition(P::kResponded, E::kNothingLeft), P::kDone);
  for (P from : all_phases()) {
    // Nothing left is said after the answer, outside a round.
    const bool ends = edge_responded(from) && !edge_waits_on_redis(from);
    EXPECT_EQ(edge_transition(from, E::kNothingLeft),
              ends ? std::optional<P>(P::kDone) : std::nullopt)
        << edge_phase_name(from);
  }
  for (E e : all_events()) {
    std::optional<P> to = edge_transition(P::kDone, e);
    if (to) {
      EXPECT_EQ(*to, P::kDone) << edge_event_name(e);  // done stays done
    }
  }
}

TEST(EdgeRequestTable, EveryPhaseIsReachableAndCanEnd) {
  std::set<P> reached =
      quiver::testing::reachable_states(edge_transition, P::kDeciding, all_events());
  EXPECT_EQ(reached.size(), static_cast<std::size_t>(kEdgePhaseCount));
  for (P from : all_phases()) {
    std::optional<P> at = from;
    for (int step = 0; step < 2 && at; ++step) at = edge_transition(*at, E::kInternalError);
    EXPECT_EQ(at, P::kDone) << edge_phase_name(from);  // a bug ends any request in two steps
  }
}

TEST(EdgeRequestTable, ABugEndsEveryPhase) {
  // Whatever went wrong, the request can still answer (a 500) or end: never stuck.
  for (int p = 0; p < kEdgePhaseCount; ++p) {
    auto from = static_cast<P>(p);
    std::optional<P> to = edge_transition(from, E::kInternalError);
    ASSERT_TRUE(to.has_value()) << edge_phase_name(from);
    EXPECT_EQ(*to, edge_responded(from) ? P::kDone : P::kResponded) << edge_phase_name(from);
  }
}

TEST(EdgeRequestTable, RedisEventsOnlyWhileARoundIsOpen) {
  for (int p = 0; p < kEdgePhaseCount; ++p) {
    auto from = static_cast<P>(p);
    EXPECT_EQ(edge_transition(from, E::kRedisAnswered).has_value(), edge_waits_on_redis(from))
        << edge_phase_name(from);
    EXPECT_EQ(edge_transition(from, E::kStoreFailed).has_value(), edge_waits_on_redis(from))
        << edge_phase_name(from);
  }
  // Rounds open only from kDeciding (before the answer) or kResponded (after it).
  for (E open :
       {E::kReadSnapshot, E::kQueue, E::kSendWebhook, E::kReadBodies, E::kRelay, E::kBackground}) {
    for (int p = 0; p < kEdgePhaseCount; ++p) {
      auto from = static_cast<P>(p);
      std::optional<P> to = edge_transition(from, open);
      if (!to) continue;
      EXPECT_TRUE(from == P::kDeciding || from == P::kResponded) << edge_phase_name(from);
      EXPECT_TRUE(edge_waits_on_redis(*to)) << edge_phase_name(*to);
    }
  }
}

TEST(EdgeRequestTable, TheAnswerGoesOutOnceAndIsNeverTakenBack) {
  for (P from : all_phases()) {
    for (E event : all_events()) {
      std::optional<P> to = edge_transition(from, event);
      if (!to || !edge_responded(from)) continue;
      EXPECT_TRUE(edge_responded(*to)) << edge_phase_name(from) << " + " << edge_event_name(event);
      EXPECT_NE(event, E::kRespond);
    }
  }
}

TEST(EdgeRequestTable, NamesAreDistinct) {
  std::set<std::string> phases;
  for (int p = 0; p < kEdgePhaseCount; ++p) phases.insert(edge_phase_name(static_cast<P>(p)));
  EXPECT_EQ(phases.size(), static_cast<std::size_t>(kEdgePhaseCount));
  EXPECT_EQ(phases.count("?"), 0u);
  std::set<std::string> events;
  for (int e = 0; e < kEdgeEventCount; ++e) events.insert(edge_event_name(static_cast<E>(e)));
  EXPECT_EQ(events.size(), static_cast<std::size_t>(kEdgeEventCount));
  EXPECT_EQ(events.count("?"), 0u);
}

}  // namespace
}  // namespace quiver
