// AgentContext: what every part of the agent shares (configuration, store, preferences, upstream
// pool, clocks, metrics, log, run state), built once by Agent::create and handed by reference to
// the parts: RefreshRunner (one refresh), ChangeFollowup (triggers), RevalidationConsumer (the
// queue), Maintenance (the periodic passes and the store check). The helpers here are the ones
// more than one part needs; each part's own logic stays in its file.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "native-agent/engine/agent.h"
#include "native-agent/engine/listing_log.h"
#include "native-agent/engine/oauth_manager.h"
#include "native-agent/engine/upstream_pool.h"
#include "native-agent/store/preferences_db.h"
#include "native-agent/upstream/upstream.h"
#include "shared/freshness.h"

namespace quiver {

// The log component of every agent line.
inline constexpr char kAgentLog[] = "agent";
// The scheduler's tick: follow-ups of change triggers and due retries are looked at this often.
inline constexpr int64_t kSchedulerTickMs = 100;

// Whether `principal` is one this connection is listed for (shared mode: `shared`; per-member
// mode: a granted member).
Status check_principal(const ConnectionConfig& cfg, const Principal& principal);

// The connection's own deadlines (its overrides, else the runtime controls).
int64_t list_timeout_for(const ConnectionConfig& c, const RuntimeControls& rt);
UpstreamSpec with_deadlines(UpstreamSpec spec, const ConnectionConfig& c,
                            const RuntimeControls& rt);

// Whether a listing's failure is the upstream refusing its credential (a 401 or 403 on the whole
// listing or on one of its lists): an OAuth connection asks for a new token and lists once more.
bool refused_credential(const Result<Listing>& listing);

struct AgentContext {
  AgentConfig config;
  std::shared_ptr<ManifestStore> store;
  AgentOptions options;
  Metrics metrics;
  ListingLog listings;  // this agent's own listings (the status page)
  std::unique_ptr<Logger> logger;
  std::unique_ptr<Tracer> tracer;  // after the logger it writes to: destroyed (and flushed) first
  std::unique_ptr<PreferencesDb> prefs;
  std::unique_ptr<UpstreamPool> pool;
  // The OAuth side (tokens of connections with auth oauth); null when no connection has it.
  std::unique_ptr<OAuthManager> oauth;
  std::string consumer;
  int64_t claim_idle_ms = 0;
  FreshnessPolicy policy;
  // The runtime catalog's versions `config` was built from (options.config_file set), and
  // whether the catalog has since changed what the engine runs on (maintenance sets it).
  std::optional<CatalogVersions> catalog_versions;
  // The catalog's entries `config` was built from (maintenance thread only after start): what a
  // restore puts back when the store lost the namespace.
  std::vector<CatalogEntry> catalog_entries;
  std::atomic<bool> reload_requested{false};

  // The pooled connection's name of (cid, principal).
  static std::string pool_name(const std::string& cid, const Principal& principal) {
    return principal.is_shared() ? cid : cid + "#" + principal.str();
  }
  // "cid (principal)", for log lines.
  static std::string who(const std::string& cid, const Principal& principal) {
    return cid + " (" + principal.str() + ")";
  }

  Result<const ConnectionConfig*> connection(const std::string& cid) const;
  // The upstream spec `name` of (connection, principal), its deadlines set and its credential
  // placed: the configuration's (ConnectionConfig::upstream_for), and for auth oauth
  // `Authorization: Bearer <token>` from the OAuthManager, with a redactor that knows the token
  // (kAuthorizationRequired when the principal has no usable authorization). The token, when
  // `bearer` is given, is put there (a retry's `rejected`). `deadline_ms` (steady clock) bounds
  // a token refresh.
  Result<UpstreamSpec> spec_for(const std::string& name, const ConnectionConfig& c,
                                const Principal& principal, int64_t deadline_ms,
                                const std::optional<Secret>& rejected = std::nullopt,
                                std::optional<Secret>* bearer = nullptr) const;
  UpstreamOptions upstream_options() const;
  // One window for the gate every agent and edge of the namespace shares.
  int64_t revalidation_window_ms() const;
  Result<RevalidationOutcome> enqueue(const std::string& cid, const Principal& principal,
                                      const std::string& trigger);
  // A store failure in a background loop: logged at most once every 5 s (an outage would
  // otherwise write a line per tick), always counted by the caller.
  void log_store_error(std::string_view what, const Error& e);

  // Run state: set by start() and stop(); the loops poll it.
  bool is_running();
  // Sleeps up to `ms` unless stop() is called; false when stopping.
  bool wait_running(int64_t ms);
  bool started();
  void mark_started();
  // False when it was not started (nothing to stop).
  bool mark_stopped();

 private:
  std::atomic<int64_t> store_error_logged_at_{0};
  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool running_ = false;
  bool started_ = false;
};

}  // namespace quiver
