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
  RedisServer();
  explicit RedisServer(RedisServerTls tls);
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
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<RedisServerTls> tls_;
  redisSSLContext* ssl_ = nullptr;  // connect()'s, with tls_
  std::string dir_;
  std::string error_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_loopback_port();

}  // namespace quiver::testing
