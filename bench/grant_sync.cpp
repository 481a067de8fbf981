// Benchmark (not a test): what a config sync of the grants (RedisStore::sync_grants) costs as the
// namespace grows, with nothing, one member or every member changed. Built against the tree it is
// in, so running it on two checkouts compares two implementations side by side.
//
//   grant_sync [--redis-server redis-server] [--n 10000,100000] [--filler 10] [--dir /tmp]
//
// Per N: a redis-server of its own on 127.0.0.1 (no persistence), N members with 3 grants each
// out of 50 connections written by a first sync, plus `--filler` other keys per member (STRINGs
// the namespace holds besides grants: manifests, leases, ...; a SCAN walks them, nothing else
// reads them). Then three syncs through RedisStore: the same map (0 changed), one member changed,
// every member changed. Per sync: the client's wall time, Redis calls (INFO commandstats, INFO
// itself left out), the transactions (EXEC calls) and the mean Redis time of one EXEC (the longest
// the node runs one client's commands in a row: every other client of the namespace's node waits
// meanwhile), and Redis CPU (used_cpu_user + used_cpu_sys). The server is stopped and its
// directory deleted at the end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "shared/redis_keys.h"

namespace {

using quiver::GrantMap;
using Clock = std::chrono::steady_clock;

constexpr int kConnections = 50;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "grant_sync: %s\n", why.c_str());
  std::exit(1);
}

std::string member_id(int64_t i) { return "m" + std::to_string(i); }
std::string cid(int64_t k) { return "c" + std::to_string(k % kConnections); }

// Three connections per member; `round` moves the third, so every member differs between rounds.
std::set<std::string> grants_of(int64_t i, int round) {
  return {cid(i), cid(i + 17), cid(i + 31 + round)};
}

GrantMap grant_map(int64_t n, int round) {
  GrantMap out;
  for (int64_t i = 0; i < n; ++i) out.emplace(member_id(i), grants_of(i, round));
  return out;
}

void load_filler(redisContext* c, const quiver::RedisKeys& keys, int64_t n, int per_member) {
  int64_t pending = 0;
  auto drain = [&]() {
    for (; pending > 0; --pending) {
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK) die("load: connection lost");
      freeReplyObject(reply);
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const quiver::Principal p = *quiver::Principal::member(member_id(i));
    for (int j = 0; j < per_member; ++j) {
      bench::append_argv(c, {"SET", *keys.lease(cid(i + j), p), "x"});
      if (++pending == 10000) drain();
    }
  }
  drain();
}

struct Measure {
  double ms = 0;
  int64_t calls = 0;
  int64_t execs = 0;
  double exec_mean_us = 0;
  double cpu_ms = 0;
  std::size_t changed = 0;
};

Measure measure(redisContext* c, quiver::RedisStore& store, const GrantMap& grants) {
  const bench::RedisInfo before = bench::read_info(c);
  auto t0 = Clock::now();
  quiver::Result<quiver::GrantSync> r = store.sync_grants(grants);
  Measure m;
  m.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!r.ok()) die("sync_grants: " + r.error().message);
  const bench::RedisInfo after = bench::read_info(c);
  m.changed = r->changed_members.size();
  for (const auto& [name, v] : after.commands) {
    if (name == "info") continue;
    m.calls += v.calls - before.command(name).calls;
  }
  m.execs = after.command("exec").calls - before.command("exec").calls;
  const int64_t exec_us = after.command("exec").usec - before.command("exec").usec;
  m.exec_mean_us = m.execs > 0 ? static_cast<double>(exec_us) / m.execs : 0;
  m.cpu_ms = (after.cpu_us - before.cpu_us) / 1000.0;
  return m;
}

void print_row(int64_t n, const char* what, const Measure& m) {
  std::printf("| %lld | %s | %zu | %.1f | %lld | %lld | %.0f | %.1f |\n", static_cast<long long>(n),
              what, m.changed, m.ms, static_cast<long long>(m.calls),
              static_cast<long long>(m.execs), m.exec_mean_us, m.cpu_ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "redis-server", dir = "/tmp";
  std::vector<int64_t> ns = {10000, 100000};
  int filler = 10;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die(std::string(argv[i]) + " needs a value");
      return argv[++i];
    };
    if (std::strcmp(argv[i], "--redis-server") == 0) {
      binary = next();
    } else if (std::strcmp(argv[i], "--n") == 0) {
      ns = bench::parse_int_list(next());
    } else if (std::strcmp(argv[i], "--filler") == 0) {
      filler = std::atoi(next());
    } else if (std::strcmp(argv[i], "--dir") == 0) {
      dir = next();
    } else {
      die(std::string("unknown argument ") + argv[i]);
    }
  }
  if (filler < 0) die("--filler must be at least 0");
  std::printf(
      "| N members | sync | members changed | ms (client) | Redis calls | transactions (EXEC) | "
      "Redis µs per EXEC (mean) | Redis CPU ms |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int64_t n : ns) {
    bench::RedisServerProcess server = bench::start_redis_server(binary, dir, "grant-sync-bench");
    redisContext* c = redisConnect("127.0.0.1", server.port);
    if (c == nullptr || c->err != 0) die("cannot connect to the benchmark's redis-server");
    auto keys = quiver::RedisKeys::create("bench");
    load_filler(c, *keys, n, filler);
    quiver::RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = server.port;
    o.ns = "bench";
    auto store = quiver::RedisStore::create(o);
    if (!store.ok()) die(store.error().message);
    GrantMap grants = grant_map(n, 0);
    print_row(n, "first (all added)", measure(c, **store, grants));
    print_row(n, "nothing changed", measure(c, **store, grants));
    grants[member_id(n / 2)] = grants_of(n / 2, 1);
    print_row(n, "1 member changed", measure(c, **store, grants));
    print_row(n, "every member changed", measure(c, **store, grant_map(n, 2)));
    store->reset();
    redisFree(c);
    server.stop();
  }
  return 0;
}
