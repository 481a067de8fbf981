#include "native-agent/store/preferences_db.h"

#include <algorithm>
#include <map>
#include <utility>

#include "native-agent/store/sqlite_db.h"

namespace quiver {

namespace preferences_db_internal {

// The state; PreferencesDb::Impl is this, named so that the helpers below can take it.
struct Db : SqliteDb {
  Db() : SqliteDb("preferences") {}

  PreferencesDbOptions options;
  mutable std::mutex mu;  // the connection and the statements

  mutable std::mutex pending_mu;
  std::set<std::pair<std::string, std::string>> pending;  // (cid, principal) whose merge failed
};

}  // namespace preferences_db_internal

struct PreferencesDb::Impl : preferences_db_internal::Db {};
using preferences_db_internal::Db;

namespace {

using Query = SqliteQuery;

// BEGIN IMMEDIATE … COMMIT around `body`; ROLLBACK when it fails.
template <typename F>
Status in_transaction(Db& impl, F&& body) {
  SqliteTransaction tx(impl);
  if (!tx.begun().ok()) return tx.begun();
  if (Status st = body(); !st.ok()) return st;
  return tx.commit();
}

Status check_group(std::string_view cid, const Principal& principal) {
  (void)principal;  // a Principal is valid by construction
  return validate_connection_id(cid);
}

}  // namespace

Result<std::vector<PreferenceRow>> select_preference_rows(SqliteDb& db, std::string_view cid,
                                                          const Principal& principal) {
  Query q(db, "preferences_select");
  q.text(":resource_id", cid).text(":principal", principal.str());
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
    row.toggled_at = q.integer_at(6);
    row.principal = principal;
    rows.push_back(std::move(row));
  }
  return rows;
}

// The row's key: (resource_id, principal, capability_type, capability_key).
Query& bind_row_key(Query& q, const PreferenceRow& row) {
  return q.text(":resource_id", row.resource_id)
      .text(":principal", row.principal.str())
      .text(":capability_type", capability_type_name(row.capability_type))
      .text(":capability_key", row.capability_key);
}

Status merge_preference_row(SqliteDb& db, const PreferenceRow& row) {
  Query q(db, "preferences_merge");
  bind_row_key(q, row)
      .integer(":enabled", row.enabled ? 1 : 0)
      .integer(":toggled_at", row.toggled_at)
      .integer(":first_seen_at", row.first_seen_at)
      .integer(":last_seen_at", row.last_seen_at);
  Result<int> done = q.run();
  return done.ok() ? Status::Ok() : Status(done.error());
}

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

Result<std::vector<PreferenceRow>> PreferencesDb::local_rows(std::string_view connection_id,
                                                             const Principal& principal) {
  if (Status st = check_group(connection_id, principal); !st.ok()) return st.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return select_preference_rows(*impl_, connection_id, principal);
}

Result<std::vector<PreferenceRow>> PreferencesDb::rows(std::string_view connection_id,
                                                       const Principal& principal) {
  Result<std::vector<PreferenceRow>> merged = sync(connection_id, principal);
  if (merged.ok() || merged.error().code == ErrorCode::kInvalidArgument) return merged;
  // The store is down: the durable local copy is what this agent knows.
  return local_rows(connection_id, principal);
}

Result<DisabledOverlay> PreferencesDb::disabled(std::string_view connection_id,
                                                const Principal& principal) {
  Result<std::vector<PreferenceRow>> r = local_rows(connection_id, principal);
  if (!r.ok()) return r.error();
  return disabled_overlay(connection_id, principal, *r);
}

Result<std::vector<PreferenceRow>> PreferencesDb::sync(std::string_view connection_id,
                                                       const Principal& principal) {
  if (Status st = check_group(connection_id, principal); !st.ok()) return st.error();
  Result<std::vector<PreferenceRow>> local = local_rows(connection_id, principal);
  if (!local.ok()) return local.error();
  ManifestStore* store = impl_->options.store;
  if (store == nullptr) return local;
  const std::pair<std::string, std::string> group{std::string(connection_id), principal.str()};
  // TODO(perf): every row goes up on each merge; rows changed since the last successful merge
  // would do, but a store that lost its data needs them all, and the scripts are O(rows) anyway.
  Result<MergedPreferences> merged = store->merge_preferences(connection_id, principal, *local);
  if (!merged.ok()) {
    std::lock_guard<std::mutex> lock(impl_->pending_mu);
    impl_->pending.insert(group);
    Error e = merged.error();
    e.message = "preferences saved here, not yet merged with the store: " + e.message;
    return e;
  }
  {
    // What other agents know comes down: their toggles and the keys they listed.
    std::lock_guard<std::mutex> lock(impl_->mu);
    Status st = in_transaction(*impl_, [&]() -> Status {
      for (const PreferenceRow& row : merged->rows) {
        if (Status m = merge_preference_row(*impl_, row); !m.ok()) return m;
      }
      return Status::Ok();
    });
    if (!st.ok()) return st.error();
  }
  std::lock_guard<std::mutex> lock(impl_->pending_mu);
  impl_->pending.erase(group);
  return merge_rows(*local, merged->rows);
}

