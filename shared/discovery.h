// Discovery: what one caller may see of the manifest cache, and the discovery API's answers.
//
// Every discovery read takes three steps, the same on the edge (wasm, Redis over sockets) and in
// the agent's embedded default (native, SQLite or Redis):
//   1. The host reads a `DiscoverySnapshot` for the authenticated member: the connections granted
//      to it and, per connection, its record, the manifest hash of the principal that applies, the
//      disabled set and whether a refresh lease is held. Redis: one script, one round trip
//      (shared/discovery_redis.h). Other stores: `read_snapshot` over a `SnapshotSource`.
//   2. `render_manifests` / `render_connection_manifest` classify every entry (shared/freshness.h),
//      hide the capabilities the user disabled (shared/preferences.h), and produce the JSON body,
//      its ETag and Cache-Control, and the revalidations to queue.
//   3. The host sends the answer and queues the revalidations (in the background; Redis:
//      revalidate_enqueue.lua, at most once per key per window, never while a lease is held).
// shared/discovery_http.h strings these steps together for the HTTP endpoints.
//
// Isolation. The principal whose manifest a member sees is derived in one place,
// `applicable_principal` (principal_for on the record's credential mode): `shared` or the member
// itself, never anyone else. Readers that must derive it on their own (the Lua script does) are
// checked against it when decoded, and the renderer derives it again and refuses an entry that
// disagrees. Grants are read on every request: a connection that is not granted, or granted but
// removed (no record), never appears.
//
// Statuses of a granted connection (decided by `entry_status`, one table in discovery.cpp):
//   fresh    classified fresh: data served.
//   stale    classified stale (or clock-skewed): data served, revalidation `stale` queued.
//   expired  data under the current config but older than the maximum age: status only, no data;
//            revalidation `expired` queued.
//   pending  nothing servable yet and no failed refresh recorded for it: never listed, first
//            listing under way, or data listed under another config_hash (`pending_reason`
//            no_entry / no_data / config_changed); revalidation `miss` or `config_changed`.
//   error    nothing servable and the last refresh under the current config failed
//            (freshness' `last_refresh_failed` on a miss): "could not load", not "not loaded yet";
//            revalidation as for pending. Also a cache entry that cannot be read (revalidation
//            `corrupt`: a commit rewrites every data field) and a connection record whose
//            credential mode is unknown (no principal, so nothing is read or queued).
// Any status carries `error` {code, message, at} when the last refresh failed after the data was
// fetched. While a lease is held nothing is queued (`refresh: in_progress`); otherwise an entry
// that needs revalidation says `refresh: requested`.
//
// Views. `manifest` (default): each entry holds the stored manifest JSON (its lists' `items` and
// `hashes` without the disabled capabilities; every other field verbatim). `mcp`: each entry holds
// `mcp`, one MCP list result per listed kind keyed by method ("tools/list" → {"tools": [...],
// "ttlMs": n, "cacheScope": "private"}, as MCP 2026-07-28 shapes cacheable results), so a client
// can hand it on as if it had called the upstream. A list that could not be loaded is never an
// empty result: its method holds {"error": {code, message}} (and `partial_items` when pages
// arrived before the failure); a last good list kept after a failure carries
// `_meta["quiver/kept"]` {listed_at, error}. A list the server has none of (absent) is left out. `ttlMs` is the time left until the entry turns
// stale (0 when stale); `cacheScope` is always "private": the answer depends on the caller's
// grants and preferences even when the data is the `shared` principal's.
//
// HTTP caching. The body holds clock-dependent fields (`age_ms`, `ttlMs`), so it is never the same
// twice; the ETag is therefore a weak validator (`W/"sha256-…"`, RFC 9110 §8.8.1) over everything
// else the body says: each entry's metadata, status, its manifest's content hash and the disabled
// set that applied. If-None-Match uses weak comparison, so an unchanged answer gets a 304. A body
// hash could never match (age_ms changes every millisecond), and the validator changes whenever
// anything but those two clock fields would: a status transition (fresh → stale changes
// `status`), a refresh (`fetched_at`, `etag`), a toggled preference (`disabled`), a new page
// (`next_after`), the view. It is computed from the inputs before the body, so a 304 (or a HEAD)
// skips rendering the body; whether a servable manifest parses is part of it (an unparseable one
// is shown as `error`), so that is still checked, by the render cache or by parsing.
// Cache-Control is always `private` (per-caller data), with `max-age` = seconds until the soonest
// entry turns stale, 0 if any entry is not fresh, capped by `max_cache_age_s` (the cap bounds how
// long a client may keep showing a revoked grant or a toggled preference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/json.h"
#include "shared/preferences.h"
#include "shared/status.h"

