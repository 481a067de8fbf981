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

inline char ascii_upper(char c) {
  return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
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

// Whether `host` (lower case, without brackets or port) names the loopback: `localhost`, `::1`,
// or a dotted quad of 127.0.0.0/8 (four decimal parts of at most 255, no leading zeros, as
// inet_pton reads them). "127.0.0.1.nip.io" is a name, not a loopback address.
inline bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  int parts = 0;
  int first = -1;
  std::size_t at = 0;
  for (;;) {
    if (parts == 4) return false;
    std::size_t end = host.find('.', at);
    std::string_view part =
        host.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (part.empty() || part.size() > 3 || (part.size() > 1 && part[0] == '0')) return false;
    int value = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255) return false;
    if (parts++ == 0) first = value;
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return parts == 4 && first == 127;
}

}  // namespace quiver
