// `quiver-agent serve`: run the agent — the refresh engine (Agent) and the local HTTP API
// (ApiServer) — until SIGINT or SIGTERM. SIGHUP re-reads the configuration.
//
// On start it prints (stdout) the URL it serves and one `curl` line, with a freshly minted caller
// token, that shows the caller's cached manifests; before printing it, it waits (bounded) for the
// first listing of every connection the caller can see, so that the line shows manifests rather
// than `pending`. Logs go to stderr. The token (valid 24 h by default) is printed only when stdout
// is a terminal, where a person reads it, or with --print-token: under systemd, a container or a
// redirect, stdout is a log (the journal keeps it for anyone with journal access), so the line
// says how to mint a token instead.
//
// Signals are blocked in every thread and taken by the main thread with sigtimedwait: a signal
// never interrupts a worker in the middle of a write, and shutdown runs on an ordinary thread
// (stop accepting, finish requests in flight, stop the engine, close every upstream), exit 0.
//
// The runtime catalog (native-agent/engine/catalog_config.h): the engine seeds the file's members,
// grants and connections into the store by the file rule and runs on the effective configuration
// built from the catalog. When the catalog changes what the engine runs (another agent's newer
// file, the admin API), the engine asks for a reload (Agent::reload_requested, polled every
// second) and it happens as on SIGHUP.
//
// SIGHUP: the configuration file is read again. A file that does not parse, or a store that
// cannot be opened, is refused with the reason on stderr and the running agent keeps going
// untouched. Otherwise the engine restarts in-process on the new configuration: the API stops
// accepting (requests in flight finish), the old engine stops and hands its upstream sessions
// over (Agent::stop_handing_over), the new one starts and adopts each session it would open the
// same way (same connection definition, credential, principal and session settings): those stay
// open and watched, so an upstream's list_changed is heard right after the reload, and nothing is
// opened or listed for them (the cache is kept, so nothing fresh is listed again either). The
// API listens again on the same address; then the sessions no engine adopted are closed (a hung
// upstream's close costs its timeout after serving resumed, not before). If the new engine
// cannot start, the previous configuration is started again; if even that fails, exit 3.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include "native-agent/api/api_server.h"
#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/oauth_manager.h"
#include "shared/discovery.h"

namespace quiver {
namespace {

constexpr char kServeUsage[] =
    R"(usage: quiver-agent serve [--config FILE] [--listen HOST:PORT] [--log-level LEVEL]
                          [--no-wait] [--print-token]

Runs the agent: keeps every configured connection's manifests fresh in the store (Redis when
quiver.redis is set, else SQLite under the data directory) and serves the local HTTP API
(schema/openapi.yaml) on quiver.listen (default 127.0.0.1:8787). It prints the URL and, when
stdout is a terminal, a `curl` line with a caller token that shows your cached manifests (else
how to mint one: a log must not keep a token). SIGINT or SIGTERM stops it cleanly (exit 0). SIGHUP
reloads the configuration file (a bad one is refused and the running one kept).

options:
  --config FILE      the configuration (default: $QUIVER_CONFIG)
  --listen HOST:PORT where the API listens (overrides quiver.listen and $QUIVER_LISTEN; port 0:
                     any free port)
  --log-level LEVEL  debug, info (default), warn or error
  --token-ttl DUR    lifetime of the token in the printed curl line (default 24h)
  --no-wait          print the curl line at once, without waiting for the first listings
  --print-token      print the curl line's token even when stdout is not a terminal
  --help             this text

Exit status: 0 stopped by a signal, 1 the API could not listen, 2 usage or configuration error,
3 the store is unavailable (at start, or for both configurations on a failed reload).
)";

constexpr int64_t kDefaultPrintedTokenTtlMs = 24 * 3'600'000LL;

