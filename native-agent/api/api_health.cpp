#include <optional>
#include <string>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "native-agent/engine/metrics.h"
#include "shared/discovery_http.h"
#include "shared/json.h"
#include "shared/layout.h"

namespace quiver::api {

namespace {

constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

// Without a valid token: only ok / unavailable. Where the store is (a Redis host, user and
// namespace, a SQLite path) and why it fails only to an authenticated caller.
void healthz(ApiContext& api, const httplib::Request& req, httplib::Response& res) {
  const bool details = req.has_header("Authorization") && api.authenticate(req).member_id;
  Status health = api.agent.store().health();
  if (!health.ok()) {
    api.log("api: healthz: " + health.error().message);
    HttpResponse r =
        error_response(HttpErrorCode::kStoreUnavailable,
                       details ? "the cache store is unavailable: " + health.error().message
                               : std::string("the cache store is unavailable"));
    return send(r, res);
  }
  // The namespace record: a store that lost its data (restarted empty, flushed) answers PING
  // but holds nothing to serve until an agent restores it; discovery answers 503 meanwhile.
  Result<NamespaceRecord> ns = api.agent.store().read_namespace();
  if (!ns.ok() || ns->state != NamespaceState::kReady) {
    // A key layout this agent does not read (shared/layout.h) is no restore: it says so.
    const bool layout = !ns.ok() && is_unknown_layout_error(ns.error());
    const std::string state = layout && is_layout_migrating_error(ns.error()) ? "layout_migrating"
                              : layout                                        ? "layout_unknown"
                              : !ns.ok()                                      ? "unknown"
                              : ns->state == NamespaceState::kMissing         ? "namespace_missing"
                                                                              : "restoring";
    if (!ns.ok()) api.log("api: healthz: " + ns.error().message);
    HttpResponse r = error_response(
        HttpErrorCode::kStoreUnavailable,
        state == "layout_migrating"
            ? "the namespace is being copied to key layout v2 (quiver-agent migrate-layout): "
              "discovery is served from v1 meanwhile; writes resume at the switch"
        : layout ? std::string(store_unavailable_message(ns.error()))
        : state == "namespace_missing"
            ? "the store lost this namespace (restarted empty or flushed); an agent is restoring it"
            : "the store's namespace is being restored");
    Result<Json> parsed = parse_json(r.body);
    if (parsed.ok() && parsed->is_object()) {
      (*parsed)["status"] = layout ? "unavailable" : "restoring";
      (*parsed)["store"] = state;
      r.body = json_text(*parsed);
    }
    return send(r, res);
  }
  Json body = Json::object({{"status", "ok"}});
  if (std::optional<int64_t> skew = api.agent.metrics().clock_skew_ms()) {
    body["clock_skew_ms"] = *skew;  // this agent's clock minus the store's
  }
  if (details) body["store"] = api.agent.store().describe();
  send(json_response(200, body), res);
}

void metrics(ApiContext& api, const httplib::Request& req, httplib::Response& res) {
  if (!is_loopback_peer(req.remote_addr)) {
    CallerAuth caller = api.authenticate(req);
    if (!caller.member_id) {
      return send_error(
          res, HttpErrorCode::kUnauthenticated,
          "/metrics needs a bearer token from a non-loopback address: " + caller.failure);
    }
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-store");
  std::string text = api.agent.metrics().prometheus_text();
  text += "# HELP quiver_api_shed_total Connections answered 503 OVERLOADED by the API.\n";
  text += "# TYPE quiver_api_shed_total counter\n";
  text += "quiver_api_shed_total " + std::to_string(api.front ? api.front->shed_count() : 0) + "\n";
  if (api.notifier) {
    text +=
        "# HELP quiver_mcp_notify_digested_total Members read and digested again by the MCP "
        "change notifier.\n";
    text += "# TYPE quiver_mcp_notify_digested_total counter\n";
    text += "quiver_mcp_notify_digested_total " + std::to_string(api.notifier->digested()) + "\n";
    text +=
        "# HELP quiver_mcp_notify_unchanged_total Member polls the store's versions answered "
        "unchanged (no read; key layout v2).\n";
    text += "# TYPE quiver_mcp_notify_unchanged_total counter\n";
    text += "quiver_mcp_notify_unchanged_total " + std::to_string(api.notifier->unchanged()) + "\n";
  }
  text += api.agent.store().metrics_text();
  res.set_content(text, kPrometheusText);
}

}  // namespace quiver::api
