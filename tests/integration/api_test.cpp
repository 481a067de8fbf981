// The agent's HTTP API end to end: the real ApiServer on a free loopback port in front of the real
// Agent, on the embedded default (a SQLite file) and on a real redis-server, with real MCP
// upstreams (tests/peers/test-upstream.mjs over stdio; server-everything for `serve`), spoken to
// with a real HTTP client. And the `quiver-agent serve` binary as a child process: it prints a
// curl line, the line answers with manifests, SIGTERM stops it with exit 0.
//
// The agent runs with its background threads off (tests/integration/agent_test.cpp does the
// same), so a queued refresh stays queued and every listing happens when a test asks for it.
#include <algorithm>
#include <atomic>
#include <chrono>
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
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/api/api_server.h"
#include "native-agent/base/config.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/metrics.h"
#include "native-agent/upstream/child_process.h"
#include "shared/caller_token.h"
#include "shared/sha256.h"
#include "shared/webhook_signature.h"
#include "tests/support/agent_setup.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_fixture.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::LogCapture;
using testing::parse_test_config;
using testing::read_stats;
using testing::TempDir;
using testing::test_upstream_js;
using testing::wait_until;

constexpr char kTokenKey[] = "test-caller-token-key-0123456789abcdef";
constexpr char kWebhookSecret[] = "test-webhook-secret-0123456789";
// Given to an upstream in its environment: a secret that must never reach an answer or /metrics.
constexpr char kUpstreamSecret[] = "upstream-secret-value-7f3a9c";

enum class Backend { kSqlite, kRedis };

std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kSqlite ? "Sqlite" : "Redis";
}

Json test_upstream(const std::vector<std::string>& flags) {
  Json args = Json::array({test_upstream_js(), "stdio", "--quiet"});
  for (const std::string& f : flags) args.push_back(f);
  return Json{{"command", "node"}, {"args", args}, {"env", {{"UPSTREAM_SECRET", "${SECRET}"}}}};
}

int64_t tools_list_calls(const std::string& stats_file) {
  Json s = read_stats(stats_file);
  return s.is_object() ? s.value("tools_list_calls", int64_t{0}) : 0;
}

Json body_of(const httplib::Result& r) {
  if (!r) return Json();
  // Answers wrap manifests in a few more levels than the upstream's reply had: a definition at
  // the depth limit is deeper than the limit here.
  JsonParseOptions answers;
  answers.max_depth = 2 * kMaxJsonDepth;
  Result<Json> j = parse_json(r->body, answers);
  return j.ok() ? *j : Json();
}

std::string error_code(const httplib::Result& r) {
  Json j = body_of(r);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return "";
  return j["error"].value("code", "");
}

// The real Agent, except that test_connection throws: the API must turn an exception escaping a
// handler into a 500 without details. Everything else goes to the agent.
class ThrowingAgent final : public AgentService {
 public:
  explicit ThrowingAgent(AgentService& real) : real_(real) {}
  const AgentConfig& config() const override { return real_.config(); }
  ManifestStore& store() override { return real_.store(); }
  Metrics& metrics() override { return real_.metrics(); }
  Result<RevalidationOutcome> request_refresh(const std::string& c, const Principal& p,
                                              const std::string& t) override {
    return real_.request_refresh(c, p, t);
  }
  Result<WebhookRefreshReply> apply_webhook(const WebhookVerified& v,
                                            const WebhookRefreshRequest& r,
                                            int64_t now_ms) override {
    return real_.apply_webhook(v, r, now_ms);
  }
  Result<RefreshReport> refresh_now(const std::string& c, const Principal& p,
                                    const std::string& t) override {
    return real_.refresh_now(c, p, t);
  }
  Result<Json> test_connection(const std::string&, const Principal&) override {
    throw std::runtime_error("secret detail of a bug");
  }
  Result<std::vector<PreferenceRow>> preferences(const std::string& c,
                                                 const Principal& p) override {
    return real_.preferences(c, p);
  }
  Status set_preference(const std::string& c, const Principal& p, CapabilityType t,
                        const std::string& k, bool e) override {
    return real_.set_preference(c, p, t, k, e);
  }

 private:
  AgentService& real_;
};

class ApiTest : public testing::WithRedisServer<::testing::TestWithParam<Backend>> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    stats_ = dir_.path("t-stats.json");
    Json servers = {
        {"t",
         test_upstream({"--tools", "3", "--stats-file", stats_, "--control", dir_.path("t-ctl")})},
        {"u", test_upstream({"--tools", "2"})},
        {"broken", {{"command", "node"}, {"args", {dir_.path("no-such-server.mjs")}}}},
        // Per-member: each member's credential makes the upstream list `<member>_tool_N`.
        {"pm", test_upstream({"--per-auth", "--auth-users", "carol,dave"})},
    };
    Json quiver = {
        {"data_dir", dir_.path("data")},
        {"listen", "127.0.0.1:0"},
        {"members", {"alice", "bob", "carol", "dave"}},
        {"operators", {"alice"}},
        {"grants",
         {{"alice", {"t", "broken"}}, {"bob", {"u"}}, {"carol", {"t", "pm"}}, {"dave", {"pm"}}}},
        {"connections",
         {{"pm",
           {{"credential_mode", "per_member"},
            {"auth", "api_key"},
            {"credential_env", "TEST_UPSTREAM_AUTHORIZATION"},
            {"credentials",
             {{"carol", {{"env", "CAROL_CRED"}}}, {"dave", {{"env", "DAVE_CRED"}}}}}}}}},
        {"caller_token_keys", {{"k1", {{"env", "TEST_TOKEN_KEY"}}}}},
        {"webhook_secrets", {{"ci", {{"env", "TEST_WEBHOOK_SECRET"}}}}},
        {"runtime", {{"list_timeout_ms", 5000}}},
    };
    if (GetParam() == Backend::kRedis) {
      ASSERT_TRUE(redis_->ok()) << redis_->error();
      quiver["redis"] = "redis://127.0.0.1:" + std::to_string(redis_->port()) + "/0";
      static std::atomic<int> n{0};
      quiver["namespace"] = "api-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
    }
    Result<AgentConfig> config =
        parse_test_config(Json{{"mcpServers", servers}, {"quiver", quiver}}, "api_test.json",
                          {{"TEST_TOKEN_KEY", kTokenKey},
                           {"TEST_WEBHOOK_SECRET", kWebhookSecret},
                           {"SECRET", kUpstreamSecret},
                           {"CAROL_CRED", "Bearer carol"},
                           {"DAVE_CRED", "Bearer dave"}},
                          dir_.root());
    ASSERT_TRUE(config.ok()) << config.error().message;

    AgentOptions options = AgentOptions::on_demand();
    options.log_sink = log_.sink();
    Result<std::unique_ptr<Agent>> agent = Agent::create(*config, options);
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    agent_ = std::move(*agent);
    ASSERT_TRUE(agent_->start().ok());
    Result<RefreshReport> listed = agent_->refresh_now("t", Principal::shared(), "manual");
    ASSERT_TRUE(listed.ok() && listed->committed) << log();

    server_ = start_server(*agent_);
    ASSERT_TRUE(server_);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_connection_timeout(2);
    client_->set_read_timeout(15);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->stop();
    if (agent_) agent_->stop();
  }

  std::unique_ptr<ApiServer> start_server(AgentService& service, int workers = 4,
                                          std::size_t queued = 16) {
    ApiServerOptions options = api_server_options(service.config());
    options.worker_threads = workers;
    options.max_queued_requests = queued;
    options.keep_alive_timeout_ms = 1000;
    options.log = log_.sink();
    auto server = std::make_unique<ApiServer>(service, options);
    Status started = server->start();
    EXPECT_TRUE(started.ok()) << (started.ok() ? "" : started.error().message);
    return started.ok() ? std::move(server) : nullptr;
  }

  std::string log() { return log_.text(); }

  std::string ns() const { return agent_->config().ns; }

  std::string token(const std::string& member_id, int64_t ttl_ms = 3'600'000, int64_t now_ms = 0) {
    if (now_ms == 0) now_ms = system_clock_ms()();
    MintOptions o;
    o.ns = ns();
    return *mint_caller_token(member_id, kTokenKey, "k1", now_ms, ttl_ms, o);
  }
  httplib::Headers bearer(const std::string& member_id) {
    return {{"Authorization", "Bearer " + token(member_id)}};
  }

  // The revalidation queue holds one request, for `t`, queued for `reason`.
  void expect_one_queued_for_t(const std::string& reason) {
    Result<RevalidationBatch> queued = agent_->store().read_revalidations("api-test", 10, 0);
    ASSERT_TRUE(queued.ok());
    ASSERT_EQ(queued->requests.size(), 1u);
    EXPECT_EQ(queued->requests[0].connection_id, "t");
    EXPECT_EQ(queued->requests[0].reason, reason);
  }

  httplib::Result post_webhook(const std::string& payload, const std::string& signature) {
    return client_->Post("/v1/webhooks/refresh", {{kWebhookSignatureHeader, signature}}, payload,
                         "application/json");
  }

  std::vector<std::string> visible_tools(const std::string& member_id, const std::string& cid) {
    std::vector<std::string> names;
    auto r = client_->Get("/v1/manifests", bearer(member_id));
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    const Json j = body_of(r);
    if (!j.is_object()) return names;
    for (const Json& c : j["connections"]) {
      if (c["id"] != cid || !c.contains("manifest")) continue;
      for (const Json& t : c["manifest"]["tools"]["items"]) names.push_back(t["name"]);
    }
    return names;
  }

  TempDir dir_;
  std::string stats_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  LogCapture log_;
};

