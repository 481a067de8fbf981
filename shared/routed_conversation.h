// RoutedConversation: the edge's Redis rounds, on one Redis or on a Redis Cluster, without the
// sockets (issue 14; docs/design.md "Redis Cluster routing").
//
// On one Redis it is a RedisConversation (shared/redis_conversation.h) and nothing more: the same
// bytes, on the one connection the host opens to REDIS_HOST:REDIS_PORT.
//
// On a Redis Cluster (key layout v1: every key of a namespace carries the `{ns}` hash tag, so all
// of them live in one slot), a round of commands goes whole to the node serving the namespace's
// slot, and every reply is classified by shared/redis_cluster.h's decide_cluster_step:
//   - the map is learned from CLUSTER SHARDS (CLUSTER SLOTS on a server without SHARDS), asked of
//     a seed or a known master, once per isolate (ClusterRouter lives as long as the EdgeService)
//     and again after CLUSTERDOWN, READONLY, MASTERDOWN, an unreachable node or a slot no node
//     serves;
//   - MOVED: the map learns the slot's new master, the redirected commands go there;
//   - ASK: ASKING + each redirected command to the importing node, once (scripts as EVAL: an
//     EVALSHA's NOSCRIPT retry would go without ASKING), the map unchanged; except a round holding
//     a script or a MULTI, which waits the migration out instead (hold_ask_for_round: key layout
//     v1's scripts read keys they do not declare);
//   - TRYAGAIN, LOADING, CLUSTERDOWN, MASTERDOWN: again after a bounded backoff (`delay_ms` on the
//     write: the host waits, the core never does);
//   - budgets (redirects, attempts) exhausted: kStoreUnavailable quoting the last answer, which
//     the edge answers like any store failure (an L1 copy within stale-if-error, else 503
//     STORE_UNAVAILABLE), never as empty data.
// A replica-read round (RoundAccess::kReplicaRead: the edge's conditional read) may go to a
// replica when replica reads are on: its connection opens with AUTH + READONLY in one write
// (cluster_connection_preamble); a redirect sends it on to the master named. A connection that
// fails before anything was written (the host's `why` starts with "connect": refused, reset), or
// under a round that changes nothing (kRead, kReplicaRead), is retried
// after a refresh; a write that may have run is not sent again, nor is a TLS handshake the node
// refused (the host's `why` contains kTlsHandshakeFailed: the same trust fails again, at every
// node of the cluster; the round fails at once, kStoreUnavailable). A timeout is not retried: the
// request fails at once as on one Redis (the edge's fail-fast window and L1 copies take over)
// and the isolate's next round asks for the map first (a failover may be under way).
//
// Key layout v2 spreads a namespace over many slots: a spread round (`begin_spread`) routes each
// command by its own keys. Its pending commands are grouped per node by plan_cluster_batch (at
// most kMaxNodesPerRequest nodes in a plan; the others wait for a later write) and each group is
// one pipeline. Every group of a plan goes out in one write of several parts
// (RoutedWrite::parts, one per node): the host writes them all, reads every part's connection
// concurrently and hands each part's bytes back by its index (feed_part, or connection_failed_part
// when that part's connection failed); a write to one node only is an ordinary write (feed). The
// write is settled once every part is answered or failed: every reply is then classified on its
// own (a MOVED on one node sends only that node's redirected commands on, an ASK sends ASKING +
// those commands to the importing node, once), a part whose connection failed before anything
// was written (or under a read-only round) is sent again after a refresh, and one whose write may
// have run, or that timed out, fails the round; the next write carries what is left, and the
// round is done when every command has its reply. So a round over N nodes costs one round trip,
// not N. The attempt budget counts the writes that had something to redo, not the nodes or the
// parts of the round. On one Redis a spread round is one pipeline, as any other.
//
// Each write names its node; the host keeps one connection per node for the request
// (`new_connection`: close that node's connection, open another) and at most kMaxNodesPerRequest
// of them (Workers' limit of simultaneous sockets per request): past it the core names the
// connections to close first (`close`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/redis_cluster.h"
#include "shared/redis_conversation.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

