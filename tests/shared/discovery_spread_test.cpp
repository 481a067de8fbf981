// The v2 discovery read's rounds (shared/discovery_spread.h) without a server: the commands each
// round sends, and what it makes of replies, from the recorded rounds that seed its fuzz target
// (tests/fuzz/seeds/discovery_spread: a byte of query flags, then the replies of every round).
// tests/integration/discovery_spread_test.cpp runs it against a real redis-server.
#include "shared/discovery_spread.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/layout.h"
#include "shared/resp.h"

namespace quiver {
namespace {

const Principal kAlice = *Principal::member("alice");
const RedisKeys kKeys = *RedisKeys::create("fz");

std::vector<RespValue> seed_replies(const std::string& name, SnapshotQuery* q) {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/tests/fuzz/seeds/discovery_spread/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  EXPECT_FALSE(bytes.empty()) << name;
  if (bytes.empty()) return {};
  const unsigned char flags = static_cast<unsigned char>(bytes[0]);
  if (flags & 1) q->only = "b";
  if (flags & 2) q->after = "a";
  q->limit = (flags & 4) ? 1 : 200;
  RespDecoder d;
  EXPECT_TRUE(d.feed(std::string_view(bytes).substr(1)).ok());
  std::vector<RespValue> out;
  for (;;) {
    auto r = d.next();
    EXPECT_TRUE(r.ok());
    if (!r.ok() || !r->has_value()) break;
    out.push_back(std::move(**r));
  }
  return out;
}

// Feeds `replies` round by round; the status of the last round fed.
Status run(SpreadDiscoveryRead& read, const std::vector<RespValue>& replies) {
  std::size_t used = 0;
  while (!read.done()) {
    const std::size_t n = read.commands().size();
    if (replies.size() - used < n) return Error(ErrorCode::kInternal, "the seed ran out");
    Status s = read.feed({replies.begin() + used, replies.begin() + used + n});
    used += n;
    if (!s.ok()) return s;
  }
  EXPECT_EQ(used, replies.size()) << "every reply of the seed used";
  return Status();
}

// Seed `name` read to its end: the snapshot, or the error the read ended with; `rounds` the
// rounds it took.
Result<DiscoverySnapshot> read_seed(const std::string& name, int* rounds = nullptr) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies(name, &q);
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
  if (!read.ok()) return read.error();
  Status s = run(*read, replies);
  if (rounds != nullptr) *rounds = read->round();
  if (!s.ok()) return s.error();
  return read->take_snapshot();
}

TEST(SpreadDiscoveryRead, RefusesWhatTheOneScriptReadRefuses) {
  EXPECT_FALSE(SpreadDiscoveryRead::start(kKeys, Principal::shared()).ok());
  EXPECT_FALSE(SpreadDiscoveryRead::start(kKeys, kAlice, {std::nullopt, "", 0}).ok());
  EXPECT_FALSE(SpreadDiscoveryRead::start(kKeys, kAlice, {std::nullopt, "", 1001}).ok());
  EXPECT_FALSE(SpreadDiscoveryRead::start(kKeys, kAlice, {std::string("a:b"), "", 5}).ok());
  EXPECT_FALSE(
      SpreadDiscoveryRead::start(kKeys, kAlice, {std::nullopt, std::string(129, 'a'), 5}).ok());
}

TEST(SpreadDiscoveryRead, RoundOneReadsTheVersionBeforeTheGrants) {
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice);
  ASSERT_TRUE(read.ok());
  const std::vector<RedisCommand> want = {{"GET", kKeys.layout()},
                                          {"GET", kKeys.namespace_record()},
                                          {"GET", *kKeys.member_version(kAlice)},
                                          {"HGETALL", *kKeys.grants(kAlice)}};
  EXPECT_EQ(read->commands(), want);
  Result<SpreadDiscoveryRead> one =
      SpreadDiscoveryRead::start(kKeys, kAlice, {std::string("b"), "", 5});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->commands().back(), (RedisCommand{"HGET", *kKeys.grants(kAlice), "b"}));
}

