// `quiver-agent status`: what the store holds for the configuration — each connection and
// principal with its freshness, age, counts and last error, the grants, and the effective
// configuration with every secret shown as `***` and its source.
//
// It reads the store directly (the same one `serve` writes) and changes nothing: no sync, no
// listing. Freshness is classified exactly as readers classify it (shared/freshness.h), against
// the configuration's current config_hash.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/engine/agent.h"
#include "shared/discovery_classification.h"
#include "shared/freshness.h"
#include "shared/json.h"

namespace quiver {
namespace {

constexpr char kStatusUsage[] = R"(usage: quiver-agent status [--json] [--config FILE]

Shows what the store holds for the configuration: every connection and principal with its state
(fresh, stale, expired, missing, error, authorization_required), age, capability counts and last
refresh error; the grants; and the effective configuration (defaults and environment overrides
applied, secrets shown as *** with where they come from). Nothing is changed.

options:
  --json           one JSON object instead of text
  --config FILE    the configuration (default: $QUIVER_CONFIG)
  --help           this text

Exit status: 0 shown, 2 usage or configuration error, 3 the store is unavailable.
)";

// Counts of the lists of a stored manifest (items of each `ok` list), and the lists whose latest
// listing failed: {"prompts": {"state": "failed", "error": {...}}} or a kept last good list
// {"state": "ok", "kept": {...}}. A list that could not be loaded is never counted as 0 items.
struct ListSummary {
  Json counts = Json::object();
  Json failed = Json::object();
};

ListSummary list_summary(const std::string& manifest) {
  ListSummary out;
  Result<Json> m = parse_json(manifest);
  if (!m.ok() || !m->is_object()) return out;
  for (const char* list : {"tools", "resources", "resource_templates", "prompts"}) {
    const Json* l = json_field(*m, list);
    if (l == nullptr) continue;
    if (l->is_array()) {
      out.counts[list] = l->size();
      continue;
    }
    if (!l->is_object()) continue;
    std::optional<std::string> state = json_string(*l, "state");
    const Json* items = json_field(*l, "items");
    if (state == std::optional<std::string>("ok") && items != nullptr && items->is_array()) {
      out.counts[list] = items->size();
    }
    if (state == std::optional<std::string>("failed") || json_field(*l, "kept") != nullptr) {
      Json f = Json::object({{"state", state.value_or("unknown")}});
      for (const char* k : {"error", "partial_items", "kept"}) {
        if (const Json* v = json_field(*l, k)) f[k] = *v;
      }
      out.failed[list] = std::move(f);
    }
  }
  return out;
}

Json principal_status(ManifestStore& store, const ConnectionConfig& c, const Principal& p,
                      const FreshnessPolicy& policy, int64_t now) {
  Json out = Json::object({{"principal", p.str()}});
  Result<std::optional<StoredManifest>> stored = store.read_manifest(c.id, p);
  if (!stored.ok()) {
    out["state"] = "unreadable";
    out["error"] = Json::object(
        {{"code", error_code_name(stored.error().code)}, {"message", stored.error().message}});
    return out;
  }
  std::optional<CacheEntryMeta> entry;
  if (stored->has_value()) entry = cache_entry_meta((*stored)->meta);
  Classification cls = classify(entry, policy, c.config_hash, now);
  out["state"] = freshness_name(cls.state);
  if (cls.state == Freshness::kMiss) {
    out["miss_reason"] = miss_reason_name(cls.miss_reason);
    if (cls.last_refresh_failed) out["state"] = "error";
  }
  if (!stored->has_value()) return out;
  const ManifestMeta& meta = (*stored)->meta;
  if (meta.has_data) {
    // Data always has fetched_at (the store checks it, as the core's reader does).
    const int64_t fetched_at = meta.fetched_at_ms.value_or(0);
    out["fetched_at"] = fetched_at;
    out["age_ms"] = now - fetched_at;
    out["etag"] = meta.etag.value_or("");
    ListSummary lists = list_summary((*stored)->manifest);
    out["counts"] = std::move(lists.counts);
    if (!lists.failed.empty()) out["failed_lists"] = std::move(lists.failed);
    if (meta.truncated) out["truncated"] = true;
  }
  if (!meta.error_code.empty()) {
    out["error"] = Json::object({{"code", meta.error_code},
                                 {"message", meta.error_message},
                                 {"at", meta.error_at_ms.value_or(0)}});
  }
  // As readers classify it (shared/discovery.h): the last refresh failed for want of an OAuth
  // authorization; the last good data, if any, is still there.
  if (cls.last_refresh_failed &&
      meta.error_code == error_code_name(ErrorCode::kAuthorizationRequired)) {
    out["state"] = "authorization_required";
    out["authorize"] = authorize_path(c.id);
  }
  return out;
}

std::string counts_text(const Json& counts) {
  std::string out;
  for (const auto& [name, label] : {std::pair{"tools", "tools"},
                                    {"resources", "resources"},
                                    {"resource_templates", "templates"},
                                    {"prompts", "prompts"}}) {
    const Json* n = json_field(counts, name);
    if (n == nullptr) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(n->get<int64_t>()) + " " + label;
  }
  return out;
}

std::string text_of(const Json& status) {
  auto str = [](const Json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
  auto pad = [](std::string s, std::size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
  };
  const Json& cfg = status["config"];
  std::string out;
  out += "store:      " + str(status["store"]) + " (" + str(status["store_health"]) + ")\n";
  if (status.contains("store_namespace")) {
    out += "store data: namespace " + str(status["store_namespace"]) +
           (str(status["store_namespace"]) == "ready"
                ? std::string()
                : std::string(" (the store lost it; a running agent restores it)")) +
           "\n";
  }
  if (status.contains("clock_skew_ms")) {
    out += "clock skew: " + str(status["clock_skew_ms"]) + " ms (this host minus the store)\n";
  }
  out += "namespace:  " + str(cfg["namespace"]) + "\n";
  out += "listen:     " + str(cfg["listen"]) + "\n";
  out += "data dir:   " + str(cfg["data_dir"]) + "\n";
  out += "\nconnections:\n";
  for (const Json& c : status["connections"]) {
    out += "  " + str(c["name"]) + "  (" + str(c["transport"]) + ", " + str(c["credential_mode"]) +
           ")\n";
    for (const Json& p : c["principals"]) {
      std::string line = str(p["state"]);
      if (const Json* age = json_field(p, "age_ms")) {
        line += ", listed " + format_duration_ms(age->get<int64_t>()) + " ago";
      }
      if (const Json* counts = json_field(p, "counts")) {
        std::string t = counts_text(*counts);
        if (!t.empty()) line += ", " + t;
      }
      if (const Json* failed = json_field(p, "failed_lists")) {
        for (const auto& [list, f] : failed->items()) {
          const Json* kept = json_field(f, "kept");
          const Json* e = kept ? json_field(*kept, "error") : json_field(f, "error");
          line +=
              "\n      " + list +
              (kept ? ": could not be loaded, last good list kept: " : ": could not be loaded: ");
          if (e != nullptr) line += str((*e)["code"]) + ": " + str((*e)["message"]);
          if (const Json* n = json_field(f, "partial_items")) {
            line += " (" + str(*n) + " items arrived before the failure, not shown)";
          }
        }
      }
      if (const Json* e = json_field(p, "error")) {
        line += "\n      last error: " + str((*e)["code"]) + ": " + str((*e)["message"]);
      }
      if (const Json* a = json_field(p, "authorize")) {
        line += "\n      to connect: POST " + str(*a) +
                (str(p["principal"]) == "shared" ? " or quiver-agent login " + str(c["name"])
                                                 : std::string());
      }
      out += "    " + pad(str(p["principal"]), 24) + " " + line + "\n";
    }
  }
  out += "\ngrants:\n";
  if (cfg["grants"].empty()) out += "  (none)\n";
  for (const auto& [member, ids] : cfg["grants"].items()) {
    std::string list;
    for (const Json& id : ids) list += (list.empty() ? "" : ", ") + str(id);
    out += "  " + pad(member, 24) + " " + list + "\n";
  }
  out += "\neffective configuration (secrets hidden):\n" +
         cfg.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  return out;
}

}  // namespace

int cmd_status(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args =
      cli_begin("status", argv, {{"json", false}, {"config", true}}, kStatusUsage, false, &code);
  if (!args) return code;
  std::optional<AgentConfig> config = load_cli_config("status", *args, &code);
  if (!config) return code;

  std::unique_ptr<Agent> created = create_cli_agent("status", *config, &code);
  if (!created) return code;
  Agent& agent = *created;
  ManifestStore& store = agent.store();

  Json status = Json::object();
  status["store"] = store.describe();
  Status health = store.health();
  status["store_health"] = health.ok() ? "ok" : "unavailable: " + health.error().message;
  if (health.ok()) {
    // A store that lost its data answers PING but holds no namespace until an agent restores it.
    Result<NamespaceRecord> ns = store.read_namespace();
    status["store_namespace"] = ns.ok() ? namespace_state_name(ns->state) : "unknown";
    const int64_t before = system_clock_ms()();
    Result<std::optional<int64_t>> theirs = store.store_time_ms();
    const int64_t after = system_clock_ms()();
    if (theirs.ok() && theirs->has_value()) {
      status["clock_skew_ms"] = (before + after) / 2 - **theirs;  // this host minus the store
    }
  }
  status["config"] = config->effective_config_json();
  Json conns = Json::array();
  if (health.ok()) {
    const FreshnessPolicy policy = config->runtime.freshness_policy();
    const int64_t now = system_clock_ms()();
    for (const ConnectionConfig& c : config->connections) {
      Json j = c.summary_json();
      j["config_hash"] = c.config_hash;
      Json principals = Json::array();
      for (const Principal& p : c.principals()) {
        principals.push_back(principal_status(store, c, p, policy, now));
      }
      j["principals"] = std::move(principals);
      conns.push_back(std::move(j));
    }
  }
  status["connections"] = std::move(conns);

  // Error messages recorded in the store are redacted when written; redact again (defence in
  // depth: an older agent may have written them).
  const std::string text = args->has("json")
                               ? status.dump(2, ' ', false, Json::error_handler_t::replace) + "\n"
                               : text_of(status);
  std::fputs(config->redact(text).c_str(), stdout);
  if (!health.ok()) {
    return cli_fail("status", "the store is unavailable: " + health.error().message,
                    kExitStoreUnavailable);
  }
  return kExitOk;
}

}  // namespace quiver
