// Key layout v2 spreads a namespace over a real Redis Cluster (docs/design.md "Key layout v2";
// issue 14's "keys land on every master, none holding more than 2x the mean over 1,000
// connections"). A generated namespace (1,000 connections, some shared and some per-member; 2,000
// members with 10 grants each) is written in full, every key RedisKeys spells for it in v2, with
// the commands its writers use (HSET, SET, SADD, ZADD, XADD), through the agent's node pool
// (native-agent/store/redis_cluster_pool.h) into six real redis-servers (three masters, three
// replicas: tests/support/redis_cluster.h). Then DBSIZE on each master counts what landed there,
// and SCAN with v2's match patterns on each master finds every key back, parsed by RedisKeys.
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "shared/redis_cluster.h"
#include "shared/redis_keys.h"
#include "shared/sha256.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_cluster.h"

namespace quiver {
namespace {

using testing::RedisCluster;
using testing::RedisConnection;
using testing::run_argv;

constexpr int kConnections = 1000;
constexpr int kMembers = 2000;
constexpr int kGrantsPerMember = 10;
constexpr int kBodies = 300;
constexpr int kReplayGuards = 200;
constexpr char kTtlMs[] = "3600000";  // leases, gates, guards: an hour, never reached in the test

std::string must(const Result<std::string>& r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::string();
}

// The namespace's writes, and the distinct keys they make.
struct Writes {
  std::vector<ClusterRequest> commands;
  std::set<std::string> keys;
  std::size_t manifests = 0;

  void add(RedisCommand argv) {
    keys.insert(argv[1]);  // every command here names its one key first
    commands.push_back({std::move(argv), false});
  }
};

std::string conn_id(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "conn-%04d", i);
  return buf;
}

std::string member_id(int i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "user-%04d@example.com", i);
  return buf;
}

bool is_shared_connection(int i) { return i % 5 < 2; }  // 400 shared, 600 per-member

