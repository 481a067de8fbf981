#include "shared/caller_token.h"

#include <cmath>
#include <set>
#include <utility>

#include "shared/json.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

// 9999-12-31T23:59:59Z: NumericDates beyond it are refused rather than overflowing milliseconds.
constexpr int64_t kMaxNumericDateSeconds = 253'402'300'799;
constexpr std::size_t kMaxKeyringJsonBytes = 64 * 1024;
constexpr std::size_t kMaxAudienceLength = 128;

Error unauthenticated(std::string message) {
  return Error(ErrorCode::kUnauthenticated, "caller token: " + std::move(message));
}

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

bool is_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool equals_ignoring_ascii_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool is_base64url_char(char c) { return is_alnum(c) || c == '-' || c == '_'; }

bool printable_ascii(std::string_view s, std::size_t max_length) {
  if (s.empty() || s.size() > max_length) return false;
  for (char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

std::string signing_input_signature(std::string_view secret, std::string_view signing_input) {
  return base64url_encode(std::string_view(
      reinterpret_cast<const char*>(hmac_sha256(secret, signing_input).data()), 32));
}

// A NumericDate (RFC 7519 §2): seconds, possibly fractional. nullopt when absent; an error when
// present but not a number in [0, year 9999].
Result<std::optional<int64_t>> numeric_date_ms(const Json& claims, const char* name) {
  const Json* v = json_field(claims, name);
  if (v == nullptr) return std::optional<int64_t>();
  const std::string bad = std::string("`") + name + "` is not a NumericDate (seconds)";
  if (v->is_number_unsigned()) {
    const uint64_t s = v->get<uint64_t>();
    if (s > static_cast<uint64_t>(kMaxNumericDateSeconds)) return unauthenticated(bad);
    return std::optional<int64_t>(static_cast<int64_t>(s) * 1000);
  }
  if (v->is_number_integer()) {
    const int64_t s = v->get<int64_t>();
    if (s < 0 || s > kMaxNumericDateSeconds) return unauthenticated(bad);
    return std::optional<int64_t>(s * 1000);
  }
  if (v->is_number_float()) {
    const double s = v->get<double>();
    if (!std::isfinite(s) || s < 0 || s > static_cast<double>(kMaxNumericDateSeconds)) {
      return unauthenticated(bad);
    }
    return std::optional<int64_t>(static_cast<int64_t>(std::floor(s * 1000.0)));
  }
  return unauthenticated(bad);
}

bool audience_matches(const Json& aud, std::string_view expected) {
  if (aud.is_string()) return aud.get_ref<const std::string&>() == expected;
  if (!aud.is_array()) return false;
  for (const Json& a : aud) {
    if (a.is_string() && a.get_ref<const std::string&>() == expected) return true;
  }
  return false;
}

// Decodes one base64url segment into a JSON object. `what` names the segment in messages; the
// segment's content is never quoted.
Result<Json> decode_json_segment(std::string_view segment, const char* what) {
  std::string bytes;
  if (!base64url_decode(segment, &bytes)) {
    return unauthenticated(std::string(what) + " is not canonical base64url");
  }
  Result<Json> parsed = parse_json(bytes, kMaxTokenBytes);
  if (!parsed.ok()) return unauthenticated(std::string(what) + " is not JSON");
  if (!parsed->is_object()) return unauthenticated(std::string(what) + " is not a JSON object");
  return std::move(parsed).value();
}

}  // namespace

Status validate_key_id(std::string_view kid) {
  if (kid.empty()) return invalid("key id is empty");
  if (kid.size() > kMaxKeyIdLength) {
    return invalid("key id is " + std::to_string(kid.size()) + " characters long; the limit is " +
                   std::to_string(kMaxKeyIdLength));
  }
  for (std::size_t i = 0; i < kid.size(); ++i) {
    const char c = kid[i];
    if (is_alnum(c) || c == '.' || c == '_' || c == '-') continue;
    return invalid("key id has a character outside [A-Za-z0-9._-] at position " +
                   std::to_string(i));
  }
  return Status::Ok();
}

// ---- Keyring -----------------------------------------------------------------------------------

Keyring::Keyring(std::vector<Key> keys) : keys_(std::move(keys)) {
  Sha256 h;
  for (const Key& key : keys_) {
    for (const std::string* part : {&key.kid, &key.secret}) {
      const std::string size = std::to_string(part->size()) + ":";  // length-prefixed: unambiguous
      h.update(reinterpret_cast<const uint8_t*>(size.data()), size.size());
      h.update(reinterpret_cast<const uint8_t*>(part->data()), part->size());
    }
  }
  fingerprint_ = h.finish();
}

Result<Keyring> Keyring::create(std::vector<Key> keys) {
  if (keys.empty()) return invalid("key ring has no keys");
  std::set<std::string, std::less<>> seen;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const Key& key = keys[i];
    Status kid_ok = validate_key_id(key.kid);
    if (!kid_ok.ok()) {
      return invalid("key ring entry " + std::to_string(i) + ": " + kid_ok.error().message);
    }
    if (!seen.insert(key.kid).second) return invalid("key ring has key id " + key.kid + " twice");
    if (key.secret.size() < kMinTokenSecretBytes) {
      return invalid("key " + key.kid + " has a secret of " + std::to_string(key.secret.size()) +
                     " bytes; at least " + std::to_string(kMinTokenSecretBytes) + " are required");
    }
  }
  return Keyring(std::move(keys));
}

