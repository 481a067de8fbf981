// The ManifestStore contract, run against both stores: RedisStore on a real redis-server (and on a
// real six-node Redis Cluster, redis+cluster://) and SqliteStore on real SQLite files. One
// parameterized suite (StoreConformance) holds every behaviour the refresh engine relies on; then
// what only one backend has: Redis going away and coming back, AUTH, two agents racing through two
// connections; two agents on one SQLite file.
//
// Time: the SQLite store runs on a fake clock that `pass()` moves; the Redis store expires keys on
// Redis' clock, so `pass()` sleeps. Short leases and windows keep that under a second per test.
#include "native-agent/store/store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/store/redis_store.h"
#include "native-agent/store/sqlite_db.h"
#include "native-agent/store/sqlite_store.h"
#include "shared/freshness.h"
#include "shared/resp.h"
#include "shared/sha256.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/preference_rows.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::disabled_rows;
using quiver::testing::preference_rows;
using quiver::testing::RedisConnection;
using quiver::testing::RedisServer;
using quiver::testing::run_argv;
using quiver::testing::TempDir;
using SteadyClock = std::chrono::steady_clock;

constexpr int64_t kT0 = 1'780'000'000'000;
constexpr int64_t kLongLease = 60'000;
constexpr int64_t kShortLease = 150;  // expires during pass(kPastShort)
constexpr int64_t kPastShort = 400;

const FencedWriteOptions kWrite{true};

// ---- helpers -----------------------------------------------------------------------------------

std::string token(int n) {
  std::string t = std::to_string(n);
  return std::string(32 - t.size(), '0') + t;
}

Principal member(const char* id) { return *Principal::member(id); }

ConnectionRecord record(const std::string& id, const std::string& hash,
                        CredentialMode mode = CredentialMode::kShared) {
  ConnectionRecord r;
  r.id = id;
  r.config_hash = hash;
  r.credential_mode = mode;
  r.name = "Connection " + id;
  r.transport = "stdio";
  r.updated_at_ms = kT0;
  return r;
}

ManifestWrite manifest_v(const std::string& version, const std::string& config_hash) {
  ManifestWrite w;
  w.manifest = R"({"tools":[{"name":"search","version":")" + version + R"("}]})";
  w.etag = "\"etag-" + version + "\"";
  w.config_hash = config_hash;
  w.fetched_at_ms = kT0;
  w.fresh_until_ms = kT0 + 900'000;
  w.expires_at_ms = kT0 + 86'400'000;
  w.cache_scope = "public";
  return w;
}

RefreshFailure failure_under(const std::string& config_hash, int64_t at = kT0 + 5'000) {
  RefreshFailure f;
  f.config_hash = config_hash;
  f.error_code = "UPSTREAM_UNAVAILABLE";
  f.error_message = "tools/list failed twice: connection reset";
  f.error_at_ms = at;
  f.attempt_at_ms = at - 1'000;
  return f;
}

// Runs one raw command on a test server (set-up and inspection only; the stores are under test),
// on a connection of its own.
RespValue raw_value(RedisServer& server, const std::vector<std::string>& argv) {
  RedisConnection c(server.connect());
  if (c == nullptr) return RespValue::error("no connection");
  return run_argv(c.get(), argv);
}

// A reply as text: a string, status or error as it is, an integer in decimal, else "(nil)".
std::string text_of(const RespValue& v) {
  switch (v.type) {
    case RespValue::Type::kBulkString:
    case RespValue::Type::kSimpleString:
    case RespValue::Type::kError:
      return v.str;
    case RespValue::Type::kInteger:
      return std::to_string(v.integer);
    default:
      return "(nil)";
  }
}

// The same of a raw command on a test server.
std::string raw(RedisServer& server, const std::vector<std::string>& argv) {
  return text_of(raw_value(server, argv));
}

// Field names of a flat [field, value, ...] array.
std::set<std::string> field_names(const RespValue& v) {
  std::set<std::string> out;
  for (size_t i = 0; i + 1 < v.elements.size(); i += 2) out.insert(v.elements[i].str);
  return out;
}

// Store options for a Redis URL, parsed as the configuration does (native-agent/base/config.h).
RedisStoreOptions redis_options(const std::string& url) {
  RedisStoreOptions o;
  Result<RedisConfig> parsed = parse_redis_url(url);
  EXPECT_TRUE(parsed.ok()) << parsed.error().message;
  if (parsed.ok()) o.redis = *parsed;
  return o;
}

// A refresh webhook for every principal of `cid` at `at`, its replay guard under `replay_key`:
// whether it marked cached data stale.
bool webhook_marks(ManifestStore& store, const std::string& cid, const std::string& replay_key,
                   int64_t at) {
  WebhookRefreshRequest request;
  request.targets = {{cid, std::nullopt, "deploy"}};
  Result<WebhookRefreshReply> r =
      store.apply_webhook({at, replay_key, 60'000}, request, at, 60'000);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() && !r->replay && r->results.size() == 1 && r->results[0].marked_stale;
}

RedisStoreOptions local_redis(int port) {
  return redis_options("redis://127.0.0.1:" + std::to_string(port));
}

// ---- backends ----------------------------------------------------------------------------------

// RedisStore on one redis-server, RedisStore on a six-node Redis Cluster (redis+cluster://),
// SqliteStore.
enum class Kind { kRedis, kRedisCluster, kSqlite };

class Backend {
 public:
  virtual ~Backend() = default;
  // A store on this test's data; a second call gives a second agent on the same data.
  virtual Result<std::unique_ptr<ManifestStore>> open() = 0;
  // Lets `ms` pass for lease, gate, replay and idle expiry.
  virtual void pass(int64_t ms) = 0;
  // The stores' clock.
  virtual int64_t now() const = 0;
  // A raw command on the Redis behind the store, for set-up and inspection (Redis kinds only).
  virtual RespValue raw(const std::vector<std::string>& /*argv*/) {
    return RespValue::error("not a Redis store");
  }
};

// One server for the whole binary, stopped at exit; each test starts from FLUSHALL.
RedisServer& shared_redis() {
  static RedisServer server;
  return server;
}

class RedisBackend : public Backend {
 public:
  RedisBackend() { (void)raw({"FLUSHALL"}); }
  Result<std::unique_ptr<ManifestStore>> open() override {
    RedisStoreOptions o = local_redis(shared_redis().port());
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    if (!s.ok()) return s.error();
    return std::unique_ptr<ManifestStore>(std::move(s).value());
  }
  void pass(int64_t ms) override { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
  int64_t now() const override { return system_clock_ms()(); }
  RespValue raw(const std::vector<std::string>& argv) override {
    return raw_value(shared_redis(), argv);
  }
};

class RedisClusterBackend : public Backend {
 public:
  RedisClusterBackend() { (void)raw({"FLUSHALL"}); }
  void pass(int64_t ms) override { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
  int64_t now() const override { return system_clock_ms()(); }
  Result<std::unique_ptr<ManifestStore>> open() override {
    RedisStoreOptions o = redis_options(
        "redis+cluster://127.0.0.1:" + std::to_string(testing::shared_test_cluster().ports()[0]) +
        ",127.0.0.1:" + std::to_string(testing::shared_test_cluster().ports()[1]));
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    if (!s.ok()) return s.error();
    return std::unique_ptr<ManifestStore>(std::move(s).value());
  }
  // FLUSHALL on every master; anything else on the master that serves the namespace's keys
  // (one slot on key layout v1), found by following MOVED from any node.
  RespValue raw(const std::vector<std::string>& argv) override {
    testing::RedisCluster& cluster = testing::shared_test_cluster();
    if (argv.front() == "FLUSHALL") {
      return cluster.flush_all() ? RespValue::simple_string("OK") : RespValue::error("FLUSHALL");
    }
    const std::string key = RedisKeys::create()->namespace_record();
    int port = cluster.ports()[0];
    for (int hop = 0; hop < 3; ++hop) {
      RedisConnection c(cluster.connect(port));
      if (c == nullptr) return RespValue::error("no connection");
      RespValue v = run_argv(c.get(), {"EXISTS", key});
      if (v.is_error() && v.str.rfind("MOVED ", 0) == 0) {
        port = std::stoi(v.str.substr(v.str.rfind(':') + 1));
        continue;
      }
      return run_argv(c.get(), argv);
    }
    return RespValue::error("MOVED too often");
  }
};

class SqliteBackend : public Backend {
 public:
  Result<std::unique_ptr<ManifestStore>> open() override {
    SqliteStoreOptions o;
    o.path = dir_.path("quiver.db");
    o.now_ms = [this] { return clock_.load(); };
    o.poll_interval_ms = 5;
    Result<std::unique_ptr<SqliteStore>> s = SqliteStore::open(o);
    if (!s.ok()) return s.error();
    return std::unique_ptr<ManifestStore>(std::move(s).value());
  }
  void pass(int64_t ms) override { clock_ += ms; }
  int64_t now() const override { return clock_.load(); }

 private:
  TempDir dir_;
  std::atomic<int64_t> clock_{kT0};
};

class StoreConformance : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kRedis) {
      ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
      backend_ = std::make_unique<RedisBackend>();
    } else if (GetParam() == Kind::kRedisCluster) {
      ASSERT_TRUE(testing::shared_test_cluster().ok()) << testing::shared_test_cluster().error();
      backend_ = std::make_unique<RedisClusterBackend>();
    } else {
      backend_ = std::make_unique<SqliteBackend>();
    }
    store_ = open();
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(store_->health().ok()) << store_->health().error().message;
  }

  std::unique_ptr<ManifestStore> open() {
    Result<std::unique_ptr<ManifestStore>> s = backend_->open();
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(s).value() : nullptr;
  }
  void pass(int64_t ms) { backend_->pass(ms); }

  void configure(const std::vector<ConnectionRecord>& records) {
    Result<ConnectionSync> r = store_->sync_connections(records);
    ASSERT_TRUE(r.ok()) << r.error().message;
  }
  AcquireResult acquire(const std::string& cid, const Principal& p, int n,
                        int64_t lease_ms = kLongLease, ManifestStore* s = nullptr) {
    Result<AcquireResult> r = (s ? s : store_.get())->acquire_lease(cid, p, token(n), lease_ms);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : AcquireResult{};
  }
  FencedWriteResult commit(const std::string& cid, const Principal& p, const Lease& lease,
                           const ManifestWrite& w) {
    Result<FencedWriteResult> r = store_->commit_manifest(cid, p, lease, w, kWrite);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : FencedWriteResult{};
  }
  FencedWriteResult fail(const std::string& cid, const Principal& p, const Lease& lease,
                         const RefreshFailure& f) {
    Result<FencedWriteResult> r = store_->record_failure(cid, p, lease, f, kWrite);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : FencedWriteResult{};
  }
  // Lists and commits `version` under `hash` in one go (a whole successful refresh).
  void refresh(const std::string& cid, const Principal& p, const std::string& version,
               const std::string& hash, int n = 900) {
    AcquireResult a = acquire(cid, p, n);
    ASSERT_TRUE(a.acquired);
    ASSERT_TRUE(commit(cid, p, a.lease, manifest_v(version, hash)).ok());
  }
  std::optional<StoredManifest> manifest(const std::string& cid, const Principal& p) {
    Result<std::optional<StoredManifest>> r = store_->read_manifest(cid, p);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : std::nullopt;
  }
  std::optional<ManifestMeta> meta(const std::string& cid, const Principal& p) {
    Result<std::optional<ManifestMeta>> r = store_->read_manifest_meta(cid, p);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : std::nullopt;
  }
  RevalidationOutcome enqueue(const std::string& cid, const Principal& p, const char* reason,
                              int64_t window_ms = 60'000) {
    Result<RevalidationOutcome> r = store_->enqueue_revalidation(cid, p, reason, window_ms);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : RevalidationOutcome::kAlreadyQueued;
  }
  RevalidationBatch read(const char* consumer, std::size_t max, int64_t block_ms = 0) {
    Result<RevalidationBatch> r = store_->read_revalidations(consumer, max, block_ms);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : RevalidationBatch{};
  }
  RevalidationBatch claim(const char* consumer, int64_t min_idle_ms, std::size_t max = 10) {
    Result<RevalidationBatch> r = store_->claim_stale_revalidations(consumer, min_idle_ms, max);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : RevalidationBatch{};
  }
  int64_t epoch() {
    Result<int64_t> r = store_->read_epoch();
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : -1;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ManifestStore> store_;
  const Principal shared_ = Principal::shared();
};

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

std::vector<std::string> ids_of(const RevalidationBatch& b) {
  std::vector<std::string> out;
  for (const RevalidationRequest& r : b.requests) out.push_back(r.id);
  return out;
}

std::vector<std::string> keys_of(const RevalidationBatch& b) {
  std::vector<std::string> out;
  for (const RevalidationRequest& r : b.requests) {
    out.push_back(r.connection_id + "/" + r.principal.str() + "/" + r.reason);
  }
  return out;
}

// ---- leases ------------------------------------------------------------------------------------

TEST_P(StoreConformance, OneHolderAtATimeAndOnlyTheHolderMayRenewOrRelease) {
  configure({record("c1", "h1")});
  AcquireResult first = acquire("c1", shared_, 1);
  ASSERT_TRUE(first.acquired);
  EXPECT_EQ(first.lease.fence, 1);
  EXPECT_EQ(first.lease.token, token(1));

  // A second agent on the same data is told who holds it and for how long.
  std::unique_ptr<ManifestStore> other = open();
  AcquireResult second = acquire("c1", shared_, 2, kLongLease, other.get());
  EXPECT_FALSE(second.acquired);
  EXPECT_EQ(second.holder_fence, 1);
  EXPECT_GT(second.holder_remaining_ms, 0);
  EXPECT_LE(second.holder_remaining_ms, kLongLease);

  Lease impostor{1, token(2)};
  EXPECT_EQ(*store_->renew_lease("c1", shared_, impostor, kLongLease), LeaseOutcome::kLeaseLost);
  EXPECT_EQ(*store_->release_lease("c1", shared_, impostor), LeaseOutcome::kLeaseLost);
  EXPECT_EQ(*store_->renew_lease("c1", shared_, first.lease, kLongLease), LeaseOutcome::kOk);
  EXPECT_EQ(*store_->release_lease("c1", shared_, first.lease), LeaseOutcome::kOk);
  EXPECT_EQ(*store_->release_lease("c1", shared_, first.lease), LeaseOutcome::kLeaseLost);

  // Free again: the next holder gets the next fence. Other keys are independent.
  AcquireResult third = acquire("c1", shared_, 2, kLongLease, other.get());
  ASSERT_TRUE(third.acquired);
  EXPECT_EQ(third.lease.fence, 2);
  AcquireResult elsewhere = acquire("c1", member("alice"), 3);
  ASSERT_TRUE(elsewhere.acquired);
  EXPECT_EQ(elsewhere.lease.fence, 1);
}

TEST_P(StoreConformance, TwoAgentsRacingForOneLeaseHaveOneWinner) {
  // Two stores on the same data (two agents on one Redis, or on one SQLite file), 25 races.
  configure({record("c1", "h1")});
  Result<std::unique_ptr<ManifestStore>> second = backend_->open();
  ASSERT_TRUE(second.ok()) << second.error().message;
  ManifestStore* agents[2] = {store_.get(), second->get()};
  for (int round = 0; round < 25; ++round) {
    std::atomic<int> ready{0};
    AcquireResult results[2];
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        ++ready;
        while (ready.load() < 2) {
        }
        Result<AcquireResult> r =
            agents[i]->acquire_lease("c1", shared_, token(100 * round + i), kLongLease);
        EXPECT_TRUE(r.ok()) << r.error().message;
        if (r.ok()) results[i] = *r;
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_NE(results[0].acquired, results[1].acquired) << "round " << round;
    const int winner = results[0].acquired ? 0 : 1;
    EXPECT_EQ(results[1 - winner].holder_fence, results[winner].lease.fence);
    EXPECT_EQ(results[winner].lease.fence, round + 1);
    // The winner commits (releasing the lease); the other agent reads it from the same data.
    Result<FencedWriteResult> c = agents[winner]->commit_manifest(
        "c1", shared_, results[winner].lease, manifest_v(std::to_string(round), "h1"), kWrite);
    ASSERT_TRUE(c.ok() && c->ok());
    Result<std::optional<StoredManifest>> m = agents[1 - winner]->read_manifest("c1", shared_);
    ASSERT_TRUE(m.ok() && m->has_value());
    EXPECT_EQ((*m)->meta.fence, round + 1);
  }
}

TEST_P(StoreConformance, ALeaseThatExpiresMidListingCannotCommitLate) {
  configure({record("c1", "h1")});
  AcquireResult slow = acquire("c1", shared_, 1, kShortLease);
  ASSERT_TRUE(slow.acquired);
  pass(kPastShort);  // the listing took longer than the lease

  EXPECT_EQ(*store_->renew_lease("c1", shared_, slow.lease, kLongLease), LeaseOutcome::kLeaseLost);
  FencedWriteResult late = commit("c1", shared_, slow.lease, manifest_v("late", "h1"));
  EXPECT_EQ(late.outcome, LeaseOutcome::kLeaseLost);
  EXPECT_FALSE(manifest("c1", shared_).has_value());

  // Once somebody else took over, the late writer is told its fence is stale.
  AcquireResult next = acquire("c1", shared_, 2);
  ASSERT_TRUE(next.acquired);
  EXPECT_EQ(next.lease.fence, 2);
  late = commit("c1", shared_, slow.lease, manifest_v("late", "h1"));
  EXPECT_EQ(late.outcome, LeaseOutcome::kStaleFence);
  EXPECT_EQ(late.current_fence, 2);
  EXPECT_FALSE(manifest("c1", shared_).has_value());
}

TEST_P(StoreConformance, TheNewerFenceWins) {
  configure({record("c1", "h1")});
  AcquireResult a = acquire("c1", shared_, 1, kShortLease);
  ASSERT_TRUE(a.acquired);
  pass(kPastShort);
  AcquireResult b = acquire("c1", shared_, 2);
  ASSERT_TRUE(b.acquired);
  ASSERT_EQ(b.lease.fence, 2);

  int64_t before = epoch();
  FencedWriteResult won = commit("c1", shared_, b.lease, manifest_v("new", "h1"));
  ASSERT_TRUE(won.ok());
  EXPECT_EQ(won.epoch, before + 1);
  EXPECT_EQ(epoch(), before + 1);

  FencedWriteResult lost = commit("c1", shared_, a.lease, manifest_v("old", "h1"));
  EXPECT_EQ(lost.outcome, LeaseOutcome::kStaleFence);
  EXPECT_EQ(lost.current_fence, 2);
  EXPECT_EQ(fail("c1", shared_, a.lease, failure_under("h1")).outcome, LeaseOutcome::kStaleFence);

  std::optional<StoredManifest> m = manifest("c1", shared_);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->manifest, manifest_v("new", "h1").manifest);
  EXPECT_EQ(m->meta.etag, "\"etag-new\"");
  EXPECT_EQ(m->meta.fence, 2);
  EXPECT_TRUE(m->meta.error_code.empty());
  EXPECT_EQ(epoch(), before + 1);  // refusals bump nothing

  // The commit released the lease; the next holder's fence is past the committed one.
  AcquireResult c = acquire("c1", shared_, 3);
  ASSERT_TRUE(c.acquired);
  EXPECT_EQ(c.lease.fence, 3);
}

