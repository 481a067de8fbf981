// The refresh lease and the fenced manifest write, as Redis commands in and replies out.
//
// Several agents may refresh the same (connection, principal). A lease (`SET lease
// "<fence>:<token>" NX PX lease_ms`, with a random token and a fencing number from INCR) keeps
// them from duplicating work, and the fence keeps a holder whose lease ran out mid-listing from
// overwriting a newer result. Every step is one Lua script of schema/lua/, atomic in Redis:
//   lease_acquire.lua    acquire_lease_command    → parse_acquire_reply
//   lease_renew.lua      renew_lease_command      → parse_renew_reply
//   lease_release.lua    release_lease_command    → parse_release_reply
//   manifest_commit.lua  commit_manifest_command  → parse_commit_reply
//   manifest_fail.lua    record_failure_command   → parse_failure_reply
// A commit or failure record succeeds only if the caller still holds the lease, its fence is the
// newest, and the connection's config_hash is still the one the listing started under; each
// refusal has its own outcome so the caller can log why. A failure record keeps the last good
// manifest and never writes config_hash.
//
// Sans-I/O: the functions build argv vectors (the host RESP-encodes and sends them) and read the
// reply as a `RespValue` (shared/resp.h: the core's decoder, or a client's reply converted). Keys
// come in built (LeaseKeys, from the Redis key layout); tokens come from the host's randomness;
// times are the host's clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

// One Redis command as its arguments, e.g. {"EVAL", script, "3", key..., arg...}.
using RedisCommand = std::vector<std::string>;

// The keys of one (connection, principal), as the Redis key layout names them. All must carry
// the same `{ns}` hash tag (one cluster slot); each script takes the ones it touches.
struct LeaseKeys {
  std::string manifest;    // quiver:{ns}:manifest:<cid>:<principal>
  std::string lease;       // quiver:{ns}:lease:<cid>:<principal>
  std::string fence;       // quiver:{ns}:fence:<cid>:<principal>
  std::string connection;  // quiver:{ns}:conn:<cid>
  std::string epoch;       // quiver:{ns}:epoch
  // A commit only: quiver:{ns}:body:<sha256 of the manifest bytes> (RedisKeys::body), where the
  // body is stored once for every record with the same content.
  std::string body;
  // The fenced writes only: the refresh-due index (RedisKeys::due) and this key's member in it
  // (due_member: `<cid>:<principal>`), scored in the same script with
  // FencedWriteOptions::due_at_ms.
  std::string due;
  std::string due_member;
  // The fenced writes only: the version a discovery read of this record checks
  // (RedisKeys::version_of: conn-version:<cid> for `shared`, member-version:<member> else),
  // INCRed with the write.
  std::string version;
};

inline constexpr int64_t kDefaultLeaseMs = 60'000;
inline constexpr int64_t kDefaultBodyGraceMs = 24 * 3'600'000;
inline constexpr std::size_t kMinLeaseTokenBytes = 16;  // 128 random bits
inline constexpr std::size_t kMaxLeaseTokenBytes = 64;
inline constexpr std::size_t kMaxErrorMessageBytes = 1024;

// A held lease: what renew, release, commit and failure record prove ownership with.
struct Lease {
  int64_t fence = 0;
  std::string token;          // lowercase hex
  std::string value() const;  // "<fence>:<token>", the lease key's value
};

// The hex token for `random_bytes` (16 to 64 bytes from the host's CSPRNG).
Result<std::string> make_lease_token(std::string_view random_bytes);

// Why a fenced step did or did not happen. Names ("ok", "lease_lost", "stale_fence",
// "config_changed", "connection_removed") are stable: logs and metrics use them.
enum class LeaseOutcome { kOk = 0, kLeaseLost, kStaleFence, kConfigChanged, kConnectionRemoved };
const char* lease_outcome_name(LeaseOutcome outcome);

// --- acquire ---

Result<RedisCommand> acquire_lease_command(const LeaseKeys& keys, std::string_view token,
                                           int64_t lease_ms = kDefaultLeaseMs);

struct AcquireResult {
  bool acquired = false;
  Lease lease;                      // acquired: the fence granted and the caller's token
  int64_t holder_remaining_ms = 0;  // held by another: its lease's PTTL (-1: no expiry set)
  int64_t holder_fence = 0;         // held by another: its fence
};

// `token` is the one passed to acquire_lease_command.
Result<AcquireResult> parse_acquire_reply(const RespValue& reply, std::string_view token);

// --- renew and release (outcome kOk or kLeaseLost) ---

Result<RedisCommand> renew_lease_command(const LeaseKeys& keys, const Lease& lease,
                                         int64_t lease_ms = kDefaultLeaseMs);
Result<LeaseOutcome> parse_renew_reply(const RespValue& reply);

Result<RedisCommand> release_lease_command(const LeaseKeys& keys, const Lease& lease);
Result<LeaseOutcome> parse_release_reply(const RespValue& reply);

// --- the fenced writes ---

// What a successful listing commits (the manifest hash fields).
struct ManifestWrite {
  std::string manifest;     // canonical JSON
  std::string etag;         // content hash
  std::string config_hash;  // the connection's config_hash when the listing STARTED
  int64_t fetched_at_ms = 0;
  int64_t fresh_until_ms = 0;
  int64_t expires_at_ms = 0;
  std::string cache_scope;  // "public", "private", or empty (no hint: the field is removed)
  bool truncated = false;
};

// What a failed listing records.
struct RefreshFailure {
  std::string config_hash;    // as in ManifestWrite: compared, never written
  std::string error_code;     // e.g. error_code_name(ErrorCode::kTimeout)
  std::string error_message;  // no secrets; cut to kMaxErrorMessageBytes at a UTF-8 boundary
  int64_t error_at_ms = 0;
  int64_t attempt_at_ms = 0;
};

