// The effective configuration from the runtime catalog, the file's items for seeding, and the
// catalog values the admin API accepts (catalog_config.h).
#include "native-agent/engine/catalog_config.h"

#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "shared/canonical_json.h"
#include "shared/principal.h"
#include "shared/sha256.h"

namespace quiver {

namespace {

Error invalid_arg(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

const Json* object_field(const Json& object, const char* key) {
  const Json* v = json_field(object, key);
  return v != nullptr && v->is_object() ? v : nullptr;
}

// The minimal document one connection definition parses in: its server, its settings (the
// connection id as the catalog key says), no members or grants.
// `oauth`: the agent-wide `quiver.oauth` section the definition is parsed with (an OAuth
// connection needs its key); null: none.
Json connection_document(const std::string& key, const Json& value, const Json* oauth = nullptr) {
  Json doc = Json::object();
  const std::string name = value.value("name", std::string());
  doc["mcpServers"] = Json::object();
  doc["mcpServers"][name] = value.contains("server") ? value["server"] : Json::object();
  Json settings = value.contains("settings") && value["settings"].is_object() ? value["settings"]
                                                                              : Json::object();
  Result<std::string> mapped = connection_id_for_name(name);
  if (!mapped.ok() || *mapped != key) settings["id"] = key;
  doc["quiver"] = Json::object();
  doc["quiver"]["connections"] = Json::object();
  doc["quiver"]["connections"][name] = std::move(settings);
  if (oauth != nullptr) doc["quiver"]["oauth"] = *oauth;
  return doc;
}

Result<AgentConfig> parse_document(const ConfigSources& base, const Json& doc) {
  const std::string text = serialize_json(doc);
  ConfigSources sources = base;
  sources.text = text;
  return parse_config(sources);
}

std::string value_hash(const Json& value) {
  Result<std::string> canonical = canonical_json(value);
  return sha256_hex(canonical.ok() ? *canonical : serialize_json(value));
}

}  // namespace

Result<std::vector<CatalogEntry>> catalog_items_from_file(const ConfigSources& file,
                                                          int64_t file_rev_ms) {
  Result<AgentConfig> cfg = parse_config(file);
  if (!cfg.ok()) return cfg.error();
  const std::string origin = file.origin.empty() ? "config" : std::string(file.origin);
  Result<Json> root = parse_config_json(file.text, origin);
  if (!root.ok()) return root.error();
  const Json empty = Json::object();
  const Json* servers = object_field(*root, "mcpServers");
  const Json* quiver = object_field(*root, "quiver");
  const Json* settings = quiver != nullptr ? object_field(*quiver, "connections") : nullptr;
  const Json* grants = quiver != nullptr ? object_field(*quiver, "grants") : nullptr;

  std::vector<CatalogEntry> out;
  auto add = [&](CatalogKind kind, const std::string& key, Json value) {
    CatalogEntry e;
    e.kind = kind;
    e.key = key;
    e.meta.origin = kCatalogOriginFile;
    e.meta.rev_ms = file_rev_ms;
    e.meta.file_hash = value_hash(value);
    e.meta.by = "file:" + origin;
    e.value = std::move(value);
    out.push_back(std::move(e));
  };

  for (const std::string& member : cfg->members) {
    Json v = Json::object();
    v["operator"] = cfg->operators.count(member) > 0;
    add(CatalogKind::kMember, member, std::move(v));
  }
  if (grants != nullptr) {
    for (const auto& [key, list] : grants->items()) {
      if (!list.is_array()) continue;  // parse_config refused it
      std::set<std::string> ids;
      for (const Json& ref : list) {
        if (!ref.is_string()) continue;
        const std::string r = ref.get<std::string>();
        if (r == "*") {
          ids.insert("*");
        } else if (const ConnectionConfig* c = cfg->find_connection_by_name(r)) {
          ids.insert(c->id);
        } else if (const ConnectionConfig* c2 = cfg->find_connection(r)) {
          ids.insert(c2->id);
        }  // else a disabled server (parse_config warned)
      }
      Json v = Json::object();
      v["connections"] = Json(ids);
      add(CatalogKind::kGrant, key, std::move(v));
    }
  }
  for (const ConnectionConfig& c : cfg->connections) {
    Json v = Json::object();
    v["name"] = c.name;
    v["server"] = servers != nullptr && servers->contains(c.name) ? (*servers)[c.name] : empty;
    Json s = settings != nullptr && settings->contains(c.name) ? (*settings)[c.name] : empty;
    // The key is the id: an explicit `id` setting says nothing more.
    if (s.is_object()) s.erase("id");
    v["settings"] = std::move(s);
    add(CatalogKind::kConnection, c.id, std::move(v));
  }
  return out;
}

Result<AgentConfig> effective_config(const ConfigSources& file,
                                     const std::vector<CatalogEntry>& catalog) {
  const std::string origin = file.origin.empty() ? "config" : std::string(file.origin);
  Result<Json> parsed = parse_config_json(file.text, origin);
  if (!parsed.ok()) return parsed.error();
  Json root = std::move(*parsed);
  if (!root.is_object()) return invalid_arg(origin + ": the top level must be a JSON object");
  if (!root.contains("quiver") || !root["quiver"].is_object()) root["quiver"] = Json::object();
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& kind, const std::string& key, const std::string& what) {
    warnings.push_back("catalog " + kind + " `" + key + "`: " + what);
  };

