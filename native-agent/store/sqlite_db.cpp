#include "native-agent/store/sqlite_db.h"

#include <algorithm>
#include <utility>

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/schema_assets.h"
#include "shared/sql_queries.h"

namespace quiver {

SqliteDb::~SqliteDb() {
  for (auto& [name, stmt] : statements_) sqlite3_finalize(stmt);
  for (auto& [sql, stmt] : exec_statements_) sqlite3_finalize(stmt);
  if (db_ != nullptr) sqlite3_close(db_);
}

namespace {

// The database, its WAL and its shared-memory index hold manifests and preferences: 0600. SQLite
// creates a database 0644 (less the umask) and gives the WAL and SHM the database's mode, so the
// file is created 0600 before SQLite opens it, and the modes of files an older agent left are
// tightened. Not for `:memory:` or URI names.
void make_private(const std::string& path) {
  if (path.empty() || path == ":memory:" || path.rfind("file:", 0) == 0) return;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    (void)::fchmod(fd, 0600);
    ::close(fd);
  }
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string companion = path + suffix;
    struct stat st {};
    if (::stat(companion.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      (void)::chmod(companion.c_str(), 0600);
    }
  }
}

}  // namespace

Status SqliteDb::open(std::string path, int64_t busy_timeout_ms) {
  // SQLite counts every allocation of every connection under one process-wide mutex unless told
  // not to; the agent reads no memory statistics, and the readers of concurrent discovery
  // requests queued on that mutex. Only possible before SQLite initialises (else a harmless
  // SQLITE_MISUSE).
  static const int memstatus_off = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  (void)memstatus_off;
  path_ = std::move(path);
  make_private(path_);
  int rc =
      sqlite3_open_v2(path_.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = sql_error(rc, "open");
    e.code = ErrorCode::kStoreUnavailable;
    return e;
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_,
                       static_cast<int>(std::clamp<int64_t>(busy_timeout_ms, 0, 1'000'000'000)));
  return Status::Ok();
}

Status SqliteDb::apply_schema() {
  auto failed = [&](int rc, const std::string& step, char* message) -> Error {
    std::string detail = message != nullptr ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    (void)exec("ROLLBACK", "rollback");
    Error e = sql_error(rc, step);
    e.message = label_ + " " + path_ + ": " + step + ": " + detail;
    return e;
  };
  if (Status st = exec("BEGIN IMMEDIATE", "beginning the schema transaction"); !st.ok()) return st;
  int version = 0;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &stmt, nullptr);
  if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    version = sqlite3_column_int(stmt, 0);
    rc = SQLITE_OK;
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_OK) return failed(rc, "reading the schema version", nullptr);
  if (version > kSqliteSchemaVersion) {
    (void)exec("ROLLBACK", "rollback");
    return Error(ErrorCode::kInvalidArgument,
                 label_ + " " + path_ + ": schema version " + std::to_string(version) +
                     " is newer than this agent's (" + std::to_string(kSqliteSchemaVersion) + ")");
  }
  // Version 0 is a new file: sqlite.sql creates the current shape. Each migration takes a file
  // of its version one step up; sqlite.sql then sets the current version.
  for (int from = std::max(version, 1); version != 0 && from < kSqliteSchemaVersion; ++from) {
    const std::string name = "sqlite-migrate-v" + std::to_string(from + 1) + ".sql";
    std::string_view sql = schema_asset(name);
    if (sql.empty()) {
      (void)exec("ROLLBACK", "rollback");
      return Error(ErrorCode::kInternal, "schema/" + name + " is not compiled in");
    }
    char* message = nullptr;
    rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) return failed(rc, "applying schema/" + name, message);
  }
  char* message = nullptr;
  rc = sqlite3_exec(db_, std::string(schema_asset("sqlite.sql")).c_str(), nullptr, nullptr,
                    &message);
  if (rc != SQLITE_OK) return failed(rc, "applying schema/sqlite.sql", message);
  return exec("COMMIT", "committing the schema");
}

Error SqliteDb::sql_error(int rc, std::string_view what) const {
  int primary = rc & 0xff;
  ErrorCode code = ErrorCode::kInternal;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_IOERR ||
      primary == SQLITE_FULL || primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY ||
      primary == SQLITE_PROTOCOL || primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT) {
    code = ErrorCode::kStoreUnavailable;
  }
  std::string detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  return Error(code, label_ + " " + path_ + ": " + std::string(what) + ": " + detail);
}

Status SqliteDb::exec(const char* sql, std::string_view what) {
  const std::string_view text(sql);
  if (text.find(';') != std::string_view::npos) {  // a script: parsed every time
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return sql_error(rc, what);
    return Status::Ok();
  }
  // One statement (BEGIN, COMMIT, a PRAGMA): prepared once. Every discovery read runs two, and
  // parsing them each time cost more than the rest of the transaction's bookkeeping.
  Result<int64_t> r = run_cached(sql, what, nullptr);
  if (!r.ok()) return r.error();
  return Status::Ok();
}

Result<int64_t> SqliteDb::query_integer(const char* sql, std::string_view what) {
  bool got = false;
  Result<int64_t> r = run_cached(sql, what, &got);
  if (r.ok() && !got) return sql_error(SQLITE_ERROR, std::string(what) + ": no row");
  return r;
}

Result<int64_t> SqliteDb::run_cached(const char* sql, std::string_view what, bool* got_row) {
  auto it = exec_statements_.find(std::string_view(sql));
  if (it == exec_statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
    if (rc != SQLITE_OK) return sql_error(rc, what);
    it = exec_statements_.emplace(std::string(sql), stmt).first;
  }
  int64_t first = 0;
  int rc = sqlite3_step(it->second);
  if (rc == SQLITE_ROW && got_row != nullptr) {
    *got_row = true;
    first = sqlite3_column_int64(it->second, 0);
  }
  while (rc == SQLITE_ROW) rc = sqlite3_step(it->second);
  Result<int64_t> out =
      rc == SQLITE_DONE ? Result<int64_t>(first) : Result<int64_t>(sql_error(rc, what));
  sqlite3_reset(it->second);
  return out;
}

