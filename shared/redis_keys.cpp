#include "shared/redis_keys.h"

#include <cstdint>

#include "shared/sha256.h"

namespace quiver {
namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

struct KindInfo {
  KeyKind kind;
  const char* segment;
  const char* redis_type;
  bool has_cid;
  bool has_principal;
  bool has_digest = false;
  bool has_catalog_kind = false;
  const char* suffix = nullptr;  // a fixed last segment (catalog:<kind>:keys, catalog:versions)
};

// The layout in one table, in the order of KeyKind (schema/redis-keys.md's, kMarked aside).
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
    {KeyKind::kCatalog, "catalog", "HASH", false, false, false, true},
    {KeyKind::kCatalogKeys, "catalog", "ZSET", false, false, false, true, "keys"},
    {KeyKind::kCatalogVersions, "catalog", "HASH", false, false, false, false, "versions"},
    {KeyKind::kAudit, "audit", "STREAM", false, false},
    {KeyKind::kOAuthCallbacks, "oauth-callbacks", "STREAM", false, false},
    {KeyKind::kOAuthResult, "oauth-result", "STRING", false, false, true},
    {KeyKind::kBody, "body", "STRING", false, false, true},
    {KeyKind::kCalls, "calls", "STREAM", false, false},
    {KeyKind::kCallReply, "call-reply", "LIST", false, false, true},
    {KeyKind::kCallAgents, "call-agents", "STRING", false, false},
    {KeyKind::kCallCancel, "call-cancel", "STRING", false, false, true},
    {KeyKind::kMarked, "marked", "STRING", true, false},
    {KeyKind::kDue, "due", "ZSET", false, false},
    {KeyKind::kDueBackfill, "due-backfill", "STRING", false, false},
    {KeyKind::kRemovedConns, "removed-conns", "SET", false, false},
    {KeyKind::kGrantMembers, "grant-members", "SET", false, false},
    {KeyKind::kGrantMembersBackfill, "grant-members-backfill", "STRING", false, false},
    {KeyKind::kGranteesPending, "grantees-pending", "SET", false, false},
    {KeyKind::kConnVersion, "conn-version", "STRING", true, false},
    {KeyKind::kMemberVersion, "member-version", "STRING", false, true},
    {KeyKind::kLayout, "layout", "STRING", false, false},
};

constexpr char kCatalogVersionsSegment[] = "versions";

bool is_catalog_kind_segment(std::string_view s) {
  if (s.empty() || s.size() > 32 || s == kCatalogVersionsSegment) return false;
  for (char c : s) {
    if (c < 'a' || c > 'z') return false;
  }
  return true;
}

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

const char* key_kind_name(KeyKind kind) { return info(kind).segment; }
const char* key_redis_type(KeyKind kind) { return info(kind).redis_type; }
bool key_has_connection_id(KeyKind kind) { return info(kind).has_cid; }
bool key_has_principal(KeyKind kind) { return info(kind).has_principal; }
bool key_has_digest(KeyKind kind) { return info(kind).has_digest; }
bool key_has_catalog_kind(KeyKind kind) { return info(kind).has_catalog_kind; }

