// schema/sqlite.sql and schema/sqlite-queries.sql against a real SQLite file in WAL mode: the DDL
// applies (twice), every named statement prepares, preference rows produced by reconcile() make
// the round trip, and the CHECK constraints keep bad rows out.
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include "native-agent/store/sqlite_db.h"
#include "native-agent/store/sqlite_store.h"
#include "shared/preferences.h"
#include "shared/schema_assets.h"
#include "shared/sql_queries.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::TempDir;

constexpr int64_t kT0 = 1'780'000'000'000;
constexpr int64_t kMinute = 60'000;

class Db {
 public:
  explicit Db(const std::string& file) {
    if (sqlite3_open(file.c_str(), &db_) != SQLITE_OK) {
      error_ = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
    }
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& error() const { return error_; }

  // Runs `sql` (any number of statements); returns the SQLite result code, error text in error().
  int exec(const std::string& sql) {
    char* message = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
    error_ = message != nullptr ? message : "";
    sqlite3_free(message);
    return rc;
  }

  int apply_schema() {
    std::string ddl(schema_asset("sqlite.sql"));
    int rc = exec("BEGIN IMMEDIATE;\n" + ddl + "\nCOMMIT;");
    if (rc != SQLITE_OK) (void)exec("ROLLBACK");
    return rc;
  }

  std::string text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
  std::string error_;
};

// A prepared named statement from sqlite-queries.sql, bound by parameter name.
class Query {
 public:
  Query(Db& db, std::string_view name) : db_(db) {
    std::string_view sql = sql_query(name);
    EXPECT_FALSE(sql.empty()) << name;
    rc_ = sqlite3_prepare_v2(db.get(), sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    EXPECT_EQ(rc_, SQLITE_OK) << name << ": " << sqlite3_errmsg(db.get());
  }
  ~Query() { sqlite3_finalize(stmt_); }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind(const char* param, const std::string& value) {
    EXPECT_EQ(sqlite3_bind_text(stmt_, index(param), value.data(), static_cast<int>(value.size()),
                                SQLITE_TRANSIENT),
              SQLITE_OK);
    return *this;
  }
  Query& bind(const char* param, int64_t value) {
    EXPECT_EQ(sqlite3_bind_int64(stmt_, index(param), value), SQLITE_OK);
    return *this;
  }
  int step() { return sqlite3_step(stmt_); }
  // Runs a statement that returns no rows; gives the number of rows it changed.
  int run() {
    EXPECT_EQ(step(), SQLITE_DONE) << sqlite3_errmsg(db_.get());
    return sqlite3_changes(db_.get());
  }
  sqlite3_stmt* stmt() const { return stmt_; }

 private:
  int index(const char* param) {
    int i = sqlite3_bind_parameter_index(stmt_, param);
    EXPECT_GT(i, 0) << "no parameter " << param;
    return i;
  }
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

std::string column(sqlite3_stmt* stmt, int i) {
  const unsigned char* t = sqlite3_column_text(stmt, i);
  return t != nullptr ? reinterpret_cast<const char*>(t) : "";
}

// The store side of reconciliation: both lists, one transaction.
void write(Db& db, const Reconciliation& r) {
  ASSERT_EQ(db.exec("BEGIN IMMEDIATE"), SQLITE_OK) << db.error();
  // Both queries name the row by its key and stamp it seen; a new row also says whether it is on.
  auto bind_seen = [](Query& q, const PreferenceRow& row) -> Query& {
    return q.bind(":resource_id", row.resource_id)
        .bind(":principal", row.principal.str())
        .bind(":capability_type", std::string(capability_type_name(row.capability_type)))
        .bind(":capability_key", row.capability_key)
        .bind(":seen_at", row.last_seen_at);
  };
  for (const PreferenceRow& row : r.rows_to_insert) {
    Query q(db, "preferences_insert_seen");
    bind_seen(q, row).bind(":enabled", int64_t{row.enabled ? 1 : 0});
    EXPECT_EQ(q.run(), 1);
  }
  for (const PreferenceRow& row : r.rows_to_update) {
    Query q(db, "preferences_touch");
    bind_seen(q, row);
    EXPECT_EQ(q.run(), 1);
  }
  ASSERT_EQ(db.exec("COMMIT"), SQLITE_OK) << db.error();
}

std::vector<PreferenceRow> read(Db& db, const std::string& resource_id) {
  std::vector<PreferenceRow> rows;
  Query q(db, "preferences_select");
  q.bind(":resource_id", resource_id).bind(":principal", std::string("shared"));
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    PreferenceRow row;
    row.resource_id = column(q.stmt(), 0);
    std::optional<CapabilityType> type = parse_capability_type(column(q.stmt(), 1));
    EXPECT_TRUE(type.has_value()) << column(q.stmt(), 1);
    row.capability_type = type.value_or(CapabilityType::kTool);
    row.capability_key = column(q.stmt(), 2);
    row.enabled = sqlite3_column_int64(q.stmt(), 3) != 0;
    row.first_seen_at = sqlite3_column_int64(q.stmt(), 4);
    row.last_seen_at = sqlite3_column_int64(q.stmt(), 5);
    row.toggled_at = sqlite3_column_int64(q.stmt(), 6);
    rows.push_back(std::move(row));
  }
  EXPECT_EQ(rc, SQLITE_DONE);
  return rows;
}

void set_enabled(Db& db, const std::string& resource_id, CapabilityType type,
                 const std::string& key, bool enabled, int64_t toggled_at = 0) {
  Query q(db, "preferences_set_enabled");
  q.bind(":resource_id", resource_id)
      .bind(":principal", std::string("shared"))
      .bind(":toggled_at", toggled_at)
      .bind(":capability_type", std::string(capability_type_name(type)))
      .bind(":capability_key", key)
      .bind(":enabled", int64_t{enabled ? 1 : 0});
  EXPECT_EQ(q.run(), 1);
}

DisabledOverlay read_overlay(Db& db, const std::string& resource_id) {
  DisabledOverlay overlay;
  Query q(db, "preferences_select_disabled");
  q.bind(":resource_id", resource_id).bind(":principal", std::string("shared"));
  while (q.step() == SQLITE_ROW) overlay.insert(column(q.stmt(), 0));
  return overlay;
}

Listing tools_listing(const std::vector<std::string>& tools) {
  Listing l;
  for (int i = 0; i < kListKindCount; ++i) l.lists[i].state = ListState::kOk;
  for (const std::string& t : tools) l.list(ListKind::kTools).items.push_back(Json{{"name", t}});
  l.list(ListKind::kResources).items.push_back(Json{{"uri", "file:///notes.md"}});
  l.list(ListKind::kPrompts).state = ListState::kAbsent;
  return l;
}

class SqliteSchema : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.root().empty());
    file_ = dir_.path("quiver.db");
    db_ = std::make_unique<Db>(file_);
    ASSERT_TRUE(db_->error().empty()) << db_->error();
    ASSERT_EQ(db_->text("PRAGMA journal_mode=WAL"), "wal");
    ASSERT_EQ(db_->apply_schema(), SQLITE_OK) << db_->error();
  }

  // The file turned back by `sql` into an older version's shape, then opened by the store, which
  // migrates it to the current version: the store, or null with the test failed.
  std::unique_ptr<SqliteStore> migrated(std::initializer_list<const char*> sql) {
    for (const char* statement : sql) {
      EXPECT_EQ(db_->exec(statement), SQLITE_OK) << statement << ": " << db_->error();
    }
    SqliteStoreOptions o;
    o.path = file_;
    Result<std::unique_ptr<SqliteStore>> store = SqliteStore::open(o);
    if (!store.ok()) {
      ADD_FAILURE() << store.error().message;
      return nullptr;
    }
    EXPECT_EQ(db_->text("PRAGMA user_version"), std::to_string(kSqliteSchemaVersion));
    return std::move(store).value();
  }

  TempDir dir_;
  std::string file_;
  std::unique_ptr<Db> db_;
};

