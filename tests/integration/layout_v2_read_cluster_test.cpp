// A namespace the real agent store wrote (layout v1, one redis-server) copied to key layout v2 on
// a real six-node Redis Cluster (native-agent/store/layout_copy.h), then read there in rounds
// (shared/discovery_spread.h) through the agent's node pool: its keys land on every master, none
// holding more than twice the mean, and every member's answer is byte for byte the one-script read
// of the same data on the single node, conditional reads included.
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/layout_copy.h"
#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/discovery.h"
#include "shared/discovery_redis.h"
#include "shared/discovery_spread.h"
#include "shared/edge_snapshot.h"
#include "tests/support/discovery_reads.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/preference_rows.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

using testing::commit_listing;
using testing::listing_write;
using testing::RedisConnection;
using testing::run_argv;
using testing::stdio_record;

constexpr int64_t kNow = 1'790'000'000'000;
constexpr char kNs[] = "big";
constexpr int kConnections = 1000;
constexpr int kMembers = 60;

std::string cid_of(int i) { return "conn-" + std::to_string(i); }
Principal member_of(int m) { return *Principal::member("m" + std::to_string(m)); }

class LayoutV2Read : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    single_ = new testing::RedisServer();
    cluster_ = new testing::RedisCluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete single_;
  }

  void SetUp() override {
    ASSERT_TRUE(single_->ok()) << single_->error();
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
    c_.reset(single_->connect());
    ASSERT_NE(c_, nullptr);
    run_argv(c_.get(), {"FLUSHALL"});
    ASSERT_TRUE(cluster_->flush_all());
    RedisClusterPoolOptions po;
    ClusterNode seed;
    seed.host = "127.0.0.1";
    seed.port = cluster_->ports()[0];
    po.seeds.push_back(seed);
    Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(po);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    pool_ = std::move(*pool);

    // The agent's store writes the namespace: 1,000 connections (every tenth per-member), each
    // member granted 20 of them, a listing for every shared connection and every granted
    // (per-member connection, member).
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = single_->port();
    o.ns = kNs;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    ASSERT_TRUE(s.ok()) << s.error().message;
    store_ = std::move(*s);
    ASSERT_TRUE(store_->begin_namespace_restore(kNow).ok());
    std::vector<ConnectionRecord> records;
    for (int i = 0; i < kConnections; ++i) {
      records.push_back(stdio_record(
          cid_of(i), i % 10 == 0 ? CredentialMode::kPerMember : CredentialMode::kShared, kNow));
    }
    ASSERT_TRUE(store_->sync_connections(records).ok());
    GrantMap grants;
    for (int m = 0; m < kMembers; ++m) {
      for (int g = 0; g < 20; ++g) {
        grants[member_of(m).str().substr(7)].insert(cid_of((m * 37 + g * 50) % kConnections));
      }
    }
    ASSERT_TRUE(store_->sync_grants(grants).ok());
    for (int i = 0; i < kConnections; ++i) {
      if (i % 10 != 0)
        commit_listing(*store_, cid_of(i), Principal::shared(), listing_write(cid_of(i), kNow));
    }
    for (const auto& [id, cids] : grants) {
      for (const std::string& cid : cids) {
        if (std::stoi(cid.substr(5)) % 10 == 0) {
          commit_listing(*store_, cid, *Principal::member(id), listing_write(cid, kNow));
        }
      }
    }
    ASSERT_TRUE(store_->mark_namespace_ready(kNow).ok());
  }

  Result<LayoutCopyStats> copy() {
    LayoutCopyIo io;
    io.source = [&](const RedisCommand& c) -> Result<RespValue> { return run_argv(c_.get(), c); };
    io.dest = [&](const std::vector<RedisCommand>& cs) {
      std::vector<ClusterRequest> rs;
      for (const RedisCommand& c : cs) rs.push_back({c, false});
      return pool_->run_batch(rs);
    };
    Result<LayoutCopyStats> stats = copy_namespace_to_v2(v1_, v2_, io);
    if (!stats.ok()) return stats;
    // The migration's switch once the copy is complete: readers follow the record.
    Result<RespValue> ready = pool_->run({"SET", v2_.layout(), "v2:ready:" + std::to_string(kNow)});
    if (!ready.ok()) return ready.error();
    return stats;
  }

  DiscoverySnapshot v1_read(const Principal& who) {
    Result<DiscoverySnapshot> s =
        decode_discovery_reply(run_argv(c_.get(), *discovery_read_command(v1_, who)), who);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (!s.ok()) return DiscoverySnapshot(who);
    testing::fill_bodies(s.value(), [&](const std::vector<std::string>& d) {
      return run_argv(c_.get(), *body_read_command(v1_, d));
    });
    return std::move(*s);
  }

  RespValue v2_bodies(const std::vector<std::string>& digests) {
    std::vector<ClusterRequest> rs;
    for (const std::string& d : digests) rs.push_back({{"GET", *v2_.body(d)}, true});
    std::vector<RespValue> out;
    for (Result<RespValue>& r : pool_->run_batch(rs)) {
      out.push_back(r.ok() ? std::move(*r) : RespValue::error(r.error().message));
    }
    return RespValue::array(std::move(out));
  }

  Result<DiscoverySnapshot> v2_read(const Principal& who) {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(v2_, who);
    if (!read.ok()) return read.error();
    while (!read->done()) {
      std::vector<ClusterRequest> rs;
      for (const RedisCommand& c : read->commands()) rs.push_back({c, true});
      std::vector<RespValue> replies;
      for (Result<RespValue>& r : pool_->run_batch(rs)) {
        if (!r.ok()) return r.error();
        replies.push_back(std::move(*r));
      }
      Status s = read->feed(replies);
      if (!s.ok()) return s.error();
    }
    DiscoverySnapshot snapshot = read->take_snapshot();
    // Bodies: one GET per body (each its own slot on v2), through the pool.
    testing::fill_bodies(snapshot, [&](const std::vector<std::string>& d) { return v2_bodies(d); });
    return snapshot;
  }

  static std::string render(const DiscoverySnapshot& s, int64_t now) {
    return testing::rendered_answer(s, now);
  }

  static inline testing::RedisServer* single_ = nullptr;
  static inline testing::RedisCluster* cluster_ = nullptr;
  RedisConnection c_;
  std::unique_ptr<RedisClusterPool> pool_;
  std::unique_ptr<RedisStore> store_;
  RedisKeys v1_ = *RedisKeys::create(kNs);
  RedisKeys v2_ = *RedisKeys::create(kNs, KeyLayout::kV2);
};

