#include "native-agent/store/sqlite_store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <sqlite3.h>

#include "native-agent/store/preferences_db.h"
#include "native-agent/store/sqlite_db.h"
#include "shared/discovery.h"
#include "shared/discovery_redis.h"
#include "shared/numbers.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

bool parse_row_id(std::string_view text, int64_t* out) {
  std::optional<int64_t> v = parse_decimal_in(text, 0, std::numeric_limits<int64_t>::max());
  if (!v || text[0] == '-') return false;
  *out = *v;
  return true;
}

}  // namespace

namespace sqlite_store_internal {

// The store's state; SqliteStore::Impl is this, named here so the helpers below can take it.
struct Db : SqliteDb {
  Db() : SqliteDb("sqlite") {}

  SqliteStoreOptions options;
  std::mutex mu;
  // The revalidation queue's readers skip the write transaction of a delivery while nothing can
  // have been queued since the last one found the queue drained: no enqueue through this store
  // (`queue_dirty`) and no commit by another connection to the file (`PRAGMA data_version`).
  // Enqueues wake blocked readers at once (`queue_cv`); other processes' within a poll interval.
  bool queue_dirty = true;
  int64_t seen_data_version = -1;
  std::condition_variable queue_cv;
  SqliteReaders readers;
  // sync_connections deleted what names an unconfigured connection once in this process: later
  // syncs do it only when they remove a connection (each delete reads a whole table).
  bool swept = false;
};

}  // namespace sqlite_store_internal

struct SqliteStore::Impl : sqlite_store_internal::Db {};

using sqlite_store_internal::Db;

namespace {

using Query = SqliteQuery;
using Transaction = SqliteTransaction;

// Columns of manifest_select and manifest_list_meta: 0 cid, 1 principal, 2 has data, 3 etag,
// 4 config_hash, 5 fence, 6 fetched_at, 7 fresh_until, 8 expires_at, 9 cache_scope, 10 truncated,
// 11 error_code, 12 error_message, 13 error_at, 14 attempt_at, 15 invalidated_at, 16 the manifest
// (NULL when not asked for). NULL: the store holds no such field.

// The row but its body as the core's ManifestEntry, the model the Redis readers decode hashes
// into, so the core classifies both stores' data with one code path.
ManifestEntry entry_from_row(const Query& q) {
  ManifestEntry e;
  auto time = [&](int col) {
    return q.is_null(col) ? std::optional<int64_t>() : std::optional<int64_t>(q.integer_at(col));
  };
  if (!q.is_null(3)) e.etag = q.text_at(3);
  e.config_hash = q.text_at(4);
  e.fetched_at_ms = time(6);
  e.fresh_until_ms = time(7);
  e.cache_scope = cache_scope_from_string(q.text_at(9));
  e.truncated = q.integer_at(10) == 1;
  e.error_code = q.text_at(11);
  e.error_message = q.text_at(12);
  e.error_at_ms = time(13);
  e.attempt_at_ms = time(14);
  e.invalidated_at_ms = time(15);
  return e;
}

// The row as metadata (the body, when asked for, stays in column 16).
Result<ManifestMeta> meta_from_row(const Query& q) {
  ManifestMeta m;
  static_cast<ManifestEntry&>(m) = entry_from_row(q);
  m.connection_id = q.text_at(0);
  const std::string record = "manifest row " + m.connection_id + " " + q.text_at(1);
  Result<Principal> p = Principal::parse(q.text_at(1));
  if (!p.ok()) return Error(ErrorCode::kInvalidReply, record + ": bad principal");
  m.principal = *p;
  m.has_data = q.integer_at(2) != 0;
  m.fence = q.integer_at(5);
  m.expires_at_ms = q.integer_at(8);
  if (Status s = check_manifest_meta(m, record); !s.ok()) return s.error();
  return m;
}

ConnectionRecord record_from_row(const Query& q) {
  ConnectionRecord r;
  r.id = q.text_at(0);
  r.config_hash = q.text_at(1);
  r.credential_mode = credential_mode_from_string(q.text_at(2));
  r.name = q.text_at(3);
  r.transport = q.text_at(4);
  r.updated_at_ms = q.integer_at(5);
  return r;
}

Query& bind_key(Query& q, std::string_view cid, const Principal& principal) {
  return q.text(":connection_id", cid).text(":principal", principal.str());
}

}  // namespace

Result<std::unique_ptr<SqliteStore>> SqliteStore::open(SqliteStoreOptions options) {
  if (options.path.empty()) return invalid("sqlite store: no database file given");
  if (!options.now_ms) return invalid("sqlite store: no clock");
  if (options.busy_timeout_ms < 0 || options.poll_interval_ms <= 0) {
    return invalid("sqlite store: busy_timeout must be >= 0 and poll_interval positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl& s = *impl;
  if (s.options.max_readers < 0) return invalid("sqlite store: max_readers must be >= 0");
  if (Status st = s.open(s.options.path, s.options.busy_timeout_ms); !st.ok()) return st.error();
  {
    sqlite3_stmt* stmt = nullptr;
    std::string mode;
    int rc = sqlite3_prepare_v2(s.handle(), "PRAGMA journal_mode=WAL", -1, &stmt, nullptr);
    if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(stmt, 0);
      mode = t != nullptr ? reinterpret_cast<const char*>(t) : "";
      rc = SQLITE_OK;
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_OK) return s.sql_error(rc, "setting journal_mode=WAL");
    if (mode != "wal" && s.options.path != ":memory:") {
      return Error(
          ErrorCode::kStoreUnavailable,
          "sqlite " + s.options.path + ": the file cannot be put in WAL mode (" + mode + ")");
    }
  }
  if (Status st = s.exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", "pragmas");
      !st.ok()) {
    return st.error();
  }
  if (Status st = s.apply_schema(); !st.ok()) return st.error();
  // Only a file can be opened again: another connection to ":memory:" would be another database.
  if (s.options.path != ":memory:" && s.options.path.rfind("file:", 0) != 0) {
    s.readers.configure(s.options.path, s.options.busy_timeout_ms, s.options.max_readers);
  }
  return std::unique_ptr<SqliteStore>(new SqliteStore(std::move(impl)));
}

SqliteStore::SqliteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteStore::~SqliteStore() = default;

std::string SqliteStore::describe() const { return "sqlite:" + impl_->options.path; }

Status SqliteStore::health() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "epoch_select");
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return Error(ErrorCode::kInternal, "sqlite " + impl_->options.path + ": no epoch row");
  return Status::Ok();
}

// The embedded store is the agent's own file: no other process empties it under a running agent,
// so its namespace is always initialised, and there is no other clock to compare with.
Result<NamespaceRecord> SqliteStore::read_namespace() {
  return NamespaceRecord{NamespaceState::kReady, "ready"};
}
Status SqliteStore::begin_namespace_restore(int64_t) { return Status::Ok(); }
Result<bool> SqliteStore::mark_namespace_ready(int64_t) { return true; }
Result<std::optional<int64_t>> SqliteStore::store_time_ms() { return std::optional<int64_t>(); }
// The SQLite queue has no consumer group: a claimed row names no consumer that could go stale.
Result<std::vector<std::string>> SqliteStore::remove_idle_consumers(std::string_view, int64_t) {
  return std::vector<std::string>{};
}

// ---- leases ------------------------------------------------------------------------------------

