// Capability preferences (Coffer ADR-004): the user's enabled/disabled choice per capability of a
// connection, the only capability state that is persisted.
//
// A row is keyed by (resource_id = connection id, principal, capability_type, capability_key),
// where the key is the capability's stable identity: a tool's or prompt's `name`, a resource's
// `uri`, a resource template's `uriTemplate`. The principal is the one whose listing fed the row
// (`principal_for`): `shared` on a shared connection, `member/<id>` on a per-member one, so one
// member's capabilities, choices and overlay never reach another member. Rows outlive the
// capabilities they name, so a user's choice survives an upstream that drops a tool and brings it
// back.
//
// One authority per namespace. The store (Redis, or the embedded SQLite file) holds the rows every
// agent and edge go by; each agent also keeps a durable copy in its own SQLite file. The two are
// combined by `merge_preference`, a last-writer-wins merge on `toggled_at` (a tie goes to
// disabled), so no agent can undo a newer toggle made through another one by restarting or
// re-publishing, and a store that comes back empty is refilled from any agent's copy.
//
// When to call what:
//  - after a listing, `live_capabilities(connection_id, listing)` then `reconcile(...)`, and write
//    the result in one transaction (schema/sqlite-queries.sql: preferences_insert_seen,
//    preferences_touch). Reconciliation only ever inserts new keys (enabled per the connection's
//    `auto_enable_new_capabilities` policy) and moves `last_seen_at`; it never deletes a row and
//    never changes `enabled`. It uses only the lists that SUCCEEDED: a failed, absent or
//    not-attempted list is not evidence that its capabilities are still there, so it must not
//    move their `last_seen_at` (a failed `prompts/list` leaves every prompt row as it was).
//  - to publish the choice, `disabled_overlay(connection_id, principal, rows)` gives the members
//    of the principal's disabled set (`quiver:{ns}:disabled:<cid>:<principal>`, members
//    `<type>:<key>`).
//  - to combine the store's rows with a local copy, `merge_preference` per key (`merge_rows` for
//    whole lists); `preference_entry_value` / `parse_preference_entry` are the store's spelling
//    of a row (`quiver:{ns}:prefs:<cid>:<principal>`, schema/lua/preferences_merge.lua).
//  - to serve, `visible(overlay, type, key)` / `visible_items(overlay, kind, items)` hide what the
//    user disabled.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/identity.h"
#include "shared/json.h"
#include "shared/listing.h"
#include "shared/status.h"

namespace quiver {

// The order matches ListKind: capability_type_for(ListKind::kPrompts) == CapabilityType::kPrompt.
enum class CapabilityType { kTool = 0, kResource, kResourceTemplate, kPrompt };
inline constexpr int kCapabilityTypeCount = 4;

// "tool", "resource", "resource_template", "prompt": the spelling in SQL rows and overlay members.
const char* capability_type_name(CapabilityType type);
std::optional<CapabilityType> parse_capability_type(std::string_view name);
CapabilityType capability_type_for(ListKind kind);

// Keys longer than this (bytes) are not given a preference row (the SQL CHECK agrees): such a
// capability is served but cannot be toggled.
inline constexpr std::size_t kMaxCapabilityKeyBytes = 2048;

// The key of one listed item: `name` (tool, prompt), `uri` (resource), `uriTemplate` (resource
// template). nullopt when the field is absent, not a string, empty or over kMaxCapabilityKeyBytes.
std::optional<std::string> capability_key(ListKind kind, const Json& item);

struct PreferenceRow {
  std::string resource_id;  // the connection id
  CapabilityType capability_type = CapabilityType::kTool;
  std::string capability_key;
  bool enabled = true;
  int64_t first_seen_at = 0;  // ms since the epoch
  int64_t last_seen_at = 0;
  // When a user last set `enabled` (ms since the epoch); 0: never, `enabled` is the connection's
  // auto_enable policy at first sight (or a choice made before schema v3, which had no time).
  int64_t toggled_at = 0;
  Principal principal = Principal::shared();  // whose listing and choice this row is

  bool operator==(const PreferenceRow& o) const;
  bool operator!=(const PreferenceRow& o) const { return !(*this == o); }
};

// What one listing showed about one kind of capability.
struct LiveList {
  ListState state = ListState::kNotListed;  // only kOk is used by reconcile
  std::vector<std::string> keys;            // in listing order; duplicates allowed
};

// What one listing of one connection showed, per kind (indexed by CapabilityType).
struct LiveCapabilities {
  std::string resource_id;
  Principal principal = Principal::shared();
  LiveList lists[kCapabilityTypeCount];
  int ignored_items = 0;  // items of successful lists without a usable key

