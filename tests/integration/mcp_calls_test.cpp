// Calls through the agent (issue 13), end to end with real parts: the Agent's call path
// (native-agent/engine/mcp_calls.h) against real server-everything and the controllable
// tests/peers/test-upstream.mjs over stdio, on the embedded SQLite store; the edge relay through a
// real redis-server, the test playing the edge with exactly the commands the core builds
// (shared/call_relay.h). The upstream side is checked through the test upstream's own counters:
// a refused call never reaches it.
#include "native-agent/engine/mcp_calls.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "native-agent/engine/agent.h"
#include "shared/call_relay.h"
#include "shared/redis_keys.h"
#include "tests/support/edge_acl.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::everything_js;
using testing::read_stats;
using testing::RedisServer;
using testing::run_argv;
using testing::TempDir;
using testing::test_upstream_js;
using testing::wait_until;

struct Lines {
  std::mutex mu;
  std::string text;
  Logger::Sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      text += line + "\n";
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    return text;
  }
};

Json test_upstream(const std::vector<std::string>& flags) {
  Json args = Json::array({test_upstream_js(), "stdio", "--quiet"});
  for (const std::string& f : flags) args.push_back(f);
  return Json{{"command", "node"}, {"args", args}};
}

Json everything() {
  return Json{{"command", "node"}, {"args", Json::array({everything_js(), "stdio"})}};
}

AgentConfig make_config(const TempDir& dir, Json servers, Json quiver, EnvMap env = {}) {
  quiver["data_dir"] = dir.path("data");
  // Node upstreams can take seconds to start on a loaded machine; calls that are about deadlines
  // give their own.
  if (!quiver.contains("runtime")) {
    quiver["runtime"] = {{"list_timeout_ms", 30000}, {"request_timeout_ms", 30000}};
  }
  const std::string text = Json{{"mcpServers", servers}, {"quiver", quiver}}.dump();
  ConfigSources s;
  s.text = text;
  s.origin = "mcp_calls_test.json";
  s.env = std::move(env);
  s.working_dir = dir.root();
  Result<AgentConfig> r = parse_config(s);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(*r) : AgentConfig{};
}

std::unique_ptr<Agent> started_agent(AgentConfig config, Lines& log) {
  AgentOptions o = AgentOptions::on_demand();
  o.log_sink = log.sink();
  o.run_retries = false;
  Result<std::unique_ptr<Agent>> a = Agent::create(std::move(config), std::move(o));
  EXPECT_TRUE(a.ok()) << (a.ok() ? "" : a.error().message);
  if (!a.ok()) return nullptr;
  Status st = (*a)->start();
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message) << log.all();
  return st.ok() ? std::move(*a) : nullptr;
}

UpstreamCall call_of(std::string cid, std::string member, std::string method, Json params,
                     int64_t timeout_ms = 0) {
  UpstreamCall c;
  c.connection_id = std::move(cid);
  c.member_id = std::move(member);
  c.method = std::move(method);
  c.params = std::move(params);
  c.timeout_ms = timeout_ms;
  return c;
}

std::string first_text(const RelayReply& r) {
  const Json* content = json_field(r.result, "content");
  if (content == nullptr || !content->is_array() || content->empty()) return "";
  return json_string((*content)[0], "text").value_or("");
}

Json called_tools(const std::string& stats_file) {
  Json stats = read_stats(stats_file);
  const Json* called = json_field(stats, "called_tools");
  return called != nullptr ? *called : Json::array();
}

// How many `method` requests (or "cancelled" notices) the test upstream counted.
int64_t counted(const std::string& stats_file, const char* method) {
  Json stats = read_stats(stats_file);
  const Json* calls = json_field(stats, "calls");
  return calls != nullptr ? json_int(*calls, method).value_or(0) : 0;
}

// ---- against server-everything -----------------------------------------------------------------

