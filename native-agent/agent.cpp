#include "native-agent/agent.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "native-agent/clock.h"
#include "native-agent/preferences_db.h"
#include "native-agent/redis_store.h"
#include "native-agent/sqlite_store.h"
#include "native-agent/upstream.h"
#include "native-agent/upstream_pool.h"
#include "shared/freshness.h"
#include "shared/lease.h"
#include "shared/manifest.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {

namespace {

constexpr char kLog[] = "agent";
constexpr std::size_t kLeaseTokenBytes = 16;
// The scheduler's tick: deferred change triggers are retried at this pace.
constexpr int64_t kTickMs = 100;

// Triggers that assert "the upstream changed after time T": a refresh that started before T does
// not satisfy them, so a queue answer of already_queued / in_progress is followed up (deferred)
// until a listing that started after T is stored.
bool is_change_trigger(std::string_view trigger) {
  return trigger == "list_changed" || trigger == "webhook" || trigger == "evidence" ||
         trigger == "config";
}

// The metric label of an outcome: "refused:lease_lost" → "refused_lease_lost".
std::string outcome_label(std::string outcome) {
  std::replace(outcome.begin(), outcome.end(), ':', '_');
  return outcome;
}

Status make_dirs(const std::string& path) {
  if (path.empty()) return Status::Ok();
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return Error(ErrorCode::kStoreUnavailable,
                   "cannot create data directory " + partial + ": " + std::strerror(errno));
    }
  }
  // The data directory holds the database (manifests, preferences) and its WAL: private to the
  // agent's user, also when it existed before (an older agent made it 0755, so did `mkdir -p`).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0 &&
      ::chmod(path.c_str(), st.st_mode & 0700) != 0) {
    return Error(ErrorCode::kStoreUnavailable,
                 "cannot make data directory " + path + " private (0700): " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string sanitize_consumer_part(std::string s) {
  for (char& c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    if (!ok) c = '-';
  }
  return s.substr(0, 64);
}

// Whether `principal` is one this connection is listed for (shared mode: `shared`; per-member
// mode: a granted member).
Status check_principal(const ConnectionConfig& cfg, const Principal& principal) {
  if (cfg.credential_mode == CredentialMode::kPerMember) {
    if (principal.is_shared()) {
      return Error(ErrorCode::kInvalidArgument,
                   "connection `" + cfg.id +
                       "` uses per-member credentials: a member principal "
                       "is required");
    }
    if (cfg.granted_members.count(std::string(principal.member_id())) == 0) {
      return Error(ErrorCode::kNotFound, "member `" + std::string(principal.member_id()) +
                                             "` is not granted connection `" + cfg.id + "`");
    }
    return Status::Ok();
  }
  if (!principal.is_shared()) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + cfg.id + "` uses shared credentials: its principal is `shared`");
  }
  return Status::Ok();
}

Json error_json(const Error& e) {
  return Json{{"code", error_code_name(e.code)}, {"message", e.message}};
}

}  // namespace

// ---- host pieces -------------------------------------------------------------------------------

RandomSource urandom_source() {
  return [](std::size_t n) -> Result<std::string> {
    int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return Error(ErrorCode::kResourceUnavailable,
                   std::string("cannot open /dev/urandom: ") + std::strerror(errno));
    }
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      ssize_t r = ::read(fd, &out[got], n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ::close(fd);
        return Error(ErrorCode::kResourceUnavailable, "short read from /dev/urandom");
      }
      got += static_cast<std::size_t>(r);
    }
    ::close(fd);
    return out;
  };
}

UpstreamSpec upstream_spec_for(const std::string& name, const ResolvedUpstream& upstream) {
  if (upstream.transport == TransportKind::kHttp) {
    std::vector<UpstreamHeader> headers;
    for (const auto& [header, value] : upstream.headers) {
      headers.push_back(UpstreamHeader{header, value.reveal()});
    }
    return UpstreamSpec::http(name, upstream.url, std::move(headers),
                              upstream.allow_private_addresses);
  }
  std::map<std::string, std::string> env;
  for (const auto& [var, value] : upstream.env) env[var] = value.reveal();
  UpstreamSpec spec = UpstreamSpec::stdio(name, upstream.command, upstream.args, std::move(env));
  spec.working_dir = upstream.cwd;
  return spec;
}

// The connection's own deadlines (its overrides, else the runtime controls).
int64_t list_timeout_for(const ConnectionConfig& c, const RuntimeControls& rt) {
  return c.list_timeout_ms.value_or(rt.list_timeout_ms);
}

UpstreamSpec with_deadlines(UpstreamSpec spec, const ConnectionConfig& c,
                            const RuntimeControls& rt) {
  int64_t list = list_timeout_for(c, rt);
  spec.request_timeout_ms = std::min(c.request_timeout_ms.value_or(rt.request_timeout_ms), list);
  spec.startup_timeout_ms = c.startup_timeout_ms.value_or(rt.startup_timeout_ms);
  return spec;
}

// ---- the engine --------------------------------------------------------------------------------

struct Agent::Impl {
  AgentConfig config;
  std::shared_ptr<ManifestStore> store;
  AgentOptions options;
  Metrics metrics;
  std::unique_ptr<Logger> logger;
  std::unique_ptr<PreferencesDb> prefs;
  std::unique_ptr<UpstreamPool> pool;
  std::string consumer;
  int64_t claim_idle_ms = 0;
  FreshnessPolicy policy;

  std::mutex names_mu;  // pool name -> (connection id, principal)
  std::map<std::string, std::pair<std::string, Principal>> pool_keys;

  struct Deferred {
    std::string connection_id;
    Principal principal = Principal::shared();
    std::string trigger;
    int64_t since_ms = 0;       // the change happened at (agent clock)
    int64_t give_up_at_ms = 0;  // steady
  };
  std::mutex deferred_mu;
  std::map<std::string, Deferred> deferred;  // by pool name

  struct Retry {
    std::string connection_id;
    Principal principal = Principal::shared();
    int failures = 0;   // listings in a row that failed or left a list failed
    int64_t due_ms = 0;  // steady
  };
  std::mutex retry_mu;
  std::map<std::string, Retry> retries;  // by pool name

  std::mutex run_mu;
  std::condition_variable run_cv;
  bool running = false;
  bool started = false;
  std::thread scheduler;
  std::vector<std::thread> workers;
  std::atomic<int64_t> next_claim_at{0};
  std::atomic<int64_t> store_error_logged_at{0};
  // The store check's view (scheduler thread): the state last seen and the ready record last
  // seen ("": none yet).
  std::string last_namespace_state = "ready";
  std::string last_ready_record;
  // When this agent first saw the namespace not ready (steady ms; 0: it is ready).
  int64_t restore_seen_at = 0;

  // ---- helpers ----

  static std::string pool_name(const std::string& cid, const Principal& principal) {
    return principal.is_shared() ? cid : cid + "#" + principal.str();
  }

  std::string who(const std::string& cid, const Principal& principal) const {
    return cid + " (" + principal.str() + ")";
  }

