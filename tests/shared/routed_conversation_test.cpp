#include "shared/routed_conversation.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/redis_keys.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/resp_values.h

constexpr int64_t kNow = 1'800'000'000'000;
constexpr char kKid[] = "k1";
constexpr char kSecret[] = "routed-conversation-test-secret-0123456789";
const std::string kRandom(48, '\x33');
const std::string kAuthOk = "+OK\r\n";

// One CLUSTER SHARDS node as Redis 7 sends it (RESP2).
RespValue node(const std::string& id, int port, const std::string& role) {
  return A({S("id"), S(id), S("port"), I(port), S("ip"), S("127.0.0.1"), S("endpoint"),
            S("127.0.0.1"), S("role"), S(role), S("replication-offset"), I(1), S("health"),
            S("online")});
}
RespValue shard(int first, int last, std::vector<RespValue> nodes) {
  return A({S("slots"), A({I(first), I(last)}), S("nodes"), A(std::move(nodes))});
}

uint16_t ns_slot() { return cluster_key_slot(RedisKeys::create("default")->prefix()); }

// Three masters (7000..7002) and their replicas (7003..7005); the namespace's slot is served by
// the master on `owner` (never the seed, 7000, unless asked), every other slot by 7000.
RespValue shards(int owner = 7001) {
  const int s = ns_slot();
  const int replica = owner == 7001 ? 7004 : owner == 7002 ? 7005 : 7003;
  std::vector<RespValue> out;
  if (s > 0)
    out.push_back(shard(0, s - 1, {node("a", 7000, "master"), node("d", 7003, "replica")}));
  out.push_back(shard(s, s, {node("o", owner, "master"), node("r", replica, "replica")}));
  if (s < 16383) out.push_back(shard(s + 1, 16383, {node("c", 7002, "master")}));
  return A(std::move(out));
}

ClusterRouterSettings seeded(bool replica_reads = false) {
  ClusterRouterSettings c;
  ClusterNode seed;
  seed.host = "127.0.0.1";
  seed.port = 7000;
  c.seeds.push_back(seed);
  c.replica_reads = replica_reads;
  return c;
}

const RedisCredentials kCreds{"quiver-edge", "pw"};
const RedisCommand kGet{"GET", "quiver:{default}:namespace"};

// ---- the conversation alone -------------------------------------------------------------------

TEST(RoutedConversation, OnOneRedisTheBytesAreRedisConversations) {
  RoutedConversation routed({}, kCreds);
  RedisConversation plain({}, kCreds);
  RoutedWrite w = routed.begin({kGet});
  RedisRound r = plain.begin({kGet});
  EXPECT_EQ(w.bytes, r.bytes);
  EXPECT_TRUE(w.new_connection);
  EXPECT_FALSE(w.node.has_value());
  EXPECT_EQ(w.delay_ms, 0);
  ASSERT_EQ(routed.feed(kAuthOk + "$2\r\nv1\r\n"), RedisTurn::kDone);
  EXPECT_EQ(routed.take_replies(), std::vector<RespValue>{S("v1")});
}

