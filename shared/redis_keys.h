// RedisKeys: the one place that spells every Redis key of the layout, and parses keys back.
// Nothing else in the code base concatenates key strings; tests/shared/redis_keys_doc_test.cpp
// ties it to schema/redis-keys.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/principal.h"
#include "shared/status.h"

namespace quiver {

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
  kCatalog,
  kCatalogKeys,
  kCatalogVersions,
  kAudit,
  kOAuthCallbacks,
  kOAuthResult,
  kBody,
  kCalls,
  kCallReply,
  kCallAgents,
  kCallCancel,
  kMarked,
  kDue,
  kDueBackfill,
  kRemovedConns,
  kGrantMembers,
  kGrantMembersBackfill,
  kGranteesPending,
  kConnVersion,
  kMemberVersion,
  kLayout,
  kAgents,
};
inline constexpr int kKeyKindCount = 37;

const char* key_kind_name(KeyKind kind);   // the key's segment: "conns", "revalidate-gate", ...
const char* key_redis_type(KeyKind kind);  // "SET", "HASH", "STRING", "STREAM"
bool key_has_connection_id(KeyKind kind);
bool key_has_principal(KeyKind kind);
bool key_has_digest(KeyKind kind);  // a 64-hex-digit SHA-256 segment (replay, body, ...)
// A runtime catalog kind segment (catalog:<kind>, catalog:<kind>:keys): [a-z]{1,32}, not
// "versions" (native-agent/store/catalog.h names them: member, grant, connection).
bool key_has_catalog_kind(KeyKind kind);
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
// The SHA-256 (hex) of the manifest body, stored apart under body:<sha256>. A record written
// before bodies were stored apart holds its body inline in `manifest` instead (still read).
inline constexpr char kBody[] = "body";
// Not a field of the hash: the value of invalidated:<cid>:<principal> (kept apart so that the
// edge's Redis user, which may write invalidation marks, never writes a manifest hash). Readers
// hand it to meta decoding under this name.
inline constexpr char kInvalidatedAt[] = "invalidated_at";
// revalidate stream entries
inline constexpr char kCid[] = "cid";
inline constexpr char kPrincipal[] = "principal";
inline constexpr char kReason[] = "reason";
inline constexpr char kAt[] = "at";
// audit stream entries (also `at`)
inline constexpr char kActor[] = "actor";
inline constexpr char kAction[] = "action";
inline constexpr char kTarget[] = "target";
inline constexpr char kDetail[] = "detail";
// oauth-callbacks stream entries (also `at`): the query of a redirect the edge received
inline constexpr char kState[] = "state";
inline constexpr char kCode[] = "code";
inline constexpr char kIss[] = "iss";
inline constexpr char kError[] = "error";
inline constexpr char kErrorDescription[] = "error_description";
// calls stream entries (also `cid`, `at`): one call the edge relays to the agents
// (shared/call_relay.h)
inline constexpr char kRid[] = "rid";
inline constexpr char kMember[] = "member";
inline constexpr char kMethod[] = "method";
inline constexpr char kParams[] = "params";
inline constexpr char kDeadline[] = "deadline";
}  // namespace redis_field

// The consumer group that agents read the calls stream with (shared/call_relay.h).
inline constexpr char kCallsConsumerGroup[] = "quiver-call-agents";

// The key layouts (schema/redis-keys.md; docs/design.md "Key layout v2"). v1: every key of a
// namespace carries the one hash tag `{<ns>}`. v2: keys are tagged by what a script must see
// atomically: `{<ns>:c:<cid>}` one connection, `{<ns>:m:<member id>}` one member,
// `{<ns>:s:<k>}` one of S shards, `{<ns>:b:<sha256>}` one body, `{<ns>:r:<sha256>}` one replay
// guard, and `{<ns>}` the namespace-wide records. Spelled and parsed here; no store writes v2
// yet and no reader reads it (docs/design.md).
enum class KeyLayout { kV1 = 1, kV2 = 2 };
const char* key_layout_name(KeyLayout layout);  // "v1", "v2"

// S, the number of shards of a v2 namespace (fixed for its life: it is part of the keys).
inline constexpr uint32_t kDefaultShardCount = 16;
inline constexpr uint32_t kMaxShardCount = 1024;

// Whether `kind` is one key per shard in layout v2 (the connection registry, the revalidation
// stream, the due index, the calls, ...): its builders take a shard 0..S-1 there.
bool key_is_sharded_in_v2(KeyKind kind);
// Whether layout v2 has the kind at all: the epoch (versions replace it) and the v1 backfill
// markers (`due-backfill`, `grant-members-backfill`: a v2 namespace is filled with them built)
// are v1 only.
bool key_exists_in_v2(KeyKind kind);

struct ParsedKey {
  KeyKind kind = KeyKind::kConns;
  std::string connection_id;           // empty when the kind has none
  std::optional<Principal> principal;  // nullopt when the kind has none
  std::string digest;                  // empty when the kind has none
  std::string catalog_kind;            // empty when the kind has none
  std::optional<uint32_t> shard;       // v2's sharded kinds only (key_is_sharded_in_v2)
};

