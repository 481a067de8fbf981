// The discovery read and the revalidation queue, as Redis commands in and replies out.
//
// The edge must answer with one pipelined round trip per request (a socket belongs to its
// request), so a whole discovery read is ONE script, schema/lua/discovery_read.lua: it reads the
// member's grants and, per granted connection, the record, the manifest hash of the principal
// that applies, the disabled set and whether a lease is held. `discovery_read_command` builds it,
// `decode_discovery_reply` turns its reply into a `DiscoverySnapshot` — strictly: a reply of
// another shape, for another member, or read under a principal that `applicable_principal` does
// not give is an error, never a half-trusted snapshot.
//
// Revalidations (what render_manifests asks for) are queued with
// schema/lua/revalidate_enqueue.lua, one EVAL per (connection, principal), all of a page in one
// pipeline: with a lease held nothing is queued (`in_progress`); otherwise the gate key (SET NX PX
// window) lets exactly one request per key per window through to the stream (`queued`), however
// many readers race; the others get `already_queued`. A manual refresh (`Revalidation::manual`)
// is queued again once the gate is `manual_requeue_after_ms` old, so a user's refresh is never
// swallowed by a reader's gate for a whole window.
//
// Sans-I/O: the host sends the argv (RESP-encode it with shared/resp.h, or hand it to hiredis)
// and passes the decoded `RespValue` back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/discovery.h"
#include "shared/identity.h"
#include "shared/lease.h"
#include "shared/oauth.h"
#include "shared/redis_conversation.h"
#include "shared/resp.h"
#include "shared/status.h"
#include "shared/webhook_signature.h"

