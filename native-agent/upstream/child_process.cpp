#include "native-agent/upstream/child_process.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "native-agent/base/clock.h"

extern char** environ;

namespace quiver {
namespace {

std::string errno_text(int err) {
  char buf[128];
  // GNU strerror_r returns the message (possibly not in buf).
  return std::string(strerror_r(err, buf, sizeof buf));
}

// The time left until `deadline_ms` as a poll(2) timeout; -1 stays "no limit".
int remaining_ms(int64_t deadline_ms) {
  if (deadline_ms < 0) return -1;
  int64_t left = deadline_ms - steady_ms();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// pipe2 with O_CLOEXEC, ends moved above 2 so that dup2 onto 0..2 in the child always clears
// close-on-exec (dup2(fd, fd) would not).
bool make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    if (fds[i] <= 2) {
      int moved = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
      if (moved < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        return false;
      }
      ::close(fds[i]);
      fds[i] = moved;
    }
  }
  return true;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  // pidfd_open sets close-on-exec itself.
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  return fd >= 0 ? static_cast<int>(fd) : -1;
#else
  (void)pid;
  return -1;
#endif
}

// A write(2) that reports EPIPE instead of raising SIGPIPE, without touching the process-wide
// disposition: block SIGPIPE in this thread, and if the write raised one that was not already
// pending, consume it before unblocking.
ssize_t write_no_sigpipe(int fd, const char* data, size_t len) {
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  sigemptyset(&pending);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t n = ::write(fd, data, len);
  int saved = errno;
  if (n < 0 && saved == EPIPE && !was_pending) {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return n;
}

bool is_executable_file(const std::string& path, int* err) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *err = errno;
    return false;
  }
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    *err = EACCES;
    return false;
  }
  return true;
}

// The path to exec: `command` itself when it holds a '/', else the first executable match in
// the child's PATH. Messages name the command, never its arguments (they may carry secrets).
Result<std::string> resolve_command(const ChildSpec& spec, const std::string& path_value) {
  const std::string& cmd = spec.command;
  if (cmd.empty()) return Error(ErrorCode::kInvalidArgument, "empty command");
  if (cmd.find('\0') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "command holds a NUL byte");
  }
  if (cmd.find('/') != std::string::npos) {
    std::string check = cmd;
    if (cmd[0] != '/' && !spec.working_dir.empty()) check = spec.working_dir + "/" + cmd;
    int err = 0;
    if (is_executable_file(check, &err)) return cmd;
    if (err == ENOENT || err == ENOTDIR) {
      return Error(ErrorCode::kNotFound, "no such command: " + cmd);
    }
    return Error(ErrorCode::kInvalidArgument, "not executable: " + cmd);
  }
  bool seen_not_executable = false;
  size_t start = 0;
  while (start <= path_value.size()) {
    size_t end = path_value.find(':', start);
    if (end == std::string::npos) end = path_value.size();
    std::string dir = path_value.substr(start, end - start);
    start = end + 1;
    if (dir.empty()) continue;  // an empty entry means ".": never search the cwd implicitly
    std::string candidate = dir + "/" + cmd;
    int err = 0;
    if (is_executable_file(candidate, &err)) return candidate;
    if (err != ENOENT && err != ENOTDIR) seen_not_executable = true;
  }
  if (seen_not_executable) return Error(ErrorCode::kInvalidArgument, "not executable: " + cmd);
  return Error(ErrorCode::kNotFound, "no such command: " + cmd + " (not found in PATH)");
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    default:
      return nullptr;
  }
}

}  // namespace

void ignore_sigpipe() { ::signal(SIGPIPE, SIG_IGN); }

Result<std::vector<std::string>> child_environment(const std::map<std::string, std::string>& env,
                                                   const char* const* parent_env) {
  std::map<std::string, std::string> merged;
  for (const char* const* p = parent_env; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry(*p);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = entry.substr(0, eq);
    for (const char* base : kChildBaseEnv) {
      if (name == base) merged[std::string(name)] = std::string(entry.substr(eq + 1));
    }
  }
  if (merged.find("PATH") == merged.end()) merged["PATH"] = kChildDefaultPath;
  for (const auto& [name, value] : env) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument, "invalid environment variable name");
    }
    if (value.find('\0') != std::string::npos) {
      // The name is safe to show; the value may be a secret.
      return Error(ErrorCode::kInvalidArgument, "environment variable " + name + " holds a NUL");
    }
    merged[name] = value;
  }
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [name, value] : merged) out.push_back(name + "=" + value);
  return out;
}