Result<ReconcileReport> PreferencesDb::reconcile_listing(std::string_view connection_id,
                                                         const Principal& principal,
                                                         const Listing& listing,
                                                         const PreferencePolicy& policy) {
  if (Status st = check_group(connection_id, principal); !st.ok()) return st.error();
  LiveCapabilities live = live_capabilities(std::string(connection_id), listing, principal);
  ReconcileReport report;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    int64_t now = impl_->options.now_ms();
    Status st = in_transaction(*impl_, [&]() -> Status {
      Result<std::vector<PreferenceRow>> stored =
          select_preference_rows(*impl_, connection_id, principal);
      if (!stored.ok()) return stored.error();
      Reconciliation r = reconcile(*stored, live, policy, now);
      for (const PreferenceRow& row : r.rows_to_insert) {
        Query q(*impl_, "preferences_insert_seen");
        bind_row_key(q, row)
            .integer(":enabled", row.enabled ? 1 : 0)
            .integer(":seen_at", row.last_seen_at);
        if (Result<bool> done = q.step(); !done.ok()) return done.error();
      }
      for (const PreferenceRow& row : r.rows_to_update) {
        Query q(*impl_, "preferences_touch");
        bind_row_key(q, row).integer(":seen_at", row.last_seen_at);
        if (Result<bool> done = q.step(); !done.ok()) return done.error();
      }
      report.inserted = r.rows_to_insert.size();
      report.touched = r.rows_to_update.size();
      return Status::Ok();
    });
    if (!st.ok()) return st.error();
  }
  report.published = sync(connection_id, principal).ok();
  return report;
}

Status PreferencesDb::set_enabled(std::string_view connection_id, const Principal& principal,
                                  CapabilityType type, std::string_view key, bool enabled) {
  if (Status st = check_group(connection_id, principal); !st.ok()) return st;
  if (key.empty() || key.size() > kMaxCapabilityKeyBytes) {
    return Error(ErrorCode::kInvalidArgument, "capability key must be 1 to 2048 bytes");
  }
  // The store's rows first: a key another agent listed, and the toggles made through it, become
  // known here. Down: the local copy decides (and the toggle goes up later).
  (void)sync(connection_id, principal);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Status st = in_transaction(*impl_, [&]() -> Status {
      Result<std::vector<PreferenceRow>> stored =
          select_preference_rows(*impl_, connection_id, principal);
      if (!stored.ok()) return stored.error();
      const PreferenceRow* row = nullptr;
      for (const PreferenceRow& r : *stored) {
        if (r.capability_type == type && r.capability_key == key) row = &r;
      }
      if (row == nullptr) {
        // One message for "never listed" and "listed for someone else": nothing to tell apart.
        return Error(ErrorCode::kNotFound, std::string(capability_type_name(type)) + " '" +
                                               std::string(key) + "' has not been listed");
      }
      // Later than anything seen of this row, so that this toggle wins the merge even when this
      // agent's clock is behind the one that made the previous toggle.
      const int64_t toggled_at = std::max(impl_->options.now_ms(), row->toggled_at + 1);
      Query q(*impl_, "preferences_set_enabled");
      bind_row_key(q, *row).integer(":enabled", enabled ? 1 : 0).integer(":toggled_at", toggled_at);
      Result<int> changed = q.run();
      return changed.ok() ? Status::Ok() : Status(changed.error());
    });
    if (!st.ok()) return st;
  }
  Result<std::vector<PreferenceRow>> merged = sync(connection_id, principal);
  return merged.ok() ? Status::Ok() : Status(merged.error());
}

Status PreferencesDb::sync_all() {
  std::vector<PreferenceGroup> groups;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Query q(*impl_, "preferences_select_groups");
    for (;;) {
      Result<bool> more = q.step();
      if (!more.ok()) return more.error();
      if (!*more) break;
      Result<Principal> p = Principal::parse(q.text_at(1));
      if (!p.ok()) continue;  // the CHECK rules this out
      groups.emplace_back(q.text_at(0), std::move(*p));
    }
  }
  Status first = Status::Ok();
  for (const PreferenceGroup& g : groups) {
    Result<std::vector<PreferenceRow>> r = sync(g.first, g.second);
    if (!r.ok() && first.ok()) first = r.error();
  }
  return first;
}

Status PreferencesDb::sync_pending() {
  Status first = Status::Ok();
  for (const auto& [cid, principal_text] : pending()) {
    Result<Principal> p = Principal::parse(principal_text);
    if (!p.ok()) continue;
    Result<std::vector<PreferenceRow>> r = sync(cid, *p);
    if (!r.ok() && first.ok()) first = r.error();
  }
  return first;
}

std::set<std::pair<std::string, std::string>> PreferencesDb::pending() const {
  std::lock_guard<std::mutex> lock(impl_->pending_mu);
  return impl_->pending;
}

Status PreferencesDb::forget(std::string_view connection_id, const Principal& principal) {
  if (Status st = check_group(connection_id, principal); !st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Query q(*impl_, "preferences_delete_principal");
    q.text(":resource_id", connection_id).text(":principal", principal.str());
    Result<int> r = q.run();
    if (!r.ok()) return r.error();
  }
  std::lock_guard<std::mutex> lock(impl_->pending_mu);
  impl_->pending.erase({std::string(connection_id), principal.str()});
  return Status::Ok();
}

}  // namespace quiver
