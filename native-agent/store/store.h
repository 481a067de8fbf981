// ManifestStore: where the agent keeps what it shares with readers — connection records, grants,
// preferences and their disabled overlays, cached manifests with their leases and fences, the
// revalidation queue and the refresh webhook's step (its replay guard included).
//
// Two implementations with identical semantics, chosen by configuration:
//   RedisStore  (native-agent/store/redis_store.h)   the team setup: the edge reads the same keys.
//   SqliteStore (native-agent/store/sqlite_store.h)  the embedded default: one SQLite file.
// A conformance suite (tests/integration/store_test.cpp) runs every behaviour against both.
//
// The refresh engine's cycle for one (connection, principal):
//   acquire_lease → list the upstream (renew_lease while it takes long) → commit_manifest, or
//   record_failure when the listing failed. Both fenced writes release the lease by default.
// Readers queue work with enqueue_revalidation (gated once per window, refused while a lease is
// held); agents consume it with read_revalidations / ack_revalidations and take over a crashed
// consumer's entries with claim_stale_revalidations. The maintenance loop reads the refresh-due
// index (list_due, settle_due) and has_due_entries for never-listed keys; config loading calls
// sync_connections then sync_grants; preference changes call merge_preferences.
//
// Errors are values. A store that cannot be reached answers kStoreUnavailable with a message that
// says so (never a crash, never a secret); the op may or may not have been applied when the reply
// was lost, and every write here is safe to repeat or to leave (the fenced ones refuse a repeat).
// Refusals that are part of the protocol (lease held, stale fence, config changed, already
// queued) are outcomes inside an ok Result, not errors. Bad arguments are kInvalidArgument.
//
// Time: data timestamps (`at` of a queued request, updated_at, fetched_at) come from the caller or
// the store's injected clock. Lease, gate and replay expiry run on the store's clock: Redis' own
// for RedisStore, the injected `now_ms` for SqliteStore (so tests expire leases deterministically).
//
// Every implementation is safe to call from several threads; see each for how.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/store/catalog.h"
#include "shared/call_relay.h"
#include "shared/connection_record.h"
#include "shared/discovery.h"
#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/layout.h"
#include "shared/lease.h"
#include "shared/oauth.h"
#include "shared/preferences.h"
#include "shared/status.h"
#include "shared/webhook_signature.h"

namespace quiver {

// Milliseconds since the Unix epoch. Stores take one in their options; tests pass a fake.
using Clock = std::function<int64_t()>;
Clock system_clock_ms();

// ---- connection records ------------------------------------------------------------------------

// The non-secret record of one configured connection is the core's ConnectionRecord
// (shared/connection_record.h).

// What sync_connections changed (ids, sorted).
struct ConnectionSync {
  std::vector<std::string> added;
  std::vector<std::string> changed;  // config_hash, credential mode, name or transport differ
  std::vector<std::string> removed;  // record, grants, overlay, manifests, leases, fences gone
  bool any() const { return !added.empty() || !changed.empty() || !removed.empty(); }
};

// Grants: member id → connection ids the member may use. sync_grants takes the complete map.
using GrantMap = std::map<std::string, std::set<std::string>>;

struct GrantSync {
  std::vector<std::string> changed_members;  // member ids whose set changed (sorted)
};

// ---- manifests ---------------------------------------------------------------------------------

// Everything stored about one cached manifest except its body (quiver:{ns}:manifest:<cid>:<p>):
// the core's ManifestEntry (shared/discovery_snapshot.h), on Redis decoded by the edge's own
// manifest_entry_from_fields, with `text` left empty (the body is StoredManifest::manifest), and
// the fields only the agent reads. A store returns only metadata the core can classify (else
// kInvalidReply with the core's reason, the entry the edge shows as unreadable).
struct ManifestMeta : ManifestEntry {
  std::string connection_id;
  Principal principal = Principal::shared();
  bool has_data = false;  // a manifest that is not empty is stored (false: an error-only record)
  int64_t fence = 0;      // of the commit that wrote the data
  int64_t expires_at_ms = 0;

