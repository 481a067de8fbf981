#include "native-agent/engine/upstream_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "native-agent/base/clock.h"

namespace quiver {
namespace {

bool same_spec(const UpstreamSpec& a, const UpstreamSpec& b) {
  if (a.headers.size() != b.headers.size()) return false;
  for (std::size_t i = 0; i < a.headers.size(); ++i) {
    if (a.headers[i].name != b.headers[i].name || a.headers[i].value != b.headers[i].value) {
      return false;
    }
  }
  return a.name == b.name && a.transport == b.transport && a.command == b.command &&
         a.args == b.args && a.env == b.env && a.working_dir == b.working_dir && a.url == b.url &&
         a.allow_private == b.allow_private && a.request_timeout_ms == b.request_timeout_ms &&
         a.startup_timeout_ms == b.startup_timeout_ms;
}

}  // namespace

UpstreamPool::UpstreamPool(UpstreamPoolOptions options) : options_(std::move(options)) {
  // Pooled sessions are kept to be watched: open HTTP notification streams when pumped.
  options_.upstream.watch = true;
  if (options_.max_concurrent_listings < 1) options_.max_concurrent_listings = 1;
  if (options_.watch_interval_ms < 1) options_.watch_interval_ms = 1;
}

UpstreamPool::~UpstreamPool() {
  stop_watching();
  std::map<std::string, std::shared_ptr<UpstreamConnection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections.swap(connections_);
  }
  for (auto& [name, conn] : connections) conn->close();
}

Status UpstreamPool::put(UpstreamSpec spec) {
  if (spec.name.empty()) return Error(ErrorCode::kInvalidArgument, "an upstream needs a name");
  std::shared_ptr<UpstreamConnection> replaced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(spec.name);
    if (it != connections_.end() && same_spec(it->second->spec(), spec)) return Status::Ok();
    std::string name = spec.name;
    auto conn = std::make_shared<UpstreamConnection>(std::move(spec), options_.upstream);
    wire(name, *conn);
    if (it != connections_.end()) replaced = std::move(it->second);
    connections_[name] = std::move(conn);
  }
  if (replaced) replaced->close();  // waits for a listing that still uses it
  return Status::Ok();
}

void UpstreamPool::wire(const std::string& name, UpstreamConnection& conn) {
  conn.set_change_callback([this, name](const UpstreamChange& change) {
    std::function<void(const std::string&, const UpstreamChange&)> cb;
    {
      std::lock_guard<std::mutex> cb_lock(mu_);
      cb = callback_;
    }
    if (cb) cb(name, change);
  });
}

std::vector<std::shared_ptr<UpstreamConnection>> UpstreamPool::release_all() {
  std::map<std::string, std::shared_ptr<UpstreamConnection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections.swap(connections_);
  }
  std::vector<std::shared_ptr<UpstreamConnection>> out;
  for (auto& [name, conn] : connections) {
    conn->set_change_callback(nullptr);  // it named this pool
    out.push_back(std::move(conn));
  }
  return out;
}

std::optional<std::string> UpstreamPool::adopt(std::shared_ptr<UpstreamConnection> conn,
                                               const UpstreamSpec* expected) {
  if (!conn) return std::string("no connection");
  const std::string& name = conn->spec().name;
  if (expected != nullptr && !same_spec(conn->spec(), *expected)) {
    return std::string("its definition or credential changed");
  }
  if (!conn->same_session_options(options_.upstream)) {
    return std::string("the runtime controls its sessions run with changed");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (connections_.count(name) != 0) return std::string("the pool has one by that name");
  conn->rebind(options_.upstream.log, options_.upstream.redactor);
  wire(name, *conn);
  connections_[name] = std::move(conn);
  return std::nullopt;
}

bool UpstreamPool::remove(const std::string& name) {
  std::shared_ptr<UpstreamConnection> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(name);
    if (it == connections_.end()) return false;
    removed = std::move(it->second);
    connections_.erase(it);
  }
  removed->close();
  return true;
}

std::vector<std::string> UpstreamPool::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, conn] : connections_) out.push_back(name);
  return out;
}

std::shared_ptr<UpstreamConnection> UpstreamPool::get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(name);
  return it == connections_.end() ? nullptr : it->second;
}

void UpstreamPool::acquire_slot() {
  std::unique_lock<std::mutex> lock(slots_mu_);
  slots_cv_.wait(lock, [&] { return slots_in_use_ < options_.max_concurrent_listings; });
  ++slots_in_use_;
}

void UpstreamPool::release_slot() {
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    --slots_in_use_;
  }
  slots_cv_.notify_one();
}

Result<Listing> UpstreamPool::list(const std::string& name, int64_t timeout_ms, ListInfo* info) {
  auto conn = get(name);
  if (!conn) return Error(ErrorCode::kNotFound, "no upstream named " + name);
  acquire_slot();
  auto result = conn->list(conn->now_ms() + timeout_ms, {}, info);
  release_slot();
  return result;
}

std::vector<UpstreamListResult> UpstreamPool::list_many(const std::vector<std::string>& names,
                                                        int concurrency,
                                                        int64_t per_connection_timeout_ms) {
  std::vector<UpstreamListResult> results(names.size());
  if (names.empty()) return results;
  auto clock = options_.upstream.clock ? options_.upstream.clock : steady_ms;
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (;;) {
      std::size_t i = next.fetch_add(1);
      if (i >= names.size()) return;
      UpstreamListResult& r = results[i];
      r.name = names[i];
      auto conn = get(names[i]);
      if (!conn) {
        r.listing = Error(ErrorCode::kNotFound, "no upstream named " + names[i]);
        continue;
      }
      acquire_slot();
      int64_t start = clock();
      r.started_at_ms = start;
      r.listing = conn->list(start + per_connection_timeout_ms, {}, &r.info);
      r.elapsed_ms = clock() - start;
      release_slot();
    }
  };
  std::size_t workers = std::min<std::size_t>(std::max(concurrency, 1), names.size());
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (std::size_t i = 1; i < workers; ++i) threads.emplace_back(worker);
  worker();  // the calling thread is a worker too
  for (auto& t : threads) t.join();
  return results;
}

void UpstreamPool::set_change_callback(
    std::function<void(const std::string&, const UpstreamChange&)> cb) {
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = std::move(cb);
}

void UpstreamPool::start_watching() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (watching_.exchange(true)) return;
  watcher_ = std::thread([this] { watch_loop(); });
}

void UpstreamPool::stop_watching() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    if (!watching_.exchange(false)) return;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void UpstreamPool::watch_loop() {
  // TODO(perf): one poll(2) over every stdio pipe instead of a visit per connection per round;
  // the transport interface does not expose descriptors yet.
  while (watching_) {
    std::vector<std::shared_ptr<UpstreamConnection>> snapshot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [name, conn] : connections_) snapshot.push_back(conn);
    }
    for (auto& conn : snapshot) {
      if (!watching_) break;
      conn->pump(0);  // returns at once when a listing holds the connection
    }
    std::unique_lock<std::mutex> lock(watch_mu_);
    watch_cv_.wait_for(lock, std::chrono::milliseconds(options_.watch_interval_ms),
                       [&] { return !watching_.load(); });
  }
}

}  // namespace quiver