TEST(SpreadDiscoveryRead, AFullReadInTwoRounds) {
  int rounds = 0;
  Result<DiscoverySnapshot> read = read_seed("full-read", &rounds);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(rounds, 2);
  const DiscoverySnapshot& s = *read;
  ASSERT_EQ(s.connections.size(), 3u);
  EXPECT_EQ(s.granted_total, 3);
  EXPECT_EQ(s.member_version, "7");
  EXPECT_EQ(s.connection_versions, (std::vector<std::string>{"3", "2", ""}));
  EXPECT_EQ(s.epoch, 0) << "no epoch on layout v2";
  EXPECT_EQ(s.layout_record, "") << "no layout record: layout v1, as the keys are spelled";
  const GrantedConnection& b = s.connections[1];
  ASSERT_TRUE(b.principal.has_value());
  EXPECT_EQ(*b.principal, kAlice);
  EXPECT_TRUE(b.disabled.count("tool:x_b"));
  ASSERT_TRUE(b.manifest.has_value());
  EXPECT_EQ(b.manifest->invalidated_at_ms, 1'790'000'000'005) << "the connection-wide mark applies";
  const GrantedConnection& c = s.connections[2];
  EXPECT_TRUE(c.lease_held);
  ASSERT_TRUE(c.manifest.has_value());
  EXPECT_EQ(c.manifest->invalidated_at_ms, 1'790'000'000'003) << "its own mark";
}

TEST(SpreadDiscoveryRead, AModeChangedBetweenTheRoundsIsReadAgain) {
  int rounds = 0;
  Result<DiscoverySnapshot> read = read_seed("mode-changed", &rounds);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(rounds, 3);
  const DiscoverySnapshot& s = *read;
  ASSERT_EQ(s.connections.size(), 3u);
  ASSERT_TRUE(s.connections[1].principal.has_value());
  EXPECT_TRUE(s.connections[1].principal->is_shared());
  EXPECT_EQ(s.connection_versions[1], "4") << "the version read with the record used";
}

TEST(SpreadDiscoveryRead, OneConnection) {
  Result<DiscoverySnapshot> read = read_seed("only");
  ASSERT_TRUE(read.ok()) << read.error().message;
  const DiscoverySnapshot& s = *read;
  ASSERT_EQ(s.connections.size(), 1u);
  EXPECT_EQ(s.connections[0].id, "b");
  EXPECT_EQ(s.granted_total, 1);
}

TEST(SpreadDiscoveryRead, ANamespaceNotReadyIsNeverEmpty) {
  Result<DiscoverySnapshot> read = read_seed("not-ready");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ErrorCode::kStoreNotReady) << read.error().message;
  EXPECT_NE(read.error().message.find("restoring"), std::string::npos);
}

TEST(SpreadDiscoveryRead, RedisErrorsAndMalformedRepliesEndTheRead) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    std::vector<RespValue> r1(replies.begin(), replies.begin() + 4);
    ASSERT_TRUE(read->feed(r1).ok());
    std::vector<RespValue> r2(replies.begin() + 4, replies.end());
    r2[1] = RespValue::error("MOVED 12 127.0.0.1:7001");
    Status s = read->feed(r2);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
    EXPECT_EQ(read->feed(r2).error().code, ErrorCode::kInternal) << "over after an error";
  }
  {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    EXPECT_EQ(read->feed({replies.begin() + 4, replies.end() - 1}).error().code,
              ErrorCode::kInvalidReply)
        << "one reply short";
  }
  {
    // The member part answered for a connection it was not asked about.
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    std::vector<RespValue> r2(replies.begin() + 4, replies.end());
    r2.back().elements[1].elements.push_back(r2.back().elements[1].elements[0]);
    EXPECT_EQ(read->feed(r2).error().code, ErrorCode::kInvalidReply);
  }
  {
    // Shared data where the grant did not ask for it.
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    std::vector<RespValue> r2(replies.begin() + 4, replies.end());
    r2[1].elements[4] = r2[0].elements[4];
    EXPECT_EQ(read->feed(r2).error().code, ErrorCode::kInvalidReply);
  }
}

// ---- a connection whose slot is split by a reshard: read key by key ----------------------------

const RespValue kSplit =
    RespValue::error("TRYAGAIN Multiple keys request during rehashing of slot");

// What the keys of a connection hold, given its read script's reply ({tag, conn, version, marked,
// shared}): the replies of split 2 (record, mark, and with `shared` the principal's four).
std::vector<RespValue> key_replies(const RespValue& script, bool shared) {
  const std::vector<RespValue>& a = script.elements;
  std::vector<RespValue> out = {a[1], a[3]};
  if (shared) {
    if (a[4].elements.size() == 4) {
      out.insert(out.end(), a[4].elements.begin(), a[4].elements.end());
    } else {
      out.insert(out.end(), {RespValue::array({}), RespValue::array({}),
                             RespValue::integer_value(0), RespValue::nil()});
    }
  }
  return out;
}
RespValue version_reply(const RespValue& script) {
  const std::string& v = script.elements[2].str;
  return v.empty() ? RespValue::nil() : RespValue::bulk_string(v);
}