  bool operator==(const ManifestMeta& o) const = delete;  // not ManifestEntry's: compare fields
};

// What classify() / decide_refresh() take (shared/freshness.h): the core's cache_entry_meta with
// the store's `has_data`.
CacheEntryMeta cache_entry_meta(const ManifestMeta& meta);

// kInvalidReply, naming `record`, unless the core can classify `meta` (cache_entry_meta).
Status check_manifest_meta(const ManifestMeta& meta, std::string_view record);

struct StoredManifest {
  ManifestMeta meta;
  std::string manifest;  // canonical JSON; empty without data
};

// One page of the maintenance walk. Start with an empty cursor; the walk is done when
// next_cursor comes back empty. A page may hold fewer than `batch` entries before the end (Redis
// SCAN), and under concurrent writes an entry may appear on two pages or, if written during the
// walk, not at all: the loop runs again in a few minutes.
struct ManifestPage {
  std::vector<ManifestMeta> metas;
  std::string next_cursor;
  // Records that exist but could not be read (corrupt fields, wrong type), described for a log
  // line: skipped rather than failing the whole walk.
  std::vector<std::string> unreadable;
};

// ---- the refresh-due index ---------------------------------------------------------------------

// Every stored manifest record has one entry in the refresh-due index, scored with when the
// maintenance loop next has work on it (epoch ms): written in the same atomic step as the record
// (the fenced commit and failure writes take FencedWriteOptions::due_at_ms), removed with it
// (drop_manifest, a removed connection). RedisStore: the ZSET quiver:{ns}:due; SqliteStore: the
// indexed column manifests.due_at. Maintenance reads only what is due, so its store time grows
// with the work due, never with the namespace.

// One due entry: the record's metadata (nullopt when the record is gone, or unreadable), and its
// score as read (what settle_due compares).
struct DueEntry {
  std::string connection_id;
  Principal principal = Principal::shared();
  int64_t due_at_ms = 0;
  std::optional<ManifestMeta> meta;
  std::string unreadable;  // not empty: the record exists but could not be read (why)
};

struct DuePage {
  std::vector<DueEntry> entries;  // soonest first
  // Index entries the page read (entries, plus members that were no valid `<cid>:<principal>`,
  // removed from the index and described in `unreadable`). Fewer than the batch: the last page.
  std::size_t listed = 0;
  std::vector<std::string> unreadable;
};

// What maintenance did with one due entry it read as `seen_due_at_ms`: moved to `due_at_ms`, or
// (nullopt) forgotten because its record is gone. Applied only while the entry still has the
// score it was read with: a fenced write that rescored it meanwhile wins.
struct DueSettlement {
  std::string connection_id;
  Principal principal = Principal::shared();
  int64_t seen_due_at_ms = 0;
  std::optional<int64_t> due_at_ms;
};

// One (connection, principal).
struct DueKey {
  std::string connection_id;
  Principal principal = Principal::shared();
};

// The one-time backfill of a namespace written before the index existed (see backfill_due_index).
struct DueBackfill {
  bool done = false;        // the index covers every record written before it existed
  std::size_t added = 0;    // entries added by this call (scored 0: due at once)
  std::size_t scanned = 0;  // records found by this call
};

// ---- revalidation queue ------------------------------------------------------------------------

// The outcome of queuing is the core's RevalidationOutcome (shared/discovery.h), the same at
// the edge.

// Longest `reason` (a short token such as "stale", "miss", "webhook").
inline constexpr std::size_t kMaxRevalidationReasonBytes = 64;

struct RevalidationRequest {
  std::string id;  // the store's id for ack (a stream id on Redis, a row id on SQLite)
  std::string connection_id;
  Principal principal = Principal::shared();
  std::string reason;
  int64_t at_ms = 0;  // when it was queued (the reader's clock)
};

struct RevalidationBatch {
  std::vector<RevalidationRequest> requests;  // in queue order
  // Entries that were not a valid request (a foreign writer, a bad id): acknowledged and removed
  // by the store, listed here so the caller can count and log them rather than lose them quietly.
  std::vector<std::string> malformed_ids;
};

// ---- the namespace record ----------------------------------------------------------------------

// Whether the store holds an initialised namespace (RedisKeys::namespace_record): a Redis that
// restarted empty (or was flushed) has lost connections, grants and overlays, and readers must
// not take that for "nothing granted". Agents restore it (begin_namespace_restore, sync, then
// mark_namespace_ready); readers refuse to serve it in between.
enum class NamespaceState { kMissing = 0, kRestoring, kReady };
const char* namespace_state_name(NamespaceState state);  // "missing", "restoring", "ready"

struct NamespaceRecord {
  NamespaceState state = NamespaceState::kMissing;
  // The record as stored (`ready:<at>`: each restore writes a new one, so an agent that sees it
  // change knows another agent restored the namespace and merges its own preference copy in).
  std::string value;
};

// What `read_layout` found (Redis only).
struct StoreLayout {
  std::string key;                    // the layout record's key
  std::optional<std::string> record;  // as stored; nullopt: no record (layout v1)
  // `call-agents` as stored (shared/layout.h parse_call_agents_mark) and how long it lives on;
  // nullopt: no agent consumes relayed calls now.
  std::optional<std::string> call_agents;
  int64_t call_agents_ttl_ms = 0;
  // The census (shared/layout.h): every agent seen within kAgentCensusWindowMs, newest first.
  std::vector<CensusEntry> census;
};

// ---- the store ---------------------------------------------------------------------------------

// One OAuth callback the edge queued for the agents.
struct OAuthCallbackEntry {
  std::string id;  // the stream entry's id
  oauth::CallbackParams params;
  int64_t at_ms = 0;  // when the edge queued it (its clock)
};
struct OAuthCallbackBatch {
  std::vector<OAuthCallbackEntry> entries;
  std::string last_id;  // read from here next ("" when the stream is empty)
};

// Calls the edge relayed (shared/call_relay.h), as one read hands them to an agent.
struct RelayedCallBatch {
  std::vector<RelayRequest> requests;  // in queue order
  // Entries that were no valid request (a foreign writer): removed from the stream, listed here
  // so the caller counts and logs them.
  std::vector<std::string> malformed_ids;
};

// A relayed call an agent answers or watches: its rid and its connection (key layout v2 keeps a
// call's reply list and cancel mark on its connection's shard; v1 names them by rid alone).
struct RelayedCallRef {
  std::string rid;
  std::string connection_id;
};

class ManifestStore {
 public:
  virtual ~ManifestStore() = default;

