// The search engine the edge will use (SQLite FTS5 ranked by bm25) works in both builds: natively
// against Debian's libsqlite3, in wasm against the amalgamation fetched at build time. An
// in-memory database only: no files.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>

namespace {

struct Db {
  sqlite3* db = nullptr;
  Db() { sqlite3_open(":memory:", &db); }
  ~Db() { sqlite3_close(db); }
  bool exec(const char* sql) {
    return sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK;
  }
};

TEST(SqliteFts5, RanksToolsWithBm25) {
  Db d;
  ASSERT_NE(d.db, nullptr);
  ASSERT_TRUE(d.exec("CREATE VIRTUAL TABLE tools USING fts5(name, description)"));
  ASSERT_TRUE(
      d.exec("INSERT INTO tools VALUES"
             "('read_file', 'Read a file from disk'),"
             "('search_files', 'Search files by name; files files'),"
             "('echo', 'Echo the input back')"));
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(d.db, "SELECT name FROM tools WHERE tools MATCH ? ORDER BY bm25(tools)",
                         -1, &stmt, nullptr),
      SQLITE_OK);
  sqlite3_bind_text(stmt, 1, "files", -1, SQLITE_STATIC);
  std::vector<std::string> names;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
  }
  sqlite3_finalize(stmt);
  ASSERT_EQ(names.size(), 1u);  // "file" does not match "files": no stemmer configured
  EXPECT_EQ(names[0], "search_files");
}

}  // namespace
