#include "shared/log_throttle.h"

#include <utility>

namespace quiver {

std::string LogThrottle::admit(std::string line, int64_t now_ms) {
  if (line.empty()) return line;
  auto it = bursts_.find(line);
  if (it == bursts_.end()) {
    if (bursts_.size() >= kMaxLogBursts) bursts_.clear();  // bounded; at worst a repeat
    bursts_.emplace(line, Burst{now_ms, 0});
    return line;
  }
  Burst& burst = it->second;
  if (now_ms - burst.window_start_ms < kStoreLogWindowMs) {
    ++burst.suppressed;
    return std::string();
  }
  const int64_t more = burst.suppressed;
  burst = Burst{now_ms, 0};
  if (more > 0) {
    line += " (and " + std::to_string(more) + " more like it in the last " +
            std::to_string(kStoreLogWindowMs / 1000) + " s)";
  }
  return line;
}

}  // namespace quiver
