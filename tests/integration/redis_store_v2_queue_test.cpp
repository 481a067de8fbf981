// The revalidation queue of RedisStore in key layout v2 (docs/design.md "The revalidation queue on
// v2"), on one real redis-server and on a real six-node Redis Cluster: the enqueue in two one-slot
// steps (the gate, with the lease, on the manifest's slot; then the XADD on the connection's shard
// stream), the consumer side over the S shard streams (read, ack, claim, idle consumers), and the
// bounded poll that stands in for v1's blocking read. And, on a redis-server of its own, the edge's
// Redis user (schema/redis-acl-edge.txt): it may run the gate and the XADD, and nothing else of v2.
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/discovery_redis.h"
#include "shared/redis_cluster.h"
#include "tests/support/edge_acl.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/one_redis_or_cluster.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::RedisConnection;
using testing::run_argv;

constexpr int64_t kNow = 1'790'000'000'000;
constexpr char kNs[] = "queue";
// Connections on different shards of S = 16 (crc16 mod 16: 1, 11, 5).
constexpr char kAlpha[] = "alpha";
constexpr char kBeta[] = "beta";
constexpr char kGamma[] = "gamma";
constexpr int64_t kWindow = 60'000;

Principal m1() { return *Principal::member("m1"); }

using testing::Deployment;

class RedisStoreV2Queue : public testing::OneRedisOrCluster {
 protected:
  void SetUp() override {
    OneRedisOrCluster::SetUp();
    if (HasFatalFailure()) return;
    // A namespace in layout v2: the store's gate admits its writes only then.
    const std::string at = std::to_string(kNow);
    ASSERT_EQ(raw({"SET", keys_.layout(), "v2:ready:" + at}).str, "OK");
    ASSERT_EQ(raw({"SET", keys_.namespace_record(), "ready:" + at}).str, "OK");
    for (const char* cid : {kAlpha, kBeta, kGamma}) shards_[cid] = *keys_.connection_shard(cid);
    ASSERT_EQ(std::set<uint32_t>({shards_[kAlpha], shards_[kBeta], shards_[kGamma]}).size(), 3u);
    store_ = store();
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(store_->read_namespace().ok());
  }

