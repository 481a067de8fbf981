#include <string>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/webhook_exchange.h"

namespace quiver::api {

// Signed with X-Quiver-Signature; no bearer token. The checks and their order are the core's
// (shared/webhook_exchange.h), as at the edge; then the edge's store step (the namespace record,
// the replay guard, the marks and the queued refreshes: AgentService::apply_webhook) and the core's
// answer to it, also as at the edge.
void webhook(ApiContext& api, const httplib::Request& req, httplib::Response& res) {
  const int64_t now_ms = api.options.now_ms();
  WebhookCheck check =
      check_webhook(core_request(req), api.webhook_secrets, api.agent.config().ns, now_ms,
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
  WebhookAnswer answer =
      webhook_answer(api.agent.apply_webhook(checked.verified, checked.request, now_ms),
                     checked.request.targets.front().reason, checked.verified.legacy_v1);
  if (answer.log_info) {
    api.note("api: " + answer.log);
  } else {
    api.log("api: " + answer.log);
  }
  send(answer.response, res);
}

}  // namespace quiver::api
