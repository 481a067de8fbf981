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
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/json.h"
#include "shared/listing.h"
#include "shared/status.h"

namespace quiver {

// The value of the manifest JSON's "format" field.
inline constexpr const char* kManifestFormat = "quiver.manifest.v1";

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

// ---- The manifest ----

// serverInfo from the initialize result (MCP Implementation).
struct ServerInfo {
  std::string name;
  std::string version;
  std::optional<std::string> title;
  Json extra = Json::object();  // description, websiteUrl, icons, anything else: verbatim
};

// A list carried over from an earlier listing because this listing of it failed.
struct KeptList {
  int64_t listed_at_ms = 0;  // when the kept list itself was listed
  Error error;               // why the latest listing of it failed
};

template <typename T>
struct ManifestList {
  ListState state = ListState::kAbsent;  // kOk, kAbsent or kFailed; never kNotListed
  std::vector<T> items;                  // empty unless kOk
  std::vector<std::string> hashes;       // definition hash of items[i]; same length as items
  std::optional<Error> error;            // set exactly when kFailed
  CacheHints cache;                      // the server's hints for this list
  // kFailed only: items that arrived (on pages before the one that failed) and were not kept.
  int64_t partial_items = 0;
  // kOk or kAbsent only: this list is the last good one, kept after its latest listing failed.
  std::optional<KeptList> kept;
};

struct ManifestIssue {
  ListKind list = ListKind::kTools;
  int64_t index = 0;    // position in the upstream list (over all pages)
  std::string key;      // the definition's key when it has one (cut to 256 bytes), else ""
  std::string problem;  // what was wrong and what was done
};

struct ManifestTruncation {
  int64_t descriptions = 0;                       // descriptions cut (of the entries kept)
  std::optional<int64_t> description_max_bytes;   // the uniform cut, when one was made
  bool instructions = false;                      // the instructions were cut
  std::array<int64_t, kListKindCount> dropped{};  // entries dropped, per ListKind
};

struct Manifest {
  std::string protocol_version;
  ServerInfo server;
  Json capabilities = Json::object();  // the initialize result's capabilities, verbatim
  std::optional<std::string> instructions;
  ManifestList<Tool> tools;
  ManifestList<Resource> resources;
  ManifestList<ResourceTemplate> resource_templates;
  ManifestList<Prompt> prompts;
  CacheHints cache;  // over all lists: the shortest ttl_ms; "private" if any list is private
  bool truncated = false;
  ManifestTruncation truncation;  // meaningful when truncated
  std::vector<ManifestIssue> issues;
  int64_t issues_omitted = 0;  // issues past ManifestLimits::max_issues, only counted
};

struct ManifestLimits {
  std::size_t max_bytes = 262144;            // the whole manifest's canonical JSON
  std::size_t max_definition_bytes = 65536;  // one definition's canonical JSON
  std::size_t min_description_bytes = 64;    // the uniform cut never goes below this
  std::size_t max_issues = 32;
};

// Builds the manifest of a finished listing. Fails (kInvalidArgument) when a list was never
// attempted (kNotListed) or serverInfo lacks a string name and version, (kTooLarge) when even an
// empty manifest would exceed the bound.
Result<Manifest> manifest_from_listing(const Listing& listing, const ManifestLimits& limits = {});

// Per-list merge after a listing in which some lists failed: each failed list of `fresh` is
// replaced by the same kind's list of `last_good` (listed at `last_good_fetched_at_ms`, under the
// same config: the caller checks) when that one is `ok` or `absent` and was listed less than
// `max_age_ms` before `now_ms`; it keeps its own `kept.listed_at_ms` when it was itself kept. The
// replaced list is marked `kept` with the failure's error. Lists that succeeded are untouched; the
// manifest's combined cache hints are recomputed. Returns the kinds that were replaced.
std::vector<ListKind> keep_last_good_lists(Manifest* fresh, const Manifest& last_good,
                                           int64_t last_good_fetched_at_ms, int64_t now_ms,
                                           int64_t max_age_ms);

// After keep_last_good_lists: a kept list may come from a manifest that was itself cut to the
// bound, and the merge (the kept marks, the new lists) can then exceed it. Drops entries from the
// end of the `kept` lists (the last kind first), counting them in `truncation.dropped` as the
// first cut did, until the encoded manifest fits `max_bytes`. kTooLarge when it cannot fit even
// with the kept lists emptied.
Status fit_kept_lists(Manifest* manifest, std::size_t max_bytes);

// The lists whose latest listing failed: `failed`, or `kept` from an earlier listing.
std::vector<ListKind> incomplete_lists(const Manifest& manifest);
// "tools,prompts": list_kind_name() of each, comma-separated ("" for none), and back (nullopt on
// an unknown name).
std::string list_kinds_text(const std::vector<ListKind>& kinds);
std::optional<std::vector<ListKind>> list_kinds_from_text(std::string_view text);

// The manifest's JSON (snake_case for Quiver's fields, MCP objects as the server named them).
Json manifest_to_json(const Manifest& manifest);
// The strict reader for our own records: any field of the wrong type, an unknown field, a
// missing hash or a duplicate key is an error.
Result<Manifest> manifest_from_json(const Json& json);

struct EncodedManifest {
  std::string bytes;  // canonical JSON
  std::string etag;   // content_hash(bytes); an HTTP ETag header wraps it in quotes
};
Result<EncodedManifest> encode_manifest(const Manifest& manifest);
// parse_json + manifest_from_json.
Result<Manifest> decode_manifest(std::string_view bytes);

// "sha256-" + base64url(SHA-256(bytes)), 50 characters.
std::string content_hash(std::string_view bytes);
// content_hash of the canonical JSON of one definition.
Result<std::string> definition_hash(const Json& definition);

// "ok", "absent", "failed" <-> ListState. kNotListed has no manifest name.
std::optional<ListState> manifest_list_state_from_name(std::string_view name);
// error_code_name() in reverse.
std::optional<ErrorCode> error_code_from_name(std::string_view name);

}  // namespace quiver
