#include "shared/edge_request_state.h"

#include <iterator>

#include "shared/enum_names.h"
#include "shared/state_table.h"

namespace quiver {

namespace {

// The state table: every legal (phase, event) → phase. Anything else is refused.
using P = EdgePhase;
using E = EdgeEvent;
constexpr Transition<P, E> kTransitions[] = {
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
    {P::kDeciding, E::kSendOAuthCallback, P::kOAuthCallback},
    {P::kOAuthCallback, E::kRedisAnswered, P::kDeciding},
    {P::kOAuthCallback, E::kStoreFailed, P::kDeciding},
    {P::kOAuthCallback, E::kInternalError, P::kResponded},
    {P::kDeciding, E::kReadBodies, P::kReadingBodies},
    {P::kReadingBodies, E::kRedisAnswered, P::kDeciding},
    {P::kReadingBodies, E::kStoreFailed, P::kDeciding},
    {P::kReadingBodies, E::kInternalError, P::kResponded},
    // A relayed call's reply (or the store's failure, a JSON-RPC error) goes back to the endpoint.
    {P::kDeciding, E::kRelay, P::kRelaying},
    {P::kRelaying, E::kRedisAnswered, P::kDeciding},
    {P::kRelaying, E::kStoreFailed, P::kDeciding},
    {P::kRelaying, E::kInternalError, P::kResponded},
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

constexpr const char* const kPhaseNames[] = {
    "deciding", "reading_snapshot", "queueing",       "webhook", "responded", "background",
    "done",     "oauth_callback",   "reading_bodies", "relaying"};
static_assert(std::size(kPhaseNames) == kEdgePhaseCount);
constexpr const char* const kEventNames[] = {
    "read_snapshot", "queue",      "send_webhook", "redis_answered", "store_failed",
    "respond",       "background", "nothing_left", "internal_error", "send_oauth_callback",
    "read_bodies",   "relay"};
static_assert(std::size(kEventNames) == kEdgeEventCount);

}  // namespace

const char* edge_phase_name(EdgePhase phase) { return name_of(kPhaseNames, phase, "?"); }

const char* edge_event_name(EdgeEvent event) { return name_of(kEventNames, event, "?"); }

std::optional<EdgePhase> edge_transition(EdgePhase from, EdgeEvent event) {
  return next_state(kTransitions, from, event);
}

bool edge_waits_on_redis(EdgePhase phase) {
  return phase == P::kReadingSnapshot || phase == P::kQueueing || phase == P::kWebhook ||
         phase == P::kOAuthCallback || phase == P::kBackground || phase == P::kReadingBodies ||
         phase == P::kRelaying;
}

bool edge_responded(EdgePhase phase) {
  return phase == P::kResponded || phase == P::kBackground || phase == P::kDone;
}

}  // namespace quiver