// A member of the refresh-due index (RedisKeys::due): `<cid>:<principal>`; kInvalidArgument for a
// connection id that is not valid. parse_due_member is its inverse.
Result<std::string> due_member(std::string_view cid, const Principal& principal);
struct DueMember {
  std::string connection_id;
  Principal principal = Principal::shared();
};
Result<DueMember> parse_due_member(std::string_view member);

class RedisKeys {
 public:
  // kInvalidArgument unless `ns` is a valid namespace and, for v2, 1 <= shards <= kMaxShardCount.
  // `shards` is S of layout v2; a v1 namespace has one of each registry (shard_count() 1).
  static Result<RedisKeys> create(std::string_view ns = kDefaultNamespace,
                                  KeyLayout layout = KeyLayout::kV1,
                                  uint32_t shards = kDefaultShardCount);

  const std::string& ns() const { return ns_; }
  // "quiver:{<ns>}:", the namespace-wide keys' prefix in both layouts.
  const std::string& prefix() const { return prefix_; }
  KeyLayout key_layout() const { return layout_; }

  // ---- shards (layout v2) ----
  // S in v2; 1 in v1, where each registry below is one key (shard 0).
  uint32_t shard_count() const { return layout_ == KeyLayout::kV2 ? shards_ : 1; }
  // The shard of a connection, crc16_xmodem(cid) mod S (shared/redis_cluster.h): its registry
  // entry, its revalidation requests, its due entries, its calls, its removal. 0 in v1.
  Result<uint32_t> connection_shard(std::string_view cid) const;
  // The shard of a member, crc16_xmodem(member id) mod S: its entry in `grant-members` and its
  // `grantees-pending` pairs. A `member/<id>` principal only. 0 in v1.
  Result<uint32_t> member_shard(const Principal& member) const;
  // The per-shard keys, in either layout (v1: shard 0 names the one key; kInvalidArgument for a
  // shard >= shard_count()).
  Result<std::string> conns(uint32_t shard) const;
  Result<std::string> revalidate_stream(uint32_t shard) const;
  Result<std::string> due(uint32_t shard) const;
  Result<std::string> calls(uint32_t shard) const;
  Result<std::string> call_agents(uint32_t shard) const;
  Result<std::string> call_reply(std::string_view rid, uint32_t shard) const;
  Result<std::string> call_cancel(std::string_view rid, uint32_t shard) const;
  Result<std::string> removed_conns(uint32_t shard) const;
  Result<std::string> grant_members(uint32_t shard) const;
  Result<std::string> grantees_pending(uint32_t shard) const;

  // The builders below without a shard name the one key of layout v1. On a v2 RedisKeys, those
  // of a kind v2 shards or does not have (conns, revalidate_stream, epoch, calls, call_agents,
  // due, due_backfill, removed_conns, grant_members, grant_members_backfill, grantees_pending)
  // return the empty string, and call_reply(rid) / call_cancel(rid) kInvalidArgument: use the
  // shard overloads above (or key()), which say what is wrong.
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
  // The OAuth callbacks the edge queues for the agents (GET /v1/oauth/callback at the edge:
  // shared/oauth_callback.h), and the outcome an agent writes back for one, keyed by the SHA-256
  // of the callback's `state` (never the state itself).
  std::string oauth_callbacks() const;
  std::string oauth_result(std::string_view state) const;
  // A manifest body, stored once for every record that lists the same content (immutable; kept
  // while records refer to it: schema/redis-keys.md). `digest` is the SHA-256 of the body in
  // lowercase hex (manifest_body_digest, shared/discovery_redis.h), which the records name in
  // their `body` field; kInvalidArgument for anything else.
  Result<std::string> body(std::string_view digest) const;
  // Calls relayed from the edge to the agents (shared/call_relay.h): the request stream, the
  // reply list of one request (`rid`: 64 lowercase hex digits, random per request), and the key
  // consuming agents keep alive while they consume (the edge fails fast without it).
  std::string calls() const;
  Result<std::string> call_reply(std::string_view rid) const;
  std::string call_agents() const;
  // The mark an edge sets when the client of relayed call `rid` went away: the agent running it
  // cancels it upstream (shared/call_relay.h relay_cancel_command).
  Result<std::string> call_cancel(std::string_view rid) const;
  // When a refresh webhook last marked the (connection, principal)'s data stale (a STRING of
  // epoch ms): written by agents and edges, read with the manifest.
  Result<std::string> invalidated(std::string_view cid, const Principal& principal) const;
  // When a refresh webhook last marked a per_member connection as a whole (a STRING of epoch
  // ms, O(1) whatever its number of grantees): readers apply it to every principal, the effective
  // invalidated_at being the later of this and invalidated(cid, principal).
  Result<std::string> marked(std::string_view cid) const;
  // Versions (STRING counters, INCR; never deleted, so no value repeats): what a discovery read of
  // a member checks before answering "unchanged" (schema/lua/discovery_read.lua). A connection's
  // moves with every write a read of any of its grantees sees (record, shared commit, failure,
  // overlay or mark, connection-wide mark); a member's with every write only that member's read
  // sees (grants, per-member commit, failure, overlay or mark).
  Result<std::string> conn_version(std::string_view cid) const;
  Result<std::string> member_version(const Principal& member) const;  // `member/<id>` only
  // The one of the two a write to (cid, principal)'s records moves: the connection's for
  // `shared`, the member's for a member.
  Result<std::string> version_of(std::string_view cid, const Principal& principal) const;
  // The namespace record (kNamespaceReady): whether agents have synced connections, grants and
  // overlays into this namespace since the store last lost its data. Every reader checks it.
  std::string namespace_record() const;
  // The key layout record (shared/layout.h): `<version>:<state>:<at>`, absent for layout v1.
  // Every reader checks it and refuses a layout this build does not read.
  std::string layout() const;
  // The census of agents (shared/layout.h, agents_census_*): a ZSET of `<consumer> layouts=...`
  // scored by when each last said so; what `migrate-layout` asks before a switch.
  std::string agents() const;
  // The runtime catalog (native-agent/store/catalog.h), agents only: the entries of one kind (a
  // HASH key -> one JSON string holding the value and its meta), their keys for paging (a ZSET,
  // every score 0, paged with ZRANGEBYLEX), the per-kind version counters (a HASH) and the audit
  // log (a STREAM). The edge's user can neither read nor write them (schema/redis-acl-edge.txt).
  Result<std::string> catalog(std::string_view catalog_kind) const;
  Result<std::string> catalog_keys(std::string_view catalog_kind) const;
  std::string catalog_versions() const;
  std::string audit() const;

