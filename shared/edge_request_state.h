// The states of one edge request (EdgeService, shared/edge_service.h) and what moves it from one to
// the next, as one table (h11 style, like McpSession's). EdgeService keeps a request's phase here
// and nowhere else: whether it waits on Redis, and for what, whether it has answered, whether
// background work remains. A (phase, event) the table does not hold is a bug, which the service
// turns into a 500 (or, after the answer, the end of the request).
//
//   kDeciding ──kReadSnapshot──▶ kReadingSnapshot ──kRedisAnswered / kStoreFailed──▶ kDeciding
//   kDeciding ──kQueue──▶ kQueueing ──kRedisAnswered / kStoreFailed──▶ kDeciding
//   kDeciding ──kSendWebhook──▶ kWebhook ──kRedisAnswered / kStoreFailed──▶ kDeciding (v2: again
//                                                                          per round)
//   kDeciding ──kSendOAuthCallback──▶ kOAuthCallback ──kRedisAnswered / kStoreFailed──▶ kDeciding
//   kDeciding ──kReadBodies──▶ kReadingBodies ──kRedisAnswered / kStoreFailed──▶ kDeciding
//   kDeciding ──kRelay──▶ kRelaying ──kRedisAnswered / kStoreFailed──▶ kDeciding
//   kDeciding ──kRespond──▶ kResponded ──kBackground──▶ kBackground ──(either)──▶ kDone
//                                      ──kNothingLeft──▶ kDone
//   any phase before kResponded ──kInternalError──▶ kResponded (a 500); after it ──▶ kDone
#pragma once

#include <optional>

namespace quiver {

enum class EdgePhase {
  kDeciding = 0,     // begun, or Redis just answered: the core picks the next step; no round open
  kReadingSnapshot,  // the discovery read script is in flight
  kQueueing,       // revalidations the answer waits for are in flight (the exchange's NeedEnqueue)
  kWebhook,        // a webhook round is in flight (v1: its one script; v2: one of its rounds)
  kResponded,      // the answer went out; the revalidations it asked for wait for background()
  kBackground,     // those revalidations are in flight, after the answer
  kDone,           // nothing left: end() frees the request
  kOAuthCallback,  // the OAuth callback's script is in flight (shared/oauth_callback.h)
  kReadingBodies,  // the manifest bodies a snapshot lacks (not in the isolate's BodyCache)
  kRelaying,       // a /mcp call is relayed to the agents: enqueue + BLPOP on its own connection
};
enum class EdgeEvent {
  kReadSnapshot,       // a snapshot read goes to Redis (an L1 hit sends nothing and moves nothing)
  kQueue,              // revalidations go to Redis before the answer
  kSendWebhook,        // the signed webhook's script goes to Redis
  kRedisAnswered,      // every reply of the round arrived and decoded
  kStoreFailed,        // the round failed: connection, timeout, AUTH, a broken reply, fail-fast
  kRespond,            // the answer is ready
  kBackground,         // background() with revalidations to queue
  kNothingLeft,        // background() with none
  kInternalError,      // a bug: a 500 if nothing was answered yet
  kSendOAuthCallback,  // an OAuth callback's script goes to Redis
  kReadBodies,         // after a snapshot (read or from L1): the bodies it lacks, one MGET
  kRelay,              // a /mcp call goes to the agents through Redis (shared/call_relay.h)
};
inline constexpr int kEdgePhaseCount = 10;
inline constexpr int kEdgeEventCount = 12;
const char* edge_phase_name(EdgePhase phase);
const char* edge_event_name(EdgeEvent event);
// The next phase, or nullopt when `event` is not allowed in `from`.
std::optional<EdgePhase> edge_transition(EdgePhase from, EdgeEvent event);

// Derived from the phase, never stored beside it.
bool edge_waits_on_redis(EdgePhase phase);  // a round is open: feed() and fail() apply
bool edge_responded(EdgePhase phase);       // kRespond was returned

}  // namespace quiver
