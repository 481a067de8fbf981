// The `quiver-agent` commands as a user runs them: the real binary as a child process, a config
// file with real upstreams (tests/peers/test-upstream.mjs), the embedded SQLite store in a temp
// dir. Output and exit codes (cli.h) are what is checked.
#include "native-agent/cli/cli.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "native-agent/store/store.h"
#include "native-agent/upstream/child_process.h"
#include "shared/caller_token.h"
#include "shared/json.h"
#include "tests/support/cli_run.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/

constexpr char kTokenKey[] = "cli-test-caller-token-key-0123456789";
constexpr char kUpstreamSecret[] = "cli-upstream-secret-5b1e0d";

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    key_file_ = dir_.path("caller-token.key");
    testing::append_line(key_file_, kTokenKey);
    write_config(Json::object());
  }

  void write_config(Json extra_quiver) {
    auto upstream = [](int tools) {
      return Json{
          {"command", "node"},
          {"args", {test_upstream_js(), "stdio", "--quiet", "--tools", std::to_string(tools)}},
          {"env", {{"UPSTREAM_TOKEN", kUpstreamSecret}}}};
    };
    Json quiver = {{"members", {"alice", "bob"}},
                   {"grants", {{"*", {"*"}}}},
                   {"caller_token_keys", {{"k1", {{"file", key_file_}}}}}};
    for (auto& [k, v] : extra_quiver.items()) quiver[k] = v;
    Json config = {{"mcpServers",
                    {{"t", upstream(3)},
                     {"u", upstream(2)},
                     {"broken", {{"command", "node"}, {"args", {dir_.path("missing.mjs")}}}}}},
                   {"quiver", quiver}};
    config_ = dir_.path("quiver.json");
    std::remove(config_.c_str());
    testing::append_line(config_, config.dump());
  }

  CliRun agent(std::vector<std::string> args) {
    args.push_back("--config");
    args.push_back(config_);
    return run(args, {{"QUIVER_DATA_DIR", dir_.path("data")}});
  }

  TempDir dir_;
  std::string key_file_;
  std::string config_;
};