std::vector<RedisCommand> version_gets(const std::vector<std::string>& cids) {
  std::vector<RedisCommand> out;
  for (const std::string& c : cids) out.push_back({"GET", *kKeys.conn_version(c)});
  return out;
}

TEST(SpreadDiscoveryRead, ASplitConnectionIsReadKeyByKeyIntoTheScriptsSnapshot) {
  Result<DiscoverySnapshot> whole = read_seed("full-read");
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->hand_back_split().empty()) << "round 1: single-key commands only";
  ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
  // Round 2: a, b, c's scripts, then the member's: each may be handed back split.
  EXPECT_EQ(read->hand_back_split(), (std::vector<bool>{true, true, true, true}));
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  // Every connection's slot split (b is per-member: its member part is read as before).
  ASSERT_TRUE(read->feed({kSplit, kSplit, kSplit, scripts[3]}).ok());
  EXPECT_FALSE(read->done());
  EXPECT_TRUE(read->reading_split());
  EXPECT_EQ(read->round(), 2);
  EXPECT_EQ(read->split_reads(), 3u);
  // Split 1: each version first.
  EXPECT_EQ(read->commands(), version_gets({"a", "b", "c"}));
  EXPECT_EQ(read->hand_back_split(), (std::vector<bool>{false, false, false}));
  ASSERT_TRUE(
      read->feed({version_reply(scripts[0]), version_reply(scripts[1]), version_reply(scripts[2])})
          .ok());
  // Split 2: what the script reads, each key by the script's own command.
  const Principal shared = Principal::shared();
  std::vector<RedisCommand> want;
  for (const char* cid : {"a", "b", "c"}) {
    want.push_back({"HGETALL", *kKeys.conn(cid)});
    want.push_back({"GET", *kKeys.marked(cid)});
    if (std::string(cid) == "b") continue;  // per-member: its data is the member's slot's
    want.push_back({"HGETALL", *kKeys.manifest(cid, shared)});
    want.push_back({"SMEMBERS", *kKeys.disabled(cid, shared)});
    want.push_back({"EXISTS", *kKeys.lease(cid, shared)});
    want.push_back({"GET", *kKeys.invalidated(cid, shared)});
  }
  EXPECT_EQ(read->commands(), want);
  std::vector<RespValue> values;
  for (std::size_t k = 0; k < 3; ++k) {
    std::vector<RespValue> v = key_replies(scripts[k], k != 1);
    values.insert(values.end(), v.begin(), v.end());
  }
  ASSERT_TRUE(read->feed(values).ok());
  // Split 3: each version again, unchanged: the reads were one snapshot.
  EXPECT_EQ(read->commands(), version_gets({"a", "b", "c"}));
  ASSERT_TRUE(
      read->feed({version_reply(scripts[0]), version_reply(scripts[1]), version_reply(scripts[2])})
          .ok());
  ASSERT_TRUE(read->done());
  DiscoverySnapshot split = read->take_snapshot();
  EXPECT_EQ(split.connections, whole->connections);
  EXPECT_EQ(split.connection_versions, whole->connection_versions);
  EXPECT_EQ(split.member_version, whole->member_version);
  EXPECT_EQ(split.granted_total, whole->granted_total);
}

// The fuzz seed of a split connection (c's script answered TRYAGAIN, then its three rounds):
// the same snapshot as the full read's.
TEST(SpreadDiscoveryRead, TheSplitSeedReadsAsTheFullRead) {
  Result<DiscoverySnapshot> whole = read_seed("full-read");
  int rounds = 0;
  Result<DiscoverySnapshot> split = read_seed("split-connection", &rounds);
  ASSERT_TRUE(whole.ok() && split.ok()) << (split.ok() ? "" : split.error().message);
  EXPECT_EQ(rounds, 2) << "the split rounds keep the script round's number";
  EXPECT_EQ(split->connections, whole->connections);
  EXPECT_EQ(split->connection_versions, whole->connection_versions);
}

