#include "shared/redis_keys.h"

#include <cstdint>

#include "shared/redis_cluster.h"
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
    {KeyKind::kAgents, "agents", "ZSET", false, false},
};

// Where layout v2 puts a kind (docs/design.md "Key layout v2", the key table). A kind not listed
// is a namespace-wide record and keeps its v1 spelling under `{<ns>}`.
enum class V2Tag {
  kNamespace,   // quiver:{<ns>}:<v1 spelling>
  kConnection,  // quiver:{<ns>:c:<cid>}:<segment>
  kPrincipal,   // `shared`: quiver:{<ns>:c:<cid>}:<segment>; a member:
                // quiver:{<ns>:m:<member id>}:<segment>:<cid>
  kMember,      // quiver:{<ns>:m:<member id>}:<segment>
  kShard,       // quiver:{<ns>:s:<k>}:<segment>[:<digest>]
  kBody,        // quiver:{<ns>:b:<sha256>}
  kReplay,      // quiver:{<ns>:r:<sha256>}
  kAbsent,      // v1 only
};

struct V2Info {
  KeyKind kind;
  V2Tag tag;
  const char* segment;  // the name after the tag (nullptr: the key is its tag alone, or absent)
};

constexpr V2Info kV2Kinds[] = {
    {KeyKind::kConns, V2Tag::kShard, "conns"},
    {KeyKind::kConn, V2Tag::kConnection, "conn"},
    {KeyKind::kGrants, V2Tag::kMember, "grants"},
    {KeyKind::kManifest, V2Tag::kPrincipal, "manifest"},
    {KeyKind::kLease, V2Tag::kPrincipal, "lease"},
    {KeyKind::kFence, V2Tag::kPrincipal, "fence"},
    {KeyKind::kDisabled, V2Tag::kPrincipal, "disabled"},
    {KeyKind::kPrefs, V2Tag::kPrincipal, "prefs"},
    {KeyKind::kRevalidate, V2Tag::kShard, "revalidate"},
    {KeyKind::kRevalidateGate, V2Tag::kPrincipal, "gate"},
    {KeyKind::kEpoch, V2Tag::kAbsent, nullptr},
    {KeyKind::kGrantees, V2Tag::kConnection, "grantees"},
    {KeyKind::kReplay, V2Tag::kReplay, nullptr},
    {KeyKind::kInvalidated, V2Tag::kPrincipal, "invalidated"},
    {KeyKind::kBody, V2Tag::kBody, nullptr},
    {KeyKind::kCalls, V2Tag::kShard, "calls"},
    {KeyKind::kCallReply, V2Tag::kShard, "call-reply"},
    {KeyKind::kCallAgents, V2Tag::kShard, "call-agents"},
    {KeyKind::kCallCancel, V2Tag::kShard, "call-cancel"},
    {KeyKind::kMarked, V2Tag::kConnection, "marked"},
    {KeyKind::kDue, V2Tag::kShard, "due"},
    {KeyKind::kDueBackfill, V2Tag::kAbsent, nullptr},
    {KeyKind::kRemovedConns, V2Tag::kShard, "removed-conns"},
    {KeyKind::kGrantMembers, V2Tag::kShard, "grant-members"},
    {KeyKind::kGrantMembersBackfill, V2Tag::kAbsent, nullptr},
    {KeyKind::kGranteesPending, V2Tag::kShard, "grantees-pending"},
    {KeyKind::kConnVersion, V2Tag::kConnection, "version"},
    {KeyKind::kMemberVersion, V2Tag::kMember, "version"},
};

constexpr V2Info kV2NamespaceWide = {KeyKind::kNamespace, V2Tag::kNamespace, nullptr};

const V2Info& v2_info(KeyKind kind) {
  for (const V2Info& v : kV2Kinds) {
    if (v.kind == kind) return v;
  }
  return kV2NamespaceWide;
}

// The tag letters of layout v2.
constexpr char kTagConnection = 'c';
constexpr char kTagMember = 'm';
constexpr char kTagShard = 's';
constexpr char kTagBody = 'b';
constexpr char kTagReplay = 'r';

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

// `k` of a shard tag: a decimal without leading zeros, below `shards`.
std::optional<uint32_t> parse_shard(std::string_view s, uint32_t shards) {
  if (s.empty() || s.size() > 4 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v >= shards) return std::nullopt;
  return v;
}

}  // namespace

const char* key_layout_name(KeyLayout layout) { return layout == KeyLayout::kV2 ? "v2" : "v1"; }

bool key_is_sharded_in_v2(KeyKind kind) { return v2_info(kind).tag == V2Tag::kShard; }
bool key_exists_in_v2(KeyKind kind) { return v2_info(kind).tag != V2Tag::kAbsent; }

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