  // "redis://host:port/db" or "sqlite:<file>": for logs, never a password.
  virtual std::string describe() const = 0;
  // One round trip to the backend: ok, or why not (kStoreUnavailable, kUnauthenticated).
  virtual Status health() = 0;
  // The backend's own counters as Prometheus text, appended to GET /metrics (a Redis Cluster's
  // redirects and retries); "" for a backend that keeps none (SQLite, one Redis).
  virtual std::string metrics_text() const { return ""; }

  // --- the namespace record (NamespaceState) ---
  // RedisStore: quiver:{ns}:namespace. SqliteStore: always kReady (the file is the agent's own;
  // nothing else can empty it under a running agent) and the writes are no-ops.
  virtual Result<NamespaceRecord> read_namespace() = 0;
  // Marks the namespace `restoring` unless a record is there (never demotes a ready one).
  virtual Status begin_namespace_restore(int64_t now_ms) = 0;
  // Marks it `ready`, only if a record is still there: false when it vanished since
  // begin_namespace_restore (wiped again mid-restore: the caller restores again).
  virtual Result<bool> mark_namespace_ready(int64_t now_ms) = 0;
  // Whether each of these connections' and members' versions is in the store, connections first
  // (RedisStore on key layout v2: each lives in its own slot, and one shard of a Redis Cluster
  // can lose its data while the namespace record on another stays; a version is never deleted,
  // so one seen before and missing now was lost). Empty for a store that cannot lose a part
  // alone (SqliteStore, key layout v1: the namespace is one slot, its record tells).
  virtual Result<std::vector<bool>> versions_present(const std::vector<std::string>& connection_ids,
                                                     const std::vector<Principal>& members) {
    (void)connection_ids;
    (void)members;
    return std::vector<bool>{};
  }
  // Marks the namespace `restoring` even when it is ready: a part of it was lost, and the store
  // check restores it as a namespace the store lost. A no-op where no part can be lost alone.
  virtual Status demote_namespace(int64_t now_ms) {
    (void)now_ms;
    return Status::Ok();
  }
  // After a grant sync (Maintenance::sync_config): the grantee sets of granted connections that
  // still have none, lost with their connection's slot while the members' grants stayed (the sync
  // writes none of those members, and a refresh webhook checks these sets), are written again from
  // the members' stored grants. A no-op where no part can be lost alone.
  virtual Status rebuild_grantee_sets(const GrantMap& grants) {
    (void)grants;
    return Status::Ok();
  }
  // The store's own clock (Redis TIME), for the agent's clock-skew report; nullopt when the store
  // has no clock of its own (SqliteStore).
  virtual Result<std::optional<int64_t>> store_time_ms() = 0;

