// Benchmark (not a test): a discovery read's cost as the namespace around it grows to a million
// members (issue 14: "a simulated namespace of a million members (generated keys, not real
// upstreams) whose per-read cost does not grow with the namespace"), on one redis-server of its
// own:
//
//   namespace_scale [--redis-server redis-server] [--g 50] [--size 20000] [--k 400]
//                   [--members 1000,10000,100000,1000000]
//
// The reader is granted G connections: G - 1 shared ones (c000, ...), each with a manifest of
// about `size` bytes committed through the real fenced commit script, and `team`, a per_member
// connection every member of the namespace is granted, the reader's own manifest of it committed
// the same way. The namespace is then grown, step by step, to each size of --members: every other
// member m<i> gets a grant of `team` (its `grants:member/m<i>` set and an entry of
// `grantees:team`) and its own manifest record of `team`, a copy of the reader's record (the same
// body, stored once: generated keys, written pipelined, not listed from upstreams).
//
// At each size, K reads of GET /v1/manifests by the reader through the real EdgeService (the core
// the wasm edge runs, here natively) with its L1 off and its body cache warm (every read after an
// isolate's first), and K reads through the agent's RedisStore::read_discovery: Redis time per read
// (INFO commandstats, the top-level commands), bytes from Redis per read and client time per read,
// with the keys and memory the namespace holds. The K reads run in 5 rounds and each figure is the
// least of the rounds' means: other work on a shared machine only ever adds to a round. A read
// touches the reader's keys only, so its cost should not move with the namespace; the table shows
// whether it does.
//
// The server binds 127.0.0.1 on a port from the pid, keeps no data on disk, and is stopped and its
// directory deleted at the end. At a million members Redis holds about 1 GB.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_edge.h"
#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/principal.h"
#include "shared/redis_keys.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "bench-namespace-caller-token-secret-01234";
constexpr char kNs[] = "scale";
constexpr char kTeam[] = "team";

int64_t integer_reply(redisContext* c, const std::vector<std::string>& argv) {
  redisReply* r = bench::command_argv(c, argv);
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) bench::fail(argv[0] + " failed");
  const int64_t v = r->integer;
  freeReplyObject(r);
  return v;
}

constexpr int kRounds = 5;

// The least of the rounds' figures so far (`round` 0 sets it).
void least(double* figure, double value, int round) {
  if (round == 0 || value < *figure) *figure = value;
}

struct Row {
  int64_t members = 0;
  int64_t keys = 0;
  double used_memory = 0;
  double edge_redis_us = 0, edge_bytes = 0, edge_wall_us = 0;     // full reads
  double valid_redis_us = 0, valid_bytes = 0, valid_wall_us = 0;  // conditional reads
  double agent_redis_us = 0, agent_bytes = 0, agent_wall_us = 0;
};

