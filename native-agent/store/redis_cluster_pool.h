// RedisClusterPool: the agent's connections to a Redis Cluster, one per node, over hiredis.
//
// The routing is the core's (shared/redis_cluster.h): the pool only carries its decisions out.
// It learns the slot map from the seed nodes (CLUSTER SHARDS, or CLUSTER SLOTS on a server older
// than 7.0), sends each command to the node serving its key's slot (commands for one node of a
// batch go as one pipeline), and follows the answers: MOVED updates the map and retries at the
// named master; ASK sends ASKING + the command to the importing node once and leaves the map
// alone (in run_batch, a TRYAGAIN from there is retried there, after ASKING, until the slot has
// moved: going back to the source would spend a redirect per retry); TRYAGAIN, LOADING, CLUSTERDOWN
// and MASTERDOWN are retried after a bounded backoff (the last two after a map refresh); READONLY
// (a write reached a former master) refreshes the map. A node that cannot be reached refreshes the
// map and the command is retried within the budget (ClusterRetryPolicy), except a write whose
// connection failed after it was sent: whether it ran is unknown, so it fails (kStoreUnavailable)
// rather than run twice. What the budget cannot fix is kStoreUnavailable with the last answer in
// the message, never kInternal.
//
// Connections open lazily, with a connect and a command timeout; AUTH goes first, and a connection
// to a replica that serves reads (`replica_reads`) sends READONLY in the same write as AUTH. The
// bytes are the core's RedisConversation (EVALSHA, then EVAL on NOSCRIPT; the RESP decoder);
// hiredis opens the socket, runs the TLS handshake (`tls`, the nodes' TLS ports: a cluster with
// `tls-cluster yes` announces them) and carries the bytes. The password never appears in an
// error or describe().
//
// A round over several nodes (run_batch, run_on_masters) writes every node's pipeline before it
// reads any reply: it costs the slowest node's round trip, not the sum of them. Each node's
// replies are then read on its own connection (a NOSCRIPT's EVAL goes again there, the other nodes'
// replies wait in their sockets meanwhile), and decided per command as before; a node whose
// connection fails or times out fails only its own commands. A connection carries one round at a
// time: two pipelines for one address in a round (a node named as a master and as a replica in
// the middle of a failover) go one after the other. A round's ASKs go the same way: each
// importing node gets its asked commands in one pipeline, ASKING before each.
//
// Threads: one mutex for the whole pool (calls take turns; a call waiting out a backoff lets the
// others go meanwhile).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/base/config.h"
#include "shared/redis_cluster.h"
#include "shared/status.h"

namespace quiver {

struct RedisClusterPoolOptions {
  std::vector<ClusterNode> seeds;  // host and port of one or more nodes
  std::string username;            // empty: the default user
  std::optional<Secret> password;  // nullopt: no AUTH
  bool tls = false;                // rediss://: every node over TLS (redis_link.h)
  RedisTlsFiles tls_files;         // CA file, client certificate, server name (tls only)
  int64_t connect_timeout_ms = 2'000;
  int64_t command_timeout_ms = 2'000;
  bool replica_reads = false;  // read_only requests may go to healthy replicas
  ClusterRetryPolicy retry;
  // run_batch only (key layout v2's spread commands, every script declaring its keys): TRYAGAIN
  // is retried until this many attempts (ClusterRetryPolicy::max_tryagain_attempts), about 17 s
  // of backoff with the default policy: a command whose slot is being resharded waits for the
  // migration to end rather than fail. run_at_slot (layout v1, MULTI blocks) keeps `retry`.
  int batch_tryagain_attempts = 40;
  // false: a round's node pipelines go one after another, each written and its replies read
  // before the next node's is written (the pool before 2026-12-07; kept for benchmarks that set
  // the two side by side: bench/cluster_rounds.cpp).
  bool concurrent_nodes = true;
};

// What the pool has done, for tests and metrics.
struct RedisClusterPoolStats {
  uint64_t moved = 0;        // MOVED answers followed
  uint64_t ask = 0;          // ASK answers followed
  uint64_t retries = 0;      // TRYAGAIN, LOADING, CLUSTERDOWN, MASTERDOWN, READONLY, I/O failures
  uint64_t split = 0;        // TRYAGAIN handed back to a request flagged hand_back_split
  uint64_t refreshes = 0;    // slot maps read
  uint64_t connections = 0;  // connections opened
};

class RedisClusterPool {
 public:
  // Checks the options; connects to nothing (the first call does).
  static Result<std::unique_ptr<RedisClusterPool>> create(RedisClusterPoolOptions options);
  ~RedisClusterPool();
  RedisClusterPool(const RedisClusterPool&) = delete;
  RedisClusterPool& operator=(const RedisClusterPool&) = delete;

  // Reads the slot map again, from the first node that answers (known nodes, then the seeds).
  Status refresh();

  // One command, routed by its keys. A Redis error reply of the command's own (WRONGTYPE, a
  // script's error) is a value; routing that fails is an Error.
  Result<RespValue> run(const RedisCommand& argv, bool read_only = false);

  // Many commands: grouped per node, one pipeline per node (every node's written before any
  // reply is read), redirects followed per command. One result per request, in order. A request
  // flagged hand_back_split gets a TRYAGAIN as its reply (shared/redis_cluster.h
  // cluster_reply_is_split_slot) instead of waiting the migration out. The order of commands
  // across nodes is not kept (it is within one node, and always for commands of one slot).
  std::vector<Result<RespValue>> run_batch(const std::vector<ClusterRequest>& requests);

  // `commands` as ONE pipeline to the master serving `slot`, replies in order: a MULTI ... EXEC
  // block, or commands whose keys all hash to `slot` (commands without a key go along: SCAN, PING,
  // a script that declares no key). MOVED re-sends the redirected commands to the named master
  // (a transaction whole: a redirected command aborted it, so nothing ran), ASK re-sends them to
  // the importing node each after ASKING (a transaction waits for the migration's MOVED instead);
  // the other answers and unreachable nodes as run(). A failed connection after the pipeline was
  // sent is retried only when every command in it changes nothing. A MOVED for another slot is
  // kInvalidArgument (a key outside `slot`). `timeout_ms` > 0 replaces the command timeout for
  // this call (a blocking read: BLPOP, XREADGROUP BLOCK).
  Result<std::vector<RespValue>> run_at_slot(uint16_t slot,
                                             const std::vector<RedisCommand>& commands,
                                             int64_t timeout_ms = 0);

  // `argv` on every master serving slots (a SCAN walk, DBSIZE, FLUSHALL, SCRIPT LOAD), with the
  // master's address, sent to every master before any reply is read. A master that cannot be
  // reached is an Error in its place.
  std::vector<std::pair<ClusterNode, Result<RespValue>>> run_on_masters(const RedisCommand& argv);

  ClusterSlotMap map() const;
  RedisClusterPoolStats stats() const;
  // "redis-cluster:127.0.0.1:7000,127.0.0.1:7001", "rediss-cluster:..." over TLS (the seeds;
  // never the password).
  std::string describe() const;

 private:
  struct Impl;
  explicit RedisClusterPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
