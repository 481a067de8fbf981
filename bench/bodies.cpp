// Benchmark (not a test): manifest bodies stored once, by content (schema/redis-keys.md,
// "Manifest bodies"), against the layout before them (every record holding its body inline), side
// by side in one run on one redis-server of its own:
//
//   bodies [--redis-server redis-server] [--g 50] [--size 20000] [--k 400] [--principals 1000]
//
// 1. The edge's discovery read. A member granted G shared connections, each manifest about
//    `size` bytes of canonical JSON; K reads of GET /v1/manifests through the real EdgeService
//    (the core the wasm edge runs, here natively) with its L1 off (QUIVER_L1_TTL_MS=0: every read
//    goes to Redis), its bytes written to a plain socket and Redis's bytes fed back, as the
//    edge's JS host does. Three cases:
//      inline  the records as the commit script wrote them before (body in `manifest`);
//      warm    bodies stored apart, the isolate's body cache holding them (every read after an
//              isolate's first): the script's metadata only;
//      cold    bodies stored apart, a new isolate per read (its first read): the script, then one
//              MGET of the G bodies.
//    Per read: Redis time (INFO commandstats: the usec of the top-level commands the edge sends,
//    EVALSHA_RO and MGET; the script's inner calls are included in the EVALSHA_RO figure), Redis
//    CPU (used_cpu_user + used_cpu_sys: also the socket I/O), bytes read from Redis, round trips,
//    and the client's wall time per read (the core's work plus loopback round trips).
//    The discovery script is the same in both layouts: the inline case is what main's edge sends
//    and receives.
// 2. The agent's read of the same member (RedisStore::read_discovery, what its discovery API reads
//    before rendering), bodies apart, without and with its body cache
//    (native-agent/store/body_cache.h): Redis time, bytes, MGETs and client time per read.
// 3. Memory per manifest: P principals of one per-member connection listing identical content,
//    committed (a) as before, inline, and (b) through the real commit script: INFO used_memory
//    before and after each load, per manifest.
//
// The server binds 127.0.0.1 on a port from the pid, keeps no data on disk, and is stopped and its
// directory deleted at the end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_agent_read.h"
#include "bench/bench_edge.h"
#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "shared/caller_token.h"
#include "shared/discovery_redis.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/lease.h"
#include "shared/manifest_record.h"
#include "shared/redis_keys.h"
#include "shared/resp.h"
#include "shared/schema_assets.h"
#include "shared/sha256.h"

namespace {

using quiver::Json;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "bench-bodies-caller-token-secret-0123456789";

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "bodies: %s\n", why.c_str());
  std::exit(1);
}

// ---- the edge's read ----------------------------------------------------------------------------

// One GET /v1/manifests through `edge`; dies unless it answers 200 with the manifests.
void edge_read(quiver::EdgeService& edge, int port, const std::string& token, bench::EdgeTotals* t,
               std::size_t expect_bodies_chars) {
  quiver::HttpRequest request;
  request.method = "GET";
  request.path = "/v1/manifests";
  request.headers.emplace_back("Authorization", "Bearer " + token);
  quiver::HttpResponse response = bench::edge_exchange(edge, port, std::move(request), t);
  if (response.status != 200) die("the read did not answer 200: " + response.body.substr(0, 300));
  if (response.body.size() < expect_bodies_chars) die("the answer lacks its manifests");
}

// Every read a full one (no conditional reads past the zero TTL: that is bench/namespace_scale's
// comparison), so the rows compare the body layouts alone.
std::unique_ptr<quiver::EdgeService> new_edge(const std::string& ns) {
  return bench::new_edge(ns, kSecret, 0, /*validate_max_age_ms=*/0);
}

struct Row {
  std::string name;
  double redis_us = 0;  // top-level commandstats usec per read
  double cpu_us = 0;    // used_cpu delta per read
  double bytes_in = 0;
  double bytes_out = 0;
  double round_trips = 0;
  double wall_us = 0;
};

