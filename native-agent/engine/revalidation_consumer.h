// RevalidationConsumer: the agent's side of the revalidation stream (readers' stale and miss
// reads, request_refresh, webhooks). `revalidate_concurrency` workers run worker_loop(), one
// consumer name per agent instance; entries of crashed consumers are claimed after
// claim_idle_ms; each entry is acknowledged once handled, except when the store failed (it is
// then claimed again once idle). A queued change whose refresh found the lease held is followed
// up like a local trigger (Triggers).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "native-agent/engine/agent_context.h"
#include "native-agent/engine/refresh_runner.h"
#include "native-agent/engine/triggers.h"

namespace quiver {

// The agent's one consumer loop (the revalidation workers, the relayed calls' workers): runs
// `drain_once(block_ms, &store_failed)` until the agent stops, backing off (50 ms doubling to 1 s)
// while the store answers at once with an error, which would otherwise make the loop spin.
void consume_until_stopped(AgentContext& ctx,
                           const std::function<void(int64_t block_ms, bool* store_failed)>& drain);

class RevalidationConsumer {
 public:
  RevalidationConsumer(AgentContext& ctx, RefreshRunner& runner, Triggers& triggers)
      : ctx_(ctx), runner_(runner), triggers_(triggers) {}

  // Reads (and claims stale) requests once, refreshes them, acknowledges them. Returns how many
  // were handled; `store_failed` (when given) is set when the store could not be read.
  std::size_t drain_once(int64_t block_ms, bool* store_failed = nullptr);
  // A worker thread: drains until the agent stops, backing off while the store fails.
  void worker_loop();

 private:
  std::size_t handle(const RevalidationBatch& batch);

  AgentContext& ctx_;
  RefreshRunner& runner_;
  Triggers& triggers_;
  std::atomic<int64_t> next_claim_at_{0};
};

}  // namespace quiver
