#include "shared/freshness.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "shared/enum_names.h"

namespace quiver {
namespace {

constexpr int64_t kMaxTime = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinTime = std::numeric_limits<int64_t>::min();

// Timestamps come from peers: sums and differences saturate instead of overflowing.
int64_t add_sat(int64_t a, int64_t b) {
  if (b > 0 && a > kMaxTime - b) return kMaxTime;
  if (b < 0 && a < kMinTime - b) return kMinTime;
  return a + b;
}

int64_t sub_sat(int64_t a, int64_t b) {
  if (b < 0 && a > kMaxTime + b) return kMaxTime;
  if (b > 0 && a < kMinTime + b) return kMinTime;
  return a - b;
}

// An invalid policy is clamped into the valid range, so that a bad value degrades behaviour
// instead of making every entry fresh forever (or never).
FreshnessPolicy sanitize(const FreshnessPolicy& p) {
  FreshnessPolicy s = p;
  s.fresh_ttl_ms = std::max<int64_t>(1, p.fresh_ttl_ms);
  s.max_age_ms = std::max(s.fresh_ttl_ms, p.max_age_ms);
  if (std::isnan(p.refresh_ahead_ratio)) {
    s.refresh_ahead_ratio = 1.0;
  } else {
    s.refresh_ahead_ratio = std::min(1.0, std::max(0.0, p.refresh_ahead_ratio));
  }
  s.min_upstream_ttl_ms = std::min(s.fresh_ttl_ms, std::max<int64_t>(0, p.min_upstream_ttl_ms));
  s.clock_skew_tolerance_ms = std::max<int64_t>(0, p.clock_skew_tolerance_ms);
  s.retry_after_failure_ms = std::max<int64_t>(0, p.retry_after_failure_ms);
  return s;
}

int64_t effective_ttl(const FreshnessPolicy& s, std::optional<int64_t> upstream_ttl_ms) {
  if (!upstream_ttl_ms.has_value()) return s.fresh_ttl_ms;
  return std::max(s.min_upstream_ttl_ms, std::min(s.fresh_ttl_ms, *upstream_ttl_ms));
}

constexpr const char* const kScopeNames[] = {"", "public", "private"};
static_assert(covers_enum(kScopeNames, CacheScope::kPrivate));

constexpr const char* const kFreshnessNames[] = {"miss", "fresh", "stale", "expired"};
static_assert(covers_enum(kFreshnessNames, Freshness::kExpired));

constexpr const char* const kMissReasonNames[] = {"", "no_entry", "no_data", "config_changed"};
static_assert(covers_enum(kMissReasonNames, MissReason::kConfigChanged));

constexpr const char* const kRefreshReasonNames[] = {"none",  "backing_off", "ahead",
                                                     "stale", "expired",     "miss"};
static_assert(covers_enum(kRefreshReasonNames, RefreshReason::kMiss));

// What each state means for the caller. Which state an entry is in is decided by the ordered
// rules in `classify`; this table is everything that follows from the state.
struct StateRow {
  Freshness state;
  bool servable;
  bool revalidate;
};
constexpr StateRow kStateTable[] = {
    {Freshness::kMiss, false, true},
    {Freshness::kFresh, true, false},
    {Freshness::kStale, true, true},
    {Freshness::kExpired, false, true},
};

void apply_state(Freshness state, Classification* c) {
  for (const StateRow& row : kStateTable) {
    if (row.state != state) continue;
    c->state = row.state;
    c->servable = row.servable;
    c->revalidate = row.revalidate;
    if (state != Freshness::kMiss) c->miss_reason = MissReason::kNone;
    return;
  }
}

Classification miss(MissReason reason) {
  Classification c;
  apply_state(Freshness::kMiss, &c);
  c.miss_reason = reason;
  return c;
}

}  // namespace

Status validate_freshness_policy(const FreshnessPolicy& p) {
  auto bad = [](std::string what) { return Status(Error(ErrorCode::kInvalidArgument, what)); };
  if (p.fresh_ttl_ms <= 0) return bad("fresh_ttl_ms must be positive");
  if (p.max_age_ms < p.fresh_ttl_ms) return bad("max_age_ms must not be below fresh_ttl_ms");
  if (!(p.refresh_ahead_ratio > 0.0 && p.refresh_ahead_ratio <= 1.0)) {
    return bad("refresh_ahead_ratio must be in (0, 1]");
  }
  if (p.min_upstream_ttl_ms < 0 || p.min_upstream_ttl_ms > p.fresh_ttl_ms) {
    return bad("min_upstream_ttl_ms must be between 0 and fresh_ttl_ms");
  }
  if (p.clock_skew_tolerance_ms < 0) return bad("clock_skew_tolerance_ms must not be negative");
  if (p.retry_after_failure_ms < 0) return bad("retry_after_failure_ms must not be negative");
  return Status::Ok();
}

const char* cache_scope_name(CacheScope scope) { return name_of(kScopeNames, scope, "private"); }

CacheScope cache_scope_from_string(std::string_view text) {
  // "" is kUnspecified; "private" and anything we do not understand are private.
  return value_of(kScopeNames, text, CacheScope::kPrivate);
}

const char* freshness_name(Freshness state) { return name_of(kFreshnessNames, state, "miss"); }

const char* miss_reason_name(MissReason reason) { return name_of(kMissReasonNames, reason, ""); }

const char* refresh_reason_name(RefreshReason reason) {
  return name_of(kRefreshReasonNames, reason, "none");
}

int64_t effective_fresh_ttl_ms(const FreshnessPolicy& policy,
                               std::optional<int64_t> upstream_ttl_ms) {
  return effective_ttl(sanitize(policy), upstream_ttl_ms);
}

Classification classify(const std::optional<CacheEntryMeta>& entry, const FreshnessPolicy& policy,
                        std::string_view current_config_hash, int64_t now_ms) {
  // Rules, first match wins:
  //   1. no entry                                  -> miss (no_entry)
  //   2. entry without data                        -> miss (no_data)
  //   3. config_hash empty or not the current one  -> miss (config_changed)
  //   4. fetched_at beyond now + skew tolerance    -> stale, clock_skewed
  //   5. never_fresh (a list failed)              -> stale (fresh_until = fetched_at)
  //   6. now <  fresh_until                        -> fresh
  //      (fresh_until is cut to invalidated_at when the data was listed before that)
  //   7. now <  expires_at                         -> stale
  //   8. otherwise                                 -> expired
  if (!entry.has_value()) return miss(MissReason::kNoEntry);
  const CacheEntryMeta& e = *entry;
  // "Could not load" (an error and no usable data) and "not loaded yet" stay distinguishable.
  const bool failed =
      e.last_error.has_value() && (!e.has_data || e.last_error->at_ms >= e.fetched_at_ms);
  if (!e.has_data || current_config_hash.empty() || e.config_hash != current_config_hash) {
    Classification c = miss(e.has_data ? MissReason::kConfigChanged : MissReason::kNoData);
    c.last_refresh_failed = failed;
    return c;
  }

  const FreshnessPolicy p = sanitize(policy);
  Classification c;
  c.shareable_across_principals = e.cache_scope != CacheScope::kPrivate;
  c.last_refresh_failed = failed;
  c.effective_fresh_ttl_ms = effective_ttl(p, e.upstream_ttl_ms);
  const auto ahead = static_cast<int64_t>(
      std::llround(p.refresh_ahead_ratio * static_cast<double>(c.effective_fresh_ttl_ms)));
  c.fresh_until_ms = add_sat(e.fetched_at_ms, c.effective_fresh_ttl_ms);
  c.refresh_at_ms = add_sat(e.fetched_at_ms, std::min(ahead, c.effective_fresh_ttl_ms));
  c.expires_at_ms = add_sat(e.fetched_at_ms, p.max_age_ms);
  c.age_ms = std::max<int64_t>(0, sub_sat(now_ms, e.fetched_at_ms));
  if (e.never_fresh) {
    c.fresh_until_ms = std::min(c.fresh_until_ms, e.fetched_at_ms);
    c.refresh_at_ms = std::min(c.refresh_at_ms, c.fresh_until_ms);
  }
  if (e.invalidated_at_ms && *e.invalidated_at_ms >= e.fetched_at_ms) {
    c.fresh_until_ms = std::min(c.fresh_until_ms, *e.invalidated_at_ms);
    c.refresh_at_ms = std::min(c.refresh_at_ms, c.fresh_until_ms);
  }

  if (e.fetched_at_ms > add_sat(now_ms, p.clock_skew_tolerance_ms)) {
    // Not trusted: serve, but have it rewritten by an agent (with, one hopes, a better clock).
    c.clock_skewed = true;
    c.fresh_until_ms = now_ms;
    c.refresh_at_ms = now_ms;
    apply_state(Freshness::kStale, &c);
  } else if (now_ms < c.fresh_until_ms) {
    apply_state(Freshness::kFresh, &c);
  } else if (now_ms < c.expires_at_ms) {
    apply_state(Freshness::kStale, &c);
  } else {
    apply_state(Freshness::kExpired, &c);
  }
  return c;
}

int64_t retry_backoff_ms(int failures, int64_t max_ms) {
  constexpr int64_t kFirstMs = 2000;
  const int64_t cap = std::max<int64_t>(1, max_ms);
  int64_t wait = kFirstMs;
  for (int i = 1; i < failures && wait < cap; ++i) wait *= 2;
  return std::min(wait, cap);
}

RefreshDecision decide_refresh(const std::optional<CacheEntryMeta>& entry,
                               const FreshnessPolicy& policy, std::string_view current_config_hash,
                               int64_t now_ms) {
  const Classification c = classify(entry, policy, current_config_hash, now_ms);
  RefreshDecision d;
  switch (c.state) {
    case Freshness::kMiss:
      d.reason = RefreshReason::kMiss;
      break;
    case Freshness::kStale:
      d.reason = RefreshReason::kStale;
      break;
    case Freshness::kExpired:
      d.reason = RefreshReason::kExpired;
      break;
    case Freshness::kFresh:
      if (now_ms < c.refresh_at_ms) {
        d.reason = RefreshReason::kNone;
        d.next_check_at_ms = c.refresh_at_ms;
        return d;
      }
      d.reason = RefreshReason::kAhead;
      break;
  }

  // Due. Back off if an attempt newer than the data started or failed recently. A timestamp
  // beyond the skew tolerance in the future is ignored, or the key would never be retried.
  if (entry.has_value()) {
    const FreshnessPolicy p = sanitize(policy);
    std::optional<int64_t> last;
    if (entry->last_attempt_at_ms) last = *entry->last_attempt_at_ms;
    if (entry->last_error) last = std::max(last.value_or(kMinTime), entry->last_error->at_ms);
    const bool newer_than_data = last && (!entry->has_data || *last >= entry->fetched_at_ms);
    if (newer_than_data && *last <= add_sat(now_ms, p.clock_skew_tolerance_ms)) {
      const int64_t retry_at = add_sat(*last, p.retry_after_failure_ms);
      if (now_ms < retry_at) {
        d.refresh = false;
        d.reason = RefreshReason::kBackingOff;
        d.next_check_at_ms = retry_at;
        return d;
      }
    }
  }
  d.refresh = true;
  d.next_check_at_ms = now_ms;
  return d;
}

}  // namespace quiver
