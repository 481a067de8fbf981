// The embedded store's read side: SqliteDb's prepared-once statements (exec, query_integer),
// SqliteReaders (the pool of read-only WAL connections discovery snapshots run on), and
// SqliteStore::read_discovery from many threads while commits go on, on real SQLite files.
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/sqlite_db.h"
#include "native-agent/store/sqlite_store.h"
#include "tests/support/mcp_peers.h"

namespace quiver {
namespace {

using testing::TempDir;

constexpr int64_t kNow = 1'790'000'000'000;

TEST(SqliteDbExec, OneStatementIsPreparedOnceAndReusable) {
  TempDir dir;
  SqliteDb db("test");
  ASSERT_TRUE(db.open(dir.path("a.db"), 1000).ok());
  ASSERT_TRUE(db.exec("CREATE TABLE t (v INTEGER)", "create").ok());
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(db.exec("BEGIN", "begin").ok()) << i;
    ASSERT_TRUE(db.exec("INSERT INTO t VALUES (1)", "insert").ok()) << i;
    ASSERT_TRUE(db.exec("COMMIT", "commit").ok()) << i;
  }
  Result<int64_t> n = db.query_integer("SELECT count(*) FROM t", "count");
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, 200);
  // A script (several statements) still runs, parsed each time.
  ASSERT_TRUE(db.exec("INSERT INTO t VALUES (2); INSERT INTO t VALUES (3)", "script").ok());
  EXPECT_EQ(*db.query_integer("SELECT count(*) FROM t", "count"), 202);
}

TEST(SqliteDbExec, AFailedStatementSaysWhyAndTheNextRunStillWorks) {
  TempDir dir;
  SqliteDb db("test");
  ASSERT_TRUE(db.open(dir.path("a.db"), 1000).ok());
  Status bad = db.exec("COMMIT", "committing nothing");  // no transaction is open
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("committing nothing"), std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(db.exec("SELEKT 1", "a typo").ok());
  ASSERT_TRUE(db.exec("BEGIN", "begin").ok());
  EXPECT_TRUE(db.exec("COMMIT", "commit").ok());  // the cached COMMIT was reset after failing
  Result<int64_t> none = db.query_integer("SELECT 1 WHERE 0", "no row");
  EXPECT_FALSE(none.ok());
}

