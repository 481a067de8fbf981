#include "shared/preferences.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace quiver {

namespace {

const char* key_field(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return "name";
    case ListKind::kResources:
      return "uri";
    case ListKind::kResourceTemplates:
      return "uriTemplate";
    case ListKind::kPrompts:
      return "name";
  }
  return "name";
}

bool row_less(const PreferenceRow& a, const PreferenceRow& b) {
  return std::tie(a.capability_type, a.capability_key) <
         std::tie(b.capability_type, b.capability_key);
}

}  // namespace

const char* capability_type_name(CapabilityType type) {
  switch (type) {
    case CapabilityType::kTool:
      return "tool";
    case CapabilityType::kResource:
      return "resource";
    case CapabilityType::kResourceTemplate:
      return "resource_template";
    case CapabilityType::kPrompt:
      return "prompt";
  }
  return "tool";
}

std::optional<CapabilityType> parse_capability_type(std::string_view name) {
  for (int i = 0; i < kCapabilityTypeCount; ++i) {
    auto t = static_cast<CapabilityType>(i);
    if (name == capability_type_name(t)) return t;
  }
  return std::nullopt;
}

CapabilityType capability_type_for(ListKind kind) { return static_cast<CapabilityType>(kind); }

std::optional<std::string> capability_key(ListKind kind, const Json& item) {
  if (!item.is_object()) return std::nullopt;
  std::optional<std::string> key = json_string(item, key_field(kind));
  if (!key || key->empty() || key->size() > kMaxCapabilityKeyBytes) return std::nullopt;
  return key;
}

bool PreferenceRow::operator==(const PreferenceRow& o) const {
  return resource_id == o.resource_id && capability_type == o.capability_type &&
         capability_key == o.capability_key && enabled == o.enabled &&
         first_seen_at == o.first_seen_at && last_seen_at == o.last_seen_at;
}

LiveCapabilities live_capabilities(std::string resource_id, const Listing& listing) {
  LiveCapabilities live;
  live.resource_id = std::move(resource_id);
  for (int i = 0; i < kListKindCount; ++i) {
    auto kind = static_cast<ListKind>(i);
    const ListOutcome& outcome = listing.list(kind);
    LiveList& out = live.list(capability_type_for(kind));
    out.state = outcome.state;
    if (outcome.state != ListState::kOk) continue;
    out.keys.reserve(outcome.items.size());
    for (const Json& item : outcome.items) {
      if (std::optional<std::string> key = capability_key(kind, item)) {
        out.keys.push_back(std::move(*key));
      } else {
        ++live.ignored_items;
      }
    }
  }
  return live;
}

Reconciliation reconcile(const std::vector<PreferenceRow>& stored, const LiveCapabilities& live,
                         const PreferencePolicy& policy, int64_t now_ms) {
  using Key = std::pair<CapabilityType, std::string_view>;
  std::map<Key, const PreferenceRow*> by_key;
  for (const PreferenceRow& row : stored) {
    if (row.resource_id != live.resource_id) continue;
    by_key.emplace(Key{row.capability_type, row.capability_key}, &row);
  }

  Reconciliation out;
  std::set<Key> handled;  // a key listed twice is reconciled once
  for (int i = 0; i < kCapabilityTypeCount; ++i) {
    auto type = static_cast<CapabilityType>(i);
    const LiveList& list = live.list(type);
    // Only a list that arrived whole says anything about which capabilities exist.
    if (list.state != ListState::kOk) continue;
    for (const std::string& key : list.keys) {
      if (key.empty() || key.size() > kMaxCapabilityKeyBytes) continue;
      Key k{type, key};
      if (!handled.insert(k).second) continue;
      auto found = by_key.find(k);
      if (found == by_key.end()) {
        out.rows_to_insert.push_back(PreferenceRow{
            live.resource_id, type, key, policy.auto_enable_new_capabilities, now_ms, now_ms});
      } else if (found->second->last_seen_at < now_ms) {
        PreferenceRow row = *found->second;
        row.last_seen_at = now_ms;
        out.rows_to_update.push_back(std::move(row));
      }
    }
  }
  std::sort(out.rows_to_insert.begin(), out.rows_to_insert.end(), row_less);
  std::sort(out.rows_to_update.begin(), out.rows_to_update.end(), row_less);
  return out;
}

std::string overlay_member(CapabilityType type, std::string_view key) {
  std::string member = capability_type_name(type);
  member += ':';
  member.append(key.data(), key.size());
  return member;
}

DisabledOverlay disabled_overlay(std::string_view resource_id,
                                 const std::vector<PreferenceRow>& rows) {
  DisabledOverlay overlay;
  for (const PreferenceRow& row : rows) {
    if (row.resource_id == resource_id && !row.enabled) {
      overlay.insert(overlay_member(row.capability_type, row.capability_key));
    }
  }
  return overlay;
}

bool visible(const DisabledOverlay& overlay, CapabilityType type, std::string_view key) {
  if (overlay.empty()) return true;
  return overlay.find(overlay_member(type, key)) == overlay.end();
}

std::vector<Json> visible_items(const DisabledOverlay& overlay, ListKind kind,
                                const std::vector<Json>& items) {
  std::vector<Json> out;
  out.reserve(items.size());
  CapabilityType type = capability_type_for(kind);
  for (const Json& item : items) {
    std::optional<std::string> key = capability_key(kind, item);
    if (key && !visible(overlay, type, *key)) continue;
    out.push_back(item);
  }
  return out;
}

}  // namespace quiver
