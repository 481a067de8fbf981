// The runtime catalog's store methods (native-agent/store/catalog.h, store.h "runtime catalog")
// against both stores: RedisStore on a real redis-server, SqliteStore on a real SQLite file.
// Entries, tombstones and paging; the file rule applied atomically (kFileSeed), by both stores
// exactly as catalog_seed_applies decides it; the versions; the audit log; per-member grants.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/catalog.h"
#include "native-agent/store/redis_store.h"
#include "native-agent/store/sqlite_store.h"
#include "native-agent/store/store.h"
#include "shared/sha256.h"
#include "tests/support/edge_acl.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/markdown_table.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::RedisConnection;
using quiver::testing::RedisServer;
using quiver::testing::run_argv;
using quiver::testing::TempDir;

constexpr int64_t kT0 = 1'780'000'000'000;

// A file hash: the sha256 hex of `text`.
std::string fh(const std::string& text) { return sha256_hex(text); }

CatalogEntry entry(CatalogKind kind, const std::string& key, std::optional<Json> value,
                   const std::string& origin, int64_t rev_ms, const std::string& file_hash,
                   const std::string& by = "file:/etc/quiver.json") {
  CatalogEntry e;
  e.kind = kind;
  e.key = key;
  e.value = std::move(value);
  e.meta.origin = origin;
  e.meta.rev_ms = rev_ms;
  e.meta.file_hash = file_hash;
  e.meta.by = by;
  return e;
}

// A file item (or, with value nullopt and file_hash "", its removal) for kFileSeed.
CatalogEntry file_item(const std::string& key, const std::string& file_hash, int64_t rev_ms,
                       CatalogKind kind = CatalogKind::kMember) {
  std::optional<Json> value;
  if (!file_hash.empty()) value = Json{{"operator", false}};
  return entry(kind, key, value, kCatalogOriginFile, rev_ms, file_hash);
}

CatalogEntry api_item(const std::string& key, std::optional<Json> value, int64_t rev_ms,
                      CatalogKind kind = CatalogKind::kMember) {
  return entry(kind, key, std::move(value), kCatalogOriginApi, rev_ms, "", "operator:root");
}

// ---- the file rule as a function ----------------------------------------------------------------

// One case of the file rule: what is stored (nothing, or (file_hash, rev_ms)), what the file says.
struct RuleCase {
  const char* name;
  bool stored;
  std::string stored_hash;
  int64_t stored_rev;
  std::string file_hash;
  int64_t file_rev;
  bool applies;
};

std::vector<RuleCase> rule_cases() {
  const std::string a = fh("a"), b = fh("b");
  return {
      {"new item", false, "", 0, a, 100, true},
      {"removal of what was never stored", false, "", 0, "", 100, false},
      {"unchanged file", true, a, 100, a, 200, false},
      {"changed file, newer", true, a, 100, b, 101, true},
      {"changed file, same revision", true, a, 100, b, 100, false},
      {"changed file, older", true, a, 100, b, 50, false},
      {"removal, newer", true, a, 100, "", 101, true},
      {"removal, older", true, a, 100, "", 99, false},
      {"removal of a tombstone", true, "", 100, "", 200, false},
      {"api entry, older file", true, "", 500, a, 400, false},
      {"api entry, newer file", true, "", 500, a, 600, true},
      {"api entry, removal", true, "", 500, "", 600, false},
      {"re-added after removal", true, "", 200, a, 300, true},
  };
}

TEST(CatalogSeedApplies, TheFileRule) {
  for (const RuleCase& c : rule_cases()) {
    std::optional<CatalogEntry> stored;
    if (c.stored) {
      stored = c.stored_hash.empty() ? api_item("alice", Json::object(), c.stored_rev)
                                     : file_item("alice", c.stored_hash, c.stored_rev);
    }
    EXPECT_EQ(catalog_seed_applies(stored, c.file_hash, c.file_rev), c.applies) << c.name;
  }
}

TEST(CatalogSeedApplies, KindNames) {
  for (CatalogKind k : {CatalogKind::kMember, CatalogKind::kGrant, CatalogKind::kConnection}) {
    EXPECT_EQ(parse_catalog_kind(catalog_kind_name(k)), k);
  }
  EXPECT_FALSE(parse_catalog_kind("members"));
  EXPECT_FALSE(parse_catalog_kind(""));
}

