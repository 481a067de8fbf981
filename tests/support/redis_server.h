// A real redis-server for integration tests: started on a free loopback port in a private
// temporary directory, stopped (and its directory removed) when the object goes away.
//
//   RedisServer redis;                    // starts it, or records why it could not
//   ASSERT_TRUE(redis.ok()) << redis.error();
//   redisContext* c = redis.connect();    // hiredis, caller frees
//
// With RedisServerTls it listens for TLS only (`--port 0 --tls-port P`), and connect() speaks TLS
// through hiredis' own TLS context (trusting `ca_file`, presenting the client certificate).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

struct redisContext;

struct redisSSLContext;

namespace quiver::testing {

struct RedisServerTls {
  std::string cert_file, key_file;      // the server's certificate and key (PEM)
  std::string ca_file;                  // the CA the server and connect() trust
  bool auth_clients = false;            // --tls-auth-clients yes: a client certificate is required
  std::string client_cert, client_key;  // what connect() presents (empty: none)
};

class RedisServer {
 public:
  RedisServer() : RedisServer(std::optional<RedisServerTls>()) {}
  explicit RedisServer(RedisServerTls tls) : RedisServer(std::optional<RedisServerTls>(tls)) {}
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool ok() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  bool tls() const { return tls_.has_value(); }

  // A new hiredis connection to the server (nullptr on failure). The caller owns it.
  redisContext* connect() const;

  // Stops the server (SIGTERM, then SIGKILL after 5 s). start() brings it back on the same port
  // and directory: what a test of "Redis went away" needs.
  void stop();
  bool start();

 private:
  explicit RedisServer(std::optional<RedisServerTls> tls);

  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<RedisServerTls> tls_;
  redisSSLContext* ssl_ = nullptr;  // connect()'s, with tls_
  std::string dir_;
  std::string error_;
  bool exited_at_start_ = false;  // start()'s last child exited before answering PING
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_loopback_port();

// What RedisServer and RedisCluster (redis_cluster.h) share: one way to start and reach a test
// redis-server.
//
// The command line of a test redis-server on 127.0.0.1:`port` (TLS only with `tls`: `--port 0
// --tls-port port` and the certificate files), in `dir`, with no persistence, logging warnings to
// <dir>/redis.log; $QUIVER_REDIS_SERVER names the binary (default: redis-server).
std::vector<std::string> redis_server_argv(int port, const std::string& dir,
                                           const std::optional<RedisServerTls>& tls);
// Starts `argv` as a child (its stdout and stderr the test's); its pid, or -1.
pid_t spawn_redis_server(const std::vector<std::string>& argv);
// hiredis' TLS context trusting `tls.ca_file` and presenting the client certificate when set;
// nullptr with `*error` set when it cannot be made. The caller frees it (redisFreeSSLContext).
redisSSLContext* redis_test_ssl_context(const RedisServerTls& tls, std::string* error);
// A hiredis connection to 127.0.0.1:`port` (a 2 s connect timeout), over TLS with `ssl`; nullptr
// on failure.
redisContext* connect_loopback_redis(int port, redisSSLContext* ssl);

}  // namespace quiver::testing
