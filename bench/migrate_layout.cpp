// Benchmark (not a test): how long `quiver-agent migrate-layout v2` pauses a namespace's writes
// as the namespace grows (docs/design.md "Migration from v1": writes pause for the settle time
// plus the copy; readers keep reading v1 meanwhile), on one redis-server of its own:
//
//   migrate_layout [--redis-server redis-server] [--g 50] [--size 20000]
//                  [--members 1000,10000,100000]
//
// Per size of --members, a fresh server holds a namespace in key layout v1 generated as
// bench/namespace_scale.cpp generates it: a reader granted G connections (G - 1 shared ones with
// manifests of about `size` bytes and `team`, a per_member connection, each committed through the
// real fenced commit script), then every other member m<i> granted `team` (its grants set and an
// entry of `grantees:team`) with its own manifest record of `team` (a copy of the reader's: one
// body, stored once). Then RedisStore::migrate_layout_to_v2 with no settle pause (the copy alone:
// the operator's `--settle` adds to it) and the figures: the copy's wall time (the writes' pause
// less the settle), keys per second, Redis CPU during the copy (used_cpu_user + used_cpu_sys), what
// the copy did (keys restored under their v2 names, grant sets converted), and a check that the
// reader's discovery read in v2 returns every manifest. The server binds 127.0.0.1 on a port from
// the pid, keeps no data on disk, and is stopped and its directory deleted after each size.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "shared/principal.h"
#include "shared/redis_keys.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kNs[] = "migrate";
constexpr char kTeam[] = "team";

std::unique_ptr<quiver::RedisStore> open_store(int port) {
  quiver::RedisStoreOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = port;
  o.ns = kNs;
  quiver::Result<std::unique_ptr<quiver::RedisStore>> store = quiver::RedisStore::create(o);
  if (!store.ok()) bench::fail(store.error().message);
  return std::move(store).value();
}

struct Row {
  int64_t members = 0;
  int64_t keys = 0;
  double load_s = 0;
  double copy_s = 0;
  double redis_cpu_s = 0;
  quiver::LayoutCopyStats copy;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = bench::parse_args(argc, argv,
                                                              {{"--redis-server", "redis-server"},
                                                               {"--g", "50"},
                                                               {"--size", "20000"},
                                                               {"--members", "1000,10000,100000"}});
  const int g = std::atoi(args["--g"].c_str());
  const std::size_t size = static_cast<std::size_t>(std::atoll(args["--size"].c_str()));
  const std::vector<int64_t> sizes = bench::parse_int_list(args["--members"].c_str());
  if (g < 2 || size < 100 || sizes.empty()) bench::fail("bad arguments");

  std::vector<Row> rows;
  for (int64_t n : sizes) {
    bench::RedisServerProcess server =
        bench::start_redis_server(args["--redis-server"], "/tmp", "migrate-layout");
    redisContext* c = redisConnect("127.0.0.1", server.port);
    if (c == nullptr || c->err != 0) bench::fail("connect failed");
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const quiver::RedisKeys keys = *quiver::RedisKeys::create(kNs);
    const quiver::Principal reader = *quiver::Principal::member("reader");

    Row row;
    row.members = n;
    const auto loading = Clock::now();
    const std::size_t chars = bench::seed_reader_with_team(c, keys, reader, kTeam, g, size, now);
    bench::grant_members(c, keys, kTeam, 0, n - 1,
                         bench::record_fields(c, *keys.manifest(kTeam, reader)));
    row.load_s = std::chrono::duration<double>(Clock::now() - loading).count();
    row.keys = std::atoll(bench::command(c, {"DBSIZE"}).c_str());

    std::unique_ptr<quiver::RedisStore> store = open_store(server.port);
    quiver::LayoutMigrationOptions o;
    o.settle_ms = 0;
    const bench::RedisInfo before = bench::read_info(c);
    const auto start = Clock::now();
    quiver::Result<quiver::LayoutMigration> migrated = store->migrate_layout_to_v2(o);
    row.copy_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!migrated.ok()) bench::fail("migrate_layout_to_v2: " + migrated.error().message);
    const bench::RedisInfo after = bench::read_info(c);
    row.redis_cpu_s = (after.cpu_us - before.cpu_us) / 1e6;
    row.copy = migrated->copy;

    // The reader, read in v2 by a store opened after the switch: every manifest there.
    std::unique_ptr<quiver::RedisStore> v2 = open_store(server.port);
    quiver::Result<quiver::DiscoverySnapshot> s = v2->read_discovery(reader, {});
    if (!s.ok()) bench::fail("the v2 read failed: " + s.error().message);
    std::size_t read_chars = 0;
    for (const quiver::GrantedConnection& gc : s->connections) {
      if (gc.manifest) read_chars += gc.manifest->text.size();
    }
    if (read_chars != chars) bench::fail("the v2 read lacks manifests");
    std::fprintf(stderr, "%lld members: %lld keys loaded in %.1f s, copied in %.1f s\n",
                 static_cast<long long>(n), static_cast<long long>(row.keys), row.load_s,
                 row.copy_s);
    rows.push_back(row);
    redisFree(c);
    server.stop();
  }

  std::printf(
      "## migrate-layout v2: the writes' pause as the namespace grows: G = %d (%d shared + 1 "
      "per_member), manifests of about %zu bytes, one redis-server\n\n",
      g, g - 1, size);
  std::printf(
      "| members | keys (v1) | copy (s) = pause less --settle | keys per s | Redis CPU (s) | keys "
      "restored | grant sets converted |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& r : rows) {
    std::printf("| %lld | %lld | %.2f | %.0f | %.2f | %lld | %lld |\n",
                static_cast<long long>(r.members), static_cast<long long>(r.keys), r.copy_s,
                r.keys / r.copy_s, r.redis_cpu_s, static_cast<long long>(r.copy.keys_restored),
                static_cast<long long>(r.copy.grants_converted));
  }
  return 0;
}
