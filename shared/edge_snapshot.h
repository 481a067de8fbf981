// The snapshot reads the edge keeps in L1 (shared/edge_cache.h): under which key, how they are
// read back, and how long an answer rendered from one stays right. The bytes kept are the
// discovery script's RESP reply as Redis sent it (shared/discovery_redis.h), so a copy decodes
// exactly as a fresh read does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/discovery.h"
#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

// One caller's one query: the member, the connection asked for (or all), the page.
std::string snapshot_cache_key(const Principal& member, const SnapshotQuery& query);

// A kept reply, decoded for `member` (a broken copy is an error, then a miss).
Result<DiscoverySnapshot> snapshot_from_cached_reply(std::string_view bytes,
                                                     const Principal& member,
                                                     const RespLimits& limits);

// When the first entry of `snapshot` changes status (fresh → stale, stale → expired): a rendered
// answer is right until then. Entries without servable data change only by a commit (the epoch).
// EdgeCache::kForever when none will.
int64_t snapshot_next_transition(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                                 int64_t now_ms);

// The entries of `snapshot` whose lease flag can change what is rendered at `now_ms` (indexes
// into snapshot.connections, ascending): a lease is looked at only where a revalidation would be
// queued (shared/discovery.cpp queue_unless_leased: an entry whose classification asks for one,
// an unreadable record, a servable record whose body is missing). A fresh entry with its body
// renders the same whoever holds its lease, so a conditional read need not ask for it.
// `body_held(digest)`: whether the reader has that body (its body cache).
std::vector<std::size_t> lease_sensitive_entries(
    const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy, int64_t now_ms,
    const std::function<bool(std::string_view digest)>& body_held);

}  // namespace quiver
