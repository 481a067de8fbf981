// The admin API: members, grants (per member, to everyone, in bulk) and the audit log; the shared
// steps of api_admin.h. Connections: api_admin_connections.cpp. schema/openapi.yaml describes
// every endpoint.
#include "native-agent/api/api_admin.h"

#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"

namespace quiver::api {

// ---- shared steps ------------------------------------------------------------------------------

std::optional<Json> admin_body(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                               std::initializer_list<const char*> allowed) {
  if (!admin_no_params(req, res)) return std::nullopt;
  Result<Json> body = parse_json(req.body, api.options.max_body_bytes);
  if (!body.ok() || !body->is_object()) {
    send_error(res, HttpErrorCode::kBadRequest, "the body must be a JSON object");
    return std::nullopt;
  }
  for (auto it = body->begin(); it != body->end(); ++it) {
    bool known = false;
    for (const char* name : allowed) known = known || it.key() == name;
    if (!known) {
      std::string names;
      for (const char* name : allowed) names += std::string(names.empty() ? "" : ", ") + name;
      send_error(res, HttpErrorCode::kBadRequest,
                 "unknown field `" + it.key().substr(0, 64) + "` (known: " + names + ")");
      return std::nullopt;
    }
  }
  return std::move(body).value();
}

bool admin_no_params(const httplib::Request& req, httplib::Response& res) {
  QueryParams params = check_params(req, {});
  if (params.error) send_error(res, HttpErrorCode::kBadRequest, *params.error);
  return !params.error;
}

std::optional<AdminPage> admin_page(const httplib::Request& req, httplib::Response& res) {
  QueryParams params = check_params(req, {"cursor", "limit"});
  if (params.error) {
    send_error(res, HttpErrorCode::kBadRequest, *params.error);
    return std::nullopt;
  }
  AdminPage page;
  if (const std::string* v = params.find("limit")) {
    std::optional<std::size_t> n = parse_count_param(*v, 1, kAdminMaxPageSize);
    if (!n) {
      send_error(res, HttpErrorCode::kBadRequest,
                 "limit must be between 1 and " + std::to_string(kAdminMaxPageSize));
      return std::nullopt;
    }
    page.limit = *n;
  }
  if (const std::string* v = params.find("cursor")) {
    if (v->size() > 256) {
      send_error(res, HttpErrorCode::kBadRequest, "cursor is not one this API gave");
      return std::nullopt;
    }
    page.cursor = *v;
  }
  return page;
}

std::optional<std::string> admin_key(const httplib::Request& req, httplib::Response& res,
                                     std::size_t index, CatalogKind kind) {
  std::string key = path_segment(req.path, index);
  const bool member = kind != CatalogKind::kConnection;
  Status valid = member ? validate_member_id(key) : validate_connection_id(key);
  if (!valid.ok()) {
    send_error(res, HttpErrorCode::kBadRequest,
               member ? "the path's member id must match [A-Za-z0-9._@+-]{1,128}"
                      : "the path's connection id must match [A-Za-z0-9._-]{1,128}");
    return std::nullopt;
  }
  return key;
}

std::optional<std::string> parse_grant_list(const Json* value, const std::string& field,
                                            std::set<std::string>* out) {
  out->clear();
  if (value == nullptr || !value->is_array()) {
    return field + " must be a list of connection ids (or \"*\": every connection)";
  }
  if (value->size() > kAdminMaxGrantsPerList) {
    return field + " names more than " + std::to_string(kAdminMaxGrantsPerList) + " connections";
  }
  for (std::size_t i = 0; i < value->size(); ++i) {
    const Json& v = (*value)[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (!v.is_string()) return at + " must be a string";
    const std::string& cid = v.get_ref<const std::string&>();
    if (cid != "*" && !validate_connection_id(cid).ok()) {
      return at + " is not a connection id ([A-Za-z0-9._-]{1,128}) or \"*\"";
    }
    if (!out->insert(cid).second) return at + " repeats `" + cid + "`";
  }
  return std::nullopt;
}

void add_meta(Json& out, const CatalogMeta& meta) {
  out["origin"] = meta.origin;
  out["rev_ms"] = meta.rev_ms;
  out["updated_at_ms"] = meta.updated_at_ms;
  out["by"] = meta.by;
}

Result<CatalogEntry> admin_write(ApiContext& api, const Caller& caller, CatalogKind kind,
                                 const std::string& key, std::optional<Json> value,
                                 const std::string& action, Json detail) {
  const int64_t now = api.options.now_ms();
  CatalogEntry entry;
  entry.kind = kind;
  entry.key = key;
  entry.value = std::move(value);
  entry.meta.origin = kCatalogOriginApi;
  entry.meta.rev_ms = now;
  entry.meta.by = "operator:" + caller.id();
  entry.meta.updated_at_ms = now;
  Result<CatalogWriteResult> written =
      api.agent.store().catalog_write(entry, CatalogWriteMode::kAlways);
  if (!written.ok()) return written.error();
  AuditEntry line;
  line.at_ms = now;
  line.actor = entry.meta.by;
  line.action = action;
  line.target = key;
  line.detail = std::move(detail);
  if (Status audited = api.agent.store().append_audit(line); !audited.ok()) {
    // The change is made: it is not undone for want of its audit line, but the log says so.
    api.log("admin: " + line.actor + " " + action + " " + key +
            ": the audit line was not written: " + audited.error().message);
  }
  api.note("admin: " + line.actor + " " + action + " " + key);
  if (written->current) return *written->current;
  return entry;
}

std::optional<CatalogEntry> admin_existing(ApiContext& api, httplib::Response& res,
                                           CatalogKind kind, const std::string& key) {
  Result<std::optional<CatalogEntry>> entry = admin_live(api, kind, key);
  if (!entry.ok()) {
    api.fail_store(res, entry.error(), "admin read");
    return std::nullopt;
  }
  if (!*entry) {
    send_error(res, HttpErrorCode::kNotFound,
               std::string("no such ") + (kind == CatalogKind::kMember ? "member" : "connection"));
    return std::nullopt;
  }
  return std::move(**entry);
}

Result<std::optional<CatalogEntry>> admin_live(ApiContext& api, CatalogKind kind,
                                               const std::string& key) {
  Result<std::optional<CatalogEntry>> entry = api.agent.store().catalog_read(kind, key);
  if (!entry.ok()) return entry.error();
  if (*entry && !(*entry)->value) return std::optional<CatalogEntry>();
  return std::move(entry).value();
}

Status for_each_live(ApiContext& api, CatalogKind kind,
                     const std::function<Status(const CatalogEntry&)>& visit) {
  std::string cursor;
  do {
    Result<CatalogPage> page = api.agent.store().catalog_list(kind, cursor, kAdminMaxPageSize);
    if (!page.ok()) return page.error();
    for (const CatalogEntry& e : page->entries) {
      if (!e.value) continue;
      if (Status s = visit(e); !s.ok()) return s;
    }
    cursor = page->next_cursor;
  } while (!cursor.empty());
  return Status::Ok();
}

Result<std::set<std::string>> live_connection_ids(ApiContext& api) {
  std::set<std::string> ids;
  Status listed = for_each_live(api, CatalogKind::kConnection, [&](const CatalogEntry& e) {
    const Json* server = json_field(*e.value, "server");
    if (server == nullptr || !json_bool(*server, "disabled").value_or(false)) ids.insert(e.key);
    return Status::Ok();
  });
  if (!listed.ok()) return listed.error();
  return ids;
}

std::set<std::string> effective_grants(const std::set<std::string>& own,
                                       const std::set<std::string>& everyone,
                                       const std::set<std::string>& live) {
  if (own.count("*") > 0 || everyone.count("*") > 0) return live;
  std::set<std::string> out;
  for (const std::set<std::string>* list : {&own, &everyone}) {
    for (const std::string& cid : *list) {
      if (live.count(cid) > 0) out.insert(cid);
    }
  }
  return out;
}

Result<std::set<std::string>> stored_grants(ApiContext& api, const std::string& key) {
  Result<std::optional<CatalogEntry>> entry = admin_live(api, CatalogKind::kGrant, key);
  if (!entry.ok()) return entry.error();
  std::set<std::string> out;
  if (!*entry) return out;
  if (const Json* list = json_field(*(*entry)->value, "connections"); list && list->is_array()) {
    for (const Json& cid : *list) {
      if (cid.is_string()) out.insert(cid.get<std::string>());
    }
  }
  return out;
}

Result<std::size_t> publish_all_member_grants(ApiContext& api) {
  Result<std::set<std::string>> live = live_connection_ids(api);
  if (!live.ok()) return live.error();
  Result<std::set<std::string>> everyone = stored_grants(api, kEveryoneGrantKey);
  if (!everyone.ok()) return everyone.error();
  std::size_t published = 0;
  Status done = for_each_live(api, CatalogKind::kMember, [&](const CatalogEntry& member) -> Status {
    Result<std::set<std::string>> own = stored_grants(api, member.key);
    if (!own.ok()) return own.error();
    Result<bool> set =
        api.agent.store().set_member_grants(member.key, effective_grants(*own, *everyone, *live));
    if (!set.ok()) return set.error();
    ++published;
    return Status::Ok();
  });
  if (!done.ok()) return done.error();
  return published;
}

// ---- members and their grants ------------------------------------------------------------------

namespace {

Json sorted_list(const std::set<std::string>& ids) {
  Json out = Json::array();
  for (const std::string& id : ids) out.push_back(id);
  return out;
}

// A member as the API shows it.
Result<Json> member_json(ApiContext& api, const CatalogEntry& member) {
  Result<std::set<std::string>> own = stored_grants(api, member.key);
  if (!own.ok()) return own.error();
  Json out = Json::object();
  out["id"] = member.key;
  out["operator"] = json_bool(*member.value, "operator").value_or(false);
  out["config_operator"] = api.operators.count(member.key) > 0;
  out["grants"] = sorted_list(*own);
  add_meta(out, member.meta);
  return out;
}

// The grants of one member as the API shows them: its own, everyone's, and the effective set
// the readers check.
Result<Json> grants_json(ApiContext& api, const std::string& member_id) {
  Result<std::set<std::string>> own = stored_grants(api, member_id);
  if (!own.ok()) return own.error();
  Result<std::set<std::string>> everyone = stored_grants(api, kEveryoneGrantKey);
  if (!everyone.ok()) return everyone.error();
  Result<std::set<std::string>> live = live_connection_ids(api);
  if (!live.ok()) return live.error();
  return Json::object({{"member", member_id},
                       {"connections", sorted_list(*own)},
                       {"everyone", sorted_list(*everyone)},
                       {"effective", sorted_list(effective_grants(*own, *everyone, *live))}});
}

// What every grant change of one member does: the member made when it has no entry yet (a
// directory names members by their grants), its own list written, then its effective set
// published to the readers (set_member_grants: O(its grants)). `live` and `everyone` are read
// once by the caller.
Status replace_member_grants(ApiContext& api, const Caller& caller, const std::string& member_id,
                             const std::set<std::string>& own, const std::set<std::string>& live,
                             const std::set<std::string>& everyone) {
  Result<std::optional<CatalogEntry>> member = admin_live(api, CatalogKind::kMember, member_id);
  if (!member.ok()) return member.error();
  if (!*member) {
    Result<CatalogEntry> made = admin_write(api, caller, CatalogKind::kMember, member_id,
                                            Json::object({{"operator", false}}), "member.put",
                                            Json::object({{"operator", false}, {"created", true}}));
    if (!made.ok()) return made.error();
  }
  Result<CatalogEntry> written =
      admin_write(api, caller, CatalogKind::kGrant, member_id,
                  Json::object({{"connections", sorted_list(own)}}), "grants.put",
                  Json::object({{"connections", sorted_list(own)}}));
  if (!written.ok()) return written.error();
  Result<bool> published =
      api.agent.store().set_member_grants(member_id, effective_grants(own, everyone, live));
  if (!published.ok()) return published.error();
  return Status::Ok();
}

// The live connections and everyone's grants, which every grant change needs.
struct GrantContext {
  std::set<std::string> live;
  std::set<std::string> everyone;
};
std::optional<GrantContext> grant_context(ApiContext& api, httplib::Response& res) {
  Result<std::set<std::string>> live = live_connection_ids(api);
  if (!live.ok()) {
    api.fail_store(res, live.error(), "admin grants");
    return std::nullopt;
  }
  Result<std::set<std::string>> everyone = stored_grants(api, kEveryoneGrantKey);
  if (!everyone.ok()) {
    api.fail_store(res, everyone.error(), "admin grants");
    return std::nullopt;
  }
  return GrantContext{std::move(*live), std::move(*everyone)};
}

void answer_grants(ApiContext& api, httplib::Response& res, const std::string& member_id) {
  Result<Json> out = grants_json(api, member_id);
  if (!out.ok()) return api.fail_store(res, out.error(), "admin grants");
  send(json_response(200, *out), res);
}

}  // namespace

void admin_list_members(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                        const Caller&) {
  std::optional<AdminPage> page = admin_page(req, res);
  if (!page) return;
  Result<CatalogPage> members =
      api.agent.store().catalog_list(CatalogKind::kMember, page->cursor, page->limit);
  if (!members.ok()) return api.fail_store(res, members.error(), "admin members");
  Json list = Json::array();
  for (const CatalogEntry& m : members->entries) {
    if (!m.value) continue;  // a deleted member: the page may hold fewer than `limit`
    Result<Json> one = member_json(api, m);
    if (!one.ok()) return api.fail_store(res, one.error(), "admin members");
    list.push_back(std::move(*one));
  }
  Json out = Json::object({{"members", std::move(list)}});
  if (!members->next_cursor.empty()) out["next_cursor"] = members->next_cursor;
  send(json_response(200, out), res);
}

void admin_get_member(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller&) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kMember);
  if (!id || !admin_no_params(req, res)) return;
  std::optional<CatalogEntry> member = admin_existing(api, res, CatalogKind::kMember, *id);
  if (!member) return;
  Result<Json> out = member_json(api, *member);
  if (!out.ok()) return api.fail_store(res, out.error(), "admin member");
  send(json_response(200, *out), res);
}

