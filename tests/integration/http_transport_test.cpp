// The Streamable HTTP transport against real peers on 127.0.0.1: server-everything (the MCP
// reference server), supergateway in front of server-memory (real session expiry), and
// tests/peers/http-test-peer.cjs for what real servers do not do on demand (hang, drip, garble,
// oversize, echo secrets, close a stream early). Every peer is its own process group, killed and
// reaped in teardown.
#include "native-agent/upstream/http_transport.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/json.h"
#include "shared/jsonrpc.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"

extern char** environ;

namespace quiver {
namespace {

using Clock = std::chrono::steady_clock;

int64_t elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

using testing::node_modules;
using testing::peers_dir;
using testing::read_file;

// A peer process in its own process group. stdout goes to a pipe (read_line) or to `log_path`.
class PeerProcess {
 public:
  PeerProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env_extra,
              const std::string& log_path, bool pipe_stdout) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      bool overridden = false;
      for (const std::string& x : env_extra) {
        if (entry.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0) overridden = true;
      }
      if (!overridden) env.push_back(entry);
    }
    env.insert(env.end(), env_extra.begin(), env_extra.end());
    std::vector<char*> argv_c;
    for (const std::string& a : argv) argv_c.push_back(const_cast<char*>(a.c_str()));
    argv_c.push_back(nullptr);
    std::vector<char*> env_c;
    for (const std::string& e : env) env_c.push_back(const_cast<char*>(e.c_str()));
    env_c.push_back(nullptr);

    int fds[2] = {-1, -1};
    if (pipe_stdout && ::pipe2(fds, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    std::string log = log_path.empty() ? "/dev/null" : log_path;
    if (pipe_stdout) {
      posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
      posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                       0644);
    } else {
      posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                       0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    }
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, argv_c[0], &actions, &attr, argv_c.data(), env_c.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (pipe_stdout) {
      ::close(fds[1]);
      out_fd_ = fds[0];
    }
    if (rc == 0) pid_ = pid;
  }
  ~PeerProcess() { stop(); }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  bool running() const { return pid_ > 0; }

