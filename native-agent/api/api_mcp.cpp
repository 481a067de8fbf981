// POST /mcp: the MCP endpoint (shared/mcp_endpoint.h) driven against this agent's store. Lists
// are served from the cache exactly as discovery serves them; calls are handed to the relay hook
// (ApiContext::mcp_relay); a listen stream (GET, or 2026-07-28 subscriptions/listen) is kept open
// by the front and fed by the notifier (native-agent/api/mcp_notifier.h).
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "native-agent/api/api_context.h"
#include "native-agent/api/api_handlers.h"
#include "native-agent/api/mcp_notifier.h"
#include "shared/mcp_endpoint.h"

namespace quiver::api {

HttpResponse mcp_endpoint(ApiContext& api, const HttpRequest& request) {
  McpEndpoint endpoint(api.mcp);
  McpStep step = endpoint.start(request, api.authenticate(request.headers), api.options.now_ms());
  for (int guard = 0; guard < 64; ++guard) {
    if (auto* need = std::get_if<NeedSnapshot>(&step)) {
      step =
          endpoint.resume_snapshot(api.snapshot(need->member, need->query), api.options.now_ms());
    } else if (auto* need = std::get_if<NeedRelay>(&step)) {
      std::vector<RelayReply> replies;
      for (const RelayCall& call : need->calls) {
        replies.push_back(api.mcp_relay ? api.mcp_relay(call)
                                        : RelayReply::failed(RelayFailure::kUnavailable,
                                                             kMcpCallsUnavailableMessage));
      }
      step = endpoint.resume_relay(std::move(replies), api.options.now_ms());
    } else {
      Respond& done = std::get<Respond>(step);
      if (done.log) api.log("api: /mcp: " + done.log->message);
      api.count(done.stats);
      api.queue_background(std::move(done.background));
      if (const std::optional<McpListen>& listen = endpoint.listen()) {
        // A listen stream: the front keeps the connection (HttpFront::open_stream) and the
        // notifier writes the member's change notifications to it.
        std::shared_ptr<HttpStream> stream =
            api.notifier ? HttpFront::open_stream(kMcpSseKeepalive, mcp_listen_end_event(*listen))
                         : nullptr;
        if (!stream) {
          return error_response(HttpErrorCode::kInternal, "the event stream could not be opened");
        }
        if (!api.notifier->add(*listen, stream)) {
          api.log("api: /mcp: a listen stream was refused (the agent holds its maximum)");
          stream->close(mcp_listen_end_event(*listen));
        }
      }
      return std::move(done.response);
    }
  }
  api.log("api: /mcp: the MCP endpoint did not finish");
  return error_response(HttpErrorCode::kInternal, "internal error");
}

}  // namespace quiver::api