namespace quiver {

// ---- The snapshot ------------------------------------------------------------------------------

// The non-secret connection record (`quiver:{ns}:conn:<cid>`), as far as discovery uses it.
struct ConnectionInfo {
  std::string config_hash;
  CredentialMode credential_mode = CredentialMode::kUnknown;
  std::string name;
  std::string transport;

  bool operator==(const ConnectionInfo& o) const;
};

// A hash's fields as read (HGETALL): field → value.
using HashFields = std::map<std::string, std::string, std::less<>>;

// The record of a connection hash's fields. nullopt when the hash is empty (the connection was
// removed). Unknown fields are ignored; an unknown credential_mode is kept as kUnknown.
std::optional<ConnectionInfo> connection_info_from_fields(const HashFields& fields);

// The principal whose manifest `member` sees on a connection with `record`: `shared` in shared
// mode, the member itself in per-member mode; kInvalidArgument for an unknown mode or when
// `member` is not a member principal. THE one derivation: every reader goes through it.
Result<Principal> applicable_principal(const ConnectionInfo& record, const Principal& member);

// One granted connection, as read.
struct GrantedConnection {
  std::string id;
  std::optional<ConnectionInfo> record;  // nullopt: removed; the entry is never shown
  // applicable_principal(record, member); nullopt without a record or with an unknown mode.
  std::optional<Principal> principal;
  HashFields manifest;       // the manifest hash of `principal`; empty: no entry
  DisabledOverlay disabled;  // the overlay of `principal` (disabled:<cid>:<principal>); empty: none
  bool lease_held = false;   // a refresh of (id, principal) is under way

  bool operator==(const GrantedConnection& o) const;
};

// What one read returns for one caller.
struct DiscoverySnapshot {
  explicit DiscoverySnapshot(Principal member_principal) : member(std::move(member_principal)) {}

  Principal member;                            // `member/<id>`, the caller
  std::vector<GrantedConnection> connections;  // sorted by id, each id once
  int64_t epoch = 0;                           // the store's epoch counter (edge L1 check)
  int64_t granted_total = 0;                   // ids in the grant set, before paging
  std::optional<std::string> next_after;       // more granted ids after this one (paging)
  int64_t ignored_grants = 0;                  // granted ids that are not valid connection ids

