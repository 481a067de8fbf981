// The agent's discovery read measured: K reads of one member through RedisStore::read_discovery
// (what the agent's discovery API reads before rendering), on one redis-server or a cluster, the
// servers' counters read through a caller's function (one server's INFO, or a cluster's masters'
// added up). Shared by bench/bodies.cpp and bench/capacity.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "bench/bench_manifests.h"
#include "bench/bench_redis_server.h"
#include "native-agent/store/redis_store.h"
#include "shared/principal.h"

namespace bench {

struct AgentReadRow {
  std::string name;
  double redis_us = 0;  // top-level commandstats usec per read
  double cpu_us = 0;    // used_cpu_user + used_cpu_sys per read
  double bytes_in = 0;  // total_net_output_bytes per read (INFO's own replies: a few bytes a read)
  double mgets = 0;
  double wall_us = 0;
};

// K reads of `reader` through a RedisStore made from `options` (its body cache as they say: 0 is
// off); each read must return manifests of `expect_chars` characters in all, or the benchmark
// ends (status 1). One read first, unmeasured: connected, the script loaded, the cache warm.
inline AgentReadRow measure_agent_read(const std::string& name,
                                       const std::function<RedisInfo()>& info,
                                       quiver::RedisStoreOptions options,
                                       const quiver::Principal& reader, int k,
                                       std::size_t expect_chars) {
  quiver::Result<std::unique_ptr<quiver::RedisStore>> store =
      quiver::RedisStore::create(std::move(options));
  if (!store.ok()) fail(store.error().message);
  auto read = [&] {
    quiver::Result<quiver::DiscoverySnapshot> s = (*store)->read_discovery(reader, {});
    if (!s.ok()) fail("the agent's read failed: " + s.error().message);
    std::size_t chars = 0;
    for (const quiver::GrantedConnection& g : s->connections) {
      if (g.manifest) chars += g.manifest->text.size();
    }
    if (chars != expect_chars) fail("the agent's read lacks manifests");
  };
  read();
  const RedisInfo before = info();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < k; ++i) read();
  const double wall =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const RedisInfo after = info();
  AgentReadRow row;
  row.name = name;
  row.redis_us = discovery_read_usec(before, after) / k;
  row.cpu_us = (after.cpu_us - before.cpu_us) / k;
  row.bytes_in = (after.net_output_bytes - before.net_output_bytes) / k;
  row.mgets = static_cast<double>(after.command("mget").calls - before.command("mget").calls) / k;
  row.wall_us = wall / k;
  return row;
}

}  // namespace bench
