#include "native-agent/engine/refresh_runner.h"

#include <utility>
#include <vector>

#include "native-agent/base/clock.h"
#include "native-agent/engine/oauth_manager.h"
#include "shared/lease.h"
#include "shared/manifest.h"
#include "shared/oauth.h"

namespace quiver {

namespace {

// The Bearer challenge of a 401/403 when it asks for more scope (RFC 6750 §3.1
// `insufficient_scope`); nullopt for anything else, an unreadable value included.
std::optional<oauth::BearerChallenge> insufficient_scope(const std::optional<std::string>& value) {
  if (!value.has_value() || value->empty()) return std::nullopt;
  Result<std::optional<oauth::BearerChallenge>> parsed = oauth::parse_www_authenticate(*value);
  if (!parsed.ok() || !parsed->has_value()) return std::nullopt;
  if ((*parsed)->error != std::optional<std::string>("insufficient_scope")) return std::nullopt;
  return *parsed;
}

constexpr std::size_t kLeaseTokenBytes = 16;

}  // namespace

std::optional<std::pair<std::string, Principal>> RefreshRunner::key_of(
    const std::string& pool_name) {
  std::lock_guard<std::mutex> lock(names_mu_);
  auto it = pool_keys_.find(pool_name);
  if (it == pool_keys_.end()) return std::nullopt;
  return it->second;
}

void RefreshRunner::note_key(const std::string& pool_name, const std::string& cid,
                             const Principal& principal) {
  std::lock_guard<std::mutex> lock(names_mu_);
  pool_keys_.insert_or_assign(pool_name, std::make_pair(cid, principal));
}

std::optional<LastGoodManifest> RefreshRunner::read_last_good(const std::string& cid,
                                                              const Principal& principal) {
  Result<std::optional<StoredManifest>> last = ctx_.store->read_manifest(cid, principal);
  if (!last.ok()) {
    ctx_.log_store_error("reading the last good manifest of " + ctx_.who(cid, principal),
                         last.error());
    return std::nullopt;
  }
  if (!last->has_value()) return std::nullopt;
  const StoredManifest& m = **last;
  return LastGoodManifest{m.meta.has_data, m.meta.config_hash, m.meta.fetched_at_ms.value_or(0),
                          m.manifest};
}

Result<RefreshReport> RefreshRunner::run(const std::string& cid, const Principal& principal,
                                         const std::string& trigger,
                                         std::optional<int64_t> queued_at_ms) {
  AgentContext& c = ctx_;
  Logger& log = *c.logger;
  const std::string who = c.who(cid, principal);
  int64_t started_steady = steady_ms();
  RefreshReport report;
  report.connection_id = cid;
  report.principal = principal;
  // One span per refresh (tracer.h), its listing a child span.
  Span span = c.tracer ? c.tracer->start("quiver.refresh", SpanKind::kInternal) : Span();
  span.set("quiver.connection_id", cid);
  span.set("quiver.principal", principal.str());
  span.set("quiver.trigger", trigger);
  auto failed = [&](Error e) -> Result<RefreshReport> {
    span.error(error_code_name(e.code));
    return e;
  };
  auto finish = [&](const RefreshSettlement& s) -> Result<RefreshReport> {
    report.outcome = s.text();
    report.duration_ms = steady_ms() - started_steady;
    const std::string label = refresh_outcome_label(s.outcome, s.refused);
    c.metrics.refresh(label);
    span.set("quiver.outcome", label);
    if (report.error) {
      span.error(error_code_name(report.error->code));
    } else {
      span.ok();
    }
    return report;
  };
  auto finish_as = [&](RefreshOutcome outcome) {
    RefreshSettlement s;
    s.outcome = outcome;
    return finish(s);
  };

  Result<const ConnectionConfig*> found = c.connection(cid);
  if (!found.ok()) return found.error();
  const ConnectionConfig& cfg = **found;
  if (Status st = check_principal(cfg, principal); !st.ok()) return st.error();
  if (Status st = validate_revalidation_reason(trigger); !st.ok()) return st.error();
  Result<UpstreamEndpoint> upstream = cfg.upstream_for(principal);
  if (!upstream.ok()) return upstream.error();
  Result<std::string> random = c.options.random(kLeaseTokenBytes);
  if (!random.ok()) return random.error();
  Result<std::string> token = make_lease_token(*random);
  if (!token.ok()) return token.error();

  const RuntimeControls& rt = c.config.runtime;
  Result<AcquireResult> acquired = c.store->acquire_lease(cid, principal, *token, rt.lease_ms);
  if (!acquired.ok()) {
    c.metrics.refresh("error");
    c.metrics.refresh_failure(error_code_name(acquired.error().code));
    log.warn(kAgentLog, "refresh of " + who + " (" + trigger +
                            "): no lease, the store failed: " + acquired.error().message);
    return failed(acquired.error());
  }
  if (!acquired->acquired) {
    c.metrics.lease_contention();
    log.info(kAgentLog, "refresh of " + who + " (" + trigger +
                            ") skipped: lease held elsewhere (fence " +
                            std::to_string(acquired->holder_fence) + ")");
    return finish_as(RefreshOutcome::kInProgress);
  }
  Lease lease = acquired->lease;
  int64_t lease_at = steady_ms();

  if (queued_at_ms) {
    Result<std::optional<ManifestMeta>> meta = c.store->read_manifest_meta(cid, principal);
    if (meta.ok() && meta->has_value() &&
        already_answered(cache_entry_meta(**meta), queued_at_ms, c.policy, cfg.config_hash,
                         c.options.now_ms())) {
      (void)c.store->release_lease(cid, principal, lease);
      report.etag = (*meta)->etag.value_or("");
      return finish_as(RefreshOutcome::kUpToDate);
    }
  }

  // List.
  std::string name = c.pool_name(cid, principal);
  {
    std::lock_guard<std::mutex> lock(names_mu_);
    pool_keys_.insert_or_assign(name, std::make_pair(cid, principal));
  }
  int64_t fetched_at = c.options.now_ms();
  ListingLog::Scope in_flight(c.listings, cid, principal, fetched_at);  // to the write's end
  // One listing through the pooled connection of `spec` (a changed credential makes a new
  // session: the pool compares specs).
  ListInfo info;  // of the last listing (its auth_challenge drives a step-up)
  auto list_through = [&](UpstreamSpec spec) -> Result<Listing> {
    Result<Listing> listing = Error(ErrorCode::kInternal, "not listed");
    if (Status put = c.pool->put(std::move(spec)); !put.ok()) return put.error();
    Span list_span =
        c.tracer ? c.tracer->start("quiver.list", SpanKind::kClient, span.context()) : Span();
    list_span.set("quiver.connection_id", cid);
    list_span.set("quiver.transport", std::string(transport_kind_name(upstream->transport)));
    info = ListInfo{};
    listing = c.pool->list(name, list_timeout_for(cfg, rt), &info);
    if (listing.ok()) {
      int64_t failed_lists = 0;
      for (int i = 0; i < kListKindCount; ++i) {
        const ListOutcome& out = listing->list(static_cast<ListKind>(i));
        if (out.state == ListState::kOk) {
          list_span.set(std::string("quiver.") + list_kind_name(static_cast<ListKind>(i)),
                        static_cast<int64_t>(out.items.size()));
        } else if (out.state == ListState::kFailed) {
          ++failed_lists;
        }
      }
      list_span.set("quiver.failed_lists", failed_lists);
      if (failed_lists > 0) {
        list_span.error("LISTS_FAILED");
      } else {
        list_span.ok();
      }
    } else {
      list_span.error(error_code_name(listing.error().code));
    }
    return listing;
  };
  // OAuth: the token is asked for within the listing's deadline; an upstream that refuses it
  // (401) gets one more listing with a renewed token; one that answers 403 insufficient_scope
  // gets a step-up (OAuthManager::step_up: a new token with more scope, or authorization_required
  // when a person must consent), at most oauth::kMaxStepUps. No authorization is the listing's
  // error (kAuthorizationRequired), recorded like any other: the last good manifest stays, stale.
  const int64_t token_deadline = steady_ms() + list_timeout_for(cfg, rt);
  std::optional<Secret> bearer;
  auto attempt = [&](const std::optional<Secret>& rejected) -> Result<Listing> {
    Result<UpstreamSpec> spec = c.spec_for(name, cfg, principal, token_deadline, rejected, &bearer);
    if (!spec.ok()) return spec.error();
    return list_through(std::move(*spec));
  };
  Result<Listing> listing = attempt(std::nullopt);
  if (cfg.auth == AuthType::kOAuth) {
    bool renewed = false;
    for (int step_ups = 0; bearer.has_value() && refused_credential(listing);) {
      const std::optional<Secret> refused = bearer;
      std::optional<oauth::BearerChallenge> scope = insufficient_scope(info.auth_challenge);
      if (scope.has_value() && step_ups < oauth::kMaxStepUps) {
        ++step_ups;
        log.info(kAgentLog, "refresh of " + who +
                                ": the upstream asks for more scope (403 insufficient_scope); "
                                "stepping up");
        Result<Secret> stepped = c.oauth->step_up(cfg, principal, token_deadline, *refused, *scope);
        if (!stepped.ok()) {
          listing = stepped.error();
          break;
        }
        bearer.reset();
        listing = attempt(std::nullopt);  // spec_for reads the stepped-up token
        continue;
      }
      if (scope.has_value() || renewed) break;
      renewed = true;
      log.info(kAgentLog,
               "refresh of " + who + ": the upstream refused its access token; renewing");
      bearer.reset();
      listing = attempt(refused);
    }
    if (c.oauth && listing.ok() && !refused_credential(listing)) c.oauth->listed(cid, principal);
  }
  c.metrics.listing_duration_ms(steady_ms() - lease_at);

  // Preferences learn from every list that succeeded, before the commit: a new capability
  // that policy disables is hidden by the time the manifest shows it.
  if (listing.ok()) {
    Result<ReconcileReport> rec = c.prefs->reconcile_listing(
        cid, principal, *listing, PreferencePolicy{cfg.auto_enable_new_capabilities});
    if (!rec.ok()) {
      log.warn(kAgentLog, "preferences of " + cid + " not reconciled: " + rec.error().message);
    } else if (rec->inserted > 0) {
      log.info(kAgentLog, "preferences of " + cid + ": " + std::to_string(rec->inserted) +
                              " new capabilities");
    }
  }

  std::optional<LastGoodManifest> last_good;
  if (listing.ok() && needs_last_good(*listing)) last_good = read_last_good(cid, principal);
  RefreshInputs in;
  in.listing = listing.ok() ? &*listing : nullptr;
  if (!listing.ok()) in.listing_error = listing.error();
  in.last_good = last_good ? &*last_good : nullptr;
  in.config_hash = cfg.config_hash;  // the config this listing started under
  in.policy = c.policy;
  in.max_manifest_bytes = rt.max_manifest_bytes;
  in.lease_ms = rt.lease_ms;
  in.fetched_at_ms = fetched_at;
  const RefreshPlan plan = plan_refresh(in);
  for (ListKind kind : plan.failed_lists) c.metrics.list_failure(list_kind_name(kind));
  if (plan.last_good == LastGoodUse::kUnreadable) {
    log.warn(kAgentLog,
             "the last good manifest of " + who +
                 " is unreadable; failed lists are shown failed: " + plan.last_good_problem);
  } else if (plan.last_good == LastGoodUse::kDoesNotFit) {
    log.warn(kAgentLog, "the last good lists of " + who +
                            " do not fit the manifest bound; failed lists are shown failed: " +
                            plan.last_good_problem);
  }
  const bool commit = plan.write == RefreshWrite::kCommit;

  if (steady_ms() - lease_at > plan.renew_after_ms) {
    Result<LeaseOutcome> renewed = c.store->renew_lease(cid, principal, lease, rt.lease_ms);
    if (renewed.ok() && *renewed != LeaseOutcome::kOk) {
      log.warn(kAgentLog, "refresh of " + who + " (" + trigger +
                              ") refused: " + lease_outcome_name(*renewed) + " after listing for " +
                              std::to_string(steady_ms() - lease_at) + " ms (lease " +
                              std::to_string(rt.lease_ms) + " ms)");
      if (!commit && plan.error) {
        report.error = Error(plan.error->code, c.config.redact(plan.error->message));
      }
      return finish(refused_settlement(*renewed));
    }
  }

  // The error as reported and recorded: redacted, bounded, counted.
  auto record_of = [&](const Error& e) {
    RefreshFailure f = failure_record(Error(e.code, c.config.redact(e.message)), cfg.config_hash,
                                      fetched_at, c.options.now_ms());
    report.error = Error(e.code, f.error_message);
    c.metrics.refresh_failure(f.error_code);
    return f;
  };
  FencedWriteOptions fenced;
  Result<FencedWriteResult> written = Error(ErrorCode::kInternal, "nothing written");
  if (commit) {
    fenced.release_lease = plan.release_with_commit;
    fenced.due_at_ms = commit_due_at_ms(plan.manifest, c.policy);
    written = c.store->commit_manifest(cid, principal, lease, plan.manifest, fenced);
    if (plan.error && written.ok() && written->ok()) {
      // A list failed: the lease was kept past the commit to record its error beside the data.
      fenced.release_lease = true;
      RefreshFailure f = record_of(*plan.error);
      fenced.due_at_ms = failure_due_at_ms(f, c.policy);
      Result<FencedWriteResult> recorded =
          c.store->record_failure(cid, principal, lease, f, fenced);
      if (!recorded.ok() || !recorded->ok()) {
        log.warn(
            kAgentLog,
            "refresh of " + who + ": the error of its failed lists was not recorded: " +
                (recorded.ok() ? lease_outcome_name(recorded->outcome) : recorded.error().message));
        (void)c.store->release_lease(cid, principal, lease);
      }
    }
  } else {
    RefreshFailure f = record_of(plan.error.value_or(Error(ErrorCode::kUnknown, "listing failed")));
    fenced.due_at_ms = failure_due_at_ms(f, c.policy);
    written = c.store->record_failure(cid, principal, lease, f, fenced);
  }
  if (!written.ok()) {
    c.metrics.refresh("error");
    c.metrics.refresh_failure(error_code_name(written.error().code));
    log.warn(kAgentLog, "refresh of " + who + " (" + trigger +
                            "): the store failed writing: " + written.error().message);
    (void)c.store->release_lease(cid, principal, lease);
    return failed(written.error());
  }
  const RefreshSettlement settled = settle_refresh(plan, *written);
  if (settled.outcome == RefreshOutcome::kRefused) {
    // Give the lease back if it is somehow still ours (a config change refuses a holder).
    (void)c.store->release_lease(cid, principal, lease);
    log.warn(kAgentLog, "refresh of " + who + " (" + trigger + ") refused by the fenced write: " +
                            lease_outcome_name(settled.refused) + " (fence " +
                            std::to_string(lease.fence) + ")");
    return finish(settled);
  }
  c.metrics.set_authorization_required(
      name, !commit && report.error && report.error->code == ErrorCode::kAuthorizationRequired);
  if (settled.retry == RetryAction::kSettle) settle_retry(name);
  if (settled.retry == RetryAction::kSchedule) schedule_retry(name, cid, principal);
  if (commit) {
    report.committed = true;
    report.etag = plan.manifest.etag;
    report.incomplete_lists = plan.incomplete;
    c.metrics.set_incomplete(name, !plan.incomplete.empty());
  }
  switch (settled.outcome) {
    case RefreshOutcome::kCommitted:
      log.info(kAgentLog, "refreshed " + who + " (" + trigger + ") in " +
                              std::to_string(steady_ms() - started_steady) + " ms, etag " +
                              plan.manifest.etag + (plan.manifest.truncated ? ", truncated" : ""));
      break;
    case RefreshOutcome::kPartial:
      log.warn(kAgentLog, "refreshed " + who + " (" + trigger + ") in part: " +
                              list_kinds_text(plan.incomplete) + " could not be loaded (" +
                              (report.error ? report.error->message : std::string("failed")) +
                              "), committed as never fresh, etag " + plan.manifest.etag);
      break;
    default:
      log.warn(kAgentLog, "refresh of " + who + " (" + trigger + ") failed: " +
                              error_code_name(report.error->code) + ": " + report.error->message);
      break;
  }
  return finish(settled);
}

void RefreshRunner::schedule_retry(const std::string& name, const std::string& cid,
                                   const Principal& principal) {
  std::lock_guard<std::mutex> lock(retry_mu_);
  Retry& r = retries_[name];
  r.connection_id = cid;
  r.principal = principal;
  ++r.failures;
  r.due_ms = steady_ms() + retry_backoff_ms(r.failures, ctx_.config.runtime.retry_max_backoff_ms);
}

void RefreshRunner::settle_retry(const std::string& name) {
  std::lock_guard<std::mutex> lock(retry_mu_);
  retries_.erase(name);
}

void RefreshRunner::process_retries() {
  std::vector<Retry> due;
  {
    std::lock_guard<std::mutex> lock(retry_mu_);
    int64_t now = steady_ms();
    for (auto it = retries_.begin(); it != retries_.end();) {
      if (ctx_.config.find_connection(it->second.connection_id) == nullptr) {
        it = retries_.erase(it);
        continue;
      }
      if (it->second.due_ms <= now) {
        due.push_back(it->second);
        // Not retried again before another backoff, whatever this attempt ends in (a lease
        // held elsewhere, a store failure); a failed attempt reschedules with a longer one.
        it->second.due_ms =
            now + retry_backoff_ms(it->second.failures, ctx_.config.runtime.retry_max_backoff_ms);
      }
      ++it;
    }
  }
  for (const Retry& r : due) {
    if (!ctx_.is_running()) return;
    Result<RefreshReport> report = run(r.connection_id, r.principal, "retry", std::nullopt);
    if (!report.ok()) {
      ctx_.logger->warn(kAgentLog, "retry of " + ctx_.who(r.connection_id, r.principal) +
                                       " did not run: " + report.error().message);
    }
  }
}

}  // namespace quiver
