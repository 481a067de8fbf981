#include "shared/runtime_settings.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace quiver {

const std::vector<RuntimeSetting>& runtime_settings() {
  constexpr unsigned kAgent = kRuntimeAgent;
  constexpr unsigned kEdge = kRuntimeEdge;
  constexpr unsigned kBoth = kRuntimeAgent | kRuntimeEdge;
  static const std::vector<RuntimeSetting> kTable = {
      {"list_timeout_ms", "QUIVER_LIST_TIMEOUT_MS", 3500, 1, 600000, "ms", kAgent},
      {"request_timeout_ms", "QUIVER_REQUEST_TIMEOUT_MS", 3000, 1, 600000, "ms", kAgent},
      {"call_timeout_ms", "QUIVER_CALL_TIMEOUT_MS", 60000, 1, 3600000, "ms", kBoth},
      {"startup_timeout_ms", "QUIVER_STARTUP_TIMEOUT_MS", 30000, 0, 600000, "ms", kAgent},
      {"list_concurrency", "QUIVER_LIST_CONCURRENCY", 5, 1, 1024, "count", kAgent},
      {"fresh_ttl_ms", "QUIVER_FRESH_TTL_MS", 900000, 1, kSettingYearMs, "ms", kBoth},
      {"max_age_ms", "QUIVER_MAX_AGE_MS", 86400000, 1, kSettingYearMs, "ms", kBoth},
      {"refresh_ahead_ratio", "QUIVER_REFRESH_AHEAD_RATIO", 0.8, 0, 1, "ratio", kAgent},
      {"max_manifest_bytes", "QUIVER_MAX_MANIFEST_BYTES", 262144, 1024, 64.0 * 1024 * 1024, "bytes",
       kAgent},
      {"max_listing_bytes", "QUIVER_MAX_LISTING_BYTES", 16777216, 65536, 1024.0 * 1024 * 1024,
       "bytes", kAgent},
      {"maintenance_interval_ms", "QUIVER_MAINTENANCE_INTERVAL_MS", 300000, 1, kSettingDayMs, "ms",
       kAgent},
      {"maintenance_batch", "QUIVER_MAINTENANCE_BATCH", 20, 1, 10000, "count", kAgent},
      {"lease_ms", "QUIVER_LEASE_MS", 60000, 1, kSettingDayMs, "ms", kAgent},
      {"revalidate_concurrency", "QUIVER_REVALIDATE_CONCURRENCY", 3, 1, 1024, "count", kAgent},
      {"revalidate_window_ms", "QUIVER_REVALIDATE_WINDOW_MS", 30000, 1, kSettingDayMs, "ms", kBoth},
      {"store_check_interval_ms", "QUIVER_STORE_CHECK_INTERVAL_MS", 1000, 50, 600000, "ms", kAgent},
      {"min_upstream_ttl_ms", "QUIVER_MIN_UPSTREAM_TTL_MS", 60000, 0, kSettingYearMs, "ms", kBoth},
      {"retry_max_backoff_ms", "QUIVER_RETRY_MAX_BACKOFF_MS", 300000, 1, kSettingDayMs, "ms",
       kAgent},
      {"mcp_search_mode", "QUIVER_MCP_SEARCH_MODE", 0, 0, 1, "count", kBoth},
      // The edge's own (shared/edge_service.h); no `quiver.runtime` field at the agent.
      {"l1_ttl_ms", "QUIVER_L1_TTL_MS", 2000, 0, kSettingDayMs, "ms", kEdge},
      {"l1_stale_if_error_ms", "QUIVER_L1_STALE_IF_ERROR_MS", 60000, 0, kSettingYearMs, "ms",
       kEdge},
      {"l1_max_bytes", "QUIVER_L1_MAX_BYTES", 8388608, 0, 4096.0 * 1024 * 1024, "bytes", kEdge},
      {"l1_validate_max_age_ms", "QUIVER_L1_VALIDATE_MAX_AGE_MS", 30000, 0, kSettingDayMs, "ms",
       kEdge},
      {"redis_fail_fast_ms", "QUIVER_REDIS_FAIL_FAST_MS", 2000, 0, 60000, "ms", kEdge},
      {"mcp_keepalive_ms", "QUIVER_MCP_KEEPALIVE_MS", 1000, 100, 60000, "ms", kEdge},
  };
  return kTable;
}

const RuntimeSetting* find_runtime_setting(std::string_view field) {
  for (const RuntimeSetting& s : runtime_settings()) {
    if (field == s.field) return &s;
  }
  return nullptr;
}

const RuntimeSetting* find_runtime_setting_env(std::string_view env) {
  for (const RuntimeSetting& s : runtime_settings()) {
    if (env == s.env) return &s;
  }
  return nullptr;
}

std::optional<double> parse_runtime_setting_text(std::string_view text, bool allow_fraction) {
  if (text.empty() || text.size() > 24) return std::nullopt;
  bool dot = false;
  bool digits = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && allow_fraction && !dot) {
      dot = true;
    } else {
      return std::nullopt;
    }
  }
  if (!digits) return std::nullopt;
  return std::strtod(std::string(text).c_str(), nullptr);
}

std::string runtime_number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string runtime_setting_bound_problem(const RuntimeSetting& setting, double v) {
  if (setting.is_ratio()) {
    if (!(v > 0 && v <= 1)) return "must be greater than 0 and at most 1";
    return {};
  }
  if (v < setting.min) {
    if (setting.min == 1 && v <= 0) {
      return v == 0 ? "must be greater than 0" : "must not be negative";
    }
    return "must be at least " + runtime_number_text(setting.min);
  }
  if (v > setting.max) return "must be at most " + runtime_number_text(setting.max);
  return {};
}

Result<double> runtime_setting_from_env(const RuntimeSetting& setting, std::string_view text) {
  auto invalid = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, std::string(setting.env) + " " + why);
  };
  if (text.empty()) return invalid("is empty");
  std::optional<double> v = parse_runtime_setting_text(text, setting.is_ratio());
  if (!v) {
    if (text[0] == '-') return invalid("must not be negative");
    return invalid(setting.is_ratio() ? "is not a decimal number" : "is not a whole number");
  }
  std::string problem = runtime_setting_bound_problem(setting, *v);
  if (!problem.empty()) return invalid(problem);
  return *v;
}

}  // namespace quiver
