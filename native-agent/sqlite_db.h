// SqliteDb: one SQLite connection as the agent's two SQLite users hold it (SqliteStore, the cache
// of the embedded default; PreferencesDb, ADR-004's table), with what both need around it:
//   - errors that name the file and the step and say whether trying again can help
//     (kStoreUnavailable: busy, locked, I/O, full, read-only, not a database...) or not (kInternal);
//   - exec, and the named statements of schema/sqlite-queries.sql, prepared once and cached;
//   - SqliteQuery: one run of a named statement (bind by parameter name, step, read columns);
//   - SqliteTransaction: BEGIN IMMEDIATE ... COMMIT, rolled back unless committed;
//   - applying schema/sqlite.sql (idempotent) in one transaction.
//
// Not thread-safe: each user keeps its own mutex around the connection and its statements.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "shared/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace quiver {

// The schema version this agent writes (schema/sqlite.sql's PRAGMA user_version).
inline constexpr int kSqliteSchemaVersion = 3;

class SqliteDb {
 public:
  // `label` begins every error message ("sqlite", "preferences"), before the file's path.
  explicit SqliteDb(std::string label) : label_(std::move(label)) {}
  ~SqliteDb();  // finalizes every cached statement and closes
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Opens (creating) `path` read-write, extended result codes on, with a busy timeout (clamped to
  // 0 .. 10^9 ms). A failure is kStoreUnavailable. Call once.
  Status open(std::string path, int64_t busy_timeout_ms);
  // In one BEGIN IMMEDIATE ... COMMIT: refuses a file of a newer schema version (kInvalidArgument,
  // nothing touched), runs the migrations from its version (schema/sqlite-migrate-v*.sql), then
  // schema/sqlite.sql, whose statements are idempotent.
  Status apply_schema();

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // The error for result code `rc` of step `what`, with SQLite's message.
  Error sql_error(int rc, std::string_view what) const;
  Status exec(const char* sql, std::string_view what);
  // The cached statement `name` of schema/sqlite-queries.sql, prepared on first use.
  Result<sqlite3_stmt*> prepared(std::string_view name);
  // Rows changed by the last statement.
  int changes() const;

 private:
  std::string label_;
  std::string path_;
  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;
};

// One run of a cached named statement: bind by parameter name, step, read columns. Resets the
// statement when done. A failure to prepare or bind is kept and reported by the first step.
class SqliteQuery {
 public:
  SqliteQuery(SqliteDb& db, std::string_view name);
  ~SqliteQuery();
  SqliteQuery(const SqliteQuery&) = delete;
  SqliteQuery& operator=(const SqliteQuery&) = delete;

  SqliteQuery& text(const char* param, std::string_view value);
  SqliteQuery& integer(const char* param, int64_t value);
  SqliteQuery& null(const char* param);
  SqliteQuery& text_or_null(const char* param, std::string_view value) {
    return value.empty() ? null(param) : text(param, value);
  }

  // True when a row is ready, false when the statement is done.
  Result<bool> step();
  // Runs to completion; the number of rows changed.
  Result<int> run();

  bool is_null(int col) const;
  int64_t integer_at(int col) const;
  std::string text_at(int col) const;

 private:
  int index(const char* param);
  void check(int rc);

  SqliteDb& db_;
  std::string name_;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back unless committed. IMMEDIATE takes the write lock up front
// (waiting up to the busy timeout), so the reads inside see what the writes will be applied to.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDb& db);
  ~SqliteTransaction();
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;

  const Status& begun() const { return begun_; }
  Status commit();

 private:
  SqliteDb& db_;
  Status begun_;
  bool active_ = false;
};

}  // namespace quiver
