// Decimal integers written by people (command-line values, URL ports, database numbers): one
// strict parser for the tree instead of one per caller. Digits only: no sign, no spaces, no `+`,
// no `0x`; overflow and values above `max` are refused rather than wrapped or clamped. Numbers
// inside protocols have their own grammar (RESP: shared/resp.h, JSON: shared/json.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace quiver {

// The value of `text` when it is 1 to 20 ASCII digits and at most `max`; nullopt otherwise.
inline std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max = UINT64_MAX) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (value > (max - digit) / 10) return std::nullopt;  // value * 10 + digit > max
    value = value * 10 + digit;
  }
  return value;
}

}  // namespace quiver
