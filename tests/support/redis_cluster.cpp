#include "tests/support/redis_cluster.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/redis_cluster.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_server.h"

namespace quiver::testing {
namespace {

constexpr std::size_t kNodes = 6;

bool port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A port whose cluster bus port (port + 10000) is free as well.
int free_cluster_port(const std::vector<int>& taken) {
  for (int tries = 0; tries < 200; ++tries) {
    int p = free_loopback_port();
    if (p <= 0 || p + 10000 > 65535) continue;
    bool clash = false;
    for (int t : taken) clash = clash || t == p || t + 10000 == p || t == p + 10000;
    if (!clash && port_free(p + 10000)) return p;
  }
  return 0;
}

std::string info_field(const RespValue& info, const std::string& field) {
  std::optional<std::string_view> text = info.as_string();
  if (!text) return "";
  std::size_t at = text->find(field + ":");
  if (at == std::string_view::npos) return "";
  std::size_t start = at + field.size() + 1;
  std::size_t end = text->find("\r\n", start);
  return std::string(text->substr(start, end == std::string_view::npos ? end : end - start));
}

// Runs a child to completion, its output into `log`; its exit status, or -1.
int run_child(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

RedisCluster::RedisCluster(RedisClusterOptions options) : options_(std::move(options)) {
  if (options_.tls) {
    ssl_ = redis_test_ssl_context(*options_.tls, &error_);
    if (ssl_ == nullptr) return;
  }
  char tmpl[] = "/tmp/quiver-redis-cluster-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  pids_.assign(kNodes, -1);
  for (std::size_t i = 0; i < kNodes; ++i) {
    int p = free_cluster_port(ports_);
    if (p == 0) {
      error_ = "no free port pair (port, port + 10000) on 127.0.0.1";
      return;
    }
    ports_.push_back(p);
  }
  // A port found free can be taken before the node binds it (another test process listening, or
  // a client's ephemeral port): a node that exits at start gets a new pair, up to five times.
  for (std::size_t i = 0; i < kNodes; ++i) {
    for (int attempt = 1; !start_node(i); ++attempt) {
      if (pids_[i] != kExitedAtStart || attempt == 5) return;
      std::vector<int> others = ports_;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      int p = free_cluster_port(others);
      if (p == 0) return;
      ports_[i] = p;
      error_.clear();
    }
  }
  if (!create_cluster()) return;
  if (!wait_until_ok(30)) {
    error_ = "the cluster did not reach cluster_state:ok within 30 s";
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!replicas_in_sync()) {
    if (std::chrono::steady_clock::now() > deadline) {
      error_ = "the replicas did not sync with their masters within 30 s";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

RedisCluster::~RedisCluster() {
  for (pid_t& pid : pids_) {
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  for (pid_t& pid : pids_) {
    if (pid > 0) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      pid = -1;
    }
  }
  if (!dir_.empty()) {
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }
  if (ssl_ != nullptr) redisFreeSSLContext(ssl_);
}

bool RedisCluster::start_node(std::size_t i) {
  std::string node_dir = dir_ + "/" + std::to_string(ports_[i]);
  std::string mk = "mkdir -p '" + node_dir + "'";
  if (std::system(mk.c_str()) != 0) {
    error_ = "cannot create " + node_dir;
    return false;
  }
  // A test redis-server (TLS only with options_.tls; the bus port is the port + 10000), in
  // cluster mode.
  std::vector<std::string> argv = redis_server_argv(ports_[i], node_dir, options_.tls);
  argv.insert(argv.end(),
              {"--cluster-enabled", "yes", "--cluster-config-file", node_dir + "/nodes.conf",
               "--cluster-node-timeout", std::to_string(options_.node_timeout_ms),
               // A replica's first sync starts at once, not after 5 s.
               "--repl-diskless-sync-delay", "0",
               // A replica counts as online (CLUSTER SHARDS, SLOTS) once its offset is above 0:
               // the master's first PING to its replicas comes after this period.
               "--repl-ping-replica-period", "1"});
  if (!options_.password.empty()) {
    argv.insert(argv.end(),
                {"--requirepass", options_.password, "--masterauth", options_.password});
  }
  if (options_.tls) argv.insert(argv.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
  if (options_.tls && options_.plain_port_too) {
    // A plain TCP port besides the TLS one (both announced in CLUSTER SHARDS); the bus stays at
    // the TLS port + 10000.
    const int plain = free_cluster_port(ports_);
    if (plain == 0) {
      error_ = "no free port on 127.0.0.1";
      return false;
    }
    argv[2] = std::to_string(plain);
    argv.insert(argv.end(), {"--cluster-port", std::to_string(ports_[i] + 10000)});
  }
  pid_t pid = spawn_redis_server(argv);
  if (pid < 0) {
    error_ = "fork failed";
    return false;
  }
  pids_[i] = pid;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pids_[i] = kExitedAtStart;
      error_ = "redis-server on port " + std::to_string(ports_[i]) + " exited at start (see " +
               node_dir + "/redis.log)";
      return false;
    }
    RedisConnection c(connect(ports_[i]));
    if (c != nullptr && run_argv(c.get(), {"PING"}).str == "PONG") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  error_ = "redis-server on port " + std::to_string(ports_[i]) + " did not answer within 10 s";
  return false;
}

bool RedisCluster::create_cluster() {
  std::vector<std::string> argv = {"redis-cli", "--cluster", "create"};
  for (int p : ports_) argv.push_back("127.0.0.1:" + std::to_string(p));
  argv.insert(argv.end(), {"--cluster-replicas", "1", "--cluster-yes"});
  if (!options_.password.empty()) argv.insert(argv.end(), {"-a", options_.password});
  if (options_.tls) {
    argv.insert(argv.end(), {"--tls", "--cacert", options_.tls->ca_file});
    if (!options_.tls->client_cert.empty()) {
      argv.insert(argv.end(),
                  {"--cert", options_.tls->client_cert, "--key", options_.tls->client_key});
    }
  }
  std::string log = dir_ + "/create.log";
  int rc = run_child(argv, log);
  if (rc != 0) {
    error_ = "redis-cli --cluster create exited with " + std::to_string(rc) + " (see " + log + ")";
    return false;
  }
  return true;
}

redisContext* RedisCluster::connect(int port) const {
  redisContext* c = connect_loopback_redis(port, ssl_);
  if (c == nullptr) return nullptr;
  timeval timeout{2, 0};
  redisSetTimeout(c, timeout);
  if (!options_.password.empty() && !run_argv(c, {"AUTH", options_.password}).is_ok()) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

std::string RedisCluster::role(int port) const {
  RedisConnection c(connect(port));
  if (c == nullptr) return "";
  RespValue r = run_argv(c.get(), {"ROLE"});
  if (!r.is_array() || r.elements.empty()) return "";
  return r.elements[0].str;
}

std::string RedisCluster::node_id(int port) const {
  RedisConnection c(connect(port));
  if (c == nullptr) return "";
  return run_argv(c.get(), {"CLUSTER", "MYID"}).str;
}

std::vector<int> RedisCluster::master_ports() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (pids_[i] > 0 && role(ports_[i]) == "master") out.push_back(ports_[i]);
  }
  return out;
}

void RedisCluster::kill(int port) {
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (ports_[i] == port && pids_[i] > 0) {
      ::kill(pids_[i], SIGKILL);
      int status = 0;
      ::waitpid(pids_[i], &status, 0);
      pids_[i] = -1;
    }
  }
}

bool RedisCluster::flush_all() const {
  bool all = true;
  for (int port : master_ports()) {
    RedisConnection c(connect(port));
    all = all && c != nullptr && run_argv(c.get(), {"FLUSHALL"}).is_ok();
  }
  return all;
}

bool RedisCluster::wait_until_ok(int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (std::size_t i = 0; i < ports_.size() && all; ++i) {
      if (pids_[i] <= 0) continue;
      RedisConnection c(connect(ports_[i]));
      if (c == nullptr) {
        all = false;
        break;
      }
      RespValue info = run_argv(c.get(), {"CLUSTER", "INFO"});
      all = info_field(info, "cluster_state") == "ok" &&
            info_field(info, "cluster_slots_ok") == "16384";
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool RedisCluster::replicas_in_sync() const {
  // Every node's view: three shards, each replica online (a replica whose offset a node has not
  // heard of yet is "loading" in CLUSTER SHARDS and left out of CLUSTER SLOTS).
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    RedisConnection c(connect(ports_[i]));
    if (c == nullptr) return false;
    Result<ClusterSlotMap> map =
        ClusterSlotMap::from_shards(run_argv(c.get(), {"CLUSTER", "SHARDS"}), "127.0.0.1");
    if (!map.ok() || map->shards().size() != 3) return false;
    for (const ClusterShard& s : map->shards()) {
      if (s.replicas.size() != 1 || !s.replicas[0].healthy) return false;
    }
  }
  int masters = 0;
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    RedisConnection c(connect(ports_[i]));
    if (c == nullptr) return false;
    RespValue info = run_argv(c.get(), {"INFO", "replication"});
    std::string role = info_field(info, "role");
    if (role == "slave" && info_field(info, "master_link_status") != "up") return false;
    if (role == "master") {
      ++masters;
      if (info_field(info, "connected_slaves") != "1") return false;
    }
  }
  return masters == 3;
}

}  // namespace quiver::testing
