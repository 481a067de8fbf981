#include "shared/search_index.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include <sqlite3.h>

#include "shared/ascii.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {

// What quiver_bm25 (below) reads besides FTS5's API. Owned by the SearchIndex, on the heap so that
// its address (registered with SQLite) survives moves of the index.
struct SearchRankingData {
  std::vector<int> doc_tokens;       // tokens in each row (all columns), by rowid - 1
  double weights[4] = {1, 1, 1, 1};  // name, title, connection, description
};

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

Error sqlite_error(sqlite3* db, const char* what) {
  return Error(ErrorCode::kInternal,
               std::string("search index: ") + what + ": " + (db ? sqlite3_errmsg(db) : "no db"));
}

bool is_ascii_alnum(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower_or_digit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// "readFile" → "read File", "getHTTPResponse" → "get HTTP Response". ASCII only; other names come
// back unchanged.
std::string split_camel_case(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 8);
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (i > 0 && is_upper(c)) {
      const char prev = name[i - 1];
      const bool next_lower = i + 1 < name.size() && name[i + 1] >= 'a' && name[i + 1] <= 'z';
      if (is_lower_or_digit(prev) || (is_upper(prev) && next_lower)) out += ' ';
    }
    out += c;
  }
  return out;
}

// What the `name` column holds: the name as is, and its camelCase words when they differ.
std::string indexed_name(std::string_view name) {
  std::string split = split_camel_case(name);
  if (split == name) return std::string(name);
  return std::string(name) + " " + split;
}

// A word holds only ASCII letters and digits and non-ASCII bytes: never a `"`, so quoting it is
// enough to make it a string in FTS5 syntax.
std::string quoted(std::string_view words) { return "\"" + std::string(words) + "\""; }

Status check_weights(const SearchWeights& w) {
  for (double v : {w.name, w.title, w.connection, w.description}) {
    if (!std::isfinite(v) || v <= 0) return invalid("search weights must be finite and positive");
  }
  return Status::Ok();
}

struct Statement {
  sqlite3_stmt* stmt = nullptr;
  ~Statement() { sqlite3_finalize(stmt); }
  bool prepare(sqlite3* db, const char* sql) {
    return sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK;
  }
};

// ---- ranking -----------------------------------------------------------------------------------
//
// `quiver_bm25(tools)` is FTS5's own bm25 (fts5_aux.c: k1 = 1.2, b = 0.75, IDF floored at 1e-6,
// column weights multiplying term frequencies) with one change: a row's length in tokens comes
// from an array filled once at build time instead of FTS5's %_docsize table, which bm25 reads
// with an SQL statement per matching row (~2 µs each). Measured natively on 1000 tools, a word
// matching all of them ranks in ~1 ms instead of ~2.5 ms; a typical query in 0.2-0.5 ms.
// tests/shared/search_index_test.cpp checks that the scores equal bm25's.

// Per query, kept with xSetAuxdata (as bm25 does).
struct QueryStats {
  double avgdl = 1;
  std::vector<double> idf;   // per phrase
  std::vector<double> freq;  // per phrase, scratch for the current row
};

int count_rows(const Fts5ExtensionApi*, Fts5Context*, void* user) {
  ++*static_cast<sqlite3_int64*>(user);
  return SQLITE_OK;
}

void delete_query_stats(void* p) { delete static_cast<QueryStats*>(p); }

