// RefreshRunner: carries out one refresh of (connection, principal), and the retries of listings
// that failed.
//
// The decisions are the core's (shared/refresh_plan.h): whether a queued request is already
// answered, what a listing with failed lists stores, what is written and whether the lease is
// renewed first. This file does the I/O around them: the lease, the pooled upstream's listing,
// preference reconciliation, the last good manifest when the plan needs it, the fenced writes,
// and the metrics and log lines of each outcome (every refusal and failure logged, redacted).
//
// A listing that failed, or in which lists failed, is retried by this agent on its own, with
// exponential backoff (retry_backoff_ms, shared/freshness.h), until a complete listing commits:
// process_retries() runs the due ones (the scheduler's tick).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "native-agent/engine/agent_context.h"
#include "native-agent/engine/service.h"
#include "shared/refresh_plan.h"

namespace quiver {

class RefreshRunner {
 public:
  explicit RefreshRunner(AgentContext& ctx) : ctx_(ctx) {}

  // `queued_at_ms`: the request came through the queue then (a newer listing may have answered
  // it); nullopt for a direct refresh.
  Result<RefreshReport> run(const std::string& cid, const Principal& principal,
                            const std::string& trigger, std::optional<int64_t> queued_at_ms);

  // The (connection, principal) a pooled connection name was listed for, if this agent listed it.
  std::optional<std::pair<std::string, Principal>> key_of(const std::string& pool_name);

  // Records that the pooled connection `pool_name` is (cid, principal)'s: a connection adopted
  // from the engine before a reload, whose list_changed must reach key_of before its next listing.
  void note_key(const std::string& pool_name, const std::string& cid, const Principal& principal);

  // Runs the retries that are due (stops early once the agent stops).
  void process_retries();

 private:
  struct Retry {
    std::string connection_id;
    Principal principal = Principal::shared();
    int failures = 0;    // listings in a row that failed or left a list failed
    int64_t due_ms = 0;  // steady
  };

  void schedule_retry(const std::string& name, const std::string& cid, const Principal& principal);
  void settle_retry(const std::string& name);
  std::optional<LastGoodManifest> read_last_good(const std::string& cid,
                                                 const Principal& principal);

  AgentContext& ctx_;
  std::mutex names_mu_;  // pool name -> (connection id, principal)
  std::map<std::string, std::pair<std::string, Principal>> pool_keys_;
  std::mutex retry_mu_;
  std::map<std::string, Retry> retries_;  // by pool name
};

}  // namespace quiver
