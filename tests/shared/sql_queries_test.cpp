#include "shared/sql_queries.h"

#include <string>

#include <gtest/gtest.h>

#include "shared/schema_assets.h"

namespace quiver {
namespace {

TEST(SqlQueries, TheQueriesAssetParsesAndNamesWhatTheStoreNeeds) {
  Result<std::vector<NamedSql>> parsed = parse_named_sql(schema_asset("sqlite-queries.sql"));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->size(), sql_queries().size());
  for (const char* name : {"preferences_select", "preferences_insert_seen", "preferences_touch",
                           "preferences_set_enabled", "preferences_select_disabled"}) {
    std::string_view sql = sql_query(name);
    ASSERT_FALSE(sql.empty()) << name;
    EXPECT_EQ(sql.back(), ';') << name;
    EXPECT_EQ(sql.find("-- name:"), std::string_view::npos) << name;
  }
  EXPECT_TRUE(sql_query("no_such_query").empty());
  EXPECT_FALSE(schema_asset("sqlite.sql").empty());
}

TEST(SqlQueries, BlocksRunFromNameLineToNameLine) {
  std::string text =
      "-- header comment\n\n"
      "-- name: first\n-- what it does\nSELECT 1;\n\n"
      "-- name:   second  \nUPDATE t\nSET a = :a;";
  Result<std::vector<NamedSql>> parsed = parse_named_sql(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].name, "first");
  EXPECT_EQ((*parsed)[0].sql, "-- what it does\nSELECT 1;");
  EXPECT_EQ((*parsed)[1].name, "second");
  EXPECT_EQ((*parsed)[1].sql, "UPDATE t\nSET a = :a;");

  // CRLF line ends work too.
  Result<std::vector<NamedSql>> crlf = parse_named_sql("-- name: a\r\nSELECT 1;\r\n");
  ASSERT_TRUE(crlf.ok()) << crlf.error().message;
  EXPECT_EQ((*crlf)[0].sql, "SELECT 1;");
  // A file without blocks has no statements.
  Result<std::vector<NamedSql>> none = parse_named_sql("-- nothing here\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(SqlQueries, MalformedFilesAreRejectedWithTheBlockNamed) {
  struct Case {
    const char* text;
    const char* message_part;
  };
  for (const Case& c : {
           Case{"SELECT 1;\n-- name: a\nSELECT 2;", "before the first"},
           Case{"-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;", "duplicate SQL block name 'a'"},
           Case{"-- name: Bad-Name\nSELECT 1;", "malformed SQL block name 'Bad-Name'"},
           Case{"-- name:\nSELECT 1;", "malformed SQL block name ''"},
           Case{"-- name: a\n-- only a comment\n-- name: b\nSELECT 1;", "'a' is empty"},
           Case{"-- name: a\nSELECT 1", "'a' does not end with ';'"},
           Case{"-- name: a\nSELECT 1;\n-- trailing note", "'a' does not end with ';'"},
       }) {
    Result<std::vector<NamedSql>> parsed = parse_named_sql(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(parsed.error().message.find(c.message_part), std::string::npos)
        << parsed.error().message;
  }
}

}  // namespace
}  // namespace quiver
