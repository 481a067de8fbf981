// EdgeCache: the edge's in-isolate L1 cache of discovery reads.
//
// Opening a Redis connection dominates an edge request (measured in workerd: ~0.8 ms against ~0.2
// ms for the runtime itself), so a hot caller is answered from memory for a short while. The cache
// holds immutable values under a key the host chooses; EdgeService keeps two: the store reads
// (decoded snapshots, per caller and query: shared/edge_snapshot.h), from which answers are
// rendered afresh, and the rendered answers themselves (bytes, per caller and exact request), each
// fresh only until the first of its entries changes status (`put`'s `fresh_until_ms`), so an entry
// turning stale is seen as stale even when it comes from L1.
//
// Freshness trades against correctness, and the TTL is the bound: a revoked grant or a toggled
// preference can be served for at most `ttl_ms` after the change (2 s by default; configurable).
// Beyond that:
//  - Epoch. Every read from Redis carries the namespace's epoch (bumped on every commit, grant or
//    preference change). `put` and `observe_epoch` raise the highest epoch seen; entries read under
//    an older epoch are dropped at once, and a read older than the newest epoch seen is not kept.
//    So once any request of this isolate has seen a change, no other caller is served the old data.
//  - Stale-if-error. An entry past its TTL stays (bytes permitting) for `stale_if_error_ms`: when
//    Redis cannot be reached, `get_stale` hands it out and the host marks the answer stale. An
//    entry known to be superseded (older epoch) is never served, not even then.
//  - Validatable copies. EdgeService keeps each snapshot read once more, apart, for
//    `validate_max_age_ms` after its full read (never dropped by the epoch): past the TTL, that
//    copy is sent back to Redis as its versions (a conditional read, one round trip, one MGET in
//    the script) and answered from when nothing it read changed (`X-Quiver-Cache: revalidated`).
//  - Bounded bytes. Least recently used entries go first once `max_bytes` would be exceeded; a
//    single value over `max_entry_bytes` is not kept at all.
// Revalidation claims: a stale entry served from L1 would queue a revalidation on every hit. The
// gate in Redis lets only one through per window anyway; `claim_revalidation` spares the round
// trips: a key claimed in this isolate is not claimed again for `revalidation_claim_ms`.
//
// Sans-I/O and single-threaded, like everything in the core: time comes in as `now_ms`. The
// wasm instance's EdgeService owns its caches: one set per isolate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "shared/bounded_lru.h"
#include "shared/status.h"

namespace quiver {

struct EdgeCacheOptions {
  // Served from L1 without asking Redis. 0: every read goes to Redis (entries are still kept for
  // stale-if-error; max_bytes 0 turns L1 off altogether).
  int64_t ttl_ms = 2'000;
  int64_t stale_if_error_ms = 60'000;  // kept for stale-if-error this long after being stored
  std::size_t max_bytes = std::size_t{8} << 20;
  std::size_t max_entry_bytes = std::size_t{1} << 20;
  int64_t revalidation_claim_ms = 5'000;  // one revalidation per key from this isolate per period
  std::size_t max_claims = 10'000;        // claims remembered at most (oldest dropped)
  // Conditional reads (shared/discovery_redis.h): a snapshot read is kept this long after its
  // full read, past the TTL and whatever the epoch, and checked against the store's versions in
  // one round trip instead of read again; the bound on how long a missed version bump could go
  // unseen. 0: off (a read past the TTL is a full read).
  int64_t validate_max_age_ms = 30'000;
  // The BodyCache's bound (below): manifest bodies by content, apart from max_bytes. 0: off.
  std::size_t body_max_bytes = std::size_t{16} << 20;
};

// OK when usable: ttl and claim period >= 0, stale_if_error_ms >= ttl_ms, max_entry_bytes <=
// max_bytes. Validate where configuration is loaded; the cache itself clamps bad values.
Status validate_edge_cache_options(const EdgeCacheOptions& options);

struct EdgeCacheStats {
  std::size_t entries = 0;
  std::size_t bytes = 0;      // keys and values held
  uint64_t hits = 0;          // get_fresh found a fresh entry
  uint64_t misses = 0;        // get_fresh found none
  uint64_t stale_served = 0;  // get_stale found one
  uint64_t evictions = 0;     // dropped for room
  uint64_t superseded = 0;    // dropped or refused for an older epoch
  int64_t epoch = 0;          // the highest epoch seen
};

namespace edge_cache_detail {
// Bad settings degrade behaviour instead of breaking it (validate_edge_cache_options reports them).
EdgeCacheOptions sanitize(EdgeCacheOptions o);
// Bookkeeping per entry beyond its key and value (list node, index slot, shared_ptr block).
inline constexpr std::size_t kEntryOverhead = 128;
}  // namespace edge_cache_detail

// The cache, for values of type T held shared and immutable: EdgeCache holds bytes (rendered
// answers); EdgeService also keeps decoded snapshot reads in one (shared/edge_snapshot.h), so a
// copy is used without decoding it again. What a value costs against the bounds is given by the
// caller (a string's: its size).
template <typename T>
class BasicEdgeCache {
 public:
  using Value = std::shared_ptr<const T>;
  static constexpr int64_t kForever = INT64_MAX;