TEST_P(StoreConformance, AConfigChangeMidListingIsRefused) {
  configure({record("c1", "h1")});
  AcquireResult a = acquire("c1", shared_, 1);
  ASSERT_TRUE(a.acquired);

  Result<ConnectionSync> changed = store_->sync_connections({record("c1", "h2")});
  ASSERT_TRUE(changed.ok()) << changed.error().message;
  EXPECT_EQ(changed->changed, std::vector<std::string>{"c1"});
  EXPECT_EQ(store_->read_connection("c1")->value().config_hash, "h2");

  EXPECT_EQ(commit("c1", shared_, a.lease, manifest_v("v1", "h1")).outcome,
            LeaseOutcome::kConfigChanged);
  EXPECT_EQ(fail("c1", shared_, a.lease, failure_under("h1")).outcome,
            LeaseOutcome::kConfigChanged);
  EXPECT_FALSE(manifest("c1", shared_).has_value());

  // A refusal keeps the lease; a listing under the new config commits.
  EXPECT_TRUE(commit("c1", shared_, a.lease, manifest_v("v2", "h2")).ok());
  EXPECT_EQ(meta("c1", shared_)->config_hash, "h2");

  // A connection removed mid-listing takes its lease with it: the late write finds no lease.
  configure({record("c1", "h2"), record("c2", "h1", CredentialMode::kPerMember)});
  AcquireResult b = acquire("c2", member("alice"), 2);
  ASSERT_TRUE(b.acquired);
  configure({record("c1", "h2")});
  EXPECT_EQ(commit("c2", member("alice"), b.lease, manifest_v("v1", "h1")).outcome,
            LeaseOutcome::kLeaseLost);
  EXPECT_FALSE(manifest("c2", member("alice")).has_value());
}

// ---- failures ----------------------------------------------------------------------------------