  std::vector<std::string> granted_ids() const;  // in order
  const GrantedConnection* find(std::string_view id) const;
};

// Which part of the grants a read covers.
struct SnapshotQuery {
  std::optional<std::string> only;  // one connection (its grant still checked), else all
  std::string after;                // ids sorting after this one ("": from the start)
  std::size_t limit = 200;          // at most this many connections
};
inline constexpr std::size_t kMaxSnapshotLimit = 1000;

// A store the host reads with separate lookups (the SQLite embedded default, tests). Each call
// may fail (the store is down); `read_snapshot` passes the first error on.
class SnapshotSource {
 public:
  virtual ~SnapshotSource() = default;
  virtual Result<std::vector<std::string>> granted(const Principal& member) = 0;
  virtual Result<std::optional<ConnectionInfo>> record(std::string_view cid) = 0;
  virtual Result<HashFields> manifest(std::string_view cid, const Principal& principal) = 0;
  virtual Result<DisabledOverlay> disabled(std::string_view cid, const Principal& principal) = 0;
  virtual Result<bool> lease_held(std::string_view cid, const Principal& principal) = 0;
  virtual Result<int64_t> epoch() = 0;
};

// The snapshot of `member` from `source`, with exactly the semantics of discovery_read.lua:
// granted ids sorted, invalid ones counted and skipped, paged by `query`, the manifest, lease and
// overlay read under applicable_principal (no principal: none of them is read). kInvalidArgument
// when `member` is not a member principal or the query is out of bounds.
Result<DiscoverySnapshot> read_snapshot(SnapshotSource& source, const Principal& member,
                                        const SnapshotQuery& query);

// ---- Classification of one entry ---------------------------------------------------------------

enum class EntryStatus { kPending = 0, kFresh, kStale, kExpired, kError };
const char* entry_status_name(EntryStatus status);  // "pending", "fresh", ...

// The classification input of a manifest hash, per schema/redis-keys.md (`has_data` = `manifest`
// present and not empty; upstream TTL = fresh_until − fetched_at). nullopt when the hash is empty.
// kInvalidArgument when a field a reader needs is malformed (a time that is not an integer, data
// without fetched_at).
Result<std::optional<CacheEntryMeta>> cache_entry_meta(const HashFields& manifest);

// A revalidation to queue for one (connection, principal).
// A manual refresh is queued again once the gate of an earlier request is this old, so a user's
// refresh is never swallowed by a reader's gate for a whole window (every store does the same).
inline constexpr int64_t kManualRequeueAfterMs = 1'000;

struct Revalidation {
  std::string connection_id;
  Principal principal;
  std::string reason;   // "stale", "expired", "miss", "config_changed", "corrupt", "manual"
  bool manual = false;  // asked for by a user: requeued after a short interval despite the gate

  bool operator==(const Revalidation& o) const;
};

// The outcome of queuing one revalidation, at every host and store.
enum class RevalidationOutcome {
  kQueued = 0,     // a request is in the queue now
  kAlreadyQueued,  // the gate was taken within the window: one request per key per window
  kInProgress,     // a refresh lease is held: the refresh under way will serve the reader
};
// "queued", "already_queued", "in_progress"
const char* revalidation_outcome_name(RevalidationOutcome outcome);

struct RevalidationResult {
  RevalidationOutcome outcome = RevalidationOutcome::kQueued;
  std::string stream_id;  // kQueued: the stream entry's id (Redis), else ""
};

// ---- Rendering ---------------------------------------------------------------------------------

enum class DiscoveryView { kManifest = 0, kMcp };
const char* discovery_view_name(DiscoveryView view);  // "manifest", "mcp"
std::optional<DiscoveryView> discovery_view_from_name(std::string_view name);

class RenderCache;  // shared/render_cache.h

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
};

struct DiscoveryStats {
  int fresh = 0, stale = 0, pending = 0, error = 0, expired = 0;
  bool operator==(const DiscoveryStats& o) const;
};

struct RenderedDiscovery {
  std::string body;           // JSON; empty when not_modified or RenderOptions::omit_body
  bool not_modified = false;  // the ETag matched RenderOptions::if_none_match: answer 304
  std::string etag;           // weak: W/"sha256-<base64url>"
  std::string cache_control;  // "private, max-age=<n>"
  int64_t max_age_s = 0;
  std::vector<Revalidation> revalidations;  // to queue in the background
  DiscoveryStats stats;
};

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

// ---- Validators --------------------------------------------------------------------------------

// True when an If-None-Match header value matches `etag` (weak comparison, RFC 9110 §13.1.2):
// `*`, or a comma-separated list holding the same opaque tag with or without `W/`.
bool if_none_match_matches(std::string_view header_value, std::string_view etag);

// W/"sha256-<base64url of SHA-256(bytes)>" / "sha256-…" for a body that is its own validator.
std::string weak_etag(std::string_view bytes);
std::string strong_etag(std::string_view bytes);

// JSON text of `value`; invalid UTF-8 in strings (from a peer) is replaced, never thrown on.
std::string json_text(const Json& value);

}  // namespace quiver
