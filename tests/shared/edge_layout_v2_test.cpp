// EdgeService on a namespace in key layout v2 (docs/design.md "The discovery read on v2, round by
// round"): the layout record decides how the isolate reads, the switch happens within a request,
// once, and the paths that would write v1 keys answer 503 instead. The signed refresh webhook is
// served on v2 in its rounds (shared/webhook_spread.h; docs/design.md "The refresh webhook on v2"),
// switching layout within the request as the read does; revalidations are queued in two spread
// rounds (docs/design.md "The revalidation queue on v2": the gate on the manifest's slot, then the
// XADD on the connection's shard stream); a relayed call goes to its connection's shard
// (docs/design.md "Relayed calls on v2").
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/call_relay.h"
#include "shared/caller_token.h"
#include "shared/discovery_spread.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/layout.h"
#include "shared/redis_keys.h"
#include "shared/schema_assets.h"
#include "shared/webhook_signature.h"
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

constexpr char kWebhookSecret[] = "edge-layout-v2-webhook-secret-0123456789";

std::unique_ptr<EdgeService> service() {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kSecret}}).dump();
  env["QUIVER_WEBHOOK_SECRETS"] = Json::object({{"ci", kWebhookSecret}}).dump();
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
  EXPECT_NE(s.response.body.find(R"("layout":{"reads":"v2"})"), std::string::npos)
      << s.response.body;
}

// ---- the refresh webhook on v2 ------------------------------------------------------------------

const std::string kHookBody =
    R"({"connections": ["docs", {"connection_id": "mail", "principal": "member/bob"}]})";

HttpRequest signed_webhook(int64_t now = kNow) {
  HttpRequest r;
  r.method = "POST";
  r.path = kWebhookRefreshPath;
  r.body = kHookBody;
  Result<std::string> sig = sign_webhook(kWebhookSecret, "default", kHookBody, now);
  EXPECT_TRUE(sig.ok());
  r.headers.emplace_back("x-quiver-signature", sig.ok() ? *sig : "");
  return r;
}

// An isolate that has read the namespace in v2 (a read that switched).
std::unique_ptr<EdgeService> v2_isolate() {
  auto svc = service();
  EdgeStep s = svc->begin(manifests(), kNow, kRandom);
  s = svc->feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  s = svc->feed(s.handle, round_one(S("v2:ready:7")), kNow);
  EXPECT_EQ(s.response.status, 200);
  svc->end(s.handle);
  EXPECT_EQ(svc->layout(), KeyLayout::kV2);
  return svc;
}

std::string replies(const std::vector<RespValue>& values) {
  std::string out;
  for (const RespValue& v : values) out += encode_reply(v);
  return out;
}

// Round 1's replies for kHookBody: the layout and namespace records, no replay guard; docs is
// shared with data, bob is a grantee of the per_member mail, whose data he has, with a lease.
std::string hook_checks(RespValue layout) {
  return replies({std::move(layout), S("ready:1"), I(0),      //
                  S("shared"), I(0), I(1), I(0), I(0),        // docs
                  S("per_member"), I(1), I(1), I(0), I(1)});  // mail, bob
}

bool sends_hook_checks(const EdgeStep& s) {
  return s.action == EdgeAction::kRedis &&
         s.redis_bytes.find("quiver:{default:r:") != std::string::npos &&
         s.redis_bytes.find("SISMEMBER") != std::string::npos;
}

// Rounds 2 to 4 after hook_checks: the marks, the two requests, the guard; the answer.
EdgeStep finish_hook(EdgeService& svc, EdgeStep s, int64_t now) {
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find(
                std::string(schema_asset_sha1_of(schema_asset("lua/webhook_mark_v2.lua")))),
            std::string::npos)
      << "round 2: the mark scripts, by SHA-1";
  s = svc.feed(s.handle, replies({A({S("queued"), S("1")}), A({S("in_progress"), S("1")})}), now);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("XADD"), std::string::npos) << "round 3: the requests";
  EXPECT_NE(s.redis_bytes.find("quiver:{default:s:"), std::string::npos);
  s = svc.feed(s.handle, replies({S("1-0"), S("1-1")}), now);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("NX"), std::string::npos) << "round 4: the guard";
  return svc.feed(s.handle, kOk, now);
}

