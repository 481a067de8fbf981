#include "shared/edge_cache.h"

#include <algorithm>
#include <utility>

namespace quiver {
namespace edge_cache_detail {

EdgeCacheOptions sanitize(EdgeCacheOptions o) {
  o.ttl_ms = std::max<int64_t>(0, o.ttl_ms);
  o.stale_if_error_ms = std::max(o.ttl_ms, o.stale_if_error_ms);
  o.max_entry_bytes = std::min(o.max_entry_bytes, o.max_bytes);
  o.revalidation_claim_ms = std::max<int64_t>(0, o.revalidation_claim_ms);
  return o;
}

}  // namespace edge_cache_detail

Status validate_edge_cache_options(const EdgeCacheOptions& o) {
  if (o.ttl_ms < 0) return Error(ErrorCode::kInvalidArgument, "L1 TTL must not be negative");
  if (o.stale_if_error_ms < o.ttl_ms) {
    return Error(ErrorCode::kInvalidArgument, "L1 stale-if-error period must be >= the L1 TTL");
  }
  if (o.max_entry_bytes > o.max_bytes) {
    return Error(ErrorCode::kInvalidArgument, "L1 entry bound must be <= the L1 size bound");
  }
  if (o.revalidation_claim_ms < 0) {
    return Error(ErrorCode::kInvalidArgument, "revalidation claim period must not be negative");
  }
  if (o.validate_max_age_ms < 0) {
    return Error(ErrorCode::kInvalidArgument, "L1 validation max age must not be negative");
  }
  return Status::Ok();
}

// An entry's cost: its digest, its bytes and the bookkeeping around them.
BodyCache::BodyCache(std::size_t max_bytes) : lru_(max_bytes / 1024 + 1, max_bytes) {}

BodyCache::Value BodyCache::find(std::string_view digest) {
  const Value* v = lru_.find(digest);
  return v == nullptr ? nullptr : *v;
}

bool BodyCache::put(std::string digest, std::string body) {
  const std::size_t bytes = digest.size() + body.size() + edge_cache_detail::kEntryOverhead;
  return lru_.insert(std::move(digest), std::make_shared<const std::string>(std::move(body)),
                     bytes);
}

}  // namespace quiver
