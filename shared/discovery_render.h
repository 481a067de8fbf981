// Rendering discovery answers from a snapshot: the `manifest` and `mcp` views, the weak ETag and
// Cache-Control, the disabled capabilities hidden, and the tools a search may return. The views
// and the caching rules are described in shared/discovery.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/discovery_classification.h"
#include "shared/discovery_snapshot.h"
#include "shared/freshness.h"
#include "shared/json.h"
#include "shared/preferences.h"
#include "shared/principal.h"
#include "shared/status.h"

namespace quiver {

// ---- Rendering ---------------------------------------------------------------------------------

enum class DiscoveryView { kManifest = 0, kMcp };
const char* discovery_view_name(DiscoveryView view);  // "manifest", "mcp"
std::optional<DiscoveryView> discovery_view_from_name(std::string_view name);

class RenderCache;        // shared/render_cache.h
struct RenderedFragment;  // shared/render_cache.h

struct RenderOptions {
  DiscoveryView view = DiscoveryView::kManifest;
  int64_t max_cache_age_s = 30;                           // the Cache-Control max-age cap
  std::size_t max_manifest_bytes = std::size_t{1} << 20;  // a larger stored manifest is unreadable
  // Keeps each servable entry's parsed, filtered and serialized payload between requests (not
  // owned; nullptr: render every time). The answer is byte-for-byte the same either way.
  RenderCache* cache = nullptr;
  // Per request. The ETag is derived from the inputs, before the body: when it matches
  // `if_none_match` (an If-None-Match header value), or `omit_body` is set (HEAD), the body is not
  // rendered at all (`RenderedDiscovery::body` stays empty); headers, revalidations and stats are.
  std::string if_none_match;
  bool omit_body = false;
  // Per request: also record where the body's clock fields are (RenderedDiscovery::clock), so
  // that the same answer can be given again at a later `now` by splice_rendered() instead of
  // rendered again. Only render_manifests and render_connection_manifest record; a body not
  // rendered (HEAD, 304) records nothing.
  bool record_clock = false;
};

struct DiscoveryStats {
  int fresh = 0, stale = 0, pending = 0, error = 0, expired = 0, authorization_required = 0;
  bool operator==(const DiscoveryStats& o) const;
};

// Where a rendered body depends on the clock, and until when nothing else in it does
// (RenderOptions::record_clock). A body of an unchanged snapshot differs from one rendered at
// another `now` only in these numbers (shared/discovery.cpp):
//   kAge  an entry's `age_ms`        = max(0, now - base)   (base: its fetched_at)
//   kTtl  a fresh entry's mcp `ttlMs` = max(0, base - now)   (base: its fresh_until)
// and in Cache-Control's max-age. Everything else (statuses, `refresh`, the revalidations, the
// ETag, the stats) changes only when an entry's classification does: at its fresh_until,
// refresh_at or expires_at. `valid_until` is the first of those after the render (a clock-skewed
// entry, whose fresh_until is the render's now, makes the window empty).
struct ClockHole {
  enum class Kind { kAge = 0, kTtl };
  std::size_t offset = 0;  // into the body, of the decimal digits
  std::size_t length = 0;  // of the digits as rendered
  Kind kind = Kind::kAge;
  int64_t base = 0;
};
struct ClockTemplate {
  int64_t rendered_at = 0;
  int64_t valid_until = 0;       // splice_rendered answers for now in [rendered_at, valid_until)
  std::vector<ClockHole> holes;  // ascending, not overlapping
  // max-age: 0 when an entry shown is not fresh, else min(cap, (min_fresh_until - now) / 1000).
  bool all_fresh = true;
  int64_t min_fresh_until = std::numeric_limits<int64_t>::max();
  int64_t max_cache_age_s = 0;  // the cap
};

struct RenderedDiscovery {
  std::string body;           // JSON; empty when not_modified or RenderOptions::omit_body
  bool not_modified = false;  // the ETag matched RenderOptions::if_none_match: answer 304
  std::string etag;           // weak: W/"sha256-<base64url>"
  std::string cache_control;  // "private, max-age=<n>"
  int64_t max_age_s = 0;
  std::vector<Revalidation> revalidations;  // to queue in the background
  DiscoveryStats stats;
  // RenderOptions::record_clock, and the body was rendered: where its clock fields are. Unset
  // when the renderer could not find one of them where it expected it (then nothing is spliced).
  std::optional<ClockTemplate> clock;
};

// `rendered` (with its clock recorded) as rendering the same snapshot again at `now_ms` would
// give it, byte for byte: its body with every clock hole recomputed (none when `with_body` is
// false: HEAD, 304) and its Cache-Control; the ETag, revalidations and stats as they are. nullopt
// outside the template's window [rendered_at, valid_until) or without a clock template: render.
std::optional<RenderedDiscovery> splice_rendered(const RenderedDiscovery& rendered, int64_t now_ms,
                                                 bool with_body = true);

// `GET /v1/manifests`: {"principal", "connections": [entry...], "next_after"?}. Never fails:
// entries that cannot be read are rendered with status `error`.
RenderedDiscovery render_manifests(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                                   int64_t now_ms, const RenderOptions& options = {});

// `GET /v1/mcp-connections/{id}/manifest`: the entry of `id` alone. kNotFound when `id` is not in
// the snapshot or was removed: indistinguishable, by design.
Result<RenderedDiscovery> render_connection_manifest(const DiscoverySnapshot& snapshot,
                                                     std::string_view id,
                                                     const FreshnessPolicy& policy, int64_t now_ms,
                                                     const RenderOptions& options = {});

// `GET /v1/mcp-connections`: {"principal", "connections": [entry...], "next_after"?}, each entry
// the metadata `render_manifests` shows (status, times, error, refresh) without the manifest, plus
// per list its state and, for a list that loaded, its visible item count (`lists`, `counts`): a
// list that could not be loaded never reads as 0 items. Built once from the snapshot.
struct ConnectionList {
  Json body;
  std::vector<Revalidation> revalidations;  // as render_manifests would queue them
  DiscoveryStats stats;
};
ConnectionList connection_list(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                               int64_t now_ms, const RenderOptions& options = {});

// The manifest JSON without the capabilities `disabled` hides: items of `tools`, `resources`,
// `resource_templates` (or `resourceTemplates`) and `prompts` (each a bare array or a list object
// with `items` and `hashes`), and the hashes of hidden keys. Everything else is kept verbatim.
Json hide_disabled(Json manifest, const DisabledOverlay& disabled);

// The visible items of one kind of a (filtered) manifest that can be served as an MCP list: a
// bare array, or a list object whose `state` is "ok" (or absent). nullopt otherwise.
std::optional<std::vector<Json>> listed_items(const Json& manifest, ListKind kind);

// ---- Search candidates -------------------------------------------------------------------------

// A tool the caller may see and call: from a fresh or stale entry, not disabled.
struct ToolCandidate {
  std::string connection_id;
  std::string connection_name;
  EntryStatus status = EntryStatus::kFresh;
  Json tool;  // the MCP Tool object as listed
};

struct SearchCorpus {
  std::optional<Principal> member;  // the caller
  // Changes whenever the set of candidates can: the caller, and per servable connection its id,
  // principal, manifest content hash and disabled set. A search index may be cached under it.
  std::string version;
  std::vector<ToolCandidate> tools;  // connections in id order, tools in listing order
  std::vector<std::pair<std::string, EntryStatus>> unavailable;  // granted, nothing servable
  std::vector<Revalidation> revalidations;  // as render_manifests would queue them
};

SearchCorpus search_corpus(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                           int64_t now_ms, const RenderOptions& options = {});

// ---- Serving lists (the MCP endpoint, shared/mcp_endpoint.h) -----------------------------------

// One granted connection as the MCP endpoint serves it: its status, and when servable (fresh,
// stale, or authorization_required with data) its manifest with the disabled capabilities hidden,
// or (with a FragmentRenderer) the fragment rendered from that manifest.
struct VisibleConnection {
  std::string id;
  EntryStatus status = EntryStatus::kPending;
  std::optional<Principal> principal;  // applicable_principal; nullopt for an unknown mode
  bool servable = false;
  Json manifest;  // servable, no renderer: the filtered manifest (listed_items reads it)
  std::shared_ptr<const RenderedFragment> fragment;  // servable, with a renderer
  int64_t ttl_ms = 0;  // servable and fresh: ms until it turns stale; else 0
};

struct VisibleConnections {
  std::vector<VisibleConnection> connections;  // by id; removed connections left out
  std::vector<Revalidation> revalidations;     // as render_manifests would queue them
  DiscoveryStats stats;
};

// A payload a host renders from a servable entry and keeps in RenderOptions::cache under its own
// `view` name (the MCP endpoint's exposed item lists, view "mcp-items"): `render` gets the
// connection id and the manifest with the disabled capabilities hidden, and must depend on
// nothing else (the cache key is the connection, principal, content id, disabled set and view).
struct FragmentRenderer {
  std::string view;
  std::function<std::shared_ptr<const RenderedFragment>(std::string_view connection_id,
                                                        const Json& filtered_manifest)>
      render;
};

// Every granted connection of `snapshot`, classified exactly as render_manifests classifies it.
// With `renderer`, each servable connection carries its fragment instead of its manifest: from
// the render cache when it holds one for this exact text and disabled set (nothing is parsed),
// else rendered now (and kept).
VisibleConnections visible_connections(const DiscoverySnapshot& snapshot,
                                       const FreshnessPolicy& policy, int64_t now_ms,
                                       const RenderOptions& options = {},
                                       const FragmentRenderer* renderer = nullptr);

}  // namespace quiver