TEST_F(CliTest, EveryCommandHasHelp) {
  CliRun top = run({"--help"});
  EXPECT_EQ(top.code, kExitOk);
  for (const char* command : {"serve", "refresh", "status", "prefs", "token", "members", "grants",
                              "connections", "layout"}) {
    EXPECT_TRUE(contains(top.out, command)) << command;
    CliRun r = run({command, "--help"});
    EXPECT_EQ(r.code, kExitOk) << command;
    EXPECT_TRUE(contains(r.out, std::string("usage: quiver-agent ") + command)) << r.out;
  }
  CliRun unknown = run({"refresh", "--frobnicate"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_TRUE(contains(unknown.err, "--frobnicate"));
  CliRun no_config = run({"status"});
  EXPECT_EQ(no_config.code, kExitUsage);
  EXPECT_TRUE(contains(no_config.err, "QUIVER_CONFIG"));
}

TEST_F(CliTest, TokenMintsAVerifiableTokenForAMember) {
  CliRun r = agent({"token", "--member", "alice", "--ttl", "15m"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::string token = r.out.substr(0, r.out.find('\n'));
  Result<Keyring> ring = Keyring::create({{"k1", kTokenKey}});
  ASSERT_TRUE(ring.ok());
  VerifyOptions v;
  v.ns = "default";
  Result<CallerIdentity> who = verify_caller_token(token, *ring, system_clock_ms()(), v);
  ASSERT_TRUE(who.ok()) << who.error().message;
  EXPECT_EQ(who->member_id, "alice");
  EXPECT_LE(who->expires_at_ms - system_clock_ms()(), 15 * 60'000 + 1000);

  EXPECT_EQ(agent({"token", "--member", "mallory"}).code, kExitUsage);
  EXPECT_EQ(agent({"token", "--member", "alice", "--ttl", "soon"}).code, kExitUsage);
}

TEST_F(CliTest, RefreshShowsProgressAndFailsWhenAListingFails) {
  CliRun one = agent({"refresh", "t"});
  EXPECT_EQ(one.code, kExitOk) << one.out << one.err;
  EXPECT_TRUE(contains(one.out, "[1/1] t (shared): committed in")) << one.out;

  CliRun all = agent({"refresh", "--all"});
  EXPECT_EQ(all.code, kExitFailed) << all.out << all.err;
  for (const char* line : {"[1/3] ", "[2/3] ", "[3/3] ", "broken (shared): failed after",
                           "u (shared): committed in", "2 committed, 1 failed"}) {
    EXPECT_TRUE(contains(all.out, line)) << line << "\n" << all.out;
  }
  EXPECT_FALSE(contains(all.out + all.err, kUpstreamSecret));

  EXPECT_EQ(agent({"refresh", "nope"}).code, kExitUsage);
  EXPECT_EQ(agent({"refresh"}).code, kExitUsage);
}

TEST_F(CliTest, StatusShowsFreshnessErrorsAndTheConfigWithoutSecrets) {
  ASSERT_EQ(agent({"refresh", "--all"}).code, kExitFailed);
  CliRun r = agent({"status"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(contains(r.out, "store:      sqlite:")) << r.out;
  EXPECT_TRUE(contains(r.out, "fresh, listed")) << r.out;
  EXPECT_TRUE(contains(r.out, "3 tools, 2 resources, 1 templates, 2 prompts")) << r.out;
  EXPECT_TRUE(contains(r.out, "last error: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"***\"")) << r.out;
  EXPECT_FALSE(contains(r.out, kUpstreamSecret));
  EXPECT_FALSE(contains(r.out, kTokenKey));

  CliRun j = agent({"status", "--json"});
  ASSERT_EQ(j.code, kExitOk);
  Result<Json> parsed = parse_json(j.out);
  ASSERT_TRUE(parsed.ok()) << j.out;
  const Json& conns = (*parsed)["connections"];
  ASSERT_EQ(conns.size(), 3u);
  EXPECT_EQ(conns[0]["id"], "broken");
  EXPECT_EQ(conns[0]["principals"][0]["state"], "error");
  EXPECT_EQ(conns[1]["principals"][0]["state"], "fresh");
  EXPECT_EQ(conns[1]["principals"][0]["counts"]["tools"], 3);
  EXPECT_FALSE(contains(j.out, kUpstreamSecret));
}

TEST_F(CliTest, StatusExitsThreeWhenRedisIsDown) {
  int port = testing::free_loopback_port();
  write_config({{"redis", "redis://127.0.0.1:" + std::to_string(port) + "/0"}});
  CliRun r = agent({"status"});
  EXPECT_EQ(r.code, kExitStoreUnavailable) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "unavailable")) << r.err;
}

// A Redis no agent has synced (or one that lost its data): `status` says the namespace is missing,
// and reports this host's clock against Redis TIME.
TEST_F(CliTest, StatusNamesAMissingNamespaceAndTheClockSkew) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  write_config({{"redis", "redis://127.0.0.1:" + std::to_string(redis.port()) + "/0"}});
  CliRun j = agent({"status", "--json"});
  ASSERT_EQ(j.code, kExitOk) << j.out << j.err;
  Result<Json> parsed = parse_json(j.out);
  ASSERT_TRUE(parsed.ok()) << j.out;
  EXPECT_EQ((*parsed)["store_namespace"], "missing");
  ASSERT_TRUE((*parsed)["clock_skew_ms"].is_number_integer()) << j.out;
  // The same machine's clock: the skew is the round trip's, far below any warning.
  EXPECT_LT(std::llabs((*parsed)["clock_skew_ms"].get<int64_t>()), 5'000);
  CliRun r = agent({"status"});
  EXPECT_TRUE(contains(r.out, "store data: namespace missing")) << r.out;
  EXPECT_TRUE(contains(r.out, "clock skew: ")) << r.out;
}

// `layout` (shared/layout.h): the record and the agent seen, read only, in any layout.
TEST_F(CliTest, LayoutPrintsTheRecordAndTheAgentsSeen) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  write_config({{"redis", "redis://127.0.0.1:" + std::to_string(redis.port()) + "/0"}});
  CliRun none = agent({"layout", "--json"});
  ASSERT_EQ(none.code, kExitOk) << none.out << none.err;
  Result<Json> parsed = parse_json(none.out);
  ASSERT_TRUE(parsed.ok()) << none.out;
  EXPECT_EQ((*parsed)["key"], "quiver:{default}:layout");
  EXPECT_TRUE((*parsed)["record"].is_null());
  EXPECT_EQ((*parsed)["version"], "v1");
  EXPECT_EQ((*parsed)["readable"], true);
  EXPECT_TRUE((*parsed)["agents_seen"].empty());

  RedisConnection c(redis.connect());
  ASSERT_TRUE(c);
  run_argv(c.get(), {"SET", "quiver:{default}:layout", "v2:filling:1790000000000"});
  run_argv(c.get(), {"SET", "quiver:{default}:call-agents", "agent-a layouts=v1", "PX", "60000"});
  CliRun v2 = agent({"layout", "--json"});
  ASSERT_EQ(v2.code, kExitOk) << v2.out << v2.err;
  parsed = parse_json(v2.out);
  ASSERT_TRUE(parsed.ok()) << v2.out;
  EXPECT_EQ((*parsed)["record"], "v2:filling:1790000000000");
  EXPECT_EQ((*parsed)["version"], "v2");
  EXPECT_EQ((*parsed)["state"], "filling");
  EXPECT_EQ((*parsed)["readable"], true);  // from v1, while the copy to v2 runs
  EXPECT_EQ((*parsed)["writable"], false);
  ASSERT_EQ((*parsed)["agents_seen"].size(), 1u) << v2.out;
  EXPECT_EQ((*parsed)["agents_seen"][0]["consumer"], "agent-a");
  EXPECT_EQ((*parsed)["agents_seen"][0]["layouts"], Json::array({"v1"}));
  // Read only: nothing but the two keys above in the store.
  EXPECT_EQ(run_argv(c.get(), {"DBSIZE"}).integer, 2);
  CliRun text = agent({"layout"});
  EXPECT_EQ(text.code, kExitOk);
  EXPECT_TRUE(contains(text.out, "`v2:filling:1790000000000`")) << text.out;
  EXPECT_TRUE(contains(text.out, "serves reads of this namespace from v1 and writes none"))
      << text.out;
  EXPECT_TRUE(contains(text.out, "agent-a  layouts v1")) << text.out;
  // An agent older than the record: its bare consumer name reads as v1 only.
  run_argv(c.get(), {"SET", "quiver:{default}:call-agents", "agent-old", "PX", "60000"});
  text = agent({"layout"});
  EXPECT_TRUE(contains(text.out, "agent-old  layouts v1 (declares none")) << text.out;
  EXPECT_TRUE(contains(text.out, "census (every agent seen in the last 60 s):\n  none"))
      << text.out;

  // The census: every agent of the last minute, whatever marked call-agents last.
  const std::string now = std::to_string(system_clock_ms()());
  run_argv(c.get(), {"ZADD", "quiver:{default}:agents", now, "agent-a layouts=v1", now,
                     "agent-b layouts=v1"});
  parsed = parse_json(agent({"layout", "--json"}).out);
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ((*parsed)["census"].size(), 2u) << parsed->dump();
  EXPECT_EQ((*parsed)["census"][0]["layouts"], Json::array({"v1"}));
  text = agent({"layout"});
  EXPECT_TRUE(contains(text.out, "agent-b  layouts v1, last seen at " + now)) << text.out;

  // A layout this build does not know.
  run_argv(c.get(), {"SET", "quiver:{default}:layout", "v9:odd:1790000000000"});
  text = agent({"layout"});
  EXPECT_TRUE(contains(text.out, "neither serves nor writes")) << text.out;

  // A namespace in v2, ready: this agent reads and writes it (an engine started on it writes v2).
  run_argv(c.get(), {"SET", "quiver:{default}:layout", "v2:ready:1790000000000"});
  parsed = parse_json(agent({"layout", "--json"}).out);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)["readable"], true);
  EXPECT_EQ((*parsed)["writable"], true);
  EXPECT_EQ((*parsed)["this_agent_writes"], Json::array({"v1", "v2"}));
  text = agent({"layout"});
  EXPECT_TRUE(contains(text.out, "serves and writes this namespace")) << text.out;
}

// Issue 9: a config file nested 200,000 deep (400 KB, under the 1 MiB file bound) is a usage
// error naming the depth, not a crash of the binary.
TEST_F(CliTest, ADeeplyNestedConfigFileIsRefusedWithAClearError) {
  std::remove(config_.c_str());
  testing::append_line(config_, R"({"mcpServers": {}, "quiver": {"runtime": )" +
                                    std::string(200000, '[') + std::string(200000, ']') + "}}");
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"status"}, std::vector<std::string>{"refresh", "--all"}}) {
    CliRun r = agent(command);
    EXPECT_EQ(r.code, kExitUsage) << command[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "JSON nested deeper than 128 levels")) << r.err;
  }
}

