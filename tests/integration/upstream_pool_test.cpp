// UpstreamPool: many upstreams listed with bounded concurrency, a hung one giving up at its own
// deadline while the others finish, the agent-wide bound across calls, and the watcher.
#include "native-agent/engine/upstream_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <gtest/gtest.h>

#include "shared/jsonrpc.h"
#include "tests/support/mcp_peers.h"

namespace quiver {
namespace {

using testing::append_line;
using testing::steady_now_ms;
using testing::TempDir;
using testing::test_upstream_stdio;
using testing::wait_until;

// The most intervals [start, start + length) that overlap at one instant.
int max_overlap(std::vector<std::pair<int64_t, int64_t>> intervals) {
  std::vector<std::pair<int64_t, int>> edges;
  for (auto [start, length] : intervals) {
    edges.push_back({start, +1});
    edges.push_back({start + length, -1});
  }
  std::sort(edges.begin(), edges.end());  // an end sorts before a start at the same instant
  int now = 0, most = 0;
  for (auto [at, delta] : edges) most = std::max(most, now += delta);
  return most;
}

int thread_count() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// An in-process MCP server: answers the handshake at once and every list after `delay_ms`.
class FakeTransport : public MessageTransport {
 public:
  explicit FakeTransport(int64_t delay_ms) : delay_ms_(delay_ms) {}
  Status send(const std::string& text, int64_t) override {
    auto parsed = parse_jsonrpc_batch(text);
    if (!parsed.ok() || parsed->empty()) return Status::Ok();
    const JsonRpcMessage& m = (*parsed)[0];
    if (m.kind != JsonRpcKind::kRequest) return Status::Ok();
    int64_t now = steady_now_ms();
    if (m.method == "initialize") {
      Json result = {{"protocolVersion", "2025-11-25"},
                     {"capabilities", {{"tools", Json::object()}}},
                     {"serverInfo", {{"name", "fake"}, {"version", "1"}}}};
      queue_.push_back({now, encode_result(m.id, result)});
    } else if (m.method == "tools/list") {
      queue_.push_back({now + delay_ms_, encode_result(m.id, {{"tools", Json::array()}})});
    } else {
      queue_.push_back({now, encode_error(m.id, kJsonRpcMethodNotFound, "no")});
    }
    return Status::Ok();
  }
  Result<std::vector<TransportMessage>> receive(int64_t timeout_ms) override {
    int64_t end = steady_now_ms() + timeout_ms;
    for (;;) {
      std::vector<TransportMessage> out;
      int64_t now = steady_now_ms();
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->first <= now) {
          out.push_back({it->second});
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      if (!out.empty() || now >= end) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  void set_protocol_version(const std::string&) override {}
  void close() override {}
  std::string describe() const override { return "fake"; }

 private:
  int64_t delay_ms_;
  std::deque<std::pair<int64_t, std::string>> queue_;
};

UpstreamPoolOptions fake_options(int64_t delay_ms) {
  UpstreamPoolOptions options;
  options.upstream.factory = [delay_ms](const UpstreamSpec&,
                                        const TransportSettings&) -> Result<UpstreamTransport> {
    UpstreamTransport t;
    t.transport = std::make_unique<FakeTransport>(delay_ms);
    return t;
  };
  return options;
}

TEST(UpstreamPool, HungUpstreamGivesUpAtItsDeadlineWhileTheOthersFinish) {
  // A real test-upstream that never answers a list, and three in-process upstreams that answer
  // after 300 ms, two workers.
  UpstreamPoolOptions options = fake_options(/*delay_ms=*/300);
  auto fake = options.upstream.factory;
  options.upstream.factory = [fake](const UpstreamSpec& spec, const TransportSettings& settings) {
    return spec.command == "fake" ? fake(spec, settings) : make_upstream_transport(spec, settings);
  };
  UpstreamPool pool(options);
  ASSERT_TRUE(pool.put(test_upstream_stdio("hung", {"--hang"})).ok());
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(pool.put(UpstreamSpec::stdio(name, "fake")).ok());
  }
  int64_t start = steady_now_ms();
  auto results = pool.list_many({"hung", "a", "b", "c"}, /*concurrency=*/2,
                                /*per_connection_timeout_ms=*/2500);
  int64_t wall = steady_now_ms() - start;
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].name, "hung");
  ASSERT_TRUE(results[0].listing.ok()) << results[0].listing.error().message;
  EXPECT_EQ(results[0].listing->list(ListKind::kTools).state, ListState::kFailed);
  EXPECT_EQ(results[0].listing->list(ListKind::kTools).error->code, ErrorCode::kTimeout);
  EXPECT_GE(results[0].elapsed_ms, 2450);
  EXPECT_LT(results[0].elapsed_ms, 3200);
  int64_t others = 0;
  for (std::size_t i = 1; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].listing.ok()) << results[i].listing.error().message;
    EXPECT_GE(results[i].elapsed_ms, 300);
    EXPECT_LT(results[i].elapsed_ms, 1000);
    // They ran on the other worker while the hung one waited: all done before its deadline.
    EXPECT_LT(results[i].started_at_ms + results[i].elapsed_ms,
              results[0].started_at_ms + results[0].elapsed_ms);
    others += results[i].elapsed_ms;
  }
  EXPECT_LT(wall, results[0].elapsed_ms + others);
  EXPECT_LT(wall, 3300);
}

