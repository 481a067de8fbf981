// Relayed calls and the call-agents heartbeat of RedisStore in key layout v2 (docs/design.md
// "Relayed calls on v2"), on one real redis-server and on a real six-node Redis Cluster: the
// heartbeat marks every shard's `call-agents` (and makes every shard's group); a call the edge
// queues with the shared builder (relay_call_commands_v2, as EdgeService sends it) lands on its
// connection's shard, is read by read_relayed_calls, answered by put_call_reply, and the edge's
// BLPOP on that shard's reply key gets the answer; no agent alive is AGENT_UNREACHABLE at once;
// cancel marks are read per shard; an empty read returns after about block_ms. The edge's Redis
// user (schema/redis-acl-edge.txt) may send exactly what the v2 relay sends.
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/call_relay.h"
#include "shared/json.h"
#include "shared/layout.h"
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

constexpr char kNs[] = "calls";
constexpr char kAgent[] = "agent-v2-a";

using testing::Deployment;

std::string rid(char c) { return std::string(64, c); }

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class RedisStoreV2Calls : public testing::OneRedisOrCluster {
 protected:
  void SetUp() override {
    OneRedisOrCluster::SetUp();
    if (HasFatalFailure()) return;
    const std::string at = std::to_string(wall_ms());
    ASSERT_EQ(raw({"SET", keys_.layout(), "v2:ready:" + at}).str, "OK");
    ASSERT_EQ(raw({"SET", keys_.namespace_record(), "ready:" + at}).str, "OK");
    store_ = store();
    ASSERT_NE(store_, nullptr);
    // Two connections on different shards.
    ASSERT_NE(shard(kCidA), shard(kCidB));
  }

  // The edge's round: its commands one after another on a connection of their own (the BLPOP
  // blocks it), routed by their keys on the cluster.
  std::vector<RespValue> edge_round(const std::vector<RedisCommand>& commands) {
    std::vector<RespValue> out;
    if (on_cluster()) {
      std::unique_ptr<RedisClusterPool> pool = new_pool();
      if (pool == nullptr) return out;
      for (const RedisCommand& c : commands) {
        Result<RespValue> r = pool->run(c);
        out.push_back(r.ok() ? std::move(*r) : RespValue::error(r.error().message));
      }
      return out;
    }
    RedisConnection edge(single_->connect());
    if (edge == nullptr) return out;
    for (const RedisCommand& c : commands) out.push_back(run_argv(edge.get(), c));
    return out;
  }

  std::unique_ptr<RedisStore> store() {
    RedisStoreOptions o = store_options(kNs, KeyLayout::kV2);
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  uint32_t shard(const std::string& cid) const { return *keys_.connection_shard(cid); }

  static RelayRequest request(char r, const std::string& cid) {
    RelayRequest q;
    q.rid = rid(r);
    q.connection_id = cid;
    q.member_id = "m1";
    q.method = "tools/call";
    q.params = Json::object({{"name", "echo"}, {"arguments", Json::object({{"text", "hi"}})}});
    q.at_ms = wall_ms();
    q.deadline_ms = q.at_ms + 20'000;
    return q;
  }

  // The XLEN of every shard's calls stream.
  std::vector<int64_t> stream_lengths() {
    std::vector<int64_t> out;
    for (uint32_t k = 0; k < keys_.shard_count(); ++k) {
      RespValue v = raw({"XLEN", *keys_.calls(k)});
      out.push_back(v.as_int().value_or(-1));
    }
    return out;
  }

  static constexpr char kCidA[] = "alpha";
  static constexpr char kCidB[] = "beta";
  RedisKeys keys_ = *RedisKeys::create(kNs, KeyLayout::kV2);
  std::unique_ptr<RedisStore> store_;
};

TEST_P(RedisStoreV2Calls, TheHeartbeatMarksEveryShardAndMakesEveryGroup) {
  ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 3'000).ok());
  for (uint32_t k = 0; k < keys_.shard_count(); ++k) {
    const std::string agents = *keys_.call_agents(k);
    EXPECT_EQ(raw({"GET", agents}).str, call_agents_mark(kAgent)) << agents;
    const int64_t ttl = raw({"PTTL", agents}).as_int().value_or(-1);
    EXPECT_GT(ttl, 0) << agents;
    EXPECT_LE(ttl, 3'000) << agents;
    RespValue groups = raw({"XINFO", "GROUPS", *keys_.calls(k)});
    ASSERT_TRUE(groups.is_array()) << groups.str;
    ASSERT_EQ(groups.elements.size(), 1u);
    EXPECT_NE(groups.elements[0].elements.size(), 0u);
    EXPECT_EQ(groups.elements[0].elements[1].str, kCallsConsumerGroup);
  }
  // The census keeps the namespace's tag, as on v1.
  RespValue census = raw({"ZRANGE", keys_.agents(), "0", "-1"});
  ASSERT_EQ(census.elements.size(), 1u) << census.str;
  EXPECT_EQ(census.elements[0].str, call_agents_mark(kAgent));
  // No v1 spelling of a call key.
  EXPECT_TRUE(raw({"EXISTS", "quiver:{calls}:call-agents"}).as_int() == std::optional<int64_t>(0));
  // `quiver-agent layout` reads the mark of shard 0.
  Result<StoreLayout> layout = store_->read_layout();
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  EXPECT_EQ(layout->call_agents, std::optional<std::string>(call_agents_mark(kAgent)));
  EXPECT_GT(layout->call_agents_ttl_ms, 0);
  ASSERT_EQ(layout->census.size(), 1u);
}

TEST_P(RedisStoreV2Calls, ACallQueuedAsTheEdgeQueuesItIsReadAnsweredAndPoppedOnItsShard) {
  ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 10'000).ok());
  const RelayRequest q = request('a', kCidA);
  Result<std::vector<RedisCommand>> commands = relay_call_commands_v2(keys_, q, 5'000);
  ASSERT_TRUE(commands.ok()) << commands.error().message;
  ASSERT_EQ(commands->size(), 2u);
  // One slot: the connection's shard (the XADD and the BLPOP share a node).
  Result<std::optional<uint16_t>> eval_slot = command_slot((*commands)[0]);
  Result<std::optional<uint16_t>> blpop_slot = command_slot((*commands)[1]);
  ASSERT_TRUE(eval_slot.ok() && blpop_slot.ok());
  EXPECT_EQ(**eval_slot, **blpop_slot);
  EXPECT_EQ(**eval_slot, cluster_key_slot(*keys_.calls(shard(kCidA))));

  // The edge's round in a thread of its own (its BLPOP waits for the agent).
  std::vector<RespValue> edge;
  std::thread edge_thread([&] { edge = edge_round(*commands); });
  Result<RelayedCallBatch> batch = store_->read_relayed_calls(kAgent, 1, 3'000);
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  ASSERT_EQ(batch->requests.size(), 1u);
  EXPECT_TRUE(batch->malformed_ids.empty());
  const RelayRequest& got = batch->requests[0];
  EXPECT_EQ(got.rid, q.rid);
  EXPECT_EQ(got.connection_id, q.connection_id);
  EXPECT_EQ(got.member_id, q.member_id);
  EXPECT_EQ(got.method, q.method);
  EXPECT_EQ(got.params, q.params);
  EXPECT_EQ(got.deadline_ms, q.deadline_ms);
  const Json result = Json::object(
      {{"content", Json::array({Json::object({{"type", "text"}, {"text", "hi back"}})})}});
  ASSERT_TRUE(store_
                  ->put_call_reply({got.rid, got.connection_id},
                                   relay_reply_record(RelayReply::ok(result)), kCallReplyTtlMs)
                  .ok());
  edge_thread.join();
  ASSERT_EQ(edge.size(), 2u);
  ASSERT_TRUE(edge[0].is_array()) << edge[0].str;
  EXPECT_EQ(edge[0].elements[0].str, "queued");
  Result<RelayReply> reply = parse_relay_call_replies(edge);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  ASSERT_EQ(reply->kind, RelayReply::Kind::kResult);
  EXPECT_EQ(reply->result, result);
  // The request is in its shard's stream, and only there (NOACK leaves the entry, delivered).
  std::vector<int64_t> lengths = stream_lengths();
  for (uint32_t k = 0; k < lengths.size(); ++k) {
    EXPECT_EQ(lengths[k], k == shard(kCidA) ? 1 : 0) << "shard " << k;
  }
  // Delivered once: nothing more to read.
  Result<RelayedCallBatch> again = store_->read_relayed_calls(kAgent, 1, 0);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(again->requests.empty());
}

TEST_P(RedisStoreV2Calls, AReadTakesAtMostMaxCallsFromEveryShardInTurn) {
  ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 10'000).ok());
  const std::vector<RelayRequest> queued = {request('a', kCidA), request('b', kCidB),
                                            request('c', kCidA)};
  for (const RelayRequest& q : queued) {
    Result<std::vector<RedisCommand>> commands = relay_call_commands_v2(keys_, q, 1'000);
    ASSERT_TRUE(commands.ok()) << commands.error().message;
    RespValue queued_reply = raw((*commands)[0]);  // the EVAL alone: no BLPOP waiting here
    ASSERT_TRUE(queued_reply.is_array()) << queued_reply.str;
    EXPECT_EQ(queued_reply.elements[0].str, "queued");
  }
  std::multiset<std::string> read;
  for (int i = 0; i < 3; ++i) {
    Result<RelayedCallBatch> batch = store_->read_relayed_calls(kAgent, 1, 0);
    ASSERT_TRUE(batch.ok()) << batch.error().message;
    ASSERT_EQ(batch->requests.size(), 1u) << "read " << i;
    read.insert(batch->requests[0].rid);
  }
  EXPECT_EQ(read, (std::multiset<std::string>{rid('a'), rid('b'), rid('c')}));
  Result<RelayedCallBatch> empty = store_->read_relayed_calls(kAgent, 5, 0);
  ASSERT_TRUE(empty.ok()) << empty.error().message;
  EXPECT_TRUE(empty->requests.empty());

  // Two shards holding calls and a read of up to 5: both shards' calls at once.
  for (const RelayRequest& q : {request('d', kCidA), request('e', kCidB)}) {
    Result<std::vector<RedisCommand>> commands = relay_call_commands_v2(keys_, q, 1'000);
    ASSERT_TRUE(commands.ok());
    ASSERT_TRUE(raw((*commands)[0]).is_array());
  }
  Result<RelayedCallBatch> both = store_->read_relayed_calls(kAgent, 5, 0);
  ASSERT_TRUE(both.ok()) << both.error().message;
  EXPECT_EQ(both->requests.size(), 2u);

  // An entry that is no request (a foreign writer) is dropped from its shard's stream and listed.
  const std::string stream = *keys_.calls(shard(kCidB));
  ASSERT_FALSE(raw({"XADD", stream, "*", "rid", "not-a-rid"}).is_error());
  Result<RelayedCallBatch> bad = store_->read_relayed_calls(kAgent, 1, 0);
  ASSERT_TRUE(bad.ok()) << bad.error().message;
  EXPECT_TRUE(bad->requests.empty());
  ASSERT_EQ(bad->malformed_ids.size(), 1u);
  EXPECT_EQ(raw({"XLEN", stream}).as_int(), std::optional<int64_t>(2));  // b and e, delivered
}

TEST_P(RedisStoreV2Calls, NoAgentAliveIsAgentUnreachableAtOnce) {
  const RelayRequest q = request('f', kCidB);
  Result<std::vector<RedisCommand>> commands = relay_call_commands_v2(keys_, q, 5'000);
  ASSERT_TRUE(commands.ok()) << commands.error().message;
  const auto start = std::chrono::steady_clock::now();
  std::vector<RespValue> edge = edge_round(*commands);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(edge.size(), 2u);
  ASSERT_TRUE(edge[0].is_array()) << edge[0].str;
  EXPECT_EQ(edge[0].elements[0].str, "no_agent");
  Result<RelayReply> reply = parse_relay_call_replies(edge);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply->kind, RelayReply::Kind::kFailed);
  EXPECT_EQ(reply->failure, RelayFailure::kAgentUnreachable);
  EXPECT_LT(waited, std::chrono::seconds(2)) << "the BLPOP did not wait out its 5 s";
  for (int64_t n : stream_lengths()) EXPECT_LE(n, 0) << "nothing queued";

  // An agent's mark on every shard: queued. Its mark expired: unreachable again.
  ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 150).ok());
  Result<std::vector<RedisCommand>> alive = relay_call_commands_v2(keys_, request('1', kCidB), 1);
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(raw((*alive)[0]).elements[0].str, "queued");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Result<std::vector<RedisCommand>> gone = relay_call_commands_v2(keys_, request('2', kCidA), 1);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(raw((*gone)[0]).elements[0].str, "no_agent");
}

TEST_P(RedisStoreV2Calls, CancelMarksAreReadOnEachCallsShard) {
  const int64_t now = wall_ms();
  // Marks for a (shard of alpha) and c (shard of beta), none for b (alpha's shard).
  for (const auto& [r, cid] : {std::pair<char, const char*>{'a', kCidA}, {'c', kCidB}}) {
    Result<RedisCommand> mark = relay_cancel_command_v2(keys_, rid(r), cid, now + 10'000, now);
    ASSERT_TRUE(mark.ok()) << mark.error().message;
    EXPECT_EQ((*mark)[1], *keys_.call_cancel(rid(r), shard(cid)));
    EXPECT_EQ(raw(*mark).str, "OK");
  }
  Result<std::vector<bool>> marks =
      store_->call_cancel_marks({{rid('a'), kCidA}, {rid('b'), kCidA}, {rid('c'), kCidB}});
  ASSERT_TRUE(marks.ok()) << marks.error().message;
  EXPECT_EQ(*marks, (std::vector<bool>{true, false, true}));
  // A mark is its call's shard's: the same rid on another connection's shard is not marked.
  Result<std::vector<bool>> other = store_->call_cancel_marks({{rid('a'), kCidB}});
  ASSERT_TRUE(other.ok()) << other.error().message;
  EXPECT_EQ(*other, std::vector<bool>{false});
  EXPECT_TRUE(store_->call_cancel_marks({}).ok());
  EXPECT_FALSE(store_->call_cancel_marks({{"not-a-rid", kCidA}}).ok());
}

TEST_P(RedisStoreV2Calls, AnEmptyReadReturnsAfterAboutBlockMs) {
  ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 10'000).ok());
  for (int64_t block_ms : {0, 350}) {
    const auto start = std::chrono::steady_clock::now();
    Result<RelayedCallBatch> batch = store_->read_relayed_calls(kAgent, 1, block_ms);
    const int64_t took = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    ASSERT_TRUE(batch.ok()) << batch.error().message;
    EXPECT_TRUE(batch->requests.empty());
    EXPECT_GE(took, block_ms);
    EXPECT_LT(took, block_ms + 400) << "block_ms " << block_ms;
  }
  // A call queued while a read polls is taken by that read, within a poll interval.
  std::thread edge([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Result<std::vector<RedisCommand>> commands =
        relay_call_commands_v2(keys_, request('3', kCidB), 1'000);
    ASSERT_TRUE(commands.ok());
    std::vector<RespValue> r = edge_round({(*commands)[0]});
    ASSERT_EQ(r.size(), 1u);
  });
  const auto start = std::chrono::steady_clock::now();
  Result<RelayedCallBatch> batch = store_->read_relayed_calls(kAgent, 1, 2'000);
  const auto took = std::chrono::steady_clock::now() - start;
  edge.join();
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  ASSERT_EQ(batch->requests.size(), 1u);
  EXPECT_LT(took, std::chrono::milliseconds(1'000));
}

// An idle agent's call workers take turns polling the shards (read_relayed_calls_v2): four of them
// blocked at once for a second send the probes of one poller (S XINFO GROUPS about every 100 ms,
// ~11 polls), where each polling on its own sent four times as many.
TEST_P(RedisStoreV2Calls, IdleCallWorkersTakeTurnsPolling) {
  ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 10'000).ok());
  ASSERT_TRUE(store_->read_relayed_calls(kAgent, 1, 0).ok());  // every shard's group made
  // XINFO calls so far, on the one server or summed over the masters.
  auto xinfo_calls = [&] {
    int64_t calls = 0;
    std::vector<redisContext*> nodes;
    if (on_cluster()) {
      for (int port : cluster_->master_ports()) nodes.push_back(cluster_->connect(port));
    } else {
      nodes.push_back(single_->connect());
    }
    for (redisContext* c : nodes) {
      RespValue info = run_argv(c, {"INFO", "commandstats"});
      const std::string text(info.as_string().value_or(""));
      const std::string stat = "cmdstat_xinfo|groups:calls=";
      const std::size_t at = text.find(stat);
      if (at != std::string::npos) calls += std::atoll(text.c_str() + at + stat.size());
      redisFree(c);
    }
    return calls;
  };
  const int64_t before = xinfo_calls();
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&] {
      Result<RelayedCallBatch> batch = store_->read_relayed_calls(kAgent, 1, 1'000);
      ASSERT_TRUE(batch.ok()) << batch.error().message;
      EXPECT_TRUE(batch->requests.empty());
    });
  }
  for (std::thread& w : workers) w.join();
  const int64_t polls = (xinfo_calls() - before) / static_cast<int64_t>(keys_.shard_count());
  EXPECT_GE(polls, 3);
  EXPECT_LE(polls, 20) << "each worker polled on its own";
}

// The edge's Redis user (schema/redis-acl-edge.txt) sends the v2 relay's commands: the script on
// the shard (calls, reply list, call-agents declared), the BLPOP, the cancel mark; and may not read
// the mark back nor touch the shard's other keys. On the cluster the user is made on every node
// (ACL users are per node) and the edge talks to the master serving the call's shard.
TEST_P(RedisStoreV2Calls, TheEdgesRedisUserMaySendTheV2Relay) {
  RedisConnection edge;
  if (on_cluster()) {
    for (int port : cluster_->ports()) {
      RedisConnection admin(cluster_->connect(port));
      ASSERT_NE(admin, nullptr);
      ASSERT_EQ(run_argv(admin.get(), testing::edge_acl_setuser(kNs, "edge-password")).str, "OK");
    }
    const std::string stream = *keys_.calls(shard(kCidA));
    for (int port : cluster_->master_ports()) {
      RedisConnection c(cluster_->connect(port));
      ASSERT_NE(c, nullptr);
      ASSERT_EQ(run_argv(c.get(), {"AUTH", "quiver-edge", "edge-password"}).str, "OK");
      // The master serving the shard's slot answers for it; the others redirect (MOVED).
      RespValue probe = run_argv(c.get(), {"EXISTS", *keys_.call_agents(shard(kCidA))});
      if (!probe.is_error()) {
        edge = std::move(c);
        break;
      }
      EXPECT_EQ(probe.str.rfind("MOVED", 0), 0u) << probe.str;
    }
    ASSERT_NE(edge, nullptr) << "no master serves " << stream;
  } else {
    edge = testing::connect_as_edge(*single_, kNs);
    ASSERT_NE(edge, nullptr);
  }
  for (bool alive : {false, true}) {
    if (alive) {
      ASSERT_TRUE(store_->mark_call_agent_alive(kAgent, 10'000).ok());
    }
    const RelayRequest q = request(alive ? '5' : '4', kCidA);
    Result<std::vector<RedisCommand>> commands = relay_call_commands_v2(keys_, q, 100);
    ASSERT_TRUE(commands.ok());
    RespValue queued = run_argv(edge.get(), (*commands)[0]);
    ASSERT_TRUE(queued.is_array()) << queued.str;
    EXPECT_EQ(queued.elements[0].str, alive ? "queued" : "no_agent");
    RespValue popped = run_argv(edge.get(), (*commands)[1]);
    EXPECT_FALSE(popped.is_error()) << popped.str;
    if (!alive) {
      // The agent_unreachable record the script pushed for it.
      ASSERT_TRUE(popped.is_array()) << popped.str;
      Result<RelayReply> reply = parse_relay_reply(popped.elements[1].str);
      ASSERT_TRUE(reply.ok());
      EXPECT_EQ(reply->failure, RelayFailure::kAgentUnreachable);
    }
  }
  const int64_t now = wall_ms();
  Result<RedisCommand> mark = relay_cancel_command_v2(keys_, rid('5'), kCidA, now + 1'000, now);
  ASSERT_TRUE(mark.ok());
  EXPECT_EQ(run_argv(edge.get(), *mark).str, "OK");
  auto refused = [&](const RedisCommand& argv) {
    RespValue v = run_argv(edge.get(), argv);
    EXPECT_TRUE(v.is_error() && v.str.find("NOPERM") != std::string::npos)
        << argv[0] << " " << argv[1] << ": " << v.str;
  };
  refused({"GET", (*mark)[1]});                               // the mark: write only
  refused({"SMEMBERS", *keys_.conns(shard(kCidA))});          // the shard's registry
  refused({"XRANGE", *keys_.calls(shard(kCidA)), "-", "+"});  // no stream read
  refused({"SET", *keys_.due(shard(kCidA)), "1"});            // the shard's due index
}

INSTANTIATE_TEST_SUITE_P(Deployments, RedisStoreV2Calls,
                         ::testing::Values(Deployment::kSingle, Deployment::kCluster),
                         testing::deployment_name);

}  // namespace
}  // namespace quiver
