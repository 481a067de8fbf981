// Agent: the refresh engine. It keeps every (connection, principal) manifest of the configuration
// fresh in the store, reconciles capability preferences, and answers the API and CLI through
// `AgentService` (native-agent/engine/service.h).
//
//   auto agent = Agent::create(config, {});   // opens Redis (config.redis) or <data_dir>/quiver.db
//   (*agent)->start();                        // sync records and grants, watch, consume, maintain
//   (*agent)->refresh_now("github", Principal::member("alice"), "manual");
//   (*agent)->stop();                         // joins every thread, closes every upstream
//
// One refresh of (cid, principal), `refresh_now`:
//   acquire the lease (held elsewhere → outcome "in_progress", counted as lease contention) →
//   list the upstream through the pool (a per-member principal uses its own credentials on its
//   own pooled connection), the whole listing within list_timeout_ms → renew the lease when less
//   than half of it is left → build the manifest (max_manifest_bytes) → reconcile preferences for
//   the kinds that listed ok and republish the disabled overlay → commit, fenced, with the
//   config_hash the listing STARTED under. A listing that failed is `record_failure`d (the last
//   good manifest stays; its config_hash is never restamped). A refused write (lease lost, stale
//   fence, config changed) is an outcome "refused:<why>", never an error. Every outcome is counted
//   in Metrics and every refusal or failure logged, redacted.
//
// Triggers (none dropped silently: each refusal is counted and logged):
//   - upstream list_changed → request_refresh(…, "list_changed") (debounced by the pool);
//   - the revalidation stream (readers' stale/miss reads, request_refresh):
//   `revalidate_concurrency`
//     workers, one consumer name per agent instance, entries of crashed consumers claimed after
//     `claim_idle_ms`, each acknowledged once handled;
//   - the maintenance loop every maintenance_interval_ms, in batches of maintenance_batch:
//     decide_refresh on each stored manifest (stale, errored, refresh-ahead at 0.8 × TTL),
//     never-listed `shared` connections seeded, per-member connections listed only for granted
//     members, manifests of principals no longer granted left to sync (records and grants);
//   - start(): connection records and grants synced (a changed config_hash makes readers miss;
//     removed connections' manifests deleted);
//   - manual (`refresh_now`) and evidence come through the API as request_refresh; a webhook as
//     apply_webhook (one store step, the edge's: its requests come back through the stream).
//
// Where each part lives: the decisions of a refresh and of a change trigger's follow-up are the
// core's (shared/refresh_plan.h, shared/change_trigger.h); refresh_runner.h carries out one
// refresh and its retries, triggers.h the triggers and their follow-up, revalidation_consumer.h
// the queue's workers, maintenance.h the passes and the store check; agent.cpp only wires them.
//
// Threads: start() runs the pool's watcher, the revalidation workers and the maintenance thread;
// every AgentService method may be called from any thread. stop() is idempotent and also run by
// the destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "native-agent/base/config.h"
#include "native-agent/base/logger.h"
#include "native-agent/engine/metrics.h"
#include "native-agent/engine/service.h"
#include "native-agent/engine/tracer.h"
#include "native-agent/store/store.h"

namespace quiver {

struct UpstreamSpec;       // native-agent/upstream/upstream.h
class UpstreamConnection;  // native-agent/upstream/upstream.h
struct CallReport;         // native-agent/engine/mcp_calls.h
struct CallRelayStats;     // native-agent/engine/mcp_calls.h

// `n` random bytes (lease tokens, consumer names). kResourceUnavailable when no entropy could be
// read.
using RandomSource = std::function<Result<std::string>(std::size_t n)>;
// The native host's source: /dev/urandom.
RandomSource urandom_source();

// The one place config's UpstreamEndpoint becomes the upstream module's UpstreamSpec. `name` is
// the log name of the pooled connection (never a secret).
UpstreamSpec upstream_spec_for(const std::string& name, const UpstreamEndpoint& upstream);

// The upstream sessions an engine stopping for a reload hands to the next one (`serve`: SIGHUP,
// a catalog change, the switch into key layout v2), so that the reloaded engine goes on hearing
// each upstream's list_changed without opening anything: Agent::stop_handing_over fills it, the
// next engine's start() adopts what it would run the same way (AgentOptions::upstream_handover).
// Destroying it closes every session still in it (nothing adopted leaks; call it off the path
// that serves, a hung upstream's close takes its timeout).
class UpstreamHandover {
 public:
  UpstreamHandover() = default;
  ~UpstreamHandover();
  UpstreamHandover(const UpstreamHandover&) = delete;
  UpstreamHandover& operator=(const UpstreamHandover&) = delete;

