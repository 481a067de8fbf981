// A child process for stdio upstreams: one spawned command with three non-blocking pipes.
//
// The stdio MCP transport needs a child that cannot hurt the agent: it must not inherit the
// agent's secrets or descriptors, must not kill the agent with SIGPIPE when it dies, must not
// fill the agent's memory with its stderr, and must not outlive the connection (nor leave a
// zombie). `ChildProcess` owns exactly that and nothing of MCP: bytes go in through `write`,
// come out through `read_stdout`, stderr is kept as a bounded tail and as lines for the log.
//
//   auto child = ChildProcess::spawn({"node", {"server.js", "stdio"}, {{"API_KEY", key}}});
//   if (!child.ok()) ...                        // no such command, not executable: error values
//   (*child)->write(line);                      // queued, written as the pipe takes it
//   auto w = (*child)->wait_readable(500);      // poll(2): stdout ready, exited, woken, timeout
//   auto bytes = (*child)->read_stdout();       // what is there now ("" when nothing, see eof)
//   (*child)->terminate(2000);                  // close stdin, SIGTERM the group, SIGKILL, reap
//
// Environment: the child sees only PATH, HOME and LANG taken from the agent (PATH defaults to
// /usr/local/bin:/usr/bin:/bin when the agent has none) with the spec's `env` merged on top. A
// credential the upstream needs goes into `env` explicitly; nothing else leaks through.
//
// Descriptors: every descriptor the agent opens here is close-on-exec, and the child closes
// every descriptor above 2 before exec (posix_spawn with closefrom), so neither this child nor a
// sibling spawned later inherits another's pipes or the agent's sockets.
//
// Process group: the child leads its own process group; `terminate` signals the whole group, so
// grandchildren that stay in it go too (one that calls setsid/setpgid escapes: that is the
// POSIX contract). The child's exit is observed without reaping it (waitid WNOWAIT), so the
// group id cannot be recycled before `terminate` or the destructor has killed the group; only
// then is the child reaped. Killed grandchildren are re-parented to init, which reaps them.
//
// SIGPIPE: writes to the child block SIGPIPE in the writing thread and consume a pending one
// (the MSG_NOSIGNAL equivalent for pipes), so a dead child is an error value from `write`, with
// no process-wide change. Other descriptors (sockets) still raise SIGPIPE: `main` should call
// `ignore_sigpipe()` once at start-up.
//
// Threading: one ChildProcess is used by one thread at a time; different children are
// independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "shared/status.h"

namespace quiver {

// Ignores SIGPIPE for the whole process (signal(SIGPIPE, SIG_IGN)), so that a write to any
// closed pipe or socket is EPIPE rather than death. For main(); ChildProcess does not need it.
void ignore_sigpipe();

struct ChildSpec {
  ChildSpec() = default;
  ChildSpec(std::string command_in, std::vector<std::string> args_in = {},
            std::map<std::string, std::string> env_in = {})
      : command(std::move(command_in)), args(std::move(args_in)), env(std::move(env_in)) {}

  std::string command;                        // a path, or a name looked up in the child's PATH
  std::vector<std::string> args;              // argv[1..]; never copied into error messages
  std::map<std::string, std::string> env;     // merged onto the base (PATH, HOME, LANG)
  std::string working_dir;                    // empty: the agent's
  std::size_t max_pending_stdin = 8u << 20;   // bytes queued for stdin before write() refuses
  std::size_t stderr_keep_bytes = 64u << 10;  // the stderr tail and the pending lines, each
};

// The names taken from the agent's environment into every child's (before `env` is merged).
inline constexpr const char* kChildBaseEnv[] = {"PATH", "HOME", "LANG"};
inline constexpr const char* kChildDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// The child's environment as NAME=value strings, sorted by name: the base names from
// `parent_env` (a null-terminated `environ`-style array), then `env` on top. Fails on a name
// that is empty or holds '=' or NUL, or a value holding NUL.
Result<std::vector<std::string>> child_environment(const std::map<std::string, std::string>& env,
                                                   const char* const* parent_env);

struct ExitStatus {
  bool exited = false;  // true: exited with `code`; false: killed by `signal`
  int code = 0;
  int signal = 0;