// Workers let a request hold six sockets open at once.
inline constexpr std::size_t kMaxNodesPerRequest = 6;

struct ClusterRouterSettings {
  std::vector<ClusterNode> seeds;  // where the map is first asked for
  bool replica_reads = false;      // read-only rounds may go to a healthy replica
  bool tls = false;                // dial the nodes' TLS ports (CLUSTER SHARDS' `tls-port`)
  ClusterRetryPolicy retry;
};

struct ClusterRouterStats {
  uint64_t refreshes = 0;  // maps learned
  uint64_t moved = 0;      // MOVED followed
  uint64_t ask = 0;        // ASK answers (followed, or waited out)
  uint64_t retries = 0;    // backoffs, unreachable nodes, TRYAGAIN, CLUSTERDOWN, ...
  uint64_t split = 0;      // TRYAGAIN handed back to a command flagged hand_back_split
};

// What the isolate knows of the cluster: the slot map, learned once and updated by MOVED.
class ClusterRouter {
 public:
  // `slot`: the namespace's (cluster_key_slot of any of its keys).
  ClusterRouter(ClusterRouterSettings settings, uint16_t slot);

  const ClusterRouterSettings& settings() const { return settings_; }
  uint16_t slot() const { return slot_; }
  bool have_map() const { return have_map_; }
  const ClusterSlotMap& map() const { return map_; }
  const ClusterRouterStats& stats() const { return stats_; }

  // Where the slot's commands go now: its master, or for a read a healthy replica when replica
  // reads are on (`*replica` says which); nullopt when the map has no shard for the slot.
  std::optional<ClusterNode> node_for_slot(bool read, bool* replica);
  // Where the next CLUSTER SHARDS (or SLOTS) is asked: the seeds and the known masters in turn.
  ClusterNode refresh_node();
  // The command that asks for the map.
  RedisCommand map_command() const;
  // The map from that command's reply, given by `answered` (the node asked). An error reply to
  // CLUSTER SHARDS (a server before 7.0) switches to CLUSTER SLOTS for the next try.
  Status learn(const RespValue& reply, const ClusterNode& answered);
  void moved(uint16_t slot, const ClusterNode& node);
  void note_ask() { ++stats_.ask; }
  void note_retry() { ++stats_.retries; }
  void note_split() { ++stats_.split; }
  // A node timed out: the next round of any request asks for the map first.
  void mark_stale() { stale_ = true; }
  bool take_stale() { return std::exchange(stale_, false); }

 private:
  ClusterRouterSettings settings_;
  uint16_t slot_;
  ClusterSlotMap map_;
  bool have_map_ = false;
  bool use_slots_ = false;
  bool stale_ = false;
  uint64_t next_refresh_ = 0;
  uint64_t spread_ = 0;
  ClusterRouterStats stats_;
};

// One node's pipeline of a write in parts.
struct RoutedPart {
  std::string bytes;
  bool new_connection = false;  // open a fresh connection to `node` (closing that node's one)
  ClusterNode node;
};

// One write the host carries out.
struct RoutedWrite {
  std::string bytes;
  bool new_connection = false;      // open a fresh connection to `node` (closing that node's one)
  std::optional<ClusterNode> node;  // nullopt: the one configured Redis (REDIS_HOST, REDIS_PORT)
  int64_t delay_ms = 0;             // wait this long before writing (a cluster backoff)
  std::vector<std::string> close;   // ClusterNode::address() of connections to close first
  // A spread round over several nodes: one pipeline per node (distinct nodes, at most
  // kMaxNodesPerRequest), all written at once after `delay_ms` and `close`; `bytes`, `node` and
  // `new_connection` are then unused. Each part's replies come back by its index (feed_part).
  std::vector<RoutedPart> parts;
};