// The fuzz seed of a split member slot (the member's script answered TRYAGAIN, then its three
// rounds: her version, b's four keys, her version): the same snapshot as the full read's.
TEST(SpreadDiscoveryRead, TheSplitMemberSeedReadsAsTheFullRead) {
  Result<DiscoverySnapshot> whole = read_seed("full-read");
  int rounds = 0;
  Result<DiscoverySnapshot> split = read_seed("split-member", &rounds);
  ASSERT_TRUE(whole.ok() && split.ok()) << (split.ok() ? "" : split.error().message);
  EXPECT_EQ(rounds, 2) << "the split rounds keep the script round's number";
  EXPECT_EQ(split->connections, whole->connections);
  EXPECT_EQ(split->connection_versions, whole->connection_versions);
  EXPECT_EQ(split->member_version, whole->member_version);
}

// A version that moved between split 1 and split 3: split 2 and 3 once more for that connection
// alone (split 3's version is its next split 1), and the state read then is the answer; moved
// again, kStoreUnavailable, never a mix of two states.
TEST(SpreadDiscoveryRead, ASplitConnectionThatChangedIsReadAgainOnceThenAStoreFailure) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  for (bool twice : {false, true}) {
    SCOPED_TRACE(twice ? "changed twice" : "changed once");
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    // c alone split.
    ASSERT_TRUE(read->feed({scripts[0], scripts[1], kSplit, scripts[3]}).ok());
    EXPECT_EQ(read->commands(), version_gets({"c"}));
    ASSERT_TRUE(read->feed({RespValue::bulk_string("4")}).ok());
    ASSERT_TRUE(read->feed(key_replies(scripts[2], true)).ok());
    ASSERT_TRUE(read->feed({RespValue::bulk_string("5")}).ok()) << "moved: read again";
    ASSERT_FALSE(read->done());
    // Split 2 again (no split 1: the version just read is the one before).
    std::vector<RespValue> changed = key_replies(scripts[2], true);
    changed[3] = RespValue::array({});  // the tool enabled again
    EXPECT_EQ(read->commands().size(), changed.size());
    EXPECT_EQ(read->commands().front(), (RedisCommand{"HGETALL", *kKeys.conn("c")}));
    ASSERT_TRUE(read->feed(changed).ok());
    EXPECT_EQ(read->commands(), version_gets({"c"}));
    Status s = read->feed({RespValue::bulk_string(twice ? "6" : "5")});
    if (twice) {
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable) << s.error().message;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_TRUE(read->done());
    DiscoverySnapshot snapshot = read->take_snapshot();
    EXPECT_EQ(read->split_reads(), 1u);
    ASSERT_EQ(snapshot.connections.size(), 3u);
    EXPECT_TRUE(snapshot.connections[2].disabled.empty()) << "the state read the second time";
    EXPECT_EQ(snapshot.connection_versions[2], "5") << "the version it was read at";
    EXPECT_EQ(snapshot.connection_versions[0], "3") << "the others as their scripts read them";
  }
}

TEST(SpreadDiscoveryRead, WhatASplitReadCannotUseEndsTheRead) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  auto after_round_one = [&] {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    EXPECT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    return std::move(*read);
  };
  {
    // Another error of the member's script is the error it was.
    SpreadDiscoveryRead read = after_round_one();
    Status s = read.feed({scripts[0], scripts[1], scripts[2], RespValue::error("ERR boom")});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  }
  {
    // Another error of a connection's script is the error it was.
    SpreadDiscoveryRead read = after_round_one();
    Status s = read.feed({scripts[0], RespValue::error("ERR boom"), scripts[2], scripts[3]});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  }
  {
    // An error reply to a key read apart.
    SpreadDiscoveryRead read = after_round_one();
    ASSERT_TRUE(read.feed({scripts[0], scripts[1], kSplit, scripts[3]}).ok());
    ASSERT_TRUE(read.feed({RespValue::bulk_string("4")}).ok());
    std::vector<RespValue> v = key_replies(scripts[2], true);
    v[3] = RespValue::error("WRONGTYPE Operation against a key holding the wrong kind of value");
    Status s = read.feed(v);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  }
  {
    // A key of the wrong shape (a lease flag that is no integer).
    SpreadDiscoveryRead read = after_round_one();
    ASSERT_TRUE(read.feed({scripts[0], scripts[1], kSplit, scripts[3]}).ok());
    ASSERT_TRUE(read.feed({RespValue::bulk_string("4")}).ok());
    std::vector<RespValue> v = key_replies(scripts[2], true);
    v[4] = RespValue::bulk_string("1");
    Status s = read.feed(v);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidReply);
  }
}

