// Redis Cluster routing, as decisions: which node a command goes to, and what to do when a node
// answers that the slot lives elsewhere.
//
// No cluster-aware C client ships in Debian 12 or 13, and the edge could not use one anyway (its
// sockets belong to the JS host), so both hosts route with this code and only move bytes:
//
//   - `cluster_key_slot(key)`: CRC16-XMODEM of the key (or of its `{hash tag}`) mod 16384, exactly
//     as the Redis Cluster specification defines it (`CLUSTER KEYSLOT` agrees: tested against a
//     real cluster);
//   - `ClusterSlotMap`: which shard (a master and its replicas) serves each slot, parsed from
//     `CLUSTER SHARDS` (Redis 7) or `CLUSTER SLOTS` (older servers), bounded and refusing
//     inconsistent input (a slot claimed twice, a slot past 16383, a port past 65535) with
//     kInvalidReply; updated slot by slot on MOVED;
//   - `decide_cluster_step(reply, ...)`: a node's reply to a routed command classified into what
//     the host does next: use the reply, retry at the node a MOVED names (and remember it), send
//     ASKING + the command to the node an ASK names (and remember nothing), refresh the map, back
//     off and retry (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN), or give up with a clear error
//     once the redirects or attempts run out;
//   - `plan_cluster_batch(map, commands, options)`: a batch of commands grouped per node (one
//     pipeline each), writes to masters, reads to a replica when allowed, at most `max_nodes`
//     distinct nodes per round (six for the edge, Workers' limit of open sockets per request); the
//     rest wait for the next round.
//
// A replica serves reads only after READONLY: the first write on a connection to a replica is
// AUTH + READONLY (`cluster_connection_preamble`; RedisConversation puts AUTH in front).
//
// RESP: shared/resp.h decodes RESP2, and Quiver never sends HELLO 3. A RESP3 map arrives in a
// RespValue the way a RESP2 server sends it, a flat [key, value, ...] array, so the parsers accept
// that one shape, with numbers as integers or as decimal strings (both protocols' forms).
//
//   ClusterSlotMap map = *ClusterSlotMap::from_shards(reply, seed_host);
//   ClusterPlan plan = plan_cluster_batch(map, commands, {.max_nodes = 6});
//   for (const ClusterNodeBatch& b : plan.batches) send b.indices' commands to b.node ...
//   ClusterStep step = decide_cluster_step(reply, node.host, attempt, policy);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/redis_conversation.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

inline constexpr int kClusterSlotCount = 16384;

// CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection): Redis Cluster's key hash.
uint16_t crc16_xmodem(std::string_view data);

// The part of `key` that is hashed: the text between the first '{' and the first '}' after it,
// when that text is not empty; otherwise the whole key ("{}x" and "{x" hash whole).
std::string_view cluster_hash_tag(std::string_view key);

// The slot of `key`, 0..16383.
uint16_t cluster_key_slot(std::string_view key);

// The keys a command names, by the rules of the commands Quiver sends (EVAL/EVALSHA/FCALL and
// their _RO forms: their numkeys keys; DEL, EXISTS, MGET, ...: every argument; MSET: every other;
// XREAD(GROUP): the streams after STREAMS; XGROUP and XINFO: argv[2], after the subcommand; a
// command known to take no key: none; any other: argv[1]). kInvalidArgument for an empty argv or a
// malformed numkeys.
Result<std::vector<std::string_view>> command_keys(const RedisCommand& argv);

// The one slot every key of the command hashes to; nullopt for a command without keys.
// kInvalidArgument when its keys hash to different slots (Redis would answer CROSSSLOT).
Result<std::optional<uint16_t>> command_slot(const RedisCommand& argv);

// Whether a command changes nothing in Redis (a read: GET, MGET, HGETALL, SCAN, ZRANGEBYSCORE,
// XREAD without a group, EVAL_RO, ...; names compared case-insensitively). Such a command may be
// sent again after a connection failed mid-round (RedisClusterPool), and is what an agent still
// sends to a namespace in a key layout it does not know (RedisStore's layout gate,
// shared/layout.h). Any command not listed (XREADGROUP, EVAL, SET, ...) counts as a write.
bool redis_command_changes_nothing(const RedisCommand& argv);

