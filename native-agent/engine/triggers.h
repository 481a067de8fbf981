// Triggers: what makes the agent refresh. request_refresh queues a refresh through the shared gate;
// an upstream's list_changed comes in through on_upstream_change; a change trigger whose queue
// answer did not serve it is followed up until a listing that started after the change is stored.
//
// The follow-up's decisions are the core's state machine (shared/change_trigger.h); this class
// holds its lock, reads the stored meta, refreshes through the RefreshRunner, and counts and logs
// what the machine decides (none dropped silently: each refusal is counted and logged). process()
// runs on the scheduler's tick.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "native-agent/engine/agent_context.h"
#include "native-agent/engine/refresh_runner.h"
#include "shared/change_trigger.h"

namespace quiver {

class Triggers {
 public:
  Triggers(AgentContext& ctx, RefreshRunner& runner);

  // Checks the key and the reason, queues (through the gate every agent and edge shares), and
  // follows a change trigger up when the answer does not serve it.
  Result<RevalidationOutcome> request_refresh(const std::string& cid, const Principal& principal,
                                              const std::string& trigger);
  // The upstream pool's callback: list_changed (and a session that ended, logged).
  void on_upstream_change(const std::string& pool_name, const UpstreamChange& change);
  // A change whose request met the gate taken (a webhook's, queued by the store): the request
  // that took it may be served by a listing that predates the change.
  void follow_up_already_queued(const std::string& cid, const Principal& principal,
                                ChangeTrigger trigger, int64_t changed_at_ms);
  // A queued change whose refresh found the lease held: that listing may predate the change.
  void follow_up_in_progress(const std::string& cid, const Principal& principal,
                             ChangeTrigger trigger, int64_t changed_at_ms);
  // Looks at every pending follow-up once (stops early once the agent stops).
  void process();

 private:
  void follow_up(const std::string& cid, const Principal& principal, ChangeTrigger trigger,
                 int64_t changed_at_ms, QueueAnswer answer);

  AgentContext& ctx_;
  RefreshRunner& runner_;
  std::mutex mu_;
  ChangeFollowups followups_;
};

}  // namespace quiver
