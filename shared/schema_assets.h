// The files of schema/ that code executes (Lua scripts, SQL DDL), compiled in.
//
// schema/ is the contract between the agent and the edge; this table is how the core reaches it
// without file I/O. Look an asset up by its path relative to schema/, e.g. "lua/lease_acquire.lua"
// or "sqlite.sql". A missing asset is a build error waiting to happen: tests walk the table.
#pragma once

#include <string_view>
#include <vector>

namespace quiver {

struct SchemaAsset {
  std::string_view path;  // relative to schema/
  std::string_view text;
  std::string_view sha1;  // hex SHA-1 of `text`, computed at build time: a script's EVALSHA name
};

const std::vector<SchemaAsset>& schema_assets();

// nullptr-free lookup: returns an empty view when `path` is not an asset.
std::string_view schema_asset(std::string_view path);

// The SHA-1 (hex) of the asset whose text is exactly `text`; empty when there is none.
std::string_view schema_asset_sha1_of(std::string_view text);

}  // namespace quiver
