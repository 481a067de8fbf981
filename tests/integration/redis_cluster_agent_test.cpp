// The agent on a real six-node Redis Cluster (three masters, three replicas;
// tests/support/redis_cluster.h), configured as an operator would (`redis+cluster://` with two
// seeds): RedisStore over the cluster pools keeps the namespace in its slot, follows a graceful
// failover (CLUSTER FAILOVER on the replica: the old master answers MOVED) and a crashed master
// (SIGKILL: its replica is promoted, the map is read again), and `quiver-agent serve` lists a real
// upstream into the cluster and keeps serving and refreshing through a failover.
#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "native-agent/store/redis_store.h"
#include "shared/caller_token.h"
#include "shared/json.h"
#include "shared/manifest.h"
#include "shared/redis_cluster.h"
#include "shared/redis_keys.h"
#include "tests/support/cli_run.h"
#include "tests/support/cluster_faults.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/oauth_e2e.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using testing::AgentServe;
using testing::fail_over_to;
using testing::http_request;
using testing::master_and_replica;
using testing::RedisCluster;
using testing::RedisConnection;
using testing::run_argv;
using testing::TempDir;
using testing::wait_until;

constexpr char kPassword[] = "cluster-agent-pw-5Tq";
constexpr char kTokenKey[] = "cluster-agent-caller-token-key-0123456789";

std::string seeds_url(const RedisCluster& cluster) {
  return testing::seeds_url(cluster, kPassword);
}

uint16_t namespace_slot() { return cluster_key_slot(RedisKeys::create()->namespace_record()); }

ManifestWrite manifest_v(const std::string& version) {
  ManifestWrite w;
  w.manifest = R"({"tools":[{"name":"search","version":")" + version + R"("}]})";
  w.etag = "\"etag-" + version + "\"";
  w.config_hash = "h1";
  w.fetched_at_ms = 1'780'000'000'000;
  w.fresh_until_ms = w.fetched_at_ms + 900'000;
  w.expires_at_ms = w.fetched_at_ms + 86'400'000;
  w.cache_scope = "public";
  return w;
}

class RedisClusterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RedisClusterOptions o;
    o.password = kPassword;
    cluster_ = std::make_unique<RedisCluster>(o);
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
  }

  std::unique_ptr<RedisStore> store() {
    Result<RedisConfig> cfg = parse_redis_url(seeds_url(*cluster_));
    EXPECT_TRUE(cfg.ok()) << cfg.error().message;
    if (!cfg.ok()) return nullptr;
    RedisStoreOptions o;
    o.redis = *cfg;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.error().message;
    if (!s.ok()) return nullptr;
    // The connection `c1`, configured (a commit needs its record).
    ConnectionRecord r;
    r.id = "c1";
    r.config_hash = "h1";
    r.name = "c1";
    r.transport = "stdio";
    Result<ConnectionSync> synced = (*s)->sync_connections({r});
    EXPECT_TRUE(synced.ok()) << synced.error().message;
    return std::move(s).value();
  }

  // A whole refresh of `c1`: lease, fenced commit; then the manifest read back.
  std::string refresh_and_read(RedisStore& s, const std::string& version, int n) {
    std::string t = std::to_string(n);
    Result<AcquireResult> a =
        s.acquire_lease("c1", Principal::shared(), std::string(32 - t.size(), '0') + t, 60'000);
    if (!a.ok()) return "acquire: " + a.error().message;
    if (!a->acquired) return "acquire: not acquired";
    Result<FencedWriteResult> w =
        s.commit_manifest("c1", Principal::shared(), a->lease, manifest_v(version), {true});
    if (!w.ok()) return "commit: " + w.error().message;
    if (!w->ok()) return "commit: not committed";
    Result<std::optional<StoredManifest>> m = s.read_manifest("c1", Principal::shared());
    if (!m.ok()) return "read: " + m.error().message;
    if (!m->has_value()) return "read: nothing";
    return (*m)->manifest;
  }

  std::unique_ptr<RedisCluster> cluster_;
};

