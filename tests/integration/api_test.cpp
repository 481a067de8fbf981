// The agent's HTTP API (native-agent/api_server.h): the real server on a free loopback port, a real
// SQLite store, spoken to with a real HTTP client.
//
// The AgentService behind it is a small fake (FakeAgent): service.h is the seam between the API
// and the refresh engine, and this suite tests the API side of it. The fake keeps preferences in
// memory, queues refreshes in the real store and publishes overlays to it.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/api_server.h"
#include "native-agent/config.h"
#include "native-agent/metrics.h"
#include "native-agent/sqlite_store.h"
#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/webhook_signature.h"

namespace quiver {
namespace {

constexpr char kTokenKey[] = "test-caller-token-key-0123456789abcdef";
constexpr char kWebhookSecret[] = "test-webhook-secret-0123456789";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/quiver-api-test-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string config_text() {
  return R"({
    "mcpServers": {
      "everything": {"command": "node", "args": ["server-everything.js", "stdio"]},
      "memory": {"command": "node", "args": ["server-memory.js"],
                 "env": {"MEMORY_TOKEN": "${MEMORY_TOKEN}"}}
    },
    "quiver": {
      "listen": "127.0.0.1:0",
      "members": ["alice", "bob"],
      "grants": {"alice": ["everything", "memory"], "bob": ["memory"]},
      "caller_token_keys": {"k1": {"env": "TEST_TOKEN_KEY"}},
      "webhook_secrets": {"ci": {"env": "TEST_WEBHOOK_SECRET"}}
    }
  })";
}

// A secret that must never show in an answer or in /metrics.
constexpr char kMemoryToken[] = "memory-secret-value-7f3a9c";

// The seam's fake: see the file comment.
class FakeAgent final : public AgentService {
 public:
  FakeAgent(AgentConfig config, std::shared_ptr<ManifestStore> store)
      : config_(std::move(config)), store_(std::move(store)) {}

  const AgentConfig& config() const override { return config_; }
  ManifestStore& store() override { return *store_; }
  Metrics& metrics() override { return metrics_; }

  Result<EnqueueOutcome> request_refresh(const std::string& cid, const Principal& principal,
                                         const std::string& trigger) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      triggers_.push_back(cid + " " + principal.str() + " " + trigger);
    }
    return store_->enqueue_revalidation(cid, principal, trigger, 60'000);
  }
  Result<RefreshReport> refresh_now(const std::string&, const Principal&,
                                    const std::string&) override {
    return Error(ErrorCode::kInternal, "not used by the API");
  }
  Result<Json> test_connection(const std::string& cid, const Principal&) override {
    if (cid == "memory") throw std::runtime_error("a bug in the engine");
    return Error(ErrorCode::kUnavailable,
                 std::string("the upstream closed the pipe (token ") + kMemoryToken + ")");
  }
  Result<std::vector<PreferenceRow>> preferences(const std::string& cid) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<PreferenceRow> out;
    for (const PreferenceRow& r : rows_) {
      if (r.resource_id == cid) out.push_back(r);
    }
    return out;
  }
  Status set_preference(const std::string& cid, CapabilityType type, const std::string& key,
                        bool enabled) override {
    DisabledOverlay overlay;
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool found = false;
      for (PreferenceRow& r : rows_) {
        if (r.resource_id == cid && r.capability_type == type && r.capability_key == key) {
          r.enabled = enabled;
          found = true;
        }
      }
      if (!found) return Error(ErrorCode::kNotFound, "no such capability");
      overlay = disabled_overlay(cid, rows_);
    }
    Result<int64_t> epoch = store_->publish_disabled(cid, overlay);
    return epoch.ok() ? Status::Ok() : Status(epoch.error());
  }

  void add_row(const std::string& cid, CapabilityType type, const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    rows_.push_back(PreferenceRow{cid, type, key, true, 1, 1});
  }
  std::vector<std::string> triggers() {
    std::lock_guard<std::mutex> lock(mu_);
    return triggers_;
  }

 private:
  AgentConfig config_;
  std::shared_ptr<ManifestStore> store_;
  Metrics metrics_;
  std::mutex mu_;
  std::vector<PreferenceRow> rows_;
  std::vector<std::string> triggers_;
};

