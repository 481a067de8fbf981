#include "shared/webhook_exchange.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/json.h"

namespace quiver {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;
const std::string kSecret(32, 'w');
const std::vector<std::string> kSecrets = {kSecret};
constexpr char kNs[] = "prod";
constexpr char kOff[] = "webhooks are off";

HttpRequest post(std::string body, std::string signature) {
  HttpRequest r{"POST", kWebhookRefreshPath, "", {}, std::move(body)};
  if (!signature.empty()) r.headers.emplace_back(kWebhookSignatureHeader, std::move(signature));
  return r;
}

std::string signed_for(const std::string& body, int64_t at = kNow) {
  return *sign_webhook(kSecret, kNs, body, at);
}

std::string code_of(const WebhookCheck& c) {
  const auto* refused = std::get_if<WebhookRefusal>(&c);
  if (refused == nullptr) return "checked";
  Result<Json> body = parse_json(refused->response.body);
  return std::to_string(refused->response.status) + " " +
         json_string(*json_field(*body, "error"), "code").value_or("");
}

// The order both hosts answer in: method, on/off, header, signature, body.
TEST(WebhookExchange, ChecksInOrder) {
  const std::string good = R"({"connection_id":"docs"})";
  const std::string malformed = "{not json";
  HttpRequest get = post(good, signed_for(good));
  get.method = "GET";
  const WebhookCheck not_post = check_webhook(get, {}, kNs, kNow, kOff);
  EXPECT_EQ(code_of(not_post), "405 METHOD_NOT_ALLOWED");
  EXPECT_EQ(find_header(std::get<WebhookRefusal>(not_post).response.headers, "Allow"),
            std::optional<std::string_view>("POST"));
  EXPECT_EQ(code_of(check_webhook(post(malformed, ""), {}, kNs, kNow, kOff)), "404 NOT_FOUND");
  EXPECT_EQ(code_of(check_webhook(post(malformed, ""), kSecrets, kNs, kNow, kOff)),
            "401 UNAUTHENTICATED");
  // A bad signature over a malformed body: the signature is checked first.
  EXPECT_EQ(code_of(check_webhook(post(malformed, "t=1,v2=00"), kSecrets, kNs, kNow, kOff)),
            "401 UNAUTHENTICATED");
  EXPECT_EQ(code_of(check_webhook(post(good, signed_for(good, kNow - 3'600'000)), kSecrets, kNs,
                                  kNow, kOff)),
            "401 UNAUTHENTICATED");
  // Signed but malformed: 400, before any store operation (the replay guard is the host's next).
  EXPECT_EQ(
      code_of(check_webhook(post(malformed, signed_for(malformed)), kSecrets, kNs, kNow, kOff)),
      "400 BAD_REQUEST");
  const WebhookCheck ok = check_webhook(post(good, signed_for(good)), kSecrets, kNs, kNow, kOff);
  ASSERT_EQ(code_of(ok), "checked");
  const WebhookChecked& checked = std::get<WebhookChecked>(ok);
  ASSERT_EQ(checked.request.targets.size(), 1u);
  EXPECT_EQ(checked.request.targets[0].connection_id, "docs");
  EXPECT_FALSE(checked.verified.replay_key.empty());
}

TEST(WebhookExchange, Answers) {
  EXPECT_EQ(webhook_replay_response().status, 401);
  EXPECT_EQ(webhook_store_failed_response(Error(ErrorCode::kStoreUnavailable, "down")).status, 503);
  HttpResponse restoring =
      webhook_store_failed_response(Error(ErrorCode::kStoreNotReady, "namespace restoring"));
  EXPECT_EQ(restoring.status, 503);
  EXPECT_NE(restoring.body.find("being restored"), std::string::npos) << restoring.body;
  EXPECT_NE(restoring.body.find("STORE_UNAVAILABLE"), std::string::npos) << restoring.body;
  HttpResponse accepted =
      webhook_accepted_response({{"docs", Principal::shared(), "queued", true}});
  EXPECT_EQ(accepted.status, 202);
  Result<Json> body = parse_json(accepted.body);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(json_string(*body, "status"), std::optional<std::string>("accepted"));
}

// One function turns the store step's outcome into the answer and the log line, at both hosts.
TEST(WebhookExchange, TheStoreStepsOutcomeIsAnsweredAlikeAtBothHosts) {
  WebhookAnswer down =
      webhook_answer(Error(ErrorCode::kStoreNotReady, "namespace restoring"), "deploy", false);
  EXPECT_EQ(down.response.status, 503);
  EXPECT_EQ(down.response.body,
            webhook_store_failed_response(Error(ErrorCode::kStoreNotReady, "x")).body);
  EXPECT_EQ(down.log, "webhook: namespace restoring");
  EXPECT_FALSE(down.log_info);

  WebhookRefreshReply replay;
  replay.replay = true;
  WebhookAnswer replayed = webhook_answer(replay, "deploy", false);
  EXPECT_EQ(replayed.response.status, 401);
  EXPECT_FALSE(replayed.log_info);

  WebhookRefreshReply accepted;
  accepted.results = {{"docs", Principal::shared(), "queued", true},
                      {"nope", std::nullopt, "unknown_connection", false}};
  WebhookAnswer ok = webhook_answer(accepted, "deploy", false);
  EXPECT_EQ(ok.response.status, 202);
  EXPECT_EQ(ok.response.body, webhook_accepted_response(accepted.results).body);
  EXPECT_EQ(ok.log, "webhook accepted (2 refresh(es), reason deploy)");
  EXPECT_TRUE(ok.log_info);
  WebhookAnswer legacy = webhook_answer(accepted, "deploy", true);
  EXPECT_EQ(legacy.response.body, ok.response.body);
  EXPECT_NE(legacy.log.find(kWebhookV1DeprecatedLog), std::string::npos) << legacy.log;
  EXPECT_FALSE(legacy.log_info);  // a warning: the sender must move to v2
}

}  // namespace
}  // namespace quiver
