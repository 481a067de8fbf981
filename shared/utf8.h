// UTF-8 validity, checked strictly (RFC 3629): overlong forms, UTF-16 surrogates and code points
// past U+10FFFF are invalid. Every place in the core that must refuse invalid text (canonical
// JSON, identifiers, search queries, HTTP inputs) asks here.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quiver {

// The offset of the first byte that breaks UTF-8 in `text`, or npos when `text` is valid UTF-8.
std::size_t find_invalid_utf8(std::string_view text);

inline bool is_valid_utf8(std::string_view text) {
  return find_invalid_utf8(text) == std::string_view::npos;
}

// The length of the longest prefix of `text` of at most `max_bytes` that does not split a UTF-8
// sequence (continuation bytes are never left without their lead byte).
inline std::size_t utf8_prefix_length(std::string_view text, std::size_t max_bytes) {
  if (max_bytes >= text.size()) return text.size();
  std::size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

// `text` cut to at most `max_bytes` at a UTF-8 boundary (no ellipsis): the one truncator for
// messages and labels.
inline std::string cut_utf8(std::string_view text, std::size_t max_bytes) {
  return std::string(text.substr(0, utf8_prefix_length(text, max_bytes)));
}

}  // namespace quiver