TEST(RoutedConversation, LearnsTheMapFromASeedThenFollowsMoved) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  RoutedWrite w = c.begin({kGet});
  ASSERT_TRUE(w.node.has_value());
  EXPECT_EQ(w.node->port, 7000);  // the seed is asked for the map
  EXPECT_EQ(w.bytes,
            encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command({"CLUSTER", "SHARDS"}));
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(shards())), RedisTurn::kWrite);
  EXPECT_TRUE(router.have_map());
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7001);  // the slot's master, on a connection of its own
  EXPECT_TRUE(w.new_connection);
  EXPECT_EQ(w.bytes, encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command(kGet));

  // A failover moved the slot: the map learns it, the command goes to the new master.
  const std::string moved = "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:7004\r\n";
  ASSERT_EQ(c.feed(kAuthOk + moved), RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7004);
  EXPECT_EQ(router.stats().moved, 1u);
  ASSERT_EQ(c.feed(kAuthOk + "$2\r\nv1\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), std::vector<RespValue>{S("v1")});

  // The next round goes straight to the new master, on the connection already open.
  w = c.begin({kGet});
  EXPECT_EQ(w.node->port, 7004);
  EXPECT_FALSE(w.new_connection);
  EXPECT_EQ(w.bytes, encode_command(kGet));
}

TEST(RoutedConversation, AskSendsAskingAndEachCommandToTheImportingNodeOnce) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(shards())), RedisTurn::kWrite);
  c.take_write();
  RedisCommand other{"GET", "quiver:{default}:other"};
  RoutedWrite w = c.begin({other, kGet});
  const std::string ask = "-ASK " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n";
  // The first key moved, the second did not (yet).
  ASSERT_EQ(c.feed(kAuthOk + ask + "$2\r\nv1\r\n"), RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7002);
  EXPECT_EQ(w.delay_ms, 0);
  EXPECT_EQ(w.bytes, encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command({"ASKING"}) +
                         encode_command(other));
  ASSERT_EQ(c.feed(kAuthOk + kAuthOk + "$2\r\nv0\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S("v0"), S("v1")}));
  EXPECT_EQ(router.stats().ask, 1u);
  // The map did not change: the next round goes to the slot's master again.
  w = c.begin({kGet});
  EXPECT_EQ(w.node->port, 7001);
}

// Key layout v1's scripts read keys they do not declare: at the importing node one that has not
// moved yet would read as absent (a wrong answer, not an error). A round holding a script waits
// the migration out at the source instead, and follows the MOVED that ends it.
TEST(RoutedConversation, ARoundWithAScriptWaitsOutAnAskAndFollowsTheMovedThatEndsIt) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(shards())), RedisTurn::kWrite);
  c.take_write();
  RedisCommand script{"EVAL", "return 1", "1", "quiver:{default}:namespace"};
  RoutedWrite w = c.begin({script, kGet});
  const std::string ask = "-ASK " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n";
  ASSERT_EQ(c.feed(kAuthOk + ask + "$2\r\nv1\r\n"), RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7001);  // the source again, after a backoff, no ASKING anywhere
  EXPECT_GT(w.delay_ms, 0);
  EXPECT_EQ(w.bytes.find("ASKING"), std::string::npos);
  EXPECT_NE(w.bytes.find("EVAL"), std::string::npos);
  EXPECT_EQ(router.stats().ask, 1u);
  // Still migrating: waits again, longer.
  const int64_t first_delay = w.delay_ms;
  ASSERT_EQ(c.feed(ask), RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7001);
  EXPECT_GT(w.delay_ms, first_delay);
  // The slot moved: MOVED, and the script goes to its new master.
  const std::string moved = "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n";
  ASSERT_EQ(c.feed(moved), RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7002);
  EXPECT_EQ(w.bytes.find("ASKING"), std::string::npos);
  ASSERT_EQ(c.feed(kAuthOk + ":1\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{I(1), S("v1")}));
  EXPECT_EQ(router.stats().moved, 1u);
}

// A migration that does not end within the budget is a store failure, never an answer read at
// the importing node.
TEST(RoutedConversation, AnAskThatOutlastsTheBudgetIsAStoreFailure) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(shards())), RedisTurn::kWrite);
  c.take_write();
  RedisCommand script{"EVALSHA", "0123456789012345678901234567890123456789", "1",
                      "quiver:{default}:namespace"};
  c.begin({script});
  const std::string ask = "-ASK " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n";
  RedisTurn turn = c.feed(kAuthOk + ask);
  int rounds = 1;
  while (turn == RedisTurn::kWrite && rounds < 50) {
    RoutedWrite again = c.take_write();
    EXPECT_EQ(again.node->port, 7001);
    EXPECT_EQ(again.bytes.find("ASKING"), std::string::npos);
    turn = c.feed(ask);
    ++rounds;
  }
  ASSERT_EQ(turn, RedisTurn::kFailed);
  EXPECT_LT(rounds, 50);
  EXPECT_EQ(c.error().code, ErrorCode::kStoreUnavailable) << c.error().message;
}

