// Named SQL statements: the queries of schema/sqlite-queries.sql, looked up by name.
//
// SQL lives in schema/ only, once; code names a statement instead of spelling it. The file is a
// sequence of blocks, each opened by a line `-- name: <name>` ([a-z0-9_]+) and holding exactly
// one statement ending in `;`. Call `sql_query("preferences_touch")` and prepare the text; an
// unknown name gives an empty view (the integration test prepares every statement against
// schema/sqlite.sql, so a typo in either file fails a test, not a user).
#pragma once

#include <string_view>
#include <vector>

#include "shared/status.h"

namespace quiver {

struct NamedSql {
  std::string_view name;
  std::string_view sql;  // comments included, surrounding whitespace trimmed
};

// Splits a queries file into its blocks. Fails (kInvalidArgument, naming the block) on a malformed
// or duplicate name, an empty block, or a block that does not end in `;`.
Result<std::vector<NamedSql>> parse_named_sql(std::string_view text);

// Every statement of schema/sqlite-queries.sql (empty if that asset is malformed, which a unit
// test rules out).
const std::vector<NamedSql>& sql_queries();

// The statement called `name`, or an empty view.
std::string_view sql_query(std::string_view name);
// The statement called `name` of another queries file of schema/ (e.g.
// "oauth-tokens-queries.sql"), parsed on each call (callers prepare once); an empty view when the
// asset or the name is unknown.
std::string_view sql_query_in(std::string_view asset, std::string_view name);

}  // namespace quiver