// Every key of the generated namespace in layout v2, with realistic values.
Writes generate(const RedisKeys& k) {
  Writes w;
  const Principal shared = Principal::shared();
  const std::string at = "1765000000000";
  uint64_t x = 0x2545f4914f6cdd1dULL;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  auto body_of = [&](uint64_t n) { return sha256_hex("body-" + std::to_string(n % kBodies)); };
  auto manifest_fields = [&](const std::string& key, const std::string& cid, uint64_t n) {
    w.add({"HSET",        key,
           "body",        body_of(n),
           "etag",        body_of(n).substr(0, 16),
           "config_hash", sha256_hex(cid),
           "fence",       "1",
           "fetched_at",  at,
           "fresh_until", at,
           "expires_at",  at,
           "cache_scope", "",
           "truncated",   "0"});
    ++w.manifests;
  };

  // Grants first: the connections' grantees follow from them.
  std::vector<std::vector<int>> grants(kMembers);
  std::vector<std::vector<int>> grantees(kConnections);
  for (int m = 0; m < kMembers; ++m) {
    std::set<int> chosen;
    while (static_cast<int>(chosen.size()) < kGrantsPerMember) {
      chosen.insert(static_cast<int>(next() % kConnections));
    }
    grants[m].assign(chosen.begin(), chosen.end());
    for (int c : chosen) grantees[c].push_back(m);
  }

  for (int c = 0; c < kConnections; ++c) {
    const std::string cid = conn_id(c);
    const uint32_t shard = *k.connection_shard(cid);
    w.add({"HSET", must(k.conn(cid)), "config_hash", sha256_hex(cid), "credential_mode",
           is_shared_connection(c) ? "shared" : "per_member", "name", cid, "transport", "http",
           "updated_at", at});
    w.add({"INCR", must(k.conn_version(cid))});
    w.add({"SADD", must(k.conns(shard)), cid});
    if (!grantees[c].empty()) {
      RedisCommand sadd = {"SADD", must(k.grantees(cid))};
      for (int m : grantees[c]) sadd.push_back(Principal::member(member_id(m))->str());
      w.add(sadd);
    }
    if (is_shared_connection(c)) {
      manifest_fields(must(k.manifest(cid, shared)), cid, next());
      w.add({"SET", must(k.fence(cid, shared)), "1"});
      w.add({"HSET", must(k.prefs(cid, shared)), "tool:search", "1,0,1,1"});
      w.add({"ZADD", must(k.due(shard)), at, must(due_member(cid, shared))});
      if (c % 3 == 0) w.add({"SADD", must(k.disabled(cid, shared)), "tool:delete"});
      if (c % 4 == 0) w.add({"SET", must(k.invalidated(cid, shared)), at});
      if (c % 7 == 0) {
        w.add({"SET", must(k.lease(cid, shared)), "1:token", "PX", kTtlMs});
        w.add({"SET", must(k.revalidate_gate(cid, shared)), at, "PX", kTtlMs});
      }
    } else if (c % 10 == 1) {
      w.add({"SET", must(k.marked(cid)), at});  // a connection-wide webhook
    }
  }

  for (int m = 0; m < kMembers; ++m) {
    const Principal p = *Principal::member(member_id(m));
    RedisCommand sadd = {"SADD", must(k.grants(p))};
    for (int c : grants[m]) sadd.push_back(conn_id(c));
    w.add(sadd);
    w.add({"INCR", must(k.member_version(p))});
    w.add({"SADD", must(k.grant_members(*k.member_shard(p))), p.str()});
    int n = 0;
    for (int c : grants[m]) {
      if (is_shared_connection(c)) continue;
      const std::string cid = conn_id(c);
      manifest_fields(must(k.manifest(cid, p)), cid, next());
      w.add({"SET", must(k.fence(cid, p)), "1"});
      w.add({"ZADD", must(k.due(*k.connection_shard(cid))), at, must(due_member(cid, p))});
      if (++n % 3 == 0) {
        w.add({"HSET", must(k.prefs(cid, p)), "tool:search", "0,1765000000000,1,1"});
        w.add({"SADD", must(k.disabled(cid, p)), "tool:search"});
      }
      if ((m + c) % 11 == 0) w.add({"SET", must(k.invalidated(cid, p)), at});
      if ((m + c) % 13 == 0) w.add({"SET", must(k.lease(cid, p)), "1:token", "PX", kTtlMs});
      if ((m + c) % 17 == 0) {
        w.add({"SET", must(k.revalidate_gate(cid, p)), at, "PX", kTtlMs});
      }
    }
  }

  for (int b = 0; b < kBodies; ++b) {
    const std::string digest = sha256_hex("body-" + std::to_string(b));
    w.add({"SET", must(k.body(digest)), "{\"tools\":[{\"name\":\"t" + std::to_string(b) + "\"}]}"});
  }
  for (int r = 0; r < kReplayGuards; ++r) {
    w.add({"SET", k.replay("wh:" + std::to_string(r)), "1", "NX", "PX", kTtlMs});
  }
  for (uint32_t s = 0; s < k.shard_count(); ++s) {
    w.add({"XADD", must(k.revalidate_stream(s)), "*", "cid", "conn-0000", "principal", "shared",
           "reason", "stale", "at", at});
    w.add({"XADD", must(k.calls(s)), "*", "rid", std::string(64, 'a'), "cid", "conn-0000", "member",
           member_id(0), "method", "tools/call", "params", "{}", "deadline", at, "at", at});
    w.add({"SET", must(k.call_agents(s)), "agent-1", "PX", kTtlMs});
    w.add({"SADD", must(k.grantees_pending(s)), "conn-0000:member/" + member_id(0)});
  }
  w.add({"SET", k.namespace_record(), "ready:" + at});
  w.add({"HSET", must(k.catalog("member")), member_id(0), "{}"});
  w.add({"XADD", k.audit(), "*", "at", at, "actor", "file:/etc/quiver.yaml", "action", "member.put",
         "target", member_id(0), "detail", "{}"});
  return w;
}

