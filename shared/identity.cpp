#include "shared/identity.h"

#include <cstdint>
#include <set>

#include "shared/ascii.h"
#include "shared/json.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {
namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

bool is_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Validates `text` against [A-Za-z0-9<extra>]{1,max}. The message shows the offending character
// position, not the value: ids are not secret, but they may be long or unprintable.
Status validate_charset(std::string_view what, std::string_view text, std::string_view extra,
                        std::size_t max_length) {
  if (text.empty()) return invalid(std::string(what) + " is empty");
  if (text.size() > max_length) {
    return invalid(std::string(what) + " is " + std::to_string(text.size()) +
                   " characters long; the limit is " + std::to_string(max_length));
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_alnum(c) || extra.find(c) != std::string_view::npos) continue;
    return invalid(std::string(what) + " has a character outside [A-Za-z0-9" + std::string(extra) +
                   "] at position " + std::to_string(i));
  }
  return Status::Ok();
}

constexpr std::string_view kConnectionIdExtra = "._-";
constexpr std::string_view kMemberIdExtra = "._@+-";
constexpr std::string_view kNamespaceExtra = "._-";

// Drops the password of a URL's userinfo (`scheme://user:pass@host/...` -> `scheme://user@host/`).
// Everything else stays as configured: a different path or query may select another server.
std::string url_without_password(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  const std::size_t authority_begin = scheme_end + 3;
  std::size_t authority_end = url.find_first_of("/?#", authority_begin);
  if (authority_end == std::string_view::npos) authority_end = url.size();
  const std::string_view authority = url.substr(authority_begin, authority_end - authority_begin);
  const std::size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view userinfo = authority.substr(0, at);
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, authority_begin));
  out += userinfo.substr(0, colon);
  out += url.substr(authority_begin + at);
  return out;
}

// Recipe version: changing what goes into the canonical form changes every hash (each cached
// manifest misses once), so the version is part of the input and bumped with the recipe.
constexpr int kConfigHashRecipe = 1;

struct KindInfo {
  KeyKind kind;
  const char* segment;
  const char* redis_type;
  bool has_cid;
  bool has_principal;
  bool has_digest = false;
};

// The layout in one table, in the order of schema/redis-keys.md.
constexpr KindInfo kKinds[kKeyKindCount] = {
    {KeyKind::kConns, "conns", "SET", false, false},
    {KeyKind::kConn, "conn", "HASH", true, false},
    {KeyKind::kGrants, "grants", "SET", false, true},
    {KeyKind::kManifest, "manifest", "HASH", true, true},
    {KeyKind::kLease, "lease", "STRING", true, true},
    {KeyKind::kFence, "fence", "STRING", true, true},
    {KeyKind::kDisabled, "disabled", "SET", true, true},
    {KeyKind::kPrefs, "prefs", "HASH", true, true},
    {KeyKind::kRevalidate, "revalidate", "STREAM", false, false},
    {KeyKind::kRevalidateGate, "revalidate-gate", "STRING", true, true},
    {KeyKind::kEpoch, "epoch", "STRING", false, false},
    {KeyKind::kGrantees, "grantees", "SET", true, false},
    {KeyKind::kReplay, "replay", "STRING", false, false, true},
    {KeyKind::kInvalidated, "invalidated", "STRING", true, true},
    {KeyKind::kNamespace, "namespace", "STRING", false, false},
};

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

const KindInfo& info(KeyKind kind) {
  const int i = static_cast<int>(kind);
  return kKinds[(i >= 0 && i < kKeyKindCount) ? i : 0];
}

}  // namespace

// ---- identifiers -------------------------------------------------------------------------------

Status validate_connection_id(std::string_view id) {
  return validate_charset("connection id", id, kConnectionIdExtra, kMaxIdLength);
}

Status validate_member_id(std::string_view id) {
  return validate_charset("member id", id, kMemberIdExtra, kMaxIdLength);
}

Status validate_namespace(std::string_view ns) {
  return validate_charset("namespace", ns, kNamespaceExtra, kMaxNamespaceLength);
}

// ---- principals --------------------------------------------------------------------------------