TEST(RoutedConversation, TryAgainBacksOffAndClusterDownRefreshesTheMap) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  c.feed(kAuthOk + encode_reply(shards()));
  c.take_write();
  ASSERT_EQ(c.feed(kAuthOk + "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"),
            RedisTurn::kWrite);
  RoutedWrite w = c.take_write();
  EXPECT_EQ(w.node->port, 7001);
  EXPECT_GT(w.delay_ms, 0);
  ASSERT_EQ(c.feed("-CLUSTERDOWN The cluster is down\r\n"), RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_GT(w.delay_ms, 0);
  EXPECT_EQ(w.bytes.find("SHARDS") != std::string::npos, true);  // the map again
  ASSERT_EQ(c.feed((w.new_connection ? kAuthOk : "") + encode_reply(shards(7002))),
            RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7002);
  ASSERT_EQ(c.feed((w.new_connection ? kAuthOk : "") + "$2\r\nv2\r\n"), RedisTurn::kDone);
  EXPECT_EQ(router.stats().refreshes, 2u);
}

TEST(RoutedConversation, AServerWithoutClusterShardsIsAskedForClusterSlots) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  ASSERT_EQ(c.feed(kAuthOk + "-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n"),
            RedisTurn::kWrite);
  RoutedWrite w = c.take_write();
  EXPECT_NE(w.bytes.find("SLOTS"), std::string::npos);
  RespValue slots = A({A({I(0), I(16383), A({S("127.0.0.1"), I(7002), S("m")})})});
  ASSERT_EQ(c.feed((w.new_connection ? kAuthOk : "") + encode_reply(slots)), RedisTurn::kWrite);
  EXPECT_EQ(c.take_write().node->port, 7002);
}

TEST(RoutedConversation, RedirectsBeyondTheBudgetAreAStoreFailureNeverAnAnswer) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  c.feed(kAuthOk + encode_reply(shards()));
  RedisTurn turn = RedisTurn::kWrite;
  int port = 7001;
  for (int i = 0; i < 20 && turn == RedisTurn::kWrite; ++i) {
    RoutedWrite w = c.take_write();
    // A new node each time: a connection of its own, AUTH first.
    const std::string moved =
        "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:" + std::to_string(++port) + "\r\n";
    turn = c.feed((w.new_connection ? kAuthOk : "") + moved);
  }
  ASSERT_EQ(turn, RedisTurn::kFailed);
  EXPECT_EQ(c.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(c.error().message.find("MOVED"), std::string::npos) << c.error().message;
  EXPECT_FALSE(c.in_round());
}

TEST(RoutedConversation, NeverMoreThanSixConnectionsPerRequest) {
  ClusterRouterSettings s = seeded();
  s.retry.max_redirects = 20;
  s.retry.max_attempts = 30;
  ClusterRouter router(s, ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  c.feed(kAuthOk + encode_reply(shards()));
  std::vector<std::string> open = {"127.0.0.1:7000"};
  int port = 7001;
  for (int i = 0; i < 9; ++i) {
    RoutedWrite w = c.take_write();
    for (const std::string& a : w.close) open.erase(std::find(open.begin(), open.end(), a));
    if (w.new_connection) open.push_back(w.node->address());
    EXPECT_LE(open.size(), kMaxNodesPerRequest);
    const std::string moved =
        "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:" + std::to_string(++port) + "\r\n";
    ASSERT_EQ(c.feed((w.new_connection ? kAuthOk : "") + moved), RedisTurn::kWrite);
  }
  EXPECT_EQ(open.size(), kMaxNodesPerRequest);
}

TEST(RoutedConversation, ReplicaReadsOpenWithAuthAndReadonlyInOneWrite) {
  ClusterRouter router(seeded(/*replica_reads=*/true), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet}, ScriptForm::kBySha, /*keep_bytes=*/true, RoundAccess::kReplicaRead);
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(shards())), RedisTurn::kWrite);
  RoutedWrite w = c.take_write();
  EXPECT_EQ(w.node->port, 7004);  // the slot's replica
  EXPECT_EQ(w.bytes, encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command({"READONLY"}) +
                         encode_command(kGet));
  ASSERT_EQ(c.feed(kAuthOk + kAuthOk + "$2\r\nv1\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), std::vector<RespValue>{S("v1")});
  EXPECT_EQ(c.reply_bytes(), "$2\r\nv1\r\n");  // as L1 keeps it: the command's reply alone
  EXPECT_TRUE(c.sent_to_replica());
  // A write never goes to a replica.
  w = c.begin({{"SET", "quiver:{default}:epoch", "1"}});
  EXPECT_EQ(w.node->port, 7001);
  EXPECT_FALSE(c.sent_to_replica());
}

// A read whose answer is rendered from what it reads (RoundAccess::kRead) goes to the master even
// with replica reads on: a replica answers a key its master's migration moved away as absent, not
// ASK. It is still sent again after a failure, as any read.
TEST(RoutedConversation, AReadThatIsNotAReplicaReadGoesToTheMasterAndIsSentAgainAfterAFailure) {
  ClusterRouter router(seeded(/*replica_reads=*/true), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet}, ScriptForm::kBySha, /*keep_bytes=*/false, RoundAccess::kRead);
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(shards())), RedisTurn::kWrite);
  RoutedWrite w = c.take_write();
  EXPECT_EQ(w.node->port, 7001);  // the slot's master
  EXPECT_EQ(w.bytes.find("READONLY"), std::string::npos);
  EXPECT_FALSE(c.sent_to_replica());
  // Reset after the write: it changed nothing, so it goes again (after the map is asked again).
  ASSERT_EQ(c.connection_failed("read: connection reset"), RedisTurn::kWrite);
}

