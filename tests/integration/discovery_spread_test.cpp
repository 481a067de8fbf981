// The discovery read of key layout v2 in rounds (shared/discovery_spread.h), on a real
// redis-server, against the one-script read of layout v1 (discovery_read.lua) over the same data:
// for every kind of change the real store API makes, both reads render the same answer byte for
// byte, and the v2 conditional read sees exactly the changes the v1 one sees.
//
// The data is written by the real RedisStore on layout v1. v2 stores a member's grants as a HASH
// connection id → credential mode; no store writes that yet, so `as_v2_grants` converts the grant
// sets in place before each v2 read (and `as_v1_grants` back before the store writes again). That
// conversion is the one part of this test that is not the product's; the keys are otherwise the
// v1 spellings, which the rounds read the same way (on one node every slot is local).
#include "shared/discovery_spread.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_store.h"
#include "shared/discovery.h"
#include "shared/discovery_redis.h"
#include "shared/edge_snapshot.h"
#include "tests/support/discovery_reads.h"
#include "tests/support/preference_rows.h"
#include "tests/support/redis_fixture.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

using testing::commit_listing;
using testing::disabled_rows;
using testing::listing_write;
using testing::stdio_record;

constexpr int64_t kNow = 1'790'000'000'000;
constexpr char kNs[] = "spread";

Principal member(const char* id) { return *Principal::member(id); }

class SpreadRead : public testing::RedisFixture {
 protected:
  void SetUp() override {
    RedisFixture::SetUp();
    if (HasFatalFailure()) return;
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = redis_->port();
    o.ns = kNs;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    ASSERT_TRUE(s.ok()) << s.error().message;
    store_ = std::move(*s);
    ASSERT_TRUE(store_->begin_namespace_restore(kNow).ok());
    ASSERT_TRUE(store_->sync_connections(records()).ok());
    ASSERT_TRUE(store_->sync_grants({{"alice", {"a", "b", "c"}}, {"bob", {"a", "b"}}}).ok());
    commit("a", Principal::shared(), kNow);
    commit("b", member("alice"), kNow);
    commit("b", member("bob"), kNow);
    commit("c", Principal::shared(), kNow - 1'000'000);  // stale at kNow: its lease matters
    ASSERT_TRUE(store_
                    ->merge_preferences("b", member("alice"),
                                        disabled_rows("b", member("alice"), {"tool:x_b"}, kNow))
                    .ok());
    ASSERT_TRUE(store_->mark_namespace_ready(kNow).ok());
  }

  static std::vector<ConnectionRecord> records() {
    return {stdio_record("a", CredentialMode::kShared, kNow),
            stdio_record("b", CredentialMode::kPerMember, kNow),
            stdio_record("c", CredentialMode::kShared, kNow),
            stdio_record("d", CredentialMode::kShared, kNow)};
  }

  void commit(const std::string& cid, const Principal& p, int64_t at) {
    commit_listing(*store_, cid, p, listing_write(cid, at));
  }

  // Each member's grants SET → the v2 HASH cid → credential mode (what a v2 grant write stores:
  // the mode of the connection's record when the grant was written, '' without one).
  void as_v2_grants() {
    for (const char* id : {"alice", "bob"}) {
      std::string key = *keys_.grants(member(id));
      RespValue ids = cmd({"SMEMBERS", key});
      ASSERT_TRUE(ids.is_array()) << ids.debug_string();
      cmd({"DEL", key});
      for (const RespValue& cid : ids.elements) {
        std::string c(*cid.as_string());
        RespValue mode = cmd({"HGET", *keys_.conn(c), "credential_mode"});
        cmd({"HSET", key, c, std::string(mode.as_string().value_or(""))});
      }
    }
  }
  void as_v1_grants() {
    for (const char* id : {"alice", "bob"}) {
      std::string key = *keys_.grants(member(id));
      RespValue ids = cmd({"HKEYS", key});
      ASSERT_TRUE(ids.is_array()) << ids.debug_string();
      cmd({"DEL", key});
      for (const RespValue& cid : ids.elements) cmd({"SADD", key, std::string(*cid.as_string())});
    }
  }

