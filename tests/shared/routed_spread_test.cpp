// Spread rounds (shared/routed_conversation.h begin_spread): key layout v2's rounds, each command
// routed by its own key's slot, grouped per node, at most kMaxNodesPerRequest sockets.
#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/edge_wire.h"
#include "shared/json.h"
#include "shared/layout.h"
#include "shared/redis_cluster.h"
#include "shared/routed_conversation.h"
#include "shared/schema_assets.h"
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
  RoutedWrite w = c.begin_spread(round, ScriptForm::kBySha, RoundAccess::kReplicaRead);
  EXPECT_EQ(w.bytes,
            encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command({"CLUSTER", "SHARDS"}));
  EXPECT_EQ(c.feed(kAuthOk + encode_reply(even_shards(n))), RedisTurn::kWrite);
  return c.take_write();
}

// The pipelines of a write: its parts, or the one node of an ordinary write.
std::vector<RoutedPart> parts_of(const RoutedWrite& w) {
  if (!w.parts.empty()) return w.parts;
  EXPECT_TRUE(w.node.has_value());
  return {RoutedPart{w.bytes, w.new_connection, w.node.value_or(ClusterNode{})}};
}

// A node's answer to the bytes written to it (AUTH's +OK on a new connection is added by serve).
using Reply = std::function<std::string(const ClusterNode&, const std::string&)>;

// Serves one write as the host does: an ordinary write by feed(); a write in parts by
// feed_part(), the last part first (replies arrive in any order): every part but the last fed
// waits, the last settles the write.
RedisTurn serve(RoutedConversation& c, const RoutedWrite& w, const Reply& reply) {
  if (w.parts.empty()) {
    return c.feed((w.new_connection ? kAuthOk : "") + reply(*w.node, w.bytes));
  }
  EXPECT_GE(w.parts.size(), 2u) << "a write to one node is an ordinary write";
  EXPECT_EQ(c.parts(), w.parts.size());
  for (std::size_t k = w.parts.size(); k-- > 0;) {
    const RoutedPart& p = w.parts[k];
    PartTurn t = c.feed_part(k, (p.new_connection ? kAuthOk : "") + reply(p.node, p.bytes));
    EXPECT_EQ(t, k > 0 ? PartTurn::kWait : PartTurn::kRound) << part_turn_name(t);
  }
  return c.round_turn();
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

TEST(RoutedSpread, EachCommandGoesToItsSlotsNodeAllNodesInOneWriteRepliesInOrder) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  // Interleaved over three masters: two commands for 7001, one each for 7000 and 7002.
  const std::vector<RedisCommand> round = {{"GET", key_on(7001, 3)},
                                           {"GET", key_on(7000, 3)},
                                           {"GET", key_on(7001, 3, 1)},
                                           {"GET", key_on(7002, 3)}};
  RoutedWrite w = learn(c, round, 3);
  // One write, one part per node: the round costs one round trip, not three.
  ASSERT_EQ(w.parts.size(), 3u);
  EXPECT_FALSE(w.node.has_value());
  std::set<int> nodes;
  for (const RoutedPart& p : w.parts) {
    EXPECT_TRUE(nodes.insert(p.node.port).second) << "one pipeline per node";
    // The seed's connection read the map; the others are new.
    EXPECT_EQ(p.new_connection, p.node.port != 7000) << p.node.port;
    // Every command of this part is its node's.
    for (const RedisCommand& cmd : round) {
      const bool here = p.bytes.find(encode_command(cmd)) != std::string::npos;
      EXPECT_EQ(here, port_of_slot(cluster_key_slot(cmd[1]), 3) == p.node.port) << cmd[1];
    }
  }
  ASSERT_EQ(serve(c, w, [](const ClusterNode&, const std::string& b) { return answer_gets(b); }),
            RedisTurn::kDone);
  std::vector<RespValue> replies = c.take_replies();
  ASSERT_EQ(replies.size(), round.size());
  for (std::size_t i = 0; i < round.size(); ++i) EXPECT_EQ(replies[i], S(round[i][1]));
}