// ---- both stores -------------------------------------------------------------------------------

// RedisStore on one redis-server, on a six-node Redis Cluster (redis+cluster://), SqliteStore.
enum class Kind { kRedis, kRedisCluster, kSqlite };

// One server for this file's tests, stopped at exit; each test starts from FLUSHALL.
RedisServer& catalog_redis() {
  static RedisServer server;
  return server;
}

std::string raw(RedisServer& server, const std::vector<std::string>& argv) {
  RedisConnection c(server.connect());
  if (c == nullptr) return "(no connection)";
  RespValue v = run_argv(c.get(), argv);
  return v.type == RespValue::Type::kInteger ? std::to_string(v.integer) : v.str;
}

class StoreCatalog : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kRedis) {
      ASSERT_TRUE(catalog_redis().ok()) << catalog_redis().error();
      (void)raw(catalog_redis(), {"FLUSHALL"});
    } else if (GetParam() == Kind::kRedisCluster) {
      ASSERT_TRUE(testing::shared_test_cluster().ok()) << testing::shared_test_cluster().error();
      ASSERT_TRUE(testing::shared_test_cluster().flush_all());
    }
    store_ = open();
    ASSERT_NE(store_, nullptr);
  }

  bool redis() const { return GetParam() != Kind::kSqlite; }

  // A store on this test's data; another call gives a second agent on the same data.
  std::unique_ptr<ManifestStore> open(int64_t max_audit = static_cast<int64_t>(kMaxAuditEntries)) {
    if (redis()) {
      RedisStoreOptions o;
      o.redis.host = "127.0.0.1";
      if (GetParam() == Kind::kRedisCluster) {
        o.redis.cluster = true;
        o.redis.port = testing::shared_test_cluster().ports()[0];
        o.redis.seeds = {{o.redis.host, o.redis.port}};
      } else {
        o.redis.port = catalog_redis().port();
      }
      o.max_audit_entries = max_audit;
      o.now_ms = [] { return kT0; };
      auto s = RedisStore::create(o);
      EXPECT_TRUE(s.ok()) << s.error().message;
      return s.ok() ? std::move(s).value() : nullptr;
    }
    SqliteStoreOptions o;
    o.path = dir_.path("quiver.db");
    o.now_ms = [] { return kT0; };
    o.max_audit_entries = max_audit;
    auto s = SqliteStore::open(o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(s).value() : nullptr;
  }

  CatalogWriteResult write(const CatalogEntry& e, CatalogWriteMode mode = CatalogWriteMode::kAlways,
                           ManifestStore* s = nullptr) {
    Result<CatalogWriteResult> r = (s ? s : store_.get())->catalog_write(e, mode);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? std::move(r).value() : CatalogWriteResult{};
  }
  bool seed(const CatalogEntry& e) { return write(e, CatalogWriteMode::kFileSeed).applied; }

  std::optional<CatalogEntry> read(CatalogKind kind, const std::string& key) {
    Result<std::optional<CatalogEntry>> r = store_->catalog_read(kind, key);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : std::nullopt;
  }
  CatalogVersions versions(ManifestStore* s = nullptr) {
    Result<CatalogVersions> r = (s ? s : store_.get())->catalog_versions();
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : CatalogVersions{};
  }
  // Every key of `kind` through pages of `limit`.
  std::vector<std::string> list_all(CatalogKind kind, std::size_t limit, int* pages) {
    std::vector<std::string> keys;
    std::string cursor;
    *pages = 0;
    do {
      Result<CatalogPage> page = store_->catalog_list(kind, cursor, limit);
      EXPECT_TRUE(page.ok()) << page.error().message;
      if (!page.ok()) break;
      EXPECT_LE(page->entries.size(), limit);
      for (const CatalogEntry& e : page->entries) keys.push_back(e.key);
      cursor = page->next_cursor;
      ++*pages;
    } while (!cursor.empty() && *pages < 1000);
    return keys;
  }

  TempDir dir_;
  std::unique_ptr<ManifestStore> store_;
};

