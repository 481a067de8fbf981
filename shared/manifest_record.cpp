#include "shared/manifest_record.h"

#include <algorithm>
#include <set>
#include <utility>

#include "shared/canonical_json.h"
#include "shared/manifest_internal.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {

using namespace manifest_internal;  // this file implements part of manifest.h

namespace manifest_internal {

// ---- Small codecs ----

std::string sanitized(std::string_view text, std::size_t max_bytes) {
  std::string out(text.substr(0, std::min(text.size(), max_bytes)));
  // Cut on a code point boundary, then make any invalid byte visible and harmless.
  for (std::size_t bad = find_invalid_utf8(out); bad != std::string::npos;
       bad = find_invalid_utf8(out)) {
    if (out.size() - bad < 4 && out.size() == max_bytes) {
      out.resize(bad);  // a sequence cut by the length limit
    } else {
      out[bad] = '?';
    }
  }
  return out;
}

Json cache_to_json(const CacheHints& hints) {
  Json j = Json::object();
  if (hints.ttl_ms) j["ttl_ms"] = *hints.ttl_ms;
  if (hints.cache_scope) j["scope"] = *hints.cache_scope;
  return j;
}

// Peer hints made safe: a negative ttl is 0, an unknown scope is treated as private (it never
// leaves its principal by mistake).
CacheHints normalized(const CacheHints& hints) {
  CacheHints out;
  if (hints.ttl_ms) out.ttl_ms = std::max<int64_t>(0, *hints.ttl_ms);
  if (hints.cache_scope) out.cache_scope = *hints.cache_scope == "public" ? "public" : "private";
  return out;
}

void combine(CacheHints* into, const CacheHints& hints) {
  if (hints.ttl_ms && (!into->ttl_ms || *hints.ttl_ms < *into->ttl_ms)) into->ttl_ms = hints.ttl_ms;
  if (hints.cache_scope && into->cache_scope != std::string("private")) {
    into->cache_scope = hints.cache_scope;
  }
}

Json error_to_json(const Error& e) {
  return Json{{"code", error_code_name(e.code)}, {"message", e.message}};
}

Result<Tool> from_json_as(const Json& j, std::vector<std::string>* p, const Tool*) {
  return tool_from_json(j, p);
}
Result<Resource> from_json_as(const Json& j, std::vector<std::string>* p, const Resource*) {
  return resource_from_json(j, p);
}
Result<ResourceTemplate> from_json_as(const Json& j, std::vector<std::string>* p,
                                      const ResourceTemplate*) {
  return resource_template_from_json(j, p);
}
Result<Prompt> from_json_as(const Json& j, std::vector<std::string>* p, const Prompt*) {
  return prompt_from_json(j, p);
}

std::optional<ListKind> list_kind_from_name(std::string_view name) {
  for (ListKind k : kAllKinds) {
    if (name == list_kind_name(k)) return k;
  }
  return std::nullopt;
}

}  // namespace manifest_internal

namespace {

// ---- Strict reading of our own records ----

Error bad(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "manifest " + where + ": " + what);
}

Status only_keys(const Json& object, const std::string& where,
                 std::initializer_list<const char*> allowed) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : allowed) ok = ok || it.key() == k;
    if (!ok) return bad(where, "unknown field '" + sanitized(it.key(), 64) + "'");
  }
  return Status::Ok();
}

Result<CacheHints> cache_from_json(const Json* j, const std::string& where) {
  if (j == nullptr || !j->is_object()) return bad(where, "'cache' is not an object");
  Status st = only_keys(*j, where + ".cache", {"ttl_ms", "scope"});
  if (!st.ok()) return st.error();
  CacheHints hints;
  if (const Json* t = json_field(*j, "ttl_ms")) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0) {
      return bad(where, "'cache.ttl_ms' is not a non-negative integer");
    }
    hints.ttl_ms = t->get<int64_t>();
  }
  if (const Json* s = json_field(*j, "scope")) {
    if (!s->is_string() || (*s != "public" && *s != "private")) {
      return bad(where, "'cache.scope' is not \"public\" or \"private\"");
    }
    hints.cache_scope = s->get<std::string>();
  }
  return hints;
}

bool is_hash(const Json& j) {
  if (!j.is_string()) return false;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.size() != kHashChars || s.compare(0, 7, "sha256-") != 0) return false;
  std::string raw;
  return base64url_decode(std::string_view(s).substr(7), &raw) && raw.size() == 32;
}

std::optional<int64_t> non_negative(const Json& object, const char* key) {
  std::optional<int64_t> v = json_int(object, key);
  if (v && *v < 0) return std::nullopt;
  return v;
}