RedisKeys::RedisKeys(std::string ns, KeyLayout layout, uint32_t shards)
    : ns_(std::move(ns)), prefix_("quiver:{" + ns_ + "}:"), layout_(layout), shards_(shards) {}

Result<RedisKeys> RedisKeys::create(std::string_view ns, KeyLayout layout, uint32_t shards) {
  Status s = validate_namespace(ns);
  if (!s.ok()) return s.error();
  if (layout != KeyLayout::kV1 && layout != KeyLayout::kV2) return invalid("unknown key layout");
  if (layout == KeyLayout::kV2 && (shards < 1 || shards > kMaxShardCount)) {
    return invalid("a layout v2 namespace has 1 to " + std::to_string(kMaxShardCount) +
                   " shards, not " + std::to_string(shards));
  }
  return RedisKeys(std::string(ns), layout, shards);
}

Result<uint32_t> RedisKeys::connection_shard(std::string_view cid) const {
  if (Status s = validate_connection_id(cid); !s.ok()) return s.error();
  return static_cast<uint32_t>(crc16_xmodem(cid)) % shard_count();
}

Result<uint32_t> RedisKeys::member_shard(const Principal& member) const {
  if (member.is_shared()) {
    return invalid("a member's shard needs a `member/<id>` principal, not `shared`");
  }
  return static_cast<uint32_t>(crc16_xmodem(member.member_id())) % shard_count();
}

Result<std::string> RedisKeys::key_v2(KeyKind kind, std::string_view cid,
                                      const std::optional<Principal>& principal,
                                      std::string_view digest,
                                      std::optional<uint32_t> shard) const {
  const KindInfo& k = info(kind);
  const V2Info& v = v2_info(kind);
  const std::string open = "quiver:{" + ns_ + ":";
  auto need_cid = [&]() -> Status { return validate_connection_id(cid); };
  auto need_member = [&]() -> Result<std::string_view> {
    if (!principal.has_value()) return invalid(std::string(k.segment) + " key needs a principal");
    if (principal->is_shared()) {
      return invalid(std::string(k.segment) +
                     " is kept per member: a `member/<id>` principal is required");
    }
    return principal->member_id();
  };
  auto need_digest = [&]() -> Status {
    if (is_sha256_hex(digest)) return Status();
    return invalid(std::string(k.segment) + " key needs a digest of 64 lowercase hex digits");
  };
  switch (v.tag) {
    case V2Tag::kAbsent:
      return invalid(std::string(k.segment) +
                     " has no key in layout v2 (docs/design.md, \"Key layout v2\")");
    case V2Tag::kConnection:
      if (Status s = need_cid(); !s.ok()) return s.error();
      return open + kTagConnection + ":" + std::string(cid) + "}:" + v.segment;
    case V2Tag::kMember: {
      Result<std::string_view> id = need_member();
      if (!id.ok()) return id.error();
      return open + kTagMember + ":" + std::string(*id) + "}:" + v.segment;
    }
    case V2Tag::kPrincipal:
      if (Status s = need_cid(); !s.ok()) return s.error();
      if (!principal.has_value()) return invalid(std::string(k.segment) + " key needs a principal");
      if (principal->is_shared()) {
        return open + kTagConnection + ":" + std::string(cid) + "}:" + v.segment;
      }
      return open + kTagMember + ":" + std::string(principal->member_id()) + "}:" + v.segment +
             ":" + std::string(cid);
    case V2Tag::kShard: {
      if (!shard.has_value()) {
        return invalid(std::string(k.segment) +
                       " is kept per shard in layout v2: a shard is required");
      }
      std::string out = open + kTagShard + ":" + std::to_string(*shard) + "}:" + v.segment;
      if (k.has_digest) {
        if (Status s = need_digest(); !s.ok()) return s.error();
        out += ':';
        out += digest;
      }
      return out;
    }
    case V2Tag::kBody:
    case V2Tag::kReplay:
      if (Status s = need_digest(); !s.ok()) return s.error();
      return open + (v.tag == V2Tag::kBody ? kTagBody : kTagReplay) + ":" + std::string(digest) +
             "}";
    case V2Tag::kNamespace:
      break;
  }
  return invalid("namespace-wide key handed to the v2 builder");  // key() never does
}

