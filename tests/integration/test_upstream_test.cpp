// The controllable test upstream (tests/peers/test-upstream.mjs), driven with raw JSON-RPC: over
// stdio through ChildProcess, over Streamable HTTP with cpp-httplib. These tests pin down what
// later transport tests rely on: pagination, list_changed on a control command, the failure
// modes on demand, session expiry, per-Authorization lists and the call counters.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include "native-agent/upstream/child_process.h"
#include "shared/json.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::TempDir;
using Clock = std::chrono::steady_clock;

int64_t elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

std::string script_path() {
  return std::string(QUIVER_SOURCE_DIR) + "/tests/peers/test-upstream.mjs";
}

std::unique_ptr<ChildProcess> start_upstream(std::vector<std::string> args) {
  args.insert(args.begin(), script_path());
  ChildSpec spec("node", std::move(args), {{"QUIVER_NODE_MODULES", QUIVER_NODE_MODULES}});
  auto child = ChildProcess::spawn(spec);
  EXPECT_TRUE(child.ok()) << child.error().message;
  return child.ok() ? std::move(child.value()) : nullptr;
}

void append_line(const std::string& file, const std::string& line) {
  std::ofstream out(file, std::ios::app);
  out << line << "\n";
}

// Newline-delimited JSON-RPC over a child's pipes, as raw as it gets.
class StdioPeer {
 public:
  explicit StdioPeer(ChildProcess& child) : child_(child) {}

  void send(const std::string& line) { ASSERT_TRUE(child_.write(line + "\n").ok()); }

  // The next complete line from stdout (without the newline), or nullopt at timeout / EOF.
  std::optional<std::string> next_line(int timeout_ms) {
    auto start = Clock::now();
    while (true) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      int left = timeout_ms - static_cast<int>(elapsed_ms(start));
      if (left <= 0 || child_.stdout_eof()) return std::nullopt;
      auto w = child_.wait_readable(left);
      if (!w.ok()) return std::nullopt;
      auto bytes = child_.read_stdout();
      if (!bytes.ok()) return std::nullopt;
      if (!bytes->empty()) ++reads_;
      buffer_ += *bytes;
    }
  }

  // Sends a request and returns its response; notifications that arrive meanwhile are kept.
  Json request(int id, const std::string& method, const Json& params = Json::object(),
               int timeout_ms = 3000) {
    Json message = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
    send(message.dump());
    return response(id, timeout_ms);
  }

  Json response(int id, int timeout_ms = 3000) {
    auto start = Clock::now();
    while (true) {
      int left = timeout_ms - static_cast<int>(elapsed_ms(start));
      auto line = next_line(std::max(left, 0));
      if (!line) return Json();
      auto parsed = parse_json(*line);
      if (!parsed.ok()) {
        ADD_FAILURE() << "not JSON: " << line->substr(0, 200);
        return Json();
      }
      if (json_int(*parsed, "id") == id) return *parsed;
      if (json_string(*parsed, "method")) notifications.push_back(*parsed);
    }
  }

  // Waits for a notification with `method` (already received ones count).
  bool wait_notification(const std::string& method, int timeout_ms) {
    auto start = Clock::now();
    while (true) {
      for (size_t i = 0; i < notifications.size(); ++i) {
        if (json_string(notifications[i], "method") == method) {
          notifications.erase(notifications.begin() + static_cast<long>(i));
          return true;
        }
      }
      int left = timeout_ms - static_cast<int>(elapsed_ms(start));
      if (left <= 0) return false;
      auto line = next_line(left);
      if (!line) return false;
      auto parsed = parse_json(*line);
      if (parsed.ok()) notifications.push_back(*parsed);
    }
  }

  void handshake() {
    Json init = request(1, "initialize",
                        {{"protocolVersion", "2025-11-25"},
                         {"capabilities", Json::object()},
                         {"clientInfo", {{"name", "quiver-test"}, {"version", "0"}}}});
    ASSERT_TRUE(init.contains("result")) << init.dump();
    send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  }

  std::vector<Json> notifications;
  int reads() const { return reads_; }

 private:
  ChildProcess& child_;
  std::string buffer_;
  int reads_ = 0;
};

std::vector<std::string> tool_names(const Json& response) {
  std::vector<std::string> names;
  const Json* result = json_field(response, "result");
  const Json* tools = result != nullptr ? json_field(*result, "tools") : nullptr;
  if (tools == nullptr || !tools->is_array()) return names;
  for (const Json& t : *tools) names.push_back(json_string(t, "name").value_or("?"));
  return names;
}

