// The agent's OAuth endpoints (native-agent/api/api_oauth.cpp) end to end through a real agent and
// its real ApiServer on a free loopback port, its token store a real SQLite file: who may
// authorize what (member vs operator, shared vs per_member, not OAuth, client_credentials,
// unknown or ungranted), disconnecting what was never connected, and the callback page under
// hostile queries, forged and replayed states — each a clear answer with nothing stored. The
// full flow against a real authorization server is tests/integration/oauth_e2e_test (the e2e
// helper's fixture, tests/fixtures/oauth/).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "native-agent/api/api_server.h"
#include "native-agent/base/config.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/oauth_callbacks.h"
#include "native-agent/engine/oauth_manager.h"
#include "shared/caller_token.h"
#include "shared/oauth_callback.h"
#include "shared/redis_keys.h"
#include "tests/support/agent_setup.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_fixture.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using testing::LogCapture;
using testing::parse_test_config;
using testing::RedisConnection;
using testing::run_argv;
using testing::TempDir;
using testing::test_upstream_js;

constexpr char kTokenKey[] = "oauth-api-test-caller-token-key-0123456789";
constexpr char kOAuthKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

class OAuthApiTest : public testing::WithRedisServer<> {
 protected:
  // The embedded store; the Redis-backed suite below overrides it.
  virtual std::string redis_url() { return ""; }

  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    // Nothing listens on these: the endpoints' refusals come before any upstream is asked, and
    // an operator's authorize of `shr` finds the upstream unreachable (503, nothing stored).
    const std::string nowhere = "http://127.0.0.1:9/mcp";
    Json servers = {
        {"plain", {{"command", "node"}, {"args", {test_upstream_js(), "stdio", "--quiet"}}}},
        {"lin", {{"url", nowhere}}},
        {"shr", {{"url", nowhere}}},
        {"cc", {{"url", nowhere}}},
    };
    Json quiver = {
        {"data_dir", dir_.path("data")},
        {"listen", "127.0.0.1:0"},
        {"allow_private_upstreams", true},
        {"members", {"alice", "bob", "carol"}},
        {"operators", {"alice"}},
        {"grants", {{"alice", {"plain", "lin", "shr", "cc"}}, {"bob", {"lin", "shr", "cc"}}}},
        {"oauth", {{"key", {{"env", "OAUTH_KEY"}}}}},
        {"connections",
         {{"lin", {{"credential_mode", "per_member"}, {"auth", "oauth"}}},
          {"shr", {{"auth", "oauth"}}},
          {"cc",
           {{"auth", "oauth"},
            {"oauth",
             {{"grant", "client_credentials"},
              {"client_id", "quiver"},
              {"client_secret", {{"env", "CC_SECRET"}}}}}}}}},
        {"caller_token_keys", {{"k1", {{"env", "TEST_TOKEN_KEY"}}}}},
    };
    if (!redis_url().empty()) {
      quiver["redis"] = redis_url();
      quiver["namespace"] = "oauth-api-" + std::to_string(::getpid());
    }
    Result<AgentConfig> config = parse_test_config(
        Json{{"mcpServers", servers}, {"quiver", quiver}}, "oauth_api_test.json",
        {{"TEST_TOKEN_KEY", kTokenKey}, {"OAUTH_KEY", kOAuthKey}, {"CC_SECRET", "cc-secret-42"}},
        dir_.root());
    ASSERT_TRUE(config.ok()) << config.error().message;
    AgentOptions options = AgentOptions::on_demand();
    options.log_sink = log_.sink();
    Result<std::unique_ptr<Agent>> agent = Agent::create(*config, options);
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    agent_ = std::move(*agent);
    ASSERT_TRUE(agent_->start().ok());
    ASSERT_NE(agent_->oauth(), nullptr);
    ApiServerOptions api = api_server_options(agent_->config());
    api.worker_threads = 2;
    api.log = log_.sink();
    server_ = std::make_unique<ApiServer>(*agent_, api);
    ASSERT_TRUE(server_->start().ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(30);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->stop();
    if (agent_) agent_->stop();
  }

  httplib::Headers bearer(const std::string& member) {
    MintOptions o;
    o.ns = agent_->config().ns;
    return {{"Authorization", "Bearer " + *mint_caller_token(member, kTokenKey, "k1",
                                                             system_clock_ms()(), 3'600'000, o)}};
  }

  static std::string code_of(const httplib::Result& r) {
    Result<Json> j = r ? parse_json(r->body) : Result<Json>(Error(ErrorCode::kUnknown, ""));
    if (!j.ok() || !j->is_object() || !j->contains("error")) return "";
    return (*j)["error"].value("code", "");
  }