// What a part's bytes (or its failure) lead to.
enum class PartTurn {
  kRead,   // more bytes from this part's connection
  kWrite,  // write take_write() on this part's connection, then read it (NOSCRIPT: EVAL)
  kWait,   // this part is settled; the write goes on when the other parts are
  kRound,  // every part is settled: round_turn() says what next (kWrite, kDone or kFailed)
};
const char* part_turn_name(PartTurn turn);  // "read", "write", "wait", "round"

// What a round's commands may do, which decides where they go and whether they are sent again.
enum class RoundAccess {
  kWrite,  // may change data: to masters; not sent again once it may have run
  kRead,   // changes nothing: sent again after a failure; to masters
  // Changes nothing, and its reader takes a replica's view (QUIVER_REDIS_REPLICA_READS): on its
  // first try to a replica of the slot. A replica knows nothing of its master's migrations: a key
  // moved away reads as absent there, not as ASK. So only a read that takes an absent key for a
  // change, and asks its master then, may be one: the edge's conditional read, never a full read
  // whose answer is rendered from what it reads (docs/design.md, "Replica reads").
  kReplicaRead,
};

class RoutedConversation {
 public:
  // `router`: nullptr for one Redis; else the isolate's, which must outlive this conversation.
  explicit RoutedConversation(RespLimits limits = {}, RedisCredentials credentials = {},
                              ClusterRouter* router = nullptr);

  // Starts a round (RedisConversation::begin's arguments; `access`: RoundAccess).
  RoutedWrite begin(std::vector<RedisCommand> commands, ScriptForm form = ScriptForm::kBySha,
                    bool keep_bytes = false, RoundAccess access = RoundAccess::kWrite);
  // A round whose commands each go to the node of their own key's slot (key layout v2): grouped
  // per node, at most kMaxNodesPerRequest sockets. No keep_bytes. On one Redis: begin().
  // `hand_back_split` (empty, or one flag per command): a flagged command answered TRYAGAIN (its
  // slot split by a reshard: cluster_reply_is_split_slot), at its node or at the importing node
  // an ASK named, gets that reply as its own at once instead of backing off until the budget is
  // spent; its reader reads the data another way (SpreadDiscoveryRead::hand_back_split()).
  RoutedWrite begin_spread(std::vector<RedisCommand> commands, ScriptForm form = ScriptForm::kBySha,
                           RoundAccess access = RoundAccess::kWrite,
                           std::vector<bool> hand_back_split = {});
  // Bytes read from the connection of the last write. kWrite: carry out take_write() (the same
  // node, or another after a redirect); kDone: take_replies(); kFailed: error().
  // Whether any command of the round (since begin) was sent to a replica.
  bool sent_to_replica() const { return sent_to_replica_; }
  RedisTurn feed(std::string_view bytes);
  RoutedWrite take_write();
  std::vector<RespValue> take_replies();
  const Error& error() const { return error_; }
  // After kDone with `keep_bytes` on a round of one command: its reply's bytes as Redis sent
  // them; empty when they cannot be told apart from ASKING's or READONLY's (then not kept).
  const std::string& reply_bytes() const {
    return router_ == nullptr ? conns_[0].conv.reply_bytes() : bytes_;
  }
  // The connection of the last write failed (the host's words). kWrite: a retry elsewhere
  // (take_write); kFailed: error(), the round is over. After a write in parts, the whole write
  // failed on the host (each part's own failure goes to connection_failed_part): kFailed.
  RedisTurn connection_failed(std::string_view why);
  // A write in parts (RoutedWrite::parts): bytes read from part `part`'s connection, or that
  // connection's failure. kRound once every part is settled, then round_turn(); a part not in
  // flight is a host error (the round fails: kRound, kFailed).
  PartTurn feed_part(std::size_t part, std::string_view bytes);
  PartTurn connection_failed_part(std::size_t part, std::string_view why);
  // After kRound: kWrite (take_write()), kDone (take_replies()) or kFailed (error()).
  RedisTurn round_turn() const { return round_turn_; }
  // The parts of the write in flight (0 when it is not in parts).
  std::size_t parts() const { return parts_.size(); }
  // Forgets every connection: the next round opens new ones (the host closes them).
  void drop();

