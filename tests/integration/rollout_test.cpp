// A rolling deploy across agents of one namespace (real redis-server, real test upstreams, agents
// started from their config files): the newer file wins and stays, the older agent says it is
// behind and follows, a rollback with a newer revision wins, a restarted agent on the old file
// changes nothing, and a connection written to the runtime catalog (as the admin API does)
// reaches every agent.
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/base/clock.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/catalog_config.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using testing::RedisServer;
using testing::TempDir;
using testing::test_upstream_js;
using testing::wait_until;

struct LogCapture {
  std::mutex mu;
  std::string text;
  Logger::Sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      text += line + "\n";
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    return text;
  }
  bool contains(const std::string& s) { return all().find(s) != std::string::npos; }
};

Json upstream(int tools) {
  return {{"command", "node"},
          {"args", {test_upstream_js(), "stdio", "--quiet", "--tools", std::to_string(tools)}}};
}

// A config file for namespace `rollout` on `redis` with connection `x` listing `tools` tools.
std::string write_config(const TempDir& dir, const std::string& name, const RedisServer& redis,
                         int tools, int64_t revision) {
  Json cfg = {{"mcpServers", {{"x", upstream(tools)}}},
              {"quiver",
               {{"namespace", "rollout"},
                {"redis", "redis://127.0.0.1:" + std::to_string(redis.port()) + "/0"},
                {"revision", revision},
                {"grants", {{"alice", {"*"}}}},
                {"runtime",
                 {{"list_timeout_ms", 30000},
                  {"request_timeout_ms", 30000},
                  {"maintenance_interval_ms", 300},
                  {"revalidate_window_ms", 500},
                  {"store_check_interval_ms", 100}}}}}};
  const std::string path = dir.path(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << cfg.dump();
  return path;
}

// One agent as `serve` runs it: from its file, restarted in-process when it asks for a reload.
struct FileAgent {
  std::string path;
  std::string data_dir;
  LogCapture log;
  std::unique_ptr<Agent> agent;
  int reloads = 0;

  Status start() {
    EnvMap env = {{"HOME", "/nonexistent"}};
    Result<ConfigFile> file = read_config_file(path, env);
    if (!file.ok()) return file.error();
    Result<AgentConfig> cfg = parse_config_file(*file);
    if (!cfg.ok()) return cfg.error();
    cfg->data_dir = data_dir;
    AgentOptions o;
    o.watch_upstreams = false;
    o.log_sink = log.sink();
    o.config_file = std::make_shared<const ConfigFile>(std::move(*file));
    o.catalog_debounce_ms = 200;
    Result<std::unique_ptr<Agent>> a = Agent::create(std::move(*cfg), std::move(o));
    if (!a.ok()) return a.error();
    agent = std::move(*a);
    return agent->start();
  }
  void stop() {
    if (agent) agent->stop();
    agent.reset();
  }
  // What serve's loop does every second.
  void poll() {
    if (agent && agent->reload_requested()) {
      stop();
      ++reloads;
      Status st = start();
      EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
    }
  }
  std::string hash_of(const std::string& cid) const {
    const ConnectionConfig* c = agent ? agent->config().find_connection(cid) : nullptr;
    return c != nullptr ? c->config_hash : "";
  }
};

std::string stored_hash(ManifestStore& store, const std::string& cid) {
  Result<std::optional<ConnectionRecord>> r = store.read_connection(cid);
  return r.ok() && r->has_value() ? (*r)->config_hash : "";
}

std::optional<ManifestMeta> manifest_of(ManifestStore& store, const std::string& cid) {
  Result<std::optional<ManifestMeta>> m = store.read_manifest_meta(cid, Principal::shared());
  return m.ok() ? *m : std::nullopt;
}

TEST(Rollout, TheNewerFileWinsAndNobodyFlipsItBack) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  TempDir dir;
  FileAgent a, b;
  a.path = write_config(dir, "a.json", redis, 2, 1000);
  a.data_dir = dir.path("a");
  b.path = write_config(dir, "b.json", redis, 3, 2000);
  b.data_dir = dir.path("b");

  ASSERT_TRUE(a.start().ok()) << a.log.all();
  const std::string def1 = a.hash_of("x");
  ASSERT_FALSE(def1.empty());
  ASSERT_EQ(stored_hash(a.agent->store(), "x"), def1);
  ASSERT_TRUE(wait_until([&] { return manifest_of(a.agent->store(), "x").has_value(); }, 30'000))
      << a.log.all();

  // B deploys the newer file: its definition is the namespace's from now on.
  ASSERT_TRUE(b.start().ok()) << b.log.all();
  const std::string def2 = b.hash_of("x");
  ASSERT_NE(def1, def2);
  // Sampled for ~6 s while both agents run their passes (every 300 ms) and store checks: def2
  // settles and never flips back.
  int flips = 0;
  std::string last = stored_hash(b.agent->store(), "x");
  EXPECT_EQ(last, def2);
  const int64_t until = testing::steady_now_ms() + 6'000;
  while (testing::steady_now_ms() < until) {
    a.poll();
    b.poll();
    const std::string now = stored_hash(b.agent->store(), "x");
    if (now != last) ++flips;
    last = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(flips, 0) << a.log.all() << b.log.all();
  EXPECT_EQ(last, def2);
  // A followed: it reloaded, said it is behind, and runs def2.
  EXPECT_GE(a.reloads, 1) << a.log.all();
  EXPECT_EQ(b.reloads, 0) << b.log.all();
  EXPECT_TRUE(a.log.contains("config file is behind the store for connection x")) << a.log.all();
  EXPECT_EQ(a.hash_of("x"), def2);
  // Listings commit under def2 (no refusal as config_changed after the settle).
  Result<RefreshReport> rb = b.agent->refresh_now("x", Principal::shared(), "manual");
  ASSERT_TRUE(rb.ok()) << rb.error().message;
  EXPECT_TRUE(rb->committed) << rb->outcome;
  ASSERT_TRUE(manifest_of(b.agent->store(), "x").has_value());
  EXPECT_EQ(manifest_of(b.agent->store(), "x")->config_hash, def2);
  Result<RefreshReport> ra = a.agent->refresh_now("x", Principal::shared(), "manual");
  ASSERT_TRUE(ra.ok()) << ra.error().message;
  EXPECT_TRUE(ra->committed) << ra->outcome;
  EXPECT_EQ(a.agent->metrics().refreshes("refused_config_changed"), 0);
  EXPECT_EQ(b.agent->metrics().refreshes("refused_config_changed"), 0);

  // A reloads (SIGHUP) on its unchanged old file: nothing changes.
  a.stop();
  ASSERT_TRUE(a.start().ok()) << a.log.all();
  EXPECT_EQ(a.hash_of("x"), def2);
  EXPECT_EQ(stored_hash(a.agent->store(), "x"), def2);

  // A rollback: def1 with a newer revision wins, and B follows.
  a.path = write_config(dir, "a.json", redis, 2, 3000);
  a.stop();
  ASSERT_TRUE(a.start().ok()) << a.log.all();
  EXPECT_EQ(a.hash_of("x"), def1);
  EXPECT_EQ(stored_hash(a.agent->store(), "x"), def1);
  EXPECT_TRUE(wait_until(
      [&] {
        b.poll();
        return b.hash_of("x") == def1;
      },
      10'000))
      << b.log.all();
  EXPECT_EQ(stored_hash(a.agent->store(), "x"), def1);

  // An agent restarted on the old file (def2, revision 2000) changes nothing.
  b.stop();
  ASSERT_TRUE(b.start().ok()) << b.log.all();
  EXPECT_EQ(b.hash_of("x"), def1);
  EXPECT_EQ(stored_hash(b.agent->store(), "x"), def1);
  EXPECT_TRUE(b.log.contains("config file is behind the store for connection x")) << b.log.all();

  // A connection written to the catalog (as the admin API does) reaches both agents, listed.
  CatalogEntry added;
  added.kind = CatalogKind::kConnection;
  added.key = "y";
  added.value = Json{{"name", "y"}, {"server", upstream(4)}, {"settings", Json::object()}};
  ASSERT_TRUE(validate_catalog_value(added.kind, added.key, *added.value).ok());
  added.meta.origin = kCatalogOriginApi;
  added.meta.rev_ms = system_clock_ms()();
  added.meta.by = "operator:test";
  Result<CatalogWriteResult> w = a.agent->store().catalog_write(added, CatalogWriteMode::kAlways);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_TRUE(wait_until(
      [&] {
        a.poll();
        b.poll();
        return !a.hash_of("y").empty() && !b.hash_of("y").empty() &&
               manifest_of(a.agent->store(), "y").has_value();  // seeded by maintenance
      },
      30'000))
      << a.log.all() << b.log.all();
  EXPECT_EQ(stored_hash(a.agent->store(), "y"), a.hash_of("y"));
  // ... and stays through both agents' passes: neither file names it, neither removes it.
  std::this_thread::sleep_for(std::chrono::milliseconds(1'000));
  a.poll();
  b.poll();
  EXPECT_FALSE(b.hash_of("y").empty());
  EXPECT_EQ(stored_hash(a.agent->store(), "x"), def1);
  a.stop();
  b.stop();
}

}  // namespace
}  // namespace quiver
