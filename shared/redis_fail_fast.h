// FailFast: after a Redis timeout, stop waiting on Redis for a while, except for one probe.
#pragma once

#include <cstdint>

namespace quiver {

// The fail-fast window after a Redis timeout (QUIVER_REDIS_FAIL_FAST_MS), one per isolate: a
// stalled Redis would otherwise hold every request for the host's full Redis timeout. Decisions
// only, time passed in.
class FailFast {
 public:
  explicit FailFast(int64_t window_ms = 0) : window_ms_(window_ms) {}
  enum class Admit { kGo = 0, kProbe, kFailFast };
  // A request about to talk to Redis: go (closed), be the one probe, or fail fast.
  Admit admit(uint32_t handle, int64_t now_ms);
  void timed_out(uint32_t handle, int64_t now_ms);  // opens (or extends) the window
  void answered(uint32_t handle);                   // Redis replied: closed
  void ended(uint32_t handle);                      // the request is gone (a probe frees its slot)
  bool open(int64_t now_ms) const { return now_ms < open_until_ms_; }
  int64_t opened_at_ms() const { return opened_at_ms_; }

 private:
  int64_t window_ms_ = 0;
  int64_t open_until_ms_ = 0;
  int64_t opened_at_ms_ = 0;
  uint32_t probe_ = 0;  // the handle probing Redis, 0: none
};

}  // namespace quiver