  // One line of the peer's stdout ("" on timeout or EOF).
  std::string read_line(int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      std::size_t nl = buffered_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return line;
      }
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0 || out_fd_ < 0) return "";
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) return "";
      buffered_.append(buf, static_cast<std::size_t>(n));
    }
  }

  // Kills the peer's process group and the groups of its direct children (supergateway starts
  // each stdio server detached, in a group of its own), then reaps the peer. Test peers hold no
  // state worth a graceful exit, and supergateway's takes two seconds.
  void stop() {
    if (pid_ > 0) {
      testing::kill_child_groups(pid_);
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (out_fd_ >= 0) {
      ::close(out_fd_);
      out_fd_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffered_;
};

bool wait_for_port(int port, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (testing::loopback_port_open(port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

std::string temp_file(const char* stem) {
  std::string path = std::string("/tmp/") + stem + "-XXXXXX";
  int fd = ::mkstemp(path.data());
  if (fd >= 0) ::close(fd);
  return path;
}

// Raw JSON-RPC over a transport: what the MCP session will do, by hand.
class Rpc {
 public:
  explicit Rpc(HttpTransport& t) : t_(t) {}

  Result<Json> call(const std::string& method, const Json& params, int64_t timeout_ms = 3000) {
    int64_t id = next_id_++;
    Status st = t_.send(encode_request(id, method, params), timeout_ms);
    if (!st.ok()) return st.error();
    auto got = t_.receive(0);
    if (!got.ok()) return got.error();
    std::optional<Json> response;
    for (const TransportMessage& m : *got) {
      auto j = parse_json(m.text);
      if (!j.ok()) return j.error();
      if (j->is_object() && j->contains("id") && (*j)["id"] == Json(id) && !j->contains("method")) {
        response = *j;
      } else {
        others.push_back(*j);
      }
    }
    if (!response) return Error(ErrorCode::kInvalidReply, "no response to " + method);
    return *response;
  }

  Status notify(const std::string& method, const Json& params = Json()) {
    return t_.send(encode_notification(method, params), 3000);
  }

  // Waits until a message with `method` arrived (searching what came before, too).
  bool wait_for(const std::string& method, int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      for (const Json& j : others) {
        if (j.is_object() && j.value("method", "") == method) return true;
      }
      int64_t left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      auto got = t_.receive(left);
      if (!got.ok()) return false;
      for (const TransportMessage& m : *got) {
        auto j = parse_json(m.text);
        if (j.ok()) others.push_back(*j);
      }
    }
  }

  std::vector<Json> others;

 private:
  HttpTransport& t_;
  int64_t next_id_ = 1;
};

Json initialize_params(const char* version = "2025-11-25") {
  return Json{{"protocolVersion", version},
              {"capabilities", Json::object()},
              {"clientInfo", {{"name", "quiver-test"}, {"version", "0.0.0"}}}};
}

std::unique_ptr<HttpTransport> make_transport(HttpTransportOptions options) {
  auto t = HttpTransport::create(std::move(options));
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(*t) : nullptr;
}

HttpTransportOptions loopback(const std::string& url) {
  HttpTransportOptions o;
  o.url = url;
  o.allow_private_addresses = true;
  return o;
}

// Initializes, tells the transport the version, and optionally opens the GET stream before
// `notifications/initialized` (server-everything announces its late tools right after it).
void handshake(HttpTransport& t, Rpc& rpc, bool open_stream, bool* stream_open = nullptr) {
  auto init = rpc.call("initialize", initialize_params());
  ASSERT_TRUE(init.ok()) << init.error().message;
  ASSERT_TRUE(init->contains("result")) << init->dump();
  EXPECT_EQ((*init)["result"].value("protocolVersion", ""), "2025-11-25");
  t.set_protocol_version("2025-11-25");
  if (open_stream) {
    auto opened = t.open_notification_stream(3000);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    if (stream_open != nullptr) *stream_open = *opened;
  }
  Status st = rpc.notify("notifications/initialized");
  ASSERT_TRUE(st.ok()) << st.error().message;
}

std::size_t list_size(const Result<Json>& reply, const char* key) {
  if (!reply.ok() || !reply->contains("result")) return 0;
  const Json& r = (*reply)["result"];
  return r.contains(key) && r[key].is_array() ? r[key].size() : 0;
}

// ---- server-everything ------------------------------------------------------------------------

class ServerEverythingHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    port_ = testing::free_loopback_port();
    log_ = temp_file("quiver-everything-log");
    peer_ =
        new PeerProcess({"node", "-r", peers_dir() + "/loopback-only.cjs",
                         node_modules() + "/@modelcontextprotocol/server-everything/dist/index.js",
                         "streamableHttp"},
                        {"PORT=" + std::to_string(port_)}, log_, /*pipe_stdout=*/false);
    up_ = peer_->running() && wait_for_port(port_, 15000);
  }
  static void TearDownTestSuite() {
    delete peer_;
    peer_ = nullptr;
    std::remove(log_.c_str());
  }
  void SetUp() override {
    ASSERT_TRUE(up_) << "server-everything did not start; run scripts/setup.sh";
  }

  static std::string url() { return "http://127.0.0.1:" + std::to_string(port_) + "/mcp"; }

  static inline PeerProcess* peer_ = nullptr;
  static inline int port_ = 0;
  static inline bool up_ = false;
  static inline std::string log_;
};

TEST_F(ServerEverythingHttp, ListsEverythingAndHearsListChangedOnTheGetStream) {
  auto t = make_transport(loopback(url()));
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  EXPECT_FALSE(t->has_session());
  bool stream_open = false;
  handshake(*t, rpc, /*open_stream=*/true, &stream_open);
  EXPECT_TRUE(t->has_session());
  EXPECT_TRUE(stream_open) << "server-everything offers a GET stream";

  EXPECT_EQ(list_size(rpc.call("tools/list", Json::object()), "tools"), 13u);
  EXPECT_EQ(list_size(rpc.call("resources/list", Json::object()), "resources"), 7u);
  EXPECT_EQ(list_size(rpc.call("resources/templates/list", Json::object()), "resourceTemplates"),
            2u);
  EXPECT_EQ(list_size(rpc.call("prompts/list", Json::object()), "prompts"), 4u);

  EXPECT_TRUE(rpc.wait_for("notifications/tools/list_changed", 3000))
      << "server-everything registers tools after initialized and says so on the GET stream";
  std::string description = t->describe();
  EXPECT_NE(description.find("in a session"), std::string::npos) << description;
  EXPECT_NE(description.find("protocol 2025-11-25"), std::string::npos) << description;

  auto before = Clock::now();
  t->close();
  EXPECT_LT(elapsed_ms(before), 2500);
  // The DELETE reached the server: it logs the termination of the session.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  while (read_file(log_).find("session termination request") == std::string::npos &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(read_file(log_).find("session termination request"), std::string::npos);
  Status after = t->send(encode_request(99, "tools/list", Json::object()), 1000);
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.error().message.find("closed"), std::string::npos);
}

TEST_F(ServerEverythingHttp, UnknownSessionIdIsSessionExpired) {
  HttpTransportOptions o = loopback(url());
  o.session_id = "00000000-dead-beef-0000-000000000000";
  auto t = make_transport(o);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->has_session());
  Status st = t->send(encode_request(1, "tools/list", Json::object()), 3000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kTransport);
  EXPECT_EQ(st.error().message.rfind("session expired", 0), 0u) << st.error().message;
  EXPECT_NE(st.error().message.find("HTTP 400"), std::string::npos) << st.error().message;
  EXPECT_EQ(st.error().message.find(o.session_id), std::string::npos) << "session ids are secret";
  EXPECT_TRUE(t->session_expired());
  EXPECT_FALSE(t->has_session());
  // The transport is finished: everything repeats the error, nothing is retried.
  Status again = t->send(encode_request(2, "tools/list", Json::object()), 3000);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message.rfind("session expired", 0), 0u);
  auto received = t->receive(0);
  ASSERT_FALSE(received.ok());
  EXPECT_EQ(received.error().message.rfind("session expired", 0), 0u);
  EXPECT_NE(t->describe().find("session expired"), std::string::npos);
}

