// Benchmark (not a test): `tools/call echo` on server-everything (stdio), three ways, side by side
// in one run, round robin (one call of each way per round, so load and machine noise hit all three
// alike):
//   direct  UpstreamConnection::call on a session of its own: the upstream alone
//   agent   Agent::call_upstream: the agent's call path (grant and preference read from the store,
//           the pooled session of the principal), what the agent's /mcp hook runs
//   relay   the edge's Redis relay: the edge's two commands (call_enqueue.lua + BLPOP) sent from
//           here over one hiredis connection, an agent relay worker performing the call
// Prints p50 / p99 of each, and the hop each adds (agent − direct, relay − agent).
//
//   call_relay --everything JS --redis-port P [--n 1000] [--warmup 50]
#include "shared/call_relay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include "native-agent/base/config.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/mcp_calls.h"
#include "native-agent/upstream/upstream.h"
#include "shared/resp.h"

namespace {

using namespace quiver;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

RespValue to_resp(const redisReply* r) {
  if (r == nullptr) return RespValue::error("transport");
  switch (r->type) {
    case REDIS_REPLY_STRING:
      return RespValue::bulk_string(std::string(r->str, r->len));
    case REDIS_REPLY_STATUS:
      return RespValue::simple_string(std::string(r->str, r->len));
    case REDIS_REPLY_ERROR:
      return RespValue::error(std::string(r->str, r->len));
    case REDIS_REPLY_INTEGER:
      return RespValue::integer_value(r->integer);
    case REDIS_REPLY_ARRAY: {
      std::vector<RespValue> e;
      for (size_t i = 0; i < r->elements; ++i) e.push_back(to_resp(r->element[i]));
      return RespValue::array(std::move(e));
    }
    default:
      return RespValue::nil();
  }
}

RespValue run(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  for (const auto& s : argv) {
    a.push_back(s.data());
    l.push_back(s.size());
  }
  auto* r =
      static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(a.size()), a.data(), l.data()));
  RespValue v = to_resp(r);
  if (r != nullptr) freeReplyObject(r);
  return v;
}

struct Series {
  std::string name;
  std::vector<int64_t> us;
  int failures = 0;
  double pct(double p) const {
    if (us.empty()) return 0;
    std::vector<int64_t> s = us;
    std::sort(s.begin(), s.end());
    size_t i = std::min(s.size() - 1, static_cast<size_t>(p * static_cast<double>(s.size())));
    return static_cast<double>(s[i]) / 1000.0;
  }
};