// The member's slot split (its script answered TRYAGAIN): the member's version, the four keys
// the script reads of each per-member connection, each by the script's own command, the version
// again; the snapshot is the script's, entry for entry. With a connection's slot split in the same
// round, both are read in the same three rounds.
TEST(SpreadDiscoveryRead, AMembersSplitSlotIsReadKeyByKeyIntoTheScriptsSnapshot) {
  Result<DiscoverySnapshot> whole = read_seed("full-read");
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  const RespValue member_version = replies[2];
  // b's part of the member's script: {manifest, disabled, lease, mark}.
  const std::vector<RespValue> b_part = scripts[3].elements[1].elements[0].elements;
  ASSERT_EQ(b_part.size(), 4u);
  ASSERT_FALSE(b_part[0].elements.empty()) << "the seed's b holds a per-member manifest";
  const std::vector<RedisCommand> member_reads = {{"HGETALL", *kKeys.manifest("b", kAlice)},
                                                  {"SMEMBERS", *kKeys.disabled("b", kAlice)},
                                                  {"EXISTS", *kKeys.lease("b", kAlice)},
                                                  {"GET", *kKeys.invalidated("b", kAlice)}};
  for (bool with_connection : {false, true}) {
    SCOPED_TRACE(with_connection ? "the member's and c's slots split" : "the member's slot split");
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    ASSERT_TRUE(read.ok());
    ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    ASSERT_TRUE(
        read->feed({scripts[0], scripts[1], with_connection ? kSplit : scripts[2], kSplit}).ok());
    EXPECT_TRUE(read->reading_split());
    EXPECT_EQ(read->round(), 2);
    EXPECT_EQ(read->split_reads(), with_connection ? 2u : 1u);
    // Split 1: the versions (a connection's first, in page order, then the member's).
    std::vector<RedisCommand> versions =
        with_connection ? version_gets({"c"}) : std::vector<RedisCommand>{};
    versions.push_back({"GET", *kKeys.member_version(kAlice)});
    EXPECT_EQ(read->commands(), versions);
    EXPECT_EQ(read->hand_back_split(), std::vector<bool>(versions.size(), false));
    std::vector<RespValue> before;
    if (with_connection) before.push_back(version_reply(scripts[2]));
    before.push_back(member_version);
    ASSERT_TRUE(read->feed(before).ok());
    // Split 2: exactly what the script reads.
    std::vector<RedisCommand> want;
    std::vector<RespValue> values;
    if (with_connection) {
      want = {{"HGETALL", *kKeys.conn("c")},
              {"GET", *kKeys.marked("c")},
              {"HGETALL", *kKeys.manifest("c", Principal::shared())},
              {"SMEMBERS", *kKeys.disabled("c", Principal::shared())},
              {"EXISTS", *kKeys.lease("c", Principal::shared())},
              {"GET", *kKeys.invalidated("c", Principal::shared())}};
      values = key_replies(scripts[2], true);
    }
    want.insert(want.end(), member_reads.begin(), member_reads.end());
    values.insert(values.end(), b_part.begin(), b_part.end());
    EXPECT_EQ(read->commands(), want);
    EXPECT_EQ(read->hand_back_split(), std::vector<bool>(want.size(), false));
    ASSERT_TRUE(read->feed(values).ok());
    // Split 3: the versions again, unchanged.
    EXPECT_EQ(read->commands(), versions);
    ASSERT_TRUE(read->feed(before).ok());
    ASSERT_TRUE(read->done());
    DiscoverySnapshot split = read->take_snapshot();
    EXPECT_EQ(split.connections, whole->connections);
    EXPECT_EQ(split.connection_versions, whole->connection_versions);
    EXPECT_EQ(split.member_version, whole->member_version);
  }
}

