// TLS to Redis (`rediss://`) against a real redis-server listening for TLS only, with a throwaway
// CA and certificates made by openssl in each test's directory (tests/support/redis_tls.h): the
// agent lists a real upstream into it and reads back; a wrong CA, a name the certificate does not
// carry and a plain redis:// to the TLS port are refused with the reason; mutual TLS; bad TLS
// settings in the config and in the store's options.
#include "tests/support/redis_tls.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "native-agent/engine/agent.h"
#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/manifest.h"
#include "tests/support/agent_setup.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using testing::LogCapture;
using testing::make_tls_material;
using testing::parse_test_config;
using testing::RedisCluster;
using testing::RedisClusterOptions;
using testing::RedisServer;
using testing::RedisServerTls;
using testing::TempDir;
using testing::TlsMaterial;

constexpr char kPassword[] = "tls-test-password-7Qx";

// A TLS-only redis-server whose certificate the `good` CA signed.
struct TlsRedis {
  TempDir dir{"quiver-tls"};
  TlsMaterial good = make_tls_material(dir.root(), "good");
  TlsMaterial wrong = make_tls_material(dir.root(), "wrong");
  std::unique_ptr<RedisServer> redis;

  explicit TlsRedis(bool auth_clients = false) {
    if (!good.error.empty() || !wrong.error.empty()) return;
    RedisServerTls tls;
    tls.cert_file = good.server_cert;
    tls.key_file = good.server_key;
    tls.ca_file = good.ca_cert;
    tls.auth_clients = auth_clients;
    tls.client_cert = good.client_cert;
    tls.client_key = good.client_key;
    redis = std::make_unique<RedisServer>(tls);
  }
  std::string problem() const {
    if (!good.error.empty()) return good.error;
    if (!wrong.error.empty()) return wrong.error;
    return redis->ok() ? "" : redis->error();
  }
  std::string url(const std::string& scheme = "rediss", const std::string& host = "127.0.0.1",
                  bool password = false) const {
    return scheme + "://" + (password ? std::string(":") + kPassword + "@" : "") + host + ":" +
           std::to_string(redis->port()) + "/0";
  }
};

RedisTlsFiles files(std::string ca, std::string server_name = "", std::string cert = "",
                    std::string key = "") {
  RedisTlsFiles f;
  f.ca_file = std::move(ca);
  f.server_name = std::move(server_name);
  f.cert_file = std::move(cert);
  f.key_file = std::move(key);
  return f;
}

// A RedisStore on `url` with `files`; fails the test when the options are refused.
std::unique_ptr<RedisStore> store_for(const std::string& url, RedisTlsFiles tls) {
  Result<RedisConfig> cfg = parse_redis_url(url);
  EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.error().message);
  if (!cfg.ok()) return nullptr;
  RedisStoreOptions o;
  o.redis = std::move(*cfg);
  o.redis.tls_files = std::move(tls);
  Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

// A six-node cluster on TLS with the `good` certificates, the password required.
RedisClusterOptions tls_cluster(const TlsMaterial& good, bool plain_port_too = false) {
  RedisClusterOptions co;
  co.password = kPassword;
  RedisServerTls tls;
  tls.cert_file = good.server_cert;
  tls.key_file = good.server_key;
  tls.ca_file = good.ca_cert;
  co.tls = tls;
  co.plain_port_too = plain_port_too;
  return co;
}

// A pool seeded with the cluster's first node (it learns the rest), the password given; TLS
// verified against `ca` when `use_tls`.
std::unique_ptr<RedisClusterPool> cluster_pool(const RedisCluster& cluster, bool use_tls,
                                               const std::string& ca, bool replica_reads) {
  RedisClusterPoolOptions o;
  ClusterNode seed;
  seed.host = "127.0.0.1";
  seed.port = cluster.ports()[0];
  o.seeds.push_back(seed);
  o.password = Secret(kPassword);
  o.tls = use_tls;
  o.tls_files.ca_file = ca;
  o.replica_reads = replica_reads;
  o.retry.max_attempts = 10;
  Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(std::move(o));
  EXPECT_TRUE(pool.ok()) << pool.error().message;
  return pool.ok() ? std::move(*pool) : nullptr;
}

