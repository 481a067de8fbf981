// The operators' status page: its three static files (native-agent/api/status/, embedded at build
// time) and the JSON it renders (GET /v1/admin/status), and the Refresh button's endpoint (POST
// /v1/admin/connections/{id}/refresh). schema/openapi.yaml describes the endpoints; the README,
// "The status page", says what the page shows.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "generated_status_page.h"  // the build's embedding of native-agent/api/status/
#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/discovery.h"
#include "shared/json.h"
#include "shared/webhook_exchange.h"

namespace quiver::api {

namespace {

// What one status answer lists at most: members, and principals per connection (a per-member
// connection is listed once per granted member). Beyond, `*_truncated` says so.
constexpr std::size_t kMaxStatusMembers = 500;
constexpr std::size_t kMaxStatusPrincipals = 100;

// The page's own headers: nothing but its own files runs (no inline script, no framing).
void send_static(httplib::Response& res, const char* body, const char* type) {
  res.status = 200;
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_content(body, type);
}

// The principal's entry as GET /v1/mcp-connections shows a connection (shared/discovery.h's
// statuses and classification, one table for every reader), read for an operator: the stored
// manifest of `principal` with every capability counted (no overlay applied), and this agent's
// record of its listings.
Result<Json> principal_status(ApiContext& api, const ConnectionConfig& c,
                              const ConnectionRecord& record, const Principal& principal,
                              const Principal& caller, int64_t now) {
  GrantedConnection g;
  g.id = c.id;
  g.record = record;
  g.principal = principal;
  Result<std::optional<StoredManifest>> stored = api.agent.store().read_manifest(c.id, principal);
  if (!stored.ok()) return stored.error();
  if (stored->has_value()) {
    ManifestEntry entry = (*stored)->meta;
    entry.text = std::move((*stored)->manifest);
    g.manifest = std::move(entry);
  }
  const std::optional<ListingRecord> listed = api.agent.last_listing(c.id, principal);
  const bool in_flight = listed && listed->in_flight > 0;
  g.lease_held = in_flight;
  DiscoverySnapshot snap(principal.is_shared() ? caller : principal);
  snap.connections.push_back(std::move(g));
  ConnectionList list =
      connection_list(snap, api.discovery.freshness, now, api.discovery.render);  // nothing queued
  const Json* entries = json_field(list.body, "connections");
  if (entries == nullptr || !entries->is_array() || entries->empty()) {
    return Error(ErrorCode::kInternal, "the status of " + c.id + " could not be classified");
  }
  Json out = (*entries)[0];
  for (const char* k : {"id", "name", "transport", "credential_mode", "refresh"}) out.erase(k);
  out["refresh_in_flight"] = in_flight;
  // The last listing: this agent's record (its start and duration), else what the store says
  // (the data's fetched_at, or the recorded failure's time; no duration).
  Json last = Json::object({{"at", nullptr}, {"duration_ms", nullptr}, {"source", nullptr}});
  if (listed && listed->last_started_ms) {
    last["at"] = *listed->last_started_ms;
    last["duration_ms"] = listed->last_duration_ms ? Json(*listed->last_duration_ms) : Json();
    last["source"] = "agent";
  } else if (const StoredManifest* m = stored->has_value() ? &**stored : nullptr) {
    const int64_t at = std::max(m->meta.fetched_at_ms.value_or(0), m->meta.error_at_ms.value_or(0));
    if (at > 0) {
      last["at"] = at;
      last["source"] = "store";
    }
  }
  out["last_listing"] = std::move(last);
  Result<std::vector<PreferenceRow>> rows = api.agent.preferences(c.id, principal);
  if (rows.ok()) {
    const auto enabled =
        std::count_if(rows->begin(), rows->end(), [](const PreferenceRow& r) { return r.enabled; });
    out["capabilities"] = Json::object({{"enabled", enabled}, {"total", rows->size()}});
  } else {
    out["capabilities"] = nullptr;
  }
  return out;
}

}  // namespace

void status_page(ApiContext& /*api*/, const httplib::Request& req, httplib::Response& res) {
  if (req.path == "/status.js") {
    return send_static(res, status_files::kScript, "text/javascript; charset=utf-8");
  }
  if (req.path == "/status.css") {
    return send_static(res, status_files::kStyle, "text/css; charset=utf-8");
  }
  send_static(res, status_files::kHtml, "text/html; charset=utf-8");
}

// Every connection of this agent's configuration, each principal it is listed for (at most
// kMaxStatusPrincipals), and the members with their grants (at most kMaxStatusMembers).
void admin_status(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                  const Caller& caller) {
  if (QueryParams q = check_params(req, {}); q.error) {
    return send_error(res, HttpErrorCode::kBadRequest, *q.error);
  }
  const AgentConfig& config = api.agent.config();
  const int64_t now = api.options.now_ms();
  Result<std::vector<ConnectionRecord>> records = api.agent.store().list_connections();
  if (!records.ok()) return api.fail_store(res, records.error(), "GET /v1/admin/status");
  std::map<std::string, const ConnectionRecord*> record_of;
  for (const ConnectionRecord& r : *records) record_of[r.id] = &r;

  Json connections = Json::array();
  for (const ConnectionConfig& c : config.connections) {
    Json conn = c.summary_json();
    conn["auto_enable_new_capabilities"] = c.auto_enable_new_capabilities;
    Json granted = Json::array();
    for (const std::string& m : c.granted_members) {
      if (granted.size() >= kMaxStatusMembers) break;
      granted.push_back(m);
    }
    conn["members"] = std::move(granted);
    conn["members_total"] = c.granted_members.size();
    const std::vector<Principal> principals = c.principals();
    Json shown = Json::array();
    auto rec = record_of.find(c.id);
    for (const Principal& p : principals) {
      if (shown.size() >= kMaxStatusPrincipals) break;
      if (rec == record_of.end()) {
        // Not in the store yet (the agent syncs its records at start and on a reload).
        shown.push_back(Json::object({{"principal", p.str()},
                                      {"status", "pending"},
                                      {"pending_reason", "no_record"},
                                      {"refresh_in_flight", false}}));
        continue;
      }
      Result<Json> entry = principal_status(api, c, *rec->second, p, caller.member, now);
      if (!entry.ok()) return api.fail_store(res, entry.error(), "GET /v1/admin/status");
      shown.push_back(std::move(*entry));
    }
    // A shared connection's capabilities are everyone's: its count is the connection's.
    conn["capabilities_enabled"] = nullptr;
    if (c.credential_mode == CredentialMode::kShared && !shown.empty()) {
      if (const Json* caps = json_field(shown[0], "capabilities"); caps && caps->is_object()) {
        conn["capabilities_enabled"] = (*caps)["enabled"];
      }
    }
    conn["principals"] = std::move(shown);
    conn["principals_total"] = principals.size();
    conn["principals_truncated"] = principals.size() > kMaxStatusPrincipals;
    connections.push_back(std::move(conn));
  }

  Json members = Json::array();
  for (const std::string& m : config.members) {
    if (members.size() >= kMaxStatusMembers) break;
    auto it = config.grants.find(m);
    Json ids = it == config.grants.end() ? Json::array() : Json(it->second);
    members.push_back(Json::object(
        {{"id", m}, {"operator", config.operators.count(m) > 0}, {"connections", std::move(ids)}}));
  }
  Json body = Json::object({{"generated_at", now},
                            {"namespace", config.ns},
                            {"connections", std::move(connections)},
                            {"members", std::move(members)},
                            {"members_total", config.members.size()},
                            {"members_truncated", config.members.size() > kMaxStatusMembers}});
  send(json_response(200, body), res);
}

// The Refresh button: every principal of the connection queued exactly as a refresh webhook
// naming it would (AgentService::apply_webhook: the store's records say which principals, the
// cached manifests read as stale, a request already queued is followed up), answered with the
// webhook's 202 body.
void admin_refresh(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                   const Caller& caller) {
  if (QueryParams q = check_params(req, {}); q.error) {
    return send_error(res, HttpErrorCode::kBadRequest, *q.error);
  }
  const std::string cid = path_segment(req.path, 3);  // /v1/admin/connections/{}/refresh
  if (!validate_connection_id(cid).ok() || api.agent.config().find_connection(cid) == nullptr) {
    return send_error(res, HttpErrorCode::kNotFound, "no such connection");
  }
  const int64_t now = api.options.now_ms();
  static std::atomic<uint64_t> sequence{0};
  WebhookVerified verified;
  // Not a signed delivery: the replay guard gets a key of its own that no delivery can have.
  verified.replay_key = "operator:" + caller.id() + ":" + cid + ":" + std::to_string(now) + ":" +
                        std::to_string(++sequence);
  verified.retain_for_ms = 1;
  WebhookRefreshRequest request;
  request.targets.push_back(WebhookRefreshTarget{cid, std::nullopt, "operator"});
  WebhookAnswer answer =
      webhook_answer(api.agent.apply_webhook(verified, request, now), "operator", false);
  api.note("api: refresh of " + cid + " by operator " + caller.id() + ": " + answer.log);
  send(answer.response, res);
}

}  // namespace quiver::api
