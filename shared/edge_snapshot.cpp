#include "shared/edge_snapshot.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "shared/discovery_redis.h"
#include "shared/edge_cache.h"

namespace quiver {

std::string snapshot_cache_key(const Principal& member, const SnapshotQuery& query) {
  return member.str() + "\n" + (query.only ? "=" + *query.only : "*") + "\n" + query.after + "\n" +
         std::to_string(query.limit);
}

Result<DiscoverySnapshot> snapshot_from_cached_reply(std::string_view bytes,
                                                     const Principal& member,
                                                     const RespLimits& limits) {
  Result<std::vector<RespValue>> replies = decode_all(bytes, 1, limits);
  if (!replies.ok()) return replies.error();
  return decode_discovery_reply((*replies)[0], member);
}

int64_t snapshot_next_transition(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                                 int64_t now_ms) {
  int64_t next = EdgeCache::kForever;
  for (const GrantedConnection& c : snapshot.connections) {
    if (!c.record) continue;
    Result<std::optional<CacheEntryMeta>> meta = cache_entry_meta(c.manifest);
    if (!meta.ok() || !meta->has_value()) continue;
    Classification k = classify(*meta, policy, c.record->config_hash, now_ms);
    if (k.state == Freshness::kFresh) next = std::min(next, k.fresh_until_ms);
    if (k.state == Freshness::kStale) next = std::min(next, k.expires_at_ms);
  }
  return next;
}

std::vector<std::size_t> lease_sensitive_entries(
    const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy, int64_t now_ms,
    const std::function<bool(std::string_view digest)>& body_held) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < snapshot.connections.size(); ++i) {
    const GrantedConnection& c = snapshot.connections[i];
    if (!c.record || !c.principal) continue;  // no principal: no lease is read or shown
    Result<std::optional<CacheEntryMeta>> meta = cache_entry_meta(c.manifest);
    if (!meta.ok()) {
      out.push_back(i);  // unreadable: revalidated unless leased
      continue;
    }
    Classification k = classify(*meta, policy, c.record->config_hash, now_ms);
    const bool body_missing =
        c.manifest && c.manifest->body_missing() && !body_held(c.manifest->body_digest);
    if (k.revalidate || (k.servable && body_missing)) out.push_back(i);
  }
  return out;
}

}  // namespace quiver
