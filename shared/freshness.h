// Freshness: how old a cached manifest may be before it is revalidated, and before it is no longer
// served at all.
//
// Every read of a cached (connection, principal) manifest asks one question: may I serve this, and
// should somebody refresh it? `classify` answers it from the entry's metadata, the configured
// policy, the connection's current config_hash and the caller's clock. It is a pure function: the
// edge calls it on every read, the agent's maintenance loop calls `decide_refresh` (or the
// `needs_refresh_ahead` shorthand) to pick the keys it refreshes before anyone sees them stale.
//
// States (stale-while-revalidate):
//   kFresh    served; nothing to do.
//   kStale    served; a background revalidation is queued. Data the writer stored as
//             never fresh (a list failed: `never_fresh`) is stale from the start.
//   kExpired  older than the maximum age: not served as data (status only); revalidation queued.
//   kMiss     nothing servable: no entry, an entry without data (first listing failed or pending),
//             or data listed under another config_hash (a config change, even if its invalidation
//             was lost). Revalidation queued.
//
// Upstream cache hints (MCP protocol 2026-07-28, `ttlMs` / `cacheScope`): the effective fresh TTL
// is the policy's, shortened to the upstream's ttlMs when that is shorter, but never below
// `min_upstream_ttl_ms` (so a server answering ttlMs: 0 cannot make every read revalidate). The
// maximum age stays the policy's: a short upstream TTL makes data stale sooner, it does not take
// away the last good manifest. A `private` scope marks the data as never shareable across
// principals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"

