#include "native-agent/engine/triggers.h"

#include <optional>
#include <utility>
#include <vector>

#include "native-agent/base/clock.h"
#include "shared/refresh_plan.h"

namespace quiver {

namespace {

QueueAnswer queue_answer(RevalidationOutcome outcome) {
  switch (outcome) {
    case RevalidationOutcome::kQueued:
      return QueueAnswer::kQueued;
    case RevalidationOutcome::kAlreadyQueued:
      return QueueAnswer::kAlreadyQueued;
    case RevalidationOutcome::kInProgress:
      return QueueAnswer::kInProgress;
  }
  return QueueAnswer::kNotQueued;
}

// Long enough for a lease held elsewhere to run out twice, a listing to finish and the gate's
// window to pass: a change not stored by then will not be by waiting.
int64_t followup_horizon_ms(const AgentContext& ctx) {
  return 2 * ctx.config.runtime.lease_ms + ctx.config.runtime.list_timeout_ms +
         ctx.revalidation_window_ms();
}

}  // namespace

Triggers::Triggers(AgentContext& ctx, RefreshRunner& runner)
    : ctx_(ctx), runner_(runner), followups_(followup_horizon_ms(ctx)) {}

void Triggers::follow_up(const std::string& cid, const Principal& principal, ChangeTrigger trigger,
                         int64_t changed_at_ms, QueueAnswer answer) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)followups_.on_trigger(cid, principal, trigger, changed_at_ms, answer, steady_ms());
}

void Triggers::follow_up_in_progress(const std::string& cid, const Principal& principal,
                                     ChangeTrigger trigger, int64_t changed_at_ms) {
  follow_up(cid, principal, trigger, changed_at_ms, QueueAnswer::kInProgress);
}

void Triggers::follow_up_already_queued(const std::string& cid, const Principal& principal,
                                        ChangeTrigger trigger, int64_t changed_at_ms) {
  follow_up(cid, principal, trigger, changed_at_ms, QueueAnswer::kAlreadyQueued);
}

Result<RevalidationOutcome> Triggers::request_refresh(const std::string& cid,
                                                      const Principal& principal,
                                                      const std::string& trigger) {
  Result<const ConnectionConfig*> cfg = ctx_.connection(cid);
  if (!cfg.ok()) return cfg.error();
  if (Status st = check_principal(**cfg, principal); !st.ok()) return st.error();
  if (Status st = validate_revalidation_reason(trigger); !st.ok()) return st.error();
  const std::string who = ctx_.who(cid, principal);
  const std::optional<ChangeTrigger> change = change_trigger_from_reason(trigger);
  int64_t since = ctx_.options.now_ms();
  Result<RevalidationOutcome> r = ctx_.enqueue(cid, principal, trigger);
  if (!r.ok()) {
    if (change) {
      follow_up(cid, principal, *change, since, QueueAnswer::kNotQueued);
      ctx_.log_store_error("refresh of " + who + " (" + trigger + ") not queued, will retry",
                           r.error());
    } else {
      ctx_.metrics.revalidation_dropped();
      ctx_.logger->warn(kAgentLog, "refresh of " + who + " (" + trigger +
                                       ") could not be queued: " + r.error().message);
    }
    return r;
  }
  if (change) follow_up(cid, principal, *change, since, queue_answer(*r));
  ctx_.logger->debug(kAgentLog, "refresh of " + who + " requested (" + trigger +
                                    "): " + revalidation_outcome_name(*r));
  return r;
}

void Triggers::on_upstream_change(const std::string& pool_name, const UpstreamChange& change) {
  std::optional<std::pair<std::string, Principal>> key = runner_.key_of(pool_name);
  if (!key) return;
  const std::string who = ctx_.who(key->first, key->second);
  if (change.session_lost) {
    ctx_.logger->info(kAgentLog, "upstream session of " + who + " ended" +
                                     (change.error ? ": " + change.error->message : std::string()));
  }
  if (change.kinds.empty()) return;
  std::string kinds;
  for (ListKind k : change.kinds) {
    kinds += (kinds.empty() ? "" : ",") + std::string(list_kind_name(k));
  }
  ctx_.logger->info(kAgentLog, "list_changed (" + kinds + ") from " + who);
  (void)request_refresh(key->first, key->second, "list_changed");
}

// The queue's gate may still be taken by an earlier request that was already handled, so a
// follow-up refreshes directly (the lease keeps agents that all saw the change from listing
// twice); while a lease is held elsewhere it waits for that refresh and looks again.
void Triggers::process() {
  std::vector<PendingChange> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending = followups_.pending();
  }
  const std::string in_progress = refresh_outcome_text(RefreshOutcome::kInProgress);
  for (const PendingChange& d : pending) {
    if (!ctx_.is_running()) return;
    const std::string who = ctx_.who(d.connection_id, d.principal);
    const char* trigger = change_trigger_name(d.trigger);
    FollowupCheck check = FollowupCheck::kStoreFailed;
    std::string cannot_run;
    const ConnectionConfig* cfg = ctx_.config.find_connection(d.connection_id);
    Result<std::optional<ManifestMeta>> meta =
        cfg == nullptr ? Result<std::optional<ManifestMeta>>(std::nullopt)
                       : ctx_.store->read_manifest_meta(d.connection_id, d.principal);
    if (cfg == nullptr) {
      check = FollowupCheck::kConnectionRemoved;
    } else if (!meta.ok()) {
      ctx_.log_store_error("deferred refresh of " + who, meta.error());
    } else if (ChangeFollowups::satisfied_by(
                   meta->has_value() ? std::optional<CacheEntryMeta>(cache_entry_meta(**meta))
                                     : std::nullopt,
                   d.changed_at_ms, cfg->config_hash)) {
      check = FollowupCheck::kStoredAfterChange;
    } else {
      Result<RefreshReport> r = runner_.run(d.connection_id, d.principal, trigger, std::nullopt);
      if (r.ok()) {
        check = r->outcome == in_progress ? FollowupCheck::kRefreshInProgress
                                          : FollowupCheck::kRefreshed;
      } else if (!passes_by_itself(r.error().code)) {
        // Any error other than a store failure will not get better by retrying.
        check = FollowupCheck::kCannotRun;
        cannot_run = r.error().message;
      }
    }
    FollowupDecision decision;
    {
      std::lock_guard<std::mutex> lock(mu_);
      decision = followups_.on_checked(d, check, steady_ms());
    }
    if (decision == FollowupDecision::kDropped) {
      ctx_.metrics.revalidation_dropped();
      ctx_.logger->warn(kAgentLog, std::string("the ") + trigger + " refresh of " + who +
                                       " cannot run: " + cannot_run);
    } else if (decision == FollowupDecision::kGiveUp) {
      ctx_.metrics.revalidation_dropped();
      ctx_.logger->warn(kAgentLog, std::string("gave up on the ") + trigger + " refresh of " + who +
                                       ": no listing after the change could be stored");
    }
  }
}

}  // namespace quiver