  // Connections: each must parse on this agent alone (its env references resolve here).
  Json servers = Json::object();
  Json settings = Json::object();
  struct Live {
    CredentialMode mode;
    bool needs_credential;
    std::set<std::string> credentialed;
  };
  std::map<std::string, Live> connections;  // id -> what grants need to know
  std::map<std::string, std::string> name_of;
  for (const CatalogEntry& e : catalog) {
    if (e.kind != CatalogKind::kConnection || !e.value.has_value()) continue;
    const Json& v = *e.value;
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) {
      warn("connection", e.key, "not a connection definition (skipped)");
      continue;
    }
    const std::string name = v["name"].get<std::string>();
    if (servers.contains(name)) {
      warn("connection", e.key,
           "its name `" + name + "` is taken by connection `" + name_of[name] + "` (skipped)");
      continue;
    }
    Json doc = connection_document(e.key, v, json_field(root["quiver"], "oauth"));
    // Credentials of members checked below, against the catalog's members.
    Result<AgentConfig> alone = parse_document(file, doc);
    if (!alone.ok() || alone->connections.size() != 1 || alone->connections[0].id != e.key) {
      warn("connection", e.key,
           "does not parse on this agent (skipped): " +
               (alone.ok() ? std::string("disabled or a different id") : alone.error().message));
      continue;
    }
    const ConnectionConfig& c = alone->connections[0];
    Live live{c.credential_mode,
              c.credential_mode == CredentialMode::kPerMember &&
                  (c.auth == AuthType::kBearer || c.auth == AuthType::kApiKey),
              {}};
    for (const auto& [m, secret] : c.member_credentials) live.credentialed.insert(m);
    connections[e.key] = std::move(live);
    name_of[name] = e.key;
    servers[name] = doc["mcpServers"][name];
    settings[name] = doc["quiver"]["connections"][name];
  }

  // Members and operators.
  std::set<std::string> members;
  Json operators = Json::array();
  for (const CatalogEntry& e : catalog) {
    if (e.kind != CatalogKind::kMember || !e.value.has_value()) continue;
    if (!validate_member_id(e.key).ok()) {
      warn("member", e.key, "not a valid member id (skipped)");
      continue;
    }
    members.insert(e.key);
    const Json* op = json_field(*e.value, "operator");
    if (op != nullptr && op->is_boolean() && op->get<bool>()) operators.push_back(e.key);
  }

