// ChildProcess against real processes: cat, sh, ls, env and a real MCP server.
#include "native-agent/upstream/child_process.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/json.h"

namespace quiver {
namespace {

using Clock = std::chrono::steady_clock;

int64_t elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

std::unique_ptr<ChildProcess> spawn_ok(ChildSpec spec) {
  auto child = ChildProcess::spawn(spec);
  EXPECT_TRUE(child.ok()) << (child.ok() ? "" : child.error().message);
  if (!child.ok()) return nullptr;
  return std::move(child.value());
}

// Reads stdout into `out` until `done(out)`, end of file, or timeout_ms.
bool read_until(ChildProcess& child, std::string& out,
                const std::function<bool(const std::string&)>& done, int timeout_ms) {
  auto start = Clock::now();
  while (!done(out)) {
    int left = timeout_ms - static_cast<int>(elapsed_ms(start));
    if (left <= 0) return false;
    auto w = child.wait_readable(left);
    if (!w.ok()) return false;
    auto bytes = child.read_stdout();
    if (!bytes.ok()) return false;
    out += *bytes;
    if (child.stdout_eof()) return done(out);
  }
  return true;
}

std::string read_to_eof(ChildProcess& child, int timeout_ms) {
  std::string out;
  read_until(
      child, out, [&](const std::string&) { return child.stdout_eof(); }, timeout_ms);
  return out;
}

std::optional<ExitStatus> wait_exit(ChildProcess& child, int timeout_ms) {
  auto start = Clock::now();
  while (elapsed_ms(start) < timeout_ms) {
    if (auto s = child.exit_status()) return s;
    (void)child.wait_readable(50);
    (void)child.read_stdout();
  }
  return child.exit_status();
}

// 'R', 'S', 'Z', ... for a live or zombie process; 0 when there is no such process.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return 0;
  return text[paren + 2];
}

// Dead: no such process, or a zombie waiting for whoever adopted it.
bool process_gone(pid_t pid, int timeout_ms) {
  auto start = Clock::now();
  do {
    char s = process_state(pid);
    if (s == 0 || s == 'Z' || s == 'X') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (elapsed_ms(start) < timeout_ms);
  return false;
}

TEST(ChildProcess, EchoesThroughCat) {
  auto child = spawn_ok({"cat", {}, {}});
  ASSERT_NE(child, nullptr);
  EXPECT_GT(child->pid(), 0);
  ASSERT_TRUE(child->write("hello\n").ok());
  ASSERT_TRUE(child->write("world\n").ok());
  std::string out;
  ASSERT_TRUE(read_until(
      *child, out, [](const std::string& s) { return s == "hello\nworld\n"; }, 3000))
      << out;
  child->close_stdin();
  EXPECT_EQ(read_to_eof(*child, 3000), "");
  EXPECT_TRUE(child->stdout_eof());
  auto status = wait_exit(*child, 3000);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->success()) << status->describe();
  auto late = child->write("late\n");
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, ErrorCode::kTransport);
}

TEST(ChildProcess, SeveralMebibytesThroughCatWhileReadingDoNotDeadlock) {
  // 6 MiB queued at once: far more than a pipe holds in either direction. Only writing while
  // reading gets it through.
  std::string payload;
  payload.reserve(6u << 20);
  for (int i = 0; payload.size() < (6u << 20); ++i) payload += "line " + std::to_string(i) + "\n";
  auto child = spawn_ok({"cat", {}, {}});
  ASSERT_NE(child, nullptr);
  auto start = Clock::now();
  ASSERT_TRUE(child->write(payload).ok());
  EXPECT_GT(child->pending_stdin_bytes(), 0u) << "the pipe cannot have taken 6 MiB at once";
  std::string out;
  ASSERT_TRUE(read_until(
      *child, out, [&](const std::string& s) { return s.size() >= payload.size(); }, 4000))
      << "got " << out.size() << " of " << payload.size();
  EXPECT_EQ(child->pending_stdin_bytes(), 0u);
  EXPECT_TRUE(out == payload);
  EXPECT_LT(elapsed_ms(start), 4000);
}

