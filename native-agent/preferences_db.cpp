#include "native-agent/preferences_db.h"

#include <algorithm>
#include <map>
#include <utility>

#include <sqlite3.h>

#include "shared/schema_assets.h"
#include "shared/sql_queries.h"

namespace quiver {

namespace preferences_db_internal {

// The state; PreferencesDb::Impl is this, named so that the helpers below can take it.
struct Db {
  PreferencesDbOptions options;
  sqlite3* db = nullptr;
  mutable std::mutex mu;  // the connection and the statements
  std::map<std::string, sqlite3_stmt*, std::less<>> statements;

  mutable std::mutex publish_mu;  // the two fields below
  std::map<std::string, DisabledOverlay, std::less<>> published;
  std::set<std::string> pending;

  ~Db() {
    for (auto& [name, stmt] : statements) sqlite3_finalize(stmt);
    if (db != nullptr) sqlite3_close(db);
  }

  Error sql_error(int rc, std::string_view what) const {
    int primary = rc & 0xff;
    ErrorCode code =
        (primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_IOERR ||
         primary == SQLITE_FULL || primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY)
            ? ErrorCode::kUnavailable
            : ErrorCode::kInternal;
    std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return Error(code, "preferences " + options.path + ": " + std::string(what) + ": " + detail);
  }

  Status exec(const char* sql, std::string_view what) {
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return sql_error(rc, what);
    return Status::Ok();
  }

  Result<sqlite3_stmt*> prepared(std::string_view name) {
    auto it = statements.find(name);
    if (it != statements.end()) return it->second;
    std::string_view sql = sql_query(name);
    if (sql.empty()) {
      return Error(ErrorCode::kInternal,
                   "schema/sqlite-queries.sql has no statement '" + std::string(name) + "'");
    }
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) return sql_error(rc, "preparing " + std::string(name));
    statements.emplace(std::string(name), stmt);
    return stmt;
  }
};

}  // namespace preferences_db_internal

struct PreferencesDb::Impl : preferences_db_internal::Db {};
using preferences_db_internal::Db;

namespace {

// One run of a named statement: bind by parameter name, step, read. Resets when done.
class Query {
 public:
  Query(Db& impl, std::string_view name) : impl_(impl), name_(name) {
    Result<sqlite3_stmt*> s = impl.prepared(name);
    if (s.ok()) {
      stmt_ = *s;
    } else {
      error_ = s.error();
    }
  }
  ~Query() {
    if (stmt_ != nullptr) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  Query& text(const char* param, std::string_view value) {
    if (int i = index(param); i > 0) {
      check(sqlite3_bind_text(stmt_, i, value.data(), static_cast<int>(value.size()),
                              SQLITE_TRANSIENT));
    }
    return *this;
  }
  Query& integer(const char* param, int64_t value) {
    if (int i = index(param); i > 0) check(sqlite3_bind_int64(stmt_, i, value));
    return *this;
  }
  // true: a row is ready; false: done.
  Result<bool> step() {
    if (error_) return *error_;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return impl_.sql_error(rc, name_);
  }
  std::string text_at(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return t != nullptr ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(n))
                        : std::string();
  }
  int64_t integer_at(int col) const { return sqlite3_column_int64(stmt_, col); }
  int changes() const { return sqlite3_changes(impl_.db); }

 private:
  int index(const char* param) {
    if (stmt_ == nullptr) return 0;
    int i = sqlite3_bind_parameter_index(stmt_, param);
    if (i == 0 && !error_) {
      error_ = Error(ErrorCode::kInternal, name_ + ": no parameter " + param);
    }
    return i;
  }
  void check(int rc) {
    if (rc != SQLITE_OK && !error_) error_ = impl_.sql_error(rc, name_ + ": bind");
  }