// The member's version moved between split 1 and split 3: its four keys of each connection and the
// version once more, and the state read then is the answer; moved again, kStoreUnavailable.
TEST(SpreadDiscoveryRead, AMembersSplitDataThatChangedIsReadAgainOnceThenAStoreFailure) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  const std::vector<RespValue> b_part = scripts[3].elements[1].elements[0].elements;
  const std::vector<RedisCommand> member_version = {{"GET", *kKeys.member_version(kAlice)}};
  for (bool twice : {false, true}) {
    SCOPED_TRACE(twice ? "changed twice" : "changed once");
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
    ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
    ASSERT_TRUE(read->feed({scripts[0], scripts[1], scripts[2], kSplit}).ok());
    EXPECT_EQ(read->commands(), member_version);
    ASSERT_TRUE(read->feed({RespValue::bulk_string("7")}).ok());
    ASSERT_TRUE(read->feed(b_part).ok());
    EXPECT_EQ(read->commands(), member_version);
    ASSERT_TRUE(read->feed({RespValue::bulk_string("8")}).ok()) << "moved: read again";
    ASSERT_FALSE(read->done());
    // Split 2 again: the four keys, the mark now set.
    std::vector<RespValue> changed = b_part;
    changed[3] = RespValue::bulk_string("1799999999999");  // later than the connection's
    EXPECT_EQ(read->commands().size(), 4u);
    EXPECT_EQ(read->commands().front(), (RedisCommand{"HGETALL", *kKeys.manifest("b", kAlice)}));
    ASSERT_TRUE(read->feed(changed).ok());
    EXPECT_EQ(read->commands(), member_version);
    Status s = read->feed({RespValue::bulk_string(twice ? "9" : "8")});
    if (twice) {
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable) << s.error().message;
      EXPECT_NE(s.error().message.find("changed twice"), std::string::npos) << s.error().message;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_TRUE(read->done());
    DiscoverySnapshot snapshot = read->take_snapshot();
    ASSERT_EQ(snapshot.connections.size(), 3u);
    ASSERT_TRUE(snapshot.connections[1].manifest.has_value());
    EXPECT_EQ(snapshot.connections[1].manifest->invalidated_at_ms, 1799999999999)
        << "the state read the second time";
  }
}

// A key of the member's read apart of the wrong shape, or an error reply to one, ends the read.
TEST(SpreadDiscoveryRead, WhatAMembersSplitReadCannotUseEndsTheRead) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  const std::vector<RespValue> b_part = scripts[3].elements[1].elements[0].elements;
  for (std::size_t bad = 0; bad < 4; ++bad) {
    for (bool error : {false, true}) {
      Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
      ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
      ASSERT_TRUE(read->feed({scripts[0], scripts[1], scripts[2], kSplit}).ok());
      ASSERT_TRUE(read->feed({RespValue::bulk_string("7")}).ok());
      std::vector<RespValue> v = b_part;
      // Each wrong in turn: a HASH or SET that is a string, a lease flag that is a string, a mark
      // that is an array.
      v[bad] = error ? RespValue::error("WRONGTYPE Operation against a key holding the wrong kind")
               : bad == 3 ? RespValue::array({})
                          : RespValue::bulk_string("1");
      Status s = read->feed(v);
      ASSERT_FALSE(s.ok()) << bad;
      EXPECT_EQ(s.error().code, error ? ErrorCode::kStoreUnavailable : ErrorCode::kInvalidReply)
          << bad << ": " << s.error().message;
    }
  }
}

// A split connection whose record is gone (removed while read) has no shared part, as its script
// answers, whatever its manifest keys still hold.
TEST(SpreadDiscoveryRead, ASplitConnectionWithoutItsRecordIsRemoved) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const std::vector<RespValue> scripts(replies.begin() + 4, replies.end());
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
  ASSERT_TRUE(read->feed({replies.begin(), replies.begin() + 4}).ok());
  ASSERT_TRUE(read->feed({scripts[0], scripts[1], kSplit, scripts[3]}).ok());
  ASSERT_TRUE(read->feed({RespValue::bulk_string("9")}).ok());
  std::vector<RespValue> v = key_replies(scripts[2], true);
  v[0] = RespValue::array({});  // no record
  ASSERT_TRUE(read->feed(v).ok());
  ASSERT_TRUE(read->feed({RespValue::bulk_string("9")}).ok());
  ASSERT_TRUE(read->done());
  DiscoverySnapshot s = read->take_snapshot();
  ASSERT_EQ(s.connections.size(), 3u);
  EXPECT_FALSE(s.connections[2].record.has_value());
  EXPECT_FALSE(s.connections[2].manifest.has_value());
  EXPECT_FALSE(s.connections[2].lease_held);
}

