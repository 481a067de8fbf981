// Both stores side by side, for the tests that hold them to one behaviour
// (tests/integration/store_discovery_test.cpp, store_webhook_test.cpp): a RedisStore on a
// redis-server of its own and a SqliteStore on a file in a temp dir whose clock stands still, and
// the writes both are seeded with, made through the store API as the agent makes them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_store.h"
#include "native-agent/store/sqlite_store.h"
#include "native-agent/store/store.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"

namespace quiver::testing {

// A stdio connection's record, its config_hash "hash-<id>".
inline ConnectionRecord stdio_record(const std::string& id, CredentialMode mode, int64_t now_ms) {
  ConnectionRecord r;
  r.id = id;
  r.config_hash = "hash-" + id;
  r.credential_mode = mode;
  r.name = "Connection " + id;
  r.transport = "stdio";
  r.updated_at_ms = now_ms;
  return r;
}

// A good listing of connection `cid` (one tool, x_<cid>) under its config_hash, fetched at `now_ms`
// and fresh for 15 minutes.
inline ManifestWrite listing_write(const std::string& cid, int64_t now_ms,
                                   const std::string& scope = "") {
  ManifestWrite w;
  w.manifest = R"({"format":"quiver.manifest.v1","tools":{"state":"ok","items":[{"name":"x_)" +
               cid + R"("}]}})";
  w.etag = "sha256-" + cid;
  w.config_hash = "hash-" + cid;
  w.fetched_at_ms = now_ms;
  w.fresh_until_ms = now_ms + 900'000;
  w.expires_at_ms = now_ms + 86'400'000;
  w.cache_scope = scope;
  return w;
}

// `write` committed for (cid, principal) under a lease of its own, as a refresh commits a listing.
inline void commit_listing(ManifestStore& store, const std::string& cid, const Principal& principal,
                           const ManifestWrite& write) {
  Result<AcquireResult> lease = store.acquire_lease(cid, principal, std::string(32, 'c'), 60'000);
  ASSERT_TRUE(lease.ok() && lease->acquired);
  Result<FencedWriteResult> r =
      store.commit_manifest(cid, principal, lease->lease, write, FencedWriteOptions{true});
  ASSERT_TRUE(r.ok() && r->ok());
}

// A failed listing of (cid, principal) recorded under a lease of its own, as a refresh records
// one: error at `error_at_ms`, the attempt at `attempt_at_ms`.
inline void record_listing_failure(ManifestStore& store, const std::string& cid,
                                   const Principal& principal, int64_t error_at_ms,
                                   int64_t attempt_at_ms) {
  Result<AcquireResult> lease = store.acquire_lease(cid, principal, std::string(32, 'f'), 60'000);
  ASSERT_TRUE(lease.ok() && lease->acquired);
  RefreshFailure f;
  f.config_hash = "hash-" + cid;
  f.error_code = "UPSTREAM_UNAVAILABLE";
  f.error_message = "connection reset";
  f.error_at_ms = error_at_ms;
  f.attempt_at_ms = attempt_at_ms;
  Result<FencedWriteResult> r =
      store.record_failure(cid, principal, lease->lease, f, FencedWriteOptions{true});
  ASSERT_TRUE(r.ok() && r->ok());
}

class StorePairTest : public ::testing::Test {
 protected:
  // Opens both stores on empty data in namespace `ns` (Redis) with the SQLite clock at `now_ms`.
  // Short Redis timeouts: a test may stop the server.
  void open_stores(const std::string& ns, int64_t now_ms) {
    ASSERT_TRUE(redis_.ok()) << redis_.error();
    RedisStoreOptions ro;
    ro.redis.host = "127.0.0.1";
    ro.redis.port = redis_.port();
    ro.ns = ns;
    ro.connect_timeout_ms = 300;
    ro.command_timeout_ms = 500;
    ro.reconnect_backoff_initial_ms = 10;
    ro.reconnect_backoff_max_ms = 50;
    auto r = RedisStore::create(ro);
    ASSERT_TRUE(r.ok()) << r.error().message;
    redis_store_ = std::move(*r);
    SqliteStoreOptions so;
    so.path = dir_.path("quiver.db");
    so.now_ms = [now_ms] { return now_ms; };
    auto s = SqliteStore::open(so);
    ASSERT_TRUE(s.ok()) << s.error().message;
    sqlite_store_ = std::move(*s);
  }

  std::vector<ManifestStore*> stores() { return {redis_store_.get(), sqlite_store_.get()}; }

  RedisServer redis_;
  TempDir dir_;
  std::unique_ptr<RedisStore> redis_store_;
  std::unique_ptr<SqliteStore> sqlite_store_;
};

}  // namespace quiver::testing
