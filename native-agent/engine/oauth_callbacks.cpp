#include "native-agent/engine/oauth_callbacks.h"

#include <string>
#include <utility>

#include "native-agent/base/clock.h"
#include "native-agent/base/logger.h"
#include "native-agent/engine/oauth_manager.h"

namespace quiver {

namespace {

constexpr char kLog[] = "oauth";
// The token endpoint's budget for one callback.
constexpr int64_t kCallbackBudgetMs = 20'000;
constexpr std::size_t kBatch = 100;

// OAuthManager::complete answers kNotFound, and only then, when its token store holds no pending
// authorization for the state.
bool is_unknown_state(const Error& e) { return e.code == ErrorCode::kNotFound; }

}  // namespace

FinishedCallback finish_oauth_callback(AgentService& agent, OAuthManager& oauth,
                                       const oauth::CallbackParams& callback, int64_t deadline_ms) {
  FinishedCallback out;
  Result<AuthorizationDone> done = oauth.complete(callback, deadline_ms);
  if (!done.ok()) {
    out.result.outcome = OAuthCallbackOutcome::kFailed;
    out.result.message = agent.config().redact(done.error().message);
    out.unknown_state = is_unknown_state(done.error());
    return out;
  }
  // The manager's `connected` hook (set by Agent::create) has listed the principal already.
  out.result.outcome = OAuthCallbackOutcome::kConnected;
  const ConnectionConfig* cfg = agent.config().find_connection(done->connection_id);
  out.result.connection = cfg != nullptr ? cfg->name : done->connection_id;
  return out;
}

int OAuthCallbackConsumer::pass(int64_t now_ms) {
  Result<OAuthCallbackBatch> batch = agent_.store().read_oauth_callbacks(after_, kBatch);
  if (!batch.ok()) {
    log_.warn(kLog, "reading the edge's OAuth callbacks: " + batch.error().message);
    return 0;
  }
  const bool first = after_.empty();
  after_ = batch->last_id;
  if (first) return 0;
  int finished = 0;
  for (const OAuthCallbackEntry& e : batch->entries) {
    if (e.params.state.empty() || now_ms - e.at_ms > oauth::kPendingTtlMs) continue;
    FinishedCallback f =
        finish_oauth_callback(agent_, oauth_, e.params, steady_ms() + kCallbackBudgetMs);
    if (f.unknown_state) continue;  // not this agent's (or already used): its holder reports
    ++finished;
    if (f.result.outcome == OAuthCallbackOutcome::kConnected) {
      log_.info(kLog, "the edge's callback " + e.id + " connected " + f.result.connection);
    } else {
      log_.warn(kLog, "the edge's callback " + e.id + " failed: " + f.result.message);
    }
    Status put = agent_.store().put_oauth_result(e.params.state, oauth_result_record(f.result),
                                                 kOAuthResultTtlMs);
    if (!put.ok()) {
      log_.warn(kLog, "the outcome of the edge's callback " + e.id +
                          " was not written: " + put.error().message);
    }
  }
  return finished;
}

}  // namespace quiver
