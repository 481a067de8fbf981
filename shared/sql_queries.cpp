#include "shared/sql_queries.h"

#include <string>

#include "shared/schema_assets.h"

namespace quiver {

namespace {

constexpr std::string_view kNamePrefix = "-- name:";
constexpr std::string_view kSpace = " \t\r\n";

std::string_view trim(std::string_view s) {
  std::size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  std::size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// True when everything in `text` is blank or `--` comment lines.
bool only_comments(std::string_view text) {
  while (!text.empty()) {
    std::size_t eol = text.find('\n');
    std::string_view line = trim(text.substr(0, eol));
    if (!line.empty() && line.substr(0, 2) != "--") return false;
    if (eol == std::string_view::npos) break;
    text.remove_prefix(eol + 1);
  }
  return true;
}

Status close_block(std::vector<NamedSql>& out, std::string_view name, std::string_view body) {
  std::string_view sql = trim(body);
  if (only_comments(sql)) {
    return Error(ErrorCode::kInvalidArgument, "SQL block '" + std::string(name) + "' is empty");
  }
  if (sql.back() != ';') {
    return Error(ErrorCode::kInvalidArgument,
                 "SQL block '" + std::string(name) + "' does not end with ';'");
  }
  out.push_back(NamedSql{name, sql});
  return Status::Ok();
}

}  // namespace

Result<std::vector<NamedSql>> parse_named_sql(std::string_view text) {
  std::vector<NamedSql> out;
  std::string_view name;  // empty: still in the file's header
  std::size_t body_begin = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    std::size_t line_end = eol == std::string_view::npos ? text.size() : eol;
    std::string_view line = text.substr(pos, line_end - pos);
    if (line.substr(0, kNamePrefix.size()) == kNamePrefix) {
      std::string_view next = trim(line.substr(kNamePrefix.size()));
      if (!valid_name(next)) {
        return Error(ErrorCode::kInvalidArgument,
                     "malformed SQL block name '" + std::string(next) + "'");
      }
      bool duplicate = next == name;  // the block still open, or one already closed
      for (const NamedSql& seen : out) duplicate = duplicate || seen.name == next;
      if (duplicate) {
        return Error(ErrorCode::kInvalidArgument,
                     "duplicate SQL block name '" + std::string(next) + "'");
      }
      std::string_view body = text.substr(body_begin, pos - body_begin);
      if (name.empty()) {
        if (!only_comments(body)) {
          return Error(ErrorCode::kInvalidArgument, "SQL before the first '-- name:' line");
        }
      } else if (Status s = close_block(out, name, body); !s.ok()) {
        return s.error();
      }
      name = next;
      body_begin = line_end == text.size() ? line_end : line_end + 1;
    }
    if (eol == std::string_view::npos) break;
    pos = eol + 1;
  }
  std::string_view body = text.substr(body_begin);
  if (name.empty()) {
    if (!only_comments(body)) {
      return Error(ErrorCode::kInvalidArgument, "SQL before the first '-- name:' line");
    }
  } else if (Status s = close_block(out, name, body); !s.ok()) {
    return s.error();
  }
  return out;
}

const std::vector<NamedSql>& sql_queries() {
  static const std::vector<NamedSql> queries = [] {
    Result<std::vector<NamedSql>> parsed = parse_named_sql(schema_asset("sqlite-queries.sql"));
    return parsed.ok() ? std::move(parsed).value() : std::vector<NamedSql>{};
  }();
  return queries;
}

std::string_view sql_query(std::string_view name) {
  for (const NamedSql& q : sql_queries()) {
    if (q.name == name) return q.sql;
  }
  return {};
}

std::string_view sql_query_in(std::string_view asset, std::string_view name) {
  if (asset == "sqlite-queries.sql") return sql_query(name);
  // The asset's text is a compiled-in constant: the views parse_named_sql returns stay valid.
  Result<std::vector<NamedSql>> parsed = parse_named_sql(schema_asset(asset));
  if (!parsed.ok()) return {};
  for (const NamedSql& q : *parsed) {
    if (q.name == name) return q.sql;
  }
  return {};
}

}  // namespace quiver
