#include "tests/support/redis_server.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
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

RedisServer::RedisServer(RedisServerTls tls) : tls_(std::move(tls)) {
  redisSSLContextError why = REDIS_SSL_CTX_NONE;
  const bool cert = !tls_->client_cert.empty();
  ssl_ = redisCreateSSLContext(tls_->ca_file.c_str(), nullptr,
                               cert ? tls_->client_cert.c_str() : nullptr,
                               cert ? tls_->client_key.c_str() : nullptr, nullptr, &why);
  if (ssl_ == nullptr) {
    error_ = std::string("hiredis TLS context: ") + redisSSLContextGetError(why);
    return;
  }
  char tmpl[] = "/tmp/quiver-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  port_ = free_loopback_port();
  start();
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
  if (ssl_ != nullptr) redisFreeSSLContext(ssl_);
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
    std::vector<std::string> args = {exe,
                                     "--port",
                                     port,
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir_,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--loglevel",
                                     "warning",
                                     "--logfile",
                                     dir_ + "/redis.log"};
    if (tls_) {
      args[2] = "0";  // TLS only
      args.insert(args.end(),
                  {"--tls-port", port, "--tls-cert-file", tls_->cert_file, "--tls-key-file",
                   tls_->key_file, "--tls-ca-cert-file", tls_->ca_file, "--tls-auth-clients",
                   tls_->auth_clients ? "yes" : "no"});
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(exe.c_str(), argv.data());
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
  if (c->err != 0 || (ssl_ != nullptr && redisInitiateSSLWithContext(c, ssl_) != REDIS_OK)) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

}  // namespace quiver::testing
