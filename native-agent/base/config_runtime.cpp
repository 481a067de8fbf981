// The runtime controls: the agent's rows of the one runtime-settings table
// (shared/runtime_settings.h), read from `quiver.runtime` and the environment, checked against the
// table's bounds and against each other.
#include <algorithm>
#include <map>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"
#include "shared/runtime_settings.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

// The agent's rows of the one runtime-settings table (shared/runtime_settings.h), which the edge
// reads too: the same names, bounds and number syntax at both hosts.
const std::vector<RuntimeControlInfo> kRuntimeControls = [] {
  std::vector<RuntimeControlInfo> rows;
  for (const RuntimeSetting& s : runtime_settings()) {
    if ((s.hosts & kRuntimeAgent) == 0) continue;
    rows.push_back(RuntimeControlInfo{s.field, s.env, s.min, s.max, s.is_ratio()});
  }
  return rows;
}();

FreshnessPolicy RuntimeControls::freshness_policy() const {
  FreshnessPolicy p;
  p.fresh_ttl_ms = fresh_ttl_ms;
  p.max_age_ms = max_age_ms;
  p.refresh_ahead_ratio = refresh_ahead_ratio;
  p.min_upstream_ttl_ms = std::min(min_upstream_ttl_ms, fresh_ttl_ms);
  return p;
}

namespace config_internal {
namespace {

struct Slot {
  int64_t* i = nullptr;
  double* d = nullptr;
};

Slot slot(RuntimeControls& r, std::string_view field) {
  if (field == "list_timeout_ms") return {&r.list_timeout_ms, nullptr};
  if (field == "request_timeout_ms") return {&r.request_timeout_ms, nullptr};
  if (field == "call_timeout_ms") return {&r.call_timeout_ms, nullptr};
  if (field == "startup_timeout_ms") return {&r.startup_timeout_ms, nullptr};
  if (field == "list_concurrency") return {&r.list_concurrency, nullptr};
  if (field == "fresh_ttl_ms") return {&r.fresh_ttl_ms, nullptr};
  if (field == "max_age_ms") return {&r.max_age_ms, nullptr};
  if (field == "refresh_ahead_ratio") return {nullptr, &r.refresh_ahead_ratio};
  if (field == "max_manifest_bytes") return {&r.max_manifest_bytes, nullptr};
  if (field == "max_listing_bytes") return {&r.max_listing_bytes, nullptr};
  if (field == "maintenance_interval_ms") return {&r.maintenance_interval_ms, nullptr};
  if (field == "maintenance_batch") return {&r.maintenance_batch, nullptr};
  if (field == "lease_ms") return {&r.lease_ms, nullptr};
  if (field == "revalidate_concurrency") return {&r.revalidate_concurrency, nullptr};
  if (field == "revalidate_window_ms") return {&r.revalidate_window_ms, nullptr};
  if (field == "store_check_interval_ms") return {&r.store_check_interval_ms, nullptr};
  if (field == "min_upstream_ttl_ms") return {&r.min_upstream_ttl_ms, nullptr};
  if (field == "retry_max_backoff_ms") return {&r.retry_max_backoff_ms, nullptr};
  if (field == "mcp_search_mode") return {&r.mcp_search_mode, nullptr};
  return {};
}

// The bound check shared by the file and the environment (the table's, as the edge checks it);
// empty when the value is fine.
std::string bound_problem(const RuntimeControlInfo& info, double v) {
  const RuntimeSetting* setting = find_runtime_setting(info.field);
  return setting != nullptr ? runtime_setting_bound_problem(*setting, v) : "is not a setting";
}

// Strict decimal for environment values (the table's syntax, as the edge reads them).
std::optional<double> parse_env_number(std::string_view text, bool allow_fraction) {
  return parse_runtime_setting_text(text, allow_fraction);
}

}  // namespace

Json runtime_controls_json(const RuntimeControls& runtime) {
  Json rt = Json::object();
  RuntimeControls copy = runtime;
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    Slot s = slot(copy, info.field);
    rt[info.field] = s.i != nullptr ? Json(*s.i) : Json(*s.d);
  }
  return rt;
}

