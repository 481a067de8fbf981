// Benchmark (not a test): capacity on one node and on a cluster (issue 14, "commits per second"
// and the discovery read "on one node and on the cluster"), side by side in one run, on a
// redis-server of its own and a real six-node Redis Cluster of its own (3 masters + 3 replicas,
// started as tests/support/redis_cluster.h starts one), every node on 127.0.0.1:
//
//   capacity [--redis-server redis-server] [--commits 480] [--threads 1,4,16]
//            [--sizes 2000,20000] [--g 10,50] [--k 200] [--namespaces 3] [--spread-threads 12]
//            [--rounds 3]
//
// 1. Commits. N client threads, each an agent of its own (one RedisStore each: a store's calls
//    take turns on its one connection, so N threads on one store would measure that mutex), commit
//    manifests of `size` bytes to a per_member connection through the store calls the refresh
//    runner makes (native-agent/engine/refresh_runner.cpp): acquire_lease, then commit_manifest
//    with the lease released in the same script, each commit to a principal of its own. Either
//    every commit lists the same content (one body, stored once: later commits only move its
//    expiry) or each lists content of its own (a new body each). `--commits` commits per row,
//    split over the threads, after one unmeasured commit per thread (connected, scripts loaded).
//    Per row: commits per second (wall clock, all threads), Redis µs per commit (INFO commandstats
//    of the top-level commands: EVALSHA, EVAL, EXEC; a script's inner calls are in its figure),
//    Redis CPU µs per commit (used_cpu_user + used_cpu_sys: also the socket I/O), bytes sent to
//    Redis per commit (total_net_input_bytes) and used_memory_dataset growth per commit (the data's
//    own: a master's replication backlog fills as it writes, and is not the data; read with no
//    store connected, the warm-up commits counted; a same-content row's one body is in it, spread
//    over the row's commits). On the cluster
//    the masters' counters are added up (the replicas repeat each write: not counted), and the
//    busiest master's share of the Redis µs is shown: key layout v1 keeps a namespace in one slot,
//    so one master does a namespace's work.
// 2. The spread: `--spread-threads` threads committing distinct 20 KB-class manifests into one
//    namespace, then into `--namespaces` namespaces (threads dealt round-robin) whose slots the
//    cluster serves from different masters; each master's share of the Redis µs.
// 3. The agent's discovery read (RedisStore::read_discovery, bench/bench_agent_read.h, as in
//    bench/bodies.cpp) of a member granted G shared connections with manifests of `size` bytes,
//    bodies stored apart, its body cache off (every read fetches the bodies: the worst case) and
//    warm: Redis µs, CPU µs and bytes from Redis per read, K reads each, on one node and on the
//    cluster.
//
// 4. The edge's discovery read of the same member (bench/bench_edge.h: a real EdgeService driven
//    natively, its bytes on loopback sockets, one per node on the cluster; L1 TTL 0 so every read
//    reaches Redis; its body cache warm: no MGET): every read a full one, and every read a
//    conditional one (the versions checked, answered "unchanged"). Redis µs, CPU µs, bytes from
//    and to Redis and round trips per read, K reads each, on one node and on the cluster.
//
// Every row runs `--rounds` times and each figure is the best of its rounds (most commits per
// second, least of the rest): other work on a shared machine only ever makes a round worse.
// Everything binds 127.0.0.1, keeps no data on disk, and is stopped and deleted at the end.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_agent_read.h"
#include "bench/bench_edge.h"
#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "native-agent/base/config.h"
#include "native-agent/store/redis_store.h"
#include "shared/caller_token.h"
#include "shared/lease.h"
#include "shared/manifest_record.h"
#include "shared/principal.h"
#include "shared/redis_keys.h"
#include "tests/support/redis_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kTeam[] = "team";
constexpr int64_t kLeaseMs = 60'000;

// One node or the cluster: how a store reaches it, where a namespace's keys live, its counters.
struct Topology {
  std::string name;
  quiver::RedisConfig redis;
  std::vector<redisContext*> masters;  // one context per master (one node: the node)
  std::function<bool()> flush;

