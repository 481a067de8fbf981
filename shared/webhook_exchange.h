// The signed refresh webhook (POST /v1/webhooks/refresh) as both hosts answer it, sans I/O.
//
// Why: the agent and the edge each had their own copy and checked in different orders (a replayed
// malformed request was 401 at the agent and 400 at the edge). The order is decided here, once:
//   1. the method: POST, else 405 METHOD_NOT_ALLOWED (Allow: POST)
//   2. webhooks on (a secret configured), else 404 NOT_FOUND
//   3. the X-Quiver-Signature header present, else 401 UNAUTHENTICATED
//   4. the signature over the exact body (shared/webhook_signature.h): 401 when it does not
//      verify or is out of its time window; 500 INTERNAL when the secrets are misconfigured
//   5. the body parsed (parse_webhook_refresh): 400 BAD_REQUEST, 413 PAYLOAD_TOO_LARGE
//   6. the host's store operation, one step with one set of rules: the namespace record (not
//      `ready`: 503, nothing written, not even the replay guard), the replay guard, then for each
//      target every (connection, principal) the STORE lists for it (the connection record's
//      credential mode, its grantees) marked stale and its refresh queued (the edge: one Lua
//      script, schema/lua/webhook_refresh.lua; the agent: ManifestStore::apply_webhook, that
//      script on Redis and the same rules in one transaction on SQLite). `webhook_answer` turns
//      its outcome into the answer at both hosts: a replay → 401 (`webhook_replay_response`); the
//      store unreachable or the namespace not ready → 503 STORE_UNAVAILABLE, nothing applied
//      (`webhook_store_failed_response`); else 202 with one result per (connection, principal)
//      (`webhook_accepted_response`).
// Of the two orders the hosts had, this is the edge's (parse before the replay guard), chosen as
// the safer one: the replay guard and the refreshes are one store operation, so a delivery's
// signature is spent only by a request that is applied; a malformed body never writes to the store
// (the agent's order remembered it, so a sender's corrected retry with the same signature
// could not be told from a replay). A replayed well-formed request is 401 at both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/discovery_http.h"
#include "shared/webhook_signature.h"

namespace quiver {

// Steps 1–5 refused the request: send `response`; `log` (when set) is for the host's log, a
// problem unless `log_info`.
struct WebhookRefusal {
  HttpResponse response;
  std::string log;
};

// Steps 1–5 passed: the host runs step 6 with these.
struct WebhookChecked {
  WebhookVerified verified;
  WebhookRefreshRequest request;
};

using WebhookCheck = std::variant<WebhookRefusal, WebhookChecked>;

// `off_message`: the 404's message when `secrets` is empty (it names the host's setting).
WebhookCheck check_webhook(const HttpRequest& request, const std::vector<std::string>& secrets,
                           std::string_view ns, int64_t now_ms, std::string_view off_message);

// Step 6's answers.
HttpResponse webhook_replay_response();
HttpResponse webhook_store_failed_response(
    const Error& error);  // 503, saying why (down / being restored)
HttpResponse webhook_accepted_response(const std::vector<WebhookRefreshResult>& results);

// Step 6's outcome as both hosts answer and log it. `reason` is the first target's (for the log);
// `legacy_v1` as WebhookVerified says (an accepted request signed only with v1 is logged as a
// problem: the sender must move to v2).
struct WebhookAnswer {
  HttpResponse response;
  std::string log;        // never empty
  bool log_info = false;  // routine (an accepted request); else a problem
};
WebhookAnswer webhook_answer(const Result<WebhookRefreshReply>& outcome, std::string_view reason,
                             bool legacy_v1);

}  // namespace quiver
