#include "shared/search_index.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>

namespace quiver {
namespace {

std::vector<SearchEntry> filesystem_and_github() {
  return {
      {"filesystem", "read_file", "Read File", "Read the complete contents of a file from disk."},
      {"filesystem", "read_multiple_files", "Read Multiple Files",
       "Read the contents of several files at once."},
      {"filesystem", "write_file", "Write File", "Create a new file or overwrite an existing one."},
      {"filesystem", "search_files", "Search Files",
       "Recursively search for files and directories matching a pattern."},
      {"filesystem", "list_directory", "List Directory", "List the entries of a directory."},
      {"github", "create_issue", "Create Issue", "Open a new issue in a GitHub repository."},
      {"github", "list_issues", "List Issues", "List and filter the issues of a repository."},
      {"github", "createPullRequest", "", "Open a pull request."},
      {"memory", "search_nodes", "", "Search the knowledge graph and return matching nodes."},
      {"weather", "get_forecast", "Forecast",
       "The weather near a place, in \xC2\xB0"
       "C."},
  };
}

SearchIndex build(std::vector<SearchEntry> entries, const SearchWeights& weights = {}) {
  Result<SearchIndex> index = SearchIndex::build(std::move(entries), weights);
  EXPECT_TRUE(index.ok()) << index.error().message;
  return std::move(index).value();
}

std::vector<std::string> names(const SearchIndex& index, std::string_view query, int limit = 10) {
  Result<std::vector<SearchHit>> hits = index.search(query, limit);
  EXPECT_TRUE(hits.ok()) << query << ": " << hits.error().message;
  std::vector<std::string> out;
  if (!hits.ok()) return out;
  for (const SearchHit& h : *hits) out.push_back(h.name);
  return out;
}

// ---- ranking -----------------------------------------------------------------------------------

TEST(SearchIndex, FindsToolsByTheWordsOfTheirNames) {
  SearchIndex index = build(filesystem_and_github());
  for (const char* query : {"read file", "read_file", "READ_FILE", "readFile", "read-file",
                            "read.file", "  read   file  "}) {
    std::vector<std::string> got = names(index, query);
    ASSERT_FALSE(got.empty()) << query;
    EXPECT_EQ(got[0], "read_file") << query;
  }
  // The camelCase name is found by its words and whole.
  for (const char* query : {"pull request", "create pull request", "createPullRequest",
                            "create_pull_request", "pullrequest createpullrequest"}) {
    std::vector<std::string> got = names(index, query);
    ASSERT_FALSE(got.empty()) << query;
    EXPECT_EQ(got[0], "createPullRequest") << query;
  }
}

TEST(SearchIndex, RanksBetterMatchesFirst) {
  SearchIndex index = build(filesystem_and_github());
  Result<std::vector<SearchHit>> hits = index.search("create issue", 10);
  ASSERT_TRUE(hits.ok());
  ASSERT_GE(hits->size(), 3u);
  EXPECT_EQ((*hits)[0].name, "create_issue");
  EXPECT_EQ((*hits)[0].connection_id, "github");
  EXPECT_EQ((*hits)[0].entry, 5u);
  // Then the tools that match one of the words in their names: "issue" as a prefix of "issues",
  // and "create".
  EXPECT_TRUE(((*hits)[1].name == "list_issues" && (*hits)[2].name == "createPullRequest") ||
              ((*hits)[2].name == "list_issues" && (*hits)[1].name == "createPullRequest"));
  for (std::size_t i = 0; i < hits->size(); ++i) {
    EXPECT_GT((*hits)[i].score, 0) << i;
    if (i > 0) {
      EXPECT_LE((*hits)[i].score, (*hits)[i - 1].score) << i;
    }
  }
  // The whole word outranks a prefix: "file" puts the *_file tools before search_files.
  std::vector<std::string> file = names(index, "file");
  ASSERT_GE(file.size(), 4u);
  EXPECT_EQ(file[0], "read_file");
  EXPECT_EQ(file[1], "write_file");
  // A word only in a description still finds the tool.
  EXPECT_EQ(names(index, "knowledge graph"), std::vector<std::string>{"search_nodes"});
  // Prefixes: "dir" finds list_directory, "git" the GitHub tools.
  EXPECT_EQ(names(index, "dir")[0], "list_directory");
  std::vector<std::string> git = names(index, "git");
  ASSERT_GE(git.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(git[i] == "create_issue" || git[i] == "list_issues" ||
                git[i] == "createPullRequest")
        << git[i];
  }
  // No match is an empty list, not an error.
  EXPECT_TRUE(names(index, "kubernetes").empty());
}

TEST(SearchIndex, ColumnWeights) {
  // "alpha" in exactly one column of each tool; the other columns hold the same number of words.
  std::vector<SearchEntry> entries = {
      {"c-one", "beta_tool", "Gamma Delta", "epsilon zeta eta alpha"},    // description
      {"alpha", "gamma_tool", "Delta Epsilon", "zeta eta theta iota"},    // connection id
      {"c-two", "delta_tool", "Alpha Epsilon", "zeta eta theta iota"},    // title
      {"c-three", "alpha_tool", "Epsilon Zeta", "eta theta iota kappa"},  // name
  };
  SearchIndex index = build(entries);
  EXPECT_EQ(names(index, "alpha"),
            (std::vector<std::string>{"alpha_tool", "delta_tool", "gamma_tool", "beta_tool"}));

  const SearchWeights descriptions_first{1, 2, 3, 20};  // name, title, connection, description
  SearchIndex reversed = build(entries, descriptions_first);
  EXPECT_EQ(names(reversed, "alpha"),
            (std::vector<std::string>{"beta_tool", "gamma_tool", "delta_tool", "alpha_tool"}));

  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    SearchWeights w;
    w.title = bad;
    EXPECT_FALSE(SearchIndex::build(entries, w).ok()) << bad;
  }
}

// `sql` prepared on `db`; nullptr (and a failure naming SQLite's message) if it does not prepare.
sqlite3_stmt* prepared(sqlite3* db, const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << " in " << sql;
  }
  return stmt;
}

