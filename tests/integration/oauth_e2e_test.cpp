// Issue 12 end to end, against things nobody here wrote: `oidc-provider` as the authorization
// server (dynamic registration, PKCE, resource indicators, JWT access tokens with a short life,
// rotating refresh tokens), the official SDK's Streamable HTTP server behind bearer auth listing
// each user's own tools, and a hostile authorization server (tests/fixtures/oauth/). The agent is
// the real `quiver-agent serve` (a child process, its own SQLite files or a real redis-server),
// spoken to over HTTP as its documented API says; the test plays each member's browser
// (tests/support/oauth_e2e.h authorize_in_browser) and delivers the redirect to the agent's
// `GET /v1/oauth/callback`.
//
// What is proven: before connecting a member's status is `authorization_required`; two members
// each connect and each sees only their own tools; an expired access token is refreshed without a
// miss (the authorization server counts the refresh); a revoked refresh token turns into
// `authorization_required` with the last good manifest still visible, and a reconnect lists again;
// DELETE .../authorization disconnects; two agents on one Redis sharing one token store refresh
// each token once; and bad input (forged or replayed state, a wrong `iss`, metadata for another
// resource, a garbage or hanging token endpoint) is a clear error that stores nothing and logs no
// code. `quiver-agent login` and `probe --oauth` are driven the same way.
//
// The agents are given their address in the file's `listen` too: the default redirect URI is
// derived from it, not from `serve --listen`.
#include "tests/support/oauth_e2e.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shared/caller_token.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::AgentServe;
using testing::authorize_in_browser;
using testing::DrainedChild;
using testing::http_request;
using testing::json_of;
using testing::NodeFixture;
using testing::RedisServer;
using testing::sqlite_count;
using testing::steady_now_ms;
using testing::TempDir;
using testing::wait_until;

constexpr char kNamespace[] = "oauth-e2e";
constexpr char kCallerKey[] = "oauth-e2e-caller-token-key-0123456789abcdef";
constexpr char kOAuthKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr int kAccessTtlS = 3;

