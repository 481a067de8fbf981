// The manifest record: the Manifest model, its JSON (written by us, read back strictly), its
// canonical bytes and ETag, and the content hashes. Building one from a listing is
// shared/manifest_builder.h; the format and its rules are described in shared/manifest.h.
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
#include "shared/mcp_definitions.h"
#include "shared/status.h"

namespace quiver {

// The value of the manifest JSON's "format" field.
inline constexpr const char* kManifestFormat = "quiver.manifest.v1";

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
