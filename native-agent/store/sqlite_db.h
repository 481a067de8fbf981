// SqliteDb: one SQLite connection as the agent's two SQLite users hold it (SqliteStore, the cache
// of the embedded default; PreferencesDb, ADR-004's table), with what both need around it:
//   - errors that name the file and the step and say whether trying again can help
//     (kStoreUnavailable: busy, locked, I/O, full, read-only, not a database...) or not
//     (kInternal);
//   - exec, and the named statements of schema/sqlite-queries.sql, prepared once and cached;
//   - SqliteQuery: one run of a named statement (bind by parameter name, step, read columns);
//   - SqliteTransaction: BEGIN IMMEDIATE ... COMMIT, rolled back unless committed;
//   - applying schema/sqlite.sql (idempotent) in one transaction.
//
// Not thread-safe: each user keeps its own mutex around the connection and its statements.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace quiver {

// The schema version this agent writes (schema/sqlite.sql's PRAGMA user_version).
inline constexpr int kSqliteSchemaVersion = 6;

class SqliteDb {
 public:
  // `label` begins every error message ("sqlite", "preferences"), before the file's path.
  // `queries`: the schema/ file of named statements `prepared` takes them from.
  explicit SqliteDb(std::string label, std::string queries = "sqlite-queries.sql")
      : label_(std::move(label)), queries_(std::move(queries)) {}
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
  // Runs `sql` to completion, rows discarded. One statement is prepared once and kept; a script
  // of several (with ';') is parsed on every call.
  Status exec(const char* sql, std::string_view what);
  // The first column of the first row of one statement (a PRAGMA), prepared once like exec's.
  Result<int64_t> query_integer(const char* sql, std::string_view what);
  // The cached statement `name` of the queries file (schema/sqlite-queries.sql unless the
  // constructor named another), prepared on first use.
  Result<sqlite3_stmt*> prepared(std::string_view name);
  // Rows changed by the last statement.
  int changes() const;

 private:
  Result<int64_t> run_cached(const char* sql, std::string_view what, bool* got_row);

  std::string label_;
  std::string queries_;
  std::string path_;
  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;
  std::map<std::string, sqlite3_stmt*, std::less<>> exec_statements_;  // by SQL text
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

// Read-only connections to one database file, opened on first use and kept, at most `max` of them.
// In WAL mode a reader neither waits for the writer nor for other readers, so reads that run on
// these (the discovery snapshot, on every request) do not queue behind one mutex with each other
// and with every write. `acquire` lends a connection (waiting while all `max` are lent); the
// lease gives it back. A connection whose open failed is not kept: the next acquire tries again.
class SqliteReaders {
 public:
  class Lease {
   public:
    Lease(SqliteReaders* pool, std::unique_ptr<SqliteDb> db) : pool_(pool), db_(std::move(db)) {}
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    SqliteDb& db() { return *db_; }

   private:
    SqliteReaders* pool_;
    std::unique_ptr<SqliteDb> db_;
  };

  SqliteReaders() = default;
  SqliteReaders(const SqliteReaders&) = delete;
  SqliteReaders& operator=(const SqliteReaders&) = delete;

  // Call once, before any acquire. `max` 0 leaves the pool disabled.
  void configure(std::string path, int64_t busy_timeout_ms, int max);
  bool enabled() const { return max_ > 0; }
  Result<Lease> acquire();
  // An idle reader, or a new one when the pool has room; nullopt when every reader is lent (where
  // acquire() would wait).
  std::optional<Result<Lease>> try_acquire();

 private:
  Result<Lease> lend(std::unique_lock<std::mutex>& lock);
  void give_back(std::unique_ptr<SqliteDb> db);

  std::string path_;
  int64_t busy_timeout_ms_ = 0;
  int max_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<SqliteDb>> idle_;
  int lent_or_opening_ = 0;  // connections out of `idle_`: lent, or being opened
};

}  // namespace quiver