// What health() says: "" when it answered.
std::string health_error(RedisStore& store) {
  Status s = store.health();
  return s.ok() ? "" : s.error().message;
}

TEST(RedisTls, AStoreTalksToATlsRedisVerifiedAgainstTheCaFile) {
  TlsRedis t;
  ASSERT_EQ(t.problem(), "");
  auto store = store_for(t.url(), files(t.good.ca_cert));
  ASSERT_TRUE(store);
  EXPECT_EQ(health_error(*store), "");
  EXPECT_EQ(store->describe().rfind("rediss://127.0.0.1:", 0), 0u) << store->describe();
  // A write through the store, read back by hiredis' own TLS client.
  ASSERT_TRUE(store->set_member_grants("alice", {"c1", "c2"}).ok());
  testing::RedisConnection c(t.redis->connect());
  ASSERT_NE(c, nullptr);
  Result<std::set<std::string>> grants = store->read_grants("alice");
  ASSERT_TRUE(grants.ok()) << grants.error().message;
  EXPECT_EQ(*grants, (std::set<std::string>{"c1", "c2"}));
  RespValue n = testing::run_argv(c.get(), {"DBSIZE"});
  EXPECT_GT(n.integer, 0) << n.str;
  // The certificate names localhost too: dialling that name verifies.
  auto by_name = store_for(t.url("rediss", "localhost"), files(t.good.ca_cert));
  ASSERT_TRUE(by_name);
  EXPECT_EQ(health_error(*by_name), "");
}

TEST(RedisTls, AWrongCaIsRefusedWithTheReasonAndNoPassword) {
  TlsRedis t;
  ASSERT_EQ(t.problem(), "");
  auto store = store_for(t.url("rediss", "127.0.0.1", true), files(t.wrong.ca_cert));
  ASSERT_TRUE(store);
  Status s = store->health();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  // OpenSSL's reason: the chain ends at a CA the agent does not trust (whether the server sends
  // its CA along decides which of the two words it uses).
  const std::string& m = s.error().message;
  EXPECT_NE(m.find("TLS handshake failed: certificate verify failed: "), std::string::npos) << m;
  EXPECT_TRUE(m.find("self-signed certificate in certificate chain") != std::string::npos ||
              m.find("unable to get local issuer certificate") != std::string::npos)
      << m;
  EXPECT_EQ(s.error().message.find(kPassword), std::string::npos) << s.error().message;
  EXPECT_EQ(store->describe().find(kPassword), std::string::npos);
  // Without a CA file the system store is used: it does not hold the test CA either.
  auto system = store_for(t.url(), RedisTlsFiles{});
  ASSERT_TRUE(system);
  EXPECT_NE(health_error(*system).find("certificate verify failed"), std::string::npos);
}

TEST(RedisTls, ACertificateThatDoesNotNameTheServerIsRefused) {
  TlsRedis t;
  ASSERT_EQ(t.problem(), "");
  auto store = store_for(t.url(), files(t.good.ca_cert, "redis.example.com"));
  ASSERT_TRUE(store);
  std::string e = health_error(*store);
  EXPECT_NE(e.find("certificate verify failed: hostname mismatch (the certificate does not name "
                   "redis.example.com)"),
            std::string::npos)
      << e;
  // The name it does carry, given as server_name while dialling the address: accepted.
  auto named = store_for(t.url(), files(t.good.ca_cert, "localhost"));
  ASSERT_TRUE(named);
  EXPECT_EQ(health_error(*named), "");
}