TEST_F(ServerEverythingHttp, UrlGuardRefusesLoopbackUnlessAllowed) {
  HttpTransportOptions o;
  o.url = url();
  auto t = make_transport(o);
  ASSERT_NE(t, nullptr);
  Status st = t->send(encode_request(1, "initialize", initialize_params()), 2000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.error().message.find("loopback"), std::string::npos) << st.error().message;
  EXPECT_FALSE(t->has_session());
  auto opened = t->open_notification_stream(1000);
  EXPECT_FALSE(opened.ok());
}

// ---- supergateway: sessions that really expire -----------------------------------------------

TEST(SupergatewayHttp, IdleSessionExpiresWith404) {
  int port = testing::free_loopback_port();
  std::string memory = temp_file("quiver-memory") + ".jsonl";
  std::string stdio_cmd =
      "node " + node_modules() + "/@modelcontextprotocol/server-memory/dist/index.js";
  PeerProcess gateway(
      {"node", "-r", peers_dir() + "/loopback-only.cjs",
       node_modules() + "/supergateway/dist/index.js", "--stdio", stdio_cmd, "--outputTransport",
       "streamableHttp", "--stateful", "--sessionTimeout", "500", "--port", std::to_string(port)},
      {"MEMORY_FILE_PATH=" + memory}, "", /*pipe_stdout=*/false);
  ASSERT_TRUE(gateway.running());
  ASSERT_TRUE(wait_for_port(port, 10000)) << "supergateway did not start";

  auto t = make_transport(loopback("http://127.0.0.1:" + std::to_string(port) + "/mcp"));
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  handshake(*t, rpc, /*open_stream=*/false);
  EXPECT_TRUE(t->has_session());
  EXPECT_EQ(list_size(rpc.call("tools/list", Json::object()), "tools"), 9u);

  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // past --sessionTimeout 500
  auto expired = rpc.call("tools/list", Json::object());
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.error().code, ErrorCode::kTransport);
  EXPECT_EQ(expired.error().message.rfind("session expired", 0), 0u) << expired.error().message;
  EXPECT_NE(expired.error().message.find("HTTP 404"), std::string::npos);
  EXPECT_TRUE(t->session_expired());

  // The owner re-initializes on a fresh transport, and that works.
  auto fresh = make_transport(loopback("http://127.0.0.1:" + std::to_string(port) + "/mcp"));
  ASSERT_NE(fresh, nullptr);
  Rpc again(*fresh);
  handshake(*fresh, again, /*open_stream=*/false);
  EXPECT_EQ(list_size(again.call("tools/list", Json::object()), "tools"), 9u);
  fresh->close();
  std::remove(memory.c_str());
}