void admin_put_member(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kMember);
  if (!id) return;
  std::optional<Json> body = admin_body(api, req, res, {"operator"});
  if (!body) return;
  bool is_operator = false;
  if (const Json* op = json_field(*body, "operator")) {
    if (!op->is_boolean())
      return send_error(res, HttpErrorCode::kBadRequest, "operator must be a boolean");
    is_operator = op->get<bool>();
  }
  std::lock_guard<std::mutex> lock(api.admin_mu);
  std::optional<GrantContext> g = grant_context(api, res);
  if (!g) return;
  Result<std::optional<CatalogEntry>> before = admin_live(api, CatalogKind::kMember, *id);
  if (!before.ok()) return api.fail_store(res, before.error(), "admin member");
  Result<CatalogEntry> written =
      admin_write(api, caller, CatalogKind::kMember, *id, Json::object({{"operator", is_operator}}),
                  "member.put", Json::object({{"operator", is_operator}, {"created", !*before}}));
  if (!written.ok()) return api.fail_store(res, written.error(), "admin member");
  // A new member sees everyone's grants at once.
  Result<std::set<std::string>> own = stored_grants(api, *id);
  if (!own.ok()) return api.fail_store(res, own.error(), "admin member");
  Result<bool> published =
      api.agent.store().set_member_grants(*id, effective_grants(*own, g->everyone, g->live));
  if (!published.ok()) return api.fail_store(res, published.error(), "admin member");
  Result<Json> out = member_json(api, *written);
  if (!out.ok()) return api.fail_store(res, out.error(), "admin member");
  send(json_response(*before ? 200 : 201, *out), res);
}