TEST(RedisTls, PlainRedisToATlsPortFailsSayingSo) {
  TlsRedis t;
  ASSERT_EQ(t.problem(), "");
  for (bool password : {false, true}) {
    auto store = store_for(t.url("redis", "127.0.0.1", password), RedisTlsFiles{});
    ASSERT_TRUE(store);
    Status s = store->health();
    ASSERT_FALSE(s.ok()) << password;
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
    EXPECT_NE(s.error().message.find("if this Redis port expects TLS, use rediss://"),
              std::string::npos)
        << s.error().message;
    EXPECT_EQ(s.error().message.find(kPassword), std::string::npos) << s.error().message;
  }
}

TEST(RedisTls, MutualTlsNeedsTheClientCertificate) {
  TlsRedis t(/*auth_clients=*/true);
  ASSERT_EQ(t.problem(), "");
  auto without = store_for(t.url(), files(t.good.ca_cert));
  ASSERT_TRUE(without);
  Status refused = without->health();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kStoreUnavailable) << refused.error().message;
  auto with = store_for(t.url(), files(t.good.ca_cert, "", t.good.client_cert, t.good.client_key));
  ASSERT_TRUE(with);
  EXPECT_EQ(health_error(*with), "");
}

TEST(RedisTls, UnusableTlsFilesAreRefusedWhenTheStoreIsMade) {
  TempDir dir("quiver-tls");
  TlsMaterial m = make_tls_material(dir.root());
  ASSERT_EQ(m.error, "");
  auto create = [](RedisTlsFiles tls) {
    RedisStoreOptions o;
    o.redis = *parse_redis_url("rediss://127.0.0.1:6390/0");
    o.redis.tls_files = std::move(tls);
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
    return s.ok() ? Error(ErrorCode::kUnknown, "the store was made") : s.error();
  };
  const std::string missing = dir.path("missing-ca.pem");
  Error e = create(files(missing));
  EXPECT_EQ(e.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(e.message.find("cannot read " + missing + ": No such file or directory"),
            std::string::npos)
      << e.message;
  // A file that is there but holds no certificate.
  e = create(files(m.client_key));
  EXPECT_NE(e.message.find("cannot load the CA file " + m.client_key), std::string::npos)
      << e.message;
  e = create(files("", "", m.client_cert));
  EXPECT_NE(e.message.find("needs both cert_file and key_file"), std::string::npos) << e.message;
  e = create(files("", "", m.client_cert, m.server_key));
  EXPECT_NE(e.message.find("cannot load the client key " + m.server_key + " (for the certificate " +
                           m.client_cert + "): key values mismatch"),
            std::string::npos)
      << e.message;
  e = create(files("", "", m.client_cert, m.client_cert));
  EXPECT_NE(e.message.find("cannot load the client key " + m.client_cert), std::string::npos)
      << e.message;
}

TEST(RedisTls, TheConfigCarriesTlsSettingsAndTheEnvironmentOverridesThem) {
  TempDir dir("quiver-tls");
  Json doc = {{"mcpServers", Json::object()},
              {"quiver",
               {{"redis", "rediss://:${REDIS_PW}@redis.internal:6380/0"},
                {"data_dir", dir.path("data")},
                {"redis_tls",
                 {{"ca_file", "certs/ca.pem"},
                  {"cert_file", "${CERTS}/agent.crt"},
                  {"key_file", "/etc/quiver/agent.key"},
                  {"server_name", "redis.example.com"}}}}}};
  Result<AgentConfig> cfg =
      parse_test_config(doc, "tls.json", {{"REDIS_PW", "pw"}, {"CERTS", "/c"}}, dir.root());
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  ASSERT_TRUE(cfg->redis.has_value());
  EXPECT_TRUE(cfg->redis->tls);
  EXPECT_EQ(cfg->redis->tls_files.ca_file, dir.root() + "/certs/ca.pem");
  EXPECT_EQ(cfg->redis->tls_files.cert_file, "/c/agent.crt");
  EXPECT_EQ(cfg->redis->tls_files.key_file, "/etc/quiver/agent.key");
  EXPECT_EQ(cfg->redis->tls_files.server_name, "redis.example.com");

  cfg = parse_test_config(doc, "tls.json",
                          {{"REDIS_PW", "pw"},
                           {"CERTS", "/c"},
                           {"QUIVER_REDIS_CA_FILE", "/env/ca.pem"},
                           {"QUIVER_REDIS_TLS_SERVER_NAME", ""}},
                          dir.root());
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->redis->tls_files.ca_file, "/env/ca.pem");
  EXPECT_EQ(cfg->redis->tls_files.server_name, "");  // set and empty: the URL's host
  for (const std::string& w : cfg->warnings) {
    EXPECT_EQ(w.find("not a Quiver setting"), std::string::npos) << w;
  }

  // Mistakes name the field.
  struct Bad {
    Json tls;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{
           {Json{{"ca_file", 3}}, "quiver.redis_tls.ca_file: must be a string"},
           {Json{{"cafile", "x"}}, "quiver.redis_tls.cafile: unknown key"},
           {Json{{"cert_file", "a.crt"}}, "quiver.redis_tls: a client certificate needs both"},
           {Json{{"server_name", "host:6380"}}, "quiver.redis_tls.server_name: must be a host"},
           {Json("ca.pem"), "quiver.redis_tls: must be an object"},
       }) {
    Json d = doc;
    d["quiver"]["redis_tls"] = b.tls;
    Result<AgentConfig> r = parse_test_config(d, "tls.json", {{"REDIS_PW", "pw"}}, dir.root());
    ASSERT_FALSE(r.ok()) << b.says;
    EXPECT_NE(r.error().message.find(b.says), std::string::npos) << r.error().message;
  }
  // TLS settings with a plain redis:// are a warning: they would do nothing.
  Json plain = doc;
  plain["quiver"]["redis"] = "redis://127.0.0.1:6379/0";
  Result<AgentConfig> p = parse_test_config(plain, "tls.json", {{"CERTS", "/c"}}, dir.root());
  ASSERT_TRUE(p.ok()) << p.error().message;
  bool warned = std::any_of(p->warnings.begin(), p->warnings.end(), [](const std::string& w) {
    return w.find("TLS settings are ignored") != std::string::npos;
  });
  EXPECT_TRUE(warned);
}