// ---- the controllable test peer ---------------------------------------------------------------

constexpr const char* kBearer = "Bearer sk-test-0123456789abcdef-SECRET";
constexpr const char* kApiKey = "key-ABCDEFGH-987654321-SECRET";

class TestPeerHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    peer_ = new PeerProcess(
        {"node", peers_dir() + "/http-test-peer.cjs"},
        {std::string("PEER_EXPECT_AUTH=") + kBearer, std::string("PEER_EXPECT_KEY=") + kApiKey}, "",
        /*pipe_stdout=*/true);
    std::string line = peer_->read_line(10000);
    auto j = parse_json(line);
    if (j.ok() && j->is_object()) port_ = j->value("port", 0);
  }
  static void TearDownTestSuite() {
    delete peer_;
    peer_ = nullptr;
  }
  void SetUp() override { ASSERT_GT(port_, 0) << "the test peer did not start"; }

  static std::string url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  static HttpTransportOptions with_secrets(const std::string& path) {
    HttpTransportOptions o = loopback(url(path));
    o.secret_headers = {{"Authorization", kBearer}, {"X-Api-Key", kApiKey}};
    return o;
  }
  static Json stats() {
    httplib::Client c("127.0.0.1", port_);
    auto res = c.Get("/stats");
    if (!res || res->status != 200) return Json();
    auto j = parse_json(res->body);
    return j.ok() ? *j : Json();
  }
  // Sends one request and returns the error (or ok).
  static Status one_request(HttpTransport& t, int64_t timeout_ms) {
    return t.send(encode_request(7, "tools/list", Json::object()), timeout_ms);
  }
  // The texts of the messages `t` holds now (none, and a failure, when receive() fails).
  static std::vector<std::string> received_texts(HttpTransport& t) {
    auto got = t.receive(0);
    EXPECT_TRUE(got.ok()) << got.error().message;
    std::vector<std::string> texts;
    if (got.ok()) {
      for (const TransportMessage& m : *got) texts.push_back(m.text);
    }
    return texts;
  }

  static inline PeerProcess* peer_ = nullptr;
  static inline int port_ = 0;
};

TEST_F(TestPeerHttp, SendsSecretsSessionAndProtocolHeaders) {
  auto t = make_transport(with_secrets("/mcp"));
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  handshake(*t, rpc, /*open_stream=*/false);
  auto seen = rpc.call("tools/list", Json::object());
  ASSERT_TRUE(seen.ok()) << seen.error().message;
  const Json& r = (*seen)["result"];
  EXPECT_EQ(r.value("sessionId", ""), "peer-session-1");
  EXPECT_EQ(r.value("protocolVersion", ""), "2025-11-25");
  EXPECT_TRUE(r.value("authorization", false)) << "the bearer token was sent";
  EXPECT_TRUE(r.value("apiKey", false)) << "the API key was sent";
  EXPECT_EQ(r.value("userAgent", ""), "quiver-agent");
  EXPECT_EQ(r.value("accept", ""), "application/json, text/event-stream");
  EXPECT_EQ(r.value("contentType", ""), "application/json");
}

