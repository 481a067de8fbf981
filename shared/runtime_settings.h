// The runtime settings, one table for both hosts: each setting's name in the agent's
// `quiver.runtime` section, its environment variable, default, bounds, unit and the hosts that
// read it. The agent's config parser (native-agent/base/config_runtime.cpp) and the edge's
// environment parser (shared/edge_service.cpp, edge_settings_from_env) both take the bounds and the
// number syntax from here, so a value is valid for both hosts or for neither. The README's runtime
// table lists exactly these rows (tests/shared/runtime_settings_test.cpp checks it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace quiver {

enum RuntimeHost : unsigned { kRuntimeAgent = 1u, kRuntimeEdge = 2u };

struct RuntimeSetting {
  const char* field;     // "fresh_ttl_ms": quiver.runtime.<field> at the agent
  const char* env;       // "QUIVER_FRESH_TTL_MS": both hosts
  double default_value;  // as the host's settings struct initializes it (tests check)
  double min;            // inclusive (a ratio: exclusive 0)
  double max;            // inclusive
  const char* unit;      // "ms", "bytes", "count", "ratio"
  unsigned hosts;        // RuntimeHost bits
  bool is_ratio() const { return std::string_view(unit) == "ratio"; }
};

inline constexpr double kSettingDayMs = 86400000.0;
inline constexpr double kSettingYearMs = 365 * kSettingDayMs;

const std::vector<RuntimeSetting>& runtime_settings();
const RuntimeSetting* find_runtime_setting(std::string_view field);
const RuntimeSetting* find_runtime_setting_env(std::string_view env);

// A value's text as an environment variable gives it: decimal digits (and one `.` for a ratio),
// nothing else ("", "-1", "1e3", " 5" are refused). nullopt when malformed.
std::optional<double> parse_runtime_setting_text(std::string_view text, bool allow_fraction);

// Why `v` is out of the setting's bounds ("must be at least 50"), or "" when it is within them.
std::string runtime_setting_bound_problem(const RuntimeSetting& setting, double v);

// An environment value checked as both hosts check it: kInvalidArgument "<ENV> ..." (never the
// value itself) when empty, malformed or out of bounds.
Result<double> runtime_setting_from_env(const RuntimeSetting& setting, std::string_view text);

// "1000" for whole numbers, else the shortest %g form.
std::string runtime_number_text(double v);

}  // namespace quiver