TEST(SqliteReaders, LendsAtMostMaxConnectionsAndSeesCommittedWrites) {
  TempDir dir;
  const std::string path = dir.path("a.db");
  SqliteDb writer("test");
  ASSERT_TRUE(writer.open(path, 1000).ok());
  ASSERT_TRUE(writer.exec("PRAGMA journal_mode=WAL", "wal").ok());
  ASSERT_TRUE(writer.exec("CREATE TABLE t (v INTEGER)", "create").ok());

  SqliteReaders readers;
  readers.configure(path, 1000, 2);
  ASSERT_TRUE(readers.enabled());
  std::mutex seen_mu;
  std::set<const SqliteDb*> seen;
  std::atomic<int> lent{0};
  std::atomic<int> most_lent{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        Result<SqliteReaders::Lease> lease = readers.acquire();
        if (!lease.ok()) {
          ++failures;
          continue;
        }
        int now = ++lent;
        int prev = most_lent.load();
        while (now > prev && !most_lent.compare_exchange_weak(prev, now)) {
        }
        if (!lease->db().query_integer("SELECT count(*) FROM t", "count").ok()) ++failures;
        {
          std::lock_guard<std::mutex> lock(seen_mu);
          seen.insert(&lease->db());
        }
        --lent;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(most_lent.load(), 2);
  EXPECT_LE(seen.size(), 2u);

  // A write committed by the writer is what the next read transaction of a reader sees.
  ASSERT_TRUE(writer.exec("INSERT INTO t VALUES (7)", "insert").ok());
  Result<SqliteReaders::Lease> lease = readers.acquire();
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(*lease->db().query_integer("SELECT count(*) FROM t", "count"), 1);
  // Readers are read-only.
  EXPECT_FALSE(lease->db().exec("INSERT INTO t VALUES (8)", "a write on a reader").ok());
}

TEST(SqliteReaders, AFileThatCannotBeOpenedIsAnErrorAndTheSlotIsFreedAgain) {
  TempDir dir;
  SqliteReaders readers;
  readers.configure(dir.path("no/such/dir/a.db"), 100, 1);
  for (int i = 0; i < 3; ++i) {  // with max 1, a leaked slot would block the second acquire
    Result<SqliteReaders::Lease> lease = readers.acquire();
    EXPECT_FALSE(lease.ok());
  }
}

// A store on a new file in `dir` with `max_readers` pooled readers.
Result<std::unique_ptr<SqliteStore>> open_store(TempDir& dir, const char* file, int max_readers) {
  SqliteStoreOptions so;
  so.path = dir.path(file);
  so.now_ms = [] { return kNow; };
  so.max_readers = max_readers;
  return SqliteStore::open(so);
}

TEST(SqliteStoreReads, SnapshotsFromManyThreadsWhileCommitsGoOn) {
  TempDir dir;
  auto opened = open_store(dir, "quiver.db", 3);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  SqliteStore& store = **opened;
  ConnectionRecord rec;
  rec.id = "a";
  rec.config_hash = "hash-a";
  rec.credential_mode = CredentialMode::kShared;
  rec.name = "A";
  rec.transport = "stdio";
  rec.updated_at_ms = kNow;
  ASSERT_TRUE(store.sync_connections({rec}).ok());
  ASSERT_TRUE(store.sync_grants({{"alice", {"a"}}}).ok());
  const Principal alice = *Principal::member("alice");

  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<int> failures{0};
  std::atomic<int64_t> last_seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!done.load()) {
        Result<DiscoverySnapshot> snap = store.read_discovery(alice, SnapshotQuery{});
        if (!snap.ok() || snap->connections.size() != 1) {
          ++failures;
          continue;
        }
        ++reads;
      }
    });
  }
  // The readers are reading before the first commit (on a loaded machine the commits could
  // otherwise all finish before any reader thread runs).
  while (reads.load() == 0 && failures.load() == 0) std::this_thread::yield();
  // Commits through the store's own connection while the readers read: each is seen by the
  // next snapshot taken after it.
  for (int i = 1; i <= 30; ++i) {
    Result<AcquireResult> lease =
        store.acquire_lease("a", Principal::shared(), std::string(32, 'c'), 60'000);
    ASSERT_TRUE(lease.ok() && lease->acquired);
    ManifestWrite w;
    w.manifest = R"({"format":"quiver.manifest.v1","tools":{"state":"ok","items":[]}})";
    w.etag = "sha256-v" + std::to_string(i);
    w.config_hash = "hash-a";
    w.fetched_at_ms = kNow + i;
    w.fresh_until_ms = kNow + 900'000;
    w.expires_at_ms = kNow + 86'400'000;
    Result<FencedWriteResult> r =
        store.commit_manifest("a", Principal::shared(), lease->lease, w, FencedWriteOptions{true});
    ASSERT_TRUE(r.ok() && r->ok());
    Result<DiscoverySnapshot> after = store.read_discovery(alice, SnapshotQuery{});
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(after->connections.size(), 1u);
    const std::optional<ManifestEntry>& entry = after->connections[0].manifest;
    ASSERT_TRUE(entry && entry->etag);
    EXPECT_EQ(*entry->etag, w.etag);
    last_seen = i;
  }
  done = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(last_seen.load(), 30);
}

TEST(SqliteStoreReads, NoReadersMeansTheStoresOwnConnection) {
  TempDir dir;
  auto opened = open_store(dir, "quiver.db", 0);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  Result<DiscoverySnapshot> snap =
      (*opened)->read_discovery(*Principal::member("alice"), SnapshotQuery{});
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_TRUE(snap->connections.empty());
  EXPECT_FALSE(open_store(dir, "other.db", -1).ok());
}

}  // namespace
}  // namespace quiver