// One node as the cluster announces it.
struct ClusterNode {
  std::string host;  // IP or hostname, IPv6 without brackets
  int port = 0;
  std::string id;       // the node id; empty when the reply did not say (old CLUSTER SLOTS)
  bool healthy = true;  // CLUSTER SHARDS `health` "online" (SLOTS does not say: assumed)

  // "host:port", "[::1]:port" for IPv6: the key a host's connection pool uses.
  std::string address() const;
  bool same_address(const ClusterNode& other) const {
    return host == other.host && port == other.port;
  }
};

struct ClusterSlotRange {
  uint16_t first = 0;
  uint16_t last = 0;  // inclusive
};

// A master and its replicas, and the slots they serve.
struct ClusterShard {
  std::vector<ClusterSlotRange> ranges;
  ClusterNode master;
  std::vector<ClusterNode> replicas;
};

// Bounds on what a CLUSTER SHARDS / SLOTS reply may hold; past one, kInvalidReply.
struct ClusterParseLimits {
  std::size_t max_shards = 1024;
  std::size_t max_nodes_per_shard = 64;
  std::size_t max_host_bytes = 255;
  std::size_t max_ranges = kClusterSlotCount;
};

// Which of a node's ports a client dials. CLUSTER SHARDS names both `port` (plain TCP) and
// `tls-port` when a node listens on both; a TLS client must take `tls-port`, a plain one `port`.
// A node that announces only one of them is reached on that one. (CLUSTER SLOTS and MOVED already
// name the port of the asking connection's kind.)
enum class ClusterPort { kPlain = 0, kTls };

class ClusterSlotMap {
 public:
  // An empty map: every slot unserved.
  ClusterSlotMap();

  // From CLUSTER SHARDS. `answered_host`: the host of the node that answered, used where a node's
  // endpoint is empty or "?" (a node that does not know its own address). `port`: which announced
  // port each node is reached on (the client's TLS or plain TCP).
  static Result<ClusterSlotMap> from_shards(const RespValue& reply, std::string_view answered_host,
                                            const ClusterParseLimits& limits = {},
                                            ClusterPort port = ClusterPort::kPlain);
  // From CLUSTER SLOTS (servers before 7.0).
  static Result<ClusterSlotMap> from_slots(const RespValue& reply, std::string_view answered_host,
                                           const ClusterParseLimits& limits = {});
  // The shards given; kInvalidArgument when two claim one slot or a range is out of bounds.
  static Result<ClusterSlotMap> from_shard_list(std::vector<ClusterShard> shards);

  // The shard serving `slot`; nullptr when none does (CLUSTERDOWN territory) or slot >= 16384.
  const ClusterShard* shard_for_slot(uint16_t slot) const;
  const std::vector<ClusterShard>& shards() const { return shards_; }
  std::size_t served_slots() const { return served_; }
  bool covers_all_slots() const { return served_ == kClusterSlotCount; }

  // MOVED: `slot` is now served by the master at `node`. Only that slot changes (other slots of the
  // old shard are found out by their own MOVED or the next refresh). A master not in the map
  // becomes a shard of its own, with no replicas, until the next refresh.
  void apply_moved(uint16_t slot, const ClusterNode& node);

  // The masters, each once, in shard order: where a command without a key, or a SCAN of every
  // key, goes.
  std::vector<ClusterNode> masters() const;

 private:
  std::vector<ClusterShard> shards_;
  std::vector<int16_t> owner_;  // per slot: index into shards_, -1 when unserved
  std::size_t served_ = 0;
};

// ---- replies: what to do next ------------------------------------------------------------------

