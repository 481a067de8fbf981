#include "native-agent/store/body_cache.h"

#include <utility>

#include "shared/discovery_redis.h"

namespace quiver {

BodyCache::Value LockedBodyCache::find(std::string_view digest) {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.find(digest);
}

void LockedBodyCache::put(std::string digest, std::string body) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.put(std::move(digest), std::move(body));
}

BodyCacheCounts LockedBodyCache::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  const LruStats& s = cache_.stats();
  return {cache_.entries(), cache_.bytes(), s.hits, s.misses, s.evictions};
}

namespace {

// One MGET of `digests`; each body found is kept and handed to `use(index, body)`.
template <typename Use>
Status fetch_bodies(LockedBodyCache& cache, const RedisKeys& keys,
                    const std::vector<std::string>& digests, const BodyFetch& fetch, Use use) {
  Result<RedisCommand> read = body_read_command(keys, digests);
  if (!read.ok()) return read.error();
  Result<RespValue> reply = fetch(*read);
  if (!reply.ok()) return reply.error();
  Result<std::vector<std::optional<std::string>>> bodies = decode_body_reply(*reply, digests);
  if (!bodies.ok()) return bodies.error();
  for (std::size_t i = 0; i < digests.size(); ++i) {
    std::optional<std::string>& body = (*bodies)[i];
    if (!body) continue;
    use(i, *body);
    cache.put(digests[i], std::move(*body));
  }
  return Status();
}

}  // namespace

Status fill_snapshot_bodies(LockedBodyCache& cache, const RedisKeys& keys,
                            DiscoverySnapshot& snapshot, const BodyFetch& fetch) {
  std::vector<std::string> lacking;
  for (const std::string& digest : missing_bodies(snapshot)) {
    if (BodyCache::Value body = cache.find(digest)) {
      fill_body(snapshot, digest, *body);
    } else {
      lacking.push_back(digest);
    }
  }
  if (lacking.empty()) return Status();
  return fetch_bodies(cache, keys, lacking, fetch, [&](std::size_t i, const std::string& body) {
    fill_body(snapshot, lacking[i], body);
  });
}

Result<std::optional<std::string>> read_body(LockedBodyCache& cache, const RedisKeys& keys,
                                             const std::string& digest, const BodyFetch& fetch) {
  if (BodyCache::Value body = cache.find(digest)) return std::optional<std::string>(*body);
  std::optional<std::string> out;
  Status st = fetch_bodies(cache, keys, {digest}, fetch,
                           [&](std::size_t, const std::string& body) { out = body; });
  if (!st.ok()) return st.error();
  return out;
}

}  // namespace quiver
