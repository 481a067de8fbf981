#include <variant>
#include <vector>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/discovery_http.h"

namespace quiver::api {

// Drives one DiscoveryExchange to its answer: snapshot reads from the store, enqueues through
// the agent, stats into the metrics, background revalidations onto the background queue.
HttpResponse discovery_exchange(ApiContext& api, const HttpRequest& request) {
  DiscoveryExchange exchange(api.discovery);
  DiscoveryStep step =
      exchange.start(request, api.authenticate(request.headers), api.options.now_ms());
  for (int guard = 0; guard < 8; ++guard) {
    if (auto* need = std::get_if<NeedSnapshot>(&step)) {
      step =
          exchange.resume_snapshot(api.snapshot(need->member, need->query), api.options.now_ms());
    } else if (auto* need = std::get_if<NeedEnqueue>(&step)) {
      std::vector<Result<RevalidationResult>> results;
      for (const Revalidation& r : need->revalidations) results.push_back(api.enqueue(r));
      step = exchange.resume_enqueue(results, api.options.now_ms());
    } else {
      Respond& done = std::get<Respond>(step);
      if (done.log) api.log("api: " + request.path + ": " + done.log->message);
      api.count(done.stats);
      api.queue_background(std::move(done.background));
      return std::move(done.response);
    }
  }
  api.log("api: " + request.path + ": the discovery exchange did not finish");
  return error_response(HttpErrorCode::kInternal, "internal error");
}

}  // namespace quiver::api
