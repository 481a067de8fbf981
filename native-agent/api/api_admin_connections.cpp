// The admin API's connections: GET /v1/admin/connections, GET / PUT / PATCH / DELETE
// /v1/admin/connections/{id}. A definition is the catalog's connection value
// ({"name", "server", "settings"}: native-agent/store/catalog.h), checked by
// validate_catalog_value: secrets are references only, a literal is refused and never stored.
// Agents pick a change up through the catalog version (their effective configuration); the
// readers' grant sets change here at once when the connection comes, goes, or is disabled or
// enabled (every member published again: O(members)).
#include <mutex>
#include <string>
#include <utility>

#include "native-agent/api/api_admin.h"
#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "native-agent/engine/catalog_config.h"

namespace quiver::api {

namespace {

bool disabled_of(const Json& value) {
  const Json* server = json_field(value, "server");
  return server != nullptr && json_bool(*server, "disabled").value_or(false);
}

Json connection_json(const CatalogEntry& e) {
  Json out = Json::object();
  out["id"] = e.key;
  for (const char* field : {"name", "server", "settings"}) {
    if (const Json* v = json_field(*e.value, field)) out[field] = *v;
  }
  out["disabled"] = disabled_of(*e.value);
  add_meta(out, e.meta);
  return out;
}

// Writes the connection (value nullopt: removes it), then, when whether it is live changed,
// publishes every member's grants again. Answers the request.
void write_connection(ApiContext& api, httplib::Response& res, const Caller& caller,
                      const std::string& id, const std::optional<CatalogEntry>& before,
                      std::optional<Json> value, const std::string& action, Json detail,
                      int status) {
  const bool live_before = before && !disabled_of(*before->value);
  const bool live_after = value && !disabled_of(*value);
  Result<CatalogEntry> written = admin_write(api, caller, CatalogKind::kConnection, id,
                                             std::move(value), action, std::move(detail));
  if (!written.ok()) return api.fail_store(res, written.error(), "admin connection");
  if (live_before != live_after) {
    Result<std::size_t> published = publish_all_member_grants(api);
    if (!published.ok()) return api.fail_store(res, published.error(), "admin connection");
  }
  if (!written->value) {
    return send(json_response(200, Json::object({{"id", id}, {"deleted", true}})), res);
  }
  send(json_response(status, connection_json(*written)), res);
}

}  // namespace

void admin_list_connections(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                            const Caller&) {
  std::optional<AdminPage> page = admin_page(req, res);
  if (!page) return;
  Result<CatalogPage> entries =
      api.agent.store().catalog_list(CatalogKind::kConnection, page->cursor, page->limit);
  if (!entries.ok()) return api.fail_store(res, entries.error(), "admin connections");
  Json list = Json::array();
  for (const CatalogEntry& e : entries->entries) {
    if (e.value) list.push_back(connection_json(e));  // a removed one: the page may be shorter
  }
  Json out = Json::object({{"connections", std::move(list)}});
  if (!entries->next_cursor.empty()) out["next_cursor"] = entries->next_cursor;
  send(json_response(200, out), res);
}

void admin_get_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                          const Caller&) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kConnection);
  if (!id || !admin_no_params(req, res)) return;
  std::optional<CatalogEntry> entry = admin_existing(api, res, CatalogKind::kConnection, *id);
  if (entry) send(json_response(200, connection_json(*entry)), res);
}

// PUT {"name", "server", "settings"}: the whole definition (name defaults to the id, settings to
// {}). 201 when new.
void admin_put_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                          const Caller& caller) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kConnection);
  if (!id) return;
  std::optional<Json> body = admin_body(api, req, res, {"name", "server", "settings"});
  if (!body) return;
  Json value = std::move(*body);
  if (!value.contains("name")) value["name"] = *id;
  if (!value.contains("settings")) value["settings"] = Json::object();
  if (Status valid = validate_catalog_value(CatalogKind::kConnection, *id, value); !valid.ok()) {
    return send_error(res, HttpErrorCode::kBadRequest, valid.error().message);
  }
  std::lock_guard<std::mutex> lock(api.admin_mu);
  Result<std::optional<CatalogEntry>> before = admin_live(api, CatalogKind::kConnection, *id);
  if (!before.ok()) return api.fail_store(res, before.error(), "admin connection");
  Json detail = Json::object({{"name", value["name"]}, {"created", !*before}});
  write_connection(api, res, caller, *id, *before, std::move(value), "connection.put",
                   std::move(detail), *before ? 200 : 201);
}

// PATCH {"disabled": bool}: sets server.disabled (a disabled connection is granted to nobody and
// listed by no agent, its definition kept).
void admin_patch_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                            const Caller& caller) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kConnection);
  if (!id) return;
  std::optional<Json> body = admin_body(api, req, res, {"disabled"});
  if (!body) return;
  std::optional<bool> disabled = json_bool(*body, "disabled");
  if (!disabled) return send_error(res, HttpErrorCode::kBadRequest, "disabled must be a boolean");
  std::lock_guard<std::mutex> lock(api.admin_mu);
  std::optional<CatalogEntry> before = admin_existing(api, res, CatalogKind::kConnection, *id);
  if (!before) return;
  Json value = *before->value;
  if (!value.contains("server") || !value["server"].is_object()) value["server"] = Json::object();
  value["server"]["disabled"] = *disabled;
  write_connection(api, res, caller, *id, before, std::move(value),
                   *disabled ? "connection.disable" : "connection.enable",
                   Json::object({{"disabled", *disabled}}), 200);
}

void admin_delete_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                             const Caller& caller) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kConnection);
  if (!id || !admin_no_params(req, res)) return;
  std::lock_guard<std::mutex> lock(api.admin_mu);
  std::optional<CatalogEntry> before = admin_existing(api, res, CatalogKind::kConnection, *id);
  if (!before) return;
  write_connection(api, res, caller, *id, before, std::nullopt, "connection.delete", Json::object(),
                   200);
}

}  // namespace quiver::api