  std::unique_ptr<RedisStore> store() {
    RedisStoreOptions o = store_options(kNs, KeyLayout::kV2);
    o.now_ms = [this] { return clock_.load(); };
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string stream(const std::string& cid) { return *keys_.revalidate_stream(shards_[cid]); }

  // The entries of one stream: [id, {field → value}].
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> entries(
      const std::string& key) {
    std::vector<std::pair<std::string, std::map<std::string, std::string>>> out;
    RespValue r = raw({"XRANGE", key, "-", "+"});
    EXPECT_TRUE(r.is_array()) << r.debug_string();
    for (const RespValue& e : r.elements) {
      std::map<std::string, std::string> fields;
      for (std::size_t i = 0; i + 1 < e.elements[1].elements.size(); i += 2) {
        fields[e.elements[1].elements[i].str] = e.elements[1].elements[i + 1].str;
      }
      out.emplace_back(e.elements[0].str, std::move(fields));
    }
    return out;
  }

  // The number of entries on every shard stream but `except`.
  int64_t entries_elsewhere(const std::set<uint32_t>& except) {
    int64_t n = 0;
    for (uint32_t k = 0; k < keys_.shard_count(); ++k) {
      if (except.count(k) != 0) continue;
      RespValue r = raw({"XLEN", *keys_.revalidate_stream(k)});
      EXPECT_EQ(r.type, RespValue::Type::kInteger) << r.debug_string();
      n += r.integer;
    }
    return n;
  }

  RevalidationOutcome enqueue(const std::string& cid, const Principal& p, const std::string& reason,
                              int64_t window = kWindow) {
    Result<RevalidationOutcome> r = store_->enqueue_revalidation(cid, p, reason, window);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : RevalidationOutcome::kAlreadyQueued;
  }

  RevalidationBatch read(const std::string& consumer, std::size_t max, int64_t block_ms = 0) {
    Result<RevalidationBatch> r = store_->read_revalidations(consumer, max, block_ms);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? std::move(*r) : RevalidationBatch{};
  }

  // Consumers of the group on shard `k`'s stream, by name.
  std::set<std::string> consumers(uint32_t k) {
    std::set<std::string> out;
    RespValue r =
        raw({"XINFO", "CONSUMERS", *keys_.revalidate_stream(k), kRevalidateConsumerGroup});
    if (r.is_error()) return out;
    for (const RespValue& c : r.elements) {
      for (std::size_t i = 0; i + 1 < c.elements.size(); i += 2) {
        if (c.elements[i].str == "name") out.insert(c.elements[i + 1].str);
      }
    }
    return out;
  }

  RedisKeys keys_ = *RedisKeys::create(kNs, KeyLayout::kV2);
  std::map<std::string, uint32_t> shards_;
  std::atomic<int64_t> clock_{kNow};
  std::unique_ptr<RedisStore> store_;
};

TEST_P(RedisStoreV2Queue, EnqueueReadAckOnTheConnectionsShard) {
  EXPECT_EQ(enqueue(kAlpha, Principal::shared(), "stale"), RevalidationOutcome::kQueued);
  clock_ += 5;
  EXPECT_EQ(enqueue(kBeta, m1(), "expired"), RevalidationOutcome::kQueued);
  // The gate stands for the window: one request per key.
  EXPECT_EQ(enqueue(kAlpha, Principal::shared(), "stale"), RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(enqueue(kBeta, m1(), "stale"), RevalidationOutcome::kAlreadyQueued);

  // Each request on its connection's shard stream, with v1's fields; none anywhere else.
  auto a = entries(stream(kAlpha));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].second, (std::map<std::string, std::string>{{"cid", kAlpha},
                                                             {"principal", "shared"},
                                                             {"reason", "stale"},
                                                             {"at", std::to_string(kNow)}}));
  auto b = entries(stream(kBeta));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].second, (std::map<std::string, std::string>{{"cid", kBeta},
                                                             {"principal", "member/m1"},
                                                             {"reason", "expired"},
                                                             {"at", std::to_string(kNow + 5)}}));
  EXPECT_EQ(entries_elsewhere({shards_[kAlpha], shards_[kBeta]}), 0);
  // The stream lives in the shard's slot, the gate in the manifest's (the connection's for
  // `shared`, the member's for a member): the two steps are two slots.
  for (const char* cid : {kAlpha, kBeta}) {
    const std::string s = stream(cid);
    RespValue slot = raw({"CLUSTER", "KEYSLOT", s});
    if (on_cluster()) {
      EXPECT_EQ(slot.integer, cluster_key_slot(s));
      EXPECT_EQ(slot.integer, cluster_key_slot("{" + std::string(kNs) +
                                               ":s:" + std::to_string(shards_[cid]) + "}"));
    }
  }
  const std::string alpha_gate = *keys_.revalidate_gate(kAlpha, Principal::shared());
  const std::string beta_gate = *keys_.revalidate_gate(kBeta, m1());
  EXPECT_EQ(cluster_key_slot(alpha_gate),
            cluster_key_slot(*keys_.manifest(kAlpha, Principal::shared())));
  EXPECT_EQ(cluster_key_slot(beta_gate), cluster_key_slot(*keys_.manifest(kBeta, m1())));
  EXPECT_NE(cluster_key_slot(alpha_gate), cluster_key_slot(stream(kAlpha)));
  EXPECT_EQ(raw({"GET", alpha_gate}).str, std::to_string(kNow));
  RespValue ttl = raw({"PTTL", beta_gate});
  EXPECT_GT(ttl.integer, 0);
  EXPECT_LE(ttl.integer, kWindow);

  // Read from every shard: both requests, each id naming its shard.
  RevalidationBatch got = read("agent-1", 10);
  EXPECT_TRUE(got.malformed_ids.empty());
  ASSERT_EQ(got.requests.size(), 2u);
  std::map<std::string, RevalidationRequest> by_cid;
  for (const RevalidationRequest& r : got.requests) by_cid[r.connection_id] = r;
  ASSERT_EQ(by_cid.size(), 2u);
  EXPECT_EQ(by_cid[kAlpha].id, std::to_string(shards_[kAlpha]) + "/" + a[0].first);
  EXPECT_EQ(by_cid[kAlpha].principal, Principal::shared());
  EXPECT_EQ(by_cid[kAlpha].reason, "stale");
  EXPECT_EQ(by_cid[kAlpha].at_ms, kNow);
  EXPECT_EQ(by_cid[kBeta].id, std::to_string(shards_[kBeta]) + "/" + b[0].first);
  EXPECT_EQ(by_cid[kBeta].principal, m1());
  EXPECT_EQ(by_cid[kBeta].at_ms, kNow + 5);
  // Delivered once: a second read finds nothing.
  EXPECT_TRUE(read("agent-1", 10).requests.empty());
  EXPECT_TRUE(read("agent-2", 10).requests.empty());

  // Acknowledged: gone from the streams and from the pending lists.
  ASSERT_TRUE(store_->ack_revalidations({by_cid[kAlpha].id, by_cid[kBeta].id}).ok());
  for (const char* cid : {kAlpha, kBeta}) {
    EXPECT_EQ(raw({"XLEN", stream(cid)}).integer, 0) << cid;
    RespValue pending = raw({"XPENDING", stream(cid), kRevalidateConsumerGroup});
    ASSERT_TRUE(pending.is_array()) << pending.debug_string();
    EXPECT_EQ(pending.elements[0].integer, 0) << cid;
  }
  // Unknown ids are ignored; an id that does not say its shard is refused, saying why.
  EXPECT_TRUE(store_->ack_revalidations({std::to_string(shards_[kAlpha]) + "/1-1"}).ok());
  Status bad = store_->ack_revalidations({a[0].first});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("<shard>/<stream id>"), std::string::npos);
  EXPECT_FALSE(store_->ack_revalidations({"16/1-1"}).ok());  // S = 16: shards 0..15
  EXPECT_FALSE(store_->ack_revalidations({"1/x"}).ok());
}