// Waits up to `timeout_ms` for SIGINT/SIGTERM/SIGHUP (blocked). The signal number, or 0.
int wait_for_signal(const sigset_t& signals, int64_t timeout_ms) {
  timespec ts{static_cast<time_t>(timeout_ms / 1000),
              static_cast<long>((timeout_ms % 1000) * 1000000)};
  int sig = ::sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// The member whose token the printed curl line carries: the default member, else the first
// member with a grant.
std::optional<std::string> curl_member(const AgentConfig& config) {
  if (std::optional<std::string> m = default_member(config)) return m;
  for (const std::string& m : config.members) {
    auto own = config.grants.find(m);
    auto all = config.grants.find("*");
    if ((own != config.grants.end() && !own->second.empty()) ||
        (all != config.grants.end() && !all->second.empty())) {
      return m;
    }
  }
  return std::nullopt;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Waits (bounded, interruptible) until no connection `member` can see is still waiting for its
// first listing. Returns the signal that interrupted it, or 0.
int wait_for_first_listings(Agent& agent, const Principal& member, const sigset_t& signals) {
  const RuntimeControls& rt = agent.config().runtime;
  const int64_t n = static_cast<int64_t>(agent.config().connections.size());
  const int64_t rounds = (n + rt.list_concurrency - 1) / std::max<int64_t>(1, rt.list_concurrency);
  const int64_t budget_ms = std::min<int64_t>(
      (rt.list_timeout_ms + rt.startup_timeout_ms) * std::max<int64_t>(1, rounds) + 5'000, 60'000);
  const int64_t start = system_clock_ms()();
  int64_t last_pending = -1;
  for (;;) {
    SnapshotQuery query;
    query.limit = kMaxSnapshotLimit;
    Result<DiscoverySnapshot> snap = agent.store().read_discovery(member, query);
    if (snap.ok()) {
      const int64_t now = system_clock_ms()();
      RenderedDiscovery r = render_manifests(*snap, rt.freshness_policy(), now);
      int64_t total = static_cast<int64_t>(snap->connections.size());
      int64_t pending = r.stats.pending;
      if (pending == 0) {
        std::printf("quiver-agent: %lld of %lld connection(s) listed (%d fresh, %d with errors)\n",
                    static_cast<long long>(total - r.stats.error), static_cast<long long>(total),
                    r.stats.fresh, r.stats.error);
        std::fflush(stdout);
        return 0;
      }
      if (pending != last_pending) {
        std::printf("quiver-agent: waiting for the first listing of %lld connection(s)...\n",
                    static_cast<long long>(pending));
        std::fflush(stdout);
        last_pending = pending;
      }
    }
    if (system_clock_ms()() - start > budget_ms) {
      std::printf(
          "quiver-agent: still listing; the curl line shows them as `pending` until done\n");
      std::fflush(stdout);
      return 0;
    }
    if (int sig = wait_for_signal(signals, 100)) return sig;
  }
}

// One engine and its API, started together and stopped together.
struct Running {
  std::unique_ptr<Agent> agent;
  std::unique_ptr<ApiServer> server;

  void stop() {
    if (server) server->stop();
    if (agent) agent->stop();
    server.reset();
    agent.reset();
  }
  // stop(), the engine's upstream sessions handed over for the next engine (a reload).
  std::shared_ptr<UpstreamHandover> hand_over() {
    if (server) server->stop();
    std::shared_ptr<UpstreamHandover> handover = agent ? agent->stop_handing_over() : nullptr;
    server.reset();
    agent.reset();
    return handover;
  }
};

struct StartFailure {
  Error error;
  int exit_code = kExitFailed;
};

// Creates (opening the store), starts the engine, then the API. On failure nothing runs.
Result<Running> start_running(const AgentConfig& config,
                              const std::shared_ptr<const ConfigFile>& file, LogLevel level,
                              StartFailure* failure,
                              std::shared_ptr<UpstreamHandover> handover = nullptr) {
  AgentOptions options;
  options.log_level = level;
  options.config_file = file;
  options.upstream_handover = std::move(handover);
  // OpenTelemetry traces, when an OTLP endpoint is set (native-agent/engine/tracer.h).
  Result<TracerOptions> tracing =
      tracer_options_from_env([](const char* name) { return std::getenv(name); });
  if (!tracing.ok()) {
    *failure = {tracing.error(), kExitUsage};
    return tracing.error();
  }
  options.tracing = std::move(*tracing);
  Result<std::unique_ptr<Agent>> created = Agent::create(config, options);
  if (!created.ok()) {
    *failure = {created.error(), store_exit_code(created.error())};
    return created.error();
  }
  Running r;
  r.agent = std::move(*created);
  if (Status st = r.agent->start(); !st.ok()) {
    *failure = {Error(st.error().code, "cannot start: " + st.error().message),
                store_exit_code(st.error())};
    r.stop();
    return failure->error;
  }
  Agent& agent = *r.agent;
  ApiServerOptions api = api_server_options(agent.config());
  api.log = [&agent](const std::string& line) { agent.logger().warn("api", line); };
  api.log_info = [&agent](const std::string& line) { agent.logger().info("api", line); };
  r.server = std::make_unique<ApiServer>(agent, api);
  if (Status st = r.server->start(); !st.ok()) {
    if (st.error().code == ErrorCode::kInvalidArgument) {
      *failure = {Error(st.error().code, "invalid configuration: " + st.error().message),
                  kConfigExitCode};
    } else {
      *failure = {Error(st.error().code,
                        st.error().message + "; choose another with --listen or QUIVER_LISTEN"),
                  kExitFailed};
    }
    r.stop();
    return failure->error;
  }
  if (config.listen.port == 0 && agent.oauth() != nullptr) {
    // Port 0 took any free port: the default OAuth redirect URI names the one it took.
    AgentConfig bound = agent.config();
    bound.set_listen(ListenAddress{config.listen.host, r.server->port()});
    agent.oauth()->set_config(bound);
  }
  return r;
}

// SIGHUP: the file again; the engine restarted on it, or the running one kept (see the top).
// False when neither configuration runs any more.
bool reload(const CliArgs& args, LogLevel level, const char* why, AgentConfig* current,
            std::shared_ptr<const ConfigFile>* current_file, Running* running) {
  std::fprintf(stderr, "quiver-agent: %s, reloading the configuration\n", why);
  int code = kExitOk;
  std::shared_ptr<const ConfigFile> next_file;
  std::optional<AgentConfig> next = load_cli_config("serve", args, &code, &next_file);
  if (!next) {
    std::fprintf(stderr, "quiver-agent: reload refused; the running configuration is kept\n");
    return true;
  }
  if (std::optional<std::string> listen = args.value("listen")) {
    Result<ListenAddress> a = parse_listen_address(*listen);
    if (a.ok()) next->set_listen(*a);
  }
  // Port 0 took any free port at start: keep that one, callers know it.
  // set_listen: the default OAuth redirect URI follows the port too.
  if (next->listen.port == 0 && next->listen.host == current->listen.host) {
    next->set_listen(ListenAddress{next->listen.host, running->server->port()});
  }
  if (current->listen.port == 0 && next->listen.host == current->listen.host) {
    current->set_listen(ListenAddress{current->listen.host, running->server->port()});
  }
  // The sessions the new engine does not adopt are closed when `handover` goes, once it serves.
  std::shared_ptr<UpstreamHandover> handover = running->hand_over();
  StartFailure failure;
  Result<Running> started = start_running(*next, next_file, level, &failure, handover);
  if (started.ok()) {
    *running = std::move(*started);
    *current = std::move(*next);
    *current_file = std::move(next_file);
    std::fprintf(stderr, "quiver-agent: reloaded: %zu connection(s), serving %s\n",
                 current->connections.size(), running->server->base_url().c_str());
    return true;
  }
  std::fprintf(stderr,
               "quiver-agent: the new configuration cannot run (%s); starting the previous "
               "one again\n",
               failure.error.message.c_str());
  Result<Running> previous = start_running(*current, *current_file, level, &failure, handover);
  if (!previous.ok()) {
    std::fprintf(stderr, "quiver-agent: the previous configuration cannot run either: %s\n",
                 failure.error.message.c_str());
    return false;
  }
  *running = std::move(*previous);
  return true;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args = cli_begin("serve", argv,
                                          {{"config", true},
                                           {"listen", true},
                                           {"log-level", true},
                                           {"token-ttl", true},
                                           {"no-wait", false},
                                           {"print-token", false}},
                                          kServeUsage, false, &code);
  if (!args) return code;
  LogLevel level = LogLevel::kInfo;
  if (std::optional<std::string> l = args->value("log-level")) {
    std::optional<LogLevel> parsed = parse_log_level(*l);
    if (!parsed) return cli_usage_error("serve", "--log-level: debug, info, warn or error");
    level = *parsed;
  }
  int64_t token_ttl_ms = kDefaultPrintedTokenTtlMs;
  if (std::optional<std::string> t = args->value("token-ttl")) {
    Result<int64_t> parsed = parse_duration_ms(*t);
    if (!parsed.ok()) return cli_usage_error("serve", "--token-ttl: " + parsed.error().message);
    token_ttl_ms = *parsed;
  }
  std::shared_ptr<const ConfigFile> file;
  std::optional<AgentConfig> config = load_cli_config("serve", *args, &code, &file);
  if (!config) return code;
  if (std::optional<std::string> listen = args->value("listen")) {
    Result<ListenAddress> a = parse_listen_address(*listen);
    if (!a.ok()) return cli_usage_error("serve", "--listen: " + a.error().message);
    config->set_listen(*a);
  }

  // Every thread started from here on inherits the blocked set; the main thread takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  StartFailure failure;
  Result<Running> started = start_running(*config, file, level, &failure);
  if (!started.ok()) return cli_fail("serve", failure.error.message, failure.exit_code);
  Running running = std::move(*started);
  AgentConfig current = *config;
  int sig = 0;
  {  // the first engine only: a reload replaces it
    Agent& agent = *running.agent;
    const std::string url = running.server->base_url();
    std::printf("quiver-agent: serving %s (store %s, %zu connection(s))\n", url.c_str(),
                agent.store().describe().c_str(), agent.config().connections.size());
    std::fflush(stdout);

    std::optional<std::string> member = curl_member(agent.config());
    const bool print_token = args->has("print-token") || ::isatty(STDOUT_FILENO) == 1;
    // Waits (unless --no-wait) for the member's first listings; false when a signal came first.
    auto waited = [&]() {
      Result<Principal> p = Principal::member(*member);
      if (!args->has("no-wait") && p.ok()) sig = wait_for_first_listings(agent, *p, signals);
      return sig == 0;
    };
    if (member && !print_token) {
      if (waited()) {
        std::printf(
            "\nstdout is not a terminal: no caller token is printed (a log would keep it). "
            "Mint one for member `%s` with\n\n  quiver-agent token --member %s\n\n"
            "(or start serve with --print-token). Then: curl -s -H \"Authorization: Bearer "
            "$TOKEN\" %s/v1/manifests\n",
            member->c_str(), member->c_str(), url.c_str());
      }
    } else if (!member) {
      std::printf(
          "quiver-agent: no member is configured (quiver.members, quiver.grants): nobody "
          "can read manifests yet\n");
    } else {
      Result<std::string> token =
          mint_token_from_config(agent.config(), *member, system_clock_ms()(), token_ttl_ms);
      if (!token.ok()) {
        std::printf("quiver-agent: cannot mint a caller token for the curl line: %s\n",
                    token.error().message.c_str());
      } else {
        if (waited()) {
          std::printf(
              "\nThe cached manifests of member `%s` (token valid for %s):\n\n"
              "  curl -s -H %s %s/v1/manifests\n\n"
              "More: %s/v1/mcp-connections, %s/v1/search?q=echo, %s/metrics; another token: "
              "quiver-agent token --member %s. Ctrl-C stops.\n",
              member->c_str(), format_duration_ms(token_ttl_ms).c_str(),
              shell_quote("Authorization: Bearer " + *token).c_str(), url.c_str(), url.c_str(),
              url.c_str(), url.c_str(), member->c_str());
        }
      }
    }
    std::fflush(stdout);
  }

  for (;;) {
    while (sig == 0 && !running.agent->reload_requested()) sig = wait_for_signal(signals, 1000);
    if (sig != 0 && sig != SIGHUP) break;
    const char* why =
        sig == SIGHUP ? "SIGHUP received" : "the runtime catalog changed what this agent runs";
    sig = 0;
    if (!reload(*args, level, why, &current, &file, &running)) {
      return cli_fail("serve", "stopped: no configuration can run", kExitStoreUnavailable);
    }
  }
  std::fprintf(stderr, "quiver-agent: %s received, stopping\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  running.stop();
  std::fprintf(stderr, "quiver-agent: stopped\n");
  return kExitOk;
}

}  // namespace quiver