struct ClusterRetryPolicy {
  int max_redirects = 5;  // MOVED + ASK followed for one command
  int max_attempts = 8;   // every try of one command, redirects and retries included
  int64_t backoff_initial_ms = 20;
  int64_t backoff_max_ms = 500;
  // A slot migration's answers (TRYAGAIN, and the ASK or MOVED that come after it) may be
  // followed until this many attempts when it is more than max_attempts (0: no more); redirects
  // keep max_redirects. A command whose keys are split by a migration (some moved, some not, or
  // one of them absent: Redis counts an absent key as not moved) is answered TRYAGAIN by both
  // nodes until the slot's last key has moved and SETSLOT NODE ends the migration, which lasts
  // as long as the MIGRATEs of the whole slot; the hosts that wait it out set this (the agent's
  // spread rounds: RedisClusterPool::run_batch), the others keep max_attempts.
  int max_tryagain_attempts = 0;
};

// A node's reply to a routed command, classified. Redis's words: "MOVED 3999 10.0.0.2:6381",
// "ASK 3999 10.0.0.2:6381" (an empty host before the ':' means the host that answered), "TRYAGAIN
// ...", "CLUSTERDOWN ...", "LOADING ...", "READONLY ..." (a write reached a replica: the map is
// stale), "MASTERDOWN ...".
struct ClusterRedirect {
  enum class Kind {
    kNone = 0,  // not a routing answer: the reply is the command's
    kMoved,
    kAsk,
    kTryAgain,
    kClusterDown,
    kLoading,
    kReadOnly,
    kMasterDown,
  };
  Kind kind = Kind::kNone;
  uint16_t slot = 0;  // kMoved, kAsk
  ClusterNode node;   // kMoved, kAsk
};
const char* cluster_redirect_kind_name(ClusterRedirect::Kind kind);  // "none", "moved", ...

// kInvalidReply for a MOVED or ASK whose slot or address does not parse.
Result<ClusterRedirect> parse_cluster_redirect(const RespValue& reply,
                                               std::string_view answered_host);

struct ClusterStep {
  enum class Action {
    kUseReply = 0,      // the reply is the command's (an error reply of its own included)
    kRetryAt,           // MOVED: map updated by the caller (apply_moved), send to `node`
    kAskAt,             // ASK: send ASKING then the command to `node`, once; the map stays
    kRefreshThenRetry,  // the map is wrong (READONLY): refresh it, then retry
    kBackoffThenRetry,  // wait `backoff_ms`; refresh the map first when `refresh_map`
    kGiveUp,            // `error` says why (redirects or attempts exhausted, bad redirect)
  };
  Action action = Action::kUseReply;
  ClusterNode node;
  uint16_t slot = 0;
  bool refresh_map = false;
  int64_t backoff_ms = 0;
  Error error;
};
const char* cluster_action_name(ClusterStep::Action action);

// What follows `reply` to the `attempt`th try of a command (1 = the first send), `redirects`
// MOVED/ASK already followed. Exhausted budgets are kGiveUp with kStoreUnavailable, never
// kInternal: a cluster in the middle of a failover or a reshard is a store that passes.
// TRYAGAIN, ASK and MOVED give up at max(max_attempts, max_tryagain_attempts) attempts (ASK and
// MOVED also at max_redirects); every other answer at max_attempts.
ClusterStep decide_cluster_step(const RespValue& reply, std::string_view answered_host, int attempt,
                                int redirects, const ClusterRetryPolicy& policy);

// An ASK is followed command by command (ASKING holds for the next command only), which is
// right for a command that declares its keys: the importing node answers TRYAGAIN while some of
// them have not moved yet. Two kinds of round may not follow one:
//   - a transaction (MULTI ... EXEC): it is not split;
//   - a round holding a script: key layout v1's scripts read keys they do not declare, and at the
//     importing node such a key that has not moved yet reads as absent (a `disabled` overlay still
//     on the source would not hide its tool), which would be a wrong answer, never an error.
// Such a round waits out the migration instead: a bounded backoff, then the same node again, which
// answers MOVED once the slot has moved (or ASK again, within the attempts and redirects budgets;
// spent, the round is a store failure, kStoreUnavailable). `step` is what decide_cluster_step said
// of the round's first routing answer; anything but kAskAt is returned as it is.
ClusterStep hold_ask_for_round(ClusterStep step, const std::vector<RedisCommand>& round,
                               int attempt, const ClusterRetryPolicy& policy);

