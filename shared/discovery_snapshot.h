// The discovery snapshot: what one member may see of the cache, read in one step by the host
// (Redis: shared/discovery_redis.h; other stores: `read_snapshot` over a `SnapshotSource`) and
// rendered by shared/discovery_render.h. The flow and the isolation rules: shared/discovery.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/connection_record.h"
#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/json.h"
#include "shared/preferences.h"
#include "shared/status.h"

namespace quiver {

// ---- The snapshot ------------------------------------------------------------------------------

// The manifest of one (connection, principal) as discovery reads it: the fields of
// `manifest:<cid>:<principal>` that classification and rendering use (schema/redis-keys.md), and
// the mark of a refresh webhook (invalidated:<cid>:<principal>). Redis readers decode the hash
// with manifest_entry_from_fields; other stores fill it from their columns. A field the store does
// not hold is empty or nullopt.
struct ManifestEntry {
  std::string text;  // the manifest's canonical JSON; empty: no data, or a body not fetched yet
  // The SHA-256 (hex) of a body stored apart (RedisKeys::body, schema/redis-keys.md): the entry
  // has data; `text` is empty until the reader fetched it (fill_bodies, shared/discovery_redis.h).
  // A servable entry whose body could not be fetched renders as a store failure of that entry
  // and is revalidated (never as an empty manifest). Empty: the body, if any, is `text`.
  std::string body_digest;
  std::optional<std::string> etag;  // the content hash the writer stored
  std::string config_hash;          // the config the data was listed under
  std::optional<int64_t> fetched_at_ms;
  std::optional<int64_t> fresh_until_ms;
  CacheScope cache_scope = CacheScope::kUnspecified;
  bool truncated = false;
  std::string error_code;  // empty: no failure recorded since the last good commit
  std::string error_message;
  std::optional<int64_t> error_at_ms;
  std::optional<int64_t> attempt_at_ms;
  std::optional<int64_t> invalidated_at_ms;
  // Why the stored entry cannot be read (a field of the hash that is not what its writer writes):
  // cache_entry_meta fails with it, so the entry shows as unreadable. Empty: readable.
  std::string unreadable;

  // Data is stored: inline, fetched, or by reference still to fetch.
  bool has_body() const { return !text.empty() || !body_digest.empty(); }
  // Data stored apart that is not here (yet).
  bool body_missing() const { return text.empty() && !body_digest.empty(); }
  // Compares content: where a store keeps the body (`body_digest`) is not part of it.
  bool operator==(const ManifestEntry& o) const;
};

// The entry in a manifest hash's fields (HGETALL, with the invalidation mark added as
// redis_field::kInvalidatedAt). nullopt when the hash is empty (nothing cached). Unknown fields
// are ignored; a time field that is not a decimal integer, or a `body` that is not a SHA-256 in
// hex, makes the entry `unreadable`. The body is `manifest` (inline, the layout before bodies were
// stored apart) or named by `body` (body_digest; the text is fetched apart).
std::optional<ManifestEntry> manifest_entry_from_fields(const HashFields& fields);

// The principal whose manifest `member` sees on a connection with `record`: `shared` in shared
// mode, the member itself in per-member mode; kInvalidArgument for an unknown mode or when
// `member` is not a member principal. THE one derivation: every reader goes through it.
Result<Principal> applicable_principal(const ConnectionRecord& record, const Principal& member);

// One granted connection, as read.
struct GrantedConnection {
  std::string id;
  std::optional<ConnectionRecord> record;  // nullopt: removed; the entry is never shown
  // applicable_principal(record, member); nullopt without a record or with an unknown mode.
  std::optional<Principal> principal;
  std::optional<ManifestEntry> manifest;  // the manifest of `principal`; nullopt: no entry
  // The overlay of `principal` (disabled:<cid>:<principal>); empty: none.
  DisabledOverlay disabled;
  bool lease_held = false;  // a refresh of (id, principal) is under way

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
  // What the read checked, for a later conditional read (shared/discovery_redis.h): the namespace
  // record, the member's version and each entry's connection version, in entry order ("" for a
  // version never written). Empty when the store has none (SQLite: it is read in place).
  std::string namespace_record;
  // The key layout record a read in rounds went by (shared/discovery_spread.h; "" when absent),
  // compared again by its conditional read. Empty for the one-script read, which checks it in
  // Redis.
  std::string layout_record;
  std::string member_version;
  std::vector<std::string> connection_versions;

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
  virtual Result<std::optional<ConnectionRecord>> record(std::string_view cid) = 0;
  virtual Result<std::optional<ManifestEntry>> manifest(std::string_view cid,
                                                        const Principal& principal) = 0;
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

}  // namespace quiver