  // Puts a pending authorization of bob's on `lin` into the token store, as begin would (begin
  // itself needs a reachable server); its token endpoint is unreachable here.
  oauth::PendingAuthorization put_pending(const std::string& state, const std::string& redirect) {
    oauth::PendingAuthorization pending;
    pending.state = state;
    pending.code_verifier = "verifier-" + state + "-0123456789-0123456789-0123456789";
    pending.redirect_uri = redirect;
    pending.server.issuer = "http://127.0.0.1:9";
    pending.server.authorization_endpoint = "http://127.0.0.1:9/authorize";
    pending.server.token_endpoint = "http://127.0.0.1:9/token";
    pending.client.issuer = pending.server.issuer;
    pending.client.client_id = "quiver-test";
    pending.client.token_endpoint_auth_method = "none";
    pending.created_at_ms = system_clock_ms()();
    pending.expires_at_ms = pending.created_at_ms + oauth::kPendingTtlMs;
    Result<Principal> bob = Principal::member("bob");
    EXPECT_TRUE(bob.ok() && agent_->oauth()->tokens().put_pending("lin", *bob, pending).ok());
    return pending;
  }

  // Whether the token store holds any authorization: nothing is ever stored by a refusal.
  bool nothing_stored() {
    Result<std::vector<std::pair<std::string, Principal>>> all =
        agent_->oauth()->tokens().authorized();
    return all.ok() && all->empty();
  }