TEST(McpCalls, EchoAResourceAPromptAndACompletionOnServerEverything) {
  TempDir dir;
  Lines log;
  auto agent = started_agent(
      make_config(dir, {{"everything", everything()}}, {{"grants", {{"alice", {"everything"}}}}}),
      log);
  ASSERT_TRUE(agent);

  CallReport report;
  Result<RelayReply> echo =
      agent->call_upstream(call_of("everything", "alice", "tools/call",
                                   {{"name", "echo"}, {"arguments", {{"message", "hello relay"}}}}),
                           {}, &report);
  ASSERT_TRUE(echo.ok()) << echo.error().message << log.all();
  EXPECT_EQ(echo->kind, RelayReply::Kind::kResult);
  EXPECT_EQ(first_text(*echo), "Echo: hello relay");
  EXPECT_EQ(report.pool_name, "everything");
  EXPECT_FALSE(report.upstream.reused) << "the first call opened the session";

  const std::string uri = "demo://resource/static/document/architecture.md";
  Result<RelayReply> read = agent->call_upstream(
      call_of("everything", "alice", "resources/read", {{"uri", uri}}), {}, &report);
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_EQ(read->kind, RelayReply::Kind::kResult);
  EXPECT_EQ(read->result["contents"][0]["uri"], uri);
  EXPECT_TRUE(report.upstream.reused) << "later calls go on the live session";

  Result<RelayReply> prompt = agent->call_upstream(
      call_of("everything", "alice", "prompts/get", {{"name", "simple-prompt"}}));
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  ASSERT_EQ(prompt->kind, RelayReply::Kind::kResult);
  EXPECT_FALSE(prompt->result["messages"].empty()) << prompt->result.dump();

  Result<RelayReply> completion = agent->call_upstream(
      call_of("everything", "alice", "completion/complete",
              {{"ref", {{"type", "ref/prompt"}, {"name", "completable-prompt"}}},
               {"argument", {{"name", "department"}, {"value", "E"}}}}));
  ASSERT_TRUE(completion.ok()) << completion.error().message;
  ASSERT_EQ(completion->kind, RelayReply::Kind::kResult) << completion->error.message;
  EXPECT_TRUE(completion->result["completion"]["values"].is_array()) << completion->result.dump();

  // An unknown tool: the upstream's own error, and the listing is refreshed (evidence).
  Result<RelayReply> unknown = agent->call_upstream(
      call_of("everything", "alice", "tools/call", {{"name", "no-such-tool"}}), {}, &report);
  ASSERT_TRUE(unknown.ok()) << unknown.error().message;
  // server-everything (SDK 1.x McpServer) answers it as a tool result with isError, as sent.
  const bool as_error = unknown->kind == RelayReply::Kind::kUpstreamError;
  const bool as_result =
      unknown->kind == RelayReply::Kind::kResult && unknown->result.value("isError", false);
  EXPECT_TRUE(as_error || as_result) << unknown->result.dump() << unknown->error.message;
  EXPECT_TRUE(report.evidence) << unknown->result.dump() << unknown->error.message;
  EXPECT_NE(log.all().find("does not know tool `no-such-tool`"), std::string::npos) << log.all();
}

// ---- grants, preferences and principals, checked at call time ----------------------------------

