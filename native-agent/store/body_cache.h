// The agent's manifest bodies by content (issue 14): RedisStore's reads take a body from here
// before asking Redis, and keep what they fetched.
//
// A manifest record names its body by the SHA-256 of its bytes (schema/redis-keys.md, "Manifest
// bodies"); the bytes under one name never change, so a kept body needs no expiry and no
// invalidation: a commit of new content names a new digest, which the next read fetches. The
// cache is the core's BodyCache (shared/edge_cache.h, the edge isolate's own), bounded by bytes,
// least recently used first out, behind a mutex: the agent's API workers, refresh workers and
// maintenance read through one store. Only bodies whose digest decode_body_reply checked are kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/discovery_snapshot.h"
#include "shared/edge_cache.h"
#include "shared/redis_conversation.h"
#include "shared/redis_keys.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

struct BodyCacheCounts {
  std::size_t entries = 0;
  std::size_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
};

class LockedBodyCache {
 public:
  // `max_bytes` 0: off (every read fetches its bodies).
  explicit LockedBodyCache(std::size_t max_bytes) : cache_(max_bytes) {}

  BodyCache::Value find(std::string_view digest);
  void put(std::string digest, std::string body);
  BodyCacheCounts counts() const;

 private:
  mutable std::mutex mu_;
  BodyCache cache_;
};

// Runs one command (an MGET of body keys) and hands back its reply; an error reply is a failure.
using BodyFetch = std::function<Result<RespValue>(const RedisCommand&)>;

// Gives the entries of `snapshot` the bodies their records name and lack: those `cache` holds,
// then the rest in one MGET through `fetch` (none when the cache held them all), each fetched body
// kept. A body Redis no longer has (or whose bytes do not match its digest) leaves its entries
// without text, as shared/discovery_redis.h describes. Fails only when `fetch` or the reply does.
Status fill_snapshot_bodies(LockedBodyCache& cache, const RedisKeys& keys,
                            DiscoverySnapshot& snapshot, const BodyFetch& fetch);

// The one body named `digest`: from `cache`, else fetched (and kept); nullopt when Redis lacks it.
Result<std::optional<std::string>> read_body(LockedBodyCache& cache, const RedisKeys& keys,
                                             const std::string& digest, const BodyFetch& fetch);

}  // namespace quiver
