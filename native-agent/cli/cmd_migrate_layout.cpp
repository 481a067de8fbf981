// `quiver-agent migrate-layout v2`: moves the configured Redis namespace from key layout v1 to v2
// (docs/design.md "Migration from v1, and the `layout` record"), in place: the census first (no
// agent seen in the last minute may lack v2), then RedisStore::migrate_layout_to_v2 (the record
// to `v2:filling`, a settle pause, the copy, the record to `v2:ready`). Like `layout`, it opens the
// store without starting an agent. The v1 keys stay until `--cleanup-v1` (readers may hold v1
// copies for their L1 TTL and stale-if-error window after the switch).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "native-agent/base/clock.h"
#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/store/redis_store.h"
#include "shared/json.h"
#include "shared/layout.h"

namespace quiver {
namespace {

constexpr char kMigrateUsage[] =
    R"(usage: quiver-agent migrate-layout v2 [--settle DURATION] [--json] [--config FILE]
       quiver-agent migrate-layout --cleanup-v1 [--json] [--config FILE]

Moves the configured Redis namespace from key layout v1 (one hash tag: the whole namespace on one
node) to key layout v2 (spread over a Redis Cluster's masters by connection, member and shard), in
place, in the same Redis or cluster:

  1. the census: every agent seen in the last minute must write v2 (`quiver-agent layout` lists
     them); otherwise nothing is done;
  2. the layout record becomes `v2:filling:<now>`: readers (agents and edges) go on reading v1,
     and every agent stops writing at its next store check (refreshes, webhooks, relayed calls and
     configuration changes wait: they are refused as a store failure and retried);
  3. after --settle (default 5s, more than the agents' store check interval), the namespace is
     copied into its v2 keys (idempotent: a copy cut short is run again by running this again);
  4. the record becomes `v2:ready:<now>`: readers read v2 from their next read, and agents write v2
     once restarted (each picks the layout it writes when it starts).

--cleanup-v1, once the namespace has been v2:ready for longer than the edges' L1 TTL plus their
stale-if-error window, deletes the v1 keys the copy left (the `{<ns>}` records both layouts share
stay).

options:
  --settle DURATION  the pause between `filling` and the copy ("5s", "2000ms")
  --cleanup-v1       delete the v1 keys of a namespace that is v2:ready
  --json             one JSON object instead of text
  --config FILE      the configuration (default: $QUIVER_CONFIG)
  --help             this text

Exit status: 0 done (or already v2), 1 refused (an agent without v2 in the census, a record
someone else moved, a layout it does not know), 2 usage or configuration error (or a SQLite store,
which has no key layout), 3 the store is unavailable.
)";

int fail_with(const char* command, const Error& error) {
  return cli_fail(command, error.message,
                  error.code == ErrorCode::kStoreUnavailable ? kExitStoreUnavailable : kExitFailed);
}

}  // namespace

int cmd_migrate_layout(const std::vector<std::string>& argv) {
  constexpr const char* kCommand = "migrate-layout";
  int code = kExitOk;
  std::optional<CliArgs> args = cli_begin(
      kCommand, argv, {{"json", false}, {"config", true}, {"settle", true}, {"cleanup-v1", false}},
      kMigrateUsage, true, &code);
  if (!args) return code;
  const bool cleanup = args->has("cleanup-v1");
  if (cleanup ? !args->positional.empty()
              : (args->positional.size() != 1 || args->positional[0] != "v2")) {
    return cli_usage_error(
        kCommand, cleanup ? "--cleanup-v1 takes no layout" : "name the layout to move to: v2");
  }
  int64_t settle_ms = 5'000;
  if (std::optional<std::string> s = args->value("settle")) {
    Result<int64_t> ms = parse_duration_ms(*s);
    if (!ms.ok()) return cli_usage_error(kCommand, "--settle: " + ms.error().message);
    settle_ms = *ms;
  }
  std::optional<AgentConfig> config = load_cli_config(kCommand, *args, &code);
  if (!config) return code;
  if (!config->redis) {
    return cli_fail(kCommand, "the store is SQLite (one agent's own file): it has no key layout",
                    kExitUsage);
  }
  RedisStoreOptions options;
  options.redis = *config->redis;
  options.ns = config->ns;
  options.now_ms = system_clock_ms();
  Result<std::unique_ptr<RedisStore>> store = RedisStore::create(std::move(options));
  if (!store.ok()) return cli_fail(kCommand, store.error().message, kExitUsage);
  const bool json = args->has("json");
  Json out = Json::object();
  out["store"] = (*store)->describe();

  if (cleanup) {
    Result<LayoutCleanup> cleaned = (*store)->cleanup_layout_v1();
    if (!cleaned.ok()) return fail_with(kCommand, cleaned.error());
    out["deleted"] = cleaned->deleted;
    out["kept"] = cleaned->kept;
    if (json) {
      std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s: deleted %lld v1 keys, kept %lld keys both layouts share\n",
                  (*store)->describe().c_str(), static_cast<long long>(cleaned->deleted),
                  static_cast<long long>(cleaned->kept));
    }
    return kExitOk;
  }

  // 1. The census: an agent seen within the window that does not write v2 would write v1 keys
  // nobody reads after the switch (or refuse to start on v2).
  Result<StoreLayout> layout = (*store)->read_layout();
  if (!layout.ok()) return fail_with(kCommand, layout.error());
  std::vector<std::string> behind;
  for (const CensusEntry* e : agents_without(layout->census, "v2")) {
    behind.push_back(e->problem.empty() ? e->mark.consumer : e->value);
  }
  if (layout->call_agents) {
    Result<CallAgentsMark> mark = parse_call_agents_mark(*layout->call_agents);
    const bool v2 = mark.ok() && std::find(mark->layouts.begin(), mark->layouts.end(), "v2") !=
                                     mark->layouts.end();
    if (!v2) behind.push_back(mark.ok() ? mark->consumer : *layout->call_agents);
  }
  if (!behind.empty()) {
    std::string names;
    for (const std::string& b : behind) names += (names.empty() ? "" : ", ") + b;
    return cli_fail(kCommand,
                    "refused: agents seen in the last " +
                        std::to_string(kAgentCensusWindowMs / 1000) +
                        " s do not write key layout v2: " + names +
                        " (upgrade them, or wait until they are gone; `quiver-agent layout` "
                        "lists the census); nothing was changed",
                    kExitFailed);
  }

  LayoutMigrationOptions mo;
  mo.settle_ms = settle_ms;
  if (!json) {
    mo.progress = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
  }
  Result<LayoutMigration> done = (*store)->migrate_layout_to_v2(mo);
  if (!done.ok()) return fail_with(kCommand, done.error());
  out["already_v2"] = done->already_v2;
  out["record"] = done->ready_record;
  if (!done->already_v2) {
    out["filling_record"] = done->filling_record;
    out["copy_ms"] = done->copy_ms;
    out["keys_seen"] = done->copy.keys_seen;
    out["keys_restored"] = done->copy.keys_restored;
    out["members_split"] = done->copy.members_split;
    out["grants_converted"] = done->copy.grants_converted;
  }
  if (json) {
    std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  } else if (done->already_v2) {
    std::printf("%s: the namespace is in key layout v2 already (%s): nothing to do\n",
                (*store)->describe().c_str(), done->ready_record.c_str());
  } else {
    std::printf(
        "done: restart the agents so that they write v2; `quiver-agent migrate-layout "
        "--cleanup-v1` once the edges' L1 TTL and stale-if-error window have passed\n");
  }
  return kExitOk;
}

}  // namespace quiver
