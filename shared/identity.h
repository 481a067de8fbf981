// Identity: whose manifest a cache entry is, which configuration it was listed under, and the one
// place that spells every Redis key.
//
// - Identifiers (connection ids, member ids, namespaces) are validated here against the charsets
//   of schema/redis-keys.md; none of them can contain `:`, `{`, `}` or `/`, so a key built from
//   them parses back unambiguously and cannot escape its namespace's hash tag.
// - A Principal is what a cache entry belongs to: `shared` for a shared-credential connection,
//   `member/<id>` for a per-member one. `principal_for` derives it from the connection's credential
//   mode; every key that holds per-principal data carries it.
// - `config_hash` digests the connection's non-secret identity (transport, command and args or
//   URL, auth type, credential mode and version, header and env var names). Data listed under
//   another config_hash is a miss (see shared/freshness.h). Secret values never enter it.
// - `RedisKeys` builds (and parses back) every key of the layout. Nothing else in the code base
//   concatenates key strings; tests/shared/redis_keys_doc_test.cpp ties it to the document.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/status.h"

namespace quiver {

// ---- identifiers -------------------------------------------------------------------------------

inline constexpr char kDefaultNamespace[] = "default";
inline constexpr std::size_t kMaxIdLength = 128;  // connection and member ids
inline constexpr std::size_t kMaxNamespaceLength = 64;

Status validate_connection_id(std::string_view id);  // [A-Za-z0-9._-]{1,128}
Status validate_member_id(std::string_view id);      // [A-Za-z0-9._@+-]{1,128}
Status validate_namespace(std::string_view ns);      // [A-Za-z0-9._-]{1,64}

// ---- principals --------------------------------------------------------------------------------

enum class CredentialMode { kUnknown = 0, kShared, kPerMember };
const char* credential_mode_name(CredentialMode mode);  // "unknown", "shared", "per_member"
CredentialMode credential_mode_from_string(std::string_view text);  // kUnknown if not a name

inline constexpr char kSharedPrincipal[] = "shared";
inline constexpr char kMemberPrincipalPrefix[] = "member/";

// A validated principal string. Only these factories make one, so a Principal in hand is always
// safe to put in a key.
class Principal {
 public:
  static Principal shared();
  static Result<Principal> member(std::string_view member_id);
  static Result<Principal> parse(std::string_view text);  // "shared" or "member/<member id>"

  const std::string& str() const { return value_; }
  bool is_shared() const { return value_ == kSharedPrincipal; }
  std::string_view member_id() const;  // empty for `shared`

  bool operator==(const Principal& other) const { return value_ == other.value_; }
  bool operator!=(const Principal& other) const { return value_ != other.value_; }

