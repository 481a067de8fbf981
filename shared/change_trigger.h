// Change triggers: the follow-up that makes sure a change announced for (connection, principal)
// ends up in a listing that started after it.
//
// A change trigger (list_changed, webhook, evidence, config) says "the upstream changed at T". The
// revalidation queue takes one request per key per window, and a refresh already under way may
// have started before T, so a queue answer of already_queued or in_progress (or a store that did
// not answer) does not serve it. `ChangeFollowups` holds one follow-up per key until a listing
// that started after the newest T is stored, the connection goes, or the horizon passes.
//
// Events in, decisions out, time passed in (the host's monotonic clock for the horizon; T is data
// time, compared with the stored fetched_at only):
//   on_trigger(key, trigger, T, queue answer, now)   kNone (queued: nothing to follow) or kWait
//   pending()                                        the follow-ups to look at on the next tick
//   satisfied_by(stored meta, T, config_hash)        true: report kStoredAfterChange
//   on_checked(follow-up, what the host saw, now)    kDone, kDropped, kWait or kGiveUp
// The host (native-agent/engine/triggers.cpp) holds the lock, reads the meta, refreshes directly
// while not satisfied (the queue's gate may still be taken by a request already handled; the lease
// keeps agents that all saw the change from listing twice), counts and logs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/freshness.h"
#include "shared/identity.h"

namespace quiver {

enum class ChangeTrigger { kListChanged = 0, kWebhook, kEvidence, kConfig };
const char* change_trigger_name(ChangeTrigger trigger);  // "list_changed", "webhook", ...
// The change trigger a revalidation reason names; nullopt for the others ("stale", "manual"...).
std::optional<ChangeTrigger> change_trigger_from_reason(std::string_view reason);

// How the revalidation queue answered the trigger's request.
enum class QueueAnswer {
  kQueued = 0,     // a request is queued: its refresh starts after the change
  kAlreadyQueued,  // the gate was taken (maybe by a request already handled)
  kInProgress,     // a lease is held: that listing may predate the change
  kNotQueued,      // the store did not answer
};

// What the host saw when it looked at a pending follow-up.
enum class FollowupCheck {
  kConnectionRemoved = 0,  // no longer configured: nothing to follow
  kStoredAfterChange,      // satisfied_by() the stored meta
  kStoreFailed,            // the meta or the refresh could not reach the store: again later
  kRefreshed,              // the host's refresh ran (committed, failed, refused, up to date)
  kRefreshInProgress,      // held elsewhere: maybe from before the change, look again
  kCannotRun,              // the refresh was refused for good (e.g. an ungranted principal)
};

enum class FollowupDecision {
  kNone = 0,  // nothing to follow up
  kWait,      // pending: look again on the next tick
  kDone,      // the change is in a stored listing (or cannot be): forgotten
  kDropped,   // cannot run: counted as a dropped revalidation and logged
  kGiveUp,    // the horizon passed: counted as a dropped revalidation and logged
};
const char* followup_decision_name(FollowupDecision decision);

struct PendingChange {
  std::string connection_id;
  Principal principal = Principal::shared();
  ChangeTrigger trigger = ChangeTrigger::kListChanged;  // the first one seen
  int64_t changed_at_ms = 0;                            // the newest change (data time)
  int64_t give_up_at_ms = 0;                            // monotonic
};

class ChangeFollowups {
 public:
  // `horizon_ms`: how long after the newest trigger a follow-up is given up.
  explicit ChangeFollowups(int64_t horizon_ms) : horizon_ms_(horizon_ms) {}

  FollowupDecision on_trigger(const std::string& connection_id, const Principal& principal,
                              ChangeTrigger trigger, int64_t changed_at_ms, QueueAnswer answer,
                              int64_t now_ms);
  // A copy: the host looks at them without holding its lock.
  std::vector<PendingChange> pending() const;
  // `checked` is the copy pending() returned. A newer change that arrived while the host looked
  // keeps the follow-up (kWait) even when the look satisfied the older one.
  FollowupDecision on_checked(const PendingChange& checked, FollowupCheck check, int64_t now_ms);

  std::size_t size() const { return pending_.size(); }
  int64_t horizon_ms() const { return horizon_ms_; }

  // A listing of the change is stored: data listed at or after `changed_at_ms` under the
  // connection's current config.
  static bool satisfied_by(const std::optional<CacheEntryMeta>& stored, int64_t changed_at_ms,
                           std::string_view config_hash);

 private:
  using Key = std::pair<std::string, std::string>;  // (connection id, principal)
  int64_t horizon_ms_;
  std::map<Key, PendingChange> pending_;
};

}  // namespace quiver