TEST_P(RedisStoreV2Queue, TheGatesWindowALeaseAndAManualRefresh) {
  // The window: a second request once the gate expired.
  EXPECT_EQ(enqueue(kGamma, Principal::shared(), "stale", 300), RevalidationOutcome::kQueued);
  EXPECT_EQ(enqueue(kGamma, Principal::shared(), "stale", 300),
            RevalidationOutcome::kAlreadyQueued);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(enqueue(kGamma, Principal::shared(), "stale", 300), RevalidationOutcome::kQueued);
  EXPECT_EQ(entries(stream(kGamma)).size(), 2u);

  // A lease held: in progress, no gate taken, nothing queued (the lease is declared, same slot).
  Result<AcquireResult> lease = store_->acquire_lease(kAlpha, m1(), std::string(32, 'a'), 60'000);
  ASSERT_TRUE(lease.ok() && lease->acquired);
  EXPECT_EQ(enqueue(kAlpha, m1(), "stale"), RevalidationOutcome::kInProgress);
  EXPECT_EQ(enqueue(kAlpha, m1(), "manual"), RevalidationOutcome::kInProgress);
  EXPECT_EQ(raw({"EXISTS", *keys_.revalidate_gate(kAlpha, m1())}).integer, 0);
  EXPECT_EQ(raw({"XLEN", stream(kAlpha)}).integer, 0);
  ASSERT_TRUE(store_->release_lease(kAlpha, m1(), lease->lease).ok());
  EXPECT_EQ(enqueue(kAlpha, m1(), "stale"), RevalidationOutcome::kQueued);

  // A manual refresh: within the window, queued again once the gate is kManualRequeueAfterMs old
  // (the gate holds the caller's clock), never sooner; a reader's request does not requeue.
  EXPECT_EQ(enqueue(kBeta, Principal::shared(), "manual"), RevalidationOutcome::kQueued);
  clock_ += kManualRequeueAfterMs - 1;
  EXPECT_EQ(enqueue(kBeta, Principal::shared(), "manual"), RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(enqueue(kBeta, Principal::shared(), "stale"), RevalidationOutcome::kAlreadyQueued);
  clock_ += 1;
  EXPECT_EQ(enqueue(kBeta, Principal::shared(), "manual"), RevalidationOutcome::kQueued);
  EXPECT_EQ(raw({"GET", *keys_.revalidate_gate(kBeta, Principal::shared())}).str,
            std::to_string(clock_.load()));
  auto b = entries(stream(kBeta));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].second["reason"], "manual");
  EXPECT_EQ(b[1].second["at"], std::to_string(clock_.load()));
  EXPECT_EQ(entries_elsewhere({shards_[kAlpha], shards_[kBeta], shards_[kGamma]}), 0);
}

