// Real MCP peers for the upstream tests: where they live, how to start them on loopback, and a
// scratch directory per test. Header-only; the peers come from scripts/setup.sh
// (build/node/node_modules) and tests/peers/.
//
//   TempDir dir;                                      // removed with everything in it
//   auto spec = test_upstream_stdio("t", {"--tools", "5", "--control", dir.path("ctl")});
//   append_line(dir.path("ctl"), R"({"add_tool":"x"})");
//   HttpPeer everything({"node", everything_js(), "streamableHttp"}, {{"PORT", port}}, port);
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/upstream/child_process.h"
#include "native-agent/upstream/upstream.h"
#include "shared/json.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace quiver::testing {

inline std::string node_modules() { return QUIVER_NODE_MODULES; }
inline std::string peers_dir() { return std::string(QUIVER_SOURCE_DIR) + "/tests/peers"; }
inline std::string everything_js() {
  return node_modules() + "/@modelcontextprotocol/server-everything/dist/index.js";
}
inline std::string paginated_everything_js() {
  return node_modules() + "/server-everything-paginated/dist/index.js";
}
inline std::string test_upstream_js() { return peers_dir() + "/test-upstream.mjs"; }
inline std::string loopback_preload() { return peers_dir() + "/loopback-only.cjs"; }
inline std::string quiver_agent_binary() {
  return std::string(QUIVER_BINARY_DIR) + "/native-agent/quiver-agent";
}

inline int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Polls `condition` every 10 ms until it holds or `timeout_ms` passed.
inline bool wait_until(const std::function<bool()>& condition, int64_t timeout_ms) {
  int64_t end = steady_now_ms() + timeout_ms;
  while (!condition()) {
    if (steady_now_ms() >= end) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The changes an UpstreamConnection reports (set_change_callback(log.callback())), kept for the
// test thread to read.
struct ChangeLog {
  std::mutex mu;
  std::vector<UpstreamChange> changes;
  ChangeCallback callback() {
    return [this](const UpstreamChange& c) {
      std::lock_guard<std::mutex> lock(mu);
      changes.push_back(c);
    };
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return changes.size();
  }
  UpstreamChange at(std::size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return changes.at(i);
  }
};

// Pumps `conn` until `condition` holds (or the time is up).
inline bool pump_until(UpstreamConnection& conn, const std::function<bool()>& condition,
                       int64_t timeout_ms) {
  int64_t end = steady_now_ms() + timeout_ms;
  while (!condition()) {
    if (steady_now_ms() >= end) return false;
    conn.pump(50);
  }
  return true;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << line << "\n";
}

// A change made while a stream to the server (the GET stream, or a subscriptions/listen) was
// broken is still seen. Lets the stream open for `settle_ms` (nothing changes meanwhile), then
// sends `control_line` (it cuts the stream and adds the tool `gap_tool`). The change is reported
// within 15 s, the session lives on, the tools are named first and the gap is counted; listing
// the changed kinds again (within `list_ms`) shows `gap_tool`.
inline void expect_a_change_across_a_gap(UpstreamConnection& conn, ChangeLog& log,
                                         const std::string& control,
                                         const std::string& control_line, int64_t settle_ms,
                                         int64_t list_ms) {
  int64_t end = steady_now_ms() + settle_ms;
  while (steady_now_ms() < end) conn.pump(100);
  ASSERT_EQ(log.size(), 0u);

  append_line(control, control_line);
  ASSERT_TRUE(pump_until(
      conn, [&] { return log.size() > 0; }, 15000))
      << "the change made while the stream was broken was not seen";
  UpstreamChange change = log.at(0);
  EXPECT_FALSE(change.session_lost);
  ASSERT_FALSE(change.kinds.empty());
  EXPECT_EQ(change.kinds[0], ListKind::kTools);
  EXPECT_GE(conn.stats().listen_gaps, 1);
  auto second = conn.list(conn.now_ms() + list_ms, change.kinds);
  ASSERT_TRUE(second.ok()) << second.error().message;
  bool seen = false;
  for (const Json& tool : second->list(ListKind::kTools).items) {
    seen = seen || tool.value("name", "") == "gap_tool";
  }
  EXPECT_TRUE(seen) << "the relisted tools lack gap_tool";
}

// tests/peers/test-upstream.mjs over stdio, quiet, with `flags`.
inline UpstreamSpec test_upstream_stdio(const std::string& name,
                                        std::vector<std::string> flags = {}) {
  std::vector<std::string> args = {test_upstream_js(), "stdio", "--quiet"};
  args.insert(args.end(), flags.begin(), flags.end());
  return UpstreamSpec::stdio(name, "node", args);
}

// The counters test-upstream keeps in its --stats-file (null until it wrote one).
inline Json read_stats(const std::string& path) {
  auto parsed = parse_json(read_file(path));
  return parsed.ok() ? *parsed : Json();
}

// Whether something accepts TCP connections on 127.0.0.1:`port`.
inline bool loopback_port_open(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return up;
}

// The direct children of `parent`, from /proc.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::string stat = read_file(std::string("/proc/") + entry->d_name + "/stat");
    std::size_t paren = stat.rfind(')');  // the command name may hold spaces
    if (paren == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
    }
  }
  ::closedir(proc);
  return out;
}