  // --- leases (shared/lease.h semantics: token 32–128 lowercase hex, lease_ms > 0) ---

  // acquired{lease.fence} or held{holder_remaining_ms, holder_fence}. The fence only moves when
  // the lease is granted, and always past the fence of the last committed manifest.
  virtual Result<AcquireResult> acquire_lease(std::string_view cid, const Principal& principal,
                                              std::string_view token, int64_t lease_ms) = 0;
  // kOk, or kLeaseLost when the lease expired or another holder has it.
  virtual Result<LeaseOutcome> renew_lease(std::string_view cid, const Principal& principal,
                                           const Lease& lease, int64_t lease_ms) = 0;
  virtual Result<LeaseOutcome> release_lease(std::string_view cid, const Principal& principal,
                                             const Lease& lease) = 0;

  // --- the fenced writes ---

  // Writes the manifest only if `lease` is still held, its fence is the newest and the
  // connection's config_hash is still write.config_hash; clears the recorded error, bumps the
  // epoch. Otherwise nothing is written and the outcome says why.
  virtual Result<FencedWriteResult> commit_manifest(std::string_view cid,
                                                    const Principal& principal, const Lease& lease,
                                                    const ManifestWrite& write,
                                                    const FencedWriteOptions& options) = 0;
  // Records a failed listing, fenced like a commit. The last good manifest and its config_hash
  // stay as they are; a key never listed gets an error-only record without a config_hash.
  virtual Result<FencedWriteResult> record_failure(std::string_view cid, const Principal& principal,
                                                   const Lease& lease,
                                                   const RefreshFailure& failure,
                                                   const FencedWriteOptions& options) = 0;

  // --- manifest reads ---

  virtual Result<std::optional<ManifestMeta>> read_manifest_meta(std::string_view cid,
                                                                 const Principal& principal) = 0;
  virtual Result<std::optional<StoredManifest>> read_manifest(std::string_view cid,
                                                              const Principal& principal) = 0;
  // A walk over every manifest record (see ManifestPage), O(namespace); batch >= 1. Maintenance
  // reads the refresh-due index instead (list_due).
  virtual Result<ManifestPage> list_manifest_metas(std::string_view cursor, std::size_t batch) = 0;

  // --- the refresh-due index (DueEntry) ---

  // Due entries (score <= now_ms), soonest first, skipping the first `offset`, at most `batch`
  // (>= 1), each with its record's metadata read in the same round trip.
  virtual Result<DuePage> list_due(int64_t now_ms, std::size_t offset, std::size_t batch) = 0;
  // Applies each settlement (DueSettlement) atomically per entry; true for each one applied.
  virtual Result<std::vector<bool>> settle_due(const std::vector<DueSettlement>& settlements) = 0;
  // Whether each key has an entry (a stored record), in order; one round trip.
  virtual Result<std::vector<bool>> has_due_entries(const std::vector<DueKey>& keys) = 0;
  // Records written before the index existed get an entry due at once (never replacing one a
  // write scored), about `max_keys` keys of the namespace walked per call; `done` once it all
  // was covered (a marker in the store: later calls cost one read). RedisStore: a SCAN of the
  // manifest keys, resumable across calls and agents (the cursor is kept in the marker).
  // SqliteStore: its schema migration scored every existing row 0: always done.
  virtual Result<DueBackfill> backfill_due_index(std::size_t max_keys) = 0;

