// JSON in the core: nlohmann::json, parsed without exceptions.
//
// `parse_json` is the only way bytes from outside become a `Json`: it never throws, bounds the
// input size and the nesting depth, and reports where parsing failed. Every input goes through it
// (upstream messages over stdio and HTTP/SSE, API and webhook bodies, caller tokens, manifests
// read back from a store, the configuration file), so one limit protects them all.
//
// Why a depth limit. nlohmann's parser and destructor are iterative, but copying, comparing,
// dumping and our own walkers (canonical JSON, manifest conversion) recurse once per level: a
// 400 KB reply nested 200,000 deep overflows any thread's stack. `parse_json` counts depth while
// it builds the value (a SAX pass, so brackets inside strings do not count) and stops at the
// first level past `max_depth`: nothing deeper than the limit is ever built. The default,
// `kMaxJsonDepth` = 128 (the same as serde_json's), is far above what MCP needs (a tool's schema
// sits four levels down in a reply; real schemas are rarely 20 deep) and far below what a 2 MiB
// thread stack or the wasm stack can walk.
//
// Numbers kept as written. A JSON number is text of any length; a double holds 17 digits and
// an int64/uint64 19-20. With `keep_number_literals`, a number whose text the core would not
// write back identically (an integer beyond 64 bits such as 123456789012345678901234567890,
// `1.0`, `1E-7`, `1e400`, `0.1000000000000000055511151231257827`) is held as a *number
// literal*: a binary value of subtype `kNumberLiteralSubtype` whose bytes are the number's text
// exactly as it arrived (the parser validated its grammar). Every other number is an ordinary
// integer or double whose canonical form (shared/canonical_json.h) is its original text, so
// every number that came through the parser is written back byte for byte by `canonical_json`
// and `serialize_json`. JSON text never yields a binary value otherwise, so a literal cannot be
// confused with a string or an object. Use `json_number` to read any number as a double.
// The literals are enabled where definitions enter (upstream JSON-RPC, manifests read back);
// the configuration and the API bodies keep plain numbers.
//
// `-0` is a literal too (nlohmann's parser reports it as the integer 0, without its text), as are
// `-0.0`, `0e5` and `-0E-3` (doubles whose canonical text differs).
//
// Accessors in the core check types before they read (`json_string`, `json_object` …) so that
// a peer's wrong type is an error value, not an abort.
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

// Nesting bound of every JSON value Quiver parses: a document whose outermost value is an object
// or array has depth 1; `[[1]]` has depth 2; scalars have depth 0.
inline constexpr std::size_t kMaxJsonDepth = 128;
inline constexpr std::size_t kMaxJsonBytes = 16u << 20;

struct JsonParseOptions {
  std::size_t max_bytes = kMaxJsonBytes;
  std::size_t max_depth = kMaxJsonDepth;
  bool allow_comments = false;        // `//` and `/* */` (the configuration file only)
  bool keep_number_literals = false;  // see "Numbers kept as written"
};

// The binary subtype that marks a number literal ('N').
inline constexpr std::uint64_t kNumberLiteralSubtype = 0x4e;

// A number literal holding `text` (which must be a JSON number: not checked here).
Json json_number_literal(std::string_view text);
// The text of a number literal, or nullopt when `value` is not one.
std::optional<std::string_view> json_number_literal_text(const Json& value);
// Any JSON number (integer, double or literal) as a double (a literal past the double range
// reads as +-infinity); nullopt for every other type.
std::optional<double> json_number(const Json& value);

// Parses `text` as one JSON value. Fails with kTooLarge past `max_bytes`, kInvalidArgument on
// malformed input (the message names the line and column, never the text around them: it may
// be part of a secret) or on nesting deeper than `max_depth` ("nested deeper than 128 levels").
Result<Json> parse_json(std::string_view text, const JsonParseOptions& options);
Result<Json> parse_json(std::string_view text, std::size_t max_bytes = kMaxJsonBytes);

// Typed, non-throwing field access. Return nullopt when absent or of another type.
std::optional<std::string> json_string(const Json& object, const char* key);
std::optional<int64_t> json_int(const Json& object, const char* key);
std::optional<bool> json_bool(const Json& object, const char* key);
const Json* json_field(const Json& object, const char* key);  // any type, nullptr when absent
// The same for a value the caller owns: move out of it instead of copying.
Json* json_field(Json& object, const char* key);

}  // namespace quiver
