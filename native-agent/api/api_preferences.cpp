#include <optional>
#include <string>
#include <vector>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "shared/json.h"
#include "shared/preferences.h"

namespace quiver::api {

namespace {

Json preference_json(const PreferenceRow& row) {
  return Json::object({{"type", capability_type_name(row.capability_type)},
                       {"key", row.capability_key},
                       {"enabled", row.enabled},
                       {"first_seen_at", row.first_seen_at},
                       {"last_seen_at", row.last_seen_at},
                       {"toggled_at", row.toggled_at}});
}

void answer_preferences(ApiContext& api, httplib::Response& res, const std::string& cid,
                        const Principal& principal) {
  Result<std::vector<PreferenceRow>> rows = api.agent.preferences(cid, principal);
  if (!rows.ok()) return api.fail_store(res, rows.error(), "preferences");
  Json list = Json::array();
  for (const PreferenceRow& row : *rows) list.push_back(preference_json(row));
  send(json_response(200, Json::object({{"connection_id", cid},
                                        {"principal", principal.str()},
                                        {"preferences", std::move(list)}})),
       res);
}

}  // namespace

// Preferences are the caller's principal's (conn.principal: `shared` on a shared connection, the
// caller on a per-member one). Another member's rows are never read, so a key only they listed
// answers exactly like a key nobody listed.
void get_preferences(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Principal& member) {
  std::optional<GrantedConnection> conn = api.connection_of(req, res, member, "preferences");
  if (!conn) return;
  const std::string& cid = conn->id;
  answer_preferences(api, res, cid, *conn->principal);
}

// PUT and PATCH: {"type", "key", "enabled"}, or {"changes": [those]} applied in order.
// A shared connection's choices are everyone's: only an operator (ApiContext::is_operator: the
// token's role claim, quiver.operators, or the catalog) may change them; any other granted member
// is refused with 403. On a per-member connection each member changes their own.
void set_preferences(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Caller& caller) {
  std::optional<GrantedConnection> conn = api.connection_of(req, res, caller.member, "preferences");
  if (!conn) return;
  const std::string& cid = conn->id;
  if (conn->principal->is_shared()) {
    Result<bool> allowed = api.is_operator(caller);
    if (!allowed.ok()) return api.fail_store(res, allowed.error(), "operator check");
    if (!*allowed) {
      return send_error(res, HttpErrorCode::kForbidden,
                        "only an operator may change the preferences of a shared connection");
    }
  }
  Result<Json> body = parse_json(req.body, api.options.max_body_bytes);
  if (!body.ok() || !body->is_object()) {
    return send_error(res, HttpErrorCode::kBadRequest,
                      "the body must be a JSON object {\"type\", \"key\", \"enabled\"}");
  }
  std::vector<Json> changes;
  if (const Json* list = json_field(*body, "changes")) {
    if (!list->is_array() || list->empty() || list->size() > 1000) {
      return send_error(res, HttpErrorCode::kBadRequest,
                        "changes must be a list of 1 to 1000 {type, key, enabled} objects");
    }
    changes.assign(list->begin(), list->end());
  } else {
    changes.push_back(*body);
  }
  struct Change {
    CapabilityType type;
    std::string key;
    bool enabled;
  };
  std::vector<Change> parsed;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const Json& c = changes[i];
    std::string at = changes.size() > 1 ? "changes[" + std::to_string(i) + "]." : "";
    std::optional<std::string> type = c.is_object() ? json_string(c, "type") : std::nullopt;
    std::optional<CapabilityType> t = type ? parse_capability_type(*type) : std::nullopt;
    if (!t) {
      return send_error(res, HttpErrorCode::kBadRequest,
                        at + "type must be tool, resource, resource_template or prompt");
    }
    std::optional<std::string> key = json_string(c, "key");
    if (!key || key->empty() || key->size() > kMaxCapabilityKeyBytes) {
      return send_error(res, HttpErrorCode::kBadRequest,
                        at + "key must be a capability's name, uri or uriTemplate");
    }
    std::optional<bool> enabled = json_bool(c, "enabled");
    if (!enabled)
      return send_error(res, HttpErrorCode::kBadRequest, at + "enabled must be a boolean");
    parsed.push_back(Change{*t, *key, *enabled});
  }
  for (const Change& c : parsed) {
    Status st = api.agent.set_preference(cid, *conn->principal, c.type, c.key, c.enabled);
    if (!st.ok()) {
      if (st.error().code == ErrorCode::kNotFound) {
        return send_error(res, HttpErrorCode::kNotFound,
                          std::string("no ") + capability_type_name(c.type) + " `" + c.key +
                              "` has been listed for this connection");
      }
      return api.fail_store(res, st.error(), "set preference");
    }
  }
  answer_preferences(api, res, cid, *conn->principal);
}

}  // namespace quiver::api
