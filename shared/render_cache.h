// RenderCache: the expensive, content-determined part of a discovery answer, kept between
// requests.
//
// Rendering one servable entry (shared/discovery.h) is mostly three steps that depend only on the
// stored manifest text, the disabled set and the view: parsing the manifest JSON, hiding the
// disabled capabilities, and serializing the result (measured: ~80% of an answer's CPU on an
// 8 KB manifest). This cache keeps that serialized payload per (connection, principal, content,
// disabled set, view, parse limit), so a repeated read only classifies the entry and splices the
// clock-dependent fields (`age_ms`, `ttlMs`, statuses) around the cached bytes. It never holds a
// status, an age or anything else that depends on the clock: those are rendered per request.
//
// Exactness. The key names the manifest by its content id (the stored `etag`, the writer's hash of
// the manifest) and the disabled set by a digest of its sorted members, and an entry also keeps the
// exact manifest text and disabled set it was rendered from: `find` compares both and answers a
// miss on any difference. So a hit gives byte-for-byte what rendering would give, even if a writer
// rewrote the text under an unchanged etag.
//
// Isolation. The principal is part of the key: two principals' manifests under one connection id
// (per-member credentials) never share an entry.
//
// Bounds: least-recently-used entries are evicted beyond `max_entries` or `max_bytes` (an entry
// counts its key, the source text it keeps, the disabled members and the payload). A fragment is
// shared: one evicted while a request still uses it lives until released.
//
// Not synchronized, like SearchIndexCache. A multi-threaded host guards it: `find` and `insert`
// are virtual so that the host can derive a locking cache (native-agent does) — every other
// member is for the owner's single thread (tests, metrics under the same lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/bounded_lru.h"
#include "shared/identity.h"
#include "shared/preferences.h"

namespace quiver {

// One entry's payload in one view, as JSON text cut where the per-request `ttlMs` goes:
// the body holds parts[0], ttl, parts[1], ttl, …, parts[n] (the manifest view has one part).
//
// The MCP endpoint's lists (view "mcp-items", shared/mcp_endpoint.cpp) keep `lists` instead: per
// ListKind (shared/listing.h, in its order), the list's state and, when it is listed, each visible
// item as the endpoint exposes it (renamed for the connection), serialized on its own so that a
// page may end inside a connection; "" for an item without a name to expose (kept so that offsets
// stay the listing's).
struct RenderedFragment {
  struct ItemList {
    enum class State { kNone = 0, kListed, kFailed };  // absent or unservable / served / failed
    State state = State::kNone;
    std::vector<std::string> items;  // kListed
    std::string digest;              // kListed: names `items` (change notifications compare it)
  };
  std::vector<std::string> parts;
  std::vector<ItemList> lists;
  std::size_t bytes() const;
  // The parts joined around `ttl_ms` (decimal), appended to `out`.
  // `ttl_offsets` (optional): where each `ttl_ms` was written in `out` (discovery's clock holes).
  void append_to(std::string& out, int64_t ttl_ms,
                 std::vector<std::size_t>* ttl_offsets = nullptr) const;
};

// The key of the fragment of connection `connection_id` read under `principal`, whose manifest has
// content id `content_id`, with `disabled` hidden, in view `view` ("manifest", "mcp"), parsed under
// a `max_manifest_bytes` limit. Parts are length-delimited.
std::string render_cache_key(std::string_view connection_id, const Principal& principal,
                             std::string_view content_id, const DisabledOverlay& disabled,
                             std::string_view view, std::size_t max_manifest_bytes);

class RenderCache {
 public:
  using Stats = LruStats;
  // Per isolate (edge) or per agent: a few hundred manifests of a few KiB each, rendered twice.
  static constexpr std::size_t kDefaultEntries = 1024;
  static constexpr std::size_t kDefaultBytes = std::size_t{16} << 20;

  RenderCache(std::size_t max_entries = kDefaultEntries, std::size_t max_bytes = kDefaultBytes);
  virtual ~RenderCache();
  RenderCache(const RenderCache&) = delete;
  RenderCache& operator=(const RenderCache&) = delete;

  // The fragment under `key` rendered from exactly `source` with exactly `disabled` hidden (now
  // the most recently used), or nullptr.
  virtual std::shared_ptr<const RenderedFragment> find(std::string_view key,
                                                       std::string_view source,
                                                       const DisabledOverlay& disabled);
  // Adds or replaces `key`, then evicts the least recently used until within both bounds. An entry
  // larger than max_bytes on its own is not kept (returns false).
  virtual bool insert(std::string key, std::string source, DisabledOverlay disabled,
                      std::shared_ptr<const RenderedFragment> fragment);

  void clear() { lru_.clear(); }
  std::size_t size() const { return lru_.size(); }
  std::size_t bytes() const { return lru_.bytes(); }
  const Stats& stats() const { return lru_.stats(); }

 private:
  struct Entry {
    std::string source;
    DisabledOverlay disabled;
    std::shared_ptr<const RenderedFragment> fragment;
  };
  BoundedLru<Entry> lru_;
};

}  // namespace quiver