Result<sqlite3_stmt*> SqliteDb::prepared(std::string_view name) {
  auto it = statements_.find(name);
  if (it != statements_.end()) return it->second;
  std::string_view sql = sql_query_in(queries_, name);
  if (sql.empty()) {
    return Error(ErrorCode::kInternal,
                 "schema/" + queries_ + " has no statement '" + std::string(name) + "'");
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return sql_error(rc, "preparing " + std::string(name));
  statements_.emplace(std::string(name), stmt);
  return stmt;
}

int SqliteDb::changes() const { return sqlite3_changes(db_); }

// ---- SqliteQuery -------------------------------------------------------------------------------

SqliteQuery::SqliteQuery(SqliteDb& db, std::string_view name) : db_(db), name_(name) {
  Result<sqlite3_stmt*> s = db.prepared(name);
  if (s.ok()) {
    stmt_ = *s;
  } else {
    status_ = s.error();
  }
}

SqliteQuery::~SqliteQuery() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

SqliteQuery& SqliteQuery::text(const char* param, std::string_view value) {
  if (int i = index(param); i > 0) {
    check(sqlite3_bind_text(stmt_, i, value.data(), static_cast<int>(value.size()),
                            SQLITE_TRANSIENT));
  }
  return *this;
}

SqliteQuery& SqliteQuery::integer(const char* param, int64_t value) {
  if (int i = index(param); i > 0) check(sqlite3_bind_int64(stmt_, i, value));
  return *this;
}

SqliteQuery& SqliteQuery::null(const char* param) {
  if (int i = index(param); i > 0) check(sqlite3_bind_null(stmt_, i));
  return *this;
}

Result<bool> SqliteQuery::step() {
  if (!status_.ok()) return status_.error();
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  status_ = db_.sql_error(rc, name_);
  return status_.error();
}

Result<int> SqliteQuery::run() {
  for (;;) {
    Result<bool> row = step();
    if (!row.ok()) return row.error();
    if (!*row) return db_.changes();
  }
}

bool SqliteQuery::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

int64_t SqliteQuery::integer_at(int col) const { return sqlite3_column_int64(stmt_, col); }

std::string SqliteQuery::text_at(int col) const {
  const unsigned char* t = sqlite3_column_text(stmt_, col);
  if (t == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(t),
                     static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
}

int SqliteQuery::index(const char* param) {
  if (!status_.ok()) return 0;
  int i = sqlite3_bind_parameter_index(stmt_, param);
  if (i == 0) {
    status_ = Error(ErrorCode::kInternal, "statement " + name_ + " has no parameter " + param);
  }
  return i;
}

void SqliteQuery::check(int rc) {
  if (rc != SQLITE_OK && status_.ok()) status_ = db_.sql_error(rc, "binding " + name_);
}

// ---- SqliteTransaction -------------------------------------------------------------------------

SqliteTransaction::SqliteTransaction(SqliteDb& db) : db_(db) {
  begun_ = db.exec("BEGIN IMMEDIATE", "begin transaction");
  active_ = begun_.ok();
}

SqliteTransaction::~SqliteTransaction() {
  if (active_) (void)db_.exec("ROLLBACK", "rollback");
}

Status SqliteTransaction::commit() {
  Status s = db_.exec("COMMIT", "commit");
  if (s.ok()) active_ = false;
  return s;
}

// ---- SqliteReaders ---------------------------------------------------------------------------

SqliteReaders::Lease::~Lease() {
  if (pool_ != nullptr && db_ != nullptr) pool_->give_back(std::move(db_));
}

void SqliteReaders::configure(std::string path, int64_t busy_timeout_ms, int max) {
  path_ = std::move(path);
  busy_timeout_ms_ = busy_timeout_ms;
  max_ = std::max(0, max);
}

Result<SqliteReaders::Lease> SqliteReaders::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return !idle_.empty() || lent_or_opening_ + static_cast<int>(idle_.size()) < max_;
  });
  return lend(lock);
}

std::optional<Result<SqliteReaders::Lease>> SqliteReaders::try_acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  if (idle_.empty() && lent_or_opening_ + static_cast<int>(idle_.size()) >= max_) {
    return std::nullopt;
  }
  return lend(lock);
}

// With `lock` held and a reader idle or room for one: an idle reader, else a new connection,
// opened outside the lock (opening reads the file's header).
Result<SqliteReaders::Lease> SqliteReaders::lend(std::unique_lock<std::mutex>& lock) {
  ++lent_or_opening_;
  if (!idle_.empty()) {
    std::unique_ptr<SqliteDb> db = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(db));
  }
  lock.unlock();
  auto db = std::make_unique<SqliteDb>("sqlite");
  Status st = db->open(path_, busy_timeout_ms_);
  if (st.ok()) st = db->exec("PRAGMA query_only=ON", "read-only reader");
  if (!st.ok()) {
    std::lock_guard<std::mutex> relock(mu_);
    --lent_or_opening_;
    cv_.notify_one();
    return st.error();
  }
  return Lease(this, std::move(db));
}

void SqliteReaders::give_back(std::unique_ptr<SqliteDb> db) {
  std::lock_guard<std::mutex> lock(mu_);
  --lent_or_opening_;
  idle_.push_back(std::move(db));
  cv_.notify_one();
}

}  // namespace quiver
