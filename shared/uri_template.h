// Does a URI expand from a URI template (RFC 6570)? Used where a disabled resource template must
// hide the reads of the resources it describes (shared/mcp_endpoint.h: resources/read of a URI
// that expands from a template the caller disabled is refused as not found, exactly as a disabled
// resource is).
//
// Levels 1 and 2 exactly: `{var}` (simple string expansion: unreserved characters and
// pct-encoded triplets; `,` too, which separates a list's values), `{+var}` (reserved expansion:
// any character) and `{#var}` (fragment expansion: nothing when undefined, else `#` and any
// characters). Level 3 and 4 expressions (`{.x}`, `{/x}`, `{;x}`, `{?x}`, `{&x}`, several
// variables, modifiers) are matched as "any characters": a template is used here to HIDE what it
// describes, so matching more than it strictly expands to is the safe side. Literals compare as
// written (no decoding). A template with an unclosed `{` matches nothing but itself verbatim.
//
// Linear in the URI's length per template part (the set of positions reachable after each part,
// no backtracking), so a hostile URI or template costs O(parts x length).
#pragma once

#include <string_view>

#include "shared/preferences.h"

namespace quiver {

bool uri_matches_template(std::string_view uri_template, std::string_view uri);

// False when `overlay` hides a read of `uri`: the resource itself is disabled, or a disabled
// resource template matches it (uri_matches_template).
bool resource_read_visible(const DisabledOverlay& overlay, std::string_view uri);

}  // namespace quiver