// The agent, configured as a user would (rediss:// and quiver.redis_tls.ca_file), lists a real
// MCP server (the test upstream, over stdio) into the TLS Redis; the manifest is read back through
// a second store and through hiredis' own TLS client.
TEST(RedisTls, TheAgentListsARealUpstreamIntoATlsRedisAndReadsItBack) {
  TlsRedis t;
  ASSERT_EQ(t.problem(), "");
  LogCapture log;
  Json upstream = {{"command", "node"},
                   {"args", {testing::test_upstream_js(), "stdio", "--quiet", "--tools", "4"}}};
  Json doc = {{"mcpServers", {{"t", upstream}}},
              {"quiver",
               {{"redis", t.url()},
                {"redis_tls", {{"ca_file", t.good.ca_cert}}},
                {"data_dir", t.dir.path("data")},
                {"runtime", {{"list_timeout_ms", 30000}, {"request_timeout_ms", 30000}}}}}};
  Result<AgentConfig> cfg = parse_test_config(doc, "tls.json", {}, t.dir.root());
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  AgentOptions o = AgentOptions::on_demand();
  o.log_sink = log.sink();
  o.run_retries = false;
  o.run_revalidation_workers = true;
  o.run_maintenance = true;
  o.revalidation_block_ms = 50;
  Result<std::unique_ptr<Agent>> agent = Agent::create(*cfg, std::move(o));
  ASSERT_TRUE(agent.ok()) << agent.error().message;
  ASSERT_TRUE((*agent)->start().ok()) << log.text();
  auto tools_in = [](ManifestStore& store) {
    std::vector<std::string> names;
    Result<std::optional<StoredManifest>> m = store.read_manifest("t", Principal::shared());
    if (!m.ok() || !m->has_value() || !(*m)->meta.has_data) return names;
    Result<Manifest> decoded = decode_manifest((*m)->manifest);
    if (decoded.ok()) {
      for (const Tool& tool : decoded->tools.items) names.push_back(tool.name);
    }
    return names;
  };
  ASSERT_TRUE(testing::wait_until([&] { return tools_in((*agent)->store()).size() == 4; }, 30000))
      << log.text();
  (*agent)->stop();
  // Read back through a store of its own, over TLS.
  auto reader = store_for(t.url(), files(t.good.ca_cert));
  ASSERT_TRUE(reader);
  EXPECT_EQ(tools_in(*reader).size(), 4u);
  // And by hiredis' TLS client: the manifest keys are there.
  testing::RedisConnection c(t.redis->connect());
  ASSERT_NE(c, nullptr);
  RespValue keys = testing::run_argv(c.get(), {"KEYS", "quiver:*:manifest:*"});
  ASSERT_TRUE(keys.is_array()) << keys.str;
  EXPECT_FALSE(keys.elements.empty());
  EXPECT_EQ(log.text().find("certificate"), std::string::npos) << log.text();
}