// The index ranks with its own copy of bm25 (row lengths read once, not per row). Its scores must
// be FTS5's bm25 with the same column weights, computed here on a plain FTS5 table.
TEST(SearchIndex, ScoresAreFts5Bm25) {
  std::vector<SearchEntry> entries;
  const char* words[] = {"alpha", "beta", "gamma", "delta", "file", "issue", "read", "write"};
  for (int i = 0; i < 300; ++i) {
    std::string description;
    for (int k = 0; k <= i % 7; ++k) description += std::string(words[(i * 3 + k) % 8]) + " ";
    entries.push_back(
        {"conn-" + std::to_string(i % 5),
         std::string(words[i % 8]) + "_" + words[(i / 8) % 8] + "_" + std::to_string(i),
         std::string(words[(i / 3) % 8]) + " tool", description});
  }
  const SearchWeights weights{7, 3.5, 1.5, 0.75};  // name, title, connection, description
  SearchIndex index = build(entries, weights);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE VIRTUAL TABLE tools USING fts5(name, title, connection, "
                         "description, tokenize = 'unicode61 remove_diacritics 2')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_stmt* insert = prepared(db,
                                  "INSERT INTO tools(rowid, name, title, connection, description) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5)");
  ASSERT_NE(insert, nullptr);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(i) + 1);
    sqlite3_bind_text(insert, 2, entries[i].name.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 3, entries[i].title.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 4, entries[i].connection_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 5, entries[i].description.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(insert), SQLITE_DONE);
    sqlite3_reset(insert);
  }
  sqlite3_finalize(insert);

  for (const char* query : {"alpha", "read file", "gamma_delta", "iss", "conn 3 beta", "tool"}) {
    SCOPED_TRACE(query);
    Result<std::string> expression = search_match_expression(query);
    ASSERT_TRUE(expression.ok());
    sqlite3_stmt* select = prepared(db,
                                    "SELECT rowid, -bm25(tools, 7, 3.5, 1.5, 0.75) AS s FROM tools "
                                    "WHERE tools MATCH ?1 ORDER BY s DESC, rowid LIMIT 50");
    ASSERT_NE(select, nullptr);
    sqlite3_bind_text(select, 1, expression->c_str(), -1, SQLITE_TRANSIENT);
    std::vector<std::pair<std::size_t, double>> reference;
    while (sqlite3_step(select) == SQLITE_ROW) {
      reference.emplace_back(static_cast<std::size_t>(sqlite3_column_int64(select, 0) - 1),
                             sqlite3_column_double(select, 1));
    }
    sqlite3_finalize(select);
    Result<std::vector<SearchHit>> hits = index.search(query, 50);
    ASSERT_TRUE(hits.ok());
    ASSERT_FALSE(reference.empty());
    ASSERT_EQ(hits->size(), reference.size());
    for (std::size_t i = 0; i < reference.size(); ++i) {
      EXPECT_EQ((*hits)[i].entry, reference[i].first) << i;
      EXPECT_NEAR((*hits)[i].score, reference[i].second, 1e-9 * std::fabs(reference[i].second))
          << i;
    }
  }
  sqlite3_close(db);
}