namespace quiver {

// The reply's first element: a script of another version answers with another tag.
inline constexpr char kDiscoveryReplyTag[] = "quiver.discovery.v2";
// A conditional read's reply when nothing it checks changed: {tag, member, epoch, leases}.
inline constexpr char kDiscoveryUnchangedTag[] = "quiver.discovery.unchanged";
// The script's reply when the namespace record (RedisKeys::namespace_record) is not `ready`:
// {tag, state}.
inline constexpr char kNamespaceNotReadyTag[] = "quiver.namespace.v1";

// A script's reply {kNamespaceNotReadyTag, state} (discovery_read.lua, webhook_refresh.lua) as
// kStoreNotReady, `what` naming the script's use; nullopt for any other reply.
std::optional<Error> namespace_not_ready(const RespValue& reply, std::string_view what);

// EVAL of schema/lua/<script> with `keys` declared and `args`; EVAL_RO when `read_only` (Redis 7:
// a read-only script then runs for a Redis user that may only read the keys it declares).
// kInternal when the script is not compiled in.
Result<RedisCommand> schema_script_command(const char* script, std::vector<std::string> keys,
                                           std::vector<std::string> args, bool read_only = false);

// One entry of a discovery reply, {cid, conn_fields, principal, manifest_fields,
// disabled_members, lease_exists, invalidated_at} (discovery_read.lua), checked as
// decode_discovery_reply checks it: the principal read must be the one the record's credential mode
// gives `member`. The v2 read (shared/discovery_spread.h) assembles the same shape from its
// per-slot replies, so both layouts decode through here.
Result<GrantedConnection> decode_discovery_entry(const RespValue& entry, std::size_t index,
                                                 const Principal& member);

// EVAL discovery_read.lua for `member` (a member principal) under `keys`' namespace.
// kInvalidArgument for a shared principal, an invalid `only` or a limit out of [1, 1000].
Result<RedisCommand> discovery_read_command(const RedisKeys& keys, const Principal& member,
                                            const SnapshotQuery& query = {});

// ---- conditional reads (versions) ---------------------------------------------------------------
//
// A snapshot from a full read carries the versions it read (DiscoverySnapshot::namespace_record,
// member_version, connection_versions). A reader that kept it sends the same script with those
// versions and the entries whose lease it needs to know (`lease_entries`, indexes into
// held.connections: the entries not fresh at its `now`, lease_sensitive_entries in
// shared/discovery.h); the script reads every version, the epoch and those leases in ONE MGET and
// answers "unchanged" when each version is what the reader holds, else the full reply (one round
// trip either way). Correct because every write that changes what the script returns for this
// member increments the member's version or the connection version of an entry it returns
// (schema/redis-keys.md, "Versions"), in the same script or transaction as the write, and no
// version value repeats (the keys are never deleted; a namespace that lost its data has a new
// namespace record); what the records do not say (the leases) is read again, and the freshness
// classes (fresh, stale, expired) the reader recomputes at `now`, as for any copy it holds.

// kInvalidArgument as discovery_read_command, for a snapshot without versions (not from a full
// Redis read), for another member, or for a lease entry out of range or without a principal.
Result<RedisCommand> conditional_discovery_read_command(
    const RedisKeys& keys, const DiscoverySnapshot& held, const SnapshotQuery& query,
    const std::vector<std::size_t>& lease_entries);

// A conditional read's answer: the snapshot it read when something changed, else nullopt after
// giving `held` the epoch read and the lease flag of each of `lease_entries` (the ones the command
// was built with). Errors as decode_discovery_reply; kInvalidReply for an "unchanged" reply whose
// leases do not match `lease_entries`.
Result<std::optional<DiscoverySnapshot>> decode_conditional_reply(
    const RespValue& reply, DiscoverySnapshot& held, const std::vector<std::size_t>& lease_entries);

// The snapshot in the script's reply. `member` is the caller the command was built for.
// kStoreUnavailable for a Redis error reply (e.g. NOSCRIPT, OOM, a script error) and for a
// namespace whose key layout record names a layout this build does not read (shared/layout.h:
// the error names the record); kStoreNotReady when the namespace record is absent or not `ready`
// (the data was lost; an agent restores it);
// kInvalidReply for any shape mismatch, naming the element.
Result<DiscoverySnapshot> decode_discovery_reply(const RespValue& reply, const Principal& member);

// ---- manifest bodies ----------------------------------------------------------------------------
//
// A manifest record names its body by SHA-256 (`body`, schema/redis-keys.md): bodies are stored
// once per content under RedisKeys::body, immutable, shared by every principal listing the same
// bytes. The discovery script returns metadata only; a reader then takes the bodies it lacks from
// its own cache (the edge's BodyCache, shared/edge_cache.h: no expiry, the content never changes)
// or fetches them in one MGET, a second round trip only on a body-cache miss. A body that cannot
// be fetched leaves its entry without text: rendered as a store failure of that entry and
// revalidated, never as an empty list (shared/discovery.h). Records still holding the body inline
// (`manifest`, written before bodies were stored apart) need nothing fetched.

// The body's name: the SHA-256 of its bytes, lowercase hex.
std::string manifest_body_digest(std::string_view body);

// The digests of the bodies `snapshot` refers to and does not hold (ManifestEntry::body_missing),
// each once, in entry order.
std::vector<std::string> missing_bodies(const DiscoverySnapshot& snapshot);

// Gives every entry of `snapshot` that lacks the body `digest` the text `body`; the number filled.
std::size_t fill_body(DiscoverySnapshot& snapshot, std::string_view digest, std::string_view body);

// MGET of the body keys of `digests` (1 to kMaxSnapshotLimit). kInvalidArgument for a digest that
// is not a SHA-256 in hex, or for none.
Result<RedisCommand> body_read_command(const RedisKeys& keys,
                                       const std::vector<std::string>& digests);

// The MGET reply: one body per digest, in order; nullopt where the key is absent (expired,
// evicted) or holds bytes whose SHA-256 is not the digest (never served as that body).
// kStoreUnavailable for a Redis error reply, kInvalidReply for another shape.
Result<std::vector<std::optional<std::string>>> decode_body_reply(
    const RespValue& reply, const std::vector<std::string>& digests);

struct EnqueueOptions {
  int64_t window_ms = 30'000;                               // one queued request per key per window
  int64_t stream_maxlen = 10'000;                           // XADD MAXLEN ~
  int64_t manual_requeue_after_ms = kManualRequeueAfterMs;  // re-queue past this gate age
};

// EVAL revalidate_enqueue.lua for one revalidation. kInvalidArgument for a bad connection id,
// a reason that is not a short token ([a-z_]{1,32}) or non-positive options.
Result<RedisCommand> revalidate_enqueue_command(const RedisKeys& keys, const Revalidation& r,
                                                int64_t now_ms, const EnqueueOptions& options);

// The outcome of one revalidate_enqueue.lua. kStoreUnavailable for a Redis error reply,
// kInvalidReply for anything the script does not answer.
Result<RevalidationResult> parse_enqueue_reply(const RespValue& reply);

// One pipeline of revalidate_enqueue_command for each revalidation, in order (empty list: an
// empty pipeline). Fails on the first invalid revalidation.
Result<Pipeline> revalidate_enqueue_pipeline(const RedisKeys& keys,
                                             const std::vector<Revalidation>& revalidations,
                                             int64_t now_ms, const EnqueueOptions& options);

// The same commands, one per revalidation, in order (a host that sends evalsha_form()s).
Result<std::vector<RedisCommand>> revalidate_enqueue_commands(
    const RedisKeys& keys, const std::vector<Revalidation>& revalidations, int64_t now_ms,
    const EnqueueOptions& options);

// The outcomes of such a pipeline, one per reply, in order.
std::vector<Result<RevalidationResult>> parse_enqueue_replies(
    const std::vector<RespValue>& replies);

// ---- the revalidation queue on key layout v2 ----------------------------------------------------
//
// On v2 the gate (and the lease) live on the manifest's slot, the stream on the connection's shard
// (`revalidate_stream(connection_shard(cid))`): no script can touch both, so an enqueue is two
// one-slot steps (docs/design.md, "What crosses slots": Enqueue). (a) revalidate_gate.lua on the
// manifest's slot: the same window, manual requeue and replies as revalidate_enqueue.lua, except
// that it answers `won` instead of queuing; (b) only for a gate won, the XADD below, with the same
// entry fields as v1's. A crash between (a) and (b) loses that one request: the gate expires after
// its window and the next stale read queues it again.
//
// The lease: the agent declares it (KEYS[2]: a lease held answers `in_progress`, nothing set). The
// edge may not (its Redis user may only read leases, and Redis 7 checks an EVAL's declared keys for
// write access), so it sends no gate for an entry whose snapshot says a lease is held and answers
// `in_progress` itself (docs/design.md, "The scripts that may not declare a key today").

enum class RevalidationGate {
  kWon = 0,        // the gate is this caller's: XADD the request now (revalidate_xadd_command)
  kAlreadyQueued,  // a request within the window stands
  kInProgress,     // the declared lease is held: the refresh under way serves the reader
};

// EVAL revalidate_gate.lua for one revalidation on `keys`' layout (the gate key of that layout);
// with the lease declared as KEYS[2] when `declare_lease`. kInvalidArgument as
// revalidate_enqueue_command.
Result<RedisCommand> revalidate_gate_command(const RedisKeys& keys, const Revalidation& r,
                                             int64_t now_ms, const EnqueueOptions& options,
                                             bool declare_lease);

// The outcome of one revalidate_gate.lua. kStoreUnavailable for a Redis error reply,
// kInvalidReply for anything the script does not answer.
Result<RevalidationGate> parse_gate_reply(const RespValue& reply);

// `XADD <revalidate_stream(connection_shard(cid))> MAXLEN ~ <maxlen> * cid <cid> principal <p>
// reason <reason> at <at_ms>`: step (b), and every other writer of a request to a shard's stream
// (the refresh webhook on v2). On a v1 RedisKeys it names v1's one stream (shard 0).
// kInvalidArgument for a bad connection id, a reason that is not a short token ([a-z_]{1,32}) or
// a non-positive maxlen.
Result<RedisCommand> revalidate_xadd_command(const RedisKeys& keys, const Revalidation& r,
                                             int64_t at_ms, int64_t maxlen);

// The XADD's reply: kQueued with the entry's id. kStoreUnavailable for a Redis error reply,
// kInvalidReply for another shape.
Result<RevalidationResult> parse_xadd_reply(const RespValue& reply);

// ---- refresh webhooks --------------------------------------------------------------------------
//
// A verified webhook (shared/webhook_signature.h) in ONE script, schema/lua/webhook_refresh.lua:
// the replay guard (SET NX PX on RedisKeys::replay), then per target every (connection,
// principal) it names — a target without a principal is `shared` on a shared connection; on a
// per_member one it marks the connection as a whole (kWebhookConnectionMarked) — is marked stale
// (RedisKeys::invalidated) and its refresh queued with reason kWebhookRefreshReason, also while a
// lease is held (the listing under way may predate the change). The gate admits one request per
// options.manual_requeue_after_ms, as a manual refresh.

// The stream entries' reason: a change trigger for the agent that takes them.
inline constexpr char kWebhookRefreshReason[] = "webhook";

// A target without a principal on a per_member connection marks the connection once
// (RedisKeys::marked, O(1) whatever its number of grantees) and answers one result without a
// principal and with this status; no per-member key is written and nothing is queued: each
// member's data reads stale from then on (effective_invalidation) and is queued through that
// member's gate when read, or refreshed by maintenance when due.
inline constexpr char kWebhookConnectionMarked[] = "marked";

// The effective invalidation mark of one (connection, principal), as discovery_read.lua computes
// it: the later of its own mark (RedisKeys::invalidated) and its connection's (RedisKeys::marked);
// nullopt when neither is set. A value that is not a decimal number loses to one that is (and is
// kept when alone, for the reader to refuse as it refuses any malformed time).
std::optional<std::string> effective_invalidation(std::optional<std::string_view> own,
                                                  std::optional<std::string_view> connection);

// kInvalidArgument for an empty target list, a bad connection id, or options out of range.
Result<RedisCommand> webhook_refresh_command(const RedisKeys& keys, const WebhookVerified& verified,
                                             const WebhookRefreshRequest& request, int64_t now_ms,
                                             const EnqueueOptions& options);

// The script's reply as the core's WebhookRefreshReply (shared/webhook_signature.h).
// kStoreUnavailable for a Redis error reply or a layout this build does not write (the layout
// record, shared/layout.h; nothing was done), kStoreNotReady when the namespace record is not
// `ready` (nothing was done, not even the replay guard), kInvalidReply for any other shape.
Result<WebhookRefreshReply> parse_webhook_refresh_reply(const RespValue& reply);

// ---- OAuth callbacks at the edge ----------------------------------------------------------------
//
// GET /v1/oauth/callback at the edge (shared/oauth_callback.h) in ONE script,
// schema/lua/oauth_callback.lua: the outcome an agent wrote to RedisKeys::oauth_result(state), if
// any; else the callback XADDed to RedisKeys::oauth_callbacks (MAXLEN ~ `stream_maxlen`) for the
// agents, which read every entry (no consumer group: the agent whose token store holds the state
// completes it).

inline constexpr int64_t kOAuthCallbackStreamMaxLen = 1000;

Result<RedisCommand> oauth_callback_command(const RedisKeys& keys,
                                            const oauth::CallbackParams& callback, int64_t now_ms,
                                            int64_t stream_maxlen = kOAuthCallbackStreamMaxLen);

// nullopt: queued, no outcome yet; else the outcome record's text (shared/oauth_callback.h).
// kStoreUnavailable for a Redis error reply, kInvalidReply for another shape.
Result<std::optional<std::string>> parse_oauth_callback_reply(const RespValue& reply);

}  // namespace quiver