TEST(UpstreamPool, ConcurrencyIsBoundedAndThreadsDoNotGrowWithUpstreams) {
  UpstreamPool pool(fake_options(/*delay_ms=*/100));
  std::vector<std::string> names;
  for (int i = 0; i < 24; ++i) {
    names.push_back("fake" + std::to_string(i));
    ASSERT_TRUE(pool.put(UpstreamSpec::stdio(names.back(), "unused")).ok());
  }
  int baseline = thread_count();
  std::atomic<bool> sampling{true};
  std::atomic<int> most_threads{0};
  std::thread sampler([&] {
    while (sampling) {
      most_threads = std::max(most_threads.load(), thread_count());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto results = pool.list_many(names, /*concurrency=*/4, 2000);
  sampling = false;
  sampler.join();
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& r : results) {
    ASSERT_TRUE(r.listing.ok()) << r.listing.error().message;
    spans.push_back({r.started_at_ms, r.elapsed_ms});
  }
  EXPECT_LE(max_overlap(spans), 4);
  EXPECT_GE(max_overlap(spans), 2);
  // The caller plus 3 workers (the sampler is one more): not a thread per upstream.
  EXPECT_LE(most_threads.load(), baseline + 1 + 3);
}

TEST(UpstreamPool, AgentWideBoundHoldsAcrossConcurrentCalls) {
  UpstreamPoolOptions options = fake_options(/*delay_ms=*/80);
  options.max_concurrent_listings = 2;
  UpstreamPool pool(options);
  std::vector<std::string> left, right;
  for (int i = 0; i < 6; ++i) {
    left.push_back("l" + std::to_string(i));
    right.push_back("r" + std::to_string(i));
    ASSERT_TRUE(pool.put(UpstreamSpec::stdio(left.back(), "unused")).ok());
    ASSERT_TRUE(pool.put(UpstreamSpec::stdio(right.back(), "unused")).ok());
  }
  std::vector<UpstreamListResult> a, b;
  std::thread other([&] { b = pool.list_many(right, 3, 2000); });
  a = pool.list_many(left, 3, 2000);
  other.join();
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& r : a) spans.push_back({r.started_at_ms, r.elapsed_ms});
  for (const auto& r : b) spans.push_back({r.started_at_ms, r.elapsed_ms});
  for (const auto& r : a) EXPECT_TRUE(r.listing.ok());
  for (const auto& r : b) EXPECT_TRUE(r.listing.ok());
  EXPECT_LE(max_overlap(spans), 2);
}

TEST(UpstreamPool, KeepsConnectionsReplacesChangedSpecsAndNamesUnknownOnes) {
  UpstreamPool pool(fake_options(0));
  ASSERT_TRUE(pool.put(UpstreamSpec::stdio("x", "cmd", {"a"})).ok());
  auto first = pool.get("x");
  ASSERT_TRUE(pool.put(UpstreamSpec::stdio("x", "cmd", {"a"})).ok());
  EXPECT_EQ(pool.get("x"), first);  // same spec: the connection (and its session) is kept
  ASSERT_TRUE(pool.put(UpstreamSpec::stdio("x", "cmd", {"b"})).ok());
  EXPECT_NE(pool.get("x"), first);
  EXPECT_FALSE(pool.put(UpstreamSpec::stdio("", "cmd")).ok());

  auto results = pool.list_many({"x", "nope"});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].listing.ok());
  ASSERT_FALSE(results[1].listing.ok());
  EXPECT_EQ(results[1].listing.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(pool.remove("x"));
  EXPECT_FALSE(pool.remove("x"));
  EXPECT_TRUE(pool.names().empty());
}

