// A round over several nodes (RedisClusterPool::run_batch, run_on_masters) on a real six-node
// cluster (tests/support/redis_cluster.h): every node's pipeline is written before any reply is
// read, so the nodes work at the same time, and each node's replies are still decided on their own:
//   - every command of a batch over the three masters (and, with replica reads, their replicas)
//     answered right, and the nodes' work overlapping in time (a pool with concurrent_nodes off,
//     the pool as it was, runs them one after another: the same check fails there);
//   - a master SIGKILLed in the middle of a round fails that node's writes only ("not sent
//     again": the promoted replica never sees them), its read is retried and answered after the
//     failover, and the other masters had their commands before the kill;
//   - NOSCRIPT on one node (SCRIPT FLUSH) answered there with EVAL, the others by SHA;
//   - one node timing out fails its own commands, the others are answered.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "shared/redis_cluster.h"
#include "shared/schema_assets.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_cluster.h"

namespace quiver {
namespace {

using testing::RedisCluster;
using testing::RedisConnection;
using testing::run_argv;

// Spins for ARGV[1] µs of Redis's clock, then answers {start µs, end µs}; INCRs KEYS[1] first
// (when given), an effect that replicates only once the script ends.
constexpr char kSpin[] =
    "if #KEYS > 0 then redis.call('INCR', KEYS[1]) end "
    "local t = redis.call('TIME') "
    "local start = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local now = start "
    "while now - start < tonumber(ARGV[1]) do "
    "  t = redis.call('TIME') "
    "  now = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "end "
    "return {start, now}";

std::string value_of(const Result<RespValue>& r) {
  if (!r.ok()) return "error: " + r.error().message;
  if (r->is_error()) return "error reply: " + r->str;
  if (r->is_integer()) return std::to_string(r->integer);
  return r->str;
}

// A spin's {start, end}; {0, 0} when the reply is not one.
std::pair<int64_t, int64_t> interval(const Result<RespValue>& r) {
  if (!r.ok() || !r->is_array() || r->elements.size() != 2) return {0, 0};
  return {r->elements[0].integer, r->elements[1].integer};
}

class RedisClusterRoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<RedisCluster>();
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
  }

  std::unique_ptr<RedisClusterPool> make_pool(bool concurrent = true, bool replica_reads = false,
                                              int64_t command_timeout_ms = 2'000) {
    RedisClusterPoolOptions o;
    ClusterNode seed;
    seed.host = "127.0.0.1";
    seed.port = cluster_->ports()[0];
    o.seeds.push_back(seed);
    o.replica_reads = replica_reads;
    o.concurrent_nodes = concurrent;
    o.command_timeout_ms = command_timeout_ms;
    // Enough for a failover (cluster-node-timeout 1 s, then the election): about 18 s of backoff.
    o.retry.max_attempts = 40;
    Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(std::move(o));
    EXPECT_TRUE(pool.ok()) << pool.error().message;
    if (!pool.ok()) return nullptr;
    EXPECT_TRUE((*pool)->refresh().ok());
    return std::move(*pool);
  }

  // `per_master` hash tags `{r<i>}` whose slots each master serves, by master port.
  static std::map<int, std::vector<std::string>> tags_by_master(const RedisClusterPool& pool,
                                                                std::size_t per_master) {
    std::map<int, std::vector<std::string>> out;
    const ClusterSlotMap map = pool.map();
    for (const ClusterNode& m : map.masters()) out[m.port];
    for (int i = 0; i < 100000; ++i) {
      const std::string tag = "{r" + std::to_string(i) + "}";
      const ClusterShard* shard = map.shard_for_slot(cluster_key_slot(tag));
      if (shard == nullptr) continue;
      std::vector<std::string>& tags = out[shard->master.port];
      if (tags.size() < per_master) tags.push_back(tag);
      if (std::all_of(out.begin(), out.end(),
                      [&](const auto& e) { return e.second.size() == per_master; })) {
        break;
      }
    }
    return out;
  }

  RespValue on(int port, const std::vector<std::string>& argv) {
    RedisConnection c(cluster_->connect(port));
    if (c == nullptr) return RespValue::error("cannot connect");
    return run_argv(c.get(), argv);
  }

  // cmdstat_<name>'s calls on the node (0 when absent).
  int64_t calls(int port, const std::string& name) {
    const std::string text = on(port, {"INFO", "commandstats"}).str;
    const std::string head = "cmdstat_" + name + ":calls=";
    const std::size_t at = text.find(head);
    return at == std::string::npos ? 0 : std::stoll(text.substr(at + head.size()));
  }

  std::unique_ptr<RedisCluster> cluster_;
};

