// `quiver-agent layout`: the namespace's key layout record (shared/layout.h), what this agent does
// with it, the agent that last marked `call-agents`, and the census of every agent seen with the
// layouts it declares. Read only: it opens the store without starting an agent (no catalog
// seeding, no sync), so it answers in a namespace whose layout this build does not read. The
// move to v2 is `quiver-agent migrate-layout v2` (cmd_migrate_layout.cpp).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/store/redis_store.h"
#include "shared/json.h"
#include "shared/layout.h"

namespace quiver {
namespace {

constexpr char kLayoutUsage[] = R"(usage: quiver-agent layout [--json] [--config FILE]

Prints the key layout record of the configured Redis namespace (quiver:{<ns>}:layout: absent
means layout v1), what this agent does with that layout (it reads v1, also while the record says
`v2:filling` during a migration, and v2 once it says `v2:ready`; it writes the layout the record
named when it started), the agent that last marked `call-agents` (agents consuming relayed calls
mark it every second), and the census: every agent seen in the last minute with the layouts it
declares (an agent older than the layout record declares none: it reads v1 only; one older than
the census is not in it). Read only: `quiver-agent migrate-layout v2` moves a namespace to v2.

options:
  --json           one JSON object instead of text
  --config FILE    the configuration (default: $QUIVER_CONFIG)
  --help           this text

Exit status: 0 printed (whatever the layout), 2 usage or configuration error (or a SQLite store,
which has no layout record), 3 the store is unavailable.
)";

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

int cmd_layout(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args =
      cli_begin("layout", argv, {{"json", false}, {"config", true}}, kLayoutUsage, false, &code);
  if (!args) return code;
  std::optional<AgentConfig> config = load_cli_config("layout", *args, &code);
  if (!config) return code;
  if (!config->redis) {
    return cli_fail("layout",
                    "the store is SQLite (one agent's own file): it has no key layout record",
                    kExitUsage);
  }
  RedisStoreOptions options;
  options.redis = *config->redis;
  options.ns = config->ns;
  options.now_ms = system_clock_ms();
  Result<std::unique_ptr<RedisStore>> store = RedisStore::create(std::move(options));
  if (!store.ok()) return cli_fail("layout", store.error().message, kExitUsage);
  Result<StoreLayout> layout = (*store)->read_layout();
  if (!layout.ok()) {
    return cli_fail("layout", (*store)->describe() + ": " + layout.error().message,
                    store_exit_code(layout.error()));
  }

  Json out = Json::object();
  out["store"] = (*store)->describe();
  out["key"] = layout->key;
  out["record"] = layout->record ? Json(*layout->record) : Json(nullptr);
  const std::optional<KeyLayout> reads = read_layout(layout->record);
  const bool readable = reads.has_value();
  const std::optional<KeyLayout> writes = write_layout(layout->record);
  const std::vector<std::string>& mine = supported_layouts();
  const bool writable =
      writes && std::find(mine.begin(), mine.end(), key_layout_name(*writes)) != mine.end();
  std::string version = kLayoutV1;
  std::string detail = "absent: layout v1";
  if (layout->record) {
    Result<LayoutRecord> parsed = parse_layout_record(*layout->record);
    if (parsed.ok()) {
      version = parsed->version;
      out["version"] = parsed->version;
      out["state"] = parsed->state;
      out["at_ms"] = parsed->at_ms;
      detail = "layout " + parsed->version + ", " + parsed->state + " since " +
               std::to_string(parsed->at_ms) + " (epoch ms)";
    } else {
      version = "";
      out["problem"] = parsed.error().message;
      detail = parsed.error().message;
    }
  }
  if (!version.empty()) out["version"] = version;
  out["readable"] = readable;
  out["writable"] = writable;
  out["this_agent_writes"] = supported_layouts();
  Json agents = Json::array();
  std::string agents_text;
  if (layout->call_agents) {
    Json a = Json::object();
    a["mark"] = *layout->call_agents;
    a["ttl_ms"] = layout->call_agents_ttl_ms;
    Result<CallAgentsMark> mark = parse_call_agents_mark(*layout->call_agents);
    if (mark.ok()) {
      a["consumer"] = mark->consumer;
      a["layouts"] = mark->layouts;
      a["declared"] = mark->declared;
      agents_text = "  " + mark->consumer + "  layouts " + join(mark->layouts) +
                    (mark->declared ? "" : " (declares none: older than the layout record)") +
                    ", mark lives " + std::to_string(layout->call_agents_ttl_ms) + " ms more\n";
    } else {
      a["problem"] = mark.error().message;
      agents_text = "  " + mark.error().message + "\n";
    }
    agents.push_back(std::move(a));
  }
  out["agents_seen"] = std::move(agents);
  Json census = Json::array();
  std::string census_text;
  for (const CensusEntry& e : layout->census) {
    Json a = Json::object();
    a["mark"] = e.value;
    a["seen_at_ms"] = e.seen_ms;
    if (e.problem.empty()) {
      a["consumer"] = e.mark.consumer;
      a["layouts"] = e.mark.layouts;
      census_text += "  " + e.mark.consumer + "  layouts " + join(e.mark.layouts) +
                     ", last seen at " + std::to_string(e.seen_ms) + " (epoch ms)\n";
    } else {
      a["problem"] = e.problem;
      census_text += "  " + e.problem + "\n";
    }
    census.push_back(std::move(a));
  }
  out["census"] = std::move(census);
  out["census_window_ms"] = kAgentCensusWindowMs;

  if (args->has("json")) {
    std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::string text =
      "store: " + (*store)->describe() + "\n" + "layout record " + layout->key + ": " +
      (layout->record ? "`" + *layout->record + "`, " : "") + detail + "\n" +
      "this agent writes layouts " + join(supported_layouts()) + ": " +
      (writable ? "it serves and writes this namespace (once started on this record)"
       : readable && reads == KeyLayout::kV1
           ? "it serves reads of this namespace from v1 and writes none of it while the copy "
             "to v2 runs (migrate-layout; its store check reports the store unavailable)"
       : readable ? "it serves reads of this namespace (in rounds) and writes "
                    "none of it (its store check reports the store unavailable)"
                  : "it neither serves nor writes this namespace (503 "
                    "STORE_UNAVAILABLE; writes refused)") +
      "\n" + "agents seen (the last to mark call-agents, every second while it " +
      "consumes relayed calls):\n" +
      (agents_text.empty() ? "  none marked it within its lifetime\n" : agents_text) +
      "census (every agent seen in the last " + std::to_string(kAgentCensusWindowMs / 1000) +
      " s):\n" + (census_text.empty() ? "  none\n" : census_text);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

}  // namespace quiver
