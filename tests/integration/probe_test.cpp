// `quiver-agent probe`, run as the real binary in a child process: the manifest it prints for real
// servers, --watch seeing a tool added at runtime (stdio and the HTTP GET stream), exit codes,
// and secrets that never reach its output.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>

#include "native-agent/upstream/child_process.h"
#include "shared/json.h"
#include "tests/support/mcp_peers.h"

namespace quiver {
namespace {

using testing::append_line;
using testing::everything_js;
using testing::quiver_agent_binary;
using testing::steady_now_ms;
using testing::TempDir;
using testing::test_upstream_js;

// The binary as a child process, with its stdout read line by line.
class Agent {
 public:
  explicit Agent(std::vector<std::string> args) {
    auto child = ChildProcess::spawn(ChildSpec(quiver_agent_binary(), std::move(args)));
    if (child.ok()) child_ = std::move(*child);
  }
  bool ok() const { return child_ != nullptr; }
  ChildProcess& child() { return *child_; }

  // The next stdout line, or nullopt after timeout_ms (or at end of output).
  std::optional<std::string> line(int64_t timeout_ms) {
    int64_t end = steady_now_ms() + timeout_ms;
    for (;;) {
      std::size_t nl = out_.find('\n');
      if (nl != std::string::npos) {
        std::string l = out_.substr(0, nl);
        out_.erase(0, nl + 1);
        return l;
      }
      int64_t left = end - steady_now_ms();
      if (left <= 0 || child_->stdout_eof()) return std::nullopt;
      (void)child_->wait_readable(static_cast<int>(left));
      auto bytes = child_->read_stdout();
      if (bytes.ok()) out_ += *bytes;
    }
  }

  // Waits for the exit (reading all output); the exit code, or -1 on timeout or a signal.
  int wait_exit(int64_t timeout_ms) {
    int64_t end = steady_now_ms() + timeout_ms;
    while (steady_now_ms() < end) {
      auto bytes = child_->read_stdout();
      if (bytes.ok()) out_ += *bytes;
      if (auto status = child_->exit_status(); status && child_->stdout_eof()) {
        return status->exited ? status->code : -1;
      }
      (void)child_->wait_readable(50);
    }
    return -1;
  }
  std::string all_stdout() const { return out_; }
  std::string all_stderr() { return child_->stderr_tail(); }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string out_;
};

class Probe : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat st {};
    ASSERT_EQ(::stat(quiver_agent_binary().c_str(), &st), 0)
        << "build the agent first: make quiver-agent (" << quiver_agent_binary() << ")";
  }
};

Json parse(const std::string& text) {
  auto j = parse_json(text);
  EXPECT_TRUE(j.ok()) << text.substr(0, 500);
  return j.ok() ? *j : Json();
}

TEST_F(Probe, PrintsTheManifestOfServerEverything) {
  Agent agent({"probe", "--stdio", "node '" + everything_js() + "' stdio"});
  ASSERT_TRUE(agent.ok());
  ASSERT_EQ(agent.wait_exit(8000), 0) << agent.all_stderr();
  Json report = parse(agent.all_stdout());
  EXPECT_EQ(report.value("status", ""), "ok");
  EXPECT_EQ(report.value("protocol_version", ""), "2025-11-25");
  EXPECT_EQ(report["server_info"].value("name", ""), "mcp-servers/everything");
  EXPECT_EQ(report.value("etag", "").rfind("sha256-", 0), 0u);
  EXPECT_GE(report["timings"].value("total_ms", -1), 0);
  EXPECT_EQ(report["lists"]["tools"].value("count", 0), 13);
  EXPECT_EQ(report["lists"]["resources"].value("count", 0), 7);
  EXPECT_EQ(report["lists"]["resource_templates"].value("count", 0), 2);
  EXPECT_EQ(report["lists"]["prompts"].value("count", 0), 4);
  const Json& tools = report["manifest"]["tools"];
  EXPECT_EQ(tools.value("state", ""), "ok");
  EXPECT_EQ(tools["items"].size(), 13u);
  ASSERT_TRUE(tools["hashes"].is_object());
  EXPECT_EQ(tools["hashes"].size(), 13u);
  EXPECT_EQ(tools["hashes"].value("echo", "").rfind("sha256-", 0), 0u);
}

TEST_F(Probe, AbsentListsAreNotFailures) {
  TempDir dir;
  Agent agent({"probe", "--stdio",
               "node " + testing::node_modules() +
                   "/@modelcontextprotocol/server-filesystem/dist/index.js " + dir.root()});
  ASSERT_EQ(agent.wait_exit(8000), 0) << agent.all_stderr();
  Json report = parse(agent.all_stdout());
  EXPECT_EQ(report.value("status", ""), "ok");
  EXPECT_EQ(report["lists"]["prompts"].value("state", ""), "absent");
  EXPECT_EQ(report["manifest"]["prompts"].value("state", ""), "absent");
}