// The host reads every part's socket at once: bytes arrive by part, in pieces, interleaved.
TEST(RoutedSpread, PartsRepliesArriveInAnyOrderAndInPieces) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::vector<RedisCommand> round = {
      {"GET", key_on(7000, 3)}, {"GET", key_on(7001, 3)}, {"GET", key_on(7002, 3)}};
  RoutedWrite w = learn(c, round, 3);
  ASSERT_EQ(w.parts.size(), 3u);
  std::vector<std::string> answer;
  for (const RoutedPart& p : w.parts)
    answer.push_back((p.new_connection ? kAuthOk : "") + answer_gets(p.bytes));
  const std::size_t half = answer[2].size() / 2;
  EXPECT_EQ(c.feed_part(2, answer[2].substr(0, half)), PartTurn::kRead);
  EXPECT_EQ(c.feed_part(0, answer[0]), PartTurn::kWait);
  EXPECT_EQ(c.feed_part(2, answer[2].substr(half)), PartTurn::kWait);
  // A settled part fed again is the host's error: the round fails, never a reply made up.
  RoutedConversation twice({}, kCreds, &router);
  RoutedWrite w2 = twice.begin_spread(round, ScriptForm::kBySha, RoundAccess::kReplicaRead);
  ASSERT_EQ(w2.parts.size(), 3u);
  ASSERT_EQ(twice.feed_part(0, kAuthOk + answer_gets(w2.parts[0].bytes)), PartTurn::kWait);
  EXPECT_EQ(twice.feed_part(0, "$1\r\nx\r\n"), PartTurn::kRound);
  EXPECT_EQ(twice.round_turn(), RedisTurn::kFailed);
  EXPECT_FALSE(twice.in_round());
  // The first conversation is unaffected: its last part settles the write.
  ASSERT_EQ(c.feed_part(1, answer[1]), PartTurn::kRound);
  ASSERT_EQ(c.round_turn(), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(),
            (std::vector<RespValue>{S(round[0][1]), S(round[1][1]), S(round[2][1])}));
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
  const Reply reply = [&](const ClusterNode& node, const std::string& bytes) {
    log.push_back(std::to_string(node.port) + ":" + std::to_string(count_gets(bytes)));
    if (node.port != 7001 || moved_sent) return answer_gets(bytes);
    // b's slot moved to 7002 (a reshard); b2's did not: b2 is answered here.
    EXPECT_EQ(count_gets(bytes), 2u);
    moved_sent = true;
    return "-MOVED " + std::to_string(cluster_key_slot(b)) + " 127.0.0.1:7002\r\n" +
           encode_reply(S(b2));
  };
  int writes = 0;
  for (RedisTurn t = RedisTurn::kWrite; t != RedisTurn::kDone; w = c.take_write()) {
    ++writes;
    t = serve(c, w, reply);
    ASSERT_NE(t, RedisTurn::kFailed) << c.error().message;
  }
  ASSERT_TRUE(moved_sent);
  EXPECT_EQ(router.stats().moved, 1u);
  // 7000 and 7001 in one write, then b alone at the master the MOVED named.
  EXPECT_EQ(writes, 2);
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
  const Reply reply = [&](const ClusterNode& node, const std::string& bytes) -> std::string {
    if (node.port == 7001 && !asked) {
      asked = true;
      return "-ASK " + std::to_string(cluster_key_slot(b)) + " 127.0.0.1:7002\r\n";
    }
    if (node.port == 7002) {
      EXPECT_EQ(bytes, encode_command({"AUTH", "quiver-edge", "pw"}) + encode_command({"ASKING"}) +
                           encode_command({"GET", b}));
      return kAuthOk + encode_reply(S(b));
    }
    return answer_gets(bytes);
  };
  for (RedisTurn t = RedisTurn::kWrite; t != RedisTurn::kDone; w = c.take_write()) {
    t = serve(c, w, reply);
    ASSERT_NE(t, RedisTurn::kFailed) << c.error().message;
  }
  EXPECT_TRUE(asked);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S(a), S(b)}));
  EXPECT_EQ(router.stats().ask, 1u);
  EXPECT_EQ(c.begin_spread({{"GET", b}}).node->port, 7001);
}