Row measure(const std::string& name, redisContext* c, int port, const std::string& ns,
            const std::string& token, int k, bool new_isolate_per_read, std::size_t expect) {
  std::unique_ptr<quiver::EdgeService> edge = new_edge(ns);
  bench::EdgeTotals warmup;
  edge_read(*edge, port, token, &warmup, expect);  // the script loaded, the isolate's caches warm
  const bench::RedisInfo before = bench::read_info(c);
  bench::EdgeTotals t;
  for (int i = 0; i < k; ++i) {
    if (new_isolate_per_read) edge = new_edge(ns);
    edge_read(*edge, port, token, &t, expect);
  }
  const bench::RedisInfo after = bench::read_info(c);
  Row row;
  row.name = name;
  row.redis_us = bench::discovery_read_usec(before, after) / k;
  row.cpu_us = (after.cpu_us - before.cpu_us) / k;
  row.bytes_in = static_cast<double>(t.bytes_in) / k;
  row.bytes_out = static_cast<double>(t.bytes_out) / k;
  row.round_trips = static_cast<double>(t.round_trips) / k;
  row.wall_us = t.wall_us / k;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = bench::parse_args(argc, argv,
                                                              {{"--redis-server", "redis-server"},
                                                               {"--g", "50"},
                                                               {"--size", "20000"},
                                                               {"--k", "400"},
                                                               {"--principals", "1000"}});
  const std::string redis_server = args["--redis-server"];
  const int g = std::atoi(args["--g"].c_str()), k = std::atoi(args["--k"].c_str());
  const int principals = std::atoi(args["--principals"].c_str());
  const std::size_t size = static_cast<std::size_t>(std::atoll(args["--size"].c_str()));
  if (g < 1 || k < 1 || principals < 1 || size < 100) die("bad arguments");

  bench::RedisServerProcess server =
      bench::start_redis_server(redis_server, "/tmp", "bodies-bench");
  redisContext* c = redisConnect("127.0.0.1", server.port);
  if (c == nullptr || c->err != 0) die("connect failed");
  const int64_t now = bench::wall_ms();

  // 1. The read: two namespaces with the same member, grants and contents, one per layout.
  const std::string token = *quiver::mint_caller_token("reader", kSecret, "k", now, 3'600'000);
  const quiver::Principal reader = *quiver::Principal::member("reader");
  std::size_t manifest_chars = 0;
  for (const std::string ns : {"inline", "apart"}) {
    manifest_chars =
        bench::seed_member(c, *quiver::RedisKeys::create(ns), reader, g, size, now, ns == "inline");
  }

  const std::size_t expect = manifest_chars * 9 / 10;
  std::vector<Row> rows;
  rows.push_back(measure("inline (before: body in every record)", c, server.port, "inline", token,
                         k, false, expect));
  rows.push_back(
      measure("apart, body cache warm (after)", c, server.port, "apart", token, k, false, expect));
  rows.push_back(measure("apart, new isolate per read (after, cold)", c, server.port, "apart",
                         token, k, true, expect));

  std::printf("## Edge discovery read: G = %d, manifests of %zu bytes (mean), %d reads each\n\n", g,
              manifest_chars / g, k);
  std::printf(
      "| layout | Redis µs per read (commandstats) | vs inline | Redis CPU µs per read | bytes "
      "from "
      "Redis per read | vs inline | bytes to Redis | round trips | client µs per read |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.1f | %.3f | %.1f | %.0f | %.4f | %.0f | %.1f | %.0f |\n", r.name.c_str(),
                r.redis_us, r.redis_us / rows[0].redis_us, r.cpu_us, r.bytes_in,
                r.bytes_in / rows[0].bytes_in, r.bytes_out, r.round_trips, r.wall_us);
  }

  // 2. The agent's discovery read of the same member, bodies apart: without and with its body
  // cache (native-agent/store/body_cache.h).
  auto info = [c] { return bench::read_info(c); };
  quiver::RedisStoreOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = server.port;
  o.ns = "apart";
  std::vector<bench::AgentReadRow> agent;
  o.body_cache_max_bytes = 0;
  agent.push_back(bench::measure_agent_read("agent, no body cache (before)", info, o, reader, k,
                                            manifest_chars));
  o.body_cache_max_bytes = std::size_t{16} << 20;
  agent.push_back(
      bench::measure_agent_read("agent, body cache (after)", info, o, reader, k, manifest_chars));
  std::printf("\n## Agent discovery read (RedisStore::read_discovery): G = %d, %d reads each\n\n",
              g, k);
  std::printf(
      "| agent | Redis µs per read (commandstats) | Redis CPU µs per read | bytes from Redis per "
      "read | MGETs per read | client µs per read | vs before (client) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const bench::AgentReadRow& r : agent) {
    std::printf("| %s | %.1f | %.1f | %.0f | %.2f | %.0f | %.3f |\n", r.name.c_str(), r.redis_us,
                r.cpu_us, r.bytes_in, r.mgets, r.wall_us, r.wall_us / agent[0].wall_us);
  }

  // 3. Memory per manifest with deduplication: P principals, one per-member connection, the same
  // content for all.
  const std::string shared_text = bench::manifest_text(size, "everyone");
  std::printf(
      "\n## Memory: %d principals of one per-member connection, identical %zu-byte "
      "manifests\n\n",
      principals, shared_text.size());
  std::printf("| layout | used_memory delta | bytes per manifest | vs inline |\n");
  std::printf("| --- | ---: | ---: | ---: |\n");
  double inline_per = 0;
  for (const std::string ns : {"mem-inline", "mem-apart"}) {
    quiver::RedisKeys keys = *quiver::RedisKeys::create(ns);
    bench::put_connection(c, keys, "team", "per_member");
    const double before = bench::read_info(c).used_memory;
    for (int i = 0; i < principals; ++i) {
      const quiver::Principal p = *quiver::Principal::member("m" + std::to_string(i));
      if (ns == "mem-inline") {
        bench::commit_inline(c, keys, "team", p, shared_text, now);
      } else {
        bench::commit_apart(c, keys, "team", p, shared_text, now);
      }
    }
    const double per = (bench::read_info(c).used_memory - before) / principals;
    if (ns == "mem-inline") inline_per = per;
    std::printf("| %s | %.0f | %.0f | %.4f |\n",
                ns == "mem-inline" ? "inline (before)" : "apart (after)", per * principals, per,
                per / inline_per);
  }

  redisFree(c);
  server.stop();
  return 0;
}