TEST_F(TestPeerHttp, NotificationStreamReconnectsWithLastEventIdAfterRetry) {
  auto t = make_transport(loopback(url("/mcp")));
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  handshake(*t, rpc, /*open_stream=*/false);
  auto start = Clock::now();
  auto opened = t->open_notification_stream(2000);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_TRUE(*opened);
  EXPECT_TRUE(t->open_notification_stream(2000).value()) << "already open";
  // The first stream sends one event and ends after `retry: 100`; the reconnection carries
  // Last-Event-ID g1 and receives g2.
  ASSERT_TRUE(rpc.wait_for("notifications/resources/list_changed", 3000));
  EXPECT_LT(elapsed_ms(start), 2000);
  ASSERT_GE(rpc.others.size(), 2u);
  EXPECT_EQ(rpc.others[0].value("method", ""), "notifications/tools/list_changed");
  EXPECT_EQ(rpc.others[1]["params"].value("lastEventId", ""), "g1");
  Json s = stats();
  ASSERT_TRUE(s.contains("gets"));
  ASSERT_GE(s["gets"].size(), 2u);
  EXPECT_TRUE(s["gets"][0]["lastEventId"].is_null());
  EXPECT_EQ(s["gets"][1].value("lastEventId", ""), "g1");
  EXPECT_EQ(s["gets"][1].value("protocolVersion", ""), "2025-11-25");
  auto before = Clock::now();
  t->close();  // stops the open stream promptly
  EXPECT_LT(elapsed_ms(before), 1500);
}

TEST_F(TestPeerHttp, CloseDeletesTheSession) {
  std::size_t deletes_before = stats()["deletes"].size();
  auto t = make_transport(loopback(url("/mcp")));
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  handshake(*t, rpc, /*open_stream=*/false);
  t->close();
  t->close();  // idempotent
  Json s = stats();
  ASSERT_EQ(s["deletes"].size(), deletes_before + 1);
  EXPECT_EQ(s["deletes"][deletes_before].value("session", ""), "peer-session-1");
  EXPECT_NE(t->describe().find("closed"), std::string::npos);
}

TEST_F(TestPeerHttp, NoGetStreamOfferedIsNotAnError) {
  auto t = make_transport(loopback(url("/no-get")));
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  handshake(*t, rpc, /*open_stream=*/false);
  auto opened = t->open_notification_stream(2000);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_FALSE(*opened) << "405 means the server offers no stream";
  auto got = t->receive(50);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_TRUE(got->empty());
  auto before = Clock::now();
  t->close();  // its DELETE gets 405: ignored
  EXPECT_LT(elapsed_ms(before), 1000);
}

TEST_F(TestPeerHttp, Unknown404SessionIsSessionExpired) {
  HttpTransportOptions o = loopback(url("/mcp"));
  o.session_id = "gone-session";
  auto t = make_transport(o);
  ASSERT_NE(t, nullptr);
  Status st = one_request(*t, 2000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind("session expired", 0), 0u) << st.error().message;
  EXPECT_TRUE(t->session_expired());
  // Without a session id a 404 is just an HTTP error.
  auto plain = make_transport(loopback(url("/status/404")));
  Status p = one_request(*plain, 2000);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::kTransport);
  EXPECT_NE(p.error().message.find("HTTP 404"), std::string::npos);
  EXPECT_FALSE(plain->session_expired());
}

