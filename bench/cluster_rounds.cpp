// Benchmark (not a test): a spread round of the agent's node pool (RedisClusterPool::run_batch,
// key layout v2: one command per slot, the slots over several masters) with every node's pipeline
// written before any reply is read (concurrent_nodes, the pool since 2026-12-07) against the same
// round node after node (concurrent_nodes off: the pool before), side by side in one run, on a
// six-node Redis Cluster of its own (3 masters + 3 replicas, started as
// tests/support/redis_cluster.h starts one, every node on 127.0.0.1):
//
//   cluster_rounds [--rounds 300] [--keys 48] [--delays-ms 0,1,5]
//
// Rows, each round timed at the client around run_batch (the two pools take turns, which goes
// first alternating): `--keys` one-slot GETs (tags spread evenly over the three masters), the same
// number of one-slot SETs, and one DBSIZE on every master (run_on_masters). First on loopback, the
// pool talking to the nodes directly; then through a delay proxy of the benchmark's own per node
// (every node announces the proxy's port: CONFIG SET cluster-announce-port), which holds each
// chunk of bytes half the delay in each direction, so a round trip costs `delay` more: what a
// network between the agent and the cluster adds and loopback does not (no `tc` here). A delay of
// 0 through the proxy shows the proxy's own cost. Every answer is checked.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/bench_manifests.h"
#include "native-agent/store/redis_cluster_pool.h"
#include "shared/redis_cluster.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;

// A TCP proxy on 127.0.0.1 in front of one node: each accepted connection is paired with one to
// the node; every chunk read on either side is written on the other `delay_us / 2` after it was
// read (a thread reads, another writes at the chunk's time), so a round trip costs `delay_us`
// more and pipelined bytes stay pipelined.
class DelayProxy {
 public:
  DelayProxy(int target_port, const std::atomic<int64_t>* delay_us)
      : target_port_(target_port), delay_us_(delay_us) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      bench::fail("proxy: cannot listen");
    }
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~DelayProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();  // no connection comes after this
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : threads_) t.join();
    ::close(listen_fd_);
    for (int fd : fds_) ::close(fd);
  }

  int port() const { return port_; }

 private:
  struct Chunk {
    Clock::time_point due;
    std::string bytes;  // empty: the reading side ended
  };
  struct Pipe {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Chunk> chunks;
  };

  static int connect_to(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void accept_loop() {
    for (;;) {
      int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;  // shut down
      if (stopping_) {
        ::close(client);
        return;
      }
      int server = connect_to(target_port_);
      if (server < 0) {
        ::close(client);
        continue;
      }
      int one = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pump(client, server);
      pump(server, client);
    }
  }

  // Bytes from `from` to `to`, each chunk held until its time. Called with mu_ held.
  void pump(int from, int to) {
    auto pipe = std::make_shared<Pipe>();
    threads_.emplace_back([this, from, pipe] {
      char buf[65536];
      for (;;) {
        ssize_t n = ::recv(from, buf, sizeof buf, 0);
        Chunk c;
        c.due = Clock::now() + std::chrono::microseconds(delay_us_->load() / 2);
        if (n > 0) c.bytes.assign(buf, static_cast<std::size_t>(n));
        {
          std::lock_guard<std::mutex> lock(pipe->mu);
          pipe->chunks.push_back(std::move(c));
        }
        pipe->cv.notify_one();
        if (n <= 0) return;
      }
    });
    threads_.emplace_back([to, pipe] {
      for (;;) {
        Chunk c;
        {
          std::unique_lock<std::mutex> lock(pipe->mu);
          pipe->cv.wait(lock, [&] { return !pipe->chunks.empty(); });
          c = std::move(pipe->chunks.front());
          pipe->chunks.pop_front();
        }
        if (c.bytes.empty()) {
          ::shutdown(to, SHUT_WR);
          return;
        }
        std::this_thread::sleep_until(c.due);
        std::size_t off = 0;
        while (off < c.bytes.size()) {
          ssize_t w = ::send(to, c.bytes.data() + off, c.bytes.size() - off, MSG_NOSIGNAL);
          if (w <= 0) return;
          off += static_cast<std::size_t>(w);
        }
      }
    });
  }

  int target_port_;
  const std::atomic<int64_t>* delay_us_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<int> fds_;
  std::thread acceptor_;
  std::vector<std::thread> threads_;  // two per direction of each connection
};