  bool is_running() {
    std::lock_guard<std::mutex> lock(run_mu);
    return running;
  }

  // Sleeps up to `ms` unless stop() is called; false when stopping.
  bool wait_running(int64_t ms) {
    std::unique_lock<std::mutex> lock(run_mu);
    run_cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !running; });
    return running;
  }

  // A store failure in a background loop: logged at most once every 5 s (an outage would
  // otherwise write a line per tick), always counted by the caller.
  void log_store_error(std::string_view what, const Error& e) {
    int64_t now = steady_ms();
    int64_t last = store_error_logged_at.load();
    if (now - last < 5000 && last != 0) return;
    store_error_logged_at.store(now);
    logger->warn(kLog, std::string(what) + ": " + e.message);
  }

  Result<std::string> lease_token() {
    Result<std::string> bytes = options.random(kLeaseTokenBytes);
    if (!bytes.ok()) return bytes.error();
    return make_lease_token(*bytes);
  }

  UpstreamOptions upstream_options() const {
    UpstreamOptions u;
    u.list_timeout_ms = config.runtime.list_timeout_ms;
    u.startup_timeout_ms = config.runtime.startup_timeout_ms;
    u.session.request_timeout_ms =
        std::min(config.runtime.request_timeout_ms, config.runtime.list_timeout_ms);
    u.change_debounce_ms = options.change_debounce_ms;
    u.session.max_listing_bytes = static_cast<std::size_t>(config.runtime.max_listing_bytes);
    u.max_message_bytes = std::max<std::size_t>(
        static_cast<std::size_t>(config.runtime.max_manifest_bytes) * 8, std::size_t{16} << 20);
    Logger* log = logger.get();
    u.log = [log](const std::string& line) { log->debug("upstream", line); };
    u.redactor = config.redactor;  // every upstream-originated string passes it on entry
    return u;
  }

  Result<const ConnectionConfig*> connection(const std::string& cid) const {
    if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
    const ConnectionConfig* cfg = config.find_connection(cid);
    if (cfg == nullptr) {
      return Error(ErrorCode::kNotFound, "no connection `" + cid + "` is configured");
    }
    return cfg;
  }

  // ---- config sync ----

  Status sync_config() {
    std::vector<ConnectionRecord> records;
    int64_t now = options.now_ms();
    for (const ConnectionConfig& c : config.connections) {
      ConnectionRecord r;
      r.id = c.id;
      r.config_hash = c.config_hash;
      r.credential_mode = c.credential_mode;
      r.name = c.name;
      r.transport = transport_kind_name(c.transport);
      r.updated_at_ms = now;
      records.push_back(std::move(r));
    }
    Result<ConnectionSync> synced = store->sync_connections(records);
    if (!synced.ok()) return synced.error();
    if (synced->any()) {
      auto join = [](const std::vector<std::string>& ids) {
        std::string out;
        for (const std::string& id : ids) out += (out.empty() ? "" : ",") + id;
        return out.empty() ? std::string("-") : out;
      };
      logger->info(kLog, "connections synced to " + store->describe() + ": added " +
                             join(synced->added) + ", changed " + join(synced->changed) +
                             ", removed " + join(synced->removed));
    }
    Result<GrantSync> grants = store->sync_grants(config.grants);
    if (!grants.ok()) return grants.error();
    return Status::Ok();
  }

  std::vector<std::string> connection_ids() const {
    std::vector<std::string> ids;
    for (const ConnectionConfig& c : config.connections) ids.push_back(c.id);
    return ids;
  }

  // ---- triggers ----

  void defer(const std::string& cid, const Principal& principal, const std::string& trigger,
             int64_t since_ms) {
    std::string name = pool_name(cid, principal);
    int64_t horizon =
        2 * config.runtime.lease_ms + config.runtime.list_timeout_ms + revalidation_window_ms();
    std::lock_guard<std::mutex> lock(deferred_mu);
    auto it = deferred.find(name);
    if (it != deferred.end()) {
      // An older pending change: a listing after the newer one satisfies both.
      it->second.since_ms = std::max(it->second.since_ms, since_ms);
      it->second.give_up_at_ms = steady_ms() + horizon;
      return;
    }
    deferred[name] = Deferred{cid, principal, trigger, since_ms, steady_ms() + horizon};
  }

  Result<RevalidationOutcome> enqueue(const std::string& cid, const Principal& principal,
                                 const std::string& trigger) {
    return store->enqueue_revalidation(cid, principal, trigger, revalidation_window_ms());
  }

  // One window for the gate every agent and edge of the namespace shares.
  int64_t revalidation_window_ms() const {
    return options.revalidation_window_ms > 0 ? options.revalidation_window_ms
                                              : config.runtime.revalidate_window_ms;
  }

  Result<RevalidationOutcome> request_refresh(const std::string& cid, const Principal& principal,
                                         const std::string& trigger) {
    Result<const ConnectionConfig*> cfg = connection(cid);
    if (!cfg.ok()) return cfg.error();
    if (Status st = check_principal(**cfg, principal); !st.ok()) return st.error();
    if (Status st = validate_revalidation_reason(trigger); !st.ok()) return st.error();
    int64_t since = options.now_ms();
    Result<RevalidationOutcome> r = enqueue(cid, principal, trigger);
    if (!r.ok()) {
      if (is_change_trigger(trigger)) {
        defer(cid, principal, trigger, since);
        log_store_error(
            "refresh of " + who(cid, principal) + " (" + trigger + ") not queued, will retry",
            r.error());
      } else {
        metrics.revalidation_dropped();
        logger->warn(kLog, "refresh of " + who(cid, principal) + " (" + trigger +
                               ") could not be queued: " + r.error().message);
      }
      return r;
    }
    if (is_change_trigger(trigger) && *r != RevalidationOutcome::kQueued) {
      defer(cid, principal, trigger, since);
    }
    logger->debug(kLog, "refresh of " + who(cid, principal) + " requested (" + trigger +
                            "): " + revalidation_outcome_name(*r));
    return r;
  }

  // Follows up deferred change triggers: done once a listing that started after the change is
  // stored. The queue's gate may still be taken by an earlier request that was already handled,
  // so this refreshes directly (the lease keeps agents that all saw the change from listing
  // twice); while a lease is held elsewhere it waits for that refresh and looks again. Given up
  // (counted, logged) after the horizon.
  void process_deferred() {
    std::vector<std::pair<std::string, Deferred>> due;
    {
      std::lock_guard<std::mutex> lock(deferred_mu);
      for (const auto& [name, d] : deferred) due.emplace_back(name, d);
    }
    for (const auto& [name, d] : due) {
      if (!is_running()) return;
      bool done = false;
      const ConnectionConfig* cfg = config.find_connection(d.connection_id);
      Result<std::optional<ManifestMeta>> meta =
          store->read_manifest_meta(d.connection_id, d.principal);
      if (cfg == nullptr) {
        done = true;
      } else if (!meta.ok()) {
        log_store_error("deferred refresh of " + who(d.connection_id, d.principal), meta.error());
      } else if (meta->has_value() && (*meta)->has_data && (*meta)->fetched_at_ms >= d.since_ms &&
                 (*meta)->config_hash == cfg->config_hash) {
        done = true;
      } else {
        Result<RefreshReport> r = refresh(d.connection_id, d.principal, d.trigger, std::nullopt);
        // in_progress: another holder lists now, maybe from before the change: look again.
        // A store failure: again later. Any other error will not get better by retrying.
        done = r.ok() ? r->outcome != "in_progress" : !passes_by_itself(r.error().code);
        if (!r.ok() && done) {
          metrics.revalidation_dropped();
          logger->warn(kLog, "the " + d.trigger + " refresh of " +
                                 who(d.connection_id, d.principal) +
                                 " cannot run: " + r.error().message);
        }
      }
      std::lock_guard<std::mutex> lock(deferred_mu);
      auto it = deferred.find(name);
      if (it == deferred.end()) continue;
      if (done && it->second.since_ms <= d.since_ms) {
        deferred.erase(it);
      } else if (!done && steady_ms() >= it->second.give_up_at_ms) {
        metrics.revalidation_dropped();
        logger->warn(kLog, "gave up on the " + d.trigger + " refresh of " +
                               who(d.connection_id, d.principal) +
                               ": no listing after the change could be stored");
        deferred.erase(it);
      }
    }
  }

  void on_change(const std::string& name, const UpstreamChange& change) {
    std::pair<std::string, Principal> key{"", Principal::shared()};
    {
      std::lock_guard<std::mutex> lock(names_mu);
      auto it = pool_keys.find(name);
      if (it == pool_keys.end()) return;
      key = it->second;
    }
    if (change.session_lost) {
      logger->info(kLog, "upstream session of " + who(key.first, key.second) + " ended" +
                             (change.error ? ": " + change.error->message : std::string()));
    }
    if (change.kinds.empty()) return;
    std::string kinds;
    for (ListKind k : change.kinds)
      kinds += (kinds.empty() ? "" : ",") + std::string(list_kind_name(k));
    logger->info(kLog, "list_changed (" + kinds + ") from " + who(key.first, key.second));
    (void)request_refresh(key.first, key.second, "list_changed");
  }

  // ---- retries after a failed listing ----

  // A listing that failed, or in which lists failed, is retried by this agent on its own, with
  // exponential backoff (retry_backoff_ms, shared/freshness.h) until a complete listing commits.
  void schedule_retry(const std::string& name, const std::string& cid, const Principal& principal) {
    std::lock_guard<std::mutex> lock(retry_mu);
    Retry& r = retries[name];
    r.connection_id = cid;
    r.principal = principal;
    ++r.failures;
    r.due_ms = steady_ms() + retry_backoff_ms(r.failures, config.runtime.retry_max_backoff_ms);
  }

  void settle_retry(const std::string& name) {
    std::lock_guard<std::mutex> lock(retry_mu);
    retries.erase(name);
  }

  void process_retries() {
    std::vector<Retry> due;
    {
      std::lock_guard<std::mutex> lock(retry_mu);
      int64_t now = steady_ms();
      for (auto it = retries.begin(); it != retries.end();) {
        if (config.find_connection(it->second.connection_id) == nullptr) {
          it = retries.erase(it);
          continue;
        }
        if (it->second.due_ms <= now) {
          due.push_back(it->second);
          // Not retried again before another backoff, whatever this attempt ends in (a lease
          // held elsewhere, a store failure); a failed attempt reschedules with a longer one.
          it->second.due_ms =
              now + retry_backoff_ms(it->second.failures, config.runtime.retry_max_backoff_ms);
        }
        ++it;
      }
    }
    for (const Retry& r : due) {
      if (!is_running()) return;
      Result<RefreshReport> report = refresh(r.connection_id, r.principal, "retry", std::nullopt);
      if (!report.ok()) {
        logger->warn(kLog, "retry of " + who(r.connection_id, r.principal) +
                               " did not run: " + report.error().message);
      }
    }
  }

  // Replaces the failed lists of `manifest` by the last good lists of their kinds, when the store
  // holds a manifest listed under the same config and the result still fits the size bound.
  void merge_last_good(const std::string& cid, const Principal& principal,
                       const ConnectionConfig& cfg, int64_t now, const ManifestLimits& limits,
                       Manifest* manifest) {
    Result<std::optional<StoredManifest>> last = store->read_manifest(cid, principal);
    if (!last.ok()) {
      log_store_error("reading the last good manifest of " + who(cid, principal), last.error());
      return;
    }
    if (!last->has_value() || !(*last)->meta.has_data ||
        (*last)->meta.config_hash != cfg.config_hash) {
      return;
    }
    Result<Manifest> old = decode_manifest((*last)->manifest);
    if (!old.ok()) {
      logger->warn(kLog, "the last good manifest of " + who(cid, principal) +
                             " is unreadable; failed lists are shown failed: " +
                             old.error().message);
      return;
    }
    Manifest merged = *manifest;
    if (keep_last_good_lists(&merged, *old, (*last)->meta.fetched_at_ms, now, policy.max_age_ms)
            .empty()) {
      return;
    }
    if (Status fits = fit_kept_lists(&merged, limits.max_bytes); !fits.ok()) {
      logger->warn(kLog, "the last good lists of " + who(cid, principal) +
                             " do not fit the manifest bound; failed lists are shown failed: " +
                             fits.error().message);
      return;
    }
    *manifest = std::move(merged);
  }

  // ---- one refresh ----

  Result<RefreshReport> refresh(const std::string& cid, const Principal& principal,
                                const std::string& trigger, std::optional<int64_t> not_before) {
    int64_t started_steady = steady_ms();
    RefreshReport report;
    report.connection_id = cid;
    report.principal = principal;
    auto finish = [&](std::string outcome) -> Result<RefreshReport> {
      report.outcome = std::move(outcome);
      report.duration_ms = steady_ms() - started_steady;
      metrics.refresh(outcome_label(report.outcome));
      return report;
    };

    Result<const ConnectionConfig*> found = connection(cid);
    if (!found.ok()) return found.error();
    const ConnectionConfig& cfg = **found;
    if (Status st = check_principal(cfg, principal); !st.ok()) return st.error();
    if (Status st = validate_revalidation_reason(trigger); !st.ok()) return st.error();
    Result<ResolvedUpstream> upstream = cfg.upstream_for(principal);
    if (!upstream.ok()) return upstream.error();
    Result<std::string> token = lease_token();
    if (!token.ok()) return token.error();

    const RuntimeControls& rt = config.runtime;
    Result<AcquireResult> acquired = store->acquire_lease(cid, principal, *token, rt.lease_ms);
    if (!acquired.ok()) {
      metrics.refresh("error");
      metrics.refresh_failure(error_code_name(acquired.error().code));
      logger->warn(kLog, "refresh of " + who(cid, principal) + " (" + trigger +
                             "): no lease, the store failed: " + acquired.error().message);
      return acquired.error();
    }
    if (!acquired->acquired) {
      metrics.lease_contention();
      logger->info(kLog, "refresh of " + who(cid, principal) + " (" + trigger +
                             ") skipped: lease held elsewhere (fence " +
                             std::to_string(acquired->holder_fence) + ")");
      return finish("in_progress");
    }
    Lease lease = acquired->lease;
    int64_t lease_at = steady_ms();

    // A queued request that a newer listing already answered (another agent, or a refresh
    // after the request was queued): nothing to do.
    if (not_before) {
      Result<std::optional<ManifestMeta>> meta = store->read_manifest_meta(cid, principal);
      if (meta.ok() && meta->has_value() && (*meta)->has_data &&
          (*meta)->fetched_at_ms >= *not_before) {
        Classification c =
            classify(cache_entry_meta(**meta), policy, cfg.config_hash, options.now_ms());
        if (c.state == Freshness::kFresh) {
          (void)store->release_lease(cid, principal, lease);
          report.etag = (*meta)->etag;
          return finish("up_to_date");
        }
      }
    }

    // List.
    std::string name = pool_name(cid, principal);
    {
      std::lock_guard<std::mutex> lock(names_mu);
      pool_keys.insert_or_assign(name, std::make_pair(cid, principal));
    }
    int64_t fetched_at = options.now_ms();
    Result<Listing> listing = Error(ErrorCode::kInternal, "not listed");
    if (Status put = pool->put(with_deadlines(upstream_spec_for(name, *upstream), cfg, rt));
        !put.ok()) {
      listing = put.error();
    } else {
      ListInfo info;
      listing = pool->list(name, list_timeout_for(cfg, rt), &info);
    }
    metrics.listing_duration_ms(steady_ms() - lease_at);

    // Preferences learn from every list that succeeded, before the commit: a new capability
    // that policy disables is hidden by the time the manifest shows it.
    if (listing.ok()) {
      Result<ReconcileReport> rec = prefs->reconcile_listing(
          cid, principal, *listing, PreferencePolicy{cfg.auto_enable_new_capabilities});
      if (!rec.ok()) {
        logger->warn(kLog, "preferences of " + cid + " not reconciled: " + rec.error().message);
      } else if (rec->inserted > 0) {
        logger->info(kLog, "preferences of " + cid + ": " + std::to_string(rec->inserted) +
                               " new capabilities");
      }
    }

    // Decide what to write. Per list (ADR-004): lists that succeeded update; a list that failed
    // keeps the last good list of its kind (listed under the same config), or shows as failed with
    // its error, never as an empty list. A manifest holding a failed or kept list is committed as
    // never fresh (fresh_until = fetched_at: readers serve it stale and revalidate), its error is
    // recorded on the connection, and the agent retries with backoff.
    std::optional<Error> failure;       // nothing to commit: recorded as a failed refresh
    std::optional<Error> list_failure;  // committed, but a list failed: recorded beside it
    std::optional<ManifestWrite> write;
    std::vector<ListKind> incomplete;
    if (!listing.ok()) {
      failure = listing.error();
    } else {
      ManifestLimits limits;
      limits.max_bytes = static_cast<std::size_t>(rt.max_manifest_bytes);
      limits.max_definition_bytes = std::min(limits.max_definition_bytes, limits.max_bytes);
      Result<Manifest> manifest = manifest_from_listing(*listing, limits);
      if (manifest.ok()) {
        for (int i = 0; i < kListKindCount; ++i) {
          const ListOutcome& l = listing->lists[i];
          if (l.state != ListState::kFailed) continue;
          metrics.list_failure(list_kind_name(static_cast<ListKind>(i)));
          if (list_failure) continue;
          Error e = l.error ? *l.error : Error(ErrorCode::kUnknown, "failed");
          e.message = std::string(list_method(static_cast<ListKind>(i))) +
                      " could not be loaded: " + e.message;
          if (!l.items.empty()) {
            e.message += " (" + std::to_string(l.items.size()) + " items on " +
                         std::to_string(l.pages) + " pages arrived before; not kept)";
          }
          list_failure = e;
        }
        if (list_failure) merge_last_good(cid, principal, cfg, fetched_at, limits, &*manifest);
        incomplete = incomplete_lists(*manifest);
      }
      Result<EncodedManifest> encoded =
          manifest.ok() ? encode_manifest(*manifest) : Result<EncodedManifest>(manifest.error());
      if (!encoded.ok()) {
        failure = encoded.error();
      } else {
        ManifestWrite w;
        w.manifest = std::move(encoded->bytes);
        w.etag = encoded->etag;
        w.config_hash = cfg.config_hash;  // the config this listing started under
        w.fetched_at_ms = fetched_at;
        w.fresh_until_ms =
            incomplete.empty()
                ? fetched_at + effective_fresh_ttl_ms(policy, manifest->cache.ttl_ms)
                : fetched_at;  // never fresh: a list failed (schema/redis-keys.md)
        w.expires_at_ms = fetched_at + policy.max_age_ms;
        w.cache_scope = manifest->cache.cache_scope.value_or("");
        w.truncated = manifest->truncated;
        write = std::move(w);
      }
    }

    // A long listing: make sure the lease is still ours before writing (a lost lease is
    // refused by the fenced write anyway; renewing keeps a slow but live refresh from losing).
    if (steady_ms() - lease_at > rt.lease_ms / 2) {
      Result<LeaseOutcome> renewed = store->renew_lease(cid, principal, lease, rt.lease_ms);
      if (renewed.ok() && *renewed != LeaseOutcome::kOk) {
        logger->warn(kLog, "refresh of " + who(cid, principal) + " (" + trigger +
                               ") refused: " + lease_outcome_name(*renewed) +
                               " after listing for " + std::to_string(steady_ms() - lease_at) +
                               " ms (lease " + std::to_string(rt.lease_ms) + " ms)");
        if (failure) report.error = Error(failure->code, config.redact(failure->message));
        return finish(std::string("refused:") + lease_outcome_name(*renewed));
      }
    }

    FencedWriteOptions fenced;
    fenced.release_lease = true;
    Result<FencedWriteResult> written = Error(ErrorCode::kInternal, "nothing written");
    // The error as reported and recorded: redacted, bounded, counted.
    auto failure_record = [&](Error e) {
      e.message = cut_utf8(config.redact(e.message), kMaxErrorMessageBytes);
      report.error = e;
      metrics.refresh_failure(error_code_name(e.code));
      RefreshFailure f;
      f.config_hash = cfg.config_hash;
      f.error_code = error_code_name(e.code);
      f.error_message = e.message;
      f.error_at_ms = std::max(options.now_ms(), fetched_at);
      f.attempt_at_ms = fetched_at;
      return f;
    };
    if (write) {
      // A list failed: keep the lease past the commit to record the error beside the data.
      fenced.release_lease = !list_failure.has_value();
      written = store->commit_manifest(cid, principal, lease, *write, fenced);
      if (list_failure && written.ok() && written->ok()) {
        RefreshFailure f = failure_record(*list_failure);
        fenced.release_lease = true;
        Result<FencedWriteResult> recorded = store->record_failure(cid, principal, lease, f, fenced);
        if (!recorded.ok() || !recorded->ok()) {
          logger->warn(kLog, "refresh of " + who(cid, principal) +
                                 ": the error of its failed lists was not recorded: " +
                                 (recorded.ok() ? lease_outcome_name(recorded->outcome)
                                                : recorded.error().message));
          (void)store->release_lease(cid, principal, lease);
        }
      }
    } else {
      RefreshFailure f =
          failure_record(failure.value_or(Error(ErrorCode::kUnknown, "listing failed")));
      written = store->record_failure(cid, principal, lease, f, fenced);
    }
    if (!written.ok()) {
      metrics.refresh("error");
      metrics.refresh_failure(error_code_name(written.error().code));
      logger->warn(kLog, "refresh of " + who(cid, principal) + " (" + trigger +
                             "): the store failed writing: " + written.error().message);
      (void)store->release_lease(cid, principal, lease);
      return written.error();
    }
    if (!written->ok()) {
      // Give the lease back if it is somehow still ours (a config change refuses a holder).
      (void)store->release_lease(cid, principal, lease);
      std::string why = lease_outcome_name(written->outcome);
      logger->warn(kLog, "refresh of " + who(cid, principal) + " (" + trigger +
                             ") refused by the fenced write: " + why + " (fence " +
                             std::to_string(lease.fence) + ")");
      return finish("refused:" + why);
    }
    if (write) {
      report.committed = true;
      report.etag = write->etag;
      report.incomplete_lists = incomplete;
      metrics.set_incomplete(name, !incomplete.empty());
      if (incomplete.empty()) {
        settle_retry(name);
        logger->info(kLog, "refreshed " + who(cid, principal) + " (" + trigger + ") in " +
                               std::to_string(steady_ms() - started_steady) + " ms, etag " +
                               write->etag + (write->truncated ? ", truncated" : ""));
        return finish("committed");
      }
      schedule_retry(name, cid, principal);
      logger->warn(kLog, "refreshed " + who(cid, principal) + " (" + trigger + ") in part: " +
                             list_kinds_text(incomplete) + " could not be loaded (" +
                             (report.error ? report.error->message : std::string("failed")) +
                             "), committed as never fresh, etag " + write->etag);
      return finish("partial");
    }
    schedule_retry(name, cid, principal);
    logger->warn(kLog, "refresh of " + who(cid, principal) + " (" + trigger + ") failed: " +
                           error_code_name(report.error->code) + ": " + report.error->message);
    return finish("failed");
  }

  // ---- revalidation consumer ----

  std::size_t handle(const RevalidationBatch& batch) {
    for (const std::string& id : batch.malformed_ids) {
      metrics.revalidation_dropped();
      logger->warn(kLog, "dropped a malformed revalidation request (" + id + ")");
    }
    std::size_t handled = 0;
    for (const RevalidationRequest& req : batch.requests) {
      const ConnectionConfig* cfg = config.find_connection(req.connection_id);
      bool ack = true;
      if (cfg == nullptr || !check_principal(*cfg, req.principal).ok()) {
        metrics.revalidation_dropped();
        logger->warn(kLog, "dropped a revalidation request for " +
                               who(req.connection_id, req.principal) + " (" + req.reason +
                               "): not a configured, granted connection");
      } else {
        Result<RefreshReport> r = refresh(req.connection_id, req.principal, req.reason,
                                          std::optional<int64_t>(req.at_ms));
        // A change queued while a listing was under way (an edge's webhook queues behind a
        // lease): that listing may predate the change, so follow it up like a local trigger.
        if (r.ok() && r->outcome == "in_progress" && is_change_trigger(req.reason)) {
          defer(req.connection_id, req.principal, req.reason, req.at_ms);
        }
        // The store failed: leave the request pending; it is claimed again once it is idle.
        if (!r.ok() && passes_by_itself(r.error().code)) {
          ack = false;
        } else if (!r.ok()) {
          metrics.revalidation_dropped();
          logger->warn(kLog, "revalidation of " + who(req.connection_id, req.principal) + " (" +
                                 req.reason + ") cannot run: " + r.error().message);
        }
        ++handled;
      }
      if (ack) {
        if (Status st = store->ack_revalidations({req.id}); !st.ok()) {
          log_store_error("acknowledging revalidation " + req.id, st.error());
        }
      }
    }
    return handled;
  }

  std::size_t drain_once(int64_t block_ms, bool* store_failed = nullptr) {
    std::size_t handled = 0;
    auto max =
        static_cast<std::size_t>(std::max<int64_t>(1, config.runtime.revalidate_concurrency));
    int64_t now = steady_ms();
    int64_t due = next_claim_at.load();
    if (now >= due && next_claim_at.compare_exchange_strong(due, now + claim_idle_ms / 2 + 1)) {
      Result<RevalidationBatch> claimed =
          store->claim_stale_revalidations(consumer, claim_idle_ms, max);
      if (claimed.ok()) {
        if (!claimed->requests.empty()) {
          logger->info(kLog, "claimed " + std::to_string(claimed->requests.size()) +
                                 " revalidation requests of a stalled consumer");
        }
        handled += handle(*claimed);
      } else {
        if (store_failed != nullptr) *store_failed = true;
        log_store_error("claiming stale revalidations", claimed.error());
      }
    }
    Result<RevalidationBatch> batch = store->read_revalidations(consumer, 1, block_ms);
    if (!batch.ok()) {
      if (store_failed != nullptr) *store_failed = true;
      log_store_error("reading revalidations", batch.error());
      return handled;
    }
    return handled + handle(*batch);
  }

  void worker_loop() {
    int64_t backoff = 0;
    while (is_running()) {
      bool store_failed = false;
      drain_once(options.revalidation_block_ms, &store_failed);
      // A store that answers at once with an error would make this loop spin: back off.
      if (store_failed) {
        backoff = std::min<int64_t>(backoff == 0 ? 50 : backoff * 2, 1000);
        if (!wait_running(backoff)) break;
      } else {
        backoff = 0;
      }
    }
  }

  // ---- the store check: a namespace the store lost, clock skew, dead consumers ----

  // How long a restore keeps the namespace `restoring` after this agent first saw it not ready:
  // two store-check intervals (and a scheduler tick), so that every other agent of the
  // namespace (same store_check_interval_ms) has had a store check meanwhile, seen the record
  // `restoring` and merged its own preference copy in. Without it the first agent to restore
  // marked the namespace ready with its copy alone, and a capability hidden through another agent
  // whose toggle this one had not pulled yet showed until that agent's next check.
  int64_t restore_hold_ms() const {
    return 2 * config.runtime.store_check_interval_ms + kTickMs;
  }

  // Connections, grants and preference overlays into the store, then, once the hold is over, the
  // namespace record `ready` (true). Between the two writes of the record readers answer 503,
  // never "nothing granted". False: synced, still held `restoring` (the next check goes on).
  Result<bool> restore_namespace() {
    if (Status st = store->begin_namespace_restore(options.now_ms()); !st.ok()) return st.error();
    if (Status st = sync_config(); !st.ok()) return st.error();
    // Overlays are part of the namespace: a tool the team hid must not show after a wipe.
    if (Status st = prefs->sync_all(); !st.ok()) return st.error();
    if (steady_ms() - restore_seen_at < restore_hold_ms()) return false;
    Result<bool> ready = store->mark_namespace_ready(options.now_ms());
    if (!ready.ok()) return ready.error();
    if (!*ready) {
      return Error(ErrorCode::kStoreNotReady,
                   "the namespace record vanished while it was being restored (wiped again)");
    }
    return true;
  }

  std::string check_store_once() {
    Result<NamespaceRecord> record = store->read_namespace();
    if (!record.ok()) {
      metrics.store_namespace("unknown");
      log_store_error("store check", record.error());
      return "unknown";
    }
    if (record->state == NamespaceState::kReady) {
      metrics.store_namespace("ready");
      if (!last_ready_record.empty() && record->value != last_ready_record) {
        // Another agent restored (or an agent started on) the namespace: this agent's preference
        // copy may hold toggles that one had not seen yet.
        if (Status st = prefs->sync_all(); !st.ok()) {
          log_store_error("store: merging preferences after a restore", st.error());
          return "ready";  // again at the next check
        }
      }
      last_ready_record = record->value;
      last_namespace_state = "ready";
      restore_seen_at = 0;
      return "ready";
    }
    const char* seen = namespace_state_name(record->state);
    metrics.store_namespace(seen);
    if (restore_seen_at == 0) restore_seen_at = steady_ms();
    if (last_namespace_state != seen) {
      logger->warn(kLog, std::string("store: the namespace record is ") + seen +
                             (record->state == NamespaceState::kMissing
                                  ? " (the store lost its data: restarted empty, flushed or failed "
                                    "over): restoring connections, grants and preference overlays; "
                                    "readers answer 503 until then"
                                  : ": finishing the restore"));
    }
    last_namespace_state = seen;
    Result<bool> restored = restore_namespace();
    if (!restored.ok()) {
      log_store_error("store: restoring the namespace", restored.error());
      return seen;
    }
    if (!*restored) {  // synced, and held `restoring` for the other agents' copies
      return namespace_state_name(NamespaceState::kRestoring);
    }
    last_namespace_state = "ready";
    last_ready_record.clear();  // the next check takes our own record as the one seen
    metrics.store_namespace("ready");
    metrics.namespace_restored();
    logger->info(kLog, "store: namespace restored " + std::to_string(steady_ms() - restore_seen_at) +
                           " ms after it was seen lost; re-listing what it lost");
    restore_seen_at = 0;
    (void)maintenance_once();  // seeds the listings the wipe took
    return "ready";
  }

  // This agent's clock against the store's (Redis TIME): reported, warned about past a bound.
  void measure_clock_skew() {
    const int64_t before = options.now_ms();
    Result<std::optional<int64_t>> theirs = store->store_time_ms();
    const int64_t after = options.now_ms();
    if (!theirs.ok()) {
      log_store_error("clock check", theirs.error());
      return;
    }
    if (!theirs->has_value()) return;
    const int64_t skew = (before + after) / 2 - **theirs;
    metrics.clock_skew_ms(skew);
    if (std::llabs(skew) > options.clock_skew_warn_ms) {
      logger->warn(kLog, "clock: this agent's clock is " + std::to_string(skew) +
                             " ms off the store's (Redis TIME); freshness and lease times are "
                             "compared across hosts: fix the clock (NTP)");
    }
  }

  // Consumers of the revalidation group left behind by earlier runs and reloads.
  void remove_dead_consumers() {
    const int64_t idle = options.dead_consumer_idle_ms > 0 ? options.dead_consumer_idle_ms
                                                           : int64_t{3'600'000};
    Result<std::vector<std::string>> removed = store->remove_idle_consumers(consumer, idle);
    if (!removed.ok()) {
      log_store_error("maintenance: removing dead consumers", removed.error());
      return;
    }
    if (removed->empty()) return;
    metrics.consumers_removed(static_cast<int64_t>(removed->size()));
    std::string names;
    for (const std::string& n : *removed) names += (names.empty() ? "" : ", ") + n;
    logger->info(kLog, "maintenance: removed " + std::to_string(removed->size()) +
                           " dead revalidation consumer(s) (idle, nothing pending): " + names);
  }

  // ---- maintenance ----

  MaintenanceReport maintenance_once() {
    MaintenanceReport report;
    measure_clock_skew();
    remove_dead_consumers();
    // Re-sync what a flushed or restarted store lost (unchanged records are not rewritten).
    if (Status st = sync_config(); !st.ok()) {
      ++report.errors;
      log_store_error("maintenance: syncing connections", st.error());
      return report;
    }
    // Every pass merges this agent's preference copy into the store: rows and overlays that a
    // flushed or restarted store lost come back with the rest of the namespace.
    if (Status st = prefs->sync_all(); !st.ok()) {
      log_store_error("maintenance: merging preferences", st.error());
    }
    int64_t now = options.now_ms();
    std::set<std::string> seen;
    std::string cursor;
    auto batch = static_cast<std::size_t>(std::max<int64_t>(1, config.runtime.maintenance_batch));
    auto queue = [&](const std::string& cid, const Principal& p, const char* reason) {
      Result<RevalidationOutcome> r = enqueue(cid, p, reason);
      if (!r.ok()) {
        ++report.errors;
        metrics.revalidation_dropped();
        log_store_error("maintenance: queueing " + who(cid, p), r.error());
        return false;
      }
      if (*r == RevalidationOutcome::kQueued) {
        ++report.queued;
        return true;
      }
      ++report.skipped;
      return false;
    };
    for (;;) {
      Result<ManifestPage> page = store->list_manifest_metas(cursor, batch);
      if (!page.ok()) {
        ++report.errors;
        log_store_error("maintenance walk", page.error());
        return report;
      }
      for (const std::string& u : page->unreadable) {
        logger->warn(kLog, "maintenance: unreadable manifest record skipped: " + u);
      }
      for (const ManifestMeta& meta : page->metas) {
        ++report.examined;
        seen.insert(pool_name(meta.connection_id, meta.principal));
        const ConnectionConfig* cfg = config.find_connection(meta.connection_id);
        if (cfg == nullptr) continue;  // removed connections are deleted by sync
        if (!check_principal(*cfg, meta.principal).ok()) {
          // A member whose grant was removed (or a principal of the other credential mode): its
          // manifest is never read again (grants are checked live) and goes.
          Result<bool> dropped = store->drop_manifest(meta.connection_id, meta.principal);
          if (!dropped.ok()) {
            ++report.errors;
            log_store_error("maintenance: dropping " + who(meta.connection_id, meta.principal),
                            dropped.error());
          } else if (*dropped) {
            ++report.dropped;
            logger->info(kLog, "maintenance: dropped the manifest of " +
                                   who(meta.connection_id, meta.principal) +
                                   ": no longer cached under that principal");
          }
          continue;
        }
        RefreshDecision d = decide_refresh(cache_entry_meta(meta), policy, cfg->config_hash, now);
        if (d.refresh) queue(meta.connection_id, meta.principal, "maintenance");
      }
      if (page->next_cursor.empty()) break;
      cursor = page->next_cursor;
    }
    for (const ConnectionConfig& c : config.connections) {
      if (c.credential_mode != CredentialMode::kShared) continue;
      if (seen.count(pool_name(c.id, Principal::shared())) > 0) continue;
      if (queue(c.id, Principal::shared(), "seed")) ++report.seeded;
    }
    if (report.queued > 0 || report.errors > 0 || report.dropped > 0) {
      logger->info(kLog, "maintenance: examined " + std::to_string(report.examined) + ", queued " +
                             std::to_string(report.queued) + " (seeded " +
                             std::to_string(report.seeded) + "), dropped " +
                             std::to_string(report.dropped) + ", errors " +
                             std::to_string(report.errors));
    }
    return report;
  }

  void scheduler_loop() {
    int64_t next_maintenance = steady_ms();
    int64_t next_store_check = steady_ms() + config.runtime.store_check_interval_ms;
    while (is_running()) {
      if (options.run_maintenance && steady_ms() >= next_store_check) {
        (void)check_store_once();
        next_store_check = steady_ms() + config.runtime.store_check_interval_ms;
      }
      process_deferred();
      if (options.run_retries) process_retries();
      if (options.run_maintenance && steady_ms() >= next_maintenance) {
        (void)maintenance_once();
        next_maintenance = steady_ms() + config.runtime.maintenance_interval_ms;
      }
      if (!wait_running(kTickMs)) break;
    }
  }
};

