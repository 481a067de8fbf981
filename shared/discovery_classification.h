// Classification of one discovery entry: its status (fresh, stale, expired, pending, error,
// authorization_required; the
// table is in discovery.cpp), the classification input read from a manifest hash, and the
// revalidations an entry asks for. The statuses are described in shared/discovery.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/discovery_snapshot.h"
#include "shared/freshness.h"
#include "shared/principal.h"
#include "shared/status.h"

namespace quiver {

// ---- Classification of one entry ---------------------------------------------------------------

// kAuthorizationRequired: the last refresh failed with AUTHORIZATION_REQUIRED (an OAuth
// connection without a usable authorization for this principal); last in the enum so that the
// numbering of the others does not move.
enum class EntryStatus { kPending = 0, kFresh, kStale, kExpired, kError, kAuthorizationRequired };
const char* entry_status_name(EntryStatus status);  // "pending", "fresh", ...

// The endpoint a member calls to connect an OAuth connection: "/v1/mcp-connections/<id>/authorize"
// (shown with the authorization_required status).
std::string authorize_path(std::string_view connection_id);

// The classification input of a manifest entry, per schema/redis-keys.md (`has_data` = a manifest
// text that is not empty; upstream TTL = fresh_until − fetched_at). nullopt without an entry.
// kInvalidArgument when the entry cannot be read: a field a reader needs is malformed
// (ManifestEntry::unreadable, data without fetched_at, fresh_until before fetched_at).
Result<std::optional<CacheEntryMeta>> cache_entry_meta(const std::optional<ManifestEntry>& entry);
// The same for an entry read without its text (the agent's metadata reads): `has_data` says
// whether the text stored is not empty.
Result<CacheEntryMeta> cache_entry_meta(const ManifestEntry& entry, bool has_data);

// A revalidation to queue for one (connection, principal).
// A manual refresh is queued again once the gate of an earlier request is this old, so a user's
// refresh is never swallowed by a reader's gate for a whole window (every store does the same).
inline constexpr int64_t kManualRequeueAfterMs = 1'000;

struct Revalidation {
  std::string connection_id;
  Principal principal;
  std::string reason;   // "stale", "expired", "miss", "config_changed", "corrupt", "manual"
  bool manual = false;  // asked for by a user: requeued after a short interval despite the gate

  bool operator==(const Revalidation& o) const;
};

// The outcome of queuing one revalidation, at every host and store.
enum class RevalidationOutcome {
  kQueued = 0,     // a request is in the queue now
  kAlreadyQueued,  // the gate was taken within the window: one request per key per window
  kInProgress,     // a refresh lease is held: the refresh under way will serve the reader
};
// "queued", "already_queued", "in_progress"
const char* revalidation_outcome_name(RevalidationOutcome outcome);

struct RevalidationResult {
  RevalidationOutcome outcome = RevalidationOutcome::kQueued;
  std::string stream_id;  // kQueued: the stream entry's id (Redis), else ""
};

}  // namespace quiver
