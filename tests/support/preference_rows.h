// Test helpers for preferences: rows built from overlay members, for a store's merge.
#pragma once

#include <string>
#include <vector>

#include "shared/identity.h"
#include "shared/preferences.h"

namespace quiver::testing {

// One row per `<type>:<key>` member, with `enabled` and `toggled_at` as given (times seen: 1).
inline std::vector<PreferenceRow> preference_rows(const std::string& cid,
                                                  const Principal& principal,
                                                  const std::vector<std::string>& members,
                                                  bool enabled, int64_t toggled_at) {
  std::vector<PreferenceRow> rows;
  for (const std::string& m : members) {
    const std::size_t colon = m.find(':');
    PreferenceRow row{
        cid, *parse_capability_type(m.substr(0, colon)), m.substr(colon + 1), enabled, 1, 1};
    row.toggled_at = toggled_at;
    row.principal = principal;
    rows.push_back(std::move(row));
  }
  return rows;
}

// The rows that make `members` the principal's overlay (toggled at `toggled_at`).
inline std::vector<PreferenceRow> disabled_rows(const std::string& cid, const Principal& principal,
                                                const std::vector<std::string>& members,
                                                int64_t toggled_at = 1) {
  return preference_rows(cid, principal, members, false, toggled_at);
}

}  // namespace quiver::testing