INSTANTIATE_TEST_SUITE_P(BothStores, ApiTest, ::testing::Values(Backend::kSqlite, Backend::kRedis),
                         backend_name);

TEST_P(ApiTest, HealthzNeedsNoTokenAndNamesTheStoreToACaller) {
  auto r = client_->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body_of(r)["status"], "ok");
  EXPECT_FALSE(body_of(r).contains("store"));  // the store's whereabouts are for callers only
  r = client_->Get("/healthz", bearer("alice"));
  ASSERT_TRUE(r);
  EXPECT_EQ(body_of(r)["store"], agent_->store().describe());
}

// A Redis that restarted empty (here: FLUSHALL): the agent's own discovery answers 503 as the
// edge does, /healthz says the namespace is missing, and both are back once the agent restored it.
TEST_P(ApiTest, AWipedStoreIs503AndHealthzSaysSoUntilTheAgentRestoresIt) {
  if (GetParam() != Backend::kRedis)
    GTEST_SKIP() << "the embedded store cannot be wiped under the agent";
  auto before = client_->Get("/v1/mcp-connections/t/manifest", bearer("alice"));
  ASSERT_TRUE(before);
  ASSERT_EQ(before->status, 200) << before->body;
  {
    testing::RedisConnection c(redis_->connect());
    ASSERT_EQ(testing::run_argv(c.get(), {"FLUSHALL"}).str, "OK");
  }
  for (const char* path : {"/v1/manifests", "/v1/mcp-connections/t/manifest"}) {
    auto r = client_->Get(path, bearer("alice"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << path << ": " << r->body;  // never 200 [] nor 404
    EXPECT_EQ(error_code(r), "STORE_UNAVAILABLE") << r->body;
  }
  auto health = client_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(body_of(health)["status"], "restoring");
  EXPECT_EQ(body_of(health)["store"], "namespace_missing");
  // The signed refresh webhook too: 503, not 202 with the connection "unknown" or queued into an
  // empty namespace; the replay guard is not written, so the sender's retry is accepted later.
  const std::string hook = R"({"connection_id":"t","reason":"deploy"})";
  const std::string signature = *sign_webhook(kWebhookSecret, ns(), hook, system_clock_ms()());
  auto webhook = [&] {
    return client_->Post("/v1/webhooks/refresh", {{kWebhookSignatureHeader, signature}}, hook,
                         "application/json");
  };
  auto refused = webhook();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(error_code(refused), "STORE_UNAVAILABLE") << refused->body;
  EXPECT_NE(refused->body.find("being restored"), std::string::npos) << refused->body;

  // The agent restores it (and holds it `restoring` for two store-check intervals).
  EXPECT_TRUE(wait_until([&] { return agent_->check_store_once() == "ready"; }, 10'000));
  health = client_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  auto listing = client_->Get("/v1/manifests", bearer("alice"));
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->status, 200) << listing->body;
  EXPECT_TRUE(body_of(listing)["connections"].is_array());
  EXPECT_FALSE(body_of(listing)["connections"].empty()) << listing->body;
  auto accepted = webhook();  // the same signed request, retried
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->status, 202) << accepted->body;
  ASSERT_EQ(body_of(accepted)["refreshes"].size(), 1u) << accepted->body;
  EXPECT_NE(body_of(accepted)["refreshes"][0]["status"], "unknown_connection") << accepted->body;
}

TEST_P(ApiTest, MissingBadAndExpiredTokensAre401) {
  const int64_t now = system_clock_ms()();
  const std::string expired = token("alice", 60'000, now - 3 * 3'600'000);
  const std::string other_key =
      *mint_caller_token("alice", "another-key-that-is-long-enough-00000", "k1", now, 60'000);
  const std::vector<httplib::Headers> refused = {
      {},
      {{"Authorization", "Bearer not-a-token"}},
      {{"Authorization", "Basic YWxpY2U6cHc="}},
      {{"Authorization", "Bearer " + expired}},
      {{"Authorization", "Bearer " + other_key}},
  };
  for (const httplib::Headers& h : refused) {
    for (const char* path :
         {"/v1/manifests", "/v1/mcp-connections", "/v1/search?q=tool",
          "/v1/mcp-connections/t/manifest", "/v1/mcp-connections/t/preferences"}) {
      auto r = client_->Get(path, h);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << path;
      EXPECT_EQ(error_code(r), "UNAUTHENTICATED") << path;
      EXPECT_EQ(r->get_header_value("WWW-Authenticate").rfind("Bearer", 0), 0u) << path;
    }
    for (const char* path : {"/v1/mcp-connections/t/refresh-tools", "/v1/mcp-connections/t/test"}) {
      auto r = client_->Post(path, h, "", "application/json");
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << path;
    }
  }
  auto r = client_->Get("/v1/manifests", {{"Authorization", "Bearer " + expired}});
  EXPECT_NE(body_of(r)["error"]["message"].get<std::string>().find("expired"), std::string::npos);
}

TEST_P(ApiTest, APrincipalNeverComesFromTheQuery) {
  for (const char* path :
       {"/v1/mcp-connections?principal=member/alice", "/v1/manifests?member=alice",
        "/v1/mcp-connections/t/manifest?principal=shared"}) {
    auto r = client_->Get(path, bearer("bob"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path;
    EXPECT_EQ(error_code(r), "BAD_REQUEST") << path;
  }
}

TEST_P(ApiTest, ConnectionsShowEachGrantedConnectionsStatus) {
  Result<RefreshReport> failed = agent_->refresh_now("broken", Principal::shared(), "manual");
  ASSERT_TRUE(failed.ok());
  ASSERT_FALSE(failed->committed);

  auto r = client_->Get("/v1/mcp-connections", bearer("alice"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = body_of(r);
  EXPECT_EQ(j["principal"], "member/alice");
  ASSERT_EQ(j["connections"].size(), 2u) << r->body;
  const Json& broken = j["connections"][0];
  const Json& t = j["connections"][1];
  EXPECT_EQ(broken["id"], "broken");
  EXPECT_EQ(broken["status"], "error");
  EXPECT_FALSE(broken["error"]["code"].get<std::string>().empty());
  EXPECT_EQ(t["id"], "t");
  EXPECT_EQ(t["status"], "fresh");
  EXPECT_EQ(t["counts"]["tools"], 3);
  EXPECT_EQ(t["counts"]["prompts"], 2);
  EXPECT_FALSE(t.contains("manifest"));

  r = client_->Get("/v1/mcp-connections", bearer("bob"));
  j = body_of(r);
  ASSERT_EQ(j["connections"].size(), 1u);
  EXPECT_EQ(j["connections"][0]["id"], "u");
  EXPECT_EQ(j["connections"][0]["status"], "pending");
}

TEST_P(ApiTest, StaleManifestsAreServedAndRevalidatedInTheBackground) {
  // The same agent and store, read 20 minutes later (past the 15 min fresh TTL).
  ApiServerOptions later = api_server_options(agent_->config());
  later.now_ms = [] { return system_clock_ms()() + 20 * 60'000; };
  ApiServer server(*agent_, later);
  ASSERT_TRUE(server.start().ok());
  httplib::Client c("127.0.0.1", server.port());
  auto r = c.Get("/v1/mcp-connections/t/manifest", bearer("alice"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["status"], "stale");
  EXPECT_EQ(body_of(r)["refresh"], "requested");
  EXPECT_EQ(body_of(r)["manifest"]["tools"]["items"].size(), 3u);  // still served
  std::vector<RevalidationRequest> queued;
  ASSERT_TRUE(wait_until(
      [&] {
        Result<RevalidationBatch> b = agent_->store().read_revalidations("api-test", 10, 0);
        if (b.ok()) queued.insert(queued.end(), b->requests.begin(), b->requests.end());
        return !queued.empty();
      },
      5000));
  EXPECT_EQ(queued[0].connection_id, "t");
  EXPECT_EQ(queued[0].reason, "stale");
  EXPECT_EQ(agent_->metrics().discovery_stale_serves(), 1);
  server.stop();
}

TEST_P(ApiTest, UngrantedConnectionsAreNotFound) {
  for (const char* path : {"/v1/mcp-connections/t/manifest", "/v1/mcp-connections/t/preferences",
                           "/v1/mcp-connections/nope/manifest"}) {
    auto r = client_->Get(path, bearer("bob"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_EQ(error_code(r), "NOT_FOUND") << path;
  }
  for (const char* path : {"/v1/mcp-connections/t/refresh-tools", "/v1/mcp-connections/t/test"}) {
    auto r = client_->Post(path, bearer("bob"), "", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  auto r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("bob"),
                          R"({"type":"tool","key":"tool_1","enabled":false})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(agent_->preferences("t", Principal::shared())->at(0).enabled, true);
}

TEST_P(ApiTest, RefreshToolsIsQueuedOrInProgressWhileALeaseIsHeld) {
  auto r =
      client_->Post("/v1/mcp-connections/t/refresh-tools", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(body_of(r)["status"], "queued");
  ASSERT_NO_FATAL_FAILURE(expect_one_queued_for_t("manual"));

  // Another worker is listing it: the answer says so, and nothing more is queued.
  Result<AcquireResult> held =
      agent_->store().acquire_lease("t", Principal::shared(), std::string(32, 'b'), 60'000);
  ASSERT_TRUE(held.ok() && held->acquired);
  r = client_->Post("/v1/mcp-connections/t/refresh-tools", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(body_of(r)["status"], "in_progress");
}

// A caller's unknown-tool error is evidence that the cached list is out of date: it queues a
// refresh of the caller's (connection, principal), with the reason recorded.
TEST_P(ApiTest, EvidenceOfAnUnknownToolQueuesARefresh) {
  auto r = client_->Post("/v1/mcp-connections/t/evidence", bearer("alice"),
                         R"({"kind":"unknown_tool","name":"vanished_tool"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(body_of(r)["status"], "queued");
  ASSERT_NO_FATAL_FAILURE(expect_one_queued_for_t("evidence"));

  for (const char* bad : {R"({"kind":"unknown_tool"})", R"({"kind":"guess","name":"x"})",
                          R"({"kind":"unknown_tool","name":""})", "not json", "[]"}) {
    r = client_->Post("/v1/mcp-connections/t/evidence", bearer("alice"), bad, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_EQ(body_of(r)["error"]["code"], "BAD_REQUEST") << bad;
  }
  r = client_->Post("/v1/mcp-connections/t/evidence", R"({"kind":"unknown_tool","name":"x"})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST_P(ApiTest, WebhooksNeedAFreshUnusedSignature) {
  const std::string payload = R"({"connection_id":"t","reason":"deploy"})";
  const int64_t now = system_clock_ms()();
  auto post = [&](const std::string& signature) { return post_webhook(payload, signature); };
  const std::string good = *sign_webhook(kWebhookSecret, ns(), payload, now);
  auto r = post(good);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(body_of(r)["refreshes"][0]["connection_id"], "t");
  EXPECT_EQ(body_of(r)["refreshes"][0]["principal"], "shared");
  EXPECT_EQ(body_of(r)["refreshes"][0]["status"], "queued");
  // The cached data reads as stale until a listing that started after the webhook commits.
  EXPECT_EQ(body_of(r)["refreshes"][0]["marked_stale"], true);
  auto read = client_->Get("/v1/mcp-connections/t/manifest", bearer("alice"));
  ASSERT_TRUE(read);
  EXPECT_EQ(body_of(read)["status"], "stale") << read->body;
  ASSERT_NO_FATAL_FAILURE(expect_one_queued_for_t("webhook"));

  r = post(good);  // the same signed request again
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("replay"), std::string::npos);

  r = post(*sign_webhook("a-different-secret-0123456789", ns(), payload, now));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(error_code(r), "UNAUTHENTICATED");

  r = post(*sign_webhook(kWebhookSecret, ns(), payload, now - 10 * 60'000));  // stale
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("timestamp"), std::string::npos) << r->body;

  r = client_->Post("/v1/webhooks/refresh", payload, "application/json");  // unsigned
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);

  const std::string unknown = R"({"connection_id":"nope"})";
  r = client_->Post("/v1/webhooks/refresh",
                    {{kWebhookSignatureHeader, *sign_webhook(kWebhookSecret, ns(), unknown, now)}},
                    unknown, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(body_of(r)["refreshes"][0]["status"], "unknown_connection");
}

// The namespace is signed: a request captured in another namespace that shares the webhook secret
// is refused here (each namespace has its own replay guard, so it would otherwise replay once in
// each). The deprecated v1 form, without the namespace, is still accepted this release and logged.
TEST_P(ApiTest, WebhooksAreBoundToTheNamespace) {
  const std::string payload = R"({"connection_id":"t","reason":"deploy"})";
  const int64_t now = system_clock_ms()();
  auto post = [&](const std::string& signature) { return post_webhook(payload, signature); };
  ASSERT_NE(ns(), "elsewhere");
  auto r = post(*sign_webhook(kWebhookSecret, "elsewhere", payload, now));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_EQ(error_code(r), "UNAUTHENTICATED");

  r = post(*sign_webhook_v1(kWebhookSecret, payload, now));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_NE(log().find("deprecated v1 signature"), std::string::npos) << log();
}

TEST_P(ApiTest, APreferenceToggleReachesManifestsWithoutRelisting) {
  const int64_t listings = tools_list_calls(stats_);
  ASSERT_GE(listings, 1);
  EXPECT_EQ(visible_tools("alice", "t"), (std::vector<std::string>{"tool_1", "tool_2", "tool_3"}));

  auto r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("alice"),
                          R"({"type":"tool","key":"tool_2","enabled":false})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  bool shown = false;
  const Json toggled = body_of(r);
  for (const Json& p : toggled["preferences"]) {
    if (p["type"] == "tool" && p["key"] == "tool_2") {
      EXPECT_EQ(p["enabled"], false);
      shown = true;
    }
  }
  EXPECT_TRUE(shown) << r->body;
  EXPECT_EQ(visible_tools("alice", "t"), (std::vector<std::string>{"tool_1", "tool_3"}));
  auto s = client_->Get("/v1/search?q=tool_2", bearer("alice"));
  ASSERT_TRUE(s);
  const Json found = body_of(s);
  ASSERT_TRUE(found["results"].is_array());
  for (const Json& hit : found["results"]) EXPECT_NE(hit["tool"]["name"], "tool_2");

  r = client_->Put("/v1/mcp-connections/t/preferences", bearer("alice"),
                   R"({"changes":[{"type":"tool","key":"tool_2","enabled":true},)"
                   R"({"type":"tool","key":"tool_3","enabled":false}]})",
                   "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(visible_tools("alice", "t"), (std::vector<std::string>{"tool_1", "tool_2"}));
  EXPECT_EQ(tools_list_calls(stats_), listings);  // no listing happened

  r = client_->Get("/v1/mcp-connections/t/preferences", bearer("alice"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body_of(r)["preferences"].size(), 3u + 2u + 1u + 2u);

  r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("alice"),
                     R"({"type":"gadget","key":"tool_1","enabled":true})", "application/json");
  EXPECT_EQ(r->status, 400);
  r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("alice"), R"({"type":"tool")",
                     "application/json");
  EXPECT_EQ(r->status, 400);
  r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("alice"),
                     R"({"type":"tool","key":"never_listed","enabled":false})", "application/json");
  EXPECT_EQ(r->status, 404);
}

// On a per-member connection the preferences are each member's own: carol reads and toggles only
// the capabilities her own listing showed; dave's names never reach her, and asking for one of
// them answers exactly like asking for a name nobody listed.
TEST_P(ApiTest, PerMemberPreferencesAreEachMembersOwn) {
  ASSERT_TRUE(agent_->refresh_now("pm", *Principal::member("carol"), "manual")->committed) << log();
  ASSERT_TRUE(agent_->refresh_now("pm", *Principal::member("dave"), "manual")->committed) << log();
  using Names = std::vector<std::string>;
  EXPECT_EQ(visible_tools("carol", "pm"), (Names{"carol_tool_1", "carol_tool_2", "carol_tool_3"}));

  auto r = client_->Get("/v1/mcp-connections/pm/preferences", bearer("carol"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["principal"], "member/carol");
  EXPECT_EQ(r->body.find("dave"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("carol_tool_1"), std::string::npos) << r->body;

  auto toggle = [&](const std::string& who, const std::string& key) {
    return client_->Patch("/v1/mcp-connections/pm/preferences", bearer(who),
                          R"({"type":"tool","key":")" + key + R"(","enabled":false})",
                          "application/json");
  };
  // dave's tool, and a tool nobody listed: the same answer, naming only what was asked.
  auto theirs = toggle("carol", "dave_tool_1");
  auto nobodys = toggle("carol", "zz_tool_1");
  ASSERT_TRUE(theirs && nobodys);
  EXPECT_EQ(theirs->status, 404);
  EXPECT_EQ(nobodys->status, 404);
  std::string a = theirs->body, b = nobodys->body;
  a.replace(a.find("dave_tool_1"), 11, "X");
  b.replace(b.find("zz_tool_1"), 9, "X");
  EXPECT_EQ(a, b);
  EXPECT_EQ(visible_tools("dave", "pm"), (Names{"dave_tool_1", "dave_tool_2", "dave_tool_3"}));

  // carol hides one of hers: gone for her, and nothing changes for dave.
  r = toggle("carol", "carol_tool_2");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(visible_tools("carol", "pm"), (Names{"carol_tool_1", "carol_tool_3"}));
  EXPECT_EQ(visible_tools("dave", "pm"), (Names{"dave_tool_1", "dave_tool_2", "dave_tool_3"}));
  r = client_->Get("/v1/mcp-connections/pm/preferences", bearer("dave"));
  ASSERT_TRUE(r);
  for (const Json& p : body_of(r)["preferences"]) EXPECT_EQ(p["enabled"], true) << r->body;
  // dave hides his own; carol's view is hers alone.
  r = toggle("dave", "dave_tool_3");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(visible_tools("dave", "pm"), (Names{"dave_tool_1", "dave_tool_2"}));
  EXPECT_EQ(visible_tools("carol", "pm"), (Names{"carol_tool_1", "carol_tool_3"}));
}

// A shared connection's choices are everyone's: a granted member who is not an operator reads
// them but is refused a change (403); an operator (quiver.operators) changes them for everyone.
TEST_P(ApiTest, OnlyOperatorsChangeASharedConnectionsPreferences) {
  const std::string body = R"({"type":"tool","key":"tool_1","enabled":false})";
  auto r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("carol"), body,
                          "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  EXPECT_EQ(error_code(r), "FORBIDDEN");
  r = client_->Put("/v1/mcp-connections/t/preferences", bearer("carol"), body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(visible_tools("carol", "t"), (std::vector<std::string>{"tool_1", "tool_2", "tool_3"}));
  r = client_->Get("/v1/mcp-connections/t/preferences", bearer("carol"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body_of(r)["principal"], "shared");

  r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("alice"), body,
                     "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(visible_tools("carol", "t"), (std::vector<std::string>{"tool_2", "tool_3"}));
  // ... and carol cannot re-enable what the operator disabled.
  r = client_->Patch("/v1/mcp-connections/t/preferences", bearer("carol"),
                     R"({"type":"tool","key":"tool_1","enabled":true})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(visible_tools("alice", "t"), (std::vector<std::string>{"tool_2", "tool_3"}));
}

// Issue 9: a body nested as deep as the 64 KiB body bound allows (32,000 levels) used to be built
// in full, then copied and compared level by level on an API worker's stack. Every JSON the API
// reads goes through parse_json's depth limit: 400 / 401, and the API keeps answering.
TEST_P(ApiTest, DeeplyNestedBodiesAndTokensAreRefusedAndTheApiStaysUp) {
  auto deep = [](std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  const std::string value = deep(32000);  // 64,000 bytes: under the body bound
  struct Case {
    const char* method;
    std::string path;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"PUT", "/v1/mcp-connections/t/preferences", "{\"changes\":" + value + "}"},
      {"PATCH", "/v1/mcp-connections/t/preferences",
       "{\"type\":\"tool\",\"key\":\"tool_1\",\"enabled\":" + value + "}"},
      {"POST", "/v1/mcp-connections/t/evidence",
       "{\"kind\":\"unknown_tool\",\"name\":\"x\",\"more\":" + value + "}"},
  };
  for (const Case& c : cases) {
    ASSERT_LE(c.body.size(), 64u * 1024);
    httplib::Result r = c.method == std::string("PUT")
                            ? client_->Put(c.path, bearer("alice"), c.body, "application/json")
                        : c.method == std::string("PATCH")
                            ? client_->Patch(c.path, bearer("alice"), c.body, "application/json")
                            : client_->Post(c.path, bearer("alice"), c.body, "application/json");
    ASSERT_TRUE(r) << c.method << " " << c.path << ": no answer (did the agent crash?)";
    EXPECT_EQ(r->status, 400) << c.method << " " << c.path << ": " << r->body;
    EXPECT_EQ(error_code(r), "BAD_REQUEST");
  }
  // The webhook, correctly signed: the signature is checked first, the body is parsed after.
  const std::string hook = "{\"connection_id\":\"t\",\"reason\":" + value + "}";
  auto r = client_->Post(
      "/v1/webhooks/refresh",
      {{kWebhookSignatureHeader, *sign_webhook(kWebhookSecret, ns(), hook, system_clock_ms()())}},
      hook, "application/json");
  ASSERT_TRUE(r) << "webhook: no answer";
  EXPECT_EQ(r->status, 400) << r->body;
  // A caller token whose header segment is as deep as the 4 KiB token bound allows (1,400
  // levels): not a JSON object header, 401.
  const std::string token = base64url_encode(deep(1400)) + "." +
                            base64url_encode(R"({"sub":"alice"})") + "." +
                            base64url_encode(std::string(32, 's'));
  ASSERT_LE(token.size(), kMaxTokenBytes);
  r = client_->Get("/v1/manifests", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(r) << "token: no answer";
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(error_code(r), "UNAUTHENTICATED");

  // Nothing changed, and everything still answers.
  auto health = client_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(visible_tools("alice", "t"), (std::vector<std::string>{"tool_1", "tool_2", "tool_3"}));
  // None of the refused requests queued anything (a discovery read may queue its own
  // revalidation of a connection it finds stale or missing: that is not the refusals' doing).
  Result<RevalidationBatch> queued = agent_->store().read_revalidations("api-test", 10, 0);
  ASSERT_TRUE(queued.ok());
  for (const auto& q : queued->requests) EXPECT_NE(q.reason, "evidence") << q.connection_id;
}

// Issue 9: a manifest read back from the store goes through the same depth limit. A blob nested
// 200,000 deep written straight into Redis or SQLite (a corrupted or hostile store) is reported as
// unreadable for its connection; the API stays up and every other manifest is served.
TEST_P(ApiTest, ADeeplyNestedManifestInTheStoreIsUnreadableAndOthersAreServed) {
  Result<RefreshReport> u = agent_->refresh_now("u", Principal::shared(), "manual");
  ASSERT_TRUE(u.ok() && u->committed) << log();
  const std::string deep =
      "{\"format\":1,\"tools\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  if (GetParam() == Backend::kRedis) {
    testing::RedisConnection c(redis_->connect());
    ASSERT_TRUE(c);
    Result<RedisKeys> keys = RedisKeys::create(ns());
    ASSERT_TRUE(keys.ok());
    RespValue set = testing::run_argv(c.get(), {"HSET", *keys->manifest("t", Principal::shared()),
                                                "manifest", deep, "etag", "sha256-deep"});
    ASSERT_FALSE(set.is_error()) << set.str;
  } else {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_.path("data") + "/quiver.db").c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "UPDATE manifests SET manifest = ?1, etag = 'sha256-deep' "
                                 "WHERE connection_id = 't' AND principal = 'shared'",
                                 -1, &st, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(st, 1, deep.data(), static_cast<int>(deep.size()), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
    EXPECT_EQ(sqlite3_changes(db), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }

  auto r = client_->Get("/v1/manifests", bearer("alice"));
  ASSERT_TRUE(r) << "no answer (did the agent crash?)";
  ASSERT_EQ(r->status, 200) << r->body;
  bool seen = false;
  const Json all = body_of(r);
  for (const Json& c : all["connections"]) {
    if (c["id"] != "t") continue;
    seen = true;
    EXPECT_FALSE(c.contains("manifest")) << c.dump();
    EXPECT_NE(c.dump().find("unreadable"), std::string::npos) << c.dump();
  }
  EXPECT_TRUE(seen) << r->body;
  auto one = client_->Get("/v1/mcp-connections/t/manifest", bearer("alice"));
  ASSERT_TRUE(one) << "no answer (did the agent crash?)";
  EXPECT_EQ(one->status, 200) << one->body.substr(0, 300);  // the entry, in state error
  const Json entry = body_of(one);
  EXPECT_EQ(entry.value("status", ""), "error") << one->body.substr(0, 300);
  EXPECT_FALSE(entry.contains("manifest"));
  EXPECT_NE(one->body.find("unreadable: JSON nested deeper than 128 levels"), std::string::npos)
      << one->body.substr(0, 300);
  auto listed = client_->Get("/v1/mcp-connections", bearer("alice"));
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200) << listed->body;
  // Bob's connection is served as before.
  EXPECT_EQ(visible_tools("bob", "u"), (std::vector<std::string>{"tool_1", "tool_2"}));
  auto health = client_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// The depth limit must not refuse what it let in: a tool whose schema sits just under the limit in
// the upstream's reply is listed, stored, and served by every endpoint, although the answers wrap
// it in more levels than the reply did.
TEST_P(ApiTest, ADefinitionJustUnderTheDepthLimitIsServedEverywhere) {
  // The reply nests the value 123 levels under 5 (reply, result, tools, tool, inputSchema): 128.
  testing::append_line(dir_.path("t-ctl"), R"({"set":{"deep_reply":123}})");
  ASSERT_TRUE(wait_until(
      [&] { return read_stats(stats_).value("control_commands", int64_t{0}) == 1; }, 10000));
  Result<RefreshReport> r = agent_->refresh_now("t", Principal::shared(), "manual");
  ASSERT_TRUE(r.ok() && r->committed) << log();
  EXPECT_EQ(visible_tools("alice", "t"), (std::vector<std::string>{"deep"}));
  for (const char* path : {"/v1/mcp-connections", "/v1/mcp-connections/t/manifest",
                           "/v1/manifests?view=mcp", "/v1/search?q=deep"}) {
    auto got = client_->Get(path, bearer("alice"));
    ASSERT_TRUE(got) << path;
    EXPECT_EQ(got->status, 200) << path << ": " << got->body.substr(0, 300);
  }
}

TEST_P(ApiTest, SearchRanksTheCallersVisibleTools) {
  auto r = client_->Get("/v1/search?q=tool_3&limit=2", bearer("alice"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = body_of(r);
  ASSERT_FALSE(j["results"].empty());
  EXPECT_EQ(j["results"][0]["tool"]["name"], "tool_3");
  EXPECT_EQ(j["results"][0]["connection_id"], "t");
  r = client_->Get("/v1/search?q=tool_3", bearer("bob"));  // bob has no listed connection
  ASSERT_TRUE(r);
  EXPECT_TRUE(body_of(r)["results"].empty());
}

TEST_P(ApiTest, TestConnectionListsAFreshConnectionOr503) {
  auto r = client_->Post("/v1/mcp-connections/t/test", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["connection_id"], "t");
  EXPECT_EQ(body_of(r)["result"]["status"], "ok");
  EXPECT_EQ(body_of(r)["result"]["lists"]["tools"]["count"], 3);

  r = client_->Post("/v1/mcp-connections/broken/test", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(error_code(r), "UPSTREAM_UNAVAILABLE");
}

TEST_P(ApiTest, MetricsCountDiscoveryAndHoldNoSecret) {
  ASSERT_EQ(client_->Get("/v1/manifests", bearer("alice"))->status, 200);
  ASSERT_EQ(client_->Get("/v1/manifests", bearer("bob"))->status, 200);
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  for (const char* line :
       {"quiver_discovery_hits_total 1\n", "quiver_discovery_misses_total 2\n",
        "quiver_refreshes_total{outcome=\"committed\"} 1\n", "quiver_api_shed_total 0\n",
        "quiver_listing_duration_seconds_count 1\n"}) {
    EXPECT_NE(r->body.find(line), std::string::npos) << line << r->body;
  }
  for (const char* secret : {kTokenKey, kWebhookSecret, kUpstreamSecret}) {
    EXPECT_EQ(r->body.find(secret), std::string::npos);
    EXPECT_EQ(log().find(secret), std::string::npos);
  }
}

TEST_P(ApiTest, ErrorsAreJsonEverywhere) {
  auto r = client_->Get("/no/such/thing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(error_code(r), "NOT_FOUND");
  r = client_->Post("/v1/webhooks/refresh", std::string(200 * 1024, 'x'), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(error_code(r), "PAYLOAD_TOO_LARGE");
  r = client_->Get("/v1/manifests?limit=0", bearer("alice"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_code(r), "BAD_REQUEST");
}

TEST_P(ApiTest, APortInUseIsRefusedNotShared) {
  ApiServerOptions options = api_server_options(agent_->config());
  options.listen.port = server_->port();  // the fixture's server listens there
  ApiServer second(*agent_, options);
  Status started = second.start();
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().code, ErrorCode::kResourceUnavailable);
  EXPECT_NE(started.error().message.find("in use"), std::string::npos);
  // And a restarted server takes its port back at once.
  const int port = server_->port();
  client_.reset();
  server_->stop();
  ApiServer again(*agent_, options);
  ASSERT_TRUE(again.start().ok());
  EXPECT_EQ(again.port(), port);
  again.stop();
}

TEST_P(ApiTest, AnExceptionIsA500WithoutDetails) {
  ThrowingAgent throwing(*agent_);
  std::unique_ptr<ApiServer> server = start_server(throwing);
  ASSERT_TRUE(server);
  httplib::Client c("127.0.0.1", server->port());
  auto r = c.Post("/v1/mcp-connections/t/test", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(error_code(r), "INTERNAL");
  EXPECT_EQ(r->body.find("secret detail"), std::string::npos);
  EXPECT_NE(log().find("secret detail of a bug"), std::string::npos);  // in the log instead
  r = c.Get("/healthz");                                               // the server lives on
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// schema/openapi.yaml is the one description of the API: every operation it names is served.
TEST_P(ApiTest, EveryOperationInTheOpenApiDocumentIsServed) {
  const std::string doc =
      testing::read_file(std::string(QUIVER_SOURCE_DIR) + "/schema/openapi.yaml");
  ASSERT_FALSE(doc.empty());
  std::vector<std::pair<std::string, std::string>> operations;  // (method, path)
  std::string path;
  bool in_paths = false;
  std::size_t pos = 0;
  while (pos < doc.size()) {
    std::size_t end = doc.find('\n', pos);
    if (end == std::string::npos) end = doc.size();
    const std::string line = doc.substr(pos, end - pos);
    pos = end + 1;
    if (line == "paths:") in_paths = true;
    if (line == "components:") in_paths = false;
    if (!in_paths) continue;
    if (line.rfind("  /", 0) == 0 && line.back() == ':') {
      path = line.substr(2, line.size() - 3);
    } else {
      for (const char* m : {"get", "post", "put", "patch", "delete"}) {
        if (line == std::string("    ") + m + ":") operations.emplace_back(m, path);
      }
    }
  }
  ASSERT_GE(operations.size(), 12u);
  for (auto [method, p] : operations) {
    if (std::size_t at = p.find("{id}"); at != std::string::npos) p.replace(at, 4, "t");
    auto send = [&]() -> httplib::Result {
      if (method == "get") return client_->Get(p, bearer("alice"));
      if (method == "put") return client_->Put(p, bearer("alice"), "{}", "application/json");
      if (method == "patch") return client_->Patch(p, bearer("alice"), "{}", "application/json");
      if (method == "delete") return client_->Delete(p, bearer("alice"));
      return client_->Post(p, bearer("alice"), "{}", "application/json");
    };
    httplib::Result r = send();
    ASSERT_TRUE(r) << method << " " << p;
    EXPECT_FALSE(r->status == 404 && r->body.find("no such endpoint") != std::string::npos)
        << method << " " << p;
    EXPECT_NE(r->status, 405) << method << " " << p;
  }
}

// ---- the operators' status page (native-agent/api/api_status.cpp) ----------------------------
// The page itself in a real browser: tests/browser/status_page.mjs.

TEST_P(ApiTest, StatusPageIsStaticWithItsOwnHeaders) {
  for (const char* path : {"/status", "/status.js", "/status.css"}) {
    auto r = client_->Get(path);  // no token: the files hold no data
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Security-Policy"),
              "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(r->get_header_value("Cache-Control"), "no-cache");
    EXPECT_FALSE(r->body.empty());
  }
  EXPECT_EQ(client_->Get("/status")->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(client_->Get("/status.js")->get_header_value("Content-Type"),
            "text/javascript; charset=utf-8");
  EXPECT_EQ(client_->Get("/status.css")->get_header_value("Content-Type"),
            "text/css; charset=utf-8");
  // The page never parses data as markup.
  const std::string script = client_->Get("/status.js")->body;
  for (const char* sink : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"}) {
    EXPECT_EQ(script.find(sink), std::string::npos) << sink;
  }
}

TEST_P(ApiTest, AdminStatusAndRefreshAreForOperatorsOnly) {
  auto r = client_->Get("/v1/admin/status");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Get("/v1/admin/status", bearer("bob"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(error_code(r), "FORBIDDEN");
  r = client_->Post("/v1/admin/connections/t/refresh", bearer("carol"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  r = client_->Get("/v1/admin/status", bearer("alice"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Cache-Control"), "no-store");
}

TEST_P(ApiTest, AdminStatusShowsEveryConnectionPrincipalAndMember) {
  // `broken` fails: its error is shown as stored.
  ASSERT_TRUE(agent_->refresh_now("broken", Principal::shared(), "manual").ok());
  auto r = client_->Get("/v1/admin/status", bearer("alice"));
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  const Json j = body_of(r);
  std::map<std::string, Json> conns;
  for (const Json& c : j["connections"]) conns[c["id"]] = c;
  ASSERT_EQ(conns.size(), 4u) << r->body;  // t, u, broken, pm: every connection, not alice's

  const Json& t = conns["t"];
  EXPECT_EQ(t["credential_mode"], "shared");
  EXPECT_EQ(t["members"], Json::array({"alice", "carol"}));
  ASSERT_EQ(t["principals"].size(), 1u);
  const Json& tp = t["principals"][0];
  EXPECT_EQ(tp["principal"], "shared");
  EXPECT_EQ(tp["status"], "fresh");
  EXPECT_EQ(tp["counts"]["tools"], 3);
  EXPECT_EQ(tp["counts"]["resources"], 2);
  EXPECT_EQ(tp["last_listing"]["source"], "agent");  // listed by this agent in SetUp
  EXPECT_TRUE(tp["last_listing"]["duration_ms"].is_number_integer());
  EXPECT_TRUE(tp["last_listing"]["at"].is_number_integer());
  EXPECT_EQ(tp["refresh_in_flight"], false);
  EXPECT_EQ(tp["capabilities"]["total"], 8);  // 3 tools, 2 resources, 1 template, 2 prompts
  EXPECT_EQ(t["capabilities_enabled"], 8);

  EXPECT_EQ(conns["u"]["principals"][0]["status"], "pending");  // never listed
  EXPECT_TRUE(conns["u"]["principals"][0]["last_listing"]["at"].is_null());
  const Json& bp = conns["broken"]["principals"][0];
  EXPECT_EQ(bp["status"], "error");
  EXPECT_FALSE(bp["error"]["code"].get<std::string>().empty());
  EXPECT_FALSE(bp.contains("counts"));  // could not load: never 0 items

  const Json& pm = conns["pm"];
  EXPECT_EQ(pm["credential_mode"], "per_member");
  EXPECT_TRUE(pm["capabilities_enabled"].is_null());
  ASSERT_EQ(pm["principals"].size(), 2u);
  EXPECT_EQ(pm["principals"][0]["principal"], "member/carol");
  EXPECT_EQ(pm["principals"][1]["principal"], "member/dave");
  EXPECT_EQ(pm["principals_truncated"], false);

  ASSERT_EQ(j["members"].size(), 4u);
  EXPECT_EQ(j["members"][0]["id"], "alice");
  EXPECT_EQ(j["members"][0]["operator"], true);
  EXPECT_EQ(j["members"][0]["connections"], Json::array({"broken", "t"}));
  EXPECT_EQ(j["members"][1]["operator"], false);
  EXPECT_EQ(j["members_truncated"], false);
  EXPECT_EQ(r->body.find(kUpstreamSecret), std::string::npos);
}

TEST_P(ApiTest, AdminRefreshRefreshesEveryPrincipalAsTheWebhookDoes) {
  auto r =
      client_->Post("/v1/admin/connections/pm/refresh", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  const Json j = body_of(r);
  EXPECT_EQ(j["status"], "accepted");
  // A per_member connection is marked once as a whole (its members are queued as they read).
  ASSERT_EQ(j["refreshes"].size(), 1u) << r->body;
  EXPECT_EQ(j["refreshes"][0]["connection_id"], "pm");
  EXPECT_FALSE(j["refreshes"][0].contains("principal"));
  EXPECT_EQ(j["refreshes"][0]["status"], "marked");
  EXPECT_EQ(j["refreshes"][0]["marked_stale"], true);  // carol and dave are granted it
  r = client_->Post("/v1/admin/connections/t/refresh", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(body_of(r)["refreshes"][0]["marked_stale"], true);  // t's manifest reads stale now
  r = client_->Post("/v1/admin/connections/nope/refresh", bearer("alice"), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

// Overload shedding, slow and idle clients and unbounded bodies:
// tests/integration/api_hostile_test.cpp.

// ---- quiver-agent serve ------------------------------------------------------------------------

// A `quiver-agent serve` child on `config_file`, any free port, and what its curl line says.
struct Served {
  std::unique_ptr<ChildProcess> child;
  std::string out;
  std::string token;
  std::string base;  // http://127.0.0.1:<port>
};

// Whether serve's stderr says `text` within `timeout_ms`.
bool serve_logs(ChildProcess& serve, const char* text, int64_t timeout_ms) {
  return wait_until(
      [&] {
        serve.drain_stderr();
        return serve.stderr_tail().find(text) != std::string::npos;
      },
      timeout_ms);
}

// stdout is a pipe here, not a terminal: the token is printed only because of --print-token.
void start_serve(const TempDir& dir, const std::string& config_file, Served* s) {
  ChildSpec spec(testing::quiver_agent_binary(),
                 {"serve", "--config", config_file, "--listen", "127.0.0.1:0", "--print-token"},
                 {{"QUIVER_DATA_DIR", dir.path("data")}, {"SECRET", kUpstreamSecret}});
  Result<std::unique_ptr<ChildProcess>> child = ChildProcess::spawn(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  s->child = std::move(*child);
  ChildProcess& serve = *s->child;
  std::string curl_line;
  ASSERT_TRUE(wait_until(
      [&] {
        (void)serve.wait_readable(50);
        serve.drain_stderr();
        Result<std::string> bytes = serve.read_stdout();
        if (bytes.ok()) s->out += *bytes;
        std::size_t at = s->out.find("curl -s ");
        if (at == std::string::npos) return !serve.running();
        std::size_t end = s->out.find('\n', at);
        if (end == std::string::npos) return false;
        curl_line = s->out.substr(at, end - at);
        return true;
      },
      30'000))
      << s->out << serve.stderr_tail();
  ASSERT_FALSE(curl_line.empty()) << s->out << serve.stderr_tail();
  // curl -s -H 'Authorization: Bearer <token>' http://127.0.0.1:<port>/v1/manifests
  std::size_t bearer_at = curl_line.find("Bearer ");
  std::size_t quote = curl_line.find('\'', bearer_at);
  std::size_t url_at = curl_line.find("http://");
  ASSERT_NE(bearer_at, std::string::npos);
  ASSERT_NE(quote, std::string::npos);
  ASSERT_NE(url_at, std::string::npos);
  s->token = curl_line.substr(bearer_at + 7, quote - bearer_at - 7);
  const std::string url = curl_line.substr(url_at);
  s->base = url.substr(0, url.find('/', 7));
}

// SIGTERM, then exit 0 with "stopped".
void stop_serve(Served& s) {
  ChildProcess& serve = *s.child;
  ASSERT_EQ(::kill(serve.pid(), SIGTERM), 0);
  std::optional<ExitStatus> status;
  ASSERT_TRUE(wait_until(
      [&] {
        serve.drain_stderr();
        status = serve.exit_status();
        return status.has_value();
      },
      15'000))
      << serve.stderr_tail();
  EXPECT_TRUE(status->success()) << status->describe() << serve.stderr_tail();
  EXPECT_NE(serve.stderr_tail().find("stopped"), std::string::npos);
  EXPECT_EQ(serve.stderr_tail().find(kTokenKey), std::string::npos);
}

void write_file(const std::string& path, const std::string& text) {
  std::remove(path.c_str());
  testing::append_line(path, text);
}

// Writes the caller-token key and a configuration serving `servers` (member `local`, granted
// everything) into `dir`; returns the configuration's path. Written again, it replaces both.
std::string write_serve_config(const TempDir& dir, Json servers, Json quiver = Json::object()) {
  const std::string key_file = dir.path("caller-token.key");
  write_file(key_file, kTokenKey);
  const std::string config_file = dir.path("quiver.json");
  quiver["members"] = {"local"};
  quiver["grants"] = {{"*", {"*"}}};
  quiver["caller_token_keys"] = {{"local-1", {{"file", key_file}}}};
  const Json config = {{"mcpServers", std::move(servers)}, {"quiver", std::move(quiver)}};
  write_file(config_file, config.dump());
  return config_file;
}

TEST(ApiServe, PrintsACurlLineThatShowsManifestsAndStopsOnSigterm) {
  TempDir dir;
  const std::string config_file = write_serve_config(
      dir, {{"everything", {{"command", "node"}, {"args", {testing::everything_js(), "stdio"}}}},
            {"t", test_upstream({"--tools", "2"})}});
  Served s;
  ASSERT_NO_FATAL_FAILURE(start_serve(dir, config_file, &s));
  EXPECT_NE(s.out.find("2 of 2 connection(s) listed"), std::string::npos) << s.out;

  httplib::Client c(s.base);
  auto r = c.Get("/v1/manifests", {{"Authorization", "Bearer " + s.token}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = body_of(r);
  ASSERT_EQ(j["connections"].size(), 2u) << r->body;
  EXPECT_EQ(j["connections"][0]["id"], "everything");
  EXPECT_EQ(j["connections"][0]["status"], "fresh");
  EXPECT_GE(j["connections"][0]["manifest"]["tools"]["items"].size(), 5u);
  EXPECT_EQ(j["connections"][0]["manifest"]["server"]["name"], "mcp-servers/everything");
  EXPECT_EQ(j["connections"][1]["manifest"]["tools"]["items"].size(), 2u);
  EXPECT_EQ(r->body.find(kUpstreamSecret), std::string::npos);
  stop_serve(s);
}

// Under systemd (or any redirect) stdout is a log: no caller token reaches it, only how to mint
// one. (A terminal gets the curl line with the token; --print-token forces it, see start_serve.)
TEST(ApiServe, PrintsNoTokenWhenStdoutIsNotATerminal) {
  TempDir dir;
  const std::string config_file = write_serve_config(dir, {{"t", test_upstream({"--tools", "2"})}});
  ChildSpec spec(testing::quiver_agent_binary(),
                 {"serve", "--config", config_file, "--listen", "127.0.0.1:0"},
                 {{"QUIVER_DATA_DIR", dir.path("data")}, {"SECRET", kUpstreamSecret}});
  Result<std::unique_ptr<ChildProcess>> child = ChildProcess::spawn(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  Served s;
  s.child = std::move(*child);
  ChildProcess& serve = *s.child;
  ASSERT_TRUE(wait_until(
      [&] {
        (void)serve.wait_readable(50);
        serve.drain_stderr();
        Result<std::string> bytes = serve.read_stdout();
        if (bytes.ok()) s.out += *bytes;
        return s.out.find("/v1/manifests\n") != std::string::npos || !serve.running();
      },
      30'000))
      << s.out << serve.stderr_tail();
  EXPECT_NE(s.out.find("quiver-agent token --member local"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("Bearer $TOKEN"), std::string::npos) << s.out;
  // No token: neither the curl line's form nor a JWT-shaped string.
  EXPECT_EQ(s.out.find("Bearer ey"), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("eyJ"), std::string::npos) << s.out;
  stop_serve(s);
}

TEST(ApiServe, SighupReloadsTheConfigurationAndRefusesABadOne) {
  TempDir dir;
  const std::string config_file = write_serve_config(dir, {{"t", test_upstream({"--tools", "2"})}});
  Served s;
  ASSERT_NO_FATAL_FAILURE(start_serve(dir, config_file, &s));
  ChildProcess& serve = *s.child;
  auto logs = [&](const char* text, int64_t timeout_ms) {
    return serve_logs(serve, text, timeout_ms);
  };
  httplib::Client c(s.base);
  auto ids = [&]() {
    std::vector<std::string> out;
    auto r = c.Get("/v1/manifests", {{"Authorization", "Bearer " + s.token}});
    if (!r || r->status != 200) {
      out.push_back(r ? std::to_string(r->status) + r->body : "no answer");
      return out;
    }
    const Json body = body_of(r);
    for (const Json& conn : body["connections"]) out.push_back(conn["id"]);
    return out;
  };
  EXPECT_EQ(ids(), (std::vector<std::string>{"t"}));

  // A new connection: served on the same address once reloaded, and listed.
  write_serve_config(
      dir, {{"t", test_upstream({"--tools", "2"})}, {"u", test_upstream({"--tools", "3"})}});
  ASSERT_EQ(::kill(serve.pid(), SIGHUP), 0);
  EXPECT_TRUE(wait_until(
      [&] {
        serve.drain_stderr();
        return ids() == std::vector<std::string>{"t", "u"};
      },
      15'000))
      << serve.stderr_tail();
  // The line comes once the new API listens: possibly just after the answer above.
  EXPECT_TRUE(logs("reloaded: 2 connection(s)", 5'000)) << serve.stderr_tail();

  // A broken file: refused, the running configuration kept.
  write_file(config_file, "{\"mcpServers\": ");
  ASSERT_EQ(::kill(serve.pid(), SIGHUP), 0);
  EXPECT_TRUE(logs("reload refused", 10'000)) << serve.stderr_tail();
  EXPECT_TRUE(serve.running());
  EXPECT_EQ(ids(), (std::vector<std::string>{"t", "u"}));
  stop_serve(s);
}

// A reload keeps the upstream sessions the new configuration runs the same way: an upstream's
// list_changed is heard right after it, with nothing listed by hand (stdio `t`, and HTTP `hk`
// whose GET stream stays open), and upstreams that hang during the reload do not hold it up:
// `hk` (kept) and `hr` (removed) are stopped (SIGSTOP: they accept and never answer) before
// SIGHUP. Closing a session of a hung HTTP upstream waits for its DELETE (2 s); the reload closes
// only what it drops, after the new engine serves.
TEST(ApiServe, AReloadKeepsUpstreamSessionsAndHearsListChangedRightAfter) {
  TempDir dir;
  testing::TestUpstreamHttp hk;
  testing::TestUpstreamHttp hr;
  ASSERT_TRUE(hk.ok()) << hk.error();
  ASSERT_TRUE(hr.ok()) << hr.error();
  const std::string ctl = dir.path("ctl");
  const std::string stats = dir.path("t.stats");
  const Json t = test_upstream({"--tools", "2", "--control", ctl, "--stats-file", stats});
  const Json quiver = {{"allow_private_upstreams", true}};
  const std::string config_file = write_serve_config(
      dir, {{"t", t}, {"hk", {{"url", hk.url()}}}, {"hr", {{"url", hr.url()}}}}, quiver);
  Served s;
  ASSERT_NO_FATAL_FAILURE(start_serve(dir, config_file, &s));
  ChildProcess& serve = *s.child;
  auto logs = [&](const char* text, int64_t timeout_ms) {
    return serve_logs(serve, text, timeout_ms);
  };
  httplib::Client c(s.base);
  // Each connection's tool names, by id (the cache as served).
  auto tools = [&]() {
    std::map<std::string, std::vector<std::string>> out;
    auto r = c.Get("/v1/manifests", {{"Authorization", "Bearer " + s.token}});
    if (!r || r->status != 200) return out;
    const Json body = body_of(r);
    for (const Json& conn : body["connections"]) {
      std::vector<std::string>& names = out[conn["id"].get<std::string>()];
      if (!conn.contains("manifest")) continue;
      for (const Json& tool : conn["manifest"]["tools"]["items"]) names.push_back(tool["name"]);
    }
    return out;
  };
  auto has_tool = [&](const std::string& id, const std::string& name) {
    std::map<std::string, std::vector<std::string>> now = tools();
    auto it = now.find(id);
    return it != now.end() &&
           std::find(it->second.begin(), it->second.end(), name) != it->second.end();
  };
  ASSERT_EQ(tools().size(), 3u) << serve.stderr_tail();
  const int64_t t_pid = read_stats(stats).value("pid", int64_t{0});
  const int64_t t_lists = tools_list_calls(stats);
  ASSERT_GT(t_pid, 0);

  // Both HTTP upstreams hang; `hr` leaves the configuration.
  ASSERT_EQ(::kill(hk.pid(), SIGSTOP), 0);
  ASSERT_EQ(::kill(hr.pid(), SIGSTOP), 0);
  write_serve_config(dir, {{"t", t}, {"hk", {{"url", hk.url()}}}}, quiver);
  const int64_t sent = testing::steady_now_ms();
  ASSERT_EQ(::kill(serve.pid(), SIGHUP), 0);
  EXPECT_TRUE(wait_until([&] { return tools().size() == 2u; }, 15'000)) << serve.stderr_tail();
  const int64_t reload_ms = testing::steady_now_ms() - sent;
  RecordProperty("reload_ms", std::to_string(reload_ms));
  // Closing the two hung sessions before serving again would take 4 s.
  EXPECT_LT(reload_ms, 3'000) << serve.stderr_tail();
  EXPECT_TRUE(logs("kept 2 upstream session(s) of the engine before the reload; 1 not kept", 5'000))
      << serve.stderr_tail();
  ASSERT_EQ(::kill(hk.pid(), SIGCONT), 0);
  ASSERT_EQ(::kill(hr.pid(), SIGCONT), 0);

  // The kept stdio session: the same child, nothing listed at the reload, its change heard.
  EXPECT_EQ(tools_list_calls(stats), t_lists);
  testing::append_line(ctl, R"({"add_tool":"after_reload"})");
  EXPECT_TRUE(wait_until([&] { return has_tool("t", "after_reload"); }, 10'000))
      << serve.stderr_tail();
  EXPECT_EQ(read_stats(stats).value("pid", int64_t{0}), t_pid);

  // The kept HTTP session, hung across the reload: its notification stream still delivers.
  httplib::Client control("127.0.0.1", hk.port());
  auto added = control.Post("/control", R"({"add_tool":"hk_after_reload"})", "application/json");
  ASSERT_TRUE(added);
  ASSERT_EQ(added->status, 200) << added->body;
  EXPECT_TRUE(wait_until([&] { return has_tool("hk", "hk_after_reload"); }, 10'000))
      << serve.stderr_tail();
  EXPECT_TRUE(logs("list_changed (tools) from hk (shared)", 1'000)) << serve.stderr_tail();
  stop_serve(s);
}

}  // namespace
}  // namespace quiver