TEST(ChildProcess, StdinQueueIsBoundedAllOrNothing) {
  ChildSpec spec{"sleep", {"5"}, {}};
  spec.max_pending_stdin = 256u << 10;
  auto child = spawn_ok(spec);
  ASSERT_NE(child, nullptr);
  // sleep never reads: the pipe (64 KiB) fills, the rest waits in the queue up to the bound.
  ASSERT_TRUE(child->write(std::string(200u << 10, 'a')).ok());
  size_t pending = child->pending_stdin_bytes();
  EXPECT_GT(pending, 0u);
  auto refused = child->write(std::string(200u << 10, 'b'));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kTooLarge) << refused.error().message;
  EXPECT_EQ(child->pending_stdin_bytes(), pending) << "a refused write queues nothing";
  EXPECT_TRUE(child->write("small").ok());
  EXPECT_TRUE(child->terminate(1000).ok());
}

TEST(ChildProcess, StderrIsCapturedAsABoundedTailAndLines) {
  ChildSpec spec{"sh",
                 {"-c",
                  "i=0; while [ $i -lt 3000 ]; do echo \"stderr line $i\" >&2; i=$((i+1)); done;"
                  " printf 'no newline at end' >&2; echo out"},
                 {}};
  spec.stderr_keep_bytes = 1024;
  auto child = spawn_ok(spec);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(read_to_eof(*child, 4000), "out\n");
  ASSERT_TRUE(wait_exit(*child, 3000).has_value());
  ASSERT_TRUE(child->terminate(100).ok());
  std::string tail = child->stderr_tail();
  EXPECT_LE(tail.size(), 1024u);
  EXPECT_NE(tail.find("stderr line 2999\nno newline at end"), std::string::npos) << tail;
  auto lines = child->take_stderr_lines();
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.back(), "no newline at end");
  EXPECT_EQ(lines[lines.size() - 2], "stderr line 2999");
  size_t kept = 0;
  for (const auto& l : lines) kept += l.size();
  EXPECT_LE(kept, 1024u);
  EXPECT_GT(child->stderr_dropped_lines(), 0u);
  EXPECT_TRUE(child->take_stderr_lines().empty()) << "lines are handed out once";
}

TEST(ChildProcess, ACooperativeChildEndsOnSigterm) {
  auto child = spawn_ok({"sleep", {"30"}, {}});
  ASSERT_NE(child, nullptr);
  auto start = Clock::now();
  ASSERT_TRUE(child->terminate(3000).ok());
  EXPECT_LT(elapsed_ms(start), 1500);
  auto status = child->exit_status();
  ASSERT_TRUE(status.has_value());
  EXPECT_FALSE(status->exited);
  EXPECT_EQ(status->signal, SIGTERM) << status->describe();
  EXPECT_TRUE(process_gone(child->pid(), 100));
}

TEST(ChildProcess, AChildIgnoringSigtermIsKilledAfterTheGrace) {
  auto child =
      spawn_ok({"sh", {"-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"}, {}});
  ASSERT_NE(child, nullptr);
  std::string out;
  ASSERT_TRUE(read_until(
      *child, out, [](const std::string& s) { return s == "ready\n"; }, 3000));
  auto start = Clock::now();
  ASSERT_TRUE(child->terminate(300).ok());
  int64_t took = elapsed_ms(start);
  EXPECT_GE(took, 290);
  EXPECT_LT(took, 2000);
  auto status = child->exit_status();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->signal, SIGKILL) << status->describe();
  EXPECT_NE(status->describe().find("SIGKILL"), std::string::npos);
  EXPECT_TRUE(process_gone(child->pid(), 100));
}

TEST(ChildProcess, TerminateTakesTheGrandchildrenToo) {
  // The grandchild ignores SIGTERM as well: only the group-wide SIGKILL ends it.
  auto child = spawn_ok({"sh", {"-c", "trap '' TERM; sleep 30 & echo $!; wait"}, {}});
  ASSERT_NE(child, nullptr);
  std::string out;
  ASSERT_TRUE(read_until(
      *child, out, [](const std::string& s) { return s.find('\n') != std::string::npos; }, 3000));
  pid_t grandchild = std::atoi(out.c_str());
  ASSERT_GT(grandchild, 0) << out;
  EXPECT_EQ(::kill(grandchild, 0), 0) << "the grandchild runs before terminate";
  EXPECT_EQ(::getpgid(grandchild), child->pid()) << "it is in the child's process group";
  ASSERT_TRUE(child->terminate(200).ok());
  EXPECT_TRUE(process_gone(child->pid(), 100));
  EXPECT_TRUE(process_gone(grandchild, 2000)) << "grandchild " << grandchild << " survived";
}

