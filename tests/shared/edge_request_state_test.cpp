#include "shared/edge_request_state.h"

#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

using P = EdgePhase;
using E = EdgeEvent;

// Written out again, row by row, so a change to the table is a change to this test too.
const std::vector<std::tuple<P, E, P>> kExpectedTable = {
    {P::kDeciding, E::kReadSnapshot, P::kReadingSnapshot},
    {P::kDeciding, E::kQueue, P::kQueueing},
    {P::kDeciding, E::kSendWebhook, P::kWebhook},
    {P::kDeciding, E::kRespond, P::kResponded},
    {P::kDeciding, E::kInternalError, P::kResponded},
    {P::kReadingSnapshot, E::kRedisAnswered, P::kDeciding},
    {P::kReadingSnapshot, E::kStoreFailed, P::kDeciding},
    {P::kReadingSnapshot, E::kInternalError, P::kResponded},
    {P::kQueueing, E::kRedisAnswered, P::kDeciding},
    {P::kQueueing, E::kStoreFailed, P::kDeciding},
    {P::kQueueing, E::kInternalError, P::kResponded},
    {P::kWebhook, E::kRedisAnswered, P::kDeciding},
    {P::kWebhook, E::kStoreFailed, P::kDeciding},
    {P::kWebhook, E::kInternalError, P::kResponded},
    {P::kResponded, E::kBackground, P::kBackground},
    {P::kResponded, E::kNothingLeft, P::kDone},
    {P::kResponded, E::kInternalError, P::kDone},
    {P::kBackground, E::kRedisAnswered, P::kDone},
    {P::kBackground, E::kStoreFailed, P::kDone},
    {P::kBackground, E::kInternalError, P::kDone},
    {P::kDone, E::kNothingLeft, P::kDone},
    {P::kDone, E::kInternalError, P::kDone},
};

TEST(EdgeRequestTable, AllowsExactlyTheseTransitions) {
  for (int p = 0; p < kEdgePhaseCount; ++p) {
    for (int e = 0; e < kEdgeEventCount; ++e) {
      auto from = static_cast<P>(p);
      auto event = static_cast<E>(e);
      std::optional<P> expected;
      for (const auto& [f, ev, to] : kExpectedTable) {
        if (f == from && ev == event) expected = to;
      }
      EXPECT_EQ(edge_transition(from, event), expected)
          << edge_phase_name(from) << " + " << edge_event_name(event);
    }
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
  for (E open : {E::kReadSnapshot, E::kQueue, E::kSendWebhook, E::kBackground}) {
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
  for (const auto& [from, event, to] : kExpectedTable) {
    if (edge_responded(from)) {
      EXPECT_TRUE(edge_responded(to)) << edge_phase_name(from) << " + " << edge_event_name(event);
    }
    EXPECT_FALSE(edge_responded(from) && event == E::kRespond);
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
