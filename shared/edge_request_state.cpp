#include "shared/edge_request_state.h"

namespace quiver {

namespace {

struct Transition {
  EdgePhase from;
  EdgeEvent event;
  EdgePhase to;
};

using P = EdgePhase;
using E = EdgeEvent;
constexpr Transition kTransitions[] = {
    {P::kDeciding, E::kReadSnapshot, P::kReadingSnapshot},
    {P::kDeciding, E::kQueue, P::kQueueing},
    {P::kDeciding, E::kSendWebhook, P::kWebhook},
    {P::kDeciding, E::kRespond, P::kResponded},
    {P::kDeciding, E::kInternalError, P::kResponded},
    // A snapshot (or its stale-if-error copy, or the error) goes back to the exchange.
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
    // Background failures are logged and released, never answered: the answer went out.
    {P::kBackground, E::kRedisAnswered, P::kDone},
    {P::kBackground, E::kStoreFailed, P::kDone},
    {P::kBackground, E::kInternalError, P::kDone},
    {P::kDone, E::kNothingLeft, P::kDone},
    {P::kDone, E::kInternalError, P::kDone},
};

}  // namespace

const char* edge_phase_name(EdgePhase phase) {
  switch (phase) {
    case P::kDeciding:
      return "deciding";
    case P::kReadingSnapshot:
      return "reading_snapshot";
    case P::kQueueing:
      return "queueing";
    case P::kWebhook:
      return "webhook";
    case P::kResponded:
      return "responded";
    case P::kBackground:
      return "background";
    case P::kDone:
      return "done";
  }
  return "?";
}

const char* edge_event_name(EdgeEvent event) {
  switch (event) {
    case E::kReadSnapshot:
      return "read_snapshot";
    case E::kQueue:
      return "queue";
    case E::kSendWebhook:
      return "send_webhook";
    case E::kRedisAnswered:
      return "redis_answered";
    case E::kStoreFailed:
      return "store_failed";
    case E::kRespond:
      return "respond";
    case E::kBackground:
      return "background";
    case E::kNothingLeft:
      return "nothing_left";
    case E::kInternalError:
      return "internal_error";
  }
  return "?";
}

std::optional<EdgePhase> edge_transition(EdgePhase from, EdgeEvent event) {
  for (const Transition& t : kTransitions) {
    if (t.from == from && t.event == event) return t.to;
  }
  return std::nullopt;
}

bool edge_waits_on_redis(EdgePhase phase) {
  return phase == P::kReadingSnapshot || phase == P::kQueueing || phase == P::kWebhook ||
         phase == P::kBackground;
}

bool edge_responded(EdgePhase phase) {
  return phase == P::kResponded || phase == P::kBackground || phase == P::kDone;
}

}  // namespace quiver