std::optional<std::string> next_cursor(const Json& response) {
  const Json* result = json_field(response, "result");
  return result != nullptr ? json_string(*result, "nextCursor") : std::nullopt;
}

int64_t error_code(const Json& response) {
  const Json* error = json_field(response, "error");
  return error != nullptr ? json_int(*error, "code").value_or(0) : 0;
}

Json read_json_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto parsed = parse_json(text);
  return parsed.ok() ? *parsed : Json();
}

// ---- stdio ----

TEST(TestUpstreamStdio, HandshakePaginationCacheHintsAndCallCount) {
  TempDir dir;
  std::string stats = dir.path("stats.json");
  auto child = start_upstream({"stdio", "--tools", "7", "--page-size", "3", "--ttl-ms", "60000",
                               "--cache-scope", "private", "--stats-file", stats});
  ASSERT_NE(child, nullptr);
  StdioPeer peer(*child);
  Json init = peer.request(1, "initialize",
                           {{"protocolVersion", "2025-11-25"},
                            {"capabilities", Json::object()},
                            {"clientInfo", {{"name", "quiver-test"}, {"version", "0"}}}},
                           4000);
  ASSERT_TRUE(init.contains("result")) << init.dump() << child->stderr_tail();
  EXPECT_EQ(init["result"]["serverInfo"]["name"], "quiver-test-upstream");
  EXPECT_EQ(init["result"]["capabilities"]["tools"]["listChanged"], true);
  peer.send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");

  std::vector<std::string> all;
  std::vector<size_t> page_sizes;
  Json params = Json::object();
  for (int id = 2; id < 10; ++id) {
    Json page = peer.request(id, "tools/list", params);
    auto names = tool_names(page);
    page_sizes.push_back(names.size());
    all.insert(all.end(), names.begin(), names.end());
    EXPECT_EQ(page["result"]["ttlMs"], 60000);
    EXPECT_EQ(page["result"]["cacheScope"], "private");
    auto cursor = next_cursor(page);
    if (!cursor) break;
    params = {{"cursor", *cursor}};
  }
  EXPECT_EQ(page_sizes, (std::vector<size_t>{3, 3, 1}));
  EXPECT_EQ(all, (std::vector<std::string>{"tool_1", "tool_2", "tool_3", "tool_4", "tool_5",
                                           "tool_6", "tool_7"}));
  Json bad = peer.request(20, "tools/list", {{"cursor", "not-a-cursor"}});
  EXPECT_EQ(error_code(bad), -32602) << bad.dump();

  Json resources = peer.request(21, "resources/list");
  EXPECT_EQ(resources["result"]["resources"].size(), 2u) << resources.dump();
  Json templates = peer.request(22, "resources/templates/list");
  EXPECT_EQ(templates["result"]["resourceTemplates"].size(), 1u) << templates.dump();
  Json prompts = peer.request(23, "prompts/list");
  EXPECT_EQ(prompts["result"]["prompts"].size(), 2u) << prompts.dump();

  Json counted = read_json_file(stats);
  EXPECT_EQ(counted["tools_list_calls"], 4) << counted.dump();
  EXPECT_EQ(counted["calls"]["initialize"], 1) << counted.dump();
  EXPECT_EQ(counted["calls"]["prompts/list"], 1) << counted.dump();
}

TEST(TestUpstreamStdio, ControlFileAddsAndRemovesToolsWithListChanged) {
  TempDir dir;
  std::string control = dir.path("control");
  auto child = start_upstream({"stdio", "--tools", "2", "--control", control});
  ASSERT_NE(child, nullptr);
  StdioPeer peer(*child);
  peer.handshake();
  EXPECT_EQ(tool_names(peer.request(2, "tools/list")),
            (std::vector<std::string>{"tool_1", "tool_2"}));

  auto start = Clock::now();
  append_line(control, R"({"add_tool":"added_at_runtime","description":"new"})");
  ASSERT_TRUE(peer.wait_notification("notifications/tools/list_changed", 2000))
      << child->stderr_tail();
  EXPECT_LT(elapsed_ms(start), 1000) << "a change shows within a second";
  EXPECT_EQ(tool_names(peer.request(3, "tools/list")),
            (std::vector<std::string>{"tool_1", "tool_2", "added_at_runtime"}));

  append_line(control, R"({"remove_tool":"tool_1"})");
  ASSERT_TRUE(peer.wait_notification("notifications/tools/list_changed", 2000));
  EXPECT_EQ(tool_names(peer.request(4, "tools/list")),
            (std::vector<std::string>{"tool_2", "added_at_runtime"}));

  // Behaviour changes at runtime: fail tools/list, then recover.
  append_line(control, R"({"set":{"fail_method":"tools/list"},"notify":"prompts"})");
  ASSERT_TRUE(peer.wait_notification("notifications/prompts/list_changed", 2000));
  EXPECT_EQ(error_code(peer.request(5, "tools/list")), -32603);
  append_line(control, R"({"set":{"fail_method":null},"notify":"tools"})");
  ASSERT_TRUE(peer.wait_notification("notifications/tools/list_changed", 2000));
  EXPECT_EQ(tool_names(peer.request(6, "tools/list")).size(), 2u);
}

