#include "shared/refresh_plan.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "shared/enum_names.h"
#include "shared/manifest.h"
#include "shared/utf8.h"

namespace quiver {

namespace {

const char* outcome_word(RefreshOutcome outcome) {
  static constexpr const char* const kNames[] = {"unknown",     "committed",  "partial", "failed",
                                                 "in_progress", "up_to_date", "refused"};
  static_assert(covers_enum(kNames, RefreshOutcome::kRefused));
  return name_of(kNames, outcome, "unknown");
}

std::string refresh_outcome_joined(RefreshOutcome outcome, LeaseOutcome refused, char sep) {
  std::string text = outcome_word(outcome);
  if (outcome == RefreshOutcome::kRefused) text += sep + std::string(lease_outcome_name(refused));
  return text;
}

// The error a failed list is recorded with: the method, the cause, and what arrived before it.
Error failed_list_error(ListKind kind, const ListOutcome& list) {
  Error e = list.error ? *list.error : Error(ErrorCode::kUnknown, "failed");
  e.message = std::string(list_method(kind)) + " could not be loaded: " + e.message;
  if (!list.items.empty()) {
    e.message += " (" + std::to_string(list.items.size()) + " items on " +
                 std::to_string(list.pages) + " pages arrived before; not kept)";
  }
  return e;
}

// Replaces the failed lists of `manifest` by the last good lists of their kinds, when that
// manifest was listed under the same config and the result still fits the size bound.
LastGoodUse merge_last_good(const RefreshInputs& in, const ManifestLimits& limits,
                            Manifest* manifest, std::string* problem) {
  const LastGoodManifest* last = in.last_good;
  if (last == nullptr || !last->has_data || last->config_hash != in.config_hash) {
    return LastGoodUse::kNone;
  }
  Result<Manifest> old = decode_manifest(last->manifest);
  if (!old.ok()) {
    *problem = old.error().message;
    return LastGoodUse::kUnreadable;
  }
  Manifest merged = *manifest;
  if (keep_last_good_lists(&merged, *old, last->fetched_at_ms, in.fetched_at_ms,
                           in.policy.max_age_ms)
          .empty()) {
    return LastGoodUse::kNone;
  }
  if (Status fits = fit_kept_lists(&merged, limits.max_bytes); !fits.ok()) {
    *problem = fits.error().message;
    return LastGoodUse::kDoesNotFit;
  }
  *manifest = std::move(merged);
  return LastGoodUse::kKept;
}

}  // namespace

std::string refresh_outcome_text(RefreshOutcome outcome, LeaseOutcome refused) {
  return refresh_outcome_joined(outcome, refused, ':');
}

std::string refresh_outcome_label(RefreshOutcome outcome, LeaseOutcome refused) {
  return refresh_outcome_joined(outcome, refused, '_');
}

bool already_answered(const std::optional<CacheEntryMeta>& stored,
                      std::optional<int64_t> queued_at_ms, const FreshnessPolicy& policy,
                      std::string_view config_hash, int64_t now_ms) {
  if (!queued_at_ms || !stored || !stored->has_data || stored->fetched_at_ms < *queued_at_ms) {
    return false;
  }
  return classify(stored, policy, config_hash, now_ms).state == Freshness::kFresh;
}

bool needs_last_good(const Listing& listing) {
  return std::any_of(std::begin(listing.lists), std::end(listing.lists),
                     [](const ListOutcome& l) { return l.state == ListState::kFailed; });
}

// Per list: lists that succeeded update; a list that failed keeps the last good list of its kind
// (listed under the same config), or shows as failed with its error, never as an empty list. A
// manifest holding a failed or kept list is committed as never fresh (fresh_until = fetched_at:
// readers serve it stale and revalidate) and its error is recorded beside it.
RefreshPlan plan_refresh(const RefreshInputs& in) {
  RefreshPlan plan;
  plan.renew_after_ms = in.lease_ms / 2;
  if (in.listing == nullptr) {
    plan.error = in.listing_error;
    return plan;
  }
  ManifestLimits limits;
  limits.max_bytes = static_cast<std::size_t>(in.max_manifest_bytes);
  limits.max_definition_bytes = std::min(limits.max_definition_bytes, limits.max_bytes);
  Result<Manifest> manifest = manifest_from_listing(*in.listing, limits);
  std::optional<Error> list_failure;
  if (manifest.ok()) {
    for (int i = 0; i < kListKindCount; ++i) {
      const ListOutcome& l = in.listing->lists[i];
      if (l.state != ListState::kFailed) continue;
      auto kind = static_cast<ListKind>(i);
      plan.failed_lists.push_back(kind);
      if (!list_failure) list_failure = failed_list_error(kind, l);
    }
    if (list_failure) {
      plan.last_good = merge_last_good(in, limits, &*manifest, &plan.last_good_problem);
    }
    plan.incomplete = incomplete_lists(*manifest);
  }
  Result<EncodedManifest> encoded =
      manifest.ok() ? encode_manifest(*manifest) : Result<EncodedManifest>(manifest.error());
  if (!encoded.ok()) {
    plan.error = encoded.error();
    return plan;
  }
  plan.write = RefreshWrite::kCommit;
  plan.error = list_failure;
  plan.release_with_commit = !list_failure.has_value();
  ManifestWrite& w = plan.manifest;
  w.manifest = std::move(encoded->bytes);
  w.etag = encoded->etag;
  w.config_hash = in.config_hash;
  w.fetched_at_ms = in.fetched_at_ms;
  w.fresh_until_ms =
      plan.incomplete.empty()
          ? in.fetched_at_ms + effective_fresh_ttl_ms(in.policy, manifest->cache.ttl_ms)
          : in.fetched_at_ms;  // never fresh: a list failed (schema/redis-keys.md)
  w.expires_at_ms = in.fetched_at_ms + in.policy.max_age_ms;
  w.cache_scope = manifest->cache.cache_scope.value_or("");
  w.truncated = manifest->truncated;
  return plan;
}

int64_t commit_due_at_ms(const ManifestWrite& write, const FreshnessPolicy& policy) {
  // classify()'s refresh_at for the entry as written (its fresh TTL is fresh_until - fetched_at).
  const int64_t ttl = std::max<int64_t>(0, write.fresh_until_ms - write.fetched_at_ms);
  const double ratio = std::clamp(
      std::isnan(policy.refresh_ahead_ratio) ? 1.0 : policy.refresh_ahead_ratio, 0.0, 1.0);
  const auto ahead = static_cast<int64_t>(std::llround(ratio * static_cast<double>(ttl)));
  return std::max<int64_t>(0, write.fetched_at_ms + std::min(ahead, ttl));
}

int64_t failure_due_at_ms(const RefreshFailure& failure, const FreshnessPolicy& policy) {
  const int64_t last = std::max(failure.error_at_ms, failure.attempt_at_ms);
  return std::max<int64_t>(0, last + std::max<int64_t>(0, policy.retry_after_failure_ms));
}

RefreshFailure failure_record(const Error& error, std::string_view config_hash,
                              int64_t attempt_at_ms, int64_t now_ms) {
  RefreshFailure f;
  f.config_hash = std::string(config_hash);
  f.error_code = error_code_name(error.code);
  f.error_message = cut_utf8(error.message, kMaxErrorMessageBytes);
  f.error_at_ms = std::max(now_ms, attempt_at_ms);
  f.attempt_at_ms = attempt_at_ms;
  return f;
}

RefreshSettlement settle_refresh(const RefreshPlan& plan, const FencedWriteResult& written) {
  if (!written.ok()) return refused_settlement(written.outcome);
  RefreshSettlement s;
  if (plan.write == RefreshWrite::kRecordFailure) {
    s.outcome = RefreshOutcome::kFailed;
    // Nothing changes until someone authorizes (a new authorization lists at once): no retry.
    s.retry = plan.error && plan.error->code == ErrorCode::kAuthorizationRequired
                  ? RetryAction::kSettle
                  : RetryAction::kSchedule;
  } else if (plan.incomplete.empty()) {
    s.outcome = RefreshOutcome::kCommitted;
    s.retry = RetryAction::kSettle;
  } else {
    s.outcome = RefreshOutcome::kPartial;
    s.retry = RetryAction::kSchedule;
  }
  return s;
}

RefreshSettlement refused_settlement(LeaseOutcome why) {
  RefreshSettlement s;
  s.outcome = RefreshOutcome::kRefused;
  s.refused = why;
  return s;
}

}  // namespace quiver