  struct Entry {
    std::string connection_id;
    Principal principal = Principal::shared();
    std::string config_hash;  // the connection's definition the session was opened under
    std::shared_ptr<UpstreamConnection> connection;
  };
  void add(Entry entry);
  // Every entry, taken out (the handover is empty afterwards).
  std::vector<Entry> take();
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

struct AgentOptions {
  Clock now_ms = system_clock_ms();        // data timestamps (fetched_at, preferences)
  RandomSource random = urandom_source();  // lease tokens, the consumer name
  // Log lines (already redacted). Null: stderr.
  Logger::Sink log_sink;
  LogLevel log_level = LogLevel::kInfo;

  // Threads started by start(); tests switch some off to drive a step by hand.
  bool watch_upstreams = true;
  bool run_revalidation_workers = true;
  bool run_maintenance = true;
  // The scheduler retries listings that failed (or in which lists failed) with backoff
  // (runtime `retry_max_backoff_ms`).
  bool run_retries = true;

  // request_refresh's gate: one queued request per key per window. 0: the configuration's
  // runtime.revalidate_window_ms (the one the edge uses too).
  int64_t revalidation_window_ms = 0;
  // How long a revalidation worker blocks on an empty queue (also bounds stop()'s wait).
  int64_t revalidation_block_ms = 200;
  // Entries delivered this long ago and not acknowledged belong to a crashed consumer: claimed.
  // 0: 2 × lease_ms.
  int64_t claim_idle_ms = 0;
  // Consumers of the group idle this long with nothing pending are removed by maintenance (an
  // earlier run's or reload's name). 0: one hour.
  int64_t dead_consumer_idle_ms = 0;
  // A clock further than this from the store's (Redis TIME) is logged as a warning.
  int64_t clock_skew_warn_ms = 2'000;
  // Consumer name in the group; empty: "agent-<hostname>-<pid>-<random hex>" (unique per instance).
  std::string consumer_name;
  // Pooled upstream connections: list_changed debounce and the watcher's visiting interval.
  int64_t change_debounce_ms = 250;
  int64_t watch_interval_ms = 50;
  // OpenTelemetry traces (tracer.h): off unless an endpoint is set (`serve`: the OTEL_* variables).
  TracerOptions tracing;

  // The config file the configuration came from (`serve`). Set: create() seeds the file's
  // members, grants and connections into the store's runtime catalog by the file rule (revision:
  // the configuration's revision_ms), and the agent runs on the effective configuration built
  // from the catalog (native-agent/engine/catalog_config.h), watching the catalog for changes
  // (reload_requested). Null: the configuration is used as given (one-shot commands, tests).
  std::shared_ptr<const ConfigFile> config_file;
  // Catalog changes are rebuilt into a configuration at most this often.
  int64_t catalog_debounce_ms = 2'000;

  // The previous engine's upstream sessions (a reload): start() adopts each one whose connection
  // this engine runs for the same principal with the same definition, credential and session
  // settings (its list_changed keeps being heard: nothing is opened or listed for it); the rest
  // stay in the handover, closed when the caller lets it go.
  std::shared_ptr<UpstreamHandover> upstream_handover;

  // Edge calls relayed through the store (native-agent/engine/mcp_calls.h CallRelayConsumer):
  // this many workers read the `calls` stream, and `call-agents` is kept alive while they run.
  // Only on a store that relays calls (Redis); 0: none.
  int call_relay_workers = 4;