  explicit BasicEdgeCache(EdgeCacheOptions options = {})
      : options_(edge_cache_detail::sanitize(options)) {}

  // The value stored under `key` when it is younger than the TTL, before its own `fresh_until_ms`
  // and not superseded; else nullptr (and the miss is counted). A hit becomes the most recently
  // used entry. `age_ms` receives its age.
  Value get_fresh(std::string_view key, int64_t now_ms, int64_t* age_ms = nullptr) {
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
  // Whether a value put now could ever be a fresh hit: not when the TTL is 0 (the L1 off), so a
  // caller need not build one (a put would be refused as stale at its first get anyway).
  bool keeps_fresh() const { return options_.ttl_ms > 0; }
  // Stale-if-error: the value under `key` whatever its TTL, when younger than stale_if_error_ms
  // and not superseded; else nullptr. `age_ms` receives its age.
  Value get_stale(std::string_view key, int64_t now_ms, int64_t* age_ms = nullptr) {
    Entry* e = find(key);
    if (e == nullptr || e->epoch < stats_.epoch) return nullptr;
    int64_t a = age(*e, now_ms);
    if (a >= options_.stale_if_error_ms) return nullptr;
    ++stats_.stale_served;
    if (age_ms != nullptr) *age_ms = a;
    return e->value;
  }

  // Stores `value` (costing `value_bytes`), read from the store at `now_ms` under `epoch`; fresh
  // until the TTL passes or `fresh_until_ms`, whichever comes first (a value that stops being
  // right at a known time, e.g. a rendered answer whose entry turns stale then). Refused (false)
  // when the epoch is older than the newest seen or the value is over max_entry_bytes; evicts
  // least recently used entries to stay within max_bytes. A newer epoch drops every older entry
  // first.
  bool put(std::string key, Value value, std::size_t value_bytes, int64_t epoch, int64_t now_ms,
           int64_t fresh_until_ms = kForever) {
    observe_epoch(epoch);
    if (epoch < stats_.epoch) {
      ++stats_.superseded;
      return false;
    }
    const std::size_t bytes = key.size() + value_bytes + edge_cache_detail::kEntryOverhead;
    if (auto it = index_.find(key); it != index_.end()) erase(it->second);
    if (bytes > options_.max_entry_bytes || value == nullptr) return false;
    while (!lru_.empty() && bytes_ + bytes > options_.max_bytes) {
      erase(std::prev(lru_.end()));
      ++stats_.evictions;
    }
    Entry e;
    e.key = std::move(key);
    e.value = std::move(value);
    e.epoch = epoch;
    e.stored_at_ms = now_ms;
    e.fresh_until_ms = fresh_until_ms;
    e.bytes = bytes;
    lru_.push_front(std::move(e));
    index_.emplace(std::string_view(lru_.front().key), lru_.begin());
    bytes_ += bytes;
    return true;
  }
  // The same for bytes: they cost their size.
  template <typename U = T, typename = std::enable_if_t<std::is_same_v<U, std::string>>>
  bool put(std::string key, std::string value, int64_t epoch, int64_t now_ms,
           int64_t fresh_until_ms = kForever) {
    const std::size_t size = value.size();
    return put(std::move(key), std::make_shared<const std::string>(std::move(value)), size, epoch,
               now_ms, fresh_until_ms);
  }
  // A read saw the store at `epoch` (e.g. one that was not cached): older entries are dropped.
  void observe_epoch(int64_t epoch) {
    if (epoch <= stats_.epoch) return;
    stats_.epoch = epoch;
    for (auto it = lru_.begin(); it != lru_.end();) {
      auto next = std::next(it);
      if (it->epoch < epoch) {
        erase(it);
        ++stats_.superseded;
      }
      it = next;
    }
  }

  // True when no revalidation of `key` was claimed in the last revalidation_claim_ms (and
  // records the claim); false when one was. `release_revalidation` forgets a claim whose queuing
  // failed, so the next stale hit tries again.
  bool claim_revalidation(std::string_view key, int64_t now_ms) {
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
        c = (since < 0 || since >= options_.revalidation_claim_ms) ? claims_.erase(c)
                                                                   : std::next(c);
      }
      // Still full: forget every claim. The Redis gate still lets one request per window
      // through; forgetting only costs round trips.
      if (claims_.size() >= options_.max_claims) claims_.clear();
    }
    claims_.emplace(std::move(k), now_ms);
    return true;
  }
  void release_revalidation(std::string_view key) { claims_.erase(std::string(key)); }

