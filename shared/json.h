// JSON in the core: nlohmann::json, parsed without exceptions.
//
// `parse_json` is the only way bytes from outside become a `Json`: it never throws, bounds the
// input size and reports where parsing failed. Accessors in the core check types before they read
// (`json_string`, `json_object` …) so that a peer's wrong type is an error value, not an abort.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "shared/status.h"

namespace quiver {

using Json = nlohmann::json;

// Parses `text` as one JSON value. Fails with kTooLarge past `max_bytes`, kInvalidArgument on
// malformed input (the message names the byte offset).
Result<Json> parse_json(std::string_view text, std::size_t max_bytes = 16u << 20);

// Typed, non-throwing field access. Return nullopt when absent or of another type.
std::optional<std::string> json_string(const Json& object, const char* key);
std::optional<int64_t> json_int(const Json& object, const char* key);
std::optional<bool> json_bool(const Json& object, const char* key);
const Json* json_field(const Json& object, const char* key);  // any type, nullptr when absent

}  // namespace quiver