std::string ExitStatus::describe() const {
  if (exited) return "exit code " + std::to_string(code);
  if (signal == 0) return "exit status unknown";
  std::string text = "killed by signal " + std::to_string(signal);
  if (const char* name = signal_name(signal)) text += std::string(" (") + name + ")";
  return text;
}

// ---- BoundedLog ----

BoundedLog::BoundedLog(std::size_t keep_bytes, std::size_t max_line_bytes)
    : keep_bytes_(std::max<std::size_t>(keep_bytes, 1)),
      max_line_bytes_(std::max<std::size_t>(max_line_bytes, 1)) {}

void BoundedLog::append(std::string_view bytes) {
  total_bytes_ += bytes.size();
  if (bytes.size() >= keep_bytes_) {
    tail_.assign(bytes.substr(bytes.size() - keep_bytes_));
  } else {
    tail_.append(bytes);
    if (tail_.size() > keep_bytes_) tail_.erase(0, tail_.size() - keep_bytes_);
  }
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t nl = bytes.find('\n', pos);
    std::string_view piece =
        bytes.substr(pos, nl == std::string_view::npos ? bytes.npos : nl - pos);
    if (!partial_cut_) {
      size_t room = max_line_bytes_ - std::min(partial_.size(), max_line_bytes_);
      if (piece.size() > room) {
        partial_.append(piece.substr(0, room));
        partial_cut_ = true;
      } else {
        partial_.append(piece);
      }
    }
    if (nl == std::string_view::npos) break;
    push_line();
    pos = nl + 1;
  }
}

void BoundedLog::finish() {
  if (!partial_.empty() || partial_cut_) push_line();
}

void BoundedLog::push_line() {
  std::string line = std::move(partial_);
  partial_.clear();
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (partial_cut_) line += "[...]";
  partial_cut_ = false;
  lines_bytes_ += line.size();
  lines_.push_back(std::move(line));
  while (lines_bytes_ > keep_bytes_ && lines_.size() > 1) {
    lines_bytes_ -= lines_.front().size();
    lines_.pop_front();
    ++dropped_lines_;
  }
}

std::string BoundedLog::tail() const { return tail_; }

std::vector<std::string> BoundedLog::take_lines() {
  std::vector<std::string> out(std::make_move_iterator(lines_.begin()),
                               std::make_move_iterator(lines_.end()));
  lines_.clear();
  lines_bytes_ = 0;
  return out;
}

// ---- ChildProcess ----

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn(const ChildSpec& spec) {
  auto env = child_environment(spec.env, environ);
  if (!env.ok()) return env.error();
  std::string path_value = kChildDefaultPath;
  for (const std::string& entry : *env) {
    if (entry.rfind("PATH=", 0) == 0) path_value = entry.substr(5);
  }
  auto exe = resolve_command(spec, path_value);
  if (!exe.ok()) return exe.error();
  for (const std::string& arg : spec.args) {
    if (arg.find('\0') != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument, "an argument of " + spec.command + " holds a NUL");
    }
  }

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(spec.command.c_str()));
  for (const std::string& arg : spec.args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : *env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {in, out, err}) {
      for (int i = 0; i < 2; ++i) {
        if (p[i] >= 0) ::close(p[i]);
        p[i] = -1;
      }
    }
  };
  if (!make_pipe(in) || !make_pipe(out) || !make_pipe(err)) {
    int e = errno;
    close_all();
    return Error(ErrorCode::kInternal,
                 "cannot create pipes for " + spec.command + ": " + errno_text(e));
  }

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  // Descriptors some other part of the agent opened without O_CLOEXEC stay out too.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  if (!spec.working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, spec.working_dir.c_str());
  }
  // Own process group; default dispositions (the agent may ignore SIGPIPE: the child must
  // not inherit that) and an empty signal mask.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, exe->c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    close_all();
    if (rc == ENOENT || rc == ENOTDIR) {
      if (!spec.working_dir.empty()) {
        return Error(ErrorCode::kNotFound, "cannot start " + spec.command + " in " +
                                               spec.working_dir + ": " + errno_text(rc));
      }
      return Error(ErrorCode::kNotFound, "no such command: " + spec.command);
    }
    if (rc == EACCES || rc == ENOEXEC || rc == EPERM || rc == EISDIR) {
      return Error(ErrorCode::kInvalidArgument,
                   "not executable: " + spec.command + " (" + errno_text(rc) + ")");
    }
    return Error(ErrorCode::kInternal, "cannot start " + spec.command + ": " + errno_text(rc));
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);

  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->pidfd_ = open_pidfd(pid);
  child->stdin_fd_ = in[1];
  child->stdout_fd_ = out[0];
  child->stderr_fd_ = err[0];
  child->max_pending_ = spec.max_pending_stdin;
  child->stderr_ = BoundedLog(spec.stderr_keep_bytes);
  set_nonblocking(child->stdin_fd_);
  set_nonblocking(child->stdout_fd_);
  set_nonblocking(child->stderr_fd_);
  return child;
}

