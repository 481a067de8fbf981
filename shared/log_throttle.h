// LogThrottle: repeated identical log lines (one per request during a Redis outage) rate-limited
// per line, so an outage is visible in the log without flooding it. The first line is logged, the
// next ones within the window only counted, and the first one after the window carries the count
// ("and N more like it in the last 10 s"). Time is passed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace quiver {

inline constexpr int64_t kStoreLogWindowMs = 10'000;
inline constexpr std::size_t kMaxLogBursts = 64;

class LogThrottle {
 public:
  // The line to log, or "" when it is suppressed. "" stays "".
  std::string admit(std::string line, int64_t now_ms);

 private:
  struct Burst {
    int64_t window_start_ms = 0;
    int64_t suppressed = 0;
  };
  std::unordered_map<std::string, Burst> bursts_;  // by line; bounded (kMaxLogBursts)
};

}  // namespace quiver