TEST(McpCalls, DisabledOrUngrantedCallsNeverReachTheUpstream) {
  TempDir dir;
  Lines log;
  const std::string stats = dir.path("stats.json");
  auto agent =
      started_agent(make_config(dir, {{"t", test_upstream({"--stats-file", stats})}},
                                {{"members", {"alice", "bob"}}, {"grants", {{"alice", {"t"}}}}}),
                    log);
  ASSERT_TRUE(agent);
  ASSERT_TRUE(agent->refresh_now("t", Principal::shared(), "manual").ok()) << log.all();
  ASSERT_TRUE(
      agent->set_preference("t", Principal::shared(), CapabilityType::kTool, "tool_1", false).ok());

  Result<RelayReply> disabled =
      agent->call_upstream(call_of("t", "alice", "tools/call", {{"name", "tool_1"}}));
  ASSERT_FALSE(disabled.ok());
  EXPECT_EQ(disabled.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(disabled.error().message.find("disabled"), std::string::npos);
  EXPECT_EQ(relay_reply_for_failure(disabled.error()).failure, RelayFailure::kRefused);

  Result<RelayReply> ungranted =
      agent->call_upstream(call_of("t", "bob", "tools/call", {{"name", "tool_2"}}));
  ASSERT_FALSE(ungranted.ok());
  EXPECT_EQ(ungranted.error().code, ErrorCode::kNotFound);
  Result<RelayReply> unknown_connection =
      agent->call_upstream(call_of("nope", "alice", "tools/call", {{"name", "tool_2"}}));
  ASSERT_FALSE(unknown_connection.ok());
  EXPECT_EQ(unknown_connection.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(unknown_connection.error().message.find("nope` is granted") == std::string::npos,
            ungranted.error().message.find("t` is granted") == std::string::npos)
      << "an unknown connection and an ungranted one answer alike";
  Result<RelayReply> not_a_call =
      agent->call_upstream(call_of("t", "alice", "tools/list", Json::object()));
  EXPECT_EQ(not_a_call.error().code, ErrorCode::kInvalidArgument);

  // The upstream saw none of them; an allowed call reaches it.
  EXPECT_EQ(counted(stats, "tools/call"), 0) << read_stats(stats).dump();
  Result<RelayReply> allowed =
      agent->call_upstream(call_of("t", "alice", "tools/call", {{"name", "tool_2"}}));
  ASSERT_TRUE(allowed.ok()) << allowed.error().message;
  EXPECT_EQ(first_text(*allowed), "called tool_2");
  EXPECT_EQ(called_tools(stats), Json::array({"tool_2"}));

  // Enabled again: the toggle shows at the next call, no re-listing.
  ASSERT_TRUE(
      agent->set_preference("t", Principal::shared(), CapabilityType::kTool, "tool_1", true).ok());
  ASSERT_TRUE(agent->call_upstream(call_of("t", "alice", "tools/call", {{"name", "tool_1"}})).ok());
  EXPECT_EQ(called_tools(stats), Json::array({"tool_2", "tool_1"}));
}

TEST(McpCalls, PerMemberCallsUseTheMembersOwnSessionAndCredential) {
  TempDir dir;
  Lines log;
  const Json per_member = {
      {"credential_mode", "per_member"},
      {"auth", "api_key"},
      {"credential_env", "TEST_UPSTREAM_AUTHORIZATION"},
      {"credentials", {{"alice", {{"env", "ALICE_CRED"}}}, {"bob", {{"env", "BOB_CRED"}}}}}};
  auto agent =
      started_agent(make_config(dir, {{"p", test_upstream({"--per-auth"})}},
                                {{"members", {"alice", "bob", "carol"}},
                                 {"grants", {{"alice", {"p"}}, {"bob", {"p"}}}},
                                 {"connections", {{"p", per_member}}}},
                                {{"ALICE_CRED", "Bearer alice.k1"}, {"BOB_CRED", "Bearer bob.k2"}}),
                    log);
  ASSERT_TRUE(agent);

  CallReport alice_report;
  Result<RelayReply> alice = agent->call_upstream(
      call_of("p", "alice", "tools/call", {{"name", "alice_tool_1"}}), {}, &alice_report);
  ASSERT_TRUE(alice.ok()) << alice.error().message << log.all();
  EXPECT_EQ(first_text(*alice), "called alice_tool_1") << "the upstream saw alice's credential";
  EXPECT_EQ(alice_report.pool_name, "p#member/alice");

  // Bob's call goes on bob's own session, with bob's credential: alice's tool is unknown there.
  CallReport bob_report;
  Result<RelayReply> bob = agent->call_upstream(
      call_of("p", "bob", "tools/call", {{"name", "alice_tool_1"}}), {}, &bob_report);
  ASSERT_TRUE(bob.ok()) << bob.error().message;
  EXPECT_EQ(bob->kind, RelayReply::Kind::kUpstreamError);
  EXPECT_EQ(bob_report.pool_name, "p#member/bob");
  Result<RelayReply> bobs_own =
      agent->call_upstream(call_of("p", "bob", "tools/call", {{"name", "bob_tool_1"}}));
  ASSERT_TRUE(bobs_own.ok());
  EXPECT_EQ(first_text(*bobs_own), "called bob_tool_1");

  // Carol is a member without the grant: refused before any session is opened for her.
  Result<RelayReply> carol =
      agent->call_upstream(call_of("p", "carol", "tools/call", {{"name", "alice_tool_1"}}));
  ASSERT_FALSE(carol.ok());
  EXPECT_EQ(carol.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(log.all().find("Bearer alice.k1"), std::string::npos) << "no secret in the log";
  EXPECT_EQ(log.all().find("Bearer bob.k2"), std::string::npos);
}

// ---- faults ------------------------------------------------------------------------------------

TEST(McpCalls, AHangingCallTimesOutIsCancelledUpstreamAndTheSessionStillWorks) {
  TempDir dir;
  Lines log;
  const std::string stats = dir.path("stats.json");
  auto agent = started_agent(make_config(dir, {{"t", test_upstream({"--stats-file", stats})}},
                                         {{"grants", {{"alice", {"t"}}}}}),
                             log);
  ASSERT_TRUE(agent);
  ASSERT_TRUE(agent->call_upstream(call_of("t", "alice", "tools/call", {{"name", "tool_3"}})).ok());

  Result<RelayReply> hung = agent->call_upstream(call_of(
      "t", "alice", "tools/call", {{"name", "tool_1"}, {"arguments", {{"sleep_ms", 60000}}}},
      /*timeout_ms=*/1000));
  ASSERT_FALSE(hung.ok());
  EXPECT_EQ(hung.error().code, ErrorCode::kTimeout);
  EXPECT_EQ(relay_reply_for_failure(hung.error()).error.code, kMcpErrorTimeout);
  // The upstream was told (notifications/cancelled aborted its handler).
  EXPECT_TRUE(wait_until([&] { return counted(stats, "cancelled") == 1; }, 10000))
      << read_stats(stats).dump();

  CallReport report;
  Result<RelayReply> after =
      agent->call_upstream(call_of("t", "alice", "tools/call", {{"name", "tool_2"}}), {}, &report);
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_EQ(first_text(*after), "called tool_2");
  EXPECT_TRUE(report.upstream.reused) << "a timeout is no reason to drop the session";
}

TEST(McpCalls, AClientThatGoesAwayCancelsItsCall) {
  TempDir dir;
  Lines log;
  const std::string stats = dir.path("stats.json");
  auto agent = started_agent(make_config(dir, {{"t", test_upstream({"--stats-file", stats})}},
                                         {{"grants", {{"alice", {"t"}}}}}),
                             log);
  ASSERT_TRUE(agent);
  std::atomic<bool> gone{false};
  std::thread client([&] {
    // The client leaves once the upstream is working on the call.
    wait_until([&] { return called_tools(stats) == Json::array({"tool_1"}); }, 30000);
    gone = true;
  });
  Result<RelayReply> cancelled =
      agent->call_upstream(call_of("t", "alice", "tools/call",
                                   {{"name", "tool_1"}, {"arguments", {{"sleep_ms", 60000}}}}),
                           [&] { return gone.load(); });
  client.join();
  ASSERT_FALSE(cancelled.ok());
  EXPECT_NE(cancelled.error().message.find("cancelled"), std::string::npos)
      << cancelled.error().message;
  EXPECT_TRUE(wait_until([&] { return counted(stats, "cancelled") == 1; }, 10000))
      << read_stats(stats).dump();
}

TEST(McpCalls, AnOversizedAnswerIsRefusedAndTheNextCallWorks) {
  TempDir dir;
  Lines log;
  auto agent = started_agent(
      make_config(dir, {{"t", test_upstream({})}}, {{"grants", {{"alice", {"t"}}}}}), log);
  ASSERT_TRUE(agent);
  Result<RelayReply> big = agent->call_upstream(
      call_of("t", "alice", "tools/call",
              {{"name", "tool_1"},
               {"arguments", {{"bytes", static_cast<int64_t>(kMaxRelayReplyBytes) + 1}}}}));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kTooLarge);
  EXPECT_EQ(relay_reply_for_failure(big.error()).error.code, kMcpErrorResultTooLarge);
  Result<RelayReply> small =
      agent->call_upstream(call_of("t", "alice", "tools/call", {{"name", "tool_2"}}));
  ASSERT_TRUE(small.ok()) << small.error().message;
  EXPECT_EQ(first_text(*small), "called tool_2");
}

TEST(McpCalls, TheAgentsRelayCallHookAnswersWithTheEndpointsReplies) {
  TempDir dir;
  Lines log;
  auto agent = started_agent(
      make_config(dir, {{"t", test_upstream({})}}, {{"grants", {{"alice", {"t"}}}}}), log);
  ASSERT_TRUE(agent);
  RelayCall call{"t",          *Principal::member("alice"), Principal::shared(),
                 "tools/call", {{"name", "tool_2"}},        "t__tool_2",
                 Json(1),      1'000'000 + 30'000,          "2025-06-18"};
  RelayReply ok = perform_relay_call(*agent, call, 1'000'000);
  EXPECT_EQ(ok.kind, RelayReply::Kind::kResult);
  EXPECT_EQ(first_text(ok), "called tool_2");
  RelayReply late = perform_relay_call(*agent, call, call.deadline_ms + 1);
  EXPECT_EQ(late.failure, RelayFailure::kTimeout);
  call.member = *Principal::member("bob");
  EXPECT_EQ(perform_relay_call(*agent, call, 1'000'000).failure, RelayFailure::kRefused);
}

// ---- the edge relay through Redis ---------------------------------------------------------------

struct EdgeStandIn {
  // The edge's two commands, one after the other on one connection (the BLPOP blocks).
  static Result<RelayReply> call(redisContext* c, const RedisKeys& keys, const RelayRequest& r,
                                 int64_t wait_ms) {
    Result<std::vector<RedisCommand>> cmds = relay_call_commands(keys, r, wait_ms);
    if (!cmds.ok()) return cmds.error();
    std::vector<RespValue> replies;
    for (const RedisCommand& cmd : *cmds) replies.push_back(run_argv(c, cmd));
    return parse_relay_call_replies(replies);
  }
};

RelayRequest relay_request(const std::string& rid_char, std::string member, Json params,
                           int64_t deadline_ms) {
  RelayRequest r;
  r.rid = std::string(64, rid_char[0]);
  r.connection_id = "everything";
  r.member_id = std::move(member);
  r.method = "tools/call";
  r.params = std::move(params);
  r.deadline_ms = deadline_ms;
  r.at_ms = system_clock_ms()();
  return r;
}

TEST(McpCallsRedis, TheEdgeRelayReachesTheAgentAndFailsFastWithoutOne) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  TempDir dir;
  Lines log;
  auto agent = started_agent(
      make_config(dir, {{"everything", everything()}},
                  {{"redis", "redis://127.0.0.1:" + std::to_string(redis.port()) + "/0"},
                   {"members", {"alice", "bob"}},
                   {"grants", {{"alice", {"everything"}}}}}),
      log);
  ASSERT_TRUE(agent);
  Result<RedisKeys> keys = RedisKeys::create(agent->config().ns);
  ASSERT_TRUE(keys.ok());
  // The edge runs as its least-privilege user (schema/redis-acl-edge.txt).
  testing::RedisConnection admin(redis.connect());
  ASSERT_TRUE(admin);
  testing::RedisConnection edge = testing::connect_as_edge(redis, agent->config().ns);
  ASSERT_TRUE(edge);
  // It may read call-agents, never fake an agent being alive.
  EXPECT_TRUE(run_argv(edge.get(), {"SET", keys->call_agents(), "x"}).is_error());
  const Json echo = {{"name", "echo"}, {"arguments", {{"message", "via redis"}}}};

  // No agent consumes: AGENT_UNREACHABLE at once (the BLPOP does not wait out its 20 s), and
  // nothing is queued.
  Result<RelayReply> unreachable = EdgeStandIn::call(
      edge.get(), *keys, relay_request("a", "alice", echo, system_clock_ms()() + 20000), 20000);
  ASSERT_TRUE(unreachable.ok()) << unreachable.error().message;
  EXPECT_EQ(unreachable->failure, RelayFailure::kAgentUnreachable);
  EXPECT_EQ(unreachable->error.code, kMcpErrorAgentUnreachable);
  EXPECT_EQ(run_argv(admin.get(), {"XLEN", keys->calls()}).integer, 0);

  // An agent consumes: the call is performed as alice and answered through the reply list.
  ASSERT_TRUE(agent->mark_call_agent_alive().ok());
  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    while (!stop) agent->drain_relayed_calls_once(100);
  });
  Result<RelayReply> relayed = EdgeStandIn::call(
      edge.get(), *keys, relay_request("b", "alice", echo, system_clock_ms()() + 30000), 30000);
  ASSERT_TRUE(relayed.ok()) << relayed.error().message << log.all();
  ASSERT_EQ(relayed->kind, RelayReply::Kind::kResult) << relayed->error.message << log.all();
  EXPECT_EQ(first_text(*relayed), "Echo: via redis");

  // The agent checks the grant again: bob (a member, not granted) is refused there.
  Result<RelayReply> bob = EdgeStandIn::call(
      edge.get(), *keys, relay_request("c", "bob", echo, system_clock_ms()() + 30000), 30000);
  ASSERT_TRUE(bob.ok()) << bob.error().message;
  EXPECT_EQ(bob->failure, RelayFailure::kRefused);

  // A request read after its deadline is dropped, never performed late (no reply is written).
  stop = true;
  consumer.join();
  Result<std::vector<RedisCommand>> late_cmds =
      relay_call_commands(*keys, relay_request("d", "alice", echo, system_clock_ms()() - 1), 1);
  ASSERT_TRUE(late_cmds.ok());
  run_argv(edge.get(), (*late_cmds)[0]);  // queued (the agent is alive), not waited for
  const int64_t expired_before = agent->call_relay_stats().expired;
  agent->drain_relayed_calls_once(1000);
  EXPECT_EQ(agent->call_relay_stats().expired, expired_before + 1);
  EXPECT_EQ(run_argv(admin.get(), {"LLEN", *keys->call_reply(std::string(64, 'd'))}).integer, 0);

  // Malformed entries are dropped and counted, not performed.
  run_argv(admin.get(), {"XADD", keys->calls(), "*", "rid", "x", "cid", "everything"});
  const int64_t malformed_before = agent->call_relay_stats().malformed;
  agent->drain_relayed_calls_once(1000);
  EXPECT_EQ(agent->call_relay_stats().malformed, malformed_before + 1);
}