int query_stats(const Fts5ExtensionApi* api, Fts5Context* fts, QueryStats** out) {
  auto* stats = static_cast<QueryStats*>(api->xGetAuxdata(fts, 0));
  if (stats != nullptr) {
    *out = stats;
    return SQLITE_OK;
  }
  auto fresh = std::make_unique<QueryStats>();
  sqlite3_int64 rows = 0;
  sqlite3_int64 tokens = 0;
  int rc = api->xRowCount(fts, &rows);
  if (rc == SQLITE_OK) rc = api->xColumnTotalSize(fts, -1, &tokens);
  if (rc != SQLITE_OK) return rc;
  fresh->avgdl = rows > 0 ? static_cast<double>(tokens) / static_cast<double>(rows) : 1.0;
  const int phrases = api->xPhraseCount(fts);
  fresh->idf.resize(static_cast<std::size_t>(phrases));
  fresh->freq.resize(static_cast<std::size_t>(phrases));
  for (int i = 0; i < phrases; ++i) {
    sqlite3_int64 hits = 0;
    rc = api->xQueryPhrase(fts, i, &hits, count_rows);
    if (rc != SQLITE_OK) return rc;
    double idf =
        std::log((static_cast<double>(rows - hits) + 0.5) / (static_cast<double>(hits) + 0.5));
    fresh->idf[static_cast<std::size_t>(i)] = idf <= 0.0 ? 1e-6 : idf;
  }
  stats = fresh.release();
  rc = api->xSetAuxdata(fts, stats, delete_query_stats);  // frees `stats` itself on failure
  if (rc != SQLITE_OK) return rc;
  *out = stats;
  return SQLITE_OK;
}

void quiver_bm25(const Fts5ExtensionApi* api, Fts5Context* fts, sqlite3_context* ctx, int,
                 sqlite3_value**) {
  constexpr double k1 = 1.2;
  constexpr double b = 0.75;
  const auto* ranking = static_cast<const SearchRankingData*>(api->xUserData(fts));
  QueryStats* q = nullptr;
  int rc = query_stats(api, fts, &q);
  int instances = 0;
  if (rc == SQLITE_OK) rc = api->xInstCount(fts, &instances);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  std::fill(q->freq.begin(), q->freq.end(), 0.0);
  for (int i = 0; i < instances; ++i) {
    int phrase = 0;
    int column = 0;
    int offset = 0;
    if ((rc = api->xInst(fts, i, &phrase, &column, &offset)) != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    if (phrase < 0 || static_cast<std::size_t>(phrase) >= q->freq.size()) continue;
    q->freq[static_cast<std::size_t>(phrase)] +=
        column >= 0 && column < 4 ? ranking->weights[column] : 1.0;
  }
  const sqlite3_int64 rowid = api->xRowid(fts);
  double length = q->avgdl;
  if (rowid >= 1 && static_cast<std::size_t>(rowid) <= ranking->doc_tokens.size()) {
    length = ranking->doc_tokens[static_cast<std::size_t>(rowid - 1)];
  }
  double score = 0;
  for (std::size_t i = 0; i < q->freq.size(); ++i) {
    score += q->idf[i] *
             ((q->freq[i] * (k1 + 1.0)) / (q->freq[i] + k1 * (1 - b + b * length / q->avgdl)));
  }
  sqlite3_result_double(ctx, -score);
}

// The total of one %_docsize `sz` blob: a varint (SQLite's encoding) per column, as the FTS5
// documentation describes the shadow table. -1 when malformed.
int64_t docsize_total(const unsigned char* p, int n) {
  int64_t total = 0;
  int i = 0;
  while (i < n) {
    uint64_t v = 0;
    int k = 0;
    for (; k < 9 && i < n; ++k) {
      const unsigned char c = p[i++];
      if (k == 8) {
        v = (v << 8) | c;
        break;
      }
      v = (v << 7) | (c & 0x7f);
      if ((c & 0x80) == 0) break;
    }
    if (v > (1u << 30)) return -1;
    total += static_cast<int64_t>(v);
  }
  return total;
}

fts5_api* fts5_api_of(sqlite3* db) {
  fts5_api* api = nullptr;
  Statement stmt;
  if (!stmt.prepare(db, "SELECT fts5(?1)")) return nullptr;
  sqlite3_bind_pointer(stmt.stmt, 1, static_cast<void*>(&api), "fts5_api_ptr", nullptr);
  sqlite3_step(stmt.stmt);
  return api;
}

}  // namespace

// ---- queries -----------------------------------------------------------------------------------

