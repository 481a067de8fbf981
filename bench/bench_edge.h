// The edge's core driven natively, as its JS host drives it in workerd: one HTTP request through
// an EdgeService, its Redis bytes written to a plain loopback socket (a new one whenever the core
// asks for a new connection) and Redis's bytes fed back. Shared by the benchmarks that measure the
// core's work per edge request (bench/bodies.cpp, bench/mcp_core.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "tests/support/loopback_socket.h"

namespace bench {

inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct EdgeTotals {
  int64_t requests = 0;
  int64_t round_trips = 0;
  int64_t bytes_in = 0;   // from Redis
  int64_t bytes_out = 0;  // to Redis
  double wall_us = 0;
};

// One request through `edge` against Redis on `port`; the response. On a Redis Cluster (the edge
// configured with REDIS_CLUSTER) each step names its node (127.0.0.1:<port>): one socket per node,
// as worker.mjs keeps them, `port` unused. Exits the benchmark (status 1) when Redis cannot be
// reached or the core asks for something a discovery read never does.
inline quiver::HttpResponse edge_exchange(quiver::EdgeService& edge, int port,
                                          quiver::HttpRequest request, EdgeTotals* t) {
  auto fail = [](const char* why) {
    std::fprintf(stderr, "edge_exchange: %s\n", why);
    std::exit(1);
  };
  const auto start = std::chrono::steady_clock::now();
  // By node ("host:port", or "" for the one configured Redis); `current`: the last write's.
  std::map<std::string, std::unique_ptr<quiver::testing::LoopbackSocket>> sockets;
  quiver::testing::LoopbackSocket* current = nullptr;
  quiver::EdgeStep step = edge.begin(std::move(request), wall_ms(), std::string(16, 'r'));
  for (int guard = 0; guard < 100 && step.action != quiver::EdgeAction::kRespond; ++guard) {
    if (step.action == quiver::EdgeAction::kRedis) {
      for (const std::string& address : step.redis_close) sockets.erase(address);
      if (!step.redis_host.empty() && step.redis_host != "127.0.0.1") fail("a node off loopback");
      const std::string address =
          step.redis_host.empty() ? "" : step.redis_host + ":" + std::to_string(step.redis_port);
      std::unique_ptr<quiver::testing::LoopbackSocket>& socket = sockets[address];
      if (step.new_connection || socket == nullptr) {
        socket = std::make_unique<quiver::testing::LoopbackSocket>(
            step.redis_host.empty() ? port : step.redis_port);
      }
      if (step.redis_delay_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(step.redis_delay_ms));
      }
      current = socket.get();
      ++t->round_trips;
      t->bytes_out += static_cast<int64_t>(step.redis_bytes.size());
      if (!current->send_all(step.redis_bytes)) fail("send to Redis failed");
    } else if (step.action != quiver::EdgeAction::kRead || current == nullptr) {
      fail("unexpected edge step");
    }
    std::string bytes = current->receive(1 << 20);
    if (bytes.empty()) fail("Redis closed or timed out");
    t->bytes_in += static_cast<int64_t>(bytes.size());
    step = edge.feed(step.handle, bytes, wall_ms());
  }
  if (step.action != quiver::EdgeAction::kRespond) fail("no answer after 100 steps");
  quiver::HttpResponse response = std::move(step.response);
  edge.end(step.handle);
  t->wall_us +=
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  ++t->requests;
  return response;
}

// An EdgeService for namespace `ns` whose callers' tokens are signed with `secret` (kid "k"), its
// L1 kept `l1_ttl_ms` (0: every read goes to Redis), Redis without a password.
// `validate_max_age_ms`: QUIVER_L1_VALIDATE_MAX_AGE_MS (-1: the default; 0: every read past the
// TTL is a full read, no conditional reads). `extra`: more settings (REDIS_CLUSTER, ...).
inline std::unique_ptr<quiver::EdgeService> new_edge(
    const std::string& ns, const std::string& secret, int64_t l1_ttl_ms,
    int64_t validate_max_age_ms = -1, const std::map<std::string, std::string>& extra = {}) {
  quiver::Json env = quiver::Json::object();
  for (const auto& [name, value] : extra) env[name] = value;
  env["QUIVER_TOKEN_KEYS"] = quiver::Json::object({{"k", secret}}).dump();
  env["QUIVER_NAMESPACE"] = ns;
  env["QUIVER_L1_TTL_MS"] = std::to_string(l1_ttl_ms);
  if (validate_max_age_ms >= 0) {
    env["QUIVER_L1_VALIDATE_MAX_AGE_MS"] = std::to_string(validate_max_age_ms);
  }
  auto edge = std::make_unique<quiver::EdgeService>(quiver::edge_settings_from_env(env.dump()));
  if (!edge->configured()) {
    std::fprintf(stderr, "new_edge: edge settings refused\n");
    std::exit(1);
  }
  return edge;
}

