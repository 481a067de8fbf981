// The upstream pool: every configured upstream's `UpstreamConnection`, by name, listed many at a
// time with bounded concurrency, and watched by one thread.
//
// Listing many upstreams must not let one slow or hung server delay the others, and must not
// start a thread (or a listing) per upstream: `list_many` hands the names to at most
// `concurrency` workers (threads of that call, joined before it returns), each listing one
// connection at a time with its own deadline (`per_connection_timeout_ms`, counted from when that
// listing starts). A hung upstream costs one worker its deadline; the other workers go on. On top
// of the per-call bound, `max_concurrent_listings` bounds the listings of all calls together (the
// agent-wide limit: "at most 5 listings at once").
//
//   UpstreamPool pool;
//   pool.put(UpstreamSpec::stdio("everything", "node", {js, "stdio"}));
//   pool.put(UpstreamSpec::http("github", url, {{"Authorization", "Bearer " + token}}));
//   for (auto& r : pool.list_many(pool.names())) ...   // r.name, r.listing (Result), r.info
//   pool.set_change_callback([&](const std::string& name, const UpstreamChange& c) { ... });
//   pool.start_watching();   // one thread pumps every idle connection (list_changed, lost)
//
// Connections are kept between calls (sessions are reused, see upstream.h). `put` with a spec
// that differs from the current one replaces the connection (its session is closed); `remove`
// closes it. A connection in use by a listing is closed when that listing ends.
//
// Threads: every method may be called from any thread. The change callback runs on the watcher
// thread; it should schedule a refresh rather than list inline (which would stall the watcher for
// the listing's duration).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "native-agent/upstream/upstream.h"
#include "shared/listing.h"
#include "shared/status.h"

namespace quiver {

struct UpstreamPoolOptions {
  UpstreamOptions upstream;         // for every connection (watch is set by start_watching)
  int max_concurrent_listings = 5;  // over all list_many calls together
  int64_t watch_interval_ms = 50;   // how often the watcher visits each idle connection
};

struct UpstreamListResult {
  std::string name;
  Result<Listing> listing = Error(ErrorCode::kUnknown, "not listed");
  ListInfo info;
  int64_t started_at_ms = 0;  // when this connection's listing began (the pool's clock)
  int64_t elapsed_ms = 0;     // this connection's listing, from its start
};

class UpstreamPool {
 public:
  explicit UpstreamPool(UpstreamPoolOptions options = {});
  ~UpstreamPool();  // stops watching, closes every connection
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // Adds the upstream, or replaces it when its spec changed (same spec: kept as it is).
  // kInvalidArgument for an empty name.
  Status put(UpstreamSpec spec);
  bool remove(const std::string& name);
  std::vector<std::string> names() const;  // sorted
  std::shared_ptr<UpstreamConnection> get(const std::string& name) const;

  // Lists one upstream by now + timeout_ms. kNotFound for an unknown name.
  Result<Listing> list(const std::string& name, int64_t timeout_ms, ListInfo* info = nullptr);

  // Lists every named upstream, at most `concurrency` at once, each within
  // `per_connection_timeout_ms` of its own start. Results come in the order of `names`; an
  // unknown name is kNotFound. concurrency < 1 counts as 1.
  std::vector<UpstreamListResult> list_many(const std::vector<std::string>& names,
                                            int concurrency = 5,
                                            int64_t per_connection_timeout_ms = 3500);

  // Every connection taken out of the pool unclosed, sessions kept (watching must have stopped):
  // what another pool may adopt (an engine reloaded in-process). The pool is empty afterwards.
  std::vector<std::shared_ptr<UpstreamConnection>> release_all();
  // Takes in a connection released by another pool, under its spec's name, its session kept:
  // its log lines and redaction become this pool's and its changes reach this pool's callback.
  // Refused (the reason; the caller still owns it) when the pool has a connection by that name,
  // when `expected` is given and differs from its spec (as put compares them), or when this
  // pool would run its sessions with other settings (UpstreamConnection::same_session_options).
  std::optional<std::string> adopt(std::shared_ptr<UpstreamConnection> conn,
                                   const UpstreamSpec* expected = nullptr);

  void set_change_callback(std::function<void(const std::string&, const UpstreamChange&)> cb);
  void start_watching();  // idempotent
  void stop_watching();   // idempotent; joins the watcher

 private:
  void watch_loop();
  // Routes `conn`'s changes to this pool's callback under `name`.
  void wire(const std::string& name, UpstreamConnection& conn);
  void acquire_slot();
  void release_slot();

  UpstreamPoolOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<UpstreamConnection>> connections_;
  std::function<void(const std::string&, const UpstreamChange&)> callback_;

  std::mutex slots_mu_;
  std::condition_variable slots_cv_;
  int slots_in_use_ = 0;

  std::atomic<bool> watching_{false};
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::thread watcher_;
};

}  // namespace quiver
