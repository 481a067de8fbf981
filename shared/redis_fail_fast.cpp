#include "shared/redis_fail_fast.h"

#include <algorithm>

namespace quiver {

FailFast::Admit FailFast::admit(uint32_t handle, int64_t now_ms) {
  if (!open(now_ms)) return Admit::kGo;
  if (probe_ == 0 || probe_ == handle) {
    probe_ = handle;
    return Admit::kProbe;
  }
  return Admit::kFailFast;
}

void FailFast::timed_out(uint32_t handle, int64_t now_ms) {
  if (probe_ == handle) probe_ = 0;
  if (window_ms_ <= 0) return;
  if (!open(now_ms)) opened_at_ms_ = now_ms;
  open_until_ms_ = std::max(open_until_ms_, now_ms + window_ms_);
}

void FailFast::answered(uint32_t handle) {
  (void)handle;
  open_until_ms_ = 0;
  probe_ = 0;
}

void FailFast::ended(uint32_t handle) {
  if (probe_ == handle) probe_ = 0;
}

}  // namespace quiver