  TempDir dir_;
  LogCapture log_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(OAuthApiTest, WhoMayAuthorizeWhat) {
  // Not OAuth, client credentials, unknown, not granted.
  auto r = client_->Post("/v1/mcp-connections/plain/authorize", bearer("alice"), "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(code_of(r), "NOT_OAUTH");
  r = client_->Post("/v1/mcp-connections/cc/authorize", bearer("alice"), "", "text/plain");
  EXPECT_EQ(r->status, 409);
  EXPECT_EQ(code_of(r), "NO_USER_STEP");
  r = client_->Post("/v1/mcp-connections/nope/authorize", bearer("alice"), "", "text/plain");
  EXPECT_EQ(r->status, 404);
  r = client_->Post("/v1/mcp-connections/plain/authorize", bearer("bob"), "", "text/plain");
  EXPECT_EQ(r->status, 404);  // not granted: as discovery says, indistinguishable from unknown
  r = client_->Post("/v1/mcp-connections/lin/authorize", {}, "", "text/plain");
  EXPECT_EQ(r->status, 401);
  // A shared connection: a member who is not an operator may not authorize it for everyone.
  r = client_->Post("/v1/mcp-connections/shr/authorize", bearer("bob"), "", "text/plain");
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(code_of(r), "FORBIDDEN");
  // The operator may; the server is unreachable here: 503, nothing stored.
  r = client_->Post("/v1/mcp-connections/shr/authorize", bearer("alice"), "", "text/plain");
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(code_of(r), "UPSTREAM_UNAVAILABLE");
  // A member on a per_member connection: their own (unreachable here too).
  r = client_->Post("/v1/mcp-connections/lin/authorize", bearer("bob"), "", "text/plain");
  EXPECT_EQ(r->status, 503) << r->body;
  // A query parameter is refused like everywhere else.
  r = client_->Post("/v1/mcp-connections/lin/authorize?principal=member/alice", bearer("bob"), "",
                    "text/plain");
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(nothing_stored());
}

TEST_F(OAuthApiTest, DisconnectingWhatWasNeverConnectedIs404) {
  auto r = client_->Delete("/v1/mcp-connections/lin/authorization", bearer("bob"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(code_of(r), "NOT_FOUND");
  r = client_->Delete("/v1/mcp-connections/shr/authorization", bearer("bob"));
  EXPECT_EQ(r->status, 403);
  r = client_->Delete("/v1/mcp-connections/plain/authorization", bearer("alice"));
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(code_of(r), "NOT_OAUTH");
}

TEST_F(OAuthApiTest, TheCallbackRefusesHostileQueriesWithAPageAndStoresNothing) {
  const std::string code = "code-never-shown-0123456789";
  for (const std::string& q : std::vector<std::string>{
           "", "code=" + code, "state=s&code=a&code=b", "state=s&state=t&code=a",
           "state=s&code=" + std::string(5000, 'c'), "state=" + std::string(600, 's') + "&code=a",
           std::string("state=s"), std::string("state=s&code=a&error=x"),
           std::string("state=s%00&code=a"), std::string("state=%zz&code=a")}) {
    auto r = client_->Get("/v1/oauth/callback?" + q);  // no caller token: none is needed
    ASSERT_TRUE(r) << q.substr(0, 40);
    EXPECT_EQ(r->status, 400) << q.substr(0, 40);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_NE(r->get_header_value("Content-Security-Policy").find("default-src 'none'"),
              std::string::npos);
    EXPECT_EQ(r->get_header_value("Referrer-Policy"), "no-referrer");
    EXPECT_EQ(r->get_header_value("Cache-Control"), "no-store");
    EXPECT_EQ(r->body.find("<script"), std::string::npos);
    EXPECT_EQ(r->body.find(code), std::string::npos);
  }
  // A forged (unknown) state, and an error from the authorization server for it: failed pages.
  auto r = client_->Get("/v1/oauth/callback?state=forged-state&code=" + code +
                        "&iss=https%3A%2F%2Fas.example");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("Connection failed"), std::string::npos);
  EXPECT_EQ(r->body.find(code), std::string::npos);
  EXPECT_EQ(r->body.find("forged-state"), std::string::npos);
  r = client_->Get("/v1/oauth/callback?state=forged-state&error=access_denied");
  EXPECT_EQ(r->status, 400);
  // Only GET.
  r = client_->Post("/v1/oauth/callback?state=s&code=a", "", "text/plain");
  EXPECT_NE(r->status, 200);
  EXPECT_TRUE(nothing_stored());
  EXPECT_EQ(log_.text().find(code), std::string::npos);
}

TEST_F(OAuthApiTest, AReplayedStateIsRefusedTheSecondTime) {
  // A pending authorization the manager made (its begin needs a reachable server: put one in
  // the token store as begin would), used once through the callback, then replayed.
  const oauth::PendingAuthorization pending =
      put_pending("state-used-once", "http://127.0.0.1/v1/oauth/callback");
  // The first use reaches the token endpoint (unreachable here): failed, and the state is gone.
  auto r = client_->Get("/v1/oauth/callback?state=state-used-once&code=c1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = client_->Get("/v1/oauth/callback?state=state-used-once&code=c1");
  EXPECT_EQ(r->status, 400);
  Result<std::optional<PendingRecord>> left =
      agent_->oauth()->tokens().take_pending("state-used-once", system_clock_ms()());
  ASSERT_TRUE(left.ok());
  EXPECT_FALSE(left->has_value()) << "a state is single-use";
  EXPECT_TRUE(nothing_stored());
  EXPECT_EQ(log_.text().find(pending.code_verifier), std::string::npos);
}

TEST_F(OAuthApiTest, MetricsCountPrincipalsAwaitingAuthorization) {
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("# TYPE quiver_oauth_authorization_required gauge"), std::string::npos);
}

// ---- the edge's queued callbacks, as the agents finish them (engine/oauth_callbacks.h) ---------

class OAuthEdgeCallbackTest : public OAuthApiTest {
 protected:
  std::string redis_url() override {
    return redis_ && redis_->ok() ? "redis://127.0.0.1:" + std::to_string(redis_->port()) + "/0"
                                  : "redis://127.0.0.1:1/0";
  }
};

TEST_F(OAuthEdgeCallbackTest, OnlyTheAgentHoldingTheStateReportsAndNothingSecretIsWritten) {
  ASSERT_TRUE(redis_->ok()) << redis_->error();
  RedisConnection c(redis_->connect());
  ASSERT_NE(c, nullptr);
  Result<RedisKeys> keys = RedisKeys::create(agent_->config().ns);
  ASSERT_TRUE(keys.ok());
  OAuthCallbackConsumer consumer(*agent_, *agent_->oauth(), agent_->logger());
  const int64_t now = system_clock_ms()();
  // The first pass finds where the stream ends: what was queued before is another run's.
  auto xadd = [&](const std::string& state, const std::string& code, int64_t at) {
    run_argv(c.get(), {"XADD", keys->oauth_callbacks(), "*", "state", state, "code", code, "iss",
                       "", "error", "", "error_description", "", "at", std::to_string(at)});
  };
  xadd("before-start", "c0", now);
  EXPECT_EQ(consumer.pass(now), 0);
  // A state this agent never issued (another agent's, or forged): nothing written.
  xadd("not-ours", "c1", now);
  // An entry older than any pending authorization: skipped.
  xadd("too-old", "c2", now - oauth::kPendingTtlMs - 1000);
  // One this agent holds; its token endpoint is unreachable here: completed as failed.
  const oauth::PendingAuthorization pending =
      put_pending("ours", "https://edge.example/v1/oauth/callback");
  xadd("ours", "c3", now);
  EXPECT_EQ(consumer.pass(now), 1);
  RespValue none = run_argv(c.get(), {"GET", keys->oauth_result("not-ours")});
  EXPECT_TRUE(none.is_nil());
  EXPECT_TRUE(run_argv(c.get(), {"GET", keys->oauth_result("too-old")}).is_nil());
  EXPECT_TRUE(run_argv(c.get(), {"GET", keys->oauth_result("before-start")}).is_nil());
  RespValue got = run_argv(c.get(), {"GET", keys->oauth_result("ours")});
  ASSERT_TRUE(got.as_string().has_value());
  std::optional<OAuthCallbackResult> result = parse_oauth_result_record(*got.as_string());
  ASSERT_TRUE(result.has_value()) << *got.as_string();
  EXPECT_EQ(result->outcome, OAuthCallbackOutcome::kFailed);
  EXPECT_EQ(got.as_string()->find(pending.code_verifier), std::string::npos);
  EXPECT_EQ(got.as_string()->find("c3"), std::string::npos);
  RespValue ttl = run_argv(c.get(), {"PTTL", keys->oauth_result("ours")});
  EXPECT_GT(ttl.integer, 0);
  EXPECT_LE(ttl.integer, kOAuthResultTtlMs);
  // Nothing new: nothing finished again.
  EXPECT_EQ(consumer.pass(now), 0);
  EXPECT_TRUE(nothing_stored());
}

}  // namespace
}  // namespace quiver
