// The snapshot reads the edge keeps in L1 (shared/edge_cache.h): under which key, in what form, and
// how long an answer rendered from one stays right. A read is kept decoded, as
// decode_discovery_reply returned it (shared/discovery_redis.h; its bodies not filled in: they
// come from the BodyCache at each use), so a copy is used without decoding it again: an L1 hit,
// a conditional read past the TTL ("unchanged": the copy answers) and stale-if-error alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/discovery.h"
#include "shared/edge_cache.h"
#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/status.h"

namespace quiver {

// One caller's one query: the member, the connection asked for (or all), the page.
std::string snapshot_cache_key(const Principal& member, const SnapshotQuery& query);

// Decoded snapshot reads, shared and immutable (a request that changes one copies it first).
using SnapshotCache = BasicEdgeCache<DiscoverySnapshot>;

// What a kept snapshot costs against the L1 bounds: the bytes of the strings it holds (ids,
// records' fields, manifest texts, overlays, versions) plus a fixed amount per entry; the same
// order as the reply it was decoded from.
std::size_t snapshot_bytes(const DiscoverySnapshot& snapshot);

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