  // Credentials of members that are not members: dropped.
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    const std::string name = it.key();
    Json& s = it.value();
    if (!s.contains("credentials") || !s["credentials"].is_object()) continue;
    std::vector<std::string> gone;
    for (const auto& [m, ref] : s["credentials"].items()) {
      if (members.count(m) == 0) gone.push_back(m);
    }
    for (const std::string& m : gone) {
      s["credentials"].erase(m);
      connections[name_of[name]].credentialed.erase(m);
      warn("connection", name_of[name],
           "a credential for `" + m + "`, who is not a member (ignored)");
    }
  }

  // Grants: expanded per member ("*" for everyone, ["*"] for every connection), each kept only
  // when its connection exists and, per member, the member has a credential where one is needed.
  std::set<std::string> everyone;
  std::map<std::string, std::set<std::string>> direct;
  for (const CatalogEntry& e : catalog) {
    if (e.kind != CatalogKind::kGrant || !e.value.has_value()) continue;
    if (e.key != kEveryoneGrantKey && members.count(e.key) == 0) {
      warn("grant", e.key, "not a member (grants ignored)");
      continue;
    }
    const Json* list = json_field(*e.value, "connections");
    if (list == nullptr || !list->is_array()) {
      warn("grant", e.key, "not a grant (`connections` must be an array; ignored)");
      continue;
    }
    std::set<std::string>& ids = e.key == kEveryoneGrantKey ? everyone : direct[e.key];
    for (const Json& ref : *list) {
      const std::string id = ref.is_string() ? ref.get<std::string>() : std::string();
      if (id == "*") {
        for (const auto& [cid, live] : connections) ids.insert(cid);
      } else if (connections.count(id) > 0) {
        ids.insert(id);
      } else {
        warn("grant", e.key, "connection `" + id + "` is not in the catalog (grant ignored)");
      }
    }
  }
  Json grants = Json::object();
  for (const std::string& m : members) {
    std::set<std::string> ids = everyone;
    auto it = direct.find(m);
    if (it != direct.end()) ids.insert(it->second.begin(), it->second.end());
    Json list = Json::array();
    for (const std::string& id : ids) {
      const Live& live = connections[id];
      if (live.needs_credential && live.credentialed.count(m) == 0) {
        warn("grant", m,
             "connection `" + id + "` has no credential for this member (grant ignored)");
        continue;
      }
      list.push_back(id);
    }
    grants[m] = std::move(list);
  }

  root["mcpServers"] = std::move(servers);
  Json& q = root["quiver"];
  q["connections"] = std::move(settings);
  q["members"] = Json(members);
  q["operators"] = std::move(operators);
  q["grants"] = std::move(grants);
  Result<AgentConfig> cfg = parse_document(file, root);
  if (!cfg.ok()) return cfg.error();
  // parse_config's own warnings about the rebuilt grants are not the operator's to act on.
  std::vector<std::string> kept;
  for (std::string& w : cfg->warnings) {
    if (w.rfind("quiver.grants", 0) != 0) kept.push_back(std::move(w));
  }
  cfg->warnings = std::move(kept);
  for (std::string& w : warnings) cfg->warnings.push_back(cfg->redact(w));
  return cfg;
}

namespace {

// `${...}` outside `$${` escapes.
bool has_reference(std::string_view s) {
  for (std::size_t p = s.find("${"); p != std::string_view::npos; p = s.find("${", p + 2)) {
    if (p > 0 && s[p - 1] == '$') continue;
    if (s.find('}', p + 2) != std::string_view::npos) return true;
  }
  return false;
}

bool is_secret_reference(const Json& v) {
  if (v.is_string()) return has_reference(v.get<std::string>());
  if (!v.is_object() || v.size() != 1) return false;
  const Json* env = json_field(v, "env");
  const Json* file = json_field(v, "file");
  return (env != nullptr && env->is_string()) || (file != nullptr && file->is_string());
}

// Every variable a value references (`${NAME}`, `${env:NAME}`, {"env": "NAME"}), so that a
// definition can be parsed with all of them set on an agent that has none of them.
void referenced_vars(const Json& v, std::set<std::string>* out) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    for (std::size_t p = s.find("${"); p != std::string::npos; p = s.find("${", p + 2)) {
      std::size_t start = p + 2;
      if (s.compare(start, 4, "env:") == 0) start += 4;
      std::size_t end = start;
      while (end < s.size() &&
             (std::isalnum(static_cast<unsigned char>(s[end])) != 0 || s[end] == '_')) {
        ++end;
      }
      if (end > start) out->insert(s.substr(start, end - start));
    }
  } else if (v.is_object()) {
    const Json* env = json_field(v, "env");
    if (v.size() == 1 && env != nullptr && env->is_string()) out->insert(env->get<std::string>());
    for (const auto& [k, child] : v.items()) referenced_vars(child, out);
  } else if (v.is_array()) {
    for (const Json& child : v) referenced_vars(child, out);
  }
}

Status check_keys(const Json& value, const std::set<std::string>& allowed, const std::string& at) {
  if (!value.is_object()) return invalid_arg(at + ": must be an object");
  for (const auto& [k, v] : value.items()) {
    if (allowed.count(k) == 0) return invalid_arg(at + "." + k + ": unknown field");
  }
  return Status();
}

}  // namespace

