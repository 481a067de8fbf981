// `quiver-agent refresh`: list connections now and store their manifests (a manual refresh), with
// one progress line per (connection, principal) as each finishes.
//
// It runs its own Agent on the configured store with the background threads off: start() syncs
// the connection records (the fenced commit checks the connection's config_hash against them),
// then each pair is refreshed with the same lease and fenced commit as the running agent uses, so
// a `serve` on the same store is never overwritten by an older listing. At most
// `list_concurrency` listings run at once.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/engine/agent.h"

namespace quiver {
namespace {

constexpr char kRefreshUsage[] =
    R"(usage: quiver-agent refresh (NAME... | --all) [--member M] [--config FILE]

Lists each named connection (a server name from mcpServers, or a connection id) now and stores
its manifest, printing one line per (connection, principal) as it finishes. A shared connection
is listed once; a per-member connection once per granted member, or only for --member M.

options:
  --all            every configured connection
  --member M       per-member connections: only member M's listing
  --config FILE    the configuration (default: $QUIVER_CONFIG)
  --help           this text

Exit status: 0 every listing stored (or under way in another agent), 1 a listing failed or was
refused, 2 usage or configuration error, 3 the store is unavailable.
)";

struct Target {
  const ConnectionConfig* connection;
  Principal principal;
};

std::string describe_report(const RefreshReport& r) {
  std::string line;
  if (r.committed) {
    line = "committed in " + format_duration_ms(r.duration_ms);
    if (!r.etag.empty())
      line += " (etag " + r.etag.substr(0, std::min<std::size_t>(r.etag.size(), 22)) + "…)";
  } else if (r.outcome == "in_progress") {
    line = "in progress in another agent (it holds the lease)";
  } else if (r.outcome == "up_to_date") {
    line = "up to date (a newer listing is already stored)";
  } else if (r.error) {
    line = "failed after " + format_duration_ms(r.duration_ms) + ": " +
           error_code_name(r.error->code) + ": " + r.error->message;
  } else {
    line = r.outcome;
  }
  return line;
}

}  // namespace

int cmd_refresh(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args =
      cli_begin("refresh", argv, {{"all", false}, {"member", true}, {"config", true}},
                kRefreshUsage, true, &code);
  if (!args) return code;
  const bool all = args->has("all");
  if (all == !args->positional.empty()) {
    return cli_usage_error("refresh", all ? "--all and connection names exclude each other"
                                          : "which connection? name one, or pass --all");
  }
  std::optional<AgentConfig> config = load_cli_config("refresh", *args, &code);
  if (!config) return code;

  std::optional<std::string> member = args->value("member");
  if (member) {
    if (Status st = validate_member_id(*member); !st.ok()) {
      return cli_usage_error("refresh", "--member: " + st.error().message);
    }
  }
  std::vector<const ConnectionConfig*> connections;
  if (all) {
    for (const ConnectionConfig& c : config->connections) connections.push_back(&c);
  } else {
    for (const std::string& name : args->positional) {
      const ConnectionConfig* c = find_connection_named(*config, name);
      if (c == nullptr) return cli_usage_error("refresh", "no connection named `" + name + "`");
      if (std::find(connections.begin(), connections.end(), c) == connections.end()) {
        connections.push_back(c);
      }
    }
  }
  std::vector<Target> targets;
  for (const ConnectionConfig* c : connections) {
    if (c->credential_mode == CredentialMode::kPerMember && member) {
      Result<Principal> p = c->principal_for_member(*member);
      if (!p.ok()) {
        if (!all) {
          return cli_usage_error("refresh", "`" + *member + "` is not granted `" + c->name + "`");
        }
        continue;
      }
      targets.push_back({c, *p});
      continue;
    }
    for (const Principal& p : c->principals()) targets.push_back({c, p});
  }
  if (targets.empty()) {
    std::printf("nothing to refresh\n");
    return kExitOk;
  }

  std::unique_ptr<Agent> created = create_cli_agent("refresh", *config, &code);
  if (!created) return code;
  Agent& agent = *created;
  if (Status st = agent.start(); !st.ok()) {
    return cli_fail(
        "refresh",
        "cannot sync the configuration to " + agent.store().describe() + ": " + st.error().message,
        store_exit_code(st.error()));
  }

  std::printf("refreshing %zu listing(s) into %s\n", targets.size(),
              agent.store().describe().c_str());
  std::fflush(stdout);
  std::mutex out_mu;
  std::atomic<std::size_t> next{0};
  std::size_t done = 0, committed = 0, failed = 0;
  bool store_down = false;
  auto work = [&] {
    for (std::size_t i = next++; i < targets.size(); i = next++) {
      const Target& t = targets[i];
      Result<RefreshReport> r = agent.refresh_now(t.connection->id, t.principal, "manual");
      std::lock_guard<std::mutex> lock(out_mu);
      ++done;
      std::string what;
      if (!r.ok()) {
        what = "error: " + std::string(error_code_name(r.error().code)) + ": " + r.error().message;
        ++failed;
        store_down = store_down || store_exit_code(r.error()) == kExitStoreUnavailable;
      } else {
        what = describe_report(*r);
        if (r->committed) {
          ++committed;
        } else if (r->outcome != "in_progress" && r->outcome != "up_to_date") {
          ++failed;
        }
      }
      std::printf("[%zu/%zu] %s (%s): %s\n", done, targets.size(), t.connection->name.c_str(),
                  t.principal.str().c_str(), agent.config().redact(what).c_str());
      std::fflush(stdout);
    }
  };
  const std::size_t threads = std::min<std::size_t>(
      targets.size(),
      static_cast<std::size_t>(std::max<int64_t>(1, config->runtime.list_concurrency)));
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < threads; ++i) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  agent.stop();

  std::printf("%zu committed, %zu failed, %zu in progress elsewhere or up to date\n", committed,
              failed, targets.size() - committed - failed);
  if (store_down) return kExitStoreUnavailable;
  return failed > 0 ? kExitFailed : kExitOk;
}

}  // namespace quiver