  // The reader's one batched read for a member (`member/<id>`): its grants and, per granted
  // connection (paged and filtered by `query`), the record, the manifest of the principal that
  // applies, the disabled overlay and whether a refresh lease is held — shared/discovery.h's
  // DiscoverySnapshot, which the discovery core renders. RedisStore: the edge's own script
  // (schema/lua/discovery_read.lua), one round trip; SqliteStore: read_snapshot over one read
  // transaction. kInvalidArgument for a principal that is not a member or a query out of
  // bounds; kStoreUnavailable when the store cannot be reached.
  virtual Result<DiscoverySnapshot> read_discovery(const Principal& member,
                                                   const SnapshotQuery& query = {}) = 0;
  // read_discovery when the store can make it without waiting for anything (a lock held across
  // a write, a network round trip, a full pool), for a caller on an event loop; nullopt when it
  // would wait (and always for a store over the network). SqliteStore: on an idle pooled reader.
  virtual std::optional<Result<DiscoverySnapshot>> read_discovery_now(const Principal& member,
                                                                      const SnapshotQuery& query) {
    (void)member;
    (void)query;
    return std::nullopt;
  }

  // --- connection records, grants, overlays, epoch ---

  // Makes the stored records exactly `records` (the configuration). Records whose config is
  // unchanged keep their stored updated_at. Everything of a connection no longer configured goes:
  // its record, its grants, its disabled overlay, its manifests, leases, fences and revalidation
  // gates, including leftovers of a sync that was interrupted. Preferences stay (the store's rows
  // and the agents' copies): a user's choice outlives the connection. Bumps the epoch when anything
  // changed. One configuration owns a namespace: two agents with different configurations on one
  // namespace undo each other.
  virtual Result<ConnectionSync> sync_connections(const std::vector<ConnectionRecord>& records) = 0;
  virtual Result<std::vector<ConnectionRecord>> list_connections() = 0;  // sorted by id
  virtual Result<std::optional<ConnectionRecord>> read_connection(std::string_view cid) = 0;

  // Makes the stored grants exactly `grants` (a member with an empty set has none). Bumps the
  // epoch when anything changed.
  virtual Result<GrantSync> sync_grants(const GrantMap& grants) = 0;
  virtual Result<std::set<std::string>> read_grants(std::string_view member_id) = 0;

  // The namespace's preference authority (shared/preferences.h, "One authority"): merges `rows`
  // (all of (cid, principal); none: only read back) into the store's rows with
  // merge_preference, rewrites the principal's disabled overlay when the merged rows say
  // otherwise (bumping the epoch: also a wiped or stale overlay is repaired), and returns every
  // merged row of (cid, principal). Atomic: RedisStore one script
  // (schema/lua/preferences_merge.lua), SqliteStore one transaction on the preference table.
  // kInvalidArgument for a row of another (cid, principal) or a malformed one.
  virtual Result<MergedPreferences> merge_preferences(std::string_view cid,
                                                      const Principal& principal,
                                                      const std::vector<PreferenceRow>& rows) = 0;
  // The principal's disabled overlay as published (what discovery hides).
  virtual Result<DisabledOverlay> read_disabled(std::string_view cid,
                                                const Principal& principal) = 0;

