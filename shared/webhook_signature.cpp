#include "shared/webhook_signature.h"

#include <set>
#include <utility>

#include "shared/json.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

constexpr std::size_t kMaxTimestampDigits = 12;  // seconds up to year 33658: no overflow in ms

Error unauthenticated(std::string message) {
  return Error(ErrorCode::kUnauthenticated, "webhook signature: " + std::move(message));
}

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

Status check_secrets(const std::vector<std::string>& secrets) {
  if (secrets.empty()) return invalid("no webhook secret is configured");
  for (std::size_t i = 0; i < secrets.size(); ++i) {
    if (secrets[i].size() < kMinWebhookSecretBytes) {
      return invalid("webhook secret " + std::to_string(i) + " has " +
                     std::to_string(secrets[i].size()) + " bytes; at least " +
                     std::to_string(kMinWebhookSecretBytes) + " are required");
    }
  }
  return Status::Ok();
}

// v1 (deprecated): "<t>.<body>". v2: "<ns>\n<t>.<body>" (a namespace holds no newline, so the
// split is unambiguous).
std::string signature_hex(std::string_view secret, std::optional<std::string_view> ns,
                          std::string_view timestamp, std::string_view body) {
  std::string message;
  message.reserve((ns ? ns->size() + 1 : 0) + timestamp.size() + 1 + body.size());
  if (ns) message.append(*ns).append("\n");
  message.append(timestamp).append(".").append(body);
  return hex_encode(hmac_sha256(secret, message));
}

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

// ---- signing -----------------------------------------------------------------------------------

Result<std::string> sign_webhook(const std::vector<std::string>& secrets, std::string_view ns,
                                 std::string_view body, int64_t now_ms) {
  if (Status s = check_secrets(secrets); !s.ok()) return s.error();
  if (Status s = validate_namespace(ns); !s.ok()) return s.error();
  if (now_ms < 0) return invalid("webhook timestamp is negative");
  const std::string t = std::to_string(now_ms / 1000);
  std::string header = "t=" + t;
  for (const std::string& secret : secrets) header += ",v2=" + signature_hex(secret, ns, t, body);
  return header;
}

Result<std::string> sign_webhook(std::string_view secret, std::string_view ns,
                                 std::string_view body, int64_t now_ms) {
  return sign_webhook(std::vector<std::string>{std::string(secret)}, ns, body, now_ms);
}

Result<std::string> sign_webhook_v1(std::string_view secret, std::string_view body,
                                    int64_t now_ms) {
  if (Status s = check_secrets({std::string(secret)}); !s.ok()) return s.error();
  if (now_ms < 0) return invalid("webhook timestamp is negative");
  const std::string t = std::to_string(now_ms / 1000);
  return "t=" + t + ",v1=" + signature_hex(secret, std::nullopt, t, body);
}

// ---- verification ------------------------------------------------------------------------------

