// The Manifest: everything one upstream MCP server lists for one (connection, principal), as
// Quiver caches, hashes and serves it.
//
// A manifest is built from a `Listing` (the raw pages a session collected) by
// `manifest_from_listing`, stored as canonical JSON (`encode_manifest`: bytes + ETag) and read
// back by `decode_manifest`. Its JSON is described by schema/manifest.schema.json; the tests
// validate what this code writes against it.
//
// Fidelity. Each definition keeps every field the server sent: the MCP fields are typed, any
// other field is kept verbatim in `extra`. The converters are tolerant of peers:
//   - a definition that is not an object, or lacks its required fields (Tool: non-empty `name`,
//     object `inputSchema`; Resource: non-empty `uri`, string `name`; ResourceTemplate:
//     non-empty `uriTemplate`, string `name`; Prompt: non-empty `name`), is dropped;
//   - an optional MCP field of the wrong type (e.g. `"title": 5`) is dropped, the definition kept;
//   - prompt arguments are tolerated the same way: one without a string `name` is dropped (the
//     prompt kept), a wrong-typed optional field of an argument is dropped;
//   - `null` in an optional MCP field means absent and is not reported (common in peers);
//   - a definition whose key repeats an earlier one in the same list (key: `name` for tools and
//     prompts, `uri` for resources, `uriTemplate` for templates — the key Quiver's preferences
//     use) is dropped: the first one wins;
//   - a definition that has no canonical form (invalid UTF-8 in a Json built without
//     `parse_json`, a NaN) is dropped.
// Each of these is reported as a `ManifestIssue` (list, index, key, what), at most
// `ManifestLimits::max_issues` of them plus a count of the rest. (Entries dropped for size are
// counted in `truncation`, not reported as issues.)
//
// States. Each of the four lists is `ok` (complete, possibly empty), `absent` (the server has
// none) or `failed` (could not load: error code and message). A failed list carries no items:
// a partial list would read as a complete one to a consumer that skips the state. When pages
// arrived before a later page failed, the failed list says how many items they held
// (`partial_items`), so they are never lost without a word.
//
// Kept lists (ADR-004: a list that failed never poses as data). When a list fails in a listing
// whose other lists succeeded, `keep_last_good_lists` puts the last good list of that kind (from
// the previous manifest listed under the same config) in its place, with its items and state,
// marked `kept` (when it was listed, and the error of the listing that failed). Without a last
// good list the list stays `failed`. `incomplete_lists` names the lists of either kind: a
// manifest with one is never fresh (shared/freshness.h).
//
// Hashes. The ETag is "sha256-" + base64url (RFC 4648 §5, unpadded) of SHA-256 over the
// manifest's canonical bytes. Each definition also has a hash of the same form over its own
// canonical bytes, taken from the definition as the upstream listed it (after the tolerant
// conversion, before any size truncation): a definition's hash changes exactly when the upstream
// changes that definition, never because other definitions made the manifest truncate it. The
// manifest JSON maps each key to its hash (`hashes`), so a changed tool definition is visible
// without comparing definitions.
//
// Size bound. The canonical JSON is at most `max_bytes` (default 256 KiB). A single definition
// over `max_definition_bytes` first has its description cut to fit, or is dropped when that is not
// enough. Then, if the manifest is still too large: (1) descriptions are cut uniformly to the
// largest common length that makes it fit — so only the longest are cut, all to the same length,
// never below `min_description_bytes` — with the server's `instructions` treated as one more
// description; a cut description ends with "…" (U+2026) on a code point boundary; (2) entries are
// dropped from the end, resources first, then resource templates, then prompts, and tools last
// (tools are what agents call). `truncated` is set and `truncation` says what happened (counts).
// If nothing is left to drop and the manifest is still over the bound (a huge serverInfo), the
// result is an error (kTooLarge).
//
// Secrets. A manifest holds only what the upstream sent in its initialize result and list pages;
// nothing from Quiver's configuration (URLs, headers, environment, credentials) is ever added.
//
// This header is an umbrella kept so that existing includes keep working; each concept has its own
// header. Include the one you need in new code:
//   shared/mcp_definitions.h   Tool, Resource, ResourceTemplate, Prompt: tolerant conversion
//   shared/manifest_record.h   the Manifest model, its JSON, bytes, ETag and hashes
//   shared/manifest_builder.h  manifest_from_listing, the size bound, kept lists
#pragma once

#include "shared/manifest_builder.h"
#include "shared/manifest_record.h"
#include "shared/mcp_definitions.h"
