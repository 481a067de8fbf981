// The agent's manifest bodies by content (native-agent/store/body_cache.h, issue 14), on a real
// redis-server: a body read once is served again without asking Redis (counted with INFO
// commandstats, which counts every MGET the server runs), a commit of new content is read with its
// new body, the byte bound holds, and the agent's threads share the cache.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/body_cache.h"
#include "native-agent/store/redis_store.h"
#include "shared/discovery_redis.h"
#include "tests/support/redis_fixture.h"

namespace quiver {
namespace {

constexpr int64_t kT0 = 1'780'000'000'000;

Principal member(const char* id) { return *Principal::member(id); }

ConnectionRecord shared_record(const std::string& id) {
  ConnectionRecord r;
  r.id = id;
  r.config_hash = "hash-" + id;
  r.credential_mode = CredentialMode::kShared;
  r.name = "Connection " + id;
  r.transport = "stdio";
  r.updated_at_ms = kT0;
  return r;
}

// A listing of `cid` whose body is about `pad` bytes, told apart by `version`.
ManifestWrite listing(const std::string& cid, const std::string& version, std::size_t pad = 0) {
  ManifestWrite w;
  w.manifest = R"({"tools":[{"name":"search_)" + cid + R"(","version":")" + version +
               R"(","description":")" + std::string(pad, 'd') + R"("}]})";
  w.etag = "\"etag-" + cid + "-" + version + "\"";
  w.config_hash = "hash-" + cid;
  w.fetched_at_ms = kT0;
  w.fresh_until_ms = kT0 + 900'000;
  w.expires_at_ms = kT0 + 86'400'000;
  w.cache_scope = "public";
  return w;
}

class StoreBodyCache : public testing::RedisFixture {
 protected:
  std::unique_ptr<RedisStore> store(std::size_t max_bytes = std::size_t{16} << 20) {
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = redis_->port();
    o.ns = "team-a";
    o.body_cache_max_bytes = max_bytes;
    o.now_ms = [] { return kT0; };
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  // The namespace ready, connections `cids` shared and granted to alice.
  void seed(RedisStore& s, const std::vector<std::string>& cids) {
    std::vector<ConnectionRecord> records;
    for (const std::string& cid : cids) records.push_back(shared_record(cid));
    ASSERT_TRUE(s.sync_connections(records).ok());
    ASSERT_TRUE(s.sync_grants({{"alice", std::set<std::string>(cids.begin(), cids.end())}}).ok());
    ASSERT_TRUE(s.begin_namespace_restore(kT0).ok());
    ASSERT_TRUE(*s.mark_namespace_ready(kT0));
  }

  void commit(RedisStore& s, const std::string& cid, const ManifestWrite& w) {
    Result<AcquireResult> lease =
        s.acquire_lease(cid, Principal::shared(), std::string(32, 'a'), 60'000);
    ASSERT_TRUE(lease.ok() && lease->acquired);
    Result<FencedWriteResult> r =
        s.commit_manifest(cid, Principal::shared(), lease->lease, w, FencedWriteOptions{true});
    ASSERT_TRUE(r.ok() && r->ok());  // which releases the lease
  }

  // How many MGETs of bodies the server has run since the last CONFIG RESETSTAT: every MGET,
  // less the one each discovery script runs inside it (the versions it returns; the only
  // read-only script, so its EVALSHA_RO / EVAL_RO runs that did not fail).
  int64_t mgets() {
    RespValue v = cmd({"INFO", "commandstats"});
    const std::string& text = v.str;
    auto stat = [&](const std::string& command, const std::string& field) -> int64_t {
      const std::size_t line = text.find("cmdstat_" + command + ":");
      if (line == std::string::npos) return 0;
      const std::size_t end = text.find('\n', line);
      const std::size_t at = text.find(field + "=", line);
      if (at == std::string::npos || at > end) return 0;
      return std::atoll(text.c_str() + at + field.size() + 1);
    };
    int64_t scripts = 0;
    for (const char* c : {"evalsha_ro", "eval_ro"}) {
      scripts += stat(c, "calls") - stat(c, "failed_calls");
    }
    return stat("mget", "calls") - scripts;
  }
  void reset_stats() { ASSERT_EQ(cmd({"CONFIG", "RESETSTAT"}).str, "OK"); }

  // alice's discovery read: the text of each connection's manifest, in id order.
  std::vector<std::string> texts(RedisStore& s) {
    Result<DiscoverySnapshot> snap = s.read_discovery(member("alice"), {});
    EXPECT_TRUE(snap.ok()) << snap.error().message;
    std::vector<std::string> out;
    if (!snap.ok()) return out;
    for (const GrantedConnection& c : snap->connections) {
      out.push_back(c.manifest ? c.manifest->text : "(no entry)");
    }
    return out;
  }
};

TEST_F(StoreBodyCache, ABodyReadOnceIsServedAgainWithoutAnMget) {
  std::unique_ptr<RedisStore> s = store();
  ASSERT_NE(s, nullptr);
  seed(*s, {"docs", "gh"});
  const ManifestWrite docs = listing("docs", "v1"), gh = listing("gh", "v1");
  commit(*s, "docs", docs);
  commit(*s, "gh", gh);

  reset_stats();
  EXPECT_EQ(texts(*s), (std::vector<std::string>{docs.manifest, gh.manifest}));
  EXPECT_EQ(mgets(), 1);  // both bodies, in one MGET

  reset_stats();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(texts(*s), (std::vector<std::string>{docs.manifest, gh.manifest}));
  }
  Result<std::optional<StoredManifest>> one = s->read_manifest("gh", Principal::shared());
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->manifest, gh.manifest);
  EXPECT_EQ(mgets(), 0);  // every body from the cache
  BodyCacheCounts c = s->body_cache_counts();
  EXPECT_EQ(c.entries, 2u);
  EXPECT_EQ(c.hits, 7u);  // 3 reads x 2 bodies, then read_manifest's

