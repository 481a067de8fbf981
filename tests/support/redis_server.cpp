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

std::vector<std::string> redis_server_argv(int port, const std::string& dir,
                                           const std::optional<RedisServerTls>& tls) {
  const char* binary = std::getenv("QUIVER_REDIS_SERVER");
  const std::string p = std::to_string(port);
  // Bind loopback only; no persistence; die with the test.
  std::vector<std::string> argv = {binary != nullptr ? binary : "redis-server",
                                   "--port",
                                   tls ? "0" : p,
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   dir,
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--daemonize",
                                   "no",
                                   "--loglevel",
                                   "warning",
                                   "--logfile",
                                   dir + "/redis.log"};
  if (tls) {
    argv.insert(argv.end(), {"--tls-port", p, "--tls-cert-file", tls->cert_file, "--tls-key-file",
                             tls->key_file, "--tls-ca-cert-file", tls->ca_file,
                             "--tls-auth-clients", tls->auth_clients ? "yes" : "no"});
  }
  return argv;
}

pid_t spawn_redis_server(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;  // the parent (or -1: fork failed)
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  ::_exit(127);
}

redisSSLContext* redis_test_ssl_context(const RedisServerTls& tls, std::string* error) {
  redisSSLContextError why = REDIS_SSL_CTX_NONE;
  const bool cert = !tls.client_cert.empty();
  redisSSLContext* ssl =
      redisCreateSSLContext(tls.ca_file.c_str(), nullptr, cert ? tls.client_cert.c_str() : nullptr,
                            cert ? tls.client_key.c_str() : nullptr, nullptr, &why);
  if (ssl == nullptr) *error = std::string("hiredis TLS context: ") + redisSSLContextGetError(why);
  return ssl;
}

redisContext* connect_loopback_redis(int port, redisSSLContext* ssl) {
  timeval timeout{2, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeout);
  if (c == nullptr) return nullptr;
  if (c->err != 0 || (ssl != nullptr && redisInitiateSSLWithContext(c, ssl) != REDIS_OK)) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

RedisServer::RedisServer(std::optional<RedisServerTls> tls) : tls_(std::move(tls)) {
  if (tls_) {
    ssl_ = redis_test_ssl_context(*tls_, &error_);
    if (ssl_ == nullptr) return;
  }
  char tmpl[] = "/tmp/quiver-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  // The free port can be taken before redis-server binds it (by another test process, or as a
  // client's ephemeral port): a server that exits at start is tried on a new port, five times.
  for (int attempt = 1; attempt <= 5; ++attempt) {
    port_ = free_loopback_port();
    exited_at_start_ = false;
    if (start() || !exited_at_start_) return;
  }
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
  pid_t pid = spawn_redis_server(redis_server_argv(port_, dir_, tls_));
  if (pid < 0) {
    error_ = "fork failed";
    return false;
  }
  pid_ = pid;
  // Wait until it answers PING (up to 10 s).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exited_at_start_ = true;
      error_ = "redis-server exited at start (is it installed? see " + dir_ + "/redis.log)";
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

redisContext* RedisServer::connect() const { return connect_loopback_redis(port_, ssl_); }

}  // namespace quiver::testing