TEST(SearchIndex, TiesKeepEntryOrder) {
  SearchIndex index = build({{"b", "same", "Same", "Same."},
                             {"a", "same", "Same", "Same."},
                             {"c", "same", "Same", "Same."}});
  Result<std::vector<SearchHit>> hits = index.search("same", 10);
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ((*hits)[i].entry, i);
}

// ---- queries are text, never FTS5 syntax -------------------------------------------------------

TEST(SearchIndex, MatchExpressionQuotesEveryWord) {
  Result<std::string> e = search_match_expression("read_file");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, R"("read file" OR "read" OR "read"* OR "file" OR "file"*)");
  e = search_match_expression("git x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, R"("git" OR "git"* OR "x")");  // no prefix search on one letter
  e = search_match_expression("NEAR(a b) AND \"c\" OR -d*");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e,
            R"("NEAR a" OR "NEAR" OR "NEAR"* OR "a" OR "b" OR "AND" OR "AND"* OR "c" OR "OR" OR )"
            R"("OR"* OR "d")");
  e = search_match_expression("readFile");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, R"("read File" OR "readFile" OR "readFile"* OR "read" OR "read"* OR "File" OR )"
                R"("File"*)");
  // Repeated words (in any case) count once.
  e = search_match_expression("file FILE File");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, R"("file" OR "file"*)");
}