Status validate_catalog_value(CatalogKind kind, std::string_view key, const Json& value) {
  const std::string k(key);
  switch (kind) {
    case CatalogKind::kMember: {
      if (Status s = validate_member_id(key); !s.ok())
        return invalid_arg("member: " + s.error().message);
      if (Status s = check_keys(value, {"operator"}, "member"); !s.ok()) return s;
      const Json* op = json_field(value, "operator");
      if (op != nullptr && !op->is_boolean())
        return invalid_arg("member.operator: must be true or false");
      return Status();
    }
    case CatalogKind::kGrant: {
      if (k != kEveryoneGrantKey) {
        if (Status s = validate_member_id(key); !s.ok()) {
          return invalid_arg("grant: " + s.error().message + " (use `*` for every member)");
        }
      }
      if (Status s = check_keys(value, {"connections"}, "grant"); !s.ok()) return s;
      const Json* list = json_field(value, "connections");
      if (list == nullptr || !list->is_array()) {
        return invalid_arg("grant.connections: must be an array of connection ids or `*`");
      }
      for (std::size_t i = 0; i < list->size(); ++i) {
        const Json& id = (*list)[i];
        const std::string at = "grant.connections[" + std::to_string(i) + "]";
        if (!id.is_string()) return invalid_arg(at + ": must be a connection id or `*`");
        if (id.get<std::string>() != "*" && !validate_connection_id(id.get<std::string>()).ok()) {
          return invalid_arg(at + ": not a valid connection id");
        }
      }
      return Status();
    }
    case CatalogKind::kConnection:
      break;
  }
  if (Status s = validate_connection_id(key); !s.ok())
    return invalid_arg("connection: " + s.error().message);
  if (Status s = check_keys(value, {"name", "server", "settings"}, "connection"); !s.ok()) return s;
  const Json* name = json_field(value, "name");
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
    return invalid_arg("connection.name: must be a non-empty string (the mcpServers key)");
  }
  const Json* server = json_field(value, "server");
  if (server == nullptr || !server->is_object()) {
    return invalid_arg("connection.server: must be an object (the mcpServers entry)");
  }
  const Json* settings = json_field(value, "settings");
  if (settings != nullptr && !settings->is_object()) {
    return invalid_arg("connection.settings: must be an object (the quiver.connections entry)");
  }
  if (settings != nullptr) {
    const Json* id = json_field(*settings, "id");
    if (id != nullptr && (!id->is_string() || id->get<std::string>() != k)) {
      return invalid_arg("connection.settings.id: must be the connection id `" + k + "` or absent");
    }
  }
  // Literal secrets: refused. The catalog is stored in clear.
  const char* kRefs =
      ": secrets must be references ({\"env\": \"NAME\"}, {\"file\": \"/path\"} or "
      "\"${NAME}\"), not literal values";
  for (const char* field : {"env", "headers"}) {
    const Json* map = json_field(*server, field);
    if (map == nullptr || !map->is_object()) continue;
    for (const auto& [n, v] : map->items()) {
      if (!is_secret_reference(v)) {
        return invalid_arg(std::string("connection.server.") + field + "." + n + kRefs);
      }
    }
  }
  if (settings != nullptr) {
    if (const Json* c = json_field(*settings, "credential");
        c != nullptr && !is_secret_reference(*c)) {
      return invalid_arg(std::string("connection.settings.credential") + kRefs);
    }
    if (const Json* cs = json_field(*settings, "credentials"); cs != nullptr && cs->is_object()) {
      for (const auto& [m, v] : cs->items()) {
        if (!is_secret_reference(v)) {
          return invalid_arg("connection.settings.credentials." + m + kRefs);
        }
      }
    }
  }
  // The definition parses as a server with its settings, whatever this agent's environment holds:
  // every variable it references is set to a placeholder, every file reads as one.
  std::set<std::string> vars;
  referenced_vars(value, &vars);
  ConfigSources sources;
  sources.origin = "connection";
  for (const std::string& v : vars) sources.env[v] = "1";
  sources.read_file = [](const std::string&) -> Result<std::string> { return std::string("1"); };
  // An OAuth connection needs the agent's token-store key to parse: a placeholder one.
  const Json oauth =
      Json::object({{"key", Json::object({{"env", "QUIVER_VALIDATION_OAUTH_KEY"}})}});
  sources.env["QUIVER_VALIDATION_OAUTH_KEY"] = std::string(64, '0');
  Result<AgentConfig> parsed = parse_document(sources, connection_document(k, value, &oauth));
  if (!parsed.ok()) return invalid_arg("connection `" + k + "`: " + parsed.error().message);
  if (parsed->connections.size() != 1) {
    return invalid_arg("connection `" + k + "`: the server is disabled or not a connection");
  }
  return Status();
}

}  // namespace quiver

