#include "native-agent/engine/listing_log.h"

#include "native-agent/base/clock.h"

namespace quiver {

ListingLog::Scope::Scope(ListingLog& log, std::string cid, const Principal& principal,
                         int64_t now_ms)
    : log_(log),
      key_(std::move(cid), principal.str()),
      started_ms_(now_ms),
      started_steady_ms_(steady_ms()) {
  std::lock_guard<std::mutex> lock(log_.mu_);
  if (log_.records_.size() >= kMaxListingRecords && log_.records_.count(key_) == 0) {
    for (auto it = log_.records_.begin(); it != log_.records_.end(); ++it) {
      if (it->second.in_flight == 0) {
        log_.records_.erase(it);
        break;
      }
    }
  }
  ++log_.records_[key_].in_flight;
}

ListingLog::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(log_.mu_);
  ListingRecord& r = log_.records_[key_];
  if (r.in_flight > 0) --r.in_flight;
  r.last_started_ms = started_ms_;
  r.last_duration_ms = steady_ms() - started_steady_ms_;
}

std::optional<ListingRecord> ListingLog::find(const std::string& cid,
                                              const Principal& principal) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find({cid, principal.str()});
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

}  // namespace quiver
