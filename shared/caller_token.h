// Caller tokens: the bearer tokens that identify a caller (a member) to the edge and to the agent's
// HTTP API, and the key ring that verifies them.
//
// Why: both public faces must map `Authorization: Bearer <token>` to the same principal, with the
// same rules, in native code and in wasm. The scheme is a standard JWT (RFC 7519) in compact form,
// HS256 only, so any JWT library can mint one: header `{"alg":"HS256","typ":"JWT","kid":"<key
// id>"}`, claims `sub` (member id), `iat`, `exp` (seconds), `aud` (default "quiver"), optional
// `nbf`, `ns` (deployment namespace), `jti` and `role` ("operator": the caller may use the agent's
// admin API; any other role grants nothing more than a member has). A principal never comes from
// anywhere else.
//
// When to call what:
//  - at start-up, `Keyring::create` (or `Keyring::from_json` for the `{"kid": "secret"}` text a
//    host reads from its environment). Several keys may be live at once: add the new key, mint
//    with it, drop the old one after the longest token lifetime.
//  - per request, `parse_bearer(header value)` then `verify_caller_token(...)`. Every failure is
//    kUnauthenticated (answer 401); the message says why, and never contains the token, a key id
//    the caller sent, or a secret, so it may be logged and returned.
//  - `mint_caller_token` for the CLI (`quiver-agent token`) and tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/bounded_lru.h"
#include "shared/identity.h"
#include "shared/sha256.h"
#include "shared/status.h"

namespace quiver {

inline constexpr char kDefaultTokenAudience[] = "quiver";
inline constexpr std::size_t kMinTokenSecretBytes = 32;   // HS256 wants a key as long as its hash
inline constexpr std::size_t kMaxTokenBytes = 4096;       // longer tokens are refused unread
inline constexpr std::size_t kMaxKeyIdLength = 64;        // key ids: [A-Za-z0-9._-]{1,64}
inline constexpr std::size_t kMaxTokenIdLength = 128;     // `jti`: printable ASCII, 1..128
inline constexpr std::size_t kMaxTokenRoleLength = 64;    // `role`: printable ASCII, 1..64
inline constexpr char kOperatorRole[] = "operator";       // the role of the admin API's callers
inline constexpr int64_t kDefaultTokenLeewayMs = 60'000;  // clock skew tolerated on exp/nbf/iat

Status validate_key_id(std::string_view kid);

// The secrets tokens are signed with, by key id. Immutable once built.
class Keyring {
 public:
  struct Key {
    std::string kid;
    std::string secret;  // raw bytes, at least kMinTokenSecretBytes
  };

  // kInvalidArgument for no keys, an invalid or repeated key id, or a secret shorter than
  // kMinTokenSecretBytes (the message names the key id, never the secret).
  static Result<Keyring> create(std::vector<Key> keys);
  // `{"<kid>": "<secret>", ...}`: each secret a JSON string used as its UTF-8 bytes. The same
  // rules as `create`; a malformed text is reported without quoting it.
  static Result<Keyring> from_json(std::string_view text);

  const std::string* secret(std::string_view kid) const;  // nullptr when unknown
  std::vector<std::string> key_ids() const;               // in the order given
  std::size_t size() const { return keys_.size(); }
  // SHA-256 over every key id and secret, in order: what a VerifiedTokenCache compares to know its
  // entries were verified against these very keys (a rotated or dropped key changes it).
  const Digest256& fingerprint() const { return fingerprint_; }