TEST(RoutedConversation, AFailedConnectIsRetriedAfterARefreshAWriteThatMayHaveRunIsNot) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet});
  c.feed(kAuthOk + encode_reply(shards()));
  c.take_write();
  // The master is down (SIGKILLed): nothing was written; the map is asked for again.
  ASSERT_EQ(c.connection_failed("connect: Connection refused"), RedisTurn::kWrite);
  RoutedWrite w = c.take_write();
  EXPECT_GT(w.delay_ms, 0);
  EXPECT_NE(w.bytes.find("SHARDS"), std::string::npos);
  ASSERT_EQ(c.feed((w.new_connection ? kAuthOk : "") + encode_reply(shards(7004))),
            RedisTurn::kWrite);
  w = c.take_write();
  EXPECT_EQ(w.node->port, 7004);
  // Reset after the write: it may have run; not sent again.
  ASSERT_EQ(c.connection_failed("read: connection reset"), RedisTurn::kFailed);
  EXPECT_NE(c.error().message.find("not sent again"), std::string::npos) << c.error().message;
}

// A node that accepts TCP but refuses the TLS handshake (the host's words say so: worker.mjs
// probes with plain TCP) fails the same way at the next try and at every node sharing its CA: the
// round ends at once, a store failure naming the handshake, with no backoff and no retry. A
// refused connection under the same round is still retried (the test above).
TEST(RoutedConversation, ATlsHandshakeFailureEndsTheRoundAtOnce) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  RoutedWrite w = c.begin({kGet}, ScriptForm::kBySha, false, RoundAccess::kReplicaRead);
  ASSERT_TRUE(w.node.has_value());
  const uint64_t retries = router.stats().retries;
  ASSERT_EQ(c.connection_failed("connect: TLS handshake failed with 127.0.0.1:7001 (it accepts "
                                "TCP): proxy request failed, cannot connect to the specified "
                                "address"),
            RedisTurn::kFailed);
  EXPECT_FALSE(c.in_round());
  EXPECT_EQ(c.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(c.error().message.find("not retried"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("TLS handshake failed with 127.0.0.1:7001"), std::string::npos)
      << c.error().message;
  EXPECT_EQ(router.stats().retries, retries);
  EXPECT_TRUE(c.take_write().bytes.empty());
}

TEST(RoutedConversation, ATimeoutFailsAtOnceAndTheNextRoundAsksForTheMapFirst) {
  ClusterRouter router(seeded(), ns_slot());
  RoutedConversation c({}, kCreds, &router);
  c.begin({kGet}, ScriptForm::kBySha, false, RoundAccess::kReplicaRead);
  c.feed(kAuthOk + encode_reply(shards()));
  c.take_write();
  ASSERT_EQ(c.connection_failed("read timed out after 2000 ms"), RedisTurn::kFailed);
  EXPECT_EQ(c.error().code, ErrorCode::kTimeout);  // the edge's fail-fast window opens
  RoutedConversation next({}, kCreds, &router);
  RoutedWrite w = next.begin({kGet});
  EXPECT_NE(w.bytes.find("SHARDS"), std::string::npos);
}

// ---- the edge --------------------------------------------------------------------------------

std::unique_ptr<EdgeService> edge(std::vector<std::pair<std::string, std::string>> extra) {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kSecret}}).dump();
  env["REDIS_PASSWORD"] = "pw";
  env["REDIS_USERNAME"] = "quiver-edge";
  for (auto& [k, v] : extra) env[k] = v;
  Result<EdgeSettings> settings = edge_settings_from_env(env.dump());
  EXPECT_TRUE(settings.ok()) << settings.error().message;
  return std::make_unique<EdgeService>(std::move(settings));
}

