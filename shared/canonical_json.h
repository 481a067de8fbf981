// Canonical JSON: one byte sequence per JSON value, so that equal values hash equally.
//
// Manifests are compared and addressed by hash (the ETag, a hash per tool definition). A hash is
// only meaningful if the bytes do not depend on how a value was built or in which order a peer
// sent its keys. `canonical_json` writes:
//   - objects with their keys sorted by their UTF-8 bytes (unsigned), no duplicate keys;
//   - no whitespace at all;
//   - integers (int64/uint64 values) as exact decimal integers;
//   - other numbers as ECMAScript's Number.prototype.toString writes them (the shortest digits
//     that read back to the same double; 1.0 -> "1", 1e21 -> "1e+21", 1e-7 -> "1e-7", -0 -> "0"),
//     which is what RFC 8785 (JCS) prescribes and what JSON.stringify prints at the edge;
//   - strings with minimal escaping: only `"`, `\` and the controls U+0000..U+001F are escaped
//     (\b \f \n \r \t, otherwise \u00xx with lowercase hex); every other character, including
//     U+007F and U+2028/U+2029, is written as its raw UTF-8.
// Values JSON cannot carry are rejected, never repaired: invalid UTF-8 in a string or key, NaN
// and infinities, binary values, and nesting deeper than `max_depth`. The error (kInvalidArgument,
// or kTooLarge for depth) names the JSON pointer of the offending value. Rejecting rather than
// substituting U+FFFD keeps the hash honest: two different inputs never share canonical bytes.
// Values that came through `parse_json` are always valid UTF-8.
//
// Number literals (shared/json.h: numbers kept as the peer wrote them) are written verbatim.
//
// `serialize_json` writes any value as JSON text for output (API bodies, probe reports, stdio
// lines): the same forms as `canonical_json` (number literals verbatim, doubles as ECMAScript
// prints them, minimal escaping), compact or indented, and it never fails: invalid UTF-8 becomes
// U+FFFD, NaN and infinities `null` (what nlohmann's dump does). Prefer it to `Json::dump`
// wherever a value may hold upstream numbers.
//
// Call `canonical_json` to get bytes for hashing or storage; `canonical_string_size` to know how
// many bytes a string will take without writing it (the manifest size bound uses it).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "shared/json.h"
#include "shared/status.h"
#include "shared/utf8.h"

namespace quiver {

inline constexpr int kCanonicalJsonMaxDepth = 256;

// The canonical bytes of `value`, or an error naming where the value cannot be written.
Result<std::string> canonical_json(const Json& value, int max_depth = kCanonicalJsonMaxDepth);

// Appends the canonical bytes of `value` to `*out`. On error `*out` holds a partial write.
Status append_canonical_json(const Json& value, std::string* out,
                             int max_depth = kCanonicalJsonMaxDepth);

// JSON text of `value`: compact for indent < 0, else pretty-printed with `indent` spaces.
std::string serialize_json(const Json& value, int indent = -1);

// The canonical form of one number. Integers print exactly; NaN and infinities are an error.
Result<std::string> canonical_number(double value);

// How many bytes `text` takes as a canonical JSON string, quotes included. `text` is assumed to
// be valid UTF-8 (escaping depends only on single bytes below 0x80).
std::size_t canonical_string_size(std::string_view text);

}  // namespace quiver