template <typename T>
Status list_from_json(const Json& manifest, ListKind kind, ManifestList<T>* list) {
  const std::string where = list_kind_name(kind);
  const Json* j = json_field(manifest, where.c_str());
  if (j == nullptr || !j->is_object()) return bad(where, "missing or not an object");
  Status st =
      only_keys(*j, where, {"state", "items", "hashes", "error", "cache", "partial_items", "kept"});
  if (!st.ok()) return st;
  std::optional<std::string> state_name = json_string(*j, "state");
  std::optional<ListState> state =
      state_name ? manifest_list_state_from_name(*state_name) : std::nullopt;
  if (!state) return bad(where, "'state' is not \"ok\", \"absent\" or \"failed\"");
  list->state = *state;

  const Json* items = json_field(*j, "items");
  const Json* hashes = json_field(*j, "hashes");
  if (items == nullptr || !items->is_array()) return bad(where, "'items' is not an array");
  if (hashes == nullptr || !hashes->is_object()) return bad(where, "'hashes' is not an object");
  if (*state != ListState::kOk && (!items->empty() || !hashes->empty())) {
    return bad(where, "only an \"ok\" list has items");
  }
  std::set<std::string> keys;
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < items->size(); ++i) {
    problems.clear();
    Result<T> def = from_json_as((*items)[i], &problems, static_cast<const T*>(nullptr));
    if (!def.ok()) return bad(where + "[" + std::to_string(i) + "]", def.error().message);
    if (!problems.empty()) return bad(where + "[" + std::to_string(i) + "]", problems.front());
    const std::string& key = definition_key(*def);
    if (!keys.insert(key).second)
      return bad(where + "[" + std::to_string(i) + "]", "duplicate key");
    const Json* hash = json_field(*hashes, key.c_str());
    if (hash == nullptr || !is_hash(*hash)) {
      return bad(where + "[" + std::to_string(i) + "]", "no valid hash for its key");
    }
    list->hashes.push_back(hash->get<std::string>());
    list->items.push_back(std::move(*def));
  }
  if (hashes->size() != keys.size()) return bad(where, "'hashes' names keys without an item");

  const Json* error = json_field(*j, "error");
  if ((error != nullptr) != (*state == ListState::kFailed)) {
    return bad(where, "'error' is present exactly when the state is \"failed\"");
  }
  if (error != nullptr) {
    if (!error->is_object()) return bad(where, "'error' is not an object");
    st = only_keys(*error, where + ".error", {"code", "message"});
    if (!st.ok()) return st;
    std::optional<std::string> code_name = json_string(*error, "code");
    std::optional<ErrorCode> code = code_name ? error_code_from_name(*code_name) : std::nullopt;
    std::optional<std::string> message = json_string(*error, "message");
    if (!code || !message) return bad(where, "'error' needs a known 'code' and a 'message'");
    list->error = Error(*code, *message);
  }
  Result<CacheHints> cache = cache_from_json(json_field(*j, "cache"), where);
  if (!cache.ok()) return cache.error();
  list->cache = *cache;

  if (json_field(*j, "partial_items") != nullptr) {
    std::optional<int64_t> n = non_negative(*j, "partial_items");
    if (!n || *n == 0 || *state != ListState::kFailed) {
      return bad(where, "'partial_items' is a positive integer, only on a \"failed\" list");
    }
    list->partial_items = *n;
  }
  if (const Json* kept = json_field(*j, "kept")) {
    if (*state == ListState::kFailed || !kept->is_object()) {
      return bad(where, "'kept' is an object, never on a \"failed\" list");
    }
    st = only_keys(*kept, where + ".kept", {"listed_at", "error"});
    if (!st.ok()) return st;
    std::optional<int64_t> at = non_negative(*kept, "listed_at");
    const Json* e = json_field(*kept, "error");
    std::optional<ErrorCode> code;
    std::optional<std::string> message;
    if (e != nullptr && e->is_object() && only_keys(*e, where, {"code", "message"}).ok()) {
      std::optional<std::string> code_name = json_string(*e, "code");
      code = code_name ? error_code_from_name(*code_name) : std::nullopt;
      message = json_string(*e, "message");
    }
    if (!at || !code || !message) {
      return bad(where,
                 "'kept' needs 'listed_at' and an 'error' with a known 'code' and a 'message'");
    }
    list->kept = KeptList{*at, Error(*code, *message)};
  }
  return Status::Ok();
}

}  // namespace

// ---- Names and hashes ----

std::optional<ListState> manifest_list_state_from_name(std::string_view name) {
  for (ListState s : {ListState::kOk, ListState::kAbsent, ListState::kFailed}) {
    if (name == list_state_name(s)) return s;
  }
  return std::nullopt;
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (int c = static_cast<int>(ErrorCode::kUnknown); c <= static_cast<int>(ErrorCode::kInternal);
       ++c) {
    if (name == error_code_name(static_cast<ErrorCode>(c))) return static_cast<ErrorCode>(c);
  }
  return std::nullopt;
}

