// The discovery read on key layout v2, where a namespace is spread over many slots (docs/design.md,
// "Key layout v2" → "The discovery read on v2, round by round").
//
// On layout v1 one script reads everything (shared/discovery_redis.h). On v2 the member's grants
// and per-member data live in the member's slot, each connection's record and shared data in the
// connection's, and the namespace record in the namespace's: no script may touch two of them. The
// read therefore goes in rounds, and every command of a round touches one slot and declares every
// key it touches (the host routes them, grouped per node: plan_cluster_batch in
// shared/redis_cluster.h; on one node it pipelines them):
//
//   round 1  GET layout record, GET namespace record, GET member version, then HGETALL (or HGET,
//   for `only`) of the
//            member's grants: a HASH connection id → credential mode. The layout record must name
//            the layout the keys are spelled in (shared/layout.h read_layout): a namespace that
//            moved (a migration's switch, or back) ends the read with kStoreUnavailable and
//            layout_seen() says where it is now, so the host reads again in that layout; a record
//            no layout of this build reads is unknown_layout_error. The version is read before
//            the grants: a write between them leaves a version older than the grants read, which
//            a later conditional read sees as a change (never the reverse).
//   round 2  per connection of the page, schema/lua/discovery_conn_read.lua on its slot (record,
//            version, connection-wide mark, and the `shared` principal's data when the grant says
//            shared); one schema/lua/discovery_member_read.lua on the member's slot for the
//            per-member connections of the page.
//   round 3  only when a record's credential mode disagrees with the grant's (a mode change
//            between the two writes): those connections again, read as their record says. A second
//            disagreement is kStoreUnavailable (a retry reads the settled state), never a guess.
//
// The snapshot is the one decode_discovery_reply gives for the same data on v1, entry for entry
// (every entry goes through decode_discovery_entry), with the versions it read: the namespace
// record and the member version from round 1, each connection's version from the same script as
// its record. There is no epoch on v2 (DiscoverySnapshot::epoch is 0).
//
// Sans-I/O: `commands()` are this round's commands; the host sends them (any order across nodes)
// and hands the replies back to `feed` in the order of `commands()`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shared/discovery_snapshot.h"
#include "shared/identity.h"
#include "shared/redis_conversation.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

inline constexpr char kDiscoveryConnReplyTag[] = "quiver.discovery.conn.v1";
inline constexpr char kDiscoveryMemberReplyTag[] = "quiver.discovery.member.v1";

// The credential modes a v2 grant names (the grant HASH's values).
inline constexpr char kGrantModeShared[] = "shared";
inline constexpr char kGrantModePerMember[] = "per_member";

class SpreadDiscoveryRead {
 public:
  // kInvalidArgument as discovery_read_command: a shared principal, an invalid `only`, a limit out
  // of [1, kMaxSnapshotLimit], an `after` too long.
  static Result<SpreadDiscoveryRead> start(const RedisKeys& keys, const Principal& member,
                                           const SnapshotQuery& query = {});

  // This round's commands (empty once done).
  const std::vector<RedisCommand>& commands() const { return commands_; }
  int round() const { return round_; }
  bool done() const { return done_; }

  // The replies to commands(), in their order. Then done() or a next round. kStoreUnavailable for a
  // Redis error reply (or a mode still changing), kStoreNotReady when the namespace record is not
  // `ready`, kInvalidReply for any other shape; after an error the read is over.
  Status feed(const std::vector<RespValue>& replies);

  // The snapshot, once done().
  DiscoverySnapshot take_snapshot();

  // After round 1: the layout the namespace's record names, when this build reads it (nullopt
  // before, or for a record it does not read). A read that ended because it differs from the keys'
  // layout is read again in this one.
  std::optional<KeyLayout> layout_seen() const { return layout_seen_; }

 private:
  struct PageEntry {
    std::string cid;
    std::string grant_mode;  // as the grant says; the record decides
    bool read_shared = false;
    bool read_member = false;
    RespValue conn_reply;   // the discovery_conn_read reply part: {conn, version, marked, shared}
    RespValue member_part;  // {manifest, disabled, lease, invalidated} from member_read
  };

  SpreadDiscoveryRead(RedisKeys keys, Principal member, SnapshotQuery query);
  Status feed_grants(const std::vector<RespValue>& replies);
  Status plan_reads(const std::vector<std::size_t>& which);
  Status feed_reads(const std::vector<RespValue>& replies);
  Status finish();

  RedisKeys keys_;
  Principal member_;
  SnapshotQuery query_;
  DiscoverySnapshot snapshot_;
  std::vector<PageEntry> page_;
  std::vector<RedisCommand> commands_;
  // What commands_ of a read round are: page index per conn command; the page indexes read by the
  // member command (if any), which is last.
  std::vector<std::size_t> conn_commands_;
  std::vector<std::size_t> member_commands_;
  std::optional<KeyLayout> layout_seen_;
  int round_ = 1;
  bool done_ = false;
  bool failed_ = false;
};

// ---- the conditional read on v2
// ------------------------------------------------------------------
//
// What the v1 script checks in one MGET, as single-key commands, one slot each (route them like a
// round): GET layout record, GET namespace record, GET member version, GET each entry's connection
// version, EXISTS the lease of each of `lease_entries` (indexes into held.connections,
// lease_sensitive_entries). Unchanged when every value equals what `held` holds (the layout record
// as its full read saw it): then `held` takes the lease flags read and is current, as
// decode_conditional_reply's nullopt. Otherwise the caller does a full read. kInvalidArgument for a
// snapshot without versions, or a lease entry out of range or without a principal.
Result<std::vector<RedisCommand>> spread_conditional_commands(
    const RedisKeys& keys, const DiscoverySnapshot& held,
    const std::vector<std::size_t>& lease_entries);

// true: unchanged (held's lease flags updated); false: read again in full. kStoreUnavailable for a
// Redis error reply, kInvalidReply for a reply count or shape that does not match.
Result<bool> decode_spread_conditional(const std::vector<RespValue>& replies,
                                       DiscoverySnapshot& held,
                                       const std::vector<std::size_t>& lease_entries);

// The replies of spread_conditional_commands(keys, held, {}) (no leases asked): whether every
// version `held` was read at is unchanged. Errors as decode_spread_conditional.
Result<bool> decode_spread_unchanged(const std::vector<RespValue>& replies,
                                     const DiscoverySnapshot& held);

}  // namespace quiver