std::map<std::string, std::string> agent_env() {
  return {{"TOKEN_KEY", kCallerKey}, {"QUIVER_OAUTH_KEY", kOAuthKey}};
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

httplib::Headers as(const std::string& member) {
  MintOptions o;
  o.ns = kNamespace;
  return {{"Authorization",
           "Bearer " + *mint_caller_token(member, kCallerKey, "k1", wall_ms(), 3'600'000, o)}};
}

std::vector<std::string> tool_names(const Json& entry) {
  std::vector<std::string> names;
  if (!entry.is_object() || !entry.contains("manifest")) return names;
  const Json& tools = entry["manifest"]["tools"];
  if (!tools.is_object() || !tools.contains("items")) return names;
  for (const Json& t : tools["items"]) names.push_back(t.value("name", ""));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> tools_of(const std::string& user) {
  return {user + "_tool_1", user + "_tool_2", user + "_tool_3"};
}

std::string error_code(const Json& entry) {
  return entry.is_object() && entry.contains("error") ? entry["error"].value("code", "") : "";
}

// The agent's configuration: the connection `cid` at `url` with auth oauth, per member (or shared),
// members alice and bob granted everything; `quiver` entries on top.
Json agent_config(const std::string& cid, const std::string& url, Json quiver = Json::object(),
                  const std::string& mode = "per_member") {
  Json q = {
      {"namespace", kNamespace},
      {"allow_private_upstreams", true},
      {"members", {"alice", "bob"}},
      {"grants", {{"*", {"*"}}}},
      {"caller_token_keys", {{"k1", {{"env", "TOKEN_KEY"}}}}},
      {"connections", {{cid, {{"credential_mode", mode}, {"auth", "oauth"}}}}},
      {"oauth", {{"key", {{"env", "QUIVER_OAUTH_KEY"}}}, {"refresh_ahead_ms", 1000}}},
      {"runtime", {{"list_timeout_ms", 20000}, {"request_timeout_ms", 20000}}},
  };
  for (auto it = quiver.begin(); it != quiver.end(); ++it) {
    if (it.key() == "oauth") {
      for (auto o = it.value().begin(); o != it.value().end(); ++o) q["oauth"][o.key()] = o.value();
    } else {
      q[it.key()] = it.value();
    }
  }
  return {{"mcpServers", {{cid, {{"url", url}}}}}, {"quiver", q}};
}

class OAuthE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    auth_ = std::make_unique<NodeFixture>(
        "auth_server.mjs", std::vector<std::string>{"--access-ttl", std::to_string(kAccessTtlS)});
    ASSERT_TRUE(auth_->ok()) << auth_->error();
    mcp_ = std::make_unique<NodeFixture>(
        "protected_mcp_server.mjs", std::vector<std::string>{"--issuer", auth_->str("issuer")});
    ASSERT_TRUE(mcp_->ok()) << mcp_->error();
  }

  std::unique_ptr<AgentServe> start_agent(Json config, const std::string& name = "agent") {
    auto agent = std::make_unique<AgentServe>(std::move(config), agent_env(), dir_.root(), name);
    EXPECT_TRUE(agent->ok()) << agent->logs();
    return agent->ok() ? std::move(agent) : nullptr;
  }

  // The member's entry for `cid` (GET /v1/mcp-connections/{cid}/manifest).
  static Json entry(AgentServe& agent, const std::string& member, const std::string& cid) {
    auto r = http_request("GET", agent.url("/v1/mcp-connections/" + cid + "/manifest"), as(member));
    Json body = json_of(r);
    if (body.is_object() && body.contains("connections") && !body["connections"].empty()) {
      return body["connections"][0];
    }
    return body;
  }

  // Waits until `pred` holds for the member's entry; the last entry seen.
  static Json wait_entry(AgentServe& agent, const std::string& member, const std::string& cid,
                         const std::function<bool(const Json&)>& pred, int64_t timeout_ms = 20000) {
    Json last;
    wait_until(
        [&] {
          last = entry(agent, member, cid);
          return pred(last);
        },
        timeout_ms);
    return last;
  }

  static bool needs_authorization(const Json& e) {
    return e.value("status", "") == "authorization_required" ||
           error_code(e) == "AUTHORIZATION_REQUIRED";
  }

  // POST .../authorize as `member`: the authorization URL (empty on failure, with the answer in
  // `answer`).
  static std::string begin(AgentServe& agent, const std::string& member, const std::string& cid,
                           Json* answer = nullptr, int* status = nullptr) {
    auto r = http_request("POST", agent.url("/v1/mcp-connections/" + cid + "/authorize"),
                          as(member), "{}");
    Json body = json_of(r);
    if (answer != nullptr) *answer = body;
    if (status != nullptr) *status = r ? r->status : 0;
    if (!r || r->status != 200 || !body.is_object()) return "";
    return body.value("authorization_url", body.value("url", std::string()));
  }

  // Delivers a redirect (to the agent's callback) as the browser does: GET, no token.
  static httplib::Result deliver(const std::string& callback_url) {
    return http_request("GET", callback_url, {}, "", "", 40);
  }

  // A member connects through `agent`: authorize, the browser at oidc-provider, the callback.
  // The callback URL (holding the code), for the secret scans.
  std::string connect(AgentServe& agent, const std::string& member, const std::string& cid) {
    std::string url = begin(agent, member, cid);
    EXPECT_FALSE(url.empty()) << agent.logs();
    if (url.empty()) return "";
    Result<std::string> back = authorize_in_browser(url, member);
    EXPECT_TRUE(back.ok()) << back.error().message;
    if (!back.ok()) return "";
    EXPECT_EQ(back->rfind(agent.url("/v1/oauth/callback"), 0), 0u) << *back;
    auto r = deliver(*back);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer") << agent.logs();
    if (r) {
      std::string page = r->body;
      std::transform(page.begin(), page.end(), page.begin(), ::tolower);
      EXPECT_NE(page.find("connected"), std::string::npos) << r->body;
    }
    return *back;
  }

  Json as_stats() { return json_of(http_request("GET", auth_->str("issuer") + "/__admin/stats")); }
  int refresh_calls(const char* field = "calls") {
    Json s = as_stats();
    return s["token"].contains("refresh_token") ? s["token"]["refresh_token"].value(field, 0) : 0;
  }

  static std::string param(const std::string& url, const std::string& name) {
    std::size_t at = url.find("?" + name + "=");
    if (at == std::string::npos) at = url.find("&" + name + "=");
    if (at == std::string::npos) return "";
    std::size_t from = at + name.size() + 2;
    return url.substr(from, url.find('&', from) - from);
  }

  std::string token_store(const AgentServe& agent, const std::string& name = "agent") {
    (void)agent;
    return dir_.path(name + "/oauth-tokens.db");
  }

  TempDir dir_{"quiver-oauth-e2e"};
  std::unique_ptr<NodeFixture> auth_;
  std::unique_ptr<NodeFixture> mcp_;
};