const std::vector<std::string>& key_fields(KeyKind kind) {
  namespace f = redis_field;
  static const std::vector<std::string> kNone;
  static const std::vector<std::string> kConnFields = {f::kConfigHash, f::kCredentialMode, f::kName,
                                                       f::kTransport, f::kUpdatedAt};
  static const std::vector<std::string> kManifestFields = {
      f::kManifest,  f::kBody,         f::kEtag,      f::kConfigHash, f::kFence,
      f::kFetchedAt, f::kFreshUntil,   f::kExpiresAt, f::kCacheScope, f::kTruncated,
      f::kErrorCode, f::kErrorMessage, f::kErrorAt,   f::kAttemptAt};
  static const std::vector<std::string> kRevalidateFields = {f::kCid, f::kPrincipal, f::kReason,
                                                             f::kAt};
  static const std::vector<std::string> kAuditFields = {f::kAt, f::kActor, f::kAction, f::kTarget,
                                                        f::kDetail};
  static const std::vector<std::string> kOAuthCallbackFields = {
      f::kState, f::kCode, f::kIss, f::kError, f::kErrorDescription, f::kAt};
  static const std::vector<std::string> kCallFields = {
      f::kRid, f::kCid, f::kMember, f::kMethod, f::kParams, f::kDeadline, f::kAt};
  switch (kind) {
    case KeyKind::kCalls:
      return kCallFields;
    case KeyKind::kConn:
      return kConnFields;
    case KeyKind::kManifest:
      return kManifestFields;
    case KeyKind::kRevalidate:
      return kRevalidateFields;
    case KeyKind::kAudit:
      return kAuditFields;
    case KeyKind::kOAuthCallbacks:
      return kOAuthCallbackFields;
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
                                   std::string_view digest, std::string_view catalog_kind) const {
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
    if ((kind == KeyKind::kGrants || kind == KeyKind::kMemberVersion) && principal->is_shared()) {
      return invalid(std::string(k.segment) +
                     " is kept per member: a `member/<id>` principal is required");
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
  if (k.has_catalog_kind) {
    if (!is_catalog_kind_segment(catalog_kind)) {
      return invalid(std::string(k.segment) + " key needs a catalog kind ([a-z]{1,32})");
    }
    out += ':';
    out += catalog_kind;
  }
  if (k.suffix != nullptr) {
    out += ':';
    out += k.suffix;
  }
  return out;
}

Result<std::string> due_member(std::string_view cid, const Principal& principal) {
  if (Status s = validate_connection_id(cid); !s.ok()) return s.error();
  return std::string(cid) + ":" + principal.str();
}

Result<DueMember> parse_due_member(std::string_view member) {
  const std::size_t colon = member.find(':');
  if (colon == std::string_view::npos) return invalid("due index member without `:`");
  DueMember out;
  if (Status s = validate_connection_id(member.substr(0, colon)); !s.ok()) return s.error();
  Result<Principal> p = Principal::parse(member.substr(colon + 1));
  if (!p.ok()) return p.error();
  out.connection_id = std::string(member.substr(0, colon));
  out.principal = std::move(*p);
  return out;
}

std::string RedisKeys::due() const { return prefix_ + key_kind_name(KeyKind::kDue); }
std::string RedisKeys::due_backfill() const {
  return prefix_ + key_kind_name(KeyKind::kDueBackfill);
}
std::string RedisKeys::removed_conns() const {
  return prefix_ + key_kind_name(KeyKind::kRemovedConns);
}
std::string RedisKeys::grant_members() const {
  return prefix_ + key_kind_name(KeyKind::kGrantMembers);
}
std::string RedisKeys::grant_members_backfill() const {
  return prefix_ + key_kind_name(KeyKind::kGrantMembersBackfill);
}
std::string RedisKeys::grantees_pending() const {
  return prefix_ + key_kind_name(KeyKind::kGranteesPending);
}

std::string RedisKeys::conns() const { return prefix_ + key_kind_name(KeyKind::kConns); }
std::string RedisKeys::revalidate_stream() const {
  return prefix_ + key_kind_name(KeyKind::kRevalidate);
}
std::string RedisKeys::layout() const { return prefix_ + key_kind_name(KeyKind::kLayout); }
std::string RedisKeys::epoch() const { return prefix_ + key_kind_name(KeyKind::kEpoch); }
std::string RedisKeys::namespace_record() const {
  return prefix_ + key_kind_name(KeyKind::kNamespace);
}
std::string RedisKeys::replay(std::string_view signed_id) const {
  return prefix_ + key_kind_name(KeyKind::kReplay) + ":" + sha256_hex(signed_id);
}
std::string RedisKeys::oauth_callbacks() const {
  return prefix_ + key_kind_name(KeyKind::kOAuthCallbacks);
}
std::string RedisKeys::calls() const { return prefix_ + key_kind_name(KeyKind::kCalls); }
Result<std::string> RedisKeys::call_reply(std::string_view rid) const {
  return key(KeyKind::kCallReply, {}, std::nullopt, rid);
}
std::string RedisKeys::call_agents() const { return prefix_ + key_kind_name(KeyKind::kCallAgents); }
Result<std::string> RedisKeys::call_cancel(std::string_view rid) const {
  return key(KeyKind::kCallCancel, {}, std::nullopt, rid);
}

std::string RedisKeys::oauth_result(std::string_view state) const {
  return prefix_ + key_kind_name(KeyKind::kOAuthResult) + ":" + sha256_hex(state);
}
Result<std::string> RedisKeys::body(std::string_view digest) const {
  return key(KeyKind::kBody, {}, std::nullopt, digest);
}
Result<std::string> RedisKeys::catalog(std::string_view catalog_kind) const {
  return key(KeyKind::kCatalog, {}, std::nullopt, {}, catalog_kind);
}
Result<std::string> RedisKeys::catalog_keys(std::string_view catalog_kind) const {
  return key(KeyKind::kCatalogKeys, {}, std::nullopt, {}, catalog_kind);
}
std::string RedisKeys::catalog_versions() const {
  return *key(KeyKind::kCatalogVersions, {}, std::nullopt);
}
std::string RedisKeys::audit() const { return prefix_ + key_kind_name(KeyKind::kAudit); }
Result<std::string> RedisKeys::grantees(std::string_view cid) const {
  return key(KeyKind::kGrantees, cid, std::nullopt);
}

Result<std::string> RedisKeys::invalidated(std::string_view cid, const Principal& principal) const {
  return key(KeyKind::kInvalidated, cid, principal);
}

Result<std::string> RedisKeys::marked(std::string_view cid) const {
  return key(KeyKind::kMarked, cid, std::nullopt);
}

Result<std::string> RedisKeys::conn_version(std::string_view cid) const {
  return key(KeyKind::kConnVersion, cid, std::nullopt);
}

Result<std::string> RedisKeys::member_version(const Principal& member) const {
  return key(KeyKind::kMemberVersion, {}, member);
}

Result<std::string> RedisKeys::version_of(std::string_view cid, const Principal& principal) const {
  if (principal.is_shared()) return conn_version(cid);
  if (Status s = validate_connection_id(cid); !s.ok()) return s.error();
  return member_version(principal);
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

std::string RedisKeys::namespace_match_pattern() const { return prefix_ + "*"; }

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
    const std::size_t expected = 1 + (k.has_cid ? 1 : 0) + (k.has_principal ? 1 : 0) +
                                 (k.has_digest ? 1 : 0) + (k.has_catalog_kind ? 1 : 0) +
                                 (k.suffix != nullptr ? 1 : 0);
    // Kinds that share a segment (catalog:<kind>, catalog:<kind>:keys, catalog:versions) differ
    // in their segment count and fixed suffix.
    const bool shared_segment = k.has_catalog_kind || k.suffix != nullptr;
    if (shared_segment &&
        (parts.size() != expected || (k.suffix != nullptr && parts.back() != k.suffix) ||
         (k.has_catalog_kind && !is_catalog_kind_segment(parts[1])))) {
      continue;
    }
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
      if ((k.kind == KeyKind::kGrants || k.kind == KeyKind::kMemberVersion) && p->is_shared()) {
        return invalid(std::string(k.segment) + " key with the `shared` principal");
      }
      out.principal = std::move(*p);
    }
    if (k.has_digest) {
      if (!is_sha256_hex(parts[next])) {
        return invalid(std::string(k.segment) + " key without a SHA-256 digest");
      }
      out.digest = std::string(parts[next]);
    }
    if (k.has_catalog_kind) out.catalog_kind = std::string(parts[1]);
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
