// EdgeService on a namespace in key layout v2 (docs/design.md "The discovery read on v2, round by
// round"): the layout record decides how the isolate reads, the switch happens within a request,
// once, and the paths that would write v1 keys answer 503 instead.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/layout.h"
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

}  // namespace
}  // namespace quiver
