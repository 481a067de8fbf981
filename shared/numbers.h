// Decimal integers as protocols and stores write them, one parser for the tree: exactly digits
// (and for the signed form one leading '-'), no spaces, no '+', no overflow, never a locale or
// an exception (std::stoll throws, strtoll skips spaces and saturates).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace quiver {

// "0" .. `max` (at most "18446744073709551615"), leading zeros allowed; nullopt for anything else
// (empty, a sign, a space, a non-digit, a value above `max`, overflow).
inline std::optional<uint64_t> parse_decimal_u64(
    std::string_view s, uint64_t max = std::numeric_limits<uint64_t>::max()) {
  if (s.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(c - '0');
    // value * 10 + digit > max, without overflow (and without max - digit wrapping for max < 9)
    if (digit > max || value > (max - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

// An int64 with an optional leading '-': "-9223372036854775808" .. "9223372036854775807".
inline std::optional<int64_t> parse_decimal_i64(std::string_view s) {
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  std::optional<uint64_t> magnitude = parse_decimal_u64(s);
  if (!magnitude) return std::nullopt;
  constexpr uint64_t kMaxPositive = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (negative) {
    if (*magnitude > kMaxPositive + 1) return std::nullopt;
    return *magnitude == kMaxPositive + 1 ? std::numeric_limits<int64_t>::min()
                                          : -static_cast<int64_t>(*magnitude);
  }
  if (*magnitude > kMaxPositive) return std::nullopt;
  return static_cast<int64_t>(*magnitude);
}

// A parse_decimal_i64 value within [min, max].
inline std::optional<int64_t> parse_decimal_in(std::string_view s, int64_t min, int64_t max) {
  std::optional<int64_t> v = parse_decimal_i64(s);
  if (!v || *v < min || *v > max) return std::nullopt;
  return v;
}

}  // namespace quiver