TEST_P(StoreConformance, AFailureKeepsTheLastGoodManifestAndNeverRestampsConfigHash) {
  configure({record("c1", "h1")});
  refresh("c1", shared_, "v1", "h1");

  AcquireResult a = acquire("c1", shared_, 2);
  ASSERT_TRUE(a.acquired);
  int64_t before = epoch();
  ASSERT_TRUE(fail("c1", shared_, a.lease, failure_under("h1")).ok());
  std::optional<StoredManifest> m = manifest("c1", shared_);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->meta.has_data);
  EXPECT_EQ(m->manifest, manifest_v("v1", "h1").manifest);
  EXPECT_EQ(m->meta.config_hash, "h1");
  EXPECT_EQ(m->meta.fence, 1);
  EXPECT_EQ(m->meta.fetched_at_ms, kT0);
  EXPECT_EQ(m->meta.error_code, "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(m->meta.error_message, "tools/list failed twice: connection reset");
  EXPECT_EQ(m->meta.error_at_ms, kT0 + 5'000);
  EXPECT_EQ(m->meta.attempt_at_ms, kT0 + 4'000);
  EXPECT_EQ(epoch(), before);  // nothing readers serve changed
  // The lease went back with the record.
  EXPECT_TRUE(acquire("c1", shared_, 3).acquired);
  ASSERT_EQ(*store_->release_lease("c1", shared_, Lease{3, token(3)}), LeaseOutcome::kOk);

  // Still served while stale, with the failure visible.
  FreshnessPolicy policy;
  Classification stale =
      classify(cache_entry_meta(m->meta), policy, "h1", kT0 + policy.fresh_ttl_ms + 1);
  EXPECT_EQ(stale.state, Freshness::kStale);
  EXPECT_TRUE(stale.last_refresh_failed);

  // The config changes and the next listing fails too: the old data keeps its old hash, so
  // readers see a miss, not data from the old config passed off as current.
  configure({record("c1", "h2")});
  AcquireResult b = acquire("c1", shared_, 4);
  ASSERT_TRUE(b.acquired);
  ASSERT_TRUE(fail("c1", shared_, b.lease, failure_under("h2", kT0 + 9'000)).ok());
  std::optional<ManifestMeta> after = meta("c1", shared_);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->config_hash, "h1");
  EXPECT_EQ(after->error_at_ms, kT0 + 9'000);
  Classification miss = classify(cache_entry_meta(*after), policy, "h2", kT0 + 10'000);
  EXPECT_EQ(miss.state, Freshness::kMiss);
  EXPECT_EQ(miss.miss_reason, MissReason::kConfigChanged);

  // A key never listed gets an error-only record: no data, no config_hash.
  AcquireResult c = acquire("c1", member("bob"), 5);
  ASSERT_TRUE(c.acquired);
  RefreshFailure long_message = failure_under("h2");
  long_message.error_message = std::string(kMaxErrorMessageBytes - 1, 'x') + "\xC3\xA9 tail";
  ASSERT_TRUE(fail("c1", member("bob"), c.lease, long_message).ok());
  std::optional<StoredManifest> error_only = manifest("c1", member("bob"));
  ASSERT_TRUE(error_only.has_value());
  EXPECT_FALSE(error_only->meta.has_data);
  EXPECT_TRUE(error_only->manifest.empty());
  EXPECT_TRUE(error_only->meta.config_hash.empty());
  // Cut at the UTF-8 boundary before the byte limit, by both stores alike.
  EXPECT_EQ(error_only->meta.error_message, std::string(kMaxErrorMessageBytes - 1, 'x'));
  Classification none = classify(cache_entry_meta(error_only->meta), policy, "h2", kT0);
  EXPECT_EQ(none.state, Freshness::kMiss);
  EXPECT_TRUE(none.last_refresh_failed);

  // The next good listing clears the error.
  refresh("c1", shared_, "v2", "h2", 6);
  std::optional<ManifestMeta> healed = meta("c1", shared_);
  ASSERT_TRUE(healed.has_value());
  EXPECT_TRUE(healed->error_code.empty());
  EXPECT_TRUE(healed->error_message.empty());
  EXPECT_EQ(healed->config_hash, "h2");
}

// An upstream down for longer than twice the max age (the retention manifests once had): the last
// good manifest and its error stay, so readers see `expired` with the last error, not `pending`.
TEST_P(StoreConformance, AnOutageLongerThanTwiceTheMaxAgeKeepsTheLastManifestAndItsError) {
  configure({record("c1", "h1")});
  refresh("c1", shared_, "v1", "h1");
  AcquireResult a = acquire("c1", shared_, 2);
  ASSERT_TRUE(a.acquired);
  ASSERT_TRUE(fail("c1", shared_, a.lease, failure_under("h1")).ok());
  // A per-member key whose only listing failed: its error record stays too.
  AcquireResult b = acquire("c1", member("bob"), 3);
  ASSERT_TRUE(b.acquired);
  ASSERT_TRUE(fail("c1", member("bob"), b.lease, failure_under("h1")).ok());

  FreshnessPolicy policy;
  const int64_t later = kT0 + 3 * policy.max_age_ms;
  if (GetParam() != Kind::kSqlite) {
    // Redis' clock cannot be moved: the hashes carry no TTL at all (schema/redis-keys.md).
    RedisKeys keys = *RedisKeys::create();
    EXPECT_EQ(text_of(backend_->raw({"PTTL", *keys.manifest("c1", shared_)})), "-1");
    EXPECT_EQ(text_of(backend_->raw({"PTTL", *keys.manifest("c1", member("bob"))})), "-1");
  } else {
    pass(3 * policy.max_age_ms);
  }
  std::optional<StoredManifest> m = manifest("c1", shared_);
  ASSERT_TRUE(m.has_value()) << "the last good manifest was dropped";
  EXPECT_EQ(m->manifest, manifest_v("v1", "h1").manifest);
  EXPECT_EQ(m->meta.error_code, "UPSTREAM_UNAVAILABLE");
  Classification k = classify(cache_entry_meta(m->meta), policy, "h1", later);
  EXPECT_EQ(k.state, Freshness::kExpired);
  EXPECT_TRUE(k.last_refresh_failed);
  std::optional<ManifestMeta> bob = meta("c1", member("bob"));
  ASSERT_TRUE(bob.has_value()) << "the error record was dropped";
  EXPECT_EQ(bob->error_code, "UPSTREAM_UNAVAILABLE");
  // The maintenance walk still finds both.
  Result<ManifestPage> page = store_->list_manifest_metas("", 10);
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->metas.size(), 2u);
}

// ---- the namespace record ----------------------------------------------------------------------

TEST_P(StoreConformance, TheNamespaceRecordTellsAWipedStoreFromAnEmptyOne) {
  auto state = [&] {
    Result<NamespaceRecord> r = store_->read_namespace();
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->state : NamespaceState::kMissing;
  };
  if (GetParam() == Kind::kSqlite) {
    // The agent's own file: always initialised, the writes change nothing.
    EXPECT_EQ(state(), NamespaceState::kReady);
    EXPECT_TRUE(store_->begin_namespace_restore(kT0).ok());
    EXPECT_EQ(state(), NamespaceState::kReady);
    EXPECT_TRUE(*store_->mark_namespace_ready(kT0));
    return;
  }
  EXPECT_EQ(state(), NamespaceState::kMissing);
  // Ready needs a restore begun: SET XX does not create the record.
  EXPECT_FALSE(*store_->mark_namespace_ready(kT0));
  EXPECT_EQ(state(), NamespaceState::kMissing);
  ASSERT_TRUE(store_->begin_namespace_restore(kT0).ok());
  EXPECT_EQ(state(), NamespaceState::kRestoring);
  EXPECT_TRUE(*store_->mark_namespace_ready(kT0 + 1));
  EXPECT_EQ(state(), NamespaceState::kReady);
  EXPECT_EQ(store_->read_namespace()->value, "ready:" + std::to_string(kT0 + 1));
  // A restore begun on a ready namespace never demotes it (readers keep being served).
  ASSERT_TRUE(store_->begin_namespace_restore(kT0 + 2).ok());
  EXPECT_EQ(state(), NamespaceState::kReady);
  // Wiped mid-restore: the record is gone, and the late `ready` does not bring it back.
  ASSERT_EQ(text_of(backend_->raw({"FLUSHALL"})), "OK");
  EXPECT_EQ(state(), NamespaceState::kMissing);
  ASSERT_TRUE(store_->begin_namespace_restore(kT0 + 3).ok());
  ASSERT_EQ(text_of(backend_->raw({"FLUSHALL"})), "OK");
  EXPECT_FALSE(*store_->mark_namespace_ready(kT0 + 4));
  EXPECT_EQ(state(), NamespaceState::kMissing);
  // The store's clock, for the skew report.
  Result<std::optional<int64_t>> t = store_->store_time_ms();
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_TRUE(t->has_value());
  EXPECT_GT(**t, kT0 - 1'000'000'000'000);  // a plausible epoch-ms value, not seconds
}

// Every agent start and reload joins the revalidation group under a new name: the idle ones with
// nothing pending go; one with entries pending stays until they are claimed.
TEST_P(StoreConformance, DeadConsumersWithNothingPendingAreRemoved) {
  configure({record("c1", "h1"), record("c2", "h1")});
  if (GetParam() == Kind::kSqlite) {
    EXPECT_TRUE(store_->remove_idle_consumers("me", 0)->empty());
    return;
  }
  EXPECT_TRUE(store_->remove_idle_consumers("me", 0)->empty());  // no group yet: nobody
  ASSERT_EQ(enqueue("c1", shared_, "stale"), RevalidationOutcome::kQueued);
  ASSERT_EQ(read("old-run", 10).requests.size(), 1u);  // delivered, never acknowledged
  ASSERT_EQ(enqueue("c2", shared_, "stale"), RevalidationOutcome::kQueued);
  RevalidationBatch handled = read("older-run", 10);  // delivered and handled
  ASSERT_EQ(handled.requests.size(), 1u);
  ASSERT_TRUE(store_->ack_revalidations(ids_of(handled)).ok());
  EXPECT_TRUE(read("me", 10).requests.empty());
  pass(50);
  // Not idle long enough: nobody goes.
  EXPECT_TRUE(store_->remove_idle_consumers("me", 60'000)->empty());
  Result<std::vector<std::string>> removed = store_->remove_idle_consumers("me", 20);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(*removed,
            std::vector<std::string>{"older-run"});  // "old-run" holds an entry; "me" is us
  // Once its entry is claimed (and handled), it goes too.
  RevalidationBatch taken = claim("me", 0);
  ASSERT_EQ(taken.requests.size(), 1u);
  ASSERT_TRUE(store_->ack_revalidations(ids_of(taken)).ok());
  pass(50);
  removed = store_->remove_idle_consumers("me", 20);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(*removed, std::vector<std::string>{"old-run"});
  RespValue left = backend_->raw(
      {"XINFO", "CONSUMERS", RedisKeys::create()->revalidate_stream(), kRevalidateConsumerGroup});
  ASSERT_EQ(left.elements.size(), 1u);  // only "me"
}

// ---- config sync -------------------------------------------------------------------------------

TEST_P(StoreConformance, SyncRemovesEverythingOfAConnectionNoLongerConfigured) {
  Result<ConnectionSync> first = store_->sync_connections(
      {record("c1", "h1"), record("c2", "h2", CredentialMode::kPerMember)});
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->added, (std::vector<std::string>{"c1", "c2"}));
  int64_t synced = epoch();
  EXPECT_GT(synced, 0);

  // The same configuration again changes nothing, updated_at included.
  ConnectionRecord later = record("c1", "h1");
  later.updated_at_ms = kT0 + 1;
  Result<ConnectionSync> again =
      store_->sync_connections({later, record("c2", "h2", CredentialMode::kPerMember)});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->any());
  EXPECT_EQ(epoch(), synced);
  EXPECT_EQ(store_->read_connection("c1")->value(), record("c1", "h1"));

  Result<GrantSync> grants = store_->sync_grants({{"alice", {"c1", "c2"}}, {"bob", {"c2"}}});
  ASSERT_TRUE(grants.ok()) << grants.error().message;
  EXPECT_EQ(grants->changed_members, (std::vector<std::string>{"alice", "bob"}));
  EXPECT_EQ(*store_->read_grants("alice"), (std::set<std::string>{"c1", "c2"}));

  refresh("c1", shared_, "v1", "h1", 1);
  refresh("c2", member("alice"), "v1", "h2", 2);
  ASSERT_TRUE(store_
                  ->merge_preferences("c2", member("alice"),
                                      disabled_rows("c2", member("alice"), {"tool:delete_repo"}))
                  .ok());
  ASSERT_TRUE(acquire("c2", member("bob"), 3).acquired);  // a listing under way

  int64_t before = epoch();
  Result<ConnectionSync> removal = store_->sync_connections({record("c1", "h1")});
  ASSERT_TRUE(removal.ok()) << removal.error().message;
  EXPECT_EQ(removal->removed, std::vector<std::string>{"c2"});
  EXPECT_TRUE(removal->added.empty());
  EXPECT_GT(epoch(), before);

  Result<std::vector<ConnectionRecord>> conns = store_->list_connections();
  ASSERT_TRUE(conns.ok());
  EXPECT_EQ(*conns, std::vector<ConnectionRecord>{record("c1", "h1")});
  EXPECT_FALSE(store_->read_connection("c2")->has_value());
  EXPECT_FALSE(manifest("c2", member("alice")).has_value());
  EXPECT_FALSE(meta("c2", member("alice")).has_value());
  EXPECT_TRUE(store_->read_disabled("c2", member("alice"))->empty());
  // The choice itself outlives the connection (it comes back with it).
  EXPECT_EQ(store_->merge_preferences("c2", member("alice"), {})->rows.size(), 1u);
  EXPECT_EQ(*store_->read_grants("alice"), std::set<std::string>{"c1"});
  EXPECT_TRUE(store_->read_grants("bob")->empty());
  // bob's lease went too: the key is free.
  EXPECT_TRUE(acquire("c2", member("bob"), 4).acquired);
  // c1 is untouched.
  EXPECT_EQ(manifest("c1", shared_)->manifest, manifest_v("v1", "h1").manifest);

  // Grants already match the configuration: nothing to do. An empty map removes every grant.
  EXPECT_TRUE(store_->sync_grants({{"alice", {"c1"}}})->changed_members.empty());
  EXPECT_EQ(store_->sync_grants({})->changed_members, std::vector<std::string>{"alice"});
  EXPECT_TRUE(store_->read_grants("alice")->empty());
}

// Both stores agree on a grant sync member by member: added, changed, removed (also a member
// only the admin API wrote), and the reverse index follows each.
TEST_P(StoreConformance, AGrantSyncAddsChangesAndRemovesMembersAndTheirGrantees) {
  Result<GrantSync> first = store_->sync_grants({{"alice", {"c1", "c2"}}, {"bob", {"c2"}}});
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->changed_members, (std::vector<std::string>{"alice", "bob"}));
  ASSERT_TRUE(*store_->set_member_grants("erin", {"c2"}));
  EXPECT_EQ(*store_->read_grantees("c2"), (std::set<std::string>{"alice", "bob", "erin"}));
  const int64_t before = epoch();
  Result<GrantSync> next =
      store_->sync_grants({{"bob", {"c1", "c2"}}, {"carol", {"c3"}}, {"dave", {}}});
  ASSERT_TRUE(next.ok()) << next.error().message;
  // alice and erin removed, bob changed, carol added; dave had nothing and has nothing.
  EXPECT_EQ(next->changed_members, (std::vector<std::string>{"alice", "bob", "carol", "erin"}));
  EXPECT_GT(epoch(), before);
  EXPECT_TRUE(store_->read_grants("alice")->empty());
  EXPECT_TRUE(store_->read_grants("erin")->empty());
  EXPECT_EQ(*store_->read_grants("bob"), (std::set<std::string>{"c1", "c2"}));
  EXPECT_EQ(*store_->read_grantees("c1"), std::set<std::string>{"bob"});
  EXPECT_EQ(*store_->read_grantees("c2"), std::set<std::string>{"bob"});
  EXPECT_EQ(*store_->read_grantees("c3"), std::set<std::string>{"carol"});
  const int64_t steady = epoch();
  Result<GrantSync> same = store_->sync_grants({{"bob", {"c1", "c2"}}, {"carol", {"c3"}}});
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->changed_members.empty());
  EXPECT_EQ(epoch(), steady);  // nothing written
}

TEST_P(StoreConformance, PreferencesMergeByToggleTimeAndPublishEachPrincipalsOverlay) {
  configure({record("c1", "h1"), record("c2", "h2", CredentialMode::kPerMember)});
  const int64_t e0 = epoch();
  // Agent A's copy: two capabilities disabled at t=10.
  Result<MergedPreferences> a = store_->merge_preferences(
      "c1", shared_, disabled_rows("c1", shared_, {"tool:delete_repo", "prompt:draft"}, 10));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->overlay_changed);
  EXPECT_EQ(a->epoch, e0 + 1);
  EXPECT_EQ(a->rows.size(), 2u);
  EXPECT_EQ(*store_->read_disabled("c1", shared_),
            (DisabledOverlay{"prompt:draft", "tool:delete_repo"}));

  // Agent B's older copy (never toggled, enabled) cannot undo them, and adds what it listed.
  std::vector<PreferenceRow> b =
      preference_rows("c1", shared_, {"tool:delete_repo", "prompt:draft", "tool:search"}, true, 0);
  b[0].last_seen_at = 50;
  Result<MergedPreferences> merged = store_->merge_preferences("c1", shared_, b);
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  EXPECT_FALSE(merged->overlay_changed);
  EXPECT_EQ(merged->epoch, e0 + 1);  // nothing a reader sees changed
  ASSERT_EQ(merged->rows.size(), 3u);
  EXPECT_EQ(merged->rows[0].capability_key, "delete_repo");  // (type, key) order
  EXPECT_FALSE(merged->rows[0].enabled);
  EXPECT_EQ(merged->rows[0].toggled_at, 10);
  EXPECT_EQ(merged->rows[0].last_seen_at, 50);  // the latest sighting
  EXPECT_TRUE(merged->rows[1].enabled);         // tool:search, as B listed it
  EXPECT_EQ(*store_->read_disabled("c1", shared_),
            (DisabledOverlay{"prompt:draft", "tool:delete_repo"}));

  // A newer toggle wins; an equal time with a different choice hides (the tie-break).
  ASSERT_TRUE(store_
                  ->merge_preferences("c1", shared_,
                                      preference_rows("c1", shared_, {"prompt:draft"}, true, 11))
                  .ok());
  ASSERT_TRUE(
      store_->merge_preferences("c1", shared_, disabled_rows("c1", shared_, {"tool:search"}, 0))
          .ok());
  EXPECT_EQ(*store_->read_disabled("c1", shared_),
            (DisabledOverlay{"tool:delete_repo", "tool:search"}));

  // Per-member overlays are each member's own.
  ASSERT_TRUE(store_
                  ->merge_preferences("c2", member("alice"),
                                      disabled_rows("c2", member("alice"), {"tool:mail"}))
                  .ok());
  EXPECT_EQ(*store_->read_disabled("c2", member("alice")), DisabledOverlay{"tool:mail"});
  EXPECT_TRUE(store_->read_disabled("c2", member("bob"))->empty());
  EXPECT_TRUE(store_->merge_preferences("c2", member("bob"), {})->rows.empty());

  // Bad rows are refused and change nothing.
  const int64_t before = epoch();
  Result<MergedPreferences> other = store_->merge_preferences(
      "c2", member("bob"), disabled_rows("c2", member("alice"), {"tool:x"}));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, ErrorCode::kInvalidArgument);
  std::vector<PreferenceRow> no_key = disabled_rows("c1", shared_, {"tool:x"});
  no_key[0].capability_key.clear();
  EXPECT_EQ(store_->merge_preferences("c1", shared_, no_key).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(epoch(), before);
  EXPECT_EQ(*store_->bump_epoch(), before + 1);
}

// ---- maintenance walk --------------------------------------------------------------------------

// The store's merge (Lua script on Redis, SQL on SQLite) is merge_preference() of the core, row
// for row: copies from several agents merged in any order end where the core's merge_rows ends.
TEST_P(StoreConformance, TheStoresMergeIsTheCoresMerge) {
  configure({record("c1", "h1")});
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  auto next = [&](uint64_t bound) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % bound;
  };
  std::vector<PreferenceRow> expected;
  for (int round = 0; round < 40; ++round) {
    std::vector<PreferenceRow> copy;
    for (int i = 0; i < 6; ++i) {
      // Few keys and few distinct times: many overlaps and ties.
      PreferenceRow row = preference_rows("c1", shared_, {"tool:k" + std::to_string(next(8))},
                                          next(2) == 0, static_cast<int64_t>(next(4)))[0];
      row.first_seen_at = static_cast<int64_t>(1'780'000'000'000 + next(5));
      row.last_seen_at = row.first_seen_at + static_cast<int64_t>(next(5));
      if (std::any_of(copy.begin(), copy.end(), [&](const PreferenceRow& r) {
            return r.capability_key == row.capability_key;
          })) {
        continue;  // one row per key in a copy, as an agent's table holds them
      }
      copy.push_back(row);
    }
    expected = merge_rows(expected, copy);
    Result<MergedPreferences> merged = store_->merge_preferences("c1", shared_, copy);
    ASSERT_TRUE(merged.ok()) << merged.error().message;
    ASSERT_EQ(merged->rows, expected) << "round " << round;
  }
  EXPECT_EQ(*store_->read_disabled("c1", shared_), disabled_overlay("c1", shared_, expected));
}

TEST_P(StoreConformance, TheMaintenanceWalkSeesEveryRecordOnce) {
  configure({record("c1", "h1"), record("c2", "h2", CredentialMode::kPerMember)});
  std::set<std::string> expected;
  int n = 10;
  for (const char* who : {"alice", "bob", "carol", "dave"}) {
    refresh("c2", member(who), "v1", "h2", ++n);
    expected.insert(std::string("c2 member/") + who + " data");
  }
  refresh("c1", shared_, "v1", "h1", ++n);
  expected.insert("c1 shared data");
  for (const char* who : {"erin", "frank"}) {
    AcquireResult a = acquire("c2", member(who), ++n);
    ASSERT_TRUE(fail("c2", member(who), a.lease, failure_under("h2")).ok());
    expected.insert(std::string("c2 member/") + who + " error");
  }

  std::multiset<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    Result<ManifestPage> page = store_->list_manifest_metas(cursor, 2);
    ASSERT_TRUE(page.ok()) << page.error().message;
    EXPECT_TRUE(page->unreadable.empty());
    for (const ManifestMeta& m : page->metas) {
      seen.insert(m.connection_id + " " + m.principal.str() + (m.has_data ? " data" : " error"));
      if (m.has_data) {
        EXPECT_FALSE(m.config_hash.empty());
        EXPECT_EQ(m.fresh_until_ms, kT0 + 900'000);
      } else {
        EXPECT_EQ(m.error_code, "UPSTREAM_UNAVAILABLE");
      }
    }
    cursor = page->next_cursor;
    ASSERT_LT(++pages, 100);
  } while (!cursor.empty());
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), expected);
  EXPECT_EQ(seen.size(), expected.size());

  Result<ManifestPage> bad = store_->list_manifest_metas("bad cursor!", 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

// ---- the refresh-due index ---------------------------------------------------------------------

// "<cid> <principal>@<due_at>" of every entry due at `now`, soonest first, read `batch` at a time.
std::vector<std::string> due_at(ManifestStore& store, int64_t now, std::size_t batch = 100) {
  std::vector<std::string> out;
  for (std::size_t offset = 0;; offset += batch) {
    Result<DuePage> page = store.list_due(now, offset, batch);
    EXPECT_TRUE(page.ok()) << page.error().message;
    if (!page.ok()) return out;
    EXPECT_TRUE(page->unreadable.empty());
    for (const DueEntry& e : page->entries) {
      EXPECT_TRUE(e.unreadable.empty()) << e.unreadable;
      out.push_back(e.connection_id + " " + e.principal.str() + "@" +
                    std::to_string(e.due_at_ms - (e.due_at_ms == 0 ? 0 : kT0)) +
                    (e.meta ? "" : " gone"));
    }
    if (page->listed < batch) return out;
  }
}

// Every fenced write scores its key's entry in the same step; list_due reads what is due with
// the metadata, soonest first, in pages; a settlement applies only to the score it read; a drop,
// a revoked grant, a changed and a removed connection move or remove the entries they concern.
TEST_P(StoreConformance, TheRefreshDueIndexHoldsWhenEachRecordIsNextDue) {
  configure({record("c1", "h1"), record("c2", "h2", CredentialMode::kPerMember)});
  ASSERT_TRUE(store_->sync_grants({{"alice", {"c2"}}, {"bob", {"c2"}}}).ok());
  auto write = [&](const std::string& cid, const Principal& p, int n, int64_t due,
                   bool failed = false) {
    AcquireResult a = acquire(cid, p, n);
    ASSERT_TRUE(a.acquired);
    FencedWriteOptions o{true};
    o.due_at_ms = kT0 + due;
    Result<FencedWriteResult> r =
        failed
            ? store_->record_failure(cid, p, a.lease, failure_under(cid == "c1" ? "h1" : "h2"), o)
            : store_->commit_manifest(cid, p, a.lease, manifest_v("v1", cid == "c1" ? "h1" : "h2"),
                                      o);
    ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? "refused" : r.error().message);
  };
  write("c1", shared_, 1, 100);
  write("c2", member("alice"), 2, 500);
  write("c2", member("bob"), 3, 200, true);  // error-only: a record too

  EXPECT_TRUE(due_at(*store_, kT0 + 50).empty());
  EXPECT_EQ(due_at(*store_, kT0 + 300),
            (std::vector<std::string>{"c1 shared@100", "c2 member/bob@200"}));
  EXPECT_EQ(
      due_at(*store_, kT0 + 1000, 2),
      (std::vector<std::string>{"c1 shared@100", "c2 member/bob@200", "c2 member/alice@500"}));
  Result<DuePage> page = store_->list_due(kT0 + 1000, 0, 10);
  ASSERT_TRUE(page.ok()) << page.error().message;
  ASSERT_EQ(page->entries.size(), 3u);
  ASSERT_TRUE(page->entries[0].meta && page->entries[1].meta);
  EXPECT_TRUE(page->entries[0].meta->has_data);
  EXPECT_EQ(page->entries[0].meta->etag, "\"etag-v1\"");
  EXPECT_FALSE(page->entries[1].meta->has_data);
  EXPECT_EQ(page->entries[1].meta->error_code, "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(
      *store_->has_due_entries({{"c1", shared_}, {"c2", member("carol")}, {"c2", member("bob")}}),
      (std::vector<bool>{true, false, true}));

  // Maintenance settles what it read; a write that rescored the entry meanwhile wins.
  write("c2", member("bob"), 4, 250, true);
  Result<std::vector<bool>> settled = store_->settle_due(
      {{"c1", shared_, kT0 + 100, kT0 + 5'000}, {"c2", member("bob"), kT0 + 200, kT0 + 6'000}});
  ASSERT_TRUE(settled.ok()) << settled.error().message;
  EXPECT_EQ(*settled, (std::vector<bool>{true, false}));
  EXPECT_EQ(due_at(*store_, kT0 + 1000),
            (std::vector<std::string>{"c2 member/bob@250", "c2 member/alice@500"}));
  EXPECT_EQ(due_at(*store_, kT0 + 5'000).back(), "c1 shared@5000");

  // A dropped principal takes its entry along.
  ASSERT_TRUE(*store_->drop_manifest("c2", member("alice")));
  EXPECT_EQ(due_at(*store_, kT0 + 1000), (std::vector<std::string>{"c2 member/bob@250"}));
  // A revoked grant makes the member's entry due now (maintenance then drops it); a grant
  // that stays, or a key never listed, gets nothing.
  ASSERT_TRUE(store_->sync_grants({{"alice", {"c2"}}}).ok());
  EXPECT_EQ(due_at(*store_, kT0), (std::vector<std::string>{"c2 member/bob@0"}));
  ASSERT_TRUE(store_->set_member_grants("alice", {}).ok());
  EXPECT_EQ(*store_->has_due_entries({{"c2", member("alice")}}), std::vector<bool>{false});
  // A changed connection: each of its entries is due now.
  configure({record("c1", "h1b"), record("c2", "h2", CredentialMode::kPerMember)});
  EXPECT_EQ(due_at(*store_, kT0), (std::vector<std::string>{"c1 shared@0", "c2 member/bob@0"}));
  // A removed connection: its entries go with its records.
  configure({record("c1", "h1b")});
  EXPECT_EQ(due_at(*store_, kT0), (std::vector<std::string>{"c1 shared@0"}));
  EXPECT_EQ(*store_->has_due_entries({{"c2", member("bob")}}), std::vector<bool>{false});
  // Nothing written before the index here: the backfill has nothing to add.
  Result<DueBackfill> backfill = store_->backfill_due_index(1000);
  ASSERT_TRUE(backfill.ok()) << backfill.error().message;
  EXPECT_TRUE(backfill->done);
  EXPECT_EQ(backfill->added, 0u);

  EXPECT_EQ(store_->list_due(kT0, 0, 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->settle_due({{"c1", shared_, 0, int64_t{1} << 53}}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->has_due_entries({{"bad id!", shared_}}).error().code,
            ErrorCode::kInvalidArgument);
}

// ---- revalidation queue ------------------------------------------------------------------------

TEST_P(StoreConformance, RevalidationIsGatedOncePerWindowAndNotQueuedWhileLeased) {
  configure({record("c1", "h1")});
  EXPECT_EQ(enqueue("c1", shared_, "stale", 300), RevalidationOutcome::kQueued);
  EXPECT_EQ(enqueue("c1", shared_, "stale", 300), RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(enqueue("c1", shared_, "miss", 300), RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(enqueue("c1", member("alice"), "miss", 300), RevalidationOutcome::kQueued);  // own gate

  pass(kPastShort + 100);  // the window ends: the next stale read re-arms it
  EXPECT_EQ(enqueue("c1", shared_, "expired", 300), RevalidationOutcome::kQueued);

  AcquireResult a = acquire("c1", member("bob"), 1);
  ASSERT_TRUE(a.acquired);
  EXPECT_EQ(enqueue("c1", member("bob"), "stale"), RevalidationOutcome::kInProgress);
  ASSERT_EQ(*store_->release_lease("c1", member("bob"), a.lease), LeaseOutcome::kOk);
  EXPECT_EQ(enqueue("c1", member("bob"), "stale"), RevalidationOutcome::kQueued);

  // Requests queued before any consumer ran are all there, in order.
  RevalidationBatch batch = read("agent-1", 10);
  EXPECT_EQ(keys_of(batch), (std::vector<std::string>{"c1/shared/stale", "c1/member/alice/miss",
                                                      "c1/shared/expired", "c1/member/bob/stale"}));
  EXPECT_TRUE(batch.malformed_ids.empty());
  for (const RevalidationRequest& r : batch.requests) EXPECT_GT(r.at_ms, 0);

  Result<RevalidationOutcome> bad = store_->enqueue_revalidation("c1", shared_, "", 300);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

TEST_P(StoreConformance, AManualRefreshIsQueuedAgainOnceTheGateIsASecondOld) {
  // A reader's gate holds for the window; a manual refresh (refresh-tools) goes through it once
  // the gate is a second old, and restarts it. The same on Redis (revalidate_enqueue.lua) and
  // SQLite (revalidation_gate_take_manual).
  configure({record("c1", "h1")});
  const Principal alice = member("alice");
  ASSERT_EQ(enqueue("c1", alice, "stale"), RevalidationOutcome::kQueued);
  EXPECT_EQ(enqueue("c1", alice, "manual"),
            RevalidationOutcome::kAlreadyQueued);  // younger than 1 s
  pass(kManualRequeueAfterMs + 300);
  EXPECT_EQ(enqueue("c1", alice, "stale"), RevalidationOutcome::kAlreadyQueued);  // readers wait
  EXPECT_EQ(enqueue("c1", alice, "manual"), RevalidationOutcome::kQueued);
  EXPECT_EQ(enqueue("c1", alice, "manual"), RevalidationOutcome::kAlreadyQueued);  // restarted
  EXPECT_EQ(keys_of(read("agent-1", 10)),
            (std::vector<std::string>{"c1/member/alice/stale", "c1/member/alice/manual"}));

  // A held lease still means in progress, for a manual refresh too.
  AcquireResult a = acquire("c1", alice, 1);
  ASSERT_TRUE(a.acquired);
  pass(kManualRequeueAfterMs + 300);
  EXPECT_EQ(enqueue("c1", alice, "manual"), RevalidationOutcome::kInProgress);
}

TEST_P(StoreConformance, DroppingAPrincipalKeepsItsFenceAndTheOthers) {
  configure({record("c1", "h1", CredentialMode::kPerMember)});
  refresh("c1", member("alice"), "v1", "h1", 900);
  refresh("c1", member("bob"), "v1", "h1", 901);
  EXPECT_EQ(enqueue("c1", member("bob"), "stale"), RevalidationOutcome::kQueued);
  const int64_t bob_fence = meta("c1", member("bob"))->fence;

  Result<bool> dropped = store_->drop_manifest("c1", member("bob"));
  ASSERT_TRUE(dropped.ok()) << dropped.error().message;
  EXPECT_TRUE(*dropped);
  EXPECT_FALSE(meta("c1", member("bob")));
  EXPECT_TRUE(meta("c1", member("alice")));
  EXPECT_FALSE(*store_->drop_manifest("c1", member("bob")));  // nothing left to drop
  // The gate went with it; the fence did not: a later lease still takes a newer fence.
  EXPECT_EQ(enqueue("c1", member("bob"), "miss"), RevalidationOutcome::kQueued);
  AcquireResult a = acquire("c1", member("bob"), 902);
  ASSERT_TRUE(a.acquired);
  EXPECT_GT(a.lease.fence, bob_fence);
}

TEST_P(StoreConformance, AWebhookMarksCachedDataStaleUntilALaterListing) {
  configure({record("c1", "h1")});
  ASSERT_TRUE(store_->begin_namespace_restore(kT0).ok());
  ASSERT_TRUE(*store_->mark_namespace_ready(kT0));
  // Nothing cached: nothing marked, nothing created.
  EXPECT_FALSE(webhook_marks(*store_, "c1", "wh:1", backend_->now()));
  EXPECT_FALSE(meta("c1", shared_));

  // Listed just now, on the stores' clock.
  auto listed_at = [](const std::string& version, int64_t fetched_at) {
    ManifestWrite w = manifest_v(version, "h1");
    w.fetched_at_ms = fetched_at;
    w.fresh_until_ms = fetched_at + 900'000;
    w.expires_at_ms = fetched_at + 86'400'000;
    return w;
  };
  AcquireResult first = acquire("c1", shared_, 900);
  ASSERT_TRUE(first.acquired);
  ASSERT_TRUE(commit("c1", shared_, first.lease, listed_at("v1", backend_->now())).ok());
  const int64_t before = epoch();
  EXPECT_TRUE(webhook_marks(*store_, "c1", "wh:2", backend_->now()));
  std::optional<ManifestMeta> m = meta("c1", shared_);
  ASSERT_TRUE(m && m->invalidated_at_ms);
  const int64_t at = *m->invalidated_at_ms;
  EXPECT_GE(at, m->fetched_at_ms);
  const FreshnessPolicy policy;
  EXPECT_EQ(classify(cache_entry_meta(*m), policy, "h1", at).state, Freshness::kStale);
  EXPECT_EQ(classify(cache_entry_meta(*m), policy, "h1", at - 1).state, Freshness::kFresh);
  if (GetParam() != Kind::kSqlite) {
    EXPECT_GT(epoch(), before);  // edges drop L1 copies
  }

  // A listing that started after the webhook clears it; one that started before does not.
  AcquireResult a = acquire("c1", shared_, 901);
  ASSERT_TRUE(a.acquired);
  // started in the webhook's millisecond: still before it
  ASSERT_TRUE(commit("c1", shared_, a.lease, listed_at("v2", at)).ok());
  m = meta("c1", shared_);
  ASSERT_TRUE(m);
  EXPECT_EQ(classify(cache_entry_meta(*m), policy, "h1", at + 10).state, Freshness::kStale);
  a = acquire("c1", shared_, 902);
  ASSERT_TRUE(a.acquired);
  ASSERT_TRUE(commit("c1", shared_, a.lease, listed_at("v3", at + 5)).ok());
  m = meta("c1", shared_);
  ASSERT_TRUE(m);
  EXPECT_EQ(classify(cache_entry_meta(*m), policy, "h1", at + 10).state, Freshness::kFresh);
}

TEST_P(StoreConformance, ConsumersReadEachRequestOnceAndAcknowledgeIt) {
  configure({record("c1", "h1")});
  for (const char* who : {"alice", "bob", "carol"}) {
    ASSERT_EQ(enqueue("c1", member(who), "stale"), RevalidationOutcome::kQueued);
  }
  RevalidationBatch first = read("agent-1", 2);
  EXPECT_EQ(keys_of(first),
            (std::vector<std::string>{"c1/member/alice/stale", "c1/member/bob/stale"}));
  RevalidationBatch second = read("agent-1", 2);
  EXPECT_EQ(keys_of(second), std::vector<std::string>{"c1/member/carol/stale"});
  EXPECT_TRUE(read("agent-1", 2).requests.empty());
  EXPECT_TRUE(read("agent-2", 2).requests.empty());  // delivered requests go to nobody else

  std::vector<std::string> ids = ids_of(first);
  for (const std::string& id : ids_of(second)) ids.push_back(id);
  ASSERT_TRUE(store_->ack_revalidations(ids).ok());
  ASSERT_TRUE(store_->ack_revalidations(ids).ok());  // twice is harmless
  pass(kPastShort);
  EXPECT_TRUE(claim("agent-2", 0).requests.empty());  // acknowledged: nothing pending

  Status bad = store_->ack_revalidations({"not-an-id"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  Result<RevalidationBatch> bad_consumer = store_->read_revalidations("a b", 1, 0);
  ASSERT_FALSE(bad_consumer.ok());
  EXPECT_EQ(bad_consumer.error().code, ErrorCode::kInvalidArgument);
}

TEST_P(StoreConformance, ABlockingReadWaitsForARequestOrItsTimeout) {
  configure({record("c1", "h1")});
  SteadyClock::time_point start = SteadyClock::now();
  EXPECT_TRUE(read("agent-1", 1, 300).requests.empty());
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
  EXPECT_GE(waited.count(), 250);
  EXPECT_LT(waited.count(), 3'000);

  // A request queued by another agent while we wait arrives well before the timeout, and the
  // waiting reader does not hold up other calls on its store.
  std::unique_ptr<ManifestStore> edge = open();
  std::atomic<int64_t> health_ms{-1};
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    SteadyClock::time_point asked = SteadyClock::now();
    EXPECT_TRUE(store_->health().ok());
    health_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - asked).count();
    Result<RevalidationOutcome> r = edge->enqueue_revalidation("c1", shared_, "miss", 60'000);
    EXPECT_TRUE(r.ok() && *r == RevalidationOutcome::kQueued);
  });
  start = SteadyClock::now();
  RevalidationBatch got = read("agent-1", 1, 5'000);
  waited = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
  writer.join();
  EXPECT_EQ(keys_of(got), std::vector<std::string>{"c1/shared/miss"});
  EXPECT_LT(waited.count(), 4'000);
  EXPECT_GE(health_ms.load(), 0);
  EXPECT_LT(health_ms.load(), 1'000);
}

TEST_P(StoreConformance, ACrashedConsumersRequestsAreClaimedByAnother) {
  configure({record("c1", "h1")});
  ASSERT_EQ(enqueue("c1", member("alice"), "stale"), RevalidationOutcome::kQueued);
  ASSERT_EQ(enqueue("c1", member("bob"), "miss"), RevalidationOutcome::kQueued);
  RevalidationBatch taken = read("crashed", 10);
  ASSERT_EQ(taken.requests.size(), 2u);
  // ... and "crashed" never acknowledges them.

  EXPECT_TRUE(claim("rescuer", 300).requests.empty());  // not idle long enough yet
  pass(kPastShort + 100);
  RevalidationBatch rescued = claim("rescuer", 300);
  EXPECT_EQ(ids_of(rescued), ids_of(taken));
  EXPECT_EQ(keys_of(rescued), keys_of(taken));
  EXPECT_TRUE(claim("third", 300).requests.empty());  // the claim restarted their idle time
  EXPECT_TRUE(read("rescuer", 10).requests.empty());  // never delivered twice as new

  // claim_stale honours max.
  ASSERT_TRUE(store_->ack_revalidations({ids_of(rescued)[0]}).ok());
  pass(kPastShort + 100);
  RevalidationBatch one = claim("third", 300, 1);
  EXPECT_EQ(ids_of(one), std::vector<std::string>{ids_of(rescued)[1]});
  ASSERT_TRUE(store_->ack_revalidations(ids_of(one)).ok());
  pass(kPastShort + 100);
  EXPECT_TRUE(claim("fourth", 0).requests.empty());
}

// ---- health, arguments --------------------------------------------------------------------------

TEST_P(StoreConformance, BadArgumentsAreRefusedBeforeAnythingIsWritten) {
  configure({record("c1", "h1")});
  auto code = [](const auto& r) { return r.ok() ? ErrorCode::kUnknown : r.error().code; };
  EXPECT_EQ(code(store_->acquire_lease("bad id", shared_, token(1), kLongLease)),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(store_->acquire_lease("c1", shared_, "short", kLongLease)),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(store_->acquire_lease("c1", shared_, token(1), 0)), ErrorCode::kInvalidArgument);
  AcquireResult a = acquire("c1", shared_, 1);
  ASSERT_TRUE(a.acquired);
  ManifestWrite empty = manifest_v("v1", "h1");
  empty.manifest.clear();
  EXPECT_EQ(code(store_->commit_manifest("c1", shared_, a.lease, empty, kWrite)),
            ErrorCode::kInvalidArgument);
  ManifestWrite backwards = manifest_v("v1", "h1");
  backwards.expires_at_ms = backwards.fetched_at_ms - 1;
  EXPECT_EQ(code(store_->commit_manifest("c1", shared_, a.lease, backwards, kWrite)),
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(manifest("c1", shared_).has_value());
  EXPECT_EQ(code(store_->sync_connections({record("c1", "h1"), record("c1", "h2")})),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(store_->sync_connections({record("c1", "")})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(store_->sync_grants({{"not a member", {"c1"}}})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(store_->sync_grants({{"alice", {"bad id"}}})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->read_connection("c1")->value().config_hash, "h1");  // nothing was applied
  EXPECT_FALSE(store_->describe().empty());
}

INSTANTIATE_TEST_SUITE_P(BothStores, StoreConformance,
                         ::testing::Values(Kind::kRedis, Kind::kRedisCluster, Kind::kSqlite),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kRedis          ? "Redis"
                                  : info.param == Kind::kRedisCluster ? "RedisCluster"
                                                                      : "Sqlite";
                         });

// ---- Redis only --------------------------------------------------------------------------------

// How many times this Redis has run `command` (INFO commandstats), -1 when it cannot tell.
int64_t command_calls(RedisServer& server, const std::string& command) {
  const std::string info = raw(server, {"INFO", "commandstats"});
  const std::string needle = "cmdstat_" + command + ":calls=";
  const std::size_t at = info.find(needle);
  if (at == std::string::npos) return info.find("# Commandstats") != std::string::npos ? 0 : -1;
  return std::stoll(info.substr(at + needle.size()));
}

// A namespace written before the refresh-due index (manifests, no `due`, no marker) gets an entry
// due at once for each record, by a SCAN paced across calls and resumed from the cursor kept in
// the marker (by any agent); an entry a write scored keeps its score; once done, a call costs one
// GET and no SCAN.
TEST(RedisStoreOnly, TheDueIndexIsBackfilledOnceOnANamespaceFromBefore) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  std::unique_ptr<RedisStore> store =
      std::move(RedisStore::create(local_redis(server.port()))).value();
  std::vector<ConnectionRecord> records;
  for (int i = 0; i < 30; ++i) records.push_back(record("c" + std::to_string(i), "h"));
  ASSERT_TRUE(store->sync_connections(records).ok());
  for (int i = 0; i < 30; ++i) {
    const std::string cid = "c" + std::to_string(i);
    AcquireResult a = *store->acquire_lease(cid, Principal::shared(), token(i + 1), kLongLease);
    ASSERT_TRUE(a.acquired);
    FencedWriteOptions o{true};
    o.due_at_ms = kT0 + 1'000;
    ASSERT_TRUE(
        store->commit_manifest(cid, Principal::shared(), a.lease, manifest_v("v1", "h"), o)->ok());
  }
  const RedisKeys keys = *RedisKeys::create();
  // As an agent from before the index left it, but for one record written by a new agent since.
  ASSERT_EQ(raw(server, {"DEL", keys.due(), keys.due_backfill()}), "1");
  ASSERT_EQ(raw(server, {"ZADD", keys.due(), std::to_string(kT0 + 7'000), "c7:shared"}), "1");
  // Filler the SCAN walks past: more keys than one page.
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(raw(server, {"SET", keys.prefix() + "replay:" + sha256_hex(std::to_string(i)), "1"}),
              "OK");
  }
  EXPECT_TRUE(due_at(*store, kT0 + 10'000) == std::vector<std::string>{"c7 shared@7000"});

  Result<DueBackfill> first = store->backfill_due_index(1000);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_FALSE(first->done);  // paced: about 1,000 keys looked at per call
  EXPECT_EQ(raw(server, {"GET", keys.due_backfill()}).rfind("scan:", 0), 0u);
  // Another agent (another store) goes on from the marker's cursor.
  std::unique_ptr<RedisStore> other =
      std::move(RedisStore::create(local_redis(server.port()))).value();
  std::size_t added = first->added;
  for (int call = 0; call < 20; ++call) {
    Result<DueBackfill> next = other->backfill_due_index(1000);
    ASSERT_TRUE(next.ok()) << next.error().message;
    added += next->added;
    if (next->done) break;
  }
  EXPECT_EQ(added, 29u);
  EXPECT_EQ(raw(server, {"GET", keys.due_backfill()}).rfind("done:", 0), 0u);
  std::vector<std::string> due = due_at(*store, kT0);
  EXPECT_EQ(due.size(), 29u);  // every record from before, due at once
  EXPECT_EQ(std::count(due.begin(), due.end(), "c7 shared@0"), 0);
  EXPECT_EQ(raw(server, {"ZSCORE", keys.due(), "c7:shared"}), std::to_string(kT0 + 7'000));

  // Built: no SCAN any more.
  const int64_t scans = command_calls(server, "scan");
  ASSERT_GT(scans, 0);
  Result<DueBackfill> done = store->backfill_due_index(1000);
  ASSERT_TRUE(done.ok() && done->done);
  EXPECT_EQ(done->scanned, 0u);
  EXPECT_EQ(command_calls(server, "scan"), scans);
}

// A connection removal sweeps the namespace once (and a sweep cut short runs again at the next
// sync: the removal is noted in removed-conns in its own transaction); a sync that removes
// nothing sends no SCAN once the process swept once.
TEST(RedisStoreOnly, OnlyARemovalSweepsTheNamespace) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  std::unique_ptr<RedisStore> store =
      std::move(RedisStore::create(local_redis(server.port()))).value();
  ASSERT_TRUE(store->sync_connections({record("c1", "h1"), record("c2", "h2")}).ok());
  AcquireResult a = *store->acquire_lease("c2", Principal::shared(), token(1), kLongLease);
  ASSERT_TRUE(
      store->commit_manifest("c2", Principal::shared(), a.lease, manifest_v("v1", "h2"), kWrite)
          ->ok());
  const int64_t scans = command_calls(server, "scan");
  ASSERT_TRUE(store->sync_connections({record("c1", "h1"), record("c2", "h2")}).ok());
  EXPECT_EQ(command_calls(server, "scan"), scans);

  const RedisKeys keys = *RedisKeys::create();
  // A removal whose sweep was cut short (as if the agent died after the removal's transaction).
  ASSERT_EQ(raw(server, {"SADD", keys.removed_conns(), "c2"}), "1");
  ASSERT_EQ(raw(server, {"SREM", keys.conns(), "c2"}), "1");
  ASSERT_EQ(raw(server, {"DEL", *keys.conn("c2")}), "1");
  ASSERT_TRUE(store->sync_connections({record("c1", "h1")}).ok());
  EXPECT_GT(command_calls(server, "scan"), scans);
  EXPECT_EQ(raw(server, {"EXISTS", *keys.manifest("c2", Principal::shared()),
                         *keys.fence("c2", Principal::shared())}),
            "0");
  EXPECT_EQ(raw(server, {"ZSCORE", keys.due(), "c2:shared"}), "(nil)");
  EXPECT_EQ(raw(server, {"EXISTS", keys.removed_conns()}), "0");
  const int64_t after = command_calls(server, "scan");
  ASSERT_TRUE(store->sync_connections({record("c1", "h1")}).ok());
  EXPECT_EQ(command_calls(server, "scan"), after);
}

// TLS itself: tests/integration/redis_tls_test.cpp (real TLS redis-servers).
TEST(RedisStoreOnly, TakesTlsAndNeverDescribesThePassword) {
  Result<std::unique_ptr<RedisStore>> tls =
      RedisStore::create(redis_options("rediss://:hunter2@cache.internal:6380"));
  ASSERT_TRUE(tls.ok()) << tls.error().message;  // the system CA store; no connection yet
  EXPECT_EQ((*tls)->describe().rfind("rediss://:***@cache.internal:6380/0", 0), 0u)
      << (*tls)->describe();

  Result<std::unique_ptr<RedisStore>> store =
      RedisStore::create(redis_options("redis://quiver:hunter2@cache.internal:6380/3"));
  ASSERT_TRUE(store.ok()) << store.error().message;  // no connection is made yet
  EXPECT_EQ((*store)->describe().find("hunter2"), std::string::npos) << (*store)->describe();
  EXPECT_NE((*store)->describe().find("cache.internal:6380/3"), std::string::npos);

  RedisStoreOptions bad_ns = redis_options("redis://127.0.0.1:6379");
  bad_ns.ns = "no{braces}";
  EXPECT_EQ(RedisStore::create(bad_ns).error().code, ErrorCode::kInvalidArgument);
}

TEST(RedisStoreOnly, AuthUsesThePasswordAndNoMessageShowsIt) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  ASSERT_EQ(raw(server, {"CONFIG", "SET", "requirepass", "correct-horse-9"}), "OK");
  std::string base = "127.0.0.1:" + std::to_string(server.port());

  RedisStoreOptions good = redis_options("redis://:correct-horse-9@" + base + "/2");
  std::unique_ptr<RedisStore> store = std::move(RedisStore::create(good)).value();
  Status health = store->health();
  ASSERT_TRUE(health.ok()) << health.error().message;
  EXPECT_EQ(store->describe().find("correct-horse"), std::string::npos) << store->describe();
  ASSERT_TRUE(store->sync_connections({record("c1", "h1")}).ok());

  RedisStoreOptions wrong = redis_options("redis://:battery-staple-7@" + base);
  std::unique_ptr<RedisStore> intruder = std::move(RedisStore::create(wrong)).value();
  Status refused = intruder->health();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated) << refused.error().message;
  EXPECT_EQ(refused.error().message.find("battery-staple"), std::string::npos);
  EXPECT_EQ(refused.error().message.find("correct-horse"), std::string::npos);

  RedisStoreOptions none = redis_options("redis://" + base);
  std::unique_ptr<RedisStore> anonymous = std::move(RedisStore::create(none)).value();
  Status no_auth = anonymous->health();
  ASSERT_FALSE(no_auth.ok());
  EXPECT_EQ(no_auth.error().code, ErrorCode::kUnauthenticated) << no_auth.error().message;
  Result<std::vector<ConnectionRecord>> conns = anonymous->list_connections();
  ASSERT_FALSE(conns.ok());
  EXPECT_EQ(conns.error().code, ErrorCode::kUnauthenticated) << conns.error().message;
}

TEST(RedisStoreOnly, RedisGoingAwayFailsCleanlyAndNothingCommittedIsLost) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  RedisStoreOptions o = local_redis(server.port());
  o.connect_timeout_ms = 500;
  o.command_timeout_ms = 1'000;
  o.reconnect_backoff_initial_ms = 20;
  o.reconnect_backoff_max_ms = 200;
  std::unique_ptr<RedisStore> store = std::move(RedisStore::create(o)).value();
  const Principal shared = Principal::shared();

  ASSERT_TRUE(store->sync_connections({record("c1", "h1")}).ok());
  AcquireResult a = *store->acquire_lease("c1", shared, token(1), kLongLease);
  ASSERT_TRUE(a.acquired);
  ASSERT_TRUE(store->commit_manifest("c1", shared, a.lease, manifest_v("v1", "h1"), kWrite)->ok());
  ASSERT_EQ(*store->enqueue_revalidation("c1", member("alice"), "stale", 60'000),
            RevalidationOutcome::kQueued);
  RevalidationBatch pending = *store->read_revalidations("agent-1", 10, 0);
  ASSERT_EQ(pending.requests.size(), 1u);
  // This server persists on shutdown (the fixture's default is no persistence at all).
  ASSERT_EQ(raw(server, {"CONFIG", "SET", "save", "3600 1"}), "OK");

  server.stop();
  // The first op after the server went away writes a large pipeline into the dead socket: the
  // kernel answers EPIPE (and raises SIGPIPE, which must not end the process).
  ManifestWrite big = manifest_v("big", "h1");
  big.manifest.append(4 << 20, ' ');
  Result<FencedWriteResult> lost = store->commit_manifest("c1", shared, a.lease, big, kWrite);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.error().code, ErrorCode::kStoreUnavailable) << lost.error().message;
  std::string where = "127.0.0.1:" + std::to_string(server.port());
  for (int round = 0; round < 3; ++round) {  // a dropped connection, then refused reconnects
    Status health = store->health();
    ASSERT_FALSE(health.ok());
    EXPECT_EQ(health.error().code, ErrorCode::kStoreUnavailable);
    EXPECT_NE(health.error().message.find(where), std::string::npos) << health.error().message;
    Result<AcquireResult> acquire = store->acquire_lease("c1", shared, token(2), kLongLease);
    ASSERT_FALSE(acquire.ok());
    EXPECT_EQ(acquire.error().code, ErrorCode::kStoreUnavailable);
    Result<FencedWriteResult> commit =
        store->commit_manifest("c1", shared, a.lease, manifest_v("v2", "h1"), kWrite);
    ASSERT_FALSE(commit.ok());
    EXPECT_EQ(commit.error().code, ErrorCode::kStoreUnavailable);
    Result<RevalidationBatch> read = store->read_revalidations("agent-1", 10, 100);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.error().code, ErrorCode::kStoreUnavailable);
    Result<GrantSync> grants = store->sync_grants({{"alice", {"c1"}}});
    ASSERT_FALSE(grants.ok());
    EXPECT_EQ(grants.error().code, ErrorCode::kStoreUnavailable);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  ASSERT_TRUE(server.start()) << server.error();
  SteadyClock::time_point deadline = SteadyClock::now() + std::chrono::seconds(10);
  Status health = store->health();
  while (!health.ok() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    health = store->health();
  }
  ASSERT_TRUE(health.ok()) << health.error().message;

  // What was committed before the outage is all there.
  std::optional<StoredManifest> m = *store->read_manifest("c1", shared);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->manifest, manifest_v("v1", "h1").manifest);
  EXPECT_EQ(store->read_connection("c1")->value().config_hash, "h1");
  // The request delivered before the outage is still pending, and can be taken over.
  RevalidationBatch reclaimed = *store->claim_stale_revalidations("agent-2", 0, 10);
  EXPECT_EQ(ids_of(reclaimed), ids_of(pending));
  // Fences kept counting.
  AcquireResult b = *store->acquire_lease("c1", shared, token(3), kLongLease);
  ASSERT_TRUE(b.acquired);
  EXPECT_EQ(b.lease.fence, 2);
  EXPECT_TRUE(store->commit_manifest("c1", shared, b.lease, manifest_v("v2", "h1"), kWrite)->ok());
}

TEST(RedisStoreOnly, AServerThatNeverAnswersTimesOut) {
  // A listener that accepts connections (the kernel's backlog does) and never answers.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  RedisStoreOptions o = local_redis(ntohs(addr.sin_port));
  o.command_timeout_ms = 300;
  std::unique_ptr<RedisStore> store = std::move(RedisStore::create(o)).value();
  SteadyClock::time_point start = SteadyClock::now();
  Status health = store->health();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
  ASSERT_FALSE(health.ok());
  EXPECT_EQ(health.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(health.error().message.find("timed out"), std::string::npos) << health.error().message;
  EXPECT_GE(waited.count(), 250);
  EXPECT_LT(waited.count(), 3'000);
  ::close(fd);
}

// The agent's reads of bodies stored apart: an inline record (written before) reads as it did; a
// record whose body is gone keeps its data flag and no text (readers show a store failure).
TEST(RedisStoreOnly, ReadsBodiesApartAndInlineRecordsAndSaysWhenABodyIsGone) {
  ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
  RedisServer& server = shared_redis();
  (void)raw(server, {"FLUSHALL"});
  RedisStoreOptions o = local_redis(server.port());
  o.ns = "team-a";
  std::unique_ptr<RedisStore> store = std::move(RedisStore::create(o)).value();
  RedisKeys keys = *RedisKeys::create("team-a");
  const Principal alice = member("alice"), bob = member("bob");
  ASSERT_TRUE(store->sync_connections({record("gh", "h1", CredentialMode::kPerMember)}).ok());
  ASSERT_TRUE(store->sync_grants({{"alice", {"gh"}}, {"bob", {"gh"}}}).ok());
  ASSERT_TRUE(store->begin_namespace_restore(kT0).ok());
  ASSERT_TRUE(*store->mark_namespace_ready(kT0));

  const ManifestWrite w = manifest_v("v1", "h1");
  AcquireResult a = *store->acquire_lease("gh", alice, token(1), kLongLease);
  ASSERT_TRUE(store->commit_manifest("gh", alice, a.lease, w, kWrite)->ok());
  Result<std::optional<StoredManifest>> apart = store->read_manifest("gh", alice);
  ASSERT_TRUE(apart.ok() && apart->has_value());
  EXPECT_EQ((*apart)->manifest, w.manifest);
  EXPECT_TRUE((*apart)->meta.has_data);

  // bob's record as an agent wrote it before bodies were stored apart.
  (void)raw(server,
            {"HSET", *keys.manifest("gh", bob), "manifest", w.manifest, "etag", w.etag,
             "config_hash", "h1", "fence", "1", "fetched_at", std::to_string(w.fetched_at_ms),
             "fresh_until", std::to_string(w.fresh_until_ms), "expires_at",
             std::to_string(w.expires_at_ms), "truncated", "0"});
  Result<std::optional<StoredManifest>> inline_read = store->read_manifest("gh", bob);
  ASSERT_TRUE(inline_read.ok() && inline_read->has_value());
  EXPECT_EQ((*inline_read)->manifest, w.manifest);
  Result<ManifestPage> page = store->list_manifest_metas("", 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->metas.size(), 2u);
  for (const ManifestMeta& m : page->metas) EXPECT_TRUE(m.has_data) << m.principal.str();
  for (const char* who : {"alice", "bob"}) {
    Result<DiscoverySnapshot> s = store->read_discovery(member(who), {});
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->connections.at(0).manifest->text, w.manifest) << who;
  }

  // alice's body is gone (evicted): the record still says it has data, the text is missing, for
  // an agent that has not read it before (this one keeps the bodies it read: the same bytes under
  // the same digest, still served; tests/integration/store_body_cache_test.cpp).
  (void)raw(server, {"DEL", *keys.body(sha256_hex(w.manifest))});
  EXPECT_EQ((*store->read_manifest("gh", alice))->manifest, w.manifest);
  std::unique_ptr<RedisStore> other = std::move(RedisStore::create(o)).value();
  Result<std::optional<StoredManifest>> gone = other->read_manifest("gh", alice);
  ASSERT_TRUE(gone.ok() && gone->has_value());
  EXPECT_TRUE((*gone)->meta.has_data);
  EXPECT_TRUE((*gone)->manifest.empty());
  Result<DiscoverySnapshot> s = other->read_discovery(alice, {});
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->connections.at(0).manifest->body_missing());
}

TEST(RedisStoreOnly, WritesExactlyTheDocumentedKeyLayout) {
  ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
  RedisServer& server = shared_redis();
  (void)raw(server, {"FLUSHALL"});
  RedisStoreOptions o = local_redis(server.port());
  o.ns = "team-a";
  std::unique_ptr<RedisStore> store = std::move(RedisStore::create(o)).value();
  RedisKeys keys = *RedisKeys::create("team-a");
  const Principal alice = member("alice");

  ASSERT_TRUE(store->sync_connections({record("gh", "h1", CredentialMode::kPerMember)}).ok());
  ASSERT_TRUE(store->sync_grants({{"alice", {"gh"}}}).ok());
  AcquireResult a = *store->acquire_lease("gh", alice, token(1), kLongLease);
  ASSERT_TRUE(a.acquired);
  EXPECT_EQ(raw(server, {"GET", *keys.lease("gh", alice)}), a.lease.value());
  ASSERT_TRUE(store->commit_manifest("gh", alice, a.lease, manifest_v("v1", "h1"), kWrite)->ok());
  ASSERT_TRUE(
      store->merge_preferences("gh", alice, disabled_rows("gh", alice, {"tool:delete_repo"})).ok());
  AcquireResult b = *store->acquire_lease("gh", member("bob"), token(2), kLongLease);
  ASSERT_TRUE(
      store->record_failure("gh", member("bob"), b.lease, failure_under("h1"), kWrite)->ok());
  ASSERT_EQ(*store->enqueue_revalidation("gh", alice, "stale", 60'000),
            RevalidationOutcome::kQueued);
  // A webhook for a connection the store does not know: its replay guard, nothing else.
  ASSERT_TRUE(store->begin_namespace_restore(kT0).ok());
  ASSERT_TRUE(*store->mark_namespace_ready(kT0));
  EXPECT_FALSE(webhook_marks(*store, "unknown", "webhook-signature", kT0));

  auto type_of = [&](const std::string& key) { return raw(server, {"TYPE", key}); };
  EXPECT_EQ(type_of(keys.conns()), "set");
  EXPECT_EQ(raw(server, {"SISMEMBER", keys.conns(), "gh"}), "1");
  EXPECT_EQ(type_of(*keys.conn("gh")), "hash");
  const std::vector<std::string>& conn_fields = key_fields(KeyKind::kConn);
  EXPECT_EQ(field_names(raw_value(server, {"HGETALL", *keys.conn("gh")})),
            std::set<std::string>(conn_fields.begin(), conn_fields.end()));
  EXPECT_EQ(raw(server, {"HGET", *keys.conn("gh"), "credential_mode"}), "per_member");
  EXPECT_EQ(raw(server, {"SISMEMBER", *keys.grants(alice), "gh"}), "1");
  EXPECT_EQ(raw(server, {"SISMEMBER", *keys.disabled("gh", alice), "tool:delete_repo"}), "1");
  EXPECT_EQ(raw(server, {"HGET", *keys.prefs("gh", alice), "tool:delete_repo"}), "0,1,1,1");
  EXPECT_EQ(raw(server, {"GET", *keys.fence("gh", alice)}), "1");
  EXPECT_EQ(raw(server, {"EXISTS", *keys.lease("gh", alice)}), "0");  // released by the commit
  EXPECT_EQ(type_of(*keys.revalidate_gate("gh", alice)), "string");

  const std::vector<std::string>& documented = key_fields(KeyKind::kManifest);
  std::set<std::string> allowed(documented.begin(), documented.end());
  std::set<std::string> written =
      field_names(raw_value(server, {"HGETALL", *keys.manifest("gh", alice)}));
  for (const std::string& f : written) EXPECT_EQ(allowed.count(f), 1u) << f;
  // The body apart, under the SHA-256 the record names (schema/redis-keys.md, "Manifest bodies").
  EXPECT_EQ(written.count("manifest"), 0u);
  EXPECT_EQ(written.count("body"), 1u);
  const std::string body_digest = raw(server, {"HGET", *keys.manifest("gh", alice), "body"});
  EXPECT_EQ(raw(server, {"GET", *keys.body(body_digest)}), manifest_v("v1", "h1").manifest);
  EXPECT_EQ(raw(server, {"HGET", *keys.manifest("gh", alice), "config_hash"}), "h1");
  std::set<std::string> failed =
      field_names(raw_value(server, {"HGETALL", *keys.manifest("gh", member("bob"))}));
  EXPECT_EQ(failed,
            (std::set<std::string>{"error_code", "error_message", "error_at", "attempt_at"}));

  RespValue entries = raw_value(server, {"XRANGE", keys.revalidate_stream(), "-", "+"});
  ASSERT_EQ(entries.elements.size(), 1u);
  const std::vector<std::string>& stream_fields = key_fields(KeyKind::kRevalidate);
  EXPECT_EQ(field_names(entries.elements[0].elements[1]),
            std::set<std::string>(stream_fields.begin(), stream_fields.end()));

  // The grants' reverse index, for the edge's webhooks; the replay guard under its digest.
  EXPECT_EQ(raw(server, {"SISMEMBER", *keys.grantees("gh"), "member/alice"}), "1");
  EXPECT_EQ(raw(server, {"EXISTS", keys.replay("webhook-signature")}), "1");

  // Every key is in the namespace and parses back with its documented type.
  RespValue all = raw_value(server, {"KEYS", "*"});
  std::set<KeyKind> kinds;
  for (const RespValue& k : all.elements) {
    Result<ParsedKey> parsed = keys.parse(k.str);
    EXPECT_TRUE(parsed.ok()) << k.str;
    if (parsed.ok()) {
      kinds.insert(parsed->kind);
      EXPECT_EQ(type_of(k.str), ascii_lower(key_redis_type(parsed->kind))) << k.str;
    }
  }
  EXPECT_EQ(kinds.count(KeyKind::kReplay), 1u);
  EXPECT_EQ(kinds.count(KeyKind::kGrantees), 1u);
  EXPECT_EQ(kinds.count(KeyKind::kGrantMembers), 1u);
  EXPECT_EQ(kinds.count(KeyKind::kGrantMembersBackfill), 1u);
  EXPECT_EQ(kinds.count(KeyKind::kPrefs), 1u);
  EXPECT_EQ(kinds.count(KeyKind::kBody), 1u);

  // Another namespace on the same Redis sees none of it.
  RedisStoreOptions other = o;
  other.ns = "team-b";
  std::unique_ptr<RedisStore> b_store = std::move(RedisStore::create(other)).value();
  EXPECT_TRUE(b_store->list_connections()->empty());
  EXPECT_FALSE(b_store->read_manifest("gh", alice)->has_value());
  EXPECT_TRUE(b_store->sync_connections({}).ok());  // and its sync leaves team-a alone
  EXPECT_EQ(store->list_connections()->size(), 1u);
}

// The members of a SET as text.
std::set<std::string> set_members(RedisServer& server, const std::string& key) {
  std::set<std::string> out;
  for (const RespValue& m : raw_value(server, {"SMEMBERS", key}).elements) out.insert(m.str);
  return out;
}

// A flushed test Redis (shared_redis, checked by the caller) and a store on it.
struct GrantFixture {
  RedisServer& server = shared_redis();
  RedisKeys keys = *RedisKeys::create();
  std::unique_ptr<RedisStore> store;
  GrantFixture() {
    (void)raw(server, {"FLUSHALL"});
    store = std::move(RedisStore::create(local_redis(server.port()))).value();
  }
  std::set<std::string> grantees(const std::string& cid) {
    return set_members(server, *keys.grantees(cid));
  }
};

// Grants are written per member (one small transaction each, then the grantees of the
// connections it gained or lost); the registry of members with grants lets a sync find the
// members to empty without a SCAN, whoever wrote them (config sync or the admin API).
TEST(RedisStoreOnly, GrantSyncWritesPerMemberAndKeepsTheRegistryAndGrantees) {
  ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
  GrantFixture f;
  auto& [server, keys, store] = f;
  auto grantees = [&](const std::string& cid) { return f.grantees(cid); };
  ASSERT_TRUE(store->sync_grants({{"alice", {"c1", "c2"}}, {"bob", {"c2"}}}).ok());
  EXPECT_EQ(grantees("c1"), (std::set<std::string>{"member/alice"}));
  EXPECT_EQ(grantees("c2"), (std::set<std::string>{"member/alice", "member/bob"}));
  EXPECT_EQ(set_members(server, keys.grant_members()),
            (std::set<std::string>{"member/alice", "member/bob"}));
  // A member the admin API granted, the config does not name: the sync finds it in the registry.
  ASSERT_TRUE(*store->set_member_grants("erin", {"c1"}));
  EXPECT_EQ(grantees("c1"), (std::set<std::string>{"member/alice", "member/erin"}));
  const int64_t scans = command_calls(server, "scan");
  // alice removed, bob changed, carol added, erin removed.
  Result<GrantSync> sync = store->sync_grants({{"bob", {"c2", "c3"}}, {"carol", {"c3"}}});
  ASSERT_TRUE(sync.ok()) << sync.error().message;
  EXPECT_EQ(sync->changed_members, (std::vector<std::string>{"alice", "bob", "carol", "erin"}));
  EXPECT_EQ(command_calls(server, "scan"), scans);  // the registry, not a SCAN
  EXPECT_EQ(raw(server, {"EXISTS", *keys.grantees("c1")}), "0");
  EXPECT_EQ(grantees("c2"), (std::set<std::string>{"member/bob"}));
  EXPECT_EQ(grantees("c3"), (std::set<std::string>{"member/bob", "member/carol"}));
  EXPECT_EQ(raw(server, {"EXISTS", *keys.grants(member("alice"))}), "0");
  EXPECT_EQ(set_members(server, keys.grant_members()),
            (std::set<std::string>{"member/bob", "member/carol"}));
  EXPECT_EQ(raw(server, {"EXISTS", keys.grantees_pending()}), "0");  // every pair settled
  // A member listed whose grants went another way (a connection's sweep emptied them) leaves the
  // registry at the next sync.
  ASSERT_EQ(raw(server, {"SADD", keys.grant_members(), "member/gone"}), "1");
  Result<GrantSync> again = store->sync_grants({{"bob", {"c2", "c3"}}, {"carol", {"c3"}}});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->changed_members.empty());
  EXPECT_EQ(set_members(server, keys.grant_members()),
            (std::set<std::string>{"member/bob", "member/carol"}));
}

// A grant change is two steps (the member's transaction, then the grantees of the connections it
// touched); an agent that stops between them leaves the pairs pending, and the next sync
// recomputes those grantees from the grants as they stand, though no grant differs any more.
TEST(RedisStoreOnly, ACrashBetweenGrantsAndGranteesIsRepairedByTheNextSync) {
  ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
  GrantFixture f;
  auto& [server, keys, store] = f;
  auto grantees = [&](const std::string& cid) { return f.grantees(cid); };
  ASSERT_TRUE(store->sync_grants({{"bob", {"c2", "c3"}}}).ok());
  // bob goes from {c2, c3} to {c3, c4}: only the first step ran (as member_grant_write's
  // transaction writes it), the grantees never.
  const std::string grants = *keys.grants(member("bob"));
  ASSERT_EQ(
      text_of(raw_value(server, {"EVAL",
                                 "redis.call('DEL', KEYS[1]); "
                                 "redis.call('SADD', KEYS[1], 'c3', 'c4'); "
                                 "redis.call('SADD', KEYS[2], 'member/bob'); "
                                 "redis.call('SADD', KEYS[3], 'c2:member/bob', "
                                 "'c4:member/bob'); return 'OK'",
                                 "3", grants, keys.grant_members(), keys.grantees_pending()})),
      "OK");
  EXPECT_EQ(grantees("c2"), (std::set<std::string>{"member/bob"}));  // stale
  EXPECT_TRUE(grantees("c4").empty());                               // missing
  Result<GrantSync> sync = store->sync_grants({{"bob", {"c3", "c4"}}});
  ASSERT_TRUE(sync.ok()) << sync.error().message;
  EXPECT_TRUE(sync->changed_members.empty());  // the grants are right already
  EXPECT_EQ(raw(server, {"EXISTS", *keys.grantees("c2")}), "0");
  EXPECT_EQ(grantees("c3"), (std::set<std::string>{"member/bob"}));
  EXPECT_EQ(grantees("c4"), (std::set<std::string>{"member/bob"}));
  EXPECT_EQ(raw(server, {"EXISTS", keys.grantees_pending()}), "0");
  EXPECT_EQ(*store->read_grantees("c4"), std::set<std::string>{"bob"});
  // A pair no agent wrote is dropped, not followed.
  ASSERT_EQ(raw(server, {"SADD", keys.grantees_pending(), "not a pair", "c1:shared"}), "2");
  ASSERT_TRUE(store->sync_grants({{"bob", {"c3", "c4"}}}).ok());
  EXPECT_EQ(raw(server, {"EXISTS", keys.grantees_pending()}), "0");
  EXPECT_EQ(raw(server, {"EXISTS", *keys.grantees("c1")}), "0");
}

// A namespace written before the registry (grants keys, no grant-members, no marker): the first
// sync lists its members by one SCAN (and makes sure of their grantees), marks it done, and finds
// a member the config no longer names; later syncs run no SCAN.
TEST(RedisStoreOnly, TheGrantRegistryIsBackfilledOnceOnANamespaceFromBefore) {
  ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
  GrantFixture f;
  auto& [server, keys, store] = f;
  // As an agent from before the registry left it: grants and grantees, nothing else. One
  // grantees entry is missing.
  ASSERT_EQ(raw(server, {"SADD", *keys.grants(member("alice")), "c1"}), "1");
  ASSERT_EQ(raw(server, {"SADD", *keys.grants(member("dave")), "c1", "c9"}), "2");
  ASSERT_EQ(raw(server, {"SADD", *keys.grantees("c1"), "member/alice", "member/dave"}), "2");
  for (int i = 0; i < 1500; ++i) {  // filler: the SCAN walks more than one page
    ASSERT_EQ(
        raw(server, {"SADD", keys.prefix() + "disabled:c1:member/m" + std::to_string(i), "t"}),
        "1");
  }
  const int64_t scans = command_calls(server, "scan");
  Result<GrantSync> sync = store->sync_grants({{"alice", {"c1"}}});
  ASSERT_TRUE(sync.ok()) << sync.error().message;
  EXPECT_EQ(sync->changed_members, std::vector<std::string>{"dave"});
  EXPECT_GT(command_calls(server, "scan"), scans);
  EXPECT_EQ(raw(server, {"GET", keys.grant_members_backfill()}).rfind("done:", 0), 0u);
  EXPECT_EQ(raw(server, {"EXISTS", *keys.grants(member("dave"))}), "0");
  EXPECT_EQ(set_members(server, *keys.grantees("c1")), std::set<std::string>{"member/alice"});
  EXPECT_EQ(raw(server, {"EXISTS", *keys.grantees("c9")}), "0");
  EXPECT_EQ(set_members(server, keys.grant_members()), std::set<std::string>{"member/alice"});

  const int64_t after = command_calls(server, "scan");
  ASSERT_TRUE(store->sync_grants({{"alice", {"c1"}}, {"bob", {"c2"}}}).ok());
  EXPECT_EQ(command_calls(server, "scan"), after);
  EXPECT_EQ(*store->read_grants("bob"), std::set<std::string>{"c2"});
}

// Commands a grant sync sends (INFO commandstats deltas): with nothing changed, reads only (the
// registry, one SMEMBERS per member, the pending pairs) and no write at all; with N members
// changed, writes exactly proportional to N (one MULTI/EXEC and one epoch INCR per member),
// whatever the number of members.
TEST(RedisStoreOnly, AGrantSyncWritesInProportionToTheMembersChanged) {
  ASSERT_TRUE(shared_redis().ok()) << shared_redis().error();
  GrantFixture f;
  auto& [server, keys, store] = f;
  (void)keys;
  constexpr int kMembers = 1200;  // more than one read page, more than one write batch
  GrantMap grants;
  for (int i = 0; i < kMembers; ++i) {
    grants["m" + std::to_string(i)] = {"a" + std::to_string(i % 7), "b" + std::to_string(i % 11)};
  }
  Result<GrantSync> first = store->sync_grants(grants);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->changed_members.size(), static_cast<std::size_t>(kMembers));

  const std::vector<std::string> kWrites = {"multi", "exec", "incr", "sadd", "srem",
                                            "del",   "zadd", "set",  "scan"};
  auto snapshot = [&]() {
    std::map<std::string, int64_t> out;
    for (const std::string& c : kWrites) out[c] = command_calls(server, c);
    out["smembers"] = command_calls(server, "smembers");
    out["sscan"] = command_calls(server, "sscan");
    return out;
  };
  auto delta = [&](const std::map<std::string, int64_t>& before) {
    std::map<std::string, int64_t> now = snapshot();
    for (auto& [c, v] : now) v -= before.at(c);
    return now;
  };
  auto writes = [&](const std::map<std::string, int64_t>& d) {
    int64_t total = 0;
    for (const std::string& c : kWrites) total += d.at(c);
    return total;
  };

  std::map<std::string, int64_t> before = snapshot();
  Result<GrantSync> steady = store->sync_grants(grants);
  ASSERT_TRUE(steady.ok());
  EXPECT_TRUE(steady->changed_members.empty());
  std::map<std::string, int64_t> d = delta(before);
  EXPECT_EQ(writes(d), 0);
  EXPECT_EQ(d["smembers"], kMembers + 1);  // each member's grants, and the pending pairs
  EXPECT_GE(d["sscan"], 1);

  // N members changed the same way ({a, b} to {a, x}): N transactions, N INCRs, and the same
  // writes per member.
  auto change = [&](int n, int round) {
    for (int i = round * 100; i < round * 100 + n; ++i) {
      grants["m" + std::to_string(i)] = {"a" + std::to_string(i % 7), "x" + std::to_string(round)};
    }
    std::map<std::string, int64_t> b = snapshot();
    Result<GrantSync> s = store->sync_grants(grants);
    EXPECT_TRUE(s.ok());
    if (s.ok()) {
      EXPECT_EQ(s->changed_members.size(), static_cast<std::size_t>(n));
    }
    return delta(b);
  };
  std::map<std::string, int64_t> three = change(3, 1);
  EXPECT_EQ(three["multi"], 3);
  EXPECT_EQ(three["exec"], 3);
  EXPECT_EQ(three["incr"], 6);  // each member's transaction: the epoch and its version
  EXPECT_EQ(three["scan"], 0);
  std::map<std::string, int64_t> thirty = change(30, 2);
  EXPECT_EQ(thirty["multi"], 30);
  EXPECT_EQ(thirty["incr"], 60);
  for (const std::string& c : kWrites) EXPECT_EQ(thirty[c], 10 * three[c]) << c;
  EXPECT_EQ(thirty["smembers"], three["smembers"]);  // the reads follow the members, not N
}

// ---- SQLite only -------------------------------------------------------------------------------

// Scripts go by EVALSHA (shared/redis_conversation.h): a Redis that lost its script cache
// (a restart, SCRIPT FLUSH) gets the EVAL once, in the same call, and the call succeeds.
TEST(RedisStoreOnly, ScriptsGoBySha1AndSurviveAScriptFlush) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  std::unique_ptr<RedisStore> store =
      std::move(RedisStore::create(local_redis(server.port()))).value();
  const Principal shared = Principal::shared();
  ASSERT_TRUE(store->sync_connections({record("c1", "h1")}).ok());
  Result<AcquireResult> first = store->acquire_lease("c1", shared, token(1), kLongLease);
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(raw(server, {"SCRIPT", "FLUSH"}), "OK");
  // Held by the first: answered by the script (not an error), after the EVAL retry.
  Result<AcquireResult> again = store->acquire_lease("c1", shared, token(2), kLongLease);
  ASSERT_TRUE(again.ok()) << again.error().message;
  std::string stats = raw(server, {"INFO", "commandstats"});
  EXPECT_NE(stats.find("cmdstat_evalsha:"), std::string::npos) << stats;
  EXPECT_NE(stats.find("cmdstat_eval:"), std::string::npos) << stats;  // the retries
}

TEST(SqliteStoreOnly, AVersion1FileIsMigratedKeepingItsData) {
  TempDir dir;
  SqliteStoreOptions o;
  o.path = dir.path("v1.db");
  o.now_ms = [] { return kT0; };
  {
    std::unique_ptr<SqliteStore> store = std::move(SqliteStore::open(o)).value();
    ASSERT_TRUE(store->sync_connections({record("c1", "h1")}).ok());
    AcquireResult a = *store->acquire_lease("c1", Principal::shared(), token(1), kLongLease);
    ASSERT_TRUE(a.acquired);
    ASSERT_TRUE(
        store->commit_manifest("c1", Principal::shared(), a.lease, manifest_v("v1", "h1"), kWrite)
            ->ok());
  }
  // Take the file back to version 1's shape (what an agent of before wrote).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(o.path.c_str(), &db), SQLITE_OK);
  for (const char* sql :
       {"ALTER TABLE manifests DROP COLUMN invalidated_at", "DROP INDEX manifests_by_due",
        "ALTER TABLE manifests DROP COLUMN due_at",
        "ALTER TABLE revalidation_gates DROP COLUMN taken_at", "PRAGMA user_version = 1"}) {
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  }
  sqlite3_close(db);

  Result<std::unique_ptr<SqliteStore>> reopened = SqliteStore::open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  SqliteStore& store = **reopened;
  Result<std::optional<StoredManifest>> kept = store.read_manifest("c1", Principal::shared());
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ((*kept)->meta.etag, "\"etag-v1\"");
  EXPECT_FALSE((*kept)->meta.invalidated_at_ms);
  EXPECT_EQ(*store.enqueue_revalidation("c1", Principal::shared(), "manual", 60'000),
            RevalidationOutcome::kQueued);
  EXPECT_TRUE(webhook_marks(store, "c1", "wh:1", kT0));
  ASSERT_EQ(sqlite3_open(o.path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), kSqliteSchemaVersion);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(SqliteStoreOnly, OpeningFailsClearly) {
  SqliteStoreOptions missing;
  missing.path = "/nonexistent-quiver-dir/quiver.db";
  Result<std::unique_ptr<SqliteStore>> r = SqliteStore::open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(r.error().message.find("/nonexistent-quiver-dir/quiver.db"), std::string::npos);

  // A file from a newer agent is not touched.
  TempDir dir;
  std::string path = dir.path("newer.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string newer_version =
      "PRAGMA user_version = " + std::to_string(kSqliteSchemaVersion + 1);
  ASSERT_EQ(sqlite3_exec(db, newer_version.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  SqliteStoreOptions newer;
  newer.path = path;
  r = SqliteStore::open(newer);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("newer"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace quiver