TEST_F(SqliteSchema, AppliesIdempotentlyAndSetsTheVersion) {
  Db& db = *db_;
  ASSERT_EQ(db.apply_schema(), SQLITE_OK) << db.error();
  EXPECT_EQ(db.text("PRAGMA user_version"), "6");
  for (const char* table : {"mcp_capability_preferences", "connections", "grants", "manifests",
                            "leases", "fences", "revalidation_queue", "revalidation_gates", "epoch",
                            "catalog", "catalog_versions", "audit_log", "connection_marks"}) {
    EXPECT_EQ(db.text(std::string("SELECT type FROM sqlite_schema WHERE name = '") + table + "'"),
              "table")
        << table;
  }
  EXPECT_EQ(db.text("SELECT type FROM sqlite_schema WHERE name = 'disabled_capabilities'"), "view");
  EXPECT_EQ(db.text("SELECT count(*) || ':' || max(value) FROM epoch"), "1:0");
  EXPECT_EQ(db.text("SELECT group_concat(kind || '=' || version) FROM (SELECT * FROM "
                    "catalog_versions ORDER BY kind)"),
            "connection=0,grant=0,member=0");

  // Data survives a re-application from a second connection (what an agent restart does).
  ASSERT_EQ(db.exec("UPDATE epoch SET value = 7"), SQLITE_OK) << db.error();
  Db again(file_);
  ASSERT_EQ(again.apply_schema(), SQLITE_OK) << again.error();
  EXPECT_EQ(again.text("SELECT count(*) || ':' || max(value) FROM epoch"), "1:7");
  EXPECT_EQ(again.text("PRAGMA journal_mode"), "wal");
}