// Two members through the agent: authorization_required before, each their own tools after.
TEST_F(OAuthE2E, TwoMembersEachConnectAndSeeOnlyTheirOwnTools) {
  auto agent = start_agent(agent_config("linear", mcp_->str("url")));
  ASSERT_TRUE(agent);
  for (const char* member : {"alice", "bob"}) {
    Json e = wait_entry(*agent, member, "linear", needs_authorization);
    EXPECT_EQ(e.value("status", ""), "authorization_required") << e.dump() << agent->logs();
    EXPECT_TRUE(tool_names(e).empty()) << e.dump();
    EXPECT_EQ(e.value("authorize", ""), "/v1/mcp-connections/linear/authorize") << e.dump();
  }
  std::vector<std::string> callbacks;
  for (const char* member : {"alice", "bob"}) {
    callbacks.push_back(connect(*agent, member, "linear"));
    Json e = wait_entry(*agent, member, "linear",
                        [&](const Json& j) { return tool_names(j) == tools_of(member); });
    EXPECT_EQ(tool_names(e), tools_of(member)) << e.dump() << agent->logs();
    EXPECT_EQ(e.value("status", ""), "fresh") << e.dump();
    EXPECT_EQ(e.value("principal", ""), std::string("member/") + member);
  }
  // Each only their own, in every answer.
  for (const auto& [member, other] : {std::pair{"alice", "bob"}, std::pair{"bob", "alice"}}) {
    auto r = http_request("GET", agent->url("/v1/manifests"), as(member));
    ASSERT_TRUE(r && r->status == 200);
    EXPECT_NE(r->body.find(std::string(member) + "_tool_1"), std::string::npos);
    EXPECT_EQ(r->body.find(std::string(other) + "_tool"), std::string::npos) << r->body;
  }
  // The authorization server saw PKCE S256 and the resource on every request.
  for (const Json& a : as_stats()["authorizations"]) {
    EXPECT_EQ(a.value("code_challenge_method", ""), "S256") << a.dump();
    EXPECT_EQ(a.value("resource", ""), mcp_->str("resource")) << a.dump();
  }
  EXPECT_EQ(sqlite_count(token_store(*agent), "SELECT COUNT(*) FROM authorizations"), 2);
  // No code in a log line.
  const std::string logs = agent->logs();
  for (const std::string& cb : callbacks) {
    const std::string code = param(cb, "code");
    ASSERT_FALSE(code.empty()) << cb;
    EXPECT_EQ(logs.find(code), std::string::npos) << "the authorization code was logged";
  }
}