  void fill_bodies(DiscoverySnapshot& s) {
    testing::fill_bodies(
        s, [&](const std::vector<std::string>& d) { return cmd(*body_read_command(keys_, d)); });
  }

  DiscoverySnapshot v1_read(const SnapshotQuery& q = {}) {
    Result<DiscoverySnapshot> s = decode_discovery_reply(
        cmd(*discovery_read_command(keys_, member("alice"), q)), member("alice"));
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (!s.ok()) return DiscoverySnapshot(member("alice"));
    fill_bodies(*s);
    return std::move(*s);
  }

  // Sends one round's commands (on one node, in order) and feeds the replies back. With `split_`,
  // every read script (each connection's, the member's) is answered as a split slot answers it
  // (TRYAGAIN, what the hosts hand back: RoutedConversation, RedisClusterPool), without being
  // sent; `split_answered_` counts them.
  Status run_round(SpreadDiscoveryRead& read) {
    std::vector<RespValue> replies;
    const std::vector<bool>& split = read.hand_back_split();
    for (std::size_t k = 0; k < read.commands().size(); ++k) {
      if (split_ && k < split.size() && split[k]) {
        replies.push_back(
            RespValue::error("TRYAGAIN Multiple keys request during rehashing of slot"));
        ++split_answered_;
      } else {
        replies.push_back(cmd(read.commands()[k]));
      }
    }
    return read.feed(replies);
  }

  // The v2 read in rounds; `between` runs after round 1 (a write racing the read), `after` after
  // every round.
  Result<DiscoverySnapshot> v2_read(
      const SnapshotQuery& q = {}, const std::function<void()>& between = {},
      const std::function<void(const SpreadDiscoveryRead&)>& after = {}) {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(keys_, member("alice"), q);
    if (!read.ok()) return read.error();
    rounds_ = 0;
    split_answered_ = 0;
    while (!read->done()) {
      Status s = run_round(*read);
      ++rounds_;
      if (!s.ok()) return s.error();
      if (rounds_ == 1 && between) between();
      if (after) after(*read);
    }
    split_reads_ = read->split_reads();
    DiscoverySnapshot snapshot = read->take_snapshot();
    fill_bodies(snapshot);
    return snapshot;
  }

  // The v2 read with every script refused as on a split slot, `version_key` INCRed before each
  // key-by-key read of what the scripts read (a write racing it every time); `changes` counts the
  // writes. Expected: a store failure, never a mix of two states.
  Result<DiscoverySnapshot> split_read_changing(const std::string& version_key, int* changes) {
    split_ = true;
    Result<DiscoverySnapshot> v2 = v2_read({}, {}, [&](const SpreadDiscoveryRead& read) {
      if (read.reading_split() && read.commands().front()[0] == "HGETALL") {
        ++*changes;
        cmd({"INCR", version_key});
      }
    });
    split_ = false;
    return v2;
  }

  // The same read with every connection's script refused as on a split slot: each connection is
  // read key by key. Its snapshot is the scripts' snapshot, entry for entry.
  void expect_split_reads_the_same(const DiscoverySnapshot& scripts, const SnapshotQuery& q,
                                   int64_t now) {
    const int rounds = rounds_;
    split_ = true;
    Result<DiscoverySnapshot> split = v2_read(q);
    split_ = false;
    ASSERT_TRUE(split.ok()) << split.error().message;
    EXPECT_EQ(split_reads_, split_answered_) << "every script refused read key by key";
    EXPECT_GE(split_reads_, scripts.connections.size())
        << "every connection of the page read key by key";
    if (!scripts.connections.empty()) {
      EXPECT_EQ(rounds_, rounds + 3) << "split 1, 2 and 3";
    }
    rounds_ = rounds;
    EXPECT_EQ(render(*split, now), render(scripts, now));
    EXPECT_EQ(split->connections, scripts.connections);
    EXPECT_EQ(split->granted_total, scripts.granted_total);
    EXPECT_EQ(split->next_after, scripts.next_after);
    EXPECT_EQ(split->namespace_record, scripts.namespace_record);
    EXPECT_EQ(split->member_version, scripts.member_version);
    EXPECT_EQ(split->connection_versions, scripts.connection_versions);
  }