HttpRequest manifests_request() {
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/manifests";
  Result<std::string> token = mint_caller_token("alice", kSecret, kKid, kNow, 3'600'000);
  r.headers.emplace_back("authorization", "Bearer " + *token);
  return r;
}

// A namespace where alice is granted nothing: a valid, empty discovery answer.
RespValue empty_discovery() {
  // Versions: the namespace record and the member's (no entry, no connection version).
  return A({S("quiver.discovery.v2"), S("member/alice"), I(1), I(1), S(""), I(0), A({}),
            A({S("ready:1"), S("1")})});
}

TEST(EdgeCluster, SettingsNameTheClusterAndRefuseWhatCannotBeOne) {
  auto parse = [](std::vector<std::pair<std::string, std::string>> extra) {
    Json env = Json::object();
    env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kSecret}}).dump();
    for (auto& [k, v] : extra) env[k] = v;
    return edge_settings_from_env(env.dump());
  };
  Result<EdgeSettings> one = parse({});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->cluster.has_value());  // the default: one Redis
  Result<EdgeSettings> flag = parse({{"REDIS_CLUSTER", "1"},
                                     {"REDIS_HOST", "10.0.0.5"},
                                     {"REDIS_PORT", "7000"},
                                     {"QUIVER_REDIS_REPLICA_READS", "1"}});
  ASSERT_TRUE(flag.ok()) << flag.error().message;
  ASSERT_EQ(flag->cluster->seeds.size(), 1u);
  EXPECT_EQ(flag->cluster->seeds[0].address(), "10.0.0.5:7000");
  EXPECT_TRUE(flag->cluster->replica_reads);
  Result<EdgeSettings> list = parse({{"REDIS_CLUSTER", "10.0.0.1:7000, [::1]:7001"}});
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->cluster->seeds.size(), 2u);
  EXPECT_EQ(list->cluster->seeds[1].address(), "[::1]:7001");
  EXPECT_FALSE(list->cluster->replica_reads);
  for (auto bad : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"REDIS_CLUSTER", "10.0.0.1"}},
           {{"REDIS_CLUSTER", "10.0.0.1:70000"}},
           {{"REDIS_CLUSTER", "maybe:x"}},
           {{"QUIVER_REDIS_REPLICA_READS", "1"}},
           {{"REDIS_CLUSTER", "1"}, {"QUIVER_REDIS_REPLICA_READS", "perhaps"}}}) {
    Result<EdgeSettings> s = parse(bad);
    ASSERT_FALSE(s.ok()) << bad[0].first << "=" << bad[0].second;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  }
}

