// SqliteStore: the ManifestStore in one SQLite file, the embedded default (no Redis needed).
//
// The tables of schema/sqlite.sql mirror the Redis key layout (each names its key); every
// statement is a named query of schema/sqlite-queries.sql. Each step that the Redis store runs as
// one Lua script runs here in one `BEGIN IMMEDIATE` transaction, so it is atomic across every
// process that opens the file (two agents on one file behave like two agents on one Redis): the
// lease with its token and fence, the fenced commit (holder, newest fence, current config_hash),
// the failure record that never restamps config_hash, the revalidation gate and queue, the replay
// guard, the refresh webhook (schema/lua/webhook_refresh.lua's rules), a catalog write with its
// file rule (schema/lua/catalog_write.lua's), a member's grants, an audit line with its bound.
//
// Time: lease, gate and replay expiry and the manifests' retention run on the injected clock
// (`now_ms`), so tests expire a lease by moving the clock. Blocking reads of the queue wait in real
// time (polling every `poll_interval_ms`).
//
// The file is opened in WAL mode with synchronous=NORMAL, foreign_keys=ON and a busy timeout; the
// schema is applied (idempotently) on open. A file written by a newer schema version is refused.
// A write lock held by another process longer than the busy timeout, a full disk or an I/O error
// is kStoreUnavailable.
//
// Threads: one SQLite connection per store, guarded by a mutex; calls from many threads take
// turns (a blocking read does not hold the mutex while it waits).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "native-agent/store/store.h"

namespace quiver {

struct SqliteStoreOptions {
  std::string path;  // the database file, created if missing
  Clock now_ms = system_clock_ms();
  int64_t busy_timeout_ms = 5'000;
  int64_t poll_interval_ms = 20;  // read_revalidations with block_ms > 0
  // Discovery snapshots run on up to this many read-only connections of their own (WAL readers
  // wait for nothing); 0 runs them on the store's one connection, behind its mutex.
  int max_readers = 4;
  // The audit log's bound (append_audit deletes what is older than the newest this many lines).
  int64_t max_audit_entries = static_cast<int64_t>(kMaxAuditEntries);
};

class SqliteStore final : public ManifestStore {
 public:
  // Opens (creating if needed) and migrates the file. kStoreUnavailable when it cannot be opened.
  static Result<std::unique_ptr<SqliteStore>> open(SqliteStoreOptions options);
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  std::string describe() const override;
  Status health() override;
  Result<NamespaceRecord> read_namespace() override;
  Status begin_namespace_restore(int64_t now_ms) override;
  Result<bool> mark_namespace_ready(int64_t now_ms) override;
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
  std::optional<Result<DiscoverySnapshot>> read_discovery_now(const Principal& member,
                                                              const SnapshotQuery& query) override;

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
  Result<MergedPreferences> merge_preferences(std::string_view cid, const Principal& principal,
                                              const std::vector<PreferenceRow>& rows) override;
  Result<DisabledOverlay> read_disabled(std::string_view cid, const Principal& principal) override;
  Result<int64_t> bump_epoch() override;
  Result<int64_t> read_epoch() override;

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
  Result<WebhookRefreshReply> apply_webhook(const WebhookVerified& verified,
                                            const WebhookRefreshRequest& request, int64_t now_ms,
                                            int64_t window_ms) override;

 private:
  struct Impl;
  explicit SqliteStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