  static std::string render(const DiscoverySnapshot& s, int64_t now) {
    return testing::rendered_answer(s, now);
  }

  // v1 and v2 reads of the same state render the same bytes and carry the same versions.
  void expect_same_answer(const SnapshotQuery& q, int64_t now) {
    DiscoverySnapshot v1 = v1_read(q);
    as_v2_grants();
    Result<DiscoverySnapshot> v2 = v2_read(q);
    if (v2.ok()) expect_split_reads_the_same(*v2, q, now);
    as_v1_grants();
    ASSERT_TRUE(v2.ok()) << v2.error().message;
    EXPECT_EQ(render(*v2, now), render(v1, now));
    EXPECT_EQ(v2->granted_total, v1.granted_total);
    EXPECT_EQ(v2->next_after, v1.next_after);
    EXPECT_EQ(v2->ignored_grants, v1.ignored_grants);
    EXPECT_EQ(v2->namespace_record, v1.namespace_record);
    EXPECT_EQ(v2->member_version, v1.member_version);
    EXPECT_EQ(v2->connection_versions, v1.connection_versions);
  }

  RedisKeys keys_ = *RedisKeys::create(kNs);
  std::unique_ptr<RedisStore> store_;
  int rounds_ = 0;
  bool split_ = false;
  std::size_t split_reads_ = 0;
  std::size_t split_answered_ = 0;
};