TEST(ChildProcess, TheDestructorReapsRunningAndExitedChildren) {
  pid_t running_pid = 0;
  {
    auto child = spawn_ok({"sleep", {"30"}, {}});
    ASSERT_NE(child, nullptr);
    running_pid = child->pid();
  }
  EXPECT_EQ(::waitpid(running_pid, nullptr, WNOHANG), -1) << "already reaped";
  EXPECT_EQ(errno, ECHILD);
  EXPECT_EQ(process_state(running_pid), 0) << "no zombie left";

  pid_t exited_pid = 0;
  {
    auto child = spawn_ok({"true", {}, {}});
    ASSERT_NE(child, nullptr);
    exited_pid = child->pid();
    auto status = wait_exit(*child, 3000);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(status->success());
    // Observed, not reaped yet: the process group id stays reserved until terminate.
    EXPECT_EQ(process_state(exited_pid), 'Z');
  }
  EXPECT_EQ(::waitpid(exited_pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(process_state(exited_pid), 0) << "no zombie left";
}

TEST(ChildProcess, ExitCodeIsExposedAndOutputSurvivesTheExit) {
  auto child = spawn_ok({"sh", {"-c", "echo bye; exit 3"}, {}});
  ASSERT_NE(child, nullptr);
  auto start = Clock::now();
  while (!child->exit_status() && elapsed_ms(start) < 3000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto status = child->exit_status();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited);
  EXPECT_EQ(status->code, 3);
  EXPECT_EQ(status->describe(), "exit code 3");
  // wait_readable returns at once: stdout still has the line, then end of file.
  auto w = child->wait_readable(2000);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->stdout_ready || w->exited);
  EXPECT_EQ(read_to_eof(*child, 2000), "bye\n");
  start = Clock::now();
  w = child->wait_readable(2000);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->exited);
  EXPECT_LT(elapsed_ms(start), 500) << "exited and at end of file: nothing to wait for";
}

