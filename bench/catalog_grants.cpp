// Benchmark (not a test): what one per-member grant change through the admin API costs as the
// namespace grows: N members already stored (catalog member and grant entries, the readers'
// grants sets and the grantees sets), then K grant changes, each what the API does per change —
// catalog_write (the grant entry, kAlways), set_member_grants, append_audit — through the store.
//
//   catalog_grants [--redis-server redis-server] [--n 1000,100000,1000000] [--k 2000]
//                  [--sqlite] [--sqlite-n 1000,1000000] [--dir /tmp]
//
// Redis: a redis-server of its own on 127.0.0.1 (no persistence), loaded with pipelined commands
// (hiredis), measured through RedisStore; per change: the client's wall time, and Redis' own work
// from INFO before and after (commandstats: calls and usec; cpu: used_cpu_user + used_cpu_sys).
// commandstats counts a command run by a script or inside MULTI/EXEC once more under EVALSHA/EXEC,
// whose usec also include theirs: "leaf" sums leave EVAL*, EXEC and MULTI out. The server is shut
// down and its directory deleted at the end. SQLite (--sqlite): the same load in one transaction
// into a SqliteStore file, then the same K changes; the file is deleted.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>
#include <sqlite3.h>
#include <unistd.h>

#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "native-agent/store/sqlite_store.h"
#include "shared/redis_keys.h"

namespace {

using quiver::AuditEntry;
using quiver::CatalogEntry;
using quiver::CatalogKind;
using quiver::CatalogWriteMode;
using quiver::Json;
using quiver::ManifestStore;
using Clock = std::chrono::steady_clock;

constexpr int kConnections = 50;  // connection ids c00..c49
constexpr int kGrantsPerMember = 3;

std::string member_id(int64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "m%07lld", static_cast<long long>(i));
  return buf;
}
std::string cid(int k) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "c%02d", k % kConnections);
  return buf;
}
// Member i's grants before the run: three connections from i.
std::set<std::string> grants_of(int64_t i) {
  std::set<std::string> out;
  for (int g = 0; g < kGrantsPerMember; ++g) out.insert(cid(static_cast<int>(i + g * 7)));
  return out;
}
Json grant_value(const std::set<std::string>& cids) {
  return Json{{"connections", Json(std::vector<std::string>(cids.begin(), cids.end()))}};
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "catalog_grants: %s\n", why.c_str());
  std::exit(1);
}

redisReply* command(redisContext* c, const std::vector<std::string>& argv) {
  redisReply* r = bench::command_argv(c, argv);
  if (r == nullptr) die("redis command failed");
  return r;
}

// Pipelined loading: appended, replies read every `batch` commands.
class Pipeline {
 public:
  explicit Pipeline(redisContext* c) : c_(c) {}
  ~Pipeline() { flush(); }
  void add(const std::vector<std::string>& argv) {
    bench::append_argv(c_, argv);
    if (++pending_ == 2000) flush();
  }
  void flush() {
    for (; pending_ > 0; --pending_) {
      void* r = nullptr;
      if (redisGetReply(c_, &r) != REDIS_OK) die("pipeline reply failed");
      auto* reply = static_cast<redisReply*>(r);
      if (reply->type == REDIS_REPLY_ERROR) die(std::string("load: ") + reply->str);
      freeReplyObject(reply);
    }
  }

 private:
  redisContext* c_;
  int pending_ = 0;
};

// The entry JSON as RedisStore writes it (schema/redis-keys.md, catalog:<kind>).
std::string entry_json(const Json& value, int64_t rev) {
  return R"({"by":"file:/etc/quiver.json","file_hash":"","origin":"file","rev_ms":)" +
         std::to_string(rev) + R"(,"updated_at":)" + std::to_string(rev) + R"(,"value":)" +
         value.dump() + "}";
}

void load_redis(redisContext* c, const quiver::RedisKeys& keys, int64_t from, int64_t to) {
  Pipeline p(c);
  const std::string members = *keys.catalog("member"), member_keys = *keys.catalog_keys("member");
  const std::string grants = *keys.catalog("grant"), grant_keys = *keys.catalog_keys("grant");
  for (int64_t i = from; i < to; ++i) {
    const std::string id = member_id(i);
    const std::set<std::string> g = grants_of(i);
    p.add({"HSET", members, id, entry_json(Json{{"operator", false}}, 1)});
    p.add({"ZADD", member_keys, "0", id});
    p.add({"HSET", grants, id, entry_json(grant_value(g), 1)});
    p.add({"ZADD", grant_keys, "0", id});
    std::vector<std::string> sadd = {"SADD", *keys.grants(*quiver::Principal::member(id))};
    sadd.insert(sadd.end(), g.begin(), g.end());
    p.add(sadd);
    for (const std::string& k : g) p.add({"SADD", *keys.grantees(k), "member/" + id});
  }
}

