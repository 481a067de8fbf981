// Manifest internals shared by mcp_definitions.cpp, manifest_record.cpp and manifest_builder.cpp
// (not an interface: shared/manifest.h is).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/manifest_record.h"

namespace quiver {
namespace manifest_internal {

inline constexpr std::size_t kIssueKeyMaxBytes = 256;
// Room kept while sizing the description cut for what the truncation record gains afterwards
// ("description_max_bytes", more digits in its counts).
inline constexpr std::size_t kTruncationReserve = 64;
inline constexpr const char kEllipsis[] = "\xE2\x80\xA6";  // U+2026
inline constexpr std::size_t kEllipsisBytes = 3;
inline constexpr std::size_t kHashChars = 50;  // "sha256-" + 43

inline constexpr ListKind kAllKinds[] = {ListKind::kTools, ListKind::kResources,
                                         ListKind::kResourceTemplates, ListKind::kPrompts};

// ---- Peer field reading (mcp_definitions.cpp) ----

// Reads the MCP fields of one definition, tolerating wrong-typed optional fields (dropped and
// reported) and treating null as absent.
class FieldReader {
 public:
  FieldReader(const Json& object, std::vector<std::string>* problems)
      : object_(object), problems_(problems) {}

  std::optional<std::string> string(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    wrong(key, "a string");
    return std::nullopt;
  }
  std::optional<Json> object(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_object()) return *v;
    wrong(key, "an object");
    return std::nullopt;
  }
  std::optional<Json> array(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_array()) return *v;
    wrong(key, "an array");
    return std::nullopt;
  }
  std::optional<bool> boolean(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_boolean()) return v->get<bool>();
    wrong(key, "a boolean");
    return std::nullopt;
  }
  // A byte count: a non-negative integer (1024.0 counts; it is the same JSON number).
  std::optional<int64_t> count(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned() && v->get<uint64_t>() <= uint64_t{INT64_MAX}) {
      return static_cast<int64_t>(v->get<uint64_t>());
    }
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return v->get<int64_t>();
    if (v->is_number_float() || json_number_literal_text(*v)) {
      double d = *json_number(*v);
      if (d >= 0 && d <= 9007199254740992.0 && d == static_cast<double>(static_cast<int64_t>(d))) {
        return static_cast<int64_t>(d);
      }
    }
    wrong(key, "a non-negative integer");
    return std::nullopt;
  }
  // Every field the definition type does not name, verbatim.
  Json extra(std::initializer_list<const char*> known) const {
    Json out = Json::object();
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool is_known = false;
      for (const char* k : known) is_known = is_known || it.key() == k;
      if (!is_known) out[it.key()] = it.value();
    }
    return out;
  }

 private:
  const Json* get(const char* key) const {
    const Json* v = json_field(object_, key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  void wrong(const char* key, const char* expected) {
    if (problems_ != nullptr) {
      problems_->push_back(std::string("field '") + key + "' is not " + expected +
                           "; field dropped");
    }
  }

  const Json& object_;
  std::vector<std::string>* problems_;
};

Error invalid_definition(const std::string& what);
void put(Json& j, const char* key, const std::optional<std::string>& v);
void put(Json& j, const char* key, const std::optional<Json>& v);
Json base(const Json& extra);

// ---- Small codecs (manifest_record.cpp) ----

std::string sanitized(std::string_view text, std::size_t max_bytes);
Json cache_to_json(const CacheHints& hints);
CacheHints normalized(const CacheHints& hints);
void combine(CacheHints* into, const CacheHints& hints);
Json error_to_json(const Error& e);
std::optional<ListKind> list_kind_from_name(std::string_view name);

// ---- Generic access to the four lists ----

template <typename F>
void for_each_list(Manifest& m, F&& f) {
  f(ListKind::kTools, m.tools);
  f(ListKind::kResources, m.resources);
  f(ListKind::kResourceTemplates, m.resource_templates);
  f(ListKind::kPrompts, m.prompts);
}
template <typename F>
void for_each_list(const Manifest& m, F&& f) {
  f(ListKind::kTools, m.tools);
  f(ListKind::kResources, m.resources);
  f(ListKind::kResourceTemplates, m.resource_templates);
  f(ListKind::kPrompts, m.prompts);
}

Result<Tool> from_json_as(const Json& j, std::vector<std::string>* p, const Tool*);
Result<Resource> from_json_as(const Json& j, std::vector<std::string>* p, const Resource*);
Result<ResourceTemplate> from_json_as(const Json& j, std::vector<std::string>* p,
                                      const ResourceTemplate*);
Result<Prompt> from_json_as(const Json& j, std::vector<std::string>* p, const Prompt*);

}  // namespace manifest_internal
}  // namespace quiver