// A connection granted with a mode whose record and version are both gone lost its slot's data
// (a removed connection keeps its version): the read is refused, never served without it. A grant
// written before its connection's record (mode '') and a removed connection are left out as before.
TEST(SpreadDiscoveryRead, AGrantedConnectionThatLostItsRecordAndVersionIsRefused) {
  auto read_one = [](const std::string& grant_mode,
                     const RespValue& version) -> Result<DiscoverySnapshot> {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice);
    if (!read.ok()) return read.error();
    Status s = read->feed(
        {RespValue::nil(), RespValue::bulk_string("ready:1"), RespValue::bulk_string("7"),
         RespValue::array({RespValue::bulk_string("gone"), RespValue::bulk_string(grant_mode)})});
    if (!s.ok()) return s.error();
    std::vector<RespValue> replies;
    for (std::size_t k = 0; k < read->commands().size(); ++k) {
      replies.push_back(k == 0 ? RespValue::array({RespValue::bulk_string(kDiscoveryConnReplyTag),
                                                   RespValue::array({}), version, RespValue::nil(),
                                                   RespValue::array({})})
                               : RespValue::bulk_string("quiver.discovery.member.v1"));
    }
    if (grant_mode == kGrantModePerMember) {
      // discovery_member_read.lua's reply for the one per-member connection.
      replies.back() = RespValue::array(
          {RespValue::bulk_string(kDiscoveryMemberReplyTag),
           RespValue::array({RespValue::array({RespValue::array({}), RespValue::array({}),
                                               RespValue::integer_value(0), RespValue::nil()})})});
    }
    s = read->feed(replies);
    if (!s.ok()) return s.error();
    EXPECT_TRUE(read->done());
    return read->take_snapshot();
  };
  for (const char* mode : {kGrantModeShared, kGrantModePerMember}) {
    Result<DiscoverySnapshot> lost = read_one(mode, RespValue::nil());
    ASSERT_FALSE(lost.ok()) << mode;
    EXPECT_EQ(lost.error().code, ErrorCode::kStoreUnavailable);
    EXPECT_NE(lost.error().message.find("'gone' is granted"), std::string::npos)
        << lost.error().message;
    Result<DiscoverySnapshot> removed = read_one(mode, RespValue::bulk_string("12"));
    ASSERT_TRUE(removed.ok()) << removed.error().message;
    ASSERT_EQ(removed->connections.size(), 1u);
    EXPECT_FALSE(removed->connections[0].record.has_value()) << "removed: left out";
  }
  Result<DiscoverySnapshot> not_yet = read_one("", RespValue::nil());
  ASSERT_TRUE(not_yet.ok()) << not_yet.error().message;
  EXPECT_FALSE(not_yet->connections[0].record.has_value()) << "no record yet: left out";
}

// The layout record must name the layout the keys are spelled in: a namespace that moved ends
// the read and says where it went; a record no layout of this build reads is unknown.
TEST(SpreadDiscoveryRead, TheLayoutRecordMustNameTheKeysLayout) {
  SnapshotQuery q;
  std::vector<RespValue> replies = seed_replies("full-read", &q);
  const RedisKeys v2 = *RedisKeys::create("fz", KeyLayout::kV2, 16);
  struct Case {
    const RedisKeys* keys;
    RespValue layout;
    bool ok;
    std::optional<KeyLayout> seen;
  };
  const Case cases[] = {
      {&kKeys, RespValue::nil(), true, KeyLayout::kV1},
      {&kKeys, RespValue::bulk_string("v1:ready:5"), true, KeyLayout::kV1},
      {&kKeys, RespValue::bulk_string("v2:ready:5"), false, KeyLayout::kV2},
      {&v2, RespValue::bulk_string("v2:ready:5"), true, KeyLayout::kV2},
      {&v2, RespValue::nil(), false, KeyLayout::kV1},
      {&v2, RespValue::bulk_string("v2:filling:5"), false, KeyLayout::kV1},  // copying: v1
      {&kKeys, RespValue::bulk_string("v9:ready:5"), false, std::nullopt},
  };
  for (const Case& c : cases) {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(*c.keys, kAlice, q);
    ASSERT_TRUE(read.ok());
    std::vector<RespValue> r1(replies.begin(), replies.begin() + 4);
    r1[0] = c.layout;
    Status s = read->feed(r1);
    EXPECT_EQ(s.ok(), c.ok) << c.layout.debug_string();
    EXPECT_EQ(read->layout_seen(), c.seen) << c.layout.debug_string();
    if (!c.ok) {
      EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable) << s.error().message;
      EXPECT_EQ(is_unknown_layout_error(s.error()), !c.seen) << s.error().message;
    }
  }
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(kKeys, kAlice, q);
  std::vector<RespValue> r1(replies.begin(), replies.begin() + 4);
  r1[0] = RespValue::integer_value(2);
  EXPECT_EQ(read->feed(r1).error().code, ErrorCode::kInvalidReply);
}