std::string tool_manifest(const std::vector<std::string>& tools) {
  Json items = Json::array();
  Json hashes = Json::object();
  for (const std::string& t : tools) {
    items.push_back(Json::object({{"name", t},
                                  {"description", "the " + t + " tool"},
                                  {"inputSchema", Json::object({{"type", "object"}})}}));
    hashes[t] = "sha256-" + std::string(43, 'A');
  }
  Json list = Json::object({{"state", "ok"}, {"items", items}, {"hashes", hashes}});
  Json empty =
      Json::object({{"state", "ok"}, {"items", Json::array()}, {"hashes", Json::object()}});
  return json_text(Json::object({{"format", "quiver.manifest.v1"},
                                 {"protocol_version", "2025-11-25"},
                                 {"server", Json::object({{"name", "t"}, {"version", "1"}})},
                                 {"capabilities", Json::object()},
                                 {"tools", list},
                                 {"resources", empty},
                                 {"resource_templates", empty},
                                 {"prompts", empty},
                                 {"cache", Json::object()},
                                 {"truncated", false},
                                 {"issues", Json::array()},
                                 {"issues_omitted", 0}}));
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    ConfigSources sources;
    std::string text = config_text();
    sources.text = text;
    sources.origin = "api-test.json";
    sources.env = {{"TEST_TOKEN_KEY", kTokenKey},
                   {"TEST_WEBHOOK_SECRET", kWebhookSecret},
                   {"MEMORY_TOKEN", kMemoryToken},
                   {"QUIVER_DATA_DIR", dir_.path()}};
    sources.working_dir = dir_.path();
    Result<AgentConfig> config = parse_config(sources);
    ASSERT_TRUE(config.ok()) << config.error().message;

    SqliteStoreOptions so;
    so.path = dir_.path() + "/quiver.db";
    Result<std::unique_ptr<SqliteStore>> store = SqliteStore::open(so);
    ASSERT_TRUE(store.ok()) << store.error().message;
    store_ = std::shared_ptr<ManifestStore>(std::move(*store));

    std::vector<ConnectionRecord> records;
    for (const ConnectionConfig& c : config->connections) {
      ConnectionRecord r;
      r.id = c.id;
      r.config_hash = c.config_hash;
      r.credential_mode = c.credential_mode;
      r.name = c.name;
      r.transport = "stdio";
      r.updated_at_ms = 1;
      records.push_back(r);
    }
    ASSERT_TRUE(store_->sync_connections(records).ok());
    ASSERT_TRUE(store_->sync_grants(config->grants).ok());
    commit("everything", config->find_connection("everything")->config_hash,
           {"echo", "add", "longRunningOperation"});
    commit("memory", config->find_connection("memory")->config_hash,
           {"create_entities", "read_graph"});

    agent_ = std::make_unique<FakeAgent>(*config, store_);
    agent_->add_row("everything", CapabilityType::kTool, "echo");
    agent_->add_row("everything", CapabilityType::kTool, "add");

    ApiServerOptions options = api_server_options(*config);
    options.worker_threads = 2;
    options.keep_alive_timeout_ms = 1000;
    options.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.push_back(line);
    };
    server_ = std::make_unique<ApiServer>(*agent_, options);
    ASSERT_TRUE(server_->start().ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_connection_timeout(2);
    client_->set_read_timeout(10);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->stop();
  }

  void commit(const std::string& cid, const std::string& config_hash,
              const std::vector<std::string>& tools) {
    Result<AcquireResult> lease =
        store_->acquire_lease(cid, Principal::shared(), std::string(32, 'a'), 60'000);
    ASSERT_TRUE(lease.ok() && lease->acquired);
    ManifestWrite w;
    w.manifest = tool_manifest(tools);
    w.etag = "sha256-" + cid;
    w.config_hash = config_hash;
    int64_t now = system_clock_ms()();
    w.fetched_at_ms = now;
    w.fresh_until_ms = now + 900'000;
    w.expires_at_ms = now + 86'400'000;
    Result<FencedWriteResult> done =
        store_->commit_manifest(cid, Principal::shared(), lease->lease, w, {86'400'000, true});
    ASSERT_TRUE(done.ok() && done->ok());
  }

  std::string token(const std::string& member_id, int64_t ttl_ms = 3'600'000, int64_t now_ms = 0) {
    if (now_ms == 0) now_ms = system_clock_ms()();
    MintOptions o;
    o.ns = "default";
    return *mint_caller_token(member_id, kTokenKey, "k1", now_ms, ttl_ms, o);
  }
  httplib::Headers bearer(const std::string& member_id) {
    return {{"Authorization", "Bearer " + token(member_id)}};
  }

  static Json body(const httplib::Result& r) {
    Result<Json> j = parse_json(r->body);
    return j.ok() ? *j : Json();
  }
  static std::string error_code(const httplib::Result& r) {
    Json j = body(r);
    if (!j.is_object() || !j.contains("error")) return "";
    return j["error"].value("code", "");
  }

  TempDir dir_;
  std::shared_ptr<ManifestStore> store_;
  std::unique_ptr<FakeAgent> agent_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(ApiTest, HealthzNeedsNoTokenAndNamesTheStore) {
  auto r = client_->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body(r)["status"], "ok");
  EXPECT_NE(body(r)["store"].get<std::string>().find("sqlite:"), std::string::npos);
}

