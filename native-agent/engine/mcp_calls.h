// Calls through the agent (issue 13): `tools/call`, `resources/read`, `prompts/get` and
// `completion/complete`, performed on the live upstream session of the caller's principal.
//
// McpCalls::perform is the one call path, for both ways in: the agent's own `/mcp` (its RelayCall
// hook calls it directly) and the edge's relay through Redis (CallRelayConsumer below). Each call:
//   1. the method is relayed and names a capability (shared/call_relay.h called_capability);
//   2. the grant, checked now: the connection is configured, the member is granted it in the
//      configuration AND in the store's live grants (the cache is never the authority);
//   3. the preference, checked now: the principal's disabled overlay (the store's, what discovery
//      serves) does not hold the capability. A refused call never reaches the upstream;
//   4. the principal: `shared` on a shared connection, the member on a per-member one, whose
//      pooled connection (AgentContext::pool_name) carries that member's own credential
//      (AgentContext::spec_for: the configuration's, or its OAuth token) — never another's;
//   5. the deadline: the connection's request timeout (`request_timeout_ms`, its override or the
//      runtime control), capped by the caller's; past it the call is cancelled upstream
//      (notifications/cancelled) and answers TIMEOUT; a caller that goes away cancels it too;
//   6. the answer, bounded (kMaxRelayReplyBytes: a larger one is TOO_LARGE), redacted at the
//      door like all upstream text; an answer that says the capability does not exist feeds the
//      evidence trigger (Triggers::request_refresh "evidence"): the listing is refreshed.
// Errors come back as Error values; call_failure_error (shared/call_relay.h) makes the JSON-RPC
// error a client sees.
//
// CallRelayConsumer: the agent's side of the Redis relay (schema/redis-keys.md `calls`): workers
// read the request stream (each request delivered to one agent, once), drop a request whose
// deadline passed (never performed late), perform the rest with McpCalls as the request's member,
// and push the bounded reply record to the request's reply list. A heartbeat keeps `call-agents`
// alive while the workers run, so an edge fails fast when no agent consumes. The workers run the
// agent's one consumer loop (consume_until_stopped, revalidation_consumer.h). One cancel poller
// per agent (cancel_loop): while relayed calls run, every kCallCancelMarkPollMs it reads the cancel
// marks of all of them in one MGET (`call-cancel:<rid>`, set by the edge when the call's client
// went away); a marked call's `cancelled` predicate turns true, so McpCalls cancels it upstream
// (notifications/cancelled) and its reply is not written (nobody waits for it). No relayed call
// running: no Redis round.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "native-agent/engine/agent_context.h"
#include "native-agent/engine/triggers.h"
#include "shared/call_relay.h"

namespace quiver {

// How one call went, for logs, tests and benchmarks.
struct CallReport {
  std::string pool_name;   // the pooled connection it ran on
  bool evidence = false;   // the answer said "unknown": a refresh was requested
  CallInfo upstream;       // reused / opened session, call time
  int64_t timeout_ms = 0;  // the deadline it ran under
};

class McpCalls {
 public:
  McpCalls(AgentContext& ctx, Triggers& triggers) : ctx_(ctx), triggers_(triggers) {}

  // The call's answer (the upstream's result or JSON-RPC error), or why there is none:
  // kInvalidArgument (not a relayed method, bad params, a disabled capability), kNotFound (no
  // such connection, or not granted: the same answer), kStoreUnavailable (the grant or the
  // preference could not be checked: refused), kTimeout, kUpstreamUnavailable,
  // kAuthorizationRequired (an OAuth connection the member has not authorized), kTooLarge.
  Result<RelayReply> perform(const UpstreamCall& call, const std::function<bool()>& cancelled = {},
                             CallReport* report = nullptr);

 private:
  AgentContext& ctx_;
  Triggers& triggers_;
};

// The agent's RelayCall hook (shared/mcp_endpoint.h NeedRelay at the agent's own /mcp): the call
// performed directly (AgentService::call_upstream; `now_ms` on the clock of call.deadline_ms), its
// failure as the RelayReply the endpoint answers with.
RelayReply perform_relay_call(AgentService& agent, const RelayCall& call, int64_t now_ms,
                              const std::function<bool()>& cancelled = {});

struct CallRelayStats {
  int64_t performed = 0;       // requests performed (whatever the answer)
  int64_t expired = 0;         // dropped: read after their deadline
  int64_t malformed = 0;       // dropped: not a valid request
  int64_t reply_failures = 0;  // replies the store refused
  int64_t cancelled = 0;       // cancelled by the edge (its client went away): reply not written
  int64_t running = 0;         // relayed calls running now
};

// How often a consuming agent marks `call-agents` alive (its TTL is kCallAgentsTtlMs).
inline constexpr int64_t kCallAgentsMarkMs = 1'000;
// How often the cancel poller reads the running calls' cancel marks (only while calls run).
inline constexpr int64_t kCallCancelMarkPollMs = 200;

class CallRelayConsumer {
 public:
  CallRelayConsumer(AgentContext& ctx, McpCalls& calls) : ctx_(ctx), calls_(calls) {}

  // Reads up to one request (waiting up to `block_ms`), performs it, replies. Returns how many
  // were handled; `store_failed` is set when the store could not be read.
  std::size_t drain_once(int64_t block_ms, bool* store_failed = nullptr);
  // A worker thread: drains until the agent stops (consume_until_stopped).
  void worker_loop();
  // The heartbeat thread: marks `call-agents` every kCallAgentsMarkMs until the agent stops.
  void heartbeat_loop();
  Status mark_alive();
  // One round of the cancel poller: the cancel marks of every running relayed call, one MGET
  // (key layout v2: one per shard the running calls are on; none when no call runs). Returns how
  // many calls it newly marked cancelled; `store_failed` is set when the marks could not be read
  // (logged; the calls run on).
  std::size_t poll_cancel_marks_once(bool* store_failed = nullptr);
  // The cancel poller thread: poll_cancel_marks_once every kCallCancelMarkPollMs until the agent
  // stops.
  void cancel_loop();
  CallRelayStats stats() const;

 private:
  void handle(const RelayRequest& request);
  // The running relayed calls by rid: each one's connection (where its cancel mark is) and
  // cancelled flag, which its predicate reads.
  struct Running {
    std::string connection_id;
    std::shared_ptr<std::atomic<bool>> cancelled;
  };
  std::shared_ptr<std::atomic<bool>> track(const RelayRequest& request);
  void untrack(const std::string& rid);

  AgentContext& ctx_;
  McpCalls& calls_;
  std::atomic<int64_t> performed_{0};
  std::atomic<int64_t> expired_{0};
  std::atomic<int64_t> malformed_{0};
  std::atomic<int64_t> reply_failures_{0};
  std::atomic<int64_t> cancelled_{0};
  mutable std::mutex running_mu_;
  std::map<std::string, Running> running_;
};

}  // namespace quiver
