// A namespace in both key layouts, for the edge's v2 suite (tests/edge/layout_v2.mjs): the real
// agent store (RedisStore) writes it in layout v1 on one redis-server, then copy_namespace_to_v2
// (native-agent/store/layout_copy.h) copies it into a Redis Cluster through the agent's node pool,
// and the migration's switch sets the layout record there to `v2:ready:<now>`.
//
//   quiver_layout_v2_fixture --single PORT --cluster PORT --ns NS --now MS [--password PW]
//
// Writes 12 connections (every fourth per-member, the rest shared), members m0..m3 granted 6
// each, a listing for every shared connection and every granted (per-member connection, member),
// and one per-member connection of m3 left without a listing (a miss). Prints one JSON line:
// {"members":["m0",...],"copied":<keys restored>}. Exit status 0, or 1 with the reason on stderr.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "native-agent/store/layout_copy.h"
#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

constexpr int kConnections = 12;
constexpr int kMembers = 4;

int fail(const std::string& why) {
  std::cerr << "layout_v2_fixture: " << why << "\n";
  return 1;
}

std::string cid_of(int i) { return "conn-" + std::to_string(i); }
bool per_member(int i) { return i % 4 == 0; }

int run(const std::map<std::string, std::string>& args) {
  for (const char* need : {"--single", "--cluster", "--ns", "--now"}) {
    if (args.count(need) == 0) return fail(std::string("missing ") + need);
  }
  const std::string ns = args.at("--ns");
  const int64_t now = std::stoll(args.at("--now"));
  const auto pw = args.find("--password");
  const std::string password = pw == args.end() ? "" : pw->second;

  // The v1 namespace, written by the real store.
  RedisStoreOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = std::stoi(args.at("--single"));
  if (!password.empty()) o.redis.password = Secret(password);
  o.ns = ns;
  Result<std::unique_ptr<RedisStore>> store = RedisStore::create(o);
  if (!store.ok()) return fail(store.error().message);
  RedisStore& s = **store;
  if (auto b = s.begin_namespace_restore(now); !b.ok()) return fail(b.error().message);
  std::vector<ConnectionRecord> records;
  for (int i = 0; i < kConnections; ++i) {
    records.push_back(testing::stdio_record(
        cid_of(i), per_member(i) ? CredentialMode::kPerMember : CredentialMode::kShared, now));
  }
  if (auto r = s.sync_connections(records); !r.ok()) return fail(r.error().message);
  GrantMap grants;
  for (int m = 0; m < kMembers; ++m) {
    for (int g = 0; g < 6; ++g) grants["m" + std::to_string(m)].insert(cid_of((m * 3 + g) % 12));
  }
  if (auto r = s.sync_grants(grants); !r.ok()) return fail(r.error().message);
  auto commit = [&](const std::string& cid, const Principal& p) -> Status {
    Result<AcquireResult> lease = s.acquire_lease(cid, p, std::string(32, 'c'), 60'000);
    if (!lease.ok()) return lease.error();
    if (!lease->acquired) return Error(ErrorCode::kInternal, "lease not acquired: " + cid);
    Result<FencedWriteResult> w = s.commit_manifest(
        cid, p, lease->lease, testing::listing_write(cid, now), FencedWriteOptions{true});
    if (!w.ok()) return w.error();
    if (!w->ok()) return Error(ErrorCode::kInternal, "commit refused: " + cid);
    return Status();
  };
  for (int i = 0; i < kConnections; ++i) {
    if (per_member(i)) continue;
    if (Status c = commit(cid_of(i), Principal::shared()); !c.ok()) return fail(c.error().message);
  }
  for (const auto& [id, cids] : grants) {
    for (const std::string& cid : cids) {
      if (!per_member(std::stoi(cid.substr(5)))) continue;
      if (id == "m3" && cid == cid_of(4)) continue;  // a miss: never listed for m3
      if (Status c = commit(cid, *Principal::member(id)); !c.ok()) return fail(c.error().message);
    }
  }
  if (auto r = s.mark_namespace_ready(now); !r.ok()) return fail(r.error().message);

  // The copy into the cluster, then the switch.
  testing::RedisConnection source(redisConnect("127.0.0.1", o.redis.port));
  if (!source || source->err) return fail("cannot connect to the single node");
  if (!password.empty()) testing::run_argv(source.get(), {"AUTH", password});
  RedisClusterPoolOptions po;
  ClusterNode seed;
  seed.host = "127.0.0.1";
  seed.port = std::stoi(args.at("--cluster"));
  po.seeds.push_back(seed);
  if (!password.empty()) po.password = Secret(password);
  Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(po);
  if (!pool.ok()) return fail(pool.error().message);
  LayoutCopyIo io;
  io.source = [&](const RedisCommand& c) -> Result<RespValue> {
    return testing::run_argv(source.get(), c);
  };
  io.dest = [&](const std::vector<RedisCommand>& cs) {
    std::vector<ClusterRequest> rs;
    for (const RedisCommand& c : cs) rs.push_back({c, false});
    return (*pool)->run_batch(rs);
  };
  const RedisKeys v1 = *RedisKeys::create(ns);
  const RedisKeys v2 = *RedisKeys::create(ns, KeyLayout::kV2);
  Result<LayoutCopyStats> stats = copy_namespace_to_v2(v1, v2, io);
  if (!stats.ok()) return fail(stats.error().message);
  Result<RespValue> ready = (*pool)->run({"SET", v2.layout(), "v2:ready:" + std::to_string(now)});
  if (!ready.ok()) return fail(ready.error().message);

  std::cout << "{\"members\":[";
  for (int m = 0; m < kMembers; ++m) std::cout << (m ? "," : "") << "\"m" << m << "\"";
  std::cout << "],\"copied\":" << stats->keys_restored << "}" << std::endl;
  return 0;
}

}  // namespace
}  // namespace quiver

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  try {
    return quiver::run(args);
  } catch (const std::exception& e) {
    return quiver::fail(e.what());
  }
}
