// Tool search: the tools a caller may see, ranked for a free-text query, and a small cache of the
// indexes so a principal's index is built once per version of what it can see.
//
// Why: `GET /v1/search?q=&limit=` (edge and agent) must rank hundreds or thousands of tools in
// well under a millisecond, in wasm too. A SearchIndex is an in-memory SQLite database (no file is
// ever opened) with one FTS5 table ranked by FTS5's bm25 formula, column weights name > title >
// connection id > description.
//
// Tokenizing: FTS5 `unicode61` (case folded, diacritics removed: "cafe" finds "café"), with `_`,
// `-` and `.` as separators, so the name `read_file` is indexed as the words "read file". A
// camelCase name is indexed whole and split ("readFile read File"). So `read file`, `read_file`,
// `readFile` and `file` all find `read_file`.
//
// Queries: what a user types is never FTS5 syntax. `search_match_expression` splits it into words
// at ASCII punctuation and whitespace and quotes each, so `"`, `*`, `AND`, `NEAR(`, `-`, `:` or
// `^` are text, not operators. Words are OR-ed (a tool matching more words ranks higher); each word
// matches whole (counted twice) or as a prefix (`git` finds `github`); a term that was one chunk
// like `read_file` also scores as the phrase "read file", and a camelCase word also stands for its
// parts (`readFile` finds `read_file`).
//
// When to call what: collect the caller's visible tools (granted connections, enabled tools) as
// SearchEntry values, `SearchIndex::build` them, keep the index in a SearchIndexCache under
// `search_cache_key(principal, version parts)`, and call `search` per request.
//
// Threads: the core has none. `search` is const and prepares its own statement, so concurrent
// searches on one index are safe where SQLite is built thread-safe (natively, connections are
// opened in serialized mode); the wasm build is single-threaded. SearchIndexCache is not
// synchronized: a multi-threaded host guards it with its own mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/bounded_lru.h"
#include "shared/identity.h"
#include "shared/status.h"

struct sqlite3;

namespace quiver {

struct SearchRankingData;  // search_index.cpp

inline constexpr int kMaxSearchLimit = 100;
inline constexpr std::size_t kMaxSearchQueryBytes = 512;
inline constexpr std::size_t kMaxSearchQueryWords = 16;
inline constexpr std::size_t kMaxSearchEntries = 100'000;

// One tool a caller can see.
struct SearchEntry {
  std::string connection_id;
  std::string name;
  std::string title;        // the tool's title (or annotations.title); may be empty
  std::string description;  // may be empty
};

// bm25 column weights; each must be finite and positive.
struct SearchWeights {
  double name = 10.0;
  double title = 5.0;
  double connection = 2.0;
  double description = 1.0;
};

struct SearchHit {
  std::size_t entry = 0;  // index into the entries the index was built from
  std::string connection_id;
  std::string name;
  double score = 0;  // positive; higher ranks first (the negated bm25)
};

// The FTS5 MATCH expression a user's query becomes. kInvalidArgument when it holds no word (empty,
// only spaces or punctuation), is not UTF-8, or has more than kMaxSearchQueryWords distinct
// words; kTooLarge over kMaxSearchQueryBytes.
Result<std::string> search_match_expression(std::string_view query);

class SearchIndex {
 public:
  // kInvalidArgument for a bad weight or more than kMaxSearchEntries entries; kInternal if SQLite
  // fails (out of memory, or an SQLite without FTS5).
  static Result<SearchIndex> build(std::vector<SearchEntry> entries,
                                   const SearchWeights& weights = {});

  SearchIndex(SearchIndex&& other) noexcept;
  SearchIndex& operator=(SearchIndex&& other) noexcept;
  SearchIndex(const SearchIndex&) = delete;
  SearchIndex& operator=(const SearchIndex&) = delete;
  ~SearchIndex();

  // At most `limit` hits (1..kMaxSearchLimit, else kInvalidArgument), best first; ties in entry
  // order. The query errors of search_match_expression. No match is an empty list, not an error.
  Result<std::vector<SearchHit>> search(std::string_view query, int limit) const;

  std::size_t size() const { return entries_.size(); }
  const SearchEntry& entry(std::size_t i) const { return entries_[i]; }
  // Heap held by the index (SQLite's pages and schema, and the entries), measured after building:
  // what SearchIndexCache counts against its byte bound.
  std::size_t memory_bytes() const { return memory_bytes_; }

 private:
  SearchIndex() = default;
  sqlite3* db_ = nullptr;
  std::vector<SearchEntry> entries_;
  std::unique_ptr<SearchRankingData> ranking_;  // registered with db_: outlives it
  std::size_t memory_bytes_ = 0;
};

// The cache key of a principal's index: the principal and a digest of whatever decides what it
// sees (for example each granted connection's id, manifest ETag and disabled-overlay version, and
// the grants themselves). Parts are length-delimited, so ["ab","c"] and ["a","bc"] differ.
std::string search_cache_key(const Principal& principal, const std::vector<std::string>& parts);

// Least-recently-used indexes, bounded by count and by bytes (SearchIndex::memory_bytes plus the
// key). Indexes are shared: one evicted while a request still searches it lives until released.
class SearchIndexCache {
 public:
  using Stats = LruStats;

  SearchIndexCache(std::size_t max_entries, std::size_t max_bytes) : lru_(max_entries, max_bytes) {}

  // The index under `key` (now the most recently used), or nullptr.
  std::shared_ptr<const SearchIndex> find(std::string_view key);
  // Adds or replaces `key`, then evicts the least recently used until within both bounds. An index
  // larger than max_bytes on its own is not kept (returns false).
  bool insert(std::string key, std::shared_ptr<const SearchIndex> index);
  bool erase(std::string_view key) { return lru_.erase(key); }
  void clear() { lru_.clear(); }

  std::size_t size() const { return lru_.size(); }
  std::size_t bytes() const { return lru_.bytes(); }
  const Stats& stats() const { return lru_.stats(); }

 private:
  BoundedLru<std::shared_ptr<const SearchIndex>> lru_;
};

}  // namespace quiver