// The access token lives 3 s: a listing after it expired refreshes it first; the manifest never
// turns into a miss meanwhile, and the authorization server counted the refresh.
TEST_F(OAuthE2E, AnExpiredAccessTokenIsRefreshedWithoutAMiss) {
  auto agent = start_agent(agent_config("linear", mcp_->str("url")));
  ASSERT_TRUE(agent);
  connect(*agent, "alice", "linear");
  Json first = wait_entry(*agent, "alice", "linear",
                          [](const Json& j) { return tool_names(j) == tools_of("alice"); });
  ASSERT_EQ(tool_names(first), tools_of("alice")) << first.dump() << agent->logs();
  const int64_t fetched = first.value("fetched_at", int64_t{0});
  ASSERT_TRUE(http_request("POST", auth_->str("issuer") + "/__admin/reset-stats"));

  std::this_thread::sleep_for(std::chrono::milliseconds(kAccessTtlS * 1000 + 1000));
  auto queued = http_request("POST", agent->url("/v1/mcp-connections/linear/refresh-tools"),
                             as("alice"), "{}");
  ASSERT_TRUE(queued && queued->status == 202) << (queued ? queued->body : "no answer");
  std::set<std::string> seen;
  Json last = wait_entry(*agent, "alice", "linear", [&](const Json& j) {
    seen.insert(j.value("status", "?") + "/" + error_code(j));
    EXPECT_EQ(tool_names(j), tools_of("alice")) << "a miss: " << j.dump();
    return j.value("fetched_at", int64_t{0}) > fetched;
  });
  EXPECT_GT(last.value("fetched_at", int64_t{0}), fetched) << last.dump() << agent->logs();
  EXPECT_EQ(last.value("status", ""), "fresh") << last.dump();
  EXPECT_FALSE(last.contains("error")) << last.dump();
  for (const std::string& s : seen) {
    EXPECT_TRUE(s == "fresh/" || s == "stale/") << s;
  }
  EXPECT_EQ(refresh_calls("ok"), 1) << as_stats().dump();
  EXPECT_EQ(refresh_calls("calls"), 1) << as_stats().dump();
}

// The user revoked Quiver at the provider: the refresh answers invalid_grant, the member's status
// is authorization_required with the last good manifest still visible; a reconnect lists again.
TEST_F(OAuthE2E, ARevokedRefreshTokenNeedsAuthorizationAndAReconnectListsAgain) {
  auto agent = start_agent(agent_config("linear", mcp_->str("url")));
  ASSERT_TRUE(agent);
  connect(*agent, "alice", "linear");
  Json first = wait_entry(*agent, "alice", "linear",
                          [](const Json& j) { return tool_names(j) == tools_of("alice"); });
  ASSERT_EQ(tool_names(first), tools_of("alice")) << agent->logs();
  auto revoked = http_request("POST", auth_->str("issuer") + "/__admin/revoke?user=alice");
  ASSERT_TRUE(revoked && json_of(revoked).value("revoked", 0) >= 1);

  std::this_thread::sleep_for(std::chrono::milliseconds(kAccessTtlS * 1000 + 1000));
  ASSERT_TRUE(http_request("POST", agent->url("/v1/mcp-connections/linear/refresh-tools"),
                           as("alice"), "{}"));
  Json e = wait_entry(*agent, "alice", "linear", needs_authorization);
  EXPECT_TRUE(needs_authorization(e)) << e.dump() << agent->logs();
  EXPECT_EQ(tool_names(e), tools_of("alice")) << "the last good manifest is kept: " << e.dump();
  EXPECT_NE(e.value("status", ""), "fresh") << e.dump();
  EXPECT_GE(as_stats()["token"]["refresh_token"]["errors"].value("invalid_grant", 0), 1);

  connect(*agent, "alice", "linear");
  Json again = wait_entry(*agent, "alice", "linear", [](const Json& j) {
    return j.value("status", "") == "fresh" && !j.contains("error");
  });
  EXPECT_EQ(again.value("status", ""), "fresh") << again.dump() << agent->logs();
  EXPECT_EQ(tool_names(again), tools_of("alice"));
}

