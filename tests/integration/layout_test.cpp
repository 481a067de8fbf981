// The key layout record (shared/layout.h) on a real redis-server: every reader follows it. No
// record, `v1:...` or `v2:filling:<at>` (a copy to v2 under way) reads as today; a layout this
// build does not know (`v3:ready:<at>`, garbage) makes the store unavailable at the agent's
// RedisStore and in the reply the edge decodes (the same script, run as the edge's least-privilege
// Redis user), a conditional read is not answered "unchanged" across it, and the agent writes
// nothing into the namespace until the record reads v1 again.
#include "shared/layout.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_store.h"
#include "shared/discovery_redis.h"
#include "shared/edge_snapshot.h"
#include "tests/support/edge_acl.h"
#include "tests/support/redis_fixture.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

using testing::commit_listing;
using testing::listing_write;
using testing::stdio_record;

constexpr int64_t kNow = 1'790'000'000'000;
constexpr char kNs[] = "lay";

Principal alice() { return *Principal::member("alice"); }

class Layout : public testing::RedisFixture {
 protected:
  void SetUp() override {
    RedisFixture::SetUp();
    if (HasFatalFailure()) return;
    store_ = open_store();
    ASSERT_TRUE(store_);
    ASSERT_TRUE(store_->begin_namespace_restore(kNow).ok());
    ASSERT_TRUE(store_
                    ->sync_connections({stdio_record("a", CredentialMode::kShared, kNow),
                                        stdio_record("b", CredentialMode::kPerMember, kNow)})
                    .ok());
    ASSERT_TRUE(store_->sync_grants({{"alice", {"a", "b"}}}).ok());
    commit_listing(*store_, "a", Principal::shared(), listing_write("a", kNow));
    commit_listing(*store_, "b", alice(), listing_write("b", kNow));
    ASSERT_TRUE(store_->mark_namespace_ready(kNow).ok());
  }