void expect_same(const CatalogEntry& got, const CatalogEntry& want) {
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.value, want.value);
  EXPECT_EQ(got.meta.origin, want.meta.origin);
  EXPECT_EQ(got.meta.rev_ms, want.meta.rev_ms);
  EXPECT_EQ(got.meta.file_hash, want.meta.file_hash);
  EXPECT_EQ(got.meta.by, want.meta.by);
}

TEST_P(StoreCatalog, WritesReadsAndKeepsATombstone) {
  EXPECT_FALSE(read(CatalogKind::kMember, "alice"));
  const Json conn = {{"name", "GitHub"},
                     {"server", {{"url", "https://example.com/mcp"}, {"n", 12345678901234}}},
                     {"settings", {{"credential_mode", "shared"}}}};
  CatalogEntry c = api_item("gh", conn, kT0 - 5, CatalogKind::kConnection);
  CatalogWriteResult w = write(c);
  EXPECT_TRUE(w.applied);
  ASSERT_TRUE(w.current);
  expect_same(*w.current, c);
  EXPECT_EQ(w.current->meta.updated_at_ms, kT0);  // the writer's clock
  std::optional<CatalogEntry> got = read(CatalogKind::kConnection, "gh");
  ASSERT_TRUE(got);
  expect_same(*got, c);
  EXPECT_EQ(got->meta.updated_at_ms, kT0);
  // Kinds are apart: the same key of another kind is another entry.
  EXPECT_FALSE(read(CatalogKind::kMember, "gh"));

  // A delete is a tombstone that keeps its revision.
  CatalogEntry gone = api_item("gh", std::nullopt, kT0 + 1, CatalogKind::kConnection);
  EXPECT_TRUE(write(gone).applied);
  got = read(CatalogKind::kConnection, "gh");
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->value);
  EXPECT_EQ(got->meta.rev_ms, kT0 + 1);

  // "*" is a grant key only.
  EXPECT_TRUE(
      write(api_item("*", Json{{"connections", {"gh"}}}, kT0, CatalogKind::kGrant)).applied);
  EXPECT_EQ(read(CatalogKind::kGrant, "*")->value, (Json{{"connections", {"gh"}}}));
}

// An agent's copy put back into a namespace the store lost: written only where nothing is stored
// (a tombstone counts), meta as it was.
TEST_P(StoreCatalog, ARestoreWritesOnlyWhereNothingIsStored) {
  const CatalogEntry mine = api_item("alice", Json{{"operator", true}}, kT0 - 10);
  const CatalogVersions v0 = versions();
  CatalogWriteResult r = write(mine, CatalogWriteMode::kRestore);
  EXPECT_TRUE(r.applied);
  std::optional<CatalogEntry> got = read(CatalogKind::kMember, "alice");
  ASSERT_TRUE(got);
  expect_same(*got, mine);
  EXPECT_EQ(versions().member, v0.member + 1);

  // Written since (another agent's copy, an operator's change): kept.
  const CatalogEntry newer = api_item("bob", Json{{"operator", false}}, kT0 + 5);
  ASSERT_TRUE(write(newer).applied);
  r = write(api_item("bob", Json{{"operator", true}}, kT0 - 10), CatalogWriteMode::kRestore);
  EXPECT_FALSE(r.applied);
  ASSERT_TRUE(r.current);
  expect_same(*r.current, newer);
  ASSERT_TRUE(write(api_item("carol", std::nullopt, kT0)).applied);  // a tombstone
  EXPECT_FALSE(
      write(api_item("carol", Json::object(), kT0 - 10), CatalogWriteMode::kRestore).applied);
  EXPECT_FALSE(read(CatalogKind::kMember, "carol")->value);
}