  // The namespace's change counter: every commit, grant change and preference change moves it
  // (readers that poll for change read it: the MCP notifier). Key layout v2 has none (versions
  // per connection and per member replace it: a namespace-wide key would pin every write to one
  // slot): has_epoch() false, and both calls fail kStoreUnavailable saying so.
  virtual bool has_epoch() const { return true; }
  virtual Result<int64_t> bump_epoch() = 0;  // the new value
  virtual Result<int64_t> read_epoch() = 0;  // 0 before the first bump
  // For a reader that polls a store without an epoch: whether `held`, a page read_discovery
  // returned, is what it would return now, the freshness classes aside (the reader recomputes
  // those at its own `now`, as for any copy it keeps) — true when every version it was read at
  // (the layout and namespace records, its member's and each of its connections' versions) is
  // unchanged; false when one moved, and when the store cannot tell that cheaply (read again).
  // RedisStore on key layout v2: the versions the edge's conditional read asks
  // (shared/discovery_spread.h), G + 1 GETs in one spread round, where a read is two rounds of
  // scripts and the bodies; every other store: false (they have the epoch).
  virtual Result<bool> discovery_unchanged(const DiscoverySnapshot& held) {
    (void)held;
    return false;
  }

  // Makes one member's stored grants (the set readers check, RedisKeys grants:member/<id>)
  // exactly `cids`, and the reverse sets (grantees) with it; bumps the epoch when anything
  // changed. True when something changed. The cost grows with the member's old and new grants,
  // never with the number of members: the admin API's per-member grant changes go here.
  virtual Result<bool> set_member_grants(std::string_view member_id,
                                         const std::set<std::string>& cids) = 0;
  // The members granted connection `cid` (ids, sorted): the grantees a per-member connection is
  // listed for.
  virtual Result<std::set<std::string>> read_grantees(std::string_view cid) = 0;

  // --- the runtime catalog and the audit log (native-agent/store/catalog.h) ---

  // Writes `entry` (a tombstone when its value is nullopt). kAlways: unconditionally; kFileSeed:
  // only when catalog_seed_applies(stored, entry.meta.file_hash, entry.meta.rev_ms), read and
  // written atomically. An applied write bumps the kind's version. kInvalidArgument for a key
  // that is not valid for its kind (a member id, a connection id, "*" for grants only) or a
  // value over kMaxCatalogValueBytes.
  virtual Result<CatalogWriteResult> catalog_write(const CatalogEntry& entry,
                                                   CatalogWriteMode mode) = 0;
  virtual Result<std::optional<CatalogEntry>> catalog_read(CatalogKind kind,
                                                           std::string_view key) = 0;
  // Entries of `kind` in key order, from just after `cursor` ("" from the start), at most `limit`
  // (>= 1). The cost of a page does not grow with the number of entries.
  virtual Result<CatalogPage> catalog_list(CatalogKind kind, std::string_view cursor,
                                           std::size_t limit) = 0;
  virtual Result<CatalogVersions> catalog_versions() = 0;
  // Appends one line (its id and at_ms given by the store when empty / 0); the log is bounded
  // (the oldest lines go first past kMaxAuditEntries).
  virtual Status append_audit(const AuditEntry& entry) = 0;
  // Newest first, from just before `cursor` ("" from the newest), at most `limit` (>= 1).
  virtual Result<AuditPage> read_audit(std::string_view cursor, std::size_t limit) = 0;

  // --- revalidation queue ---

  // What a reader does for a stale or missing manifest: kInProgress while a lease is held, else
  // take the gate for `window_ms` (kAlreadyQueued if it is taken), else queue a request with the
  // store's clock as `at`. A request queued but never consumed is re-armed by the next stale
  // read once the gate expires.
  virtual Result<RevalidationOutcome> enqueue_revalidation(std::string_view cid,
                                                           const Principal& principal,
                                                           std::string_view reason,
                                                           int64_t window_ms) = 0;
  // A principal the connection is no longer cached under (a member whose grant was removed, a
  // principal of the other credential mode): its manifest and revalidation gate go, the fence
  // stays (fencing stays monotonic should it come back). True when a manifest was there.
  virtual Result<bool> drop_manifest(std::string_view cid, const Principal& principal) = 0;
  // Up to `max` requests no consumer has received yet, now delivered to `consumer` (pending until
  // acknowledged). Waits up to `block_ms` for one when there are none (0: answer at once).
  virtual Result<RevalidationBatch> read_revalidations(std::string_view consumer, std::size_t max,
                                                       int64_t block_ms) = 0;
  // Done with these (handled or deliberately skipped); unknown ids are ignored.
  virtual Status ack_revalidations(const std::vector<std::string>& ids) = 0;
  // Up to `max` requests delivered to any consumer at least `min_idle_ms` ago and not
  // acknowledged (its consumer crashed or hangs), now delivered to `consumer`.
  virtual Result<RevalidationBatch> claim_stale_revalidations(std::string_view consumer,
                                                              int64_t min_idle_ms,
                                                              std::size_t max) = 0;