TEST_F(SqliteSchema, EveryNamedStatementPreparesAgainstTheSchema) {
  ASSERT_FALSE(sql_queries().empty());
  for (const NamedSql& q : sql_queries()) {
    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    std::string sql(q.sql);
    int rc = sqlite3_prepare_v2(db_->get(), sql.c_str(), -1, &stmt, &tail);
    EXPECT_EQ(rc, SQLITE_OK) << q.name << ": " << sqlite3_errmsg(db_->get());
    EXPECT_NE(stmt, nullptr) << q.name;
    // Exactly one statement per block.
    EXPECT_EQ(std::string(tail).find_first_not_of(" \t\r\n"), std::string::npos) << q.name;
    sqlite3_finalize(stmt);
  }
}

TEST_F(SqliteSchema, PreferenceRowsFromReconcileRoundTrip) {
  Db& db = *db_;
  const std::string cid = "github";
  PreferencePolicy policy{true};

  // First listing: everything new, enabled by policy.
  Reconciliation first = reconcile(
      read(db, cid), live_capabilities(cid, tools_listing({"search", "delete_repo"})), policy, kT0);
  ASSERT_EQ(first.rows_to_insert.size(), 3u);
  write(db, first);
  EXPECT_EQ(read(db, cid), first.rows_to_insert);  // same rows, same order

  // The user hides delete_repo; an upgrade drops it; the next one brings it back.
  set_enabled(db, cid, CapabilityType::kTool, "delete_repo", false);
  EXPECT_EQ(read_overlay(db, cid), DisabledOverlay{"tool:delete_repo"});
  write(db, reconcile(read(db, cid), live_capabilities(cid, tools_listing({"search"})), policy,
                      kT0 + kMinute));
  write(db, reconcile(read(db, cid),
                      live_capabilities(cid, tools_listing({"search", "delete_repo", "new"})),
                      PreferencePolicy{false}, kT0 + 2 * kMinute));

  std::vector<PreferenceRow> rows = read(db, cid);
  std::vector<PreferenceRow> expected = {
      {cid, CapabilityType::kTool, "delete_repo", false, kT0, kT0 + 2 * kMinute},
      {cid, CapabilityType::kTool, "new", false, kT0 + 2 * kMinute, kT0 + 2 * kMinute},
      {cid, CapabilityType::kTool, "search", true, kT0, kT0 + 2 * kMinute},
      {cid, CapabilityType::kResource, "file:///notes.md", true, kT0, kT0 + 2 * kMinute},
  };
  EXPECT_EQ(rows, expected);
  // The SQL view and the core agree on the overlay.
  EXPECT_EQ(read_overlay(db, cid), disabled_overlay(cid, Principal::shared(), rows));
  EXPECT_EQ(read_overlay(db, cid), (DisabledOverlay{"tool:delete_repo", "tool:new"}));

  // Reconciling what is stored against the same listing again changes nothing.
  EXPECT_TRUE(reconcile(rows,
                        live_capabilities(cid, tools_listing({"search", "delete_repo", "new"})),
                        policy, kT0 + 2 * kMinute)
                  .empty());
}