  // Another agent (its own cache) asks Redis.
  std::unique_ptr<RedisStore> other = store();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(texts(*other), (std::vector<std::string>{docs.manifest, gh.manifest}));
  EXPECT_EQ(mgets(), 1);
}

TEST_F(StoreBodyCache, AReadAfterACommitOfNewContentSeesTheNewBody) {
  std::unique_ptr<RedisStore> s = store();
  ASSERT_NE(s, nullptr);
  seed(*s, {"docs", "gh"});
  commit(*s, "docs", listing("docs", "v1"));
  commit(*s, "gh", listing("gh", "v1"));
  ASSERT_EQ(texts(*s).at(1), listing("gh", "v1").manifest);

  // Another agent commits new content for gh: a new digest, which this agent's cache lacks.
  std::unique_ptr<RedisStore> writer = store();
  ASSERT_NE(writer, nullptr);
  const ManifestWrite v2 = listing("gh", "v2");
  ASSERT_NE(manifest_body_digest(v2.manifest), manifest_body_digest(listing("gh", "v1").manifest));
  commit(*writer, "gh", v2);

  reset_stats();
  EXPECT_EQ(texts(*s), (std::vector<std::string>{listing("docs", "v1").manifest, v2.manifest}));
  EXPECT_EQ(mgets(), 1);  // the new body only
  Result<std::optional<StoredManifest>> one = s->read_manifest("gh", Principal::shared());
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->manifest, v2.manifest);
  EXPECT_EQ(mgets(), 1);

  // Back to the first content: its body is still known by its digest.
  commit(*writer, "gh", listing("gh", "v1"));
  EXPECT_EQ(texts(*s).at(1), listing("gh", "v1").manifest);
  EXPECT_EQ(mgets(), 1);
}

TEST_F(StoreBodyCache, TheByteBoundHoldsAndAnEvictedBodyIsFetchedAgain) {
  // Room for about two 1.5 KB bodies.
  constexpr std::size_t kBound = 4096;
  std::unique_ptr<RedisStore> s = store(kBound);
  ASSERT_NE(s, nullptr);
  const std::vector<std::string> cids = {"c1", "c2", "c3", "c4", "c5"};
  seed(*s, cids);
  std::vector<std::string> want;
  for (const std::string& cid : cids) {
    commit(*s, cid, listing(cid, "v1", 1500));
    want.push_back(listing(cid, "v1", 1500).manifest);
  }
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(texts(*s), want);
    BodyCacheCounts c = s->body_cache_counts();
    EXPECT_LE(c.bytes, kBound);
    EXPECT_LE(c.entries, 2u);
  }
  EXPECT_GT(s->body_cache_counts().evictions, 0u);
  // One body at a time fits; read twice, the second from the cache.
  reset_stats();
  for (int i = 0; i < 2; ++i) {
    Result<std::optional<StoredManifest>> one = s->read_manifest("c1", Principal::shared());
    ASSERT_TRUE(one.ok() && one->has_value());
    EXPECT_EQ((*one)->manifest, want[0]);
  }
  EXPECT_EQ(mgets(), 1);

  // A body over the bound on its own is served and never kept.
  std::unique_ptr<RedisStore> tiny = store(1024);
  ASSERT_NE(tiny, nullptr);
  reset_stats();
  EXPECT_EQ(texts(*tiny), want);
  EXPECT_EQ(texts(*tiny), want);
  EXPECT_EQ(mgets(), 2);
  EXPECT_EQ(tiny->body_cache_counts().entries, 0u);

  // Off: every read asks Redis.
  std::unique_ptr<RedisStore> off = store(0);
  ASSERT_NE(off, nullptr);
  reset_stats();
  EXPECT_EQ(texts(*off), want);
  EXPECT_EQ(texts(*off), want);
  EXPECT_EQ(mgets(), 2);
}

TEST_F(StoreBodyCache, TheAgentsThreadsShareOneCache) {
  std::unique_ptr<RedisStore> s = store();
  ASSERT_NE(s, nullptr);
  const std::vector<std::string> cids = {"c1", "c2", "c3"};
  seed(*s, cids);
  std::vector<std::string> want;
  for (const std::string& cid : cids) {
    commit(*s, cid, listing(cid, "v1", 200));
    want.push_back(listing(cid, "v1", 200).manifest);
  }
  reset_stats();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (texts(*s) != want) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  // The first reads may race to fetch the same bodies; after them, none.
  EXPECT_LE(mgets(), 4);
  EXPECT_EQ(s->body_cache_counts().entries, 3u);
}

}  // namespace
}  // namespace quiver
