// Spread rounds (shared/routed_conversation.h begin_spread): key layout v2's rounds, each command
// routed by its own key's slot, grouped per node, at most kMaxNodesPerRequest sockets.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/redis_cluster.h"
#include "shared/routed_conversation.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/resp_values.h

const std::string kAuthOk = "+OK\r\n";
const RedisCredentials kCreds{"quiver-edge", "pw"};

RespValue master(int port) {
  return A({S("id"), S("n" + std::to_string(port)), S("port"), I(port), S("ip"), S("127.0.0.1"),
            S("endpoint"), S("127.0.0.1"), S("role"), S("master"), S("replication-offset"), I(1),
            S("health"), S("online")});
}

// `n` masters on ports 7000.., the slots split evenly between them.
RespValue even_shards(int n) {
  std::vector<RespValue> out;
  for (int k = 0; k < n; ++k) {
    const int first = 16384 * k / n;
    const int last = 16384 * (k + 1) / n - 1;
    out.push_back(A({S("slots"), A({I(first), I(last)}), S("nodes"), A({master(7000 + k)})}));
  }
  return A(std::move(out));
}
int port_of_slot(uint16_t slot, int n) {
  for (int k = 0; k < n; ++k) {
    if (slot <= 16384 * (k + 1) / n - 1) return 7000 + k;
  }
  return -1;
}

// One v2-like key per wanted node: `quiver:{ns:c:conn-<i>}:version` on the node of port `p`.
std::string key_on(int port, int n, int skip = 0) {
  for (int i = 0;; ++i) {
    std::string key = "quiver:{ns:c:conn-" + std::to_string(i) + "}:version";
    if (port_of_slot(cluster_key_slot(key), n) == port && skip-- == 0) return key;
  }
}

ClusterRouterSettings seeded() {
  ClusterRouterSettings c;
  ClusterNode seed;
  seed.host = "127.0.0.1";
  seed.port = 7000;
  c.seeds.push_back(seed);
  return c;
}

// Replies `GET` commands with their key's text, as a node would (one bulk string per command).
std::string answer_gets(const std::string& written) {
  std::string out;
  std::size_t at = 0;
  while ((at = written.find("$3\r\nGET\r\n", at)) != std::string::npos) {
    at += 9;
    std::size_t len_end = written.find("\r\n", at);
    const std::size_t len = std::stoul(written.substr(at + 1, len_end - at - 1));
    const std::string key = written.substr(len_end + 2, len);
    out += encode_reply(S(key));
    at = len_end + 2 + len;
  }
  return out;
}
std::size_t count_gets(const std::string& written) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = written.find("$3\r\nGET\r\n", at)) != std::string::npos; ++at) ++n;
  return n;
}

// Learns the map of `n` masters through the seed; returns the first command write.
RoutedWrite learn(RoutedConversation& c, const std::vector<RedisCommand>& round, int n) {
  RoutedWrite w = c.begin_spread(round, ScriptForm::kBySha, /*read_only=*/true);
  EXPECT_EQ(w.bytes,
            encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command({"CLUSTER", "SHARDS"}));
  EXPECT_EQ(c.feed(kAuthOk + encode_reply(even_shards(n))), RedisTurn::kWrite);
  return c.take_write();
}

TEST(RoutedSpread, OnOneRedisARoundIsOnePipeline) {
  RoutedConversation spread({}, kCreds);
  RoutedConversation plain({}, kCreds);
  const std::vector<RedisCommand> round = {{"GET", key_on(7000, 3)}, {"GET", key_on(7002, 3)}};
  RoutedWrite a = spread.begin_spread(round);
  RoutedWrite b = plain.begin(round);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_FALSE(a.node.has_value());
  ASSERT_EQ(spread.feed(kAuthOk + "$1\r\na\r\n$1\r\nb\r\n"), RedisTurn::kDone);
  EXPECT_EQ(spread.take_replies(), (std::vector<RespValue>{S("a"), S("b")}));
}