  // The refresh-due index (a ZSET): one member per stored manifest record, due_member(cid,
  // principal) = `<cid>:<principal>`, scored with when maintenance next has work on it (epoch ms).
  // Written in the fenced commit and failure scripts, removed with the record; maintenance reads
  // what is due (ZRANGEBYSCORE -inf <now>) instead of walking the namespace.
  std::string due() const;
  // The index's one-time backfill over a namespace written before it existed: absent (not begun),
  // `scan:<cursor>` (the SCAN of manifest keys goes on from there), `done:<at>` (built).
  std::string due_backfill() const;
  // Connections removed by a config sync whose other keys (manifests, leases, fences, gates,
  // marks, overlays, grants naming them) are still to be deleted: added in the removal's
  // transaction, taken out once the sweep deleted them. Empty: no sweep runs.
  std::string removed_conns() const;
  // The members that have grants (a SET of `member/<id>` principals): every grants:<principal>
  // key that exists has its principal here (SADD in the transaction that writes it), so a config
  // sync finds the members it must empty without a SCAN. A principal listed without a grants key
  // is harmless (the next sync drops it).
  std::string grant_members() const;
  // That registry's one-time backfill over a namespace written before it: absent (not built: the
  // next sync SCANs the grants keys once) or `done:<at>`.
  std::string grant_members_backfill() const;
  // Grantees entries still to write (a SET of due_member(cid, principal) = `<cid>:<principal>`):
  // a member's grant change adds the pairs it touched in its own transaction, then writes
  // grantees:<cid> and takes them out. A pair left behind (a crash between the two) is repaired
  // by the next sync from the member's grants, never trusted.
  std::string grantees_pending() const;

  // Any kind. Parts the kind does not use are ignored; the ones it uses are validated
  // (`digest`: 64 lowercase hex digits; `shard`: below shard_count(), required for a sharded
  // kind in v2). In v2 a kind v2 does not have (key_exists_in_v2) is kInvalidArgument.
  Result<std::string> key(KeyKind kind, std::string_view cid,
                          const std::optional<Principal>& principal, std::string_view digest = {},
                          std::string_view catalog_kind = {},
                          std::optional<uint32_t> shard = std::nullopt) const;

  // SCAN MATCH pattern for every manifest key of the namespace (maintenance). In v2:
  // `quiver:{<ns>:[cm]:*}:manifest*`, the shared and the per-member ones.
  std::string manifest_match_pattern() const;
  // Every key of the namespace, as a SCAN MATCH pattern. In v2: `quiver:{<ns>[}:]*`, every tag
  // of the namespace and no other namespace's (an `ns` holds no `:` or `}`).
  std::string namespace_match_pattern() const;

  // The inverse of the builders, for keys of this namespace and layout only (a v2 RedisKeys
  // parses the namespace-wide keys, spelled alike in both, and v2 keys; v1 keys it refuses).
  Result<ParsedKey> parse(std::string_view key) const;
  Result<ParsedKey> parse_manifest_key(std::string_view key) const;  // a manifest key only

 private:
  RedisKeys(std::string ns, KeyLayout layout, uint32_t shards);
  Result<std::string> key_v2(KeyKind kind, std::string_view cid,
                             const std::optional<Principal>& principal, std::string_view digest,
                             std::optional<uint32_t> shard) const;
  Result<ParsedKey> parse_v2(std::string_view key) const;
  std::string v1_only(KeyKind kind) const;
  std::string ns_;
  std::string prefix_;
  KeyLayout layout_ = KeyLayout::kV1;
  uint32_t shards_ = kDefaultShardCount;
};

}  // namespace quiver