const char* credential_mode_name(CredentialMode mode) {
  switch (mode) {
    case CredentialMode::kUnknown:
      return "unknown";
    case CredentialMode::kShared:
      return "shared";
    case CredentialMode::kPerMember:
      return "per_member";
  }
  return "unknown";
}

CredentialMode credential_mode_from_string(std::string_view text) {
  if (text == "shared") return CredentialMode::kShared;
  if (text == "per_member") return CredentialMode::kPerMember;
  return CredentialMode::kUnknown;
}

Principal Principal::shared() { return Principal(kSharedPrincipal); }

Result<Principal> Principal::member(std::string_view member_id) {
  Status s = validate_member_id(member_id);
  if (!s.ok()) return s.error();
  return Principal(std::string(kMemberPrincipalPrefix) + std::string(member_id));
}

Result<Principal> Principal::parse(std::string_view text) {
  if (text == kSharedPrincipal) return shared();
  const std::string_view prefix = kMemberPrincipalPrefix;
  if (text.substr(0, prefix.size()) != prefix) {
    return invalid("a principal is `shared` or `member/<member id>`");
  }
  return member(text.substr(prefix.size()));
}

std::string_view Principal::member_id() const {
  if (is_shared()) return {};
  return std::string_view(value_).substr(std::string_view(kMemberPrincipalPrefix).size());
}

Result<Principal> principal_for(CredentialMode mode, std::string_view member_id) {
  switch (mode) {
    case CredentialMode::kShared:
      return Principal::shared();
    case CredentialMode::kPerMember:
      return Principal::member(member_id);
    case CredentialMode::kUnknown:
      break;
  }
  return invalid("unknown credential mode: expected `shared` or `per_member`");
}

// ---- config_hash -------------------------------------------------------------------------------

const char* transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::kUnknown:
      return "unknown";
    case TransportKind::kStdio:
      return "stdio";
    case TransportKind::kHttp:
      return "http";
  }
  return "unknown";
}

TransportKind transport_kind_from_string(std::string_view text) {
  if (text == "stdio") return TransportKind::kStdio;
  if (text == "http") return TransportKind::kHttp;
  return TransportKind::kUnknown;
}

const char* auth_type_name(AuthType type) {
  switch (type) {
    case AuthType::kUnknown:
      return "unknown";
    case AuthType::kNone:
      return "none";
    case AuthType::kBearer:
      return "bearer";
    case AuthType::kApiKey:
      return "api_key";
    case AuthType::kHeaders:
      return "headers";
    case AuthType::kOAuth:
      return "oauth";
  }
  return "unknown";
}

AuthType auth_type_from_string(std::string_view text) {
  for (AuthType t : {AuthType::kNone, AuthType::kBearer, AuthType::kApiKey, AuthType::kHeaders,
                     AuthType::kOAuth}) {
    if (text == auth_type_name(t)) return t;
  }
  return AuthType::kUnknown;
}

