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

// ---- layout v2 ----------------------------------------------------------------------------------

// The table of "## Keys in layout v2" that maps v1 keys to v2 keys: v1 pattern -> v2 pattern, or
// "" where the v2 cell holds no key (`—`).
std::map<std::string, std::string> documented_v2_keys(const std::string& doc) {
  std::map<std::string, std::string> out;
  std::istringstream lines(doc);
  std::string line;
  while (std::getline(lines, line) && trim(line) != "## Keys in layout v2") {
  }
  // The first table whose header has both columns (the tag table comes before it).
  int v1_col = -1, v2_col = -1;
  std::size_t columns = 0;
  while (std::getline(lines, line) && (v1_col < 0 || v2_col < 0)) {
    if (trim(line).rfind("## ", 0) == 0) break;  // the next section: no such table
    const std::vector<std::string> header = table_cells(line);
    v1_col = v2_col = -1;
    for (int i = 0; i < static_cast<int>(header.size()); ++i) {
      if (header[i] == "v1 key") v1_col = i;
      if (header[i] == "v2 key") v2_col = i;
    }
    columns = header.size();
  }
  EXPECT_GE(v1_col, 0) << "no table with `v1 key` and `v2 key` columns under ## Keys in layout v2";
  if (v1_col < 0 || v2_col < 0) return out;
  // `line` is the | --- | row now.
  while (std::getline(lines, line)) {
    const std::vector<std::string> row = table_cells(line);
    if (row.empty()) break;
    EXPECT_EQ(row.size(), columns) << "cell count: " << line;
    if (row.size() != columns) continue;
    const std::vector<std::string> v1 = backticked(row[v1_col]);
    const std::vector<std::string> v2 = backticked(row[v2_col]);
    EXPECT_EQ(v1.size(), 1u) << "the v1 key cell holds one `pattern`: " << line;
    EXPECT_TRUE(v2.size() == 1 || (v2.empty() && row[v2_col] == "—"))
        << "the v2 key cell holds one `pattern` or `—`: " << line;
    if (v1.size() != 1 || v2.size() > 1) continue;
    EXPECT_TRUE(out.emplace(v1[0], v2.empty() ? std::string() : v2[0]).second)
        << "documented twice: " << v1[0];
  }
  return out;
}

// A built key with its variable parts replaced by the v2 table's placeholders.
std::string placeholders(std::string key, const std::string& digest) {
  auto replace = [&](const std::string& from, const std::string& to) {
    const std::size_t at = key.find(from);
    if (at != std::string::npos) key.replace(at, from.size(), to);
    EXPECT_EQ(key.find(from), std::string::npos) << key;
  };
  replace("CID", "<cid>");
  replace("member/MEMBERID", "member/<id>");
  replace("MEMBERID", "<id>");
  replace(digest, "<sha256>");
  replace(":KIND", ":<kind>");
  replace(":s:7}", ":s:<k>}");
  return key;
}

TEST(RedisKeysDoc, EveryV2SpellingIsTheBuildersAndEveryV1KeyHasItsV2Row) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty());
  const std::map<std::string, std::string> documented = documented_v2_keys(doc);
  ASSERT_FALSE(documented.empty()) << "no v1 -> v2 table under `## Keys in layout v2`";
  Result<RedisKeys> v1 = RedisKeys::create("ns");
  Result<RedisKeys> v2 = RedisKeys::create("ns", KeyLayout::kV2, 16);
  ASSERT_TRUE(v1.ok() && v2.ok());
  const std::string digest(64, 'e');
  // Catalog kinds are lowercase: the placeholder is replaced after building.
  std::set<std::string> seen;
  for (int i = 0; i < kKeyKindCount; ++i) {
    const auto kind = static_cast<KeyKind>(i);
    std::vector<std::optional<Principal>> principals;
    if (!key_has_principal(kind)) {
      principals.push_back(std::nullopt);
    } else {
      if (kind != KeyKind::kGrants && kind != KeyKind::kMemberVersion) {
        principals.push_back(Principal::shared());
      }
      principals.push_back(*Principal::member("MEMBERID"));
    }
    for (const std::optional<Principal>& p : principals) {
      Result<std::string> old_key = v1->key(kind, "CID", p, digest, "kind");
      ASSERT_TRUE(old_key.ok()) << key_kind_name(kind);
      std::string v1_pattern = *old_key;
      if (key_has_catalog_kind(kind)) v1_pattern.replace(v1_pattern.find(":kind"), 5, ":KIND");
      v1_pattern = placeholders(v1_pattern, digest);
      Result<std::string> new_key = v2->key(kind, "CID", p, digest, "kind", 7);
      EXPECT_EQ(new_key.ok(), key_exists_in_v2(kind)) << v1_pattern;
      std::string v2_pattern;
      if (new_key.ok()) {
        v2_pattern = *new_key;
        if (key_has_catalog_kind(kind)) v2_pattern.replace(v2_pattern.find(":kind"), 5, ":KIND");
        v2_pattern = placeholders(v2_pattern, digest);
      }
      seen.insert(v1_pattern);
      auto it = documented.find(v1_pattern);
      if (it == documented.end()) {
        // Only a namespace-wide record may go unlisted (it keeps its v1 spelling).
        EXPECT_EQ(v2_pattern, v1_pattern)
            << v1_pattern << " becomes " << (v2_pattern.empty() ? "nothing" : v2_pattern)
            << " in layout v2 but has no row in the v2 table of schema/redis-keys.md";
        continue;
      }
      EXPECT_EQ(it->second, v2_pattern) << "the v2 key of " << v1_pattern;
    }
  }
  for (const auto& [v1_pattern, v2_pattern] : documented) {
    EXPECT_TRUE(seen.count(v1_pattern))
        << v1_pattern << " (v2 table) is not a key RedisKeys builds in layout v1";
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
