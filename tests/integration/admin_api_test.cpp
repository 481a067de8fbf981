// The admin API end to end (native-agent/api/api_admin*.cpp): the real ApiServer in front of the
// real Agent, on the embedded default (a SQLite file) and on a real redis-server, with real MCP
// upstreams (tests/peers/test-upstream.mjs over stdio), spoken to with a real HTTP client. Who
// may call it (401 / 403 / 200 for the three kinds of operator), the members', grants' and
// connections' round trips, discovery changing right after a grant change, the bulk form, a
// literal secret refused and never stored, the audit log, hostile bodies, and a store that is
// down. And `quiver-agent members|grants|connections` against the same server.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include "native-agent/api/api_server.h"
#include "native-agent/base/config.h"
#include "native-agent/engine/agent.h"
#include "native-agent/upstream/child_process.h"
#include "shared/caller_token.h"
#include "tests/support/cli_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_fixture.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::TempDir;
using testing::test_upstream_js;
using Names = std::vector<std::string>;

constexpr char kTokenKey[] = "admin-test-caller-token-key-0123456789";
constexpr char kLiteralSecret[] = "sk-literal-admin-secret-4d2c91";

enum class Backend { kSqlite, kRedis };

std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kSqlite ? "Sqlite" : "Redis";
}

Json test_upstream(int tools) {
  return Json{{"command", "node"},
              {"args", {test_upstream_js(), "stdio", "--quiet", "--tools", std::to_string(tools)}}};
}

Json body_of(const httplib::Result& r) {
  if (!r) return Json();
  JsonParseOptions answers;  // manifests nest deeper than the default limit
  answers.max_depth = 2 * kMaxJsonDepth;
  Result<Json> j = parse_json(r->body, answers);
  return j.ok() ? *j : Json();
}

std::string error_message(const httplib::Result& r) {
  Json j = body_of(r);
  if (!j.is_object() || !j.contains("error")) return "";
  return j["error"].value("message", "");
}

class AdminApiTest : public testing::WithRedisServer<::testing::TestWithParam<Backend>> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    Json servers = {{"t", test_upstream(3)}, {"u", test_upstream(2)}};
    Json quiver = {
        {"data_dir", dir_.path("data")},
        {"listen", "127.0.0.1:0"},
        {"operators", {"alice"}},
        {"grants", {{"alice", {"t"}}, {"bob", {"u"}}, {"carol", {"u"}}}},
        {"caller_token_keys", {{"k1", {{"env", "TEST_TOKEN_KEY"}}}}},
        {"runtime", {{"list_timeout_ms", 5000}}},
    };
    if (GetParam() == Backend::kRedis) {
      ASSERT_TRUE(redis_->ok()) << redis_->error();
      quiver["redis"] = "redis://127.0.0.1:" + std::to_string(redis_->port()) + "/0";
      static std::atomic<int> n{0};
      quiver["namespace"] = "admin-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
    }
    config_text_ = Json{{"mcpServers", servers}, {"quiver", quiver}}.dump();
    ConfigSources sources;
    sources.text = config_text_;
    sources.origin = "admin_api_test.json";
    sources.env = {{"TEST_TOKEN_KEY", kTokenKey}};
    sources.working_dir = dir_.root();
    Result<AgentConfig> config = parse_config(sources);
    ASSERT_TRUE(config.ok()) << config.error().message;

    AgentOptions options = AgentOptions::on_demand();
    options.log_sink = [this](const std::string& line) { append_log(line); };
    Result<std::unique_ptr<Agent>> agent = Agent::create(*config, options);
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    agent_ = std::move(*agent);
    ASSERT_TRUE(agent_->start().ok());
    for (const char* cid : {"t", "u"}) {
      Result<RefreshReport> listed = agent_->refresh_now(cid, Principal::shared(), "manual");
      ASSERT_TRUE(listed.ok() && listed->committed) << log();
    }

    ApiServerOptions api = api_server_options(agent_->config());
    api.worker_threads = 4;
    api.log = [this](const std::string& line) { append_log(line); };
    api.log_info = [this](const std::string& line) { append_log(line); };
    server_ = std::make_unique<ApiServer>(*agent_, api);
    Status started = server_->start();
    ASSERT_TRUE(started.ok()) << started.error().message;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_connection_timeout(2);
    client_->set_read_timeout(15);

    // The connections as the catalog holds them (the file's, seeded by the agent, or written here
    // when this agent does not seed yet): the same definitions either way.
    for (const char* cid : {"t", "u"}) {
      auto r =
          put("/v1/admin/connections/" + std::string(cid), "alice", Json{{"server", servers[cid]}});
      ASSERT_TRUE(r && (r->status == 200 || r->status == 201)) << (r ? r->body : "no answer");
    }
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->stop();
    if (agent_) agent_->stop();
  }

  void append_log(const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu_);
    log_ += line + "\n";
  }
  std::string log() {
    std::lock_guard<std::mutex> lock(log_mu_);
    return log_;
  }

  std::string token(const std::string& member_id, bool operator_role = false) {
    MintOptions o;
    o.ns = agent_->config().ns;
    if (operator_role) o.role = kOperatorRole;
    return *mint_caller_token(member_id, kTokenKey, "k1", system_clock_ms()(), 3'600'000, o);
  }
  httplib::Headers as(const std::string& member_id, bool operator_role = false) {
    return {{"Authorization", "Bearer " + token(member_id, operator_role)}};
  }
  httplib::Result get(const std::string& path, const std::string& who = "alice") {
    return client_->Get(path, as(who));
  }
  httplib::Result put(const std::string& path, const std::string& who, const Json& body) {
    return client_->Put(path, as(who), body.dump(), "application/json");
  }
  httplib::Result put_raw(const std::string& path, const std::string& body) {
    return client_->Put(path, as("alice"), body, "application/json");
  }
  httplib::Result patch(const std::string& path, const std::string& who, const Json& body) {
    return client_->Patch(path, as(who), body.dump(), "application/json");
  }

  // The connection ids a member's discovery answers with.
  std::set<std::string> discovered(const std::string& member_id) {
    std::set<std::string> ids;
    auto r = client_->Get("/v1/manifests", as(member_id));
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    const Json body = body_of(r);
    for (const Json& c : body["connections"]) ids.insert(c["id"].get<std::string>());
    return ids;
  }

  Json audit(std::size_t limit = 100) {
    auto r = get("/v1/admin/audit?limit=" + std::to_string(limit));
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return body_of(r)["entries"];
  }

  TempDir dir_;
  std::string config_text_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::mutex log_mu_;
  std::string log_;
};

