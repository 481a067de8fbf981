// EdgeService on a namespace in key layout v2 (docs/design.md "The discovery read on v2, round by
// round"): the layout record decides how the isolate reads, the switch happens within a request,
// once, and the paths that would write v1 keys answer 503 instead. The signed refresh webhook is
// served on v2 in its rounds (shared/webhook_spread.h; docs/design.md "The refresh webhook on v2"),
// switching layout within the request as the read does.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/layout.h"
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
  EXPECT_NE(s.response.body.find(R"("layout":{"reads":"v2","v2_not_served":0})"), std::string::npos)
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
  EXPECT_NE(healthz(*svc).find(R"("layout":{"reads":"v2","v2_not_served":0})"), std::string::npos)
      << healthz(*svc);

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
  EXPECT_EQ(svc->v2_not_served(), 0u);
}

}  // namespace
}  // namespace quiver