// TRYAGAIN on one node (its slot mid-migration): only that node's command waits the backoff.
TEST(RoutedSpread, TryAgainOnOnePartBacksOffThatCommandOnly) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string a = key_on(7000, 3);
  const std::string b = key_on(7001, 3);
  RoutedWrite w = learn(c, {{"GET", a}, {"GET", b}}, 3);
  ASSERT_EQ(w.parts.size(), 2u);
  EXPECT_EQ(w.delay_ms, 0);
  bool tried = false;
  ASSERT_EQ(serve(c, w,
                  [&](const ClusterNode& node, const std::string& bytes) -> std::string {
                    if (node.port != 7001) return answer_gets(bytes);
                    tried = true;
                    return "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
                  }),
            RedisTurn::kWrite);
  ASSERT_TRUE(tried);
  w = c.take_write();
  ASSERT_TRUE(w.parts.empty());
  EXPECT_EQ(w.node->port, 7001);
  EXPECT_GT(w.delay_ms, 0);
  EXPECT_EQ(w.bytes, encode_command({"GET", b}));
  ASSERT_EQ(c.feed(encode_reply(S(b))), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S(a), S(b)}));
  EXPECT_EQ(router.stats().retries, 1u);
}

// A script a node lacks: that part alone sends it again as EVAL, on its own connection.
TEST(RoutedSpread, NoScriptOnOnePartIsAnsweredOnThatPartsConnection) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string script(schema_asset("lua/discovery_conn_read.lua"));
  const RedisCommand s0{"EVAL", script, "1", key_on(7000, 3)};
  const RedisCommand s1{"EVAL", script, "1", key_on(7001, 3)};
  RoutedWrite w = learn(c, {s0, s1}, 3);
  ASSERT_EQ(w.parts.size(), 2u);
  const std::size_t at1 = w.parts[0].node.port == 7001 ? 0 : 1;
  EXPECT_NE(w.parts[at1].bytes.find("EVALSHA"), std::string::npos);
  ASSERT_EQ(c.feed_part(at1, kAuthOk + "-NOSCRIPT No matching script.\r\n"), PartTurn::kWrite);
  RoutedWrite again = c.take_write();
  EXPECT_EQ(again.node->port, 7001);
  EXPECT_FALSE(again.new_connection);
  EXPECT_NE(again.bytes.find(script), std::string::npos);
  ASSERT_EQ(c.feed_part(at1, encode_reply(S(s1[3]))), PartTurn::kWait);
  const std::size_t at0 = 1 - at1;
  ASSERT_EQ(c.feed_part(at0, encode_reply(S(s0[3]))), PartTurn::kRound);
  ASSERT_EQ(c.round_turn(), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S(s0[3]), S(s1[3])}));
}

// One part's connection failed before anything was written: the others' replies are kept, and
// only that part's commands go again, after a map refresh (a failover may be under way).
TEST(RoutedSpread, OnePartThatCouldNotConnectIsSentAgainTheOthersAreKept) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string a = key_on(7000, 3);
  const std::string b = key_on(7001, 3);
  const std::string d = key_on(7002, 3);
  RoutedWrite w = learn(c, {{"GET", a}, {"GET", b}, {"GET", d}}, 3);
  ASSERT_EQ(w.parts.size(), 3u);
  std::size_t failed = 0;
  for (std::size_t k = 0; k < w.parts.size(); ++k) {
    if (w.parts[k].node.port == 7001) failed = k;
  }
  for (std::size_t k = 0; k < w.parts.size(); ++k) {
    if (k == failed) continue;
    const RoutedPart& p = w.parts[k];
    EXPECT_EQ(c.feed_part(k, (p.new_connection ? kAuthOk : "") + answer_gets(p.bytes)),
              PartTurn::kWait);
  }
  ASSERT_EQ(c.connection_failed_part(failed, "connect: Connection refused"), PartTurn::kRound);
  ASSERT_EQ(c.round_turn(), RedisTurn::kWrite) << c.error().message;
  // The map first (after a backoff), then b alone at its node.
  RoutedWrite refresh = c.take_write();
  EXPECT_GT(refresh.delay_ms, 0);
  EXPECT_NE(refresh.bytes.find("CLUSTER"), std::string::npos);
  ASSERT_EQ(c.feed((refresh.new_connection ? kAuthOk : "") + encode_reply(even_shards(3))),
            RedisTurn::kWrite);
  RoutedWrite retry = c.take_write();
  ASSERT_TRUE(retry.parts.empty());
  EXPECT_EQ(retry.node->port, 7001);
  EXPECT_EQ(count_gets(retry.bytes), 1u);
  ASSERT_EQ(c.feed((retry.new_connection ? kAuthOk : "") + answer_gets(retry.bytes)),
            RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S(a), S(b), S(d)}));
}

