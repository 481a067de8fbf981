// PreferencesDb: the capability preferences of Coffer ADR-004, per (connection, principal), in the
// agent's SQLite file, merged with the namespace's preference authority in the store.
//
// The table is `mcp_capability_preferences` of schema/sqlite.sql, in `<data_dir>/quiver.db`. On
// the embedded default the SqliteStore opens the same file with its own connection: both use WAL
// and a busy timeout, and every write here is one short BEGIN IMMEDIATE transaction, so the two
// connections take turns instead of failing. Statements are the named ones of
// schema/sqlite-queries.sql (preferences_*).
//
// One authority, and a durable copy (shared/preferences.h). The store's rows
// (ManifestStore::merge_preferences: quiver:{ns}:prefs:<cid>:<principal> on Redis, this very table
// on the embedded default) are what every agent and edge of the namespace go by. This table is the
// agent's own copy. Every operation below merges the two, row by row, with merge_preference
// (the later toggle wins, a tie disables): the local rows go up, the merged rows come back down.
// Why both: with Redis alone, a Redis restarted empty would lose every user's choice; with
// SQLite alone, each agent published its own set (the last one to start won, and a key listed by
// one agent could not be toggled through another). With the merge, a restart of any agent
// re-sends its copy without undoing a newer toggle, and the first agent to merge after a Redis
// wipe restores rows and overlays.
//
// When to call what:
//   - after every listing, `reconcile_listing(cid, principal, listing, policy)`: only the kinds
//     that listed ok count; new keys get a row (enabled per `auto_enable_new_capabilities`), seen
//     keys move last_seen_at, vanished keys keep their row and their flag (the user's choice
//     survives upstream churn). Then the rows are merged with the store (overlay included).
//   - `set_enabled` is the user's toggle, through whichever agent: the store's rows come down
//     first (a key another agent listed can be toggled here), the toggle is stamped later than
//     anything this agent has seen of that row, and goes up at once, so discovery hides (or
//     shows) the capability without a re-listing.
//   - `rows` reads one principal's rows, merged: with the upstream offline the known
//     capabilities and their flags are still there; with the store down, the local copy.
//   - `sync_all` (start-up and every maintenance pass) merges every (connection, principal) this
//     agent has rows for: what a flushed or restarted store lost comes back.
//   - `forget(cid, principal)` deletes rows nobody may read (see sqlite-migrate-v3.sql).
// A merge that fails (store unreachable) is remembered and retried by `sync_pending`; the local
// row is written either way.
//
// Thread-safe: one connection behind a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "native-agent/store/store.h"
#include "shared/identity.h"
#include "shared/listing.h"
#include "shared/preferences.h"
#include "shared/status.h"

namespace quiver {

class SqliteDb;

struct PreferencesDbOptions {
  std::string path;  // the SQLite file (created, schema applied if missing)
  Clock now_ms = system_clock_ms();
  int64_t busy_timeout_ms = 5'000;
  // The namespace's preference authority; null: none (tests of the table alone).
  ManifestStore* store = nullptr;
};

// What a reconciliation did.
struct ReconcileReport {
  std::size_t inserted = 0;  // new capabilities
  std::size_t touched = 0;   // seen again
  bool published = false;    // merged with the store (and its overlay checked)
};

// A (connection id, principal) pair of preference rows.
using PreferenceGroup = std::pair<std::string, Principal>;

class PreferencesDb {
 public:
  static Result<std::unique_ptr<PreferencesDb>> open(PreferencesDbOptions options);
  ~PreferencesDb();
  PreferencesDb(const PreferencesDb&) = delete;
  PreferencesDb& operator=(const PreferencesDb&) = delete;

  // Every row of (connection, principal), ordered by (type, key), merged with the store's; the
  // local copy alone when the store cannot be reached (then the pair is pending).
  Result<std::vector<PreferenceRow>> rows(std::string_view connection_id,
                                          const Principal& principal);
  // The local copy only, no store round trip.
  Result<std::vector<PreferenceRow>> local_rows(std::string_view connection_id,
                                                const Principal& principal);
  // Reconciles one listing (ADR-004) in one transaction, then merges with the store. A merge
  // failure is not an error here (the rows are written; it is retried): `published` stays false.
  Result<ReconcileReport> reconcile_listing(std::string_view connection_id,
                                            const Principal& principal, const Listing& listing,
                                            const PreferencePolicy& policy);
  // The user's toggle. kNotFound when the capability was never listed for this principal (by any
  // agent whose rows reached the store): the same answer whoever else listed it. The row is
  // written even when the merge fails; then kStoreUnavailable says so (and the pair is pending).
  Status set_enabled(std::string_view connection_id, const Principal& principal,
                     CapabilityType type, std::string_view key, bool enabled);
  // The principal's disabled set as the local rows give it.
  Result<DisabledOverlay> disabled(std::string_view connection_id, const Principal& principal);

  // Merges every (connection, principal) this agent has rows for with the store. Returns the
  // first failure; every pair is attempted.
  Status sync_all();
  // Retries failed merges. Ok when nothing is pending any more.
  Status sync_pending();
  std::set<std::pair<std::string, std::string>> pending() const;  // (cid, principal string)
  // Deletes the local rows of (connection, principal). The store's copy is not touched.
  Status forget(std::string_view connection_id, const Principal& principal);

 private:
  struct Impl;
  explicit PreferencesDb(std::unique_ptr<Impl> impl);
  // Local rows up, merged rows down. The merged rows on success.
  Result<std::vector<PreferenceRow>> sync(std::string_view connection_id,
                                          const Principal& principal);
  std::unique_ptr<Impl> impl_;
};

// The SQL both preference tables' users run (PreferencesDb here, SqliteStore's merge on the
// embedded default), on a connection the caller holds (and, for writes, in its transaction).
Result<std::vector<PreferenceRow>> select_preference_rows(SqliteDb& db, std::string_view cid,
                                                          const Principal& principal);
Status merge_preference_row(SqliteDb& db, const PreferenceRow& row);

}  // namespace quiver
