// Maintenance: the agent's periodic passes over the store, and the sync of the configuration
// into it.
//
//   - sync_config(): connection records and grants (a changed config_hash makes readers miss;
//     removed connections' manifests deleted). start() and every pass run it.
//   - run_once(), every maintenance_interval_ms, in batches of maintenance_batch: decide_refresh
//     on each stored manifest (stale, errored, refresh-ahead at 0.8 × TTL), never-listed `shared`
//     connections seeded, manifests of principals no longer granted dropped; also the clock
//     skew against the store and the revalidation group's dead consumers.
//   - check_store_once(), every store_check_interval_ms: a namespace the store lost (restarted
//     empty, flushed, failed over) is restored (connections, grants, overlays), held `restoring`
//     long enough for every other agent's preference copy, then marked ready and re-listed.
// The store check's view (the state and ready record last seen) is kept here and only touched
// by the scheduler thread (or a test driving it by hand).
#pragma once

#include <cstdint>
#include <string>

#include "native-agent/engine/agent_context.h"

namespace quiver {

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
  void measure_clock_skew();
  void remove_dead_consumers();

  AgentContext& ctx_;
  std::string last_namespace_state_ = "ready";
  std::string last_ready_record_;  // "": none seen yet
  // When this agent first saw the namespace not ready (steady ms; 0: it is ready).
  int64_t restore_seen_at_ = 0;
};

}  // namespace quiver