TEST_F(SpreadRead, RendersWhatTheOneScriptReadRenders) {
  for (int64_t now : {kNow, kNow + 600'000, kNow + 2'000'000}) {
    SCOPED_TRACE(now);
    expect_same_answer({}, now);
  }
  EXPECT_EQ(rounds_, 2) << "grants, then every slot of the page at once";
}

TEST_F(SpreadRead, PagesAndSingleConnectionsAsTheOneScriptRead) {
  for (const SnapshotQuery& q :
       {SnapshotQuery{std::nullopt, "", 1}, SnapshotQuery{std::nullopt, "a", 1},
        SnapshotQuery{std::nullopt, "a", 2}, SnapshotQuery{std::nullopt, "c", 5},
        SnapshotQuery{std::nullopt, "zzz", 5}, SnapshotQuery{std::string("b"), "", 200},
        SnapshotQuery{std::string("d"), "", 200}, SnapshotQuery{std::string("zz"), "", 200}}) {
    SCOPED_TRACE(q.only.value_or("*") + " after '" + q.after + "' limit " +
                 std::to_string(q.limit));
    expect_same_answer(q, kNow);
  }
}

TEST_F(SpreadRead, EveryKindOfChangeReadsAsTheOneScriptReadAndMovesTheConditionalRead) {
  struct Case {
    const char* name;
    std::function<void(RedisStore&)> change;
    bool changed;  // what the v1 conditional read answers (ConditionalRead tests it)
  };
  auto webhook = [](RedisStore& s, const std::string& cid, std::optional<Principal> p,
                    const std::string& id) {
    WebhookRefreshRequest request;
    request.targets.push_back({cid, std::move(p), "deploy"});
    Result<WebhookRefreshReply> r =
        s.apply_webhook(WebhookVerified{kNow + 5, "wh:" + id, 300'000}, request, kNow + 5, 30'000);
    ASSERT_TRUE(r.ok()) << r.error().message;
  };
  const std::vector<Case> cases = {
      {"shared commit", [&](RedisStore&) { commit("a", Principal::shared(), kNow + 1); }, true},
      {"per-member commit of the reader",
       [&](RedisStore&) { commit("b", member("alice"), kNow + 1); }, true},
      {"per-member failure of the reader",
       [](RedisStore& s) {
         testing::record_listing_failure(s, "b", member("alice"), kNow + 1, kNow + 1);
       },
       true},
      {"grant added",
       [](RedisStore& s) {
         ASSERT_TRUE(*s.set_member_grants("alice", {"a", "b", "c", "d"}));
       },
       true},
      {"grant removed", [](RedisStore& s) { ASSERT_TRUE(*s.set_member_grants("alice", {"a"})); },
       true},
      {"shared preference toggled",
       [](RedisStore& s) {
         ASSERT_TRUE(
             s.merge_preferences("a", Principal::shared(),
                                 disabled_rows("a", Principal::shared(), {"tool:x_a"}, kNow))
                 .ok());
       },
       true},
      {"webhook: a per-member connection as a whole",
       [&](RedisStore& s) { webhook(s, "b", std::nullopt, "whole"); }, true},
      {"webhook: the reader on a per-member connection",
       [&](RedisStore& s) { webhook(s, "b", member("alice"), "alice"); }, true},
      {"connection config changed",
       [](RedisStore& s) {
         std::vector<ConnectionRecord> r = records();
         r[0].config_hash = "hash-a-2";
         ASSERT_TRUE(s.sync_connections(r).ok());
       },
       true},
      {"manifest dropped",
       [](RedisStore& s) { ASSERT_TRUE(s.drop_manifest("a", Principal::shared()).ok()); }, true},
      {"another member's commit", [&](RedisStore&) { commit("b", member("bob"), kNow + 1); },
       false},
      {"lease taken on a stale entry",
       [](RedisStore& s) {
         Result<AcquireResult> l =
             s.acquire_lease("c", Principal::shared(), std::string(32, 'e'), 60'000);
         ASSERT_TRUE(l.ok()) << l.error().message;
         ASSERT_TRUE(l->acquired);
       },
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TearDown();
    SetUp();
    ASSERT_FALSE(HasFatalFailure());
    const int64_t now = kNow + 10;
    as_v2_grants();
    Result<DiscoverySnapshot> held = v2_read();
    as_v1_grants();
    ASSERT_TRUE(held.ok()) << held.error().message;
    c.change(*store_);
    ASSERT_FALSE(HasFatalFailure());
    expect_same_answer({}, now);

    // The conditional read of v2: single-key commands, one slot each.
    const std::vector<std::size_t> leases = lease_sensitive_entries(
        *held, FreshnessPolicy{}, now, [](std::string_view) { return true; });
    Result<std::vector<RedisCommand>> commands = spread_conditional_commands(keys_, *held, leases);
    ASSERT_TRUE(commands.ok()) << commands.error().message;
    std::vector<RespValue> replies;
    for (const RedisCommand& command : *commands) replies.push_back(cmd(command));
    Result<bool> unchanged = decode_spread_conditional(replies, *held, leases);
    ASSERT_TRUE(unchanged.ok()) << unchanged.error().message;
    EXPECT_EQ(*unchanged, !c.changed);
    if (*unchanged) EXPECT_EQ(render(*held, now), render(v1_read(), now));
  }
}

TEST_F(SpreadRead, AModeChangeBetweenTheRoundsIsReadAgainAsTheRecordSays) {
  // b goes from per_member to shared after the grants were read (the grants still say
  // per_member): round 3 reads b's `shared` data, and the answer is the one-script read's of the
  // new state.
  commit("b", Principal::shared(), kNow);
  as_v2_grants();
  Result<DiscoverySnapshot> v2 = v2_read({}, [&] {
    as_v1_grants();
    std::vector<ConnectionRecord> r = records();
    r[1].credential_mode = CredentialMode::kShared;
    ASSERT_TRUE(store_->sync_connections(r).ok());
    as_v2_grants();
    // The grant hashes now say shared for b, but round 2 was planned from per_member.
  });
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  EXPECT_EQ(rounds_, 3);
  as_v1_grants();
  EXPECT_EQ(render(*v2, kNow), render(v1_read(), kNow));
  const GrantedConnection* b = v2->find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->principal.has_value());
  EXPECT_TRUE(b->principal->is_shared());
}

TEST_F(SpreadRead, AModeThatKeepsChangingIsAnErrorNeverAGuess) {
  as_v2_grants();
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(keys_, member("alice"));
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(run_round(*read).ok());  // grants: b per_member
  cmd({"HSET", *keys_.conn("b"), "credential_mode", "shared"});
  ASSERT_TRUE(run_round(*read).ok());  // b read per-member, record says shared: round 3
  ASSERT_EQ(read->round(), 3);
  cmd({"HSET", *keys_.conn("b"), "credential_mode", "per_member"});
  Status s = run_round(*read);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable) << s.error().message;
}

// A split connection (its read script refused: TRYAGAIN) is read key by key between two GETs of
// its version. A write between them (a commit INCRs the version with the data) makes the reads
// go again, once; the answer is the new state's, as the one-script read renders it.
TEST_F(SpreadRead, AWriteWhileASplitConnectionIsReadKeyByKeyIsReadAgain) {
  as_v2_grants();
  int changes = 0;
  split_ = true;
  Result<DiscoverySnapshot> v2 = v2_read({}, {}, [&](const SpreadDiscoveryRead& read) {
    // Split 1 is read: the next round reads the keys. Commit once, before they are read.
    if (read.reading_split() && read.commands().front()[0] == "HGETALL" && changes == 0) {
      ++changes;
      as_v1_grants();
      commit("a", Principal::shared(), kNow + 1);
      as_v2_grants();
    }
  });
  split_ = false;
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(rounds_, 2 + 3 + 2) << "split 2 and 3 read again";
  as_v1_grants();
  const DiscoverySnapshot v1 = v1_read();
  EXPECT_EQ(render(*v2, kNow + 10), render(v1, kNow + 10));
  EXPECT_EQ(v2->connection_versions, v1.connection_versions);
}

// One that keeps changing while read key by key is a store failure, never a mix of two states.
TEST_F(SpreadRead, ASplitConnectionThatKeepsChangingIsAStoreFailure) {
  as_v2_grants();
  int changes = 0;
  Result<DiscoverySnapshot> v2 = split_read_changing(*keys_.conn_version("c"), &changes);
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.error().code, ErrorCode::kStoreUnavailable) << v2.error().message;
  EXPECT_NE(v2.error().message.find("'c'"), std::string::npos) << v2.error().message;
  EXPECT_EQ(changes, 2);
}

// Split connections and a mode change between the rounds: round 3's script is refused too, and
// read key by key as the record says.
TEST_F(SpreadRead, AModeChangeOfASplitConnectionIsReadAgainKeyByKey) {
  commit("b", Principal::shared(), kNow);
  as_v2_grants();
  split_ = true;
  Result<DiscoverySnapshot> v2 = v2_read({}, [&] {
    as_v1_grants();
    std::vector<ConnectionRecord> r = records();
    r[1].credential_mode = CredentialMode::kShared;
    ASSERT_TRUE(store_->sync_connections(r).ok());
    as_v2_grants();
  });
  split_ = false;
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  EXPECT_EQ(rounds_, 1 + 4 + 4) << "grants; scripts and split 1-3; b's script and split 1-3";
  EXPECT_EQ(split_reads_, 5u) << "a, b, c and the member's, then b again";
  as_v1_grants();
  EXPECT_EQ(render(*v2, kNow), render(v1_read(), kNow));
  const GrantedConnection* b = v2->find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->principal.has_value());
  EXPECT_TRUE(b->principal->is_shared());
}