TEST_F(TestPeerHttp, HungServerTimesOutAtTheDeadline) {
  auto t = make_transport(loopback(url("/hang")));
  ASSERT_NE(t, nullptr);
  auto start = Clock::now();
  Status st = one_request(*t, 400);
  int64_t took = elapsed_ms(start);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kTimeout) << st.error().message;
  EXPECT_GE(took, 350);
  EXPECT_LT(took, 1000);

  start = Clock::now();
  auto opened = t->open_notification_stream(400);
  took = elapsed_ms(start);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, ErrorCode::kTimeout) << opened.error().message;
  EXPECT_LT(took, 1000);
  // A timed-out request does not end the transport.
  Status again = one_request(*t, 200);
  EXPECT_EQ(again.error().code, ErrorCode::kTimeout);
}

TEST_F(TestPeerHttp, SlowDripTimesOutAtTheDeadline) {
  for (const char* path : {"/drip", "/drip-headers"}) {
    auto t = make_transport(loopback(url(path)));
    ASSERT_NE(t, nullptr);
    auto start = Clock::now();
    Status st = one_request(*t, 600);
    int64_t took = elapsed_ms(start);
    ASSERT_FALSE(st.ok()) << path;
    EXPECT_EQ(st.error().code, ErrorCode::kTimeout) << path << ": " << st.error().message;
    EXPECT_LT(took, 1200) << path << ": bytes every 100 ms must not extend the deadline";
  }
}

TEST_F(TestPeerHttp, OversizedRepliesAreTooLarge) {
  // 64 KiB bound: a reply of 100,000 bytes is too large, one of 60,000 arrives whole.
  for (int bytes : {100000, 60000}) {
    for (const char* framing : {"json", "sse"}) {
      const std::string path = "/big-" + std::string(framing) + "?bytes=" + std::to_string(bytes);
      HttpTransportOptions o = loopback(url(path));
      o.max_reply_bytes = 64 * 1024;
      auto t = make_transport(o);
      ASSERT_NE(t, nullptr);
      Status st = one_request(*t, 2000);
      if (bytes > 64 * 1024) {
        ASSERT_FALSE(st.ok()) << path;
        EXPECT_EQ(st.error().code, ErrorCode::kTooLarge) << path << ": " << st.error().message;
        continue;
      }
      EXPECT_TRUE(st.ok()) << path << ": " << st.error().message;
      std::vector<std::string> got = received_texts(*t);
      ASSERT_EQ(got.size(), 1u) << path;
      EXPECT_GT(got[0].size(), 60000u);
    }
  }
}

TEST_F(TestPeerHttp, GarbageRepliesAreInvalid) {
  for (const char* path : {"/garbage-json", "/garbage-sse", "/not-jsonrpc", "/html"}) {
    auto t = make_transport(loopback(url(path)));
    ASSERT_NE(t, nullptr);
    Status st = one_request(*t, 2000);
    ASSERT_FALSE(st.ok()) << path;
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidReply) << path << ": " << st.error().message;
  }
}

TEST_F(TestPeerHttp, HttpFailuresMapToErrorCodes) {
  auto server_error = make_transport(loopback(url("/status/503")));
  Status e503 = one_request(*server_error, 2000);
  ASSERT_FALSE(e503.ok());
  EXPECT_EQ(e503.error().code, ErrorCode::kTransport);
  EXPECT_NE(e503.error().message.find("HTTP 503"), std::string::npos) << e503.error().message;

  auto unauthorized = make_transport(loopback(url("/status/401")));
  Status e401 = one_request(*unauthorized, 2000);
  ASSERT_FALSE(e401.ok());
  EXPECT_EQ(e401.error().code, ErrorCode::kUnauthenticated) << e401.error().message;

  int closed_port = testing::free_loopback_port();
  auto refused =
      make_transport(loopback("http://127.0.0.1:" + std::to_string(closed_port) + "/mcp"));
  auto start = Clock::now();
  Status econn = one_request(*refused, 2000);
  ASSERT_FALSE(econn.ok());
  EXPECT_EQ(econn.error().code, ErrorCode::kTransport) << econn.error().message;
  EXPECT_LT(elapsed_ms(start), 1000);
}