namespace {

struct Holder {
  std::string token;
  int64_t fence = 0;
  int64_t expires_at = 0;
};

Result<std::optional<Holder>> live_holder(SqliteDb& impl, std::string_view cid,
                                          const Principal& principal, int64_t now) {
  Query q(impl, "lease_select_live");
  bind_key(q, cid, principal).integer(":now", now);
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<Holder>();
  return std::optional<Holder>(Holder{q.text_at(0), q.integer_at(1), q.integer_at(2)});
}

Result<std::optional<int64_t>> fence_counter(Db& impl, std::string_view cid,
                                             const Principal& principal) {
  Query q(impl, "fence_select");
  bind_key(q, cid, principal);
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<int64_t>();
  return std::optional<int64_t>(q.integer_at(0));
}

Status purge_expired_manifest(Db& impl, std::string_view cid, const Principal& principal,
                              int64_t now) {
  Query q(impl, "manifest_purge_one");
  bind_key(q, cid, principal).integer(":now", now);
  Result<int> r = q.run();
  return r.ok() ? Status::Ok() : Status(r.error());
}

// The checks of manifest_commit.lua / manifest_fail.lua, in their order. kOk: the write may go.
Result<FencedWriteResult> fenced_check(Db& impl, std::string_view cid, const Principal& principal,
                                       const Lease& lease, const std::string& config_hash,
                                       int64_t now) {
  FencedWriteResult out;
  Result<std::optional<Holder>> holder = live_holder(impl, cid, principal, now);
  if (!holder.ok()) return holder.error();
  Result<std::optional<int64_t>> counter = fence_counter(impl, cid, principal);
  if (!counter.ok()) return counter.error();
  bool holds =
      holder->has_value() && (*holder)->token == lease.token && (*holder)->fence == lease.fence;
  if (!holds) {
    if (counter->has_value() && **counter > lease.fence) {
      out.outcome = LeaseOutcome::kStaleFence;
      out.current_fence = **counter;
    } else {
      out.outcome = LeaseOutcome::kLeaseLost;
    }
    return out;
  }
  if (!counter->has_value() || **counter != lease.fence) {
    out.outcome = LeaseOutcome::kStaleFence;
    out.current_fence = counter->value_or(0);
    return out;
  }
  Query conn(impl, "connection_select");
  conn.text(":id", cid);
  Result<bool> row = conn.step();
  if (!row.ok()) return row.error();
  if (!*row) {
    out.outcome = LeaseOutcome::kConnectionRemoved;
  } else if (conn.text_at(1) != config_hash) {
    out.outcome = LeaseOutcome::kConfigChanged;
  } else {
    out.outcome = LeaseOutcome::kOk;
  }
  return out;
}

Result<int64_t> bump_epoch_locked(Db& impl) {
  Query q(impl, "epoch_bump");
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return Error(ErrorCode::kInternal, "sqlite: the epoch row is missing");
  int64_t epoch = q.integer_at(0);
  Result<bool> done = q.step();
  if (!done.ok()) return done.error();
  return epoch;
}

Result<DisabledOverlay> published_overlay(SqliteDb& s, std::string_view cid,
                                          const Principal& principal) {
  Query q(s, "published_disabled_select");
  q.text(":connection_id", cid).text(":principal", principal.str());
  DisabledOverlay out;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    out.insert(q.text_at(0));
  }
  return out;
}

Result<int64_t> read_epoch_locked(Db& impl) {
  Query q(impl, "epoch_select");
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  return *row ? q.integer_at(0) : int64_t{0};
}

Status drop_lease(Db& impl, std::string_view cid, const Principal& principal) {
  Query q(impl, "lease_delete");
  bind_key(q, cid, principal);
  Result<int> r = q.run();
  return r.ok() ? Status::Ok() : Status(r.error());
}

// A fenced write (manifest_commit.lua / manifest_fail.lua) in one transaction: fenced_check
// under `config_hash` (a refusal writes nothing), then `write(check)`, whose result is the
// answer, then the lease released when `options` say so.
template <typename Write>
Result<FencedWriteResult> fenced_write(Db& s, std::string_view cid, const Principal& principal,
                                       const Lease& lease, const std::string& config_hash,
                                       const FencedWriteOptions& options, Write write) {
  std::lock_guard<std::mutex> lock(s.mu);
  int64_t now = s.options.now_ms();
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  if (Status st = purge_expired_manifest(s, cid, principal, now); !st.ok()) return st.error();
  Result<FencedWriteResult> check = fenced_check(s, cid, principal, lease, config_hash, now);
  if (!check.ok() || !check->ok()) return check;
  Result<FencedWriteResult> out = write(*check);
  if (!out.ok()) return out;
  if (options.release_lease) {
    if (Status st = drop_lease(s, cid, principal); !st.ok()) return st.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return out;
}

}  // namespace

Result<AcquireResult> SqliteStore::acquire_lease(std::string_view cid, const Principal& principal,
                                                 std::string_view token, int64_t lease_ms) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) return valid.error();
  if (Status valid = validate_acquire(token, lease_ms); !valid.ok()) return valid.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  int64_t now = s.options.now_ms();
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  if (Status st = purge_expired_manifest(s, cid, principal, now); !st.ok()) return st.error();
  Result<std::optional<Holder>> holder = live_holder(s, cid, principal, now);
  if (!holder.ok()) return holder.error();
  AcquireResult out;
  if (holder->has_value()) {
    out.holder_remaining_ms = (*holder)->expires_at - now;
    out.holder_fence = (*holder)->fence;
    return out;  // nothing written: the rollback ends the transaction
  }
  Result<std::optional<int64_t>> counter = fence_counter(s, cid, principal);
  if (!counter.ok()) return counter.error();
  int64_t fence = counter->value_or(0) + 1;
  {
    // Past the fence of the last committed manifest, should the counter have been lost.
    Query committed(s, "manifest_select_fence");
    bind_key(committed, cid, principal);
    Result<bool> row = committed.step();
    if (!row.ok()) return row.error();
    if (*row && !committed.is_null(0) && committed.integer_at(0) >= fence) {
      fence = committed.integer_at(0) + 1;
    }
  }
  {
    Query set(s, "fence_set");
    bind_key(set, cid, principal).integer(":fence", fence);
    if (Result<int> r = set.run(); !r.ok()) return r.error();
  }
  {
    Query grant(s, "lease_upsert");
    bind_key(grant, cid, principal)
        .text(":token", token)
        .integer(":fence", fence)
        .integer(":expires_at", now + lease_ms);
    if (Result<int> r = grant.run(); !r.ok()) return r.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  out.acquired = true;
  out.lease = Lease{fence, std::string(token)};
  return out;
}

Result<LeaseOutcome> SqliteStore::renew_lease(std::string_view cid, const Principal& principal,
                                              const Lease& lease, int64_t lease_ms) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) return valid.error();
  if (Status valid = validate_renew(lease, lease_ms); !valid.ok()) return valid.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  int64_t now = impl_->options.now_ms();
  Query q(*impl_, "lease_extend");
  bind_key(q, cid, principal)
      .text(":token", lease.token)
      .integer(":fence", lease.fence)
      .integer(":now", now)
      .integer(":expires_at", now + lease_ms);
  Result<int> changed = q.run();
  if (!changed.ok()) return changed.error();
  return *changed == 1 ? LeaseOutcome::kOk : LeaseOutcome::kLeaseLost;
}

