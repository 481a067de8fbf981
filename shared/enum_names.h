// Enum <-> name, one table per enum: the names of an enum whose values run 0, 1, ... in order,
// looked up both ways. The table replaces the name switch and the parse loop each enum had; the
// fallbacks stay the caller's. A switch's -Wswitch no longer sees a missing name, so each table
// is checked next to it: static_assert(covers_enum(kNames, E::kLast)), one name per value.
// Plain constexpr: no allocation, no exceptions (the core also builds with -fno-exceptions).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace quiver {

// Whether `names` has exactly one name per value 0 .. `last`.
template <typename E, std::size_t N>
constexpr bool covers_enum(const char* const (&)[N], E last) {
  return static_cast<std::size_t>(last) + 1 == N;
}

// The name of `value`; `fallback` for a value outside the table (a cast out of range).
template <typename E, std::size_t N>
constexpr const char* name_of(const char* const (&names)[N], E value, const char* fallback) {
  const auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : fallback;
}

// The value named exactly `text` (case-sensitive), nullopt for any other text: find_value<E>.
template <typename E, std::size_t N>
constexpr std::optional<E> find_value(const char* const (&names)[N], std::string_view text) {
  for (std::size_t i = 0; i < N; ++i) {
    if (text == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

// find_value, with `fallback` for text no name matches.
template <typename E, std::size_t N>
constexpr E value_of(const char* const (&names)[N], std::string_view text, E fallback) {
  const std::optional<E> value = find_value<E>(names, text);
  return value ? *value : fallback;
}

}  // namespace quiver
