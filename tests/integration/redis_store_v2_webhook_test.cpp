// The signed refresh webhook on key layout v2 (shared/webhook_spread.h; docs/design.md "The refresh
// webhook on v2"), through the agent's RedisStore, on one real redis-server and on a real six-node
// Redis Cluster: the same namespace content written by the real store in v1 (its own
// redis-server) and in v2 answers the same webhooks with the same statuses; the marks land in the
// slots the design gives them; a per_member connection marked as a whole writes no per-grantee
// key; readers then see the data stale and revalidate it; a webhook cut short before its replay
// guard is done again by the same signed request; and the edge's Redis user
// (schema/redis-acl-edge.txt) can run every round of it and write nothing else.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/discovery.h"
#include "shared/discovery_redis.h"
#include "shared/discovery_render.h"
#include "shared/layout.h"
#include "shared/redis_cluster.h"
#include "shared/webhook_spread.h"
#include "tests/support/discovery_reads.h"
#include "tests/support/edge_acl.h"
#include "tests/support/hiredis_run.h"
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
constexpr int64_t kWindowMs = 30'000;
constexpr char kNs[] = "hook";

Principal member(const std::string& id) { return *Principal::member(id); }

WebhookVerified signed_request(const std::string& id) {
  WebhookVerified v;
  v.replay_key = "wh:" + id;
  v.retain_for_ms = 600'000;
  return v;
}

WebhookRefreshTarget target(const std::string& cid, const std::string& principal = "") {
  WebhookRefreshTarget t;
  t.connection_id = cid;
  if (!principal.empty()) t.principal = *Principal::parse(principal);
  t.reason = "deploy";
  return t;
}

// docs and wiki are shared, mail and team per_member; bob is granted docs and mail, eve docs only;
// team has no grantees. docs and bob's mail have data, wiki none.
const WebhookRefreshRequest kEveryStatus{{
    target("docs"),                // queued, marked
    target("docs", "member/bob"),  // unknown_principal: a member named on a shared connection
    target("mail", "member/bob"),  // in_progress (a lease held), marked
    target("mail"),                // marked, as a whole (it has a grantee)
    target("mail", "member/eve"),  // unknown_principal: not a grantee
    target("gone"),                // unknown_connection
    target("mail", "shared"),      // unknown_principal: `shared` on a per_member connection
    target("wiki", "shared"),      // queued, not marked (no data)
    target("team"),                // marked as a whole, '0' (no grantees)
}};

// Where the v2 store writes: a second redis-server, or the cluster.
enum class Target { kOneRedis, kCluster };

class StoreV2Webhook : public ::testing::TestWithParam<Target> {
 protected:
  static void SetUpTestSuite() {
    v1_server_ = new testing::RedisServer();
    v2_server_ = new testing::RedisServer();
    cluster_ = new testing::RedisCluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete v2_server_;
    delete v1_server_;
  }

