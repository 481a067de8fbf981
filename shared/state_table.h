// A state machine's transitions as one constexpr table, h11 style: a row {from, input, to} per
// legal move, anything else refused. The MCP session (mcp_session.cpp) and the edge request
// (edge_request_state.cpp) keep theirs so.
#pragma once

#include <cstddef>
#include <optional>

namespace quiver {

template <typename State, typename Input>
struct Transition {
  State from;
  Input input;
  State to;
};

// Where `input` takes a machine in `from`; nullopt when the table has no such move.
template <typename State, typename Input, std::size_t N>
constexpr std::optional<State> next_state(const Transition<State, Input> (&table)[N], State from,
                                          Input input) {
  for (const Transition<State, Input>& t : table) {
    if (t.from == from && t.input == input) return t.to;
  }
  return std::nullopt;
}

}  // namespace quiver