// Step-up (MCP authorization, "Scope Challenge Handling"): the server's tools/list needs
// mcp:admin besides the mcp:tools its 401 names. The first authorization asks for mcp:tools; the
// listing gets 403 insufficient_scope; the member is authorization_required again (the refused
// tokens are gone, the step-up's union kept); the next authorization asks for the union, and after
// the member consents the listing succeeds and the step-up is over.
TEST_F(OAuthE2E, AStepUpAsksTheMemberForTheUnionOfScopes) {
  NodeFixture scoped("protected_mcp_server.mjs",
                     {"--issuer", auth_->str("issuer"), "--list-scope", "mcp:admin"});
  ASSERT_TRUE(scoped.ok()) << scoped.error();
  auto agent = start_agent(agent_config("linear", scoped.str("url")));
  ASSERT_TRUE(agent);
  wait_entry(*agent, "alice", "linear", needs_authorization);
  const std::string db = token_store(*agent);

  connect(*agent, "alice", "linear");
  Json first_scope = as_stats()["authorizations"].back();
  EXPECT_EQ(first_scope.value("scope", "").find("mcp:admin"), std::string::npos)
      << first_scope.dump();
  Json refused = wait_entry(*agent, "alice", "linear", [&](const Json& j) {
    return needs_authorization(j) && sqlite_count(db, "SELECT COUNT(*) FROM step_ups") == 1;
  });
  EXPECT_TRUE(needs_authorization(refused)) << refused.dump() << agent->logs();
  EXPECT_NE(refused.dump().find("insufficient_scope"), std::string::npos) << refused.dump();
  EXPECT_EQ(sqlite_count(db, "SELECT COUNT(*) FROM authorizations"), 0);
  Json server_stats = json_of(http_request(
      "GET",
      "http://127.0.0.1:" + std::to_string(scoped.info().value("port", 0)) + "/__admin/stats"));
  EXPECT_GE(server_stats.value("insufficient_scope", 0), 1) << server_stats.dump();

  connect(*agent, "alice", "linear");
  const std::string second_scope = as_stats()["authorizations"].back().value("scope", "");
  EXPECT_NE(second_scope.find("mcp:admin"), std::string::npos) << second_scope;
  EXPECT_NE(second_scope.find("mcp:tools"), std::string::npos) << second_scope;
  Json listed = wait_entry(*agent, "alice", "linear", [](const Json& j) {
    return j.value("status", "") == "fresh" && tool_names(j) == tools_of("alice");
  });
  EXPECT_EQ(tool_names(listed), tools_of("alice")) << listed.dump() << agent->logs();
  EXPECT_EQ(listed.value("status", ""), "fresh") << listed.dump();
  EXPECT_EQ(sqlite_count(db, "SELECT COUNT(*) FROM step_ups"), 0);
}

// The client_credentials grant steps up by itself: its first token (mcp:tools, the challenge's
// scope) is refused with 403 insufficient_scope, the agent asks the token endpoint for the union
// and lists with it, with no person involved and no error ever shown.
TEST_F(OAuthE2E, AClientCredentialsStepUpNeedsNoPerson) {
  NodeFixture scoped("protected_mcp_server.mjs",
                     {"--issuer", auth_->str("issuer"), "--list-scope", "mcp:admin"});
  ASSERT_TRUE(scoped.ok()) << scoped.error();
  Json quiver = {{"connections",
                  {{"linear",
                    {{"credential_mode", "shared"},
                     {"auth", "oauth"},
                     {"oauth",
                      {{"grant", "client_credentials"},
                       {"client_id", "quiver-cc"},
                       {"client_secret", {{"env", "CC_SECRET"}}}}}}}}}};
  std::map<std::string, std::string> env = agent_env();
  env["CC_SECRET"] = "quiver-cc-secret";
  auto agent = std::make_unique<AgentServe>(agent_config("linear", scoped.str("url"), quiver), env,
                                            dir_.root(), "agent");
  ASSERT_TRUE(agent->ok()) << agent->logs();
  Json listed = wait_entry(*agent, "alice", "linear", [](const Json& j) {
    return j.value("status", "") == "fresh" && !tool_names(j).empty();
  });
  EXPECT_EQ(listed.value("status", ""), "fresh") << listed.dump() << agent->logs();
  EXPECT_EQ(tool_names(listed), tools_of("quiver-cc")) << listed.dump();
  Json token = as_stats()["token"]["client_credentials"];
  EXPECT_EQ(token.value("ok", 0), 2) << as_stats().dump();  // the first token, the stepped-up one
  EXPECT_EQ(sqlite_count(token_store(*agent), "SELECT COUNT(*) FROM step_ups"), 0);
  EXPECT_EQ(agent->logs().find("quiver-cc-secret"), std::string::npos);
}