ChildProcess::~ChildProcess() {
  (void)terminate(kDestructorGraceMs);
  close_fd(pidfd_);
}

void ChildProcess::close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

Status ChildProcess::write(std::string_view bytes) {
  if (stdin_fd_ < 0) return Error(ErrorCode::kTransport, "the child's stdin is closed");
  if (pending_stdin_bytes() + bytes.size() > max_pending_) {
    return Error(ErrorCode::kTooLarge,
                 "stdin queue full: " + std::to_string(pending_stdin_bytes()) +
                     " bytes pending, limit " + std::to_string(max_pending_));
  }
  if (pending_offset_ > 0 && pending_offset_ == pending_.size()) {
    pending_.clear();
    pending_offset_ = 0;
  }
  pending_.append(bytes.data(), bytes.size());
  return flush();
}

Status ChildProcess::flush() {
  while (stdin_fd_ >= 0 && pending_offset_ < pending_.size()) {
    ssize_t n = write_no_sigpipe(stdin_fd_, pending_.data() + pending_offset_,
                                 pending_.size() - pending_offset_);
    if (n > 0) {
      pending_offset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    int e = errno;
    close_stdin();
    if (e == EPIPE) return Error(ErrorCode::kTransport, "the child closed its stdin (exited?)");
    return Error(ErrorCode::kTransport, "write to the child's stdin failed: " + errno_text(e));
  }
  if (pending_offset_ == pending_.size()) {
    pending_.clear();
    pending_offset_ = 0;
  } else if (pending_offset_ > (1u << 20) && pending_offset_ > pending_.size() / 2) {
    pending_.erase(0, pending_offset_);
    pending_offset_ = 0;
  }
  return Status::Ok();
}

void ChildProcess::close_stdin() {
  close_fd(stdin_fd_);
  pending_.clear();
  pending_offset_ = 0;
}

Result<std::string> ChildProcess::read_stdout(std::size_t max_bytes) {
  drain_stderr();
  std::string out;
  if (stdout_fd_ < 0 || max_bytes == 0) return out;
  // Through a stack buffer: most reads find a line or nothing, so a string sized (and zeroed) to
  // max_bytes up front would cost more than the read.
  char buf[16384];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(stdout_fd_, buf, std::min(sizeof buf, max_bytes - out.size()));
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) {
      close_fd(stdout_fd_);
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    int e = errno;
    close_fd(stdout_fd_);
    return Error(ErrorCode::kTransport, "read from the child's stdout failed: " + errno_text(e));
  }
  return out;
}

