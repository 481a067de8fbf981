// Refresh webhooks: the signature on `POST /v1/webhooks/refresh` and the body it carries.
//
// Why: a webhook lets a system that knows an upstream changed (a deploy, a plugin reload) ask
// Quiver to re-list it now. The edge and the agent both accept it, so both check it the same way.
// The scheme is the one payment and chat platforms use: a header
//   X-Quiver-Signature: t=<unix seconds>,v2=<hex HMAC-SHA256(secret, "<ns>\n<t>.<raw body>")>
// with several `v2=` entries allowed, so a sender can sign with the old and the new secret while a
// rotation is under way. The timestamp is signed too, which bounds how long a captured request can
// be replayed; within that window the host refuses repeats itself (see WebhookVerified). The
// deployment namespace (`<ns>`; a namespace holds no newline) is signed as well: the replay guard
// lives in each namespace, so without it one captured request would replay once into every
// namespace whose webhook secrets include the one it was signed with.
//
// Deprecated: `v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>` (no namespace), the form before
// v2. It is still accepted in this release, flagged `legacy_v1` so hosts log it, and will be
// refused in the next one. A sender may send both forms in one header while it migrates.
//
// When to call what:
//  - sender (tests, `curl` recipes, other services): `sign_webhook(secret, ns, body, now_ms)`.
//  - receiver: `verify_webhook(header, raw body, secrets, ns, now_ms)` over the exact bytes
//    received, before parsing anything; then record `replay_key` (below); then
//    `parse_webhook_refresh(body)` for what to refresh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/identity.h"
#include "shared/status.h"

namespace quiver {

inline constexpr char kWebhookRefreshPath[] = "/v1/webhooks/refresh";
inline constexpr char kWebhookSignatureHeader[] = "X-Quiver-Signature";
inline constexpr int64_t kDefaultWebhookToleranceMs = 300'000;  // 5 minutes either way
// A short secret could be guessed offline from one signed request; 32 bytes are recommended.
inline constexpr std::size_t kMinWebhookSecretBytes = 16;
inline constexpr std::size_t kMaxWebhookSignatureHeaderBytes = 2048;
inline constexpr std::size_t kMaxWebhookSignatures = 8;  // v2 (and v1) entries in one header
inline constexpr std::size_t kMaxWebhookBodyBytes = 64 * 1024;
inline constexpr std::size_t kMaxWebhookTargets = 256;
inline constexpr std::size_t kMaxWebhookReasonBytes = 200;
// What both hosts log when only a deprecated v1 signature matched.
inline constexpr char kWebhookV1DeprecatedLog[] =
    "webhook accepted with a deprecated v1 signature (no namespace): sign with v2 "
    "(HMAC over \"<namespace>\\n<t>.<body>\"); v1 will be refused in the next release";

// The header value for `body` to namespace `ns`, signed with each secret (one `v2=` each, in
// order) at t = floor(now_ms / 1000). kInvalidArgument for no secrets, a secret shorter than
// kMinWebhookSecretBytes, an invalid namespace, or a negative time.
Result<std::string> sign_webhook(const std::vector<std::string>& secrets, std::string_view ns,
                                 std::string_view body, int64_t now_ms);
Result<std::string> sign_webhook(std::string_view secret, std::string_view ns,
                                 std::string_view body, int64_t now_ms);
// The deprecated form (`v1=`, no namespace), for senders and tests of the transition only.
Result<std::string> sign_webhook_v1(std::string_view secret, std::string_view body, int64_t now_ms);

struct WebhookVerified {
  int64_t timestamp_ms = 0;  // the signed `t`, in ms
  // Replay protection is the host's: record `replay_key` with SET NX PX retain_for_ms (Redis) or
  // INSERT OR IGNORE with an expiry (SQLite), and refuse the request (401) when it was already
  // there. The core cannot store it: it has no state between requests.
  // The key is "wh:" + hex SHA-256 of "<t>.<body>", the signed content: it does not depend on
  // which `v1` entry matched, so a replay that drops one of several signatures is still caught.
  std::string replay_key;
  // How long the key must be kept: until `t` leaves the tolerance window (at least 1 ms).
  int64_t retain_for_ms = 0;
  // Only a deprecated v1 signature (no namespace) matched: accepted in this release; hosts log it
  // so that senders are moved to v2 before v1 is refused.
  bool legacy_v1 = false;
};

// Checks `header` (the X-Quiver-Signature value) against the raw `body` sent to namespace `ns`.
// Every failure is kUnauthenticated with a reason (missing or malformed header, no signature, a
// stale or future timestamp beyond `tolerance_ms`, no secret matched); messages never contain a
// secret or a signature. Empty `secrets`, a secret shorter than kMinWebhookSecretBytes or an
// invalid namespace is a configuration error: kInvalidArgument. Header grammar: comma-separated
// `key=value` items, spaces around items ignored; `t` exactly once, a decimal without leading
// zeros; `v2` and (deprecated) `v1` 1..8 times together, 64 hex digits (either case); other keys
// (future schemes) ignored. A v2 signature made for another namespace does not match.
Result<WebhookVerified> verify_webhook(std::string_view header, std::string_view body,
                                       const std::vector<std::string>& secrets, std::string_view ns,
                                       int64_t now_ms,
                                       int64_t tolerance_ms = kDefaultWebhookToleranceMs);

// ---- the body ----------------------------------------------------------------------------------

// One connection to refresh. No principal means every principal the connection is cached under
// (`shared`, or each member granted it): the host expands it.
struct WebhookRefreshTarget {
  std::string connection_id;
  std::optional<Principal> principal;
  std::string reason;  // "webhook" when the sender gave none

