#include "tests/support/redis_server.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace quiver::testing {

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

RedisServer::RedisServer() {
  char tmpl[] = "/tmp/quiver-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  port_ = free_loopback_port();
  start();
}

RedisServer::~RedisServer() {
  stop();
  if (!dir_.empty()) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }
}

bool RedisServer::start() {
  if (pid_ > 0) return true;
  const char* binary = std::getenv("QUIVER_REDIS_SERVER");
  std::string exe = binary != nullptr ? binary : "redis-server";
  std::string port = std::to_string(port_);
  pid_t pid = ::fork();
  if (pid < 0) {
    error_ = "fork failed";
    return false;
  }
  if (pid == 0) {
    // Bind loopback only; no persistence; die with the test.
    ::execlp(exe.c_str(), exe.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--dir",
             dir_.c_str(), "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel",
             "warning", "--logfile", (dir_ + "/redis.log").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_ = pid;
  // Wait until it answers PING (up to 10 s).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "redis-server exited at start (is it installed?)";
      return false;
    }
    if (redisContext* c = connect()) {
      auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
      bool up = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
      if (reply != nullptr) freeReplyObject(reply);
      redisFree(c);
      if (up) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  error_ = "redis-server did not answer PING within 10 s";
  stop();
  return false;
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
}

redisContext* RedisServer::connect() const {
  timeval timeout{2, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, timeout);
  if (c == nullptr) return nullptr;
  if (c->err != 0) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

}  // namespace quiver::testing
