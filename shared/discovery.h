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
//   authorization_required  the last refresh failed with AUTHORIZATION_REQUIRED: an OAuth
//            connection this principal has not connected (or whose refresh token stopped
//            working). Carries `authorize` (the path of POST /v1/mcp-connections/{id}/authorize)
//            and `error`; the last good data, if any, is still served (as stale/expired would be);
//            nothing is queued (a listing fails the same way until someone authorizes, and
//            completing the authorization lists at once).
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
// `_meta["quiver/kept"]` {listed_at, error}. A list the server has none of (absent) is left out.
// `ttlMs` is the time left until the entry turns stale (0 when stale); `cacheScope` is always
// "private": the answer depends on the caller's grants and preferences even when the data is the
// `shared` principal's.
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
//
// This header is an umbrella kept so that existing includes keep working; each concept has its own
// header. Include the one you need in new code:
//   shared/discovery_snapshot.h        the snapshot model and `read_snapshot`
//   shared/discovery_classification.h  entry statuses, cache_entry_meta, revalidations
//   shared/discovery_render.h          the views, ETag and Cache-Control, search candidates
//   shared/http_validators.h           ETags, If-None-Match, JSON text
#pragma once

#include "shared/discovery_classification.h"
#include "shared/discovery_render.h"
#include "shared/discovery_snapshot.h"
#include "shared/http_validators.h"
