// EdgeCache: the edge's in-isolate L1 cache of discovery reads.
//
// Opening a Redis connection dominates an edge request (measured in workerd: ~0.8 ms against ~0.2
// ms for the runtime itself), so a hot caller is answered from memory for a short while. The cache
// holds bytes under a key the host chooses; EdgeService keeps two: the store reads (the discovery
// script's RESP reply, per caller and query), from which answers are rendered afresh, and the
// rendered answers themselves (per caller and exact request), each fresh only until the first of
// its entries changes status (`put`'s `fresh_until_ms`), so an entry turning stale is seen as stale
// even when it comes from L1.
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
#include <unordered_map>

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

class EdgeCache {
 public:
  using Value = std::shared_ptr<const std::string>;
  static constexpr int64_t kForever = INT64_MAX;

  explicit EdgeCache(EdgeCacheOptions options = {});

  // The value stored under `key` when it is younger than the TTL, before its own `fresh_until_ms`
  // and not superseded; else nullptr (and the miss is counted). A hit becomes the most recently
  // used entry. `age_ms` receives its age.
  Value get_fresh(std::string_view key, int64_t now_ms, int64_t* age_ms = nullptr);
  // Stale-if-error: the value under `key` whatever its TTL, when younger than stale_if_error_ms
  // and not superseded; else nullptr. `age_ms` receives its age.
  Value get_stale(std::string_view key, int64_t now_ms, int64_t* age_ms = nullptr);

  // Stores `value`, read from the store at `now_ms` under `epoch`; fresh until the TTL passes or
  // `fresh_until_ms`, whichever comes first (a value that stops being right at a known time, e.g.
  // a rendered answer whose entry turns stale then). Refused (false) when the epoch is older than
  // the newest seen or the value is over max_entry_bytes; evicts least recently used entries to
  // stay within max_bytes. A newer epoch drops every older entry first.
  bool put(std::string key, std::string value, int64_t epoch, int64_t now_ms,
           int64_t fresh_until_ms = kForever);
  // A read saw the store at `epoch` (e.g. one that was not cached): older entries are dropped.
  void observe_epoch(int64_t epoch);

  // True when no revalidation of `key` was claimed in the last revalidation_claim_ms (and
  // records the claim); false when one was. `release_revalidation` forgets a claim whose queuing
  // failed, so the next stale hit tries again.
  bool claim_revalidation(std::string_view key, int64_t now_ms);
  void release_revalidation(std::string_view key);

  void clear();
  EdgeCacheStats stats() const;
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

  Entry* find(std::string_view key);
  void erase(List::iterator it);
  void drop_older_than(int64_t epoch);
  int64_t age(const Entry& e, int64_t now_ms) const;

  EdgeCacheOptions options_;
  List lru_;                                                    // most recently used first
  std::unordered_map<std::string_view, List::iterator> index_;  // views into Entry::key
  std::size_t bytes_ = 0;
  EdgeCacheStats stats_;
  std::unordered_map<std::string, int64_t> claims_;  // key → claimed at
};

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