void expect_accepted(const EdgeStep& s) {
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 202) << s.response.body;
  Json b = Json::parse(s.response.body);
  EXPECT_EQ(b["status"], "accepted");
  ASSERT_EQ(b["refreshes"].size(), 2u) << s.response.body;
  EXPECT_EQ(b["refreshes"][0], Json::parse(R"({"connection_id": "docs", "principal": "shared",
                                               "status": "queued", "marked_stale": true})"));
  EXPECT_EQ(b["refreshes"][1], Json::parse(R"({"connection_id": "mail",
                                               "principal": "member/bob",
                                               "status": "in_progress", "marked_stale": true})"));
}

std::string healthz(EdgeService& svc) {
  HttpRequest h;
  h.method = "GET";
  h.path = "/healthz";
  EdgeStep s = svc.begin(h, kNow, kRandom);
  svc.end(s.handle);
  return s.response.body;
}

TEST(EdgeLayoutV2, ASignedWebhookOnV2IsServedInRounds) {
  auto svc = v2_isolate();
  EdgeStep s = svc->begin(signed_webhook(), kNow, kRandom);
  ASSERT_TRUE(sends_hook_checks(s)) << s.redis_bytes;
  EXPECT_EQ(s.redis_bytes.find("SET"), std::string::npos) << "round 1 writes nothing";
  s = svc->feed(s.handle, kOk + hook_checks(S("v2:ready:7")), kNow);
  s = finish_hook(*svc, std::move(s), kNow);
  expect_accepted(s);
  svc->end(s.handle);
  EXPECT_NE(healthz(*svc).find(R"("layout":{"reads":"v2"})"), std::string::npos) << healthz(*svc);

  // The same signed request again: round 1 finds its guard, 401, nothing more sent.
  s = svc->begin(signed_webhook(), kNow, kRandom);
  ASSERT_TRUE(sends_hook_checks(s));
  std::string seen = hook_checks(S("v2:ready:7"));
  seen = replies({S("v2:ready:7"), S("ready:1"), I(1)}) +
         seen.substr(replies({S("v2:ready:7"), S("ready:1"), I(0)}).size());
  s = svc->feed(s.handle, kOk + seen, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 401) << s.response.body;
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, TheV1WebhookScriptNamingV2ReadyIsServedInRoundsInTheSameRequest) {
  auto svc = service();
  EdgeStep s = svc->begin(signed_webhook(), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  ASSERT_NE(s.redis_bytes.find(
                std::string(schema_asset_sha1_of(schema_asset("lua/webhook_refresh.lua")))),
            std::string::npos);
  s = svc->feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
  ASSERT_TRUE(sends_hook_checks(s)) << s.redis_bytes;
  EXPECT_EQ(svc->layout(), KeyLayout::kV2) << "the isolate remembers it";
  s = svc->feed(s.handle, hook_checks(S("v2:ready:7")), kNow);
  s = finish_hook(*svc, std::move(s), kNow);
  expect_accepted(s);
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, AWebhookWhoseRoundsFindV1GoesToTheScriptOnce) {
  auto svc = v2_isolate();
  EdgeStep s = svc->begin(signed_webhook(), kNow, kRandom);
  ASSERT_TRUE(sends_hook_checks(s));
  s = svc->feed(s.handle, kOk + hook_checks(RespValue::nil()), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find(
                std::string(schema_asset_sha1_of(schema_asset("lua/webhook_refresh.lua")))),
            std::string::npos)
      << s.redis_bytes;
  EXPECT_EQ(svc->layout(), KeyLayout::kV1);
  // The script finding v2 again: the switch was spent, 503.
  s = svc->feed(s.handle, layout_unknown("v2:ready:9"), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  svc->end(s.handle);
}

// A Redis error in a round after the first (here the marks): 503 STORE_UNAVAILABLE, never 202.
TEST(EdgeLayoutV2, AWebhookCutShortIsA503) {
  auto svc = v2_isolate();
  EdgeStep s = svc->begin(signed_webhook(), kNow, kRandom);
  s = svc->feed(s.handle, kOk + hook_checks(S("v2:ready:7")), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = svc->feed(s.handle,
                replies({A({S("queued"), S("1")}), RespValue::error("ERR out of memory")}), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  EXPECT_NE(s.response.body.find("STORE_UNAVAILABLE"), std::string::npos) << s.response.body;
  svc->end(s.handle);
  // And one whose namespace is not ready: 503, after round 1 alone.
  s = svc->begin(signed_webhook(), kNow, kRandom);
  std::string restoring = hook_checks(S("v2:ready:7"));
  const std::string head = replies({S("v2:ready:7"), S("ready:1")});
  restoring = replies({S("v2:ready:7"), S("restoring:1")}) + restoring.substr(head.size());
  s = svc->feed(s.handle, kOk + restoring, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  svc->end(s.handle);
}

// ---- revalidations on v2 ------------------------------------------------------------------------

constexpr int64_t kMinute = 60'000;

const RedisKeys& v2_keys() {
  static const RedisKeys keys = *keys_for_layout("default", KeyLayout::kV2);
  return keys;
}

// Round 1 granting alice the shared connection `docs`: her grants (HGETALL), or, for a read of
// that connection alone (`only`: a refresh), its grant (HGET).
std::string round_one_granting_docs(bool only) {
  return encode_reply(S("v2:ready:7")) + encode_reply(S("ready:1")) + encode_reply(S("3")) +
         encode_reply(only ? S(kGrantModeShared) : A({S("docs"), S(kGrantModeShared)}));
}

// Round 2: discovery_conn_read.lua for `docs`, its `shared` manifest fetched `age` ago (15 min
// fresh), its lease held or not.
std::string round_two_docs(int64_t age, bool lease) {
  const int64_t fetched = kNow - age;
  auto conn = flat({{"config_hash", "h1"},
                    {"credential_mode", "shared"},
                    {"name", "Docs"},
                    {"transport", "http"},
                    {"updated_at", "1"}});
  Json tools = Json::object(
      {{"state", "ok"},
       {"items",
        Json::array({Json::object({{"name", "search"},
                                   {"description", "about search"},
                                   {"inputSchema", Json::object({{"type", "object"}})}})})},
       {"hashes", Json::object({{"search", "sha256-" + std::string(43, 'A')}})}});
  auto manifest = flat({{"manifest", Json::object({{"tools", tools}}).dump()},
                        {"etag", "sha256-etag"},
                        {"config_hash", "h1"},
                        {"fence", "1"},
                        {"fetched_at", std::to_string(fetched)},
                        {"fresh_until", std::to_string(fetched + 15 * kMinute)},
                        {"expires_at", std::to_string(fetched + 24 * 60 * kMinute)},
                        {"truncated", "0"}});
  return encode_reply(A({S(kDiscoveryConnReplyTag), conn, S("2"), RespValue::nil(),
                         A({manifest, A({}), I(lease ? 1 : 0), RespValue::nil()})}));
}

// A request on a v2 isolate (switched by its first read), read in rounds up to its answer.
EdgeStep read_on_v2(EdgeService& svc, HttpRequest request, int64_t age, bool lease) {
  const bool only = request.method == "POST";  // the refresh of one connection
  EdgeStep s = svc.begin(std::move(request), kNow, kRandom);
  std::string auth = kOk;  // the request's connection is new: AUTH's reply comes first
  if (svc.layout() == KeyLayout::kV1) {
    EXPECT_TRUE(reads_one_script(s)) << s.redis_bytes;
    s = svc.feed(s.handle, kOk + layout_unknown("v2:ready:7"), kNow);
    auth.clear();
  }
  EXPECT_TRUE(reads_in_rounds(s)) << s.redis_bytes;
  s = svc.feed(s.handle, auth + round_one_granting_docs(only), kNow);
  EXPECT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_NE(s.redis_bytes.find("quiver:{default:c:docs}:manifest"), std::string::npos);
  return svc.feed(s.handle, round_two_docs(age, lease), kNow);
}

// The XADD of step (b) for `docs`/shared with `reason`, as RESP bytes on the wire.
std::string docs_xadd(const std::string& reason) {
  Revalidation r{"docs", Principal::shared(), reason, reason == "manual"};
  EnqueueOptions options;
  return encode_command(*revalidate_xadd_command(v2_keys(), r, kNow, options.stream_maxlen));
}

TEST(EdgeLayoutV2, AStaleEntryIsQueuedThroughItsGateThenItsShardsStream) {
  auto svc = service();
  EdgeStep s = read_on_v2(*svc, manifests(), 20 * kMinute, /*lease=*/false);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 200) << s.response.body;
  EXPECT_NE(s.response.body.find("\"status\":\"stale\""), std::string::npos) << s.response.body;
  ASSERT_TRUE(s.background);

  // (a) the gate on the manifest's slot: the gate declared alone (the edge may not declare the
  // lease), with the window and no requeue (a reader's request).
  s = svc->background(s.handle, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  const std::string gate = *v2_keys().revalidate_gate("docs", Principal::shared());
  EXPECT_EQ(gate, "quiver:{default:c:docs}:gate");
  EXPECT_NE(s.redis_bytes.find(gate), std::string::npos) << s.redis_bytes;
  EXPECT_NE(s.redis_bytes.find(
                std::string(schema_asset_sha1_of(schema_asset("lua/revalidate_gate.lua")))),
            std::string::npos);
  EXPECT_EQ(s.redis_bytes.find(":lease"), std::string::npos) << s.redis_bytes;
  EXPECT_EQ(s.redis_bytes.find("XADD"), std::string::npos) << "not before the gate is won";
  EXPECT_EQ(s.redis_bytes.find("quiver:{default}:revalidate"), std::string::npos);

  // (b) won: the XADD to the connection's shard stream, with v1's fields.
  s = svc->feed(s.handle, encode_reply(A({S("won")})), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  const uint32_t shard = *v2_keys().connection_shard("docs");
  const std::string stream = *v2_keys().revalidate_stream(shard);
  EXPECT_EQ(stream, "quiver:{default:s:" + std::to_string(shard) + "}:revalidate");
  EXPECT_EQ(s.redis_bytes, docs_xadd("stale"));
  s = svc->feed(s.handle, encode_reply(S("1800000000000-0")), kNow);
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_EQ(s.log, "");
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, AGateAlreadyTakenSendsNoXadd) {
  auto svc = service();
  EdgeStep s = read_on_v2(*svc, manifests(), 20 * kMinute, /*lease=*/false);
  ASSERT_TRUE(s.background);
  s = svc->background(s.handle, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = svc->feed(s.handle, encode_reply(A({S("already_queued")})), kNow);
  EXPECT_EQ(s.action, EdgeAction::kDone) << s.redis_bytes;
  EXPECT_EQ(s.log, "");
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, AHeldLeaseQueuesNothing) {
  auto svc = service();
  EdgeStep s = read_on_v2(*svc, manifests(), 20 * kMinute, /*lease=*/true);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 200);
  EXPECT_FALSE(s.background) << "a refresh holds the lease: nothing to queue";
  svc->end(s.handle);
}

HttpRequest refresh_docs() {
  HttpRequest r = manifests();
  r.method = "POST";
  r.path = "/v1/mcp-connections/docs/refresh-tools";
  return r;
}

TEST(EdgeLayoutV2, AManualRefreshIsQueuedThroughItsGateThenItsShardsStream) {
  auto svc = service();
  EdgeStep s = read_on_v2(*svc, refresh_docs(), 1 * kMinute, /*lease=*/false);
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_NE(s.redis_bytes.find("quiver:{default:c:docs}:gate"), std::string::npos);
  // A manual refresh asks the gate to requeue after kManualRequeueAfterMs.
  EXPECT_NE(s.redis_bytes.find("\r\n" + std::to_string(kManualRequeueAfterMs) + "\r\n"),
            std::string::npos);
  s = svc->feed(s.handle, encode_reply(A({S("won")})), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.log;
  EXPECT_EQ(s.redis_bytes, docs_xadd("manual"));
  s = svc->feed(s.handle, encode_reply(S("1800000000000-0")), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.log;
  EXPECT_EQ(s.response.status, 202) << s.response.body;
  EXPECT_EQ(s.response.body, R"({"status":"queued"})");
  svc->end(s.handle);

  // The gate taken (a refresh requested under a second ago): queued, nothing more sent.
  s = read_on_v2(*svc, refresh_docs(), 1 * kMinute, /*lease=*/false);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = svc->feed(s.handle, encode_reply(A({S("already_queued")})), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.redis_bytes;
  EXPECT_EQ(s.response.status, 202);
  EXPECT_EQ(s.response.body, R"({"status":"queued"})");
  svc->end(s.handle);

  // A Redis error on the XADD: the store is unavailable, never "queued".
  s = read_on_v2(*svc, refresh_docs(), 1 * kMinute, /*lease=*/false);
  s = svc->feed(s.handle, encode_reply(A({S("won")})), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = svc->feed(s.handle, "-OOM command not allowed\r\n", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503) << s.response.body;
  svc->end(s.handle);
}

TEST(EdgeLayoutV2, AManualRefreshUnderAHeldLeaseSendsNothing) {
  auto svc = service();
  EdgeStep s = read_on_v2(*svc, refresh_docs(), 1 * kMinute, /*lease=*/true);
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.redis_bytes;
  EXPECT_EQ(s.response.status, 202) << s.response.body;
  EXPECT_EQ(s.response.body, R"({"status":"in_progress"})");
  svc->end(s.handle);
}

// ---- relayed calls on v2 -----------------------------------------------------------------------

// 48 bytes from the "host's CSPRNG": the request id's and the relay's seed.
const std::string kRelayRandom = std::string(16, '\x5a') + std::string(32, '\x33');

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
  EXPECT_NE(s.response.body.find(R"("layout":{"reads":"v2"})"), std::string::npos)
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