TEST(TestUpstreamStdio, FailuresOnDemand) {
  auto child = start_upstream({"stdio", "--fail-method", "resources/list", "--fail-code", "-32000",
                               "--no-prompts", "--delay-ms", "300"});
  ASSERT_NE(child, nullptr);
  StdioPeer peer(*child);
  peer.handshake();
  Json failed = peer.request(2, "resources/list");
  EXPECT_EQ(error_code(failed), -32000) << failed.dump();
  Json none = peer.request(3, "prompts/list");
  EXPECT_EQ(error_code(none), -32601) << "no prompts: METHOD_NOT_FOUND, " << none.dump();
  auto start = Clock::now();
  Json delayed = peer.request(4, "tools/list");
  EXPECT_GE(elapsed_ms(start), 290);
  EXPECT_EQ(tool_names(delayed).size(), 3u);
}

TEST(TestUpstreamStdio, HangsGarblesBloatsAndDrips) {
  {
    auto child = start_upstream({"stdio", "--hang"});
    ASSERT_NE(child, nullptr);
    StdioPeer peer(*child);
    peer.handshake();
    peer.send(R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})");
    EXPECT_FALSE(peer.next_line(500).has_value()) << "a hung list never answers";
    Json ping = peer.request(3, "ping");
    EXPECT_TRUE(ping.contains("result")) << "the rest still works: " << ping.dump();
  }
  // The line an upstream started with `flags` answers tools/list with, after the handshake.
  auto tools_list_line = [](std::vector<std::string> flags) -> std::optional<std::string> {
    auto child = start_upstream(std::move(flags));
    EXPECT_NE(child, nullptr);
    if (child == nullptr) return std::nullopt;
    StdioPeer peer(*child);
    peer.handshake();
    peer.send(R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})");
    return peer.next_line(3000);
  };
  {
    auto line = tools_list_line({"stdio", "--garble"});
    ASSERT_TRUE(line.has_value());
    EXPECT_FALSE(parse_json(*line).ok()) << *line;
  }
  {
    auto line = tools_list_line({"stdio", "--oversize-bytes", "300000"});
    ASSERT_TRUE(line.has_value());
    EXPECT_GE(line->size(), 300000u);
    auto parsed = parse_json(*line);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(tool_names(*parsed).size(), 3u);
  }
  {
    auto child =
        start_upstream({"stdio", "--slow-drip", "--drip-bytes", "16", "--drip-interval-ms", "5"});
    ASSERT_NE(child, nullptr);
    StdioPeer peer(*child);
    peer.handshake();
    int reads_before = peer.reads();
    auto start = Clock::now();
    Json list = peer.request(2, "tools/list");
    EXPECT_EQ(tool_names(list).size(), 3u) << "dripped, but whole";
    EXPECT_GT(peer.reads() - reads_before, 5) << "arrived in pieces";
    EXPECT_GE(elapsed_ms(start), 50);
  }
}

TEST(TestUpstreamStdio, StopsWhenStdinClosesOrItsLifetimeEnds) {
  auto child = start_upstream({"stdio"});
  ASSERT_NE(child, nullptr);
  StdioPeer peer(*child);
  peer.handshake();
  child->close_stdin();
  auto start = Clock::now();
  while (child->running() && elapsed_ms(start) < 3000) (void)child->wait_readable(100);
  auto status = child->exit_status();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->success()) << status->describe();

  auto mortal = start_upstream({"stdio", "--max-lifetime-ms", "300"});
  ASSERT_NE(mortal, nullptr);
  start = Clock::now();
  while (mortal->running() && elapsed_ms(start) < 4000) {
    (void)mortal->wait_readable(100);
    (void)mortal->read_stdout();
  }
  EXPECT_FALSE(mortal->running()) << "still alive after its lifetime";
}