std::string rid(uint64_t n) {
  char buf[65];
  std::snprintf(buf, sizeof buf, "%064llx", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string everything;
  int redis_port = 0, n = 1000, warmup = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--everything")) everything = argv[i + 1];
    if (!std::strcmp(argv[i], "--redis-port")) redis_port = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--n")) n = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
  }
  if (everything.empty() || redis_port == 0) {
    std::fprintf(stderr, "usage: call_relay --everything JS --redis-port P [--n N]\n");
    return 2;
  }
  const Json echo = {{"name", "echo"}, {"arguments", {{"message", "bench"}}}};

  // direct
  UpstreamConnection direct(UpstreamSpec::stdio("direct", "node", {everything, "stdio"}));

  // the agent, on Redis, one relay worker
  const std::string config_text =
      Json{{"mcpServers", {{"everything", {{"command", "node"}, {"args", {everything, "stdio"}}}}}},
           {"quiver",
            {{"redis", "redis://127.0.0.1:" + std::to_string(redis_port) + "/0"},
             {"data_dir", "/tmp/quiver-bench-call-relay"},
             {"grants", {{"alice", {"everything"}}}},
             {"runtime", {{"list_timeout_ms", 30000}, {"request_timeout_ms", 30000}}}}}}
          .dump();
  ConfigSources sources;
  sources.text = config_text;
  sources.origin = "call_relay.json";
  Result<AgentConfig> config = parse_config(sources);
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.error().message.c_str());
    return 1;
  }
  AgentOptions options = AgentOptions::on_demand();
  options.log_level = LogLevel::kWarn;
  options.call_relay_workers = 1;
  Result<std::unique_ptr<Agent>> agent = Agent::create(std::move(*config), std::move(options));
  if (!agent.ok() || !(*agent)->start().ok()) {
    std::fprintf(stderr, "the agent did not start\n");
    return 1;
  }
  Result<RedisKeys> keys = RedisKeys::create((*agent)->config().ns);
  redisContext* edge = redisConnect("127.0.0.1", redis_port);
  if (edge == nullptr || edge->err) {
    std::fprintf(stderr, "redis: cannot connect\n");
    return 1;
  }
  // on_demand() starts no relay workers: run one here, and keep call-agents alive.
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    int64_t marked = 0;
    while (!stop) {
      if (now_us() - marked > 1'000'000) {
        (void)(*agent)->mark_call_agent_alive();
        marked = now_us();
      }
      (*agent)->drain_relayed_calls_once(100);
    }
  });
  (void)(*agent)->mark_call_agent_alive();

  Series s_direct{"direct"}, s_agent{"agent"}, s_relay{"relay"};
  uint64_t next_rid = 1;
  auto one_direct = [&]() {
    int64_t t = now_us();
    auto r = direct.call("tools/call", echo, direct.now_ms() + 30000);
    int64_t d = now_us() - t;
    return std::make_pair(r.ok() && r->result.has_value(), d);
  };
  auto one_agent = [&]() {
    UpstreamCall c;
    c.connection_id = "everything";
    c.member_id = "alice";
    c.method = "tools/call";
    c.params = echo;
    int64_t t = now_us();
    auto r = (*agent)->call_upstream(c);
    int64_t d = now_us() - t;
    return std::make_pair(r.ok() && r->kind == RelayReply::Kind::kResult, d);
  };
  auto one_relay = [&]() {
    RelayRequest req;
    req.rid = rid(next_rid++);
    req.connection_id = "everything";
    req.member_id = "alice";
    req.method = "tools/call";
    req.params = echo;
    req.at_ms = system_clock_ms()();
    req.deadline_ms = req.at_ms + 30000;
    int64_t t = now_us();
    auto cmds = relay_call_commands(*keys, req, 30000);
    std::vector<RespValue> replies;
    for (const auto& cmd : *cmds) replies.push_back(run(edge, cmd));
    auto r = parse_relay_call_replies(replies);
    int64_t d = now_us() - t;
    return std::make_pair(r.ok() && r->kind == RelayReply::Kind::kResult, d);
  };
  for (int i = 0; i < warmup; ++i) {
    one_direct();
    one_agent();
    one_relay();
  }
  auto record = [](Series& series, std::pair<bool, int64_t> r) {
    if (r.first) {
      series.us.push_back(r.second);
    } else {
      ++series.failures;
    }
  };
  for (int i = 0; i < n; ++i) {
    record(s_direct, one_direct());
    record(s_agent, one_agent());
    record(s_relay, one_relay());
  }
  stop = true;
  worker.join();
  (*agent)->stop();
  redisFree(edge);

  std::printf("tools/call echo on server-everything (stdio), %d calls each, round robin\n", n);
  std::printf("%-8s %10s %10s %9s\n", "way", "p50 ms", "p99 ms", "failures");
  for (const Series* s : {&s_direct, &s_agent, &s_relay}) {
    std::printf("%-8s %10.3f %10.3f %9d\n", s->name.c_str(), s->pct(0.50), s->pct(0.99),
                s->failures);
  }
  std::printf("added by the agent's call path: p50 %+.3f ms, p99 %+.3f ms\n",
              s_agent.pct(0.5) - s_direct.pct(0.5), s_agent.pct(0.99) - s_direct.pct(0.99));
  std::printf("added by the edge relay (Redis): p50 %+.3f ms, p99 %+.3f ms\n",
              s_relay.pct(0.5) - s_agent.pct(0.5), s_relay.pct(0.99) - s_agent.pct(0.99));
  return 0;
}