TEST_F(CliTest, PrefsListsAndTogglesCapabilities) {
  ASSERT_EQ(agent({"refresh", "t"}).code, kExitOk);
  CliRun list = agent({"prefs", "t"});
  ASSERT_EQ(list.code, kExitOk) << list.err;
  EXPECT_TRUE(contains(list.out, "enabled  tool               tool_2")) << list.out;

  CliRun off = agent({"prefs", "t", "--disable", "tool:tool_2", "--disable=prompt:prompt_1"});
  ASSERT_EQ(off.code, kExitOk) << off.err;
  EXPECT_TRUE(contains(off.out, "disabled tool:tool_2"));
  list = agent({"prefs", "t"});
  EXPECT_TRUE(contains(list.out, "DISABLED tool               tool_2")) << list.out;
  EXPECT_TRUE(contains(list.out, "DISABLED prompt             prompt_1")) << list.out;
  CliRun on = agent({"prefs", "t", "--enable", "tool:tool_2"});
  EXPECT_EQ(on.code, kExitOk);
  EXPECT_TRUE(contains(agent({"prefs", "t"}).out, "enabled  tool               tool_2"));

  EXPECT_EQ(agent({"prefs", "t", "--disable", "tool:never_listed"}).code, kExitFailed);
  EXPECT_EQ(agent({"prefs", "t", "--disable", "gadget:x"}).code, kExitUsage);
  EXPECT_EQ(agent({"prefs", "nope"}).code, kExitUsage);
}

