#include "shared/edge_cache.h"

#include <algorithm>
#include <utility>

namespace quiver {
namespace {

// Bad settings degrade behaviour instead of breaking it (validate_edge_cache_options reports them).
EdgeCacheOptions sanitize(EdgeCacheOptions o) {
  o.ttl_ms = std::max<int64_t>(0, o.ttl_ms);
  o.stale_if_error_ms = std::max(o.ttl_ms, o.stale_if_error_ms);
  o.max_entry_bytes = std::min(o.max_entry_bytes, o.max_bytes);
  o.revalidation_claim_ms = std::max<int64_t>(0, o.revalidation_claim_ms);
  return o;
}

// Bookkeeping per entry beyond its key and value (list node, index slot, shared_ptr block).
constexpr std::size_t kEntryOverhead = 128;

}  // namespace

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

EdgeCache::EdgeCache(EdgeCacheOptions options) : options_(sanitize(options)) {}

EdgeCache::Entry* EdgeCache::find(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
  return &*it->second;
}

void EdgeCache::erase(List::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(std::string_view(it->key));
  lru_.erase(it);
}

// A clock that went backwards (a timestamp from another request) counts as age 0.
int64_t EdgeCache::age(const Entry& e, int64_t now_ms) const {
  return now_ms > e.stored_at_ms ? now_ms - e.stored_at_ms : 0;
}

EdgeCache::Value EdgeCache::get_fresh(std::string_view key, int64_t now_ms, int64_t* age_ms) {
  Entry* e = find(key);
  if (e == nullptr || e->epoch < stats_.epoch || age(*e, now_ms) >= options_.ttl_ms ||
      now_ms >= e->fresh_until_ms) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  if (age_ms != nullptr) *age_ms = age(*e, now_ms);
  return e->value;
}

EdgeCache::Value EdgeCache::get_stale(std::string_view key, int64_t now_ms, int64_t* age_ms) {
  Entry* e = find(key);
  if (e == nullptr || e->epoch < stats_.epoch) return nullptr;
  int64_t a = age(*e, now_ms);
  if (a >= options_.stale_if_error_ms) return nullptr;
  ++stats_.stale_served;
  if (age_ms != nullptr) *age_ms = a;
  return e->value;
}

void EdgeCache::drop_older_than(int64_t epoch) {
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (it->epoch < epoch) {
      erase(it);
      ++stats_.superseded;
    }
    it = next;
  }
}

void EdgeCache::observe_epoch(int64_t epoch) {
  if (epoch <= stats_.epoch) return;
  stats_.epoch = epoch;
  drop_older_than(epoch);
}

bool EdgeCache::put(std::string key, std::string value, int64_t epoch, int64_t now_ms,
                    int64_t fresh_until_ms) {
  observe_epoch(epoch);
  if (epoch < stats_.epoch) {
    ++stats_.superseded;
    return false;
  }
  std::size_t bytes = key.size() + value.size() + kEntryOverhead;
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  if (bytes > options_.max_entry_bytes) return false;
  while (!lru_.empty() && bytes_ + bytes > options_.max_bytes) {
    erase(std::prev(lru_.end()));
    ++stats_.evictions;
  }
  Entry e;
  e.key = std::move(key);
  e.value = std::make_shared<const std::string>(std::move(value));
  e.epoch = epoch;
  e.stored_at_ms = now_ms;
  e.fresh_until_ms = fresh_until_ms;
  e.bytes = bytes;
  lru_.push_front(std::move(e));
  index_.emplace(std::string_view(lru_.front().key), lru_.begin());
  bytes_ += bytes;
  return true;
}

bool EdgeCache::claim_revalidation(std::string_view key, int64_t now_ms) {
  std::string k(key);
  auto it = claims_.find(k);
  if (it != claims_.end()) {
    int64_t since = now_ms - it->second;
    if (since >= 0 && since < options_.revalidation_claim_ms) return false;
    it->second = now_ms;
    return true;
  }
  if (claims_.size() >= options_.max_claims) {
    for (auto c = claims_.begin(); c != claims_.end();) {
      int64_t since = now_ms - c->second;
      c = (since < 0 || since >= options_.revalidation_claim_ms) ? claims_.erase(c) : std::next(c);
    }
    // Still full: forget every claim. The Redis gate still lets one request per window through;
    // forgetting only costs round trips.
    if (claims_.size() >= options_.max_claims) claims_.clear();
  }
  claims_.emplace(std::move(k), now_ms);
  return true;
}

void EdgeCache::release_revalidation(std::string_view key) { claims_.erase(std::string(key)); }

void EdgeCache::clear() {
  lru_.clear();
  index_.clear();
  bytes_ = 0;
  claims_.clear();
}

// An entry's cost: its digest, its bytes and the bookkeeping around them.
BodyCache::BodyCache(std::size_t max_bytes) : lru_(max_bytes / 1024 + 1, max_bytes) {}

BodyCache::Value BodyCache::find(std::string_view digest) {
  const Value* v = lru_.find(digest);
  return v == nullptr ? nullptr : *v;
}

bool BodyCache::put(std::string digest, std::string body) {
  const std::size_t bytes = digest.size() + body.size() + kEntryOverhead;
  return lru_.insert(std::move(digest), std::make_shared<const std::string>(std::move(body)),
                     bytes);
}

EdgeCacheStats EdgeCache::stats() const {
  EdgeCacheStats s = stats_;
  s.entries = lru_.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace quiver