TEST_F(TestPeerHttp, SecretsNeverAppearInErrorsOrDescribe) {
  std::vector<std::string> texts;
  auto collect = [&](const std::string& path, int64_t timeout_ms, bool allow = true) {
    HttpTransportOptions o = with_secrets(path);
    o.allow_private_addresses = allow;
    auto t = make_transport(o);
    if (t == nullptr) return;
    texts.push_back(t->describe());
    Status st = one_request(*t, timeout_ms);
    EXPECT_FALSE(st.ok()) << path;
    if (!st.ok()) texts.push_back(st.error().message);
    texts.push_back(t->describe());
  };
  collect("/status/500", 2000);  // the body echoes every request header
  collect("/status/401", 2000);
  collect("/status/400", 2000);
  collect("/garbage-json", 2000);
  collect("/hang", 300);
  collect("/mcp", 2000, /*allow=*/false);  // refused by the URL guard
  {
    HttpTransportOptions o = with_secrets("/mcp");
    o.session_id = "bogus";
    auto t = make_transport(o);
    Status st = one_request(*t, 2000);
    ASSERT_FALSE(st.ok());
    texts.push_back(st.error().message);
  }
  HttpTransportOptions bad = with_secrets("/mcp");
  bad.secret_headers.push_back({"X-Broken", "Bearer broken-SECRET-value\r\nX-Injected: 1"});
  auto refused = HttpTransport::create(bad);
  ASSERT_FALSE(refused.ok());
  texts.push_back(refused.error().message);

  ASSERT_GE(texts.size(), 15u);
  bool echoed = false;
  for (const std::string& text : texts) {
    EXPECT_EQ(text.find("SECRET"), std::string::npos) << text;
    EXPECT_EQ(text.find("sk-test-0123456789abcdef"), std::string::npos) << text;
    EXPECT_EQ(text.find("ABCDEFGH"), std::string::npos) << text;
    if (text.find("[redacted]") != std::string::npos) echoed = true;
  }
  EXPECT_TRUE(echoed) << "the echoing peer's text is quoted, with the secrets scrubbed";
  std::string description = make_transport(with_secrets("/mcp?api_key=abc123xyz"))->describe();
  EXPECT_NE(description.find("Authorization"), std::string::npos) << description;
  EXPECT_NE(description.find("X-Api-Key"), std::string::npos) << description;
  EXPECT_EQ(description.find("abc123xyz"), std::string::npos) << "queries are redacted";
}

TEST_F(TestPeerHttp, StopsReadingThePostStreamOnceTheResponseArrived) {
  auto t = make_transport(loopback(url("/notify-then-hang")));
  ASSERT_NE(t, nullptr);
  auto start = Clock::now();
  Status st = one_request(*t, 3000);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_LT(elapsed_ms(start), 1000) << "the stream stays open; the response ends the wait";
  std::vector<std::string> got = received_texts(*t);
  ASSERT_EQ(got.size(), 2u) << "the priming event carries no message";
  EXPECT_NE(got[0].find("notifications/message"), std::string::npos);
  EXPECT_NE(got[1].find("\"id\":7"), std::string::npos);
}

TEST_F(TestPeerHttp, ResumesAPostStreamClosedBeforeTheResponse) {
  auto t = make_transport(loopback(url("/resume")));
  ASSERT_NE(t, nullptr);
  Status st = one_request(*t, 2000);
  ASSERT_TRUE(st.ok()) << st.error().message;
  std::vector<std::string> got = received_texts(*t);
  ASSERT_EQ(got.size(), 1u);
  auto j = parse_json(got[0]);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["id"], 7);
  EXPECT_EQ((*j)["result"].value("resumedFrom", ""), "r0");
}