Status ChildProcess::read_stderr_once() {
  char buf[16384];
  while (stderr_fd_ >= 0) {
    ssize_t n = ::read(stderr_fd_, buf, sizeof buf);
    if (n > 0) {
      stderr_.append(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // End of file or a read error: either way nothing more will come.
    stderr_.finish();
    close_fd(stderr_fd_);
  }
  return Status::Ok();
}

void ChildProcess::drain_stderr() { (void)read_stderr_once(); }

bool ChildProcess::observe_exit() {
  if (exit_.has_value()) return true;
  if (pid_ <= 0) return false;
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    // ECHILD: someone else reaped it (SIGCHLD ignored?). It is gone; the status is unknown.
    if (errno == ECHILD) {
      exit_ = ExitStatus{false, 0, 0};
      reaped_ = true;
      return true;
    }
    return false;
  }
  if (info.si_pid != pid_) return false;
  ExitStatus status;
  if (info.si_code == CLD_EXITED) {
    status.exited = true;
    status.code = info.si_status;
  } else {
    status.exited = false;
    status.signal = info.si_status;
  }
  exit_ = status;
  return true;
}

std::optional<ExitStatus> ChildProcess::exit_status() {
  observe_exit();
  return exit_;
}

Result<WaitResult> ChildProcess::wait_readable(int timeout_ms, int wake_fd) {
  WaitResult result;
  int64_t deadline = timeout_ms < 0 ? -1 : steady_ms() + timeout_ms;
  (void)flush();
  drain_stderr();
  if (observe_exit() && stdout_fd_ < 0) {
    result.exited = true;
    return result;
  }
  bool exit_known = exit_.has_value();
  while (true) {
    pollfd fds[5];
    int n = 0;
    int i_out = -1, i_err = -1, i_in = -1, i_pid = -1, i_wake = -1;
    if (stdout_fd_ >= 0) {
      i_out = n;
      fds[n++] = {stdout_fd_, POLLIN, 0};
    }
    if (stderr_fd_ >= 0) {
      i_err = n;
      fds[n++] = {stderr_fd_, POLLIN, 0};
    }
    if (stdin_fd_ >= 0 && pending_stdin_bytes() > 0) {
      i_in = n;
      fds[n++] = {stdin_fd_, POLLOUT, 0};
    }
    if (pidfd_ >= 0 && !exit_known) {
      i_pid = n;
      fds[n++] = {pidfd_, POLLIN, 0};
    }
    if (wake_fd >= 0) {
      i_wake = n;
      fds[n++] = {wake_fd, POLLIN, 0};
    }
    int wait = remaining_ms(deadline);
    // Without a pidfd the exit is polled for, in short slices.
    if (pidfd_ < 0 && !exit_known && (wait < 0 || wait > 50)) wait = 50;
    int rc = ::poll(fds, static_cast<nfds_t>(n), wait);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return Error(ErrorCode::kInternal, "poll failed: " + errno_text(errno));
    }
    if (i_err >= 0 && fds[i_err].revents != 0) drain_stderr();
    if (i_in >= 0 && fds[i_in].revents != 0) (void)flush();
    if (i_wake >= 0 && fds[i_wake].revents != 0) result.woken = true;
    if (i_out >= 0 && fds[i_out].revents != 0) result.stdout_ready = true;
    if (!exit_known && (i_pid < 0 || fds[i_pid].revents != 0) && observe_exit()) {
      result.exited = true;
      exit_known = true;
    }
    if (result.woken || result.stdout_ready || result.exited) return result;
    if (deadline >= 0 && steady_ms() >= deadline) return result;
  }
}

Status ChildProcess::terminate(int grace_ms) {
  if (pid_ <= 0 || reaped_) {
    close_stdin();
    return Status::Ok();
  }
  close_stdin();
  if (!observe_exit()) {
    ::killpg(pid_, SIGTERM);
    int64_t deadline = steady_ms() + std::max(grace_ms, 0);
    while (!observe_exit()) {
      int wait = remaining_ms(deadline);
      if (wait == 0) break;
      pollfd fds[2];
      int n = 0;
      if (pidfd_ >= 0) fds[n++] = {pidfd_, POLLIN, 0};
      if (stderr_fd_ >= 0) fds[n++] = {stderr_fd_, POLLIN, 0};
      if (pidfd_ < 0) wait = std::min(wait, 20);
      int rc = ::poll(fds, static_cast<nfds_t>(n), wait);
      if (rc < 0 && errno != EINTR) break;
      drain_stderr();
    }
  }
  // The child is unreaped (a zombie at worst), so its process group id is still ours: kill
  // whatever is left in the group, then the child itself in case it left the group.
  ::killpg(pid_, SIGKILL);
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    pid_t rc;
    do {
      rc = ::waitpid(pid_, &status, 0);
    } while (rc < 0 && errno == EINTR);
    if (rc == pid_ && !exit_.has_value()) {
      ExitStatus s;
      if (WIFEXITED(status)) {
        s.exited = true;
        s.code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        s.signal = WTERMSIG(status);
      }
      exit_ = s;
    }
    reaped_ = true;
  }
  drain_stderr();
  if (stderr_fd_ >= 0) {
    // Still open: a grandchild that left the group holds it. Keep what arrived.
    stderr_.finish();
    close_fd(stderr_fd_);
  }
  close_fd(stdout_fd_);
  return Status::Ok();
}

}  // namespace quiver