// ---- Agent -------------------------------------------------------------------------------------

Result<std::unique_ptr<Agent>> Agent::create(AgentConfig config, AgentOptions options) {
  if (Status st = make_dirs(config.data_dir); !st.ok()) return st.error();
  std::shared_ptr<ManifestStore> store;
  if (config.redis) {
    RedisStoreOptions ro;
    ro.redis = *config.redis;
    ro.ns = config.ns;
    ro.now_ms = options.now_ms;
    Result<std::unique_ptr<RedisStore>> r = RedisStore::create(std::move(ro));
    if (!r.ok()) return r.error();
    store = std::move(*r);
  } else {
    SqliteStoreOptions so;
    so.path = config.data_dir + "/quiver.db";
    so.now_ms = options.now_ms;
    Result<std::unique_ptr<SqliteStore>> s = SqliteStore::open(std::move(so));
    if (!s.ok()) return s.error();
    store = std::move(*s);
  }
  return create(std::move(config), std::move(store), std::move(options));
}

Result<std::unique_ptr<Agent>> Agent::create(AgentConfig config,
                                             std::shared_ptr<ManifestStore> store,
                                             AgentOptions options) {
  if (!store) return Error(ErrorCode::kInvalidArgument, "agent: no store");
  if (!options.now_ms || !options.random) {
    return Error(ErrorCode::kInvalidArgument, "agent: a clock and a random source are required");
  }
  if (config.data_dir.empty()) {
    return Error(ErrorCode::kInvalidArgument, "agent: no data directory configured");
  }
  if (Status st = make_dirs(config.data_dir); !st.ok()) return st.error();
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  impl->store = std::move(store);
  impl->options = std::move(options);
  Impl& s = *impl;
  if (!s.config.redactor) {
    std::vector<std::string> values;
    for (const Secret& secret : s.config.secrets()) values.push_back(secret.reveal());
    s.config.redactor = std::make_shared<const Redactor>(values);
  }
  std::shared_ptr<const Redactor> redactor = s.config.redactor;
  s.logger = std::make_unique<Logger>(
      s.options.log_level, s.options.log_sink,
      [redactor](std::string_view text) { return redactor->redact(text); }, s.options.now_ms);
  s.policy = s.config.runtime.freshness_policy();
  s.claim_idle_ms =
      s.options.claim_idle_ms > 0 ? s.options.claim_idle_ms : s.config.runtime.lease_ms;

  PreferencesDbOptions po;
  po.path = s.config.data_dir + "/quiver.db";
  po.now_ms = s.options.now_ms;
  po.store = s.store.get();
  Result<std::unique_ptr<PreferencesDb>> prefs = PreferencesDb::open(std::move(po));
  if (!prefs.ok()) return prefs.error();
  s.prefs = std::move(*prefs);

  UpstreamPoolOptions pool;
  pool.upstream = s.upstream_options();
  pool.max_concurrent_listings = static_cast<int>(s.config.runtime.list_concurrency);
  pool.watch_interval_ms = s.options.watch_interval_ms;
  s.pool = std::make_unique<UpstreamPool>(std::move(pool));

  if (!s.options.consumer_name.empty()) {
    if (Status st = validate_consumer_name(s.options.consumer_name); !st.ok()) return st.error();
    s.consumer = s.options.consumer_name;
  } else {
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
    Result<std::string> rnd = s.options.random(4);
    if (!rnd.ok()) return rnd.error();
    s.consumer = "agent-" + sanitize_consumer_part(host) + "-" + std::to_string(::getpid()) + "-" +
                 hex_encode(reinterpret_cast<const uint8_t*>(rnd->data()), rnd->size());
  }
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  Impl* s = impl_.get();
  impl_->pool->set_change_callback(
      [s](const std::string& name, const UpstreamChange& change) { s->on_change(name, change); });
}

