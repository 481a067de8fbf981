#include "native-agent/engine/agent.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "native-agent/base/clock.h"
#include "native-agent/engine/agent_context.h"
#include "native-agent/engine/catalog_config.h"
#include "native-agent/engine/maintenance.h"
#include "native-agent/engine/mcp_calls.h"
#include "native-agent/engine/oauth_callbacks.h"
#include "native-agent/engine/refresh_runner.h"
#include "native-agent/engine/revalidation_consumer.h"
#include "native-agent/engine/triggers.h"
#include "native-agent/store/redis_store.h"
#include "native-agent/store/sqlite_store.h"
#include "native-agent/upstream/probe_report.h"
#include "shared/layout.h"
#include "shared/manifest.h"
#include "shared/sha256.h"

namespace quiver {

namespace {

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

}  // namespace

// ---- the upstream handover (a reload) ----------------------------------------------------------

UpstreamHandover::~UpstreamHandover() {
  for (Entry& e : take()) {
    if (e.connection) e.connection->close();
  }
}

void UpstreamHandover::add(Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(std::move(entry));
}

std::vector<UpstreamHandover::Entry> UpstreamHandover::take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  out.swap(entries_);
  return out;
}

std::size_t UpstreamHandover::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

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

UpstreamSpec upstream_spec_for(const std::string& name, const UpstreamEndpoint& upstream) {
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

// ---- the engine: the parts, wired ---------------------------------------------------------------

struct Agent::Impl {
  AgentContext ctx;
  std::unique_ptr<RefreshRunner> runner;
  std::unique_ptr<Triggers> triggers;
  std::unique_ptr<RevalidationConsumer> revalidations;
  std::unique_ptr<Maintenance> maintenance;
  // Calls through the agent (mcp_calls.h): its own /mcp and the edge's relay.
  std::unique_ptr<McpCalls> calls;
  std::unique_ptr<CallRelayConsumer> call_relay;
  std::vector<std::thread> call_workers;
  std::thread call_heartbeat;
  std::thread call_cancels;  // the cancel poller (CallRelayConsumer::cancel_loop)
  std::thread scheduler;
  std::vector<std::thread> workers;
  // The edge's OAuth callbacks (oauth_callbacks.h), when a connection authorizes with OAuth.
  std::unique_ptr<OAuthCallbackConsumer> oauth_callbacks;
  std::thread oauth_callback_loop;

  // The previous engine's upstream sessions (AgentOptions::upstream_handover): each one this
  // engine would open the same way is adopted into the pool, session and watch kept; the others
  // stay in the handover, which the caller closes. No upstream is contacted here.
  void adopt_upstreams() {
    std::shared_ptr<UpstreamHandover> handover = std::move(ctx.options.upstream_handover);
    ctx.options.upstream_handover.reset();
    if (!handover) return;
    std::size_t kept = 0;
    std::size_t left = 0;
    for (UpstreamHandover::Entry& e : handover->take()) {
      std::string why = not_adoptable(e);
      if (why.empty()) {
        std::optional<UpstreamSpec> expected;
        const ConnectionConfig& cfg = *ctx.config.find_connection(e.connection_id);
        if (cfg.auth != AuthType::kOAuth) {
          // Built as a listing builds it: a changed credential value (same config_hash) or
          // deadline is a different spec, whose session must not be kept.
          Result<UpstreamSpec> spec =
              ctx.spec_for(e.connection->spec().name, cfg, e.principal,
                           steady_ms() + list_timeout_for(cfg, ctx.config.runtime));
          if (spec.ok()) {
            expected = std::move(*spec);
          } else {
            why = spec.error().message;
          }
        }
        if (why.empty()) {
          if (std::optional<std::string> refused =
                  ctx.pool->adopt(e.connection, expected ? &*expected : nullptr)) {
            why = *refused;
          }
        }
      }
      if (why.empty()) {
        runner->note_key(e.connection->spec().name, e.connection_id, e.principal);
        ++kept;
        continue;
      }
      ++left;
      ctx.logger->info(kAgentLog,
                       "the upstream session of " +
                           (e.connection_id.empty() ? e.connection->spec().name
                                                    : ctx.who(e.connection_id, e.principal)) +
                           " is not kept across the reload (" + why +
                           "): it opens again at its next listing");
      handover->add(std::move(e));
    }
    ctx.logger->info(kAgentLog, "kept " + std::to_string(kept) +
                                    " upstream session(s) of the engine before the reload" +
                                    (left > 0 ? "; " + std::to_string(left) + " not kept" : ""));
  }

  // Why a handed-over session cannot serve this engine's (connection, principal), or "".
  std::string not_adoptable(const UpstreamHandover::Entry& e) const {
    if (!e.connection) return "no connection";
    if (e.connection_id.empty()) return "it was opened only for calls";
    const ConnectionConfig* cfg = ctx.config.find_connection(e.connection_id);
    if (cfg == nullptr) return "the connection is no longer configured";
    if (cfg->config_hash != e.config_hash) return "the connection's definition changed";
    if (!check_principal(*cfg, e.principal).ok()) return "the principal is no longer listed";
    if (e.connection->spec().name != AgentContext::pool_name(e.connection_id, e.principal)) {
      return "it was opened under another name";
    }
    if (cfg->auth == AuthType::kOAuth) {
      // The bearer token is the OAuth manager's: the next listing puts the current one (a new
      // token is a new session, as without a reload). The deadlines are the connection's.
      UpstreamSpec d = with_deadlines(UpstreamSpec{}, *cfg, ctx.config.runtime);
      if (d.request_timeout_ms != e.connection->spec().request_timeout_ms ||
          d.startup_timeout_ms != e.connection->spec().startup_timeout_ms) {
        return "the connection's deadlines changed";
      }
    }
    return "";
  }

  // Marks the engine stopped and joins every thread it started (the pool's watcher too); false
  // when it was not running.
  bool stop_threads();

  void scheduler_loop() {
    int64_t next_maintenance = steady_ms();
    int64_t next_store_check = steady_ms() + ctx.config.runtime.store_check_interval_ms;
    while (ctx.is_running()) {
      if (ctx.options.run_maintenance && steady_ms() >= next_store_check) {
        (void)maintenance->check_store_once();
        next_store_check = steady_ms() + ctx.config.runtime.store_check_interval_ms;
      }
      triggers->process();
      if (ctx.options.run_retries) runner->process_retries();
      if (ctx.options.run_maintenance && steady_ms() >= next_maintenance) {
        (void)maintenance->run_once();
        next_maintenance = steady_ms() + ctx.config.runtime.maintenance_interval_ms;
      }
      if (!ctx.wait_running(kSchedulerTickMs)) break;
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
    Result<std::unique_ptr<RedisStore>> r = RedisStore::create(ro);
    if (!r.ok()) return r.error();
    // The layout this agent writes is the one the namespace's record names when it starts: v1
    // without a record (every namespace before key layout v2), v2 once `v2:ready` (a namespace
    // migrated, or created on a cluster as v2). Anything else is written by nobody: the store's
    // layout gate refuses, and the first store check says why. A store that cannot be read now
    // is opened writing v1 and reports itself as it always did: its gate reads the record before
    // its first write, and a store check that finds v2 reloads the engine into it.
    Result<std::optional<std::string>> record = (*r)->read_layout_record();
    if (record.ok() && read_layout(*record) == KeyLayout::kV2) {
      ro.key_layout = KeyLayout::kV2;
      r = RedisStore::create(std::move(ro));
      if (!r.ok()) return r.error();
    }
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
  // The runtime catalog: the file's items seeded, the configuration built from the catalog.
  std::vector<std::string> catalog_lines;
  std::optional<CatalogVersions> catalog_versions;
  std::vector<CatalogEntry> catalog_entries;
  if (options.config_file) {
    Result<CatalogConfig> built = seed_catalog_from_file(
        *store, options.config_file->sources(), config.revision_ms,
        [&catalog_lines](const std::string& line) { catalog_lines.push_back(line); });
    if (!built.ok()) {
      return Error(built.error().code,
                   "the runtime catalog in " + store->describe() + ": " + built.error().message);
    }
    use_catalog_config(std::move(built->config), &config);
    catalog_versions = built->versions;
    catalog_entries = std::move(built->entries);
  }
  auto impl = std::make_unique<Impl>();
  AgentContext& s = impl->ctx;
  s.config = std::move(config);
  s.catalog_versions = catalog_versions;
  s.catalog_entries = std::move(catalog_entries);
  s.store = std::move(store);
  s.options = std::move(options);
  if (!s.config.redactor) {
    std::vector<std::string> values;
    for (const Secret& secret : s.config.secrets()) values.push_back(secret.reveal());
    s.config.redactor = std::make_shared<const Redactor>(values);
  }
  std::shared_ptr<const Redactor> redactor = s.config.redactor;
  s.logger = std::make_unique<Logger>(
      s.options.log_level, s.options.log_sink,
      [redactor](std::string_view text) { return redactor->redact(text); }, s.options.now_ms);
  Result<std::unique_ptr<Tracer>> tracer = Tracer::create(s.options.tracing, s.logger.get());
  if (!tracer.ok()) return tracer.error();
  s.tracer = std::move(*tracer);
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
  // OAuth: one manager (and token store) when a connection has auth oauth; the consumer name
  // holds its refresh locks.
  if (std::any_of(s.config.connections.begin(), s.config.connections.end(),
                  [](const ConnectionConfig& c) { return c.auth == AuthType::kOAuth; })) {
    if (!s.config.oauth.key.has_value()) {
      return Error(ErrorCode::kInvalidArgument,
                   "a connection has auth oauth and quiver.oauth.key is not set");
    }
    TokenStoreOptions to;
    to.path = s.config.oauth.token_store.empty() ? s.config.data_dir + "/oauth-tokens.db"
                                                 : s.config.oauth.token_store;
    to.key = *s.config.oauth.key;
    Result<std::unique_ptr<TokenStore>> tokens = TokenStore::open(to);
    if (!tokens.ok()) return tokens.error();
    s.oauth = std::make_unique<OAuthManager>(s.config, std::move(*tokens), s.consumer);
  }
  impl->runner = std::make_unique<RefreshRunner>(s);
  impl->triggers = std::make_unique<Triggers>(s, *impl->runner);
  impl->revalidations = std::make_unique<RevalidationConsumer>(s, *impl->runner, *impl->triggers);
  impl->calls = std::make_unique<McpCalls>(s, *impl->triggers);
  impl->call_relay = std::make_unique<CallRelayConsumer>(s, *impl->calls);
  impl->maintenance = std::make_unique<Maintenance>(s);
  for (const std::string& line : catalog_lines) {
    if (line.rfind("config file is behind", 0) == 0) {
      s.logger->warn(kAgentLog, line);
    } else {
      s.logger->info(kAgentLog, line);
    }
  }
  // The catalog entries this agent cannot use (skipped here), said once per start.
  for (const std::string& w : s.config.warnings) {
    if (w.rfind("catalog ", 0) == 0) s.logger->warn(kAgentLog, w);
  }
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  if (impl_->ctx.oauth) {
    // A new authorization lists that principal at once; a disconnect drops its manifest.
    Impl* agent = impl_.get();
    OAuthManager::Hooks hooks;
    hooks.connected = [agent](const std::string& cid, const Principal& principal) {
      Result<RefreshReport> r = agent->runner->run(cid, principal, "authorized", std::nullopt);
      if (!r.ok()) {
        agent->ctx.logger->warn(kAgentLog,
                                "listing " + agent->ctx.who(cid, principal) +
                                    " after its authorization failed: " + r.error().message);
      }
    };
    hooks.disconnected = [agent](const std::string& cid, const Principal& principal) {
      agent->ctx.pool->remove(AgentContext::pool_name(cid, principal));
      Result<bool> dropped = agent->ctx.store->drop_manifest(cid, principal);
      if (!dropped.ok()) {
        agent->ctx.log_store_error("dropping the manifest of " + agent->ctx.who(cid, principal),
                                   dropped.error());
      }
      agent->ctx.logger->info(kAgentLog, "disconnected " + agent->ctx.who(cid, principal));
    };
    impl_->ctx.oauth->set_hooks(std::move(hooks));
  }
  Triggers* triggers = impl_->triggers.get();
  impl_->ctx.pool->set_change_callback(
      [triggers](const std::string& name, const UpstreamChange& change) {
        triggers->on_upstream_change(name, change);
      });
}

Agent::~Agent() {
  stop();
  impl_->ctx.pool->stop_watching();
}

Status Agent::start() {
  Impl& impl = *impl_;
  AgentContext& s = impl.ctx;
  if (s.started()) return Status::Ok();
  // A namespace never initialised (or lost) is marked `restoring` first: readers answer 503 until
  // connections, grants and overlays are all in (below).
  if (Status st = s.store->begin_namespace_restore(s.options.now_ms()); !st.ok()) {
    s.logger->error(kAgentLog,
                    "cannot reach the store " + s.store->describe() + ": " + st.error().message);
    return st;
  }
  if (Status st = impl.maintenance->sync_config(); !st.ok()) {
    s.logger->error(kAgentLog, "cannot sync the configuration to " + s.store->describe() + ": " +
                                   st.error().message);
    return st;
  }
  // OAuth tokens of connections no longer configured (or principals no longer granted) go.
  if (s.oauth) {
    std::vector<std::pair<std::string, Principal>> keep;
    for (const ConnectionConfig& c : s.config.connections) {
      if (c.auth != AuthType::kOAuth) continue;
      for (const Principal& p : c.principals()) keep.emplace_back(c.id, p);
    }
    Result<int> gone = s.oauth->tokens().delete_authorizations_except(keep);
    if (!gone.ok()) {
      s.logger->warn(kAgentLog, "OAuth token store: " + gone.error().message);
    } else if (*gone > 0) {
      s.logger->info(kAgentLog, "OAuth token store: " + std::to_string(*gone) +
                                    " authorizations of connections or members no longer "
                                    "configured deleted");
    }
  }
  // Rows of a per-member connection under `shared` can only be from before schema v3, fed by
  // every member's listing: no member may read them (sqlite-migrate-v3.sql).
  for (const ConnectionConfig& c : s.config.connections) {
    if (c.credential_mode != CredentialMode::kPerMember) continue;
    if (Status st = s.prefs->forget(c.id, Principal::shared()); !st.ok()) {
      s.logger->warn(kAgentLog, "preferences of " + c.id + ": " + st.error().message);
    }
  }
  if (Status st = s.prefs->sync_all(); !st.ok()) {
    // The namespace stays `restoring` (readers: 503) until the store check gets them in.
    s.logger->warn(kAgentLog, "preferences not yet merged with the store: " + st.error().message);
  } else if (Result<bool> ready = s.store->mark_namespace_ready(s.options.now_ms());
             !ready.ok() || !*ready) {
    s.logger->warn(kAgentLog, "the namespace record could not be marked ready yet: " +
                                  (ready.ok() ? std::string("it vanished (the store was flushed)")
                                              : ready.error().message));
  } else {
    s.metrics.store_namespace("ready");
  }
  impl.adopt_upstreams();
  s.mark_started();
  if (s.options.watch_upstreams) s.pool->start_watching();
  if (s.options.run_revalidation_workers) {
    int64_t n = std::max<int64_t>(1, s.config.runtime.revalidate_concurrency);
    RevalidationConsumer* consumer = impl.revalidations.get();
    for (int64_t i = 0; i < n; ++i)
      impl.workers.emplace_back([consumer] { consumer->worker_loop(); });
  }
  impl.scheduler = std::thread([&impl] { impl.scheduler_loop(); });
  if (s.options.call_relay_workers > 0 && s.store->relays_calls()) {
    CallRelayConsumer* relay = impl.call_relay.get();
    for (int i = 0; i < s.options.call_relay_workers; ++i) {
      impl.call_workers.emplace_back([relay] { relay->worker_loop(); });
    }
    impl.call_heartbeat = std::thread([relay] { relay->heartbeat_loop(); });
    impl.call_cancels = std::thread([relay] { relay->cancel_loop(); });
  }
  if (s.options.run_revalidation_workers && s.oauth) {
    impl.oauth_callbacks = std::make_unique<OAuthCallbackConsumer>(*this, *s.oauth, *s.logger);
    impl.oauth_callback_loop = std::thread([&impl] {
      AgentContext& c = impl.ctx;
      do {
        (void)impl.oauth_callbacks->pass(c.options.now_ms());
      } while (c.wait_running(kOAuthCallbackPollMs));
    });
  }
  s.logger->info(kAgentLog, "started: " + std::to_string(s.config.connections.size()) +
                                " connections, store " + s.store->describe() + ", consumer " +
                                s.consumer);
  return Status::Ok();
}

void Agent::stop() {
  if (!impl_->stop_threads()) return;
  AgentContext& s = impl_->ctx;
  for (const std::string& name : s.pool->names()) s.pool->remove(name);
  s.logger->info(kAgentLog, "stopped");
}

std::shared_ptr<UpstreamHandover> Agent::stop_handing_over() {
  if (!impl_->stop_threads()) return nullptr;
  AgentContext& s = impl_->ctx;
  auto handover = std::make_shared<UpstreamHandover>();
  for (std::shared_ptr<UpstreamConnection>& conn : s.pool->release_all()) {
    UpstreamHandover::Entry e;
    // A connection no listing of this engine named (opened for calls only) is handed over
    // without a key: the next engine does not adopt it, and it closes with the handover.
    if (std::optional<std::pair<std::string, Principal>> key =
            impl_->runner->key_of(conn->spec().name)) {
      if (const ConnectionConfig* cfg = s.config.find_connection(key->first)) {
        e.connection_id = key->first;
        e.principal = key->second;
        e.config_hash = cfg->config_hash;
      }
    }
    e.connection = std::move(conn);
    handover->add(std::move(e));
  }
  s.logger->info(kAgentLog, "stopped; " + std::to_string(handover->size()) +
                                " upstream session(s) handed to the next engine");
  return handover;
}

bool Agent::Impl::stop_threads() {
  Impl& impl = *this;
  AgentContext& s = impl.ctx;
  if (!s.mark_stopped()) return false;
  if (impl.scheduler.joinable()) impl.scheduler.join();
  if (impl.oauth_callback_loop.joinable()) impl.oauth_callback_loop.join();
  for (std::thread& t : impl.workers) {
    if (t.joinable()) t.join();
  }
  impl.workers.clear();
  if (impl.call_heartbeat.joinable()) impl.call_heartbeat.join();
  if (impl.call_cancels.joinable()) impl.call_cancels.join();
  for (std::thread& t : impl.call_workers) {
    if (t.joinable()) t.join();
  }
  impl.call_workers.clear();
  s.pool->stop_watching();
  return true;
}

const AgentConfig& Agent::config() const { return impl_->ctx.config; }
ManifestStore& Agent::store() { return *impl_->ctx.store; }
Metrics& Agent::metrics() { return impl_->ctx.metrics; }
Tracer* Agent::tracer() { return impl_->ctx.tracer.get(); }
OAuthManager* Agent::oauth() { return impl_->ctx.oauth.get(); }
bool Agent::reload_requested() const { return impl_->ctx.reload_requested.load(); }
std::optional<ListingRecord> Agent::last_listing(const std::string& connection_id,
                                                 const Principal& principal) const {
  return impl_->ctx.listings.find(connection_id, principal);
}
const std::string& Agent::consumer_name() const { return impl_->ctx.consumer; }
const Logger& Agent::logger() const { return *impl_->ctx.logger; }

Result<RelayReply> Agent::call_upstream(const UpstreamCall& call,
                                        const std::function<bool()>& cancelled) {
  return impl_->calls->perform(call, cancelled);
}

Result<RelayReply> Agent::call_upstream(const UpstreamCall& call,
                                        const std::function<bool()>& cancelled,
                                        CallReport* report) {
  return impl_->calls->perform(call, cancelled, report);
}

std::size_t Agent::drain_relayed_calls_once(int64_t block_ms) {
  return impl_->call_relay->drain_once(block_ms);
}

Status Agent::mark_call_agent_alive() { return impl_->call_relay->mark_alive(); }

std::size_t Agent::poll_call_cancel_marks_once() {
  return impl_->call_relay->poll_cancel_marks_once();
}

CallRelayStats Agent::call_relay_stats() const { return impl_->call_relay->stats(); }

Result<RevalidationOutcome> Agent::request_refresh(const std::string& connection_id,
                                                   const Principal& principal,
                                                   const std::string& trigger) {
  return impl_->triggers->request_refresh(connection_id, principal, trigger);
}

Result<WebhookRefreshReply> Agent::apply_webhook(const WebhookVerified& verified,
                                                 const WebhookRefreshRequest& request,
                                                 int64_t now_ms) {
  AgentContext& s = impl_->ctx;
  Result<WebhookRefreshReply> reply =
      s.store->apply_webhook(verified, request, now_ms, s.revalidation_window_ms());
  if (!reply.ok()) return reply;
  for (const WebhookRefreshResult& r : reply->results) {
    // Queued (also behind a lease): the workers take it from the stream. The gate taken by an
    // earlier request: that one may be served by a listing that predates this change.
    if (r.principal && r.status == revalidation_outcome_name(RevalidationOutcome::kAlreadyQueued)) {
      impl_->triggers->follow_up_already_queued(r.connection_id, *r.principal,
                                                ChangeTrigger::kWebhook, now_ms);
    }
  }
  return reply;
}

Result<RefreshReport> Agent::refresh_now(const std::string& connection_id,
                                         const Principal& principal, const std::string& trigger) {
  return impl_->runner->run(connection_id, principal, trigger, std::nullopt);
}

Result<Json> Agent::test_connection(const std::string& connection_id, const Principal& principal) {
  AgentContext& s = impl_->ctx;
  Result<const ConnectionConfig*> found = s.connection(connection_id);
  if (!found.ok()) return found.error();
  if (Status st = check_principal(**found, principal); !st.ok()) return st.error();
  Result<UpstreamSpec> built =
      s.spec_for(AgentContext::pool_name(connection_id, principal) + "#test", **found, principal,
                 steady_ms() + list_timeout_for(**found, s.config.runtime));
  if (!built.ok()) return built.error();
  UpstreamSpec spec = std::move(*built);
  std::string described = spec.describe();
  UpstreamConnection conn(std::move(spec), s.upstream_options());
  ListInfo info;
  Result<Listing> listing =
      conn.list(conn.now_ms() + list_timeout_for(**found, s.config.runtime), {}, &info);
  conn.close();
  if (!listing.ok()) {
    Error e = listing.error();
    e.message = s.config.redact(e.message);
    s.logger->info(kAgentLog, "test of " + s.who(connection_id, principal) +
                                  " failed: " + error_code_name(e.code) + ": " + e.message);
    return e;
  }
  ProbeReportOptions report;
  report.limits.max_bytes = static_cast<std::size_t>(s.config.runtime.max_manifest_bytes);
  report.limits.max_definition_bytes =
      std::min(report.limits.max_definition_bytes, report.limits.max_bytes);
  report.redact = [&s](const std::string& text) { return s.config.redact(text); };
  Result<Json> made = probe_report(described, *listing, info, conn.stats().era, report);
  if (!built.ok()) return built.error();
  (*made)["connection_id"] = connection_id;
  (*made)["principal"] = principal.str();
  return made;
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
  Result<const ConnectionConfig*> found = impl_->ctx.connection(connection_id);
  if (!found.ok()) return found.error();
  if (Status st = check_preference_principal(**found, principal); !st.ok()) return st.error();
  return impl_->ctx.prefs->rows(connection_id, principal);
}

Status Agent::set_preference(const std::string& connection_id, const Principal& principal,
                             CapabilityType type, const std::string& key, bool enabled) {
  AgentContext& s = impl_->ctx;
  Result<const ConnectionConfig*> found = s.connection(connection_id);
  if (!found.ok()) return found.error();
  if (Status st = check_preference_principal(**found, principal); !st.ok()) return st;
  Status st = s.prefs->set_enabled(connection_id, principal, type, key, enabled);
  if (st.ok() || st.error().code == ErrorCode::kStoreUnavailable) {
    s.logger->info(
        kAgentLog,
        std::string("preference ") + capability_type_name(type) + ":" + key + " of " +
            connection_id + " (" + principal.str() + ") set to " +
            (enabled ? "enabled" : "disabled") +
            (st.ok() ? "" : " (not yet merged with the store: " + st.error().message + ")"));
  }
  return st;
}

MaintenanceReport Agent::run_maintenance_once() { return impl_->maintenance->run_once(); }
std::string Agent::check_store_once() { return impl_->maintenance->check_store_once(); }

std::size_t Agent::drain_revalidations_once(int64_t block_ms) {
  return impl_->revalidations->drain_once(block_ms);
}

}  // namespace quiver