Result<std::string> RedisKeys::key(KeyKind kind, std::string_view cid,
                                   const std::optional<Principal>& principal,
                                   std::string_view digest, std::string_view catalog_kind,
                                   std::optional<uint32_t> shard) const {
  if (shard.has_value() && *shard >= shard_count()) {
    return invalid("shard " + std::to_string(*shard) + " of a namespace of " +
                   std::to_string(shard_count()) + " (layout " + key_layout_name(layout_) + ")");
  }
  if (layout_ == KeyLayout::kV2 && v2_info(kind).tag != V2Tag::kNamespace) {
    return key_v2(kind, cid, principal, digest, shard);
  }
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

std::string RedisKeys::v1_only(KeyKind kind) const {
  if (layout_ == KeyLayout::kV2 && v2_info(kind).tag != V2Tag::kNamespace) return std::string();
  return prefix_ + key_kind_name(kind);
}

std::string RedisKeys::due() const { return v1_only(KeyKind::kDue); }
std::string RedisKeys::due_backfill() const { return v1_only(KeyKind::kDueBackfill); }
std::string RedisKeys::removed_conns() const { return v1_only(KeyKind::kRemovedConns); }
std::string RedisKeys::grant_members() const { return v1_only(KeyKind::kGrantMembers); }
std::string RedisKeys::grant_members_backfill() const {
  return v1_only(KeyKind::kGrantMembersBackfill);
}
std::string RedisKeys::grantees_pending() const { return v1_only(KeyKind::kGranteesPending); }
std::string RedisKeys::conns() const { return v1_only(KeyKind::kConns); }
std::string RedisKeys::revalidate_stream() const { return v1_only(KeyKind::kRevalidate); }
std::string RedisKeys::epoch() const { return v1_only(KeyKind::kEpoch); }
std::string RedisKeys::layout() const { return prefix_ + key_kind_name(KeyKind::kLayout); }
std::string RedisKeys::agents() const { return prefix_ + key_kind_name(KeyKind::kAgents); }
std::string RedisKeys::namespace_record() const {
  return prefix_ + key_kind_name(KeyKind::kNamespace);
}
std::string RedisKeys::replay(std::string_view signed_id) const {
  return *key(KeyKind::kReplay, {}, std::nullopt, sha256_hex(signed_id));  // a digest: never fails
}
std::string RedisKeys::oauth_callbacks() const {
  return prefix_ + key_kind_name(KeyKind::kOAuthCallbacks);
}
std::string RedisKeys::calls() const { return v1_only(KeyKind::kCalls); }
Result<std::string> RedisKeys::call_reply(std::string_view rid) const {
  return key(KeyKind::kCallReply, {}, std::nullopt, rid);
}
std::string RedisKeys::call_agents() const { return v1_only(KeyKind::kCallAgents); }
Result<std::string> RedisKeys::call_cancel(std::string_view rid) const {
  return key(KeyKind::kCallCancel, {}, std::nullopt, rid);
}

Result<std::string> RedisKeys::conns(uint32_t shard) const {
  return key(KeyKind::kConns, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::revalidate_stream(uint32_t shard) const {
  return key(KeyKind::kRevalidate, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::due(uint32_t shard) const {
  return key(KeyKind::kDue, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::calls(uint32_t shard) const {
  return key(KeyKind::kCalls, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::call_agents(uint32_t shard) const {
  return key(KeyKind::kCallAgents, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::call_reply(std::string_view rid, uint32_t shard) const {
  return key(KeyKind::kCallReply, {}, std::nullopt, rid, {}, shard);
}
Result<std::string> RedisKeys::call_cancel(std::string_view rid, uint32_t shard) const {
  return key(KeyKind::kCallCancel, {}, std::nullopt, rid, {}, shard);
}
Result<std::string> RedisKeys::removed_conns(uint32_t shard) const {
  return key(KeyKind::kRemovedConns, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::grant_members(uint32_t shard) const {
  return key(KeyKind::kGrantMembers, {}, std::nullopt, {}, {}, shard);
}
Result<std::string> RedisKeys::grantees_pending(uint32_t shard) const {
  return key(KeyKind::kGranteesPending, {}, std::nullopt, {}, {}, shard);
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
  if (layout_ == KeyLayout::kV2) {
    return "quiver:{" + ns_ + ":[" + kTagConnection + kTagMember +
           "]:*}:" + key_kind_name(KeyKind::kManifest) + "*";
  }
  return prefix_ + key_kind_name(KeyKind::kManifest) + ":*";
}

std::string RedisKeys::namespace_match_pattern() const {
  if (layout_ == KeyLayout::kV2) return "quiver:{" + ns_ + "[}:]*";
  return prefix_ + "*";
}

Result<ParsedKey> RedisKeys::parse(std::string_view key) const {
  if (layout_ == KeyLayout::kV2 && key.substr(0, prefix_.size()) != prefix_) return parse_v2(key);
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
    if (layout_ == KeyLayout::kV2 && v2_info(k.kind).tag != V2Tag::kNamespace) {
      return invalid(std::string(k.segment) + " key in the spelling of layout v1, not v2");
    }
    return out;
  }
  return invalid("unknown key kind after the namespace prefix");
}

Result<ParsedKey> RedisKeys::parse_v2(std::string_view key) const {
  // quiver:{<ns>:<letter>:<id>}[:<segment>[:<part>]]; no identifier holds ':', '{' or '}'.
  const std::string open = "quiver:{" + ns_ + ":";
  if (key.substr(0, open.size()) != open) return invalid("not a key of namespace `" + ns_ + "`");
  std::string_view rest = key.substr(open.size());
  if (rest.size() < 3 || rest[1] != ':') return invalid("a layout v2 tag without `<letter>:`");
  const char letter = rest[0];
  rest = rest.substr(2);
  const std::size_t close = rest.find('}');
  if (close == std::string_view::npos) return invalid("a layout v2 tag without `}`");
  const std::string_view id = rest.substr(0, close);
  rest = rest.substr(close + 1);
  std::vector<std::string_view> parts;
  if (!rest.empty()) {
    if (rest[0] != ':') return invalid("a layout v2 key with text after its tag but no `:`");
    rest = rest.substr(1);
    while (true) {
      const std::size_t colon = rest.find(':');
      parts.push_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest = rest.substr(colon + 1);
    }
  }
  ParsedKey out;
  auto with_cid = [&](std::string_view cid) -> Status {
    if (Status s = validate_connection_id(cid); !s.ok()) return s;
    out.connection_id = std::string(cid);
    return Status();
  };
  switch (letter) {
    case kTagBody:
    case kTagReplay:
      if (!is_sha256_hex(id)) return invalid("a body or replay tag without a SHA-256 digest");
      if (!parts.empty()) return invalid("a body or replay key is its tag alone");
      out.kind = letter == kTagBody ? KeyKind::kBody : KeyKind::kReplay;
      out.digest = std::string(id);
      return out;
    case kTagConnection:
      if (Status s = with_cid(id); !s.ok()) return s.error();
      if (parts.size() != 1) return invalid("a connection key has one segment after its tag");
      for (const V2Info& v : kV2Kinds) {
        if ((v.tag != V2Tag::kConnection && v.tag != V2Tag::kPrincipal) || parts[0] != v.segment) {
          continue;
        }
        out.kind = v.kind;
        if (v.tag == V2Tag::kPrincipal) out.principal = Principal::shared();
        return out;
      }
      return invalid("unknown connection key `" + std::string(parts[0]) + "`");
    case kTagMember: {
      Result<Principal> member = Principal::member(id);
      if (!member.ok()) return member.error();
      out.principal = std::move(*member);
      for (const V2Info& v : kV2Kinds) {
        if ((v.tag != V2Tag::kMember && v.tag != V2Tag::kPrincipal) || parts.empty() ||
            parts[0] != v.segment) {
          continue;
        }
        const std::size_t expected = v.tag == V2Tag::kPrincipal ? 2 : 1;
        if (parts.size() != expected) {
          return invalid(std::string("member key `") + v.segment + "` has " +
                         std::to_string(parts.size()) + " segments after its tag; expected " +
                         std::to_string(expected));
        }
        if (v.tag == V2Tag::kPrincipal) {
          if (Status s = with_cid(parts[1]); !s.ok()) return s.error();
        }
        out.kind = v.kind;
        return out;
      }
      return invalid("unknown member key");
    }
    case kTagShard: {
      const std::optional<uint32_t> shard = parse_shard(id, shards_);
      if (!shard) {
        return invalid("shard `" + std::string(id) + "` of a namespace of " +
                       std::to_string(shards_) + " shards");
      }
      out.shard = *shard;
      for (const V2Info& v : kV2Kinds) {
        if (v.tag != V2Tag::kShard || parts.empty() || parts[0] != v.segment) continue;
        const bool digest = info(v.kind).has_digest;
        if (parts.size() != (digest ? 2u : 1u)) {
          return invalid(std::string("shard key `") + v.segment + "` has " +
                         std::to_string(parts.size()) + " segments after its tag");
        }
        if (digest) {
          if (!is_sha256_hex(parts[1])) {
            return invalid(std::string(v.segment) + " key without a SHA-256 digest");
          }
          out.digest = std::string(parts[1]);
        }
        out.kind = v.kind;
        return out;
      }
      return invalid("unknown shard key");
    }
    default:
      return invalid(std::string("unknown layout v2 tag letter `") + letter + "`");
  }
}

Result<ParsedKey> RedisKeys::parse_manifest_key(std::string_view key) const {
  Result<ParsedKey> parsed = parse(key);
  if (!parsed.ok()) return parsed.error();
  if (parsed->kind != KeyKind::kManifest) return invalid("not a manifest key");
  return parsed;
}

}  // namespace quiver
