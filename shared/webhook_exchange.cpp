#include "shared/webhook_exchange.h"

#include <string>
#include <utility>

namespace quiver {

namespace {

WebhookRefusal refuse(HttpErrorCode code, std::string message, std::string log = {}) {
  return WebhookRefusal{error_response(code, message), std::move(log)};
}

}  // namespace

WebhookCheck check_webhook(const HttpRequest& request, const std::vector<std::string>& secrets,
                           std::string_view ns, int64_t now_ms, std::string_view off_message) {
  if (request.method != "POST") {
    WebhookRefusal r = refuse(HttpErrorCode::kMethodNotAllowed, "method not allowed");
    r.response.headers.emplace_back("Allow", "POST");
    return r;
  }
  if (secrets.empty()) return refuse(HttpErrorCode::kNotFound, std::string(off_message));
  std::optional<std::string_view> header = find_header(request.headers, kWebhookSignatureHeader);
  if (!header) {
    return refuse(HttpErrorCode::kUnauthenticated,
                  std::string("the ") + kWebhookSignatureHeader + " header is missing");
  }
  Result<WebhookVerified> verified = verify_webhook(*header, request.body, secrets, ns, now_ms);
  if (!verified.ok()) {
    if (verified.error().code != ErrorCode::kUnauthenticated) {
      return refuse(HttpErrorCode::kInternal, "the webhook secrets are misconfigured",
                    "webhook secrets: " + verified.error().message);
    }
    return refuse(HttpErrorCode::kUnauthenticated, verified.error().message,
                  "webhook refused: " + verified.error().message);
  }
  Result<WebhookRefreshRequest> parsed = parse_webhook_refresh(request.body);
  if (!parsed.ok()) {
    return refuse(parsed.error().code == ErrorCode::kTooLarge ? HttpErrorCode::kPayloadTooLarge
                                                              : HttpErrorCode::kBadRequest,
                  parsed.error().message);
  }
  return WebhookChecked{std::move(*verified), std::move(*parsed)};
}

HttpResponse webhook_replay_response() {
  return error_response(HttpErrorCode::kUnauthenticated,
                        "this signed request was already delivered (replay)");
}

HttpResponse webhook_store_failed_response(const Error& error) {
  return error_response(
      HttpErrorCode::kStoreUnavailable,
      std::string(store_unavailable_message(error)) + "; the webhook was not applied");
}

HttpResponse webhook_accepted_response(const std::vector<WebhookRefreshResult>& results) {
  HttpResponse res;
  res.status = 202;
  res.headers = {{"Content-Type", "application/json"}, {"Cache-Control", "no-store"}};
  res.body = webhook_accepted_body(results);
  return res;
}

WebhookAnswer webhook_answer(const Result<WebhookRefreshReply>& outcome, std::string_view reason,
                             bool legacy_v1) {
  if (!outcome.ok()) {
    return {webhook_store_failed_response(outcome.error()), "webhook: " + outcome.error().message};
  }
  if (outcome->replay) return {webhook_replay_response(), "webhook refused: a replay"};
  WebhookAnswer a{webhook_accepted_response(outcome->results),
                  "webhook accepted (" + std::to_string(outcome->results.size()) +
                      " refresh(es), reason " + std::string(reason) + ")",
                  true};
  if (legacy_v1) {
    a.log += std::string("; ") + kWebhookV1DeprecatedLog;  // a warning: the sender must move
    a.log_info = false;
  }
  return a;
}

}  // namespace quiver