// ---- Streamable HTTP ----

struct HttpUpstream {
  std::unique_ptr<ChildProcess> child;
  int port = 0;
  std::string control_path = "/control";
};

HttpUpstream start_http(std::vector<std::string> args) {
  HttpUpstream up;
  args.insert(args.begin(), {"http", "--port", "0"});
  up.child = start_upstream(args);
  if (!up.child) return up;
  StdioPeer out(*up.child);
  auto line = out.next_line(4000);
  EXPECT_TRUE(line.has_value()) << "no URL line; stderr: " << up.child->stderr_tail();
  if (!line) return up;
  auto parsed = parse_json(*line);
  EXPECT_TRUE(parsed.ok()) << *line;
  if (!parsed.ok()) return up;
  EXPECT_EQ(json_string(*parsed, "url").value_or("").rfind("http://127.0.0.1:", 0), 0u) << *line;
  up.port = static_cast<int>(json_int(*parsed, "port").value_or(0));
  return up;
}

// One MCP session over Streamable HTTP, by hand.
class HttpPeer {
 public:
  explicit HttpPeer(int port, std::string authorization = "")
      : cli_("127.0.0.1", port), authorization_(std::move(authorization)) {
    cli_.set_connection_timeout(2, 0);
    cli_.set_read_timeout(3, 0);
  }

  httplib::Headers headers() const {
    httplib::Headers h = {{"Accept", "application/json, text/event-stream"}};
    if (!session_id.empty()) {
      h.emplace("Mcp-Session-Id", session_id);
      h.emplace("MCP-Protocol-Version", "2025-11-25");
    }
    if (!authorization_.empty()) h.emplace("Authorization", authorization_);
    return h;
  }

  // POSTs one message; returns the HTTP status and the JSON-RPC reply (from JSON or SSE).
  std::pair<int, Json> post(const Json& message) {
    auto res = cli_.Post("/mcp", headers(), message.dump(), "application/json");
    if (!res) return {0, Json()};
    last_body = res->body;
    if (res->has_header("Mcp-Session-Id")) session_id = res->get_header_value("Mcp-Session-Id");
    std::string payload = res->body;
    if (res->get_header_value("Content-Type").find("text/event-stream") != std::string::npos) {
      payload = sse_data(res->body);
    }
    auto parsed = parse_json(payload);
    return {res->status, parsed.ok() ? *parsed : Json()};
  }

