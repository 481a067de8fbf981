// A real Redis Cluster for integration tests: six `redis-server --cluster-enabled yes` on free
// 127.0.0.1 ports in a private temporary directory, joined by `redis-cli --cluster create
// --cluster-replicas 1` (three masters, three replicas), and ready when every node says
// `cluster_state:ok`, every node sees every slot served, every replica's link to its master is
// up and every node's CLUSTER SHARDS shows every replica online. Everything stops (and the
// directory goes) when the object goes away.
//
//   RedisCluster cluster;                       // or RedisCluster cluster({.password = "pw"});
//   (RedisClusterOptions::tls: the same over TLS only, with tls-cluster yes.)
//   ASSERT_TRUE(cluster.ok()) << cluster.error();
//   redisContext* c = cluster.connect(cluster.ports()[0]);   // hiredis, caller frees
//   cluster.kill(port);                         // SIGKILL: a crashed master, for failover tests
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "tests/support/redis_server.h"

struct redisContext;

namespace quiver::testing {

struct RedisClusterOptions {
  int node_timeout_ms = 1000;  // cluster-node-timeout: how fast a dead master is failed over
  std::string password;        // requirepass and masterauth on every node; empty: none
  // TLS only: every node listens on a TLS port (`--port 0 --tls-port P`), the cluster bus and
  // replication are TLS (`tls-cluster yes`, `tls-replication yes`), and connect() speaks TLS.
  std::optional<RedisServerTls> tls;
  // With tls: each node listens on a plain TCP port too (`--port Q --tls-port P`), and CLUSTER
  // SHARDS announces both; ports() are still the TLS ports.
  bool plain_port_too = false;
};

class RedisCluster {
 public:
  explicit RedisCluster(RedisClusterOptions options = {});
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::vector<int>& ports() const { return ports_; }

  // A new hiredis connection to the node on `port`, authenticated when a password is set (nullptr
  // on failure). The caller owns it.
  redisContext* connect(int port) const;

  // The node's `ROLE` first element: "master" or "slave" ("" when it does not answer).
  std::string role(int port) const;
  // The node id (`CLUSTER MYID`).
  std::string node_id(int port) const;
  // Ports of the nodes that are masters right now (answering ROLE).
  std::vector<int> master_ports() const;

  // SIGKILL the node's process (no shutdown, no goodbye to the cluster).
  void kill(int port);

  // FLUSHALL on every master: every key gone. False when a master did not answer OK.
  bool flush_all() const;

  // Waits (up to `seconds`) until every live node says cluster_state:ok and serves every slot.
  bool wait_until_ok(int seconds);

 private:
  // Starts node i on ports_[i]. On failure error_ is set, and pids_[i] is kExitedAtStart when
  // the process exited before answering (its port was likely taken meanwhile).
  bool start_node(std::size_t i);
  static constexpr pid_t kExitedAtStart = -2;
  bool create_cluster();
  bool replicas_in_sync() const;

  RedisClusterOptions options_;
  std::string dir_;
  std::string error_;
  std::vector<int> ports_;
  std::vector<pid_t> pids_;
  redisSSLContext* ssl_ = nullptr;  // connect()'s, with options_.tls
};

// One cluster for a whole test binary, started by its first user and stopped at exit (the store
// suites run on it as on their one redis-server, from flush_all()).
inline RedisCluster& shared_test_cluster() {
  static RedisCluster cluster;
  return cluster;
}

}  // namespace quiver::testing
