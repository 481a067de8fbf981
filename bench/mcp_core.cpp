// Benchmark (not a test): what the edge's core does for `POST /mcp tools/list` against
// `GET /v1/manifests` for the same member, natively, side by side in one run, on a redis-server of
// its own. The core is the one the wasm edge runs (EdgeService); its Redis bytes go over a plain
// loopback socket as the edge's JS host sends them (bench/bench_edge.h). workerd's own costs are
// the same for both requests and are left out: bench/mcp.mjs measures through workerd.
//
//   mcp_core [--redis-server redis-server] [--g 10] [--size 9000] [--k 2000]
//
// A member granted G shared connections, each manifest about `size` bytes (tools of ~1 KB: keep
// G * size under ~100 KB for the tools to fit one /mcp page of 100). Four EdgeServices, requests
// round robin: REST and /mcp with L1 off (QUIVER_L1_TTL_MS=0: a Redis round trip each) and with L1
// on (a long TTL: the caller's store read kept in the isolate; REST also replays its rendered
// answer). Per request: wall time (the core plus the loopback round trip) and this thread's CPU
// time (the core, the socket calls), mean and p50, and the ratio /mcp ÷ REST.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_edge.h"
#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "shared/caller_token.h"
#include "shared/redis_keys.h"

namespace {

constexpr char kSecret[] = "bench-mcp-core-caller-token-secret-0123456789";

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct Case {
  std::string name;
  bool mcp = false;
  std::unique_ptr<quiver::EdgeService> edge;
  std::vector<double> wall, cpu;
  std::size_t bytes = 0;
};

quiver::HttpRequest request(bool mcp, const std::string& token) {
  quiver::HttpRequest r;
  r.headers.emplace_back("Authorization", "Bearer " + token);
  if (!mcp) {
    r.method = "GET";
    r.path = "/v1/manifests";
    return r;
  }
  r.method = "POST";
  r.path = "/mcp";
  r.headers.emplace_back("Content-Type", "application/json");
  r.headers.emplace_back("Accept", "application/json, text/event-stream");
  r.headers.emplace_back("MCP-Protocol-Version", "2025-11-25");
  r.body = R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}})";
  return r;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
double p50(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = bench::parse_args(
      argc, argv,
      {{"--redis-server", "redis-server"}, {"--g", "10"}, {"--size", "9000"}, {"--k", "2000"}});
  const std::string redis_server = args["--redis-server"];
  const int g = std::atoi(args["--g"].c_str()), k = std::atoi(args["--k"].c_str());
  const std::size_t size = static_cast<std::size_t>(std::atoll(args["--size"].c_str()));
  if (g < 1 || k < 1 || size < 100) bench::fail("bad arguments");

  bench::RedisServerProcess server =
      bench::start_redis_server(redis_server, "/tmp", "mcp-core-bench");
  redisContext* c = redisConnect("127.0.0.1", server.port);
  if (c == nullptr || c->err != 0) bench::fail("connect failed");
  const int64_t now = bench::wall_ms();
  const std::string ns = "mcp";
  quiver::RedisKeys keys = *quiver::RedisKeys::create(ns);
  const quiver::Principal reader = *quiver::Principal::member("reader");
  const std::size_t manifest_bytes = bench::seed_member(c, keys, reader, g, size, now, false);
  const std::string token = *quiver::mint_caller_token("reader", kSecret, "k", now, 3'600'000);

  std::vector<Case> cases;
  for (int64_t ttl : {int64_t{0}, int64_t{600'000}}) {
    for (bool mcp : {false, true}) {
      Case x;
      x.name = std::string(mcp ? "POST /mcp tools/list" : "GET /v1/manifests") +
               (ttl == 0 ? ", L1 off" : ", L1 on");
      x.mcp = mcp;
      x.edge = bench::new_edge(ns, kSecret, ttl);
      cases.push_back(std::move(x));
    }
  }
  bench::EdgeTotals totals;
  for (Case& x : cases) {  // warm: the script loaded, bodies and render caches filled, L1 kept
    for (int i = 0; i < 3; ++i) {
      quiver::HttpResponse r =
          bench::edge_exchange(*x.edge, server.port, request(x.mcp, token), &totals);
      if (r.status != 200) bench::fail(x.name + " answered " + std::to_string(r.status));
      if (x.mcp && r.body.find("\"nextCursor\"") != std::string::npos) {
        bench::fail("the tools do not fit one /mcp page: lower --g or --size");
      }
      x.bytes = r.body.size();
    }
  }
  for (int i = 0; i < k; ++i) {
    for (Case& x : cases) {
      const double cpu0 = thread_cpu_us();
      const double wall0 = totals.wall_us;
      quiver::HttpResponse r =
          bench::edge_exchange(*x.edge, server.port, request(x.mcp, token), &totals);
      x.cpu.push_back(thread_cpu_us() - cpu0);
      x.wall.push_back(totals.wall_us - wall0);
      if (r.status != 200) bench::fail(x.name + " answered " + std::to_string(r.status));
    }
  }

  std::printf(
      "## The edge's core: /mcp tools/list vs /v1/manifests, G = %d, %zu manifest bytes, "
      "%d requests each\n\n",
      g, manifest_bytes, k);
  std::printf(
      "| request | answer bytes | wall µs mean | wall µs p50 | CPU µs mean | CPU µs p50 | "
      "/mcp ÷ REST (CPU mean) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& x = cases[i];
    std::string ratio;
    if (x.mcp) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", mean(x.cpu) / mean(cases[i - 1].cpu));
      ratio = buf;
    }
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %s |\n", x.name.c_str(), x.bytes,
                mean(x.wall), p50(x.wall), mean(x.cpu), p50(x.cpu), ratio.c_str());
  }
  redisFree(c);
  server.stop();
  return 0;
}