  // The master that serves namespace `ns` (v1: every key of it in one slot): the one that answers
  // for its namespace record rather than redirecting (MOVED).
  redisContext* master_for(const std::string& ns) const {
    const std::string key = quiver::RedisKeys::create(ns)->namespace_record();
    for (redisContext* c : masters) {
      redisReply* r = bench::command_argv(c, {"EXISTS", key});
      if (r == nullptr) bench::fail("EXISTS failed");
      const bool here = r->type == REDIS_REPLY_INTEGER;
      freeReplyObject(r);
      if (here) return c;
    }
    bench::fail("no master serves namespace " + ns);
  }
  std::size_t master_index(const std::string& ns) const {
    redisContext* c = master_for(ns);
    return static_cast<std::size_t>(std::find(masters.begin(), masters.end(), c) - masters.begin());
  }
  std::vector<bench::RedisInfo> infos() const {
    std::vector<bench::RedisInfo> out;
    for (redisContext* c : masters) out.push_back(bench::read_info(c));
    return out;
  }
  bench::RedisInfo info() const { return bench::sum_info(infos()); }

  quiver::RedisStoreOptions store_options(const std::string& ns, std::size_t body_cache) const {
    quiver::RedisStoreOptions o;
    o.redis = redis;
    o.ns = ns;
    o.body_cache_max_bytes = body_cache;
    return o;
  }

  // An empty keyspace, then each namespace ready with its per_member connection `team`.
  void reset(const std::vector<std::string>& namespaces) const {
    if (!flush()) bench::fail(name + ": FLUSHALL failed");
    for (const std::string& ns : namespaces) {
      const quiver::RedisKeys keys = *quiver::RedisKeys::create(ns);
      redisContext* c = master_for(ns);
      bench::command(c, {"SET", keys.namespace_record(), "ready:1"});
      bench::put_connection(c, keys, kTeam, "per_member");
    }
  }
};

const std::string& lease_token(int thread) {
  static std::map<int, std::string> tokens;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, added] = tokens.try_emplace(thread);
  if (added) {
    char random[32];
    std::snprintf(random, sizeof random, "capacity-thread-%015d", thread);
    it->second = *quiver::make_lease_token(std::string(random, 32));
  }
  return it->second;
}

quiver::ManifestWrite manifest_write(const std::string& text, int64_t now) {
  quiver::ManifestWrite w;
  w.manifest = text;
  w.etag = quiver::content_hash(text);
  w.config_hash = std::string("h-") + kTeam;
  w.fetched_at_ms = now;
  w.fresh_until_ms = now + 900'000;
  w.expires_at_ms = now + 86'400'000;
  return w;
}

// One fenced commit as the refresh runner makes it: the lease, then the commit releasing it.
void commit_once(quiver::RedisStore& store, const quiver::Principal& p, const std::string& token,
                 const quiver::ManifestWrite& w) {
  quiver::Result<quiver::AcquireResult> a = store.acquire_lease(kTeam, p, token, kLeaseMs);
  if (!a.ok()) bench::fail("acquire_lease: " + a.error().message);
  if (!a->acquired)
    bench::fail("acquire_lease: held by another (fence " + std::to_string(a->holder_fence) + ")");
  quiver::FencedWriteOptions fenced;
  fenced.release_lease = true;
  quiver::Result<quiver::FencedWriteResult> r =
      store.commit_manifest(kTeam, p, a->lease, w, fenced);
  if (!r.ok()) bench::fail("commit_manifest: " + r.error().message);
  if (!r->ok())
    bench::fail(std::string("commit_manifest refused: ") + quiver::lease_outcome_name(r->outcome));
}

struct CommitRow {
  double commits_per_s = 0;
  double redis_us = 0;
  double cpu_us = 0;
  double bytes_in = 0;
  double memory = 0;
  std::vector<double> master_share;  // each master's part of the Redis µs
  std::size_t manifest_bytes = 0;
};

