// RedisStore: the ManifestStore on Redis, the layout of schema/redis-keys.md, for teams (several
// agents and the edge share one Redis).
//
// Built from the configuration's RedisConfig (native-agent/base/config.h parses
// `redis://[[user]:password@]host[:port][/db]` and holds the password as a Secret). The password
// is sent with AUTH and nowhere else: describe(), logs and error messages never carry it.
// `rediss://` is TLS (native-agent/store/redis_link.h): the server's certificate is verified
// against the system CA store or RedisConfig::tls_files.ca_file, and must name the host; a client
// certificate is sent when configured. create() loads those files and fails when it cannot.
//
// Every key and SCAN pattern comes from RedisKeys (shared/redis_keys.h). The lease steps and
// fenced writes are the Lua scripts of schema/lua/, run through shared/lease.h's command builders.
// Multi-key updates (config sync, grants, overlay publishing) are pipelined: reads in one round
// trip, writes in one MULTI/EXEC. A catalog write is one script (schema/lua/catalog_write.lua,
// the file rule evaluated inside it); set_member_grants reads the member's set, then writes it and
// the grantees sets it touches in one MULTI/EXEC.
//
// Connections: created lazily, with a connect timeout and a command timeout. An op whose
// connection drops or times out fails with kStoreUnavailable and drops the connection; the next op
// reconnects at once. While Redis stays unreachable, reconnect attempts are spaced by a bounded
// exponential backoff (ops in between fail fast with kStoreUnavailable, saying when the next
// attempt is due). Writing to a socket the server closed never raises SIGPIPE in the process.
//
// Threads: the store holds three connections, each guarded by its own mutex: one for every op, one
// for read_revalidations with block_ms > 0 (so a consumer waiting on the stream does not hold up
// commits), one for read_relayed_calls with block_ms > 0 (nor the revalidation workers). Calls from
// many threads are safe; they take turns on a connection.
//
// A Redis Cluster (`redis+cluster://seed1:port,seed2:port`, RedisConfig::cluster): the three
// connections are three RedisClusterPools (native-agent/store/redis_cluster_pool.h), each with its
// own connection per node. Key layout v1 keeps the whole namespace in one slot (one hash tag,
// `quiver:{ns}:`), so every op goes to the master of that slot, as one pipeline: scripts,
// MULTI/EXEC blocks and SCAN alike. A failover is followed (MOVED, a dead node's replica promoted:
// the map is read again); the keys are not spread over the masters (layout v2 will). The ops and
// their logic are the same as on one Redis: one implementation over both.
//
// Bodies: the manifest bodies a read fetched are kept by content (body_cache.h, bounded by
// body_cache_max_bytes), so later reads send no MGET for them; a new commit names a new body.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "native-agent/base/config.h"
#include "native-agent/store/body_cache.h"
#include "native-agent/store/layout_copy.h"
#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/store.h"

namespace quiver {

struct RedisStoreOptions {
  RedisConfig redis;                   // host, port, db, user, password (config.h)
  std::string ns = kDefaultNamespace;  // the key namespace, quiver:{ns}:
  int64_t connect_timeout_ms = 2'000;
  int64_t command_timeout_ms = 2'000;
  int64_t reconnect_backoff_initial_ms = 100;
  int64_t reconnect_backoff_max_ms = 5'000;
  // XADD MAXLEN ~ bound of the revalidation stream.
  int64_t revalidate_stream_max_len = 10'000;
  // XADD MAXLEN ~ bound of the audit stream (quiver:{ns}:audit).
  int64_t max_audit_entries = static_cast<int64_t>(kMaxAuditEntries);
  // `at` of queued revalidation requests, updated_at of catalog entries, at of audit lines.
  Clock now_ms = system_clock_ms();
  // The bound of the manifest bodies kept by content (native-agent/store/body_cache.h). 0: off.
  std::size_t body_cache_max_bytes = std::size_t{16} << 20;
  // The key layout this store writes (docs/design.md "Key layout v2"); its writes pass only while
  // the namespace's layout record names it. Reads follow the record whatever this says: a
  // namespace whose record is `v2:ready:<at>` is read in rounds (shared/discovery_spread.h).
  // The agent sets it from the record it finds at start (native-agent/engine/agent.cpp).
  KeyLayout key_layout = KeyLayout::kV1;
};

struct LayoutMigrationOptions {
  int64_t settle_ms = 5'000;  // after `filling` is written, before the copy reads anything
  // Called at each step with a line for the operator ("filling", "copied ...", "ready").
  std::function<void(const std::string&)> progress;
};

struct LayoutMigration {
  bool already_v2 = false;     // the record said v2:ready: nothing done
  std::string filling_record;  // the `v2:filling:<at>` written (or found)
  std::string ready_record;    // the `v2:ready:<at>` written
  LayoutCopyStats copy;        // what the copy did
  int64_t copy_ms = 0;         // how long the copy took (the writes' pause is settle + this)
};

struct LayoutCleanup {
  int64_t deleted = 0;  // v1 keys unlinked
  int64_t kept = 0;     // keys both layouts name alike (the namespace and layout records, ...)
};

class RedisStore final : public ManifestStore {
 public:
  // Checks the options; does not connect (the first op does, and health() tells).
  static Result<std::unique_ptr<RedisStore>> create(RedisStoreOptions options);
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  std::string describe() const override;
  Status health() override;
  Result<NamespaceRecord> read_namespace() override;
  Status begin_namespace_restore(int64_t now_ms) override;
  Result<bool> mark_namespace_ready(int64_t now_ms) override;
  Result<std::vector<bool>> versions_present(const std::vector<std::string>& connection_ids,
                                             const std::vector<Principal>& members) override;
  Status demote_namespace(int64_t now_ms) override;
  Status rebuild_grantee_sets(const GrantMap& grants) override;
  Result<std::optional<int64_t>> store_time_ms() override;