Result<Keyring> Keyring::from_json(std::string_view text) {
  if (text.size() > kMaxKeyringJsonBytes) {
    return Error(ErrorCode::kTooLarge,
                 "key ring JSON is over " + std::to_string(kMaxKeyringJsonBytes) + " bytes");
  }
  // parse_json's message quotes the text near the error: it may hold a secret, so it is dropped.
  Result<Json> parsed = parse_json(text, kMaxKeyringJsonBytes);
  if (!parsed.ok()) return invalid("key ring is not valid JSON");
  if (!parsed->is_object())
    return invalid("key ring must be a JSON object {\"<kid>\": \"<secret>\"}");
  std::vector<Key> keys;
  std::size_t i = 0;
  for (auto it = parsed->begin(); it != parsed->end(); ++it, ++i) {
    if (!it.value().is_string()) {
      return invalid("key ring entry " + std::to_string(i) + ": the secret is not a string");
    }
    keys.push_back(Key{it.key(), it.value().get<std::string>()});
  }
  return create(std::move(keys));
}

const std::string* Keyring::secret(std::string_view kid) const {
  for (const Key& key : keys_) {
    if (key.kid == kid) return &key.secret;
  }
  return nullptr;
}

std::vector<std::string> Keyring::key_ids() const {
  std::vector<std::string> ids;
  ids.reserve(keys_.size());
  for (const Key& key : keys_) ids.push_back(key.kid);
  return ids;
}

// ---- mint --------------------------------------------------------------------------------------

Result<std::string> mint_caller_token(std::string_view member_id, std::string_view secret,
                                      std::string_view kid, int64_t now_ms, int64_t ttl_ms,
                                      const MintOptions& options) {
  if (Status s = validate_member_id(member_id); !s.ok()) return s.error();
  if (Status s = validate_key_id(kid); !s.ok()) return s.error();
  if (secret.size() < kMinTokenSecretBytes) {
    return invalid("token secret has " + std::to_string(secret.size()) + " bytes; at least " +
                   std::to_string(kMinTokenSecretBytes) + " are required");
  }
  if (ttl_ms <= 0) return invalid("token lifetime must be positive");
  if (now_ms < 0 || now_ms > kMaxNumericDateSeconds * 1000 - ttl_ms) {
    return invalid("token times are out of range");
  }
  if (!printable_ascii(options.audience, kMaxAudienceLength)) {
    return invalid("token audience must be 1.." + std::to_string(kMaxAudienceLength) +
                   " printable ASCII characters");
  }
  if (options.ns) {
    if (Status s = validate_namespace(*options.ns); !s.ok()) return s.error();
  }
  if (options.jti && !printable_ascii(*options.jti, kMaxTokenIdLength)) {
    return invalid("token id (jti) must be 1.." + std::to_string(kMaxTokenIdLength) +
                   " printable ASCII characters");
  }
  if (options.role && !printable_ascii(*options.role, kMaxTokenRoleLength)) {
    return invalid("token role must be 1.." + std::to_string(kMaxTokenRoleLength) +
                   " printable ASCII characters");
  }

  // Key order as written in the header comment (what JSON.stringify of a literal gives), so a
  // token minted here is byte-identical to one minted by the usual JavaScript code.
  nlohmann::ordered_json header;
  header["alg"] = "HS256";
  header["typ"] = "JWT";
  header["kid"] = std::string(kid);
  nlohmann::ordered_json claims;
  claims["sub"] = std::string(member_id);
  claims["iat"] = now_ms / 1000;
  claims["exp"] = (now_ms + ttl_ms) / 1000;
  claims["aud"] = options.audience;
  if (options.ns) claims["ns"] = *options.ns;
  if (options.jti) claims["jti"] = *options.jti;
  if (options.role) claims["role"] = *options.role;

  std::string signing_input =
      base64url_encode(header.dump()) + "." + base64url_encode(claims.dump());
  std::string signature = signing_input_signature(secret, signing_input);
  return signing_input + "." + signature;
}

// ---- verify ------------------------------------------------------------------------------------