  std::unique_ptr<RedisStore> open_store() {
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = redis_->port();
    o.ns = kNs;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  void set_layout(const std::optional<std::string>& value) {
    RespValue r = value ? cmd({"SET", keys_.layout(), *value}) : cmd({"DEL", keys_.layout()});
    ASSERT_FALSE(r.is_error()) << r.str;
  }

  // The discovery read as the edge makes it: the script sent as the edge's Redis user (the ACL of
  // schema/redis-acl-edge.txt), its reply through the shared decoder.
  Result<DiscoverySnapshot> edge_read() {
    testing::RedisConnection edge = testing::connect_as_edge(*redis_, kNs);
    if (!edge) return Error(ErrorCode::kInternal, "no edge connection");
    return decode_discovery_reply(
        testing::run_argv(edge.get(), *discovery_read_command(keys_, alice())), alice());
  }

  // Every key of the namespace with its type and value digest: what "nothing was written" means.
  std::string namespace_dump() {
    RespValue keys = cmd({"KEYS", keys_.namespace_match_pattern()});
    std::vector<std::string> names;
    for (const RespValue& k : keys.elements) names.push_back(k.str);
    std::sort(names.begin(), names.end());
    std::string out;
    for (const std::string& k : names) {
      if (k == keys_.layout()) continue;
      RespValue dump = cmd({"DUMP", k});
      out += k + "=" + dump.str + "\n";
    }
    return out;
  }

  void expect_refused(const Status& st, const char* what) {
    ASSERT_FALSE(st.ok()) << what << " was not refused";
    EXPECT_EQ(st.error().code, ErrorCode::kStoreUnavailable) << what;
    EXPECT_NE(st.error().message.find(keys_.layout()), std::string::npos)
        << what << ": " << st.error().message;
  }

  RedisKeys keys_ = *RedisKeys::create(kNs);
  std::unique_ptr<RedisStore> store_;
};

TEST_F(Layout, NoRecordOrV1ReadsAsToday) {
  for (const std::optional<std::string>& record :
       {std::optional<std::string>(), std::optional<std::string>("v1:ready:1")}) {
    set_layout(record);
    Result<DiscoverySnapshot> agent = store_->read_discovery(alice());
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    EXPECT_EQ(agent->connections.size(), 2u);
    Result<DiscoverySnapshot> edge = edge_read();
    ASSERT_TRUE(edge.ok()) << edge.error().message;
    EXPECT_EQ(edge->connections.size(), 2u);
    Result<NamespaceRecord> ns = store_->read_namespace();
    ASSERT_TRUE(ns.ok()) << ns.error().message;
    EXPECT_EQ(ns->state, NamespaceState::kReady);
  }
}

// (`v2:ready:<at>` is a layout this build reads, in rounds: layout_v2_read_cluster_test.cpp.)
TEST_F(Layout, AnUnknownLayoutIsTheStoreUnavailableAtTheAgentAndAtTheEdge) {
  for (const char* record : {"v9:filling:1", "v3:ready:1790000000000", "garbage", "v1"}) {
    set_layout(std::string(record));
    Result<DiscoverySnapshot> agent = store_->read_discovery(alice());
    ASSERT_FALSE(agent.ok()) << record << ": served " << agent->connections.size() << " entries";
    EXPECT_EQ(agent.error().code, ErrorCode::kStoreUnavailable) << record;
    EXPECT_NE(agent.error().message.find(keys_.layout()), std::string::npos)
        << agent.error().message;
    EXPECT_NE(agent.error().message.find(std::string("`") + record + "`"), std::string::npos)
        << agent.error().message;
    Result<DiscoverySnapshot> edge = edge_read();
    ASSERT_FALSE(edge.ok()) << record;
    EXPECT_EQ(edge.error().code, ErrorCode::kStoreUnavailable) << edge.error().message;
    Result<NamespaceRecord> ns = store_->read_namespace();
    ASSERT_FALSE(ns.ok()) << record;
    EXPECT_EQ(ns.error().code, ErrorCode::kStoreUnavailable);
  }
}

// `v2:filling:<at>`: `quiver-agent migrate-layout v2` copies the namespace to v2. Readers read v1
// all along (what they read is what they read with no record), and a conditional read stays
// unchanged; the agent's store check says the copy is under way (its writes wait).
TEST_F(Layout, WhileTheCopyToV2RunsReadersReadV1) {
  Result<DiscoverySnapshot> before = store_->read_discovery(alice());
  ASSERT_TRUE(before.ok()) << before.error().message;
  Result<DiscoverySnapshot> held = edge_read();
  ASSERT_TRUE(held.ok()) << held.error().message;
  set_layout("v2:filling:1790000000000");
  Result<DiscoverySnapshot> agent = store_->read_discovery(alice());
  ASSERT_TRUE(agent.ok()) << agent.error().message;
  EXPECT_EQ(agent->connections.size(), before->connections.size());
  Result<DiscoverySnapshot> edge = edge_read();
  ASSERT_TRUE(edge.ok()) << edge.error().message;
  EXPECT_EQ(edge->connections.size(), held->connections.size());
  Result<RedisCommand> c = conditional_discovery_read_command(keys_, *held, {}, {});
  ASSERT_TRUE(c.ok());
  Result<std::optional<DiscoverySnapshot>> r = decode_conditional_reply(cmd(*c), *held, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->has_value()) << "nothing changed in v1: unchanged";
  Result<NamespaceRecord> ns = store_->read_namespace();
  ASSERT_FALSE(ns.ok());
  EXPECT_TRUE(is_layout_migrating_error(ns.error())) << ns.error().message;
}

TEST_F(Layout, AConditionalReadAcrossALayoutChangeIsNotUnchanged) {
  Result<DiscoverySnapshot> held = edge_read();
  ASSERT_TRUE(held.ok()) << held.error().message;
  auto conditional = [&]() {
    Result<RedisCommand> c = conditional_discovery_read_command(keys_, *held, {}, {});
    EXPECT_TRUE(c.ok());
    return decode_conditional_reply(cmd(*c), *held, {});
  };
  Result<std::optional<DiscoverySnapshot>> r = conditional();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->has_value()) << "nothing changed: unchanged";

