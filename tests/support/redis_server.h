// A real redis-server for integration tests: started on a free loopback port in a private
// temporary directory, stopped (and its directory removed) when the object goes away.
//
//   RedisServer redis;                    // starts it, or records why it could not
//   ASSERT_TRUE(redis.ok()) << redis.error();
//   redisContext* c = redis.connect();    // hiredis, caller frees
#pragma once

#include <string>

#include <sys/types.h>

struct redisContext;

namespace quiver::testing {

class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool ok() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }

  // A new hiredis connection to the server (nullptr on failure). The caller owns it.
  redisContext* connect() const;

  // Stops the server (SIGTERM, then SIGKILL after 5 s). start() brings it back on the same port
  // and directory: what a test of "Redis went away" needs.
  void stop();
  bool start();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
  std::string error_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_loopback_port();

}  // namespace quiver::testing
