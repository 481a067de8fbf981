// Finishing OAuth callbacks: the redirect back from an authorization server, whether it reached
// the agent (GET /v1/oauth/callback, native-agent/api/api_oauth.cpp) or the edge, which queued it
// in Redis (the stream oauth-callbacks, schema/redis-keys.md; shared/oauth_callback.h).
//
// finish_oauth_callback: OAuthManager::complete (whose `connected` hook, set by Agent::create,
// lists the principal's manifest at once) and the outcome as the callback page shows it.
//
// OAuthCallbackConsumer: the agent's reader of the edge's queue, one pass per tick of its loop
// (started with the other loops when a connection authorizes with OAuth). No consumer group:
// every agent reads every entry, from the newest one when it starts. The agent whose token store
// holds the entry's state completes it (TokenStore::take_pending is single-use, also across agents
// sharing the file) and writes the outcome for the edge's page (ManifestStore::put_oauth_result,
// 60 s, no secret). An agent that does not know the state (another agent's, or already used)
// writes nothing: the agent that held it reports. Entries older than the pending authorization's
// lifetime are skipped (their state expired). The embedded SQLite store has no edge: nothing is
// ever read.
#pragma once

#include <cstdint>
#include <string>

#include "native-agent/engine/service.h"
#include "shared/oauth.h"
#include "shared/oauth_callback.h"

namespace quiver {

class Logger;
class OAuthManager;

// How long the outcome of an edge callback stands for its page.
inline constexpr int64_t kOAuthResultTtlMs = 60'000;
// How often an agent looks for new callbacks (a browser waits on the edge's page meanwhile).
inline constexpr int64_t kOAuthCallbackPollMs = 250;

struct FinishedCallback {
  OAuthCallbackResult result;
  // The state named no pending authorization of this agent's token store (unknown, used,
  // expired): the agent that held it, if any, reports.
  bool unknown_state = false;
};

FinishedCallback finish_oauth_callback(AgentService& agent, OAuthManager& oauth,
                                       const oauth::CallbackParams& callback, int64_t deadline_ms);

class OAuthCallbackConsumer {
 public:
  OAuthCallbackConsumer(AgentService& agent, OAuthManager& oauth, const Logger& log)
      : agent_(agent), oauth_(oauth), log_(log) {}

  // Reads what the edge queued since the last pass and finishes each entry; the number finished
  // (whatever their outcome). The first pass only finds where the stream ends.
  int pass(int64_t now_ms);

 private:
  AgentService& agent_;
  OAuthManager& oauth_;
  const Logger& log_;
  std::string after_;  // the last entry seen; "" before the first pass
};

}  // namespace quiver