// Every key matching `pattern` on the node at `port` (SCAN to the end).
std::vector<std::string> scan(const RedisCluster& cluster, int port, const std::string& pattern) {
  RedisConnection c(cluster.connect(port));
  EXPECT_NE(c, nullptr);
  std::vector<std::string> out;
  if (c == nullptr) return out;
  std::string cursor = "0";
  do {
    RespValue r = run_argv(c.get(), {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    EXPECT_TRUE(r.is_array() && r.elements.size() == 2) << r.debug_string();
    if (!r.is_array() || r.elements.size() != 2) break;
    cursor = r.elements[0].str;
    for (const RespValue& key : r.elements[1].elements) out.push_back(key.str);
  } while (cursor != "0");
  return out;
}

TEST(RedisLayoutV2Cluster, AThousandConnectionsSpreadOverEveryMaster) {
  RedisCluster cluster;
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  RedisClusterPoolOptions o;
  ClusterNode seed;
  seed.host = "127.0.0.1";
  seed.port = cluster.ports()[0];
  o.seeds.push_back(seed);
  Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(std::move(o));
  ASSERT_TRUE(pool.ok()) << pool.error().message;

  Result<RedisKeys> keys = RedisKeys::create("spread", KeyLayout::kV2, kDefaultShardCount);
  ASSERT_TRUE(keys.ok());
  const Writes w = generate(*keys);
  std::printf("layout v2: %zu commands write %zu keys (%zu manifests)\n", w.commands.size(),
              w.keys.size(), w.manifests);

  // Through the pool, in batches: each grouped per node, one pipeline per node.
  constexpr std::size_t kBatch = 5000;
  std::set<uint16_t> slots;
  for (std::size_t from = 0; from < w.commands.size(); from += kBatch) {
    const std::size_t to = std::min(w.commands.size(), from + kBatch);
    std::vector<ClusterRequest> batch(w.commands.begin() + static_cast<std::ptrdiff_t>(from),
                                      w.commands.begin() + static_cast<std::ptrdiff_t>(to));
    std::vector<Result<RespValue>> replies = (*pool)->run_batch(batch);
    ASSERT_EQ(replies.size(), batch.size());
    for (std::size_t i = 0; i < replies.size(); ++i) {
      ASSERT_TRUE(replies[i].ok()) << batch[i].argv[1] << ": " << replies[i].error().message;
      ASSERT_FALSE(replies[i]->is_error()) << batch[i].argv[1] << ": " << replies[i]->str;
      slots.insert(cluster_key_slot(batch[i].argv[1]));
    }
  }
  std::printf("layout v2: the keys hash to %zu of %d slots\n", slots.size(), kClusterSlotCount);
  // 3,517 tags (1,000 connections, 2,000 members, 16 shards, 300 bodies, 200 guards, `{ns}`)
  // hash to about 3,170 distinct slots of 16,384.
  EXPECT_GT(slots.size(), 3000u);

  // DBSIZE on each master: every key landed once, on every master, none over twice the mean.
  const auto sizes = (*pool)->run_on_masters({"DBSIZE"});
  ASSERT_EQ(sizes.size(), 3u);
  int64_t total = 0;
  for (const auto& [node, r] : sizes) {
    ASSERT_TRUE(r.ok() && r->is_integer()) << node.address();
    total += r->integer;
  }
  EXPECT_EQ(total, static_cast<int64_t>(w.keys.size()));
  const double mean = static_cast<double>(total) / static_cast<double>(sizes.size());
  for (const auto& [node, r] : sizes) {
    std::printf("layout v2: master %s holds %lld keys (%.3f x the mean %.0f)\n",
                node.address().c_str(), static_cast<long long>(r->integer),
                static_cast<double>(r->integer) / mean, mean);
    EXPECT_GT(r->integer, 0) << node.address();
    EXPECT_LE(static_cast<double>(r->integer), 2.0 * mean) << node.address();
  }
  EXPECT_EQ((*pool)->stats().moved, 0u);  // every key routed by its own slot from the start

  // SCAN with v2's patterns on each master finds every key back, and each parses as v2.
  const std::vector<int> masters = cluster.master_ports();
  ASSERT_EQ(masters.size(), 3u);
  std::set<std::string> found;
  std::size_t manifests = 0;
  std::map<KeyKind, std::size_t> kinds;
  for (int port : masters) {
    for (const std::string& key : scan(cluster, port, keys->namespace_match_pattern())) {
      found.insert(key);
      Result<ParsedKey> parsed = keys->parse(key);
      ASSERT_TRUE(parsed.ok()) << key << ": " << parsed.error().message;
      ++kinds[parsed->kind];
    }
    manifests += scan(cluster, port, keys->manifest_match_pattern()).size();
  }
  EXPECT_EQ(found, w.keys);
  EXPECT_EQ(manifests, w.manifests);
  EXPECT_EQ(kinds[KeyKind::kManifest], w.manifests);
  EXPECT_EQ(kinds[KeyKind::kConn], static_cast<std::size_t>(kConnections));
  EXPECT_EQ(kinds[KeyKind::kGrants], static_cast<std::size_t>(kMembers));
  EXPECT_EQ(kinds[KeyKind::kConns], static_cast<std::size_t>(kDefaultShardCount));
  EXPECT_EQ(kinds[KeyKind::kBody], static_cast<std::size_t>(kBodies));

  // Another namespace whose name extends this one's: its keys are not this namespace's.
  Result<RedisKeys> other = RedisKeys::create("spread2", KeyLayout::kV2, kDefaultShardCount);
  ASSERT_TRUE(other.ok());
  std::vector<ClusterRequest> theirs;
  for (int c = 0; c < 50; ++c) {
    theirs.push_back({{"HSET", must(other->conn(conn_id(c))), "name", conn_id(c)}, false});
  }
  for (const Result<RespValue>& r : (*pool)->run_batch(theirs)) {
    ASSERT_TRUE(r.ok() && !r->is_error());
  }
  std::size_t ours = 0, spread2 = 0;
  for (int port : masters) {
    ours += scan(cluster, port, keys->namespace_match_pattern()).size();
    spread2 += scan(cluster, port, other->namespace_match_pattern()).size();
  }
  EXPECT_EQ(ours, w.keys.size());
  EXPECT_EQ(spread2, 50u);
}

}  // namespace
}  // namespace quiver
