// Benchmark (not a test): the Redis time of one maintenance pass over a namespace of N manifest
// records of which D are due, before (the walk the pass made until the refresh-due index: a SCAN
// of the whole namespace for removed connections' keys, then list_manifest_metas over every
// record) and after (list_due: the due index's entries that are due, with their metadata), side
// by side on one redis-server, the same data.
//
//   maintenance_due [--redis-server redis-server] [--n 100000] [--due 100] [--batch 20]
//                   [--runs 3] [--dir /tmp]
//
// The records are what the commit script writes (metadata fields, the body apart under its
// SHA-256, an entry in `due`), loaded with pipelined HSET/ZADD: N/100 per-member connections of
// 100 members each. D of them were fetched long ago (stale: due); the rest are fresh and due
// later. Per pass: the client's wall time, and Redis' own work from INFO before and after
// (commandstats: calls and usec of the leaf commands, EVAL*/EXEC/MULTI left out; cpu:
// used_cpu_user + used_cpu_sys). Both passes only read (the queueing of the due records is the
// same either way and not measured). The median of --runs passes each. The server is stopped and
// its directory deleted at the end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "shared/discovery_redis.h"
#include "shared/redis_keys.h"
#include "shared/sha256.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "maintenance_due: %s\n", why.c_str());
  std::exit(1);
}

struct Pass {
  double wall_ms = 0;
  double redis_us = 0;  // commandstats usec of leaf commands
  double cpu_us = 0;    // used_cpu_user + used_cpu_sys
  int64_t calls = 0;
  int64_t scans = 0;
  std::size_t seen = 0;  // records (before) or due entries (after) read
  std::size_t due = 0;   // of them stale (what the pass would queue)
};

Pass measure(redisContext* c, const std::function<std::pair<std::size_t, std::size_t>()>& pass) {
  const bench::RedisInfo before = bench::read_info(c);
  const auto t0 = Clock::now();
  auto [seen, due] = pass();
  Pass out;
  out.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const bench::RedisInfo after = bench::read_info(c);
  for (const auto& [name, v] : after.commands) {
    if (name == "info") continue;
    const int64_t dc = v.calls - before.command(name).calls;
    const int64_t du = v.usec - before.command(name).usec;
    out.calls += dc;
    if (name == "scan") out.scans += dc;
    if (name != "evalsha" && name != "eval" && name != "exec" && name != "multi") {
      out.redis_us += static_cast<double>(du);
    }
  }
  out.cpu_us = after.cpu_us - before.cpu_us;
  out.seen = seen;
  out.due = due;
  return out;
}