  // An agent that does only what it is asked: no upstream watching, no revalidation workers, no
  // maintenance loop (one-shot commands; tests that drive the steps by hand).
  static AgentOptions on_demand() {
    AgentOptions o;
    o.watch_upstreams = o.run_revalidation_workers = o.run_maintenance = false;
    o.call_relay_workers = 0;
    return o;
  }
};

// What a maintenance pass did (tests, status).
struct MaintenanceReport {
  int64_t examined = 0;     // due entries of the refresh-due index looked at
  int64_t queued = 0;       // refresh requests queued (stale, errored, ahead, seeded)
  int64_t seeded = 0;       // ... of which never-listed keys
  int64_t skipped = 0;      // already queued or a lease held
  int64_t dropped = 0;      // manifests of principals no longer granted, deleted
  int64_t rescheduled = 0;  // due entries with nothing to do yet, moved to when there will be
  int64_t backfilled = 0;   // entries the index's one-time backfill added (a namespace from before)
  int64_t errors = 0;       // store errors (logged)
};

class Agent final : public AgentService {
 public:
  // Opens the store the configuration names: RedisStore when config.redis is set, else a
  // SqliteStore on <data_dir>/quiver.db (data_dir created if missing).
  static Result<std::unique_ptr<Agent>> create(AgentConfig config, AgentOptions options = {});
  // With a store chosen by the caller (tests share one store between agents this way).
  static Result<std::unique_ptr<Agent>> create(AgentConfig config,
                                               std::shared_ptr<ManifestStore> store,
                                               AgentOptions options = {});
  ~Agent() override;  // stop()
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Syncs connection records and grants (kStoreUnavailable when the store cannot be reached:
  // nothing started), republishes every connection's disabled overlay, then starts the threads.
  Status start();
  void stop();
  // stop(), but the upstream sessions are handed over instead of closed (a reload: the next
  // engine adopts them through AgentOptions::upstream_handover). Empty when it was not running.
  std::shared_ptr<UpstreamHandover> stop_handing_over();

  // --- AgentService ---
  const AgentConfig& config() const override;
  ManifestStore& store() override;
  Metrics& metrics() override;
  Tracer* tracer() override;
  OAuthManager* oauth() override;
  std::optional<ListingRecord> last_listing(const std::string& connection_id,
                                            const Principal& principal) const override;
  Result<RevalidationOutcome> request_refresh(const std::string& connection_id,
                                              const Principal& principal,
                                              const std::string& trigger) override;
  Result<WebhookRefreshReply> apply_webhook(const WebhookVerified& verified,
                                            const WebhookRefreshRequest& request,
                                            int64_t now_ms) override;
  Result<RefreshReport> refresh_now(const std::string& connection_id, const Principal& principal,
                                    const std::string& trigger) override;
  Result<Json> test_connection(const std::string& connection_id,
                               const Principal& principal) override;
  Result<std::vector<PreferenceRow>> preferences(const std::string& connection_id,
                                                 const Principal& principal) override;
  Result<RelayReply> call_upstream(const UpstreamCall& call,
                                   const std::function<bool()>& cancelled = {}) override;
  // The same, with how it went (tests, benchmarks).
  Result<RelayReply> call_upstream(const UpstreamCall& call, const std::function<bool()>& cancelled,
                                   CallReport* report);
  // Reads the edge's relayed calls once (waiting up to `block_ms`), performs and answers them.
  std::size_t drain_relayed_calls_once(int64_t block_ms = 0);
  // Marks `call-agents` alive once (what the heartbeat thread does every second).
  Status mark_call_agent_alive();
  // Reads the running relayed calls' cancel marks once (what the cancel poller does every
  // kCallCancelMarkPollMs); how many calls it newly cancelled.
  std::size_t poll_call_cancel_marks_once();
  CallRelayStats call_relay_stats() const;
  Status set_preference(const std::string& connection_id, const Principal& principal,
                        CapabilityType type, const std::string& key, bool enabled) override;

  // --- steps the threads run, callable by hand ---
  // One full maintenance pass (every page of the walk, plus seeding).
  MaintenanceReport run_maintenance_once();
  // One store check: reads the namespace record; when the store lost the namespace, restores it
  // (connections, grants, overlays), holds it "restoring" for 2 x store_check_interval_ms, then
  // marks it ready and runs maintenance. Returns "ready", "restoring", "missing" or "unknown".
  std::string check_store_once();
  // Whether the runtime catalog changed what this engine runs on (a connection's definition, who
  // is granted a per-member connection, the operators): the owner (`serve`) restarts the engine
  // on the configuration again, as on SIGHUP. Set by the store check; never reset.
  bool reload_requested() const;
  // Reads (and claims stale) revalidation requests once, refreshes them, acknowledges them.
  // Returns how many requests were handled.
  std::size_t drain_revalidations_once(int64_t block_ms = 0);

  const std::string& consumer_name() const;
  const Logger& logger() const;

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