// A part that timed out fails the round once the other parts settled (waiting again would hold
// the request for attempts × the timeout); the isolate's next round asks for the map first.
TEST(RoutedSpread, OnePartThatTimedOutFailsTheRoundOnceTheOthersSettled) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  RoutedWrite w = learn(c, {{"GET", key_on(7000, 3)}, {"GET", key_on(7001, 3)}}, 3);
  ASSERT_EQ(w.parts.size(), 2u);
  ASSERT_EQ(c.connection_failed_part(1, "read timed out after 2000 ms"), PartTurn::kWait);
  EXPECT_TRUE(c.in_round());
  const RoutedPart& p = w.parts[0];
  ASSERT_EQ(c.feed_part(0, (p.new_connection ? kAuthOk : "") + answer_gets(p.bytes)),
            PartTurn::kRound);
  ASSERT_EQ(c.round_turn(), RedisTurn::kFailed);
  EXPECT_EQ(c.error().code, ErrorCode::kTimeout) << c.error().message;
  EXPECT_FALSE(c.in_round());
  c.drop();  // as the edge does after a store failure
  RoutedWrite next = c.begin_spread({{"GET", key_on(7000, 3)}});
  EXPECT_NE(next.bytes.find("CLUSTER"), std::string::npos) << "the map first";
}

// A write that may have run on a node whose connection then failed is not sent again, even when
// the other parts answered.
TEST(RoutedSpread, APartWhoseWriteMayHaveRunIsNotSentAgain) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  RoutedWrite w = c.begin_spread({{"SET", key_on(7000, 3), "x"}, {"SET", key_on(7001, 3), "y"}});
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(even_shards(3))), RedisTurn::kWrite);
  w = c.take_write();
  ASSERT_EQ(w.parts.size(), 2u);
  ASSERT_EQ(c.connection_failed_part(0, "Network connection lost."), PartTurn::kWait);
  const RoutedPart& p = w.parts[1];
  ASSERT_EQ(c.feed_part(1, (p.new_connection ? kAuthOk : "") + kAuthOk), PartTurn::kRound);
  ASSERT_EQ(c.round_turn(), RedisTurn::kFailed);
  EXPECT_NE(c.error().message.find("not sent again"), std::string::npos) << c.error().message;
  // The host failing a write in parts as a whole fails every part still in flight.
  RoutedConversation whole({}, kCreds, &router);
  w = whole.begin_spread({{"GET", key_on(7000, 3)}, {"GET", key_on(7001, 3)}}, ScriptForm::kBySha,
                         RoundAccess::kReplicaRead);
  ASSERT_EQ(w.parts.size(), 2u);
  EXPECT_EQ(whole.feed("$1\r\nx\r\n"), RedisTurn::kFailed) << "bytes without their part";
  whole.drop();
  w = whole.begin_spread({{"GET", key_on(7000, 3)}, {"GET", key_on(7001, 3)}}, ScriptForm::kBySha,
                         RoundAccess::kReplicaRead);
  ASSERT_EQ(w.parts.size(), 2u);
  EXPECT_EQ(whole.connection_failed("read timed out after 2000 ms"), RedisTurn::kFailed);
  EXPECT_EQ(whole.error().code, ErrorCode::kTimeout);
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
  for (RedisTurn t = RedisTurn::kWrite; t != RedisTurn::kDone; w = c.take_write()) {
    for (const std::string& gone : w.close) EXPECT_EQ(open.erase(gone), 1u) << gone;
    for (const RoutedPart& p : parts_of(w)) {
      if (p.new_connection) open.insert(p.node.address());
      EXPECT_EQ(open.count(p.node.address()), 1u) << "a part on a connection that was closed";
    }
    most = std::max(most, open.size());
    ++writes;
    t = serve(c, w, [](const ClusterNode&, const std::string& b) { return answer_gets(b); });
    ASSERT_NE(t, RedisTurn::kFailed) << c.error().message;
  }
  // Six nodes in the first write, the two past the cap in the second.
  EXPECT_EQ(writes, 2);
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
// command's. (Alone in its round: a round over two nodes is one write in parts, tested apart.)
TEST(RoutedSpread, ASplitSlotAskedThenTryAgainForeverEndsTheRoundAsAStoreFailure) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string version = key_on(7001, 3);
  const std::string lease = version.substr(0, version.rfind(':')) + ":lease";
  ASSERT_EQ(cluster_key_slot(lease), cluster_key_slot(version));
  const RedisCommand split = {"MGET", version, lease};
  RoutedWrite w = learn(c, {split}, 3);
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
      ADD_FAILURE() << "a write to a node the slot never was on: " << w.node->port;
      break;
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

