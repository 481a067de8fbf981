// MCP definitions as a manifest holds them: Tool, Resource, ResourceTemplate, Prompt (MCP
// 2025-11-25 field names in the JSON), converted tolerantly from what a peer sent and back. The
// tolerance rules are described in shared/manifest.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

// ---- Definitions (MCP 2025-11-25 field names in the JSON) ----

struct Tool {
  std::string name;
  std::optional<std::string> title;
  std::optional<std::string> description;
  Json input_schema = Json::object();  // "inputSchema", an object
  std::optional<Json> output_schema;   // "outputSchema", an object
  std::optional<Json> annotations;     // an object (ToolAnnotations)
  std::optional<Json> execution;       // an object (ToolExecution)
  std::optional<Json> icons;           // an array (Icon[]), kept verbatim
  std::optional<Json> meta;            // "_meta", an object
  Json extra = Json::object();         // every other field, verbatim
};

struct Resource {
  std::string uri;
  std::string name;
  std::optional<std::string> title;
  std::optional<std::string> description;
  std::optional<std::string> mime_type;  // "mimeType"
  std::optional<int64_t> size;           // bytes, a non-negative integer
  std::optional<Json> annotations;       // an object (Annotations)
  std::optional<Json> icons;
  std::optional<Json> meta;
  Json extra = Json::object();
};

struct ResourceTemplate {
  std::string uri_template;  // "uriTemplate"
  std::string name;
  std::optional<std::string> title;
  std::optional<std::string> description;
  std::optional<std::string> mime_type;
  std::optional<Json> annotations;
  std::optional<Json> icons;
  std::optional<Json> meta;
  Json extra = Json::object();
};

struct PromptArgument {
  std::string name;
  std::optional<std::string> title;
  std::optional<std::string> description;
  std::optional<bool> required;
  Json extra = Json::object();
};

struct Prompt {
  std::string name;
  std::optional<std::string> title;
  std::optional<std::string> description;
  std::optional<std::vector<PromptArgument>> arguments;
  std::optional<Json> icons;
  std::optional<Json> meta;
  Json extra = Json::object();
};

// Converters. `*_from_json` is the tolerant peer reader described above: it fails (with a message
// naming the field) only when the definition cannot be kept, and appends one line per dropped
// field to `*problems` (may be null). `*_to_json` writes the MCP object back: for a definition
// whose fields all had the right types, to_json(from_json(x)) == x.
Result<Tool> tool_from_json(const Json& item, std::vector<std::string>* problems);
Result<Resource> resource_from_json(const Json& item, std::vector<std::string>* problems);
Result<ResourceTemplate> resource_template_from_json(const Json& item,
                                                     std::vector<std::string>* problems);
Result<Prompt> prompt_from_json(const Json& item, std::vector<std::string>* problems);
Json to_json(const Tool& tool);
Json to_json(const Resource& resource);
Json to_json(const ResourceTemplate& resource_template);
Json to_json(const Prompt& prompt);
Json to_json(const PromptArgument& argument);

// The key a definition is known by (preferences, the disabled set, duplicate detection).
inline const std::string& definition_key(const Tool& t) { return t.name; }
inline const std::string& definition_key(const Resource& r) { return r.uri; }
inline const std::string& definition_key(const ResourceTemplate& t) { return t.uri_template; }
inline const std::string& definition_key(const Prompt& p) { return p.name; }

}  // namespace quiver