TEST(SearchIndex, HostileQueriesAreSearchedAsText) {
  std::vector<SearchEntry> entries = filesystem_and_github();
  entries.push_back({"notes", "near_me", "Near Me", "Search and replace, or not; column: name."});
  SearchIndex index = build(entries);
  const std::vector<std::string> hostile = {
      "\"",
      "\"read",
      "read\"",
      "\"\"read\"\"",
      "*",
      "read*",
      "*read",
      "AND",
      "OR",
      "NOT",
      "read AND",
      "AND read",
      "NOT read",
      "read NOT",
      "NEAR(",
      "NEAR(read",
      "NEAR(read file, 2)",
      "-read",
      "read -file",
      "name:read",
      "{name title}: read",
      "^read",
      "read + file",
      "(read",
      "read)",
      "'; DROP TABLE tools; --",
      "tools MATCH 'x'",
      "read\\",
      "\\\"",
      std::string("read\0file", 9),
      "\x7f",
      "[read]",
      "a:b:c",
      "rank:bm25(tools)",
  };
  for (const std::string& q : hostile) {
    SCOPED_TRACE(q);
    Result<std::vector<SearchHit>> hits = index.search(q, 10);
    if (!hits.ok()) {
      // Only "no words" may fail, and only as an error value.
      EXPECT_EQ(hits.error().code, ErrorCode::kInvalidArgument);
      EXPECT_NE(hits.error().message.find("no words"), std::string::npos) << hits.error().message;
    }
  }
  // Operator words are just words: "AND" finds the descriptions that say "and", "not" the one
  // that says "not".
  std::vector<std::string> with_and = names(index, "AND");
  std::sort(with_and.begin(), with_and.end());
  EXPECT_EQ(with_and,
            (std::vector<std::string>{"list_issues", "near_me", "search_files", "search_nodes"}));
  EXPECT_EQ(names(index, "not")[0], "near_me");
  EXPECT_EQ(names(index, "NEAR(")[0], "near_me");
  // A column filter is not one: "name:replace" matches the description's "replace".
  EXPECT_EQ(names(index, "name:replace")[0], "near_me");
  // "-file" does not exclude anything.
  EXPECT_EQ(names(index, "-file")[0], "read_file");
  // The index survives all of it.
  EXPECT_EQ(names(index, "read file")[0], "read_file");
  EXPECT_EQ(index.size(), entries.size());
}

TEST(SearchIndex, EmptyAndOversizedQueries) {
  SearchIndex index = build(filesystem_and_github());
  for (const std::string& q : {std::string(), std::string("   "), std::string("\t\n"),
                               std::string("***"), std::string("\"\" - ()")}) {
    Result<std::vector<SearchHit>> r = index.search(q, 10);
    ASSERT_FALSE(r.ok()) << q;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("no words"), std::string::npos);
  }
  Result<std::vector<SearchHit>> big = index.search(std::string(kMaxSearchQueryBytes + 1, 'a'), 10);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kTooLarge);
  std::string many;
  for (int i = 0; i < 17; ++i) many += "w" + std::to_string(i) + " ";
  Result<std::vector<SearchHit>> too_many = index.search(many, 10);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("16"), std::string::npos);
  Result<std::vector<SearchHit>> bad_utf8 = index.search("caf\xC3", 10);
  ASSERT_FALSE(bad_utf8.ok());
  EXPECT_NE(bad_utf8.error().message.find("UTF-8"), std::string::npos);
}

