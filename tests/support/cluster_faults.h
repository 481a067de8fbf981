// What the agent's Redis Cluster tests share (tests/integration/redis_cluster_agent_test.cpp,
// redis_cluster_v2_faults_test.cpp): the operator's `redis+cluster://` URL with two seeds, who
// serves a slot right now, a graceful failover, and a slot moved to another master the way
// `redis-cli --cluster reshard` moves it (IMPORTING, MIGRATING, MIGRATE in batches, NODE).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shared/redis_cluster.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_cluster.h"

namespace quiver::testing {

// `redis+cluster://:<password>@127.0.0.1:<first>,127.0.0.1:<second>`: the agent's Redis URL.
inline std::string seeds_url(const RedisCluster& cluster, const std::string& password) {
  return std::string("redis+cluster://:") + password +
         "@127.0.0.1:" + std::to_string(cluster.ports()[0]) +
         ",127.0.0.1:" + std::to_string(cluster.ports()[1]);
}

// The cluster's map as the first node that answers CLUSTER SHARDS sees it.
inline Result<ClusterSlotMap> cluster_map(const RedisCluster& cluster) {
  Result<ClusterSlotMap> last = Error(ErrorCode::kStoreUnavailable, "no node answered");
  for (int port : cluster.ports()) {
    RedisConnection c(cluster.connect(port));
    if (c == nullptr) continue;
    last = ClusterSlotMap::from_shards(run_argv(c.get(), {"CLUSTER", "SHARDS"}), "127.0.0.1");
    if (last.ok() && last->covers_all_slots()) return last;
  }
  return last;
}

// The port of the master serving `slot` right now, and of its replica (0 when not found).
inline std::pair<int, int> master_and_replica(const RedisCluster& cluster, uint16_t slot) {
  for (int port : cluster.ports()) {
    RedisConnection c(cluster.connect(port));
    if (c == nullptr) continue;
    Result<ClusterSlotMap> map =
        ClusterSlotMap::from_shards(run_argv(c.get(), {"CLUSTER", "SHARDS"}), "127.0.0.1");
    if (!map.ok()) continue;
    const ClusterShard* shard = map->shard_for_slot(slot);
    if (shard == nullptr || shard->replicas.empty()) continue;
    return {shard->master.port, shard->replicas.front().port};
  }
  return {0, 0};
}

// For a reshard of `slot`: the port of the master serving it and of another master to move it to
// (0 when not found).
inline std::pair<int, int> reshard_ends(const RedisCluster& cluster, uint16_t slot) {
  const int from = master_and_replica(cluster, slot).first;
  int to = 0;
  for (int port : cluster.master_ports()) {
    if (port != from) to = port;
  }
  return {from, from == 0 ? 0 : to};
}

// CLUSTER FAILOVER on `replica`, waiting until it is the master and the cluster is whole again.
inline bool fail_over_to(RedisCluster& cluster, int replica) {
  RedisConnection c(cluster.connect(replica));
  if (c == nullptr || !run_argv(c.get(), {"CLUSTER", "FAILOVER"}).is_ok()) return false;
  return wait_until([&] { return cluster.role(replica) == "master"; }, 30000) &&
         cluster.wait_until_ok(30);
}

struct SlotMove {
  int batch = 1;         // keys per MIGRATE
  int pause_ms = 300;    // between two batches (and after MIGRATING, before the first)
  std::string password;  // the nodes' (MIGRATE ... AUTH)
  std::function<void()> while_migrating;  // called once with the slot half moved, if set
};

// Moves `slot` from the master on `from` to the master on `to` as `redis-cli --cluster reshard`
// does: SETSLOT IMPORTING on the target, MIGRATING on the source, the keys in batches of
// `move.batch` (MIGRATE ... KEYS, a pause between batches), then SETSLOT NODE on the target, the
// source and every other master. "" when done, else what failed.
inline std::string move_slot(const RedisCluster& cluster, uint16_t slot, int from, int to,
                             const SlotMove& move) {
  RedisConnection src(cluster.connect(from));
  RedisConnection dst(cluster.connect(to));
  if (src == nullptr || dst == nullptr) return "cannot connect";
  const std::string s = std::to_string(slot);
  const std::string src_id = cluster.node_id(from);
  const std::string dst_id = cluster.node_id(to);
  auto check = [](const RespValue& v, const std::string& what) {
    return v.is_ok() ? std::string() : what + ": " + v.str;
  };
  if (std::string e =
          check(run_argv(dst.get(), {"CLUSTER", "SETSLOT", s, "IMPORTING", src_id}), "IMPORTING");
      !e.empty()) {
    return e;
  }
  if (std::string e =
          check(run_argv(src.get(), {"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id}), "MIGRATING");
      !e.empty()) {
    return e;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(move.pause_ms));
  bool called = false;
  for (;;) {
    RespValue keys =
        run_argv(src.get(), {"CLUSTER", "GETKEYSINSLOT", s, std::to_string(move.batch)});
    if (!keys.is_array()) return "GETKEYSINSLOT: " + keys.str;
    if (keys.elements.empty()) break;
    std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(to), "", "0", "5000"};
    if (!move.password.empty()) {
      argv.push_back("AUTH");
      argv.push_back(move.password);
    }
    argv.push_back("KEYS");
    for (const RespValue& k : keys.elements) argv.push_back(k.str);
    if (std::string e = check(run_argv(src.get(), argv), "MIGRATE"); !e.empty()) return e;
    if (!called && move.while_migrating) {
      called = true;
      move.while_migrating();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(move.pause_ms));
  }
  // The target first, then the source, then every other master (redis-cli's order).
  std::vector<int> order = {to, from};
  for (int port : cluster.master_ports()) {
    if (port != to && port != from) order.push_back(port);
  }
  for (int port : order) {
    RedisConnection c(cluster.connect(port));
    if (c == nullptr) return "cannot connect to " + std::to_string(port);
    if (std::string e = check(run_argv(c.get(), {"CLUSTER", "SETSLOT", s, "NODE", dst_id}),
                              "SETSLOT NODE on " + std::to_string(port));
        !e.empty()) {
      return e;
    }
  }
  return "";
}

}  // namespace quiver::testing
