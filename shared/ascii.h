// ASCII helpers, one set for the tree: protocol names (header names, URL schemes, hosts,
// setting names) compare case-insensitively in ASCII only, never by locale, and protocol numbers
// (ports, Content-Length, SSE `retry:`) are plain decimal digits, never `strtoull`'s signs,
// spaces and locale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace quiver {

inline char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

inline bool ascii_iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

inline bool ascii_istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && ascii_iequals(s.substr(0, prefix.size()), prefix);
}

// `text` as an unsigned decimal: one or more ASCII digits (leading zeros allowed), nothing else,
// and at most `max`; nullopt otherwise (overflow included).
inline std::optional<uint64_t> parse_decimal_u64(std::string_view text, uint64_t max = UINT64_MAX) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (value > (max - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

}  // namespace quiver