  // Consumers of the revalidation group other than `self` that have been idle at least
  // `min_idle_ms` and hold no pending entries (a restarted or reloaded agent's old names; what
  // they held is taken over by claim_stale_revalidations first): removed from the group, their
  // names returned (sorted). A consumer with pending entries is kept. SqliteStore has no
  // consumers: always empty.
  virtual Result<std::vector<std::string>> remove_idle_consumers(std::string_view self,
                                                                 int64_t min_idle_ms) = 0;

  // --- the refresh webhook ---

  // A verified refresh webhook (shared/webhook_exchange.h step 6), the edge's rules in one atomic
  // step: the namespace record (not ready: kStoreNotReady, nothing written), the replay guard
  // (verified.replay_key kept verified.retain_for_ms; seen: `replay`, nothing else done), then per
  // target, in order, the principals the STORE lists for it — `shared` on a shared connection,
  // the one named grantee on a per_member one; else unknown_connection / unknown_principal; a
  // per_member connection without a principal is marked once as a whole (RedisKeys::marked /
  // connection_marks, O(1) in its grantees; one result without a principal, status
  // kWebhookConnectionMarked, marked when it has grantees; nothing queued: readers see every
  // member's data stale and queue it through the gate) — each marked stale at `now_ms` when data is
  // cached there (marked '1'; a later mark only moves it forward) and queued with reason
  // kWebhookRefreshReason: `in_progress` behind a held lease (still queued), else through the gate
  // (`window_ms`), which a request passes again once it was taken kManualRequeueAfterMs ago
  // (`queued`), else `already_queued` (nothing queued). The epoch moves when anything was marked.
  // RedisStore: the edge's own script (schema/lua/webhook_refresh.lua via
  // shared/discovery_redis.h); SqliteStore: the same rules in one transaction (its namespace is
  // always ready). kInvalidArgument for an empty request, a bad connection id, no replay key or
  // window_ms <= 0.
  virtual Result<WebhookRefreshReply> apply_webhook(const WebhookVerified& verified,
                                                    const WebhookRefreshRequest& request,
                                                    int64_t now_ms, int64_t window_ms) = 0;

  // --- OAuth callbacks the edge received (shared/oauth_callback.h) ---

  // Up to `max` callbacks the edge queued (stream oauth-callbacks, schema/redis-keys.md) after the
  // entry `after_id`, oldest first; `after_id` "" answers no entries and the id of the newest
  // one (where a reader that just started begins: older callbacks are another run's). Every
  // agent reads every entry (no consumer group). `last_id` is where to read from next.
  // SqliteStore: there is no edge in front of an embedded store, so never any entry.
  virtual Result<OAuthCallbackBatch> read_oauth_callbacks(std::string_view after_id,
                                                          std::size_t max) = 0;
  // The outcome of the callback with this `state` for the edge's page (`record`:
  // shared/oauth_callback.h's oauth_result_record, no secret), kept `ttl_ms`, under the state's
  // SHA-256. SqliteStore: nothing to tell, nothing written.
  virtual Status put_oauth_result(std::string_view state, std::string_view record,
                                  int64_t ttl_ms) = 0;