Result<WebhookVerified> verify_webhook(std::string_view header, std::string_view body,
                                       const std::vector<std::string>& secrets, std::string_view ns,
                                       int64_t now_ms, int64_t tolerance_ms) {
  if (Status s = check_secrets(secrets); !s.ok()) return s.error();
  if (Status s = validate_namespace(ns); !s.ok()) return s.error();
  if (tolerance_ms <= 0) return invalid("webhook tolerance must be positive");

  header = trim(header);
  if (header.empty()) {
    return unauthenticated(std::string("missing ") + kWebhookSignatureHeader + " header");
  }
  if (header.size() > kMaxWebhookSignatureHeaderBytes) {
    return unauthenticated("header is over " + std::to_string(kMaxWebhookSignatureHeaderBytes) +
                           " bytes");
  }

  std::optional<std::string_view> timestamp;
  std::vector<std::string> signatures;     // v2: over the namespace
  std::vector<std::string> v1_signatures;  // deprecated: without it
  std::size_t start = 0;
  while (start <= header.size()) {
    std::size_t comma = header.find(',', start);
    if (comma == std::string_view::npos) comma = header.size();
    const std::string_view item = trim(header.substr(start, comma - start));
    start = comma + 1;
    const std::size_t eq = item.find('=');
    if (item.empty() || eq == std::string_view::npos || eq == 0) {
      return unauthenticated("header is not a list of key=value items (t=...,v1=...)");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "t") {
      if (timestamp) return unauthenticated("header has more than one timestamp (t)");
      bool digits = !value.empty() && value.size() <= kMaxTimestampDigits &&
                    (value[0] != '0' || value.size() == 1);
      for (char c : value) digits = digits && c >= '0' && c <= '9';
      if (!digits) return unauthenticated("timestamp (t) is not unix seconds");
      timestamp = value;
    } else if (key == "v2" || key == "v1") {
      if (!is_hex64(value)) {
        return unauthenticated("a " + std::string(key) + " signature is not 64 hex digits");
      }
      if (signatures.size() + v1_signatures.size() == kMaxWebhookSignatures) {
        return unauthenticated("header has more than " + std::to_string(kMaxWebhookSignatures) +
                               " signatures");
      }
      (key == "v2" ? signatures : v1_signatures).push_back(lower(value));
    }
    // Other keys are other schemes (v0, v3 ...): not ours to judge.
  }
  if (!timestamp) return unauthenticated("header has no timestamp (t)");
  if (signatures.empty() && v1_signatures.empty()) {
    return unauthenticated("header has no v2 signature");
  }

  int64_t seconds = 0;
  for (char c : *timestamp) seconds = seconds * 10 + (c - '0');
  const int64_t timestamp_ms = seconds * 1000;
  if (now_ms - timestamp_ms > tolerance_ms) {
    return unauthenticated("timestamp is older than the tolerance of " +
                           std::to_string(tolerance_ms / 1000) + " s (stale or replayed)");
  }
  if (timestamp_ms - now_ms > tolerance_ms) {
    return unauthenticated("timestamp is in the future beyond the tolerance of " +
                           std::to_string(tolerance_ms / 1000) + " s (check the sender's clock)");
  }

  // Every (secret, signature) pair is compared, matched or not, so the time taken does not say
  // which secret or which entry matched.
  bool matched = false;
  bool matched_v1 = false;
  for (const std::string& secret : secrets) {
    const std::string expected = signature_hex(secret, ns, *timestamp, body);
    for (const std::string& signature : signatures) {
      matched = constant_time_equal(expected, signature) || matched;
    }
    if (v1_signatures.empty()) continue;
    const std::string expected_v1 = signature_hex(secret, std::nullopt, *timestamp, body);
    for (const std::string& signature : v1_signatures) {
      matched_v1 = constant_time_equal(expected_v1, signature) || matched_v1;
    }
  }
  if (!matched && !matched_v1) {
    return unauthenticated("no signature matches a configured secret for namespace " +
                           std::string(ns));
  }

  WebhookVerified verified;
  verified.legacy_v1 = !matched;
  verified.timestamp_ms = timestamp_ms;
  std::string signed_content;
  signed_content.reserve(timestamp->size() + 1 + body.size());
  signed_content.append(*timestamp).append(".").append(body);
  verified.replay_key = "wh:" + sha256_hex(signed_content);
  const int64_t retain = timestamp_ms + tolerance_ms - now_ms + 1;
  verified.retain_for_ms = retain < 1 ? 1 : retain;
  return verified;
}

// ---- the body ----------------------------------------------------------------------------------