// TLS to the real six-node cluster (three masters, three replicas; tls-cluster yes): the pool
// learns the TLS ports from CLUSTER SHARDS, spreads writes over every master and reads from the
// replicas, each connection verified against the CA; a wrong CA and plain TCP are refused.
TEST(RedisTls, ThePoolTalksToATlsClusterOnEveryNode) {
  TempDir dir("quiver-tls");
  TlsMaterial good = make_tls_material(dir.root(), "good");
  TlsMaterial wrong = make_tls_material(dir.root(), "wrong");
  ASSERT_EQ(good.error + wrong.error, "");
  RedisCluster cluster(tls_cluster(good));
  ASSERT_TRUE(cluster.ok()) << cluster.error();

  auto make_pool = [&](bool use_tls, const std::string& ca, bool replica_reads) {
    return cluster_pool(cluster, use_tls, ca, replica_reads);
  };

  auto pool = make_pool(true, good.ca_cert, false);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->describe().rfind("rediss-cluster:127.0.0.1:", 0), 0u) << pool->describe();
  std::vector<ClusterRequest> writes;
  for (int i = 0; i < 300; ++i) {
    writes.push_back(
        {{"SET", "quiver:{c" + std::to_string(i) + "}:record", std::to_string(i)}, false});
  }
  std::vector<Result<RespValue>> written = pool->run_batch(writes);
  for (std::size_t i = 0; i < written.size(); ++i) {
    ASSERT_TRUE(written[i].ok() && written[i]->is_ok())
        << i << ": " << (written[i].ok() ? written[i]->str : written[i].error().message);
  }
  auto sizes = pool->run_on_masters({"DBSIZE"});
  ASSERT_EQ(sizes.size(), 3u);
  int64_t total = 0;
  for (const auto& [node, r] : sizes) {
    ASSERT_TRUE(r.ok() && r->is_integer()) << node.address();
    EXPECT_GT(r->integer, 0) << node.address();
    total += r->integer;
  }
  EXPECT_EQ(total, 300);

  // Reads from the replicas, over TLS as well (each replica synced over TLS).
  auto readers = make_pool(true, good.ca_cert, true);
  ASSERT_TRUE(readers);
  std::vector<ClusterRequest> reads;
  for (int i = 0; i < 300; ++i) {
    reads.push_back({{"GET", "quiver:{c" + std::to_string(i) + "}:record"}, true});
  }
  bool all_read = testing::wait_until(
      [&] {
        std::vector<Result<RespValue>> got = readers->run_batch(reads);
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!got[i].ok() || got[i]->str != std::to_string(i)) return false;
        }
        return true;
      },
      10000);
  EXPECT_TRUE(all_read);
  EXPECT_GE(readers->stats().connections, 4u);  // the seed, then replicas

  // A wrong CA: no node is trusted, and the reason is given.
  auto distrusting = make_pool(true, wrong.ca_cert, false);
  ASSERT_TRUE(distrusting);
  Status refused = distrusting->refresh();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("certificate verify failed"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(refused.error().message.find(kPassword), std::string::npos);
  // Plain TCP to the TLS ports fails too.
  auto plain = make_pool(false, "", false);
  ASSERT_TRUE(plain);
  Status plain_refused = plain->refresh();
  ASSERT_FALSE(plain_refused.ok());
  EXPECT_EQ(plain_refused.error().code, ErrorCode::kStoreUnavailable)
      << plain_refused.error().message;
  EXPECT_NE(plain_refused.error().message.find("use rediss://"), std::string::npos)
      << plain_refused.error().message;
}