  bool success() const { return exited && code == 0; }
  std::string describe() const;  // "exit code 3", "killed by signal 9 (SIGKILL)"
};

// Keeps the last bytes of a stream and splits it into lines for a log, within a fixed bound.
// Lines longer than `max_line_bytes` are cut (marked with "[...]"); when lines are not taken
// fast enough the oldest are dropped and counted.
class BoundedLog {
 public:
  explicit BoundedLog(std::size_t keep_bytes, std::size_t max_line_bytes = 4096);

  void append(std::string_view bytes);
  void finish();  // end of stream: a trailing partial line becomes a line

  std::string tail() const;               // at most keep_bytes: the newest bytes seen
  std::vector<std::string> take_lines();  // complete lines not taken yet, oldest first
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t dropped_lines() const { return dropped_lines_; }

 private:
  void push_line();

  std::size_t keep_bytes_;
  std::size_t max_line_bytes_;
  std::string tail_;
  std::string partial_;
  bool partial_cut_ = false;
  std::deque<std::string> lines_;
  std::size_t lines_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t dropped_lines_ = 0;
};

struct WaitResult {
  bool stdout_ready = false;  // bytes (or end of file) to read with read_stdout()
  bool exited = false;        // the child has exited (exit_status() has it)
  bool woken = false;         // the extra wake descriptor is readable
  bool timed_out() const { return !stdout_ready && !exited && !woken; }
};

class ChildProcess {
 public:
  // Starts the command. Errors: kNotFound (no such command), kInvalidArgument (not executable,
  // bad environment, empty command), kInternal (out of descriptors or processes).
  static Result<std::unique_ptr<ChildProcess>> spawn(const ChildSpec& spec);

  // Terminates (grace kDestructorGraceMs) unless already done; always reaps.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  static constexpr int kDestructorGraceMs = 1000;

  pid_t pid() const { return pid_; }

  // Queues `bytes` for stdin and writes what the pipe takes now; the rest goes out from
  // flush(), wait_readable() and later writes. All or nothing: kTooLarge when the queue would
  // pass max_pending_stdin (nothing queued). kTransport when the child closed its stdin (it
  // exited): never a signal.
  Status write(std::string_view bytes);
  Status flush();
  std::size_t pending_stdin_bytes() const { return pending_.size() - pending_offset_; }
  // Closes stdin (the child sees end of file). Bytes still queued are dropped.
  void close_stdin();

  // The bytes stdout holds now, up to max_bytes; "" when none are there yet or at end of file
  // (then stdout_eof() is true). kTransport on a read error.
  Result<std::string> read_stdout(std::size_t max_bytes = 64u << 10);
  bool stdout_eof() const { return stdout_fd_ < 0; }

  // stderr: read whenever the child is waited on, read from, or terminated.
  std::string stderr_tail() const { return stderr_.tail(); }
  std::vector<std::string> take_stderr_lines() { return stderr_.take_lines(); }
  uint64_t stderr_dropped_lines() const { return stderr_.dropped_lines(); }
  void drain_stderr();

  // Waits up to timeout_ms (< 0: no limit) until stdout is ready, the child exits, or
  // `wake_fd` (optional, e.g. an eventfd; not read here) is readable. Meanwhile it drains
  // stderr and flushes queued stdin. Returns at once when stdout is already at end of file and
  // the child has exited. kInternal if poll(2) fails.
  Result<WaitResult> wait_readable(int timeout_ms, int wake_fd = -1);

  // The exit status once the child has exited (checked without blocking), else nullopt.
  std::optional<ExitStatus> exit_status();
  bool running() { return !exit_status().has_value(); }

  // Closes stdin, sends SIGTERM to the process group, waits up to grace_ms for the child to
  // exit, then SIGKILLs the group (stragglers included) and reaps the child. stdout not read
  // yet is discarded; stderr is drained into the log first. Idempotent.
  Status terminate(int grace_ms);

 private:
  ChildProcess() = default;
  bool observe_exit();  // waitid(WNOWAIT): records the status, does not reap
  void close_fd(int& fd);
  Status read_stderr_once();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  bool reaped_ = false;
  std::optional<ExitStatus> exit_;
  std::string pending_;
  std::size_t pending_offset_ = 0;
  std::size_t max_pending_ = 0;
  BoundedLog stderr_{64u << 10};
};

}  // namespace quiver