// The same split, the command flagged hand_back_split (a connection's read script: its reader
// reads the connection key by key instead, SpreadDiscoveryRead): the ASK is followed once, and the
// importing node's TRYAGAIN is the command's reply at once, without a backoff.
TEST(RoutedSpread, AFlaggedCommandOnASplitSlotGetsTheImportingNodesTryAgainAfterOneAsk) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string version = key_on(7001, 3);
  const std::string lease = version.substr(0, version.rfind(':')) + ":lease";
  const RedisCommand split = {"MGET", version, lease};
  RoutedWrite w = c.begin_spread({split}, ScriptForm::kBySha, RoundAccess::kReplicaRead, {true});
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(even_shards(3))), RedisTurn::kWrite);
  w = c.take_write();
  ASSERT_EQ(w.node->port, 7001);
  ASSERT_EQ(
      c.feed(kAuthOk + "-ASK " + std::to_string(cluster_key_slot(version)) + " 127.0.0.1:7002\r\n"),
      RedisTurn::kWrite);
  w = c.take_write();
  ASSERT_EQ(w.node->port, 7002);
  EXPECT_EQ(w.delay_ms, 0);
  EXPECT_NE(w.bytes.find(encode_command({"ASKING"}) + encode_command(split)), std::string::npos);
  const std::string tryagain = "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
  ASSERT_EQ(c.feed(kAuthOk + kAuthOk + tryagain), RedisTurn::kDone) << c.error().message;
  std::vector<RespValue> replies = c.take_replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_TRUE(cluster_reply_is_split_slot(replies[0])) << replies[0].debug_string();
  EXPECT_EQ(router.stats().ask, 1u);
  EXPECT_EQ(router.stats().split, 1u);
  EXPECT_EQ(router.stats().retries, 0u) << "no backoff";
}