Result<LeaseOutcome> SqliteStore::release_lease(std::string_view cid, const Principal& principal,
                                                const Lease& lease) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) return valid.error();
  if (Status valid = validate_release(lease); !valid.ok()) return valid.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "lease_delete_held");
  bind_key(q, cid, principal)
      .text(":token", lease.token)
      .integer(":fence", lease.fence)
      .integer(":now", impl_->options.now_ms());
  Result<int> changed = q.run();
  if (!changed.ok()) return changed.error();
  return *changed == 1 ? LeaseOutcome::kOk : LeaseOutcome::kLeaseLost;
}

// ---- fenced writes -----------------------------------------------------------------------------

Result<FencedWriteResult> SqliteStore::commit_manifest(std::string_view cid,
                                                       const Principal& principal,
                                                       const Lease& lease,
                                                       const ManifestWrite& write,
                                                       const FencedWriteOptions& options) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) return valid.error();
  if (Status valid = validate_manifest_write(lease, write); !valid.ok()) return valid.error();
  if (Status valid = validate_due_at(options.due_at_ms); !valid.ok()) return valid.error();
  Db& s = *impl_;
  auto write_data = [&](const FencedWriteResult&) -> Result<FencedWriteResult> {
    Query q(s, "manifest_commit");
    bind_key(q, cid, principal)
        .text(":manifest", write.manifest)
        .text(":etag", write.etag)
        .text(":config_hash", write.config_hash)
        .integer(":fence", lease.fence)
        .integer(":fetched_at", write.fetched_at_ms)
        .integer(":fresh_until", write.fresh_until_ms)
        .integer(":expires_at", write.expires_at_ms)
        .text_or_null(":cache_scope", write.cache_scope)
        .integer(":truncated", write.truncated ? 1 : 0)
        .integer(":due_at", options.due_at_ms);
    if (Result<int> r = q.run(); !r.ok()) return r.error();
    Result<int64_t> epoch = bump_epoch_locked(s);
    if (!epoch.ok()) return epoch.error();
    FencedWriteResult out;
    out.outcome = LeaseOutcome::kOk;
    out.epoch = *epoch;
    return out;
  };
  return fenced_write(s, cid, principal, lease, write.config_hash, options, write_data);
}

Result<FencedWriteResult> SqliteStore::record_failure(std::string_view cid,
                                                      const Principal& principal,
                                                      const Lease& lease,
                                                      const RefreshFailure& failure,
                                                      const FencedWriteOptions& options) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) return valid.error();
  if (Status valid = validate_refresh_failure(lease, failure); !valid.ok()) return valid.error();
  if (Status valid = validate_due_at(options.due_at_ms); !valid.ok()) return valid.error();
  Db& s = *impl_;
  auto write_error = [&](const FencedWriteResult& check) -> Result<FencedWriteResult> {
    Query q(s, "manifest_record_failure");
    bind_key(q, cid, principal)
        .text(":error_code", failure.error_code)
        .text(":error_message", cut_utf8(failure.error_message, kMaxErrorMessageBytes))
        .integer(":error_at", failure.error_at_ms)
        .integer(":attempt_at", failure.attempt_at_ms)
        .integer(":due_at", options.due_at_ms);
    if (Result<int> r = q.run(); !r.ok()) return r.error();
    return check;
  };
  return fenced_write(s, cid, principal, lease, failure.config_hash, options, write_error);
}

// ---- manifest reads ----------------------------------------------------------------------------

namespace {

// Rows whose time ran out (manifests past a legacy retention, expired gates), in one transaction;
// the caller holds the store's mutex.
Status purge_expired_rows(Db& s) {
  const int64_t now = s.options.now_ms();
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  for (const char* purge : {"manifests_purge_retained", "revalidation_gates_purge"}) {
    Query q(s, purge);
    if (Result<int> r = q.integer(":now", now).run(); !r.ok()) return r.error();
  }
  return tx.commit();
}

// One manifest row (manifest_select), its body only when `with_body`.
Result<std::optional<StoredManifest>> select_manifest(Db& s, std::string_view cid,
                                                      const Principal& principal, bool with_body) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) return valid.error();
  std::lock_guard<std::mutex> lock(s.mu);
  Query q(s, "manifest_select");
  bind_key(q, cid, principal)
      .integer(":now", s.options.now_ms())
      .integer(":with_body", with_body ? 1 : 0);
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<StoredManifest>();
  Result<ManifestMeta> meta = meta_from_row(q);
  if (!meta.ok()) return meta.error();
  return std::optional<StoredManifest>(StoredManifest{std::move(meta).value(), q.text_at(16)});
}

}  // namespace

Result<std::optional<ManifestMeta>> SqliteStore::read_manifest_meta(std::string_view cid,
                                                                    const Principal& principal) {
  Result<std::optional<StoredManifest>> row = select_manifest(*impl_, cid, principal, false);
  if (!row.ok()) return row.error();
  if (!row->has_value()) return std::optional<ManifestMeta>();
  return std::optional<ManifestMeta>(std::move((*row)->meta));
}

Result<std::optional<StoredManifest>> SqliteStore::read_manifest(std::string_view cid,
                                                                 const Principal& principal) {
  return select_manifest(*impl_, cid, principal, true);
}

Result<ManifestPage> SqliteStore::list_manifest_metas(std::string_view cursor, std::size_t batch) {
  if (batch == 0) return invalid("list_manifest_metas: batch must be at least 1");
  std::string after_cid;
  std::string after_principal;
  if (!cursor.empty()) {
    std::size_t space = cursor.find(' ');
    if (space == std::string_view::npos || !validate_connection_id(cursor.substr(0, space)).ok() ||
        !Principal::parse(cursor.substr(space + 1)).ok()) {
      return invalid("list_manifest_metas: malformed cursor");
    }
    after_cid = std::string(cursor.substr(0, space));
    after_principal = std::string(cursor.substr(space + 1));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  int64_t now = s.options.now_ms();
  if (cursor.empty()) {
    // A new walk: housekeeping of rows whose time ran out (Redis drops such keys by itself).
    if (Status st = purge_expired_rows(s); !st.ok()) return st.error();
  }
  ManifestPage page;
  Query q(s, "manifest_list_meta");
  q.text(":after_connection_id", after_cid)
      .text(":after_principal", after_principal)
      .integer(":now", now)
      .integer(":limit", static_cast<int64_t>(std::min<std::size_t>(batch, 1'000'000)));
  std::string last;
  std::size_t rows = 0;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    ++rows;
    last = q.text_at(0) + " " + q.text_at(1);
    Result<ManifestMeta> meta = meta_from_row(q);
    if (meta.ok()) {
      page.metas.push_back(std::move(meta).value());
    } else {
      page.unreadable.push_back(meta.error().message);
    }
  }
  if (rows == batch) page.next_cursor = last;
  return page;
}

// ---- the refresh-due index ---------------------------------------------------------------------

Result<DuePage> SqliteStore::list_due(int64_t now_ms, std::size_t offset, std::size_t batch) {
  if (batch == 0) return invalid("list_due: batch must be at least 1");
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (offset == 0) {
    // A new pass: housekeeping of rows whose time ran out (Redis drops such keys by itself).
    Status st = purge_expired_rows(*impl_);
    if (!st.ok()) return st.error();
  }
  Query q(*impl_, "manifest_list_due");
  q.integer(":now", now_ms)
      .integer(":limit", static_cast<int64_t>(std::min<std::size_t>(batch, 1'000'000)))
      .integer(":offset", static_cast<int64_t>(std::min<std::size_t>(offset, INT64_MAX)));
  DuePage page;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    ++page.listed;
    DueEntry entry;
    entry.connection_id = q.text_at(0);
    entry.due_at_ms = q.integer_at(17);
    Result<Principal> p = Principal::parse(q.text_at(1));
    if (p.ok()) entry.principal = *p;
    Result<ManifestMeta> meta = meta_from_row(q);
    if (meta.ok()) {
      entry.meta = std::move(meta).value();
    } else {
      entry.unreadable = meta.error().message;
    }
    page.entries.push_back(std::move(entry));
  }
  return page;
}