  bool in_round() const { return in_round_; }
  // The last feed() completed a node's replies (error replies, MOVED included): Redis is not
  // stalled, whatever comes next.
  bool answered() const { return answered_; }
  bool clustered() const { return router_ != nullptr; }

 private:
  struct Conn {
    ClusterNode node;
    RedisConversation conv;
    uint64_t used = 0;
  };

  RedisConversation& current() { return conns_[current_].conv; }
  // A replica on the first try only: after a redirect or a failure, the master named.
  bool first_try_at_replica() const {
    return access_ == RoundAccess::kReplicaRead && attempts_ == 0;
  }
  // The next write of the round at the node the map (or an ASK) names; kFailed when none is left.
  RedisTurn dispatch();
  RedisTurn give_up(Error error);
  RedisTurn retry_after_failure(std::string_view why);
  RedisTurn cluster_done();
  // A spread round's next write: every node group of the plan (or of the pending ASKs) at once.
  RedisTurn dispatch_spread();
  // A part settled: kWait while others are in flight, else kRound with the write's outcome.
  PartTurn part_settled();
  // Every part of the write settled: each reply classified, what is left sent on.
  RedisTurn parts_done();
  // A write in parts fed as an ordinary write (it has one part, at one node).
  RedisTurn single_part(PartTurn turn);
  std::size_t conn_for(const ClusterNode& node, std::vector<std::string>* close);
  std::size_t conn_at(const ClusterNode& node) const;

  RespLimits limits_;
  RedisCredentials credentials_;
  ClusterRouter* router_ = nullptr;
  std::vector<Conn> conns_;  // one for one Redis; per node on a cluster
  std::size_t current_ = 0;
  uint64_t use_ = 0;

  // The round.
  bool in_round_ = false;
  bool answered_ = false;
  std::vector<RedisCommand> commands_;
  ScriptForm form_ = ScriptForm::kBySha;
  bool keep_bytes_ = false;
  RoundAccess access_ = RoundAccess::kWrite;
  bool sent_to_replica_ = false;
  std::vector<std::size_t> pending_;  // commands without a reply (spread: not yet written)
  bool spread_ = false;               // each command to its own slot's node
  bool spread_next_ = false;          // begin_spread → begin
  // spread: per command, a TRYAGAIN is its reply (begin_spread's hand_back_split); empty: none.
  std::vector<bool> hand_back_split_;
  std::vector<bool> hand_back_split_next_;  // begin_spread → begin
  // spread: commands an ASK sent to an importing node, per node (ASKING + each, once).
  std::vector<std::pair<ClusterNode, std::vector<std::size_t>>> asks_;
  // spread: the write in flight, one part per node.
  enum class PartState { kInFlight, kAnswered, kFailed };
  struct Part {
    ClusterNode node;
    std::vector<std::size_t> commands;  // into commands_
    bool asking = false;                // each command behind an ASKING
    std::size_t preamble = 0;           // replies before the commands' (READONLY)
    PartState state = PartState::kInFlight;
    std::vector<RespValue> answers;  // kAnswered: the commands' replies, in order
    std::string unsent;              // kFailed, to send again: the connection's failure
  };
  std::vector<Part> parts_;
  std::optional<Error> parts_error_;  // a part's failure that ends the round once all settle
  RedisTurn round_turn_ = RedisTurn::kFailed;
  std::vector<std::optional<RespValue>> replies_;
  int attempts_ = 0;
  int redirects_ = 0;
  std::optional<ClusterNode> ask_;
  bool refresh_ = false;
  int64_t delay_ms_ = 0;
  // The write in flight.
  bool learning_ = false;     // it asks for the map
  bool asking_ = false;       // each command behind an ASKING
  std::size_t preamble_ = 0;  // replies before the commands' (READONLY)
  RoutedWrite write_;
  std::string bytes_;
  Error error_;
};

}  // namespace quiver