TEST_P(StoreCatalog, RefusesBadKeysMetaAndOversizedValues) {
  auto refused = [&](const CatalogEntry& e, const char* why) {
    for (CatalogWriteMode mode : {CatalogWriteMode::kAlways, CatalogWriteMode::kFileSeed}) {
      Result<CatalogWriteResult> r = store_->catalog_write(e, mode);
      ASSERT_FALSE(r.ok()) << why;
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << why;
    }
  };
  const Json v = Json{{"operator", true}};
  refused(api_item("*", v, 1), "* is not a member id");
  refused(api_item("al ice", v, 1), "space in a member id");
  refused(api_item("", v, 1), "empty key");
  refused(api_item(std::string(129, 'a'), v, 1), "key too long");
  refused(api_item("a@b", v, 1, CatalogKind::kConnection), "@ in a connection id");
  refused(api_item("*", v, 1, CatalogKind::kConnection), "* is not a connection id");
  CatalogEntry e = api_item("alice", v, 1);
  e.meta.origin = "cli";
  refused(e, "unknown origin");
  e = api_item("alice", v, -1);
  refused(e, "negative revision");
  e = api_item("alice", v, 1);
  e.meta.file_hash = "abc";
  refused(e, "short file hash");
  e.meta.file_hash = std::string(64, 'A');
  refused(e, "uppercase file hash");
  e = api_item("alice", v, 1);
  e.meta.by = "";
  refused(e, "no author");
  // The largest value fits, one byte more does not (canonical JSON: {"x":"..."} is 8 + n bytes).
  Json big = {{"x", std::string(kMaxCatalogValueBytes - 8, 'y')}};
  EXPECT_TRUE(write(api_item("big", big, 1, CatalogKind::kConnection)).applied);
  big["x"] = std::string(kMaxCatalogValueBytes - 7, 'y');
  refused(api_item("bigger", big, 1, CatalogKind::kConnection), "value over 64 KiB");
  EXPECT_FALSE(read(CatalogKind::kConnection, "bigger"));
  EXPECT_EQ(versions().connection, 1);
  // Reads check keys too.
  EXPECT_EQ(store_->catalog_read(CatalogKind::kMember, "a b").error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->catalog_list(CatalogKind::kMember, "", 0).error().code,
            ErrorCode::kInvalidArgument);
}

TEST_P(StoreCatalog, ListsInKeyOrderPageByPage) {
  // Keys in byte order, written out of order, with tombstones and another kind around.
  std::vector<std::string> keys;
  for (int i = 0; i < 23; ++i) keys.push_back("m" + std::to_string(100 + i));
  for (const char* k : {"A", "Z.1", "_x", "a", "a-b", "a.b", "a@b", "b+c", "m1"}) keys.push_back(k);
  std::vector<std::string> shuffled = keys;
  std::reverse(shuffled.begin(), shuffled.end());
  std::rotate(shuffled.begin(), shuffled.begin() + 7, shuffled.end());
  for (const std::string& k : shuffled) {
    const bool tomb = k.size() == 4 && k.back() == '5';
    ASSERT_TRUE(
        write(api_item(k, tomb ? std::nullopt : std::optional<Json>(Json::object()), 1)).applied);
  }
  ASSERT_TRUE(write(api_item("zz", Json::object(), 1, CatalogKind::kGrant)).applied);
  std::sort(keys.begin(), keys.end());
  for (std::size_t limit : {1u, 7u, 32u, 100u}) {
    int pages = 0;
    EXPECT_EQ(list_all(CatalogKind::kMember, limit, &pages), keys) << limit;
    EXPECT_EQ(pages, static_cast<int>((keys.size() + limit - 1) / limit)) << limit;
  }
  // From a cursor: just after it, whether or not it is a key.
  Result<CatalogPage> page = store_->catalog_list(CatalogKind::kMember, "m105", 3);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 3u);
  EXPECT_EQ(page->entries[0].key, "m106");
  EXPECT_FALSE(page->entries[0].value == std::nullopt);
  EXPECT_EQ(page->next_cursor, "m108");
  page = store_->catalog_list(CatalogKind::kMember, "m1145", 2);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->entries[0].key, "m115");
  EXPECT_FALSE(page->entries[0].value);  // a tombstone is listed
  page = store_->catalog_list(CatalogKind::kMember, "m999", 5);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->entries.empty());
  EXPECT_EQ(page->next_cursor, "");
  page = store_->catalog_list(CatalogKind::kConnection, "", 5);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->entries.empty());
}