std::string content_hash(std::string_view bytes) {
  Digest256 d = sha256(bytes);
  return "sha256-" +
         base64url_encode(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

Result<std::string> definition_hash(const Json& definition) {
  Result<std::string> bytes = canonical_json(definition);
  if (!bytes.ok()) return bytes.error();
  return content_hash(*bytes);
}

Json manifest_to_json(const Manifest& m) {
  Json j = Json::object();
  j["format"] = kManifestFormat;
  j["protocol_version"] = m.protocol_version;
  Json server = base(m.server.extra);
  server["name"] = m.server.name;
  server["version"] = m.server.version;
  put(server, "title", m.server.title);
  j["server"] = std::move(server);
  j["capabilities"] = m.capabilities.is_object() ? m.capabilities : Json::object();
  put(j, "instructions", m.instructions);
  for_each_list(m, [&](ListKind kind, const auto& list) {
    Json l = Json::object();
    l["state"] = list_state_name(list.state);
    Json items = Json::array();
    Json hashes = Json::object();
    for (std::size_t i = 0; i < list.items.size(); ++i) {
      items.push_back(to_json(list.items[i]));
      hashes[definition_key(list.items[i])] = i < list.hashes.size() ? list.hashes[i] : "";
    }
    l["items"] = std::move(items);
    l["hashes"] = std::move(hashes);
    if (list.state == ListState::kFailed) {
      l["error"] = error_to_json(list.error.value_or(Error(ErrorCode::kUnknown, "")));
      if (list.partial_items > 0) l["partial_items"] = list.partial_items;
    } else if (list.kept) {
      l["kept"] =
          Json{{"listed_at", list.kept->listed_at_ms}, {"error", error_to_json(list.kept->error)}};
    }
    l["cache"] = cache_to_json(list.cache);
    j[list_kind_name(kind)] = std::move(l);
  });
  j["cache"] = cache_to_json(m.cache);
  j["truncated"] = m.truncated;
  if (m.truncated) {
    Json t = Json::object();
    t["descriptions"] = m.truncation.descriptions;
    if (m.truncation.description_max_bytes) {
      t["description_max_bytes"] = *m.truncation.description_max_bytes;
    }
    t["instructions"] = m.truncation.instructions;
    Json dropped = Json::object();
    for (ListKind k : kAllKinds)
      dropped[list_kind_name(k)] = m.truncation.dropped[static_cast<int>(k)];
    t["dropped"] = std::move(dropped);
    j["truncation"] = std::move(t);
  }
  Json issues = Json::array();
  for (const ManifestIssue& i : m.issues) {
    issues.push_back(Json{{"list", list_kind_name(i.list)},
                          {"index", i.index},
                          {"key", i.key},
                          {"problem", i.problem}});
  }
  j["issues"] = std::move(issues);
  j["issues_omitted"] = m.issues_omitted;
  return j;
}

Result<Manifest> manifest_from_json(const Json& j) {
  if (!j.is_object()) return bad("", "not an object");
  Status st = only_keys(j, "",
                        {"format", "protocol_version", "server", "capabilities", "instructions",
                         "tools", "resources", "resource_templates", "prompts", "cache",
                         "truncated", "truncation", "issues", "issues_omitted"});
  if (!st.ok()) return st.error();
  if (json_string(j, "format") != std::optional<std::string>(kManifestFormat)) {
    return bad("format", std::string("is not \"") + kManifestFormat + "\"");
  }
  Manifest m;
  std::optional<std::string> protocol = json_string(j, "protocol_version");
  if (!protocol) return bad("protocol_version", "is not a string");
  m.protocol_version = std::move(*protocol);

  const Json* server = json_field(j, "server");
  if (server == nullptr || !server->is_object()) return bad("server", "is not an object");
  std::optional<std::string> name = json_string(*server, "name");
  std::optional<std::string> version = json_string(*server, "version");
  if (!name || !version) return bad("server", "needs a string 'name' and 'version'");
  m.server.name = std::move(*name);
  m.server.version = std::move(*version);
  if (const Json* title = json_field(*server, "title")) {
    if (!title->is_string()) return bad("server", "'title' is not a string");
    m.server.title = title->get<std::string>();
  }
  m.server.extra = FieldReader(*server, nullptr).extra({"name", "version", "title"});

  const Json* caps = json_field(j, "capabilities");
  if (caps == nullptr || !caps->is_object()) return bad("capabilities", "is not an object");
  m.capabilities = *caps;
  if (const Json* instr = json_field(j, "instructions")) {
    if (!instr->is_string()) return bad("instructions", "is not a string");
    m.instructions = instr->get<std::string>();
  }

  st = list_from_json(j, ListKind::kTools, &m.tools);
  if (st.ok()) st = list_from_json(j, ListKind::kResources, &m.resources);
  if (st.ok()) st = list_from_json(j, ListKind::kResourceTemplates, &m.resource_templates);
  if (st.ok()) st = list_from_json(j, ListKind::kPrompts, &m.prompts);
  if (!st.ok()) return st.error();

  Result<CacheHints> cache = cache_from_json(json_field(j, "cache"), "");
  if (!cache.ok()) return cache.error();
  m.cache = *cache;

  std::optional<bool> truncated = json_bool(j, "truncated");
  if (!truncated) return bad("truncated", "is not a boolean");
  m.truncated = *truncated;
  const Json* t = json_field(j, "truncation");
  if ((t != nullptr) != m.truncated) {
    return bad("truncation", "is present exactly when 'truncated' is true");
  }
  if (t != nullptr) {
    if (!t->is_object()) return bad("truncation", "is not an object");
    st = only_keys(*t, "truncation",
                   {"descriptions", "description_max_bytes", "instructions", "dropped"});
    if (!st.ok()) return st.error();
    std::optional<int64_t> descriptions = non_negative(*t, "descriptions");
    std::optional<bool> instructions = json_bool(*t, "instructions");
    const Json* dropped = json_field(*t, "dropped");
    if (!descriptions || !instructions || dropped == nullptr || !dropped->is_object()) {
      return bad("truncation", "needs 'descriptions', 'instructions' and 'dropped'");
    }
    m.truncation.descriptions = *descriptions;
    m.truncation.instructions = *instructions;
    if (json_field(*t, "description_max_bytes") != nullptr) {
      m.truncation.description_max_bytes = non_negative(*t, "description_max_bytes");
      if (!m.truncation.description_max_bytes) {
        return bad("truncation", "'description_max_bytes' is not a non-negative integer");
      }
    }
    st = only_keys(*dropped, "truncation.dropped",
                   {"tools", "resources", "resource_templates", "prompts"});
    if (!st.ok()) return st.error();
    for (ListKind k : kAllKinds) {
      std::optional<int64_t> n = non_negative(*dropped, list_kind_name(k));
      if (!n) return bad("truncation.dropped", std::string("needs '") + list_kind_name(k) + "'");
      m.truncation.dropped[static_cast<int>(k)] = *n;
    }
  }

  const Json* issues = json_field(j, "issues");
  if (issues == nullptr || !issues->is_array()) return bad("issues", "is not an array");
  for (const Json& i : *issues) {
    if (!i.is_object()) return bad("issues", "holds a non-object");
    st = only_keys(i, "issues", {"list", "index", "key", "problem"});
    if (!st.ok()) return st.error();
    std::optional<std::string> list = json_string(i, "list");
    std::optional<ListKind> kind = list ? list_kind_from_name(*list) : std::nullopt;
    std::optional<int64_t> index = non_negative(i, "index");
    std::optional<std::string> key = json_string(i, "key");
    std::optional<std::string> problem = json_string(i, "problem");
    if (!kind || !index || !key || !problem) {
      return bad("issues", "an issue needs 'list', 'index', 'key' and 'problem'");
    }
    m.issues.push_back(ManifestIssue{*kind, *index, std::move(*key), std::move(*problem)});
  }
  std::optional<int64_t> omitted = non_negative(j, "issues_omitted");
  if (!omitted) return bad("issues_omitted", "is not a non-negative integer");
  m.issues_omitted = *omitted;
  return m;
}

std::vector<ListKind> incomplete_lists(const Manifest& manifest) {
  std::vector<ListKind> out;
  for_each_list(manifest, [&](ListKind kind, const auto& list) {
    if (list.state == ListState::kFailed || list.kept) out.push_back(kind);
  });
  return out;
}

std::string list_kinds_text(const std::vector<ListKind>& kinds) {
  std::string out;
  for (ListKind k : kinds) {
    if (!out.empty()) out += ',';
    out += list_kind_name(k);
  }
  return out;
}

std::optional<std::vector<ListKind>> list_kinds_from_text(std::string_view text) {
  std::vector<ListKind> out;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::optional<ListKind> k = list_kind_from_name(text.substr(0, comma));
    if (!k) return std::nullopt;
    out.push_back(*k);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}

Result<EncodedManifest> encode_manifest(const Manifest& manifest) {
  Result<std::string> bytes = canonical_json(manifest_to_json(manifest));
  if (!bytes.ok()) return bytes.error();
  EncodedManifest out;
  out.etag = content_hash(*bytes);
  out.bytes = std::move(*bytes);
  return out;
}

Result<Manifest> decode_manifest(std::string_view bytes) {
  JsonParseOptions options;
  options.keep_number_literals = true;  // definitions keep their numbers as written
  Result<Json> json = parse_json(bytes, options);
  if (!json.ok()) return json.error();
  return manifest_from_json(*json);
}

}  // namespace quiver
