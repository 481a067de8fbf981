// The raw outcome of listing one upstream MCP server: what the MCP client session hands over
// when it has followed every page of every list, before it becomes a Manifest.
//
// It keeps the four lists apart because each can end differently: listed (possibly empty),
// absent (the server did not advertise the capability, or answered METHOD_NOT_FOUND), or failed.
// "Could not load" and "genuinely empty" stay distinct from here on. Items are the server's JSON
// objects exactly as received (unknown fields included); the manifest codec interprets them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

enum class ListKind { kTools = 0, kResources, kResourceTemplates, kPrompts };
inline constexpr int kListKindCount = 4;

// The JSON-RPC method and the result array field of each list.
const char* list_method(ListKind kind);  // "tools/list", ...
const char* list_result_field(
    ListKind kind);                         // "tools", "resources", "resourceTemplates", "prompts"
const char* list_kind_name(ListKind kind);  // "tools", "resources", "resource_templates", "prompts"
// The field that keys a definition of the list: "name", "uri", "uriTemplate", "name".
const char* list_key_field(ListKind kind);

enum class ListState {
  kNotListed = 0,  // not attempted (yet)
  kOk,             // every page arrived; `items` is the whole list (may be empty)
  kAbsent,         // the server has none: capability not advertised, or METHOD_NOT_FOUND
  kFailed,         // could not load: `error` says why; `items` holds the pages that did arrive
};

const char* list_state_name(ListState state);  // "not_listed", "ok", "absent", "failed"

// MCP 2026-07-28 cache hints, combined over pages: the shortest ttlMs wins, one private page
// makes the whole list private.
struct CacheHints {
  std::optional<int64_t> ttl_ms;           // absent: the server gave no hint
  std::optional<std::string> cache_scope;  // "public" | "private"
};

struct ListOutcome {
  ListState state = ListState::kNotListed;
  std::vector<Json> items;
  int pages = 0;
  std::optional<Error> error;
  CacheHints hints;
};

struct Listing {
  std::string protocol_version;               // negotiated, e.g. "2025-11-25"
  Json server_info = Json::object();          // initialize result's serverInfo, as sent
  Json server_capabilities = Json::object();  // initialize result's capabilities, as sent
  std::optional<std::string> instructions;
  ListOutcome lists[kListKindCount];
  int64_t started_at_ms = 0;
  int64_t finished_at_ms = 0;

  ListOutcome& list(ListKind k) { return lists[static_cast<int>(k)]; }
  const ListOutcome& list(ListKind k) const { return lists[static_cast<int>(k)]; }
};

}  // namespace quiver
