// The agent's monotonic clock in milliseconds (deadlines, backoff, idle timers): one helper for
// every file that measures elapsed time. Wall-clock time (freshness, tokens) is passed in as
// `now_ms` instead, never read from here.
#pragma once

#include <chrono>
#include <cstdint>

namespace quiver {

inline int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace quiver
