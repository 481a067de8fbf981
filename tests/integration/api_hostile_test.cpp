// The agent's HTTP API against hostile clients: the real ApiServer on a free loopback port in
// front of the real Agent (embedded SQLite, real MCP upstreams over stdio), spoken to over real
// sockets byte by byte. Each test is something a client did to the cpp-httplib 0.11.4 server that
// came before native-agent/api/http_front.h: stream 100 MB bodies it buffered, hold its workers
// with slow or idle connections, run unbounded connection tests, reach /metrics through a rebound
// DNS name, read the store's location from /healthz.
//
// Memory is the process's own peak resident set (VmHWM, reset through /proc/self/clear_refs before
// each attack): the server runs in this process, and the client side streams from one small
// buffer, so what grows is the server.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "native-agent/api/api_server.h"
#include "native-agent/base/config.h"
#include "native-agent/engine/agent.h"
#include "shared/caller_token.h"
#include "tests/support/agent_setup.h"
#include "tests/support/mcp_peers.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/

constexpr char kTokenKey[] = "test-caller-token-key-0123456789abcdef";
constexpr char kWebhookSecret[] = "test-webhook-secret-0123456789";
constexpr std::size_t kHundredMb = std::size_t{100} << 20;
// What a refused 100 MB stream may add to the peak resident set: the server keeps at most a
// bounded head and body per connection (tens of KiB); the rest is noise of a running process.
constexpr int64_t kFlatKb = 24 * 1024;

int64_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  }
  return -1;
}

// Resets VmHWM to the current VmRSS, so that VmHWM afterwards is the peak of what follows.
void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `head`, then `body_piece` over and over until `total` body bytes went or the server stopped
// taking them (closed, reset, or 10 s without room), reading whatever the server answers all the
// while; then reads until the server closes (at most 10 s). Returns everything the server sent.
std::string stream_attack(int port, const std::string& head, const std::string& body_piece,
                          std::size_t total) {
  int fd = connect_loopback(port);
  if (fd < 0) return "";
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string answer;
  std::string pending = head;
  std::size_t sent = 0;  // body bytes (after the head)
  std::size_t head_left = head.size();
  bool sending = true;
  bool open = true;
  auto last_progress = std::chrono::steady_clock::now();
  char buf[16384];
  while (open) {
    pollfd p{fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    int ready = ::poll(&p, 1, 200);
    auto now = std::chrono::steady_clock::now();
    if (now - last_progress > std::chrono::seconds(10)) break;
    if (ready <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        answer.append(buf, static_cast<std::size_t>(n));
        last_progress = now;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        open = false;
      }
    }
    if (sending && (p.revents & POLLOUT)) {
      if (pending.empty()) {
        if (sent >= total) {
          sending = false;
          continue;
        }
        pending = body_piece;
      }
      ssize_t n = ::send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
      if (n > 0) {
        pending.erase(0, static_cast<std::size_t>(n));
        std::size_t of_head = std::min(head_left, static_cast<std::size_t>(n));
        head_left -= of_head;
        sent += static_cast<std::size_t>(n) - of_head;
        last_progress = now;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        sending = false;  // reset or closed by the server: read what it said
      }
    }
  }
  ::close(fd);
  return answer;
}

// The statuses of the responses in `wire`, in order.
std::vector<int> statuses(const std::string& wire) {
  std::vector<int> out;
  for (std::size_t at = wire.find("HTTP/1.1 "); at != std::string::npos;
       at = wire.find("HTTP/1.1 ", at + 1)) {
    out.push_back(std::atoi(wire.c_str() + at + 9));
  }
  return out;
}

std::string error_code_in(const std::string& wire) {
  std::size_t body = wire.rfind("\r\n\r\n");
  if (body == std::string::npos) return "";
  Result<Json> j = parse_json(wire.substr(body + 4));
  if (!j.ok() || !j->is_object() || !j->contains("error")) return "";
  return (*j)["error"].value("code", "");
}

