// Helpers for the tests of a state table (shared/state_table.h): the tests check the table's
// properties and the paths through it, rather than a second copy of its rows. `transition` is the
// table's lookup: (state, event) -> the next state, or nullopt when the event is refused.
#pragma once

#include <initializer_list>
#include <optional>
#include <set>
#include <vector>

namespace quiver::testing {

// Every value of an enum whose values run 0 .. count - 1.
template <typename E>
std::vector<E> enum_values(int count) {
  std::vector<E> out;
  for (int v = 0; v < count; ++v) out.push_back(static_cast<E>(v));
  return out;
}

// Where `events` take `start`; nullopt from the first refused event on.
template <typename S, typename E, typename Transition>
std::optional<S> walk_table(Transition transition, S start, std::initializer_list<E> events) {
  std::optional<S> at = start;
  for (E e : events) {
    if (at) at = transition(*at, e);
  }
  return at;
}

// Every state that some sequence of `events` reaches from `start`.
template <typename S, typename E, typename Transition>
std::set<S> reachable_states(Transition transition, S start, const std::vector<E>& events) {
  std::set<S> reached = {start};
  for (bool grew = true; grew;) {
    grew = false;
    for (S from : std::set<S>(reached)) {
      for (E e : events) {
        std::optional<S> to = transition(from, e);
        if (to && reached.insert(*to).second) grew = true;
      }
    }
  }
  return reached;
}

}  // namespace quiver::testing