TEST_F(SpreadRead, ALostNamespaceIsNotReadyNeverEmpty) {
  as_v2_grants();
  cmd({"DEL", keys_.namespace_record()});
  Result<DiscoverySnapshot> v2 = v2_read();
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.error().code, ErrorCode::kStoreNotReady) << v2.error().message;
}

TEST_F(SpreadRead, EveryScriptDeclaresItsKeysAndTouchesOneSlotPerConnection) {
  // Under key layout v1 every key shares one slot, so this checks what the scripts are given:
  // each conn read names only its connection's keys, the member read only the member's.
  as_v2_grants();
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(keys_, member("alice"));
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(run_round(*read).ok());
  int conn_reads = 0, member_reads = 0;
  for (const RedisCommand& c : read->commands()) {
    ASSERT_GE(c.size(), 3u);
    EXPECT_EQ(c[0], "EVAL_RO");
    const std::size_t n = std::stoul(c[2]);
    ASSERT_EQ(c.size(), 3 + n) << "every key declared, no ARGV";
    if (c[1].find("quiver.discovery.conn.v1") != std::string::npos) {
      ++conn_reads;
      const std::string cid = keys_.parse(c[3]).value().connection_id;
      for (std::size_t i = 3; i < c.size(); ++i) {
        Result<ParsedKey> k = keys_.parse(c[i]);
        ASSERT_TRUE(k.ok()) << c[i];
        EXPECT_EQ(k->connection_id, cid) << c[i];
        if (k->principal) EXPECT_TRUE(k->principal->is_shared()) << c[i];
      }
    } else {
      ++member_reads;
      for (std::size_t i = 3; i < c.size(); ++i) {
        Result<ParsedKey> k = keys_.parse(c[i]);
        ASSERT_TRUE(k.ok()) << c[i];
        ASSERT_TRUE(k->principal.has_value()) << c[i];
        EXPECT_EQ(k->principal->str(), "member/alice") << c[i];
      }
    }
  }
  EXPECT_EQ(conn_reads, 3);  // a, b, c
  EXPECT_EQ(member_reads, 1);
}