TEST(RoutedSpread, EachCommandGoesToItsSlotsNodeOnePipelinePerNodeRepliesInOrder) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  // Interleaved over three masters: two commands for 7001, one each for 7000 and 7002.
  const std::vector<RedisCommand> round = {{"GET", key_on(7001, 3)},
                                           {"GET", key_on(7000, 3)},
                                           {"GET", key_on(7001, 3, 1)},
                                           {"GET", key_on(7002, 3)}};
  RoutedWrite w = learn(c, round, 3);
  std::set<int> nodes;
  int writes = 0;
  for (;;) {
    ASSERT_TRUE(w.node.has_value());
    EXPECT_TRUE(nodes.insert(w.node->port).second) << "one pipeline per node";
    ++writes;
    // Every command of this write is its node's.
    for (const RedisCommand& cmd : round) {
      const bool here = w.bytes.find(encode_command(cmd)) != std::string::npos;
      EXPECT_EQ(here, port_of_slot(cluster_key_slot(cmd[1]), 3) == w.node->port) << cmd[1];
    }
    const std::string auth = w.new_connection ? kAuthOk : "";
    RedisTurn t = c.feed(auth + answer_gets(w.bytes));
    if (t == RedisTurn::kDone) break;
    ASSERT_EQ(t, RedisTurn::kWrite);
    w = c.take_write();
  }
  EXPECT_EQ(writes, 3);
  std::vector<RespValue> replies = c.take_replies();
  ASSERT_EQ(replies.size(), round.size());
  for (std::size_t i = 0; i < round.size(); ++i) EXPECT_EQ(replies[i], S(round[i][1]));
}

TEST(RoutedSpread, MovedOnOneNodeSendsOnlyItsCommandOnAndTheRestAreKept) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string a = key_on(7000, 3);
  const std::string b = key_on(7001, 3);
  const std::string b2 = key_on(7001, 3, 1);
  const std::vector<RedisCommand> round = {{"GET", a}, {"GET", b}, {"GET", b2}};
  RoutedWrite w = learn(c, round, 3);
  std::vector<std::string> log;
  bool moved_sent = false;
  for (;;) {
    ASSERT_TRUE(w.node.has_value());
    const std::string auth = w.new_connection ? kAuthOk : "";
    std::string reply;
    if (w.node->port == 7001 && !moved_sent) {
      // b's slot moved to 7002 (a reshard); b2's did not: b2 is answered here.
      ASSERT_EQ(count_gets(w.bytes), 2u);
      moved_sent = true;
      reply = "-MOVED " + std::to_string(cluster_key_slot(b)) + " 127.0.0.1:7002\r\n" +
              encode_reply(S(b2));
    } else {
      reply = answer_gets(w.bytes);
    }
    log.push_back(std::to_string(w.node->port) + ":" + std::to_string(count_gets(w.bytes)));
    RedisTurn t = c.feed(auth + reply);
    if (t == RedisTurn::kDone) break;
    ASSERT_EQ(t, RedisTurn::kWrite) << c.error().message;
    w = c.take_write();
  }
  ASSERT_TRUE(moved_sent);
  EXPECT_EQ(router.stats().moved, 1u);
  // 7000 and 7001 in some order, then b alone at the master the MOVED named.
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log.back(), "7002:1");
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S(a), S(b), S(b2)}));
  // The map learned it: the next round sends b to 7002 at once.
  w = c.begin_spread({{"GET", b}});
  EXPECT_EQ(w.node->port, 7002);
  EXPECT_FALSE(w.new_connection);
}

