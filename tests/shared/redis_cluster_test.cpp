#include "shared/redis_cluster.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

using Action = ClusterStep::Action;
using Kind = ClusterRedirect::Kind;

RespValue B(std::string s) { return RespValue::bulk_string(std::move(s)); }
RespValue I(int64_t i) { return RespValue::integer_value(i); }
RespValue E(std::string s) { return RespValue::error(std::move(s)); }
RespValue A(std::vector<RespValue> v) { return RespValue::array(std::move(v)); }

// One CLUSTER SHARDS node as Redis 7.0 sends it in RESP2.
RespValue shards_node(const std::string& id, const std::string& ip, int port,
                      const std::string& role, const std::string& health = "online") {
  return A({B("id"), B(id), B("port"), I(port), B("ip"), B(ip), B("endpoint"), B(ip), B("role"),
            B(role), B("replication-offset"), I(1234), B("health"), B(health)});
}

RespValue shard(std::vector<RespValue> slots, std::vector<RespValue> nodes) {
  return A({B("slots"), A(std::move(slots)), B("nodes"), A(std::move(nodes))});
}

// Three masters with one replica each, the layout `redis-cli --cluster create` makes.
RespValue three_shards() {
  return A({
      shard({I(0), I(5460)}, {shards_node("a", "127.0.0.1", 7000, "master"),
                              shards_node("d", "127.0.0.1", 7003, "replica")}),
      shard({I(5461), I(10922)}, {shards_node("b", "127.0.0.1", 7001, "master"),
                                  shards_node("e", "127.0.0.1", 7004, "replica")}),
      shard({I(10923), I(16383)}, {shards_node("c", "127.0.0.1", 7002, "master"),
                                   shards_node("f", "127.0.0.1", 7005, "replica")}),
  });
}

ClusterSlotMap three_shard_map() {
  Result<ClusterSlotMap> map = ClusterSlotMap::from_shards(three_shards(), "127.0.0.1");
  EXPECT_TRUE(map.ok()) << map.error().message;
  return map.ok() ? *map : ClusterSlotMap();
}

// ---- slots -------------------------------------------------------------------------------------

TEST(ClusterSlot, Crc16XmodemCheckValue) {
  // The CRC-16/XMODEM check value, and the one the Redis Cluster specification quotes.
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(crc16_xmodem(""), 0);
}

TEST(ClusterSlot, KnownKeys) {
  // As `CLUSTER KEYSLOT` answers (tests/integration/redis_cluster_test.cpp checks thousands more).
  EXPECT_EQ(cluster_key_slot("foo"), 12182);
  EXPECT_EQ(cluster_key_slot("bar"), 5061);
  EXPECT_EQ(cluster_key_slot("hello"), 866);
  EXPECT_EQ(cluster_key_slot("somekey"), 11058);
  EXPECT_EQ(cluster_key_slot(""), 0);
}

TEST(ClusterSlot, HashTagsAsTheSpecificationDefinesThem) {
  // The specification's examples.
  EXPECT_EQ(cluster_hash_tag("{user1000}.following"), "user1000");
  EXPECT_EQ(cluster_hash_tag("{user1000}.followers"), "user1000");
  EXPECT_EQ(cluster_hash_tag("foo{}{bar}"), "foo{}{bar}");  // empty first tag: whole key
  EXPECT_EQ(cluster_hash_tag("foo{{bar}}zap"), "{bar");     // up to the first '}'
  EXPECT_EQ(cluster_hash_tag("foo{bar}{zap}"), "bar");      // the first tag only
  EXPECT_EQ(cluster_hash_tag("foo{bar"), "foo{bar");        // unclosed: whole key
  EXPECT_EQ(cluster_hash_tag("foo}bar{"), "foo}bar{");      // '}' before '{' does not close
  EXPECT_EQ(cluster_hash_tag("foo}{x}"), "x");
  EXPECT_EQ(cluster_hash_tag("{}"), "{}");
  EXPECT_EQ(cluster_key_slot("{user1000}.following"), cluster_key_slot("user1000"));
  EXPECT_EQ(cluster_key_slot("quiver:{ns}:conns"), cluster_key_slot("ns"));
  // Binary keys hash by bytes.
  EXPECT_EQ(cluster_key_slot(std::string("a\0b", 3)), crc16_xmodem(std::string("a\0b", 3)) % 16384);
}

