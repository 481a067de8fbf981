#include "native-agent/preferences_db.h"

#include <algorithm>
#include <map>
#include <utility>

#include "native-agent/sqlite_db.h"

namespace quiver {

namespace preferences_db_internal {

// The state; PreferencesDb::Impl is this, named so that the helpers below can take it.
struct Db : SqliteDb {
  Db() : SqliteDb("preferences") {}

  PreferencesDbOptions options;
  mutable std::mutex mu;  // the connection and the statements

  mutable std::mutex publish_mu;  // the two fields below
  std::map<std::string, DisabledOverlay, std::less<>> published;
  std::set<std::string> pending;
};

}  // namespace preferences_db_internal

struct PreferencesDb::Impl : preferences_db_internal::Db {};
using preferences_db_internal::Db;

namespace {

using Query = SqliteQuery;

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
  SqliteTransaction tx(impl);
  if (!tx.begun().ok()) return tx.begun();
  if (Status st = body(); !st.ok()) return st;
  return tx.commit();
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
  if (Status st = s.open(s.options.path, s.options.busy_timeout_ms); !st.ok()) return st.error();
  // journal_mode answers a row; sqlite3_exec ignores it. WAL persists in the file, so whichever
  // connection opens it first (this or the SqliteStore) sets it for both.
  if (Status st = s.exec("PRAGMA journal_mode=WAL", "setting journal_mode=WAL"); !st.ok()) {
    return st.error();
  }
  if (Status st = s.exec("PRAGMA synchronous=NORMAL", "pragmas"); !st.ok()) return st.error();
  if (Status st = s.apply_schema(); !st.ok()) return st.error();
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
    Result<int> changed = q.run();
    if (!changed.ok()) return changed.error();
    if (*changed == 0) {
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
