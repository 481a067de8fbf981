#include <algorithm>
#include <string>
#include <vector>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/webhook_exchange.h"
#include "shared/webhook_signature.h"

namespace quiver::api {

// Signed with X-Quiver-Signature; no bearer token. The checks and their order are the core's
// (shared/webhook_exchange.h), as at the edge; then the replay guard and the refreshes.
void webhook(ApiContext& api, const httplib::Request& req, httplib::Response& res) {
  WebhookCheck check = check_webhook(core_request(req), api.webhook_secrets, api.agent.config().ns,
                                     api.options.now_ms(),
                                     "webhooks are off: quiver.webhook_secrets names no secret");
  if (auto* refused = std::get_if<WebhookRefusal>(&check)) {
    if (!refused->log.empty()) {
      if (refused->response.status >= 500) {
        api.log("api: " + refused->log);
      } else {
        api.note("api: " + refused->log);  // a refused sender: routine, not a problem here
      }
    }
    return send(refused->response, res);
  }
  const WebhookChecked& checked = std::get<WebhookChecked>(check);
  const WebhookVerified* verified = &checked.verified;
  const WebhookRefreshRequest* parsed = &checked.request;
  if (verified->legacy_v1) api.log(std::string("api: ") + kWebhookV1DeprecatedLog);
  // As the edge's webhook_refresh.lua: a namespace the store lost (or an agent is restoring) is
  // 503, before the replay guard, so the sender's retry of this very request is not a replay.
  if (Status ready = namespace_ready(api.agent.store()); !ready.ok()) {
    api.log("api: webhook: " + ready.error().message);
    return send(webhook_store_failed_response(ready.error()), res);
  }
  Result<bool> first =
      api.agent.store().remember_once(verified->replay_key, verified->retain_for_ms);
  if (!first.ok()) {
    api.log("api: webhook replay guard: " + first.error().message);
    return send(webhook_store_failed_response(first.error()), res);
  }
  if (!*first) return send(webhook_replay_response(), res);
  const AgentConfig& config = api.agent.config();
  std::vector<WebhookRefreshResult> results;
  for (const WebhookRefreshTarget& target : parsed->targets) {
    const ConnectionConfig* conn = config.find_connection(target.connection_id);
    if (conn == nullptr) {
      results.push_back({target.connection_id, std::nullopt, "unknown_connection", false});
      continue;
    }
    std::vector<Principal> principals = conn->principals();
    if (target.principal) {
      bool known =
          std::find(principals.begin(), principals.end(), *target.principal) != principals.end();
      if (!known) {
        results.push_back({target.connection_id, target.principal, "unknown_principal", false});
        continue;
      }
      principals = {*target.principal};
    }
    for (const Principal& p : principals) {
      // Marked stale first: a reader between the two sees `stale`, never a fresh answer
      // that predates the change.
      Result<bool> marked = api.agent.store().invalidate_manifest(conn->id, p);
      Result<RevalidationOutcome> outcome = marked.ok()
                                                ? api.agent.request_refresh(conn->id, p, "webhook")
                                                : Result<RevalidationOutcome>(marked.error());
      if (!outcome.ok()) {
        api.log("api: webhook refresh of " + conn->id + " (" + p.str() +
                "): " + outcome.error().message);
      }
      results.push_back({conn->id, p, outcome.ok() ? revalidation_outcome_name(*outcome) : "error",
                         marked.ok() && *marked});
    }
  }
  api.note("api: webhook accepted (" + std::to_string(parsed->targets.size()) +
           " target(s), reason " + parsed->targets.front().reason + ")");
  send(webhook_accepted_response(results), res);
}

}  // namespace quiver::api