TEST_F(SqliteSchema, ALateInsertOfAnExistingKeyKeepsTheUsersChoice) {
  Db& db = *db_;
  write(db, reconcile({}, live_capabilities("c1", tools_listing({"t"})), {true}, kT0));
  set_enabled(db, "c1", CapabilityType::kTool, "t", false);
  // A second writer that read the table before the first insert inserts the same key again.
  Reconciliation stale =
      reconcile({}, live_capabilities("c1", tools_listing({"t"})), {true}, kT0 + kMinute);
  write(db, stale);
  std::vector<PreferenceRow> rows = read(db, "c1");
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0], (PreferenceRow{"c1", CapabilityType::kTool, "t", false, kT0, kT0 + kMinute}));
  // And a touch with an older time does not move last_seen_at back.
  Reconciliation old;
  old.rows_to_update.push_back({"c1", CapabilityType::kTool, "t", false, kT0, kT0});
  write(db, old);
  EXPECT_EQ(read(db, "c1")[0].last_seen_at, kT0 + kMinute);
}

TEST_F(SqliteSchema, ConstraintsRejectBadRows) {
  Db& db = *db_;
  auto accepts = [&](const std::string& sql) {
    int rc = db.exec(sql);
    EXPECT_EQ(rc, SQLITE_OK) << sql << "\n" << db.error();
  };
  auto rejects = [&](const std::string& sql) {
    int rc = db.exec(sql);
    EXPECT_EQ(rc, SQLITE_CONSTRAINT) << sql << "\n" << db.error();
  };
  const std::string pref =
      "INSERT INTO mcp_capability_preferences (resource_id, capability_type, capability_key, "
      "enabled, first_seen_at, last_seen_at) VALUES ";
  accepts(pref + "('c.1_x-y', 'resource_template', 'db://{t}', 0, 10, 20)");
  rejects(pref + "('c.1_x-y', 'resource_template', 'db://{t}', 1, 10, 30)");  // duplicate key
  rejects(pref + "('c1', 'widget', 'k', 1, 10, 10)");                         // unknown type
  rejects(pref + "('c1', 'tools', 'k', 1, 10, 10)");                          // plural
  rejects(pref + "('c1', 'tool', '', 1, 10, 10)");                            // empty key
  rejects(pref + "('c1', 'tool', NULL, 1, 10, 10)");
  rejects(pref + "('c1', 'tool', 'k', 2, 10, 10)");      // enabled not boolean
  rejects(pref + "('c1', 'tool', 'k', 'yes', 10, 10)");  // STRICT: no text in INTEGER
  rejects(pref + "('c1', 'tool', 'k', 1, 20, 10)");      // last seen before first seen
  rejects(pref + "('c1', 'tool', 'k', 1, -1, 10)");
  rejects(pref + "('bad id', 'tool', 'k', 1, 10, 10)");  // not a connection id
  rejects(pref + "('', 'tool', 'k', 1, 10, 10)");
  rejects(pref + "('" + std::string(129, 'a') + "', 'tool', 'k', 1, 10, 10)");
  accepts(pref + "('" + std::string(128, 'a') + "', 'tool', 'k', 1, 10, 10)");
  accepts(pref + "('c1', 'tool', '" + std::string(kMaxCapabilityKeyBytes, 'k') + "', 1, 10, 10)");
  rejects(pref + "('c1', 'tool', '" + std::string(kMaxCapabilityKeyBytes + 1, 'k') +
          "', 1, 10, 10)");

  const std::string manifest =
      "INSERT INTO manifests (connection_id, principal, manifest, etag, config_hash, fence, "
      "fetched_at, fresh_until, expires_at, cache_scope, truncated, error_code, error_at) VALUES ";
  accepts(manifest + "('c1', 'shared', '{}', 'e', 'h1', 1, 10, 20, 30, 'public', 0, NULL, NULL)");
  accepts(manifest +
          "('c1', 'member/a@b.c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, "
          "'TIMEOUT', 10)");  // an error-only row
  // An error-only row must not carry a config_hash (nor pretend to have an etag).
  rejects(manifest +
          "('c2', 'shared', NULL, NULL, 'h1', NULL, NULL, NULL, NULL, NULL, 0, "
          "'TIMEOUT', 10)");
  // A row with neither a manifest nor an error says nothing.
  rejects(manifest +
          "('c2', 'shared', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, "
          "NULL)");
  // A manifest without what a reader needs to classify it.
  rejects(manifest + "('c2', 'shared', '{}', 'e', NULL, 1, 10, 20, 30, NULL, 0, NULL, NULL)");
  rejects(manifest + "('c2', 'shared', '{}', 'e', 'h', 1, 10, NULL, 30, NULL, 0, NULL, NULL)");
  rejects(manifest + "('c2', 'shared', '{}', 'e', 'h', 1, 30, 20, 40, NULL, 0, NULL, NULL)");
  rejects(manifest + "('c2', 'shared', '{}', 'e', 'h', 1, 10, 20, 30, 'team', 0, NULL, NULL)");
  rejects(manifest + "('c2', 'shared', '{}', 'e', 'h', 0, 10, 20, 30, NULL, 0, NULL, NULL)");
  rejects(manifest + "('c2', 'shared', '{}', 'e', 'h', 1, 10, 20, 30, NULL, 0, 'X', NULL)");
  rejects(manifest + "('c2', 'member/', '{}', 'e', 'h', 1, 10, 20, 30, NULL, 0, NULL, NULL)");
  rejects(manifest + "('c2', 'admin', '{}', 'e', 'h', 1, 10, 20, 30, NULL, 0, NULL, NULL)");
  rejects(manifest + "('c2', 'member/a b', '{}', 'e', 'h', 1, 10, 20, 30, NULL, 0, NULL, NULL)");

  const std::string token(32, 'a');
  accepts("INSERT INTO leases VALUES ('c1', 'shared', '" + token + "', 1, 100)");
  rejects("INSERT INTO leases VALUES ('c2', 'shared', '" + token + "', 0, 100)");
  rejects("INSERT INTO leases VALUES ('c2', 'shared', 'short', 1, 100)");
  rejects("INSERT INTO leases VALUES ('c2', 'shared', '" + std::string(32, 'G') + "', 1, 100)");
  rejects("INSERT INTO fences VALUES ('c1', 'shared', -1)");
  accepts("INSERT INTO connections VALUES ('c1', 'h1', 'per_member', 'GitHub', 'http', 1)");
  rejects("INSERT INTO connections VALUES ('c2', 'h1', 'personal', 'GitHub', 'http', 1)");
  rejects("INSERT INTO connections VALUES ('c2', '', 'shared', 'GitHub', 'http', 1)");
  accepts("INSERT INTO grants VALUES ('member/alice+ops@example.com', 'c1')");
  rejects("INSERT INTO grants VALUES ('shared', 'c1')");  // grants are per member
  rejects("INSERT INTO grants VALUES ('member/alice', 'c 1')");
  accepts(
      "INSERT INTO revalidation_queue (connection_id, principal, reason, at) "
      "VALUES ('c1', 'shared', 'stale', 5)");
  rejects(
      "INSERT INTO revalidation_queue (connection_id, principal, reason, at, claimed_by) "
      "VALUES ('c1', 'shared', 'stale', 5, 'agent-1')");  // a claim needs a deadline
  rejects("INSERT INTO epoch VALUES (2, 0)");

  const std::string cat =
      "INSERT INTO catalog (kind, key, value, origin, rev_ms, file_hash, changed_by, updated_at) "
      "VALUES ";
  const std::string hash(64, 'a');
  accepts(cat + "('member', 'alice+ops@example.com', '{}', 'api', 1, '', 'key:ops', 2)");
  accepts(cat + "('grant', '*', '{}', 'file', 1, '" + hash + "', 'file:/q.json', 2)");
  accepts(cat + "('connection', 'gh', NULL, 'api', 1, '', 'operator:a', 2)");  // a tombstone
  rejects(cat + "('connection', 'gh', '{}', 'api', 1, '', 'operator:a', 2)");  // duplicate
  rejects(cat + "('members', 'bob', '{}', 'api', 1, '', 'key:ops', 2)");
  rejects(cat + "('member', '*', '{}', 'api', 1, '', 'key:ops', 2)");  // "*": grants only
  rejects(cat + "('connection', '*', '{}', 'api', 1, '', 'key:ops', 2)");
  rejects(cat + "('connection', 'a@b', '{}', 'api', 1, '', 'key:ops', 2)");
  rejects(cat + "('member', 'b b', '{}', 'api', 1, '', 'key:ops', 2)");
  rejects(cat + "('member', 'bob', '{}', 'cli', 1, '', 'key:ops', 2)");
  rejects(cat + "('member', 'bob', '{}', 'api', -1, '', 'key:ops', 2)");
  rejects(cat + "('member', 'bob', '{}', 'api', 1, 'abc', 'key:ops', 2)");
  rejects(cat + "('member', 'bob', '{}', 'api', 1, '', '', 2)");
  rejects(cat + "('member', 'bob', '', 'api', 1, '', 'key:ops', 2)");
  rejects(cat + "('member', 'bob', '" + std::string(65537, 'x') + "', 'api', 1, '', 'k', 2)");
  rejects("INSERT INTO catalog_versions VALUES ('widget', 0)");
  accepts(
      "INSERT INTO audit_log (at, actor, action, target, detail) VALUES (1, 'a', 'x', 't', "
      "'{}')");
  rejects(
      "INSERT INTO audit_log (at, actor, action, target, detail) VALUES (1, 'a', 'x', 't', "
      "'[]')");
  rejects(
      "INSERT INTO audit_log (at, actor, action, target, detail) VALUES (1, '', 'x', 't', "
      "'{}')");
}