// Nodes that listen on a plain port and a TLS port announce both in CLUSTER SHARDS: a TLS pool
// dials the TLS ports (not the plain ones, where its handshake would fail), a plain pool the plain
// ones; and RedisStore runs over the TLS cluster configured as rediss+cluster://.
TEST(RedisTls, ATlsPoolDialsTheTlsPortOfNodesThatAnnounceBoth) {
  TempDir dir("quiver-tls");
  TlsMaterial good = make_tls_material(dir.root(), "good");
  ASSERT_EQ(good.error, "");
  RedisCluster cluster(tls_cluster(good, /*plain_port_too=*/true));
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  // Both are announced: read for a plain client, the map names other (plain) ports.
  std::vector<int> tls_ports = cluster.ports();
  {
    testing::RedisConnection c(cluster.connect(tls_ports[0]));
    ASSERT_NE(c, nullptr);
    Result<ClusterSlotMap> plain =
        ClusterSlotMap::from_shards(testing::run_argv(c.get(), {"CLUSTER", "SHARDS"}), "127.0.0.1");
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    ASSERT_EQ(plain->shards().size(), 3u);
    for (const ClusterShard& shard : plain->shards()) {
      EXPECT_EQ(std::find(tls_ports.begin(), tls_ports.end(), shard.master.port), tls_ports.end());
    }
  }

  std::unique_ptr<RedisClusterPool> pool = cluster_pool(cluster, true, good.ca_cert, false);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->refresh().ok());
  const ClusterSlotMap map = pool->map();
  for (const ClusterShard& shard : map.shards()) {
    EXPECT_NE(std::find(tls_ports.begin(), tls_ports.end(), shard.master.port), tls_ports.end())
        << shard.master.address() << " is not a TLS port";
  }
  std::vector<ClusterRequest> writes;
  for (int i = 0; i < 60; ++i) {
    writes.push_back({{"SET", "k{" + std::to_string(i) + "}", std::to_string(i)}, false});
  }
  for (const Result<RespValue>& r : pool->run_batch(writes)) {
    ASSERT_TRUE(r.ok() && r->is_ok()) << (r.ok() ? r->str : r.error().message);
  }
  EXPECT_EQ(pool->run_on_masters({"DBSIZE"}).size(), 3u);

  // The store, configured as an operator would: rediss+cluster:// and the CA file.
  auto store = store_for("rediss+cluster://:" + std::string(kPassword) +
                             "@127.0.0.1:" + std::to_string(cluster.ports()[0]),
                         files(good.ca_cert));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->health().ok()) << store->health().error().message;
  Result<int64_t> epoch = store->bump_epoch();
  ASSERT_TRUE(epoch.ok()) << epoch.error().message;
  EXPECT_EQ(*store->read_epoch(), *epoch);
}

}  // namespace
}  // namespace quiver