TEST(ClusterSlot, CommandKeys) {
  auto keys = [](RedisCommand argv) {
    Result<std::vector<std::string_view>> k = command_keys(argv);
    EXPECT_TRUE(k.ok()) << k.error().message;
    return k.ok() ? std::vector<std::string>(k->begin(), k->end()) : std::vector<std::string>{};
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(keys({"GET", "k"}), V{"k"});
  EXPECT_EQ(keys({"hgetall", "h"}), V{"h"});
  EXPECT_EQ(keys({"EVAL", "return 1", "2", "a", "b", "arg"}), (V{"a", "b"}));
  EXPECT_EQ(keys({"evalsha", "abc", "0", "arg"}), V{});
  EXPECT_EQ(keys({"MGET", "a", "b", "c"}), (V{"a", "b", "c"}));
  EXPECT_EQ(keys({"MSET", "a", "1", "b", "2"}), (V{"a", "b"}));
  EXPECT_EQ(keys({"XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "STREAMS", "s1", "s2", ">", ">"}),
            (V{"s1", "s2"}));
  // A subcommand before the key.
  EXPECT_EQ(keys({"XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"}), V{"s"});
  EXPECT_EQ(keys({"xinfo", "CONSUMERS", "s", "g"}), V{"s"});
  EXPECT_EQ(keys({"XINFO", "GROUPS", "s"}), V{"s"});
  EXPECT_EQ(keys({"XINFO", "HELP"}), V{});
  EXPECT_EQ(keys({"XAUTOCLAIM", "s", "g", "c", "0", "0-0"}), V{"s"});
  EXPECT_EQ(keys({"PING"}), V{});
  EXPECT_EQ(keys({"SCAN", "0", "MATCH", "x*"}), V{});
  EXPECT_EQ(keys({"CLUSTER", "SHARDS"}), V{});

  EXPECT_FALSE(command_keys({}).ok());
  EXPECT_FALSE(command_keys({"EVAL", "x"}).ok());
  EXPECT_FALSE(command_keys({"EVAL", "x", "3", "a"}).ok());  // more keys than arguments
  EXPECT_FALSE(command_keys({"EVAL", "x", "-1"}).ok());
  EXPECT_FALSE(command_keys({"XREAD", "STREAMS", "a", "b", "c"}).ok());
}

TEST(ClusterSlot, CommandSlotRefusesCrossSlot) {
  EXPECT_EQ(*command_slot({"GET", "foo"}), std::optional<uint16_t>(12182));
  EXPECT_EQ(*command_slot({"PING"}), std::nullopt);
  EXPECT_EQ(*command_slot({"MGET", "{t}a", "{t}b"}),
            std::optional<uint16_t>(cluster_key_slot("t")));
  Result<std::optional<uint16_t>> cross = command_slot({"MGET", "foo", "bar"});
  ASSERT_FALSE(cross.ok());
  EXPECT_EQ(cross.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(cross.error().message.find("CROSSSLOT"), std::string::npos);
}

// ---- the map -----------------------------------------------------------------------------------

TEST(ClusterSlotMap, FromShards) {
  ClusterSlotMap map = three_shard_map();
  EXPECT_TRUE(map.covers_all_slots());
  ASSERT_EQ(map.shards().size(), 3u);
  const ClusterShard* s = map.shard_for_slot(cluster_key_slot("foo"));  // 12182
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->master.address(), "127.0.0.1:7002");
  EXPECT_EQ(s->master.id, "c");
  ASSERT_EQ(s->replicas.size(), 1u);
  EXPECT_EQ(s->replicas[0].port, 7005);
  EXPECT_EQ(map.shard_for_slot(0)->master.port, 7000);
  EXPECT_EQ(map.shard_for_slot(5461)->master.port, 7001);
  EXPECT_EQ(map.shard_for_slot(16383)->master.port, 7002);
  EXPECT_EQ(map.shard_for_slot(16384), nullptr);
  EXPECT_EQ(map.masters().size(), 3u);
}

TEST(ClusterSlotMap, FromShardsNumbersAsStringsUnknownEndpointsAndFailedNodes) {
  // Numbers as strings (a RESP3 client's rendering), endpoint "?" (the answering host), a failed
  // replica (kept, marked unhealthy), several ranges, an unknown field, a slot-less master.
  RespValue master =
      A({B("id"), B("m"), B("port"), B("7010"), B("ip"), B(""), B("endpoint"), B("?"), B("role"),
         B("master"), B("health"), B("online"), B("future-field"), A({})});
  RespValue replica = shards_node("r", "10.0.0.9", 7011, "replica", "fail");
  RespValue reply = A({
      shard({B("0"), B("99"), I(200), I(16383)}, {master, replica}),
      shard({}, {shards_node("x", "10.0.0.8", 7012, "master")}),
  });
  Result<ClusterSlotMap> map = ClusterSlotMap::from_shards(reply, "seed.example");
  ASSERT_TRUE(map.ok()) << map.error().message;
  EXPECT_EQ(map->served_slots(), 100u + (16384 - 200));
  EXPECT_EQ(map->shard_for_slot(150), nullptr);
  const ClusterShard* s = map->shard_for_slot(0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->master.address(), "seed.example:7010");
  ASSERT_EQ(s->replicas.size(), 1u);
  EXPECT_FALSE(s->replicas[0].healthy);
  EXPECT_EQ(map->shards().size(), 1u);  // the slot-less master serves nothing
}

TEST(ClusterSlotMap, FromShardsRefusesInconsistentOrHostileInput) {
  auto refused = [](const RespValue& reply) {
    Result<ClusterSlotMap> m = ClusterSlotMap::from_shards(reply, "h");
    EXPECT_FALSE(m.ok());
    if (!m.ok()) {
      EXPECT_EQ(m.error().code, ErrorCode::kInvalidReply) << m.error().message;
    }
  };
  refused(E("ERR unknown subcommand 'SHARDS'"));
  refused(B("not an array"));
  refused(A({B("x")}));
  refused(A({A({B("slots"), A({I(0), I(5)})})}));                           // no nodes
  refused(A({shard({I(0)}, {shards_node("a", "h", 1, "master")})}));        // odd slots
  refused(A({shard({I(5), I(1)}, {shards_node("a", "h", 1, "master")})}));  // backwards
  refused(A({shard({I(0), I(16384)}, {shards_node("a", "h", 1, "master")})}));
  refused(A({shard({I(-1), I(3)}, {shards_node("a", "h", 1, "master")})}));
  refused(A({shard({I(0), I(3)}, {shards_node("a", "h", 0, "master")})}));       // port 0
  refused(A({shard({I(0), I(3)}, {shards_node("a", "h", 65536, "master")})}));   // port
  refused(A({shard({I(0), I(3)}, {shards_node("a", "h\r\nx", 1, "master")})}));  // host
  refused(A({shard({I(0), I(3)}, {A({B("port"), I(1), B("ip"), B("h")})})}));    // no role
  refused(A({shard({I(0), I(3)},
                   {shards_node("a", "h", 1, "master"), shards_node("b", "h", 2, "master")})}));
  // Two shards claim slot 3.
  refused(A({shard({I(0), I(3)}, {shards_node("a", "h", 1, "master")}),
             shard({I(3), I(9)}, {shards_node("b", "h", 2, "master")})}));
  // Past the bounds.
  ClusterParseLimits tight;
  tight.max_shards = 2;
  EXPECT_FALSE(ClusterSlotMap::from_shards(three_shards(), "h", tight).ok());
  tight = {};
  tight.max_host_bytes = 4;
  EXPECT_FALSE(ClusterSlotMap::from_shards(three_shards(), "h", tight).ok());
}

// A node on a plain port and a TLS port announces both: a TLS client dials `tls-port`, a plain one
// `port`; a node with only one of them is reached on that one, whichever the client.
TEST(ClusterSlotMap, FromShardsTakesThePortOfTheClientsKind) {
  RespValue both = A({B("id"), B("m"), B("port"), I(7000), B("tls-port"), I(17000), B("ip"),
                      B("10.0.0.1"), B("role"), B("master"), B("health"), B("online")});
  RespValue tls_only = A({B("id"), B("r"), B("tls-port"), I(17001), B("ip"), B("10.0.0.2"),
                          B("role"), B("replica"), B("health"), B("online")});
  RespValue plain_only = A({B("id"), B("n"), B("port"), I(7002), B("ip"), B("10.0.0.3"), B("role"),
                            B("master"), B("health"), B("online")});
  RespValue reply =
      A({shard({I(0), I(99)}, {both, tls_only}), shard({I(100), I(16383)}, {plain_only})});
  Result<ClusterSlotMap> plain = ClusterSlotMap::from_shards(reply, "h");
  Result<ClusterSlotMap> tls = ClusterSlotMap::from_shards(reply, "h", {}, ClusterPort::kTls);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  ASSERT_TRUE(tls.ok()) << tls.error().message;
  EXPECT_EQ(plain->shard_for_slot(0)->master.address(), "10.0.0.1:7000");
  EXPECT_EQ(tls->shard_for_slot(0)->master.address(), "10.0.0.1:17000");
  EXPECT_EQ(plain->shard_for_slot(0)->replicas.at(0).address(), "10.0.0.2:17001");
  EXPECT_EQ(tls->shard_for_slot(0)->replicas.at(0).address(), "10.0.0.2:17001");
  EXPECT_EQ(plain->shard_for_slot(100)->master.address(), "10.0.0.3:7002");
  EXPECT_EQ(tls->shard_for_slot(100)->master.address(), "10.0.0.3:7002");
}

TEST(ClusterSlotMap, FromShardsSkipsAShardWithoutMaster) {
  RespValue reply = A({shard({I(0), I(16383)}, {shards_node("r", "h", 1, "replica")})});
  Result<ClusterSlotMap> map = ClusterSlotMap::from_shards(reply, "h");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->served_slots(), 0u);
}

TEST(ClusterSlotMap, FromSlots) {
  RespValue reply = A({
      A({I(0), I(99), A({B("127.0.0.1"), I(7000), B("a"), A({})}),
         A({B("127.0.0.1"), I(7003), B("d")})}),
      A({I(100), I(16000), A({B("127.0.0.1"), I(7001), B("b")})}),
      // A second range of the first master; a nil endpoint (the answering host).
      A({I(16001), I(16383), A({RespValue::nil(), I(7000), B("a")}),
         A({B("127.0.0.1"), I(7003), B("d")})}),
  });
  Result<ClusterSlotMap> map = ClusterSlotMap::from_slots(reply, "127.0.0.1");
  ASSERT_TRUE(map.ok()) << map.error().message;
  EXPECT_TRUE(map->covers_all_slots());
  EXPECT_EQ(map->shards().size(), 2u);
  EXPECT_EQ(map->shard_for_slot(16383)->master.port, 7000);
  EXPECT_EQ(map->shard_for_slot(16383)->replicas.at(0).port, 7003);
  EXPECT_EQ(map->shard_for_slot(500)->master.id, "b");

  EXPECT_FALSE(ClusterSlotMap::from_slots(A({A({I(0), I(5)})}), "h").ok());
  EXPECT_FALSE(ClusterSlotMap::from_slots(A({A({I(0), I(5), A({B("h")})})}), "h").ok());
  EXPECT_FALSE(ClusterSlotMap::from_slots(A({A({I(0), I(5), A({B("h"), B("x")})})}), "h").ok());
  EXPECT_FALSE(ClusterSlotMap::from_slots(
                   A({A({I(0), I(5), A({B("h"), I(1)})}), A({I(5), I(6), A({B("g"), I(1)})})}), "h")
                   .ok());
}

TEST(ClusterSlotMap, ApplyMovedChangesOneSlot) {
  ClusterSlotMap map = three_shard_map();
  ClusterNode b;
  b.host = "127.0.0.1";
  b.port = 7001;
  map.apply_moved(12182, b);
  EXPECT_EQ(map.shard_for_slot(12182)->master.port, 7001);
  EXPECT_EQ(map.shard_for_slot(12181)->master.port, 7002);
  EXPECT_EQ(map.shards().size(), 3u);
  // A master the map does not know (a promoted replica): its own shard until the next refresh.
  ClusterNode f;
  f.host = "127.0.0.1";
  f.port = 7005;
  map.apply_moved(16383, f);
  EXPECT_EQ(map.shard_for_slot(16383)->master.port, 7005);
  EXPECT_EQ(map.shards().size(), 4u);
  EXPECT_TRUE(map.covers_all_slots());
  EXPECT_EQ(map.masters().size(), 4u);
  // Filling an unserved slot counts it.
  ClusterSlotMap empty;
  empty.apply_moved(7, f);
  EXPECT_EQ(empty.served_slots(), 1u);
}

// ---- replies -----------------------------------------------------------------------------------

TEST(ClusterRedirect, Parses) {
  Result<ClusterRedirect> moved = parse_cluster_redirect(E("MOVED 3999 127.0.0.1:6381"), "seed");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->kind, Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->node.address(), "127.0.0.1:6381");

  Result<ClusterRedirect> ask = parse_cluster_redirect(E("ASK 1 :6390"), "10.1.1.1");
  ASSERT_TRUE(ask.ok());
  EXPECT_EQ(ask->kind, Kind::kAsk);
  EXPECT_EQ(ask->node.address(), "10.1.1.1:6390");  // unknown endpoint: the host that answered

  Result<ClusterRedirect> v6 = parse_cluster_redirect(E("MOVED 16383 ::1:7000"), "h");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->node.host, "::1");
  EXPECT_EQ(v6->node.address(), "[::1]:7000");

  auto kind = [](const char* m) { return parse_cluster_redirect(E(m), "h")->kind; };
  EXPECT_EQ(kind("TRYAGAIN Multiple keys request during rehashing of slot"), Kind::kTryAgain);
  EXPECT_EQ(kind("CLUSTERDOWN The cluster is down"), Kind::kClusterDown);
  EXPECT_EQ(kind("LOADING Redis is loading the dataset in memory"), Kind::kLoading);
  EXPECT_EQ(kind("READONLY You can't write against a read only replica."), Kind::kReadOnly);
  EXPECT_EQ(kind("MASTERDOWN Link with MASTER is down"), Kind::kMasterDown);
  EXPECT_EQ(kind("ERR wrong number of arguments"), Kind::kNone);
  EXPECT_EQ(kind("MOVEDX 1 h:1"), Kind::kNone);
  EXPECT_EQ(parse_cluster_redirect(B("MOVED 1 h:1"), "h")->kind, Kind::kNone);  // not an error

  for (const char* bad : {"MOVED", "MOVED 1", "MOVED x h:1", "MOVED 16384 h:1", "MOVED 1 h",
                          "MOVED 1 h:0", "MOVED 1 h:99999", "ASK -1 h:1", "ASK 1 h:"}) {
    Result<ClusterRedirect> r = parse_cluster_redirect(E(bad), "h");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply);
  }
}