TEST(ChildProcess, SpawnFailuresAreClearErrors) {
  auto missing = ChildProcess::spawn({"quiver-no-such-command-4711", {"--secret=hunter2"}, {}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("quiver-no-such-command-4711"), std::string::npos);
  EXPECT_EQ(missing.error().message.find("hunter2"), std::string::npos) << "args stay out";

  auto missing_path = ChildProcess::spawn({"/nonexistent/dir/tool", {}, {}});
  ASSERT_FALSE(missing_path.ok());
  EXPECT_EQ(missing_path.error().code, ErrorCode::kNotFound);

  auto directory = ChildProcess::spawn({"/tmp", {}, {}});
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(directory.error().message.find("not executable"), std::string::npos);

  char dir_tmpl[] = "/tmp/quiver-child-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_tmpl), nullptr);
  std::string dir = dir_tmpl;
  std::string no_x = dir + "/no-x";
  std::ofstream(no_x) << "#!/bin/sh\necho hi\n";
  ::chmod(no_x.c_str(), 0644);
  auto not_exec = ChildProcess::spawn({no_x, {}, {}});
  ASSERT_FALSE(not_exec.ok());
  EXPECT_EQ(not_exec.error().code, ErrorCode::kInvalidArgument);

  // Executable bit, but not a program: exec itself fails (ENOEXEC). The error comes back from
  // spawn, not as a child that silently exits 127.
  std::string garbage = dir + "/garbage";
  std::ofstream(garbage) << "this is not a program\n";
  ::chmod(garbage.c_str(), 0755);
  auto bad_exec = ChildProcess::spawn({garbage, {}, {}});
  ASSERT_FALSE(bad_exec.ok());
  EXPECT_EQ(bad_exec.error().code, ErrorCode::kInvalidArgument) << bad_exec.error().message;
  EXPECT_NE(bad_exec.error().message.find("not executable"), std::string::npos);

  // Found through the child's PATH (set in `env`), not the agent's.
  std::string script = dir + "/quiver-path-probe";
  std::ofstream(script) << "#!/bin/sh\necho found\n";
  ::chmod(script.c_str(), 0755);
  auto via_path =
      ChildProcess::spawn({"quiver-path-probe", {}, {{"PATH", dir + ":/usr/bin:/bin"}}});
  ASSERT_TRUE(via_path.ok()) << via_path.error().message;
  EXPECT_EQ(read_to_eof(**via_path, 3000), "found\n");
  via_path.value().reset();

  auto empty = ChildProcess::spawn({"", {}, {}});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  std::string cleanup = "rm -rf '" + dir + "'";
  (void)std::system(cleanup.c_str());
}

TEST(ChildProcess, NoDescriptorLeaksIntoChildren) {
  // A descriptor the agent opened without O_CLOEXEC, and the pipes of a sibling child.
  int stray = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(stray, 0);
  auto sibling = spawn_ok({"cat", {}, {}});
  ASSERT_NE(sibling, nullptr);
  auto lister = spawn_ok({"ls", {"-l", "/proc/self/fd/"}, {{"LC_ALL", "C"}}});
  ASSERT_NE(lister, nullptr);
  std::string listing = read_to_eof(*lister, 3000);
  ::close(stray);
  std::set<int> fds;
  std::istringstream lines(listing);
  std::string line;
  int proc_dirs = 0;
  while (std::getline(lines, line)) {
    size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    size_t name_start = line.rfind(' ', arrow - 1) + 1;
    int fd = std::atoi(line.substr(name_start, arrow - name_start).c_str());
    fds.insert(fd);
    // ls holds one descriptor of its own: the directory it lists.
    if (fd > 2 && line.find("/proc/", arrow) != std::string::npos) ++proc_dirs;
  }
  EXPECT_TRUE(fds.count(0) && fds.count(1) && fds.count(2)) << listing;
  EXPECT_LE(fds.size(), 4u) << "leaked descriptors:\n" << listing;
  EXPECT_EQ(static_cast<int>(fds.size()) - 3, proc_dirs) << listing;
}

TEST(ChildProcess, TheEnvironmentIsMinimalPlusWhatTheSpecGives) {
  ::setenv("QUIVER_TEST_AGENT_SECRET", "do-not-leak", 1);
  auto child = spawn_ok({"env", {}, {{"UPSTREAM_TOKEN", "t0k"}, {"LANG", "C.UTF-8"}}});
  ::unsetenv("QUIVER_TEST_AGENT_SECRET");
  ASSERT_NE(child, nullptr);
  std::string out = read_to_eof(*child, 3000);
  EXPECT_EQ(out.find("QUIVER_TEST_AGENT_SECRET"), std::string::npos) << out;
  EXPECT_NE(out.find("UPSTREAM_TOKEN=t0k\n"), std::string::npos) << out;
  EXPECT_NE(out.find("LANG=C.UTF-8\n"), std::string::npos) << out;
  EXPECT_NE(out.find("PATH="), std::string::npos) << out;
  std::istringstream lines(out);
  std::string line;
  std::set<std::string> allowed = {"PATH", "HOME", "LANG", "UPSTREAM_TOKEN"};
  while (std::getline(lines, line)) {
    EXPECT_TRUE(allowed.count(line.substr(0, line.find('=')))) << line;
  }

  const char* parent[] = {"PATH=/p", "HOME=/h", "SECRET=x", "LANG=de_DE", "NOEQUALS", nullptr};
  auto env = child_environment({{"HOME", "/override"}, {"A", "1"}}, parent);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, (std::vector<std::string>{"A=1", "HOME=/override", "LANG=de_DE", "PATH=/p"}));
  const char* bare[] = {nullptr};
  env = child_environment({}, bare);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, (std::vector<std::string>{std::string("PATH=") + kChildDefaultPath}));
  EXPECT_FALSE(child_environment({{"A=B", "1"}}, bare).ok());
  EXPECT_FALSE(child_environment({{"", "1"}}, bare).ok());
  auto nul = child_environment({{"K", std::string("se\0cret", 7)}}, bare);
  ASSERT_FALSE(nul.ok());
  EXPECT_EQ(nul.error().message.find("cret"), std::string::npos) << "values stay out";
}

TEST(ChildProcess, WritingToADeadChildIsAnErrorNotASignal) {
  // SIGPIPE at its default for this test (another test of the binary may have ignored it, as the
  // agent does): a raised SIGPIPE would kill the process.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  struct sigaction before {};
  ::sigaction(SIGPIPE, &dfl, &before);
  struct Restore {
    struct sigaction old;
    ~Restore() { ::sigaction(SIGPIPE, &old, nullptr); }
  } restore{before};
  auto child = spawn_ok({"true", {}, {}});
  ASSERT_NE(child, nullptr);
  ASSERT_TRUE(wait_exit(*child, 3000).has_value());
  auto st = child->write("anyone there?\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kTransport) << st.error().message;
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0) << "no SIGPIPE left pending";
}