Result<std::vector<bool>> SqliteStore::settle_due(const std::vector<DueSettlement>& settlements) {
  for (const DueSettlement& settle : settlements) {
    if (Status valid = validate_connection_id(settle.connection_id); !valid.ok()) {
      return valid.error();
    }
    if (Status valid = validate_due_at(settle.due_at_ms.value_or(0)); !valid.ok()) {
      return valid.error();
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  std::vector<bool> out;
  for (const DueSettlement& settle : settlements) {
    // The row is the entry: a record that is gone has none left to forget.
    if (!settle.due_at_ms) {
      out.push_back(false);
      continue;
    }
    Query q(s, "manifest_settle_due");
    bind_key(q, settle.connection_id, settle.principal)
        .integer(":due_at", *settle.due_at_ms)
        .integer(":seen_due_at", settle.seen_due_at_ms);
    Result<int> changed = q.run();
    if (!changed.ok()) return changed.error();
    out.push_back(*changed == 1);
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return out;
}

Result<std::vector<bool>> SqliteStore::has_due_entries(const std::vector<DueKey>& keys) {
  for (const DueKey& k : keys) {
    if (Status valid = validate_connection_id(k.connection_id); !valid.ok()) return valid.error();
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<bool> out;
  for (const DueKey& k : keys) {
    Query q(*impl_, "manifest_exists");
    bind_key(q, k.connection_id, k.principal);
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    out.push_back(*row);
  }
  return out;
}

// sqlite-migrate-v6.sql scored every row that existed before the index 0 (due at once).
Result<DueBackfill> SqliteStore::backfill_due_index(std::size_t) {
  DueBackfill out;
  out.done = true;
  return out;
}

// ---- connection records, grants, overlays, epoch -----------------------------------------------

Result<ConnectionSync> SqliteStore::sync_connections(const std::vector<ConnectionRecord>& records) {
  std::map<std::string, const ConnectionRecord*> wanted;
  for (const ConnectionRecord& r : records) {
    if (Status st = validate_connection_record(r); !st.ok()) return st.error();
    if (!wanted.emplace(r.id, &r).second) {
      return invalid("sync_connections: connection '" + r.id + "' appears twice");
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  std::map<std::string, ConnectionRecord> current;
  {
    Query q(s, "connections_select");
    for (;;) {
      Result<bool> row = q.step();
      if (!row.ok()) return row.error();
      if (!*row) break;
      ConnectionRecord r = record_from_row(q);
      current.emplace(r.id, std::move(r));
    }
  }
  ConnectionSync sync;
  for (const auto& [id, record] : current) {
    if (wanted.count(id) != 0) continue;
    sync.removed.push_back(id);
    Query q(s, "connection_delete");
    if (Result<int> r = q.text(":id", id).run(); !r.ok()) return r.error();
  }
  for (const auto& [id, want] : wanted) {
    auto it = current.find(id);
    if (it != current.end() && it->second.same_config(*want)) continue;
    (it == current.end() ? sync.added : sync.changed).push_back(id);
    if (it != current.end()) {
      // Changed: each of its rows is due now (a miss under the new config, or a principal it is
      // no longer cached under), as the Redis store rescores its entries.
      Query due(s, "manifests_due_now_connection");
      if (Result<int> r = due.text(":connection_id", id).run(); !r.ok()) return r.error();
    }
    Query q(s, "connection_upsert");
    q.text(":id", id)
        .text(":config_hash", want->config_hash)
        .text(":credential_mode", credential_mode_name(want->credential_mode))
        .text(":name", want->name)
        .text(":transport", want->transport)
        .integer(":updated_at", want->updated_at_ms);
    if (Result<int> r = q.run(); !r.ok()) return r.error();
  }
  int cleaned = 0;
  const bool sweep = !sync.removed.empty() || !s.swept;
  for (const char* cleanup :
       {"manifests_delete_unconfigured", "leases_delete_unconfigured", "fences_delete_unconfigured",
        "gates_delete_unconfigured", "grants_delete_unconfigured",
        "published_disabled_delete_unconfigured", "connection_marks_delete_unconfigured"}) {
    if (!sweep) break;
    Query q(s, cleanup);
    Result<int> r = q.run();
    if (!r.ok()) return r.error();
    cleaned += *r;
  }
  if (sync.any() || cleaned > 0) {
    if (Result<int64_t> e = bump_epoch_locked(s); !e.ok()) return e.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  if (sweep) s.swept = true;
  return sync;
}

Result<std::vector<ConnectionRecord>> SqliteStore::list_connections() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "connections_select");
  std::vector<ConnectionRecord> out;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    out.push_back(record_from_row(q));
  }
  return out;
}

Result<std::optional<ConnectionRecord>> SqliteStore::read_connection(std::string_view cid) {
  if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "connection_select");
  q.text(":id", cid);
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<ConnectionRecord>();
  return std::optional<ConnectionRecord>(record_from_row(q));
}

// ---- the discovery read -------------------------------------------------------------------------

namespace {

// The discovery core's SnapshotSource over the store's tables, each lookup a named statement. The
// caller holds the mutex and one read transaction, so the snapshot is consistent (WAL: readers see
// one commit, whatever writers do meanwhile). Rows fill the core's ConnectionRecord and
// ManifestEntry directly, the model the Redis readers decode hashes into, so the core classifies
// both stores' data with one code path.
class SqliteSnapshotSource final : public SnapshotSource {
 public:
  SqliteSnapshotSource(SqliteDb& impl, int64_t now) : impl_(impl), now_(now) {}

  Result<std::vector<std::string>> granted(const Principal& member) override {
    Query q(impl_, "grants_select_member");
    q.text(":principal", member.str());
    std::vector<std::string> out;
    for (;;) {
      Result<bool> row = q.step();
      if (!row.ok()) return row.error();
      if (!*row) return out;
      out.push_back(q.text_at(0));
    }
  }

  Result<std::optional<ConnectionRecord>> record(std::string_view cid) override {
    Query q(impl_, "connection_select");
    q.text(":id", cid);
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) return std::optional<ConnectionRecord>();
    return std::optional<ConnectionRecord>(record_from_row(q));
  }

  Result<std::optional<ManifestEntry>> manifest(std::string_view cid,
                                                const Principal& principal) override {
    Query q(impl_, "manifest_select");
    bind_key(q, cid, principal).integer(":now", now_).integer(":with_body", 1);
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) return std::optional<ManifestEntry>();
    ManifestEntry e = entry_from_row(q);
    e.text = q.text_at(16);
    return std::optional<ManifestEntry>(std::move(e));
  }

  Result<DisabledOverlay> disabled(std::string_view cid, const Principal& principal) override {
    return published_overlay(impl_, cid, principal);
  }

  Result<bool> lease_held(std::string_view cid, const Principal& principal) override {
    Result<std::optional<Holder>> holder = live_holder(impl_, cid, principal, now_);
    if (!holder.ok()) return holder.error();
    return holder->has_value();
  }

  Result<int64_t> epoch() override {
    Query q(impl_, "epoch_select");
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    return *row ? q.integer_at(0) : int64_t{0};
  }

 private:
  SqliteDb& impl_;
  int64_t now_;
};

}  // namespace

namespace {

// One read transaction (BEGIN ... COMMIT) on `db`: a consistent snapshot of the file.
Result<DiscoverySnapshot> read_discovery_on(SqliteDb& db, int64_t now_ms, const Principal& member,
                                            const SnapshotQuery& query) {
  if (Status st = db.exec("BEGIN", "begin read transaction"); !st.ok()) return st.error();
  SqliteSnapshotSource source(db, now_ms);
  Result<DiscoverySnapshot> snapshot = read_snapshot(source, member, query);
  Status end = db.exec(snapshot.ok() ? "COMMIT" : "ROLLBACK", "end read transaction");
  if (!end.ok() && snapshot.ok()) return end.error();
  return snapshot;
}

}  // namespace

Result<DiscoverySnapshot> SqliteStore::read_discovery(const Principal& member,
                                                      const SnapshotQuery& query) {
  Impl& s = *impl_;
  if (!s.readers.enabled()) {
    std::lock_guard<std::mutex> lock(s.mu);
    return read_discovery_on(s, s.options.now_ms(), member, query);
  }
  Result<SqliteReaders::Lease> reader = s.readers.acquire();
  if (!reader.ok()) return reader.error();
  return read_discovery_on(reader->db(), s.options.now_ms(), member, query);
}

std::optional<Result<DiscoverySnapshot>> SqliteStore::read_discovery_now(
    const Principal& member, const SnapshotQuery& query) {
  Impl& s = *impl_;
  // Without readers every read takes the writers' mutex, which a commit holds across its I/O.
  if (!s.readers.enabled()) return std::nullopt;
  std::optional<Result<SqliteReaders::Lease>> reader = s.readers.try_acquire();
  if (!reader) return std::nullopt;
  if (!reader->ok()) return Result<DiscoverySnapshot>(reader->error());
  return read_discovery_on((*reader)->db(), s.options.now_ms(), member, query);
}

namespace {

// One member's grants rows made exactly `cids` (inside the caller's transaction).
// A member's grants from `have` to `cids`. Each connection it lost has its manifest row (if any)
// due now (the Redis store's ZADD XX 0), so the next maintenance pass drops it.
Status replace_member_grants(Db& s, const std::string& principal, const std::set<std::string>& have,
                             const std::set<std::string>& cids) {
  for (const std::string& cid : have) {
    if (cids.count(cid) != 0) continue;
    Query due(s, "manifest_due_now");
    if (Result<int> r = due.text(":connection_id", cid).text(":principal", principal).run();
        !r.ok()) {
      return r.error();
    }
  }
  Query del(s, "grants_delete_member");
  if (Result<int> r = del.text(":principal", principal).run(); !r.ok()) return r.error();
  for (const std::string& cid : cids) {
    Query ins(s, "grant_insert");
    if (Result<int> r = ins.text(":principal", principal).text(":connection_id", cid).run();
        !r.ok()) {
      return r.error();
    }
  }
  return Status::Ok();
}

}  // namespace

Result<GrantSync> SqliteStore::sync_grants(const GrantMap& grants) {
  for (const auto& [member, cids] : grants) {
    if (Status st = validate_member_id(member); !st.ok()) return st.error();
    for (const std::string& cid : cids) {
      if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  std::map<std::string, std::set<std::string>> current;  // member id → cids
  {
    Query q(s, "grants_select_all");
    for (;;) {
      Result<bool> row = q.step();
      if (!row.ok()) return row.error();
      if (!*row) break;
      Result<Principal> p = Principal::parse(q.text_at(0));
      if (!p.ok() || p->is_shared()) continue;  // the CHECK rules this out
      current[std::string(p->member_id())].insert(q.text_at(1));
    }
  }
  std::set<std::string> members;
  for (const auto& [m, cids] : current) members.insert(m);
  for (const auto& [m, cids] : grants) members.insert(m);
  GrantSync sync;
  static const std::set<std::string> kNone;
  for (const std::string& member : members) {
    auto want = grants.find(member);
    const std::set<std::string>& desired = want == grants.end() ? kNone : want->second;
    auto have = current.find(member);
    const std::set<std::string>& had = have == current.end() ? kNone : have->second;
    if (had == desired) continue;
    sync.changed_members.push_back(member);
    if (Status st = replace_member_grants(s, Principal::member(member)->str(), had, desired);
        !st.ok()) {
      return st.error();
    }
  }
  if (!sync.changed_members.empty()) {
    if (Result<int64_t> e = bump_epoch_locked(s); !e.ok()) return e.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return sync;
}

Result<std::set<std::string>> SqliteStore::read_grants(std::string_view member_id) {
  Result<Principal> p = Principal::member(member_id);
  if (!p.ok()) return p.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "grants_select_member");
  q.text(":principal", p->str());
  std::set<std::string> out;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    out.insert(q.text_at(0));
  }
  return out;
}

// On the embedded default the preference table of this file IS the authority (every agent on the
// file shares it); the rows an agent passes are its view of the same table, merged in by the same
// rule as Redis' script, and published_disabled is rebuilt when it disagrees with them.
Result<MergedPreferences> SqliteStore::merge_preferences(std::string_view cid,
                                                         const Principal& principal,
                                                         const std::vector<PreferenceRow>& rows) {
  if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  for (const PreferenceRow& row : rows) {
    if (row.resource_id != cid || row.principal != principal) {
      return invalid("merge_preferences: a row of another connection or principal");
    }
    if (Status st =
            validate_overlay_member(overlay_member(row.capability_type, row.capability_key));
        !st.ok()) {
      return st.error();
    }
    if (row.capability_key.empty() || row.first_seen_at < 0 ||
        row.last_seen_at < row.first_seen_at || row.toggled_at < 0) {
      return invalid("merge_preferences: malformed row");
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  for (const PreferenceRow& row : rows) {
    if (Status st = merge_preference_row(s, row); !st.ok()) return st.error();
  }
  Result<std::vector<PreferenceRow>> merged = select_preference_rows(s, cid, principal);
  if (!merged.ok()) return merged.error();
  MergedPreferences out;
  out.rows = std::move(*merged);
  DisabledOverlay want = disabled_overlay(cid, principal, out.rows);
  Result<DisabledOverlay> have = published_overlay(s, cid, principal);
  if (!have.ok()) return have.error();
  if (*have != want) {
    Query del(s, "published_disabled_delete");
    del.text(":connection_id", cid).text(":principal", principal.str());
    if (Result<int> r = del.run(); !r.ok()) return r.error();
    for (const std::string& member : want) {
      Query ins(s, "published_disabled_insert");
      ins.text(":connection_id", cid).text(":principal", principal.str()).text(":member", member);
      if (Result<int> r = ins.run(); !r.ok()) return r.error();
    }
    Result<int64_t> epoch = bump_epoch_locked(s);
    if (!epoch.ok()) return epoch.error();
    out.overlay_changed = true;
  }
  Result<int64_t> epoch = read_epoch_locked(s);
  if (!epoch.ok()) return epoch.error();
  out.epoch = *epoch;
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return out;
}

Result<DisabledOverlay> SqliteStore::read_disabled(std::string_view cid,
                                                   const Principal& principal) {
  if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return published_overlay(*impl_, cid, principal);
}

Result<int64_t> SqliteStore::bump_epoch() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return bump_epoch_locked(*impl_);
}

Result<int64_t> SqliteStore::read_epoch() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return read_epoch_locked(*impl_);
}

// ---- revalidation queue ------------------------------------------------------------------------

namespace {

// Rows of revalidation_deliver / revalidation_claim_stale, in id order. Rows that are not a valid
// request (which the CHECKs make unlikely) are deleted and reported.
// PRAGMA data_version: changes whenever another connection commits to the file.
Result<int64_t> data_version(Db& impl) {
  return impl.query_integer("PRAGMA data_version", "PRAGMA data_version");
}

Result<RevalidationBatch> batch_from_rows(Db& impl, Query& q) {
  struct Row {
    int64_t id;
    RevalidationRequest request;
    bool ok;
  };
  std::vector<Row> rows;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    Row r{q.integer_at(0), {}, false};
    r.request.id = std::to_string(r.id);
    r.request.connection_id = q.text_at(1);
    Result<Principal> p = Principal::parse(q.text_at(2));
    r.request.reason = q.text_at(3);
    r.request.at_ms = q.integer_at(4);
    r.ok = p.ok() && validate_connection_id(r.request.connection_id).ok() &&
           validate_revalidation_reason(r.request.reason).ok();
    if (p.ok()) r.request.principal = *p;
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.id < b.id; });
  RevalidationBatch batch;
  for (Row& r : rows) {
    if (r.ok) {
      batch.requests.push_back(std::move(r.request));
    } else {
      batch.malformed_ids.push_back(r.request.id);
    }
  }
  for (const Row& r : rows) {
    if (r.ok) continue;
    Query ack(impl, "revalidation_ack");
    if (Result<int> done = ack.integer(":id", r.id).run(); !done.ok()) return done.error();
  }
  return batch;
}

}  // namespace

