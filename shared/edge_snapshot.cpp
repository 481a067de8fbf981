#include "shared/edge_snapshot.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "shared/edge_cache.h"

namespace quiver {

std::string snapshot_cache_key(const Principal& member, const SnapshotQuery& query) {
  return member.str() + "\n" + (query.only ? "=" + *query.only : "*") + "\n" + query.after + "\n" +
         std::to_string(query.limit);
}

std::size_t snapshot_bytes(const DiscoverySnapshot& snapshot) {
  constexpr std::size_t kPerEntry = 256;  // the entry's fixed fields, optionals and containers
  std::size_t n = snapshot.member.str().size() + snapshot.namespace_record.size() +
                  snapshot.layout_record.size() + snapshot.member_version.size() + kPerEntry;
  for (const GrantedConnection& c : snapshot.connections) {
    n += kPerEntry + c.id.size();
    if (c.record) {
      n += c.record->config_hash.size() + c.record->name.size() + c.record->transport.size();
    }
    if (c.manifest) {
      const ManifestEntry& m = *c.manifest;
      n += m.text.size() + m.body_digest.size() + m.etag.value_or("").size() +
           m.config_hash.size() + m.error_code.size() + m.error_message.size() +
           m.unreadable.size();
    }
    for (const std::string& d : c.disabled) n += d.size() + 32;
  }
  for (const std::string& v : snapshot.connection_versions) n += v.size() + 32;
  return n;
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