// A file at version 3 (before the runtime catalog) is migrated by the store on open: the new
// tables and the grantees index appear, everything else stays.
TEST_F(SqliteSchema, AVersion3FileMigratesToTheCurrentVersion) {
  Db& db = *db_;
  std::unique_ptr<SqliteStore> store =
      migrated({"DROP TABLE catalog", "DROP TABLE catalog_versions", "DROP TABLE audit_log",
                "DROP INDEX grants_by_connection",
                "INSERT INTO grants VALUES ('member/alice', 'c1')", "DROP TABLE connection_marks",
                "DROP INDEX manifests_by_due", "ALTER TABLE manifests DROP COLUMN due_at",
                "UPDATE epoch SET value = 9", "PRAGMA user_version = 3"});
  ASSERT_TRUE(store);
  EXPECT_EQ(db.text("SELECT type FROM sqlite_schema WHERE name = 'connection_marks'"), "table");
  EXPECT_EQ(db.text("SELECT type FROM sqlite_schema WHERE name = 'manifests_by_due'"), "index");
  EXPECT_EQ(db.text("SELECT type FROM sqlite_schema WHERE name = 'grants_by_connection'"), "index");
  EXPECT_EQ(*store->read_grantees("c1"), std::set<std::string>{"alice"});
  EXPECT_EQ(*store->read_epoch(), 9);
  EXPECT_EQ(*store->catalog_versions(), CatalogVersions{});
  Result<CatalogPage> page = store->catalog_list(CatalogKind::kMember, "", 10);
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_TRUE(page->entries.empty());
}