TEST_F(LayoutV2Read, TheCopySpreadsTheNamespaceOverEveryMaster) {
  Result<LayoutCopyStats> stats = copy();
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  EXPECT_EQ(stats->grants_converted, kMembers);
  EXPECT_GT(stats->members_split, kConnections) << "conns and due split into shards";
  EXPECT_EQ(stats->not_copied.count("foreign"), 0u);
  int64_t total = 0;
  std::vector<int64_t> per_master;
  for (auto& [node, reply] : pool_->run_on_masters({"DBSIZE"})) {
    ASSERT_TRUE(reply.ok()) << reply.error().message;
    per_master.push_back(reply->integer);
    total += reply->integer;
  }
  ASSERT_EQ(per_master.size(), 3u);
  const double mean = static_cast<double>(total) / per_master.size();
  for (int64_t n : per_master) {
    EXPECT_GT(n, 0) << "every master holds keys";
    EXPECT_LE(n, 2 * mean) << "none more than twice the mean";
  }
  std::cout << "keys per master:";
  for (int64_t n : per_master) std::cout << " " << n;
  std::cout << " (mean " << mean << ")\n";
}

TEST_F(LayoutV2Read, EveryMembersAnswerIsTheSingleNodeOneByteForByte) {
  ASSERT_TRUE(copy().ok());
  for (int m = 0; m < kMembers; m += 7) {
    SCOPED_TRACE(member_of(m).str());
    DiscoverySnapshot v1 = v1_read(member_of(m));
    Result<DiscoverySnapshot> v2 = v2_read(member_of(m));
    ASSERT_TRUE(v2.ok()) << v2.error().message;
    ASSERT_EQ(v2->connections.size(), v1.connections.size());
    for (int64_t now : {kNow, kNow + 2'000'000}) {
      EXPECT_EQ(render(*v2, now), render(v1, now));
    }
    EXPECT_EQ(v2->connection_versions, v1.connection_versions);
    EXPECT_EQ(v2->member_version, v1.member_version);

    // Nothing changed: the conditional read (single-key commands, one slot each) says so.
    Result<std::vector<RedisCommand>> check = spread_conditional_commands(v2_, *v2, {});
    ASSERT_TRUE(check.ok()) << check.error().message;
    std::vector<ClusterRequest> rs;
    for (const RedisCommand& c : *check) rs.push_back({c, true});
    std::vector<RespValue> replies;
    for (Result<RespValue>& r : pool_->run_batch(rs)) {
      ASSERT_TRUE(r.ok()) << r.error().message;
      replies.push_back(std::move(*r));
    }
    Result<bool> unchanged = decode_spread_conditional(replies, *v2, {});
    ASSERT_TRUE(unchanged.ok()) << unchanged.error().message;
    EXPECT_TRUE(*unchanged);
  }
}

