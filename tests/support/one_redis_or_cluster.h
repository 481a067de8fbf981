// The fixture the key layout v2 suites share: every test runs twice, on one real redis-server and
// on a real six-node Redis Cluster (both started once per suite), each flushed before the test; the
// test reaches the data with `raw` (routed by key on the cluster) and opens RedisStores configured
// for the deployment it runs on (`store_options`).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"

namespace quiver::testing {

enum class Deployment { kSingle, kCluster };

// "OneRedis" / "Cluster": the parameter's name in the test names.
inline std::string deployment_name(const ::testing::TestParamInfo<Deployment>& info) {
  return info.param == Deployment::kSingle ? "OneRedis" : "Cluster";
}

class OneRedisOrCluster : public ::testing::TestWithParam<Deployment> {
 protected:
  static void SetUpTestSuite() {
    single_ = new RedisServer();
    cluster_ = new RedisCluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete single_;
    cluster_ = nullptr;
    single_ = nullptr;
  }

  bool on_cluster() const { return GetParam() == Deployment::kCluster; }

  // The deployment flushed, and a connection (one redis-server) or a pool (the cluster) to it.
  void SetUp() override {
    if (on_cluster()) {
      ASSERT_TRUE(cluster_->ok()) << cluster_->error();
      ASSERT_TRUE(cluster_->flush_all());
      pool_ = new_pool();
      ASSERT_NE(pool_, nullptr);
    } else {
      ASSERT_TRUE(single_->ok()) << single_->error();
      c_.reset(single_->connect());
      ASSERT_NE(c_, nullptr);
      run_argv(c_.get(), {"FLUSHALL"});
    }
  }

  // A node pool of the cluster, seeded with its first node.
  std::unique_ptr<RedisClusterPool> new_pool() {
    RedisClusterPoolOptions po;
    ClusterNode seed;
    seed.host = "127.0.0.1";
    seed.port = cluster_->ports()[0];
    po.seeds.push_back(seed);
    Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(po);
    EXPECT_TRUE(pool.ok()) << pool.error().message;
    return pool.ok() ? std::move(*pool) : nullptr;
  }

  // One command routed by its key (the cluster) or sent to the one server.
  RespValue raw(const RedisCommand& argv) {
    if (!on_cluster()) return run_argv(c_.get(), argv);
    Result<RespValue> r = pool_->run(argv);
    return r.ok() ? std::move(*r) : RespValue::error(r.error().message);
  }

  // Every key of the namespace `ns` (both layouts' spellings), on every master.
  std::set<std::string> keys_of(const std::string& ns) {
    const RedisCommand keys = {"KEYS", "quiver:{" + ns + "*"};
    std::set<std::string> out;
    auto add = [&](const RespValue& reply) {
      for (const RespValue& k : reply.elements) out.insert(k.str);
    };
    if (!on_cluster()) {
      add(run_argv(c_.get(), keys));
      return out;
    }
    for (auto& [node, reply] : pool_->run_on_masters(keys)) {
      EXPECT_TRUE(reply.ok()) << reply.error().message;
      if (reply.ok()) add(*reply);
    }
    return out;
  }

  // A RedisStore's options for namespace `ns` writing `layout`, on this test's deployment.
  RedisStoreOptions store_options(const std::string& ns, KeyLayout layout) const {
    RedisStoreOptions o;
    o.ns = ns;
    o.key_layout = layout;
    o.redis.host = "127.0.0.1";
    if (on_cluster()) {
      o.redis.cluster = true;
      o.redis.port = cluster_->ports()[0];
      o.redis.seeds = {{"127.0.0.1", cluster_->ports()[0]}};
    } else {
      o.redis.port = single_->port();
    }
    return o;
  }

  static inline RedisServer* single_ = nullptr;
  static inline RedisCluster* cluster_ = nullptr;
  RedisConnection c_;
  std::unique_ptr<RedisClusterPool> pool_;
};

}  // namespace quiver::testing