TEST(RoutedSpread, AskSendsAskingWithTheAskedCommandsOnlyMapUnchanged) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string a = key_on(7000, 3);
  const std::string b = key_on(7001, 3);
  RoutedWrite w = learn(c, {{"GET", a}, {"GET", b}}, 3);
  bool asked = false;
  for (;;) {
    const std::string auth = w.new_connection ? kAuthOk : "";
    std::string reply;
    if (w.node->port == 7001 && !asked) {
      asked = true;
      reply = "-ASK " + std::to_string(cluster_key_slot(b)) + " 127.0.0.1:7002\r\n";
    } else if (w.node->port == 7002) {
      EXPECT_EQ(w.bytes, encode_command({"AUTH", "quiver-edge", "pw"}) +
                             encode_command({"ASKING"}) + encode_command({"GET", b}));
      reply = kAuthOk + encode_reply(S(b));
    } else {
      reply = answer_gets(w.bytes);
    }
    RedisTurn t = c.feed(auth + reply);
    if (t == RedisTurn::kDone) break;
    ASSERT_EQ(t, RedisTurn::kWrite) << c.error().message;
    w = c.take_write();
  }
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S(a), S(b)}));
  EXPECT_EQ(router.stats().ask, 1u);
  EXPECT_EQ(c.begin_spread({{"GET", b}}).node->port, 7001);
}

// Workers let a request hold six sockets: a round over eight masters never has more open; the
// connections past the cap are closed (least recently used first) before the next node's opens.
TEST(RoutedSpread, ARoundOverEightNodesNeverHoldsMoreThanSixSockets) {
  constexpr int kNodes = 8;
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  std::vector<RedisCommand> round;
  for (int k = 0; k < kNodes; ++k) round.push_back({"GET", key_on(7000 + k, kNodes)});
  RoutedWrite w = learn(c, round, kNodes);
  std::set<std::string> open = {"127.0.0.1:7000"};  // the seed's, from the map read
  std::size_t most = open.size();
  int writes = 0;
  for (;;) {
    for (const std::string& gone : w.close) EXPECT_EQ(open.erase(gone), 1u) << gone;
    if (w.new_connection) open.insert(w.node->address());
    most = std::max(most, open.size());
    ++writes;
    RedisTurn t = c.feed((w.new_connection ? kAuthOk : "") + answer_gets(w.bytes));
    if (t == RedisTurn::kDone) break;
    ASSERT_EQ(t, RedisTurn::kWrite) << c.error().message;
    w = c.take_write();
  }
  EXPECT_EQ(writes, kNodes);
  EXPECT_EQ(most, kMaxNodesPerRequest);
  std::vector<RespValue> replies = c.take_replies();
  ASSERT_EQ(replies.size(), round.size());
  for (std::size_t i = 0; i < round.size(); ++i) EXPECT_EQ(replies[i], S(round[i][1]));
}

TEST(RoutedSpread, ACommandWhoseKeysSpanSlotsIsRefusedBeforeAnythingIsSent) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  RoutedWrite w = learn(c, {{"GET", key_on(7000, 3)}}, 3);
  EXPECT_FALSE(w.new_connection) << "the seed's connection, which read the map";
  ASSERT_EQ(c.feed(encode_reply(S("x"))), RedisTurn::kDone);
  c.take_replies();
  c.begin_spread({{"MGET", key_on(7000, 3), key_on(7001, 3)}});
  EXPECT_FALSE(c.in_round());
  EXPECT_NE(c.error().message.find("CROSSSLOT"), std::string::npos) << c.error().message;
}