// A tombstone for the member and for its own grants, and its stored grant set emptied at once:
// its next read is refused what it was granted.
void admin_delete_member(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                         const Caller& caller) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kMember);
  if (!id || !admin_no_params(req, res)) return;
  std::lock_guard<std::mutex> lock(api.admin_mu);
  if (!admin_existing(api, res, CatalogKind::kMember, *id)) return;
  Result<CatalogEntry> gone = admin_write(api, caller, CatalogKind::kMember, *id, std::nullopt,
                                          "member.delete", Json::object());
  if (!gone.ok()) return api.fail_store(res, gone.error(), "admin member");
  Result<std::optional<CatalogEntry>> grants = admin_live(api, CatalogKind::kGrant, *id);
  if (!grants.ok()) return api.fail_store(res, grants.error(), "admin member");
  if (*grants) {
    Result<CatalogEntry> dropped = admin_write(api, caller, CatalogKind::kGrant, *id, std::nullopt,
                                               "grants.delete", Json::object());
    if (!dropped.ok()) return api.fail_store(res, dropped.error(), "admin member");
  }
  Result<bool> emptied = api.agent.store().set_member_grants(*id, {});
  if (!emptied.ok()) return api.fail_store(res, emptied.error(), "admin member");
  send(json_response(200, Json::object({{"id", *id}, {"deleted", true}})), res);
}

