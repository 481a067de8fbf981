// The cluster routing (shared/redis_cluster.h) and the agent's node pool
// (native-agent/store/redis_cluster_pool.h) against a real six-node Redis Cluster (three masters,
// three replicas; tests/support/redis_cluster.h): slots agree with CLUSTER KEYSLOT, keys spread
// over every master, reads go to replicas after READONLY, a slot migrated mid-traffic is followed
// through ASK and then MOVED without a failed command, and a SIGKILLed master's replica takes over
// while the pool keeps going.
#include "shared/redis_cluster.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::RedisCluster;
using testing::RedisClusterOptions;
using testing::RedisConnection;
using testing::run_argv;

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<RedisCluster>(options());
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
  }

  virtual RedisClusterOptions options() const { return {}; }

  // A pool seeded with one node only: it must learn the rest from the map.
  std::unique_ptr<RedisClusterPool> make_pool(bool replica_reads = false,
                                              std::string password = "") {
    RedisClusterPoolOptions o;
    ClusterNode seed;
    seed.host = "127.0.0.1";
    seed.port = cluster_->ports()[0];
    o.seeds.push_back(seed);
    o.replica_reads = replica_reads;
    if (!password.empty()) o.password = Secret(password);
    o.retry.max_attempts = 10;
    Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(std::move(o));
    EXPECT_TRUE(pool.ok()) << pool.error().message;
    return pool.ok() ? std::move(*pool) : nullptr;
  }

  // The master serving `slot` in the pool's map, and another master (0 when there is none).
  static std::pair<int, int> owner_and_another(const RedisClusterPool& pool, uint16_t slot) {
    const ClusterShard* owner = pool.map().shard_for_slot(slot);
    if (owner == nullptr) return {0, 0};
    for (const ClusterNode& m : pool.map().masters()) {
      if (m.port != owner->master.port) return {owner->master.port, m.port};
    }
    return {owner->master.port, 0};
  }

  // `slot` IMPORTING at `to` and MIGRATING at `from`, as a reshard starts (its keys then move by
  // MIGRATE).
  bool start_migration(uint16_t slot, int from, int to) {
    const std::string s = std::to_string(slot);
    return on(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", cluster_->node_id(from)}).is_ok() &&
           on(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", cluster_->node_id(to)}).is_ok();
  }

  RespValue on(int port, const std::vector<std::string>& argv) {
    RedisConnection c(cluster_->connect(port));
    if (c == nullptr) return RespValue::error("cannot connect");
    return run_argv(c.get(), argv);
  }

  std::unique_ptr<RedisCluster> cluster_;
};

std::string value_of(const Result<RespValue>& r) {
  if (!r.ok()) return "error: " + r.error().message;
  if (r->is_error()) return "error reply: " + r->str;
  return r->str;
}

// Keys of every shape the slot rule distinguishes: plain, tagged, an empty tag, unclosed and
// reversed braces, nested braces, binary bytes (NUL included), long keys.
std::vector<std::string> generated_keys(std::size_t count) {
  std::vector<std::string> keys;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const char* alphabet = "ab{}:{x}}{\0z";
  for (std::size_t i = 0; keys.size() < count; ++i) {
    switch (i % 6) {
      case 0:
        keys.push_back("key:" + std::to_string(i));
        break;
      case 1:
        keys.push_back("quiver:{conn-" + std::to_string(i % 97) +
                       "}:manifest:" + std::to_string(i));
        break;
      case 2:
        keys.push_back("a{}{b" + std::to_string(i) + "}");
        break;
      case 3:
        keys.push_back("}{" + std::to_string(i) + "{");
        break;
      case 4:
        keys.push_back("{{" + std::to_string(i) + "}}");
        break;
      default: {
        std::string k;
        std::size_t len = 1 + next() % 40;
        for (std::size_t j = 0; j < len; ++j) k.push_back(alphabet[next() % 12]);
        keys.push_back(k);
        break;
      }
    }
  }
  return keys;
}

TEST_F(RedisClusterTest, SlotsAgreeWithClusterKeyslot) {
  RedisConnection c(cluster_->connect(cluster_->ports()[0]));
  ASSERT_NE(c, nullptr);
  std::vector<std::string> keys = generated_keys(5000);
  // One pipeline: every KEYSLOT appended, then every reply read.
  for (const std::string& k : keys) {
    const char* argv[] = {"CLUSTER", "KEYSLOT", k.data()};
    std::size_t lens[] = {7, 7, k.size()};
    ASSERT_EQ(redisAppendCommandArgv(c.get(), 3, argv, lens), REDIS_OK);
  }
  std::size_t mismatches = 0;
  for (const std::string& k : keys) {
    void* raw = nullptr;
    ASSERT_EQ(redisGetReply(c.get(), &raw), REDIS_OK);
    auto* reply = static_cast<redisReply*>(raw);
    ASSERT_EQ(reply->type, REDIS_REPLY_INTEGER);
    if (reply->integer != cluster_key_slot(k)) {
      ++mismatches;
      ADD_FAILURE() << "key " << RespValue::bulk_string(k).debug_string() << ": Redis says "
                    << reply->integer << ", we say " << cluster_key_slot(k);
    }
    freeReplyObject(reply);
    if (mismatches > 5) break;
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST_F(RedisClusterTest, MapFromShardsAndSlotsAgree) {
  RespValue shards = on(cluster_->ports()[0], {"CLUSTER", "SHARDS"});
  RespValue slots = on(cluster_->ports()[0], {"CLUSTER", "SLOTS"});
  Result<ClusterSlotMap> a = ClusterSlotMap::from_shards(shards, "127.0.0.1");
  Result<ClusterSlotMap> b = ClusterSlotMap::from_slots(slots, "127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_TRUE(a->covers_all_slots());
  EXPECT_TRUE(b->covers_all_slots());
  EXPECT_EQ(a->masters().size(), 3u);
  for (int slot = 0; slot < kClusterSlotCount; ++slot) {
    const ClusterShard* x = a->shard_for_slot(static_cast<uint16_t>(slot));
    const ClusterShard* y = b->shard_for_slot(static_cast<uint16_t>(slot));
    ASSERT_TRUE(x != nullptr && y != nullptr);
    ASSERT_EQ(x->master.address(), y->master.address()) << "slot " << slot;
    ASSERT_EQ(x->replicas.size(), 1u);
    ASSERT_EQ(y->replicas.size(), 1u);
    ASSERT_EQ(x->replicas[0].address(), y->replicas[0].address());
  }
}

TEST_F(RedisClusterTest, KeysSpreadOverEveryMasterAndReplicasServeReads) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_NE(pool, nullptr);
  // 1,000 connections' records, tagged per connection (the layout v2 direction).
  std::vector<ClusterRequest> writes;
  for (int i = 0; i < 1000; ++i) {
    std::string key = "quiver:{c" + std::to_string(i) + "}:record";
    writes.push_back({{"SET", key, "v" + std::to_string(i)}, false});
  }
  std::vector<Result<RespValue>> written = pool->run_batch(writes);
  for (std::size_t i = 0; i < written.size(); ++i) {
    ASSERT_TRUE(written[i].ok() && written[i]->is_ok()) << i << ": " << value_of(written[i]);
  }
  auto sizes = pool->run_on_masters({"DBSIZE"});
  ASSERT_EQ(sizes.size(), 3u);
  int64_t total = 0;
  for (const auto& [node, r] : sizes) {
    ASSERT_TRUE(r.ok() && r->is_integer()) << node.address();
    total += r->integer;
  }
  EXPECT_EQ(total, 1000);
  const double mean = static_cast<double>(total) / 3.0;
  for (const auto& [node, r] : sizes) {
    EXPECT_GT(r->integer, 0) << node.address();
    EXPECT_LE(static_cast<double>(r->integer), 2.0 * mean) << node.address();
  }
  EXPECT_EQ(pool->stats().moved, 0u);  // the map was right from the start

  // Reads from replicas: wait until each master's replica has the writes, then read through a
  // pool that sends read_only commands to replicas (READONLY with the connection's first write).
  for (const auto& [node, r] : pool->run_on_masters({"WAIT", "1", "5000"})) {
    ASSERT_TRUE(r.ok() && r->as_int() == 1) << node.address() << " " << value_of(r);
  }
  std::unique_ptr<RedisClusterPool> readers = make_pool(/*replica_reads=*/true);
  std::vector<ClusterRequest> reads;
  for (int i = 0; i < 1000; ++i) {
    reads.push_back({{"GET", "quiver:{c" + std::to_string(i) + "}:record"}, true});
  }
  std::vector<Result<RespValue>> got = readers->run_batch(reads);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(value_of(got[static_cast<std::size_t>(i)]), "v" + std::to_string(i));
  }
  EXPECT_EQ(readers->stats().moved, 0u);  // a replica without READONLY would answer MOVED
  // Every replica served GETs; no master did.
  for (int port : cluster_->ports()) {
    RespValue stats = on(port, {"INFO", "commandstats"});
    bool served_gets = stats.str.find("cmdstat_get:calls=") != std::string::npos;
    EXPECT_EQ(served_gets, cluster_->role(port) == "slave") << port << " " << cluster_->role(port);
  }
}

TEST_F(RedisClusterTest, ClearErrorsNeverInternal) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  Result<RespValue> cross = pool->run({"MGET", "foo", "bar"});
  ASSERT_FALSE(cross.ok());
  EXPECT_EQ(cross.error().code, ErrorCode::kInvalidArgument);
  // A command's own error reply is a value.
  ASSERT_TRUE(pool->run({"SET", "str", "x"}).ok());
  Result<RespValue> wrong = pool->run({"HGET", "str", "f"});
  ASSERT_TRUE(wrong.ok());
  EXPECT_TRUE(wrong->is_error());
  // No node reachable: kStoreUnavailable, saying so.
  RedisClusterPoolOptions o;
  ClusterNode dead;
  dead.host = "127.0.0.1";
  dead.port = testing::free_loopback_port();
  o.seeds.push_back(dead);
  o.retry.max_attempts = 2;
  auto nowhere = RedisClusterPool::create(o);
  ASSERT_TRUE(nowhere.ok());
  Result<RespValue> r = (*nowhere)->run({"GET", "k"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(r.error().message.find("cannot connect"), std::string::npos) << r.error().message;
}

TEST_F(RedisClusterTest, SlotMigratedMidTrafficIsFollowedThroughAskThenMoved) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_TRUE(pool->refresh().ok());
  const std::string tag = "{mig}";
  const uint16_t slot = cluster_key_slot(tag);
  const ClusterShard* owner = pool->map().shard_for_slot(slot);
  ASSERT_NE(owner, nullptr);
  const int from = owner->master.port;
  int to = 0;
  for (const ClusterNode& m : pool->map().masters()) {
    if (m.port != from) to = m.port;
  }
  ASSERT_NE(to, 0);

  std::map<std::string, std::string> expected;
  for (int i = 0; i < 20; ++i) expected[tag + ":k" + std::to_string(i)] = "m" + std::to_string(i);
  for (int i = 0; i < 30; ++i) expected["other:" + std::to_string(i)] = "o" + std::to_string(i);
  for (const auto& [k, v] : expected) ASSERT_TRUE(pool->run({"SET", k, v}).ok());

  // Traffic through a second pool, all along the migration.
  std::unique_ptr<RedisClusterPool> traffic = make_pool();
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> failures{0};
  std::string first_failure;
  std::atomic<int> writes{0};
  std::thread reader([&] {
    for (int n = 0; !stop.load(); ++n) {
      for (const auto& [k, v] : expected) {
        Result<RespValue> r = traffic->run({"GET", k}, true);
        ++reads;
        if (value_of(r) != v && failures.fetch_add(1) == 0) first_failure = k + ": " + value_of(r);
      }
      // Writes into the migrating slot: to the old owner while it holds the key, through ASK once
      // the key is gone or new; read back at once.
      const std::string w = tag + ":w" + std::to_string(n % 5);
      Result<RespValue> set = traffic->run({"SET", w, std::to_string(n)});
      Result<RespValue> got = traffic->run({"GET", w}, true);
      ++writes;
      if ((!set.ok() || !set->is_ok() || value_of(got) != std::to_string(n)) &&
          failures.fetch_add(1) == 0) {
        first_failure = w + ": " + value_of(set) + " then " + value_of(got);
      }
    }
  });
  // Two more rounds of traffic (every key read, one write) in the current state of the slot.
  auto wait_for_traffic = [&] {
    int target = writes.load() + 2;
    for (int i = 0; i < 6000 && writes.load() < target; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };

  const std::string to_id = cluster_->node_id(to);
  const std::string s = std::to_string(slot);
  ASSERT_TRUE(start_migration(slot, from, to));
  auto migrate = [&](int first, int last) {
    std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0",
                                     "5000",    "KEYS"};
    for (int i = first; i <= last; ++i) argv.push_back(tag + ":k" + std::to_string(i));
    RespValue r = on(from, argv);
    ASSERT_TRUE(r.is_ok()) << r.debug_string();
  };
  migrate(0, 9);
  wait_for_traffic();

  // Half moved: a moved key is asked for at the importing node, a key not yet moved is served
  // where it was, a new key goes to the importing node.
  EXPECT_EQ(value_of(pool->run({"GET", tag + ":k0"})), "m0");
  EXPECT_GE(pool->stats().ask, 1u);
  EXPECT_EQ(value_of(pool->run({"GET", tag + ":k15"})), "m15");
  EXPECT_TRUE(pool->run({"SET", tag + ":new", "n"})->is_ok());
  EXPECT_EQ(value_of(pool->run({"GET", tag + ":new"})), "n");
  const uint64_t moved_before = pool->stats().moved;
  EXPECT_EQ(moved_before, 0u);

  // The rest of the slot, whatever the traffic wrote meanwhile (as redis-cli --cluster reshard
  // does: CLUSTER GETKEYSINSLOT until the old owner holds none).
  migrate(10, 19);
  for (;;) {
    RespValue left = on(from, {"CLUSTER", "GETKEYSINSLOT", s, "100"});
    ASSERT_TRUE(left.is_array()) << left.debug_string();
    if (left.elements.empty()) break;
    std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0",
                                     "5000",    "KEYS"};
    for (const RespValue& k : left.elements) argv.push_back(k.str);
    RespValue r = on(from, argv);
    ASSERT_TRUE(r.is_ok()) << r.debug_string();
  }
  // The importing node first, then the migrating one, then the other masters (as redis-cli does).
  ASSERT_TRUE(on(to, {"CLUSTER", "SETSLOT", s, "NODE", to_id}).is_ok());
  ASSERT_TRUE(on(from, {"CLUSTER", "SETSLOT", s, "NODE", to_id}).is_ok());
  for (int port : cluster_->master_ports()) {
    if (port != to && port != from) {
      ASSERT_TRUE(on(port, {"CLUSTER", "SETSLOT", s, "NODE", to_id}).is_ok());
    }
  }
  wait_for_traffic();

  // Done: the old owner answers MOVED; the pool follows it and remembers.
  EXPECT_EQ(value_of(pool->run({"GET", tag + ":k15"})), "m15");
  EXPECT_GE(pool->stats().moved, 1u);
  EXPECT_EQ(pool->map().shard_for_slot(slot)->master.port, to);
  const uint64_t moved_after = pool->stats().moved;
  EXPECT_EQ(value_of(pool->run({"GET", tag + ":k16"})), "m16");
  EXPECT_EQ(pool->stats().moved, moved_after);  // the map was updated: no second MOVED

  stop = true;
  reader.join();
  EXPECT_GE(writes.load(), 4);
  EXPECT_GE(reads.load(), 50 * writes.load());
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_GE(traffic->stats().ask + traffic->stats().moved, 1u);
  RecordProperty("traffic_reads", reads.load());
  RecordProperty("traffic_writes", writes.load());
  RecordProperty("traffic_ask", static_cast<int>(traffic->stats().ask));
  RecordProperty("traffic_moved", static_cast<int>(traffic->stats().moved));
}

// A script that declares a key which does not exist (key layout v2's lease, mark, overlay) meets a
// slot split by a migration as TRYAGAIN for the migration's whole length: at the source while the
// slot's other keys are there (some keys here, some not), then, once they have left, ASK and
// TRYAGAIN at the importing node (a key missing) until SETSLOT NODE. run_batch waits it out: the
// TRYAGAIN after ASK retried at the importing node (no redirect spent per retry), within the
// TRYAGAIN budget (batch_tryagain_attempts), and the pool's other calls go on meanwhile.
TEST_F(RedisClusterTest, ASplitSlotIsWaitedOutByAScriptDeclaringAnAbsentKey) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_TRUE(pool->refresh().ok());
  const std::string tag = "{split}";
  const uint16_t slot = cluster_key_slot(tag);
  const auto [from, to] = owner_and_another(*pool, slot);
  ASSERT_NE(to, 0);
  ASSERT_TRUE(pool->run({"SET", tag + ":a", "1"})->is_ok());
  ASSERT_TRUE(pool->run({"SET", tag + ":b", "2"})->is_ok());
  ASSERT_TRUE(pool->run({"SET", "elsewhere", "3"})->is_ok());
  const std::string s = std::to_string(slot);
  const std::string to_id = cluster_->node_id(to);
  ASSERT_TRUE(start_migration(slot, from, to));
  ASSERT_TRUE(
      on(from, {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000", "KEYS", tag + ":a"})
          .is_ok());
  const RedisCommand read_a = {"EVAL", "return redis.call('GET', KEYS[1])", "2", tag + ":a",
                               tag + ":absent"};
  const RedisCommand read_b = {"EVAL", "return redis.call('GET', KEYS[1])", "2", tag + ":b",
                               tag + ":absent"};
  std::atomic<bool> moved{false};
  std::atomic<bool> other_call_done_while_split{false};
  std::vector<Result<RespValue>> split;
  std::thread waiting([&] {
    // a: moved (ASK, then TRYAGAIN at the importing node); b: not (TRYAGAIN at the source).
    split = pool->run_batch({{read_a, false}, {read_b, false}});
  });
  // Another call of the same pool while those wait: answered before the slot is whole again.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(value_of(pool->run({"GET", "elsewhere"})), "3");
  other_call_done_while_split = !moved;
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  // The rest of the slot, then SETSLOT NODE everywhere (redis-cli's order).
  ASSERT_TRUE(
      on(from, {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000", "KEYS", tag + ":b"})
          .is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<int> order = {to, from};
  for (int port : cluster_->master_ports()) {
    if (port != to && port != from) order.push_back(port);
  }
  for (int port : order) ASSERT_TRUE(on(port, {"CLUSTER", "SETSLOT", s, "NODE", to_id}).is_ok());
  moved = true;
  waiting.join();
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(value_of(split[0]), "1");
  EXPECT_EQ(value_of(split[1]), "2");
  EXPECT_TRUE(other_call_done_while_split.load());
  EXPECT_GE(pool->stats().ask, 1u);
  EXPECT_GE(pool->stats().retries, 4u);
}

// The same split, the scripts flagged hand_back_split (as the discovery read flags a connection's
// read script): each gets its TRYAGAIN as its reply at once, a (moved: ASK, then the importing
// node's) and b (not moved: the source's), instead of waiting for the migration to end; the
// single-key GETs the reader then sends are answered where each key is (a through ASK). Unflagged,
// the same scripts wait the migration out (ASplitSlotIsWaitedOutByAScriptDeclaringAnAbsentKey).
TEST_F(RedisClusterTest, AFlaggedRequestOnASplitSlotGetsItsTryAgainAtOnce) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_TRUE(pool->refresh().ok());
  const std::string tag = "{handback}";
  const uint16_t slot = cluster_key_slot(tag);
  const auto [from, to] = owner_and_another(*pool, slot);
  ASSERT_NE(to, 0);
  ASSERT_TRUE(pool->run({"SET", tag + ":a", "1"})->is_ok());
  ASSERT_TRUE(pool->run({"SET", tag + ":b", "2"})->is_ok());
  ASSERT_TRUE(start_migration(slot, from, to));
  ASSERT_TRUE(
      on(from, {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000", "KEYS", tag + ":a"})
          .is_ok());
  ClusterRequest read_a{
      {"EVAL", "return redis.call('GET', KEYS[1])", "2", tag + ":a", tag + ":absent"}};
  ClusterRequest read_b{
      {"EVAL", "return redis.call('GET', KEYS[1])", "2", tag + ":b", tag + ":absent"}};
  read_a.hand_back_split = read_b.hand_back_split = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Result<RespValue>> r = pool->run_batch(
      {read_a, read_b, {{"GET", tag + ":a"}}, {{"GET", tag + ":b"}}, {{"GET", tag + ":absent"}}});
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  ASSERT_EQ(r.size(), 5u);
  for (std::size_t i : {0, 1}) {
    ASSERT_TRUE(r[i].ok()) << r[i].error().message;
    EXPECT_TRUE(cluster_reply_is_split_slot(*r[i])) << i << ": " << r[i]->debug_string();
  }
  EXPECT_EQ(value_of(r[2]), "1");
  EXPECT_EQ(value_of(r[3]), "2");
  ASSERT_TRUE(r[4].ok()) << r[4].error().message;
  EXPECT_TRUE(r[4]->is_nil());
  EXPECT_EQ(pool->stats().split, 2u);
  EXPECT_GE(pool->stats().ask, 2u) << "a's script and a's GET asked";
  // Not waited out: the migration's TRYAGAIN budget is about 17 s of backoff.
  EXPECT_LT(took.count(), 2000);
}

// Several requests of one run_batch round answered ASK (their keys already moved to the importing
// node): they go to that node in ONE pipeline, ASKING before each, a script (as EVAL) among them,
// not in a round trip each. The importing node sees the round as one read of its socket (Redis's
// `total_reads_processed`, calibrated against two INFOs with nothing between).
TEST_F(RedisClusterTest, TheAsksOfOneRoundGoToTheImportingNodeInOnePipeline) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_TRUE(pool->refresh().ok());
  const std::string tag = "{askmany}";
  const uint16_t slot = cluster_key_slot(tag);
  const auto [from, to] = owner_and_another(*pool, slot);
  ASSERT_NE(to, 0);
  for (int i = 0; i < 6; ++i) {
    const std::string k = std::to_string(i);
    ASSERT_TRUE(pool->run({"SET", tag + ":k" + k, "v" + k})->is_ok());
  }
  ASSERT_TRUE(start_migration(slot, from, to));
  ASSERT_TRUE(on(from, {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000", "KEYS",
                        tag + ":k0", tag + ":k1", tag + ":k2", tag + ":k3"})
                  .is_ok());
  // The pool's connection to the importing node opened (one ASK followed).
  EXPECT_EQ(value_of(pool->run({"GET", tag + ":k0"})), "v0");
  const uint64_t asks_before = pool->stats().ask;
  ASSERT_GE(asks_before, 1u);

  RedisConnection c(cluster_->connect(to));
  ASSERT_TRUE(c);
  auto reads = [&] {
    const std::string info = run_argv(c.get(), {"INFO", "stats"}).str;
    const std::size_t at = info.find("total_reads_processed:");
    return at == std::string::npos
               ? int64_t{-1}
               : std::stoll(info.substr(at + 22, info.find('\r', at) - at - 22));
  };
  const int64_t r0 = reads();
  const int64_t r1 = reads();  // an INFO's own read
  ASSERT_GE(r0, 0);
  std::vector<Result<RespValue>> r =
      pool->run_batch({{{"GET", tag + ":k0"}},
                       {{"GET", tag + ":k1"}},
                       {{"EVAL", "return redis.call('GET', KEYS[1])", "1", tag + ":k2"}},
                       {{"GET", tag + ":k3"}},
                       {{"GET", tag + ":k4"}},
                       {{"GET", tag + ":k5"}}});
  const int64_t r2 = reads();
  ASSERT_EQ(r.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(value_of(r[i]), "v" + std::to_string(i)) << i;
  EXPECT_EQ(pool->stats().ask - asks_before, 4u) << "k0 to k3 asked for";
  EXPECT_EQ((r2 - r1) - (r1 - r0), 1) << "the four asks in one pipeline";
}

// run_at_slot: one pipeline to the slot's master, keyless commands along; mid-migration the keys
// already moved are asked for at the importing node (ASKING before each), the rest answered where
// they are; once moved, the old owner's MOVED sends the pipeline, and a MULTI/EXEC block whole, to
// the new one. A key of another slot is refused, not sent around.
TEST_F(RedisClusterTest, APipelinePinnedToASlotFollowsItsMigration) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_TRUE(pool->refresh().ok());
  const std::string tag = "{pin}";
  const uint16_t slot = cluster_key_slot(tag);
  const auto [from, to] = owner_and_another(*pool, slot);
  ASSERT_NE(to, 0);
  auto values = [](const Result<std::vector<RespValue>>& r) {
    std::vector<std::string> out;
    if (!r.ok()) return std::vector<std::string>{"error: " + r.error().message};
    for (const RespValue& v : *r) out.push_back(v.is_integer() ? std::to_string(v.integer) : v.str);
    return out;
  };
  Result<std::vector<RespValue>> put =
      pool->run_at_slot(slot, {{"SET", tag + "a", "1"}, {"SET", tag + "b", "2"}, {"PING"}});
  EXPECT_EQ(values(put), (std::vector<std::string>{"OK", "OK", "PONG"}));

  const std::string s = std::to_string(slot);
  ASSERT_TRUE(start_migration(slot, from, to));
  ASSERT_TRUE(
      on(from, {"MIGRATE", "127.0.0.1", std::to_string(to), tag + "a", "0", "5000"}).is_ok());
  // `a` moved, `b` not yet.
  EXPECT_EQ(values(pool->run_at_slot(slot, {{"GET", tag + "a"}, {"GET", tag + "b"}})),
            (std::vector<std::string>{"1", "2"}));
  EXPECT_GE(pool->stats().ask, 1u);
  EXPECT_EQ(pool->stats().moved, 0u);

  ASSERT_TRUE(
      on(from, {"MIGRATE", "127.0.0.1", std::to_string(to), tag + "b", "0", "5000"}).is_ok());
  for (int port : cluster_->master_ports()) {
    ASSERT_TRUE(on(port, {"CLUSTER", "SETSLOT", s, "NODE", cluster_->node_id(to)}).is_ok());
  }
  Result<std::vector<RespValue>> tx =
      pool->run_at_slot(slot, {{"MULTI"}, {"INCR", tag + "a"}, {"INCR", tag + "b"}, {"EXEC"}});
  ASSERT_TRUE(tx.ok()) << tx.error().message;
  ASSERT_EQ(tx->size(), 4u);
  ASSERT_TRUE(tx->back().is_array()) << tx->back().debug_string();
  EXPECT_EQ(tx->back().elements.at(0).integer, 2);
  EXPECT_EQ(tx->back().elements.at(1).integer, 3);
  EXPECT_GE(pool->stats().moved, 1u);
  EXPECT_EQ(pool->map().shard_for_slot(slot)->master.port, to);
  // Every command ran once: the redirected transaction was sent again whole, nothing twice.
  RespValue a = on(to, {"GET", tag + "a"});
  EXPECT_EQ(a.str, "2");

  // A key of another slot, on a node that does not serve it: refused with the reason.
  std::string elsewhere;
  for (int i = 0; elsewhere.empty(); ++i) {
    const std::string k = "{x" + std::to_string(i) + "}";
    if (pool->map().shard_for_slot(cluster_key_slot(k))->master.port != to) elsewhere = k;
  }
  Result<std::vector<RespValue>> wrong = pool->run_at_slot(slot, {{"GET", elsewhere}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument) << wrong.error().message;
}

TEST_F(RedisClusterTest, MasterKilledMidTrafficFailsOverAndThePoolRecovers) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  std::vector<ClusterRequest> writes;
  for (int i = 0; i < 300; ++i) {
    writes.push_back({{"SET", "k{" + std::to_string(i) + "}", "v" + std::to_string(i)}, false});
  }
  for (const Result<RespValue>& r : pool->run_batch(writes)) ASSERT_TRUE(r.ok() && r->is_ok());
  for (const auto& [node, r] : pool->run_on_masters({"WAIT", "1", "5000"})) {
    ASSERT_TRUE(r.ok() && r->as_int() == 1) << node.address();
  }
  const std::string key = "k{7}";
  const uint16_t slot = cluster_key_slot(key);
  const ClusterShard* owner = pool->map().shard_for_slot(slot);
  ASSERT_NE(owner, nullptr);
  const int victim = owner->master.port;
  ASSERT_EQ(owner->replicas.size(), 1u);
  const int heir = owner->replicas[0].port;

  cluster_->kill(victim);

  // Traffic goes on: commands fail while no node serves the slot, then succeed again.
  int failed = 0;
  bool recovered = false;
  for (int i = 0; i < 600 && !recovered; ++i) {
    Result<RespValue> r = pool->run({"SET", key, "after"});
    recovered = r.ok() && r->is_ok();
    if (!recovered) {
      ++failed;
      EXPECT_FALSE(r.ok() && !r->is_error()) << value_of(r);
      if (!r.ok()) {
        EXPECT_EQ(r.error().code, ErrorCode::kStoreUnavailable) << r.error().message;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_TRUE(recovered) << "no write succeeded within the failover window";
  EXPECT_EQ(pool->map().shard_for_slot(slot)->master.port, heir);
  EXPECT_EQ(cluster_->role(heir), "master");
  EXPECT_GE(pool->stats().refreshes, 2u);
  // Every key reads back (the replica had them all: WAIT above), from every shard.
  std::vector<ClusterRequest> reads;
  for (int i = 0; i < 300; ++i) reads.push_back({{"GET", "k{" + std::to_string(i) + "}"}, true});
  std::vector<Result<RespValue>> got = pool->run_batch(reads);
  for (int i = 0; i < 300; ++i) {
    std::string want = i == 7 ? "after" : "v" + std::to_string(i);
    ASSERT_EQ(value_of(got[static_cast<std::size_t>(i)]), want) << i;
  }
  EXPECT_TRUE(cluster_->wait_until_ok(30));
  RecordProperty("failed_during_failover", failed);
  RecordProperty("refreshes", static_cast<int>(pool->stats().refreshes));
  RecordProperty("retries", static_cast<int>(pool->stats().retries));
}

class RedisClusterAuthTest : public RedisClusterTest {
 protected:
  RedisClusterOptions options() const override {
    RedisClusterOptions o;
    o.password = "cluster-secret-pw";
    return o;
  }
};

TEST_F(RedisClusterAuthTest, AuthThenReadonlyOnReplicasAndARefusalIsUnauthenticated) {
  std::unique_ptr<RedisClusterPool> wrong = make_pool(false, "not-the-password");
  Result<RespValue> refused = wrong->run({"GET", "k"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated) << refused.error().message;
  EXPECT_EQ(refused.error().message.find("not-the-password"), std::string::npos);

  std::unique_ptr<RedisClusterPool> writer = make_pool(false, "cluster-secret-pw");
  ASSERT_TRUE(writer->run({"SET", "k", "v"}).ok());
  for (const auto& [node, r] : writer->run_on_masters({"WAIT", "1", "5000"})) {
    ASSERT_TRUE(r.ok() && r->as_int() == 1) << node.address();
  }
  std::unique_ptr<RedisClusterPool> reader = make_pool(true, "cluster-secret-pw");
  EXPECT_EQ(value_of(reader->run({"GET", "k"}, true)), "v");
  EXPECT_EQ(reader->stats().moved, 0u);
}

}  // namespace
}  // namespace quiver