// `total` commits by `threads` threads (one store each), thread t in namespaces[t % size],
// manifests of about `size` bytes, all the same content or each its own.
CommitRow run_commits(const Topology& topo, const std::vector<std::string>& namespaces, int threads,
                      int total, std::size_t size, bool distinct, int64_t now) {
  topo.reset(namespaces);
  const int per_thread = total / threads;
  // The writes made before the clock starts: the client's JSON work is not the store's.
  const std::string same = bench::manifest_text(size, "same-content");
  std::vector<std::vector<quiver::ManifestWrite>> writes(threads);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i) {
      writes[t].push_back(manifest_write(
          distinct ? bench::manifest_text(size, "t" + std::to_string(t) + "-" + std::to_string(i))
                   : same,
          now));
    }
  }
  // Memory is read with no store connected (their buffers are not data), before the stores and
  // after them, and counts the warm-up commits too.
  const double memory_before = topo.info().used_memory_dataset;
  std::vector<std::unique_ptr<quiver::RedisStore>> stores;
  for (int t = 0; t < threads; ++t) {
    auto s = quiver::RedisStore::create(
        topo.store_options(namespaces[static_cast<std::size_t>(t) % namespaces.size()], 0));
    if (!s.ok()) bench::fail(s.error().message);
    stores.push_back(std::move(*s));
    // Connected, the scripts loaded: one commit unmeasured, of content like the others'.
    commit_once(
        *stores.back(), *quiver::Principal::member("warm-" + std::to_string(t)), lease_token(t),
        manifest_write(distinct ? bench::manifest_text(size, "warm-" + std::to_string(t)) : same,
                       now));
  }

  const std::vector<bench::RedisInfo> before = topo.infos();
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < per_thread; ++i) {
        const quiver::Principal p =
            *quiver::Principal::member("m" + std::to_string(t) + "-" + std::to_string(i));
        commit_once(*stores[t], p, lease_token(t), writes[t][i]);
      }
    });
  }
  const auto start = Clock::now();
  go = true;
  for (std::thread& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::vector<bench::RedisInfo> after = topo.infos();
  stores.clear();
  const double memory_after = topo.info().used_memory_dataset;

  const int commits = per_thread * threads;
  CommitRow row;
  row.manifest_bytes = same.size();
  row.commits_per_s = commits / seconds;
  double usec = 0;
  std::vector<double> per_master;
  for (std::size_t m = 0; m < after.size(); ++m) {
    per_master.push_back(bench::commands_usec(before[m], after[m], {"evalsha", "eval", "exec"}));
    usec += per_master.back();
  }
  for (double u : per_master) row.master_share.push_back(usec > 0 ? u / usec : 0);
  const bench::RedisInfo b = bench::sum_info(before), a = bench::sum_info(after);
  row.redis_us = usec / commits;
  row.cpu_us = (a.cpu_us - b.cpu_us) / commits;
  row.bytes_in = (a.net_input_bytes - b.net_input_bytes) / commits;
  row.memory = (memory_after - memory_before) / (commits + threads);
  return row;
}

// The same `rounds` times, each figure the best of the rounds (the most commits per second, the
// least of the others): other work on a shared machine only ever makes a round worse.
CommitRow best_commits(int rounds, const Topology& topo, const std::vector<std::string>& namespaces,
                       int threads, int total, std::size_t size, bool distinct, int64_t now) {
  CommitRow best = run_commits(topo, namespaces, threads, total, size, distinct, now);
  for (int i = 1; i < rounds; ++i) {
    const CommitRow r = run_commits(topo, namespaces, threads, total, size, distinct, now);
    best.commits_per_s = std::max(best.commits_per_s, r.commits_per_s);
    if (r.redis_us < best.redis_us) {
      best.redis_us = r.redis_us;
      best.master_share = r.master_share;
    }
    best.cpu_us = std::min(best.cpu_us, r.cpu_us);
    best.bytes_in = std::min(best.bytes_in, r.bytes_in);
    best.memory = std::min(best.memory, r.memory);
  }
  return best;
}

std::string shares(const CommitRow& r) {
  std::vector<double> s = r.master_share;
  std::sort(s.rbegin(), s.rend());
  std::string out;
  for (double v : s) {
    char part[16];
    std::snprintf(part, sizeof part, "%s%.0f%%", out.empty() ? "" : " / ", v * 100);
    out += part;
  }
  return out;
}

