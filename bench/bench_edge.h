// The edge's core driven natively, as its JS host drives it in workerd: one HTTP request through
// an EdgeService, its Redis bytes written to a plain loopback socket (a new one whenever the core
// asks for a new connection) and Redis's bytes fed back. Shared by the benchmarks that measure the
// core's work per edge request (bench/bodies.cpp, bench/mcp_core.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

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

// One request through `edge` against Redis on `port`; the response. Exits the benchmark (status 1)
// when Redis cannot be reached or the core asks for something a discovery read never does.
inline quiver::HttpResponse edge_exchange(quiver::EdgeService& edge, int port,
                                          quiver::HttpRequest request, EdgeTotals* t) {
  auto fail = [](const char* why) {
    std::fprintf(stderr, "edge_exchange: %s\n", why);
    std::exit(1);
  };
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<quiver::testing::LoopbackSocket> socket;
  quiver::EdgeStep step = edge.begin(std::move(request), wall_ms(), std::string(16, 'r'));
  for (int guard = 0; guard < 100 && step.action != quiver::EdgeAction::kRespond; ++guard) {
    if (step.action == quiver::EdgeAction::kRedis) {
      if (step.new_connection || socket == nullptr) {
        socket = std::make_unique<quiver::testing::LoopbackSocket>(port);
      }
      ++t->round_trips;
      t->bytes_out += static_cast<int64_t>(step.redis_bytes.size());
      if (!socket->send_all(step.redis_bytes)) fail("send to Redis failed");
    } else if (step.action != quiver::EdgeAction::kRead) {
      fail("unexpected edge step");
    }
    std::string bytes = socket->receive(1 << 20);
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
// TTL is a full read, no conditional reads).
inline std::unique_ptr<quiver::EdgeService> new_edge(const std::string& ns,
                                                     const std::string& secret, int64_t l1_ttl_ms,
                                                     int64_t validate_max_age_ms = -1) {
  quiver::Json env = quiver::Json::object();
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

}  // namespace bench