  Result<AcquireResult> acquire_lease(std::string_view cid, const Principal& principal,
                                      std::string_view token, int64_t lease_ms) override;
  Result<LeaseOutcome> renew_lease(std::string_view cid, const Principal& principal,
                                   const Lease& lease, int64_t lease_ms) override;
  Result<LeaseOutcome> release_lease(std::string_view cid, const Principal& principal,
                                     const Lease& lease) override;

  Result<FencedWriteResult> commit_manifest(std::string_view cid, const Principal& principal,
                                            const Lease& lease, const ManifestWrite& write,
                                            const FencedWriteOptions& options) override;
  Result<FencedWriteResult> record_failure(std::string_view cid, const Principal& principal,
                                           const Lease& lease, const RefreshFailure& failure,
                                           const FencedWriteOptions& options) override;

  Result<std::optional<ManifestMeta>> read_manifest_meta(std::string_view cid,
                                                         const Principal& principal) override;
  Result<std::optional<StoredManifest>> read_manifest(std::string_view cid,
                                                      const Principal& principal) override;
  Result<ManifestPage> list_manifest_metas(std::string_view cursor, std::size_t batch) override;
  Result<DuePage> list_due(int64_t now_ms, std::size_t offset, std::size_t batch) override;
  Result<std::vector<bool>> settle_due(const std::vector<DueSettlement>& settlements) override;
  Result<std::vector<bool>> has_due_entries(const std::vector<DueKey>& keys) override;
  Result<DueBackfill> backfill_due_index(std::size_t max_keys) override;

  Result<ConnectionSync> sync_connections(const std::vector<ConnectionRecord>& records) override;
  Result<DiscoverySnapshot> read_discovery(const Principal& member,
                                           const SnapshotQuery& query = {}) override;