namespace quiver {

Result<CatalogSnapshot> read_catalog(ManifestStore& store) {
  CatalogSnapshot out;
  Result<CatalogVersions> versions = store.catalog_versions();
  if (!versions.ok()) return versions.error();
  out.versions = *versions;
  for (CatalogKind kind : {CatalogKind::kMember, CatalogKind::kGrant, CatalogKind::kConnection}) {
    std::string cursor;
    for (;;) {
      Result<CatalogPage> page = store.catalog_list(kind, cursor, 500);
      if (!page.ok()) return page.error();
      for (CatalogEntry& e : page->entries) out.entries.push_back(std::move(e));
      if (page->next_cursor.empty()) break;
      cursor = page->next_cursor;
    }
  }
  return out;
}

Result<CatalogConfig> build_catalog_config(ManifestStore& store, const ConfigSources& file) {
  Result<CatalogSnapshot> snap = read_catalog(store);
  if (!snap.ok()) return snap.error();
  Result<AgentConfig> cfg = effective_config(file, snap->entries);
  if (!cfg.ok()) return cfg.error();
  return CatalogConfig{std::move(*cfg), snap->versions, std::move(snap->entries)};
}

Result<CatalogConfig> seed_catalog_from_file(ManifestStore& store, const ConfigSources& file,
                                             int64_t file_rev_ms,
                                             const std::function<void(const std::string&)>& log) {
  Result<std::vector<CatalogEntry>> items = catalog_items_from_file(file, file_rev_ms);
  if (!items.ok()) return items.error();
  Result<CatalogSnapshot> before = read_catalog(store);
  if (!before.ok()) return before.error();
  std::set<std::pair<int, std::string>> named;
  for (const CatalogEntry& e : *items) named.insert({static_cast<int>(e.kind), e.key});
  std::vector<CatalogEntry> writes = std::move(*items);
  // Removals: what an earlier file seeded and this one no longer names.
  for (const CatalogEntry& e : before->entries) {
    if (!e.value.has_value() || e.meta.origin != kCatalogOriginFile) continue;
    if (named.count({static_cast<int>(e.kind), e.key}) > 0) continue;
    CatalogEntry gone;
    gone.kind = e.kind;
    gone.key = e.key;
    gone.meta.origin = kCatalogOriginFile;
    gone.meta.rev_ms = file_rev_ms;
    gone.meta.by = "file:" + std::string(file.origin);
    writes.push_back(std::move(gone));
  }
  for (const CatalogEntry& e : writes) {
    Result<CatalogWriteResult> w = store.catalog_write(e, CatalogWriteMode::kFileSeed);
    if (!w.ok()) return w.error();
    const std::string what = std::string(catalog_kind_name(e.kind)) + " " + e.key;
    if (w->applied) {
      log(std::string("catalog: the config file ") + (e.value ? "set " : "removed ") + what +
          " (file revision " + std::to_string(file_rev_ms) + ")");
      continue;
    }
    const std::optional<CatalogEntry>& cur = w->current;
    if (!cur.has_value() || cur->meta.file_hash == e.meta.file_hash || cur->value == e.value) {
      continue;  // the store holds what the file says
    }
    log("config file is behind the store for " + what + " (file revision " +
        std::to_string(file_rev_ms) + ", store " + std::to_string(cur->meta.rev_ms) + " by " +
        cur->meta.by + "): the store's " + (cur->value ? "definition" : "removal") + " is used");
  }
  return build_catalog_config(store, file);
}

void use_catalog_config(AgentConfig effective, AgentConfig* into) {
  into->members = std::move(effective.members);
  into->operators = std::move(effective.operators);
  into->grants = std::move(effective.grants);
  into->connections = std::move(effective.connections);
  into->redactor = std::move(effective.redactor);
  for (std::string& w : effective.warnings) {
    if (w.rfind("catalog ", 0) == 0) into->warnings.push_back(std::move(w));
  }
}

bool engine_config_differs(const AgentConfig& a, const AgentConfig& b) {
  if (a.operators != b.operators) return true;
  if (a.connections.size() != b.connections.size()) return true;
  for (std::size_t i = 0; i < a.connections.size(); ++i) {
    const ConnectionConfig& x = a.connections[i];
    const ConnectionConfig& y = b.connections[i];
    if (x.id != y.id || x.name != y.name || x.config_hash != y.config_hash ||
        x.credential_mode != y.credential_mode ||
        x.auto_enable_new_capabilities != y.auto_enable_new_capabilities ||
        x.list_timeout_ms != y.list_timeout_ms || x.request_timeout_ms != y.request_timeout_ms ||
        x.startup_timeout_ms != y.startup_timeout_ms) {
      return true;
    }
    if (x.credential_mode == CredentialMode::kPerMember && x.granted_members != y.granted_members) {
      return true;
    }
  }
  return false;
}

}  // namespace quiver
