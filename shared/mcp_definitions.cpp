#include "shared/mcp_definitions.h"

#include <type_traits>
#include <utility>

#include "shared/manifest_internal.h"

namespace quiver {

using namespace manifest_internal;  // this file implements part of manifest.h

namespace manifest_internal {

Error invalid_definition(const std::string& what) { return Error(ErrorCode::kInvalidReply, what); }

void put(Json& j, const char* key, const std::optional<std::string>& v) {
  if (v) j[key] = *v;
}
void put(Json& j, const char* key, const std::optional<Json>& v) {
  if (v) j[key] = *v;
}
Json base(const Json& extra) { return extra.is_object() ? extra : Json::object(); }

}  // namespace manifest_internal

namespace {

// A required string field: present and a string (non-empty when `non_empty`).
std::optional<std::string> required_string(const Json& item, const char* key, bool non_empty) {
  const Json* v = json_field(item, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  std::string s = v->get<std::string>();
  if (non_empty && s.empty()) return std::nullopt;
  return s;
}

Error missing(const char* key, bool non_empty) {
  return invalid_definition(std::string("'") + key + "' is missing" + (non_empty ? ", empty" : "") +
                            " or not a string");
}

// What every definition writes alike: its unknown fields, "name", "title" and "description".
template <typename D>
Json named_json(const D& d) {
  Json j = base(d.extra);
  j["name"] = d.name;
  put(j, "title", d.title);
  put(j, "description", d.description);
  return j;
}

// A prompt argument, tolerated like a definition: without a string name it is dropped, a
// wrong-typed optional field is dropped and reported with the argument's position.
Result<PromptArgument> prompt_argument_from_json(const Json& item, std::size_t index,
                                                 std::vector<std::string>* problems) {
  const std::string where = "argument " + std::to_string(index) + ": ";
  if (!item.is_object()) return invalid_definition(where + "not an object");
  std::optional<std::string> name = required_string(item, "name", false);
  if (!name) return invalid_definition(where + missing("name", false).message);
  std::vector<std::string> own;
  FieldReader r(item, &own);
  PromptArgument a;
  a.name = std::move(*name);
  a.title = r.string("title");
  a.description = r.string("description");
  a.required = r.boolean("required");
  a.extra = r.extra({"name", "title", "description", "required"});
  if (problems != nullptr) {
    for (std::string& p : own) problems->push_back(where + p);
  }
  return a;
}

}  // namespace

// ---- Definitions ----

Result<Tool> tool_from_json(const Json& item, std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> name = required_string(item, "name", true);
  if (!name) return missing("name", true);
  const Json* input = json_field(item, "inputSchema");
  if (input == nullptr || !input->is_object()) {
    return invalid_definition("'inputSchema' is missing or not an object");
  }
  FieldReader r(item, problems);
  Tool t;
  t.name = std::move(*name);
  t.title = r.string("title");
  t.description = r.string("description");
  t.input_schema = *input;
  t.output_schema = r.object("outputSchema");
  t.annotations = r.object("annotations");
  t.execution = r.object("execution");
  t.icons = r.array("icons");
  t.meta = r.object("_meta");
  t.extra = r.extra({"name", "title", "description", "inputSchema", "outputSchema", "annotations",
                     "execution", "icons", "_meta"});
  return t;
}

Json to_json(const Tool& t) {
  Json j = named_json(t);
  j["inputSchema"] = t.input_schema;
  put(j, "outputSchema", t.output_schema);
  put(j, "annotations", t.annotations);
  put(j, "execution", t.execution);
  put(j, "icons", t.icons);
  put(j, "_meta", t.meta);
  return j;
}

namespace {

// A resource and a resource template have the same fields but for their key ("uri",
// "uriTemplate") and a resource's size, and are read and written alike.
template <typename R>
constexpr bool kSized = std::is_same_v<R, Resource>;

template <typename R>
Result<R> resource_like_from_json(const Json& item, const char* key_field, std::string R::*key,
                                  std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> k = required_string(item, key_field, true);
  if (!k) return missing(key_field, true);
  std::optional<std::string> name = required_string(item, "name", false);
  if (!name) return missing("name", false);
  FieldReader r(item, problems);
  R res;
  res.*key = std::move(*k);
  res.name = std::move(*name);
  res.title = r.string("title");
  res.description = r.string("description");
  res.mime_type = r.string("mimeType");
  if constexpr (kSized<R>) res.size = r.count("size");
  res.annotations = r.object("annotations");
  res.icons = r.array("icons");
  res.meta = r.object("_meta");
  res.extra = r.extra({key_field, "name", "title", "description", "mimeType",
                       kSized<R> ? "size" : key_field, "annotations", "icons", "_meta"});
  return res;
}

template <typename R>
Json resource_like_to_json(const R& r, const char* key_field, const std::string& key) {
  Json j = named_json(r);
  j[key_field] = key;
  put(j, "mimeType", r.mime_type);
  if constexpr (kSized<R>) {
    if (r.size) j["size"] = *r.size;
  }
  put(j, "annotations", r.annotations);
  put(j, "icons", r.icons);
  put(j, "_meta", r.meta);
  return j;
}

}  // namespace

Result<Resource> resource_from_json(const Json& item, std::vector<std::string>* problems) {
  return resource_like_from_json(item, "uri", &Resource::uri, problems);
}

Json to_json(const Resource& r) { return resource_like_to_json(r, "uri", r.uri); }

Result<ResourceTemplate> resource_template_from_json(const Json& item,
                                                     std::vector<std::string>* problems) {
  return resource_like_from_json(item, "uriTemplate", &ResourceTemplate::uri_template, problems);
}

Json to_json(const ResourceTemplate& t) {
  return resource_like_to_json(t, "uriTemplate", t.uri_template);
}

Result<Prompt> prompt_from_json(const Json& item, std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> name = required_string(item, "name", true);
  if (!name) return missing("name", true);
  FieldReader r(item, problems);
  Prompt p;
  p.name = std::move(*name);
  p.title = r.string("title");
  p.description = r.string("description");
  if (std::optional<Json> args = r.array("arguments")) {
    p.arguments.emplace();
    for (std::size_t i = 0; i < args->size(); ++i) {
      Result<PromptArgument> a = prompt_argument_from_json((*args)[i], i, problems);
      if (a.ok()) {
        p.arguments->push_back(std::move(*a));
      } else if (problems != nullptr) {
        problems->push_back(a.error().message + "; argument dropped");
      }
    }
  }
  p.icons = r.array("icons");
  p.meta = r.object("_meta");
  p.extra = r.extra({"name", "title", "description", "arguments", "icons", "_meta"});
  return p;
}

Json to_json(const PromptArgument& a) {
  Json j = named_json(a);
  if (a.required) j["required"] = *a.required;
  return j;
}

Json to_json(const Prompt& p) {
  Json j = named_json(p);
  if (p.arguments) {
    Json args = Json::array();
    for (const PromptArgument& a : *p.arguments) args.push_back(to_json(a));
    j["arguments"] = std::move(args);
  }
  put(j, "icons", p.icons);
  put(j, "_meta", p.meta);
  return j;
}

}  // namespace quiver
