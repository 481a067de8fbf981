// The preference authority on Redis: one (connection, principal)'s rows merged into
// `quiver:{ns}:prefs:<cid>:<principal>` and its disabled overlay rebuilt, in one script
// (schema/lua/preferences_merge.lua).
//
// Why one authority: several agents share a namespace, and each keeps its own SQLite copy of the
// preferences. Publishing each copy's disabled set made the last agent to start win (a tool hidden
// through agent A came back when agent B restarted), and a key listed by A could not be toggled
// through B. Now every agent merges its rows into the store's hash with merge_preference()
// (last-writer-wins on toggled_at, ties hide) and reads the merged rows back, so any agent answers
// for every key of the namespace and none can undo a newer toggle. Each agent's local copy stays
// durable: a Redis that restarts empty is refilled by the next merge of any agent (start-up, every
// maintenance pass), overlays included.
//
// When to call what: `merge_preferences_command(keys, cid, principal, rows)` with the rows to push
// (none: only read the merged rows back and repair the overlay); `parse_merge_preferences_reply`
// with its reply. Sans-I/O like every other script of the core.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/identity.h"
#include "shared/lease.h"  // RedisCommand
#include "shared/preferences.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

// EVAL preferences_merge.lua for (cid, principal). Rows of another connection or principal, and
// keys that cannot be a preference (empty, over kMaxCapabilityKeyBytes), are kInvalidArgument.
Result<RedisCommand> merge_preferences_command(const RedisKeys& keys, std::string_view cid,
                                               const Principal& principal,
                                               const std::vector<PreferenceRow>& rows);

// The merged rows in the script's reply. kStoreUnavailable for an error reply; kInvalidReply for a
// reply of another shape or a malformed row.
Result<MergedPreferences> parse_merge_preferences_reply(const RespValue& reply,
                                                        std::string_view cid,
                                                        const Principal& principal);

}  // namespace quiver