  set_layout("v3:ready:1");
  r = conditional();
  ASSERT_FALSE(r.ok()) << "a layout change answered "
                       << (r->has_value() ? "a full read" : "unchanged");
  EXPECT_EQ(r.error().code, ErrorCode::kStoreUnavailable);

  // Back to v1 (a record naming it): what the reader holds is what v1 holds again.
  set_layout("v1:ready:2");
  r = conditional();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->has_value());
}

TEST_F(Layout, TheAgentWritesNothingWhileTheLayoutIsUnknownAndResumesAfter) {
  set_layout("v2:filling:1");
  Result<NamespaceRecord> ns = store_->read_namespace();  // the agent's store check
  ASSERT_FALSE(ns.ok());
  const std::string before = namespace_dump();
  const Principal shared = Principal::shared();

  Result<AcquireResult> lease = store_->acquire_lease("a", shared, std::string(32, 'd'), 60'000);
  expect_refused(lease.ok() ? Status::Ok() : Status(lease.error()), "acquire_lease");
  Result<ConnectionSync> sync =
      store_->sync_connections({stdio_record("c", CredentialMode::kShared, kNow)});
  expect_refused(sync.ok() ? Status::Ok() : Status(sync.error()), "sync_connections");
  Result<GrantSync> grants = store_->sync_grants({{"alice", {"a"}}});
  expect_refused(grants.ok() ? Status::Ok() : Status(grants.error()), "sync_grants");
  expect_refused(store_->begin_namespace_restore(kNow), "begin_namespace_restore");
  expect_refused(store_->mark_call_agent_alive("agent-x", 3'000), "mark_call_agent_alive");
  WebhookRefreshRequest request;
  request.targets.push_back({"a", shared, "deploy"});
  Result<WebhookRefreshReply> webhook =
      store_->apply_webhook(WebhookVerified{kNow, "wh:one", 300'000}, request, kNow, 30'000);
  expect_refused(webhook.ok() ? Status::Ok() : Status(webhook.error()), "apply_webhook");
  Result<RevalidationBatch> revalidations = store_->read_revalidations("agent-x", 10, 0);
  expect_refused(revalidations.ok() ? Status::Ok() : Status(revalidations.error()),
                 "read_revalidations (a consumer group read)");
  EXPECT_EQ(namespace_dump(), before) << "a key of the namespace changed";

  // The edge's webhook script refuses too, writing nothing (not the replay guard either).
  Result<RedisCommand> edge_webhook = webhook_refresh_command(
      keys_, WebhookVerified{kNow, "wh:two", 300'000}, request, kNow, EnqueueOptions{});
  ASSERT_TRUE(edge_webhook.ok()) << edge_webhook.error().message;
  Result<WebhookRefreshReply> edge = parse_webhook_refresh_reply(cmd(*edge_webhook));
  ASSERT_FALSE(edge.ok());
  EXPECT_EQ(edge.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_EQ(namespace_dump(), before) << "the edge's webhook wrote";

  // A store that never checked refuses its first write all the same (it reads the record first).
  std::unique_ptr<RedisStore> fresh = open_store();
  ASSERT_TRUE(fresh);
  Result<AcquireResult> first = fresh->acquire_lease("a", shared, std::string(32, 'e'), 60'000);
  expect_refused(first.ok() ? Status::Ok() : Status(first.error()), "a fresh store's first write");

  // The record back to v1 (deleted): the next store check lets writes through again.
  set_layout(std::nullopt);
  ASSERT_TRUE(store_->read_namespace().ok());
  lease = store_->acquire_lease("a", shared, std::string(32, 'd'), 60'000);
  ASSERT_TRUE(lease.ok()) << lease.error().message;
  EXPECT_TRUE(lease->acquired);
  EXPECT_TRUE(store_->mark_call_agent_alive("agent-x", 3'000).ok());
  webhook =
      store_->apply_webhook(WebhookVerified{kNow, "wh:three", 300'000}, request, kNow, 30'000);
  ASSERT_TRUE(webhook.ok()) << webhook.error().message;
  EXPECT_NE(namespace_dump(), before);
}

TEST_F(Layout, AgentsDeclareTheirLayoutsInTheirCallAgentsMark) {
  Result<StoreLayout> none = store_->read_layout();
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->key, keys_.layout());
  EXPECT_FALSE(none->record.has_value());
  EXPECT_FALSE(none->call_agents.has_value());

  ASSERT_TRUE(store_->mark_call_agent_alive("agent-h-1-ab", 3'000).ok());
  set_layout("v2:filling:5");
  Result<StoreLayout> seen = store_->read_layout();  // read only: answers in any layout
  ASSERT_TRUE(seen.ok()) << seen.error().message;
  EXPECT_EQ(seen->record, std::optional<std::string>("v2:filling:5"));
  ASSERT_TRUE(seen->call_agents.has_value());
  EXPECT_EQ(*seen->call_agents, "agent-h-1-ab layouts=v1,v2");
  EXPECT_GT(seen->call_agents_ttl_ms, 0);
  Result<CallAgentsMark> mark = parse_call_agents_mark(*seen->call_agents);
  ASSERT_TRUE(mark.ok());
  EXPECT_EQ(mark->layouts, (std::vector<std::string>{"v1", "v2"}));
  // The edge only asks whether the key exists: relayed calls work with the new value.
  EXPECT_EQ(cmd({"EXISTS", keys_.call_agents()}).integer, 1);
}

// call-agents names the last agent only; the census names every agent seen within its window,
// and forgets one silent for kAgentCensusKeepMs.
TEST_F(Layout, TheCensusNamesEveryAgentSeenRecently) {
  const int64_t now = system_clock_ms()();
  cmd({"ZADD", keys_.agents(), std::to_string(now - kAgentCensusWindowMs - 1'000),
       "agent-gone layouts=v1"});
  cmd({"ZADD", keys_.agents(), std::to_string(now - kAgentCensusKeepMs - 1'000),
       "agent-ancient layouts=v1"});
  cmd({"ZADD", keys_.agents(), std::to_string(now - 2'000), "agent-older-build"});
  ASSERT_TRUE(store_->mark_call_agent_alive("agent-a", 3'000).ok());
  ASSERT_TRUE(store_->mark_call_agent_alive("agent-b", 3'000).ok());
  Result<StoreLayout> seen = store_->read_layout();
  ASSERT_TRUE(seen.ok()) << seen.error().message;
  EXPECT_EQ(*seen->call_agents, "agent-b layouts=v1,v2") << "the last one only";
  std::vector<std::string> names;
  for (const CensusEntry& e : seen->census) names.push_back(e.mark.consumer);
  ASSERT_EQ(seen->census.size(), 3u);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.begin() + 2),
            (std::set<std::string>{"agent-a", "agent-b"}));
  EXPECT_EQ(names[2], "agent-older-build") << "newest first";
  EXPECT_EQ(seen->census[2].mark.layouts, std::vector<std::string>{"v1"});
  EXPECT_GE(seen->census[0].seen_ms, now);
  // A switch to v2 would leave the older build behind (this build writes both).
  ASSERT_EQ(agents_without(seen->census, "v2").size(), 1u);
  EXPECT_EQ(agents_without(seen->census, "v2")[0]->mark.consumer, "agent-older-build");
  EXPECT_TRUE(agents_without(seen->census, "v1").empty());
  // The heartbeat dropped the mark silent for longer than the census keeps any.
  EXPECT_EQ(cmd({"ZSCORE", keys_.agents(), "agent-ancient layouts=v1"}).type,
            RespValue::Type::kNil);
  EXPECT_EQ(cmd({"ZCARD", keys_.agents()}).integer, 4) << "agent-gone kept, out of the window";
}

}  // namespace
}  // namespace quiver