// 48 one-slot commands of each kind over the three masters (16 tags each) in one batch, reads of
// seeded keys on the replicas in the same round (six nodes at once), every answer checked; then
// one spinning script per master: the three run at the same time with the pool, one after another
// with concurrent_nodes off; run_on_masters likewise.
TEST_F(RedisClusterRoundsTest, ARoundOverEveryMasterIsAnsweredRightAndRunsOnAllAtOnce) {
  std::unique_ptr<RedisClusterPool> seeder = make_pool();
  ASSERT_NE(seeder, nullptr);
  const std::map<int, std::vector<std::string>> tags = tags_by_master(*seeder, 16);
  ASSERT_EQ(tags.size(), 3u);
  std::vector<ClusterRequest> seed;
  for (const auto& [port, list] : tags) {
    ASSERT_EQ(list.size(), 16u) << port;
    for (const std::string& tag : list) seed.push_back({{"SET", tag + ":seeded", tag}, false});
  }
  for (const Result<RespValue>& r : seeder->run_batch(seed)) ASSERT_EQ(value_of(r), "OK");
  for (const auto& [node, r] : seeder->run_on_masters({"WAIT", "1", "5000"})) {
    ASSERT_EQ(value_of(r), "1") << node.address();
  }

  std::unique_ptr<RedisClusterPool> pool = make_pool(/*concurrent=*/true, /*replica_reads=*/true);
  ASSERT_NE(pool, nullptr);
  const std::string body_store(schema_asset("lua/body_store.lua"));
  ASSERT_FALSE(body_store.empty());
  std::vector<ClusterRequest> batch;
  std::vector<std::string> want;
  // The replicas' reads first: the plan puts a read where its shard already has a node in the
  // round, so reads placed after a master's write would go to the master.
  for (const auto& [port, list] : tags) {
    for (const std::string& tag : list) {
      batch.push_back({{"GET", tag + ":seeded"}, true});
      want.push_back(tag);
    }
  }
  for (const auto& [port, list] : tags) {
    for (const std::string& tag : list) {
      batch.push_back({{"SET", tag + ":k", "v" + tag}, false});
      want.push_back("OK");
      batch.push_back({{"INCRBY", tag + ":n", "7"}, false});
      want.push_back("7");
      batch.push_back({{"GET", tag + ":k"}, false});  // after the SET: same node, same pipeline
      want.push_back("v" + tag);
      // A script of schema/ (EVALSHA, NOSCRIPT on the first round, then EVAL).
      batch.push_back(
          {{"EVAL", body_store, "1", tag + ":b:feed", "body", "feed", "0", "60000"}, false});
      want.push_back("stored");
    }
  }
  std::vector<Result<RespValue>> got = pool->run_batch(batch);
  ASSERT_EQ(got.size(), batch.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::string v = value_of(got[i]);
    if (got[i].ok() && got[i]->is_array() && got[i]->elements.size() == 1) {
      v = got[i]->elements[0].str;
    }
    EXPECT_EQ(v, want[i]) << i << ": " << batch[i].argv[0] << " " << batch[i].argv[1];
  }
  EXPECT_EQ(pool->stats().moved, 0u);
  EXPECT_EQ(pool->stats().retries, 0u);
  EXPECT_EQ(pool->stats().connections, 6u);  // three masters, three replicas (READONLY)
  for (const auto& [port, list] : tags) {
    EXPECT_EQ(on(port, {"GET", list.front() + ":k"}).str, "v" + list.front()) << port;
    EXPECT_EQ(on(port, {"GET", list.back() + ":n"}).str, "7") << port;
  }
  for (int port : cluster_->ports()) {
    const bool replica = cluster_->role(port) == "slave";
    EXPECT_GT(calls(port, "get"), 0) << port;  // masters: after the SET; replicas: seeded
    EXPECT_EQ(calls(port, "readonly"), replica ? 1 : 0) << port;
  }

  // One 400 ms spin per master in one round: with the pool, the three overlap (every one started
  // before any ended); node after node, each starts after the one before ended.
  auto spin_round = [&](RedisClusterPool& p) {
    std::vector<ClusterRequest> spins;
    for (const auto& [port, list] : tags) {
      spins.push_back({{"EVAL", kSpin, "1", list.front() + ":spins", "400000"}, false});
    }
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const Result<RespValue>& r : p.run_batch(spins)) {
      EXPECT_TRUE(r.ok() && r->is_array()) << value_of(r);
      out.push_back(interval(r));
    }
    return out;
  };
  auto overlap = [](const std::vector<std::pair<int64_t, int64_t>>& spans) {
    int64_t last_start = 0, first_end = INT64_MAX;
    for (const auto& [s, e] : spans) {
      last_start = std::max(last_start, s);
      first_end = std::min(first_end, e);
    }
    return last_start < first_end;
  };
  auto one_after_another = [](std::vector<std::pair<int64_t, int64_t>> spans) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) return false;
    }
    return true;
  };
  const auto together = spin_round(*pool);
  ASSERT_EQ(together.size(), 3u);
  EXPECT_TRUE(overlap(together));
  std::unique_ptr<RedisClusterPool> sequential = make_pool(/*concurrent=*/false);
  ASSERT_NE(sequential, nullptr);
  const auto in_turn = spin_round(*sequential);
  ASSERT_EQ(in_turn.size(), 3u);
  EXPECT_TRUE(one_after_another(in_turn));
  EXPECT_FALSE(overlap(in_turn));

  // run_on_masters: a keyless spin on every master.
  auto on_masters = [&](RedisClusterPool& p) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const auto& [node, r] : p.run_on_masters({"EVAL", kSpin, "0", "400000"})) {
      EXPECT_TRUE(r.ok() && r->is_array()) << node.address() << " " << value_of(r);
      out.push_back(interval(r));
    }
    return out;
  };
  const auto masters_together = on_masters(*pool);
  ASSERT_EQ(masters_together.size(), 3u);
  EXPECT_TRUE(overlap(masters_together));
  EXPECT_TRUE(one_after_another(on_masters(*sequential)));
}