TEST(SpreadDiscoveryRead, TheConditionalReadComparesEveryVersionAndReadsLeases) {
  Result<DiscoverySnapshot> read = read_seed("full-read");
  ASSERT_TRUE(read.ok()) << read.error().message;
  DiscoverySnapshot held = std::move(*read);
  Result<std::vector<RedisCommand>> c = spread_conditional_commands(kKeys, held, {2});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 7u);
  EXPECT_EQ((*c)[0], (RedisCommand{"GET", kKeys.layout()}));
  EXPECT_EQ((*c)[3], (RedisCommand{"GET", *kKeys.conn_version("a")}));
  EXPECT_EQ((*c)[6], (RedisCommand{"EXISTS", *kKeys.lease("c", Principal::shared())}));
  auto answer = [](const char* record, const char* c_version, int lease) {
    return std::vector<RespValue>{RespValue::nil(),
                                  RespValue::bulk_string(record),
                                  RespValue::bulk_string("7"),
                                  RespValue::bulk_string("3"),
                                  RespValue::bulk_string("2"),
                                  c_version ? RespValue::bulk_string(c_version) : RespValue::nil(),
                                  RespValue::integer_value(lease)};
  };
  Result<bool> same =
      decode_spread_conditional(answer("ready:1790000000000", nullptr, 0), held, {2});
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(*same);
  EXPECT_FALSE(held.connections[2].lease_held) << "the lease read again";
  EXPECT_FALSE(*decode_spread_conditional(answer("ready:1790000000000", "1", 0), held, {2}));
  EXPECT_FALSE(*decode_spread_conditional(answer("ready:1790000000001", nullptr, 0), held, {2}));
  std::vector<RespValue> down = answer("ready:1790000000000", nullptr, 0);
  std::vector<RespValue> moved = answer("ready:1790000000000", nullptr, 0);
  moved[0] = RespValue::bulk_string("v2:ready:1");
  EXPECT_FALSE(*decode_spread_conditional(moved, held, {2})) << "the layout record moved";
  down[4] = RespValue::error("CLUSTERDOWN");
  EXPECT_EQ(decode_spread_conditional(down, held, {2}).error().code, ErrorCode::kStoreUnavailable);
  EXPECT_FALSE(spread_conditional_commands(kKeys, held, {3}).ok()) << "a lease entry out of range";
}

// The agent's notifier asks the versions alone (no leases): decode_spread_unchanged.
TEST(SpreadDiscoveryRead, TheVersionsAloneSayUnchangedOrMoved) {
  Result<DiscoverySnapshot> read = read_seed("full-read");
  ASSERT_TRUE(read.ok()) << read.error().message;
  const DiscoverySnapshot held = std::move(*read);
  Result<std::vector<RedisCommand>> c = spread_conditional_commands(kKeys, held, {});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 6u) << "layout, namespace, member version, three connection versions";
  auto answer = [](const char* member_version, const char* c_version) {
    return std::vector<RespValue>{RespValue::nil(),
                                  RespValue::bulk_string("ready:1790000000000"),
                                  RespValue::bulk_string(member_version),
                                  RespValue::bulk_string("3"),
                                  RespValue::bulk_string("2"),
                                  c_version ? RespValue::bulk_string(c_version) : RespValue::nil()};
  };
  EXPECT_TRUE(*decode_spread_unchanged(answer("7", nullptr), held));
  EXPECT_FALSE(*decode_spread_unchanged(answer("8", nullptr), held)) << "the member's version";
  EXPECT_FALSE(*decode_spread_unchanged(answer("7", "1"), held)) << "a connection's version";
  std::vector<RespValue> short_answer = answer("7", nullptr);
  short_answer.pop_back();
  EXPECT_EQ(decode_spread_unchanged(short_answer, held).error().code, ErrorCode::kInvalidReply);
  std::vector<RespValue> down = answer("7", nullptr);
  down[3] = RespValue::error("CLUSTERDOWN");
  EXPECT_EQ(decode_spread_unchanged(down, held).error().code, ErrorCode::kStoreUnavailable);
}

}  // namespace
}  // namespace quiver