 private:
  explicit Principal(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

// Shared mode: `shared` (the member id is not looked at). Per-member mode: `member/<id>`, the id
// validated. Unknown mode: kInvalidArgument.
Result<Principal> principal_for(CredentialMode mode, std::string_view member_id);

// ---- config_hash -------------------------------------------------------------------------------

enum class TransportKind { kUnknown = 0, kStdio, kHttp };
const char* transport_kind_name(TransportKind kind);  // "unknown", "stdio", "http"
TransportKind transport_kind_from_string(std::string_view text);

enum class AuthType { kUnknown = 0, kNone, kBearer, kApiKey, kHeaders, kOAuth };
const char* auth_type_name(
    AuthType type);  // "unknown", "none", "bearer", "api_key", "headers", "oauth"
AuthType auth_type_from_string(std::string_view text);

// A connection's configuration as far as it decides what an upstream lists. `env` and `headers`
// may be passed with their (secret) values, straight from the configuration: only their names are
// used. Rotating a secret does not change the hash; bump `credential_version` for that.
struct ConnectionIdentity {
  TransportKind transport = TransportKind::kUnknown;
  std::string command;                         // stdio
  std::vector<std::string> args;               // stdio; order matters
  std::map<std::string, std::string> env;      // stdio; names only are hashed
  std::string url;                             // http; a password in it is not hashed
  std::map<std::string, std::string> headers;  // http; names only are hashed (case-insensitive)
  AuthType auth_type = AuthType::kUnknown;
  CredentialMode credential_mode = CredentialMode::kUnknown;
  std::string credential_version;  // bumped when credentials are rotated
};

// The canonical JSON the hash is taken over (sorted keys, a recipe version `v`). It holds no
// header or env values and no URL password; args and the URL query are included as configured.
// kInvalidArgument for an unknown transport, auth type or credential mode, a missing command or
// URL, or a string that is not UTF-8 (the message names the field, never its value).
Result<std::string> config_identity_canonical(const ConnectionIdentity& identity);
// sha256 hex (64 lowercase digits) of config_identity_canonical.
Result<std::string> config_hash(const ConnectionIdentity& identity);

// ---- Redis keys --------------------------------------------------------------------------------

// Every key of the layout, in the order of schema/redis-keys.md.
enum class KeyKind {
  kConns = 0,
  kConn,
  kGrants,
  kManifest,
  kLease,
  kFence,
  kDisabled,
  kPrefs,
  kRevalidate,
  kRevalidateGate,
  kEpoch,
  kGrantees,
  kReplay,
  kInvalidated,
  kNamespace,
};
inline constexpr int kKeyKindCount = 15;

const char* key_kind_name(KeyKind kind);   // the key's segment: "conns", "revalidate-gate", ...
const char* key_redis_type(KeyKind kind);  // "SET", "HASH", "STRING", "STREAM"
bool key_has_connection_id(KeyKind kind);
bool key_has_principal(KeyKind kind);
bool key_has_digest(KeyKind kind);  // a 64-hex-digit SHA-256 segment (replay)
// HASH fields or STREAM entry fields; empty for other types.
const std::vector<std::string>& key_fields(KeyKind kind);

// The namespace record (RedisKeys::namespace_record): `<state>:<at>`. Readers serve the namespace
// only while it is `ready:<at>`; absent (a Redis restarted empty, a FLUSHALL, a failover to an
// empty replica) or `restoring:<at>` they answer that the store is not ready. Agents write
// `restoring:` with SET NX before re-syncing, and `ready:` with SET XX afterwards: a wipe in
// between deletes the record, so the XX write does not mark a half-restored namespace ready.
inline constexpr char kNamespaceReady[] = "ready";
inline constexpr char kNamespaceRestoring[] = "restoring";

// The consumer group that agents read the revalidation stream with.
inline constexpr char kRevalidateConsumerGroup[] = "quiver-agents";

// Field names of the hashes and the stream, as documented in schema/redis-keys.md.
namespace redis_field {
// conn:<cid>
inline constexpr char kConfigHash[] = "config_hash";
inline constexpr char kCredentialMode[] = "credential_mode";
inline constexpr char kName[] = "name";
inline constexpr char kTransport[] = "transport";
inline constexpr char kUpdatedAt[] = "updated_at";
// manifest:<cid>:<principal> (also config_hash)
inline constexpr char kManifest[] = "manifest";
inline constexpr char kEtag[] = "etag";
inline constexpr char kFence[] = "fence";
inline constexpr char kFetchedAt[] = "fetched_at";
inline constexpr char kFreshUntil[] = "fresh_until";
inline constexpr char kExpiresAt[] = "expires_at";
inline constexpr char kCacheScope[] = "cache_scope";
inline constexpr char kTruncated[] = "truncated";
inline constexpr char kErrorCode[] = "error_code";
inline constexpr char kErrorMessage[] = "error_message";
inline constexpr char kErrorAt[] = "error_at";
inline constexpr char kAttemptAt[] = "attempt_at";
// Not a field of the hash: the value of invalidated:<cid>:<principal> (kept apart so that the
// edge's Redis user, which may write invalidation marks, never writes a manifest hash). Readers
// hand it to meta decoding under this name.
inline constexpr char kInvalidatedAt[] = "invalidated_at";
// revalidate stream entries
inline constexpr char kCid[] = "cid";
inline constexpr char kPrincipal[] = "principal";
inline constexpr char kReason[] = "reason";
inline constexpr char kAt[] = "at";
}  // namespace redis_field

struct ParsedKey {
  KeyKind kind = KeyKind::kConns;
  std::string connection_id;           // empty when the kind has none
  std::optional<Principal> principal;  // nullopt when the kind has none
  std::string digest;                  // empty when the kind has none
};

class RedisKeys {
 public:
  // kInvalidArgument unless `ns` is a valid namespace.
  static Result<RedisKeys> create(std::string_view ns = kDefaultNamespace);

  const std::string& ns() const { return ns_; }
  const std::string& prefix() const { return prefix_; }  // "quiver:{<ns>}:"

  std::string conns() const;
  Result<std::string> conn(std::string_view cid) const;
  Result<std::string> grants(const Principal& member) const;  // a `member/<id>` principal only
  Result<std::string> manifest(std::string_view cid, const Principal& principal) const;
  Result<std::string> lease(std::string_view cid, const Principal& principal) const;
  Result<std::string> fence(std::string_view cid, const Principal& principal) const;
  // The disabled overlay of one (connection, principal), and the preference rows it derives from
  // (shared/preferences.h): `shared` on a shared connection, the member on a per-member one.
  Result<std::string> disabled(std::string_view cid, const Principal& principal) const;
  Result<std::string> prefs(std::string_view cid, const Principal& principal) const;
  std::string revalidate_stream() const;
  Result<std::string> revalidate_gate(std::string_view cid, const Principal& principal) const;
  std::string epoch() const;
  Result<std::string> grantees(std::string_view cid) const;
  // The replay guard of one signed webhook: `signed_id` is WebhookVerified::replay_key
  // (shared/webhook_signature.h); the key holds its SHA-256, so any id length fits.
  std::string replay(std::string_view signed_id) const;
  // When a refresh webhook last marked the (connection, principal)'s data stale (a STRING of
  // epoch ms): written by agents and edges, read with the manifest.
  Result<std::string> invalidated(std::string_view cid, const Principal& principal) const;
  // The namespace record (kNamespaceReady): whether agents have synced connections, grants and
  // overlays into this namespace since the store last lost its data. Every reader checks it.
  std::string namespace_record() const;

  // Any kind. Parts the kind does not use are ignored; the ones it uses are validated
  // (`digest`: 64 lowercase hex digits).
  Result<std::string> key(KeyKind kind, std::string_view cid,
                          const std::optional<Principal>& principal,
                          std::string_view digest = {}) const;

  // SCAN MATCH pattern for every manifest key of the namespace (maintenance).
  std::string manifest_match_pattern() const;

  // The inverse of the builders, for keys of this namespace only.
  Result<ParsedKey> parse(std::string_view key) const;
  Result<ParsedKey> parse_manifest_key(std::string_view key) const;  // a manifest key only

 private:
  explicit RedisKeys(std::string ns);
  std::string ns_;
  std::string prefix_;
};

}  // namespace quiver
