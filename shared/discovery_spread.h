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
// A connection whose slot is split by a reshard (part of its keys moved to another node, the
// migration not yet ended by SETSLOT NODE) cannot run its read script anywhere: the script names
// keys that are usually absent (the lease, the disabled set, the mark), and Redis answers such a
// command TRYAGAIN at the source while some of its keys are there, ASK once none is, and TRYAGAIN
// at the importing node while one is missing there. The member's script on a split member slot
// is refused the same way. The host hands that TRYAGAIN back at once (`hand_back_split()` flags
// every read script; shared/redis_cluster.h cluster_reply_is_split_slot), and the read reads
// what that script reads key by key, each command one key and followed through ASK, in three
// more rounds between the script round and the next:
//   split 1  GET version (the connection's; for the member's script, the member's)
//   split 2  what the script reads, each key by the command the script uses: for a connection
//            HGETALL record, GET mark, and for the `shared` principal HGETALL manifest, SMEMBERS
//            disabled, EXISTS lease, GET principal's mark; for the member, those four of the
//            member's for each per-member connection of the script
//   split 3  GET version again: equal to split 1's, the reads are one snapshot of the slot's data
//            (every write of what they read INCRs that version in the same one-slot script or
//            transaction, and a version only grows), and the reply is the script's, byte for
//            byte; different, split 2 and 3 once more (split 3's version is the next split 1's),
//            then kStoreUnavailable (never a guess). The lease alone is not versioned: it is read
//            at one instant between the two GETs, when everything else had the values read.
// docs/design.md "Redis Cluster routing", "A connection read key by key while its slot is split".
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
  // One flag per command of this round: true for a read script (a connection's, the member's),
  // whose TRYAGAIN (its slot split by a reshard) the host hands back as its reply at once
  // (RoutedConversation::begin_spread, RedisClusterPool's ClusterRequest::hand_back_split) rather
  // than backing off: the read then reads what that script reads key by key. A host that cannot
  // hand it back loses nothing: the script's answer, or the store failure its budget ends in, is
  // what it was.
  const std::vector<bool>& hand_back_split() const { return hand_back_split_; }
  // Read scripts read key by key so far (their slot was split): one per connection's script, one
  // per member's script.
  std::size_t split_reads() const { return split_reads_; }
  // 1 (grants), 2 (the read scripts), 3 (a mode change read again); the split rounds of a script
  // round keep its number, and say reading_split().
  int round() const { return round_; }
  bool reading_split() const {
    return stage_ == Stage::kSplitBefore || stage_ == Stage::kSplitRead ||
           stage_ == Stage::kSplitAfter;
  }
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
  // A read script refused on a split slot, read key by key: a connection's (`entry`, its page
  // index) or the member's (no `entry`; `entries`: the page indexes of its per-member
  // connections, in its KEYS order). The version split 1 (or the last split 3) read, the replies
  // of split 2, and whether split 2 and 3 were already read again.
  struct SplitRead {
    std::optional<std::size_t> entry;
    std::vector<std::size_t> entries;
    std::string version;
    std::vector<RespValue> values;
    bool again = false;
  };
  enum class Stage {
    kGrants,       // round 1
    kScripts,      // round 2 (or 3): the read scripts
    kSplitBefore,  // split 1: GET version of each split connection
    kSplitRead,    // split 2: their keys, one command each
    kSplitAfter,   // split 3: GET version again
  };

  SpreadDiscoveryRead(RedisKeys keys, Principal member, SnapshotQuery query);
  Status feed_grants(const std::vector<RespValue>& replies);
  Status plan_reads(const std::vector<std::size_t>& which);
  Status feed_reads(const std::vector<RespValue>& replies);
  Status plan_split_versions(Stage stage);
  Status plan_split_read();
  Status feed_split(const std::vector<RespValue>& replies);
  // What a split read is called in errors; its version key; split 2's commands for it.
  std::string split_name(const SplitRead& split) const;
  Result<std::string> split_version_key(const SplitRead& split) const;
  Status add_split_reads(const SplitRead& split);
  // Split 2's replies of it have the types the script's reads give; the script's reply from them.
  bool split_values_ok(const SplitRead& split) const;
  void take_split_values(SplitRead& split);
  Status check_modes();
  // kStoreUnavailable for a granted connection whose slot lost its data (the .cpp says how).
  Status refuse_lost_connection(const PageEntry& e, bool conn_present,
                                const std::string& version) const;
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
  std::vector<bool> hand_back_split_;
  // The page indexes the script round read (checked for mode changes once all are read), and the
  // scripts of it being read key by key.
  std::vector<std::size_t> pass_;
  std::vector<SplitRead> split_;
  std::size_t split_reads_ = 0;
  Stage stage_ = Stage::kGrants;
  bool reread_ = false;  // the script round reads connections whose mode changed (round 3)
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