TEST(UpstreamPool, WatcherReportsAToolAddedAtRuntimeWithTheUpstreamName) {
  TempDir dir;
  UpstreamPoolOptions options;
  options.upstream.change_debounce_ms = 100;
  UpstreamPool pool(options);
  ASSERT_TRUE(pool.put(test_upstream_stdio("watched", {"--control", dir.path("ctl")})).ok());
  std::mutex mu;
  std::vector<std::pair<std::string, UpstreamChange>> seen;
  pool.set_change_callback([&](const std::string& name, const UpstreamChange& c) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back({name, c});
  });
  ASSERT_TRUE(pool.list("watched", 4000).ok());
  pool.start_watching();
  int64_t added = steady_now_ms();
  append_line(dir.path("ctl"), R"({"add_tool":"late"})");
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !seen.empty();
      },
      2000));
  EXPECT_LT(steady_now_ms() - added, 1000);
  pool.stop_watching();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen[0].first, "watched");
  ASSERT_EQ(seen[0].second.kinds.size(), 1u);
  EXPECT_EQ(seen[0].second.kinds[0], ListKind::kTools);
  auto relisted = pool.list("watched", 4000);
  ASSERT_TRUE(relisted.ok());
  EXPECT_EQ(relisted->list(ListKind::kTools).items.size(), 4u);
}

// A reload's handover (Agent::stop_handing_over): the connections of one pool, released unclosed,
// are adopted by another with their sessions (the next listing reuses the same child), and only
// when that pool would run them alike: same spec, same session settings, a free name. Changes of
// an adopted connection reach the adopting pool's callback, under the same name.
TEST(UpstreamPool, AdoptsAReleasedConnectionWithItsSessionAndRefusesOtherSettings) {
  TempDir dir;
  UpstreamPoolOptions options;
  options.upstream.change_debounce_ms = 100;
  const UpstreamSpec spec = test_upstream_stdio("moved", {"--control", dir.path("ctl")});
  std::vector<std::shared_ptr<UpstreamConnection>> released;
  {
    UpstreamPool before(options);
    ASSERT_TRUE(before.put(spec).ok());
    ListInfo info;
    ASSERT_TRUE(before.list("moved", 8000, &info).ok());
    EXPECT_FALSE(info.reused);
    released = before.release_all();
    EXPECT_TRUE(before.names().empty());
  }  // the first pool is gone: the connection must not need it
  ASSERT_EQ(released.size(), 1u);
  std::shared_ptr<UpstreamConnection> conn = released[0];
  ASSERT_TRUE(conn->connected());

  UpstreamPoolOptions slower = options;
  slower.upstream.session.request_timeout_ms += 1;
  UpstreamPool other_settings(slower);
  std::optional<std::string> refused = other_settings.adopt(conn);
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("runtime controls"), std::string::npos) << *refused;
  EXPECT_TRUE(other_settings.names().empty());

  UpstreamPool after(options);
  const UpstreamSpec changed = test_upstream_stdio("moved", {"--tools", "9"});
  refused = after.adopt(conn, &changed);
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("definition"), std::string::npos) << *refused;
  ASSERT_FALSE(after.adopt(conn, &spec).has_value());
  EXPECT_EQ(after.names(), std::vector<std::string>{"moved"});
  EXPECT_TRUE(after.adopt(conn).has_value());  // the name is taken now
  EXPECT_TRUE(conn->connected());

  std::mutex mu;
  std::vector<std::string> seen;
  after.set_change_callback([&](const std::string& name, const UpstreamChange& c) {
    std::lock_guard<std::mutex> lock(mu);
    if (!c.kinds.empty()) seen.push_back(name);
  });
  after.start_watching();
  append_line(dir.path("ctl"), R"({"add_tool":"adopted"})");
  EXPECT_TRUE(wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !seen.empty();
      },
      3000));
  after.stop_watching();
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen[0], "moved");
  }
  // put() with the same spec keeps it; the listing runs on the session opened by the first pool.
  ASSERT_TRUE(after.put(spec).ok());
  ListInfo info;
  auto relisted = after.list("moved", 8000, &info);
  ASSERT_TRUE(relisted.ok()) << relisted.error().message;
  EXPECT_TRUE(info.reused);
  EXPECT_EQ(info.connect_ms, -1);
  EXPECT_EQ(relisted->list(ListKind::kTools).items.size(), 4u);
  EXPECT_EQ(conn->stats().sessions_opened, 1);
}

}  // namespace
}  // namespace quiver