  void SetUp() override {
    ASSERT_TRUE(v1_server_->ok()) << v1_server_->error();
    ASSERT_TRUE(v2_server_->ok()) << v2_server_->error();
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
    v1_c_.reset(v1_server_->connect());
    v2_c_.reset(v2_server_->connect());
    ASSERT_NE(v1_c_, nullptr);
    ASSERT_NE(v2_c_, nullptr);
    run_argv(v1_c_.get(), {"FLUSHALL"});
    run_argv(v2_c_.get(), {"FLUSHALL"});
    ASSERT_TRUE(cluster_->flush_all());
    RedisClusterPoolOptions po;
    ClusterNode seed;
    seed.host = "127.0.0.1";
    seed.port = cluster_->ports()[0];
    po.seeds.push_back(seed);
    Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(po);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    pool_ = std::move(*pool);

    ASSERT_TRUE(v2_raw({"SET", v2_keys_.layout(), "v2:ready:" + std::to_string(kNow)}).is_ok());
    v1_ = make_store(KeyLayout::kV1);
    v2_ = make_store(KeyLayout::kV2);
    ASSERT_NE(v1_, nullptr);
    ASSERT_NE(v2_, nullptr);
    // The same content, written by the real store in each layout.
    for (RedisStore* s : {v1_.get(), v2_.get()}) {
      ASSERT_TRUE(s->begin_namespace_restore(kNow).ok());
      Result<ConnectionSync> sync =
          s->sync_connections({stdio_record("docs", CredentialMode::kShared, kNow),
                               stdio_record("mail", CredentialMode::kPerMember, kNow),
                               stdio_record("team", CredentialMode::kPerMember, kNow),
                               stdio_record("wiki", CredentialMode::kShared, kNow)});
      ASSERT_TRUE(sync.ok()) << sync.error().message;
      Result<GrantSync> grants = s->sync_grants({{"bob", {"docs", "mail"}}, {"eve", {"docs"}}});
      ASSERT_TRUE(grants.ok()) << grants.error().message;
      ASSERT_TRUE(s->mark_namespace_ready(kNow).ok());
      ASSERT_TRUE(s->read_namespace().ok());
      ASSERT_NO_FATAL_FAILURE(
          commit_listing(*s, "docs", Principal::shared(), listing_write("docs", kNow)));
      ASSERT_NO_FATAL_FAILURE(
          commit_listing(*s, "mail", member("bob"), listing_write("mail", kNow)));
      // A refresh of bob's mail under way.
      Result<AcquireResult> lease =
          s->acquire_lease("mail", member("bob"), std::string(32, 'e'), 600'000);
      ASSERT_TRUE(lease.ok() && lease->acquired);
    }
  }

  bool cluster() const { return GetParam() == Target::kCluster; }

  std::unique_ptr<RedisStore> make_store(KeyLayout layout) {
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.ns = kNs;
    o.now_ms = [] { return kNow; };
    o.key_layout = layout;
    if (layout == KeyLayout::kV1) {
      o.redis.port = v1_server_->port();
    } else if (cluster()) {
      o.redis.port = cluster_->ports()[0];
      o.redis.cluster = true;
      o.redis.seeds.push_back({"127.0.0.1", cluster_->ports()[0]});
    } else {
      o.redis.port = v2_server_->port();
    }
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  RespValue v2_raw(const RedisCommand& argv) {
    if (!cluster()) return run_argv(v2_c_.get(), argv);
    Result<RespValue> r = pool_->run(argv);
    return r.ok() ? std::move(*r) : RespValue::error(r.error().message);
  }
  RespValue v1_raw(const RedisCommand& argv) { return run_argv(v1_c_.get(), argv); }

  std::string v2_value(const std::string& key) {
    RespValue v = v2_raw({"GET", key});
    return std::string(v.as_string().value_or(""));
  }

  // Every key of the v2 namespace with a digest of its value (DUMP), on every master.
  std::map<std::string, std::string> v2_dump() {
    const RedisCommand keys = {"KEYS", "quiver:{" + std::string(kNs) + "*"};
    std::set<std::string> names;
    auto add = [&](const RespValue& reply) {
      for (const RespValue& k : reply.elements) names.insert(k.str);
    };
    if (!cluster()) {
      add(run_argv(v2_c_.get(), keys));
    } else {
      for (auto& [node, reply] : pool_->run_on_masters(keys)) {
        EXPECT_TRUE(reply.ok()) << reply.error().message;
        if (reply.ok()) add(*reply);
      }
    }
    std::map<std::string, std::string> out;
    for (const std::string& k : names) out[k] = v2_raw({"DUMP", k}).str;
    return out;
  }

  // The entries of a revalidation stream: "cid principal reason at" each.
  static std::vector<std::string> entries(const RespValue& xrange) {
    std::vector<std::string> out;
    for (const RespValue& e : xrange.elements) {
      if (e.elements.size() != 2) continue;
      std::string fields;
      for (const RespValue& f : e.elements[1].elements) fields += f.str + " ";
      out.push_back(fields);
    }
    return out;
  }

  // The v2 webhook's rounds driven by hand, each command on its own (routed by its key), as far
  // as round `last` (a webhook cut short after it).
  void drive_until(const WebhookVerified& v, const WebhookRefreshRequest& request, int64_t now,
                   int last) {
    EnqueueOptions o;
    o.window_ms = kWindowMs;
    Result<SpreadWebhookRefresh> hook = SpreadWebhookRefresh::start(v2_keys_, v, request, now, o);
    ASSERT_TRUE(hook.ok()) << hook.error().message;
    while (!hook->done() && hook->round() <= last) {
      std::vector<RespValue> replies;
      for (const RedisCommand& c : hook->commands()) replies.push_back(v2_raw(c));
      Status s = hook->feed(replies);
      ASSERT_TRUE(s.ok()) << s.error().message;
    }
  }

  static inline testing::RedisServer* v1_server_ = nullptr;
  static inline testing::RedisServer* v2_server_ = nullptr;
  static inline testing::RedisCluster* cluster_ = nullptr;
  RedisConnection v1_c_, v2_c_;
  std::unique_ptr<RedisClusterPool> pool_;
  std::unique_ptr<RedisStore> v1_, v2_;
  RedisKeys v1_keys_ = *RedisKeys::create(kNs);
  RedisKeys v2_keys_ = *RedisKeys::create(kNs, KeyLayout::kV2);
};

INSTANTIATE_TEST_SUITE_P(Targets, StoreV2Webhook,
                         ::testing::Values(Target::kOneRedis, Target::kCluster),
                         [](const ::testing::TestParamInfo<Target>& i) {
                           return i.param == Target::kCluster ? "Cluster" : "OneRedis";
                         });

TEST_P(StoreV2Webhook, EveryStatusIsTheV1ScriptsAndTheMarksLandInTheirSlots) {
  const int64_t at = kNow + 100;
  const std::string at_text = std::to_string(at);
  const std::string docs_version = v2_value(*v2_keys_.conn_version("docs"));
  const std::string bob_version = v2_value(*v2_keys_.member_version(member("bob")));
  const std::string mail_version = v2_value(*v2_keys_.conn_version("mail"));

  Result<WebhookRefreshReply> one =
      v1_->apply_webhook(signed_request("a"), kEveryStatus, at, kWindowMs);
  Result<WebhookRefreshReply> two =
      v2_->apply_webhook(signed_request("a"), kEveryStatus, at, kWindowMs);
  ASSERT_TRUE(one.ok()) << one.error().message;
  ASSERT_TRUE(two.ok()) << two.error().message;
  EXPECT_FALSE(two->replay);
  EXPECT_EQ(one->results, two->results);
  ASSERT_EQ(two->results.size(), kEveryStatus.targets.size());
  const std::vector<std::pair<std::string, bool>> want = {{"queued", true},
                                                          {"unknown_principal", false},
                                                          {"in_progress", true},
                                                          {"marked", true},
                                                          {"unknown_principal", false},
                                                          {"unknown_connection", false},
                                                          {"unknown_principal", false},
                                                          {"queued", false},
                                                          {"marked", false}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(two->results[i].status, want[i].first) << i;
    EXPECT_EQ(two->results[i].marked_stale, want[i].second) << i;
  }

  // The marks, each in its slot: docs's and the connection-wide ones in the connection's, bob's
  // in bob's; the versions of those slots moved once; nothing for wiki (no data).
  EXPECT_EQ(v2_value(*v2_keys_.invalidated("docs", Principal::shared())), at_text);
  EXPECT_EQ(v2_value(*v2_keys_.invalidated("mail", member("bob"))), at_text);
  EXPECT_EQ(v2_value(*v2_keys_.marked("mail")), at_text);
  EXPECT_EQ(v2_value(*v2_keys_.marked("team")), at_text);
  EXPECT_TRUE(v2_raw({"EXISTS", *v2_keys_.invalidated("wiki", Principal::shared())}).integer == 0);
  EXPECT_EQ(v2_keys_.invalidated("mail", member("bob"))->find("{hook:m:bob}"), 7u);
  EXPECT_EQ(std::stoll(v2_value(*v2_keys_.conn_version("docs"))), std::stoll(docs_version) + 1);
  EXPECT_EQ(std::stoll(v2_value(*v2_keys_.member_version(member("bob")))),
            std::stoll(bob_version) + 1);
  EXPECT_EQ(std::stoll(v2_value(*v2_keys_.conn_version("mail"))), std::stoll(mail_version) + 1);
  // The gates, on the manifests' slots (bob's lease held: none for it).
  EXPECT_EQ(v2_value(*v2_keys_.revalidate_gate("docs", Principal::shared())), at_text);
  EXPECT_EQ(v2_value(*v2_keys_.revalidate_gate("wiki", Principal::shared())), at_text);
  EXPECT_EQ(v2_raw({"EXISTS", *v2_keys_.revalidate_gate("mail", member("bob"))}).integer, 0);
  // The requests, on each connection's shard, v1's entries field for field.
  std::vector<std::string> v1_entries =
      entries(v1_raw({"XRANGE", v1_keys_.revalidate_stream(), "-", "+"}));
  std::multiset<std::string> v2_entries;
  for (const char* cid : {"docs", "mail", "wiki"}) {
    for (const std::string& e : entries(v2_raw(
             {"XRANGE", *v2_keys_.revalidate_stream(*v2_keys_.connection_shard(cid)), "-", "+"}))) {
      v2_entries.insert(e);
    }
  }
  EXPECT_EQ(std::multiset<std::string>(v1_entries.begin(), v1_entries.end()), v2_entries);
  EXPECT_EQ(v2_entries.count("cid docs principal shared reason webhook at " + at_text + " "), 1u);
  EXPECT_EQ(v2_entries.count("cid mail principal member/bob reason webhook at " + at_text + " "),
            1u);
  EXPECT_EQ(v2_entries.size(), 3u);
  // The guard, in its own slot.
  EXPECT_EQ(v2_value(v2_keys_.replay("wh:a")), at_text);
  EXPECT_EQ(v2_keys_.replay("wh:a").find("quiver:{hook:r:"), 0u);
  if (cluster()) {
    for (const std::string& key : {v2_keys_.replay("wh:a"), *v2_keys_.marked("mail"),
                                   *v2_keys_.invalidated("mail", member("bob"))}) {
      EXPECT_EQ(v2_raw({"CLUSTER", "KEYSLOT", key}).integer, cluster_key_slot(key)) << key;
    }
  }

  // The same signed request again: a replay at both, nothing written.
  const std::map<std::string, std::string> before = v2_dump();
  Result<WebhookRefreshReply> replay_one =
      v1_->apply_webhook(signed_request("a"), kEveryStatus, at + 1, kWindowMs);
  Result<WebhookRefreshReply> replay_two =
      v2_->apply_webhook(signed_request("a"), kEveryStatus, at + 1, kWindowMs);
  ASSERT_TRUE(replay_one.ok() && replay_two.ok());
  EXPECT_TRUE(replay_one->replay);
  EXPECT_TRUE(replay_two->replay);
  EXPECT_EQ(v2_dump(), before);

  // Another signed request within the requeue age: already_queued where the gate stands, at both.
  Result<WebhookRefreshReply> again_one =
      v1_->apply_webhook(signed_request("b"), kEveryStatus, at + 200, kWindowMs);
  Result<WebhookRefreshReply> again_two =
      v2_->apply_webhook(signed_request("b"), kEveryStatus, at + 200, kWindowMs);
  ASSERT_TRUE(again_one.ok() && again_two.ok());
  EXPECT_EQ(again_one->results, again_two->results);
  EXPECT_EQ(again_two->results[0].status, "already_queued");
  EXPECT_EQ(again_two->results[7].status, "already_queued");
  EXPECT_EQ(again_two->results[2].status, "in_progress");
}

// Readers see the marked data stale and ask for its refresh; the rendered answers of both layouts
// are the same, byte for byte.
TEST_P(StoreV2Webhook, ReadersThenSeeTheDataStale) {
  Result<DiscoverySnapshot> fresh = v2_->read_discovery(member("bob"));
  ASSERT_TRUE(fresh.ok()) << fresh.error().message;
  const std::string fresh_answer = testing::rendered_answer(*fresh, kNow + 50);
  EXPECT_EQ(fresh_answer.find("docs/shared/"), std::string::npos) << fresh_answer;
  for (RedisStore* s : {v1_.get(), v2_.get()}) {
    Result<WebhookRefreshReply> r = s->apply_webhook(
        signed_request("c"), {{target("docs"), target("mail")}}, kNow + 100, kWindowMs);
    ASSERT_TRUE(r.ok()) << r.error().message;
  }
  Result<DiscoverySnapshot> a = v1_->read_discovery(member("bob"));
  Result<DiscoverySnapshot> b = v2_->read_discovery(member("bob"));
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string v2_answer = testing::rendered_answer(*b, kNow + 200);
  EXPECT_EQ(testing::rendered_answer(*a, kNow + 200), v2_answer);
  // docs by its own mark (revalidated), bob's mail by the connection-wide one (its refresh is
  // under way: the lease the fixture holds): both read stale.
  EXPECT_NE(v2_answer.find("docs/shared/"), std::string::npos) << v2_answer;
  ASSERT_EQ(b->connections.size(), 2u);
  for (const GrantedConnection& c : b->connections) {
    ASSERT_TRUE(c.manifest.has_value()) << c.id;
    EXPECT_EQ(c.manifest->invalidated_at_ms, std::optional<int64_t>(kNow + 100)) << c.id;
  }
  RenderedDiscovery rendered = render_manifests(*b, FreshnessPolicy{}, kNow + 200);
  EXPECT_NE(rendered.body.find("\"stale\""), std::string::npos) << rendered.body;
}

// A per_member connection named as a whole: the mark and the connection's version, in its slot,
// and the guard; no key of any member is written, whatever the number of grantees.
TEST_P(StoreV2Webhook, AConnectionWideMarkIsOneKeyWhateverItsGrantees) {
  std::map<std::string, std::set<std::string>> many;
  for (int i = 0; i < 200; ++i) many["m" + std::to_string(i)] = {"mail"};
  many["bob"] = {"docs", "mail"};
  many["eve"] = {"docs"};
  ASSERT_TRUE(v2_->sync_grants(many).ok());
  const std::map<std::string, std::string> before = v2_dump();
  Result<WebhookRefreshReply> r =
      v2_->apply_webhook(signed_request("d"), {{target("mail")}}, kNow + 100, kWindowMs);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_EQ(r->results[0].status, "marked");
  EXPECT_TRUE(r->results[0].marked_stale);
  const std::map<std::string, std::string> after = v2_dump();
  std::set<std::string> changed;
  for (const auto& [k, v] : after) {
    auto it = before.find(k);
    if (it == before.end() || it->second != v) changed.insert(k);
  }
  for (const auto& [k, v] : before) {
    if (after.count(k) == 0) changed.insert(k);
  }
  EXPECT_EQ(changed,
            (std::set<std::string>{*v2_keys_.marked("mail"), *v2_keys_.conn_version("mail"),
                                   v2_keys_.replay("wh:d")}));
}

// Cut short before its guard (the connection lost after the marks and the requests): the same
// signed request is not a replay, and is done again.
TEST_P(StoreV2Webhook, AWebhookCutShortIsDoneAgainBySameSignedRequest) {
  for (int last : {1, 2, 3}) {
    const WebhookVerified v = signed_request("cut" + std::to_string(last));
    ASSERT_NO_FATAL_FAILURE(drive_until(v, {{target("docs")}}, kNow + 100, last));
    EXPECT_EQ(v2_raw({"EXISTS", v2_keys_.replay(v.replay_key)}).integer, 0) << last;
    Result<WebhookRefreshReply> retry =
        v2_->apply_webhook(v, {{target("docs")}}, kNow + 150, kWindowMs);
    ASSERT_TRUE(retry.ok()) << retry.error().message;
    EXPECT_FALSE(retry->replay) << last;
    ASSERT_EQ(retry->results.size(), 1u);
    EXPECT_TRUE(retry->results[0].marked_stale);
    EXPECT_EQ(v2_value(*v2_keys_.invalidated("docs", Principal::shared())),
              std::to_string(kNow + 150));
    EXPECT_EQ(v2_value(v2_keys_.replay(v.replay_key)), std::to_string(kNow + 150));
  }
}

// A namespace not ready, or not in v2: nothing is written, not even the guard.
TEST_P(StoreV2Webhook, NothingIsWrittenUnlessTheNamespaceIsReadyInV2) {
  ASSERT_TRUE(v2_raw({"SET", v2_keys_.namespace_record(), "restoring:1"}).is_ok());
  std::map<std::string, std::string> before = v2_dump();
  Result<WebhookRefreshReply> r =
      v2_->apply_webhook(signed_request("e"), kEveryStatus, kNow + 100, kWindowMs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kStoreNotReady) << r.error().message;
  EXPECT_EQ(v2_dump(), before);

  ASSERT_TRUE(v2_raw({"SET", v2_keys_.namespace_record(), "ready:1"}).is_ok());
  ASSERT_TRUE(v2_raw({"SET", v2_keys_.layout(), "v2:filling:1"}).is_ok());
  before = v2_dump();
  r = v2_->apply_webhook(signed_request("e"), kEveryStatus, kNow + 100, kWindowMs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kStoreUnavailable) << r.error().message;
  EXPECT_EQ(v2_dump(), before);
}

// The edge's Redis user (schema/redis-acl-edge.txt) runs every round, and may write nothing but
// what they write: no manifest, lease, record, grant or registry.
TEST_P(StoreV2Webhook, TheEdgesUserRunsItAndWritesNothingElse) {
  if (cluster()) GTEST_SKIP() << "the ACL is the same on every node; checked on one";
  RedisConnection edge = testing::connect_as_edge(*v2_server_, kNs);
  ASSERT_NE(edge, nullptr);
  EnqueueOptions o;
  o.window_ms = kWindowMs;
  Result<SpreadWebhookRefresh> hook =
      SpreadWebhookRefresh::start(v2_keys_, signed_request("f"), kEveryStatus, kNow + 100, o);
  ASSERT_TRUE(hook.ok());
  while (!hook->done()) {
    std::vector<RespValue> replies;
    for (const RedisCommand& c : hook->commands()) {
      replies.push_back(run_argv(edge.get(), c));
      EXPECT_FALSE(replies.back().is_error())
          << c[0] << " " << (c.size() > 3 ? c[3] : c[1]) << ": " << replies.back().str;
    }
    Status s = hook->feed(replies);
    ASSERT_TRUE(s.ok()) << s.error().message;
  }
  WebhookRefreshReply reply = hook->take_reply();
  EXPECT_FALSE(reply.replay);
  EXPECT_EQ(reply.results.size(), kEveryStatus.targets.size());

  auto refused = [&](const RedisCommand& argv) {
    RespValue v = run_argv(edge.get(), argv);
    EXPECT_TRUE(v.is_error() && (v.str.find("NOPERM") != std::string::npos ||
                                 v.str.find("can't access") != std::string::npos))
        << argv[0] << " " << argv[1] << ": " << v.debug_string();
  };
  // Keys the rounds only read, and every other key of the namespace: refused by key (SET is a
  // command the edge may send), and a script may not declare them either.
  refused({"SET", *v2_keys_.manifest("docs", Principal::shared()), "x"});
  refused({"SET", *v2_keys_.manifest("mail", member("bob")), "x"});
  refused({"EVAL", "return 1", "1", *v2_keys_.manifest("mail", member("bob"))});
  refused({"SET", *v2_keys_.lease("docs", Principal::shared()), "x"});
  refused({"SET", *v2_keys_.lease("mail", member("bob")), "x"});
  refused({"SET", *v2_keys_.fence("mail", member("bob")), "9"});
  refused({"SET", *v2_keys_.conn("docs"), "x"});
  refused({"SET", *v2_keys_.grantees("docs"), "x"});
  refused({"SET", *v2_keys_.grants(member("bob")), "x"});
  refused({"SET", *v2_keys_.disabled("docs", Principal::shared()), "x"});
  refused({"SET", *v2_keys_.conns(0), "x"});
  refused({"SET", *v2_keys_.due(0), "x"});
  refused({"SET", *v2_keys_.grantees_pending(0), "x"});  // (the calls stream is the relay's)
  refused({"SET", *v2_keys_.body(std::string(64, 'a')), "{}"});
}

}  // namespace
}  // namespace quiver