// The edge's discovery read measured: GET /v1/manifests by the caller of `token` through one
// EdgeService (one isolate, its L1 TTL 0 so every read reaches Redis), after one unmeasured read
// (the script loaded, a cluster's map learned, the body cache warm: the steady state, no MGET).
// `rounds` rounds of k / rounds reads; each figure is the least of its rounds. `conditional`: the
// edge was made to check its copy against the versions (QUIVER_L1_VALIDATE_MAX_AGE_MS > 0) and
// every measured read must be answered from the checked copy (nothing is written meanwhile), else
// every read is a full one (0). The servers' counters come from `info` (one server's INFO, or a
// cluster's masters' added up). Exits the benchmark (status 1) on a wrong answer.
struct EdgeReadRow {
  double redis_us = 0;     // the script's (and AUTH's) commandstats usec per read
  double cpu_us = 0;       // used_cpu_user + used_cpu_sys per read
  double bytes_in = 0;     // from Redis per read, as the edge received them
  double bytes_out = 0;    // to Redis per read
  double round_trips = 0;  // per read
  double wall_us = 0;      // per read, the client's (this process's) time included
};

inline EdgeReadRow measure_edge_read(std::unique_ptr<quiver::EdgeService> edge, int port,
                                     const std::string& token, int k, int rounds,
                                     std::size_t expect_chars, bool conditional,
                                     const std::function<RedisInfo()>& info) {
  auto read = [&](EdgeTotals* t) {
    quiver::HttpRequest request;
    request.method = "GET";
    request.path = "/v1/manifests";
    request.headers.emplace_back("Authorization", "Bearer " + token);
    quiver::HttpResponse r = edge_exchange(*edge, port, std::move(request), t);
    if (r.status != 200) fail("the edge read answered " + std::to_string(r.status));
    if (r.body.size() < expect_chars) fail("the edge read lacks its manifests");
  };
  EdgeTotals warm;
  read(&warm);
  const uint64_t revalidated_before = edge->revalidated();
  const int per_round = std::max(1, k / std::max(1, rounds));
  EdgeReadRow row;
  for (int round = 0; round < rounds; ++round) {
    const RedisInfo before = info();
    EdgeTotals t;
    for (int i = 0; i < per_round; ++i) read(&t);
    const RedisInfo after = info();
    EdgeReadRow r;
    r.redis_us = discovery_read_usec(before, after, false) / per_round;
    r.cpu_us = (after.cpu_us - before.cpu_us) / per_round;
    r.bytes_in = static_cast<double>(t.bytes_in) / per_round;
    r.bytes_out = static_cast<double>(t.bytes_out) / per_round;
    r.round_trips = static_cast<double>(t.round_trips) / per_round;
    r.wall_us = t.wall_us / per_round;
    if (round == 0) row = r;
    row.redis_us = std::min(row.redis_us, r.redis_us);
    row.cpu_us = std::min(row.cpu_us, r.cpu_us);
    row.bytes_in = std::min(row.bytes_in, r.bytes_in);
    row.bytes_out = std::min(row.bytes_out, r.bytes_out);
    row.round_trips = std::min(row.round_trips, r.round_trips);
    row.wall_us = std::min(row.wall_us, r.wall_us);
  }
  const uint64_t expected = conditional ? static_cast<uint64_t>(per_round * rounds) : 0;
  if (edge->revalidated() - revalidated_before != expected) {
    fail("the edge answered " + std::to_string(edge->revalidated() - revalidated_before) +
         " reads from its checked copy, expected " + std::to_string(expected));
  }
  return row;
}

}  // namespace bench