// Every key of the namespace lands in its slot, on one master; the store describes the cluster
// without the password; keyless commands (PING, TIME, SCAN) and MULTI/EXEC reach that master.
TEST_F(RedisClusterStoreTest, TheStoreKeepsTheNamespaceInItsSlot) {
  auto s = store();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->describe().rfind("redis+cluster://:***@127.0.0.1:", 0), 0u) << s->describe();
  EXPECT_EQ(s->describe().find(kPassword), std::string::npos);
  ASSERT_TRUE(s->health().ok()) << s->health().error().message;
  EXPECT_EQ(refresh_and_read(*s, "v1", 1), manifest_v("v1").manifest);
  ASSERT_TRUE(s->enqueue_revalidation("c1", Principal::shared(), "stale", 60'000).ok());
  Result<ManifestPage> page = s->list_manifest_metas("", 10);  // SCAN on the slot's master
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->metas.size(), 1u);
  Result<std::optional<int64_t>> t = s->store_time_ms();
  ASSERT_TRUE(t.ok() && t->has_value());
  // Every key is on the master of the namespace's slot, none elsewhere.
  const int master = master_and_replica(*cluster_, namespace_slot()).first;
  ASSERT_NE(master, 0);
  for (int port : cluster_->master_ports()) {
    RedisConnection c(cluster_->connect(port));
    ASSERT_NE(c, nullptr);
    RespValue keys = run_argv(c.get(), {"KEYS", "quiver:*"});
    if (port == master) {
      EXPECT_GE(keys.elements.size(), 5u);
    } else {
      EXPECT_TRUE(keys.elements.empty()) << port;
    }
  }
  std::optional<RedisClusterPoolStats> stats = s->cluster_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_GE(stats->refreshes, 1u);
  EXPECT_NE(s->metrics_text().find("quiver_redis_cluster_moved_total 0\n"), std::string::npos)
      << s->metrics_text();
}

// A graceful failover: the old master answers MOVED, the store follows it (and counts it); then a
// crashed master: its replica is promoted and the store reads the map again. Refreshes and reads
// keep working through both.
TEST_F(RedisClusterStoreTest, RefreshesAndReadsWorkThroughFailovers) {
  auto s = store();
  ASSERT_TRUE(s);
  EXPECT_EQ(refresh_and_read(*s, "v1", 1), manifest_v("v1").manifest);
  auto [master, replica] = master_and_replica(*cluster_, namespace_slot());
  ASSERT_NE(master, 0);
  ASSERT_NE(replica, 0);
  ASSERT_TRUE(fail_over_to(*cluster_, replica));
  EXPECT_EQ(refresh_and_read(*s, "v2", 2), manifest_v("v2").manifest);
  std::optional<RedisClusterPoolStats> stats = s->cluster_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_GE(stats->moved, 1u) << "the old master's MOVED was followed";
  EXPECT_NE(s->metrics_text().find("quiver_redis_cluster_moved_total "), std::string::npos);

  // SIGKILL the new master; its replica (the old master) takes over.
  const uint64_t refreshes = stats->refreshes;
  cluster_->kill(replica);
  ASSERT_TRUE(wait_until([&] { return cluster_->role(master) == "master"; }, 30000));
  ASSERT_TRUE(cluster_->wait_until_ok(30));
  EXPECT_EQ(refresh_and_read(*s, "v3", 3), manifest_v("v3").manifest);
  EXPECT_GT(s->cluster_stats()->refreshes, refreshes);
}

// A store made with a cluster URL but a database other than 0 is refused, with the reason.
TEST(RedisClusterStore, ADatabaseOtherThanZeroIsRefused) {
  RedisStoreOptions o;
  o.redis.cluster = true;
  o.redis.host = "127.0.0.1";
  o.redis.port = 7000;
  o.redis.seeds = {{"127.0.0.1", 7000}};
  o.redis.db = 2;
  Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find("only database 0"), std::string::npos);
}

