#include "native-agent/engine/revalidation_consumer.h"

#include <algorithm>
#include <optional>

#include "native-agent/base/clock.h"
#include "shared/refresh_plan.h"

namespace quiver {

std::size_t RevalidationConsumer::handle(const RevalidationBatch& batch) {
  for (const std::string& id : batch.malformed_ids) {
    ctx_.metrics.revalidation_dropped();
    ctx_.logger->warn(kAgentLog, "dropped a malformed revalidation request (" + id + ")");
  }
  std::size_t handled = 0;
  for (const RevalidationRequest& req : batch.requests) {
    const ConnectionConfig* cfg = ctx_.config.find_connection(req.connection_id);
    bool ack = true;
    if (cfg == nullptr || !check_principal(*cfg, req.principal).ok()) {
      ctx_.metrics.revalidation_dropped();
      ctx_.logger->warn(kAgentLog, "dropped a revalidation request for " +
                                       ctx_.who(req.connection_id, req.principal) + " (" +
                                       req.reason + "): not a configured, granted connection");
    } else {
      Result<RefreshReport> r = runner_.run(req.connection_id, req.principal, req.reason,
                                            std::optional<int64_t>(req.at_ms));
      // A change queued while a listing was under way (an edge's webhook queues behind a
      // lease): that listing may predate the change, so follow it up like a local trigger.
      std::optional<ChangeTrigger> change = change_trigger_from_reason(req.reason);
      if (r.ok() && change && r->outcome == refresh_outcome_text(RefreshOutcome::kInProgress)) {
        triggers_.follow_up_in_progress(req.connection_id, req.principal, *change, req.at_ms);
      }
      // The store failed: leave the request pending; it is claimed again once it is idle.
      if (!r.ok() && passes_by_itself(r.error().code)) {
        ack = false;
      } else if (!r.ok()) {
        ctx_.metrics.revalidation_dropped();
        ctx_.logger->warn(kAgentLog, "revalidation of " +
                                         ctx_.who(req.connection_id, req.principal) + " (" +
                                         req.reason + ") cannot run: " + r.error().message);
      }
      ++handled;
    }
    if (ack) {
      if (Status st = ctx_.store->ack_revalidations({req.id}); !st.ok()) {
        ctx_.log_store_error("acknowledging revalidation " + req.id, st.error());
      }
    }
  }
  return handled;
}

std::size_t RevalidationConsumer::drain_once(int64_t block_ms, bool* store_failed) {
  std::size_t handled = 0;
  auto max =
      static_cast<std::size_t>(std::max<int64_t>(1, ctx_.config.runtime.revalidate_concurrency));
  int64_t now = steady_ms();
  int64_t due = next_claim_at_.load();
  if (now >= due && next_claim_at_.compare_exchange_strong(due, now + ctx_.claim_idle_ms / 2 + 1)) {
    Result<RevalidationBatch> claimed =
        ctx_.store->claim_stale_revalidations(ctx_.consumer, ctx_.claim_idle_ms, max);
    if (claimed.ok()) {
      if (!claimed->requests.empty()) {
        ctx_.logger->info(kAgentLog, "claimed " + std::to_string(claimed->requests.size()) +
                                         " revalidation requests of a stalled consumer");
      }
      handled += handle(*claimed);
    } else {
      if (store_failed != nullptr) *store_failed = true;
      ctx_.log_store_error("claiming stale revalidations", claimed.error());
    }
  }
  Result<RevalidationBatch> batch = ctx_.store->read_revalidations(ctx_.consumer, 1, block_ms);
  if (!batch.ok()) {
    if (store_failed != nullptr) *store_failed = true;
    ctx_.log_store_error("reading revalidations", batch.error());
    return handled;
  }
  return handled + handle(*batch);
}

void consume_until_stopped(AgentContext& ctx,
                           const std::function<void(int64_t block_ms, bool* store_failed)>& drain) {
  int64_t backoff = 0;
  while (ctx.is_running()) {
    bool store_failed = false;
    drain(ctx.options.revalidation_block_ms, &store_failed);
    // A store that answers at once with an error would make this loop spin: back off.
    if (store_failed) {
      backoff = std::min<int64_t>(backoff == 0 ? 50 : backoff * 2, 1000);
      if (!ctx.wait_running(backoff)) break;
    } else {
      backoff = 0;
    }
  }
}

void RevalidationConsumer::worker_loop() {
  consume_until_stopped(
      ctx_, [this](int64_t block_ms, bool* store_failed) { drain_once(block_ms, store_failed); });
}

}  // namespace quiver