void Parser::runtime(const Json* quiver) {
  std::map<std::string, std::string> where;  // field -> where its value came from
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    where[info.field] = std::string("runtime.") + info.field + " (default)";
  }
  const Json* rt = quiver != nullptr ? json_field(*quiver, "runtime") : nullptr;
  if (rt != nullptr && !rt->is_object()) {
    p_.error("quiver.runtime", std::string("must be an object, not ") + json_type(*rt));
    rt = nullptr;
  }
  std::vector<std::string> known;
  for (const RuntimeControlInfo& info : kRuntimeControls) known.push_back(info.field);
  if (rt != nullptr) {
    for (const auto& [key, value] : rt->items()) {
      const std::string path = "quiver.runtime." + key;
      auto info = std::find_if(kRuntimeControls.begin(), kRuntimeControls.end(),
                               [&k = key](const RuntimeControlInfo& i) { return k == i.field; });
      if (info == kRuntimeControls.end()) {
        p_.error(path, unknown_key_message(key, known));
        continue;
      }
      if (!value.is_number()) {
        p_.error(path, std::string("must be a number, not ") + json_type(value));
        continue;
      }
      if (!info->is_ratio && !value.is_number_integer()) {
        p_.error(path, "must be a whole number");
        continue;
      }
      const double v = value.is_number_unsigned()  ? static_cast<double>(value.get<uint64_t>())
                       : value.is_number_integer() ? static_cast<double>(value.get<int64_t>())
                                                   : value.get<double>();
      const std::string problem = bound_problem(*info, v);
      if (!problem.empty()) {
        p_.error(path, problem);
        continue;
      }
      Slot s = slot(cfg_.runtime, key);
      if (s.i != nullptr) *s.i = static_cast<int64_t>(v);
      if (s.d != nullptr) *s.d = v;
      where[key] = path;
    }
  }
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    auto it = src_.env.find(info.env);
    if (it == src_.env.end()) continue;
    cfg_.env_overrides.insert(info.env);
    const std::string& text = it->second;
    if (text.empty()) {
      p_.error(info.env, "is empty");
      continue;
    }
    std::optional<double> v = parse_env_number(text, info.is_ratio);
    if (!v.has_value()) {
      if (text[0] == '-') {
        p_.error(info.env, "`" + shown(text) + "` must not be negative");
      } else {
        p_.error(info.env, "`" + shown(text) + "` is not " +
                               (info.is_ratio ? "a decimal number" : "a whole number"));
      }
      continue;
    }
    const std::string problem = bound_problem(info, *v);
    if (!problem.empty()) {
      p_.error(info.env, "`" + shown(text) + "` " + problem);
      continue;
    }
    Slot s = slot(cfg_.runtime, info.field);
    if (s.i != nullptr) *s.i = static_cast<int64_t>(*v);
    if (s.d != nullptr) *s.d = *v;
    where[info.field] = info.env;
  }

  const RuntimeControls& r = cfg_.runtime;
  if (r.max_age_ms < r.fresh_ttl_ms) {
    p_.error(where["max_age_ms"], std::to_string(r.max_age_ms) + " is shorter than the fresh TTL " +
                                      std::to_string(r.fresh_ttl_ms) + " (" +
                                      where["fresh_ttl_ms"] + ")");
  }
  if (r.lease_ms <= r.list_timeout_ms) {
    p_.error(where["lease_ms"],
             std::to_string(r.lease_ms) + " must be longer than the listing deadline " +
                 std::to_string(r.list_timeout_ms) + " (" + where["list_timeout_ms"] +
                 "): a lease that ends mid-listing "
                 "makes every commit fail");
  } else if (r.lease_ms <= r.list_timeout_ms + r.startup_timeout_ms) {
    p_.warn(where["lease_ms"],
            "not longer than the listing deadline plus the start-up budget (" +
                where["startup_timeout_ms"] +
                "): the first listing of a slow-starting server may lose its lease");
  }
  if (r.request_timeout_ms > r.list_timeout_ms) {
    p_.warn(where["request_timeout_ms"],
            "longer than the listing deadline " + std::to_string(r.list_timeout_ms) + " (" +
                where["list_timeout_ms"] + "): each request gets at most that");
  }
  if (r.revalidate_concurrency > r.list_concurrency) {
    p_.warn(where["revalidate_concurrency"],
            "larger than list_concurrency: background revalidation is capped at " +
                std::to_string(r.list_concurrency));
  }
  Status s = validate_freshness_policy(r.freshness_policy());
  if (!s.ok()) p_.error("quiver.runtime", s.error().message);
}

}  // namespace config_internal

}  // namespace quiver