Result<std::string> search_match_expression(std::string_view query) {
  if (query.size() > kMaxSearchQueryBytes) {
    return Error(ErrorCode::kTooLarge,
                 "search query is over " + std::to_string(kMaxSearchQueryBytes) + " bytes");
  }
  if (!is_valid_utf8(query)) return invalid("search query is not UTF-8");

  std::vector<std::string> words;    // distinct, in order
  std::set<std::string> seen;        // ASCII-lower-cased
  std::vector<std::string> phrases;  // chunks of several words, e.g. read_file → "read file"
  std::set<std::string> seen_phrases;
  std::size_t i = 0;
  while (i < query.size()) {
    while (i < query.size() && is_space(query[i])) ++i;
    std::size_t end = i;
    while (end < query.size() && !is_space(query[end])) ++end;
    // One chunk: words are runs of ASCII letters/digits and non-ASCII bytes.
    std::vector<std::string> chunk_words;
    std::size_t j = i;
    while (j < end) {
      auto word_byte = [&](std::size_t k) {
        const auto c = static_cast<unsigned char>(query[k]);
        return c >= 0x80 || is_ascii_alnum(c);
      };
      while (j < end && !word_byte(j)) ++j;
      std::size_t w = j;
      while (w < end && word_byte(w)) ++w;
      if (w > j) chunk_words.emplace_back(query.substr(j, w - j));
      j = w;
    }
    if (chunk_words.size() > 1) {
      std::string phrase;
      for (const std::string& w : chunk_words) phrase += (phrase.empty() ? "" : " ") + w;
      if (seen_phrases.insert(ascii_lower(phrase)).second) phrases.push_back(std::move(phrase));
    }
    // A camelCase word also stands for its parts, as names are indexed: `readFile` finds
    // `read_file`.
    for (std::size_t k = 0, n = chunk_words.size(); k < n; ++k) {
      const std::string split = split_camel_case(chunk_words[k]);
      if (split == chunk_words[k]) continue;
      if (seen_phrases.insert(ascii_lower(split)).second) phrases.push_back(split);
      std::size_t from = 0;
      while (from < split.size()) {
        std::size_t space = split.find(' ', from);
        if (space == std::string::npos) space = split.size();
        chunk_words.push_back(split.substr(from, space - from));
        from = space + 1;
      }
    }
    for (std::string& w : chunk_words) {
      if (seen.insert(ascii_lower(w)).second) words.push_back(std::move(w));
    }
    i = end;
  }
  if (words.empty()) return invalid("search query has no words");
  if (words.size() > kMaxSearchQueryWords) {
    return invalid("search query has more than " + std::to_string(kMaxSearchQueryWords) +
                   " distinct words");
  }

  std::string expression;
  auto add = [&expression](const std::string& term) {
    if (!expression.empty()) expression += " OR ";
    expression += term;
  };
  for (const std::string& phrase : phrases) add(quoted(phrase));
  for (const std::string& word : words) {
    // Whole word and prefix: a whole match scores in both, so it outranks a prefix-only match.
    add(quoted(word));
    if (word.size() >= 2) add(quoted(word) + "*");
  }
  return expression;
}

// ---- the index ---------------------------------------------------------------------------------