INSTANTIATE_TEST_SUITE_P(BothStores, AdminApiTest,
                         ::testing::Values(Backend::kSqlite, Backend::kRedis), backend_name);

// 401 without a valid token, 403 "operators only" for a member, 200 for each kind of operator:
// the token's role claim, quiver.operators, and the catalog's member flag.
TEST_P(AdminApiTest, OnlyOperatorsAreServed) {
  auto r = client_->Get("/v1/admin/members");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Get("/v1/admin/members", {{"Authorization", "Bearer not.a.token"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  for (const std::string path : {"/v1/admin/members", "/v1/admin/connections", "/v1/admin/audit",
                                 "/v1/admin/members/bob/grants"}) {
    r = get(path, "bob");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << path;
    EXPECT_EQ(error_message(r), "operators only");
  }
  r = put("/v1/admin/members/bob", "bob", Json{{"operator", true}});  // no self-promotion
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);

  EXPECT_EQ(get("/v1/admin/members", "alice")->status, 200);                   // quiver.operators
  EXPECT_EQ(client_->Get("/v1/admin/members", as("zed", true))->status, 200);  // role claim
  EXPECT_EQ(get("/v1/admin/members", "carol")->status, 403);
  r = put("/v1/admin/members/carol", "alice", Json{{"operator", true}});  // the catalog flag
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->status == 200 || r->status == 201) << r->body;
  EXPECT_EQ(get("/v1/admin/members", "carol")->status, 200);
  ASSERT_EQ(put("/v1/admin/members/carol/grants", "alice", Json{{"connections", {"u"}}})->status,
            200);
  // ... and it is the same operator check that guards a shared connection's preferences.
  r = patch("/v1/mcp-connections/u/preferences", "carol",
            Json{{"type", "tool"}, {"key", "tool_1"}, {"enabled", false}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = patch("/v1/mcp-connections/u/preferences", "bob",
            Json{{"type", "tool"}, {"key", "tool_1"}, {"enabled", true}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
}

TEST_P(AdminApiTest, MembersRoundTrip) {
  auto r = put("/v1/admin/members/erin", "alice", Json{{"operator", false}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
  EXPECT_EQ(body_of(r)["operator"], false);
  EXPECT_EQ(body_of(r)["origin"], "api");
  EXPECT_EQ(body_of(r)["by"], "operator:alice");
  r = put("/v1/admin/members/erin", "alice", Json{{"operator", true}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = get("/v1/admin/members/erin");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(body_of(r)["operator"], true);
  EXPECT_EQ(body_of(r)["config_operator"], false);

  ASSERT_EQ(put("/v1/admin/members/frank", "alice", Json::object())->status, 201);
  // Paged: one member a page, every member once, in id order.
  std::vector<std::string> seen;
  std::string cursor;
  for (int pages = 0; pages < 50; ++pages) {
    r = get("/v1/admin/members?limit=1" + (cursor.empty() ? "" : "&cursor=" + cursor));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json page = body_of(r);
    for (const Json& m : page["members"]) seen.push_back(m["id"]);
    if (!page.contains("next_cursor")) break;
    cursor = page["next_cursor"];
  }
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_NE(std::find(seen.begin(), seen.end(), "erin"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "frank"), seen.end());

  r = client_->Delete("/v1/admin/members/erin", as("alice"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(get("/v1/admin/members/erin")->status, 404);
  EXPECT_EQ(client_->Delete("/v1/admin/members/erin", as("alice"))->status, 404);
  EXPECT_EQ(get("/v1/admin/members/no%20such")->status, 400);
}

// A grant change reaches discovery at once: the member's next GET /v1/manifests answers with it.
TEST_P(AdminApiTest, AMembersGrantChangeShowsInItsNextDiscoveryRead) {
  ASSERT_EQ(put("/v1/admin/members/bob", "alice", Json::object())->status / 100, 2);
  auto r = put("/v1/admin/members/bob/grants", "alice", Json{{"connections", {"t"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["effective"], Json::array({"t"}));
  EXPECT_EQ(discovered("bob"), (std::set<std::string>{"t"}));

  r = patch("/v1/admin/members/bob/grants", "alice", Json{{"add", {"u"}}, {"remove", {"t"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["connections"], Json::array({"u"}));
  EXPECT_EQ(discovered("bob"), (std::set<std::string>{"u"}));

  r = put("/v1/admin/members/bob/grants", "alice", Json{{"connections", {"*"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(discovered("bob"), (std::set<std::string>{"t", "u"}));

  // The store holds what readers check: another reader of the same store (the edge, another
  // agent) sees the same grant set.
  Result<std::set<std::string>> grantees = agent_->store().read_grantees("t");
  ASSERT_TRUE(grantees.ok()) << grantees.error().message;
  EXPECT_EQ(grantees->count("bob"), 1u);

  // Disabling a connection takes it from everyone; enabling gives it back.
  r = patch("/v1/admin/connections/t", "alice", Json{{"disabled", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["disabled"], true);
  EXPECT_EQ(discovered("bob"), (std::set<std::string>{"u"}));
  ASSERT_EQ(patch("/v1/admin/connections/t", "alice", Json{{"disabled", false}})->status, 200);
  EXPECT_EQ(discovered("bob"), (std::set<std::string>{"t", "u"}));

  // A deleted member loses everything at once.
  ASSERT_EQ(client_->Delete("/v1/admin/members/bob", as("alice"))->status, 200);
  EXPECT_TRUE(discovered("bob").empty());
}

TEST_P(AdminApiTest, EveryoneAndTheBulkForm) {
  auto r = put("/v1/admin/grants/everyone", "alice", Json{{"connections", {"u"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(get("/v1/admin/grants/everyone")->body, R"({"connections":["u"]})");

  r = put("/v1/admin/grants", "alice", Json{{"members", {{"x1", {"t"}}, {"x2", Json::array()}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_of(r)["members"]["x1"], Json::array({"t", "u"}));
  EXPECT_EQ(body_of(r)["members"]["x2"], Json::array({"u"}));
  EXPECT_EQ(discovered("x1"), (std::set<std::string>{"t", "u"}));
  EXPECT_EQ(discovered("x2"), (std::set<std::string>{"u"}));
  EXPECT_EQ(get("/v1/admin/members/x2")->status, 200);  // made by its grants

  // Everyone's grants changed again: every member follows.
  r = put("/v1/admin/grants/everyone", "alice", Json{{"connections", Json::array()}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_GE(body_of(r)["members_published"].get<int>(), 2);
  EXPECT_EQ(discovered("x1"), (std::set<std::string>{"t"}));
  EXPECT_TRUE(discovered("x2").empty());

  // Over 1000 members: refused whole.
  Json many = Json::object();
  for (int i = 0; i < 1001; ++i) many["m" + std::to_string(i)] = Json::array();
  r = put("/v1/admin/grants", "alice", Json{{"members", many}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(get("/v1/admin/members/m0")->status, 404);
}

TEST_P(AdminApiTest, ConnectionsRoundTripAndALiteralSecretIsNeverStored) {
  Json definition = {{"name", "extra"}, {"server", test_upstream(1)}, {"settings", Json::object()}};
  definition["server"]["env"] = {{"TOKEN", "${EXTRA_TOKEN}"}};
  auto r = put("/v1/admin/connections/extra", "alice", definition);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  r = get("/v1/admin/connections/extra");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(body_of(r)["server"]["env"]["TOKEN"], "${EXTRA_TOKEN}");
  EXPECT_EQ(body_of(r)["name"], "extra");
  r = get("/v1/admin/connections");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::set<std::string> ids;
  const Json list = body_of(r);
  for (const Json& c : list["connections"]) ids.insert(c["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"extra", "t", "u"}));

  Json literal = definition;
  literal["server"]["env"]["TOKEN"] = kLiteralSecret;
  r = put("/v1/admin/connections/leaky", "alice", literal);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(error_message(r).find("secrets must be references"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find(kLiteralSecret), std::string::npos);
  r = put("/v1/admin/connections/extra", "alice", literal);  // nor over a stored one
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  Result<std::optional<CatalogEntry>> stored =
      agent_->store().catalog_read(CatalogKind::kConnection, "leaky");
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->has_value());
  stored = agent_->store().catalog_read(CatalogKind::kConnection, "extra");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->value->dump().find(kLiteralSecret), std::string::npos);
  EXPECT_EQ(audit().dump().find(kLiteralSecret), std::string::npos);
  EXPECT_EQ(log().find(kLiteralSecret), std::string::npos);

  r = client_->Delete("/v1/admin/connections/extra", as("alice"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(get("/v1/admin/connections/extra")->status, 404);
  EXPECT_EQ(client_->Delete("/v1/admin/connections/extra", as("alice"))->status, 404);
}

// Every change is an audit line naming its actor, and one INFO line.
TEST_P(AdminApiTest, AuditLinesNameTheActor) {
  ASSERT_EQ(put("/v1/admin/members/gina", "alice", Json::object())->status, 201);
  ASSERT_EQ(client_
                ->Put("/v1/admin/members/gina/grants", as("zed", true), R"({"connections":["u"]})",
                      "application/json")
                ->status,
            200);
  Json lines = audit();
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0]["actor"], "operator:zed");  // newest first
  EXPECT_EQ(lines[0]["action"], "grants.put");
  EXPECT_EQ(lines[0]["target"], "gina");
  EXPECT_EQ(lines[0]["detail"]["connections"], Json::array({"u"}));
  EXPECT_EQ(lines[1]["actor"], "operator:alice");
  EXPECT_EQ(lines[1]["action"], "member.put");
  EXPECT_EQ(lines[1]["target"], "gina");
  EXPECT_NE(log().find("admin: operator:alice member.put gina"), std::string::npos) << log();
  // Paged.
  auto r = get("/v1/admin/audit?limit=1");
  ASSERT_TRUE(r);
  ASSERT_TRUE(body_of(r).contains("next_cursor")) << r->body;
  r = get("/v1/admin/audit?limit=1&cursor=" + body_of(r)["next_cursor"].get<std::string>());
  ASSERT_TRUE(r);
  EXPECT_EQ(body_of(r)["entries"][0]["action"], "member.put");
}

// Bad JSON, wrong types, unknown fields, bad ids, oversized bodies: 400 (413) naming the field,
// and nothing written.
TEST_P(AdminApiTest, HostileBodiesAreRefusedAndWriteNothing) {
  Result<CatalogVersions> before = agent_->store().catalog_versions();
  ASSERT_TRUE(before.ok());
  const std::size_t audit_before = audit().size();
  struct Case {
    std::string path;
    std::string body;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"/v1/admin/members/hal", "{", "JSON object"},
      {"/v1/admin/members/hal", "[]", "JSON object"},
      {"/v1/admin/members/hal", R"({"operator":"yes"})", "operator"},
      {"/v1/admin/members/hal", R"({"operator":true,"role":"admin"})", "role"},
      {"/v1/admin/members/h%20al", R"({})", "member id"},
      {"/v1/admin/members/hal/grants", R"({})", "connections"},
      {"/v1/admin/members/hal/grants", R"({"connections":"t"})", "connections"},
      {"/v1/admin/members/hal/grants", R"({"connections":[7]})", "connections[0]"},
      {"/v1/admin/members/hal/grants", R"({"connections":["t","t"]})", "repeats"},
      {"/v1/admin/members/hal/grants", R"({"connections":["a/b"]})", "connections[0]"},
      {"/v1/admin/grants/everyone", R"({"connections":[null]})", "connections[0]"},
      {"/v1/admin/grants", R"({"members":[]})", "members"},
      {"/v1/admin/grants", R"({"members":{"a b":[]}})", "member id"},
      {"/v1/admin/grants", R"({"members":{"ok":["t"],"bad":[1]}})", "members.bad[0]"},
      {"/v1/admin/connections/c1", R"({"server":{"command":"x"},"extra":1})", "extra"},
      {"/v1/admin/connections/c1", R"({"name":"c1"})", "server"},
      {"/v1/admin/connections/a%20b", R"({"server":{"command":"x"}})", "connection id"},
  };
  for (const Case& c : cases) {
    auto r = put_raw(c.path, c.body);
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, 400) << c.path << " " << c.body << ": " << r->body;
    EXPECT_NE(error_message(r).find(c.says), std::string::npos)
        << c.path << " " << c.body << ": " << r->body;
  }
  auto r = client_->Patch("/v1/admin/connections/t", as("alice"), R"({"disabled":1})",
                          "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = put_raw("/v1/admin/members/hal?dry_run=1", "{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = put_raw("/v1/admin/grants/everyone",
              R"({"connections":[")" + std::string(70 * 1024, 'a') + R"("]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);

  Result<CatalogVersions> after = agent_->store().catalog_versions();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
  EXPECT_EQ(audit().size(), audit_before);
  EXPECT_EQ(get("/v1/admin/members/hal")->status, 404);
}

// A store that is down: 503 STORE_UNAVAILABLE, never a 200 or a 404.
TEST_P(AdminApiTest, AStoreThatIsDownIs503) {
  if (GetParam() != Backend::kRedis) GTEST_SKIP() << "the embedded store is a local file";
  redis_->stop();
  for (const std::string path :
       {"/v1/admin/members", "/v1/admin/members/bob", "/v1/admin/connections", "/v1/admin/audit"}) {
    auto r = get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 503) << path << ": " << r->body;
    EXPECT_EQ(body_of(r)["error"]["code"], "STORE_UNAVAILABLE");
  }
  auto r = put("/v1/admin/members/bob/grants", "alice", Json{{"connections", {"t"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  // A member the config does not name as an operator cannot be checked against the catalog.
  r = get("/v1/admin/members", "bob");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  ASSERT_TRUE(redis_->start());
}

// The CLI: `quiver-agent members|grants|connections` against the running server, with a token
// minted from the configuration (--as an operator) or given.
TEST_P(AdminApiTest, TheCliCommands) {
  const std::string config_path = dir_.path("config.json");
  {
    std::ofstream f(config_path);
    f << config_text_;
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(server_->port());
  auto run = [&](std::vector<std::string> args, std::string* out) {
    args.push_back("--url");
    args.push_back(url);
    testing::CliRun r = testing::run(args, {{"TEST_TOKEN_KEY", kTokenKey}});
    *out = r.out;
    return r.code;
  };
  auto body_of_text = [](const std::string& text) {
    Result<Json> j = parse_json(text);
    return j.ok() ? *j : Json();
  };
  std::string out;
  EXPECT_EQ(run({"members", "put", "ivy", "--operator", "--config", config_path}, &out), 0) << out;
  EXPECT_EQ(body_of_text(out)["operator"], true);
  EXPECT_EQ(run({"grants", "set", "ivy", "t", "--config", config_path}, &out), 0) << out;
  EXPECT_EQ(body_of_text(out)["effective"], Json::array({"t"}));
  EXPECT_EQ(run({"grants", "add", "ivy", "u", "--config", config_path}, &out), 0) << out;
  EXPECT_EQ(body_of_text(out)["connections"], Json::array({"t", "u"}));
  EXPECT_EQ(run({"connections", "disable", "u", "--config", config_path}, &out), 0) << out;
  EXPECT_EQ(run({"grants", "get", "ivy", "--config", config_path}, &out), 0) << out;
  EXPECT_EQ(body_of_text(out)["effective"], Json::array({"t"}));
  EXPECT_EQ(run({"connections", "enable", "u", "--config", config_path}, &out), 0) << out;
  EXPECT_EQ(run({"members", "list", "--limit", "1000", "--config", config_path}, &out), 0);
  EXPECT_NE(out.find("\"ivy\""), std::string::npos);
  // A member's token is refused (exit 1); an unknown subcommand is a usage error (exit 2).
  EXPECT_EQ(run({"members", "list", "--token", token("bob")}, &out), 1);
  EXPECT_EQ(run({"members", "frobnicate", "x", "--token", token("bob")}, &out), 2);
  EXPECT_EQ(run({"members", "delete", "ivy", "--token", token("zed", true)}, &out), 0) << out;
  EXPECT_EQ(get("/v1/admin/members/ivy")->status, 404);
}

}  // namespace
}  // namespace quiver
