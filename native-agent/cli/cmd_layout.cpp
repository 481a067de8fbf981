// `quiver-agent layout`: the namespace's key layout record (shared/layout.h) and the agent seen
// marking `call-agents` with the layouts it declares. Read only: it opens the store without
// starting an agent (no catalog seeding, no sync), so it answers in a namespace whose layout this
// build does not read. No `migrate-layout` yet: layout v2 does not exist (docs/design.md).
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
means layout v1), whether this agent reads that layout (it reads v1 only), and the agent that
last marked `call-agents` (agents consuming relayed calls mark it every second) with the layouts
it declares (an agent older than the layout record declares none: it reads v1 only). Read only.
There is no migrate-layout yet: layout v2 is planned (docs/design.md, "Key layout v2").

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
  const bool readable = layout_readable(layout->record);
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
  out["this_agent_reads"] = supported_layouts();
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

  if (args->has("json")) {
    std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::string text = "store: " + (*store)->describe() + "\n" + "layout record " + layout->key +
                     ": " + (layout->record ? "`" + *layout->record + "`, " : "") + detail + "\n" +
                     "this agent reads layouts " + join(supported_layouts()) + ": " +
                     (readable ? "it serves and writes this namespace"
                               : "it neither serves nor writes this namespace (503 "
                                 "STORE_UNAVAILABLE; writes refused)") +
                     "\n" + "agents seen (the last to mark call-agents, every second while it " +
                     "consumes relayed calls):\n" +
                     (agents_text.empty() ? "  none marked it within its lifetime\n" : agents_text);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

}  // namespace quiver
