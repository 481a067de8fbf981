// What the OAuth end-to-end tests (tests/integration/oauth_e2e_test.cpp) run and play: the
// fixtures of tests/fixtures/oauth/ as Node 22 children (oidc-provider, the protected MCP server,
// the hostile server), the real `quiver-agent serve` as a child with every line it logs kept, the
// browser that walks an authorization URL through the authorization server's redirects (with a
// cookie jar, as the user the fixture logs in), and SQLite row counts of the token store.
//
//   NodeFixture as("auth_server.mjs", {"--access-ttl", "4"});   // as.info()["issuer"]
//   AgentServe agent(config_json, {{"QUIVER_OAUTH_KEY", key}}); // agent.port(), agent.logs()
//   Result<std::string> back = authorize_in_browser(url, "alice");  // the redirect leaving the AS
#pragma once

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>
#include <sqlite3.h>
#include <strings.h>

#include "native-agent/upstream/child_process.h"
#include "shared/json.h"
#include "shared/status.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace quiver::testing {

inline std::string node22() { return node_modules() + "/node/bin/node"; }
inline std::string oauth_fixture(const std::string& script) {
  return std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/oauth/" + script;
}

// A child process whose stdout and stderr are read on a thread of its own into lines (so that a
// chatty child never blocks on a full pipe); stopped (its process group) when destroyed.
class DrainedChild {
 public:
  explicit DrainedChild(const ChildSpec& spec) {
    auto child = ChildProcess::spawn(spec);
    if (!child.ok()) {
      error_ = child.error().message;
      return;
    }
    child_ = std::move(*child);
    reader_ = std::thread([this] {
      std::string partial;
      while (!stop_) {
        auto w = child_->wait_readable(50);
        Result<std::string> bytes = child_->read_stdout();
        std::vector<std::string> err = child_->take_stderr_lines();
        std::lock_guard<std::mutex> lock(mu_);
        if (bytes.ok()) partial += *bytes;
        for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
          stdout_lines_.push_back(partial.substr(0, nl));
          lines_.push_back(partial.substr(0, nl));
          partial.erase(0, nl + 1);
        }
        for (std::string& l : err) lines_.push_back(std::move(l));
        if (w.ok() && w->exited && child_->stdout_eof() && !exited_) {
          std::optional<ExitStatus> status = child_->exit_status();
          if (status && status->exited) exit_code_ = status->code;
          exited_ = true;
        }
        if (exited_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  ~DrainedChild() { stop(); }
  DrainedChild(const DrainedChild&) = delete;
  DrainedChild& operator=(const DrainedChild&) = delete;

  void stop() {
    if (!child_) return;
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    (void)child_->terminate(2000);
    for (std::string& l : child_->take_stderr_lines()) lines_.push_back(std::move(l));
    child_.reset();
  }
  bool started() const { return child_ != nullptr; }
  bool exited() const { return exited_; }
  // The exit code once it exited by itself (-1: killed, or still running).
  int exit_code() const { return exit_code_; }
  // Every line it wrote so far, stdout and stderr interleaved as read.
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const std::string& l : lines_) out += l + "\n";
    return out;
  }
  std::vector<std::string> stdout_lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return stdout_lines_;
  }
  const std::string& spawn_error() const { return error_; }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::thread reader_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};
  std::atomic<int> exit_code_{-1};
  std::mutex mu_;
  std::vector<std::string> lines_;
  std::vector<std::string> stdout_lines_;
  std::string error_;
};

// One fixture of tests/fixtures/oauth/ under Node 22; info() is its ready line.
class NodeFixture {
 public:
  NodeFixture(const std::string& script, std::vector<std::string> args = {}) {
    args.insert(args.begin(), oauth_fixture(script));
    child_ = std::make_unique<DrainedChild>(
        ChildSpec(node22(), std::move(args), {{"QUIVER_NODE_MODULES", node_modules()}}));
    wait_until([&] { return !child_->stdout_lines().empty() || child_->exited(); }, 20000);
    auto lines = child_->stdout_lines();
    if (!lines.empty()) {
      auto j = parse_json(lines[0]);
      if (j.ok() && j->is_object()) info_ = *j;
    }
  }
  bool ok() const { return info_.is_object(); }
  std::string error() { return child_->spawn_error() + child_->text(); }
  const Json& info() const { return info_; }
  std::string str(const char* key) const { return info_.value(key, std::string()); }
  std::string logs() { return child_->text(); }

 private:
  std::unique_ptr<DrainedChild> child_;
  Json info_;
};

// An HTTP request to an absolute http://127.0.0.1 URL. `follow` stays off: redirects are answers.
inline httplib::Result http_request(const std::string& method, const std::string& url,
                                    const httplib::Headers& headers = {},
                                    const std::string& body = "",
                                    const std::string& content_type = "application/json",
                                    int timeout_s = 30) {
  std::size_t scheme = url.find("://");
  std::size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  httplib::Client c(url.substr(0, path));
  c.set_connection_timeout(3);
  c.set_read_timeout(timeout_s);
  c.set_url_encode(false);  // the URL is sent as given ('+' in a query stays a space)
  const std::string p = path == std::string::npos ? "/" : url.substr(path);
  if (method == "POST") return c.Post(p, headers, body, content_type);
  if (method == "DELETE") return c.Delete(p, headers, body, content_type);
  return c.Get(p, headers);
}