// A slot split by a reshard (tests/edge/cluster_v2.mjs saw it on a real cluster): a command naming
// several keys of it, one of them absent (a connection's read script always names its lease), is
// answered ASK by the source and TRYAGAIN by the importing node after ASKING, for as long as the
// slot is split. The round follows each ASK with ASKING + the command, backs off after each
// TRYAGAIN, and ends as a store failure when the budget is spent: never a reply handed out as the
// command's, whatever the other node answered.
TEST(RoutedSpread, ASplitSlotAskedThenTryAgainForeverEndsTheRoundAsAStoreFailure) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string version = key_on(7001, 3);
  const std::string lease = version.substr(0, version.rfind(':')) + ":lease";
  ASSERT_EQ(cluster_key_slot(lease), cluster_key_slot(version));
  const std::string other = key_on(7000, 3);
  const RedisCommand split = {"MGET", version, lease};
  RoutedWrite w = learn(c, {split, {"GET", other}}, 3);
  const std::string ask =
      "-ASK " + std::to_string(cluster_key_slot(version)) + " 127.0.0.1:7002\r\n";
  int at_source = 0;
  int asked = 0;
  int64_t waited = 0;
  RedisTurn t;
  for (;;) {
    ASSERT_TRUE(w.node.has_value());
    waited += w.delay_ms;
    const std::string auth = w.new_connection ? kAuthOk : "";
    std::string reply;
    if (w.node->port == 7001) {
      ++at_source;
      EXPECT_NE(w.bytes.find(encode_command(split)), std::string::npos);
      reply = ask;
    } else if (w.node->port == 7002) {
      ++asked;
      EXPECT_NE(w.bytes.find(encode_command({"ASKING"}) + encode_command(split)), std::string::npos)
          << "ASKING, then the asked command";
      reply = kAuthOk + "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
    } else {
      reply = answer_gets(w.bytes);
    }
    t = c.feed(auth + reply);
    if (t != RedisTurn::kWrite) break;
    w = c.take_write();
  }
  EXPECT_EQ(t, RedisTurn::kFailed);
  EXPECT_FALSE(c.in_round());
  EXPECT_EQ(c.error().code, ErrorCode::kStoreUnavailable) << c.error().message;
  EXPECT_GE(asked, 1);
  EXPECT_LE(at_source + asked, ClusterRetryPolicy{}.max_attempts) << "the attempt budget bounds it";
  EXPECT_GT(waited, 0) << "TRYAGAIN backs off";
  EXPECT_EQ(router.stats().ask, static_cast<uint64_t>(at_source));
  // The map still names the source: the slot was never said to have moved.
  EXPECT_EQ(c.begin_spread({{"GET", version}}).node->port, 7001);
}

// The same split, ended by SETSLOT NODE within the budget: the source answers MOVED, the map
// learns it, and the command is answered by the new owner.
TEST(RoutedSpread, ASplitSlotThatMovesWithinTheBudgetIsFollowedThroughMoved) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string version = key_on(7001, 3);
  const std::string lease = version.substr(0, version.rfind(':')) + ":lease";
  const std::string slot = std::to_string(cluster_key_slot(version));
  const RedisCommand split = {"MGET", version, lease};
  RoutedWrite w = learn(c, {split}, 3);
  int at_source = 0;
  bool tried_again = false;
  for (;;) {
    const std::string auth = w.new_connection ? kAuthOk : "";
    std::string reply;
    if (w.node->port == 7001) {
      // Split (ASK) the first time; moved (MOVED) after the importing node's TRYAGAIN.
      reply = (at_source++ == 0 ? "-ASK " : "-MOVED ") + slot + " 127.0.0.1:7002\r\n";
    } else if (w.node->port == 7002 && !tried_again) {
      tried_again = true;
      reply = kAuthOk + "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
    } else {
      ASSERT_EQ(w.node->port, 7002);
      EXPECT_EQ(w.bytes, encode_command(split)) << "after MOVED: no ASKING";
      reply = encode_reply(A({S("7"), RespValue::nil()}));
    }
    RedisTurn t = c.feed(auth + reply);
    if (t == RedisTurn::kDone) break;
    ASSERT_EQ(t, RedisTurn::kWrite) << c.error().message;
    w = c.take_write();
  }
  EXPECT_EQ(at_source, 2);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{A({S("7"), RespValue::nil()})}));
  EXPECT_EQ(router.stats().ask, 1u);
  EXPECT_EQ(router.stats().moved, 1u);
  EXPECT_EQ(c.begin_spread({{"GET", version}}).node->port, 7002);
}

}  // namespace
}  // namespace quiver