TEST(ChildProcess, ChildrenStartWithDefaultSignalsEvenWhenTheAgentIgnoresSigpipe) {
  struct sigaction old {};
  ::sigaction(SIGPIPE, nullptr, &old);
  ignore_sigpipe();
  auto child = spawn_ok({"grep", {"^SigIgn", "/proc/self/status"}, {}});
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_NE(child, nullptr);
  std::string out = read_to_eof(*child, 3000);
  EXPECT_EQ(out.find("SigIgn:"), 0u) << out;
  unsigned long long mask = std::strtoull(out.c_str() + 7, nullptr, 16);
  EXPECT_EQ(mask & (1ull << (SIGPIPE - 1)), 0ull) << out;
}

TEST(ChildProcess, WaitTimesOutOrWakesOnTheExtraDescriptor) {
  auto child = spawn_ok({"sleep", {"5"}, {}});
  ASSERT_NE(child, nullptr);
  auto start = Clock::now();
  auto w = child->wait_readable(150);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->timed_out());
  EXPECT_GE(elapsed_ms(start), 140);

  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(efd, 0);
  std::thread waker([efd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    uint64_t one = 1;
    (void)!::write(efd, &one, sizeof one);
  });
  start = Clock::now();
  w = child->wait_readable(4000, efd);
  waker.join();
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->woken);
  EXPECT_FALSE(w->stdout_ready);
  EXPECT_LT(elapsed_ms(start), 2000);
  ::close(efd);

  // The exit itself wakes a waiter (the child's stdout is still open until then).
  auto quick = spawn_ok({"sleep", {"0.2"}, {}});
  ASSERT_NE(quick, nullptr);
  start = Clock::now();
  bool exited = false;
  while (!exited && elapsed_ms(start) < 3000) {
    auto r = quick->wait_readable(3000);
    ASSERT_TRUE(r.ok());
    exited = r->exited;
    (void)quick->read_stdout();
  }
  EXPECT_TRUE(exited);
  EXPECT_LT(elapsed_ms(start), 2000);
}

TEST(BoundedLog, SplitsLinesAtEveryByteBoundaryAndCutsLongOnes) {
  const std::string text = "first\r\nsecond\n\nthird-is-long-enough\nlast";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    BoundedLog log(1024, 10);
    log.append(text.substr(0, cut));
    log.append(text.substr(cut));
    log.finish();
    EXPECT_EQ(log.take_lines(),
              (std::vector<std::string>{"first", "second", "", "third-is-l[...]", "last"}))
        << "cut at " << cut;
    EXPECT_EQ(log.tail(), text);
    EXPECT_EQ(log.total_bytes(), text.size());
  }
  BoundedLog small(8);
  small.append("0123456789abcdef");
  EXPECT_EQ(small.tail(), "89abcdef");
  small.append("\nx\ny\n");
  EXPECT_EQ(small.tail(), "def\nx\ny\n");
  auto lines = small.take_lines();
  EXPECT_EQ(lines.back(), "y");
  EXPECT_GT(small.dropped_lines(), 0u);
}

TEST(ChildProcess, SpeaksToTheRealServerEverythingOverStdio) {
  std::string script =
      std::string(QUIVER_NODE_MODULES) + "/@modelcontextprotocol/server-everything/dist/index.js";
  ASSERT_EQ(::access(script.c_str(), R_OK), 0) << "run scripts/setup.sh: " << script;
  auto child = spawn_ok({"node", {script, "stdio"}, {}});
  ASSERT_NE(child, nullptr);
  ASSERT_TRUE(child
                  ->write(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{)"
                          R"("protocolVersion":"2025-11-25","capabilities":{},)"
                          R"("clientInfo":{"name":"quiver-test","version":"0"}}})"
                          "\n")
                  .ok());
  std::string out;
  ASSERT_TRUE(read_until(
      *child, out, [](const std::string& s) { return s.find('\n') != std::string::npos; }, 4500))
      << "stdout: " << out << "\nstderr: " << child->stderr_tail();
  auto reply = parse_json(out.substr(0, out.find('\n')));
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(json_string(*reply, "jsonrpc"), "2.0");
  EXPECT_EQ(json_int(*reply, "id"), 1);
  const Json* result = json_field(*reply, "result");
  ASSERT_NE(result, nullptr) << out;
  const Json* info = json_field(*result, "serverInfo");
  ASSERT_NE(info, nullptr) << out;
  EXPECT_TRUE(json_string(*info, "name").has_value());
  EXPECT_EQ(json_string(*result, "protocolVersion"), "2025-11-25");
  auto start = Clock::now();
  ASSERT_TRUE(child->terminate(2000).ok());
  EXPECT_LT(elapsed_ms(start), 2000) << "node ends on SIGTERM";
}

}  // namespace
}  // namespace quiver
