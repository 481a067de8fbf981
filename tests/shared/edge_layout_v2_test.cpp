// EdgeService on a namespace in key layout v2 (docs/design.md "The discovery read on v2, round by
// round"): the layout record decides how the isolate reads, the switch happens within a request,
// once, and the paths that would write v1 keys answer 503 instead; a relayed call goes to its
// connection's shard (docs/design.md "Relayed calls on v2").
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/call_relay.h"
#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/layout.h"
#include "shared/schema_assets.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/resp_values.h

constexpr int64_t kNow = 1'800'000'000'000;
constexpr char kKid[] = "k1";
constexpr char kSecret[] = "edge-layout-v2-test-secret-0123456789abc";
const std::string kRandom(48, '\x5a');
const std::string kOk = "+OK\r\n";
// Past the L1 TTL and QUIVER_L1_VALIDATE_MAX_AGE_MS: a full read again.
constexpr int64_t kLater = kNow + 120'000;

std::unique_ptr<EdgeService> service() {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kSecret}}).dump();
  env["REDIS_PASSWORD"] = "redis-pw";
  Result<EdgeSettings> settings = edge_settings_from_env(env.dump());
  EXPECT_TRUE(settings.ok()) << settings.error().message;
  return std::make_unique<EdgeService>(std::move(settings));
}

HttpRequest manifests() {
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/manifests";
  r.headers.emplace_back("authorization",
                         "Bearer " + *mint_caller_token("alice", kSecret, kKid, kNow, 3'600'000));
  return r;
}

// The v1 script's answer for a namespace whose layout record is `value`.
std::string layout_unknown(const std::string& value) {
  return encode_reply(A({S(kLayoutUnknownTag), S(value), S("quiver:{default}:layout")}));
}

// Round 1 of the read in rounds: the layout record, the namespace record, the member version and
// no grants.
std::string round_one(RespValue layout) {
  return encode_reply(layout) + encode_reply(S("ready:1")) + encode_reply(S("3")) +
         encode_reply(A({}));
}

bool reads_in_rounds(const EdgeStep& s) {
  return s.action == EdgeAction::kRedis &&
         s.redis_bytes.find("quiver:{default:m:alice}:grants") != std::string::npos;
}
bool reads_one_script(const EdgeStep& s) {
  return s.action == EdgeAction::kRedis && s.redis_bytes.find("EVALSHA") != std::string::npos &&
         s.redis_bytes.find("{default:m:") == std::string::npos;
}