TEST_P(RedisStoreV2Queue, ADeadConsumersRequestsAreClaimedOnEveryShard) {
  for (const char* cid : {kAlpha, kBeta, kGamma}) {
    EXPECT_EQ(enqueue(cid, Principal::shared(), "stale"), RevalidationOutcome::kQueued);
  }
  // `dead` takes all three and never acknowledges them.
  RevalidationBatch taken = read("dead", 10);
  ASSERT_EQ(taken.requests.size(), 3u);
  std::set<std::string> ids;
  for (const RevalidationRequest& r : taken.requests) ids.insert(r.id);
  // Young: nothing to claim yet.
  Result<RevalidationBatch> early = store_->claim_stale_revalidations("live", 60'000, 10);
  ASSERT_TRUE(early.ok()) << early.error().message;
  EXPECT_TRUE(early->requests.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  // Up to `max`: one now, the other two after.
  Result<RevalidationBatch> one = store_->claim_stale_revalidations("live", 50, 1);
  ASSERT_TRUE(one.ok()) << one.error().message;
  ASSERT_EQ(one->requests.size(), 1u);
  Result<RevalidationBatch> rest = store_->claim_stale_revalidations("live", 50, 10);
  ASSERT_TRUE(rest.ok()) << rest.error().message;
  std::set<std::string> claimed = {one->requests[0].id};
  for (const RevalidationRequest& r : rest->requests) claimed.insert(r.id);
  // A claim that took more than it handed out keeps the rest for the consumer's next read.
  for (const RevalidationRequest& r : read("live", 10).requests) claimed.insert(r.id);
  EXPECT_EQ(claimed, ids);
  for (const char* cid : {kAlpha, kBeta, kGamma}) {
    RespValue pending =
        raw({"XPENDING", stream(cid), kRevalidateConsumerGroup, "-", "+", "10", "dead"});
    ASSERT_TRUE(pending.is_array()) << pending.debug_string();
    EXPECT_TRUE(pending.elements.empty()) << cid;
  }

  // `dead` holds nothing now: removed from every shard's group; `busy`, with a request pending on
  // alpha's shard, is kept there; `live` is the caller.
  EXPECT_EQ(enqueue(kAlpha, m1(), "stale"), RevalidationOutcome::kQueued);
  ASSERT_EQ(read("busy", 1).requests.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Result<std::vector<std::string>> removed = store_->remove_idle_consumers("live", 10);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(*removed, std::vector<std::string>{"dead"});
  for (uint32_t k = 0; k < keys_.shard_count(); ++k) {
    std::set<std::string> names = consumers(k);
    EXPECT_EQ(names.count("dead"), 0u) << k;
  }
  EXPECT_EQ(consumers(shards_[kAlpha]).count("busy"), 1u);
  ASSERT_TRUE(
      store_->ack_revalidations(std::vector<std::string>(claimed.begin(), claimed.end())).ok());
  for (const char* cid : {kAlpha, kBeta, kGamma}) {
    RespValue pending = raw({"XPENDING", stream(cid), kRevalidateConsumerGroup});
    EXPECT_EQ(pending.elements[0].integer, cid == std::string(kAlpha) ? 1 : 0) << cid;
  }
}

TEST_P(RedisStoreV2Queue, AReadHandsOutAtMostMaxAndKeepsTheRest) {
  for (const char* cid : {kAlpha, kBeta, kGamma}) {
    EXPECT_EQ(enqueue(cid, Principal::shared(), "stale"), RevalidationOutcome::kQueued);
  }
  std::set<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    RevalidationBatch b = read("agent", 1);
    ASSERT_EQ(b.requests.size(), 1u) << i;
    seen.insert(b.requests[0].connection_id);
    ASSERT_TRUE(store_->ack_revalidations({b.requests[0].id}).ok());
  }
  EXPECT_EQ(seen, (std::set<std::string>{kAlpha, kBeta, kGamma}));
  EXPECT_TRUE(read("agent", 1).requests.empty());
}

TEST_P(RedisStoreV2Queue, AnEmptyReadWaitsBlockMsAndAnEntryWakesIt) {
  // Nothing queued (and no group yet on any shard: the read creates them).
  auto start = std::chrono::steady_clock::now();
  RevalidationBatch none = read("agent", 1, 300);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  EXPECT_TRUE(none.requests.empty());
  EXPECT_GE(took, 290);
  EXPECT_LT(took, 2'000);
  for (uint32_t k = 0; k < keys_.shard_count(); ++k) {
    EXPECT_FALSE(raw({"XINFO", "GROUPS", *keys_.revalidate_stream(k)}).is_error()) << k;
  }

  // A request queued while the read waits is returned within the poll interval, not at block_ms.
  std::unique_ptr<RedisStore> writer = store();
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->read_namespace().ok());
  std::thread queue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Result<RevalidationOutcome> q = writer->enqueue_revalidation(kBeta, m1(), "stale", kWindow);
    EXPECT_TRUE(q.ok() && *q == RevalidationOutcome::kQueued);
  });
  start = std::chrono::steady_clock::now();
  RevalidationBatch woke = read("agent", 1, 5'000);
  took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
             .count();
  queue.join();
  ASSERT_EQ(woke.requests.size(), 1u);
  EXPECT_EQ(woke.requests[0].connection_id, kBeta);
  EXPECT_GE(took, 140);
  EXPECT_LT(took, 1'000);
  // The poll's latency over v1's BLOCK (docs/design.md "The revalidation queue on v2").
  std::cout << "[ measured ] " << (on_cluster() ? "cluster" : "one redis") << ": a request queued "
            << "150 ms into a read was returned after " << took << " ms\n";
}

INSTANTIATE_TEST_SUITE_P(Deployments, RedisStoreV2Queue,
                         ::testing::Values(Deployment::kSingle, Deployment::kCluster),
                         testing::deployment_name);

// schema/redis-acl-edge.txt on a real server: on v2 the edge's user runs the gate without the
// lease and XADDs to a shard's stream; the gate with the lease declared, and every other v2 write,
// are refused. (ACL users are per node: one redis-server says what the rules allow.)
TEST(RedisStoreV2QueueAcl, TheEdgesUserWritesOnlyV2GatesAndShardStreams) {
  testing::RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  RedisConnection edge = testing::connect_as_edge(server, kNs);
  ASSERT_NE(edge, nullptr);
  const RedisKeys keys = *RedisKeys::create(kNs, KeyLayout::kV2);
  auto allowed = [&](const std::vector<std::string>& argv) {
    RespValue v = run_argv(edge.get(), argv);
    EXPECT_FALSE(v.is_error()) << argv[0] << " " << argv[1] << ": " << v.str;
    return v;
  };
  auto refused = [&](const std::vector<std::string>& argv) {
    RespValue v = run_argv(edge.get(), argv);
    EXPECT_TRUE(v.is_error() && (v.str.find("NOPERM") != std::string::npos ||
                                 v.str.find("can't access") != std::string::npos))
        << argv[0] << " " << argv[1] << ": " << v.str;
  };
  EnqueueOptions options;
  for (const auto& [cid, p] : {std::pair<std::string, Principal>{kAlpha, Principal::shared()},
                               std::pair<std::string, Principal>{kBeta, m1()}}) {
    Revalidation r{cid, p, "stale", false};
    RespValue gate = allowed(*revalidate_gate_command(keys, r, kNow, options, false));
    Result<RevalidationGate> won = parse_gate_reply(gate);
    ASSERT_TRUE(won.ok()) << won.error().message;
    EXPECT_EQ(*won, RevalidationGate::kWon);
    RespValue id = allowed(*revalidate_xadd_command(keys, r, kNow, options.stream_maxlen));
    EXPECT_TRUE(parse_xadd_reply(id).ok()) << id.debug_string();
    refused(*revalidate_gate_command(keys, r, kNow, options, /*declare_lease=*/true));
    refused({"SET", *keys.lease(cid, p), "1:x"});
    refused({"HSET", *keys.manifest(cid, p), "etag", "x"});
  }
  const uint32_t shard = *keys.connection_shard(kAlpha);
  refused({"HSET", *keys.conn(kAlpha), "name", "x"});
  refused({"SADD", *keys.conns(shard), "x"});
  refused({"ZADD", *keys.due(shard), "0", "x"});
  refused({"SADD", *keys.removed_conns(shard), "x"});  // (the calls stream is the relay's: it may)
  refused({"SET", *keys.grant_members(shard), "x"});
  // The two requests are there (read as the default user: the edge reads no stream).
  RedisConnection admin(server.connect());
  ASSERT_NE(admin, nullptr);
  for (const char* cid : {kAlpha, kBeta}) {
    RespValue n =
        run_argv(admin.get(), {"XLEN", *keys.revalidate_stream(*keys.connection_shard(cid))});
    EXPECT_EQ(n.integer, 1) << cid;
  }
}

}  // namespace
}  // namespace quiver