Result<RevalidationOutcome> SqliteStore::enqueue_revalidation(std::string_view cid,
                                                              const Principal& principal,
                                                              std::string_view reason,
                                                              int64_t window_ms) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) {
    return valid.error();
  }
  if (Status st = validate_revalidation_reason(reason); !st.ok()) return st.error();
  if (window_ms <= 0) return invalid("enqueue_revalidation: window_ms must be positive");
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  int64_t now = s.options.now_ms();
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  Result<std::optional<Holder>> holder = live_holder(s, cid, principal, now);
  if (!holder.ok()) return holder.error();
  if (holder->has_value()) return RevalidationOutcome::kInProgress;
  {
    // A manual refresh (refresh-tools) is queued again once the gate is a second old, as
    // revalidate_enqueue.lua does on Redis.
    const bool manual = reason == "manual";
    Query gate(s, manual ? "revalidation_gate_take_manual" : "revalidation_gate_take");
    bind_key(gate, cid, principal).integer(":until", now + window_ms).integer(":now", now);
    if (manual) gate.integer(":requeue_after", kManualRequeueAfterMs);
    Result<int> taken = gate.run();
    if (!taken.ok()) return taken.error();
    if (*taken == 0) return RevalidationOutcome::kAlreadyQueued;
  }
  {
    Query q(s, "revalidation_enqueue");
    bind_key(q, cid, principal).text(":reason", reason).integer(":at", now);
    if (Result<int> r = q.run(); !r.ok()) return r.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  s.queue_dirty = true;
  s.queue_cv.notify_all();
  return RevalidationOutcome::kQueued;
}