// `conditional`: past the (zero) TTL the edge checks its copy against the versions (every read
// after the first is answered "unchanged": nothing is written meanwhile); else every read is a
// full read (QUIVER_L1_VALIDATE_MAX_AGE_MS=0).
void measure_edge(redisContext* c, int port, const std::string& token, int k,
                  std::size_t expect_chars, bool conditional, double* redis_us, double* bytes,
                  double* wall_us) {
  const bench::EdgeReadRow r = bench::measure_edge_read(
      bench::new_edge(kNs, kSecret, 0, conditional ? 600'000 : 0), port, token, k, kRounds,
      expect_chars, conditional, [c] { return bench::read_info(c); });
  *redis_us = r.redis_us;
  *bytes = r.bytes_in;
  *wall_us = r.wall_us;
}

void measure_agent(redisContext* c, int port, const quiver::Principal& reader, int k,
                   std::size_t expect_chars, Row* row) {
  quiver::RedisStoreOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = port;
  o.ns = kNs;
  o.body_cache_max_bytes = std::size_t{16} << 20;
  quiver::Result<std::unique_ptr<quiver::RedisStore>> store = quiver::RedisStore::create(o);
  if (!store.ok()) bench::fail(store.error().message);
  auto read = [&] {
    quiver::Result<quiver::DiscoverySnapshot> s = (*store)->read_discovery(reader, {});
    if (!s.ok()) bench::fail("the agent's read failed: " + s.error().message);
    std::size_t chars = 0;
    for (const quiver::GrantedConnection& g : s->connections) {
      if (g.manifest) chars += g.manifest->text.size();
    }
    if (chars != expect_chars) bench::fail("the agent's read lacks manifests");
  };
  read();
  const int per_round = std::max(1, k / kRounds);
  for (int round = 0; round < kRounds; ++round) {
    const bench::RedisInfo before = bench::read_info(c);
    const auto start = Clock::now();
    for (int i = 0; i < per_round; ++i) read();
    const double wall = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    const bench::RedisInfo after = bench::read_info(c);
    least(&row->agent_redis_us, bench::discovery_read_usec(before, after, false) / per_round,
          round);
    least(&row->agent_bytes, (after.net_output_bytes - before.net_output_bytes) / per_round, round);
    least(&row->agent_wall_us, wall / per_round, round);
  }
}

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const int64_t n = std::atoll(item.c_str());
    if (n < 1 || (!out.empty() && n <= out.back())) bench::fail("--members: increasing sizes >= 1");
    out.push_back(n);
  }
  if (out.empty()) bench::fail("--members: no size");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args =
      bench::parse_args(argc, argv,
                        {{"--redis-server", "redis-server"},
                         {"--g", "50"},
                         {"--size", "20000"},
                         {"--k", "400"},
                         {"--members", "1000,10000,100000,1000000"}});
  const int g = std::atoi(args["--g"].c_str()), k = std::atoi(args["--k"].c_str());
  const std::size_t size = static_cast<std::size_t>(std::atoll(args["--size"].c_str()));
  const std::vector<int64_t> sizes = parse_sizes(args["--members"]);
  if (g < 2 || k < 1 || size < 100) bench::fail("bad arguments");

  bench::RedisServerProcess server =
      bench::start_redis_server(args["--redis-server"], "/tmp", "namespace-scale");
  redisContext* c = redisConnect("127.0.0.1", server.port);
  if (c == nullptr || c->err != 0) bench::fail("connect failed");
  const int64_t now = bench::wall_ms();
  const quiver::RedisKeys keys = *quiver::RedisKeys::create(kNs);
  const quiver::Principal reader = *quiver::Principal::member("reader");
  const std::string token = *quiver::mint_caller_token("reader", kSecret, "k", now, 3'600'000);

  // The reader: G - 1 shared connections and its own manifest of the per_member `team`.
  const std::size_t chars = bench::seed_reader_with_team(c, keys, reader, kTeam, g, size, now);
  const std::vector<std::string> fields = bench::record_fields(c, *keys.manifest(kTeam, reader));

  std::vector<Row> rows;
  int64_t grown = 0;
  for (int64_t n : sizes) {
    const auto start = Clock::now();
    bench::grant_members(c, keys, kTeam, grown, n - 1, fields);  // the reader is one of the n
    grown = n - 1;
    const double load_s = std::chrono::duration<double>(Clock::now() - start).count();
    Row row;
    row.members = n;
    row.keys = integer_reply(c, {"DBSIZE"});
    row.used_memory = bench::read_info(c).used_memory;
    measure_edge(c, server.port, token, k, chars * 9 / 10, false, &row.edge_redis_us,
                 &row.edge_bytes, &row.edge_wall_us);
    measure_edge(c, server.port, token, k, chars * 9 / 10, true, &row.valid_redis_us,
                 &row.valid_bytes, &row.valid_wall_us);
    measure_agent(c, server.port, reader, k, chars, &row);
    std::fprintf(stderr, "%lld members: loaded in %.1f s, %lld keys\n", static_cast<long long>(n),
                 load_s, static_cast<long long>(row.keys));
    rows.push_back(row);
  }

  std::printf(
      "## A discovery read as the namespace grows: G = %d (%d shared + 1 per_member), manifests "
      "of %zu bytes (mean), %d reads each\n\n",
      g, g - 1, chars / g, k);
  std::printf(
      "| members | keys | Redis memory | edge full read: Redis µs | vs first | bytes from Redis "
      "| client µs | edge conditional read: Redis µs | vs full | bytes from Redis | client µs "
      "| agent: Redis µs per read | vs first | agent: bytes from Redis | agent: client µs |\n");
  std::printf(
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "| ---: | ---: |\n");
  for (const Row& r : rows) {
    std::printf(
        "| %lld | %lld | %.0f MB | %.1f | %.2f | %.0f | %.0f | %.1f | %.3f | %.0f | %.0f | %.1f | "
        "%.2f | %.0f | %.0f |\n",
        static_cast<long long>(r.members), static_cast<long long>(r.keys), r.used_memory / 1e6,
        r.edge_redis_us, r.edge_redis_us / rows[0].edge_redis_us, r.edge_bytes, r.edge_wall_us,
        r.valid_redis_us, r.valid_redis_us / r.edge_redis_us, r.valid_bytes, r.valid_wall_us,
        r.agent_redis_us, r.agent_redis_us / rows[0].agent_redis_us, r.agent_bytes,
        r.agent_wall_us);
  }

  redisFree(c);
  server.stop();
  return 0;
}