void admin_get_grants(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller&) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kMember);
  if (!id || !admin_no_params(req, res)) return;
  if (!admin_existing(api, res, CatalogKind::kMember, *id)) return;
  answer_grants(api, res, *id);
}

// PUT {"connections": [...]}: the member's own grants become exactly these; PATCH {"add": [...],
// "remove": [...]}: these added and removed (a removal of what it does not hold is no error).
void admin_set_grants(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller) {
  std::optional<std::string> id = admin_key(req, res, 3, CatalogKind::kMember);
  if (!id) return;
  const bool patch = req.method == "PATCH";
  std::optional<Json> body = patch ? admin_body(api, req, res, {"add", "remove"})
                                   : admin_body(api, req, res, {"connections"});
  if (!body) return;
  std::set<std::string> put;
  std::set<std::string> add;
  std::set<std::string> remove;
  if (patch) {
    const Json empty = Json::array();
    for (auto [field, out] : {std::pair{"add", &add}, std::pair{"remove", &remove}}) {
      const Json* list = json_field(*body, field);
      if (std::optional<std::string> bad = parse_grant_list(list ? list : &empty, field, out)) {
        return send_error(res, HttpErrorCode::kBadRequest, *bad);
      }
    }
  } else if (std::optional<std::string> bad =
                 parse_grant_list(json_field(*body, "connections"), "connections", &put)) {
    return send_error(res, HttpErrorCode::kBadRequest, *bad);
  }
  std::lock_guard<std::mutex> lock(api.admin_mu);
  std::optional<GrantContext> g = grant_context(api, res);
  if (!g) return;
  if (patch) {
    Result<std::set<std::string>> own = stored_grants(api, *id);
    if (!own.ok()) return api.fail_store(res, own.error(), "admin grants");
    put = *own;
    for (const std::string& cid : add) put.insert(cid);
    for (const std::string& cid : remove) put.erase(cid);
  }
  Status done = replace_member_grants(api, caller, *id, put, g->live, g->everyone);
  if (!done.ok()) return api.fail_store(res, done.error(), "admin grants");
  answer_grants(api, res, *id);
}