// `quiver-agent serve`, a child process configured with the cluster's seeds, lists a real upstream
// into the cluster and serves it; after a failover of the namespace's master a manual refresh
// commits the upstream's new tool and GET /v1/manifests shows it; /metrics counts the MOVED.
TEST_F(RedisClusterStoreTest, TheAgentServesAndRefreshesThroughAFailover) {
  TempDir dir("quiver-cluster-agent");
  const std::string control = dir.path("upstream.ctl");
  std::ofstream(control).flush();
  Json upstream = {
      {"command", "node"},
      {"args",
       {testing::test_upstream_js(), "stdio", "--quiet", "--tools", "3", "--control", control}}};
  const std::string key_file = dir.path("caller-token.key");
  std::ofstream(key_file) << kTokenKey << "\n";
  Json config = {{"mcpServers", {{"t", upstream}}},
                 {"quiver",
                  {{"redis", seeds_url(*cluster_)},
                   {"members", {"alice"}},
                   {"grants", {{"alice", {"t"}}}},
                   {"caller_token_keys", {{"k1", {{"file", key_file}}}}},
                   {"runtime", {{"list_timeout_ms", 30000}, {"request_timeout_ms", 30000}}}}}};
  AgentServe agent(config, {}, dir.root());
  ASSERT_TRUE(agent.ok()) << agent.logs();
  Result<std::string> token =
      mint_caller_token("alice", kTokenKey, "k1", system_clock_ms()(), 3'600'000);
  ASSERT_TRUE(token.ok()) << token.error().message;
  const httplib::Headers auth = {{"Authorization", "Bearer " + *token}};

  auto tool_names = [&]() {
    std::vector<std::string> names;
    auto r = http_request("GET", agent.url("/v1/manifests"), auth);
    if (!r || r->status != 200) return names;
    Result<Json> body = parse_json(r->body);
    if (!body.ok()) return names;
    for (const Json& c : (*body)["connections"]) {
      if (c.value("id", "") != "t" || !c.contains("manifest")) continue;
      for (const Json& t : c["manifest"]["tools"]["items"]) names.push_back(t.value("name", ""));
    }
    return names;
  };
  ASSERT_TRUE(wait_until([&] { return tool_names().size() == 3; }, 30000)) << agent.logs();

  auto [master, replica] = master_and_replica(*cluster_, namespace_slot());
  ASSERT_NE(replica, 0);
  ASSERT_TRUE(fail_over_to(*cluster_, replica));
  // Still served, from the new master.
  EXPECT_EQ(tool_names().size(), 3u) << agent.logs();
  // The upstream gains a tool; a manual refresh lists it and commits it through the new master.
  std::ofstream(control, std::ios::app) << R"({"add_tool":"after_failover"})"
                                        << "\n";
  auto queued = http_request("POST", agent.url("/v1/mcp-connections/t/refresh-tools"), auth);
  ASSERT_TRUE(queued);
  EXPECT_EQ(queued->status, 202) << queued->body;
  EXPECT_TRUE(wait_until(
      [&] {
        std::vector<std::string> names = tool_names();
        return std::find(names.begin(), names.end(), "after_failover") != names.end();
      },
      30000))
      << agent.logs();
  auto metrics = http_request("GET", agent.url("/metrics"));
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("quiver_redis_cluster_moved_total"), std::string::npos);
  EXPECT_EQ(metrics->body.find("quiver_redis_cluster_moved_total 0\n"), std::string::npos)
      << metrics->body;
  EXPECT_EQ(agent.logs().find(kPassword), std::string::npos);
  agent.stop();
}

