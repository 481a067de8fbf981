// Issue 14's proof for an agent writing key layout v2 (docs/design.md "Redis Cluster routing"):
// `quiver-agent serve` on a real six-node cluster (tests/support/redis_cluster.h), its namespace
// created as v2 (the layout record `v2:ready` before the agent starts, as an operator creates a
// namespace on a cluster), six real stdio upstreams whose v2 slots sit on every master, and a
// member granted all of them. While a reader lists GET /v1/manifests in a loop:
//   - a graceful failover (CLUSTER FAILOVER) and a crashed master (SIGKILL, its replica promoted):
//     every 200 answer lists every connection with its manifest, the failures are 503 store
//     errors that stop once the cluster is whole, and a manual refresh of a connection whose slot
//     was on the killed master commits the upstream's new tool into v2 (MOVED counted);
//   - a reshard of one connection's slot to another master, key by key with pauses (ASK, and
//     TRYAGAIN for a script whose keys are split), while that connection is refreshed again and
//     again: every answer is a full list, refreshes commit during and after the move, ASK is
//     counted, and no TRYAGAIN surfaces as an error;
//   - a connection's slot held split with keys on both nodes: its read script runs on neither
//     node, and the agent reads it key by key: every read is the whole list from Redis at once;
//   - the member's slot held split the same way: her per-member data is read key by key.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "native-agent/store/redis_store.h"
#include "shared/caller_token.h"
#include "shared/json.h"
#include "shared/layout.h"
#include "shared/redis_cluster.h"
#include "shared/redis_keys.h"
#include "tests/support/cluster_faults.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/oauth_e2e.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using testing::AgentServe;
using testing::http_request;
using testing::master_and_replica;
using testing::RedisCluster;
using testing::RedisConnection;
using testing::run_argv;
using testing::TempDir;
using testing::wait_until;

constexpr char kPassword[] = "cluster-v2-faults-pw-8Kd";
constexpr char kTokenKey[] = "cluster-v2-faults-token-key-0123456789ab";
constexpr int kPerMaster = 2;          // connections whose v2 slot is on each master
constexpr int kTools = 3;              // each upstream's tools at start
constexpr char kPerMemberId[] = "pm";  // start_agent(true)'s per-member connection

const RedisKeys& v2_keys() {
  static const RedisKeys keys = *RedisKeys::create("default", KeyLayout::kV2);
  return keys;
}

// The slot of a connection's v2 tag `{default:c:<cid>}`: its record, `shared` manifest, lease,
// fence, version.
uint16_t connection_slot(const std::string& cid) {
  return cluster_key_slot(*v2_keys().manifest(cid, Principal::shared()));
}

// The value of a counter line `<name> <n>` in Prometheus text (-1 when absent).
int64_t counter_value(const std::string& text, const std::string& name) {
  const std::string head = name + " ";
  for (std::size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    return std::stoll(text.substr(at + head.size()));
  }
  return -1;
}

// One answer of GET /v1/manifests, as the reader saw it.
struct Answer {
  std::chrono::steady_clock::time_point at;
  int status = 0;       // 0: no HTTP answer
  std::string problem;  // a 200 that does not list every connection with its manifest
  std::string failed;   // entries that say they failed (no manifest, and a status saying why)
  std::map<std::string, std::set<std::string>> tools;  // id -> tool names
  std::string body;                                    // non-200 only
};