Result<bool> SqliteStore::drop_manifest(std::string_view cid, const Principal& principal) {
  if (Status valid = validate_connection_id(cid); !valid.ok()) {
    return valid.error();
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  Query q(s, "manifest_drop");
  bind_key(q, cid, principal);
  Result<int> dropped = q.run();
  if (!dropped.ok()) return dropped.error();
  Query gate(s, "revalidation_gate_drop");
  bind_key(gate, cid, principal);
  if (Result<int> r = gate.run(); !r.ok()) return r.error();
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return *dropped == 1;
}

Result<RevalidationBatch> SqliteStore::read_revalidations(std::string_view consumer,
                                                          std::size_t max, int64_t block_ms) {
  if (Status st = validate_revalidation_read(consumer, max, block_ms); !st.ok()) {
    return st.error();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(block_ms);
  const std::size_t limit = std::min<std::size_t>(max, 1'000'000);
  std::unique_lock<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  for (;;) {
    // Another connection committed to the file since we last looked: it may have queued.
    if (Result<int64_t> version = data_version(s); !version.ok()) {
      return version.error();
    } else if (*version != s.seen_data_version) {
      s.seen_data_version = *version;
      s.queue_dirty = true;
    }
    if (s.queue_dirty) {
      Transaction tx(s);
      if (!tx.begun().ok()) return tx.begun().error();
      Query q(s, "revalidation_deliver");
      q.text(":consumer", consumer)
          .integer(":now", s.options.now_ms())
          .integer(":limit", static_cast<int64_t>(limit));
      Result<RevalidationBatch> batch = batch_from_rows(s, q);
      if (!batch.ok()) return batch.error();
      if (Status st = tx.commit(); !st.ok()) return st.error();
      const std::size_t delivered = batch->requests.size() + batch->malformed_ids.size();
      if (delivered < limit) s.queue_dirty = false;  // drained as of this transaction
      if (delivered > 0) return batch;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return RevalidationBatch{};
    s.queue_cv.wait_for(lock,
                        std::min<std::chrono::steady_clock::duration>(
                            deadline - now, std::chrono::milliseconds(s.options.poll_interval_ms)));
  }
}

Status SqliteStore::ack_revalidations(const std::vector<std::string>& ids) {
  std::vector<int64_t> rows;
  for (const std::string& id : ids) {
    int64_t row = 0;
    if (!parse_row_id(id, &row)) return invalid("revalidation id '" + id + "' is not a row id");
    rows.push_back(row);
  }
  if (rows.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  for (int64_t row : rows) {
    Query q(s, "revalidation_ack");
    if (Result<int> r = q.integer(":id", row).run(); !r.ok()) return r.error();
  }
  return tx.commit();
}

Result<RevalidationBatch> SqliteStore::claim_stale_revalidations(std::string_view consumer,
                                                                 int64_t min_idle_ms,
                                                                 std::size_t max) {
  if (Status st = validate_revalidation_claim(consumer, min_idle_ms, max); !st.ok()) {
    return st.error();
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  int64_t now = s.options.now_ms();
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  Query q(s, "revalidation_claim_stale");
  q.text(":consumer", consumer)
      .integer(":now", now)
      .integer(":idle_since", now - min_idle_ms)
      .integer(":limit", static_cast<int64_t>(std::min<std::size_t>(max, 1'000'000)));
  Result<RevalidationBatch> batch = batch_from_rows(s, q);
  if (!batch.ok()) return batch.error();
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return batch;
}

// ---- the refresh webhook -----------------------------------------------------------------------

namespace {

// The replay guard inside the caller's transaction: true the first time `key` is seen.
Result<bool> remember_locked(Db& s, std::string_view key, int64_t ttl_ms, int64_t now) {
  {
    Query purge(s, "replay_purge");
    if (Result<int> r = purge.integer(":now", now).run(); !r.ok()) return r.error();
  }
  Query q(s, "replay_remember");
  Result<int> first =
      q.text(":digest", sha256_hex(key)).integer(":until", now + ttl_ms).integer(":now", now).run();
  if (!first.ok()) return first.error();
  return *first == 1;
}

// How a webhook target applies, as webhook_refresh.lua decides it from the store's records.
struct WebhookTargetPlan {
  bool known = false;                 // the connection exists (else unknown_connection)
  bool whole_connection = false;      // a per_member connection without a principal: mark it once
  std::vector<Principal> principals;  // else `shared`, or the member named when granted
};

Result<WebhookTargetPlan> webhook_plan(Db& s, const WebhookRefreshTarget& t) {
  std::string mode;
  {
    Query q(s, "webhook_connection_mode");
    Result<bool> row = q.text(":id", t.connection_id).step();
    if (!row.ok()) return row.error();
    if (*row) mode = q.text_at(0);
  }
  WebhookTargetPlan out;
  if (mode == credential_mode_name(CredentialMode::kShared)) {
    out.known = true;
    if (!t.principal || t.principal->is_shared()) out.principals.push_back(Principal::shared());
  } else if (mode == credential_mode_name(CredentialMode::kPerMember)) {
    out.known = true;
    out.whole_connection = !t.principal;
    if (t.principal) {
      Query q(s, "webhook_grantees");
      Result<bool> row =
          q.text(":connection_id", t.connection_id).text(":principal", t.principal->str()).step();
      if (!row.ok()) return row.error();
      if (*row) out.principals.push_back(*t.principal);
    }
  }
  return out;
}

// webhook_mark_connection, then whether the connection has grantees (their data now reads
// stale): the `marked` result's marked_stale.
Result<bool> mark_connection_locked(Db& s, std::string_view cid, int64_t at) {
  {
    Query mark(s, "webhook_mark_connection");
    if (Result<int> r = mark.text(":connection_id", cid).integer(":at", at).run(); !r.ok()) {
      return r.error();
    }
  }
  Query q(s, "webhook_has_grantees");
  Result<bool> row = q.text(":connection_id", cid).step();
  if (!row.ok()) return row.error();
  return *row && q.integer_at(0) == 1;
}

}  // namespace

// webhook_refresh.lua, rule for rule, in one transaction. `now_ms` is the data time (the marks,
// the gate's age, the requests' `at`); expiry (leases, gates, the replay guard) runs on the store's
// clock, as it runs on Redis' there.
Result<WebhookRefreshReply> SqliteStore::apply_webhook(const WebhookVerified& verified,
                                                       const WebhookRefreshRequest& request,
                                                       int64_t now_ms, int64_t window_ms) {
  if (window_ms <= 0) return invalid("webhook: window_ms must be positive");
  if (request.targets.empty()) return invalid("webhook: no target");
  if (verified.replay_key.empty()) return invalid("webhook: no replay key");
  for (const WebhookRefreshTarget& t : request.targets) {
    if (Status st = validate_connection_id(t.connection_id); !st.ok()) return st.error();
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  const int64_t now = s.options.now_ms();
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  WebhookRefreshReply reply;
  // The namespace is always ready here (read_namespace); a replay writes nothing (rolled back).
  Result<bool> first =
      remember_locked(s, verified.replay_key, std::max<int64_t>(1, verified.retain_for_ms), now);
  if (!first.ok()) return first.error();
  if (!*first) {
    reply.replay = true;
    return reply;
  }
  bool marked_any = false;
  bool queued_any = false;
  for (const WebhookRefreshTarget& t : request.targets) {
    Result<WebhookTargetPlan> plan = webhook_plan(s, t);
    if (!plan.ok()) return plan.error();
    if (!plan->known) {
      reply.results.push_back({t.connection_id, std::nullopt, "unknown_connection", false});
      continue;
    }
    if (plan->whole_connection) {
      Result<bool> marked = mark_connection_locked(s, t.connection_id, now_ms);
      if (!marked.ok()) return marked.error();
      marked_any = marked_any || *marked;
      reply.results.push_back({t.connection_id, std::nullopt, kWebhookConnectionMarked, *marked});
      continue;
    }
    if (plan->principals.empty() && t.principal) {
      reply.results.push_back({t.connection_id, t.principal, "unknown_principal", false});
      continue;
    }
    for (const Principal& p : plan->principals) {
      Query mark(s, "webhook_mark_stale");
      Result<int> marked =
          bind_key(mark, t.connection_id, p).integer(":at", now_ms).integer(":now", now).run();
      if (!marked.ok()) return marked.error();
      marked_any = marked_any || *marked == 1;
      RevalidationOutcome outcome = RevalidationOutcome::kQueued;
      Result<std::optional<Holder>> holder = live_holder(s, t.connection_id, p, now);
      if (!holder.ok()) return holder.error();
      if (holder->has_value()) {
        outcome = RevalidationOutcome::kInProgress;  // queued behind the lease all the same
      } else {
        Query gate(s, "webhook_gate_take");
        bind_key(gate, t.connection_id, p)
            .integer(":until", now + window_ms)
            .integer(":now", now)
            .integer(":at", now_ms)
            .integer(":requeue_after", kManualRequeueAfterMs);
        Result<int> taken = gate.run();
        if (!taken.ok()) return taken.error();
        if (*taken == 0) outcome = RevalidationOutcome::kAlreadyQueued;
      }
      if (outcome != RevalidationOutcome::kAlreadyQueued) {
        Query q(s, "revalidation_enqueue");
        bind_key(q, t.connection_id, p)
            .text(":reason", kWebhookRefreshReason)
            .integer(":at", now_ms);
        if (Result<int> r = q.run(); !r.ok()) return r.error();
        queued_any = true;
      }
      reply.results.push_back(
          {t.connection_id, p, revalidation_outcome_name(outcome), *marked == 1});
    }
  }
  if (marked_any) {
    if (Result<int64_t> e = bump_epoch_locked(s); !e.ok()) return e.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  if (queued_any) {  // a consumer blocked on the queue takes it at once
    s.queue_dirty = true;
    s.queue_cv.notify_all();
  }
  return reply;
}

// ---- per-member grants, the runtime catalog, the audit log ----------------------------------

namespace {

// Columns of catalog_select and catalog_list: 0 kind, 1 key, 2 value (NULL: a tombstone), 3 origin,
// 4 rev_ms, 5 file_hash, 6 changed_by, 7 updated_at.
Result<CatalogEntry> catalog_entry_from_row(const Query& q) {
  CatalogEntry e;
  std::optional<CatalogKind> kind = parse_catalog_kind(q.text_at(0));
  e.key = q.text_at(1);
  const std::string record = "catalog row " + q.text_at(0) + " " + e.key;
  if (!kind) return Error(ErrorCode::kInvalidReply, record + ": unknown kind");
  e.kind = *kind;
  if (!q.is_null(2)) {
    Result<Json> value = parse_json(q.text_at(2));
    if (!value.ok()) return Error(ErrorCode::kInvalidReply, record + ": value is not JSON");
    e.value = std::move(value).value();
  }
  e.meta.origin = q.text_at(3);
  e.meta.rev_ms = q.integer_at(4);
  e.meta.file_hash = q.text_at(5);
  e.meta.by = q.text_at(6);
  e.meta.updated_at_ms = q.integer_at(7);
  return e;
}

Result<std::optional<CatalogEntry>> catalog_select(Db& s, CatalogKind kind, std::string_view key) {
  Query q(s, "catalog_select");
  q.text(":kind", catalog_kind_name(kind)).text(":key", key);
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<CatalogEntry>();
  Result<CatalogEntry> e = catalog_entry_from_row(q);
  if (!e.ok()) return e.error();
  return std::optional<CatalogEntry>(std::move(e).value());
}

}  // namespace

Result<bool> SqliteStore::set_member_grants(std::string_view member_id,
                                            const std::set<std::string>& cids) {
  Result<Principal> p = Principal::member(member_id);
  if (!p.ok()) return p.error();
  for (const std::string& cid : cids) {
    if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  std::set<std::string> have;
  {
    Query q(s, "grants_select_member");
    q.text(":principal", p->str());
    for (;;) {
      Result<bool> row = q.step();
      if (!row.ok()) return row.error();
      if (!*row) break;
      have.insert(q.text_at(0));
    }
  }
  if (have == cids) return false;
  // The grants table is also the grantees index (grants_by_connection): one write serves both.
  if (Status st = replace_member_grants(s, p->str(), have, cids); !st.ok()) return st.error();
  if (Result<int64_t> e = bump_epoch_locked(s); !e.ok()) return e.error();
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return true;
}

Result<std::set<std::string>> SqliteStore::read_grantees(std::string_view cid) {
  if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "grantees_select");
  q.text(":connection_id", cid);
  std::set<std::string> out;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    Result<Principal> p = Principal::parse(q.text_at(0));
    if (p.ok() && !p->is_shared()) out.insert(std::string(p->member_id()));
  }
  return out;
}

Result<CatalogWriteResult> SqliteStore::catalog_write(const CatalogEntry& entry,
                                                      CatalogWriteMode mode) {
  Result<std::string> value = catalog_value_text(entry);
  if (!value.ok()) return value.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  // The file rule reads and writes in one BEGIN IMMEDIATE transaction: another agent on the file
  // waits for the write lock, then sees this write.
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  CatalogWriteResult out;
  if (mode != CatalogWriteMode::kAlways) {
    Result<std::optional<CatalogEntry>> stored = catalog_select(s, entry.kind, entry.key);
    if (!stored.ok()) return stored.error();
    const bool applies =
        mode == CatalogWriteMode::kRestore
            ? !stored->has_value()
            : catalog_seed_applies(*stored, entry.meta.file_hash, entry.meta.rev_ms);
    if (!applies) {
      out.current = std::move(stored).value();
      return out;  // nothing written: the transaction rolls back
    }
  }
  CatalogEntry written = entry;
  written.meta.updated_at_ms = s.options.now_ms();
  Query up(s, "catalog_upsert");
  up.text(":kind", catalog_kind_name(entry.kind))
      .text(":key", entry.key)
      .text(":origin", entry.meta.origin)
      .integer(":rev_ms", entry.meta.rev_ms)
      .text(":file_hash", entry.meta.file_hash)
      .text(":changed_by", entry.meta.by)
      .integer(":updated_at", written.meta.updated_at_ms);
  if (entry.value) {
    up.text(":value", *value);
  } else {
    up.null(":value");
  }
  if (Result<int> r = up.run(); !r.ok()) return r.error();
  Query bump(s, "catalog_version_bump");
  if (Result<int> r = bump.text(":kind", catalog_kind_name(entry.kind)).run(); !r.ok()) {
    return r.error();
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  out.applied = true;
  out.current = std::move(written);
  return out;
}

Result<std::optional<CatalogEntry>> SqliteStore::catalog_read(CatalogKind kind,
                                                              std::string_view key) {
  if (Status st = validate_catalog_key(kind, key); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return catalog_select(*impl_, kind, key);
}

Result<CatalogPage> SqliteStore::catalog_list(CatalogKind kind, std::string_view cursor,
                                              std::size_t limit) {
  if (Status st = validate_catalog_page(limit); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "catalog_list");
  // One row past the page says whether there is a next one.
  q.text(":kind", catalog_kind_name(kind))
      .text(":cursor", cursor)
      .integer(":limit", static_cast<int64_t>(limit) + 1);
  CatalogPage page;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    if (page.entries.size() == limit) {
      page.next_cursor = page.entries.back().key;
      break;
    }
    Result<CatalogEntry> e = catalog_entry_from_row(q);
    if (!e.ok()) return e.error();
    page.entries.push_back(std::move(e).value());
  }
  return page;
}

Result<CatalogVersions> SqliteStore::catalog_versions() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "catalog_versions_select");
  CatalogVersions v;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    std::optional<CatalogKind> kind = parse_catalog_kind(q.text_at(0));
    if (!kind) continue;  // the CHECK rules this out
    int64_t n = q.integer_at(1);
    switch (*kind) {
      case CatalogKind::kMember:
        v.member = n;
        break;
      case CatalogKind::kGrant:
        v.grant = n;
        break;
      case CatalogKind::kConnection:
        v.connection = n;
        break;
    }
  }
  return v;
}

Status SqliteStore::append_audit(const AuditEntry& entry) {
  Result<std::string> detail = audit_detail_text(entry);
  if (!detail.ok()) return detail.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Transaction tx(s);
  if (!tx.begun().ok()) return tx.begun().error();
  Query ins(s, "audit_insert");
  ins.integer(":at", entry.at_ms != 0 ? entry.at_ms : s.options.now_ms())
      .text(":actor", entry.actor)
      .text(":action", entry.action)
      .text(":target", entry.target)
      .text(":detail", *detail);
  if (Result<int> r = ins.run(); !r.ok()) return r.error();
  Query trim(s, "audit_trim");
  if (Result<int> r = trim.integer(":max", std::max<int64_t>(s.options.max_audit_entries, 1)).run();
      !r.ok()) {
    return r.error();
  }
  return tx.commit();
}

Result<AuditPage> SqliteStore::read_audit(std::string_view cursor, std::size_t limit) {
  if (Status st = validate_catalog_page(limit); !st.ok()) return st.error();
  int64_t before = std::numeric_limits<int64_t>::max();
  if (!cursor.empty() && !parse_row_id(cursor, &before)) {
    return invalid("read_audit: the cursor is not an audit line id");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Query q(*impl_, "audit_page");
  q.integer(":before", before).integer(":limit", static_cast<int64_t>(limit) + 1);
  AuditPage page;
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    if (page.entries.size() == limit) {
      page.next_cursor = page.entries.back().id;
      break;
    }
    AuditEntry e;
    e.id = std::to_string(q.integer_at(0));
    e.at_ms = q.integer_at(1);
    e.actor = q.text_at(2);
    e.action = q.text_at(3);
    e.target = q.text_at(4);
    Result<Json> detail = parse_json(q.text_at(5));
    if (!detail.ok()) {
      return Error(ErrorCode::kInvalidReply, "audit row " + e.id + ": detail is not JSON");
    }
    e.detail = std::move(detail).value();
    page.entries.push_back(std::move(e));
  }
  return page;
}

// No edge stands in front of an embedded store: no OAuth callback is ever queued, and no page
// waits for an outcome (the agent's own GET /v1/oauth/callback answers the browser itself).
Result<OAuthCallbackBatch> SqliteStore::read_oauth_callbacks(std::string_view /*after_id*/,
                                                             std::size_t /*max*/) {
  return OAuthCallbackBatch{};
}

Status SqliteStore::put_oauth_result(std::string_view /*state*/, std::string_view /*record*/,
                                     int64_t /*ttl_ms*/) {
  return Status::Ok();
}

}  // namespace quiver