inline Json json_of(const httplib::Result& r) {
  if (!r) return Json();
  JsonParseOptions o;
  o.max_depth = 2 * kMaxJsonDepth;
  Result<Json> j = parse_json(r->body, o);
  return j.ok() ? *j : Json();
}

// The origin (scheme://host:port) of an absolute URL.
inline std::string url_origin(const std::string& url) {
  std::size_t scheme = url.find("://");
  std::size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return url.substr(0, path);
}

// The user's browser: GETs `url`, follows each Location itself (keeping the cookies the
// authorization server sets, and `fixture_user=<user>` for auth_server.mjs's login page) while
// the redirects stay at the authorization server's origin; answers the first redirect that
// leaves it (Quiver's callback, a loopback redirect), not fetched.
inline Result<std::string> authorize_in_browser(const std::string& url, const std::string& user,
                                                bool deny = false) {
  const std::string origin = url_origin(url);
  std::map<std::string, std::string> cookies = {{"fixture_user", user}};
  if (deny) cookies["fixture_deny"] = "1";
  std::string at = url;
  for (int hop = 0; hop < 12; ++hop) {
    std::string cookie;
    for (const auto& [k, v] : cookies) cookie += (cookie.empty() ? "" : "; ") + k + "=" + v;
    auto r = http_request("GET", at, {{"Cookie", cookie}}, "", "", 10);
    if (!r) return Error(ErrorCode::kTransport, "the browser got no answer from " + at);
    for (const auto& [name, value] : r->headers) {
      if (name.size() != 10 || strncasecmp(name.c_str(), "set-cookie", 10) != 0) continue;
      std::string pair = value.substr(0, value.find(';'));
      std::size_t eq = pair.find('=');
      if (eq != std::string::npos && eq > 0) cookies[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    std::string location = r->get_header_value("Location");
    if (r->status < 300 || r->status >= 400 || location.empty()) {
      return Error(ErrorCode::kInvalidReply, "the browser stopped at " + at + " with " +
                                                 std::to_string(r->status) + ": " +
                                                 r->body.substr(0, 300));
    }
    if (location[0] == '/') location = url_origin(at) + location;
    if (url_origin(location) != origin) return location;
    at = location;
  }
  return Error(ErrorCode::kInvalidReply, "no redirect left " + origin + " within 12 hops");
}

// `quiver-agent serve` with `config` (written to <dir>/agent.json; data_dir defaults to <dir>)
// on a free loopback port, started and stopped (SIGTERM) by the test.
class AgentServe {
 public:
  AgentServe(Json config, std::map<std::string, std::string> env, const std::string& dir,
             const std::string& name = "agent") {
    if (!config["quiver"].contains("data_dir")) config["quiver"]["data_dir"] = dir + "/" + name;
    config_path_ = dir + "/" + name + ".json";
    // The free port can be taken before the agent binds it (another test process, or a client's
    // ephemeral port): an agent that could not listen is started again on a new port, three times.
    for (int attempt = 1; attempt <= 3; ++attempt) {
      port_ = free_loopback_port();
      // In the file too: the default redirect URI (http://<listen>/v1/oauth/callback) is derived
      // from the file's `listen`, not from serve's --listen.
      config["quiver"]["listen"] = "127.0.0.1:" + std::to_string(port_);
      std::ofstream(config_path_) << config.dump(2);
      child_ = std::make_unique<DrainedChild>(
          ChildSpec(quiver_agent_binary(),
                    {"serve", "--config", config_path_, "--listen",
                     "127.0.0.1:" + std::to_string(port_), "--no-wait", "--log-level", "debug"},
                    env));
      ready_ = wait_until(
                   [&] {
                     if (child_->exited()) return true;
                     auto r = http_request("GET", url("/healthz"), {}, "", "", 2);
                     return r && r->status == 200;
                   },
                   20000) &&
               !child_->exited();
      const bool port_taken =
          child_->exited() && child_->text().find("cannot listen on") != std::string::npos;
      if (ready_ || !port_taken) return;
    }
  }
  bool ok() const { return ready_; }
  int port() const { return port_; }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string logs() { return child_->spawn_error() + child_->text(); }
  const std::string& config_path() const { return config_path_; }
  void stop() { child_->stop(); }

 private:
  int port_ = 0;
  std::string config_path_;
  std::unique_ptr<DrainedChild> child_;
  bool ready_ = false;
};

// SELECT COUNT(*) ... on a SQLite file (read-only); -1 when the file or the table is not there.
inline int sqlite_count(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      n = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

}  // namespace quiver::testing