Agent::~Agent() {
  stop();
  impl_->pool->stop_watching();
}

Status Agent::start() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    if (s.started) return Status::Ok();
  }
  // A namespace never initialised (or lost) is marked `restoring` first: readers answer 503 until
  // connections, grants and overlays are all in (below).
  if (Status st = s.store->begin_namespace_restore(s.options.now_ms()); !st.ok()) {
    s.logger->error(kLog, "cannot reach the store " + s.store->describe() + ": " +
                              st.error().message);
    return st;
  }
  if (Status st = s.sync_config(); !st.ok()) {
    s.logger->error(kLog, "cannot sync the configuration to " + s.store->describe() + ": " +
                              st.error().message);
    return st;
  }
  // Rows of a per-member connection under `shared` can only be from before schema v3, fed by
  // every member's listing: no member may read them (sqlite-migrate-v3.sql).
  for (const ConnectionConfig& c : s.config.connections) {
    if (c.credential_mode != CredentialMode::kPerMember) continue;
    if (Status st = s.prefs->forget(c.id, Principal::shared()); !st.ok()) {
      s.logger->warn(kLog, "preferences of " + c.id + ": " + st.error().message);
    }
  }
  if (Status st = s.prefs->sync_all(); !st.ok()) {
    // The namespace stays `restoring` (readers: 503) until the store check gets them in.
    s.logger->warn(kLog, "preferences not yet merged with the store: " + st.error().message);
  } else if (Result<bool> ready = s.store->mark_namespace_ready(s.options.now_ms());
             !ready.ok() || !*ready) {
    s.logger->warn(kLog, "the namespace record could not be marked ready yet: " +
                             (ready.ok() ? std::string("it vanished (the store was flushed)")
                                         : ready.error().message));
  } else {
    s.metrics.store_namespace("ready");
  }
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    s.started = true;
    s.running = true;
  }
  if (s.options.watch_upstreams) s.pool->start_watching();
  if (s.options.run_revalidation_workers) {
    int64_t n = std::max<int64_t>(1, s.config.runtime.revalidate_concurrency);
    for (int64_t i = 0; i < n; ++i) s.workers.emplace_back([&s] { s.worker_loop(); });
  }
  s.scheduler = std::thread([&s] { s.scheduler_loop(); });
  s.logger->info(kLog, "started: " + std::to_string(s.config.connections.size()) +
                           " connections, store " + s.store->describe() + ", consumer " +
                           s.consumer);
  return Status::Ok();
}