// A TRYAGAIN at the source (some of the command's keys moved, some not) is handed back at once to
// the flagged command; the round's other commands, on another node, are answered as before; an
// unflagged command on the split slot still backs off.
TEST(RoutedSpread, AFlaggedCommandAnsweredTryAgainAtTheSourceGetsItAtOnceTheOthersAsBefore) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  const std::string version = key_on(7001, 3);
  const std::string lease = version.substr(0, version.rfind(':')) + ":lease";
  const std::string other = key_on(7000, 3);
  const RedisCommand flagged = {"MGET", version, lease};
  const RedisCommand plain = {"MGET", lease, version};
  const RedisCommand get = {"GET", other};
  RoutedWrite w = c.begin_spread({flagged, get, plain}, ScriptForm::kBySha,
                                 RoundAccess::kReplicaRead, {true, false, false});
  ASSERT_EQ(c.feed(kAuthOk + encode_reply(even_shards(3))), RedisTurn::kWrite);
  w = c.take_write();
  ASSERT_EQ(w.parts.size(), 2u);
  const std::string tryagain = "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
  RedisTurn t = serve(c, w, [&](const ClusterNode& node, const std::string& bytes) -> std::string {
    if (node.port == 7001) return tryagain + tryagain;  // flagged, then plain
    EXPECT_NE(bytes.find(encode_command(get)), std::string::npos);
    return encode_reply(S("v"));
  });
  ASSERT_EQ(t, RedisTurn::kWrite) << "the unflagged command backs off";
  w = c.take_write();
  EXPECT_GT(w.delay_ms, 0);
  ASSERT_EQ(w.node->port, 7001);
  EXPECT_EQ(w.bytes, encode_command(plain)) << "the plain command alone, again";
  ASSERT_EQ(c.feed(encode_reply(A({S("7"), RespValue::nil()}))), RedisTurn::kDone);
  std::vector<RespValue> replies = c.take_replies();
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_TRUE(cluster_reply_is_split_slot(replies[0]));
  EXPECT_EQ(replies[1], S("v"));
  EXPECT_EQ(replies[2], A({S("7"), RespValue::nil()}));
  EXPECT_EQ(router.stats().split, 1u);
}

TEST(RoutedSpread, SplitFlagsThatAreNotOnePerCommandAreRefused) {
  ClusterRouter router(seeded(), 0);
  RoutedConversation c({}, kCreds, &router);
  RoutedWrite w = c.begin_spread({{"GET", key_on(7000, 3)}, {"GET", key_on(7001, 3)}},
                                 ScriptForm::kBySha, RoundAccess::kReplicaRead, {true});
  EXPECT_FALSE(c.in_round());
  EXPECT_TRUE(w.bytes.empty());
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument) << c.error().message;
}

// The host's side of a write in parts (shared/edge_wire.h): one kRedis step, every part's node,
// connection and length in its meta, their bytes one after the other as the payload; the steps
// that answer a part name it; an ordinary step is what it was, byte for byte.
TEST(RoutedSpread, AStepInPartsOnTheWireNamesEachPartAndCarriesTheirBytesInOrder) {
  auto split = [](const std::string& wire) {
    auto u32 = [&](std::size_t at) {
      uint32_t v = 0;
      for (int i = 0; i < 4; ++i)
        v |= uint32_t{static_cast<unsigned char>(wire[at + i])} << (8 * i);
      return v;
    };
    const uint32_t meta = u32(0);
    EXPECT_EQ(wire.size(), 8 + meta + u32(4));
    return std::make_pair(wire.substr(8, meta), wire.substr(8 + meta));
  };
  EdgeStep s;
  s.handle = 3;
  s.action = EdgeAction::kRedis;
  s.redis_delay_ms = 25;
  s.redis_close = {"127.0.0.1:7005"};
  s.redis_parts = {{"*1\r\n$4\r\nPING\r\n", true, "127.0.0.1", 7000},
                   {"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", false, "::1", 7001}};
  auto [meta, payload] = split(edge_step_to_wire(s));
  EXPECT_EQ(meta, R"({"handle":3,"action":"redis","new_connection":false,"parts":[)"
                  R"({"node":{"host":"127.0.0.1","port":7000},"new_connection":true,"bytes":14},)"
                  R"({"node":{"host":"::1","port":7001},"new_connection":false,"bytes":20}],)"
                  R"("delay_ms":25,"close":["127.0.0.1:7005"]})");
  EXPECT_EQ(payload, s.redis_parts[0].bytes + s.redis_parts[1].bytes);

  EdgeStep wait;
  wait.handle = 3;
  wait.action = EdgeAction::kWait;
  wait.redis_part = 1;
  EXPECT_EQ(split(edge_step_to_wire(wait)).first, R"({"handle":3,"action":"wait","part":1})");
  EdgeStep read;
  read.handle = 3;
  read.action = EdgeAction::kRead;
  read.redis_part = 0;
  EXPECT_EQ(split(edge_step_to_wire(read)).first, R"({"handle":3,"action":"read","part":0})");

  // A write to one node: no parts, no part.
  EdgeStep one;
  one.handle = 3;
  one.action = EdgeAction::kRedis;
  one.redis_bytes = "*1\r\n$4\r\nPING\r\n";
  one.redis_host = "127.0.0.1";
  one.redis_port = 7000;
  auto [one_meta, one_payload] = split(edge_step_to_wire(one));
  EXPECT_EQ(one_meta, R"({"handle":3,"action":"redis","new_connection":false,)"
                      R"("node":{"host":"127.0.0.1","port":7000}})");
  EXPECT_EQ(one_payload, one.redis_bytes);
}

