#include "shared/preferences.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>

#include "shared/enum_names.h"
#include "shared/numbers.h"

namespace quiver {

namespace {

constexpr const char* const kCapabilityTypeNames[] = {"tool", "resource", "resource_template",
                                                      "prompt"};
static_assert(std::size(kCapabilityTypeNames) == kCapabilityTypeCount);

bool row_less(const PreferenceRow& a, const PreferenceRow& b) {
  return std::tie(a.capability_type, a.capability_key) <
         std::tie(b.capability_type, b.capability_key);
}

}  // namespace

const char* capability_type_name(CapabilityType type) {
  return name_of(kCapabilityTypeNames, type, "tool");
}

std::optional<CapabilityType> parse_capability_type(std::string_view name) {
  return find_value<CapabilityType>(kCapabilityTypeNames, name);
}

CapabilityType capability_type_for(ListKind kind) { return static_cast<CapabilityType>(kind); }

std::optional<std::string> capability_key(ListKind kind, const Json& item) {
  if (!item.is_object()) return std::nullopt;
  std::optional<std::string> key = json_string(item, list_key_field(kind));
  if (!key || key->empty() || key->size() > kMaxCapabilityKeyBytes) return std::nullopt;
  return key;
}

bool PreferenceRow::operator==(const PreferenceRow& o) const {
  return resource_id == o.resource_id && capability_type == o.capability_type &&
         capability_key == o.capability_key && enabled == o.enabled &&
         first_seen_at == o.first_seen_at && last_seen_at == o.last_seen_at &&
         toggled_at == o.toggled_at && principal == o.principal;
}

LiveCapabilities live_capabilities(std::string resource_id, const Listing& listing,
                                   Principal principal) {
  LiveCapabilities live;
  live.resource_id = std::move(resource_id);
  live.principal = std::move(principal);
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
    if (row.resource_id != live.resource_id || row.principal != live.principal) continue;
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
        PreferenceRow row{live.resource_id, type,  key, policy.auto_enable_new_capabilities,
                          now_ms,           now_ms};
        row.principal = live.principal;
        out.rows_to_insert.push_back(std::move(row));
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

DisabledOverlay disabled_overlay(std::string_view resource_id, const Principal& principal,
                                 const std::vector<PreferenceRow>& rows) {
  DisabledOverlay overlay;
  for (const PreferenceRow& row : rows) {
    if (row.resource_id == resource_id && row.principal == principal && !row.enabled) {
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

PreferenceRow merge_preference(const PreferenceRow& a, const PreferenceRow& b) {
  PreferenceRow out = a;
  if (b.toggled_at > a.toggled_at) {
    out.enabled = b.enabled;
    out.toggled_at = b.toggled_at;
  } else if (b.toggled_at == a.toggled_at) {
    // The deterministic tie-break: hiding wins. Two agents that each inserted a new key (both 0)
    // agree unless their policies differ; then the capability stays hidden until someone
    // enables it, which is a newer toggle.
    out.enabled = a.enabled && b.enabled;
  }
  out.first_seen_at = std::min(a.first_seen_at, b.first_seen_at);
  out.last_seen_at = std::max(a.last_seen_at, b.last_seen_at);
  return out;
}

std::vector<PreferenceRow> merge_rows(const std::vector<PreferenceRow>& a,
                                      const std::vector<PreferenceRow>& b) {
  // Keys view the inputs' strings, which outlive the map.
  using Key = std::pair<CapabilityType, std::string_view>;
  std::map<Key, PreferenceRow> merged;
  for (const std::vector<PreferenceRow>* list : {&a, &b}) {
    for (const PreferenceRow& row : *list) {
      Key k{row.capability_type, row.capability_key};
      auto it = merged.find(k);
      if (it == merged.end()) {
        merged.emplace(k, row);
      } else {
        it->second = merge_preference(it->second, row);
      }
    }
  }
  std::vector<PreferenceRow> out;
  out.reserve(merged.size());
  for (auto& [k, row] : merged) out.push_back(std::move(row));
  std::sort(out.begin(), out.end(), row_less);
  return out;
}

std::string preference_entry_value(const PreferenceRow& row) {
  return std::string(row.enabled ? "1" : "0") + "," + std::to_string(row.toggled_at) + "," +
         std::to_string(row.first_seen_at) + "," + std::to_string(row.last_seen_at);
}

namespace {

bool parse_time(std::string_view text, int64_t* out) {
  if (text.size() > 18) return false;
  std::optional<uint64_t> v = parse_decimal_u64(text);
  if (!v) return false;
  *out = static_cast<int64_t>(*v);  // at most 18 digits: below 10^18
  return true;
}

}  // namespace

Result<PreferenceRow> parse_preference_entry(std::string_view resource_id,
                                             const Principal& principal, std::string_view field,
                                             std::string_view value) {
  auto bad = [&](const char* why) {
    return Error(ErrorCode::kInvalidReply, std::string("preference entry: ") + why);
  };
  const std::size_t colon = field.find(':');
  if (colon == std::string_view::npos) return bad("field is not <type>:<key>");
  std::optional<CapabilityType> type = parse_capability_type(field.substr(0, colon));
  if (!type) return bad("unknown capability type");
  std::string_view key = field.substr(colon + 1);
  if (key.empty() || key.size() > kMaxCapabilityKeyBytes) return bad("key is empty or too long");
  int64_t t[3] = {0, 0, 0};
  std::string_view rest = value;
  const std::size_t c0 = rest.find(',');
  if (c0 != 1 || (rest[0] != '0' && rest[0] != '1')) return bad("value does not start 0, or 1,");
  rest = rest.substr(2);
  for (int i = 0; i < 3; ++i) {
    const std::size_t comma = rest.find(',');
    if ((i < 2) == (comma == std::string_view::npos)) return bad("value is not four numbers");
    if (!parse_time(rest.substr(0, comma), &t[i])) return bad("a time is not a number");
    rest = i < 2 ? rest.substr(comma + 1) : std::string_view();
  }
  if (t[2] < t[1]) return bad("last_seen_at is before first_seen_at");
  PreferenceRow row{std::string(resource_id), *type, std::string(key), value[0] == '1', t[1], t[2]};
  row.toggled_at = t[0];
  row.principal = principal;
  return row;
}

}  // namespace quiver