  Db& impl_;
  std::string name_;
  sqlite3_stmt* stmt_ = nullptr;
  std::optional<Error> error_;
};

Result<std::vector<PreferenceRow>> select_rows(Db& impl, std::string_view cid) {
  Query q(impl, "preferences_select");
  q.text(":resource_id", cid);
  std::vector<PreferenceRow> rows;
  for (;;) {
    Result<bool> more = q.step();
    if (!more.ok()) return more.error();
    if (!*more) break;
    PreferenceRow row;
    row.resource_id = q.text_at(0);
    std::optional<CapabilityType> type = parse_capability_type(q.text_at(1));
    if (!type) continue;  // the CHECK rules this out
    row.capability_type = *type;
    row.capability_key = q.text_at(2);
    row.enabled = q.integer_at(3) != 0;
    row.first_seen_at = q.integer_at(4);
    row.last_seen_at = q.integer_at(5);
    rows.push_back(std::move(row));
  }
  return rows;
}

// BEGIN IMMEDIATE … COMMIT around `body`; ROLLBACK when it fails.
template <typename F>
Status in_transaction(Db& impl, F&& body) {
  if (Status st = impl.exec("BEGIN IMMEDIATE", "begin"); !st.ok()) return st;
  Status st = body();
  if (!st.ok()) {
    (void)impl.exec("ROLLBACK", "rollback");
    return st;
  }
  if (Status c = impl.exec("COMMIT", "commit"); !c.ok()) {
    (void)impl.exec("ROLLBACK", "rollback");
    return c;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<PreferencesDb>> PreferencesDb::open(PreferencesDbOptions options) {
  if (options.path.empty()) {
    return Error(ErrorCode::kInvalidArgument, "preferences: no database file given");
  }
  if (!options.now_ms) return Error(ErrorCode::kInvalidArgument, "preferences: no clock");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl& s = *impl;
  int rc =
      sqlite3_open_v2(s.options.path.c_str(), &s.db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = s.sql_error(rc, "open");
    e.code = ErrorCode::kUnavailable;
    return e;
  }
  sqlite3_extended_result_codes(s.db, 1);
  sqlite3_busy_timeout(
      s.db, static_cast<int>(std::clamp<int64_t>(s.options.busy_timeout_ms, 0, 1 << 30)));
  // journal_mode answers a row; sqlite3_exec ignores it. WAL persists in the file, so whichever
  // connection opens it first (this or the SqliteStore) sets it for both.
  if (Status st = s.exec("PRAGMA journal_mode=WAL", "setting journal_mode=WAL"); !st.ok()) {
    return st.error();
  }
  if (Status st = s.exec("PRAGMA synchronous=NORMAL", "pragmas"); !st.ok()) return st.error();
  std::string ddl = "BEGIN IMMEDIATE;\n" + std::string(schema_asset("sqlite.sql")) + "\nCOMMIT;";
  char* message = nullptr;
  rc = sqlite3_exec(s.db, ddl.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    std::string detail = message != nullptr ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    (void)s.exec("ROLLBACK", "rollback");
    Error e = s.sql_error(rc, "applying schema/sqlite.sql");
    e.message = "preferences " + s.options.path + ": applying schema/sqlite.sql: " + detail;
    return e;
  }
  return std::unique_ptr<PreferencesDb>(new PreferencesDb(std::move(impl)));
}

PreferencesDb::PreferencesDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PreferencesDb::~PreferencesDb() = default;

Result<std::vector<PreferenceRow>> PreferencesDb::rows(std::string_view connection_id) {
  if (Status st = validate_connection_id(connection_id); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return select_rows(*impl_, connection_id);
}

Result<DisabledOverlay> PreferencesDb::disabled(std::string_view connection_id) {
  Result<std::vector<PreferenceRow>> r = rows(connection_id);
  if (!r.ok()) return r.error();
  return disabled_overlay(connection_id, *r);
}

Result<ReconcileReport> PreferencesDb::reconcile_listing(std::string_view connection_id,
                                                         const Listing& listing,
                                                         const PreferencePolicy& policy) {
  if (Status st = validate_connection_id(connection_id); !st.ok()) return st.error();
  LiveCapabilities live = live_capabilities(std::string(connection_id), listing);
  ReconcileReport report;
  DisabledOverlay overlay;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    int64_t now = impl_->options.now_ms();
    Status st = in_transaction(*impl_, [&]() -> Status {
      Result<std::vector<PreferenceRow>> stored = select_rows(*impl_, connection_id);
      if (!stored.ok()) return stored.error();
      Reconciliation r = reconcile(*stored, live, policy, now);
      for (const PreferenceRow& row : r.rows_to_insert) {
        Query q(*impl_, "preferences_insert_seen");
        q.text(":resource_id", row.resource_id)
            .text(":capability_type", capability_type_name(row.capability_type))
            .text(":capability_key", row.capability_key)
            .integer(":enabled", row.enabled ? 1 : 0)
            .integer(":seen_at", row.last_seen_at);
        if (Result<bool> done = q.step(); !done.ok()) return done.error();
      }
      for (const PreferenceRow& row : r.rows_to_update) {
        Query q(*impl_, "preferences_touch");
        q.text(":resource_id", row.resource_id)
            .text(":capability_type", capability_type_name(row.capability_type))
            .text(":capability_key", row.capability_key)
            .integer(":seen_at", row.last_seen_at);
        if (Result<bool> done = q.step(); !done.ok()) return done.error();
      }
      report.inserted = r.rows_to_insert.size();
      report.touched = r.rows_to_update.size();
      return Status::Ok();
    });
    if (!st.ok()) return st.error();
  }
  Status published = publish(connection_id, /*force=*/false);
  report.published = published.ok() && !pending().count(std::string(connection_id));
  return report;
}

Status PreferencesDb::set_enabled(std::string_view connection_id, CapabilityType type,
                                  std::string_view key, bool enabled) {
  if (Status st = validate_connection_id(connection_id); !st.ok()) return st;
  if (key.empty() || key.size() > kMaxCapabilityKeyBytes) {
    return Error(ErrorCode::kInvalidArgument, "capability key must be 1 to 2048 bytes");
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Query q(*impl_, "preferences_set_enabled");
    q.text(":resource_id", connection_id)
        .text(":capability_type", capability_type_name(type))
        .text(":capability_key", key)
        .integer(":enabled", enabled ? 1 : 0);
    if (Result<bool> done = q.step(); !done.ok()) return done.error();
    if (q.changes() == 0) {
      return Error(ErrorCode::kNotFound, std::string(capability_type_name(type)) + " '" +
                                             std::string(key) + "' was never seen on " +
                                             std::string(connection_id));
    }
  }
  return publish(connection_id, /*force=*/true);
}

Status PreferencesDb::publish(std::string_view connection_id, bool force) {
  ManifestStore* store = impl_->options.store;
  if (store == nullptr) return Status::Ok();
  Result<DisabledOverlay> overlay = disabled(connection_id);
  if (!overlay.ok()) return overlay.error();
  std::string cid(connection_id);
  {
    std::lock_guard<std::mutex> lock(impl_->publish_mu);
    auto it = impl_->published.find(cid);
    if (!force && !impl_->pending.count(cid) && it != impl_->published.end() &&
        it->second == *overlay) {
      return Status::Ok();
    }
  }
  Result<int64_t> epoch = store->publish_disabled(cid, *overlay);
  std::lock_guard<std::mutex> lock(impl_->publish_mu);
  if (!epoch.ok()) {
    impl_->pending.insert(cid);
    impl_->published.erase(cid);
    Error e = epoch.error();
    e.message = "preference saved, overlay not yet published: " + e.message;
    return e;
  }
  impl_->pending.erase(cid);
  impl_->published[cid] = std::move(*overlay);
  return Status::Ok();
}

Status PreferencesDb::publish_all(const std::vector<std::string>& connection_ids) {
  Status first = Status::Ok();
  for (const std::string& cid : connection_ids) {
    Status st = publish(cid, /*force=*/true);
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

Status PreferencesDb::publish_pending() {
  std::set<std::string> todo = pending();
  Status first = Status::Ok();
  for (const std::string& cid : todo) {
    Status st = publish(cid, /*force=*/true);
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

std::set<std::string> PreferencesDb::pending() const {
  std::lock_guard<std::mutex> lock(impl_->publish_mu);
  return impl_->pending;
}

}  // namespace quiver
