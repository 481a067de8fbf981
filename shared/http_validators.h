// HTTP validators: ETags (weak and strong, over SHA-256) and If-None-Match comparison
// (RFC 9110 §8.8, §13.1.2), plus the JSON text that bodies and validators are taken over.
#pragma once

#include <string>
#include <string_view>

#include "shared/json.h"

namespace quiver {

// ---- Validators --------------------------------------------------------------------------------

// True when an If-None-Match header value matches `etag` (weak comparison, RFC 9110 §13.1.2):
// `*`, or a comma-separated list holding the same opaque tag with or without `W/`.
bool if_none_match_matches(std::string_view header_value, std::string_view etag);

// W/"sha256-<base64url of SHA-256(bytes)>" / "sha256-…" for a body that is its own validator.
std::string weak_etag(std::string_view bytes);
std::string strong_etag(std::string_view bytes);

// JSON text of `value`; invalid UTF-8 in strings (from a peer) is replaced, never thrown on.
std::string json_text(const Json& value);

}  // namespace quiver