  // --- calls relayed from the edge (shared/call_relay.h, schema/redis-keys.md `calls`) ---
  // The embedded SQLite store has no edge in front of it: these answer kInvalidArgument there
  // (the default), and an agent on it starts no call consumer.
  virtual bool relays_calls() const { return false; }
  // Up to `max` calls no agent has taken yet, now this `consumer`'s (each is delivered once, to
  // one agent, and never again: a call is not repeated). Waits up to `block_ms` for one.
  virtual Result<RelayedCallBatch> read_relayed_calls(std::string_view /*consumer*/,
                                                      std::size_t /*max*/, int64_t /*block_ms*/) {
    return Error(ErrorCode::kInvalidArgument, describe() + " relays no calls");
  }
  // The reply record of `call` (relay_reply_record) for the edge waiting on it, kept ttl_ms.
  virtual Status put_call_reply(const RelayedCallRef& /*call*/, std::string_view /*record*/,
                                int64_t /*ttl_ms*/) {
    return Error(ErrorCode::kInvalidArgument, describe() + " relays no calls");
  }
  // Tells the edges that an agent consumes calls (`call-agents`, kept ttl_ms).
  virtual Status mark_call_agent_alive(std::string_view /*consumer*/, int64_t /*ttl_ms*/) {
    return Error(ErrorCode::kInvalidArgument, describe() + " relays no calls");
  }
  // Which of `calls` an edge marked cancelled (`call-cancel:<rid>`: its client went away), one
  // flag per call in order, in one round trip (key layout v2: one MGET per shard, one round).
  virtual Result<std::vector<bool>> call_cancel_marks(
      const std::vector<RelayedCallRef>& /*calls*/) {
    return Error(ErrorCode::kInvalidArgument, describe() + " relays no calls");
  }

  // --- the key layout (shared/layout.h), read only: `quiver-agent layout` ---
  // The namespace's layout record and the agent that last marked `call-agents` (with the layouts
  // it declares), in one round trip. kInvalidArgument for a store without layouts (SQLite: one
  // agent's own file, always in its own layout).
  virtual Result<StoreLayout> read_layout() {
    return Error(ErrorCode::kInvalidArgument, describe() + " has no key layout record");
  }
  // The key layout this store writes (chosen when it was opened); nullopt for a store without
  // layouts.
  virtual std::optional<KeyLayout> written_layout() const { return std::nullopt; }
};

// Consumer names for read_revalidations: [A-Za-z0-9._@:-]{1,128}.
Status validate_consumer_name(std::string_view consumer);
// The arguments of read_revalidations and claim_stale_revalidations, as both stores check them.
Status validate_revalidation_read(std::string_view consumer, std::size_t max, int64_t block_ms);
Status validate_revalidation_claim(std::string_view consumer, int64_t min_idle_ms, std::size_t max);
// A member of a disabled overlay: `<type>:<key>` with a capability type of preferences.h.
Status validate_overlay_member(std::string_view member);
// The checks both stores apply to a record before writing it.
Status validate_connection_record(const ConnectionRecord& record);
Status validate_revalidation_reason(std::string_view reason);

// The runtime catalog's checks, as both stores apply them before writing:
// a key valid for its kind (a member id; a member id or "*" for a grant; a connection id);
Status validate_catalog_key(CatalogKind kind, std::string_view key);
// that and the meta (origin "file" or "api", rev_ms 0 to kMaxCatalogRevMs, file_hash "" or 64
// lowercase hex digits, `by` 1 to kMaxCatalogByBytes bytes) and a value whose canonical JSON is at
// most kMaxCatalogValueBytes. The value's canonical JSON ("" for a tombstone).
inline constexpr std::size_t kMaxCatalogByBytes = 512;
// Revisions stay exact as doubles (schema/lua/catalog_write.lua compares them in Lua).
inline constexpr int64_t kMaxCatalogRevMs = (int64_t{1} << 53) - 1;
Result<std::string> catalog_value_text(const CatalogEntry& entry);
// An audit line to append: actor 1 to kMaxCatalogByBytes bytes, action 1 to 64, target at most
// 256, detail an object whose JSON is at most kMaxCatalogValueBytes. The detail's canonical JSON.
Result<std::string> audit_detail_text(const AuditEntry& entry);
// The limit of a catalog or audit page: 1 to kMaxCatalogPage.
inline constexpr std::size_t kMaxCatalogPage = 10000;
Status validate_catalog_page(std::size_t limit);

}  // namespace quiver