TEST_F(Probe, WatchShowsAToolAddedAtRuntimeWithinASecond) {
  TempDir dir;
  std::string ctl = dir.path("ctl");
  Agent agent({"probe", "--watch", "--stdio",
               "node " + test_upstream_js() + " stdio --quiet --control " + ctl});
  ASSERT_TRUE(agent.ok());
  auto first = agent.line(5000);
  ASSERT_TRUE(first) << agent.all_stderr();
  Json one = parse(*first);
  EXPECT_EQ(one["lists"]["tools"].value("count", 0), 3);

  int64_t added = steady_now_ms();
  append_line(ctl, R"({"add_tool":"added_at_runtime"})");
  auto second = agent.line(1500);
  int64_t seen_after = steady_now_ms() - added;
  ASSERT_TRUE(second) << agent.all_stderr();
  EXPECT_LT(seen_after, 1000);
  Json two = parse(*second);
  EXPECT_EQ(two["lists"]["tools"].value("count", 0), 4);
  EXPECT_TRUE(two["manifest"]["tools"]["hashes"].contains("added_at_runtime"));
  EXPECT_NE(two.value("etag", ""), one.value("etag", ""));

  ASSERT_EQ(::kill(agent.child().pid(), SIGTERM), 0);
  EXPECT_EQ(agent.wait_exit(4000), 0);
}

TEST_F(Probe, WatchOverHttpHearsTheNotificationStream) {
  testing::TestUpstreamHttp peer;
  ASSERT_TRUE(peer.ok()) << peer.error();
  std::string url = peer.url();

  Agent agent({"probe", "--watch", "--allow-private", "--url", url});
  auto first = agent.line(5000);
  ASSERT_TRUE(first) << agent.all_stderr();
  EXPECT_EQ(parse(*first)["lists"]["tools"].value("count", 0), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the GET stream opens

  httplib::Client control("127.0.0.1", peer.port());
  int64_t added = steady_now_ms();
  auto res = control.Post("/control", R"({"add_tool":"over_http"})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  auto second = agent.line(1500);
  ASSERT_TRUE(second) << agent.all_stderr();
  EXPECT_LT(steady_now_ms() - added, 1000);
  EXPECT_TRUE(parse(*second)["manifest"]["tools"]["hashes"].contains("over_http"));
  ASSERT_EQ(::kill(agent.child().pid(), SIGTERM), 0);
  EXPECT_EQ(agent.wait_exit(4000), 0);
}

TEST_F(Probe, FailureIsExitOneWithAClearMessage) {
  Agent agent({"probe", "--stdio", "sh -c 'exit 3'"});
  EXPECT_EQ(agent.wait_exit(5000), 1);
  EXPECT_EQ(agent.all_stdout(), "");
  std::string err = agent.all_stderr();
  EXPECT_NE(err.find("cannot list"), std::string::npos) << err;
  EXPECT_NE(err.find("exit code 3"), std::string::npos) << err;
  EXPECT_NE(err.find("[TRANSPORT]"), std::string::npos) << err;
}

TEST_F(Probe, PartialListingIsExitOneNamingTheList) {
  Agent agent({"probe", "--stdio",
               "node " + test_upstream_js() + " stdio --quiet --fail-method prompts/list"});
  EXPECT_EQ(agent.wait_exit(8000), 1);
  Json report = parse(agent.all_stdout());
  EXPECT_EQ(report.value("status", ""), "partial");
  EXPECT_EQ(report["lists"]["prompts"].value("state", ""), "failed");
  EXPECT_EQ(report["manifest"]["tools"].value("state", ""), "ok");
  EXPECT_NE(agent.all_stderr().find("prompts could not be loaded"), std::string::npos);
}

TEST_F(Probe, UsageErrorsAreExitTwo) {
  std::vector<std::vector<std::string>> bad = {
      {"probe"},
      {"probe", "--stdio", "a", "--url", "http://x/mcp"},
      {"probe", "--stdio", "a", "--timeout-ms", "soon"},
      {"probe", "--stdio", "a | b"},
      {"probe", "--stdio", "'unterminated"},
      {"probe", "--url", "http://x/mcp", "--env", "A=1"},
      {"probe", "--stdio", "a", "--bogus"},
  };
  for (const auto& args : bad) {
    Agent agent(args);
    EXPECT_EQ(agent.wait_exit(3000), 2) << args.back();
    EXPECT_NE(agent.all_stderr().find("quiver-agent probe:"), std::string::npos);
  }
  Agent help({"probe", "--help"});
  EXPECT_EQ(help.wait_exit(3000), 0);
  EXPECT_NE(help.all_stdout().find("--watch"), std::string::npos);
}

TEST_F(Probe, SecretsNeverReachTheOutput) {
  const std::string secret = "sup3rs3cr3t-value";
  std::vector<std::vector<std::string>> runs = {
      {"probe", "--env", "API_TOKEN=" + secret, "--stdio", "sh -c 'exit 2'"},
      {"probe", "--allow-private", "--url", "http://127.0.0.1:1/mcp", "--header",
       "Authorization: Bearer " + secret},
      {"probe", "--url", "http://127.0.0.1:1/mcp", "--header", "NoColon" + secret},
      {"probe", "--stdio", "a", "--env", "NOEQUALS" + secret},
      {"probe", "--stdio", "a", secret},
  };
  for (const auto& args : runs) {
    Agent agent(args);
    int code = agent.wait_exit(5000);
    EXPECT_NE(code, 0);
    EXPECT_EQ(agent.all_stdout().find(secret), std::string::npos) << agent.all_stdout();
    EXPECT_EQ(agent.all_stderr().find(secret), std::string::npos) << agent.all_stderr();
  }
}

}  // namespace
}  // namespace quiver
