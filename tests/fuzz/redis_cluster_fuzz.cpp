// Fuzzes the cluster routing parsers (shared/redis_cluster.h), which read what cluster nodes
// answer. The input is a RESP reply stream (seeds: a real CLUSTER SHARDS and CLUSTER SLOTS reply
// and redirects, tests/fuzz/seeds/redis_cluster); each decoded reply is read as CLUSTER SHARDS, as
// CLUSTER SLOTS and as a redirect, and the raw input is also a key. Properties: a map that parses
// is consistent (served_slots counts exactly the slots that have a shard, every node has a host
// without spaces or control bytes and a port in 1..65535); a plan over it places every request
// exactly once, within the node cap, reads on replicas only when allowed and writes on masters;
// a redirect names a slot below 16384 and a valid port; a key's slot is its hash tag's slot.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/redis_cluster.h"
#include "shared/resp.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

void check_node(const ClusterNode& n) {
  fuzz::check(n.port >= 1 && n.port <= 65535, "cluster: a node's port out of range");
  fuzz::check(!n.host.empty(), "cluster: a node without a host");
  for (char c : n.host) {
    fuzz::check(static_cast<unsigned char>(c) > 0x20 && c != 0x7f,
                "cluster: a control byte or space in a host");
  }
}

void check_map(const ClusterSlotMap& map) {
  std::size_t served = 0;
  for (int s = 0; s < kClusterSlotCount; ++s) {
    if (map.shard_for_slot(static_cast<uint16_t>(s)) != nullptr) ++served;
  }
  fuzz::check(served == map.served_slots(), "cluster: served_slots miscounts");
  fuzz::check(map.shard_for_slot(kClusterSlotCount) == nullptr, "cluster: slot 16384 is served");
  for (const ClusterShard& shard : map.shards()) {
    check_node(shard.master);
    for (const ClusterNode& r : shard.replicas) check_node(r);
  }

  // A plan: every request once, at most two nodes, replicas only for reads.
  std::vector<ClusterRequest> requests = {
      {{"GET", "a"}, true},
      {{"SET", "b", "1"}, false},
      {{"GET", "{b}x"}, true},
      {{"HGETALL", "quiver:{c1}:m"}, true},
      {{"PING"}, false},
      {{"MGET", "a", "b"}, true},
      {{"EVAL", "return 1", "1", "zz"}, false},
      {{"GET", "zz"}, true},
  };
  ClusterPlanOptions options;
  options.max_nodes = 2;
  options.replica_reads = true;
  options.spread = map.served_slots();
  ClusterPlan plan = plan_cluster_batch(map, requests, options);
  fuzz::check(plan.batches.size() <= 2, "cluster: the plan exceeds the node cap");
  std::vector<int> seen(requests.size(), 0);
  for (const ClusterNodeBatch& b : plan.batches) {
    check_node(b.node);
    for (std::size_t i : b.indices) {
      fuzz::check(i < requests.size(), "cluster: a plan index out of range");
      ++seen[i];
      if (b.replica) fuzz::check(requests[i].read_only, "cluster: a write planned on a replica");
    }
  }
  for (std::size_t i : plan.deferred) ++seen[i];
  for (const auto& refused : plan.refused) ++seen[refused.first];
  for (int n : seen) fuzz::check(n == 1, "cluster: a request planned other than once");
}

void check_reply(const RespValue& reply) {
  Result<ClusterSlotMap> shards = ClusterSlotMap::from_shards(reply, "seed.example");
  if (shards.ok())
    check_map(*shards);
  else
    fuzz::check(shards.error().code == ErrorCode::kInvalidReply, "cluster: SHARDS error code");
  Result<ClusterSlotMap> slots = ClusterSlotMap::from_slots(reply, "seed.example");
  if (slots.ok())
    check_map(*slots);
  else
    fuzz::check(slots.error().code == ErrorCode::kInvalidReply, "cluster: SLOTS error code");

  ClusterRetryPolicy policy;
  for (int attempt = 1; attempt <= policy.max_attempts; attempt += 3) {
    ClusterStep step = decide_cluster_step(reply, "seed.example", attempt, attempt / 2, policy);
    if (step.action == ClusterStep::Action::kRetryAt ||
        step.action == ClusterStep::Action::kAskAt) {
      fuzz::check(step.slot < kClusterSlotCount, "cluster: a redirect past slot 16383");
      check_node(step.node);
    }
    if (step.action == ClusterStep::Action::kGiveUp) {
      fuzz::check(step.error.code != ErrorCode::kInternal, "cluster: gave up as internal");
    }
    fuzz::check(step.backoff_ms >= 0 && step.backoff_ms <= policy.backoff_max_ms,
                "cluster: backoff out of bounds");
  }
  if (shards.ok()) {
    // MOVED onto a parsed map keeps it consistent.
    ClusterSlotMap moved = *shards;
    ClusterNode n;
    n.host = "10.0.0.1";
    n.port = 7000;
    moved.apply_moved(static_cast<uint16_t>(reply.str.size() % kClusterSlotCount), n);
    check_map(moved);
  }
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  fuzz::check(cluster_key_slot(input) == cluster_key_slot(cluster_hash_tag(input)),
              "cluster: a key's slot differs from its tag's");
  fuzz::check(cluster_key_slot(input) < kClusterSlotCount, "cluster: a slot past 16383");

  RespLimits limits;
  limits.max_buffered_bytes = 1 << 20;
  RespDecoder decoder(limits);
  if (!decoder.feed(input).ok()) return 0;
  for (int n = 0; n < 64; ++n) {
    auto r = decoder.next();
    if (!r.ok() || !r->has_value()) break;
    check_reply(**r);
  }
  return 0;
}