struct Change {
  std::string member;
  std::set<std::string> cids;
};

// K changes spread over the members: member j*N/K, one of its grants moved to another connection.
std::vector<Change> changes(int64_t n, int k) {
  std::vector<Change> out;
  for (int j = 0; j < k; ++j) {
    int64_t i = (static_cast<int64_t>(j) * n) / k;
    std::set<std::string> g = grants_of(i);
    g.erase(g.begin());
    // Two changes of one member (N < K) differ from each other and from the loaded state.
    g.insert(cid(static_cast<int>(i + 1 + (j % 2) * 3)));
    out.push_back({member_id(i), g});
  }
  return out;
}

// What the admin API does for one grant change.
void apply(ManifestStore& store, const Change& ch, int64_t rev) {
  CatalogEntry e;
  e.kind = CatalogKind::kGrant;
  e.key = ch.member;
  e.value = grant_value(ch.cids);
  e.meta.origin = quiver::kCatalogOriginApi;
  e.meta.rev_ms = rev;
  e.meta.by = "operator:root";
  auto w = store.catalog_write(e, CatalogWriteMode::kAlways);
  if (!w.ok() || !w->applied) die("catalog_write: " + (w.ok() ? "not applied" : w.error().message));
  auto g = store.set_member_grants(ch.member, ch.cids);
  if (!g.ok()) die("set_member_grants: " + g.error().message);
  AuditEntry a;
  a.actor = "operator:root";
  a.action = "grants.put";
  a.target = ch.member;
  a.detail = Json{{"connections", *e.value}};
  if (auto s = store.append_audit(a); !s.ok()) die("append_audit: " + s.error().message);
}

void run_redis(const std::string& binary, const std::string& dir, const std::vector<int64_t>& ns,
               int k) {
  std::printf(
      "| N members | µs per change (client) | Redis calls per change | Redis µs per change "
      "(commandstats, leaf) | Redis CPU µs per change | load time |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  double first_us = 0, first_cpu = 0;
  for (int64_t n : ns) {
    bench::RedisServerProcess server = bench::start_redis_server(binary, dir, "catalog-bench");
    redisContext* c = redisConnect("127.0.0.1", server.port);
    auto keys = quiver::RedisKeys::create("bench");
    auto t0 = Clock::now();
    load_redis(c, *keys, 0, n);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    quiver::RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = server.port;
    o.ns = "bench";
    auto store = quiver::RedisStore::create(o);
    if (!store.ok()) die(store.error().message);
    std::vector<Change> chs = changes(n, k);
    apply(**store, {member_id(0), {"c49"}}, 2);  // warm: connection, script cache
    const bench::RedisInfo before = bench::read_info(c);
    auto t1 = Clock::now();
    for (int j = 0; j < k; ++j) apply(**store, chs[j], 3 + j);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t1).count() / k;
    const bench::RedisInfo after = bench::read_info(c);
    int64_t calls = 0, leaf_usec = 0;
    std::string breakdown;
    for (const auto& [name, v] : after.commands) {
      if (name == "info") continue;
      const int64_t dc = v.calls - before.command(name).calls;
      const int64_t du = v.usec - before.command(name).usec;
      if (dc == 0) continue;
      calls += dc;
      if (name != "evalsha" && name != "eval" && name != "exec" && name != "multi") leaf_usec += du;
      char part[96];
      std::snprintf(part, sizeof part, "%s%s %.2f", breakdown.empty() ? "" : ", ", name.c_str(),
                    static_cast<double>(dc) / k);
      breakdown += part;
    }
    const double cpu = (after.cpu_us - before.cpu_us) / static_cast<double>(k);
    if (first_us == 0) {
      first_us = us;
      first_cpu = cpu;
    }
    const std::string used = bench::read_info(c).used_memory_human;
    std::printf("| %lld | %.1f | %.2f | %.1f | %.1f | %.1f s (%s) |\n", static_cast<long long>(n),
                us, static_cast<double>(calls) / k, static_cast<double>(leaf_usec) / k, cpu, load_s,
                used.c_str());
    std::printf("  per change: %s\n", breakdown.c_str());
    std::printf("  ratio to the first N: client %.2f, Redis CPU %.2f\n", us / first_us,
                cpu / first_cpu);
    std::fflush(stdout);
    store->reset();
    redisFree(c);
    server.stop();
  }
}