 private:
  explicit Keyring(std::vector<Key> keys);
  std::vector<Key> keys_;
  Digest256 fingerprint_{};
};

struct MintOptions {
  std::string audience = kDefaultTokenAudience;
  std::optional<std::string> ns;    // deployment namespace the token is meant for
  std::optional<std::string> jti;   // a unique id, if the host wants one (randomness comes in)
  std::optional<std::string> role;  // the `role` claim: kOperatorRole for an operator's token
};

// A signed token for `member_id`: iat = floor(now_ms / 1000), exp = floor((now_ms + ttl_ms) /
// 1000). kInvalidArgument for an invalid member id, key id, namespace, jti or role, a secret
// shorter than kMinTokenSecretBytes, a ttl_ms that is not positive, or an empty audience.
Result<std::string> mint_caller_token(std::string_view member_id, std::string_view secret,
                                      std::string_view kid, int64_t now_ms, int64_t ttl_ms,
                                      const MintOptions& options = {});

struct VerifyOptions {
  std::string audience = kDefaultTokenAudience;  // `aud` must be it (or an array holding it)
  int64_t leeway_ms = kDefaultTokenLeewayMs;     // 0..; applied to exp, nbf and iat
  // When set, a token that carries `ns` must carry this one (a token without `ns` is accepted).
  std::optional<std::string> ns;
};

struct CallerIdentity {
  std::string member_id;
  Principal principal;       // member/<member_id>
  std::string kid;           // the key that signed it
  int64_t issued_at_ms = 0;  // 0 when the token has no iat
  int64_t expires_at_ms = 0;
  int64_t not_before_ms = 0;  // 0 when the token has no nbf
  std::optional<std::string> ns;
  std::optional<std::string> jti;
  std::optional<std::string> role;  // the `role` claim as signed (kOperatorRole: an operator)
  bool is_operator() const { return role && *role == kOperatorRole; }
};

// Checks, in order: size (<= kMaxTokenBytes), charset (base64url and exactly two dots: no
// whitespace, no extra segments), header (a JSON object; alg exactly "HS256", so "none", "hs256",
// "HS512" and "RS256" are all refused; typ "JWT" (any case) when present; no `crit`; a known kid),
// the signature (HMAC-SHA256 over `header.payload`, compared in constant time with the canonical
// encoding), then the claims: sub a valid member id, exp required and not passed (now >= exp +
// leeway is expired), nbf and iat not in the future beyond the leeway, aud, ns, jti, role.
// kUnauthenticated on any failure.
Result<CallerIdentity> verify_caller_token(std::string_view token, const Keyring& keyring,
                                           int64_t now_ms, const VerifyOptions& options = {});

// The tokens a process has verified, so that a caller's next requests skip the signature and the
// JSON (at the agent's API, HMAC and parsing were about a fifth of a cached discovery read).
// Keyed by the whole token: a hit means these exact bytes passed `verify_caller_token` against a
// ring with the same keys (`Keyring::fingerprint`) and the same options. The time claims (exp, nbf,
// iat) are checked again on every hit, and a token that no longer passes them is verified afresh,
// so every answer, error message included, is the one `verify_caller_token` gives. Failures are
// never kept. A new key ring or other options empty the cache. Bounded by entries and bytes (least
// recently used first out); not thread-safe: a host that shares one across threads locks around
// `verify`.
inline constexpr std::size_t kVerifiedTokenCacheEntries = 4096;
inline constexpr std::size_t kVerifiedTokenCacheBytes = 8u << 20;

class VerifiedTokenCache {
 public:
  explicit VerifiedTokenCache(std::size_t max_entries = kVerifiedTokenCacheEntries,
                              std::size_t max_bytes = kVerifiedTokenCacheBytes)
      : lru_(max_entries, max_bytes) {}

  Result<CallerIdentity> verify(std::string_view token, const Keyring& keyring, int64_t now_ms,
                                const VerifyOptions& options = {});
  std::size_t size() const { return lru_.size(); }
  const LruStats& stats() const { return lru_.stats(); }

 private:
  BoundedLru<CallerIdentity> lru_;
  std::optional<Digest256> keys_;  // the fingerprint of the ring the entries were verified with
  VerifyOptions options_;
};

// The token of an `Authorization` header value: `Bearer <token>`, the scheme case-insensitive,
// one or more spaces before the token, surrounding spaces and tabs ignored. kUnauthenticated for
// a missing value, another scheme, an empty token, or a token holding whitespace or over
// kMaxTokenBytes. The token is not verified.
Result<std::string> parse_bearer(std::string_view authorization);

}  // namespace quiver
