#include "shared/change_trigger.h"

#include <algorithm>
#include <cstddef>

#include "shared/enum_names.h"

namespace quiver {

namespace {

constexpr const char* const kTriggerNames[] = {"list_changed", "webhook", "evidence", "config"};
static_assert(covers_enum(kTriggerNames, ChangeTrigger::kConfig));

constexpr const char* const kDecisionNames[] = {"none", "wait", "done", "dropped", "give_up"};
static_assert(covers_enum(kDecisionNames, FollowupDecision::kGiveUp));

// What a look at a follow-up means, one row per FollowupCheck (in enum order): whether the
// change needs no more looking after (for the change looked at), and whether that is a dropped
// request the host reports.
struct CheckRow {
  FollowupCheck check;
  bool finishes;
  bool dropped;
};
constexpr CheckRow kChecks[] = {
    {FollowupCheck::kConnectionRemoved, true, false},
    {FollowupCheck::kStoredAfterChange, true, false},
    {FollowupCheck::kStoreFailed, false, false},
    {FollowupCheck::kRefreshed, true, false},
    {FollowupCheck::kRefreshInProgress, false, false},
    {FollowupCheck::kCannotRun, true, true},
};
static_assert(sizeof kChecks / sizeof kChecks[0] ==
                  static_cast<std::size_t>(FollowupCheck::kCannotRun) + 1,
              "one row per FollowupCheck, in enum order");

}  // namespace

const char* change_trigger_name(ChangeTrigger trigger) {
  return name_of(kTriggerNames, trigger, "unknown");
}

std::optional<ChangeTrigger> change_trigger_from_reason(std::string_view reason) {
  return find_value<ChangeTrigger>(kTriggerNames, reason);
}

const char* followup_decision_name(FollowupDecision decision) {
  return name_of(kDecisionNames, decision, "unknown");
}

FollowupDecision ChangeFollowups::on_trigger(const std::string& connection_id,
                                             const Principal& principal, ChangeTrigger trigger,
                                             int64_t changed_at_ms, QueueAnswer answer,
                                             int64_t now_ms) {
  if (answer == QueueAnswer::kQueued) return FollowupDecision::kNone;
  Key key{connection_id, principal.str()};
  auto it = pending_.find(key);
  if (it != pending_.end()) {
    // An older pending change: a listing after the newer one satisfies both.
    it->second.changed_at_ms = std::max(it->second.changed_at_ms, changed_at_ms);
    it->second.give_up_at_ms = now_ms + horizon_ms_;
    return FollowupDecision::kWait;
  }
  pending_.emplace(
      key, PendingChange{connection_id, principal, trigger, changed_at_ms, now_ms + horizon_ms_});
  return FollowupDecision::kWait;
}

std::vector<PendingChange> ChangeFollowups::pending() const {
  std::vector<PendingChange> out;
  out.reserve(pending_.size());
  for (const auto& entry : pending_) out.push_back(entry.second);
  return out;
}

FollowupDecision ChangeFollowups::on_checked(const PendingChange& checked, FollowupCheck check,
                                             int64_t now_ms) {
  const CheckRow& row = kChecks[static_cast<int>(check)];
  auto it = pending_.find(Key{checked.connection_id, checked.principal.str()});
  if (it == pending_.end())
    return row.dropped ? FollowupDecision::kDropped : FollowupDecision::kNone;
  if (row.finishes) {
    const bool newer_change = it->second.changed_at_ms > checked.changed_at_ms;
    if (!newer_change) pending_.erase(it);
    if (row.dropped) return FollowupDecision::kDropped;
    return newer_change ? FollowupDecision::kWait : FollowupDecision::kDone;
  }
  if (now_ms >= it->second.give_up_at_ms) {
    pending_.erase(it);
    return FollowupDecision::kGiveUp;
  }
  return FollowupDecision::kWait;
}

bool ChangeFollowups::satisfied_by(const std::optional<CacheEntryMeta>& stored,
                                   int64_t changed_at_ms, std::string_view config_hash) {
  return stored && stored->has_data && stored->fetched_at_ms >= changed_at_ms &&
         stored->config_hash == config_hash;
}

}  // namespace quiver