// DELETE /v1/mcp-connections/{id}/authorization: the member's tokens and manifest go.
TEST_F(OAuthE2E, DeletingTheAuthorizationDisconnects) {
  auto agent = start_agent(agent_config("linear", mcp_->str("url")));
  ASSERT_TRUE(agent);
  connect(*agent, "alice", "linear");
  connect(*agent, "bob", "linear");
  for (const char* m : {"alice", "bob"}) {
    Json e = wait_entry(*agent, m, "linear",
                        [&](const Json& j) { return tool_names(j) == tools_of(m); });
    ASSERT_EQ(tool_names(e), tools_of(m)) << agent->logs();
  }
  auto r =
      http_request("DELETE", agent->url("/v1/mcp-connections/linear/authorization"), as("alice"));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->status == 200 || r->status == 204) << r->status << " " << r->body;
  Json e = wait_entry(*agent, "alice", "linear", [](const Json& j) {
    return j.value("status", "") == "authorization_required" && tool_names(j).empty();
  });
  EXPECT_EQ(e.value("status", ""), "authorization_required") << e.dump();
  EXPECT_TRUE(tool_names(e).empty()) << e.dump();
  EXPECT_EQ(sqlite_count(token_store(*agent), "SELECT COUNT(*) FROM authorizations"), 1);
  // Bob is untouched.
  EXPECT_EQ(tool_names(entry(*agent, "bob", "linear")), tools_of("bob"));
  // Again: nothing left to delete, still a clear answer.
  auto again =
      http_request("DELETE", agent->url("/v1/mcp-connections/linear/authorization"), as("alice"));
  ASSERT_TRUE(again);
  EXPECT_LT(again->status, 500) << again->body;
}

// Two agents on one Redis share one token store file: when the tokens expire and both agents
// need them at once, each (connection, principal) is refreshed once.
TEST_F(OAuthE2E, TwoAgentsSharingATokenStoreRefreshEachTokenOnce) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  Json shared = {{"redis", "redis://127.0.0.1:" + std::to_string(redis.port()) + "/0"},
                 {"oauth", {{"token_store", dir_.path("shared-tokens.db")}}}};
  auto a = start_agent(agent_config("linear", mcp_->str("url"), shared), "a");
  auto b = start_agent(agent_config("linear", mcp_->str("url"), shared), "b");
  ASSERT_TRUE(a && b);
  for (const char* m : {"alice", "bob"}) {
    connect(*a, m, "linear");
    for (AgentServe* agent : {a.get(), b.get()}) {
      Json e = wait_entry(*agent, m, "linear",
                          [&](const Json& j) { return tool_names(j) == tools_of(m); });
      ASSERT_EQ(tool_names(e), tools_of(m)) << e.dump() << agent->logs();
    }
  }
  ASSERT_TRUE(http_request("POST", auth_->str("issuer") + "/__admin/reset-stats"));
  std::this_thread::sleep_for(std::chrono::milliseconds(kAccessTtlS * 1000 + 1000));

  // Both agents, both members, at once: each needs a fresh access token.
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> answers;
  for (AgentServe* agent : {a.get(), b.get()}) {
    for (const char* m : {"alice", "bob"}) {
      threads.emplace_back([&, agent, m] {
        auto r = http_request("POST", agent->url("/v1/mcp-connections/linear/test"), as(m), "");
        std::lock_guard<std::mutex> lock(mu);
        answers.push_back(
            std::string(m) + " " +
            (r ? std::to_string(r->status) + " " + r->body : std::string("no answer")));
      });
    }
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& answer : answers) {
    EXPECT_NE(answer.find(" 200 "), std::string::npos) << answer;
    const std::string member = answer.substr(0, answer.find(' '));
    EXPECT_NE(answer.find(member + "_tool_1"), std::string::npos) << answer;
  }
  Json stats = as_stats();
  EXPECT_EQ(refresh_calls("calls"), 2) << stats.dump() << a->logs() << b->logs();
  EXPECT_EQ(refresh_calls("ok"), 2) << stats.dump();
}

// ---- bad input: the hostile authorization server -----------------------------------------------