  Result<std::vector<ConnectionRecord>> list_connections() override;
  Result<std::optional<ConnectionRecord>> read_connection(std::string_view cid) override;
  Result<GrantSync> sync_grants(const GrantMap& grants) override;
  Result<std::set<std::string>> read_grants(std::string_view member_id) override;
  Result<bool> set_member_grants(std::string_view member_id,
                                 const std::set<std::string>& cids) override;
  Result<std::set<std::string>> read_grantees(std::string_view cid) override;
  Result<CatalogWriteResult> catalog_write(const CatalogEntry& entry,
                                           CatalogWriteMode mode) override;
  Result<std::optional<CatalogEntry>> catalog_read(CatalogKind kind, std::string_view key) override;
  Result<CatalogPage> catalog_list(CatalogKind kind, std::string_view cursor,
                                   std::size_t limit) override;
  Result<CatalogVersions> catalog_versions() override;
  Status append_audit(const AuditEntry& entry) override;
  Result<AuditPage> read_audit(std::string_view cursor, std::size_t limit) override;
  Result<OAuthCallbackBatch> read_oauth_callbacks(std::string_view after_id,
                                                  std::size_t max) override;
  Status put_oauth_result(std::string_view state, std::string_view record, int64_t ttl_ms) override;
  bool relays_calls() const override { return true; }
  // XREADGROUP … NOACK on `calls` (group quiver-call-agents, created at the stream's end: calls
  // queued while no agent ran are not performed late), on a connection of its own.
  Result<RelayedCallBatch> read_relayed_calls(std::string_view consumer, std::size_t max,
                                              int64_t block_ms) override;
  Status put_call_reply(const RelayedCallRef& call, std::string_view record,
                        int64_t ttl_ms) override;
  Status mark_call_agent_alive(std::string_view consumer, int64_t ttl_ms) override;
  Result<StoreLayout> read_layout() override;
  std::optional<KeyLayout> written_layout() const override;
  // The namespace's layout record alone (one GET; nullopt: absent, layout v1): what an agent
  // reads at start to choose the layout it writes (RedisStoreOptions::key_layout).
  Result<std::optional<std::string>> read_layout_record();
  // The migration of the namespace from key layout v1 to v2 (`quiver-agent migrate-layout v2`;
  // docs/design.md "Migration from v1"), on a store that writes v1: the record moves to
  // `v2:filling:<now>` (from no record or `v1:...`, or a filling left by a migration cut short),
  // then `settle_ms` pass (every agent's next store check reads it, and its layout gate stops its
  // writes; readers read v1 all along), then copy_namespace_to_v2 copies the namespace in place
  // (native-agent/store/layout_copy.h: the v2 keys through this store's channel, routed by key on
  // a cluster), then the record moves to `v2:ready:<now>`. Each record move is a compare-and-set
  // (schema/lua/layout_switch.lua): a record moved by anyone else stops it (kConflict). Run again
  // after a failure, it resumes from `filling` and copies again (every copy write is idempotent).
  // The census check (no agent without v2) is the caller's: it must come before.
  Result<LayoutMigration> migrate_layout_to_v2(const LayoutMigrationOptions& options);
  // After the switch: deletes (UNLINK, in batches) every key of the v1 spelling that v2 does not
  // share (the `{<ns>}` records both layouts name alike stay). kConflict unless the record has
  // said `v2:ready` for at least `min_age_ms` (a v1 read under way at the switch fetches its
  // bodies after its script). Past the layout gate, like the migration.
  Result<LayoutCleanup> cleanup_layout_v1(int64_t min_age_ms = 60'000);
  Result<std::vector<bool>> call_cancel_marks(const std::vector<RelayedCallRef>& calls) override;
  Result<MergedPreferences> merge_preferences(std::string_view cid, const Principal& principal,
                                              const std::vector<PreferenceRow>& rows) override;
  Result<DisabledOverlay> read_disabled(std::string_view cid, const Principal& principal) override;
  bool has_epoch() const override;
  Result<int64_t> bump_epoch() override;
  Result<int64_t> read_epoch() override;
  Result<bool> discovery_unchanged(const DiscoverySnapshot& held) override;

  // One EVAL of schema/lua/revalidate_enqueue.lua, the edge's own: reason "manual" (refresh-tools)
  // is queued again once the gate is a second old (shared/discovery_redis.h EnqueueOptions).
  Result<RevalidationOutcome> enqueue_revalidation(std::string_view cid, const Principal& principal,
                                                   std::string_view reason,
                                                   int64_t window_ms) override;
  Result<bool> drop_manifest(std::string_view cid, const Principal& principal) override;
  Result<RevalidationBatch> read_revalidations(std::string_view consumer, std::size_t max,
                                               int64_t block_ms) override;
  Status ack_revalidations(const std::vector<std::string>& ids) override;
  Result<RevalidationBatch> claim_stale_revalidations(std::string_view consumer,
                                                      int64_t min_idle_ms,
                                                      std::size_t max) override;

  Result<std::vector<std::string>> remove_idle_consumers(std::string_view self,
                                                         int64_t min_idle_ms) override;
  // One EVAL of schema/lua/webhook_refresh.lua, exactly as the edge sends it; on key layout v2
  // its rounds (shared/webhook_spread.h), as the edge drives them.
  Result<WebhookRefreshReply> apply_webhook(const WebhookVerified& verified,
                                            const WebhookRefreshRequest& request, int64_t now_ms,
                                            int64_t window_ms) override;

  // The bodies kept by content: entries, bytes, hits, misses, evictions.
  BodyCacheCounts body_cache_counts() const;

  // On a cluster: what the pools have done (MOVED and ASK followed, retries, slot maps read,
  // connections), summed over the three; nullopt on one Redis.
  std::optional<RedisClusterPoolStats> cluster_stats() const;
  // On a cluster: those counters as Prometheus text (quiver_redis_cluster_*_total); "" otherwise.
  std::string metrics_text() const override;

 private:
  struct Impl;
  explicit RedisStore(std::unique_ptr<Impl> impl);
  // Key layout v2's read of the relayed calls: every shard's stream, polled (redis_store.cpp).
  Result<RelayedCallBatch> read_relayed_calls_v2(std::string_view consumer, std::size_t max,
                                                 int64_t block_ms);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