void run_sqlite(const std::string& dir, const std::vector<int64_t>& ns, int k) {
  std::printf("\n| N members (SQLite) | µs per change | load time |\n| --- | --- | --- |\n");
  double first = 0;
  for (int64_t n : ns) {
    const std::string path = dir + "/catalog-bench-" + std::to_string(getpid()) + ".db";
    quiver::SqliteStoreOptions o;
    o.path = path;
    auto t0 = Clock::now();
    {
      auto store = quiver::SqliteStore::open(o);  // creates the schema
      if (!store.ok()) die(store.error().message);
    }
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) die("sqlite open");
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    sqlite3_stmt *cat = nullptr, *grant = nullptr;
    sqlite3_prepare_v2(db,
                       "INSERT INTO catalog (kind, key, value, origin, rev_ms, file_hash, "
                       "changed_by, updated_at) VALUES (?1, ?2, ?3, 'file', 1, '', 'file:/q', 1)",
                       -1, &cat, nullptr);
    sqlite3_prepare_v2(db, "INSERT INTO grants (principal, connection_id) VALUES (?1, ?2)", -1,
                       &grant, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      const std::string id = member_id(i);
      const std::set<std::string> g = grants_of(i);
      const std::string member_value = R"({"operator":false})", grant_v = grant_value(g).dump();
      for (auto [kind, value] :
           {std::pair<const char*, const std::string*>{"member", &member_value},
            {"grant", &grant_v}}) {
        sqlite3_bind_text(cat, 1, kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(cat, 2, id.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(cat, 3, value->c_str(), -1, SQLITE_TRANSIENT);
        if (sqlite3_step(cat) != SQLITE_DONE) die(sqlite3_errmsg(db));
        sqlite3_reset(cat);
      }
      const std::string principal = "member/" + id;
      for (const std::string& c : g) {
        sqlite3_bind_text(grant, 1, principal.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(grant, 2, c.c_str(), -1, SQLITE_TRANSIENT);
        if (sqlite3_step(grant) != SQLITE_DONE) die(sqlite3_errmsg(db));
        sqlite3_reset(grant);
      }
    }
    sqlite3_finalize(cat);
    sqlite3_finalize(grant);
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    auto store = quiver::SqliteStore::open(o);
    if (!store.ok()) die(store.error().message);
    std::vector<Change> chs = changes(n, k);
    apply(**store, {member_id(0), {"c49"}}, 2);
    auto t1 = Clock::now();
    for (int j = 0; j < k; ++j) apply(**store, chs[j], 3 + j);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t1).count() / k;
    if (first == 0) first = us;
    std::printf("| %lld | %.1f | %.1f s |\n", static_cast<long long>(n), us, load_s);
    std::printf("  ratio to the first N: %.2f\n", us / first);
    std::fflush(stdout);
    store->reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "redis-server", dir = "/tmp";
  std::vector<int64_t> ns = {1000, 100000, 1000000}, sqlite_ns = {1000, 1000000};
  int k = 2000;
  bool sqlite = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die(std::string(argv[i]) + " needs a value");
      return argv[++i];
    };
    if (std::strcmp(argv[i], "--redis-server") == 0) {
      binary = next();
    } else if (std::strcmp(argv[i], "--n") == 0) {
      ns = bench::parse_int_list(next());
    } else if (std::strcmp(argv[i], "--k") == 0) {
      k = std::atoi(next());
    } else if (std::strcmp(argv[i], "--sqlite") == 0) {
      sqlite = true;
    } else if (std::strcmp(argv[i], "--sqlite-n") == 0) {
      sqlite_ns = bench::parse_int_list(next());
    } else if (std::strcmp(argv[i], "--dir") == 0) {
      dir = next();
    } else {
      die(std::string("unknown argument ") + argv[i]);
    }
  }
  if (k < 1) die("--k must be at least 1");
  run_redis(binary, dir, ns, k);
  if (sqlite) run_sqlite(dir, sqlite_ns, k);
  return 0;
}
