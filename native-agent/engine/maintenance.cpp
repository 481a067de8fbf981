#include "native-agent/engine/maintenance.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "native-agent/base/clock.h"
#include "native-agent/engine/catalog_config.h"
#include "shared/layout.h"

namespace quiver {

Status Maintenance::sync_connections() {
  std::vector<ConnectionRecord> records;
  int64_t now = ctx_.options.now_ms();
  for (const ConnectionConfig& c : ctx_.config.connections) {
    ConnectionRecord r;
    r.id = c.id;
    r.config_hash = c.config_hash;
    r.credential_mode = c.credential_mode;
    r.name = c.name;
    r.transport = transport_kind_name(c.endpoint.transport);
    r.updated_at_ms = now;
    records.push_back(std::move(r));
  }
  Result<ConnectionSync> synced = ctx_.store->sync_connections(records);
  if (!synced.ok()) return synced.error();
  if (synced->any()) {
    auto join = [](const std::vector<std::string>& ids) {
      std::string out;
      for (const std::string& id : ids) out += (out.empty() ? "" : ",") + id;
      return out.empty() ? std::string("-") : out;
    };
    ctx_.logger->info(kAgentLog, "connections synced to " + ctx_.store->describe() + ": added " +
                                     join(synced->added) + ", changed " + join(synced->changed) +
                                     ", removed " + join(synced->removed));
    // Written while the catalog moved on: the reload writes the catalog's.
    (void)catalog_current(true);
  }
  return Status::Ok();
}

Status Maintenance::sync_config() {
  if (!catalog_current(true)) {
    if (ctx_.reload_requested) return Status::Ok();  // the reload syncs the catalog's
    return Error(ErrorCode::kStoreUnavailable, "the runtime catalog cannot be read");
  }
  if (Status st = sync_connections(); !st.ok()) return st;
  if (ctx_.reload_requested) return Status::Ok();
  const GrantMap& granted = grants_ ? *grants_ : ctx_.config.grants;
  Result<GrantSync> grants = ctx_.store->sync_grants(granted);
  if (!grants.ok()) return grants.error();
  // A grantee set lost with its connection's slot while the grants stayed (the sync writes none
  // of those members): after the grant writes, only such a set is missing.
  if (Status st = ctx_.store->rebuild_grantee_sets(granted); !st.ok()) return st;
  watch_versions(granted);
  return Status::Ok();
}

// Every connection and every member this sync wrote has a version now (RedisStore::sync_grants
// writes one for a member without grants too).
void Maintenance::watch_versions(const GrantMap& grants) {
  watched_connections_.clear();
  watched_members_.clear();
  for (const ConnectionConfig& c : ctx_.config.connections) watched_connections_.push_back(c.id);
  for (const auto& [id, granted] : grants) {
    if (Result<Principal> m = Principal::member(id); m.ok()) watched_members_.push_back(*m);
  }
  version_seen_.assign(watched_connections_.size() + watched_members_.size(), false);
  version_cursor_ = 0;
}

std::optional<std::string> Maintenance::lost_part() {
  const std::size_t total = version_seen_.size();
  if (total == 0) return std::nullopt;
  const std::size_t n = watched_connections_.size();
  // This check's window, as the store reads it: its connections, then its members.
  std::vector<std::size_t> conn_at, member_at;
  std::vector<std::string> conns;
  std::vector<Principal> members;
  const std::size_t size = std::min(total, kVersionChecksPerCheck);
  for (std::size_t k = 0; k < size; ++k) {
    const std::size_t i = (version_cursor_ + k) % total;
    if (i < n) {
      conn_at.push_back(i);
      conns.push_back(watched_connections_[i]);
    } else {
      member_at.push_back(i);
      members.push_back(watched_members_[i - n]);
    }
  }
  Result<std::vector<bool>> present = ctx_.store->versions_present(conns, members);
  if (!present.ok()) {
    ctx_.log_store_error("store check: reading versions", present.error());
    return std::nullopt;
  }
  if (present->empty()) {  // a store whose parts are not lost alone: nothing to watch
    version_seen_.clear();
    return std::nullopt;
  }
  if (present->size() != size) return std::nullopt;
  version_cursor_ = (version_cursor_ + size) % total;
  conn_at.insert(conn_at.end(), member_at.begin(), member_at.end());
  std::vector<std::string> lost;
  for (std::size_t k = 0; k < size; ++k) {
    const std::size_t i = conn_at[k];
    if ((*present)[k]) {
      version_seen_[i] = true;
    } else if (version_seen_[i]) {
      lost.push_back(i < n ? "connection '" + watched_connections_[i] + "'"
                           : watched_members_[i - n].str());
    }
  }
  if (lost.empty()) return std::nullopt;
  std::string what = lost.front();
  for (std::size_t k = 1; k < lost.size() && k < 5; ++k) what += ", " + lost[k];
  if (lost.size() > 5) what += " and " + std::to_string(lost.size() - 5) + " more";
  return what;
}

// The namespace moved to a key layout this build writes but this engine's store does not (the
// switch of `quiver-agent migrate-layout v2`): the engine is reloaded, and the new one's store
// writes the layout the record names (Agent::create reads it). Meanwhile its writes are refused
// by the store's layout gate, so nothing lands in the layout readers left.
void Maintenance::follow_layout_switch() {
  Result<StoreLayout> layout = ctx_.store->read_layout();
  if (!layout.ok()) return;
  const std::optional<KeyLayout> writable = write_layout(layout->record);
  if (!writable || writable == ctx_.store->written_layout()) return;
  const std::vector<std::string>& mine = supported_layouts();
  if (std::find(mine.begin(), mine.end(), key_layout_name(*writable)) == mine.end()) return;
  request_reload(std::string("the namespace's key layout record says ") +
                 layout->record.value_or("(none: v1)") +
                 ", which this engine's store does not "
                 "write: restarting the engine to write key layout " +
                 key_layout_name(*writable));
}

void Maintenance::request_reload(const std::string& why) {
  if (ctx_.reload_requested.exchange(true)) return;
  ctx_.logger->info(kAgentLog, "catalog: " + why + "; reloading the configuration");
}

bool Maintenance::catalog_current(bool force) {
  if (!ctx_.catalog_versions || !ctx_.options.config_file) return true;
  if (ctx_.reload_requested) return false;
  Result<CatalogVersions> now = ctx_.store->catalog_versions();
  if (!now.ok()) {
    ctx_.log_store_error("catalog check", now.error());
    return false;
  }
  if (*now == *ctx_.catalog_versions) return true;
  if (!force && steady_ms() - last_rebuild_at_ < ctx_.options.catalog_debounce_ms) return false;
  // A namespace the store lost has lost its catalog too: never rebuild from what is left (an
  // empty catalog would remove every connection); the store check restores it first.
  Result<NamespaceRecord> ns = ctx_.store->read_namespace();
  if (!ns.ok() || ns->state != NamespaceState::kReady) return false;
  return adopt_catalog();
}

bool Maintenance::adopt_catalog() {
  last_rebuild_at_ = steady_ms();
  Result<CatalogConfig> built =
      build_catalog_config(*ctx_.store, ctx_.options.config_file->sources());
  if (!built.ok()) {
    ctx_.log_store_error("catalog: rebuilding the configuration", built.error());
    return false;
  }
  if (engine_config_differs(ctx_.config, built->config)) {
    request_reload("the runtime catalog changed what this agent runs");
    return false;
  }
  // Members or grants of shared connections only: readers check them live; nothing to restart.
  grants_ = built->config.grants;
  ctx_.catalog_versions = built->versions;
  ctx_.catalog_entries = std::move(built->entries);
  return true;
}

Status Maintenance::restore_catalog() {
  if (!ctx_.catalog_versions || !ctx_.options.config_file) return Status::Ok();
  std::size_t put_back = 0;
  for (const CatalogEntry& e : ctx_.catalog_entries) {
    Result<CatalogWriteResult> w = ctx_.store->catalog_write(e, CatalogWriteMode::kRestore);
    if (!w.ok()) return w.error();
    if (w->applied) ++put_back;
  }
  if (put_back > 0) {
    ctx_.logger->info(kAgentLog, "store: put back " + std::to_string(put_back) +
                                     " runtime catalog entries from this agent's copy");
  }
  // Now what the catalog holds (ours, or entries another agent put back or wrote meanwhile).
  if (adopt_catalog() || ctx_.reload_requested) return Status::Ok();
  return Error(ErrorCode::kStoreUnavailable, "the runtime catalog cannot be read back");
}

// ---- the store check: a namespace the store lost, clock skew, dead consumers ----

// How long a restore keeps the namespace `restoring` after this agent first saw it not ready:
// two store-check intervals (and a scheduler tick), so that every other agent of the
// namespace (same store_check_interval_ms) has had a store check meanwhile, seen the record
// `restoring` and merged its own preference copy in. Without it the first agent to restore
// marked the namespace ready with its copy alone, and a capability hidden through another agent
// whose toggle this one had not pulled yet showed until that agent's next check.
int64_t Maintenance::restore_hold_ms() const {
  return 2 * ctx_.config.runtime.store_check_interval_ms + kSchedulerTickMs;
}

// Connections, grants and preference overlays into the store, then, once the hold is over, the
// namespace record `ready` (true). Between the two writes of the record readers answer 503,
// never "nothing granted". False: synced, still held `restoring` (the next check goes on).
Result<bool> Maintenance::restore_namespace() {
  if (Status st = ctx_.store->begin_namespace_restore(ctx_.options.now_ms()); !st.ok())
    return st.error();
  // The catalog first: connections and grants are synced from it.
  if (Status st = restore_catalog(); !st.ok()) return st.error();
  if (ctx_.reload_requested) return false;  // the reload restores with the catalog's
  if (Status st = sync_config(); !st.ok()) return st.error();
  if (ctx_.reload_requested) return false;  // the reload restores with the catalog's
  // Overlays are part of the namespace: a tool the team hid must not show after a wipe.
  if (Status st = ctx_.prefs->sync_all(); !st.ok()) return st.error();
  if (steady_ms() - restore_seen_at_ < restore_hold_ms()) return false;
  Result<bool> ready = ctx_.store->mark_namespace_ready(ctx_.options.now_ms());
  if (!ready.ok()) return ready.error();
  if (!*ready) {
    return Error(ErrorCode::kStoreNotReady,
                 "the namespace record vanished while it was being restored (wiped again)");
  }
  return true;
}

std::string Maintenance::check_store_once() {
  Result<NamespaceRecord> record = ctx_.store->read_namespace();
  if (!record.ok()) {
    ctx_.metrics.store_namespace("unknown");
    ctx_.log_store_error("store check", record.error());
    if (is_unknown_layout_error(record.error())) follow_layout_switch();
    return "unknown";
  }
  if (record->state == NamespaceState::kReady) {
    if (std::optional<std::string> lost = lost_part(); lost) {
      // Part of the namespace is gone while its record (on another shard) is not: restored as a
      // namespace the store lost; readers answer 503 meanwhile, never a list without it.
      ctx_.logger->warn(kAgentLog,
                        "store: the versions of " + *lost +
                            " are gone (a part of the store lost its data: a Redis Cluster shard "
                            "restarted empty or was flushed): marking the namespace restoring and "
                            "restoring connections, grants and preference overlays");
      if (Status st = ctx_.store->demote_namespace(ctx_.options.now_ms()); !st.ok()) {
        ctx_.log_store_error("store: marking the namespace restoring", st.error());
        return "ready";  // again at the next check
      }
      record->state = NamespaceState::kRestoring;  // as written: the restore below
      ctx_.metrics.part_lost();
    }
  }
  if (record->state == NamespaceState::kReady) {
    ctx_.metrics.store_namespace("ready");
    (void)catalog_current(false);
    if (!last_ready_record_.empty() && record->value != last_ready_record_) {
      // Another agent restored (or an agent started on) the namespace: this agent's preference
      // copy may hold toggles that one had not seen yet.
      if (Status st = ctx_.prefs->sync_all(); !st.ok()) {
        ctx_.log_store_error("store: merging preferences after a restore", st.error());
        return "ready";  // again at the next check
      }
    }
    last_ready_record_ = record->value;
    last_namespace_state_ = "ready";
    restore_seen_at_ = 0;
    return "ready";
  }
  const char* seen = namespace_state_name(record->state);
  ctx_.metrics.store_namespace(seen);
  if (restore_seen_at_ == 0) restore_seen_at_ = steady_ms();
  if (last_namespace_state_ != seen) {
    ctx_.logger->warn(kAgentLog,
                      std::string("store: the namespace record is ") + seen +
                          (record->state == NamespaceState::kMissing
                               ? " (the store lost its data: restarted empty, flushed or failed "
                                 "over): restoring connections, grants and preference overlays; "
                                 "readers answer 503 until then"
                               : ": finishing the restore"));
  }
  last_namespace_state_ = seen;
  Result<bool> restored = restore_namespace();
  if (!restored.ok()) {
    ctx_.log_store_error("store: restoring the namespace", restored.error());
    return seen;
  }
  if (!*restored) {  // synced, and held `restoring` for the other agents' copies
    return namespace_state_name(NamespaceState::kRestoring);
  }
  last_namespace_state_ = "ready";
  last_ready_record_.clear();  // the next check takes our own record as the one seen
  ctx_.metrics.store_namespace("ready");
  ctx_.metrics.namespace_restored();
  ctx_.logger->info(kAgentLog, "store: namespace restored " +
                                   std::to_string(steady_ms() - restore_seen_at_) +
                                   " ms after it was seen lost; re-listing what it lost");
  restore_seen_at_ = 0;
  (void)run_once();  // seeds the listings the wipe took
  return "ready";
}

// This agent's clock against the store's (Redis TIME): reported, warned about past a bound.
void Maintenance::measure_clock_skew() {
  const int64_t before = ctx_.options.now_ms();
  Result<std::optional<int64_t>> theirs = ctx_.store->store_time_ms();
  const int64_t after = ctx_.options.now_ms();
  if (!theirs.ok()) {
    ctx_.log_store_error("clock check", theirs.error());
    return;
  }
  if (!theirs->has_value()) return;
  const int64_t skew = (before + after) / 2 - **theirs;
  ctx_.metrics.clock_skew_ms(skew);
  if (std::llabs(skew) > ctx_.options.clock_skew_warn_ms) {
    ctx_.logger->warn(kAgentLog,
                      "clock: this agent's clock is " + std::to_string(skew) +
                          " ms off the store's (Redis TIME); freshness and lease times are "
                          "compared across hosts: fix the clock (NTP)");
  }
}

// Consumers of the revalidation group left behind by earlier runs and reloads.
void Maintenance::remove_dead_consumers() {
  const int64_t idle = ctx_.options.dead_consumer_idle_ms > 0 ? ctx_.options.dead_consumer_idle_ms
                                                              : int64_t{3'600'000};
  Result<std::vector<std::string>> removed = ctx_.store->remove_idle_consumers(ctx_.consumer, idle);
  if (!removed.ok()) {
    ctx_.log_store_error("maintenance: removing dead consumers", removed.error());
    return;
  }
  if (removed->empty()) return;
  ctx_.metrics.consumers_removed(static_cast<int64_t>(removed->size()));
  std::string names;
  for (const std::string& n : *removed) names += (names.empty() ? "" : ", ") + n;
  ctx_.logger->info(kAgentLog,
                    "maintenance: removed " + std::to_string(removed->size()) +
                        " dead revalidation consumer(s) (idle, nothing pending): " + names);
}

// ---- maintenance ----

MaintenanceReport Maintenance::run_once() {
  MaintenanceReport report;
  measure_clock_skew();
  remove_dead_consumers();
  // Re-sync what a flushed or restarted store lost (unchanged records are not rewritten), unless
  // the catalog moved past the running configuration (the reload syncs).
  if (!catalog_current(true)) {
    ctx_.logger->debug(kAgentLog,
                       "maintenance: the catalog moved past this configuration; "
                       "the pass waits for the reload");
    return report;
  }
  if (Status st = sync_connections(); !st.ok()) {
    ++report.errors;
    ctx_.log_store_error("maintenance: syncing connections", st.error());
    return report;
  }
  // Every pass merges this agent's preference copy into the store: rows and overlays that a
  // flushed or restarted store lost come back with the rest of the namespace.
  if (Status st = ctx_.prefs->sync_all(); !st.ok()) {
    ctx_.log_store_error("maintenance: merging preferences", st.error());
  }
  // A namespace written before the refresh-due index existed: its records get entries, paced.
  Result<DueBackfill> backfill = ctx_.store->backfill_due_index(kDueBackfillKeysPerPass);
  if (!backfill.ok()) {
    ++report.errors;
    ctx_.log_store_error("maintenance: backfilling the refresh-due index", backfill.error());
  } else {
    report.backfilled = static_cast<int64_t>(backfill->added);
    if (backfill->added > 0 || !backfill->done) {
      ctx_.logger->info(
          kAgentLog,
          "maintenance: refresh-due index backfill: " + std::to_string(backfill->scanned) +
              " records found, " + std::to_string(backfill->added) + " added" +
              (backfill->done ? "; the index is built" : "; going on at the next pass"));
    }
  }
  const int64_t now = ctx_.options.now_ms();
  auto batch =
      static_cast<std::size_t>(std::max<int64_t>(1, ctx_.config.runtime.maintenance_batch));
  auto queue = [&](const std::string& cid, const Principal& p, const char* reason) {
    Result<RevalidationOutcome> r = ctx_.enqueue(cid, p, reason);
    if (!r.ok()) {
      ++report.errors;
      ctx_.metrics.revalidation_dropped();
      ctx_.log_store_error("maintenance: queueing " + ctx_.who(cid, p), r.error());
      return false;
    }
    if (*r == RevalidationOutcome::kQueued) {
      ++report.queued;
      return true;
    }
    ++report.skipped;
    return false;
  };
  // What is due, soonest first (the refresh-due index: its cost is the work due, never the
  // namespace). An entry left due (queued, or unreadable) stays in the range, so the next page
  // starts past it; one settled (moved later, dropped, forgotten) leaves it.
  std::size_t offset = 0;
  for (;;) {
    Result<DuePage> page = ctx_.store->list_due(now, offset, batch);
    if (!page.ok()) {
      ++report.errors;
      ctx_.log_store_error("maintenance: reading the refresh-due index", page.error());
      return report;
    }
    for (const std::string& u : page->unreadable) {
      ctx_.logger->warn(kAgentLog, "maintenance: unreadable refresh-due entry removed: " + u);
    }
    std::vector<DueSettlement> settle;
    for (const DueEntry& e : page->entries) {
      ++report.examined;
      if (!e.unreadable.empty()) {
        ctx_.logger->warn(kAgentLog,
                          "maintenance: unreadable manifest record skipped: " + e.unreadable);
        ++offset;
        continue;
      }
      if (!e.meta) {  // the record is gone: so goes its entry
        settle.push_back({e.connection_id, e.principal, e.due_at_ms, std::nullopt});
        continue;
      }
      const ConnectionConfig* cfg = ctx_.config.find_connection(e.connection_id);
      if (cfg == nullptr || !check_principal(*cfg, e.principal).ok()) {
        // A removed connection, a member whose grant was removed (the grant write made it due)
        // or a principal of the other credential mode: its manifest is never read again (grants
        // are checked live) and goes, with its entry.
        Result<bool> dropped = ctx_.store->drop_manifest(e.connection_id, e.principal);
        if (!dropped.ok()) {
          ++report.errors;
          ++offset;
          ctx_.log_store_error("maintenance: dropping " + ctx_.who(e.connection_id, e.principal),
                               dropped.error());
        } else if (*dropped) {
          ++report.dropped;
          ctx_.logger->info(kAgentLog, "maintenance: dropped the manifest of " +
                                           ctx_.who(e.connection_id, e.principal) +
                                           ": no longer cached under that principal");
        }
        continue;
      }
      RefreshDecision d =
          decide_refresh(cache_entry_meta(*e.meta), ctx_.policy, cfg->config_hash, now);
      if (d.refresh) {
        // Stays due until the refresh's fenced write rescores it (a lost request is queued
        // again by a later pass once its gate expires).
        queue(e.connection_id, e.principal, "maintenance");
        ++offset;
        continue;
      }
      settle.push_back({e.connection_id, e.principal, e.due_at_ms, d.next_check_at_ms});
    }
    if (!settle.empty()) {
      Result<std::vector<bool>> settled = ctx_.store->settle_due(settle);
      if (!settled.ok()) {
        ++report.errors;
        offset += settle.size();
        ctx_.log_store_error("maintenance: settling refresh-due entries", settled.error());
      } else {
        for (std::size_t i = 0; i < settle.size(); ++i) {
          if ((*settled)[i] && settle[i].due_at_ms) ++report.rescheduled;
        }
      }
    }
    if (page->listed < batch) break;
  }
  // Never-listed `shared` keys (a connection added, or whose listing never got written): no
  // entry in the index, which covers every record once its backfill is done.
  if (backfill.ok() && backfill->done) {
    std::vector<DueKey> shared;
    for (const ConnectionConfig& c : ctx_.config.connections) {
      if (c.credential_mode == CredentialMode::kShared)
        shared.push_back({c.id, Principal::shared()});
    }
    Result<std::vector<bool>> indexed = ctx_.store->has_due_entries(shared);
    if (!indexed.ok()) {
      ++report.errors;
      ctx_.log_store_error("maintenance: reading the refresh-due index", indexed.error());
    } else {
      for (std::size_t i = 0; i < shared.size(); ++i) {
        if (!(*indexed)[i] && queue(shared[i].connection_id, shared[i].principal, "seed")) {
          ++report.seeded;
        }
      }
    }
  }
  if (report.queued > 0 || report.errors > 0 || report.dropped > 0) {
    ctx_.logger->info(kAgentLog, "maintenance: examined " + std::to_string(report.examined) +
                                     " due, queued " + std::to_string(report.queued) + " (seeded " +
                                     std::to_string(report.seeded) + "), dropped " +
                                     std::to_string(report.dropped) + ", rescheduled " +
                                     std::to_string(report.rescheduled) + ", errors " +
                                     std::to_string(report.errors));
  }
  return report;
}

}  // namespace quiver
