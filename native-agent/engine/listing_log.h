// ListingLog: this agent's in-memory record of its own listings per (connection, principal):
// whether one is in flight now, and when the last one started and how long it took (the lease,
// the upstream's listing and the fenced write: RefreshRunner::run from its lease on). The status
// page (GET /v1/admin/status) shows it beside what the store says.
//
// Not persisted and not shared: after a restart, or for a listing another agent of the namespace
// made, nothing is known (the status page shows the store's fetched_at and a null duration).
// Bounded: at most kMaxListingRecords keys; past that a key with nothing in flight is forgotten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "shared/identity.h"

namespace quiver {

struct ListingRecord {
  int in_flight = 0;  // listings of this key under way on this agent
  // The last one that ended: when it started (wall clock) and how long it took.
  std::optional<int64_t> last_started_ms;
  std::optional<int64_t> last_duration_ms;
};

class ListingLog {
 public:
  static constexpr std::size_t kMaxListingRecords = 65536;

  // One listing: in flight from construction to destruction.
  class Scope {
   public:
    Scope(ListingLog& log, std::string cid, const Principal& principal, int64_t now_ms);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ListingLog& log_;
    std::pair<std::string, std::string> key_;
    int64_t started_ms_;
    int64_t started_steady_ms_;
  };

  std::optional<ListingRecord> find(const std::string& cid, const Principal& principal) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, ListingRecord> records_;  // (cid, principal)
};

}  // namespace quiver