// Whether `reply` is Redis's TRYAGAIN: a command whose keys a slot migration splits between the
// two nodes (some moved, some not; Redis counts an absent key as not moved), refused by the node
// that answered for as long as the slot is split. A request the host marks `hand_back_split`
// (ClusterRequest, RoutedConversation::begin_spread) gets this reply as its own instead of the
// backoff: its reader reads the same data another way (SpreadDiscoveryRead reads what a split
// read script reads key by key, shared/discovery_spread.h). Only TRYAGAIN: the ASK that may come
// before it is followed as for any command (ASKING + the command at the importing node), and the
// other routing answers (MOVED, CLUSTERDOWN, LOADING, ...) keep their steps.
bool cluster_reply_is_split_slot(const RespValue& reply);

// The bounded exponential backoff before retry number `retry` (1-based).
int64_t cluster_backoff_ms(int retry, const ClusterRetryPolicy& policy);

// What a host puts in its `why` when a node accepts TCP but the TLS handshake fails (an untrusted
// CA, a certificate for another name, a node that does not speak TLS): the host's words for it,
// e.g. wasm-worker/worker.mjs's after its plain-TCP probe, contain these.
inline constexpr std::string_view kTlsHandshakeFailed = "TLS handshake failed";

// The step for a node whose connection failed (refused, reset, timed out): refresh the map and
// retry after a backoff, within the attempts budget. `why` goes into the error. A TLS handshake
// failure (`why` contains kTlsHandshakeFailed) gives up at once: the same trust fails the same
// way at the next try, and the nodes of a cluster share their CA, so retries only delay the
// answer (they took about 1.7 s of backoffs with the default policy).
ClusterStep cluster_step_after_io_failure(std::string_view why, int attempt,
                                          const ClusterRetryPolicy& policy);

// ---- planning a batch --------------------------------------------------------------------------

struct ClusterRequest {
  RedisCommand argv;
  bool read_only = false;  // may go to a replica (when the plan allows replica reads)
  // A TRYAGAIN (cluster_reply_is_split_slot), at the source or at the importing node after an
  // ASK, is this request's reply, handed back at once rather than retried after a backoff: the
  // caller reads the same data another way. RedisClusterPool::run_batch honours it.
  bool hand_back_split = false;
};

struct ClusterPlanOptions {
  std::size_t max_nodes = 0;   // distinct nodes per round; 0: no cap
  bool replica_reads = false;  // read_only commands may go to a healthy replica
  // Spreads reads over a shard's replicas: the host passes something that varies (a request
  // counter, a random number); the core has no randomness of its own.
  uint64_t spread = 0;
};

struct ClusterNodeBatch {
  ClusterNode node;
  bool replica = false;              // connect with cluster_connection_preamble(true)
  std::vector<std::size_t> indices;  // into the request list, in order
};

struct ClusterPlan {
  std::vector<ClusterNodeBatch> batches;  // at most max_nodes
  // Over the node cap: plan them again (with the remaining requests) in a next round.
  std::vector<std::size_t> deferred;
  // Requests that cannot be routed: keys in different slots, a slot no shard serves, an empty
  // argv. Each with its error; the rest of the batch is planned regardless.
  std::vector<std::pair<std::size_t, Error>> refused;
};

ClusterPlan plan_cluster_batch(const ClusterSlotMap& map,
                               const std::vector<ClusterRequest>& requests,
                               const ClusterPlanOptions& options = {});

// What goes first on a new connection to a node, after AUTH: READONLY for a replica that is to
// serve reads, nothing for a master.
std::vector<RedisCommand> cluster_connection_preamble(bool replica);

}  // namespace quiver