int64_t mget_calls(redisContext* admin) {
  const RespValue info = run_argv(admin, {"INFO", "commandstats"});
  const std::string text(info.as_string().value_or(""));
  const std::size_t at = text.find("cmdstat_mget:calls=");
  return at == std::string::npos ? 0 : std::stoll(text.substr(at + 19));
}

// The edge's client went away: the edge sets the call's cancel mark (as its least-privilege user,
// with the command the core builds); the agent's poller reads the running calls' marks in one
// MGET, the call is cancelled upstream (the test upstream counts notifications/cancelled) long
// before its 60 s deadline, and no reply is written.
TEST(McpCallsRedis, AnAbandonedRelayedCallIsCancelledUpstream) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  TempDir dir;
  Lines log;
  const std::string stats = dir.path("stats.json");
  auto agent = started_agent(
      make_config(dir, {{"t", test_upstream({"--stats-file", stats})}},
                  {{"redis", "redis://127.0.0.1:" + std::to_string(redis.port()) + "/0"},
                   {"members", {"alice"}},
                   {"grants", {{"alice", {"t"}}}}}),
      log);
  ASSERT_TRUE(agent);
  Result<RedisKeys> keys = RedisKeys::create(agent->config().ns);
  ASSERT_TRUE(keys.ok());
  testing::RedisConnection admin(redis.connect());
  ASSERT_TRUE(admin);
  testing::RedisConnection edge = testing::connect_as_edge(redis, agent->config().ns);
  ASSERT_TRUE(edge);
  ASSERT_TRUE(agent->mark_call_agent_alive().ok());

  // No relayed call runs: the poller sends nothing.
  const int64_t mgets_idle = mget_calls(admin.get());
  EXPECT_EQ(agent->poll_call_cancel_marks_once(), 0u);
  EXPECT_EQ(mget_calls(admin.get()), mgets_idle);

  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    while (!stop) agent->drain_relayed_calls_once(100);
  });
  RelayRequest hung;
  hung.rid = std::string(64, 'e');
  hung.connection_id = "t";
  hung.member_id = "alice";
  hung.method = "tools/call";
  hung.params = {{"name", "tool_1"}, {"arguments", {{"sleep_ms", 60000}}}};
  hung.at_ms = system_clock_ms()();
  hung.deadline_ms = hung.at_ms + 60000;
  Result<std::vector<RedisCommand>> cmds = relay_call_commands(*keys, hung, 60000);
  ASSERT_TRUE(cmds.ok());
  ASSERT_TRUE(run_argv(edge.get(), (*cmds)[0]).is_array());  // queued; the edge's BLPOP is gone
  // The upstream is working on it; the call runs, unmarked.
  ASSERT_TRUE(wait_until([&] { return called_tools(stats) == Json::array({"tool_1"}); }, 30000))
      << read_stats(stats).dump() << log.all();
  ASSERT_TRUE(wait_until([&] { return agent->call_relay_stats().running == 1; }, 10000));
  EXPECT_EQ(agent->poll_call_cancel_marks_once(), 0u);
  EXPECT_EQ(counted(stats, "cancelled"), 0);

  // The edge marks it (SET only: its user may not read a mark back).
  Result<RedisCommand> mark =
      relay_cancel_command(*keys, hung.rid, hung.deadline_ms, system_clock_ms()());
  ASSERT_TRUE(mark.ok());
  EXPECT_TRUE(run_argv(edge.get(), *mark).is_ok());
  EXPECT_TRUE(run_argv(edge.get(), {"GET", *keys->call_cancel(hung.rid)}).is_error());
  const int64_t mgets_before = mget_calls(admin.get());
  EXPECT_EQ(agent->poll_call_cancel_marks_once(), 1u);
  EXPECT_EQ(mget_calls(admin.get()), mgets_before + 1);  // one round for every running call

  // The upstream was told, and the call ended without a reply.
  EXPECT_TRUE(wait_until([&] { return counted(stats, "cancelled") == 1; }, 20000))
      << read_stats(stats).dump() << log.all();
  EXPECT_TRUE(wait_until([&] { return agent->call_relay_stats().cancelled == 1; }, 20000))
      << log.all();
  stop = true;
  consumer.join();
  EXPECT_EQ(agent->call_relay_stats().running, 0);
  EXPECT_LT(system_clock_ms()(), hung.deadline_ms) << "cancelled only by its deadline";
  EXPECT_EQ(run_argv(admin.get(), {"LLEN", *keys->call_reply(hung.rid)}).integer, 0);
}

}  // namespace
}  // namespace quiver