Result<CallerIdentity> verify_caller_token(std::string_view token, const Keyring& keyring,
                                           int64_t now_ms, const VerifyOptions& options) {
  if (token.empty()) return unauthenticated("token is empty");
  if (token.size() > kMaxTokenBytes) {
    return unauthenticated("token is over " + std::to_string(kMaxTokenBytes) + " bytes");
  }
  std::size_t dots[2] = {0, 0};
  int dot_count = 0;
  for (std::size_t i = 0; i < token.size(); ++i) {
    const char c = token[i];
    if (c == '.') {
      if (dot_count == 2) return unauthenticated("token has more than three segments");
      dots[dot_count++] = i;
      continue;
    }
    if (!is_base64url_char(c)) {
      return unauthenticated("token has a character that is not base64url at position " +
                             std::to_string(i));
    }
  }
  if (dot_count != 2) return unauthenticated("token is not a JWT (three dot-separated segments)");
  const std::string_view header_b64 = token.substr(0, dots[0]);
  const std::string_view payload_b64 = token.substr(dots[0] + 1, dots[1] - dots[0] - 1);
  const std::string_view signature_b64 = token.substr(dots[1] + 1);

  Result<Json> header = decode_json_segment(header_b64, "token header");
  if (!header.ok()) return header.error();
  const Json* alg = json_field(*header, "alg");
  if (alg == nullptr || !alg->is_string()) return unauthenticated("token header has no alg");
  if (alg->get_ref<const std::string&>() != "HS256") {
    // Exactly HS256: "none" (unsigned) and every other algorithm are refused, so a token can never
    // choose how it is checked.
    return unauthenticated("token algorithm is not HS256");
  }
  if (const Json* typ = json_field(*header, "typ"); typ != nullptr) {
    // RFC 7515 §4.1.9: a media type, compared case-insensitively.
    if (!typ->is_string() ||
        !equals_ignoring_ascii_case(typ->get_ref<const std::string&>(), "JWT")) {
      return unauthenticated("token type is not JWT");
    }
  }
  if (json_field(*header, "crit") != nullptr) {
    return unauthenticated("token header has critical extensions (crit), none are supported");
  }
  const Json* kid = json_field(*header, "kid");
  if (kid == nullptr || !kid->is_string()) return unauthenticated("token header has no key id");
  const std::string& kid_text = kid->get_ref<const std::string&>();
  if (!validate_key_id(kid_text).ok()) return unauthenticated("token key id is malformed");
  const std::string* secret = keyring.secret(kid_text);
  if (secret == nullptr) return unauthenticated("token was signed with an unknown key id");

  if (signature_b64.empty()) return unauthenticated("token has no signature");
  const std::string expected = signing_input_signature(*secret, token.substr(0, dots[1]));
  if (!constant_time_equal(expected, signature_b64)) {
    return unauthenticated("token signature does not match");
  }

  // Signed by a key we hold: the claims are ours to read.
  Result<Json> claims = decode_json_segment(payload_b64, "token claims");
  if (!claims.ok()) return claims.error();

  std::optional<std::string> sub = json_string(*claims, "sub");
  if (!sub) return unauthenticated("token has no subject (sub)");
  if (!validate_member_id(*sub).ok()) return unauthenticated("token subject is not a member id");

  Result<std::optional<int64_t>> exp = numeric_date_ms(*claims, "exp");
  if (!exp.ok()) return exp.error();
  if (!exp->has_value()) return unauthenticated("token has no expiry (exp)");
  Result<std::optional<int64_t>> nbf = numeric_date_ms(*claims, "nbf");
  if (!nbf.ok()) return nbf.error();
  Result<std::optional<int64_t>> iat = numeric_date_ms(*claims, "iat");
  if (!iat.ok()) return iat.error();

  const int64_t leeway = options.leeway_ms < 0 ? 0 : options.leeway_ms;
  if (now_ms >= **exp + leeway) return unauthenticated("token has expired");
  if (nbf->has_value() && **nbf > now_ms + leeway) {
    return unauthenticated("token is not valid yet (nbf)");
  }
  if (iat->has_value() && **iat > now_ms + leeway) {
    return unauthenticated("token was issued in the future (iat)");
  }

  const Json* aud = json_field(*claims, "aud");
  if (aud == nullptr) return unauthenticated("token has no audience (aud)");
  if (!audience_matches(*aud, options.audience)) {
    return unauthenticated("token is meant for another audience");
  }

  std::optional<std::string> ns;
  if (const Json* ns_field = json_field(*claims, "ns"); ns_field != nullptr) {
    if (!ns_field->is_string() ||
        !validate_namespace(ns_field->get_ref<const std::string&>()).ok()) {
      return unauthenticated("token namespace (ns) is malformed");
    }
    ns = ns_field->get<std::string>();
    if (options.ns && *ns != *options.ns) {
      return unauthenticated("token is meant for another namespace");
    }
  }
  std::optional<std::string> jti;
  if (const Json* jti_field = json_field(*claims, "jti"); jti_field != nullptr) {
    if (!jti_field->is_string() ||
        !printable_ascii(jti_field->get_ref<const std::string&>(), kMaxTokenIdLength)) {
      return unauthenticated("token id (jti) is malformed");
    }
    jti = jti_field->get<std::string>();
  }
  std::optional<std::string> role;
  if (const Json* role_field = json_field(*claims, "role"); role_field != nullptr) {
    if (!role_field->is_string() ||
        !printable_ascii(role_field->get_ref<const std::string&>(), kMaxTokenRoleLength)) {
      return unauthenticated("token role is malformed");
    }
    role = role_field->get<std::string>();
  }

  Result<Principal> principal = Principal::member(*sub);
  if (!principal.ok()) return unauthenticated("token subject is not a member id");
  return CallerIdentity{*sub,           std::move(principal).value(),
                        kid_text,       iat->value_or(0),
                        **exp,          nbf->value_or(0),
                        std::move(ns),  std::move(jti),
                        std::move(role)};
}