TEST_F(TestPeerHttp, BatchRepliesArriveAsOneMessage) {
  auto t = make_transport(loopback(url("/batch")));
  ASSERT_NE(t, nullptr);
  std::string batch = "[" + encode_request(1, "tools/list", Json::object()) + "," +
                      encode_notification("notifications/initialized", Json()) + "," +
                      encode_request(2, "prompts/list", Json::object()) + "]";
  Status st = t->send(batch, 2000);
  ASSERT_TRUE(st.ok()) << st.error().message;
  std::vector<std::string> got = received_texts(*t);
  ASSERT_EQ(got.size(), 1u);
  auto parsed = parse_jsonrpc_batch(got[0]);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->size(), 2u);
}

TEST_F(TestPeerHttp, AcceptedIsEnoughForANotificationButNotForARequest) {
  auto t = make_transport(loopback(url("/ack-text")));
  ASSERT_NE(t, nullptr);
  Status note = t->send(encode_notification("notifications/initialized", Json()), 2000);
  EXPECT_TRUE(note.ok()) << note.error().message;
  Status request = one_request(*t, 2000);
  ASSERT_FALSE(request.ok());
  EXPECT_EQ(request.error().code, ErrorCode::kInvalidReply) << request.error().message;
  EXPECT_NE(request.error().message.find("no response"), std::string::npos);
  EXPECT_TRUE(received_texts(*t).empty());
}

TEST_F(TestPeerHttp, ResolvesOnceAndPinsTheCheckedAddress) {
  // "upstream.test" exists only in this resolver: the request can reach the peer only through
  // the pinned address, and the name is resolved exactly once for all requests.
  int calls = 0;
  HttpTransportOptions o;
  o.url = "http://upstream.test:" + std::to_string(port_) + "/mcp";
  o.allow_private_addresses = true;
  o.resolver = [&calls](const std::string& host, int64_t) -> Result<std::vector<std::string>> {
    ++calls;
    if (host != "upstream.test") return Error(ErrorCode::kTransport, "unknown host");
    return std::vector<std::string>{"127.0.0.1"};
  };
  auto t = make_transport(o);
  ASSERT_NE(t, nullptr);
  Rpc rpc(*t);
  handshake(*t, rpc, /*open_stream=*/true);
  EXPECT_TRUE(rpc.call("tools/list", Json::object()).ok());
  EXPECT_TRUE(rpc.call("tools/list", Json::object()).ok());
  EXPECT_EQ(calls, 1);

  o.allow_private_addresses = false;
  calls = 0;
  auto guarded = make_transport(o);
  Status st = one_request(*guarded, 1000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.error().message.find("resolves to 127.0.0.1"), std::string::npos)
      << st.error().message;
}

TEST(HttpTransportCreate, RefusesBadUrlsHeadersAndLimits) {
  HttpTransportOptions o;
  o.url = "ftp://example.com/mcp";
  EXPECT_EQ(HttpTransport::create(o).error().code, ErrorCode::kInvalidArgument);
  o.url = "https://example.com/mcp";
  o.secret_headers = {{"Accept", "text/html"}};
  auto managed = HttpTransport::create(o);
  ASSERT_FALSE(managed.ok());
  EXPECT_NE(managed.error().message.find("managed"), std::string::npos);
  o.secret_headers = {{"Bad Name", "x"}};
  EXPECT_FALSE(HttpTransport::create(o).ok());
  o.secret_headers = {{"Authorization", "Bearer abc"}};
  o.max_reply_bytes = 0;
  EXPECT_FALSE(HttpTransport::create(o).ok());
  o.max_reply_bytes = 1024;
  auto ok = HttpTransport::create(o);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  Status not_json = (*ok)->send("{not json", 1000);
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.error().code, ErrorCode::kInvalidArgument);
  Status no_time = (*ok)->send(encode_request(1, "ping", Json()), 0);
  EXPECT_EQ(no_time.error().code, ErrorCode::kInvalidArgument);
  auto empty = (*ok)->receive(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace quiver