class HostileOAuth : public OAuthE2E {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    hostile_ = std::make_unique<NodeFixture>("hostile_auth_server.mjs");
    ASSERT_TRUE(hostile_->ok()) << hostile_->error();
    Json cfg = agent_config("hostile", hostile_->str("url"));
    cfg["quiver"]["runtime"] = {{"list_timeout_ms", 5000}, {"request_timeout_ms", 5000}};
    agent_ = start_agent(cfg);
    ASSERT_TRUE(agent_);
  }

  void mode(const std::string& m) {
    auto r = http_request("POST", hostile_->str("issuer") + "/__admin/mode?m=" + m);
    ASSERT_TRUE(r && r->status == 200);
  }
  Json stats() { return json_of(http_request("GET", hostile_->str("issuer") + "/__admin/stats")); }
  int code_exchanges() { return stats()["token_grants"].value("authorization_code", 0); }

  int rows(const std::string& table) {
    return sqlite_count(token_store(*agent_), "SELECT COUNT(*) FROM " + table);
  }

  // Nothing stored; no code nor `marker` in the agent's logs.
  void expect_nothing_kept(const std::string& marker = "") {
    EXPECT_EQ(rows("authorizations"), 0) << agent_->logs();
    const std::string logs = agent_->logs();
    for (const Json& code : stats()["codes"]) {
      EXPECT_EQ(logs.find(code.get<std::string>()), std::string::npos) << "a code was logged";
    }
    if (!marker.empty()) {
      EXPECT_EQ(logs.find(marker), std::string::npos) << "logged: " << marker;
    }
    Json e = wait_entry(*agent_, "alice", "hostile", needs_authorization, 15000);
    EXPECT_TRUE(needs_authorization(e)) << e.dump();
  }

  // Authorize as alice and walk the (immediate) redirect to the agent's callback.
  std::string callback_url() {
    std::string url = begin(*agent_, "alice", "hostile");
    EXPECT_FALSE(url.empty()) << agent_->logs();
    if (url.empty()) return "";
    Result<std::string> back = authorize_in_browser(url, "alice");
    EXPECT_TRUE(back.ok()) << back.error().message;
    return back.ok() ? *back : "";
  }

  std::unique_ptr<NodeFixture> hostile_;
  std::unique_ptr<AgentServe> agent_;
};

TEST_F(HostileOAuth, MetadataForAnotherResourceIsRefused) {
  mode("other-resource");
  Json answer;
  int status = 0;
  EXPECT_TRUE(begin(*agent_, "alice", "hostile", &answer, &status).empty()) << answer.dump();
  EXPECT_GE(status, 400) << answer.dump();
  const std::string message = answer["error"].value("message", "");
  EXPECT_NE(message.find("resource"), std::string::npos) << answer.dump();
  EXPECT_EQ(rows("pending"), 0);
  EXPECT_EQ(stats()["authorizations"].size(), 0u);
  expect_nothing_kept();
}

TEST_F(HostileOAuth, AWrongIssIsRefusedBeforeTheCodeIsExchanged) {
  mode("wrong-iss");
  std::string cb = callback_url();
  ASSERT_FALSE(cb.empty());
  auto r = deliver(cb);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(code_exchanges(), 0) << stats().dump();
  expect_nothing_kept();
}

TEST_F(HostileOAuth, AForgedOrReplayedStateIsRefused) {
  auto forged = deliver(agent_->url("/v1/oauth/callback?state=forged-state&code=c0de&iss=") +
                        hostile_->str("issuer"));
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 400) << forged->body;
  EXPECT_EQ(code_exchanges(), 0);
  expect_nothing_kept();

  std::string cb = callback_url();
  ASSERT_FALSE(cb.empty());
  auto first = deliver(cb);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200) << first->body << agent_->logs();
  EXPECT_EQ(code_exchanges(), 1);
  auto replayed = deliver(cb);
  ASSERT_TRUE(replayed);
  EXPECT_EQ(replayed->status, 400) << replayed->body;
  EXPECT_EQ(code_exchanges(), 1) << "a replayed state exchanged a code again";
}

TEST_F(HostileOAuth, AGarbageTokenResponseStoresNothing) {
  mode("garbage-token");
  std::string cb = callback_url();
  ASSERT_FALSE(cb.empty());
  auto r = deliver(cb);
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 400) << r->body;
  EXPECT_EQ(r->body.find("hostile-garbage-SECRET"), std::string::npos) << r->body;
  EXPECT_EQ(code_exchanges(), 1);
  expect_nothing_kept("hostile-garbage-SECRET");
}

