// Ties schema/redis-keys.md to RedisKeys: every key the builder makes is documented, with its
// type and fields, and every documented key is made by the builder.
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/identity.h"
#include "tests/support/markdown_table.h"

namespace quiver {
namespace {

using testing::table_cells;
using testing::trim;

std::string read_doc() { return testing::read_source_file("schema/redis-keys.md"); }

std::vector<std::string> backticked(const std::string& cell) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t open = cell.find('`', pos);
    if (open == std::string::npos) break;
    const std::size_t close = cell.find('`', open + 1);
    if (close == std::string::npos) break;
    out.push_back(cell.substr(open + 1, close - open - 1));
    pos = close + 1;
  }
  return out;
}

struct DocKey {
  std::string type;
  std::vector<std::string> fields;
};

// The first table after the line `## Keys`, by pattern. Columns are found by header name.
std::map<std::string, DocKey> documented_keys(const std::string& doc) {
  std::map<std::string, DocKey> out;
  std::istringstream lines(doc);
  std::string line;
  while (std::getline(lines, line) && trim(line) != "## Keys") {
  }
  std::vector<std::string> header;
  while (std::getline(lines, line)) {
    header = table_cells(line);
    if (!header.empty()) break;
  }
  int key_col = -1, type_col = -1, fields_col = -1;
  for (int i = 0; i < static_cast<int>(header.size()); ++i) {
    if (header[i] == "key") key_col = i;
    if (header[i] == "type") type_col = i;
    if (header[i] == "fields") fields_col = i;
  }
  EXPECT_GE(key_col, 0) << "no `key` column in the ## Keys table";
  EXPECT_GE(type_col, 0) << "no `type` column in the ## Keys table";
  EXPECT_GE(fields_col, 0) << "no `fields` column in the ## Keys table";
  if (key_col < 0 || type_col < 0 || fields_col < 0) return out;
  std::getline(lines, line);  // the | --- | row
  while (std::getline(lines, line)) {
    const std::vector<std::string> row = table_cells(line);
    if (row.empty()) break;
    EXPECT_EQ(row.size(), header.size()) << "cell count: " << line;
    if (row.size() != header.size()) continue;
    const std::vector<std::string> key = backticked(row[key_col]);
    EXPECT_EQ(key.size(), 1u) << "the key cell holds one `pattern`: " << line;
    if (key.size() != 1) continue;
    DocKey d;
    d.type = row[type_col].substr(0, row[type_col].find(' '));
    d.fields = backticked(row[fields_col]);
    EXPECT_TRUE(out.emplace(key[0], d).second) << "documented twice: " << key[0];
  }
  return out;
}

// The builder's key for `kind`, with its variable parts replaced by the document's placeholders.
std::string built_pattern(KeyKind kind) {
  Result<RedisKeys> keys = RedisKeys::create("ns");  // "quiver:{ns}:" is the document's spelling
  EXPECT_TRUE(keys.ok());
  const std::string digest(64, 'f');
  Result<std::string> key = keys->key(kind, "CID", *Principal::member("PRINCIPAL"), digest, "kind");
  EXPECT_TRUE(key.ok()) << key_kind_name(kind);
  std::string pattern = key.ok() ? *key : std::string();
  auto replace = [&](const std::string& from, const std::string& to) {
    const std::size_t at = pattern.find(from);
    if (at != std::string::npos) pattern.replace(at, from.size(), to);
    EXPECT_EQ(pattern.find(from), std::string::npos) << pattern;
  };
  replace("CID", "<cid>");
  replace("member/PRINCIPAL", "<principal>");
  replace(digest, "<sha256>");
  if (key_has_catalog_kind(kind)) replace(":kind", ":<kind>");
  return pattern;
}

TEST(RedisKeysDoc, EveryBuiltKeyIsDocumentedAndEveryDocumentedKeyIsBuilt) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty()) << "cannot read schema/redis-keys.md under " << QUIVER_SOURCE_DIR;
  const std::map<std::string, DocKey> documented = documented_keys(doc);
  ASSERT_FALSE(documented.empty()) << "no key table under `## Keys`";

  std::set<std::string> built;
  for (int i = 0; i < kKeyKindCount; ++i) {
    const auto kind = static_cast<KeyKind>(i);
    const std::string pattern = built_pattern(kind);
    built.insert(pattern);
    auto it = documented.find(pattern);
    if (it == documented.end()) {
      ADD_FAILURE() << pattern << " is built but not documented in schema/redis-keys.md";
      continue;
    }
    EXPECT_EQ(it->second.type, key_redis_type(kind)) << pattern;
    const std::vector<std::string>& fields = key_fields(kind);
    const std::set<std::string> doc_fields(it->second.fields.begin(), it->second.fields.end());
    EXPECT_EQ(doc_fields, std::set<std::string>(fields.begin(), fields.end())) << pattern;
    EXPECT_EQ(doc_fields.size(), it->second.fields.size()) << pattern << ": a field listed twice";
  }
  for (const auto& [pattern, doc_key] : documented) {
    EXPECT_TRUE(built.count(pattern)) << pattern << " is documented but RedisKeys never builds it";
  }
}

TEST(RedisKeysDoc, EveryFieldIsDescribed) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty());
  for (int i = 0; i < kKeyKindCount; ++i) {
    for (const std::string& field : key_fields(static_cast<KeyKind>(i))) {
      EXPECT_NE(doc.find("| `" + field + "` |"), std::string::npos)
          << "field " << field << " of " << key_kind_name(static_cast<KeyKind>(i))
          << " has no row in a fields table";
    }
  }
}

TEST(RedisKeysDoc, NamesTheConsumerGroupAndTheCharsets) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty());
  EXPECT_NE(doc.find(std::string("`") + kRevalidateConsumerGroup + "`"), std::string::npos);
  EXPECT_NE(doc.find("`[A-Za-z0-9._-]{1,128}`"), std::string::npos);    // connection id
  EXPECT_NE(doc.find("`[A-Za-z0-9._@+-]{1,128}`"), std::string::npos);  // member id
  EXPECT_NE(doc.find("`[A-Za-z0-9._-]{1,64}`"), std::string::npos);     // namespace
}

}  // namespace
}  // namespace quiver