// The member's script refused too (its slot split): its per-member data is read key by key
// between two GETs of the member's version. A per-member commit between them (it INCRs the
// member's version with the manifest) makes the reads go again, once; the answer is the new
// state's, as the one-script read renders it.
TEST_F(SpreadRead, AWriteOfTheMembersDataWhileItIsReadKeyByKeyIsReadAgain) {
  as_v2_grants();
  int changes = 0;
  split_ = true;
  const std::string manifest = *keys_.manifest("b", member("alice"));
  Result<DiscoverySnapshot> v2 = v2_read({}, {}, [&](const SpreadDiscoveryRead& read) {
    // Split 1 is read: the next round reads the keys. Commit alice's b once, before.
    bool member_reads = false;
    for (const RedisCommand& c : read.commands()) member_reads |= c.size() > 1 && c[1] == manifest;
    if (read.reading_split() && member_reads && changes == 0) {
      ++changes;
      as_v1_grants();
      commit("b", member("alice"), kNow + 1);
      as_v2_grants();
    }
  });
  split_ = false;
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(rounds_, 2 + 3 + 2) << "split 2 and 3 read again";
  EXPECT_EQ(split_reads_, 4u) << "a, b, c and the member's";
  as_v1_grants();
  const DiscoverySnapshot v1 = v1_read();
  EXPECT_EQ(render(*v2, kNow + 10), render(v1, kNow + 10));
  const GrantedConnection* b = v2->find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->manifest.has_value());
  EXPECT_EQ(b->manifest->fetched_at_ms, kNow + 1) << "the state read the second time";
}

// The member's data that keeps changing while read key by key is a store failure, never a mix.
TEST_F(SpreadRead, AMembersSplitDataThatKeepsChangingIsAStoreFailure) {
  as_v2_grants();
  int changes = 0;
  Result<DiscoverySnapshot> v2 =
      split_read_changing(*keys_.member_version(member("alice")), &changes);
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.error().code, ErrorCode::kStoreUnavailable) << v2.error().message;
  EXPECT_NE(v2.error().message.find("per-member data of 'member/alice'"), std::string::npos)
      << v2.error().message;
  EXPECT_EQ(changes, 2);
}

}  // namespace
}  // namespace quiver