TEST(EdgeCluster, AReadSeededAtANodeThatDoesNotOwnTheSlotFollowsMovedToTheSameAnswer) {
  // The same request on one Redis, for the answer to compare with.
  auto single = edge({});
  EdgeStep s = single->begin(manifests_request(), kNow, kRandom);
  EXPECT_TRUE(s.redis_host.empty());
  s = single->feed(s.handle, kAuthOk + encode_reply(empty_discovery()), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  const HttpResponse expected = s.response;
  const std::string single_wire = edge_step_to_wire(s);

  auto clustered = edge({{"REDIS_CLUSTER", "1"},
                         {"REDIS_HOST", "127.0.0.1"},
                         {"REDIS_PORT", "7000"},
                         {"QUIVER_L1_TTL_MS", "1"}});
  s = clustered->begin(manifests_request(), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_port, 7000);
  EXPECT_NE(edge_step_to_wire(s).find("\"node\":{\"host\":\"127.0.0.1\",\"port\":7000}"),
            std::string::npos);
  EXPECT_EQ(single_wire.find("\"node\""), std::string::npos);  // one Redis: no node named
  s = clustered->feed(s.handle, kAuthOk + encode_reply(shards()), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_port, 7001);
  EXPECT_TRUE(s.new_connection);
  // The slot moved to 7002 since: MOVED, followed.
  s = clustered->feed(
      s.handle, kAuthOk + "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_port, 7002);
  s = clustered->feed(s.handle, kAuthOk + encode_reply(empty_discovery()), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, expected.status);
  EXPECT_EQ(s.response.body, expected.body);
  clustered->end(s.handle);
  ASSERT_NE(clustered->cluster(), nullptr);
  EXPECT_EQ(clustered->cluster()->stats().moved, 1u);

  // The isolate keeps the map: the next request goes to 7002 at once.
  s = clustered->begin(manifests_request(), kNow + 10, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_port, 7002);
  EXPECT_TRUE(s.new_connection);  // a socket belongs to its request
}

// The read script reads keys it does not declare (key layout v1): an ASK is waited out at the
// source, never followed to the importing node, and the MOVED that ends the migration is.
TEST(EdgeCluster, TheReadScriptWaitsOutAnAskAndFollowsTheMovedThatEndsIt) {
  auto clustered = edge({{"REDIS_CLUSTER", "127.0.0.1:7000"}, {"QUIVER_L1_TTL_MS", "60000"}});
  EdgeStep s = clustered->begin(manifests_request(), kNow, kRandom);
  s = clustered->feed(s.handle, kAuthOk + encode_reply(shards()), kNow);
  ASSERT_EQ(s.redis_port, 7001);
  EXPECT_NE(s.redis_bytes.find("EVALSHA_RO"), std::string::npos);
  s = clustered->feed(s.handle,
                      kAuthOk + "-ASK " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_port, 7001);
  EXPECT_GT(s.redis_delay_ms, 0);
  EXPECT_EQ(s.redis_bytes.find("ASKING"), std::string::npos);
  s = clustered->feed(s.handle, "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:7002\r\n",
                      kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_port, 7002);
  EXPECT_EQ(s.redis_bytes.find("ASKING"), std::string::npos);
  s = clustered->feed(s.handle, kAuthOk + encode_reply(empty_discovery()), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200) << s.response.body << " log: " << s.log;
  clustered->end(s.handle);
  EXPECT_EQ(clustered->cluster()->stats().ask, 1u);
  EXPECT_EQ(clustered->cluster()->stats().moved, 1u);
  // The snapshot L1 kept is the script's reply alone (AUTH's +OK stripped): a later request for
  // another view of it is answered from L1, without Redis.
  HttpRequest again = manifests_request();
  again.query = "view=mcp";
  s = clustered->begin(again, kNow + 1, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.redis_bytes;
  EXPECT_EQ(s.response.status, 200);
}

TEST(EdgeCluster, ExhaustedRedirectsAre503StoreUnavailableNeverEmptyData) {
  auto clustered = edge({{"REDIS_CLUSTER", "127.0.0.1:7000"}});
  EdgeStep s = clustered->begin(manifests_request(), kNow, kRandom);
  s = clustered->feed(s.handle, kAuthOk + encode_reply(shards()), kNow);
  int port = 7001;
  for (int i = 0; i < 20 && s.action == EdgeAction::kRedis; ++i) {
    const std::string moved =
        "-MOVED " + std::to_string(ns_slot()) + " 127.0.0.1:" + std::to_string(++port) + "\r\n";
    s = clustered->feed(s.handle, (s.new_connection ? kAuthOk : "") + moved, kNow);
  }
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  Result<Json> body = parse_json(s.response.body);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["error"]["code"], "STORE_UNAVAILABLE");
}

TEST(EdgeCluster, HealthzSaysWhatTheClusterRoutingDid) {
  auto clustered = edge({{"REDIS_CLUSTER", "1"}, {"REDIS_PORT", "7000"}});
  HttpRequest h;
  h.method = "GET";
  h.path = "/healthz";
  EdgeStep s = clustered->begin(h, kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  Result<Json> body = parse_json(s.response.body);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["cluster"]["slot"], ns_slot());
  EXPECT_EQ((*body)["cluster"]["map_known"], false);
  EXPECT_EQ((*body)["cluster"]["moved"], 0);
}

}  // namespace
}  // namespace quiver