// ---- VerifiedTokenCache ------------------------------------------------------------------------

namespace {

// The time checks of verify_caller_token, on claims it has already accepted once.
bool still_in_time(const CallerIdentity& who, int64_t now_ms, int64_t leeway_ms) {
  const int64_t leeway = leeway_ms < 0 ? 0 : leeway_ms;
  if (now_ms >= who.expires_at_ms + leeway) return false;
  if (who.not_before_ms != 0 && who.not_before_ms > now_ms + leeway) return false;
  if (who.issued_at_ms != 0 && who.issued_at_ms > now_ms + leeway) return false;
  return true;
}

bool same_options(const VerifyOptions& a, const VerifyOptions& b) {
  return a.audience == b.audience && a.leeway_ms == b.leeway_ms && a.ns == b.ns;
}

std::size_t identity_bytes(std::string_view token, const CallerIdentity& who) {
  std::size_t bytes =
      sizeof(CallerIdentity) + token.size() * 2 + who.member_id.size() * 2 + who.kid.size();
  if (who.ns) bytes += who.ns->size();
  if (who.jti) bytes += who.jti->size();
  if (who.role) bytes += who.role->size();
  return bytes;
}

}  // namespace

Result<CallerIdentity> VerifiedTokenCache::verify(std::string_view token, const Keyring& keyring,
                                                  int64_t now_ms, const VerifyOptions& options) {
  if (keys_ != keyring.fingerprint() || !same_options(options_, options)) {
    lru_.clear();
    keys_ = keyring.fingerprint();
    options_ = options;
  }
  if (const CallerIdentity* known = lru_.find_if(token, [&](const CallerIdentity& who) {
        return still_in_time(who, now_ms, options.leeway_ms);
      })) {
    return *known;
  }
  lru_.erase(token);  // out of time: verified afresh below, so the error is verify's own
  Result<CallerIdentity> who = verify_caller_token(token, keyring, now_ms, options);
  if (who.ok()) lru_.insert(std::string(token), *who, identity_bytes(token, *who));
  return who;
}

// ---- Authorization header ----------------------------------------------------------------------

Result<std::string> parse_bearer(std::string_view authorization) {
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (!authorization.empty() && is_space(authorization.front())) authorization.remove_prefix(1);
  while (!authorization.empty() && is_space(authorization.back())) authorization.remove_suffix(1);
  if (authorization.empty()) {
    return Error(ErrorCode::kUnauthenticated, "missing Authorization header (Bearer token)");
  }
  constexpr std::string_view kScheme = "Bearer";
  const bool scheme_ok =
      authorization.size() >= kScheme.size() &&
      equals_ignoring_ascii_case(authorization.substr(0, kScheme.size()), kScheme);
  if (!scheme_ok ||
      (authorization.size() > kScheme.size() && !is_space(authorization[kScheme.size()]))) {
    return Error(ErrorCode::kUnauthenticated, "Authorization scheme is not Bearer");
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && is_space(token.front())) token.remove_prefix(1);
  if (token.empty()) return Error(ErrorCode::kUnauthenticated, "Bearer token is empty");
  if (token.size() > kMaxTokenBytes) {
    return Error(ErrorCode::kUnauthenticated,
                 "Bearer token is over " + std::to_string(kMaxTokenBytes) + " bytes");
  }
  for (char c : token) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Error(ErrorCode::kUnauthenticated,
                   "Bearer token contains whitespace or a control character");
    }
  }
  return std::string(token);
}

}  // namespace quiver