// `count` namespace names whose slots `topo` serves from different masters (as far as it has
// masters): the first of cap-0, cap-1, ... on each master in turn.
std::vector<std::string> spread_namespaces(const Topology& topo, int count) {
  std::vector<std::string> out;
  std::vector<bool> used(topo.masters.size(), false);
  for (int i = 0; static_cast<int>(out.size()) < count && i < 10'000; ++i) {
    const std::string ns = "cap-" + std::to_string(i);
    const std::size_t m = topo.master_index(ns);
    const bool all_used = std::all_of(used.begin(), used.end(), [](bool u) { return u; });
    if (!used[m] || all_used) {
      used[m] = true;
      out.push_back(ns);
    }
  }
  if (static_cast<int>(out.size()) < count) bench::fail("could not find namespaces to spread");
  return out;
}

double load_average() {
  double one = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one) != 1) one = 0;
    std::fclose(f);
  }
  return one;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = bench::parse_args(argc, argv,
                                                              {{"--redis-server", "redis-server"},
                                                               {"--commits", "480"},
                                                               {"--threads", "1,4,16"},
                                                               {"--sizes", "2000,20000"},
                                                               {"--g", "10,50"},
                                                               {"--k", "200"},
                                                               {"--namespaces", "3"},
                                                               {"--spread-threads", "12"},
                                                               {"--rounds", "3"}});
  const int total = std::atoi(args["--commits"].c_str()), k = std::atoi(args["--k"].c_str());
  const int namespaces = std::atoi(args["--namespaces"].c_str());
  const int spread_threads = std::atoi(args["--spread-threads"].c_str());
  const int rounds = std::atoi(args["--rounds"].c_str());
  const std::vector<int64_t> thread_counts = bench::parse_int_list(args["--threads"].c_str());
  const std::vector<int64_t> sizes = bench::parse_int_list(args["--sizes"].c_str());
  const std::vector<int64_t> grants = bench::parse_int_list(args["--g"].c_str());
  if (total < 1 || k < 1 || rounds < 1 || namespaces < 1 || spread_threads < 1 ||
      thread_counts.empty() || sizes.empty() || grants.empty()) {
    bench::fail("bad arguments");
  }
  for (int64_t n : thread_counts) {
    if (n < 1 || n > total) bench::fail("--threads: each between 1 and --commits");
  }

  std::printf("Load average at start: %.2f\n", load_average());

  // One node.
  bench::RedisServerProcess server =
      bench::start_redis_server(args["--redis-server"], "/tmp", "capacity-bench");
  redisContext* node = redisConnect("127.0.0.1", server.port);
  if (node == nullptr || node->err != 0) bench::fail("connect failed");
  Topology one;
  one.name = "one node";
  one.redis = *quiver::parse_redis_url("redis://127.0.0.1:" + std::to_string(server.port));
  one.masters = {node};
  one.flush = [node] { return bench::command(node, {"FLUSHALL"}) == "OK"; };

  // The cluster: 3 masters + 3 replicas.
  quiver::testing::RedisCluster cluster;
  if (!cluster.ok()) bench::fail("the cluster did not start: " + cluster.error());
  Topology many;
  many.name = "cluster";
  std::string url = "redis+cluster://";
  for (std::size_t i = 0; i < cluster.ports().size(); ++i) {
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(cluster.ports()[i]);
  }
  many.redis = *quiver::parse_redis_url(url);
  for (int port : cluster.master_ports()) {
    redisContext* c = cluster.connect(port);
    if (c == nullptr) bench::fail("connect to a master failed");
    many.masters.push_back(c);
  }
  many.flush = [&cluster] { return cluster.flush_all(); };
  const std::vector<const Topology*> topologies = {&one, &many};
  const int64_t now = bench::wall_ms();

  // Every server's scripts loaded and first allocations made before any row (FLUSHALL keeps the
  // scripts): otherwise the first row's memory would carry them.
  for (const Topology* topo : topologies) {
    run_commits(*topo, spread_namespaces(*topo, namespaces), namespaces, namespaces * 8,
                static_cast<std::size_t>(sizes.front()), true, now);
  }

  // 1. Commits per second.
  std::printf(
      "\n## Commits: acquire_lease + commit_manifest (lease released in the script), %d per "
      "row, one namespace\n\n",
      total - total % static_cast<int>(thread_counts.back()));
  std::printf(
      "| Redis | threads | manifest | content | commits/s | vs one node | Redis µs per commit | "
      "Redis CPU µs per commit | bytes to Redis per commit | memory per commit | masters' share "
      "of Redis µs |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (int64_t size : sizes) {
    for (bool distinct : {false, true}) {
      for (int64_t threads : thread_counts) {
        CommitRow base;
        for (const Topology* topo : topologies) {
          const std::string ns = topo == &one ? "cap-0" : spread_namespaces(*topo, 1)[0];
          CommitRow r = best_commits(rounds, *topo, {ns}, static_cast<int>(threads), total,
                                     static_cast<std::size_t>(size), distinct, now);
          if (topo == &one) base = r;
          std::printf("| %s | %lld | %zu B | %s | %.0f | %.2f | %.1f | %.1f | %.0f | %.0f | %s |\n",
                      topo->name.c_str(), static_cast<long long>(threads), r.manifest_bytes,
                      distinct ? "distinct" : "same", r.commits_per_s,
                      r.commits_per_s / base.commits_per_s, r.redis_us, r.cpu_us, r.bytes_in,
                      r.memory, topo == &one ? "100%" : shares(r).c_str());
          std::fflush(stdout);
        }
      }
    }
  }

  // 2. The spread: one namespace, then several on different masters.
  const std::size_t spread_size = static_cast<std::size_t>(sizes.back());
  std::printf(
      "\n## Spread: %d threads committing distinct manifests (%zu-byte class), 1 namespace vs %d "
      "namespaces\n\n",
      spread_threads, spread_size, namespaces);
  std::printf(
      "| Redis | namespaces | commits/s | vs one node, 1 namespace | Redis µs per commit | "
      "masters' share of Redis µs | busiest master's µs per commit |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | --- | ---: |\n");
  double spread_base = 0;
  for (const Topology* topo : topologies) {
    for (int n : {1, namespaces}) {
      const std::vector<std::string> names = spread_namespaces(*topo, n);
      CommitRow r =
          best_commits(rounds, *topo, names, spread_threads, total, spread_size, true, now);
      if (spread_base == 0) spread_base = r.commits_per_s;
      const double busiest = *std::max_element(r.master_share.begin(), r.master_share.end());
      std::printf("| %s | %d | %.0f | %.2f | %.1f | %s | %.1f |\n", topo->name.c_str(), n,
                  r.commits_per_s, r.commits_per_s / spread_base, r.redis_us,
                  topo == &one ? "100%" : shares(r).c_str(), r.redis_us * busiest);
      std::fflush(stdout);
    }
  }

  // 3. The agent's discovery read.
  const quiver::Principal reader = *quiver::Principal::member("reader");
  // A read row's namespace on `topo` (*ns), emptied, then `reader` granted G shared connections of
  // `size`-byte manifests, bodies stored apart: the manifests' characters in all.
  auto seed_reader = [&](const Topology* topo, int64_t g, int64_t size, std::string* ns) {
    *ns = topo == &one ? "cap-0" : spread_namespaces(*topo, 1)[0];
    if (!topo->flush()) bench::fail("FLUSHALL failed");
    return bench::seed_member(topo->master_for(*ns), *quiver::RedisKeys::create(*ns), reader,
                              static_cast<int>(g), static_cast<std::size_t>(size), now, false);
  };
  std::printf(
      "\n## Discovery read (RedisStore::read_discovery), bodies stored apart, %d reads each\n\n",
      k);
  std::printf(
      "| G | manifest | body cache | Redis | Redis µs per read | vs one node | Redis CPU µs per "
      "read | bytes from Redis per read | vs one node | MGETs per read | client µs per read |\n");
  std::printf("| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int64_t g : grants) {
    for (int64_t size : sizes) {
      for (bool cache : {false, true}) {
        bench::AgentReadRow base;
        for (const Topology* topo : topologies) {
          std::string ns;
          const std::size_t chars = seed_reader(topo, g, size, &ns);
          bench::AgentReadRow r;
          for (int round = 0; round < rounds; ++round) {
            const bench::AgentReadRow one_round = bench::measure_agent_read(
                topo->name, [topo] { return topo->info(); },
                topo->store_options(ns, cache ? std::size_t{64} << 20 : 0), reader, k, chars);
            if (round == 0) r = one_round;
            r.redis_us = std::min(r.redis_us, one_round.redis_us);
            r.cpu_us = std::min(r.cpu_us, one_round.cpu_us);
            r.bytes_in = std::min(r.bytes_in, one_round.bytes_in);
            r.mgets = std::min(r.mgets, one_round.mgets);
            r.wall_us = std::min(r.wall_us, one_round.wall_us);
          }
          if (topo == &one) base = r;
          std::printf(
              "| %lld | %zu B | %s | %s | %.1f | %.2f | %.1f | %.0f | %.3f | %.2f | %.0f |\n",
              static_cast<long long>(g), chars / static_cast<std::size_t>(g),
              cache ? "warm" : "off", topo->name.c_str(), r.redis_us, r.redis_us / base.redis_us,
              r.cpu_us, r.bytes_in, r.bytes_in / base.bytes_in, r.mgets, r.wall_us);
          std::fflush(stdout);
        }
      }
    }
  }

  // 4. The edge's discovery read: a real EdgeService (bench/bench_edge.h), the same script and
  // arguments it sends from workerd, on one node and on the cluster (the edge seeded with all six
  // nodes, one socket per node it is sent to).
  const std::string secret = "capacity-bench-caller-token-secret-0123456789";
  std::string seeds;
  for (int port : cluster.ports()) {
    seeds += (seeds.empty() ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(port);
  }
  std::printf(
      "\n## The edge's discovery read (EdgeService, L1 TTL 0, body cache warm), %d reads each\n\n",
      k);
  std::printf(
      "| G | manifest | read | Redis | Redis µs per read | vs one node | Redis CPU µs per read | "
      "bytes from Redis per read | vs one node | bytes to Redis per read | round trips per read | "
      "client µs per read |\n");
  std::printf(
      "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int64_t g : grants) {
    for (int64_t size : sizes) {
      for (bool conditional : {false, true}) {
        bench::EdgeReadRow base;
        for (const Topology* topo : topologies) {
          std::string ns;
          const std::size_t chars = seed_reader(topo, g, size, &ns);
          std::map<std::string, std::string> extra;
          if (topo == &many) extra["REDIS_CLUSTER"] = seeds;
          const std::string token =
              *quiver::mint_caller_token("reader", secret, "k", bench::wall_ms(), 3'600'000);
          const bench::EdgeReadRow r = bench::measure_edge_read(
              bench::new_edge(ns, secret, 0, conditional ? 600'000 : 0, extra),
              topo == &one ? server.port : 0, token, k, rounds, chars, conditional,
              [topo] { return topo->info(); });
          if (topo == &one) base = r;
          std::printf(
              "| %lld | %zu B | %s | %s | %.1f | %.2f | %.1f | %.0f | %.3f | %.0f | %.2f | %.0f "
              "|\n",
              static_cast<long long>(g), chars / static_cast<std::size_t>(g),
              conditional ? "conditional" : "full", topo->name.c_str(), r.redis_us,
              r.redis_us / base.redis_us, r.cpu_us, r.bytes_in, r.bytes_in / base.bytes_in,
              r.bytes_out, r.round_trips, r.wall_us);
          std::fflush(stdout);
        }
      }
    }
  }

  std::printf("\nLoad average at end: %.2f\n", load_average());
  for (redisContext* c : many.masters) redisFree(c);
  redisFree(node);
  server.stop();
  return 0;
}