  std::pair<int, Json> request(int id, const std::string& method,
                               const Json& params = Json::object()) {
    return post({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
  }

  int initialize() {
    session_id.clear();
    auto [status, reply] = request(1, "initialize",
                                   {{"protocolVersion", "2025-11-25"},
                                    {"capabilities", Json::object()},
                                    {"clientInfo", {{"name", "quiver-test"}, {"version", "0"}}}});
    if (status != 200 || !reply.contains("result")) return status == 200 ? -1 : status;
    auto [s2, ignored] = post({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
    return s2 == 202 ? 200 : s2;
  }

  // The payload of the first non-empty `data:` line of an SSE body.
  static std::string sse_data(const std::string& body) {
    size_t pos = 0;
    while (pos < body.size()) {
      size_t end = body.find('\n', pos);
      if (end == std::string::npos) end = body.size();
      std::string line = body.substr(pos, end - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        std::string data = line.substr(5);
        if (!data.empty() && data[0] == ' ') data.erase(0, 1);
        if (!data.empty()) return data;
      }
      pos = end + 1;
    }
    return "";
  }

  httplib::Client& client() { return cli_; }

  std::string session_id;
  std::string last_body;

 private:
  httplib::Client cli_;
  std::string authorization_;
};

Json control(int port, const std::string& body) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(3, 0);
  auto res =
      body.empty() ? cli.Get("/control/stats") : cli.Post("/control", body, "application/json");
  if (!res || res->status != 200) return Json();
  auto parsed = parse_json(res->body);
  return parsed.ok() ? *parsed : Json();
}

TEST(TestUpstreamHttp, HandshakePaginationAndStats) {
  auto up = start_http({"--tools", "5", "--page-size", "2"});
  ASSERT_GT(up.port, 0);
  HttpPeer peer(up.port);
  ASSERT_EQ(peer.initialize(), 200) << peer.last_body;
  EXPECT_FALSE(peer.session_id.empty()) << "stateful: the server hands out a session id";
  std::vector<std::string> all;
  Json params = Json::object();
  int pages = 0;
  for (int id = 2; id < 10; ++id) {
    auto [status, page] = peer.request(id, "tools/list", params);
    ASSERT_EQ(status, 200) << peer.last_body;
    ++pages;
    auto names = tool_names(page);
    all.insert(all.end(), names.begin(), names.end());
    auto cursor = next_cursor(page);
    if (!cursor) break;
    params = {{"cursor", *cursor}};
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(all.size(), 5u);
  Json stats = control(up.port, "");
  EXPECT_EQ(stats["tools_list_calls"], 3) << stats.dump();
  EXPECT_EQ(stats["sessions"]["open"], 1) << stats.dump();

  // Without a session id only initialize is accepted; an unknown id is 404.
  HttpPeer stranger(up.port);
  EXPECT_EQ(stranger.request(2, "tools/list").first, 400);
  stranger.session_id = "no-such-session";
  EXPECT_EQ(stranger.request(2, "tools/list").first, 404);
}

TEST(TestUpstreamHttp, ControlPostSendsListChangedOnTheGetStream) {
  auto up = start_http({"--tools", "1"});
  ASSERT_GT(up.port, 0);
  HttpPeer peer(up.port);
  ASSERT_EQ(peer.initialize(), 200) << peer.last_body;

  std::mutex mu;
  std::string stream;
  std::atomic<bool> stop{false};
  httplib::Headers get_headers = peer.headers();
  get_headers.erase("Accept");
  get_headers.emplace("Accept", "text/event-stream");
  std::thread reader([&] {
    httplib::Client cli("127.0.0.1", up.port);
    cli.set_read_timeout(4, 0);
    cli.Get("/mcp", get_headers, [&](const char* data, size_t n) {
      std::lock_guard<std::mutex> lock(mu);
      stream.append(data, n);
      return !stop.load();
    });
  });
  auto seen = [&](size_t count) {
    std::lock_guard<std::mutex> lock(mu);
    size_t found = 0;
    for (size_t pos = 0;
         (pos = stream.find("notifications/tools/list_changed", pos)) != std::string::npos; ++pos) {
      ++found;
    }
    return found >= count;
  };
  // The stream is open once a list_changed nudged through it arrives.
  auto start = Clock::now();
  while (!seen(1) && elapsed_ms(start) < 3000) {
    control(up.port, R"({"notify":"tools"})");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(seen(1)) << "no notification on the GET stream";
  size_t before;
  {
    std::lock_guard<std::mutex> lock(mu);
    before = 0;
    for (size_t pos = 0; (pos = stream.find("list_changed", pos)) != std::string::npos; ++pos) {
      ++before;
    }
  }
  start = Clock::now();
  Json state = control(up.port, R"({"add_tool":"zeta"})");
  EXPECT_EQ(state["tools"], Json({"tool_1", "zeta"})) << state.dump();
  while (!seen(before + 1) && elapsed_ms(start) < 2000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(seen(before + 1)) << "add_tool sent no list_changed";
  EXPECT_LT(elapsed_ms(start), 1000);
  auto [status, list] = peer.request(5, "tools/list");
  EXPECT_EQ(tool_names(list), (std::vector<std::string>{"tool_1", "zeta"}));

  stop = true;
  // DELETE ends the session and with it the GET stream.
  peer.client().Delete("/mcp", peer.headers());
  reader.join();
}

TEST(TestUpstreamHttp, SessionsExpireAfterIdleWith404) {
  auto up = start_http({"--session-ttl-ms", "300"});
  ASSERT_GT(up.port, 0);
  HttpPeer peer(up.port);
  ASSERT_EQ(peer.initialize(), 200) << peer.last_body;
  EXPECT_EQ(peer.request(2, "tools/list").first, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(peer.request(3, "tools/list").first, 200) << "use keeps the session alive";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto [status, reply] = peer.request(4, "tools/list");
  EXPECT_EQ(status, 404) << peer.last_body;
  ASSERT_EQ(peer.initialize(), 200) << "a new session after re-initializing";
  EXPECT_EQ(peer.request(5, "tools/list").first, 200);
  Json stats = control(up.port, "");
  EXPECT_GE(stats["sessions"]["expired"].get<int>(), 1) << stats.dump();

  // Expiry on demand, for tests that cannot wait.
  control(up.port, R"({"expire_sessions":true})");
  EXPECT_EQ(peer.request(6, "tools/list").first, 404);
}

TEST(TestUpstreamHttp, ListsDependOnTheAuthorizationHeader) {
  auto up = start_http({"--per-auth", "--tools", "2"});
  ASSERT_GT(up.port, 0);
  HttpPeer nobody(up.port);
  EXPECT_EQ(nobody.initialize(), 401);
  HttpPeer mallory(up.port, "Bearer mallory");
  EXPECT_EQ(mallory.initialize(), 401);
  HttpPeer alice(up.port, "Bearer alice");
  ASSERT_EQ(alice.initialize(), 200) << alice.last_body;
  EXPECT_EQ(tool_names(alice.request(2, "tools/list").second),
            (std::vector<std::string>{"alice_tool_1", "alice_tool_2"}));
  HttpPeer bob(up.port, "Bearer bob");
  ASSERT_EQ(bob.initialize(), 200);
  EXPECT_EQ(tool_names(bob.request(2, "tools/list").second),
            (std::vector<std::string>{"bob_tool_1", "bob_tool_2"}));
}

TEST(TestUpstreamHttp, FailsGarblesAndAnswersAsPlainJson) {
  {
    auto up = start_http({"--fail-method", "tools/list", "--no-prompts", "--json-response"});
    ASSERT_GT(up.port, 0);
    HttpPeer peer(up.port);
    ASSERT_EQ(peer.initialize(), 200) << peer.last_body;
    auto [s1, failed] = peer.request(2, "tools/list");
    EXPECT_EQ(s1, 200);
    EXPECT_EQ(error_code(failed), -32603) << peer.last_body;
    EXPECT_EQ(peer.last_body.find("data:"), std::string::npos) << "plain JSON, not SSE";
    auto [s2, none] = peer.request(3, "prompts/list");
    EXPECT_EQ(error_code(none), -32601) << peer.last_body;
  }
  {
    auto up = start_http({"--garble"});
    ASSERT_GT(up.port, 0);
    HttpPeer peer(up.port);
    ASSERT_EQ(peer.initialize(), 200) << peer.last_body;
    auto [status, reply] = peer.request(2, "tools/list");
    EXPECT_EQ(status, 200);
    EXPECT_TRUE(reply.is_null());
    EXPECT_FALSE(parse_json(peer.last_body).ok()) << peer.last_body;
    EXPECT_EQ(control(up.port, "")["tools_list_calls"], 1);
  }
}

TEST(TestUpstreamHttp, SlowDripAndOversizeStillParse) {
  auto up = start_http(
      {"--slow-drip", "--drip-bytes", "8", "--drip-interval-ms", "5", "--oversize-bytes", "400"});
  ASSERT_GT(up.port, 0);
  HttpPeer peer(up.port);
  ASSERT_EQ(peer.initialize(), 200) << peer.last_body;
  auto start = Clock::now();
  auto [status, list] = peer.request(2, "tools/list");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(tool_names(list).size(), 3u) << peer.last_body.substr(0, 200);
  EXPECT_GE(peer.last_body.size(), 400u);
  // At least size/8 writes 5 ms apart.
  EXPECT_GE(elapsed_ms(start), static_cast<int64_t>(peer.last_body.size() / 8 * 5 / 2));
}

TEST(TestUpstreamHttp, StopsWhenItsParentDies) {
  // sh starts the upstream in the background and exits when the test writes a line: the
  // upstream is re-parented and must notice.
  ChildSpec spec("sh", {"-c", "node \"$0\" http --port 0 & read line", script_path()},
                 {{"QUIVER_NODE_MODULES", QUIVER_NODE_MODULES}});
  auto sh = ChildProcess::spawn(spec);
  ASSERT_TRUE(sh.ok()) << sh.error().message;
  StdioPeer out(**sh);
  auto line = out.next_line(4000);
  ASSERT_TRUE(line.has_value()) << (*sh)->stderr_tail();
  auto parsed = parse_json(*line);
  ASSERT_TRUE(parsed.ok()) << *line;
  pid_t upstream = static_cast<pid_t>(json_int(*parsed, "pid").value_or(0));
  ASSERT_GT(upstream, 0);
  ASSERT_TRUE((*sh)->write("go\n").ok());
  auto start = Clock::now();
  bool gone = false;
  while (!gone && elapsed_ms(start) < 3000) {
    std::ifstream stat("/proc/" + std::to_string(upstream) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t paren = text.rfind(')');
    gone = paren == std::string::npos || text[paren + 2] == 'Z';
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the upstream outlived its parent";
}

}  // namespace
}  // namespace quiver