void Agent::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    if (!s.running && !s.started) return;
    s.running = false;
    s.started = false;
  }
  s.run_cv.notify_all();
  if (s.scheduler.joinable()) s.scheduler.join();
  for (std::thread& t : s.workers) {
    if (t.joinable()) t.join();
  }
  s.workers.clear();
  s.pool->stop_watching();
  for (const std::string& name : s.pool->names()) s.pool->remove(name);
  s.logger->info(kLog, "stopped");
}

const AgentConfig& Agent::config() const { return impl_->config; }
ManifestStore& Agent::store() { return *impl_->store; }
Metrics& Agent::metrics() { return impl_->metrics; }
const std::string& Agent::consumer_name() const { return impl_->consumer; }
const Logger& Agent::logger() const { return *impl_->logger; }

Result<RevalidationOutcome> Agent::request_refresh(const std::string& connection_id,
                                              const Principal& principal,
                                              const std::string& trigger) {
  return impl_->request_refresh(connection_id, principal, trigger);
}

Result<RefreshReport> Agent::refresh_now(const std::string& connection_id,
                                         const Principal& principal, const std::string& trigger) {
  return impl_->refresh(connection_id, principal, trigger, std::nullopt);
}

Result<Json> Agent::test_connection(const std::string& connection_id, const Principal& principal) {
  Impl& s = *impl_;
  Result<const ConnectionConfig*> found = s.connection(connection_id);
  if (!found.ok()) return found.error();
  if (Status st = check_principal(**found, principal); !st.ok()) return st.error();
  Result<ResolvedUpstream> upstream = (*found)->upstream_for(principal);
  if (!upstream.ok()) return upstream.error();
  UpstreamSpec spec = with_deadlines(
      upstream_spec_for(Impl::pool_name(connection_id, principal) + "#test", *upstream), **found,
      s.config.runtime);
  std::string described = spec.describe();
  UpstreamConnection conn(std::move(spec), s.upstream_options());
  ListInfo info;
  Result<Listing> listing =
      conn.list(conn.now_ms() + list_timeout_for(**found, s.config.runtime), {}, &info);
  conn.close();
  if (!listing.ok()) {
    Error e = listing.error();
    e.message = s.config.redact(e.message);
    s.logger->info(kLog, "test of " + s.who(connection_id, principal) +
                             " failed: " + error_code_name(e.code) + ": " + e.message);
    return e;
  }
  Json lists = Json::object();
  bool complete = true;
  for (int i = 0; i < kListKindCount; ++i) {
    auto kind = static_cast<ListKind>(i);
    const ListOutcome& out = listing->list(kind);
    Json l = {{"state", list_state_name(out.state)}};
    if (out.state == ListState::kOk) l["count"] = out.items.size();
    if (out.error) {
      Error e = *out.error;
      e.message = s.config.redact(e.message);
      l["error"] = error_json(e);
    }
    if (out.state == ListState::kFailed) complete = false;
    lists[list_kind_name(kind)] = l;
  }
  ManifestLimits limits;
  limits.max_bytes = static_cast<std::size_t>(s.config.runtime.max_manifest_bytes);
  limits.max_definition_bytes = std::min(limits.max_definition_bytes, limits.max_bytes);
  Result<Manifest> manifest = manifest_from_listing(*listing, limits);
  if (!manifest.ok()) return manifest.error();
  Result<EncodedManifest> encoded = encode_manifest(*manifest);
  if (!encoded.ok()) return encoded.error();
  return Json{
      {"connection_id", connection_id},
      {"principal", principal.str()},
      {"status", complete ? "ok" : "partial"},
      {"upstream", s.config.redact(described)},
      {"protocol_version", listing->protocol_version},
      {"timings",
       {{"connect_ms", info.connect_ms}, {"list_ms", info.list_ms}, {"total_ms", info.total_ms}}},
      {"lists", lists},
      {"truncated", manifest->truncated},
      {"etag", encoded->etag},
      {"manifest", manifest_to_json(*manifest)},
  };
}