TEST(SearchIndex, Limit) {
  SearchIndex index = build(filesystem_and_github());
  for (int bad : {0, -1, kMaxSearchLimit + 1, 1'000'000}) {
    Result<std::vector<SearchHit>> r = index.search("file", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(names(index, "file", 1), std::vector<std::string>{"read_file"});
  EXPECT_EQ(names(index, "file", 2).size(), 2u);
  EXPECT_EQ(names(index, "file", kMaxSearchLimit).size(), 5u);  // every match, no more
}

TEST(SearchIndex, Unicode) {
  SearchIndex index = build({
      {"cafe", "caf\xC3\xA9_menu", "Caf\xC3\xA9 Men\xC3\xBC", "Les plats du caf\xC3\xA9."},
      // 翻訳 (translate); 日本語 を 翻訳 (translate Japanese)
      {"jp", "translate", "\xE7\xBF\xBB\xE8\xA8\xB3",
       "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE3\x82\x92 \xE7\xBF\xBB\xE8\xA8\xB3"},
      {"ru", "poisk", "\xD0\x9F\xD0\xBE\xD0\xB8\xD1\x81\xD0\xBA",  // Поиск
       "\xD0\x98\xD1\x81\xD0\xBA\xD0\xB0\xD1\x82\xD1\x8C"},        // Искать
      {"emoji", "party", "Party \xF0\x9F\x8E\x89", "Celebrate."},
      {"x", "weather", "Weather",
       "\xC2\xB0"
       "C near Z\xC3\xBCrich."},
  });
  EXPECT_EQ(names(index, "cafe")[0], "caf\xC3\xA9_menu");         // diacritics removed
  EXPECT_EQ(names(index, "CAF\xC3\x89")[0], "caf\xC3\xA9_menu");  // CAFÉ: case folded
  EXPECT_EQ(names(index, "menu")[0], "caf\xC3\xA9_menu");
  EXPECT_EQ(names(index, "\xE7\xBF\xBB\xE8\xA8\xB3")[0], "translate");              // 翻訳
  EXPECT_EQ(names(index, "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E")[0], "translate");  // 日本語
  EXPECT_EQ(names(index, "\xD0\xBF\xD0\xBE\xD0\xB8\xD1\x81\xD0\xBA")[0], "poisk");  // поиск
  EXPECT_EQ(names(index, "zurich")[0], "weather");
  // Emoji and non-ASCII punctuation are separators to unicode61: searched, found nowhere, and
  // not an error.
  EXPECT_TRUE(names(index, "\xF0\x9F\x8E\x89").empty());  // 🎉
  EXPECT_EQ(names(index, "party \xF0\x9F\x8E\x89")[0], "party");
  EXPECT_TRUE(names(index, "\xC2\xAB\xC2\xBB").empty());  // «»
}

TEST(SearchIndex, EmptyIndexAndEmptyFields) {
  SearchIndex empty = build({});
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(names(empty, "anything").empty());
  SearchIndex bare = build({{"c", "ping", "", ""}});
  EXPECT_EQ(names(bare, "ping"), std::vector<std::string>{"ping"});
  EXPECT_EQ(bare.entry(0).connection_id, "c");
}

TEST(SearchIndex, AThousandTools) {
  const char* verbs[] = {"get", "list", "create", "update", "delete", "search", "sync", "export"};
  const char* nouns[] = {"issue",  "file",    "user",    "invoice", "ticket",
                         "record", "channel", "message", "project", "report"};
  std::vector<SearchEntry> entries;
  for (int i = 0; i < 1000; ++i) {
    const std::string verb = verbs[i % 8];
    const std::string noun = nouns[(i / 8) % 10];
    const std::string cid = "conn" + std::to_string(i / 80);
    entries.push_back({cid, verb + "_" + noun + "_v" + std::to_string(i), verb + " " + noun,
                       "Does " + verb + " on a " + noun + " in system " + std::to_string(i) +
                           ". Part of the " + cid + " connection."});
  }
  entries.push_back({"special", "quarterly_revenue_forecast", "Quarterly Revenue Forecast",
                     "Forecast revenue for the next quarter."});
  SearchIndex index = build(entries);
  EXPECT_EQ(index.size(), 1001u);
  EXPECT_GT(index.memory_bytes(), 100'000u);

  EXPECT_EQ(names(index, "revenue forecast", 5)[0], "quarterly_revenue_forecast");
  Result<std::vector<SearchHit>> hits = index.search("delete invoice", kMaxSearchLimit);
  ASSERT_TRUE(hits.ok());
  ASSERT_EQ(hits->size(), static_cast<std::size_t>(kMaxSearchLimit));
  // The 12 or 13 tools that both delete and are about invoices come first.
  int both = 0;
  for (const SearchEntry& e : entries) {
    if (e.title == "delete invoice") ++both;
  }
  ASSERT_GT(both, 5);
  for (int i = 0; i < both; ++i) {
    EXPECT_EQ(index.entry((*hits)[i].entry).title, "delete invoice") << i;
  }
  // A search for one tool's unique number.
  EXPECT_EQ(names(index, "system 737", 1)[0], entries[737].name);
  EXPECT_EQ(names(index, "v737", 1)[0], entries[737].name);
}

// ---- the cache ---------------------------------------------------------------------------------

std::shared_ptr<const SearchIndex> shared_index(const std::string& tool) {
  return std::make_shared<const SearchIndex>(build({{"c", tool, "", "A tool."}}));
}

TEST(SearchIndex, CacheKey) {
  Principal alice = Principal::member("alice").value();
  Principal bob = Principal::member("bob").value();
  const std::string k = search_cache_key(alice, {"github", "etag-1"});
  EXPECT_EQ(k.rfind("member/alice#", 0), 0u);
  EXPECT_EQ(k, search_cache_key(alice, {"github", "etag-1"}));
  EXPECT_NE(k, search_cache_key(alice, {"github", "etag-2"}));
  EXPECT_NE(k, search_cache_key(bob, {"github", "etag-1"}));
  EXPECT_NE(search_cache_key(alice, {"ab", "c"}), search_cache_key(alice, {"a", "bc"}));
  EXPECT_NE(search_cache_key(alice, {}), search_cache_key(alice, {""}));
}

TEST(SearchIndex, CacheEvictsTheLeastRecentlyUsedByCount) {
  SearchIndexCache cache(2, 1u << 30);
  EXPECT_EQ(cache.find("a"), nullptr);
  ASSERT_TRUE(cache.insert("a", shared_index("alpha")));
  ASSERT_TRUE(cache.insert("b", shared_index("beta")));
  ASSERT_NE(cache.find("a"), nullptr);  // a is now the most recent
  ASSERT_TRUE(cache.insert("c", shared_index("gamma")));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find("b"), nullptr);  // b was least recently used
  std::shared_ptr<const SearchIndex> a = cache.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->entry(0).name, "alpha");
  EXPECT_NE(cache.find("c"), nullptr);
  EXPECT_EQ(cache.stats().hits, 3u);
  EXPECT_EQ(cache.stats().misses, 2u);
  EXPECT_EQ(cache.stats().evictions, 1u);

  // An evicted index still held by a request keeps working.
  ASSERT_TRUE(cache.insert("d", shared_index("delta")));
  ASSERT_TRUE(cache.insert("e", shared_index("epsilon")));
  EXPECT_EQ(cache.find("a"), nullptr);
  EXPECT_EQ(names(*a, "alpha"), std::vector<std::string>{"alpha"});

  // Replacing a key keeps one entry; erase and clear.
  ASSERT_TRUE(cache.insert("e", shared_index("epsilon2")));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find("e")->entry(0).name, "epsilon2");
  EXPECT_TRUE(cache.erase("e"));
  EXPECT_FALSE(cache.erase("e"));
  EXPECT_EQ(cache.size(), 1u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(SearchIndex, CacheEvictsByBytes) {
  std::shared_ptr<const SearchIndex> one = shared_index("one");
  const std::size_t each = one->memory_bytes() + 1;  // plus a one-byte key
  ASSERT_GT(one->memory_bytes(), 0u);
  SearchIndexCache cache(100, 2 * each + each / 2);  // room for two
  ASSERT_TRUE(cache.insert("1", one));
  ASSERT_TRUE(cache.insert("2", shared_index("two")));
  EXPECT_EQ(cache.bytes(), 2 * each);
  ASSERT_TRUE(cache.insert("3", shared_index("six")));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find("1"), nullptr);
  EXPECT_LE(cache.bytes(), 2 * each + each / 2);

  // An index bigger than the whole bound is not kept, and evicts nothing.
  std::vector<SearchEntry> many;
  for (int i = 0; i < 1000; ++i) many.push_back({"c", "tool_" + std::to_string(i), "", "x"});
  auto big = std::make_shared<const SearchIndex>(build(many));
  ASSERT_GT(big->memory_bytes(), 3 * each);
  EXPECT_FALSE(cache.insert("big", big));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.find("big"), nullptr);
  EXPECT_FALSE(cache.insert("null", nullptr));
}

}  // namespace
}  // namespace quiver