// The agent's own store on the spread namespace: RedisStore::read_discovery follows the layout
// record into the rounds, each round's commands routed by key through its node pool.
TEST_F(LayoutV2Read, TheAgentsStoreReadsTheSpreadNamespaceInRounds) {
  ASSERT_TRUE(copy().ok());
  auto cluster_store = [&](KeyLayout layout) {
    RedisStoreOptions o;
    o.redis.cluster = true;
    o.redis.host = "127.0.0.1";
    o.redis.port = cluster_->ports()[0];
    o.redis.seeds = {{"127.0.0.1", cluster_->ports()[0]}};
    o.ns = kNs;
    o.key_layout = layout;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return std::move(*s);
  };

  // A store that writes v1, before any store check: the one-script read finds the record naming
  // v2 and reads again in rounds; later reads start there.
  std::unique_ptr<RedisStore> v1_writer = cluster_store(KeyLayout::kV1);
  for (int m = 0; m < kMembers; m += 11) {
    SCOPED_TRACE(member_of(m).str());
    Result<DiscoverySnapshot> got = v1_writer->read_discovery(member_of(m), {});
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(render(*got, kNow), render(v1_read(member_of(m)), kNow));
    EXPECT_EQ(got->layout_record, "v2:ready:" + std::to_string(kNow));
  }
  // It cannot write there: its store check says so, and its writes are refused.
  Result<NamespaceRecord> check = v1_writer->read_namespace();
  ASSERT_FALSE(check.ok());
  EXPECT_TRUE(is_unknown_layout_error(check.error())) << check.error().message;
  Result<ConnectionSync> sync =
      v1_writer->sync_connections({stdio_record("new", CredentialMode::kShared, kNow)});
  ASSERT_FALSE(sync.ok());
  EXPECT_EQ(sync.error().code, ErrorCode::kStoreUnavailable) << sync.error().message;

  // A store that writes v2 checks the namespace as its own and reads in rounds from the start,
  // `only` and paging included.
  std::unique_ptr<RedisStore> v2_writer = cluster_store(KeyLayout::kV2);
  Result<NamespaceRecord> ready = v2_writer->read_namespace();
  ASSERT_TRUE(ready.ok()) << ready.error().message;
  EXPECT_EQ(ready->state, NamespaceState::kReady);
  for (int m = 1; m < kMembers; m += 13) {
    SCOPED_TRACE(member_of(m).str());
    DiscoverySnapshot want = v1_read(member_of(m));
    Result<DiscoverySnapshot> got = v2_writer->read_discovery(member_of(m), {});
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(render(*got, kNow + 2'000'000), render(want, kNow + 2'000'000));
    SnapshotQuery page;
    page.limit = 5;
    page.after = want.connections[2].id;
    Result<DiscoverySnapshot> paged = v2_writer->read_discovery(member_of(m), page);
    ASSERT_TRUE(paged.ok()) << paged.error().message;
    ASSERT_EQ(paged->connections.size(), 5u);
    EXPECT_EQ(paged->connections[0].id, want.connections[3].id);
    SnapshotQuery only;
    only.only = want.connections[7].id;
    Result<DiscoverySnapshot> one = v2_writer->read_discovery(member_of(m), only);
    ASSERT_TRUE(one.ok()) << one.error().message;
    ASSERT_EQ(one->connections.size(), 1u);
    EXPECT_EQ(one->connections[0].id, want.connections[7].id);
  }
  EXPECT_GT(v2_writer->body_cache_counts().entries, 0u) << "bodies fetched per key, then kept";

  // Set back to v1 (a migration rolled back): the reads in rounds see it and read the v1 keys
  // (none on this cluster: the namespace record is there, the grants are not, so no entries).
  ASSERT_TRUE(pool_->run({"DEL", v2_.layout()}).ok());
  Result<DiscoverySnapshot> back = v2_writer->read_discovery(member_of(1), {});
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->layout_record, "") << "read by the one-script read";
  EXPECT_TRUE(back->connections.empty());
}

TEST_F(LayoutV2Read, TheCopyRunsAgainToTheSameResult) {
  ASSERT_TRUE(copy().ok());
  auto sizes = [&] {
    std::vector<int64_t> out;
    for (auto& [node, reply] : pool_->run_on_masters({"DBSIZE"})) out.push_back(reply->integer);
    return out;
  };
  const std::vector<int64_t> once = sizes();
  Result<LayoutCopyStats> again = copy();
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(sizes(), once) << "idempotent: a copy cut short is run again from the start";
  Result<DiscoverySnapshot> v2 = v2_read(member_of(3));
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(render(*v2, kNow), render(v1_read(member_of(3)), kNow));
}

}  // namespace
}  // namespace quiver