  LiveList& list(CapabilityType t) { return lists[static_cast<int>(t)]; }
  const LiveList& list(CapabilityType t) const { return lists[static_cast<int>(t)]; }
};

// The keys of every list of `listing`, with each list's state carried over. Items of lists that
// did not succeed are not read (a failed list may hold some pages; they prove nothing).
LiveCapabilities live_capabilities(std::string resource_id, const Listing& listing,
                                   Principal principal = Principal::shared());

struct PreferencePolicy {
  bool auto_enable_new_capabilities = true;
};

struct Reconciliation {
  std::vector<PreferenceRow> rows_to_insert;  // new keys: first_seen_at = last_seen_at = now
  std::vector<PreferenceRow> rows_to_update;  // stored rows seen again, last_seen_at = now
  bool empty() const { return rows_to_insert.empty() && rows_to_update.empty(); }
};

// ADR-004 reconciliation, a pure function. `stored` are the connection's rows as read (rows of
// another resource_id or principal are ignored). For every kind whose list state is kOk:
//  - a key without a row gets one, enabled = policy.auto_enable_new_capabilities;
//  - a key with a row gets last_seen_at = now_ms (never moved backwards; no update when equal,
//    so reconciling the same listing twice at the same time yields nothing to do);
//  - rows whose key vanished are left alone.
// `enabled` and `first_seen_at` of a stored row are never changed. Outputs are sorted by
// (type, key).
Reconciliation reconcile(const std::vector<PreferenceRow>& stored, const LiveCapabilities& live,
                         const PreferencePolicy& policy, int64_t now_ms);

// `<type>:<key>`, e.g. "tool:search" or "resource:file:///a.txt" (split at the first colon).
std::string overlay_member(CapabilityType type, std::string_view key);

// The disabled set of one (connection, principal), as stored at
// `quiver:{ns}:disabled:<cid>:<principal>`. std::less<> so that lookups need no copy.
using DisabledOverlay = std::set<std::string, std::less<>>;

// The members for the rows of (`resource_id`, `principal`) whose `enabled` is false.
DisabledOverlay disabled_overlay(std::string_view resource_id, const Principal& principal,
                                 const std::vector<PreferenceRow>& rows);

// ---- one authority: the merge ------------------------------------------------------------------

// Two copies of one capability's row (same connection, principal, type and key) made one, the
// same whichever copy is `a`: `enabled` and `toggled_at` of the later toggle (equal times: disabled
// wins, so a tie never shows what someone hid), first_seen_at the earliest, last_seen_at the
// latest. Commutative, associative and idempotent: agents may merge in any order, any number of
// times, and converge. schema/lua/preferences_merge.lua and the SQL `preferences_merge` apply
// exactly this rule (tests hold them to it).
PreferenceRow merge_preference(const PreferenceRow& a, const PreferenceRow& b);

// `a` and `b` merged key by key (rows only in one list are kept as they are), sorted by
// (type, key). Both lists must be of one (connection, principal).
std::vector<PreferenceRow> merge_rows(const std::vector<PreferenceRow>& a,
                                      const std::vector<PreferenceRow>& b);

// What a store's merge gives back (ManifestStore::merge_preferences).
struct MergedPreferences {
  std::vector<PreferenceRow> rows;  // every row of (cid, principal) after the merge, by (type, key)
  int64_t epoch = 0;                // the namespace's epoch after the merge
  bool overlay_changed = false;     // the disabled set was rewritten (and the epoch bumped)
};

// A row as the store's preference hash holds it: field `<type>:<key>` (overlay_member), value
// `<enabled 0|1>,<toggled_at>,<first_seen_at>,<last_seen_at>` in decimal.
std::string preference_entry_value(const PreferenceRow& row);
// The inverse, for (cid, principal); kInvalidReply when the field or value is malformed.
Result<PreferenceRow> parse_preference_entry(std::string_view resource_id,
                                             const Principal& principal, std::string_view field,
                                             std::string_view value);

// False when the user disabled (type, key) on this connection.
bool visible(const DisabledOverlay& overlay, CapabilityType type, std::string_view key);

// The items of one list that the overlay does not hide, in their order. An item without a usable
// key cannot have been disabled and stays visible.
std::vector<Json> visible_items(const DisabledOverlay& overlay, ListKind kind,
                                const std::vector<Json>& items);

}  // namespace quiver