// ---- through the edge: EdgeService on a cluster, a v2 read whose round 1 goes out in parts ----

constexpr int64_t kEdgeNow = 1'800'000'000'000;
constexpr char kEdgeKid[] = "k1";
constexpr char kEdgeSecret[] = "routed-spread-edge-secret-0123456789abcd";

std::unique_ptr<EdgeService> clustered_edge() {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kEdgeKid, kEdgeSecret}}).dump();
  env["REDIS_PASSWORD"] = "redis-pw";
  env["REDIS_CLUSTER"] = "127.0.0.1:7000";
  Result<EdgeSettings> settings = edge_settings_from_env(env.dump());
  EXPECT_TRUE(settings.ok()) << settings.error().message;
  return std::make_unique<EdgeService>(std::move(settings));
}

HttpRequest alices_manifests() {
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/manifests";
  r.headers.emplace_back(
      "authorization",
      "Bearer " + *mint_caller_token("alice", kEdgeSecret, kEdgeKid, kEdgeNow, 3'600'000));
  return r;
}

// Two masters: 7001 serves alice's slot alone, 7000 every other slot (the namespace's among them).
std::string alice_apart_shards() {
  const int64_t m = cluster_key_slot("{default:m:alice}");
  EXPECT_NE(m, cluster_key_slot("{default}"));
  std::vector<RespValue> rest;
  if (m > 0) {
    rest.push_back(I(0));
    rest.push_back(I(m - 1));
  }
  if (m < 16383) {
    rest.push_back(I(m + 1));
    rest.push_back(I(16383));
  }
  return encode_reply(A({A({S("slots"), A(std::move(rest)), S("nodes"), A({master(7000)})}),
                         A({S("slots"), A({I(m), I(m)}), S("nodes"), A({master(7001)})})}));
}

// The request up to round 1 of the read in rounds: the map (at the seed), the v1 script naming
// v2:ready (at 7000), then round 1 in two parts, the namespace's slot (7000) and alice's (7001).
EdgeStep to_round_one(EdgeService& edge, std::size_t* at_ns, std::size_t* at_member) {
  EdgeStep s = edge.begin(alices_manifests(), kEdgeNow, std::string(48, '\x5a'));
  EXPECT_EQ(s.redis_port, 7000);
  s = edge.feed(s.handle, kAuthOk + alice_apart_shards(), kEdgeNow);
  EXPECT_EQ(s.redis_port, 7000);
  EXPECT_TRUE(s.redis_parts.empty());
  s = edge.feed(
      s.handle,
      encode_reply(A({S(kLayoutUnknownTag), S("v2:ready:7"), S("quiver:{default}:layout")})),
      kEdgeNow);
  EXPECT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_EQ(s.redis_parts.size(), 2u) << "round 1 spans two nodes: one step, both parts";
  *at_ns = *at_member = 0;
  for (std::size_t k = 0; k < s.redis_parts.size(); ++k) {
    (s.redis_parts[k].port == 7000 ? *at_ns : *at_member) = k;
  }
  EXPECT_FALSE(s.redis_parts[*at_ns].new_connection);
  EXPECT_TRUE(s.redis_parts[*at_member].new_connection);
  EXPECT_NE(s.redis_parts[*at_member].bytes.find("{default:m:alice}:grants"), std::string::npos);
  return s;
}