void admin_get_everyone(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                        const Caller&) {
  if (!admin_no_params(req, res)) return;
  Result<std::set<std::string>> everyone = stored_grants(api, kEveryoneGrantKey);
  if (!everyone.ok()) return api.fail_store(res, everyone.error(), "admin grants");
  send(json_response(200, Json::object({{"connections", sorted_list(*everyone)}})), res);
}

// The grants of everyone ("*"): every member's effective set changes, so every member is
// published again, page by page (O(members); per-member changes stay O(that member)).
void admin_put_everyone(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                        const Caller& caller) {
  std::optional<Json> body = admin_body(api, req, res, {"connections"});
  if (!body) return;
  std::set<std::string> everyone;
  if (std::optional<std::string> bad =
          parse_grant_list(json_field(*body, "connections"), "connections", &everyone)) {
    return send_error(res, HttpErrorCode::kBadRequest, *bad);
  }
  std::lock_guard<std::mutex> lock(api.admin_mu);
  Result<CatalogEntry> written =
      admin_write(api, caller, CatalogKind::kGrant, kEveryoneGrantKey,
                  Json::object({{"connections", sorted_list(everyone)}}), "grants.put",
                  Json::object({{"connections", sorted_list(everyone)}}));
  if (!written.ok()) return api.fail_store(res, written.error(), "admin grants");
  Result<std::size_t> published = publish_all_member_grants(api);
  if (!published.ok()) return api.fail_store(res, published.error(), "admin grants");
  send(json_response(200, Json::object({{"connections", sorted_list(everyone)},
                                        {"members_published", *published}})),
       res);
}

