// PreferencesDb: the capability preferences of Coffer ADR-004 in SQLite, and their publication to
// the store as disabled overlays.
//
// The table is `mcp_capability_preferences` of schema/sqlite.sql, in `<data_dir>/quiver.db`. On
// the embedded default the SqliteStore opens the same file with its own connection: both use WAL
// and a busy timeout, and every write here is one short BEGIN IMMEDIATE transaction, so the two
// connections take turns instead of failing. Statements are the named ones of
// schema/sqlite-queries.sql (preferences_*).
//
// When to call what:
//   - after every listing, `reconcile_listing(cid, listing, policy)`: only the kinds that listed
//     ok count; new keys get a row (enabled per `auto_enable_new_capabilities`), seen keys move
//     last_seen_at, vanished keys keep their row and their flag (the user's choice survives
//     upstream churn). Then the overlay is published when it differs from what was published.
//   - `set_enabled` is the user's toggle; the overlay is published at once, so discovery hides
//     (or shows) the capability without a re-listing.
//   - `rows` reads a connection's rows: with its upstream offline, the known capabilities and
//     their flags are still there.
// A publication that fails (store unreachable) is remembered and retried by `publish_pending`
// (the agent's maintenance tick); the SQLite row is the truth, the overlay a copy.
//
// Thread-safe: one connection behind a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/store.h"
#include "shared/listing.h"
#include "shared/preferences.h"
#include "shared/status.h"

namespace quiver {

struct PreferencesDbOptions {
  std::string path;  // the SQLite file (created, schema applied if missing)
  Clock now_ms = system_clock_ms();
  int64_t busy_timeout_ms = 5'000;
  // Where overlays are published; null: nowhere (tests of the table alone).
  ManifestStore* store = nullptr;
};

// What a reconciliation did.
struct ReconcileReport {
  std::size_t inserted = 0;  // new capabilities
  std::size_t touched = 0;   // seen again
  bool published = false;    // the overlay changed and was published
};

class PreferencesDb {
 public:
  static Result<std::unique_ptr<PreferencesDb>> open(PreferencesDbOptions options);
  ~PreferencesDb();
  PreferencesDb(const PreferencesDb&) = delete;
  PreferencesDb& operator=(const PreferencesDb&) = delete;

  // Every row of the connection, ordered by (type, key).
  Result<std::vector<PreferenceRow>> rows(std::string_view connection_id);
  // Reconciles one listing (ADR-004) in one transaction, then publishes the overlay if it
  // changed. A publication failure is not an error here (the rows are written; it is retried):
  // `published` stays false and the connection is pending.
  Result<ReconcileReport> reconcile_listing(std::string_view connection_id, const Listing& listing,
                                            const PreferencePolicy& policy);
  // The user's toggle. kNotFound when the capability was never seen on this connection. The rows
  // are written even when the publication fails; then kUnavailable says so (and it is pending).
  Status set_enabled(std::string_view connection_id, CapabilityType type, std::string_view key,
                     bool enabled);
  // The connection's disabled set as the rows give it.
  Result<DisabledOverlay> disabled(std::string_view connection_id);

  // Publishes the overlay of each connection (start-up: the store may be new or have been
  // flushed). Returns the first failure; every connection is attempted.
  Status publish_all(const std::vector<std::string>& connection_ids);
  // Retries failed publications. Ok when nothing is pending any more.
  Status publish_pending();
  std::set<std::string> pending() const;

 private:
  struct Impl;
  explicit PreferencesDb(std::unique_ptr<Impl> impl);
  Status publish(std::string_view connection_id, bool force);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