Pass median(std::vector<Pass> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Pass& a, const Pass& b) { return a.redis_us < b.redis_us; });
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string redis_server = "redis-server", dir = "/tmp";
  int64_t n = 100'000, due = 100;
  std::size_t batch = 20;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--redis-server")
      redis_server = value;
    else if (flag == "--n")
      n = std::atoll(value.c_str());
    else if (flag == "--due")
      due = std::atoll(value.c_str());
    else if (flag == "--batch")
      batch = static_cast<std::size_t>(std::atoll(value.c_str()));
    else if (flag == "--runs")
      runs = std::atoi(value.c_str());
    else if (flag == "--dir")
      dir = value;
    else
      die("unknown flag " + flag);
  }
  if (n < 100 || due < 0 || due > n || batch == 0 || runs < 1) die("bad arguments");

  bench::RedisServerProcess server = bench::start_redis_server(redis_server, dir, "due-bench");
  redisContext* c = redisConnect("127.0.0.1", server.port);
  if (c == nullptr || c->err != 0) die("cannot connect");
  const quiver::RedisKeys keys = *quiver::RedisKeys::create("bench");
  const std::string body = R"({"tools":[{"name":"search"}]})";
  const std::string digest = quiver::manifest_body_digest(body);
  const int64_t now = 1'780'000'000'000;
  const int64_t members = 100, connections = n / members;
  auto t0 = Clock::now();
  bench::append_argv(c, {"SET", *keys.body(digest), body});
  int64_t pending = 1;
  auto flush = [&] {
    for (; pending > 0; --pending) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK) die("load failed");
      freeReplyObject(r);
    }
  };
  for (int64_t k = 0; k < connections; ++k) {
    const std::string cid = "c" + std::to_string(k);
    bench::append_argv(c, {"HSET", *keys.conn(cid), "config_hash", "h", "credential_mode",
                           "per_member", "name", cid, "transport", "http", "updated_at", "1"});
    bench::append_argv(c, {"SADD", keys.conns(), cid});
    pending += 2;
    for (int64_t m = 0; m < members; ++m) {
      const int64_t i = k * members + m;
      const quiver::Principal p = *quiver::Principal::member("m" + std::to_string(m));
      // Spread over the namespace: every (n/due)-th record is stale, fetched 20 min ago.
      const bool stale = due > 0 && i % (n / due) == 0 && i / (n / due) < due;
      const int64_t fetched = stale ? now - 1'200'000 : now - 60'000;
      bench::append_argv(c, {"HSET",        *keys.manifest(cid, p),
                             "body",        digest,
                             "etag",        "\"e\"",
                             "config_hash", "h",
                             "fence",       "1",
                             "fetched_at",  std::to_string(fetched),
                             "fresh_until", std::to_string(fetched + 900'000),
                             "expires_at",  std::to_string(fetched + 86'400'000),
                             "truncated",   "0",
                             "attempt_at",  std::to_string(fetched)});
      bench::append_argv(
          c, {"ZADD", keys.due(), std::to_string(fetched + 720'000), *quiver::due_member(cid, p)});
      pending += 2;
      if (pending > 10'000) flush();
    }
  }
  flush();
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();

  quiver::RedisStoreOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = server.port;
  o.ns = "bench";
  auto created = quiver::RedisStore::create(o);
  if (!created.ok()) die(created.error().message);
  quiver::RedisStore& store = **created;
  quiver::FreshnessPolicy policy;
  auto stale = [&](const quiver::ManifestMeta& m) {
    return quiver::decide_refresh(quiver::cache_entry_meta(m), policy, "h", now).refresh;
  };
  // Before: the pass's two walks (the sweep's SCAN of every key, then every record's metadata).
  auto before_pass = [&]() -> std::pair<std::size_t, std::size_t> {
    std::string cursor = "0";
    std::size_t keys_seen = 0;
    do {
      redisReply* r = bench::command_argv(
          c, {"SCAN", cursor, "MATCH", keys.namespace_match_pattern(), "COUNT", "1000"});
      if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) die("SCAN failed");
      cursor.assign(r->element[0]->str, r->element[0]->len);
      keys_seen += r->element[1]->elements;
      freeReplyObject(r);
    } while (cursor != "0");
    std::size_t seen = 0, stale_seen = 0;
    std::string page_cursor;
    do {
      auto page = store.list_manifest_metas(page_cursor, batch);
      if (!page.ok()) die(page.error().message);
      for (const quiver::ManifestMeta& m : page->metas) {
        ++seen;
        if (stale(m)) ++stale_seen;
      }
      page_cursor = page->next_cursor;
    } while (!page_cursor.empty());
    (void)keys_seen;
    return {seen, stale_seen};
  };
  // After: what is due, page by page (a stale entry stays due: the next page starts past it).
  auto after_pass = [&]() -> std::pair<std::size_t, std::size_t> {
    std::size_t seen = 0, stale_seen = 0, offset = 0;
    for (;;) {
      auto page = store.list_due(now, offset, batch);
      if (!page.ok()) die(page.error().message);
      for (const quiver::DueEntry& e : page->entries) {
        ++seen;
        if (e.meta && stale(*e.meta)) ++stale_seen;
        ++offset;
      }
      if (page->listed < batch) break;
    }
    return {seen, stale_seen};
  };
  (void)before_pass();  // warm: connection, script cache, page cache
  (void)after_pass();
  std::vector<Pass> before, after;
  for (int r = 0; r < runs; ++r) {
    before.push_back(measure(c, before_pass));
    after.push_back(measure(c, after_pass));
  }
  const Pass b = median(before), a = median(after);
  std::printf(
      "N = %lld records (%lld connections x %lld members), %lld due, batch %zu; load %.1f s "
      "(%s)\n\n",
      static_cast<long long>(n), static_cast<long long>(connections),
      static_cast<long long>(members), static_cast<long long>(due), batch, load_s,
      bench::read_info(c).used_memory_human.c_str());
  std::printf(
      "| maintenance pass | records read | of them due | Redis commands | SCANs | Redis time "
      "(commandstats, leaf) | Redis CPU | client wall time |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [name, p] : {std::pair<const char*, const Pass&>{"before: SCAN walks", b},
                                {"after: refresh-due index", a}}) {
    std::printf("| %s | %zu | %zu | %lld | %lld | %.1f ms | %.1f ms | %.1f ms |\n", name, p.seen,
                p.due, static_cast<long long>(p.calls), static_cast<long long>(p.scans),
                p.redis_us / 1000, p.cpu_us / 1000, p.wall_ms);
  }
  std::printf("\nratio before/after: Redis time %.0fx, Redis CPU %.0fx, client wall time %.0fx\n",
              b.redis_us / std::max(a.redis_us, 1.0), b.cpu_us / std::max(a.cpu_us, 1.0),
              b.wall_ms / std::max(a.wall_ms, 0.001));
  redisFree(c);
  server.stop();
  return 0;
}