TEST(EdgeLayoutV2, TheV1ScriptNamingV2ReadyIsReadAgainInRoundsInTheSameRequest) {
  auto svc = service();
  EdgeStep s = svc->begin(manifests(), kNow, kRandom);
  ASSERT_TRUE(reads_one_script(s)) << s.redis_bytes;
  s = svc->feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  ASSERT_TRUE(reads_in_rounds(s)) << s.redis_bytes;
  EXPECT_EQ(svc->layout(), KeyLayout::kV2) << "the isolate remembers it";
  s = svc->feed(s.handle, round_one(S("v2:ready:7")), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 200) << s.response.body;
  EXPECT_NE(s.response.body.find("\"connections\":[]"), std::string::npos) << s.response.body;
  svc->end(s.handle);

  // The next request past the L1 TTL and the kept copy's age starts in rounds.
  s = svc->begin(manifests(), kLater, kRandom);
  EXPECT_TRUE(reads_in_rounds(s)) << s.redis_bytes;
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, ARecordThatKeepsMovingIsA503NeverEmpty) {
  auto svc = service();
  EdgeStep s = svc->begin(manifests(), kNow, kRandom);
  s = svc->feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  ASSERT_TRUE(reads_in_rounds(s));
  // Back to v1 between the two reads of one request: one switch per request, then a 503.
  s = svc->feed(s.handle, round_one(RespValue::nil()), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  EXPECT_NE(s.response.body.find("STORE_UNAVAILABLE"), std::string::npos) << s.response.body;
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, ARoundsReadThatFindsV1GoesBackToTheScript) {
  auto svc = service();
  EdgeStep s = svc->begin(manifests(), kNow, kRandom);
  s = svc->feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  s = svc->feed(s.handle, round_one(S("v2:ready:7")), kNow);
  ASSERT_EQ(s.response.status, 200);
  svc->end(s.handle);

  // The namespace went back to v1 (the record deleted): read by the v1 script in the same request.
  s = svc->begin(manifests(), kLater, kRandom);
  ASSERT_TRUE(reads_in_rounds(s)) << s.redis_bytes;
  s = svc->feed(s.handle, kOk + round_one(RespValue::nil()), kLater);
  EXPECT_TRUE(reads_one_script(s)) << s.redis_bytes;
  EXPECT_EQ(svc->layout(), KeyLayout::kV1);
  // A script that finds v2 again now is a 503: the switch was spent.
  s = svc->feed(s.handle, layout_unknown("v2:ready:9"), kLater);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, HealthzSaysTheLayoutTheIsolateReads) {
  auto svc = service();
  EdgeStep s = svc->begin(manifests(), kNow, kRandom);
  s = svc->feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  s = svc->feed(s.handle, round_one(S("v2:ready:7")), kNow);
  svc->end(s.handle);
  HttpRequest h;
  h.method = "GET";
  h.path = "/healthz";
  s = svc->begin(h, kNow, kRandom);
  EXPECT_NE(s.response.body.find(R"("layout":{"reads":"v2","v2_not_served":0})"), std::string::npos)
      << s.response.body;
}

// ---- relayed calls on v2 -----------------------------------------------------------------------

// 48 bytes from the "host's CSPRNG": the request id's and the relay's seed.
const std::string kRelayRandom = std::string(16, '\x5a') + std::string(32, '\x33');
constexpr int64_t kMinute = 60'000;

HttpRequest tools_call(const std::string& name) {
  HttpRequest r;
  r.method = "POST";
  r.path = "/mcp";
  r.headers = {{"content-type", "application/json"}};
  r.headers.emplace_back("authorization",
                         "Bearer " + *mint_caller_token("alice", kSecret, kKid, kNow, 3'600'000));
  r.body = Json::object({{"jsonrpc", "2.0"},
                         {"id", 2},
                         {"method", "tools/call"},
                         {"params", {{"name", name}, {"arguments", {{"q", "x"}}}}}})
               .dump();
  return r;
}

// Round 1 of a read of `docs` alone (`only`: HGET of its grant) or of the page (HGETALL): alice
// holds one grant, the shared connection `docs`.
std::string round_one_granting_docs(const EdgeStep& s) {
  const bool only = s.redis_bytes.find("$4\r\nHGET\r\n") != std::string::npos;
  return encode_reply(S("v2:ready:7")) + encode_reply(S("ready:1")) + encode_reply(S("3")) +
         encode_reply(only ? S("shared") : A({S("docs"), S("shared")}));
}

// Round 2: discovery_conn_read.lua's answer for `docs` with the shared principal's manifest (its
// tools `search` and `fetch`, listed a minute ago, fresh for 15).
std::string round_two_docs() {
  Json items = Json::array();
  Json hashes = Json::object();
  for (const char* t : {"search", "fetch"}) {
    items.push_back(Json::object({{"name", t},
                                  {"description", std::string("about ") + t},
                                  {"inputSchema", Json::object({{"type", "object"}})}}));
    hashes[t] = "sha256-" + std::string(43, 'A');
  }
  const std::string manifest =
      Json::object(
          {{"tools", Json::object({{"state", "ok"}, {"items", items}, {"hashes", hashes}})}})
          .dump();
  const int64_t fetched = kNow - kMinute;
  RespValue conn = flat({{"config_hash", "h1"},
                         {"credential_mode", "shared"},
                         {"name", "Docs"},
                         {"transport", "http"},
                         {"updated_at", "1"}});
  RespValue fields = flat({{"manifest", manifest},
                           {"etag", "sha256-etag"},
                           {"config_hash", "h1"},
                           {"fence", "1"},
                           {"fetched_at", std::to_string(fetched)},
                           {"fresh_until", std::to_string(fetched + 15 * kMinute)},
                           {"expires_at", std::to_string(fetched + 24 * 60 * kMinute)},
                           {"truncated", "0"}});
  return encode_reply(A({S("quiver.discovery.conn.v1"), conn, S("2"), RespValue::nil(),
                         A({fields, A({}), I(0), RespValue::nil()})}));
}

// A tools/call by alice on a v2 isolate, its snapshot read in rounds: the step after the read.
EdgeStep call_on_v2(EdgeService& svc, const std::string& name) {
  EdgeStep s = svc.begin(tools_call(name), kNow, kRelayRandom);
  // The grant read moments ago (L1): the relay round at once.
  if (s.action == EdgeAction::kRedis && s.redis_bytes.find("BLPOP") != std::string::npos) return s;
  if (reads_one_script(s)) s = svc.feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  EXPECT_TRUE(s.action == EdgeAction::kRedis &&
              s.redis_bytes.find("quiver:{default:m:alice}:grants") != std::string::npos)
      << s.redis_bytes;
  s = svc.feed(s.handle, round_one_granting_docs(s), kNow);
  EXPECT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_NE(s.redis_bytes.find("quiver:{default:c:docs}:conn"), std::string::npos) << s.redis_bytes;
  return svc.feed(s.handle, round_two_docs(), kNow);
}

std::string shard_key(const std::string& rest) {
  const RedisKeys v2 = *RedisKeys::create("default", KeyLayout::kV2);
  return "quiver:{default:s:" + std::to_string(*v2.connection_shard("docs")) + "}:" + rest;
}

// The relay round on v2: one pipeline to the shard of `docs`, on a connection of its own, EVAL of
// call_enqueue_v2.lua declaring the shard's calls, the reply list and the shard's call-agents, then
// BLPOP on that reply list; the agent's answer is the client's. No v1 key, nothing counted as not
// served on v2.
TEST(EdgeLayoutV2, ARelayedCallGoesToItsConnectionsShardAndResumesWithTheReply) {
  auto svc = service();
  EdgeStep s = call_on_v2(*svc, "docs__search");
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log << s.response.body;
  EXPECT_EQ(svc->layout(), KeyLayout::kV2);
  const std::string rid = *relay_rid(kRelayRandom.substr(16), 0);
  EXPECT_TRUE(s.new_connection);
  EXPECT_GT(s.redis_blocks_ms, 0);
  EXPECT_EQ(s.redis_bytes.rfind("*2\r\n$4\r\nAUTH\r\n", 0), 0u) << s.redis_bytes.substr(0, 40);
  const std::string script(schema_asset("lua/call_enqueue_v2.lua"));
  ASSERT_FALSE(script.empty());
  const std::string eval_head =
      encode_command({"EVAL", script, "3", shard_key("calls"), shard_key("call-reply:" + rid),
                      shard_key("call-agents")});
  // The EVAL's head (its arguments after the keys are the request's fields).
  EXPECT_NE(s.redis_bytes.find(eval_head.substr(eval_head.find("\r\n") + 2)), std::string::npos)
      << s.redis_bytes;
  EXPECT_NE(s.redis_bytes.find(encode_command({"BLPOP", shard_key("call-reply:" + rid), "60.000"})),
            std::string::npos)
      << s.redis_bytes;
  EXPECT_EQ(s.redis_bytes.find("quiver:{default}:"), std::string::npos) << "no v1 key";
  EXPECT_NE(s.redis_bytes.find("\"name\":\"search\""), std::string::npos);

  const std::string record = relay_reply_record(RelayReply::ok(Json::object(
      {{"content", Json::array({Json::object({{"type", "text"}, {"text", "found"}})})}})));
  s = svc->feed(s.handle,
                kOk + encode_reply(A({S("queued"), S("1-0")})) +
                    encode_reply(A({S(shard_key("call-reply:" + rid)), S(record)})),
                kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 200) << s.response.body;
  Result<Json> body = parse_json(s.response.body);
  ASSERT_TRUE(body.ok()) << s.response.body;
  EXPECT_EQ((*body)["id"], 2);
  EXPECT_EQ((*body)["result"]["content"][0]["text"], "found") << s.response.body;
  svc->end(s.handle);

  // No agent alive on the shard: the script's own reply, AGENT_UNREACHABLE, at once.
  s = call_on_v2(*svc, "docs__fetch");
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = svc->feed(s.handle,
                kOk + encode_reply(A({S("no_agent")})) +
                    encode_reply(A({S(shard_key("call-reply:x")),
                                    S(relay_reply_record(agent_unreachable_reply()))})),
                kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_NE(s.response.body.find(kAgentUnreachable), std::string::npos) << s.response.body;
  svc->end(s.handle);

  HttpRequest h;
  h.method = "GET";
  h.path = "/healthz";
  s = svc->begin(h, kNow, kRandom);
  EXPECT_NE(s.response.body.find(R"("layout":{"reads":"v2","v2_not_served":0})"), std::string::npos)
      << s.response.body;
}

// A client that goes away while its call waits on v2: the cancel mark goes to the call's shard,
// where the agent running it looks, on a fresh connection.
TEST(EdgeLayoutV2, AnAbandonedCallsCancelMarkIsOnItsShard) {
  auto svc = service();
  EdgeStep s = call_on_v2(*svc, "docs__search");
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  const std::string rid = *relay_rid(kRelayRandom.substr(16), 0);
  EdgeStep cancel = svc->abandon(s.handle, kNow + 1'000);
  ASSERT_EQ(cancel.action, EdgeAction::kRedis) << cancel.log;
  EXPECT_TRUE(cancel.new_connection);
  EXPECT_NE(
      cancel.redis_bytes.find(encode_command(
          {"SET", shard_key("call-cancel:" + rid), "1", "PX",
           std::to_string(McpEndpointConfig{}.relay_timeout_ms - 1'000 + kCallCancelGraceMs)})),
      std::string::npos)
      << cancel.redis_bytes;
  EdgeStep done = svc->feed(cancel.handle, kOk + kOk, kNow + 1'002);
  EXPECT_EQ(done.action, EdgeAction::kDone);
  EXPECT_EQ(done.log, "");
  svc->end(cancel.handle);
  EXPECT_EQ(svc->open_requests(), 0u);
}

}  // namespace
}  // namespace quiver