TEST_F(ApiTest, EveryV1EndpointRefusesMissingBadAndExpiredTokens) {
  const int64_t now = system_clock_ms()();
  const std::string expired = token("alice", 60'000, now - 3 * 3'600'000);
  const std::string other_key =
      *mint_caller_token("alice", "another-key-that-is-long-enough-00000", "k1", now, 60'000);
  std::vector<httplib::Headers> bad = {
      {},
      {{"Authorization", "Bearer not-a-token"}},
      {{"Authorization", "Basic YWxpY2U6cHc="}},
      {{"Authorization", "Bearer " + expired}},
      {{"Authorization", "Bearer " + other_key}},
  };
  for (const httplib::Headers& h : bad) {
    for (const char* path : {"/v1/manifests", "/v1/mcp-connections", "/v1/search?q=echo",
                             "/v1/mcp-connections/everything/manifest",
                             "/v1/mcp-connections/everything/preferences"}) {
      auto r = client_->Get(path, h);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << path;
      EXPECT_EQ(error_code(r), "UNAUTHENTICATED") << path;
      EXPECT_EQ(r->get_header_value("WWW-Authenticate").rfind("Bearer", 0), 0u) << path;
    }
    auto r = client_->Post("/v1/mcp-connections/everything/refresh-tools", h, "", "text/plain");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
  }
  auto r = client_->Get("/v1/manifests", {{"Authorization", "Bearer " + expired}});
  EXPECT_NE(body(r)["error"]["message"].get<std::string>().find("expired"), std::string::npos);
}

TEST_F(ApiTest, APrincipalNeverComesFromTheQuery) {
  auto r = client_->Get("/v1/mcp-connections?principal=member/alice", bearer("bob"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = client_->Get("/v1/manifests?member=alice", bearer("bob"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

TEST_F(ApiTest, ConnectionsListTheCallersGrantsWithStatus) {
  auto r = client_->Get("/v1/mcp-connections", bearer("alice"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = body(r);
  EXPECT_EQ(j["principal"], "member/alice");
  ASSERT_EQ(j["connections"].size(), 2u);
  EXPECT_EQ(j["connections"][0]["id"], "everything");
  EXPECT_EQ(j["connections"][0]["status"], "fresh");
  EXPECT_EQ(j["connections"][0]["counts"]["tools"], 3);
  EXPECT_FALSE(j["connections"][0].contains("manifest"));

  r = client_->Get("/v1/mcp-connections", bearer("bob"));
  ASSERT_EQ(body(r)["connections"].size(), 1u);
  EXPECT_EQ(body(r)["connections"][0]["id"], "memory");
}

TEST_F(ApiTest, UngrantedConnectionsAreNotFound) {
  for (const char* path :
       {"/v1/mcp-connections/everything/manifest", "/v1/mcp-connections/everything/preferences",
        "/v1/mcp-connections/nonexistent/manifest"}) {
    auto r = client_->Get(path, bearer("bob"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_EQ(error_code(r), "NOT_FOUND") << path;
  }
  for (const char* path :
       {"/v1/mcp-connections/everything/refresh-tools", "/v1/mcp-connections/everything/test"}) {
    auto r = client_->Post(path, bearer("bob"), "", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  auto r = client_->Patch("/v1/mcp-connections/everything/preferences", bearer("bob"),
                          R"({"type":"tool","key":"echo","enabled":false})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST_F(ApiTest, RefreshToolsIsQueuedOrInProgressWhenALeaseIsHeld) {
  auto r = client_->Post("/v1/mcp-connections/everything/refresh-tools", bearer("alice"), "",
                         "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(body(r)["status"], "queued");

  Result<AcquireResult> held =
      store_->acquire_lease("memory", Principal::shared(), std::string(32, 'b'), 60'000);
  ASSERT_TRUE(held.ok() && held->acquired);
  r = client_->Post("/v1/mcp-connections/memory/refresh-tools", bearer("alice"), "",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(body(r)["status"], "in_progress");
}

TEST_F(ApiTest, WebhooksNeedAFreshUnusedSignature) {
  const std::string payload = R"({"connection_id":"everything","reason":"deploy"})";
  const int64_t now = system_clock_ms()();
  auto post = [&](const std::string& signature) {
    return client_->Post("/v1/webhooks/refresh", {{"X-Quiver-Signature", signature}}, payload,
                         "application/json");
  };
  const std::string good = *sign_webhook(kWebhookSecret, payload, now);
  auto r = post(good);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(body(r)["refreshes"][0]["connection_id"], "everything");
  EXPECT_EQ(body(r)["refreshes"][0]["status"], "queued");

  r = post(good);  // the same signed request again
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("replay"), std::string::npos);

  r = post(*sign_webhook("a-different-secret-0123456789", payload, now));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(error_code(r), "UNAUTHENTICATED");

  r = post(*sign_webhook(kWebhookSecret, payload, now - 10 * 60'000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);

  r = client_->Post("/v1/webhooks/refresh", payload, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST_F(ApiTest, APreferenceToggleShowsInManifestsWithoutRelisting) {
  auto tools = [&] {
    auto r = client_->Get("/v1/mcp-connections/everything/manifest", bearer("alice"));
    std::vector<std::string> names;
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    if (!r || r->status != 200) return names;
    const Json j = body(r);
    for (const Json& t : j["manifest"]["tools"]["items"]) names.push_back(t["name"]);
    return names;
  };
  EXPECT_EQ(tools(), (std::vector<std::string>{"echo", "add", "longRunningOperation"}));
  auto r = client_->Patch("/v1/mcp-connections/everything/preferences", bearer("alice"),
                          R"({"type":"tool","key":"echo","enabled":false})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body(r)["preferences"][0]["enabled"], false);
  EXPECT_EQ(tools(), (std::vector<std::string>{"add", "longRunningOperation"}));

  r = client_->Put("/v1/mcp-connections/everything/preferences", bearer("alice"),
                   R"({"type":"tool","key":"echo","enabled":true})", "application/json");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(tools(), (std::vector<std::string>{"echo", "add", "longRunningOperation"}));

  r = client_->Patch("/v1/mcp-connections/everything/preferences", bearer("alice"),
                     R"({"type":"gadget","key":"echo","enabled":true})", "application/json");
  EXPECT_EQ(r->status, 400);
  r = client_->Patch("/v1/mcp-connections/everything/preferences", bearer("alice"),
                     R"({"type":"tool","key":"never-listed","enabled":false})", "application/json");
  EXPECT_EQ(r->status, 404);
}

TEST_F(ApiTest, UpstreamFailuresAre503AndExceptionsA500WithoutDetails) {
  auto r =
      client_->Post("/v1/mcp-connections/everything/test", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(error_code(r), "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(r->body.find(kMemoryToken), std::string::npos);

  r = client_->Post("/v1/mcp-connections/memory/test", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(error_code(r), "INTERNAL");
  EXPECT_EQ(r->body.find("a bug"), std::string::npos);
}

TEST_F(ApiTest, MetricsCountDiscoveryAndHoldNoSecret) {
  ASSERT_EQ(client_->Get("/v1/manifests", bearer("alice"))->status, 200);
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  EXPECT_NE(r->body.find("quiver_discovery_hits_total 2"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("quiver_api_shed_total 0"), std::string::npos);
  for (const char* secret : {kTokenKey, kWebhookSecret, kMemoryToken}) {
    EXPECT_EQ(r->body.find(secret), std::string::npos);
  }
}

TEST_F(ApiTest, ErrorsAreJsonEverywhere) {
  auto r = client_->Get("/no/such/thing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(error_code(r), "NOT_FOUND");
  std::string big(200 * 1024, 'x');
  r = client_->Post("/v1/webhooks/refresh", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(error_code(r), "PAYLOAD_TOO_LARGE");
}

// A connection that sends half a request and waits.
int stalled_connection(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  const char partial[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  (void)::send(fd, partial, sizeof partial - 1, 0);
  return fd;
}

TEST_F(ApiTest, OverloadShedsWith503) {
  server_->stop();
  ApiServerOptions options = api_server_options(agent_->config());
  options.worker_threads = 1;
  options.max_queued_requests = 1;
  options.read_timeout_ms = 3000;
  ApiServer small(*agent_, options);
  ASSERT_TRUE(small.start().ok());
  int a = stalled_connection(small.port());  // occupies the worker
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int b = stalled_connection(small.port());  // waits in the queue
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  httplib::Client c("127.0.0.1", small.port());
  auto r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(error_code(r), "OVERLOADED");
  ::close(a);
  ::close(b);
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("quiver_api_shed_total 1"), std::string::npos);
  small.stop();
}

}  // namespace
}  // namespace quiver