// Issue 14's proof end to end: `quiver-agent serve` lists real upstreams into the cluster in key
// layout v1 (one slot), `quiver-agent migrate-layout v2` moves the namespace in place while the
// agent serves, the agent reloads into v2 by itself, its answers are what they were, and a manual
// refresh lists a changed upstream into v2 keys; the namespace's manifests then live on every
// master.
TEST_F(RedisClusterStoreTest, TheAgentMovesToLayoutV2AndListsIntoEveryMaster) {
  TempDir dir("quiver-cluster-v2");
  const std::string key_file = dir.path("caller-token.key");
  std::ofstream(key_file) << kTokenKey << "\n";
  constexpr int kUpstreams = 6;
  Json servers = Json::object();
  std::vector<std::string> controls;
  for (int i = 0; i < kUpstreams; ++i) {
    controls.push_back(dir.path("upstream-" + std::to_string(i) + ".ctl"));
    std::ofstream(controls.back()).flush();
    servers["u" + std::to_string(i)] = {{"command", "node"},
                                        {"args",
                                         {testing::test_upstream_js(), "stdio", "--quiet",
                                          "--tools", "2", "--control", controls.back()}}};
  }
  Json all = Json::array();
  for (int i = 0; i < kUpstreams; ++i) all.push_back("u" + std::to_string(i));
  Json config = {{"mcpServers", servers},
                 {"quiver",
                  {{"redis", seeds_url(*cluster_)},
                   {"members", {"alice"}},
                   {"grants", {{"alice", all}}},
                   {"caller_token_keys", {{"k1", {{"file", key_file}}}}},
                   {"runtime",
                    {{"list_timeout_ms", 30000},
                     {"request_timeout_ms", 30000},
                     {"store_check_interval_ms", 200}}}}}};
  AgentServe agent(config, {}, dir.root());
  ASSERT_TRUE(agent.ok()) << agent.logs();
  Result<std::string> token =
      mint_caller_token("alice", kTokenKey, "k1", system_clock_ms()(), 3'600'000);
  ASSERT_TRUE(token.ok()) << token.error().message;
  const httplib::Headers auth = {{"Authorization", "Bearer " + *token}};
  // id -> tool names, of every connection alice sees with a manifest.
  auto tools = [&]() {
    std::map<std::string, std::vector<std::string>> out;
    auto r = http_request("GET", agent.url("/v1/manifests"), auth);
    if (!r || r->status != 200) return out;
    Result<Json> body = parse_json(r->body);
    if (!body.ok()) return out;
    for (const Json& c : (*body)["connections"]) {
      if (!c.contains("manifest")) continue;
      for (const Json& t : c["manifest"]["tools"]["items"]) {
        out[c.value("id", "")].push_back(t.value("name", ""));
      }
    }
    return out;
  };
  ASSERT_TRUE(wait_until([&] { return tools().size() == kUpstreams; }, 60000)) << agent.logs();
  const auto before = tools();

  testing::CliRun migrated =
      testing::run({"migrate-layout", "v2", "--settle", "1s", "--config", agent.config_path()});
  ASSERT_EQ(migrated.code, 0) << migrated.out << migrated.err;
  EXPECT_NE(migrated.out.find("v2:ready:"), std::string::npos) << migrated.out;
  // The engine reloads into v2 on its own (its store check sees the switch).
  ASSERT_TRUE(wait_until([&] { return agent.logs().find("reloaded") != std::string::npos; }, 30000))
      << agent.logs();
  ASSERT_TRUE(wait_until([&] { return tools() == before; }, 30000)) << agent.logs();

  // A changed upstream, refreshed by hand: listed and committed into v2.
  std::ofstream(controls[0], std::ios::app) << R"({"add_tool":"after_switch"})"
                                            << "\n";
  auto queued = http_request("POST", agent.url("/v1/mcp-connections/u0/refresh-tools"), auth);
  ASSERT_TRUE(queued);
  EXPECT_EQ(queued->status, 202) << queued->body;
  EXPECT_TRUE(wait_until(
      [&] {
        auto now = tools();
        const auto& names = now["u0"];
        return std::find(names.begin(), names.end(), "after_switch") != names.end();
      },
      30000))
      << agent.logs();

  // The manifests are v2 keys, spread: on more than one master, each in its connection's slot.
  const RedisKeys v2 = *RedisKeys::create("default", KeyLayout::kV2);
  std::set<int> masters;
  for (int i = 0; i < kUpstreams; ++i) {
    const std::string key = *v2.manifest("u" + std::to_string(i), Principal::shared());
    auto [master, replica] = master_and_replica(*cluster_, cluster_key_slot(key));
    ASSERT_NE(master, 0) << key;
    RedisConnection c(cluster_->connect(master));
    ASSERT_TRUE(c);
    EXPECT_EQ(run_argv(c.get(), {"EXISTS", key}).integer, 1) << key;
    masters.insert(master);
  }
  EXPECT_GT(masters.size(), 1u);
  EXPECT_EQ(agent.logs().find(kPassword), std::string::npos);
  agent.stop();
}

}  // namespace
}  // namespace quiver
