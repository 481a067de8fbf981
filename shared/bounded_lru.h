// BoundedLru: a least-recently-used map of strings to values, bounded by entry count and by
// bytes (the caller says what each value costs). The core's per-isolate / per-agent caches are
// built on it (shared/render_cache.h, shared/search_index.h's SearchIndexCache); it is not
// thread-safe: owners that share one across threads lock around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace quiver {

struct LruStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
};

template <typename V>
class BoundedLru {
 public:
  BoundedLru(std::size_t max_entries, std::size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The value under `key` if `accept` takes it (now the most recently used, a hit), else nullptr
  // (a miss). The pointer is valid until the next insert, erase or clear.
  template <typename Accept>
  const V* find_if(std::string_view key, Accept accept) {
    auto it = by_key_.find(key);
    if (it == by_key_.end() || !accept(it->second->value)) {
      ++stats_.misses;
      return nullptr;
    }
    ++stats_.hits;
    order_.splice(order_.begin(), order_, it->second);  // iterators stay valid
    return &it->second->value;
  }
  const V* find(std::string_view key) {
    return find_if(key, [](const V&) { return true; });
  }

  // Adds or replaces `key` at a cost of `bytes`, then evicts the least recently used until within
  // both bounds. A value over max_bytes on its own is not kept (false; an older one is gone).
  bool insert(std::string key, V value, std::size_t bytes) {
    erase(key);
    if (bytes > max_bytes_ || max_entries_ == 0) return false;
    order_.push_front(Node{key, std::move(value), bytes});
    by_key_.emplace(std::move(key), order_.begin());
    bytes_ += bytes;
    while (!order_.empty() && (order_.size() > max_entries_ || bytes_ > max_bytes_)) {
      remove(std::prev(order_.end()));
      ++stats_.evictions;
    }
    return true;
  }

  bool erase(std::string_view key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return false;
    remove(it->second);
    return true;
  }

  void clear() {
    order_.clear();
    by_key_.clear();
    bytes_ = 0;
  }

  std::size_t size() const { return order_.size(); }
  std::size_t bytes() const { return bytes_; }
  const LruStats& stats() const { return stats_; }

 private:
  struct Node {
    std::string key;
    V value;
    std::size_t bytes = 0;
  };
  using Iterator = typename std::list<Node>::iterator;

  void remove(Iterator it) {
    bytes_ -= it->bytes;
    by_key_.erase(it->key);
    order_.erase(it);
  }

  std::size_t max_entries_;
  std::size_t max_bytes_;
  std::size_t bytes_ = 0;
  std::list<Node> order_;  // most recently used first
  std::map<std::string, Iterator, std::less<>> by_key_;
  LruStats stats_;
};

}  // namespace quiver