std::string gzip_of_zeros(std::size_t n) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY);
  std::string zeros(1 << 20, '\0');
  std::string out;
  char buf[65536];
  for (std::size_t done = 0; done < n; done += zeros.size()) {
    z.next_in = reinterpret_cast<Bytef*>(zeros.data());
    z.avail_in = static_cast<uInt>(zeros.size());
    int flush = done + zeros.size() >= n ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      deflate(&z, flush);
      out.append(buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return out;
}

class HostileApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Hundreds of sockets on both ends live in this one process.
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = std::max<rlim_t>(files.rlim_cur, std::min<rlim_t>(files.rlim_max, 8192));
    ::setrlimit(RLIMIT_NOFILE, &files);

    Json servers = {
        {"t",
         {{"command", "node"},
          {"args",
           {test_upstream_js(), "stdio", "--quiet", "--tools", "3", "--stats-file",
            dir_.path("t.stats")}}}},
        {"hang",
         {{"command", "node"}, {"args", {test_upstream_js(), "stdio", "--quiet", "--hang"}}}},
    };
    Json quiver = {
        {"data_dir", dir_.path("data")},
        {"listen", "127.0.0.1:0"},
        {"members", {"alice"}},
        {"grants", {{"alice", {"t", "hang"}}}},
        {"caller_token_keys", {{"k1", {{"env", "TEST_TOKEN_KEY"}}}}},
        {"webhook_secrets", {{"ci", {{"env", "TEST_WEBHOOK_SECRET"}}}}},
        {"runtime", {{"list_timeout_ms", 4000}}},
        {"mcp_allowed_origins", {"https://app.example.com"}},
    };
    Result<AgentConfig> config = parse_test_config(
        Json{{"mcpServers", servers}, {"quiver", quiver}}, "api_hostile_test.json",
        {{"TEST_TOKEN_KEY", kTokenKey}, {"TEST_WEBHOOK_SECRET", kWebhookSecret}}, dir_.root());
    ASSERT_TRUE(config.ok()) << config.error().message;
    AgentOptions options = AgentOptions::on_demand();
    options.log_sink = [](const std::string&) {};
    Result<std::unique_ptr<Agent>> agent = Agent::create(*config, options);
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    agent_ = std::move(*agent);
    ASSERT_TRUE(agent_->start().ok());
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (agent_) agent_->stop();
  }

  void start(const std::function<void(ApiServerOptions&)>& adjust = {}) {
    ApiServerOptions options = api_server_options(agent_->config());
    if (adjust) adjust(options);
    server_ = std::make_unique<ApiServer>(*agent_, options);
    Status started = server_->start();
    ASSERT_TRUE(started.ok()) << started.error().message;
  }

  std::string token() {
    MintOptions o;
    o.ns = agent_->config().ns;
    return *mint_caller_token("alice", kTokenKey, "k1", system_clock_ms()(), 3'600'000, o);
  }
  httplib::Headers bearer() { return {{"Authorization", "Bearer " + token()}}; }
  std::string host() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  // Runs one attack and checks what the server answered last and what it cost in memory.
  void expect_refused_flat(const std::string& what, const std::string& head,
                           const std::string& piece, std::size_t total, int status,
                           const std::string& code) {
    const int64_t before = status_kb("VmRSS");
    reset_peak_rss();
    std::string wire = stream_attack(server_->port(), head, piece, total);
    const int64_t peak = status_kb("VmHWM");
    std::vector<int> got = statuses(wire);
    ASSERT_FALSE(got.empty()) << what << ": no answer";
    EXPECT_EQ(got.back(), status) << what << "\n" << wire.substr(0, 400);
    EXPECT_EQ(error_code_in(wire), code) << what;
    EXPECT_LT(peak - before, kFlatKb)
        << what << ": the peak resident set grew by " << (peak - before) / 1024 << " MiB";
    // And the server serves the next client as before.
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10);
    auto r = c.Get("/healthz");
    ASSERT_TRUE(r) << what;
    EXPECT_EQ(r->status, 200) << what;
  }

  TempDir dir_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(HostileApiTest, UnboundedBodiesAreRefusedBeforeTheyAreRead) {
  start();
  const std::string post = "POST /v1/webhooks/refresh HTTP/1.1\r\nHost: " + host() + "\r\n";
  const std::string mb(64 * 1024, 'x');
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", mb.size());
  const std::string chunk = size_line + mb + "\r\n";

  expect_refused_flat("a chunked body", post + "Transfer-Encoding: chunked\r\n\r\n", chunk,
                      kHundredMb, 413, "PAYLOAD_TOO_LARGE");
  expect_refused_flat("a declared length", post + "Content-Length: 104857600\r\n\r\n", mb,
                      kHundredMb, 413, "PAYLOAD_TOO_LARGE");
  // Without a length the body is empty (the webhook is answered), and what follows is read as
  // the next request line: refused at its bound.
  expect_refused_flat("a body without a length", post + "\r\n", mb, kHundredMb, 414,
                      "URI_TOO_LONG");
  // 60 MB of zeros, gzipped: under the 64 KiB body bound on the wire, never inflated.
  const std::string bomb = gzip_of_zeros(std::size_t{60} << 20);
  ASSERT_LT(bomb.size(), 64u * 1024);
  expect_refused_flat("a gzip body",
                      post + "Content-Encoding: gzip\r\nContent-Length: " +
                          std::to_string(bomb.size()) + "\r\n\r\n" + bomb,
                      mb, 0, 415, "UNSUPPORTED_MEDIA_TYPE");
  expect_refused_flat("a br body in chunks",
                      post + "Content-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n", chunk,
                      kHundredMb, 415, "UNSUPPORTED_MEDIA_TYPE");
  expect_refused_flat("a header line without a newline",
                      "GET /healthz HTTP/1.1\r\nHost: " + host() + "\r\nX-Long: ", mb, kHundredMb,
                      431, "HEADERS_TOO_LARGE");
}