struct FencedWriteOptions {
  // No retention: a manifest hash has no TTL (schema/redis-keys.md). The last good manifest and
  // its error record stay until the connection (or the principal's grant) goes.
  bool release_lease = true;  // give the lease back in the same script
  // A commit keeps its body key (shared by every record with the same content, immutable) until
  // at least the manifest's expires_at (or Redis's clock, if later) plus this grace; every commit
  // naming the same content moves that later, never earlier. A body no record names any more goes
  // after it; a record that outlives its body is past expires_at, which readers never serve as data
  // (schema/redis-keys.md, "Manifest bodies").
  int64_t body_grace_ms = kDefaultBodyGraceMs;
  // When maintenance next has work on this key (epoch ms): the score of its refresh-due index
  // entry, written in the same atomic step (commit_due_at_ms / failure_due_at_ms in
  // shared/refresh_plan.h). 0 (the default): due at once; maintenance then looks at the entry
  // and moves it to when decide_refresh next has work. Earlier than needed only costs a look;
  // later would delay a refresh, so a writer never guesses late.
  int64_t due_at_ms = 0;
};

// Whether a commit carries the body's bytes (manifest_commit.lua, "The body's bytes go only when
// needed").
enum class CommitBody {
  kSend,      // the bytes go: the body key is written when absent (a commit that cannot fail on it)
  kIfStored,  // the SHA-256 alone: the commit goes through when the body key exists, else the
              // script answers "need_body" after the fenced checks and writes nothing
};

Result<RedisCommand> commit_manifest_command(const LeaseKeys& keys, const Lease& lease,
                                             const ManifestWrite& write,
                                             const FencedWriteOptions& options,
                                             CommitBody body = CommitBody::kSend);
Result<RedisCommand> record_failure_command(const LeaseKeys& keys, const Lease& lease,
                                            const RefreshFailure& failure,
                                            const FencedWriteOptions& options);

// The argument checks of the commands above without the commands: a store that runs the same
// steps without Redis (native-agent/store/sqlite_store.h) checks exactly what the scripts' callers
// do. kInvalidArgument, with the message the command builder gives.
Status validate_acquire(std::string_view token, int64_t lease_ms);
Status validate_renew(const Lease& lease, int64_t lease_ms);
Status validate_release(const Lease& lease);
Status validate_manifest_write(const Lease& lease, const ManifestWrite& write);
// A refresh-due index score (FencedWriteOptions::due_at_ms): 0 to 2^53 - 1 ms, exact in Lua.
Status validate_due_at(int64_t due_at_ms);
Status validate_refresh_failure(const Lease& lease, const RefreshFailure& failure);

struct FencedWriteResult {
  LeaseOutcome outcome = LeaseOutcome::kLeaseLost;
  int64_t epoch = 0;          // a commit: the epoch it bumped to (layout v2: its slot's version)
  int64_t current_fence = 0;  // kStaleFence: the newer fence that won
  bool ok() const { return outcome == LeaseOutcome::kOk; }
};

Result<FencedWriteResult> parse_commit_reply(const RespValue& reply);
// The reply to a CommitBody::kIfStored commit: nullopt when the body key was absent (nothing was
// written; the caller sends the commit again with CommitBody::kSend), else as parse_commit_reply.
Result<std::optional<FencedWriteResult>> parse_commit_if_stored_reply(const RespValue& reply);
Result<FencedWriteResult> parse_failure_reply(const RespValue& reply);

// --- the fenced writes in key layout v2 (docs/design.md "What crosses slots, and what it changes")
//
// A v1 script touches the record's keys, the connection record, the epoch, the body and the due
// index together; v2 spreads those over several slots, so a commit is three steps, each one slot:
//   body_store.lua           store_body_command          → parse_store_body_reply (the body first)
//   manifest_commit_v2.lua   commit_manifest_v2_command  → parse_commit_reply     ({"committed",
//   version}) ZADD on the connection's shard `due`, by the caller, only when it committed;
// a failure record two: manifest_fail_v2.lua (record_failure_v2_command → parse_failure_reply),
// then the ZADD. The v2 scripts take keys.manifest, lease, fence, version and, when not empty,
// keys.connection: the record's own slot holds the connection record only for `shared`, so a
// member's write leaves it empty and its config_hash is checked by readers instead. keys.epoch,
// keys.body and keys.due are not used (and the due member is not checked against the manifest
// key, which in v2 does not end with it).

// The body of `write` under `body_key` (RedisKeys::body of its SHA-256), kept until
// max(expires_at, Redis's now) + options.body_grace_ms; CommitBody::kIfStored sends the SHA-256
// alone and is answered need_body when the key is absent.
Result<RedisCommand> store_body_command(const std::string& body_key, const ManifestWrite& write,
                                        const FencedWriteOptions& options, CommitBody body);
// true: the body is stored (its expiry moved); false: need_body (nothing written).
Result<bool> parse_store_body_reply(const RespValue& reply);
Result<RedisCommand> commit_manifest_v2_command(const LeaseKeys& keys, const Lease& lease,
                                                const ManifestWrite& write,
                                                const FencedWriteOptions& options);
Result<RedisCommand> record_failure_v2_command(const LeaseKeys& keys, const Lease& lease,
                                               const RefreshFailure& failure,
                                               const FencedWriteOptions& options);

// A refused write as an error value (kConflict), for callers that propagate rather than branch.
Error fenced_write_error(const FencedWriteResult& result, const Lease& lease);

}  // namespace quiver