// SIGKILL to the process group of each direct child of `parent` that is not in parent's group
// (supergateway starts each stdio server detached, in a group of its own).
inline void kill_child_groups(pid_t parent) {
  for (pid_t child : children_of(parent)) {
    pid_t group = ::getpgid(child);
    if (group > 0 && group != parent) ::kill(-group, SIGKILL);
  }
}

// A server listening on a loopback port, run as a child in its own process group. Stops (with
// the process groups of its direct children: supergateway starts its stdio server in a group
// of its own) when destroyed.
class HttpPeer {
 public:
  HttpPeer(const std::vector<std::string>& argv, std::map<std::string, std::string> env, int port) {
    ChildSpec spec(argv[0], std::vector<std::string>(argv.begin() + 1, argv.end()), std::move(env));
    auto child = ChildProcess::spawn(spec);
    if (!child.ok()) {
      error_ = child.error().message;
      return;
    }
    child_ = std::move(*child);
    if (!wait_until(
            [&] {
              child_->drain_stderr();
              (void)child_->read_stdout();
              return loopback_port_open(port) || !child_->running();
            },
            15000) ||
        !loopback_port_open(port)) {
      error_ =
          "the peer did not listen on port " + std::to_string(port) + ": " + child_->stderr_tail();
    }
  }
  ~HttpPeer() { stop(); }
  HttpPeer(const HttpPeer&) = delete;
  HttpPeer& operator=(const HttpPeer&) = delete;

  bool ok() const { return child_ != nullptr && error_.empty(); }
  const std::string& error() const { return error_; }

  void stop() {
    if (!child_) return;
    kill_child_groups(child_->pid());
    (void)child_->terminate(0);
    child_.reset();
  }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string error_;
};

// tests/peers/test-upstream.mjs over Streamable HTTP on an ephemeral loopback port.
class TestUpstreamHttp {
 public:
  explicit TestUpstreamHttp(std::vector<std::string> flags = {}) {
    std::vector<std::string> args = {test_upstream_js(), "http", "--quiet"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto child = ChildProcess::spawn(ChildSpec("node", args));
    if (!child.ok()) return;
    child_ = std::move(*child);
    std::string banner;
    int64_t end = steady_now_ms() + 10000;
    while (banner.find('\n') == std::string::npos && steady_now_ms() < end && child_->running()) {
      (void)child_->wait_readable(100);
      auto bytes = child_->read_stdout();
      if (bytes.ok()) banner += *bytes;
    }
    auto info = parse_json(banner.substr(0, banner.find('\n')));
    if (info.ok() && info->is_object()) {
      url_ = info->value("url", "");
      port_ = info->value("port", 0);
    }
  }
  bool ok() const { return !url_.empty(); }
  std::string error() const { return child_ ? child_->stderr_tail() : "node did not start"; }
  const std::string& url() const { return url_; }
  int port() const { return port_; }
  // The server's process (a test stops and continues it to make it hang).
  int pid() const { return child_ ? child_->pid() : -1; }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string url_;
  int port_ = 0;
};

}  // namespace quiver::testing