class RedisClusterV2FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RedisClusterOptions o;
    o.password = kPassword;
    cluster_ = std::make_unique<RedisCluster>(o);
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
    dir_ = std::make_unique<TempDir>("quiver-cluster-v2-faults");
  }

  void TearDown() override {
    stop_reader();
    if (!agent_) return;
    agent_->stop();
    if (!HasFailure()) return;
    // What the agent warned about, to tell why.
    std::istringstream logs(agent_->logs());
    for (std::string line; std::getline(logs, line);) {
      if (line.find(" WARN ") != std::string::npos || line.find(" ERROR ") != std::string::npos) {
        std::cout << "[ agent    ] " << line.substr(0, 400) << "\n";
      }
    }
  }

  // Connection ids whose v2 slots give every master kPerMaster of them.
  std::vector<std::string> spread_ids() {
    Result<ClusterSlotMap> map = testing::cluster_map(*cluster_);
    EXPECT_TRUE(map.ok()) << map.error().message;
    if (!map.ok()) return {};
    std::map<int, int> per_master;
    std::vector<std::string> ids;
    for (int i = 0; i < 1000 && ids.size() < map->masters().size() * kPerMaster; ++i) {
      const std::string id = "c" + std::to_string(i);
      const ClusterShard* shard = map->shard_for_slot(connection_slot(id));
      if (shard == nullptr || per_master[shard->master.port] >= kPerMaster) continue;
      ++per_master[shard->master.port];
      ids.push_back(id);
    }
    return ids;
  }

  // The namespace created as v2: `quiver:{default}:layout` = `v2:ready:<now>`.
  bool make_namespace_v2() {
    const std::string key = RedisKeys::create()->layout();
    auto [master, replica] = master_and_replica(*cluster_, cluster_key_slot(key));
    if (master == 0) return false;
    RedisConnection c(cluster_->connect(master));
    return c != nullptr &&
           run_argv(c.get(),
                    {"SET", key, layout_record_value(KeyLayout::kV2, "ready", system_clock_ms()())})
               .is_ok();
  }

  // `quiver-agent serve` with one stdio upstream per id (kTools tools, a --control file each),
  // alice granted all; waits until alice sees every one listed. With `per_member`, one more
  // connection, kPerMemberId: an HTTP upstream in per_member mode (a bearer of alice's), whose
  // manifest is alice's, in her member slot `{default:m:alice}`.
  void start_agent(bool per_member = false) {
    ids_ = spread_ids();
    ASSERT_EQ(ids_.size(), cluster_->master_ports().size() * kPerMaster);
    ASSERT_TRUE(make_namespace_v2());
    Json connections = Json::object();
    std::map<std::string, std::string> env;
    if (per_member) {
      http_ = std::make_unique<testing::TestUpstreamHttp>();
      ASSERT_TRUE(http_->ok()) << http_->error();
      ids_.push_back(kPerMemberId);
      connections[kPerMemberId] = {{"credential_mode", "per_member"},
                                   {"auth", "bearer"},
                                   {"credentials", {{"alice", {{"env", "ALICE_BEARER"}}}}}};
      env["ALICE_BEARER"] = "cluster-v2-faults-alice-bearer";
    }
    const std::string key_file = dir_->path("caller-token.key");
    std::ofstream(key_file) << kTokenKey << "\n";
    Json servers = Json::object();
    Json all = Json::array();
    for (const std::string& id : ids_) {
      all.push_back(id);
      if (id == kPerMemberId) {
        servers[id] = {{"url", http_->url()}};
        continue;
      }
      controls_[id] = dir_->path(id + ".ctl");
      std::ofstream(controls_[id]).flush();
      servers[id] = {{"command", "node"},
                     {"args",
                      {testing::test_upstream_js(), "stdio", "--quiet", "--tools",
                       std::to_string(kTools), "--control", controls_[id]}}};
    }
    Json config = {{"mcpServers", servers},
                   {"quiver",
                    {{"redis", testing::seeds_url(*cluster_, kPassword)},
                     {"members", {"alice"}},
                     {"grants", {{"alice", all}}},
                     {"caller_token_keys", {{"k1", {{"file", key_file}}}}},
                     {"runtime",
                      {{"list_timeout_ms", 30000},
                       {"request_timeout_ms", 30000},
                       {"store_check_interval_ms", 200}}}}}};
    if (per_member) {
      config["quiver"]["connections"] = connections;
      config["quiver"]["allow_private_upstreams"] = true;  // the upstream is on 127.0.0.1
    }
    agent_ = std::make_unique<AgentServe>(config, env, dir_->root());
    ASSERT_TRUE(agent_->ok()) << agent_->logs();
    Result<std::string> token =
        mint_caller_token("alice", kTokenKey, "k1", system_clock_ms()(), 3'600'000);
    ASSERT_TRUE(token.ok()) << token.error().message;
    auth_ = {{"Authorization", "Bearer " + *token}};
    ASSERT_TRUE(wait_until(
        [&] {
          Answer a = read();
          return a.status == 200 && a.problem.empty() && a.failed.empty();
        },
        60000))
        << agent_->logs();
    // Written in v2: each connection's manifest on the master of its own slot (alice's of the
    // per-member one on her member slot's), every master used.
    std::set<int> masters;
    for (const std::string& id : ids_) {
      const std::string key = *v2_keys().manifest(
          id, id == kPerMemberId ? *Principal::member("alice") : Principal::shared());
      const int master = master_and_replica(*cluster_, cluster_key_slot(key)).first;
      ASSERT_NE(master, 0) << key;
      RedisConnection c(cluster_->connect(master));
      ASSERT_TRUE(c);
      EXPECT_EQ(run_argv(c.get(), {"EXISTS", key}).integer, 1) << key;
      masters.insert(master);
    }
    EXPECT_EQ(masters.size(), cluster_->master_ports().size());
  }

  // One GET /v1/manifests as alice, checked: a 200 lists every connection, each with a manifest
  // of tools, or saying it failed.
  Answer read() {
    Answer a;
    a.at = std::chrono::steady_clock::now();
    auto r = http_request("GET", agent_->url("/v1/manifests"), auth_, "", "", 30);
    if (!r) return a;
    a.status = r->status;
    if (r->status != 200) {
      a.body = r->body.substr(0, 300);
      return a;
    }
    Result<Json> body = parse_json(r->body);
    if (!body.ok() || !body->contains("connections")) {
      a.problem = "not a list: " + r->body.substr(0, 200);
      return a;
    }
    for (const Json& c : (*body)["connections"]) {
      const std::string id = c.value("id", "");
      if (!c.contains("manifest")) {
        const std::string status = c.value("status", "");
        // A failed entry says so: an error status with the error, or pending (never listed).
        if ((status == "error" && c.contains("error")) || status == "pending") {
          a.failed += id + ":" + c.dump() + " ";
        } else {
          a.problem += id + " without a manifest, posing as " + status + ": " + c.dump() + "; ";
        }
        continue;
      }
      std::set<std::string>& names = a.tools[id];
      for (const Json& t : c["manifest"]["tools"]["items"]) names.insert(t.value("name", ""));
      if (names.empty()) a.problem += id + ": an empty manifest (" + c.dump() + "); ";
    }
    for (const std::string& id : ids_) {
      if (a.tools.count(id) == 0 && a.failed.find(id + ":") == std::string::npos) {
        a.problem += id + " missing; ";
      }
    }
    return a;
  }

  void start_reader() {
    reading_ = true;
    reader_ = std::thread([this] {
      while (reading_) {
        Answer a = read();
        {
          std::lock_guard<std::mutex> lock(mu_);
          answers_.push_back(std::move(a));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }

  void stop_reader() {
    reading_ = false;
    if (reader_.joinable()) reader_.join();
  }

  std::vector<Answer> answers() {
    std::lock_guard<std::mutex> lock(mu_);
    return answers_;
  }

  std::set<std::string> tools_of(const std::string& id) {
    Answer a = read();
    return a.tools.count(id) != 0 ? a.tools[id] : std::set<std::string>{};
  }

  // The upstream of `id` gains `tool`; a manual refresh is asked for (again every 2 s, a request
  // within the gate's window being already queued) until alice sees it, up to `timeout_ms`.
  // The statuses of the refresh requests go to `posted`.
  bool add_tool_and_refresh(const std::string& id, const std::string& tool, int64_t timeout_ms,
                            std::vector<int>* posted) {
    std::ofstream(controls_[id], std::ios::app) << R"({"add_tool":")" << tool << R"("})"
                                                << "\n";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      auto queued =
          http_request("POST", agent_->url("/v1/mcp-connections/" + id + "/refresh-tools"), auth_);
      posted->push_back(queued ? queued->status : 0);
      if (wait_until([&] { return tools_of(id).count(tool) != 0; }, 2000)) return true;
    }
    return false;
  }

  // The `shared` manifest of `id` as a RedisStore writing v2 reads it ("" when absent).
  std::string stored_v2_manifest(const std::string& id) {
    Result<RedisConfig> cfg = parse_redis_url(testing::seeds_url(*cluster_, kPassword));
    if (!cfg.ok()) return "config: " + cfg.error().message;
    RedisStoreOptions o;
    o.redis = *cfg;
    o.key_layout = KeyLayout::kV2;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
    if (!s.ok()) return "store: " + s.error().message;
    Result<std::optional<StoredManifest>> m = (*s)->read_manifest(id, Principal::shared());
    if (!m.ok()) return "read: " + m.error().message;
    return m->has_value() ? (*m)->manifest : "";
  }

  int64_t metric(const std::string& name) {
    auto r = http_request("GET", agent_->url("/metrics"));
    return r && r->status == 200 ? counter_value(r->body, name) : -1;
  }

  // Holds `slot` split between its two reshard ends (keys on both nodes) while `reads` reads run,
  // and checks each answered the whole list, as before the move and after it, at once (the
  // TRYAGAIN budget is about 17 s: never waited out), and that each read handed a split slot's
  // TRYAGAIN back (`quiver_redis_cluster_split_total`), none once the slot has moved. `what`
  // names the slot in the output.
  void expect_whole_lists_while_split(uint16_t slot, int reads, const std::string& what) {
    const std::pair<int, int> ends = reshard_ends(*cluster_, slot);
    const int from = ends.first;
    const int to = ends.second;
    ASSERT_NE(from, 0);
    ASSERT_NE(to, 0);
    const std::map<std::string, std::set<std::string>> before = read().tools;
    ASSERT_EQ(before.size(), ids_.size());
    EXPECT_EQ(metric("quiver_redis_cluster_split_total"), 0);

    auto keys_at = [&](int port) {
      RedisConnection c(cluster_->connect(port));
      return c ? run_argv(c.get(), {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).integer
               : -1;
    };
    int64_t at_source = 0, at_target = 0;
    std::vector<Answer> during;
    std::vector<int64_t> took_ms;
    testing::SlotMove move;
    move.batch = 1;
    move.pause_ms = 100;
    move.password = kPassword;
    move.while_migrating = [&] {
      at_source = keys_at(from);
      at_target = keys_at(to);
      for (int k = 0; k < reads; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        during.push_back(read());
        took_ms.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
      }
    };
    EXPECT_EQ(testing::move_slot(*cluster_, slot, from, to, move), "");
    EXPECT_EQ(master_and_replica(*cluster_, slot).first, to);
    EXPECT_GT(at_source, 0) << "split: keys left at the source";
    EXPECT_GT(at_target, 0) << "split: keys moved to the target";

    ASSERT_EQ(during.size(), static_cast<std::size_t>(reads));
    for (const Answer& a : during) {
      EXPECT_EQ(a.status, 200) << a.body;
      EXPECT_TRUE(a.problem.empty()) << a.problem;
      EXPECT_TRUE(a.failed.empty()) << a.failed;
      EXPECT_EQ(a.tools, before) << "the whole list, as before the move";
    }
    std::sort(took_ms.begin(), took_ms.end());
    std::cout << "[ split    ] " << what << ": " << at_source << " keys at the source, "
              << at_target << " at the target; reads while split: median "
              << took_ms[took_ms.size() / 2] << " ms, max " << took_ms.back() << " ms\n";
    EXPECT_LT(took_ms.back(), 5000) << "not waited out";
    const int64_t split = metric("quiver_redis_cluster_split_total");
    EXPECT_GE(split, reads) << "each read handed one TRYAGAIN back";
    std::cout << "[ cluster  ] split " << split << ", ASK "
              << metric("quiver_redis_cluster_ask_total") << ", retries "
              << metric("quiver_redis_cluster_retries_total") << "\n";
    // After the move, read as before (the script on the new owner).
    Answer after = read();
    EXPECT_EQ(after.status, 200);
    EXPECT_EQ(after.tools, before);
    EXPECT_EQ(metric("quiver_redis_cluster_split_total"), split) << "no split read once moved";
  }

  std::unique_ptr<RedisCluster> cluster_;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<testing::TestUpstreamHttp> http_;  // the per-member connection's upstream
  std::unique_ptr<AgentServe> agent_;
  httplib::Headers auth_;
  std::vector<std::string> ids_;
  std::map<std::string, std::string> controls_;
  std::atomic<bool> reading_{false};
  std::thread reader_;
  std::mutex mu_;
  std::vector<Answer> answers_;
};

// Every 200 answer of `answers` lists every connection with its manifest (a failed entry saying
// so is counted); the others are store errors (503). Returns how many failed entries were seen.
int check_answers(const std::vector<Answer>& answers, bool failures_allowed) {
  int failed = 0, errors = 0;
  for (const Answer& a : answers) {
    if (a.status == 200) {
      EXPECT_TRUE(a.problem.empty()) << a.problem;
      if (!a.failed.empty()) {
        ++failed;
        EXPECT_TRUE(failures_allowed) << "a failed entry: " << a.failed;
      }
      continue;
    }
    ++errors;
    EXPECT_TRUE(failures_allowed) << a.status << " " << a.body;
    EXPECT_EQ(a.status, 503) << a.body;
    EXPECT_NE(a.body.find("STORE_UNAVAILABLE"), std::string::npos) << a.body;
  }
  std::cout << "[ answers  ] " << answers.size() << " reads, " << errors << " non-200, " << failed
            << " with a failed entry\n";
  return failed;
}

// A graceful failover of a master serving some of the connections, then a master killed: the
// reads stay whole or fail as the store's failure, and stop failing once the cluster is whole; a
// manual refresh of a connection whose slot was on the killed master commits into v2.
TEST_F(RedisClusterV2FaultsTest, TheAgentWritingV2ServesThroughAFailoverAndACrashedMaster) {
  ASSERT_NO_FATAL_FAILURE(start_agent());
  const std::map<std::string, std::set<std::string>> before = read().tools;
  start_reader();
  std::this_thread::sleep_for(std::chrono::seconds(1));

  // (a) CLUSTER FAILOVER of the master of ids_[0]'s slot.
  auto [master_a, replica_a] = master_and_replica(*cluster_, connection_slot(ids_[0]));
  ASSERT_NE(replica_a, 0);
  ASSERT_TRUE(testing::fail_over_to(*cluster_, replica_a));
  std::this_thread::sleep_for(std::chrono::seconds(2));

  // (b) SIGKILL of another master, one serving a connection; its replica is promoted.
  std::string killed_id;
  int killed = 0, promoted = 0;
  for (const std::string& id : ids_) {
    auto [m, r] = master_and_replica(*cluster_, connection_slot(id));
    if (m != 0 && r != 0 && m != replica_a) {
      killed_id = id;
      killed = m;
      promoted = r;
      break;
    }
  }
  ASSERT_FALSE(killed_id.empty());
  ASSERT_TRUE(cluster_->wait_until_ok(30));  // the replicas in sync: nothing listed is lost
  cluster_->kill(killed);
  ASSERT_TRUE(wait_until([&] { return cluster_->role(promoted) == "master"; }, 60000));
  ASSERT_TRUE(cluster_->wait_until_ok(60));
  const auto whole = std::chrono::steady_clock::now();
  // Recovered: a whole answer after the cluster is whole.
  ASSERT_TRUE(wait_until(
      [&] {
        std::vector<Answer> all = answers();
        return std::any_of(all.begin(), all.end(), [&](const Answer& a) {
          return a.at > whole && a.status == 200 && a.problem.empty() && a.failed.empty();
        });
      },
      60000))
      << agent_->logs();
  std::this_thread::sleep_for(std::chrono::seconds(3));

  // A manual refresh of the connection whose slot was on the killed master: listed and
  // committed into v2 through the promoted master.
  std::vector<int> posted;
  EXPECT_TRUE(add_tool_and_refresh(killed_id, "after_kill", 60000, &posted)) << agent_->logs();
  EXPECT_NE(stored_v2_manifest(killed_id).find("after_kill"), std::string::npos)
      << stored_v2_manifest(killed_id);
  stop_reader();

  const std::vector<Answer> all = answers();
  check_answers(all, /*failures_allowed=*/true);
  // After recovery, every answer is whole.
  auto recovered = std::find_if(all.begin(), all.end(), [&](const Answer& a) {
    return a.at > whole && a.status == 200 && a.problem.empty() && a.failed.empty();
  });
  ASSERT_NE(recovered, all.end());
  for (auto it = recovered; it != all.end(); ++it) {
    EXPECT_EQ(it->status, 200) << it->body;
    EXPECT_TRUE(it->failed.empty()) << it->failed;
  }
  // What was listed is what is listed (plus the new tool).
  std::map<std::string, std::set<std::string>> now = all.back().tools;
  now[killed_id].erase("after_kill");
  EXPECT_EQ(now, before);
  const int64_t moved = metric("quiver_redis_cluster_moved_total");
  EXPECT_GT(moved, 0);
  std::cout << "[ cluster  ] MOVED " << moved << ", retries "
            << metric("quiver_redis_cluster_retries_total") << ", map refreshes "
            << metric("quiver_redis_cluster_map_refreshes_total") << "\n";
  EXPECT_EQ(agent_->logs().find(kPassword), std::string::npos);
}

// One connection's v2 slot moved to another master key by key, while the reader lists and that
// connection is refreshed again and again: every answer is whole, a refresh commits while the
// slot migrates (or right after), ASK is counted, TRYAGAIN never surfaces, and the final manifest
// is the upstream's.
TEST_F(RedisClusterV2FaultsTest, TheAgentWritingV2ServesAndRefreshesThroughAReshard) {
  ASSERT_NO_FATAL_FAILURE(start_agent());
  const std::string id = ids_[0];
  const uint16_t slot = connection_slot(id);
  const std::pair<int, int> ends = reshard_ends(*cluster_, slot);
  const int from = ends.first;
  const int to = ends.second;
  ASSERT_NE(from, 0);
  ASSERT_NE(to, 0);
  std::set<std::string> expected = tools_of(id);
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kTools));

  start_reader();
  std::atomic<bool> migrating{false};
  std::atomic<bool> refreshing{true};
  std::atomic<int> committed_while_moving{0};
  std::vector<int> posted;
  std::vector<std::string> added, lost;
  std::thread refresher([&] {
    for (int k = 0; refreshing; ++k) {
      const std::string tool = "moved_" + std::to_string(k);
      const bool during = migrating;
      if (add_tool_and_refresh(id, tool, 30000, &posted)) {
        if (during || migrating) ++committed_while_moving;
      } else {
        lost.push_back(tool);
      }
      added.push_back(tool);
    }
  });

  std::this_thread::sleep_for(std::chrono::seconds(1));
  testing::SlotMove move;
  move.batch = 1;
  move.pause_ms = 400;
  move.password = kPassword;
  migrating = true;
  const std::string moved = testing::move_slot(*cluster_, slot, from, to, move);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // "right after"
  migrating = false;
  EXPECT_EQ(moved, "");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  refreshing = false;
  refresher.join();
  stop_reader();

  EXPECT_EQ(master_and_replica(*cluster_, slot).first, to);
  check_answers(answers(), /*failures_allowed=*/false);
  EXPECT_TRUE(lost.empty()) << lost.size() << " refreshes never committed";
  EXPECT_GE(committed_while_moving.load(), 1);
  std::cout << "[ refreshes] " << added.size() << " tools added, " << committed_while_moving
            << " committed while the slot moved, " << posted.size() << " refresh requests\n";
  for (int status : posted) EXPECT_EQ(status, 202);
  const int64_t ask = metric("quiver_redis_cluster_ask_total");
  EXPECT_GT(ask, 0);
  std::cout << "[ cluster  ] ASK " << ask << ", MOVED "
            << metric("quiver_redis_cluster_moved_total") << ", retries "
            << metric("quiver_redis_cluster_retries_total") << "\n";
  // The final manifest is the upstream's: its first tools and every one added, in v2 on `to`.
  for (const std::string& t : added) expected.insert(t);
  EXPECT_EQ(tools_of(id), expected);
  const std::string stored = stored_v2_manifest(id);
  for (const std::string& t : added) EXPECT_NE(stored.find(t), std::string::npos) << t;
  {
    RedisConnection c(cluster_->connect(to));
    ASSERT_TRUE(c);
    EXPECT_EQ(run_argv(c.get(), {"EXISTS", *v2_keys().manifest(id, Principal::shared())}).integer,
              1);
  }
  const std::string logs = agent_->logs();
  EXPECT_EQ(logs.find("TRYAGAIN"), std::string::npos) << logs;
  EXPECT_EQ(logs.find(kPassword), std::string::npos);
}

// One connection's v2 slot held split, keys on both nodes (IMPORTING/MIGRATING, one key moved and
// the others not), for as long as the reads take: its read script runs on neither node (TRYAGAIN
// at the source while some keys are there, ASK then TRYAGAIN at the importing node), so the agent
// reads that connection key by key (shared/discovery_spread.h). Every read answers the whole list
// from Redis at once, as before the move; the split reads are counted on /metrics.
TEST_F(RedisClusterV2FaultsTest, TheAgentReadsAConnectionWhoseSlotIsSplitKeyByKey) {
  ASSERT_NO_FATAL_FAILURE(start_agent());
  expect_whole_lists_while_split(connection_slot(ids_[0]), 20, "connection slot");
}

// The member's slot `{default:m:alice}` (her grants, version, and her manifest, fence and gate of
// the per-member connection) held split, keys on both nodes, for as long as the reads take: the
// member's read script runs on neither node, so the agent reads her per-member data key by key
// between two GETs of her version (shared/discovery_spread.h). Every read is the whole list, the
// per-member manifest with it, as before the move: never a 503, never the budget waited out.
TEST_F(RedisClusterV2FaultsTest, TheAgentReadsAMemberWhoseSlotIsSplitKeyByKey) {
  ASSERT_NO_FATAL_FAILURE(start_agent(/*per_member=*/true));
  ASSERT_EQ(read().tools.count(kPerMemberId), 1u) << "alice's per-member manifest listed";
  expect_whole_lists_while_split(
      cluster_key_slot(*v2_keys().member_version(*Principal::member("alice"))), 10, "member slot");
}

}  // namespace
}  // namespace quiver
