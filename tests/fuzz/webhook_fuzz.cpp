// Fuzzes the refresh webhook's checks (shared/webhook_signature.h): the X-Quiver-Signature header
// and the JSON body. Input: "<header>\n<body>". The header is verified as sent against the body
// (every refusal kUnauthenticated, never a crash); then the body is signed here with the two
// configured secrets and must verify, and parse_webhook_refresh reads it: an accepted request has
// 1..kMaxWebhookTargets distinct targets with valid connection ids and printable reasons, and
// every refusal is kInvalidArgument or kTooLarge.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/identity.h"
#include "shared/webhook_signature.h"
#include "tests/fuzz/fuzz_support.h"

namespace {
constexpr int64_t kNowMs = 1800000000000;
const std::vector<std::string> kSecrets = {"fuzz-webhook-secret-0123456789abcdef",
                                           "fuzz-webhook-secret-two-ZYXWVUTSRQPO"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  std::size_t nl = input.find('\n');
  std::string_view header = input.substr(0, nl);
  std::string_view body = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);

  auto as_sent = verify_webhook(header, body, kSecrets, "default", kNowMs);
  if (!as_sent.ok()) {
    fuzz::check(as_sent.error().code == ErrorCode::kUnauthenticated,
                "verify_webhook: a refusal that is not kUnauthenticated", as_sent.error().message);
  } else {
    fuzz::check(as_sent->retain_for_ms >= 1, "verify_webhook: retain_for_ms below 1 ms");
  }

  auto signature = sign_webhook(kSecrets, "default", body, kNowMs);
  fuzz::check(signature.ok(), "sign_webhook refused");
  auto ours = verify_webhook(*signature, body, {kSecrets[1]}, "default", kNowMs);
  fuzz::check(ours.ok(), "verify_webhook refused our own signature",
              ours.ok() ? "" : ours.error().message);
  fuzz::check(ours->replay_key.rfind("wh:", 0) == 0 && ours->replay_key.size() == 3 + 64,
              "verify_webhook: a malformed replay key");

  auto request = parse_webhook_refresh(body);
  if (!request.ok()) {
    fuzz::check(request.error().code == ErrorCode::kInvalidArgument ||
                    request.error().code == ErrorCode::kTooLarge,
                "parse_webhook_refresh: a refusal with an unexpected code",
                error_code_name(request.error().code));
    return 0;
  }
  fuzz::check(!request->targets.empty() && request->targets.size() <= kMaxWebhookTargets,
              "parse_webhook_refresh: target count out of bounds");
  std::set<std::pair<std::string, std::string>> seen;
  for (const WebhookRefreshTarget& t : request->targets) {
    fuzz::check(validate_connection_id(t.connection_id).ok(),
                "parse_webhook_refresh: an invalid connection id", t.connection_id);
    fuzz::check(!t.reason.empty() && t.reason.size() <= kMaxWebhookReasonBytes,
                "parse_webhook_refresh: a reason of bad length");
    for (char c : t.reason) {
      fuzz::check(c >= 0x20 && c < 0x7f, "parse_webhook_refresh: a non-printable reason");
    }
    // Duplicates are removed: a (connection, principal) pair appears once.
    fuzz::check(seen.emplace(t.connection_id, t.principal ? t.principal->str() : "*").second,
                "parse_webhook_refresh: a duplicate target");
  }
  std::vector<WebhookRefreshResult> results;
  for (const WebhookRefreshTarget& t : request->targets) {
    results.push_back({t.connection_id, t.principal, "queued", true});
  }
  (void)webhook_accepted_body(results);
  return 0;
}