// The bulk form for a directory: {"members": {"<id>": [...], ...}}, each as the per-member PUT.
// Everything is checked before anything is written.
void admin_put_bulk_grants(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                           const Caller& caller) {
  std::optional<Json> body = admin_body(api, req, res, {"members"});
  if (!body) return;
  const Json* members = json_field(*body, "members");
  if (members == nullptr || !members->is_object() || members->empty()) {
    return send_error(res, HttpErrorCode::kBadRequest,
                      "members must be an object {\"<member id>\": [\"<connection id>\", ...]}");
  }
  if (members->size() > kAdminMaxBulkMembers) {
    return send_error(res, HttpErrorCode::kBadRequest,
                      "members names more than " + std::to_string(kAdminMaxBulkMembers) +
                          " members: split the call");
  }
  std::map<std::string, std::set<std::string>> wanted;
  for (auto it = members->begin(); it != members->end(); ++it) {
    if (!validate_member_id(it.key()).ok()) {
      return send_error(res, HttpErrorCode::kBadRequest,
                        "members: `" + it.key().substr(0, 128) +
                            "` is not a member id ([A-Za-z0-9._@+-]{1,128})");
    }
    if (std::optional<std::string> bad =
            parse_grant_list(&it.value(), "members." + it.key(), &wanted[it.key()])) {
      return send_error(res, HttpErrorCode::kBadRequest, *bad);
    }
  }
  std::lock_guard<std::mutex> lock(api.admin_mu);
  std::optional<GrantContext> g = grant_context(api, res);
  if (!g) return;
  Json effective = Json::object();
  for (const auto& [member_id, own] : wanted) {
    Status done = replace_member_grants(api, caller, member_id, own, g->live, g->everyone);
    if (!done.ok()) return api.fail_store(res, done.error(), "admin bulk grants");
    effective[member_id] = sorted_list(effective_grants(own, g->everyone, g->live));
  }
  send(json_response(200, Json::object({{"members", std::move(effective)}})), res);
}

// ---- the audit log -----------------------------------------------------------------------------

void admin_audit(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                 const Caller&) {
  std::optional<AdminPage> page = admin_page(req, res);
  if (!page) return;
  Result<AuditPage> audit = api.agent.store().read_audit(page->cursor, page->limit);
  if (!audit.ok()) return api.fail_store(res, audit.error(), "admin audit");
  Json lines = Json::array();
  for (const AuditEntry& e : audit->entries) {
    lines.push_back(Json::object({{"id", e.id},
                                  {"at_ms", e.at_ms},
                                  {"actor", e.actor},
                                  {"action", e.action},
                                  {"target", e.target},
                                  {"detail", e.detail}}));
  }
  Json out = Json::object({{"entries", std::move(lines)}});
  if (!audit->next_cursor.empty()) out["next_cursor"] = audit->next_cursor;
  send(json_response(200, out), res);
}

}  // namespace quiver::api