namespace {

// The principal a connection's preferences are kept under must be the one its credential mode
// gives: a caller cannot reach another principal's rows by naming it.
Status check_preference_principal(const ConnectionConfig& c, const Principal& principal) {
  const bool per_member = c.credential_mode == CredentialMode::kPerMember;
  if (per_member == principal.is_shared()) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection " + c.id + " keeps preferences " +
                     (per_member ? "per member: name the member" : "shared: name no member"));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<PreferenceRow>> Agent::preferences(const std::string& connection_id,
                                                      const Principal& principal) {
  Result<const ConnectionConfig*> found = impl_->connection(connection_id);
  if (!found.ok()) return found.error();
  if (Status st = check_preference_principal(**found, principal); !st.ok()) return st.error();
  return impl_->prefs->rows(connection_id, principal);
}

Status Agent::set_preference(const std::string& connection_id, const Principal& principal,
                             CapabilityType type, const std::string& key, bool enabled) {
  Impl& s = *impl_;
  Result<const ConnectionConfig*> found = s.connection(connection_id);
  if (!found.ok()) return found.error();
  if (Status st = check_preference_principal(**found, principal); !st.ok()) return st;
  Status st = s.prefs->set_enabled(connection_id, principal, type, key, enabled);
  if (st.ok() || st.error().code == ErrorCode::kStoreUnavailable) {
    s.logger->info(
        kLog, std::string("preference ") + capability_type_name(type) + ":" + key + " of " +
                  connection_id + " (" + principal.str() + ") set to " +
                  (enabled ? "enabled" : "disabled") +
                  (st.ok() ? "" : " (not yet merged with the store: " + st.error().message + ")"));
  }
  return st;
}

MaintenanceReport Agent::run_maintenance_once() { return impl_->maintenance_once(); }
std::string Agent::check_store_once() { return impl_->check_store_once(); }

std::size_t Agent::drain_revalidations_once(int64_t block_ms) {
  return impl_->drain_once(block_ms);
}

}  // namespace quiver