Result<std::string> config_identity_canonical(const ConnectionIdentity& id) {
  auto check_utf8 = [](const char* field, std::string_view value) -> Status {
    if (is_valid_utf8(value)) return Status::Ok();
    return invalid(std::string("connection ") + field + " is not valid UTF-8");
  };

  if (id.auth_type == AuthType::kUnknown) return invalid("connection auth type is unknown");
  if (id.credential_mode == CredentialMode::kUnknown) {
    return invalid("connection credential mode is unknown");
  }
  Status s = check_utf8("credential version", id.credential_version);
  if (!s.ok()) return s.error();

  // nlohmann's object is a std::map: keys serialize sorted, whatever order they were set in.
  Json canon = Json::object();
  canon["v"] = kConfigHashRecipe;
  canon["transport"] = transport_kind_name(id.transport);
  canon["auth"] = auth_type_name(id.auth_type);
  canon["credential_mode"] = credential_mode_name(id.credential_mode);
  canon["credential_version"] = id.credential_version;

  switch (id.transport) {
    case TransportKind::kStdio: {
      if (id.command.empty()) return invalid("stdio connection has no command");
      if (!(s = check_utf8("command", id.command)).ok()) return s.error();
      Json args = Json::array();
      for (const std::string& a : id.args) {
        if (!(s = check_utf8("argument", a)).ok()) return s.error();
        args.push_back(a);
      }
      Json env_names = Json::array();  // std::map: sorted and unique already
      for (const auto& [name, value] : id.env) {
        if (!(s = check_utf8("env var name", name)).ok()) return s.error();
        env_names.push_back(name);
      }
      canon["command"] = id.command;
      canon["args"] = std::move(args);
      canon["env_names"] = std::move(env_names);
      break;
    }
    case TransportKind::kHttp: {
      if (id.url.empty()) return invalid("http connection has no URL");
      if (!(s = check_utf8("URL", id.url)).ok()) return s.error();
      std::set<std::string> names;  // HTTP header names are case-insensitive
      for (const auto& [name, value] : id.headers) {
        if (!(s = check_utf8("header name", name)).ok()) return s.error();
        names.insert(ascii_lower(name));
      }
      canon["url"] = url_without_password(id.url);
      canon["header_names"] = Json(names);
      break;
    }
    case TransportKind::kUnknown:
      return invalid("connection transport is unknown");
  }
  // Every string was checked above; `replace` only makes dump() unable to throw.
  return canon.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<std::string> config_hash(const ConnectionIdentity& identity) {
  Result<std::string> canonical = config_identity_canonical(identity);
  if (!canonical.ok()) return canonical.error();
  return sha256_hex(*canonical);
}

// ---- Redis keys --------------------------------------------------------------------------------

const char* key_kind_name(KeyKind kind) { return info(kind).segment; }
const char* key_redis_type(KeyKind kind) { return info(kind).redis_type; }
bool key_has_connection_id(KeyKind kind) { return info(kind).has_cid; }
bool key_has_principal(KeyKind kind) { return info(kind).has_principal; }
bool key_has_digest(KeyKind kind) { return info(kind).has_digest; }

const std::vector<std::string>& key_fields(KeyKind kind) {
  namespace f = redis_field;
  static const std::vector<std::string> kNone;
  static const std::vector<std::string> kConnFields = {f::kConfigHash, f::kCredentialMode, f::kName,
                                                       f::kTransport, f::kUpdatedAt};
  static const std::vector<std::string> kManifestFields = {
      f::kManifest,     f::kEtag,      f::kConfigHash, f::kFence,        f::kFetchedAt,
      f::kFreshUntil,   f::kExpiresAt, f::kCacheScope, f::kTruncated,    f::kErrorCode,
      f::kErrorMessage, f::kErrorAt,   f::kAttemptAt};
  static const std::vector<std::string> kRevalidateFields = {f::kCid, f::kPrincipal, f::kReason,
                                                             f::kAt};
  switch (kind) {
    case KeyKind::kConn:
      return kConnFields;
    case KeyKind::kManifest:
      return kManifestFields;
    case KeyKind::kRevalidate:
      return kRevalidateFields;
    default:
      return kNone;
  }
}

RedisKeys::RedisKeys(std::string ns) : ns_(std::move(ns)), prefix_("quiver:{" + ns_ + "}:") {}

Result<RedisKeys> RedisKeys::create(std::string_view ns) {
  Status s = validate_namespace(ns);
  if (!s.ok()) return s.error();
  return RedisKeys(std::string(ns));
}

Result<std::string> RedisKeys::key(KeyKind kind, std::string_view cid,
                                   const std::optional<Principal>& principal,
                                   std::string_view digest) const {
  const KindInfo& k = info(kind);
  std::string out = prefix_ + k.segment;
  if (k.has_cid) {
    Status s = validate_connection_id(cid);
    if (!s.ok()) return s.error();
    out += ':';
    out += cid;
  }
  if (k.has_principal) {
    if (!principal.has_value()) return invalid(std::string(k.segment) + " key needs a principal");
    if (kind == KeyKind::kGrants && principal->is_shared()) {
      return invalid("grants are kept per member: a `member/<id>` principal is required");
    }
    out += ':';
    out += principal->str();
  }
  if (k.has_digest) {
    if (!is_sha256_hex(digest)) {
      return invalid(std::string(k.segment) + " key needs a digest of 64 lowercase hex digits");
    }
    out += ':';
    out += digest;
  }
  return out;
}

std::string RedisKeys::conns() const { return prefix_ + key_kind_name(KeyKind::kConns); }
std::string RedisKeys::revalidate_stream() const {
  return prefix_ + key_kind_name(KeyKind::kRevalidate);
}
std::string RedisKeys::epoch() const { return prefix_ + key_kind_name(KeyKind::kEpoch); }
std::string RedisKeys::namespace_record() const {
  return prefix_ + key_kind_name(KeyKind::kNamespace);
}
std::string RedisKeys::replay(std::string_view signed_id) const {
  return prefix_ + key_kind_name(KeyKind::kReplay) + ":" + sha256_hex(signed_id);
}
Result<std::string> RedisKeys::grantees(std::string_view cid) const {
  return key(KeyKind::kGrantees, cid, std::nullopt);
}

Result<std::string> RedisKeys::invalidated(std::string_view cid,
                                           const Principal& principal) const {
  return key(KeyKind::kInvalidated, cid, principal);
}

Result<std::string> RedisKeys::conn(std::string_view cid) const {
  return key(KeyKind::kConn, cid, std::nullopt);
}
Result<std::string> RedisKeys::grants(const Principal& member) const {
  return key(KeyKind::kGrants, {}, member);
}
Result<std::string> RedisKeys::manifest(std::string_view cid, const Principal& principal) const {
  return key(KeyKind::kManifest, cid, principal);
}
Result<std::string> RedisKeys::lease(std::string_view cid, const Principal& principal) const {
  return key(KeyKind::kLease, cid, principal);
}
Result<std::string> RedisKeys::fence(std::string_view cid, const Principal& principal) const {
  return key(KeyKind::kFence, cid, principal);
}
Result<std::string> RedisKeys::disabled(std::string_view cid, const Principal& principal) const {
  return key(KeyKind::kDisabled, cid, principal);
}
Result<std::string> RedisKeys::prefs(std::string_view cid, const Principal& principal) const {
  return key(KeyKind::kPrefs, cid, principal);
}
Result<std::string> RedisKeys::revalidate_gate(std::string_view cid,
                                               const Principal& principal) const {
  return key(KeyKind::kRevalidateGate, cid, principal);
}

std::string RedisKeys::manifest_match_pattern() const {
  // Namespaces, connection ids and principals hold no glob characters (*?[]\), so the prefix
  // matches literally.
  return prefix_ + key_kind_name(KeyKind::kManifest) + ":*";
}

Result<ParsedKey> RedisKeys::parse(std::string_view key) const {
  if (key.substr(0, prefix_.size()) != prefix_) {
    return invalid("not a key of namespace `" + ns_ + "`");
  }
  std::string_view rest = key.substr(prefix_.size());
  // No identifier contains ':', so the segments split unambiguously.
  std::vector<std::string_view> parts;
  while (true) {
    const std::size_t colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  for (const KindInfo& k : kKinds) {
    if (parts[0] != k.segment) continue;
    const std::size_t expected =
        1 + (k.has_cid ? 1 : 0) + (k.has_principal ? 1 : 0) + (k.has_digest ? 1 : 0);
    if (parts.size() != expected) {
      return invalid(std::string(k.segment) + " key has " + std::to_string(parts.size()) +
                     " segments after the namespace; expected " + std::to_string(expected));
    }
    ParsedKey out;
    out.kind = k.kind;
    std::size_t next = 1;
    if (k.has_cid) {
      Status s = validate_connection_id(parts[next]);
      if (!s.ok()) return s.error();
      out.connection_id = std::string(parts[next++]);
    }
    if (k.has_principal) {
      Result<Principal> p = Principal::parse(parts[next++]);
      if (!p.ok()) return p.error();
      if (k.kind == KeyKind::kGrants && p->is_shared()) {
        return invalid("grants key with the `shared` principal");
      }
      out.principal = std::move(*p);
    }
    if (k.has_digest) {
      if (!is_sha256_hex(parts[next])) return invalid("replay key without a SHA-256 digest");
      out.digest = std::string(parts[next]);
    }
    return out;
  }
  return invalid("unknown key kind after the namespace prefix");
}

Result<ParsedKey> RedisKeys::parse_manifest_key(std::string_view key) const {
  Result<ParsedKey> parsed = parse(key);
  if (!parsed.ok()) return parsed.error();
  if (parsed->kind != KeyKind::kManifest) return invalid("not a manifest key");
  return parsed;
}

}  // namespace quiver