  bool operator==(const WebhookRefreshTarget& o) const {
    return connection_id == o.connection_id && principal == o.principal && reason == o.reason;
  }
};

struct WebhookRefreshRequest {
  std::vector<WebhookRefreshTarget> targets;  // in the order sent, duplicates removed; never empty
};

inline constexpr char kDefaultWebhookReason[] = "webhook";

// The JSON body, one of:
//   {"connection_id": "github", "principal": "member/alice", "reason": "deploy"}
//   {"connections": ["github", {"connection_id": "jira", "principal": "shared"}], "reason": "..."}
// `principal` and `reason` are optional; a top-level `reason` applies to list entries that have
// none. Reasons are 1..200 bytes of printable ASCII (they land in the revalidation stream and in
// logs). Unknown fields are ignored. kInvalidArgument naming the field (and the list index) for
// anything else; kTooLarge over kMaxWebhookBodyBytes or kMaxWebhookTargets.
Result<WebhookRefreshRequest> parse_webhook_refresh(std::string_view body);

// ---- the answer --------------------------------------------------------------------------------

// What came of one (connection, principal) a webhook named.
struct WebhookRefreshResult {
  std::string connection_id;
  // Absent for an unknown connection and for a per_member connection marked as a whole.
  std::optional<Principal> principal;
  // queued, already_queued, in_progress (a listing is under way; the refresh follows it),
  // unknown_connection, unknown_principal, marked (a target without a principal on a per_member
  // connection: the connection is marked once, every member's data reads stale and is queued
  // through that member's gate when read: shared/discovery_redis.h kWebhookConnectionMarked).
  // A store failure fails the whole request instead.
  std::string status;
  // The cached manifest now reads as stale (Redis: invalidated_at); for `marked`, the connection
  // has grantees whose data now reads stale.
  bool marked_stale = false;

  bool operator==(const WebhookRefreshResult& o) const {
    return connection_id == o.connection_id && principal == o.principal && status == o.status &&
           marked_stale == o.marked_stale;
  }
};

// What the host's store operation made of a verified webhook (the edge: webhook_refresh.lua, the
// agent: ManifestStore::apply_webhook, the same rules): a replay, or one result per (connection,
// principal) in the order the targets were sent (one per connection marked as a whole).
struct WebhookRefreshReply {
  bool replay = false;  // the signed request was seen before: nothing was done
  std::vector<WebhookRefreshResult> results;
};

// The 202 body both hosts answer (schema/openapi.yaml, refreshWebhook):
//   {"status": "accepted", "refreshes": [{"connection_id", "principal"?, "status",
//    "marked_stale"}, ...]}
std::string webhook_accepted_body(const std::vector<WebhookRefreshResult>& results);

}  // namespace quiver