// The round's first part goes to a master that spins 4 s (a write), then takes an INCR and a read;
// it is SIGKILLed in the middle. The other masters' parts were written before the pool waited on
// the victim: they ran before the kill and their answers are kept. The victim's writes fail as
// writes that may have run; its promoted replica never sees them (the spin's INCR replicates only
// when the script ends, the INCR after it never ran); its read is retried after the failover.
TEST_F(RedisClusterRoundsTest, AMasterKilledMidRoundFailsOnlyItsOwnWrites) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_NE(pool, nullptr);
  const std::map<int, std::vector<std::string>> tags = tags_by_master(*pool, 1);
  ASSERT_EQ(tags.size(), 3u);
  const int victim = tags.begin()->first;
  const std::string tv = tags.begin()->second.front();
  const ClusterShard* shard = pool->map().shard_for_slot(cluster_key_slot(tv));
  ASSERT_NE(shard, nullptr);
  ASSERT_EQ(shard->replicas.size(), 1u);
  const int heir = shard->replicas.front().port;
  ASSERT_EQ(value_of(pool->run({"SET", tv + ":r", "read-me"})), "OK");
  for (const auto& [node, r] : pool->run_on_masters({"WAIT", "1", "5000"})) {
    ASSERT_EQ(value_of(r), "1") << node.address();
  }

  std::vector<ClusterRequest> batch = {
      {{"EVAL", kSpin, "1", tv + ":spun", "4000000"}, false},
      {{"INCR", tv + ":w"}, false},
      {{"GET", tv + ":r"}, true},
  };
  std::vector<std::pair<int, std::string>> others;  // port, tag
  for (const auto& [port, list] : tags) {
    if (port == victim) continue;
    others.emplace_back(port, list.front());
    batch.push_back({{"SET", list.front() + ":a", "A"}, false});
    batch.push_back({{"INCR", list.front() + ":n"}, false});
  }
  ASSERT_EQ(others.size(), 2u);

  // The killer: waits (up to 2 s) until both other masters ran their INCR, lets the victim spin
  // on, then kills it.
  std::atomic<bool> others_ran_before_kill{false};
  std::thread killer([&] {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    bool ran = false;
    while (!ran && std::chrono::steady_clock::now() < deadline) {
      ran = std::all_of(others.begin(), others.end(), [&](const std::pair<int, std::string>& o) {
        return on(o.first, {"GET", o.second + ":n"}).str == "1";
      });
      if (!ran) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    others_ran_before_kill = ran;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cluster_->kill(victim);
  });
  std::vector<Result<RespValue>> got = pool->run_batch(batch);
  killer.join();
  ASSERT_EQ(got.size(), batch.size());

  EXPECT_TRUE(others_ran_before_kill.load());
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_FALSE(got[i].ok()) << i << ": " << value_of(got[i]);
    EXPECT_EQ(got[i].error().code, ErrorCode::kStoreUnavailable) << got[i].error().message;
    EXPECT_NE(got[i].error().message.find("not sent again"), std::string::npos)
        << got[i].error().message;
  }
  EXPECT_EQ(value_of(got[2]), "read-me");  // retried at the promoted replica
  for (std::size_t i = 3; i < got.size(); i += 2) {
    EXPECT_EQ(value_of(got[i]), "OK") << i;
    EXPECT_EQ(value_of(got[i + 1]), "1") << i + 1;
  }
  // Nothing of the victim's writes reached the heir: neither ran twice, nor once there.
  EXPECT_EQ(cluster_->role(heir), "master");
  RespValue spun = on(heir, {"GET", tv + ":spun"});
  RespValue w = on(heir, {"GET", tv + ":w"});
  EXPECT_TRUE(spun.is_nil()) << spun.debug_string();
  EXPECT_TRUE(w.is_nil()) << w.debug_string();
  EXPECT_GE(pool->stats().refreshes, 2u);
  for (const auto& [port, tag] : others) EXPECT_EQ(on(port, {"GET", tag + ":n"}).str, "1");
}