double load_average() {
  double one = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one) != 1) one = 0;
    std::fclose(f);
  }
  return one;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::unique_ptr<quiver::RedisClusterPool> make_pool(int seed_port, bool concurrent) {
  quiver::RedisClusterPoolOptions o;
  quiver::ClusterNode seed;
  seed.host = "127.0.0.1";
  seed.port = seed_port;
  o.seeds.push_back(seed);
  o.concurrent_nodes = concurrent;
  quiver::Result<std::unique_ptr<quiver::RedisClusterPool>> pool =
      quiver::RedisClusterPool::create(std::move(o));
  if (!pool.ok()) bench::fail(pool.error().message);
  return std::move(pool).value();
}

// One kind of round: what it sends and how to check what came back.
struct RoundKind {
  std::string name;
  std::function<bool(quiver::RedisClusterPool&)> run;  // false: a wrong answer
};

// Every node's CLUSTER SHARDS names the client ports in `ports` (and no other) for every master
// and replica: the nodes agree on what they announce.
bool announced(const quiver::testing::RedisCluster& cluster, const std::vector<int>& ports) {
  for (int port : cluster.ports()) {
    quiver::testing::RedisConnection c(cluster.connect(port));
    if (c == nullptr) return false;
    quiver::Result<quiver::ClusterSlotMap> map = quiver::ClusterSlotMap::from_shards(
        quiver::testing::run_argv(c.get(), {"CLUSTER", "SHARDS"}), "127.0.0.1");
    if (!map.ok() || !map->covers_all_slots()) return false;
    for (const quiver::ClusterShard& s : map->shards()) {
      if (std::find(ports.begin(), ports.end(), s.master.port) == ports.end()) return false;
      for (const quiver::ClusterNode& r : s.replicas) {
        if (std::find(ports.begin(), ports.end(), r.port) == ports.end()) return false;
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = bench::parse_args(
      argc, argv, {{"--rounds", "300"}, {"--keys", "48"}, {"--delays-ms", "0,1,5"}});
  const int rounds = std::atoi(args["--rounds"].c_str());
  const int keys = std::atoi(args["--keys"].c_str());
  const std::vector<int64_t> delays = bench::parse_int_list(args["--delays-ms"].c_str());
  if (rounds < 10 || keys < 3) bench::fail("bad arguments");

  std::printf("Load average at start: %.2f\n", load_average());
  quiver::testing::RedisCluster cluster;
  if (!cluster.ok()) bench::fail("the cluster did not start: " + cluster.error());

  std::unique_ptr<quiver::RedisClusterPool> together = make_pool(cluster.ports()[0], true);
  std::unique_ptr<quiver::RedisClusterPool> in_turn = make_pool(cluster.ports()[0], false);
  if (!together->refresh().ok()) bench::fail("no slot map");

  // `keys` hash tags, spread evenly over the masters, each a key of its own slot, seeded.
  const quiver::ClusterSlotMap map = together->map();
  std::map<int, int> per_master;
  std::vector<std::string> tags;
  const int share = (keys + 2) / 3;
  for (int i = 0; static_cast<int>(tags.size()) < keys && i < 1'000'000; ++i) {
    const std::string tag = "{s" + std::to_string(i) + "}";
    const quiver::ClusterShard* shard = map.shard_for_slot(quiver::cluster_key_slot(tag));
    if (shard == nullptr || per_master[shard->master.port] >= share) continue;
    ++per_master[shard->master.port];
    tags.push_back(tag);
  }
  std::vector<quiver::ClusterRequest> seed;
  for (const std::string& tag : tags) seed.push_back({{"SET", tag + ":k", "v" + tag}, false});
  for (const auto& r : together->run_batch(seed)) {
    if (!r.ok() || !r->is_ok()) bench::fail("seeding failed");
  }
  std::printf("Keys: %zu one-slot keys, per master:", tags.size());
  for (const auto& [port, n] : per_master) std::printf(" %d", n);
  std::printf("\n");

  std::vector<RoundKind> kinds;
  kinds.push_back({"GET × " + std::to_string(tags.size()), [&](quiver::RedisClusterPool& p) {
                     std::vector<quiver::ClusterRequest> batch;
                     for (const std::string& tag : tags)
                       batch.push_back({{"GET", tag + ":k"}, true});
                     std::vector<quiver::Result<quiver::RespValue>> got = p.run_batch(batch);
                     for (std::size_t i = 0; i < got.size(); ++i) {
                       if (!got[i].ok() || got[i]->str != "v" + tags[i]) return false;
                     }
                     return true;
                   }});
  kinds.push_back({"SET × " + std::to_string(tags.size()), [&](quiver::RedisClusterPool& p) {
                     std::vector<quiver::ClusterRequest> batch;
                     for (const std::string& tag : tags) {
                       batch.push_back({{"SET", tag + ":w", "w"}, false});
                     }
                     for (const auto& r : p.run_batch(batch)) {
                       if (!r.ok() || !r->is_ok()) return false;
                     }
                     return true;
                   }});
  kinds.push_back({"DBSIZE on every master (run_on_masters)", [&](quiver::RedisClusterPool& p) {
                     for (const auto& [node, r] : p.run_on_masters({"DBSIZE"})) {
                       if (!r.ok() || !r->is_integer()) return false;
                     }
                     return true;
                   }});

  // Both pools, taking turns, each round timed.
  auto measure = [&](const RoundKind& kind, std::vector<double>* a, std::vector<double>* b) {
    for (int w = 0; w < 5; ++w) {  // warm: connections open, nothing else
      if (!kind.run(*together) || !kind.run(*in_turn)) bench::fail(kind.name + ": wrong answer");
    }
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const bool first_together = r % 2 == 0;
        const bool use_together = (k == 0) == first_together;
        quiver::RedisClusterPool& p = use_together ? *together : *in_turn;
        const Clock::time_point t0 = Clock::now();
        if (!kind.run(p)) bench::fail(kind.name + ": wrong answer");
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        (use_together ? a : b)->push_back(ms);
      }
    }
  };

  std::printf(
      "\n| path | added round trip | round | node after node p50 / p90 / mean | all nodes at once "
      "p50 / p90 / mean | at once / after (p50, mean) |\n");
  std::printf("| --- | ---: | --- | --- | --- | --- |\n");
  auto row = [&](const std::string& path, int64_t delay_ms) {
    for (const RoundKind& kind : kinds) {
      std::vector<double> a, b;
      measure(kind, &a, &b);
      std::printf(
          "| %s | %lld ms | %s | %.3f / %.3f / %.3f ms | %.3f / %.3f / %.3f ms | %.2f, %.2f |\n",
          path.c_str(), static_cast<long long>(delay_ms), kind.name.c_str(), percentile(b, 0.5),
          percentile(b, 0.9), mean(b), percentile(a, 0.5), percentile(a, 0.9), mean(a),
          percentile(a, 0.5) / percentile(b, 0.5), mean(a) / mean(b));
      std::fflush(stdout);
    }
  };
  row("loopback, direct", 0);

  // The proxies: every node announces its proxy's port; the pools read the map again.
  std::atomic<int64_t> delay_us{0};
  std::vector<std::unique_ptr<DelayProxy>> proxies;
  std::vector<int> proxy_ports;
  for (int port : cluster.ports()) {
    proxies.push_back(std::make_unique<DelayProxy>(port, &delay_us));
    proxy_ports.push_back(proxies.back()->port());
    quiver::testing::RedisConnection c(cluster.connect(port));
    if (c == nullptr) bench::fail("connect failed");
    quiver::RespValue r = quiver::testing::run_argv(
        c.get(),
        {"CONFIG", "SET", "cluster-announce-port", std::to_string(proxies.back()->port())});
    if (!r.is_ok()) bench::fail("CONFIG SET cluster-announce-port: " + r.str);
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  while (!announced(cluster, proxy_ports)) {
    if (Clock::now() > deadline) bench::fail("the nodes did not announce the proxies' ports");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!together->refresh().ok() || !in_turn->refresh().ok()) bench::fail("no slot map");
  for (const quiver::ClusterShard& s : together->map().shards()) {
    if (std::find(proxy_ports.begin(), proxy_ports.end(), s.master.port) == proxy_ports.end()) {
      bench::fail("the pool's map does not name the proxies");
    }
  }
  for (int64_t d : delays) {
    delay_us = d * 1000;
    row("through the delay proxy", d);
  }
  const quiver::RedisClusterPoolStats sa = together->stats(), sb = in_turn->stats();
  std::printf(
      "\nPool counters (all nodes at once / node after node): moved %llu / %llu, retries %llu / "
      "%llu, connections %llu / %llu\n",
      static_cast<unsigned long long>(sa.moved), static_cast<unsigned long long>(sb.moved),
      static_cast<unsigned long long>(sa.retries), static_cast<unsigned long long>(sb.retries),
      static_cast<unsigned long long>(sa.connections),
      static_cast<unsigned long long>(sb.connections));
  std::printf("Load average at end: %.2f\n", load_average());
  together.reset();
  in_turn.reset();
  proxies.clear();
  return 0;
}