// A file at version 4 (before a connection could be marked as a whole) gains connection_marks (and
// the refresh-due index) on open; its rows stay, and a webhook for a per_member connection marks it
// there.
TEST_F(SqliteSchema, AVersion4FileMigratesToTheCurrentVersion) {
  Db& db = *db_;
  std::unique_ptr<SqliteStore> store =
      migrated({"DROP TABLE connection_marks", "DROP INDEX manifests_by_due",
                "ALTER TABLE manifests DROP COLUMN due_at",
                "INSERT INTO connections VALUES ('pm', 'h', 'per_member', 'pm', 'stdio', 1)",
                "INSERT INTO grants VALUES ('member/alice', 'pm')", "PRAGMA user_version = 4"});
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->read_grantees("pm"), std::set<std::string>{"alice"});
  WebhookRefreshRequest request;
  request.targets = {{"pm", std::nullopt, "deploy"}};
  Result<WebhookRefreshReply> r =
      store->apply_webhook({1'000, "wh:v5", 60'000}, request, 1'000, 30'000);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_EQ(r->results[0].status, "marked");
  EXPECT_EQ(db.text("SELECT marked_at FROM connection_marks WHERE connection_id = 'pm'"), "1000");
}

// A version 5 file (before the refresh-due index) migrates on open: manifests gain due_at, 0 for
// every row (due at once: the backfill), and its index; maintenance then reads them through it.
TEST_F(SqliteSchema, AVersion5FileMigratesToVersion6WithEveryRowDue) {
  Db& db = *db_;
  std::unique_ptr<SqliteStore> store = migrated(
      {"DROP INDEX manifests_by_due", "ALTER TABLE manifests DROP COLUMN due_at",
       "INSERT INTO manifests (connection_id, principal, manifest, etag, config_hash, fence, "
       "fetched_at, fresh_until, expires_at) VALUES ('c1', 'shared', '{}', 'e', 'h1', 1, 10, 20, "
       "30), ('c2', 'member/alice', '{}', 'e', 'h2', 1, 10, 20, 30)",
       "PRAGMA user_version = 5"});
  ASSERT_TRUE(store);
  EXPECT_EQ(db.text("SELECT type FROM sqlite_schema WHERE name = 'manifests_by_due'"), "index");
  EXPECT_EQ(db.text("SELECT group_concat(due_at) FROM manifests"), "0,0");
  Result<DuePage> due = store->list_due(0, 0, 10);
  ASSERT_TRUE(due.ok()) << due.error().message;
  ASSERT_EQ(due->entries.size(), 2u);
  EXPECT_EQ(due->entries[0].connection_id, "c1");
  EXPECT_EQ(due->entries[1].principal.str(), "member/alice");
  EXPECT_TRUE(due->entries[1].meta.has_value());
  EXPECT_TRUE(store->backfill_due_index(1000)->done);
}

}  // namespace
}  // namespace quiver