namespace {

// A string field that may be absent or null. Error when present with another type.
Result<std::optional<std::string>> optional_string(const Json& object, const char* key,
                                                   const std::string& where) {
  const Json* v = json_field(object, key);
  if (v == nullptr || v->is_null()) return std::optional<std::string>();
  if (!v->is_string()) return invalid(where + key + " must be a string");
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::string> reason_of(const Json& object, const std::string& where,
                              const std::string& fallback) {
  Result<std::optional<std::string>> reason = optional_string(object, "reason", where);
  if (!reason.ok()) return reason.error();
  if (!reason->has_value()) return fallback;
  const std::string& r = **reason;
  bool printable = !r.empty() && r.size() <= kMaxWebhookReasonBytes;
  for (char c : r) printable = printable && c >= 0x20 && c <= 0x7e;
  if (!printable) {
    return invalid(where + "reason must be 1.." + std::to_string(kMaxWebhookReasonBytes) +
                   " printable ASCII characters");
  }
  return r;
}

Result<WebhookRefreshTarget> target_of(const Json& object, const std::string& where,
                                       const std::string& default_reason) {
  Result<std::optional<std::string>> cid = optional_string(object, "connection_id", where);
  if (!cid.ok()) return cid.error();
  if (!cid->has_value()) return invalid(where + "connection_id is missing");
  if (Status s = validate_connection_id(**cid); !s.ok()) {
    return invalid(where + "connection_id: " + s.error().message);
  }
  WebhookRefreshTarget target;
  target.connection_id = **cid;
  Result<std::optional<std::string>> principal = optional_string(object, "principal", where);
  if (!principal.ok()) return principal.error();
  if (principal->has_value()) {
    Result<Principal> p = Principal::parse(**principal);
    if (!p.ok()) return invalid(where + "principal: " + p.error().message);
    target.principal = std::move(p).value();
  }
  Result<std::string> reason = reason_of(object, where, default_reason);
  if (!reason.ok()) return reason.error();
  target.reason = std::move(reason).value();
  return target;
}

}  // namespace

Result<WebhookRefreshRequest> parse_webhook_refresh(std::string_view body) {
  if (body.size() > kMaxWebhookBodyBytes) {
    return Error(ErrorCode::kTooLarge,
                 "webhook body is over " + std::to_string(kMaxWebhookBodyBytes) + " bytes");
  }
  Result<Json> parsed = parse_json(body, kMaxWebhookBodyBytes);
  if (!parsed.ok()) return invalid("webhook body: " + parsed.error().message);
  const Json& root = *parsed;
  if (!root.is_object()) return invalid("webhook body must be a JSON object");
  const Json* single = json_field(root, "connection_id");
  const Json* list = json_field(root, "connections");
  if (single != nullptr && list != nullptr) {
    return invalid("webhook body has both connection_id and connections; send one");
  }
  if (single == nullptr && list == nullptr) {
    return invalid("webhook body needs connection_id or connections");
  }

  WebhookRefreshRequest request;
  if (single != nullptr) {
    Result<WebhookRefreshTarget> t = target_of(root, "", kDefaultWebhookReason);
    if (!t.ok()) return t.error();
    request.targets.push_back(std::move(t).value());
    return request;
  }

  if (!list->is_array()) return invalid("connections must be an array");
  if (list->empty()) return invalid("connections is empty");
  if (list->size() > kMaxWebhookTargets) {
    return Error(ErrorCode::kTooLarge, "connections has " + std::to_string(list->size()) +
                                           " entries; the limit is " +
                                           std::to_string(kMaxWebhookTargets));
  }
  Result<std::string> default_reason = reason_of(root, "", kDefaultWebhookReason);
  if (!default_reason.ok()) return default_reason.error();

  std::set<std::string> seen;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const Json& entry = (*list)[i];
    const std::string where = "connections[" + std::to_string(i) + "].";
    Result<WebhookRefreshTarget> t = Error();
    if (entry.is_string()) {
      t = target_of(Json{{"connection_id", entry}}, where, *default_reason);
    } else if (entry.is_object()) {
      t = target_of(entry, where, *default_reason);
    } else {
      return invalid("connections[" + std::to_string(i) +
                     "] must be a connection id or an object with connection_id");
    }
    if (!t.ok()) return t.error();
    const std::string key =
        t->connection_id + "\n" + (t->principal ? t->principal->str() : std::string("*"));
    if (seen.insert(key).second) request.targets.push_back(std::move(t).value());
  }
  return request;
}

std::string webhook_accepted_body(const std::vector<WebhookRefreshResult>& results) {
  Json refreshes = Json::array();
  for (const WebhookRefreshResult& r : results) {
    Json j = Json::object({{"connection_id", r.connection_id}});
    if (r.principal) j["principal"] = r.principal->str();
    j["status"] = r.status;
    j["marked_stale"] = r.marked_stale;
    refreshes.push_back(std::move(j));
  }
  Json body = Json::object({{"status", "accepted"}, {"refreshes", std::move(refreshes)}});
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace quiver