// Both stores decide kFileSeed exactly as catalog_seed_applies does, case by case.
TEST_P(StoreCatalog, TheFileRuleInTheStoreAgreesWithTheFunction) {
  int n = 0;
  for (const RuleCase& c : rule_cases()) {
    const std::string key = "k" + std::to_string(n++);
    std::optional<CatalogEntry> before;
    if (c.stored) {
      CatalogEntry s = c.stored_hash.empty() ? api_item(key, Json::object(), c.stored_rev)
                                             : file_item(key, c.stored_hash, c.stored_rev);
      if (c.stored_hash.empty() && std::string(c.name).find("tombstone") != std::string::npos) {
        s.value = std::nullopt;
      }
      ASSERT_TRUE(write(s).applied);
      before = read(CatalogKind::kMember, key);
    }
    const CatalogVersions v0 = versions();
    CatalogEntry item = file_item(key, c.file_hash, c.file_rev);
    ASSERT_EQ(catalog_seed_applies(before, c.file_hash, c.file_rev), c.applies) << c.name;
    CatalogWriteResult r = write(item, CatalogWriteMode::kFileSeed);
    EXPECT_EQ(r.applied, c.applies) << c.name;
    std::optional<CatalogEntry> after = read(CatalogKind::kMember, key);
    EXPECT_EQ(versions().member, v0.member + (c.applies ? 1 : 0)) << c.name;
    if (c.applies) {
      ASSERT_TRUE(after) << c.name;
      expect_same(*after, item);
      ASSERT_TRUE(r.current);
      expect_same(*r.current, item);
    } else if (before) {
      ASSERT_TRUE(after && r.current) << c.name;
      expect_same(*after, *before);
      expect_same(*r.current, *before);
    } else {
      EXPECT_FALSE(after) << c.name;
      EXPECT_FALSE(r.current) << c.name;
    }
  }
}

