// UTF-8 validity, checked strictly (RFC 3629): overlong forms, UTF-16 surrogates and code points
// past U+10FFFF are invalid. Every place in the core that must refuse invalid text (canonical
// JSON, identifiers, search queries, HTTP inputs) asks here.
#pragma once

#include <cstddef>
#include <string_view>

namespace quiver {

// The offset of the first byte that breaks UTF-8 in `text`, or npos when `text` is valid UTF-8.
std::size_t find_invalid_utf8(std::string_view text);

inline bool is_valid_utf8(std::string_view text) {
  return find_invalid_utf8(text) == std::string_view::npos;
}

}  // namespace quiver
