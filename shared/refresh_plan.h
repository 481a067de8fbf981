// Refresh plan: what one refresh of (connection, principal) writes once its listing is over, as
// data the host carries out.
//
// A refresh is I/O around a few decisions: whether a queued request was already answered by a
// newer listing, what a listing in which some lists failed stores (the last good lists of their
// kinds, or the lists shown failed), the manifest bounds, what is written (a manifest, an error
// record, both) and whether the lease is renewed first or released with the write. They depend
// only on the listing, the stored meta, the connection's config_hash, the policy and the time, so
// they live here and are tested without a store or an upstream; the native agent
// (native-agent/engine/refresh_runner.cpp) only reads, lists, writes, counts and logs.
//
// The host's sequence:
//   acquire the lease            (held elsewhere: refresh_outcome kInProgress)
//   already_answered(...)        true: release, kUpToDate
//   list the upstream
//   needs_last_good(listing)     true: read the stored manifest into RefreshInputs::last_good
//   plan_refresh(inputs)         → RefreshPlan
//   held > plan.renew_after_ms   renew; refused: refused_settlement(why)
//   write plan.write             (failure_record() turns plan.error into the record)
//   settle_refresh(plan, result) → outcome and what to do about retries
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/freshness.h"
#include "shared/lease.h"
#include "shared/listing.h"
#include "shared/status.h"

namespace quiver {

enum class RefreshOutcome {
  kUnknown = 0,
  kCommitted,   // a complete manifest is stored
  kPartial,     // stored, but lists failed (shown failed or kept from the last good manifest)
  kFailed,      // nothing listed: the error is recorded beside the last good manifest
  kInProgress,  // the lease is held elsewhere: that refresh serves the request
  kUpToDate,    // a queued request that a newer listing already answered
  kRefused,     // the fenced write (or the renewal) refused: see RefreshSettlement::refused
};
// "committed", "partial", "failed", "in_progress", "up_to_date", "refused:<lease outcome>".
std::string refresh_outcome_text(RefreshOutcome outcome, LeaseOutcome refused = LeaseOutcome::kOk);
// The metric label of the same: "refused_lease_lost".
std::string refresh_outcome_label(RefreshOutcome outcome, LeaseOutcome refused = LeaseOutcome::kOk);

// A request queued at `queued_at_ms` (nullopt: not a queued request) is already answered when the
// stored data was listed at or after it and is still fresh under `config_hash`.
bool already_answered(const std::optional<CacheEntryMeta>& stored,
                      std::optional<int64_t> queued_at_ms, const FreshnessPolicy& policy,
                      std::string_view config_hash, int64_t now_ms);

// Whether plan_refresh will want the last good manifest: a list of a listing failed.
bool needs_last_good(const Listing& listing);

// The stored manifest a failed list may be kept from.
struct LastGoodManifest {
  bool has_data = false;
  std::string config_hash;  // the config it was listed under
  int64_t fetched_at_ms = 0;
  std::string manifest;  // canonical JSON
};

struct RefreshInputs {
  const Listing* listing = nullptr;  // null: the listing failed with `listing_error`
  Error listing_error;
  const LastGoodManifest* last_good = nullptr;  // null: none stored, or not read
  std::string config_hash;                      // the connection's, when the listing started
  FreshnessPolicy policy;
  int64_t max_manifest_bytes = 262144;
  int64_t lease_ms = 60000;
  int64_t fetched_at_ms = 0;  // when the listing started (data time)
};

enum class RefreshWrite {
  kCommit = 0,     // commit `manifest`; with `error`, record it after (the lease kept till then)
  kRecordFailure,  // record `error`; the last good manifest stays
};

// Why failed lists were or were not replaced by the last good ones (the host logs the two
// warnings).
enum class LastGoodUse {
  kNotNeeded = 0,  // no list failed
  kNone,           // none stored under this config, or nothing worth keeping
  kKept,           // failed lists replaced by the last good ones
  kUnreadable,     // the stored manifest does not decode: failed lists shown failed
  kDoesNotFit,     // kept lists would exceed the bound: failed lists shown failed
};

struct RefreshPlan {
  RefreshWrite write = RefreshWrite::kRecordFailure;
  ManifestWrite manifest;  // kCommit
  // kRecordFailure: why nothing could be committed. kCommit: the first failed list's error,
  // recorded beside the data (unredacted: the host redacts it through failure_record()).
  std::optional<Error> error;
  // kCommit: the commit gives the lease back (no error to record after it).
  bool release_with_commit = true;
  std::vector<ListKind> failed_lists;  // each counted by the host
  std::vector<ListKind> incomplete;    // failed or kept in the committed manifest
  LastGoodUse last_good = LastGoodUse::kNotNeeded;
  std::string last_good_problem;  // kUnreadable / kDoesNotFit: why
  // A listing that held the lease longer than this renews it before writing: a slow but live
  // refresh does not lose its write (a lost lease is refused by the fenced write anyway).
  int64_t renew_after_ms = 0;
};

RefreshPlan plan_refresh(const RefreshInputs& inputs);

// The failure record of `error`, whose message the host has redacted: the message cut to
// kMaxErrorMessageBytes, stamped with the attempt and with when it failed (never before the
// attempt).
RefreshFailure failure_record(const Error& error, std::string_view config_hash,
                              int64_t attempt_at_ms, int64_t now_ms);

// The refresh-due index scores (FencedWriteOptions::due_at_ms) of the two fenced writes: when
// maintenance next has work on the key, never later than decide_refresh would. A commit: its
// refresh-ahead moment, fetched_at + ratio x its fresh TTL (at once for data stored never fresh).
// A failure record: when the retry after it may start (max(error_at, attempt_at) +
// retry_after_failure_ms); a later refresh-ahead time of data still fresh only costs a look.
int64_t commit_due_at_ms(const ManifestWrite& write, const FreshnessPolicy& policy);
int64_t failure_due_at_ms(const RefreshFailure& failure, const FreshnessPolicy& policy);

// What follows a failed listing: nothing, the backoff cleared (a complete manifest is stored, or
// the listing failed kAuthorizationRequired: nothing changes until someone authorizes, and a new
// authorization lists at once), or a retry scheduled with backoff (retry_backoff_ms).
enum class RetryAction { kNone = 0, kSettle, kSchedule };

struct RefreshSettlement {
  RefreshOutcome outcome = RefreshOutcome::kUnknown;
  LeaseOutcome refused = LeaseOutcome::kOk;  // kRefused: why
  RetryAction retry = RetryAction::kNone;
  std::string text() const { return refresh_outcome_text(outcome, refused); }
};

// The outcome once plan.write ran and the store answered `written`.
RefreshSettlement settle_refresh(const RefreshPlan& plan, const FencedWriteResult& written);
// The lease renewal before the write was refused.
RefreshSettlement refused_settlement(LeaseOutcome why);

}  // namespace quiver