  void clear() {
    lru_.clear();
    index_.clear();
    bytes_ = 0;
    claims_.clear();
  }
  EdgeCacheStats stats() const {
    EdgeCacheStats s = stats_;
    s.entries = lru_.size();
    s.bytes = bytes_;
    return s;
  }
  const EdgeCacheOptions& options() const { return options_; }

 private:
  struct Entry {
    std::string key;
    Value value;
    int64_t epoch = 0;
    int64_t stored_at_ms = 0;
    int64_t fresh_until_ms = kForever;
    std::size_t bytes = 0;
  };
  using List = std::list<Entry>;

  Entry* find(std::string_view key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
    return &*it->second;
  }
  void erase(typename List::iterator it) {
    bytes_ -= it->bytes;
    index_.erase(std::string_view(it->key));
    lru_.erase(it);
  }
  // A clock that went backwards (a timestamp from another request) counts as age 0.
  int64_t age(const Entry& e, int64_t now_ms) const {
    return now_ms > e.stored_at_ms ? now_ms - e.stored_at_ms : 0;
  }

  EdgeCacheOptions options_;
  List lru_;                                                             // most recently used first
  std::unordered_map<std::string_view, typename List::iterator> index_;  // views into Entry::key
  std::size_t bytes_ = 0;
  EdgeCacheStats stats_;
  std::unordered_map<std::string, int64_t> claims_;  // key → claimed at
};

using EdgeCache = BasicEdgeCache<std::string>;

// BodyCache: manifest bodies by content, the isolate-wide level under the discovery read.
//
// A manifest record names its body by the SHA-256 of its bytes (schema/redis-keys.md, "Manifest
// bodies"): the bytes under one name never change, so a body kept here needs no TTL, no epoch and
// no invalidation, and one copy serves every caller and principal listing the same content. Only
// the byte bound evicts (least recently used first); a body over the bound alone is not kept.
// Callers put only bodies whose digest they checked (decode_body_reply, shared/discovery_redis.h).
// What the TTL of the EdgeCache above bounds (a revoked grant, a toggled preference, a new commit)
// lives in the records, never here.
class BodyCache {
 public:
  using Value = std::shared_ptr<const std::string>;
  explicit BodyCache(std::size_t max_bytes);

  // The body named `digest`, now the most recently used; nullptr when not held.
  Value find(std::string_view digest);
  // Keeps `body` under `digest`; false when it alone is over the bound (or the cache is off).
  bool put(std::string digest, std::string body);

  std::size_t entries() const { return lru_.size(); }
  std::size_t bytes() const { return lru_.bytes(); }
  const LruStats& stats() const { return lru_.stats(); }

 private:
  BoundedLru<Value> lru_;
};

}  // namespace quiver
