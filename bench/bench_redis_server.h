// A redis-server of a benchmark's own: started on 127.0.0.1 (a port from the pid), no
// persistence, its directory under `base_dir`; stop() ends it and deletes the directory. Then what
// the benchmarks that measure Redis (bench/catalog_grants.cpp, bench/bodies.cpp) do with it: one
// command from an argv, a pipelined one, and INFO's counters parsed. Not a test helper: tests use
// tests/support/redis_server.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>
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

// One command from an argv (binary-safe); the reply, which the caller frees, or nullptr when the
// connection failed.
inline redisReply* command_argv(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  for (const std::string& s : argv) {
    a.push_back(s.data());
    l.push_back(s.size());
  }
  return static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), a.data(), l.data()));
}

// The same, appended to the connection's output (pipelining); its reply comes with redisGetReply.
inline void append_argv(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  for (const std::string& s : argv) {
    a.push_back(s.data());
    l.push_back(s.size());
  }
  redisAppendCommandArgv(c, static_cast<int>(argv.size()), a.data(), l.data());
}

// A comma-separated list of integers from the command line ("1000,100000").
inline std::vector<int64_t> parse_int_list(const char* text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) out.push_back(std::atoll(part.c_str()));
  return out;
}

// What INFO says of the server's work so far.
struct RedisInfo {
  struct Command {
    int64_t calls = 0;
    int64_t usec = 0;  // includes the commands a script or EXEC ran
  };
  std::map<std::string, Command> commands;  // commandstats, by lowercase name
  double cpu_us = 0;                        // used_cpu_user + used_cpu_sys
  double used_memory = 0;                   // bytes
  double used_memory_dataset = 0;  // bytes: used_memory less the server's overhead (replication
                                   // backlog, client buffers): the data's own
  std::string used_memory_human;
  double net_output_bytes = 0;  // total_net_output_bytes: what clients read, INFO replies included
  double net_input_bytes = 0;   // total_net_input_bytes: what clients sent, INFO commands included

  Command command(const std::string& name) const {
    auto it = commands.find(name);
    return it == commands.end() ? Command{} : it->second;
  }
};

// INFO commandstats, cpu, memory and stats; exits the benchmark (status 1) when INFO fails.
inline RedisInfo read_info(redisContext* c) {
  RedisInfo out;
  for (const char* section : {"commandstats", "cpu", "memory", "stats"}) {
    redisReply* r = command_argv(c, {"INFO", section});
    if (r == nullptr || r->type != REDIS_REPLY_STRING) {
      std::fprintf(stderr, "INFO %s failed\n", section);
      std::exit(1);
    }
    std::istringstream in(std::string(r->str, r->len));
    freeReplyObject(r);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string name = line.substr(0, colon), value = line.substr(colon + 1);
      if (name.rfind("cmdstat_", 0) == 0) {
        long long calls = 0, usec = 0;
        std::sscanf(value.c_str(), "calls=%lld,usec=%lld", &calls, &usec);
        out.commands[name.substr(8)] = {calls, usec};
      } else if (name == "used_cpu_user" || name == "used_cpu_sys") {
        out.cpu_us += std::atof(value.c_str()) * 1e6;
      } else if (name == "used_memory") {
        out.used_memory = std::atof(value.c_str());
      } else if (name == "used_memory_dataset") {
        out.used_memory_dataset = std::atof(value.c_str());
      } else if (name == "used_memory_human") {
        out.used_memory_human = value;
      } else if (name == "total_net_output_bytes") {
        out.net_output_bytes = std::atof(value.c_str());
      } else if (name == "total_net_input_bytes") {
        out.net_input_bytes = std::atof(value.c_str());
      }
    }
  }
  return out;
}

// The counters of several servers (a cluster's masters) added up; used_memory_human is left empty.
inline RedisInfo sum_info(const std::vector<RedisInfo>& infos) {
  RedisInfo out;
  for (const RedisInfo& i : infos) {
    for (const auto& [name, cmd] : i.commands) {
      out.commands[name].calls += cmd.calls;
      out.commands[name].usec += cmd.usec;
    }
    out.cpu_us += i.cpu_us;
    out.used_memory += i.used_memory;
    out.used_memory_dataset += i.used_memory_dataset;
    out.net_output_bytes += i.net_output_bytes;
    out.net_input_bytes += i.net_input_bytes;
  }
  return out;
}

// The usec of `names` between two INFO readings. Only top-level commands: a script's inner calls
// are in its EVALSHA figure (and counted again under their own names), a MULTI block's in EXEC's.
inline double commands_usec(const RedisInfo& before, const RedisInfo& after,
                            std::initializer_list<const char*> names) {
  double usec = 0;
  for (const char* cmd : names) {
    usec += static_cast<double>(after.command(cmd).usec - before.command(cmd).usec);
  }
  return usec;
}

// Redis time of discovery reads between two INFO readings: the script (its own calls inside it
// included), AUTH and, when `body_mget`, MGET for the bodies. The script's own MGET (the versions
// of a conditional read) is counted under `mget` too, inside the script's time: a reader whose body
// caches are warm sends no MGET of its own, so it passes body_mget = false and nothing is counted
// twice.
inline double discovery_read_usec(const RedisInfo& before, const RedisInfo& after,
                                  bool body_mget = true) {
  if (!body_mget)
    return commands_usec(before, after, {"evalsha_ro", "eval_ro", "evalsha", "eval", "auth"});
  return commands_usec(before, after, {"evalsha_ro", "eval_ro", "evalsha", "eval", "mget", "auth"});
}

}  // namespace bench