TEST_P(StoreCatalog, ARollingDeployNeverRevertsAndAnEditedFileWins) {
  const std::string v1 = fh("v1"), v2 = fh("v2");
  EXPECT_TRUE(seed(file_item("alice", v1, 1'000)));
  EXPECT_FALSE(seed(file_item("alice", v1, 1'000)));  // the same file on the next agent
  EXPECT_FALSE(seed(file_item("alice", v1, 5'000)));  // touched, not changed
  // An operator's change through the API.
  EXPECT_TRUE(write(api_item("alice", Json{{"operator", true}}, 2'000)).applied);
  EXPECT_FALSE(seed(file_item("alice", v1, 1'500)));  // an agent on the old file
  EXPECT_EQ(read(CatalogKind::kMember, "alice")->value, (Json{{"operator", true}}));
  // An edited file deployed later wins; the agent still on the older one is behind.
  EXPECT_TRUE(seed(file_item("alice", v2, 3'000)));
  EXPECT_FALSE(seed(file_item("alice", v1, 2'500)));
  // The file drops alice: a tombstone, which an older file cannot undo.
  EXPECT_TRUE(seed(file_item("alice", "", 4'000)));
  EXPECT_FALSE(read(CatalogKind::kMember, "alice")->value);
  EXPECT_FALSE(seed(file_item("alice", v2, 3'000)));
  EXPECT_FALSE(seed(file_item("alice", "", 4'500)));
  EXPECT_EQ(versions().member, 4);
}

// Two agents seeding at once through their own connections: every write either applied on what
// it read or refused, never interleaved — the final entry is the newest revision offered, and the
// versions count exactly the writes reported applied.
TEST_P(StoreCatalog, TwoAgentsSeedingAtOnceEndInOneState) {
  std::unique_ptr<ManifestStore> other = open();
  ASSERT_NE(other, nullptr);
  constexpr int kKeys = 8;
  constexpr int kRounds = 30;
  std::atomic<int> applied{0};
  std::atomic<int> failures{0};
  auto agent = [&](ManifestStore* s, const std::string& file) {
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kKeys; ++k) {
        // Both agents offer every revision; each file has its own definition.
        CatalogEntry e =
            file_item("m" + std::to_string(k), fh(file + std::to_string(round)), 1'000 + round);
        Result<CatalogWriteResult> r = s->catalog_write(e, CatalogWriteMode::kFileSeed);
        if (!r.ok()) {
          ++failures;
        } else if (r->applied) {
          ++applied;
        }
      }
    }
  };
  std::thread a(agent, store_.get(), std::string("a"));
  std::thread b(agent, other.get(), std::string("b"));
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
  // Per key and revision exactly one of the two applied (the other saw the same revision).
  EXPECT_EQ(applied.load(), kKeys * kRounds);
  EXPECT_EQ(versions().member, kKeys * kRounds);
  EXPECT_EQ(versions(other.get()).member, kKeys * kRounds);
  for (int k = 0; k < kKeys; ++k) {
    std::optional<CatalogEntry> e = read(CatalogKind::kMember, "m" + std::to_string(k));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->meta.rev_ms, 1'000 + kRounds - 1);
    const std::string last = std::to_string(kRounds - 1);
    EXPECT_TRUE(e->meta.file_hash == fh("a" + last) || e->meta.file_hash == fh("b" + last));
  }
}

TEST_P(StoreCatalog, VersionsCountAppliedWritesPerKind) {
  EXPECT_EQ(versions(), CatalogVersions{});
  EXPECT_TRUE(write(api_item("alice", Json::object(), 1)).applied);
  EXPECT_FALSE(seed(file_item("alice", fh("x"), 0)));  // refused: nothing moves
  EXPECT_TRUE(
      write(api_item("*", Json{{"connections", Json::array()}}, 1, CatalogKind::kGrant)).applied);
  EXPECT_TRUE(write(api_item("c", Json::object(), 1, CatalogKind::kConnection)).applied);
  EXPECT_TRUE(write(api_item("c", std::nullopt, 2, CatalogKind::kConnection)).applied);
  CatalogVersions want;
  want.member = 1;
  want.grant = 1;
  want.connection = 2;
  EXPECT_EQ(versions(), want);
  std::unique_ptr<ManifestStore> other = open();
  EXPECT_EQ(versions(other.get()), want);  // the store's, not the process'
}

TEST_P(StoreCatalog, TheAuditLogReadsNewestFirstInPages) {
  for (int i = 0; i < 5; ++i) {
    AuditEntry e;
    e.actor = "operator:root";
    e.action = i % 2 == 0 ? "member.put" : "grants.put";
    e.target = "m" + std::to_string(i);
    e.detail = {{"i", i}, {"connections", {"a", "b"}}};
    if (i == 4) e.at_ms = 42;  // given: kept
    ASSERT_TRUE(store_->append_audit(e).ok());
  }
  std::vector<std::string> targets;
  std::set<std::string> ids;
  std::string cursor;
  int pages = 0;
  do {
    Result<AuditPage> page = store_->read_audit(cursor, 2);
    ASSERT_TRUE(page.ok()) << page.error().message;
    for (const AuditEntry& e : page->entries) {
      targets.push_back(e.target);
      ids.insert(e.id);
      EXPECT_FALSE(e.id.empty());
      EXPECT_EQ(e.actor, "operator:root");
      EXPECT_EQ(e.at_ms, e.target == "m4" ? 42 : kT0);
      EXPECT_EQ(e.detail["connections"], (Json{"a", "b"}));
    }
    cursor = page->next_cursor;
    ++pages;
  } while (!cursor.empty() && pages < 10);
  EXPECT_EQ(targets, (std::vector<std::string>{"m4", "m3", "m2", "m1", "m0"}));
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(pages, 3);

  AuditEntry bad;
  bad.actor = "operator:root";
  bad.action = "member.put";
  bad.detail = Json::array();
  EXPECT_EQ(store_->append_audit(bad).error().code, ErrorCode::kInvalidArgument);
  bad.detail = Json::object();
  bad.actor = "";
  EXPECT_EQ(store_->append_audit(bad).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->read_audit("", 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->read_audit("not an id", 1).error().code, ErrorCode::kInvalidArgument);
}

TEST_P(StoreCatalog, TheAuditLogIsBounded) {
  constexpr int64_t kMax = 10;
  constexpr int kAppended = 250;
  std::unique_ptr<ManifestStore> store = open(kMax);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < kAppended; ++i) {
    AuditEntry e;
    e.actor = "key:ops";
    e.action = "member.put";
    e.target = "m" + std::to_string(i);
    ASSERT_TRUE(store->append_audit(e).ok());
  }
  Result<AuditPage> all = store->read_audit("", kMaxCatalogPage);
  ASSERT_TRUE(all.ok());
  ASSERT_FALSE(all->entries.empty());
  EXPECT_EQ(all->entries.front().target, "m" + std::to_string(kAppended - 1));
  if (redis()) {
    // XADD MAXLEN ~ trims whole stream nodes (stream-node-max-entries, 100 by default).
    EXPECT_GE(all->entries.size(), static_cast<std::size_t>(kMax));
    EXPECT_LE(all->entries.size(), static_cast<std::size_t>(kMax + 100));
  } else {
    EXPECT_EQ(all->entries.size(), static_cast<std::size_t>(kMax));
  }
}

TEST_P(StoreCatalog, SetMemberGrantsChangesOneMemberAndItsGrantees) {
  Result<int64_t> e0 = store_->read_epoch();
  ASSERT_TRUE(e0.ok());
  auto set = [&](const char* member, const std::set<std::string>& cids) {
    Result<bool> r = store_->set_member_grants(member, cids);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() && *r;
  };
  auto grantees = [&](const char* cid) {
    Result<std::set<std::string>> r = store_->read_grantees(cid);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : std::set<std::string>{"(error)"};
  };
  EXPECT_TRUE(set("alice", {"a", "b"}));
  EXPECT_EQ(*store_->read_epoch(), *e0 + 1);
  EXPECT_FALSE(set("alice", {"b", "a"}));  // unchanged: nothing written, no epoch bump
  EXPECT_EQ(*store_->read_epoch(), *e0 + 1);
  EXPECT_EQ(*store_->read_grants("alice"), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(grantees("a"), (std::set<std::string>{"alice"}));
  EXPECT_TRUE(set("bob@example.com", {"a"}));
  EXPECT_EQ(grantees("a"), (std::set<std::string>{"alice", "bob@example.com"}));
  EXPECT_TRUE(set("alice", {"b", "c"}));
  EXPECT_EQ(grantees("a"), (std::set<std::string>{"bob@example.com"}));
  EXPECT_EQ(grantees("b"), (std::set<std::string>{"alice"}));
  EXPECT_EQ(grantees("c"), (std::set<std::string>{"alice"}));
  EXPECT_TRUE(set("alice", {}));
  EXPECT_TRUE(store_->read_grants("alice")->empty());
  EXPECT_TRUE(grantees("b").empty());
  EXPECT_TRUE(grantees("nobody-has-it").empty());
  EXPECT_EQ(*store_->read_epoch(), *e0 + 4);
  // sync_grants and set_member_grants keep one state.
  ASSERT_TRUE(store_->sync_grants({{"carol", {"a"}}, {"bob@example.com", {"a"}}}).ok());
  EXPECT_EQ(grantees("a"), (std::set<std::string>{"bob@example.com", "carol"}));
  EXPECT_TRUE(set("carol", {"b"}));
  EXPECT_EQ(grantees("a"), (std::set<std::string>{"bob@example.com"}));
  EXPECT_EQ(grantees("b"), (std::set<std::string>{"carol"}));
  Result<GrantSync> again = store_->sync_grants({{"carol", {"b"}}, {"bob@example.com", {"a"}}});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->changed_members.empty());

  EXPECT_EQ(store_->set_member_grants("a b", {"a"}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->set_member_grants("alice", {"a b"}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->read_grantees("a b").error().code, ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(BothStores, StoreCatalog,
                         ::testing::Values(Kind::kRedis, Kind::kRedisCluster, Kind::kSqlite),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kRedis          ? "Redis"
                                  : info.param == Kind::kRedisCluster ? "RedisCluster"
                                                                      : "Sqlite";
                         });

// Redis gone: every catalog method says the store is unavailable (and nothing crashes).
TEST(StoreCatalogRedis, RedisDownIsStoreUnavailable) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  RedisStoreOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = server.port();
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 500;
  o.reconnect_backoff_initial_ms = 10;
  o.reconnect_backoff_max_ms = 50;
  auto made = RedisStore::create(o);
  ASSERT_TRUE(made.ok());
  RedisStore& store = **made;
  ASSERT_TRUE(
      store.catalog_write(api_item("alice", Json::object(), 1), CatalogWriteMode::kAlways).ok());
  server.stop();
  auto unavailable = [](const Status& s, const char* what) {
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable) << what << ": " << s.error().message;
  };
  for (CatalogWriteMode mode : {CatalogWriteMode::kAlways, CatalogWriteMode::kFileSeed}) {
    Result<CatalogWriteResult> w = store.catalog_write(file_item("bob", fh("x"), 5), mode);
    unavailable(w.ok() ? Status::Ok() : Status(w.error()), "catalog_write");
  }
  auto status_of = [](const auto& r) { return r.ok() ? Status::Ok() : Status(r.error()); };
  unavailable(status_of(store.catalog_read(CatalogKind::kMember, "alice")), "catalog_read");
  unavailable(status_of(store.catalog_list(CatalogKind::kMember, "", 10)), "catalog_list");
  unavailable(status_of(store.catalog_versions()), "catalog_versions");
  AuditEntry a;
  a.actor = "key:ops";
  a.action = "member.put";
  unavailable(store.append_audit(a), "append_audit");
  unavailable(status_of(store.read_audit("", 10)), "read_audit");
  unavailable(status_of(store.set_member_grants("alice", {"a"})), "set_member_grants");
  unavailable(status_of(store.read_grantees("a")), "read_grantees");
}

// schema/redis-acl-edge.txt on a real server: the edge's user reads every key its scripts read
// and neither reads nor writes the runtime catalog or the audit log.
TEST(StoreCatalogRedis, TheEdgesUserCannotReachTheCatalogOrTheAudit) {
  RedisServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  RedisConnection edge = quiver::testing::connect_as_edge(server, "acl");
  ASSERT_NE(edge, nullptr);
  const std::string p = "quiver:{acl}:";
  auto allowed = [&](const std::vector<std::string>& argv) {
    RespValue v = run_argv(edge.get(), argv);
    EXPECT_FALSE(v.is_error()) << argv[0] << " " << argv[1] << ": " << v.str;
  };
  auto refused = [&](const std::vector<std::string>& argv) {
    RespValue v = run_argv(edge.get(), argv);
    EXPECT_TRUE(v.is_error() && (v.str.find("NOPERM") != std::string::npos ||
                                 v.str.find("can't access") != std::string::npos))
        << argv[0] << " " << argv[1] << ": " << v.str;
  };
  // What discovery_read.lua, revalidate_enqueue.lua and webhook_refresh.lua read.
  allowed({"GET", p + "namespace"});
  allowed({"SMEMBERS", p + "grants:member/alice"});
  allowed({"HGETALL", p + "conn:gh"});
  allowed({"SMEMBERS", p + "disabled:gh:shared"});
  allowed({"HGETALL", p + "manifest:gh:shared"});
  allowed({"EXISTS", p + "lease:gh:shared"});
  allowed({"GET", p + "invalidated:gh:shared"});
  allowed({"GET", p + "marked:gh"});
  allowed({"EXISTS", p + "grantees:gh"});
  // What webhook_refresh.lua writes: the marks (a principal's, a connection's as a whole).
  allowed({"SET", p + "invalidated:gh:shared", "1"});
  allowed({"SET", p + "marked:gh", "1"});
  refused({"DEL", p + "marked:gh"});
  allowed({"GET", p + "epoch"});
  // The versions: read in one MGET by a conditional read, moved by a webhook's marks (INCR).
  allowed({"MGET", p + "namespace", p + "epoch", p + "member-version:member/alice",
           p + "conn-version:gh", p + "lease:gh:shared"});
  allowed({"INCR", p + "conn-version:gh"});
  allowed({"INCR", p + "member-version:member/alice"});
  refused({"DEL", p + "conn-version:gh"});
  allowed({"SMEMBERS", p + "grantees:gh"});
  allowed({"HGET", p + "conn:gh", "credential_mode"});
  // The bodies the records name, in one MGET after the script; read only.
  allowed({"MGET", p + "body:" + std::string(64, 'a'), p + "body:" + std::string(64, 'b')});
  refused({"SET", p + "body:" + std::string(64, 'a'), "{}"});
  // The catalog and the audit log: not even read, not from a script either.
  refused({"HGETALL", p + "catalog:member"});
  refused({"HGET", p + "catalog:grant", "*"});
  refused({"HGET", p + "catalog:versions", "grant"});
  refused({"EXISTS", p + "catalog:connection:keys"});
  refused({"EXISTS", p + "audit"});
  refused({"SET", p + "catalog:member", "x"});
  refused({"EVAL_RO", "return redis.call('HGETALL', KEYS[1])", "1", p + "catalog:member"});
  refused({"EVAL", "return redis.call('GET', '" + p + "audit')", "0"});
}

}  // namespace
}  // namespace quiver