Result<SearchIndex> SearchIndex::build(std::vector<SearchEntry> entries,
                                       const SearchWeights& weights) {
  if (Status s = check_weights(weights); !s.ok()) return s.error();
  if (entries.size() > kMaxSearchEntries) {
    return invalid("search index of " + std::to_string(entries.size()) + " tools; the limit is " +
                   std::to_string(kMaxSearchEntries));
  }
  SearchIndex index;
  // FULLMUTEX: serialized connections where SQLite has threads (natively); a no-op in wasm.
  const int flags =
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(":memory:", &index.db_, flags, nullptr) != SQLITE_OK) {
    return sqlite_error(index.db_, "cannot open an in-memory database");
  }
  sqlite3* db = index.db_;
  // Never a temporary file, even for a large sort. 1 KiB pages: a principal with a handful of
  // tools costs ~12 KiB instead of ~34 KiB with the default 4 KiB pages; 1000 tools cost the same.
  const char* setup =
      "PRAGMA temp_store = MEMORY; PRAGMA page_size = 1024;"
      "CREATE VIRTUAL TABLE tools USING fts5("
      "  name, title, connection, description,"
      "  tokenize = 'unicode61 remove_diacritics 2');";
  if (sqlite3_exec(db, setup, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return sqlite_error(db, "cannot create the FTS5 table");
  }
  if (sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return sqlite_error(db, "BEGIN");
  }
  {
    Statement insert;
    if (!insert.prepare(db,
                        "INSERT INTO tools(rowid, name, title, connection, description) "
                        "VALUES (?1, ?2, ?3, ?4, ?5)")) {
      return sqlite_error(db, "cannot prepare the insert");
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const SearchEntry& e = entries[i];
      const std::string name = indexed_name(e.name);
      sqlite3_bind_int64(insert.stmt, 1, static_cast<sqlite3_int64>(i) + 1);
      sqlite3_bind_text(insert.stmt, 2, name.data(), static_cast<int>(name.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_text(insert.stmt, 3, e.title.data(), static_cast<int>(e.title.size()),
                        SQLITE_STATIC);
      sqlite3_bind_text(insert.stmt, 4, e.connection_id.data(),
                        static_cast<int>(e.connection_id.size()), SQLITE_STATIC);
      sqlite3_bind_text(insert.stmt, 5, e.description.data(),
                        static_cast<int>(e.description.size()), SQLITE_STATIC);
      if (sqlite3_step(insert.stmt) != SQLITE_DONE) return sqlite_error(db, "cannot insert a tool");
      sqlite3_reset(insert.stmt);
      sqlite3_clear_bindings(insert.stmt);
    }
  }
  // One merged segment: smaller, and every query reads one b-tree.
  if (sqlite3_exec(db, "INSERT INTO tools(tools) VALUES('optimize'); COMMIT", nullptr, nullptr,
                   nullptr) != SQLITE_OK) {
    return sqlite_error(db, "cannot commit the index");
  }

  // Our ranking function, and each row's length for it.
  index.ranking_ = std::make_unique<SearchRankingData>();
  SearchRankingData* ranking = index.ranking_.get();
  ranking->doc_tokens.assign(entries.size(), 0);
  ranking->weights[0] = weights.name;
  ranking->weights[1] = weights.title;
  ranking->weights[2] = weights.connection;
  ranking->weights[3] = weights.description;
  fts5_api* api = fts5_api_of(db);
  if (api == nullptr) return sqlite_error(db, "SQLite has no FTS5 API");
  if (api->xCreateFunction(api, "quiver_bm25", ranking, quiver_bm25, nullptr) != SQLITE_OK) {
    return sqlite_error(db, "cannot register the ranking function");
  }
  {
    Statement lengths;
    if (!lengths.prepare(db, "SELECT id, sz FROM tools_docsize")) {
      return sqlite_error(db, "cannot read the row lengths");
    }
    int rc;
    while ((rc = sqlite3_step(lengths.stmt)) == SQLITE_ROW) {
      const sqlite3_int64 id = sqlite3_column_int64(lengths.stmt, 0);
      const auto* blob = static_cast<const unsigned char*>(sqlite3_column_blob(lengths.stmt, 1));
      const int64_t total = docsize_total(blob, sqlite3_column_bytes(lengths.stmt, 1));
      if (id < 1 || static_cast<std::size_t>(id) > entries.size() || total < 0) {
        return Error(ErrorCode::kInternal, "search index: unexpected FTS5 row lengths");
      }
      ranking->doc_tokens[static_cast<std::size_t>(id - 1)] = static_cast<int>(total);
    }
    if (rc != SQLITE_DONE) return sqlite_error(db, "cannot read the row lengths");
  }

  std::size_t bytes = sizeof(SearchIndex) + sizeof(SearchRankingData) +
                      ranking->doc_tokens.capacity() * sizeof(int);
  for (const SearchEntry& e : entries) {
    bytes += sizeof(SearchEntry) + e.connection_id.capacity() + e.name.capacity() +
             e.title.capacity() + e.description.capacity();
  }
  for (int op : {SQLITE_DBSTATUS_CACHE_USED, SQLITE_DBSTATUS_SCHEMA_USED}) {
    int current = 0;
    int highwater = 0;
    if (sqlite3_db_status(db, op, &current, &highwater, 0) == SQLITE_OK && current > 0) {
      bytes += static_cast<std::size_t>(current);
    }
  }
  index.memory_bytes_ = bytes;
  index.entries_ = std::move(entries);
  return index;
}

SearchIndex::SearchIndex(SearchIndex&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      entries_(std::move(other.entries_)),
      ranking_(std::move(other.ranking_)),
      memory_bytes_(std::exchange(other.memory_bytes_, 0)) {}

SearchIndex& SearchIndex::operator=(SearchIndex&& other) noexcept {
  if (this != &other) {
    sqlite3_close(db_);
    db_ = std::exchange(other.db_, nullptr);
    entries_ = std::move(other.entries_);
    ranking_ = std::move(other.ranking_);
    memory_bytes_ = std::exchange(other.memory_bytes_, 0);
  }
  return *this;
}

SearchIndex::~SearchIndex() { sqlite3_close(db_); }

Result<std::vector<SearchHit>> SearchIndex::search(std::string_view query, int limit) const {
  if (limit < 1 || limit > kMaxSearchLimit) {
    return invalid("search limit must be 1.." + std::to_string(kMaxSearchLimit));
  }
  Result<std::string> expression = search_match_expression(query);
  if (!expression.ok()) return expression.error();
  if (db_ == nullptr) return Error(ErrorCode::kInternal, "search index: used after move");

  Statement select;
  if (!select.prepare(db_,
                      "SELECT rowid, quiver_bm25(tools) AS r FROM tools "
                      "WHERE tools MATCH ?1 ORDER BY r, rowid LIMIT ?2")) {
    return sqlite_error(db_, "cannot prepare the search");
  }
  sqlite3_bind_text(select.stmt, 1, expression->data(), static_cast<int>(expression->size()),
                    SQLITE_STATIC);
  sqlite3_bind_int(select.stmt, 2, limit);

  std::vector<SearchHit> hits;
  int rc;
  while ((rc = sqlite3_step(select.stmt)) == SQLITE_ROW) {
    const sqlite3_int64 rowid = sqlite3_column_int64(select.stmt, 0);
    if (rowid < 1 || static_cast<std::size_t>(rowid) > entries_.size()) continue;
    const std::size_t i = static_cast<std::size_t>(rowid - 1);
    SearchHit hit;
    hit.entry = i;
    hit.connection_id = entries_[i].connection_id;
    hit.name = entries_[i].name;
    hit.score = -sqlite3_column_double(select.stmt, 1);
    hits.push_back(std::move(hit));
  }
  if (rc != SQLITE_DONE) return sqlite_error(db_, "search failed");
  return hits;
}

// ---- the cache ---------------------------------------------------------------------------------

std::string search_cache_key(const Principal& principal, const std::vector<std::string>& parts) {
  Sha256 h;
  for (const std::string& part : parts) {
    h.update(std::to_string(part.size()) + ":");
    h.update(part);
  }
  return principal.str() + "#" + hex_encode(h.finish());
}

std::shared_ptr<const SearchIndex> SearchIndexCache::find(std::string_view key) {
  const std::shared_ptr<const SearchIndex>* index = lru_.find(key);
  return index != nullptr ? *index : nullptr;
}

bool SearchIndexCache::insert(std::string key, std::shared_ptr<const SearchIndex> index) {
  if (index == nullptr) {
    lru_.erase(key);
    return false;
  }
  const std::size_t bytes = index->memory_bytes() + key.size();
  return lru_.insert(std::move(key), std::move(index), bytes);
}

}  // namespace quiver
