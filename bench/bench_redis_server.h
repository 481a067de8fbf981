// A redis-server of a benchmark's own: started on 127.0.0.1 (a port from the pid), no
// persistence, its directory under `base_dir`; stop() ends it and deletes the directory. Shared by
// the benchmarks that measure Redis (bench/catalog_grants.cpp, bench/bodies.cpp). Not a test
// helper: tests use tests/support/redis_server.h.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bench {

struct RedisServerProcess {
  pid_t pid = -1;
  int port = 0;
  std::string dir;

  // Ends the server and deletes its directory (idempotent).
  void stop() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
    if (!dir.empty()) {
      std::string cmd = "rm -rf '" + dir + "'";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not delete %s\n", dir.c_str());
      dir.clear();
    }
  }
};

// Starts `binary` and waits until it accepts connections; exits the benchmark (status 1) when it
// cannot. `name` prefixes the directory.
inline RedisServerProcess start_redis_server(const std::string& binary, const std::string& base_dir,
                                             const std::string& name) {
  RedisServerProcess s;
  std::string templ = base_dir + "/" + name + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "%s: mkdtemp failed\n", name.c_str());
    std::exit(1);
  }
  s.dir = templ;
  s.port = 30000 + static_cast<int>(getpid() % 20000);
  s.pid = fork();
  if (s.pid == 0) {
    std::string port = std::to_string(s.port);
    execlp(binary.c_str(), binary.c_str(), "--bind", "127.0.0.1", "--port", port.c_str(), "--dir",
           s.dir.c_str(), "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel",
           "warning", "--logfile", (s.dir + "/redis.log").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    redisContext* c = redisConnect("127.0.0.1", s.port);
    if (c != nullptr && c->err == 0) {
      redisFree(c);
      return s;
    }
    if (c != nullptr) redisFree(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  s.stop();
  std::fprintf(stderr, "%s: redis-server did not start\n", name.c_str());
  std::exit(1);
}

}  // namespace bench
