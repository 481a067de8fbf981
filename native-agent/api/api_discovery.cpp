#include <optional>
#include <variant>
#include <vector>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/discovery_http.h"

namespace quiver::api {

namespace {

// Drives one DiscoveryExchange to its answer: snapshot reads from the store, enqueues through
// the agent, stats into the metrics, background revalidations onto the background queue. Unless
// `may_wait`, it gives up (nullopt, nothing counted or queued) where it would wait: a snapshot the
// store cannot read at once, or revalidations to queue before the answer.
std::optional<HttpResponse> run_exchange(ApiContext& api, const HttpRequest& request,
                                         bool may_wait) {
  DiscoveryExchange exchange(api.discovery);
  DiscoveryStep step =
      exchange.start(request, api.authenticate(request.headers), api.options.now_ms());
  for (int guard = 0; guard < 8; ++guard) {
    if (auto* need = std::get_if<NeedSnapshot>(&step)) {
      std::optional<Result<DiscoverySnapshot>> snapshot;
      if (may_wait) {
        snapshot.emplace(api.snapshot(need->member, need->query));
      } else {
        snapshot = api.snapshot_now(need->member, need->query);
        if (!snapshot) return std::nullopt;
      }
      step = exchange.resume_snapshot(std::move(*snapshot), api.options.now_ms());
    } else if (auto* need = std::get_if<NeedEnqueue>(&step)) {
      if (!may_wait) return std::nullopt;
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

}  // namespace

HttpResponse discovery_exchange(ApiContext& api, const HttpRequest& request) {
  return *run_exchange(api, request, true);
}

std::optional<HttpResponse> discovery_exchange_now(ApiContext& api, const HttpRequest& request) {
  return run_exchange(api, request, false);
}

}  // namespace quiver::api