namespace quiver {

struct FreshnessPolicy {
  // Data younger than this is fresh (served without revalidation).
  int64_t fresh_ttl_ms = 900000;  // 15 min
  // Data older than this is expired: status only, never served as data.
  int64_t max_age_ms = 86400000;  // 24 h
  // The maintenance loop refreshes a key once it is this fraction into its fresh TTL.
  double refresh_ahead_ratio = 0.8;
  // Floor for an upstream's ttlMs. 60 s: with the 3.5 s listing deadline a misbehaving (or
  // "do not cache") server costs at most one listing per key per minute, the same order as the
  // revalidation gate window, instead of one per read.
  int64_t min_upstream_ttl_ms = 60000;
  // A fetched_at up to this far in the caller's future is ordinary clock skew between the agent
  // that wrote it and the reader: the data counts as age 0. Further in the future the timestamp
  // is not trusted: the entry is served as stale and revalidated (so it cannot stay fresh forever).
  int64_t clock_skew_tolerance_ms = 60000;
  // After a refresh attempt that did not produce new data (failed or still running), the
  // maintenance loop leaves the key alone for this long.
  int64_t retry_after_failure_ms = 60000;
};

// OK when the policy is usable: 0 < fresh_ttl <= max_age, 0 < ratio <= 1,
// 0 <= min_upstream_ttl <= fresh_ttl, tolerance and retry >= 0. `classify` does not fail on an
// invalid policy: it clamps each value to the nearest usable one (ratio into [0, 1], NaN as 1).
// Validate the policy where configuration is loaded.
Status validate_freshness_policy(const FreshnessPolicy& policy);

// MCP `cacheScope`. Unspecified (no hint) behaves as public: the key already carries the
// principal. Any value other than "public" fails closed as private.
enum class CacheScope { kUnspecified = 0, kPublic, kPrivate };
const char* cache_scope_name(CacheScope scope);  // "", "public", "private"
CacheScope cache_scope_from_string(std::string_view text);

// The last failed refresh of an entry, as recorded beside the last good data.
struct RefreshError {
  std::string code;  // error_code_name(), e.g. "UPSTREAM_UNAVAILABLE"
  std::string message;
  int64_t at_ms = 0;
};

// What classification needs to know about a cached entry; independent of the manifest itself
// (the Redis manifest hash and the SQLite row both map onto it).
struct CacheEntryMeta {
  bool has_data = false;                   // false: only an error/attempt record, no manifest yet
  int64_t fetched_at_ms = 0;               // when the data was listed (the agent's clock)
  std::string config_hash;                 // the config the data was listed under
  std::optional<int64_t> upstream_ttl_ms;  // the upstream's ttlMs hint, absent when none
  CacheScope cache_scope = CacheScope::kUnspecified;
  std::optional<RefreshError> last_error;     // the last failed refresh, if any
  std::optional<int64_t> last_attempt_at_ms;  // when the last refresh attempt started
  // A refresh webhook marked the data stale then (shared/webhook_signature.h). Data
  // listed before it (fetched_at <= invalidated_at: a listing that started before the change)
  // is fresh only until then; a listing that started later clears it.
  std::optional<int64_t> invalidated_at_ms;
  // The writer stored the data as never fresh (`fresh_until` = `fetched_at`): a list of it failed
  // (kept from an earlier listing, or shown as failed: the manifest's `incomplete_lists`), or the
  // upstream said ttlMs 0 with no floor configured. Such data is served, but stale from the moment
  // it was written, so readers revalidate it (ADR-004: a failed list never poses as fresh data).
  bool never_fresh = false;
};

enum class Freshness { kMiss = 0, kFresh, kStale, kExpired };
const char* freshness_name(Freshness state);  // "miss", "fresh", "stale", "expired"

enum class MissReason { kNone = 0, kNoEntry, kNoData, kConfigChanged };
const char* miss_reason_name(MissReason reason);  // "", "no_entry", "no_data", "config_changed"

struct Classification {
  Freshness state = Freshness::kMiss;
  MissReason miss_reason = MissReason::kNoEntry;  // kNone unless state == kMiss
  bool servable = false;                          // the data may be returned (fresh or stale)
  bool revalidate = true;                         // a background revalidation should be queued
  // False for private data (and for a miss: there is nothing to share). Callers never hand this
  // entry to another principal, e.g. when deduplicating identical per-member manifests.
  bool shareable_across_principals = false;
  bool clock_skewed = false;  // fetched_at lies beyond the skew tolerance in the future
  // An error was recorded after the data was fetched (or there is no data): with a miss, this is
  // "could not load" rather than "not loaded yet".
  bool last_refresh_failed = false;
  // Derived times, all zero for a miss. Fresh while now < fresh_until, stale while
  // now < expires_at, expired from expires_at on; refresh ahead from refresh_at on.
  int64_t effective_fresh_ttl_ms = 0;
  int64_t age_ms = 0;
  int64_t fresh_until_ms = 0;
  int64_t refresh_at_ms = 0;
  int64_t expires_at_ms = 0;
};

// The fresh TTL after applying the upstream hint: min(policy, upstream), at least the floor.
int64_t effective_fresh_ttl_ms(const FreshnessPolicy& policy,
                               std::optional<int64_t> upstream_ttl_ms);

// Classifies a cached entry (nullopt: no entry) against the connection's current config_hash.
// An empty config_hash never matches (fail closed).
Classification classify(const std::optional<CacheEntryMeta>& entry, const FreshnessPolicy& policy,
                        std::string_view current_config_hash, int64_t now_ms);

// Why the maintenance loop refreshes a key now, or why not.
enum class RefreshReason {
  kNone = 0,    // not due: fresh and before refresh_at
  kBackingOff,  // due, but a recent attempt has not produced data yet
  kAhead,       // fresh, past refresh_at
  kStale,
  kExpired,
  kMiss,
};
const char* refresh_reason_name(RefreshReason reason);

struct RefreshDecision {
  bool refresh = false;
  RefreshReason reason = RefreshReason::kNone;
  // When to look at the key again if not refreshing now (now_ms when refreshing).
  int64_t next_check_at_ms = 0;
};

// The maintenance loop's decision for one key. Due when past refresh_at (or stale, expired,
// missing), unless an attempt newer than the data started or failed less than
// retry_after_failure_ms ago.
RefreshDecision decide_refresh(const std::optional<CacheEntryMeta>& entry,
                               const FreshnessPolicy& policy, std::string_view current_config_hash,
                               int64_t now_ms);

// How long an agent waits before it retries a listing that failed (or in which lists failed),
// after `failures` such listings in a row (1 for the first): 2 s, doubling, at most `max_ms`
// (and at least 1 ms).
int64_t retry_backoff_ms(int failures, int64_t max_ms);

inline bool needs_refresh_ahead(const std::optional<CacheEntryMeta>& entry,
                                const FreshnessPolicy& policy, std::string_view current_config_hash,
                                int64_t now_ms) {
  return decide_refresh(entry, policy, current_config_hash, now_ms).refresh;
}

}  // namespace quiver
