// The effective configuration: the config file's own settings with the runtime catalog's members,
// grants and connections (native-agent/store/catalog.h), and the file's items as catalog entries
// for seeding.
//
// Every agent of a namespace seeds its file's items by the file rule, then builds its effective
// configuration from the catalog alone (its file's items that lost to newer state are not used),
// so agents with different files agree on every connection's definition and config_hash.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/config.h"
#include "native-agent/store/catalog.h"
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

}  // namespace quiver
