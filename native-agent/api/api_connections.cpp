#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/discovery.h"
#include "shared/json.h"
#include "shared/utf8.h"

namespace quiver::api {

namespace {

// RAII: one of a bounded number of slots (the concurrent connection tests), or none.
class Slot {
 public:
  Slot(std::atomic<int>& in_use, int max) : in_use_(in_use) {
    held_ = in_use_.fetch_add(1) < max;
    if (!held_) in_use_.fetch_sub(1);
  }
  ~Slot() {
    if (held_) in_use_.fetch_sub(1);
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  bool held() const { return held_; }

 private:
  std::atomic<int>& in_use_;
  bool held_ = false;
};

}  // namespace

void list_connections(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Principal& member) {
  QueryParams params = check_params(req, {"after", "limit"});
  if (params.error) return send_error(res, HttpErrorCode::kBadRequest, *params.error);
  SnapshotQuery query;
  query.limit = api.discovery.limits.max_page_size;
  if (const std::string* v = params.find("limit")) {
    std::optional<std::size_t> n =
        parse_count_param(*v, 1, std::min(api.discovery.limits.max_page_size, kMaxSnapshotLimit));
    if (!n) {
      return send_error(
          res, HttpErrorCode::kBadRequest,
          "limit must be between 1 and " + std::to_string(api.discovery.limits.max_page_size));
    }
    query.limit = *n;
  }
  if (const std::string* v = params.find("after")) {
    query.after = *v;
    if (!validate_connection_id(query.after).ok()) {
      return send_error(res, HttpErrorCode::kBadRequest, "after must be a connection id");
    }
  }
  Result<DiscoverySnapshot> snap = api.snapshot(member, query);
  if (!snap.ok()) return api.fail_store(res, snap.error(), "GET /v1/mcp-connections");
  // The same classification the discovery endpoints serve, without the manifests themselves:
  // one batched read, no query per connection.
  ConnectionList list =
      connection_list(*snap, api.discovery.freshness, api.options.now_ms(), api.discovery.render);
  api.count(list.stats);
  send(json_response(200, list.body), res);
  api.queue_background(std::move(list.revalidations));
}

void test_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Principal& member) {
  std::optional<GrantedConnection> conn = api.connection_of(req, res, member, "test");
  if (!conn) return;
  const std::string& cid = conn->id;
  // Each test spawns a child or opens a connection outside the pool and holds a worker for up
  // to the listing deadline: only a few at a time, the rest are told to retry.
  Slot slot(api.tests_running, api.options.max_concurrent_tests);
  if (!slot.held()) return send(overloaded_response(), res);
  Result<Json> probe = api.agent.test_connection(cid, *conn->principal);
  if (!probe.ok()) {
    const Error& e = probe.error();
    if (e.code == ErrorCode::kNotFound) {
      return send_error(res, HttpErrorCode::kNotFound, "no such connection");
    }
    api.log("api: test of " + cid + " (" + conn->principal->str() + ") failed: " + e.message);
    return send_error(
        res, HttpErrorCode::kUpstreamUnavailable,
        std::string(error_code_name(e.code)) + ": " + api.agent.config().redact(e.message));
  }
  Json body = Json::object({{"connection_id", cid},
                            {"principal", conn->principal->str()},
                            {"result", std::move(*probe)}});
  send(json_response(200, body), res);
}

// A caller's evidence that the cached list is out of date: the upstream refused a capability
// the manifest lists (an unknown-tool error), or offered one it does not. The agent refreshes
// the caller's (connection, principal) as a change trigger: followed up until a listing that
// started after the report is stored.
void evidence(ApiContext& api, const httplib::Request& req, httplib::Response& res,
              const Principal& member) {
  std::optional<GrantedConnection> conn = api.connection_of(req, res, member, "evidence");
  if (!conn) return;
  const std::string& cid = conn->id;
  Result<Json> body = parse_json(req.body, api.options.max_body_bytes);
  static const char* kKinds[] = {"unknown_tool", "unknown_resource", "unknown_prompt",
                                 "unlisted_capability"};
  std::optional<std::string> kind = body.ok() ? json_string(*body, "kind") : std::nullopt;
  std::optional<std::string> name = body.ok() ? json_string(*body, "name") : std::nullopt;
  bool known_kind = false;
  for (const char* k : kKinds) known_kind = known_kind || (kind && *kind == k);
  if (!known_kind || !name || name->empty() || name->size() > 2048 || !is_valid_utf8(*name)) {
    return send_error(res, HttpErrorCode::kBadRequest,
                      "the body must be {\"kind\": \"unknown_tool\" | \"unknown_resource\" | "
                      "\"unknown_prompt\" | \"unlisted_capability\", \"name\": \"...\"}");
  }
  Result<RevalidationOutcome> outcome =
      api.agent.request_refresh(cid, *conn->principal, "evidence");
  if (!outcome.ok()) return api.fail_store(res, outcome.error(), "evidence");
  api.log("api: evidence (" + *kind + ") for " + cid + " (" + conn->principal->str() +
          "): refresh " + revalidation_outcome_name(*outcome));
  send(json_response(202, Json::object({{"status", revalidation_outcome_name(*outcome)}})), res);
}

}  // namespace quiver::api