// A stdio upstream runs as the agent's user. Without PR_SET_DUMPABLE 0 it could read the agent's
// /proc/<pid>/environ (here: the secret the agent was started with) and memory. Tests run as root,
// and root reads any /proc file, so the agent runs as `nobody` (setpriv): the upstream, also
// `nobody`, tries to read its parent's environ and writes what it got to a file. This proves the
// agent is non-dumpable for its own user (the files under /proc/<agent> belong to root), not
// just that a flag is set.
TEST(AgentProcess, AStdioUpstreamCannotReadTheAgentsEnvironment) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the agent as nobody (setpriv)";
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "no setpriv";
  TempDir dir;
  ASSERT_EQ(::chmod(dir.root().c_str(), 0777), 0);  // nobody creates the data directory here
  const std::string secret = "qv-environ-SECRET-2f9d61c0";
  const std::string seen = dir.path("seen-by-upstream.txt");
  const std::string reader =
      "cat /proc/$PPID/environ > \"$1\" 2>&1; echo \" rc=$?\" >> \"$1\"; "
      "exec node \"$2\" stdio --quiet";
  Json config = {
      {"mcpServers",
       {{"t",
         {{"command", "sh"},
          {"args", {"-c", reader, "sh", seen, test_upstream_js()}},
          {"env", {{"API_TOKEN", "${SECRET_TOKEN}"}}}}}}},
      // Generous: node starts slowly on a loaded machine.
      {"quiver", {{"runtime", {{"list_timeout_ms", 30000}, {"request_timeout_ms", 30000}}}}}};
  const std::string config_file = dir.path("quiver.json");
  testing::append_line(config_file, config.dump());
  ASSERT_EQ(::chmod(config_file.c_str(), 0644), 0);
  CliRun r =
      run({"--reuid=65534", "--regid=65534", "--clear-groups", testing::quiver_agent_binary(),
           "refresh", "--all", "--config", config_file},
          {{"SECRET_TOKEN", secret}, {"QUIVER_DATA_DIR", dir.path("data")}}, "/usr/bin/setpriv");
  // Whether the listing then succeeds does not matter here, and cannot be required: `nobody`
  // may not be able to read the checkout (a CI clone in a 0700 mktemp directory), so node may
  // fail to load the test upstream. The shell line before it ran as `nobody` all the same, and
  // its file (in a 0777 directory) is the evidence.
  (void)r;
  std::string got;
  {
    FILE* f = std::fopen(seen.c_str(), "rb");
    ASSERT_NE(f, nullptr) << "the upstream did not run";
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) got.append(buf, n);
    std::fclose(f);
  }
  EXPECT_EQ(got.find(secret), std::string::npos) << got;
  EXPECT_NE(got.find("Permission denied"), std::string::npos) << got;
  EXPECT_EQ(got.find(" rc=0"), std::string::npos) << got;
}

}  // namespace
}  // namespace quiver