TEST_F(HostileApiTest, TenRequestsWithAMillionHeadersLeaveNothingResident) {
  start();
  std::string million;
  million.reserve(std::size_t{8} << 20);
  for (int i = 0; i < 1'000'000; ++i) million += "X-H: v\r\n";
  million += "\r\n";
  const int64_t before = status_kb("VmRSS");
  reset_peak_rss();
  for (int i = 0; i < 10; ++i) {
    std::string wire = stream_attack(
        server_->port(), "GET /healthz HTTP/1.1\r\nHost: " + host() + "\r\n", million, 1);
    std::vector<int> got = statuses(wire);
    ASSERT_EQ(got.size(), 1u) << wire.substr(0, 300);
    EXPECT_EQ(got[0], 431);
    EXPECT_EQ(error_code_in(wire), "HEADERS_TOO_LARGE");
  }
  // The client's own 8 MB of headers is resident in this process: allowed for.
  EXPECT_LT(status_kb("VmHWM") - before, kFlatKb + 8 * 1024);
}

TEST_F(HostileApiTest, SlowAndIdleClientsLeaveHealthzAnswering) {
  start([](ApiServerOptions& o) { o.header_timeout_ms = 4'000; });
  // 500 idle sockets (more than one peer may hold: the oldest idle ones make room) ...
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) {
    int fd = connect_loopback(server_->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // ... and 20 clients sending their request a byte a second.
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: " + host() + "\r\n\r\n";
  std::vector<int> slow;
  for (int i = 0; i < 20; ++i) {
    int fd = connect_loopback(server_->port());
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (std::size_t at = 0; at < request.size() && !stop; ++at) {
      for (int fd : slow) (void)::send(fd, &request[at], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int i = 0; i < 10 && !stop; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  struct StopTrickle {
    std::atomic<bool>& stop;
    std::thread& t;
    ~StopTrickle() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } stop_on_exit{stop, trickle};
  for (int i = 0; i < 5; ++i) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_connection_timeout(1);
    c.set_read_timeout(1);
    auto r = c.Get("/healthz");
    ASSERT_TRUE(r) << "attempt " << i << ": no answer within a second";
    EXPECT_EQ(r->status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // Past the per-peer cap (256), the oldest idle connections made room.
  auto closed_idle = [&] {
    int closed = 0;
    for (int fd : idle) {
      pollfd p{fd, POLLIN, 0};
      char b;
      if (::poll(&p, 1, 0) == 1 && ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) ++closed;
    }
    return closed;
  };
  EXPECT_TRUE(wait_until([&] { return closed_idle() >= 500 - 256; }, 10'000)) << closed_idle();
  // A slow client does not get to finish its head: it is answered 408 at the head deadline.
  pollfd p{slow[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 15'000), 1);
  char buf[512] = {0};
  ssize_t n = ::recv(slow[0], buf, sizeof buf - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(statuses(std::string(buf, static_cast<std::size_t>(n))), std::vector<int>{408});
  stop = true;
  trickle.join();
  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);
}

TEST_F(HostileApiTest, BusyWorkersShedWith503AtOnce) {
  start([](ApiServerOptions& o) {
    o.worker_threads = 1;
    o.max_queued_requests = 1;
  });
  // Two connection tests against an upstream that never lists: they hold the only worker for
  // the listing deadline (4 s) each, one after the other.
  std::vector<std::thread> held;
  struct Joiner {
    std::vector<std::thread>& threads;
    ~Joiner() {
      for (std::thread& t : threads) t.join();
    }
  } join_on_exit{held};
  for (int i = 0; i < 2; ++i) {
    held.emplace_back([&] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(30);
      (void)c.Post("/v1/mcp-connections/hang/test", bearer(), "", "application/json");
    });
  }
  // Whatever order the requests arrive in, while a test holds the worker the queue fills (with
  // the second test, or a health check that gave up waiting) and the next request is shed.
  httplib::Response shed;
  ASSERT_TRUE(wait_until(
      [&] {
        httplib::Client probe("127.0.0.1", server_->port());
        probe.set_read_timeout(1);
        auto r = probe.Get("/healthz");
        if (r) shed = *r;
        return r && r->status == 503;
      },
      20'000));
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(30);
  EXPECT_NE(shed.body.find("\"OVERLOADED\""), std::string::npos);
  EXPECT_EQ(shed.get_header_value("Retry-After"), "1");
  EXPECT_EQ(shed.get_header_value("Connection"), "close");
  for (std::thread& t : held) t.join();
  held.clear();
  // Once the worker is free again, /metrics answers and counts what was shed. Health checks
  // whose client gave up may still stand in the queue (the server answers them, to no one), so
  // "free again" is waited for, not assumed at the moment the connection tests return.
  httplib::Response m;
  ASSERT_TRUE(wait_until(
      [&] {
        auto r = c.Get("/metrics");
        if (r) m = *r;
        return r && r->status == 200;
      },
      10'000));
  EXPECT_EQ(m.body.find("quiver_api_shed_total 0\n"), std::string::npos);
  EXPECT_NE(m.body.find("quiver_api_shed_total "), std::string::npos);
}

TEST_F(HostileApiTest, ConnectionTestsAreBoundedWith503Overloaded) {
  start([](ApiServerOptions& o) { o.max_concurrent_tests = 1; });
  // Two tests of an upstream that never lists, at once: each would hold its worker until the
  // listing deadline (4 s); with one allowed, whichever comes second is told to retry at once.
  std::vector<std::string> answers(2);
  std::vector<int> statuses_seen(2, 0);
  std::vector<std::thread> callers;
  for (int i = 0; i < 2; ++i) {
    callers.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(30);
      auto r = c.Post("/v1/mcp-connections/hang/test", bearer(), "", "application/json");
      if (r) {
        answers[i] = r->body;
        statuses_seen[i] = r->status;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  int overloaded = 0;
  for (int i = 0; i < 2; ++i) {
    if (answers[i].find("\"OVERLOADED\"") != std::string::npos) {
      ++overloaded;
      EXPECT_EQ(statuses_seen[i], 503);
    }
  }
  EXPECT_EQ(overloaded, 1) << answers[0] << "\n" << answers[1];
  // With the slot free again, a test runs.
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(30);
  auto r = c.Post("/v1/mcp-connections/t/test", bearer(), "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(HostileApiTest, AHostThatIsNotThisAgentIsRefused) {
  start();
  const std::string port = std::to_string(server_->port());
  auto ask = [&](const std::string& host_header) {
    return stream_attack(
        server_->port(),
        "GET /metrics HTTP/1.1\r\nHost: " + host_header + "\r\nConnection: close\r\n\r\n", "", 0);
  };
  for (const std::string& rebound :
       std::vector<std::string>{"attacker.example:" + port, "attacker.example",
                                "localhost.attacker.example", "127.0.0.1.nip.io:" + port}) {
    std::string wire = ask(rebound);
    EXPECT_EQ(statuses(wire), std::vector<int>{421}) << rebound;
    EXPECT_EQ(error_code_in(wire), "MISDIRECTED_REQUEST") << rebound;
    EXPECT_EQ(wire.find("quiver_"), std::string::npos) << rebound;
  }
  for (const std::string& ours : std::vector<std::string>{
           "127.0.0.1:" + port, "127.0.0.1", "localhost:" + port, "LOCALHOST", "[::1]:" + port}) {
    EXPECT_EQ(statuses(ask(ours)), std::vector<int>{200}) << ours;
  }
}

// A web page that reached the agent under a loopback Host (so the Host check passed) still names
// its own origin: /mcp answers a foreign one 403 before reading the token or the body, as the
// edge does (the transport's DNS rebinding MUST). Loopback pages, the configured origins and
// clients that send no Origin (every client that is not a web page) are served.
TEST_F(HostileApiTest, McpRefusesAForeignOrigin) {
  start();
  const std::string ping = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  auto post = [&](const httplib::Headers& extra) {
    std::string head = "POST /mcp HTTP/1.1\r\nHost: " + host() +
                       "\r\nContent-Type: application/json\r\n"
                       "Accept: application/json, text/event-stream\r\n"
                       "MCP-Protocol-Version: 2025-06-18\r\n"
                       "Authorization: Bearer " +
                       token() + "\r\nConnection: close\r\n";
    for (const auto& [name, value] : extra) head += name + ": " + value + "\r\n";
    head += "Content-Length: " + std::to_string(ping.size()) + "\r\n\r\n" + ping;
    return stream_attack(server_->port(), head, "", 0);
  };
  for (const httplib::Headers& foreign : std::vector<httplib::Headers>{
           {{"Origin", "http://attacker.example"}},
           {{"Origin", "null"}},
           {{"Origin", "http://127.0.0.1.nip.io"}},
           {{"Origin", "https://app.example.com.attacker.example"}},
           {{"Origin", "http://localhost:3000"}, {"Origin", "http://attacker.example"}}}) {
    std::string wire = post(foreign);
    EXPECT_EQ(statuses(wire), std::vector<int>{403}) << foreign.begin()->second;
    EXPECT_EQ(error_code_in(wire), "FORBIDDEN") << foreign.begin()->second;
    EXPECT_EQ(wire.find("\"result\""), std::string::npos);
  }
  for (const httplib::Headers& ours :
       std::vector<httplib::Headers>{{},
                                     {{"Origin", "http://localhost:3000"}},
                                     {{"Origin", "http://127.0.0.1"}},
                                     {{"Origin", "http://[::1]:5173"}},
                                     {{"Origin", "HTTPS://APP.example.com"}}}) {
    std::string wire = post(ours);
    const std::string shown = ours.empty() ? "(none)" : ours.begin()->second;
    EXPECT_EQ(statuses(wire), std::vector<int>{200}) << shown << "\n" << wire.substr(0, 400);
    EXPECT_NE(wire.find("\"result\":{}"), std::string::npos) << shown;
  }
}

// A caller that leaves mid-call (it closes its socket: a FIN) has the call cancelled upstream at
// once (the upstream is told: notifications/cancelled), long before the call's deadline; the
// agent serves the next caller as before.
TEST_F(HostileApiTest, ACallerThatLeavesMidCallHasItCancelledUpstream) {
  start();
  const std::string stats = dir_.path("t.stats");
  auto counted = [&](const char* what) {
    const Json now = read_stats(stats);
    const Json* calls = json_field(now, "calls");
    return calls != nullptr ? json_int(*calls, what).value_or(0) : 0;
  };
  const std::string call =
      R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t__tool_1",)"
      R"("arguments":{"sleep_ms":60000}}})";
  const std::string head = "POST /mcp HTTP/1.1\r\nHost: " + host() +
                           "\r\nContent-Type: application/json\r\n"
                           "Accept: application/json, text/event-stream\r\n"
                           "MCP-Protocol-Version: 2025-06-18\r\nAuthorization: Bearer " +
                           token() + "\r\nContent-Length: " + std::to_string(call.size()) +
                           "\r\n\r\n";
  const int fd = connect_loopback(server_->port());
  ASSERT_GE(fd, 0);
  // Not inherited by the upstream the call starts (this process is the agent too): closing it
  // here must close the connection.
  ASSERT_EQ(::fcntl(fd, F_SETFD, FD_CLOEXEC), 0);
  const std::string request = head + call;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  // The upstream is working on it (a 60 s sleep), then the caller leaves.
  ASSERT_TRUE(wait_until(
      [&] {
        const Json now = read_stats(stats);
        const Json* called = json_field(now, "called_tools");
        return called != nullptr && *called == Json::array({"tool_1"});
      },
      30000))
      << read_stats(stats).dump();
  EXPECT_EQ(counted("cancelled"), 0);
  ::close(fd);
  EXPECT_TRUE(wait_until([&] { return counted("cancelled") == 1; }, 20000))
      << read_stats(stats).dump();
  // The next caller is served.
  const std::string ping = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  std::string wire = stream_attack(
      server_->port(),
      "POST /mcp HTTP/1.1\r\nHost: " + host() +
          "\r\nContent-Type: application/json\r\nAccept: application/json, "
          "text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nAuthorization: Bearer " +
          token() + "\r\nConnection: close\r\nContent-Length: " + std::to_string(ping.size()) +
          "\r\n\r\n" + ping,
      "", 0);
  EXPECT_EQ(statuses(wire), std::vector<int>{200}) << wire.substr(0, 300);
}

TEST_F(HostileApiTest, HealthzShowsTheStoreOnlyToACaller) {
  start();
  httplib::Client c("127.0.0.1", server_->port());
  auto r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ok"})");
  EXPECT_EQ(r->body.find(dir_.root()), std::string::npos);
  r = c.Get("/healthz", {{"Authorization", "Bearer not-a-token"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, R"({"status":"ok"})");
  r = c.Get("/healthz", bearer());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(dir_.root()), std::string::npos) << r->body;  // the SQLite path
}

}  // namespace
}  // namespace quiver