// A script of schema/ by SHA on every master, after SCRIPT FLUSH on one: that node answers
// NOSCRIPT and gets the EVAL on its own connection; the others answer the EVALSHA; every command
// answered once.
TEST_F(RedisClusterRoundsTest, NoscriptOnOneNodeIsAnsweredThereWhileTheOthersAnswer) {
  std::unique_ptr<RedisClusterPool> pool = make_pool();
  ASSERT_NE(pool, nullptr);
  const std::map<int, std::vector<std::string>> tags = tags_by_master(*pool, 4);
  ASSERT_EQ(tags.size(), 3u);
  const std::string body_store(schema_asset("lua/body_store.lua"));
  auto round = [&](const std::string& body) {
    std::vector<ClusterRequest> batch;
    for (const auto& [port, list] : tags) {
      for (const std::string& tag : list) {
        batch.push_back(
            {{"EVAL", body_store, "1", tag + ":b:c0ffee", body, "c0ffee", "0", "60000"}, false});
        batch.push_back({{"INCR", tag + ":n"}, false});
      }
    }
    return pool->run_batch(batch);
  };
  // First round: every master lacks the script (NOSCRIPT, then EVAL everywhere).
  for (const Result<RespValue>& r : round("one")) ASSERT_TRUE(r.ok()) << r.error().message;
  const int flushed = tags.begin()->first;
  ASSERT_TRUE(on(flushed, {"SCRIPT", "FLUSH"}).is_ok());
  std::map<int, int64_t> eval_before, evalsha_before;
  for (const auto& [port, list] : tags) {
    eval_before[port] = calls(port, "eval");
    evalsha_before[port] = calls(port, "evalsha");
  }
  std::vector<Result<RespValue>> got = round("two");
  std::size_t i = 0;
  for (const auto& [port, list] : tags) {
    for (const std::string& tag : list) {
      ASSERT_TRUE(got[i].ok() && got[i]->is_array()) << value_of(got[i]);
      EXPECT_EQ(got[i]->elements.at(0).str, "stored") << tag;
      EXPECT_EQ(value_of(got[i + 1]), "2") << tag;
      EXPECT_EQ(on(port, {"GET", tag + ":b:c0ffee"}).str, "two") << tag;
      i += 2;
    }
    // The flushed node: four EVALSHAs answered NOSCRIPT, then four EVALs; the others: the
    // EVALSHAs alone.
    EXPECT_EQ(calls(port, "eval") - eval_before[port], port == flushed ? 4 : 0) << port;
    EXPECT_EQ(calls(port, "evalsha") - evalsha_before[port], 4) << port;
  }
  EXPECT_EQ(pool->stats().retries, 0u);
}

// One master spins 1.5 s while the pool's command timeout is 300 ms: its part times out and fails
// as a write that may have run; the other masters' parts, written before, are answered.
TEST_F(RedisClusterRoundsTest, ANodeThatTimesOutFailsOnlyItsOwnCommands) {
  std::unique_ptr<RedisClusterPool> pool = make_pool(true, false, /*command_timeout_ms=*/300);
  ASSERT_NE(pool, nullptr);
  const std::map<int, std::vector<std::string>> tags = tags_by_master(*pool, 1);
  ASSERT_EQ(tags.size(), 3u);
  const std::string slow = tags.begin()->second.front();
  std::vector<ClusterRequest> batch = {{{"EVAL", kSpin, "1", slow + ":spun", "1500000"}, false}};
  for (const auto& [port, list] : tags) {
    if (list.front() != slow) batch.push_back({{"INCR", list.front() + ":n"}, false});
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<Result<RespValue>> got = pool->run_batch(batch);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_EQ(got.size(), 3u);
  ASSERT_FALSE(got[0].ok()) << value_of(got[0]);
  EXPECT_EQ(got[0].error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(got[0].error().message.find("timed out"), std::string::npos) << got[0].error().message;
  EXPECT_NE(got[0].error().message.find("not sent again"), std::string::npos)
      << got[0].error().message;
  EXPECT_EQ(value_of(got[1]), "1");
  EXPECT_EQ(value_of(got[2]), "1");
  // Answered at the timeout, not after the spin.
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  // The slow node answers again once its script ended (a new connection).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(value_of(pool->run({"GET", slow + ":spun"})), "1");
}

}  // namespace
}  // namespace quiver