TEST_F(HostileOAuth, AHangingTokenEndpointTimesOutAndStoresNothing) {
  mode("hang-token");
  std::string cb = callback_url();
  ASSERT_FALSE(cb.empty());
  const int64_t t0 = steady_now_ms();
  auto r = deliver(cb);
  const int64_t took = steady_now_ms() - t0;
  ASSERT_TRUE(r) << "the callback did not answer within 40 s";
  EXPECT_GE(r->status, 400) << r->body;
  // The token endpoint's wait is the connection's listing timeout (5 s here), not the API's
  // 20 s budget: generous slack for a loaded machine, well under that budget.
  EXPECT_LT(took, 15000);
  EXPECT_EQ(stats().value("hung", 0), 1);
  expect_nothing_kept();
}

// ---- the CLI: `quiver-agent login NAME` and `probe --url URL --oauth` --------------------------

// Waits for the `authorize: <URL>` line on the child's stderr; "" when it did not come.
std::string authorize_line(DrainedChild& child) {
  std::string url;
  wait_until(
      [&] {
        const std::string text = child.text();
        std::size_t at = text.find("authorize: ");
        if (at == std::string::npos) return child.exited();
        std::size_t end = text.find('\n', at);
        if (end == std::string::npos) return false;
        url = text.substr(at + 11, end - at - 11);
        return true;
      },
      20000);
  return url;
}

TEST_F(OAuthE2E, LoginAuthorizesASharedConnectionThroughItsLoopbackRedirect) {
  Json cfg = agent_config("ops", mcp_->str("url"), Json::object(), "shared");
  cfg["quiver"]["data_dir"] = dir_.path("agent");
  const std::string path = dir_.write("login.json", cfg.dump(2));
  auto env = agent_env();
  DrainedChild login(
      ChildSpec(testing::quiver_agent_binary(), {"login", "ops", "--config", path}, env));
  const std::string url = authorize_line(login);
  ASSERT_FALSE(url.empty()) << login.text();
  Result<std::string> back = authorize_in_browser(url, "operator");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->rfind("http://127.0.0.1:", 0), 0u) << *back;
  auto r = deliver(*back);
  ASSERT_TRUE(r) << login.text();
  EXPECT_EQ(r->status, 200) << r->body;
  ASSERT_TRUE(wait_until([&] { return login.exited(); }, 20000)) << login.text();
  EXPECT_EQ(login.exit_code(), 0) << login.text();
  login.stop();
  EXPECT_EQ(sqlite_count(dir_.path("agent/oauth-tokens.db"),
                         "SELECT COUNT(*) FROM authorizations WHERE principal = 'shared'"),
            1)
      << login.text();
  EXPECT_EQ(login.text().find(param(*back, "code")), std::string::npos) << "the code was printed";
}

TEST_F(OAuthE2E, ProbeOAuthListsTheUsersTools) {
  DrainedChild probe(ChildSpec(testing::quiver_agent_binary(),
                               {"probe", "--url", mcp_->str("url"), "--oauth", "--allow-private"}));
  const std::string url = authorize_line(probe);
  ASSERT_FALSE(url.empty()) << probe.text();
  Result<std::string> back = authorize_in_browser(url, "carol");
  ASSERT_TRUE(back.ok()) << back.error().message;
  auto r = deliver(*back);
  ASSERT_TRUE(r) << probe.text();
  EXPECT_EQ(r->status, 200) << r->body;
  ASSERT_TRUE(wait_until([&] { return probe.exited(); }, 20000)) << probe.text();
  EXPECT_EQ(probe.exit_code(), 0) << probe.text();
  const std::string out = probe.text();
  for (const std::string& tool : tools_of("carol")) {
    EXPECT_NE(out.find(tool), std::string::npos) << out;
  }
  EXPECT_EQ(out.find(param(*back, "code")), std::string::npos) << "the code was printed";
}

}  // namespace
}  // namespace quiver
