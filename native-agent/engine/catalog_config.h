// The effective configuration: the config file's own settings with the runtime catalog's members,
// grants and connections (native-agent/store/catalog.h), and the file's items as catalog entries
// for seeding.
//
// Every agent of a namespace seeds its file's items by the file rule, then builds its effective
// configuration from the catalog alone (its file's items that lost to newer state are not used),
// so agents with different files agree on every connection's definition and config_hash.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/config.h"
#include "native-agent/store/catalog.h"
#include "native-agent/store/store.h"
#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

// The file's members, grants (per member and "*") and connections as catalog entries: values as
// written (secret references unresolved), meta.origin "file", meta.rev_ms = `file_rev_ms`,
// meta.file_hash = the sha256 hex of the canonical value, meta.by = "file:<origin>".
// kInvalidArgument when the file does not parse as a configuration (parse_config's lines).
Result<std::vector<CatalogEntry>> catalog_items_from_file(const ConfigSources& file,
                                                          int64_t file_rev_ms);

// The configuration with the catalog applied: the file's settings (namespace, store, listen,
// runtime, keys, webhook secrets, operators) and, for members, grants and connections, exactly
// the catalog's live entries (tombstones skipped). Parsed by parse_config with the file's
// environment, so references resolve on this agent. kInvalidArgument with parse_config's lines.
Result<AgentConfig> effective_config(const ConfigSources& file,
                                     const std::vector<CatalogEntry>& catalog);

// Whether `value` is a valid catalog value of `kind` for `key`: its shape (catalog.h), and, for a
// connection, that it parses as a server with its settings and holds no literal secret (env and
// header values, credentials: references only). kInvalidArgument naming the field.
Status validate_catalog_value(CatalogKind kind, std::string_view key, const Json& value);

// ---- the agent's steps (Agent::create, the store check) ----

// The whole catalog (every kind, every page, tombstones included) and the versions read BEFORE
// it: a change made during the read shows as moved versions at the next look.
struct CatalogSnapshot {
  std::vector<CatalogEntry> entries;
  CatalogVersions versions;
};
Result<CatalogSnapshot> read_catalog(ManifestStore& store);

// The effective configuration of `file` over the store's catalog as it is now.
struct CatalogConfig {
  AgentConfig config;
  CatalogVersions versions;  // the ones it was built from
  // The entries it was built from: the agent's copy of the catalog, put back into a namespace the
  // store lost (CatalogWriteMode::kRestore).
  std::vector<CatalogEntry> entries;
};
Result<CatalogConfig> build_catalog_config(ManifestStore& store, const ConfigSources& file);

// Seeds the file's items with CatalogWriteMode::kFileSeed, and tombstones (file_hash "") for the
// entries of origin file the file no longer names, all at revision `file_rev_ms`; then builds the
// effective configuration. `log` gets one line per item the file lost to newer state ("config
// file is behind the store for connection X (file revision R, store S): the store's definition
// is used") and one per item the file changed.
Result<CatalogConfig> seed_catalog_from_file(ManifestStore& store, const ConfigSources& file,
                                             int64_t file_rev_ms,
                                             const std::function<void(const std::string&)>& log);

// `into` (the file's configuration, with the caller's overrides such as --listen) with the
// catalog's members, operators, grants and connections of `effective`, its redactor (the
// catalog's connections' secrets too) and its catalog warnings.
void use_catalog_config(AgentConfig effective, AgentConfig* into);

// Whether two configurations differ in what the engine runs on: the connections (ids, names,
// config hashes, settings), who is granted a per-member connection, the operators. Members and
// grants of shared connections are not in it: readers check grants live in the store, which the
// admin API writes at once.
bool engine_config_differs(const AgentConfig& a, const AgentConfig& b);

}  // namespace quiver