// The decision table, walked row by row.
TEST(ClusterStep, DecisionTable) {
  ClusterRetryPolicy policy;
  struct Row {
    RespValue reply;
    int attempt;
    int redirects;
    Action action;
    bool refresh;
  };
  const std::vector<Row> rows = {
      {B("value"), 1, 0, Action::kUseReply, false},
      {RespValue::nil(), 1, 0, Action::kUseReply, false},
      {E("WRONGTYPE Operation against a key"), 1, 0, Action::kUseReply, false},
      {E("MOVED 5 h:7001"), 1, 0, Action::kRetryAt, false},
      {E("ASK 5 h:7001"), 1, 0, Action::kAskAt, false},
      {E("MOVED 5 h:7001"), 2, policy.max_redirects, Action::kGiveUp, false},
      {E("ASK 5 h:7001"), 2, policy.max_redirects, Action::kGiveUp, false},
      {E("TRYAGAIN x"), 1, 0, Action::kBackoffThenRetry, false},
      {E("LOADING x"), 1, 0, Action::kBackoffThenRetry, false},
      {E("CLUSTERDOWN x"), 1, 0, Action::kBackoffThenRetry, true},
      {E("MASTERDOWN x"), 1, 0, Action::kBackoffThenRetry, true},
      {E("READONLY x"), 1, 0, Action::kRefreshThenRetry, true},
      {E("TRYAGAIN x"), policy.max_attempts, 0, Action::kGiveUp, false},
      {E("MOVED 5 h:0"), 1, 0, Action::kGiveUp, false},
  };
  for (const Row& row : rows) {
    ClusterStep step = decide_cluster_step(row.reply, "h", row.attempt, row.redirects, policy);
    EXPECT_EQ(step.action, row.action)
        << row.reply.debug_string() << " → " << cluster_action_name(step.action);
    EXPECT_EQ(step.refresh_map, row.refresh) << row.reply.debug_string();
    if (step.action == Action::kGiveUp) {
      EXPECT_NE(step.error.code, ErrorCode::kInternal);
      EXPECT_FALSE(step.error.message.empty());
    }
  }
  ClusterStep moved = decide_cluster_step(E("MOVED 5 h:7001"), "h", 1, 0, policy);
  EXPECT_EQ(moved.slot, 5);
  EXPECT_EQ(moved.node.port, 7001);
  ClusterStep out = decide_cluster_step(E("MOVED 5 h:7001"), "h", 3, 5, policy);
  EXPECT_EQ(out.error.code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(out.error.message.find("MOVED 5 h:7001"), std::string::npos) << out.error.message;
}

// A slot being resharded answers TRYAGAIN for as long as its MIGRATEs last: a host that waits it
// out (max_tryagain_attempts) retries TRYAGAIN past max_attempts, and follows the ASK or MOVED
// that comes after it (within max_redirects); every other answer keeps max_attempts, and without
// it TRYAGAIN does too.
TEST(ClusterStep, TryAgainMayHaveABudgetOfItsOwn) {
  const RespValue tryagain =
      RespValue::error("TRYAGAIN Multiple keys request during rehashing of slot");
  ClusterRetryPolicy policy;
  EXPECT_EQ(decide_cluster_step(tryagain, "h", policy.max_attempts, 0, policy).action,
            ClusterStep::Action::kGiveUp);
  policy.max_tryagain_attempts = 40;
  for (int attempt = policy.max_attempts; attempt < 40; ++attempt) {
    ClusterStep step = decide_cluster_step(tryagain, "h", attempt, 0, policy);
    ASSERT_EQ(step.action, ClusterStep::Action::kBackoffThenRetry) << attempt;
    EXPECT_EQ(step.backoff_ms, policy.backoff_max_ms);
    EXPECT_FALSE(step.refresh_map);
  }
  ClusterStep out = decide_cluster_step(tryagain, "h", 40, 0, policy);
  EXPECT_EQ(out.action, ClusterStep::Action::kGiveUp);
  EXPECT_EQ(out.error.code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(out.error.message.find("TRYAGAIN"), std::string::npos) << out.error.message;
  for (const char* other : {"LOADING x", "CLUSTERDOWN x", "MASTERDOWN x", "READONLY x"}) {
    EXPECT_EQ(
        decide_cluster_step(RespValue::error(other), "h", policy.max_attempts, 0, policy).action,
        ClusterStep::Action::kGiveUp)
        << other;
  }
  // The migration's end, after many TRYAGAINs: ASK then MOVED, still within max_redirects.
  EXPECT_EQ(decide_cluster_step(RespValue::error("ASK 5 h:7001"), "h", 30, 0, policy).action,
            ClusterStep::Action::kAskAt);
  EXPECT_EQ(decide_cluster_step(RespValue::error("MOVED 5 h:7001"), "h", 31, 1, policy).action,
            ClusterStep::Action::kRetryAt);
  EXPECT_EQ(
      decide_cluster_step(RespValue::error("ASK 5 h:7001"), "h", 30, policy.max_redirects, policy)
          .action,
      ClusterStep::Action::kGiveUp);
  EXPECT_EQ(decide_cluster_step(RespValue::error("MOVED 5 h:7001"), "h", 40, 0, policy).action,
            ClusterStep::Action::kGiveUp);
  // A budget below max_attempts changes nothing.
  policy.max_tryagain_attempts = 2;
  EXPECT_EQ(decide_cluster_step(tryagain, "h", 2, 0, policy).action,
            ClusterStep::Action::kBackoffThenRetry);
}

TEST(ClusterStep, BackoffIsBoundedAndIoFailuresRefresh) {
  ClusterRetryPolicy policy;
  policy.backoff_initial_ms = 10;
  policy.backoff_max_ms = 100;
  EXPECT_EQ(cluster_backoff_ms(1, policy), 10);
  EXPECT_EQ(cluster_backoff_ms(2, policy), 20);
  EXPECT_EQ(cluster_backoff_ms(4, policy), 80);
  EXPECT_EQ(cluster_backoff_ms(5, policy), 100);
  EXPECT_EQ(cluster_backoff_ms(1000, policy), 100);

  ClusterStep step = cluster_step_after_io_failure("connection refused", 1, policy);
  EXPECT_EQ(step.action, Action::kBackoffThenRetry);
  EXPECT_TRUE(step.refresh_map);
  ClusterStep last =
      cluster_step_after_io_failure("connection refused", policy.max_attempts, policy);
  EXPECT_EQ(last.action, Action::kGiveUp);
  EXPECT_EQ(last.error.code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(last.error.message.find("connection refused"), std::string::npos);

  // A TLS handshake the node refused: no retry, from the first attempt.
  ClusterStep tls = cluster_step_after_io_failure(
      "connect: TLS handshake failed with h:7001 (it accepts TCP): cannot connect", 1, policy);
  EXPECT_EQ(tls.action, Action::kGiveUp);
  EXPECT_EQ(tls.error.code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(tls.error.message.find("TLS handshake failed with h:7001"), std::string::npos);
}

// Key layout v1's scripts read keys they do not declare, and a transaction is never split: a
// round holding either waits an ASK out (a backoff at the same node) instead of following it.
TEST(ClusterStep, AnAskIsHeldForARoundWithAScriptOrATransaction) {
  ClusterRetryPolicy policy;
  const ClusterStep ask = decide_cluster_step(E("ASK 5 h:7001"), "h", 2, 1, policy);
  ASSERT_EQ(ask.action, Action::kAskAt);
  const RedisCommand get = {"GET", "k"};
  const std::vector<std::pair<std::vector<RedisCommand>, bool>> rounds = {
      {{get}, true},
      {{get, {"MGET", "a", "b"}}, true},
      {{get, {"EVALSHA", "0123", "1", "k"}}, false},
      {{{"evalsha_ro", "0123", "1", "k"}}, false},
      {{{"EVAL", "return 1", "0"}}, false},
      {{{"FCALL", "f", "1", "k"}}, false},
      {{{"MULTI"}, {"SET", "k", "v"}, {"EXEC"}}, false},
  };
  for (const auto& [round, follows] : rounds) {
    ClusterStep step = hold_ask_for_round(ask, round, 2, policy);
    EXPECT_EQ(step.action, follows ? Action::kAskAt : Action::kBackoffThenRetry) << round[0][0];
    if (!follows) {
      EXPECT_EQ(step.backoff_ms, cluster_backoff_ms(2, policy));
      EXPECT_FALSE(step.refresh_map);  // the map is right: the slot is still the source's
    } else {
      EXPECT_EQ(step.node.port, 7001);
    }
  }
  // Anything but an ASK passes through unchanged.
  ClusterStep moved = decide_cluster_step(E("MOVED 5 h:7001"), "h", 1, 0, policy);
  EXPECT_EQ(hold_ask_for_round(moved, {{"EVAL", "return 1", "0"}}, 1, policy).action,
            Action::kRetryAt);
}

// ---- planning ----------------------------------------------------------------------------------

TEST(ClusterPlan, GroupsByMasterInOrder) {
  ClusterSlotMap map = three_shard_map();
  std::vector<ClusterRequest> reqs = {
      {{"GET", "foo"}},       // 12182 → 7002
      {{"SET", "bar", "1"}},  // 5061 → 7000
      {{"GET", "hello"}},     // 866 → 7000
      {{"PING"}},             // any node: the first one in the plan
  };
  ClusterPlan plan = plan_cluster_batch(map, reqs);
  ASSERT_EQ(plan.batches.size(), 2u);
  EXPECT_EQ(plan.batches[0].node.port, 7002);
  EXPECT_EQ(plan.batches[0].indices, (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(plan.batches[1].node.port, 7000);
  EXPECT_EQ(plan.batches[1].indices, (std::vector<std::size_t>{1, 2}));
  EXPECT_FALSE(plan.batches[0].replica);
  EXPECT_TRUE(plan.deferred.empty());
  EXPECT_TRUE(plan.refused.empty());
}

TEST(ClusterPlan, ReadsGoToReplicasWritesToMasters) {
  ClusterSlotMap map = three_shard_map();
  std::vector<ClusterRequest> reqs = {{{"GET", "foo"}, true}, {{"SET", "foo", "1"}, false}};
  ClusterPlanOptions options;
  options.replica_reads = true;
  ClusterPlan plan = plan_cluster_batch(map, reqs, options);
  ASSERT_EQ(plan.batches.size(), 2u);
  EXPECT_EQ(plan.batches[0].node.port, 7005);
  EXPECT_TRUE(plan.batches[0].replica);
  EXPECT_EQ(plan.batches[1].node.port, 7002);
  EXPECT_FALSE(plan.batches[1].replica);
  // Without replica reads, both go to the master in one batch.
  ClusterPlan masters_only = plan_cluster_batch(map, reqs);
  ASSERT_EQ(masters_only.batches.size(), 1u);
  EXPECT_EQ(masters_only.batches[0].indices.size(), 2u);
  // A read whose shard's master is already in the plan joins it rather than open a socket, when
  // the cap leaves no room.
  options.max_nodes = 1;
  std::vector<ClusterRequest> write_first = {{{"SET", "foo", "1"}, false}, {{"GET", "foo"}, true}};
  ClusterPlan capped = plan_cluster_batch(map, write_first, options);
  ASSERT_EQ(capped.batches.size(), 1u);
  EXPECT_EQ(capped.batches[0].indices.size(), 2u);
}

TEST(ClusterPlan, AnUnhealthyReplicaServesNoReads) {
  RespValue reply = A({shard({I(0), I(16383)}, {shards_node("m", "h", 1, "master"),
                                                shards_node("r", "h", 2, "replica", "fail")})});
  Result<ClusterSlotMap> map = ClusterSlotMap::from_shards(reply, "h");
  ASSERT_TRUE(map.ok());
  ClusterPlanOptions options;
  options.replica_reads = true;
  ClusterPlan plan = plan_cluster_batch(*map, {{{"GET", "k"}, true}}, options);
  ASSERT_EQ(plan.batches.size(), 1u);
  EXPECT_EQ(plan.batches[0].node.port, 1);
}

TEST(ClusterPlan, CapsDistinctNodesAndDefersTheRest) {
  // Nine masters, one key on each: six nodes now, three for the next round.
  std::vector<ClusterShard> shards;
  for (int i = 0; i < 9; ++i) {
    ClusterShard s;
    s.ranges.push_back(
        {static_cast<uint16_t>(i * 1820), static_cast<uint16_t>(i == 8 ? 16383 : i * 1820 + 1819)});
    s.master.host = "127.0.0.1";
    s.master.port = 7000 + i;
    shards.push_back(s);
  }
  Result<ClusterSlotMap> map = ClusterSlotMap::from_shard_list(shards);
  ASSERT_TRUE(map.ok());
  std::vector<ClusterRequest> reqs;
  std::set<int> wanted;
  for (int n = 0; wanted.size() < 9; ++n) {
    std::string key = "key" + std::to_string(n);
    int port = map->shard_for_slot(cluster_key_slot(key))->master.port;
    if (wanted.insert(port).second) reqs.push_back({{"GET", key}, true});
  }
  ClusterPlanOptions options;
  options.max_nodes = 6;
  ClusterPlan plan = plan_cluster_batch(*map, reqs, options);
  EXPECT_EQ(plan.batches.size(), 6u);
  EXPECT_EQ(plan.deferred, (std::vector<std::size_t>{6, 7, 8}));
  // The next round plans the deferred ones.
  std::vector<ClusterRequest> rest;
  for (std::size_t i : plan.deferred) rest.push_back(reqs[i]);
  ClusterPlan second = plan_cluster_batch(*map, rest, options);
  EXPECT_EQ(second.batches.size(), 3u);
  EXPECT_TRUE(second.deferred.empty());
}

TEST(ClusterPlan, RefusesWhatCannotBeRouted) {
  ClusterSlotMap map = three_shard_map();
  std::vector<ClusterRequest> reqs = {
      {{"MGET", "foo", "bar"}},  // CROSSSLOT
      {{}},                      // empty
      {{"GET", "hello"}},
  };
  ClusterPlan plan = plan_cluster_batch(map, reqs);
  ASSERT_EQ(plan.refused.size(), 2u);
  EXPECT_EQ(plan.refused[0].first, 0u);
  EXPECT_EQ(plan.refused[0].second.code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(plan.refused[1].first, 1u);
  ASSERT_EQ(plan.batches.size(), 1u);
  EXPECT_EQ(plan.batches[0].indices, std::vector<std::size_t>{2});

  ClusterSlotMap empty;
  ClusterPlan none = plan_cluster_batch(empty, {{{"GET", "foo"}}, {{"PING"}}});
  ASSERT_EQ(none.refused.size(), 2u);
  EXPECT_EQ(none.refused[0].second.code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(none.refused[0].second.message.find("slot 12182"), std::string::npos);
}

// Found by the fuzz target (tests/fuzz/redis_cluster_fuzz.cpp): a command without a key joined
// the first batch even when that was a replica's, and a map naming one address as a replica of
// one shard and the master of another merged a write into the replica's batch.
TEST(ClusterPlan, WritesNeverJoinAReplicaBatch) {
  RespValue reply = A({
      shard({I(0), I(8000)},
            {shards_node("m1", "h", 1, "master"), shards_node("r1", "h", 2, "replica")}),
      shard({I(8001), I(16383)}, {shards_node("m2", "h", 2, "master")}),
  });
  Result<ClusterSlotMap> map = ClusterSlotMap::from_shards(reply, "h");
  ASSERT_TRUE(map.ok());
  std::string low;  // a key in 0..8000 and one in 8001..16383
  std::string high;
  for (int i = 0; low.empty() || high.empty(); ++i) {
    std::string k = "k" + std::to_string(i);
    (cluster_key_slot(k) <= 8000 ? low : high) = k;
  }
  ClusterPlanOptions options;
  options.replica_reads = true;
  ClusterPlan plan = plan_cluster_batch(
      *map, {{{"GET", low}, true}, {{"SET", high, "1"}, false}, {{"FLUSHALL"}, false}}, options);
  for (const ClusterNodeBatch& b : plan.batches) {
    for (std::size_t i : b.indices) EXPECT_FALSE(b.replica && i != 0) << i;
  }
  ASSERT_EQ(plan.batches.size(), 2u);
  EXPECT_TRUE(plan.batches[0].replica);
  EXPECT_EQ(plan.batches[1].indices, (std::vector<std::size_t>{1, 2}));
}

TEST(ClusterRedirect, RefusesAHostWithControlBytes) {
  Result<ClusterRedirect> r = parse_cluster_redirect(E("MOVED 1 a\x01"
                                                       "b:7000"),
                                                     "h");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply);
}

TEST(ClusterPlan, ReplicaConnectionsStartWithReadonly) {
  EXPECT_EQ(cluster_connection_preamble(true), (std::vector<RedisCommand>{{"READONLY"}}));
  EXPECT_TRUE(cluster_connection_preamble(false).empty());
}

}  // namespace
}  // namespace quiver