const std::string kRoundOneAtNs = encode_reply(S("v2:ready:7")) + encode_reply(S("ready:1"));
const std::string kRoundOneAtMember = encode_reply(S("3")) + encode_reply(A({}));

TEST(RoutedSpread, TheEdgeSendsARoundsPartsInOneStepAndAnswersFromTheLastPartSettled) {
  auto edge = clustered_edge();
  std::size_t ns = 0, member = 0;
  EdgeStep s = to_round_one(*edge, &ns, &member);
  const uint32_t handle = s.handle;
  // The member's node answers first, in two pieces; the namespace's node last.
  const std::string at_member = kAuthOk + kRoundOneAtMember;
  s = edge->feed_part(handle, member, at_member.substr(0, 7), kEdgeNow);
  EXPECT_EQ(s.action, EdgeAction::kRead);
  EXPECT_EQ(s.redis_part, static_cast<int>(member));
  s = edge->feed_part(handle, member, at_member.substr(7), kEdgeNow);
  EXPECT_EQ(s.action, EdgeAction::kWait);
  EXPECT_EQ(s.redis_part, static_cast<int>(member));
  s = edge->feed_part(handle, ns, kRoundOneAtNs, kEdgeNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.redis_part, -1);
  EXPECT_EQ(s.response.status, 200) << s.response.body;
  EXPECT_NE(s.response.body.find("\"connections\":[]"), std::string::npos) << s.response.body;
  edge->end(handle);
}

TEST(RoutedSpread, AtTheEdgeOnePartTimingOutIsA503OnceTheOtherSettled) {
  auto edge = clustered_edge();
  std::size_t ns = 0, member = 0;
  EdgeStep s = to_round_one(*edge, &ns, &member);
  const uint32_t handle = s.handle;
  s = edge->fail_part(handle, member, "read timed out after 2000 ms", kEdgeNow);
  EXPECT_EQ(s.action, EdgeAction::kWait);
  EXPECT_EQ(s.redis_part, static_cast<int>(member));
  s = edge->feed_part(handle, ns, kRoundOneAtNs, kEdgeNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  EXPECT_NE(s.response.body.find("STORE_UNAVAILABLE"), std::string::npos) << s.response.body;
  // Bytes for a part of a round that is over are the host's error, never data.
  EdgeStep late = edge->feed_part(handle, member, kRoundOneAtMember, kEdgeNow);
  EXPECT_NE(late.action, EdgeAction::kWait);
  EXPECT_EQ(late.redis_part, -1);
  edge->end(handle);
}

TEST(RoutedSpread, AtTheEdgeAPartThatCouldNotConnectIsSentAgainAndTheOtherPartsRepliesKept) {
  auto edge = clustered_edge();
  std::size_t ns = 0, member = 0;
  EdgeStep s = to_round_one(*edge, &ns, &member);
  const uint32_t handle = s.handle;
  s = edge->fail_part(handle, member, "connect: Connection refused", kEdgeNow);
  EXPECT_EQ(s.action, EdgeAction::kWait);
  s = edge->feed_part(handle, ns, kRoundOneAtNs, kEdgeNow);
  // The map first, after a backoff; then alice's two commands alone.
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_TRUE(s.redis_parts.empty());
  EXPECT_GT(s.redis_delay_ms, 0);
  EXPECT_NE(s.redis_bytes.find("CLUSTER"), std::string::npos);
  s = edge->feed(handle, (s.new_connection ? kAuthOk : "") + alice_apart_shards(), kEdgeNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_EQ(s.redis_port, 7001);
  EXPECT_NE(s.redis_bytes.find("{default:m:alice}:grants"), std::string::npos);
  EXPECT_EQ(s.redis_bytes.find("{default}:layout"), std::string::npos) << "answered already";
  s = edge->feed(handle, (s.new_connection ? kAuthOk : "") + kRoundOneAtMember, kEdgeNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 200) << s.response.body;
  edge->end(handle);
}

}  // namespace
}  // namespace quiver
