// Maintenance: the agent's periodic passes over the store, and the sync of the configuration
// into it.
//
//   - sync_config(): connection records and grants (a changed config_hash makes readers miss;
//     removed connections' manifests deleted). start() and a namespace restore run it; every
//     pass syncs the connection records only (the admin API keeps members' grant sets current).
//   - the runtime catalog (an agent started with its config file): the store check reads the
//     catalog's versions; when they moved from the ones the running configuration was built
//     from, the effective configuration is rebuilt (at most once per catalog_debounce_ms) and,
//     when it differs in what the engine runs on (engine_config_differs), a reload is requested
//     (Agent::reload_requested; `serve` restarts the engine as on SIGHUP). A sync never writes a
//     configuration the catalog has moved past: it is skipped and the reload does it.
//   - run_once(), every maintenance_interval_ms, in pages of maintenance_batch: the entries of
//     the refresh-due index that are due (ManifestStore::list_due; the store time of a pass
//     follows the work due, never the namespace): decide_refresh on each (stale, errored,
//     refresh-ahead at 0.8 × TTL) queues a refresh or moves the entry to when it next has work
//     (settle_due); manifests of principals no longer granted (a grant write made them due) or
//     of removed connections dropped; never-listed `shared` connections seeded (no entry);
//     the index's one-time backfill paced at kDueBackfillKeysPerPass records per pass; also the
//     clock skew against the store and the revalidation group's dead consumers.
//   - check_store_once(), every store_check_interval_ms: a namespace the store lost (restarted
//     empty, flushed, failed over) is restored (connections, grants, overlays), held `restoring`
//     long enough for every other agent's preference copy, then marked ready and re-listed. On key
//     layout v2 a part of it lost alone (one Redis Cluster shard: versions seen before and missing
//     now, lost_part) has the namespace marked `restoring` and is restored the same way.
// The store check's view (the state and ready record last seen) is kept here and only touched
// by the scheduler thread (or a test driving it by hand).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "native-agent/base/clock.h"
#include "native-agent/engine/agent_context.h"

namespace quiver {

// Records of a namespace from before the refresh-due index that one maintenance pass indexes
// (ManifestStore::backfill_due_index): a SCAN of 100 pages of 1,000 keys, once per namespace.
inline constexpr std::size_t kDueBackfillKeysPerPass = 100'000;

// Versions (connections' and members') one store check reads on key layout v2 (Maintenance's
// lost_part): one EXISTS each, pipelined per node.
inline constexpr std::size_t kVersionChecksPerCheck = 1024;

class Maintenance {
 public:
  explicit Maintenance(AgentContext& ctx) : ctx_(ctx) {}

  Status sync_config();
  MaintenanceReport run_once();
  // "ready", "restoring", "missing" or "unknown".
  std::string check_store_once();

 private:
  int64_t restore_hold_ms() const;
  Result<bool> restore_namespace();
  Status sync_connections();
  // True when the running configuration is the catalog's (or there is no catalog); false when a
  // reload is (now) requested or the catalog could not be read. `force`: no debounce.
  bool catalog_current(bool force);
  // Rebuilds the configuration from the catalog as it is now: adopted (true) when the engine's
  // part is unchanged, else a reload is requested (false).
  bool adopt_catalog();
  // The agent's copy of the catalog, put back where nothing is stored (a namespace the store lost).
  Status restore_catalog();
  void request_reload(const std::string& why);
  // Key layout v2: the versions of the connections and members the last sync_config wrote,
  // checked kVersionChecksPerCheck at a time, each store check. A version is never deleted, so one
  // seen before and missing now lost its slot with it (a Redis Cluster shard restarted empty or
  // flushed, the namespace record on another shard): what was lost, as a log line, or nullopt.
  void watch_versions(const GrantMap& grants);
  std::optional<std::string> lost_part();
  void follow_layout_switch();
  void measure_clock_skew();
  void remove_dead_consumers();

  AgentContext& ctx_;
  std::string last_namespace_state_ = "ready";
  std::string last_ready_record_;  // "": none seen yet
  // When this agent first saw the namespace not ready (steady ms; 0: it is ready).
  int64_t restore_seen_at_ = 0;
  // The last rebuild from the catalog (steady ms; the engine's start counts as one).
  int64_t last_rebuild_at_ = steady_ms();
  // Members' grants as the catalog last said (the running configuration's, then rebuilt ones a
  // member/grant change left the engine indifferent to): what sync_grants writes.
  std::optional<GrantMap> grants_;
  // What lost_part() checks: connection ids, then members (as `member/<id>` principals), a flag
  // per entry set once its version was seen, and where the next window starts.
  std::vector<std::string> watched_connections_;
  std::vector<Principal> watched_members_;
  std::vector<bool> version_seen_;
  std::size_t version_cursor_ = 0;
};

}  // namespace quiver
