// The OAuth token store (native-agent/store/token_store.h) on real SQLite files: AES-256-GCM rows
// that round-trip, hold no plaintext, refuse another key or another row without deleting
// anything; single-use pending authorizations; refresh locks shared by two stores on one file.
#include "native-agent/store/token_store.h"

#include <string>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "tests/support/mcp_peers.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::read_file;
using quiver::testing::TempDir;

constexpr char kKeyA[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kKeyB[] = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr int64_t kNow = 1'800'000'000'000;

std::unique_ptr<TokenStore> open_store(const std::string& path, const char* key = kKeyA) {
  TokenStoreOptions o;
  o.path = path;
  o.key = Secret(key);
  Result<std::unique_ptr<TokenStore>> s = TokenStore::open(o);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

oauth::Authorization authorization(const std::string& access, const std::string& refresh) {
  oauth::Authorization a;
  a.resource = "https://mcp.example/mcp";
  a.server.issuer = "https://auth.example";
  a.server.authorization_endpoint = "https://auth.example/authorize";
  a.server.token_endpoint = "https://auth.example/token";
  a.client.issuer = "https://auth.example";
  a.client.client_id = "client-id-1";
  a.client.client_secret = "client-secret-CS-4242";
  a.client.token_endpoint_auth_method = "client_secret_basic";
  a.tokens.access_token = access;
  a.tokens.refresh_token = refresh;
  a.tokens.expires_at_ms = kNow + 3'600'000;
  a.tokens.obtained_at_ms = kNow;
  a.tokens.scope = "read";
  return a;
}

oauth::PendingAuthorization pending(const std::string& state, int64_t expires_at_ms) {
  oauth::PendingAuthorization p;
  p.state = state;
  p.code_verifier = "verifier-VVVV-" + state;
  p.redirect_uri = "http://127.0.0.1:8787/v1/oauth/callback";
  p.resource = "https://mcp.example/mcp";
  p.scopes = {"read"};
  p.server.issuer = "https://auth.example";
  p.server.authorization_endpoint = "https://auth.example/authorize";
  p.server.token_endpoint = "https://auth.example/token";
  p.client.issuer = "https://auth.example";
  p.client.client_id = "client-id-1";
  p.created_at_ms = kNow;
  p.expires_at_ms = expires_at_ms;
  return p;
}

// Every byte the store wrote: the database, its WAL and shared-memory index.
std::string all_bytes(const std::string& path) {
  return read_file(path) + read_file(path + "-wal") + read_file(path + "-shm");
}

const Principal kAlice = *Principal::member("alice");

TEST(TokenStoreTest, RoundTripsAndKeepsNoPlaintext) {
  TempDir dir;
  const std::string path = dir.path("oauth-tokens.db");
  auto store = open_store(path);
  ASSERT_NE(store, nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  EXPECT_FALSE(store->authorization("linear", kAlice)->has_value());
  ASSERT_TRUE(store
                  ->put_authorization("linear", kAlice,
                                      authorization("AT-secret-1111", "RT-secret-2222"), kNow)
                  .ok());
  Result<std::optional<AuthorizationRecord>> got = store->authorization("linear", kAlice);
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->authorization.tokens.access_token, "AT-secret-1111");
  EXPECT_EQ((*got)->authorization.tokens.refresh_token, "RT-secret-2222");
  EXPECT_EQ((*got)->authorization.client.client_secret, "client-secret-CS-4242");
  EXPECT_EQ((*got)->updated_at_ms, kNow);
  EXPECT_FALSE(store->authorization("linear", Principal::shared())->has_value());
  EXPECT_EQ(*store->authorized(),
            (std::vector<std::pair<std::string, Principal>>{{"linear", kAlice}}));

  oauth::RegisteredClient client = authorization("a", "r").client;
  client.dynamic = true;
  ASSERT_TRUE(store->put_client("linear", client).ok());
  EXPECT_EQ((*store->client("linear", "https://auth.example"))->client_secret,
            "client-secret-CS-4242");
  EXPECT_FALSE(store->client("linear", "https://other.example")->has_value());
  EXPECT_EQ((*store->latest_client("linear"))->client_id, "client-id-1");
  ASSERT_TRUE(store->put_pending("linear", kAlice, pending("state-SSSS-1", kNow + 600'000)).ok());

  // A new authorization replaces the old one (and one of another issuer).
  oauth::Authorization moved = authorization("AT-secret-3333", "");
  moved.server.issuer = "https://auth2.example";
  ASSERT_TRUE(store->put_authorization("linear", kAlice, moved, kNow + 1).ok());
  EXPECT_EQ((*store->authorization("linear", kAlice))->authorization.tokens.access_token,
            "AT-secret-3333");

  // Not one secret in the bytes on disk (the state is stored as its hash).
  const std::string bytes = all_bytes(path);
  ASSERT_FALSE(bytes.empty());
  for (const char* secret : {"AT-secret-1111", "RT-secret-2222", "AT-secret-3333",
                             "client-secret-CS-4242", "verifier-VVVV", "state-SSSS-1"}) {
    EXPECT_EQ(bytes.find(secret), std::string::npos) << secret;
  }

  // Reopened, the rows are there.
  store.reset();
  auto again = open_store(path);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ((*again->authorization("linear", kAlice))->authorization.tokens.access_token,
            "AT-secret-3333");
  EXPECT_TRUE(*again->delete_authorization("linear", kAlice));
  EXPECT_FALSE(*again->delete_authorization("linear", kAlice));
  EXPECT_FALSE(again->authorization("linear", kAlice)->has_value());
}

TEST(TokenStoreTest, AnotherKeyIsAClearErrorAndDeletesNothing) {
  TempDir dir;
  const std::string path = dir.path("oauth-tokens.db");
  {
    auto store = open_store(path);
    ASSERT_TRUE(
        store->put_authorization("linear", kAlice, authorization("AT-1", "RT-1"), kNow).ok());
    ASSERT_TRUE(store->put_pending("linear", kAlice, pending("st-1", kNow + 600'000)).ok());
  }
  auto wrong = open_store(path, kKeyB);
  ASSERT_NE(wrong, nullptr);
  Result<std::optional<AuthorizationRecord>> a = wrong->authorization("linear", kAlice);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(a.error().message.find("does not open with quiver.oauth.key"), std::string::npos)
      << a.error().message;
  EXPECT_NE(a.error().message.find("linear (member/alice)"), std::string::npos);
  EXPECT_EQ(a.error().message.find("AT-1"), std::string::npos);
  Result<std::optional<PendingRecord>> p = wrong->take_pending("st-1", kNow);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
  wrong.reset();
  // The right key still opens everything: nothing was deleted.
  auto right = open_store(path);
  EXPECT_EQ((*right->authorization("linear", kAlice))->authorization.tokens.access_token, "AT-1");
  Result<std::optional<PendingRecord>> taken = right->take_pending("st-1", kNow);
  ASSERT_TRUE(taken.ok()) << taken.error().message;
  ASSERT_TRUE(taken->has_value());
  EXPECT_EQ((*taken)->pending.code_verifier, "verifier-VVVV-st-1");

  // A key that is not 32 bytes does not open the store.
  TokenStoreOptions o;
  o.path = path;
  o.key = Secret("abcd");
  Result<std::unique_ptr<TokenStore>> bad = TokenStore::open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("quiver.oauth.key"), std::string::npos);
}

TEST(TokenStoreTest, ARowCopiedToAnotherKeyDoesNotOpen) {
  TempDir dir;
  const std::string path = dir.path("oauth-tokens.db");
  auto store = open_store(path);
  ASSERT_TRUE(
      store->put_authorization("linear", kAlice, authorization("AT-alice", "RT-alice"), kNow).ok());
  ASSERT_TRUE(store
                  ->put_authorization("linear", *Principal::member("bob"),
                                      authorization("AT-bob", "RT-bob"), kNow)
                  .ok());
  // Mallory copies alice's sealed row over bob's, with SQL on the file.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db,
                         "UPDATE authorizations SET sealed = (SELECT sealed FROM authorizations "
                         "WHERE principal = 'member/alice') WHERE principal = 'member/bob'",
                         nullptr, nullptr, &err),
            SQLITE_OK)
      << (err ? err : "");
  sqlite3_close(db);
  Result<std::optional<AuthorizationRecord>> bob =
      store->authorization("linear", *Principal::member("bob"));
  ASSERT_FALSE(bob.ok());
  EXPECT_EQ(bob.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ((*store->authorization("linear", kAlice))->authorization.tokens.access_token,
            "AT-alice");
}

TEST(TokenStoreTest, PendingIsSingleUseAndExpires) {
  TempDir dir;
  auto store = open_store(dir.path("oauth-tokens.db"));
  ASSERT_TRUE(store->put_pending("linear", kAlice, pending("state-1", kNow + 600'000)).ok());
  ASSERT_TRUE(store->put_pending("linear", kAlice, pending("state-2", kNow + 1'000)).ok());

  Result<std::optional<PendingRecord>> first = store->take_pending("state-1", kNow);
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->connection_id, "linear");
  EXPECT_EQ((*first)->principal, kAlice);
  EXPECT_EQ((*first)->pending.state, "state-1");
  Result<std::optional<PendingRecord>> second = store->take_pending("state-1", kNow);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->has_value());

  // Expired: nullopt, and the row is gone even for a clock that goes back.
  Result<std::optional<PendingRecord>> late = store->take_pending("state-2", kNow + 1'000);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->has_value());
  EXPECT_FALSE(store->take_pending("state-2", kNow)->has_value());
  EXPECT_FALSE(store->take_pending("never-issued", kNow)->has_value());
}

TEST(TokenStoreTest, RefreshLocksExcludeAcrossStoresOnOneFileAndExpire) {
  TempDir dir;
  const std::string path = dir.path("oauth-tokens.db");
  auto a = open_store(path);
  auto b = open_store(path);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(*a->try_lock_refresh("linear", kAlice, "agent-a", kNow, 10'000));
  EXPECT_FALSE(*b->try_lock_refresh("linear", kAlice, "agent-b", kNow + 1, 10'000));
  // Another key is another lock; the holder may take its own again (extending it).
  EXPECT_TRUE(*b->try_lock_refresh("linear", Principal::shared(), "agent-b", kNow, 10'000));
  EXPECT_TRUE(*a->try_lock_refresh("linear", kAlice, "agent-a", kNow + 2, 10'000));
  // Expired: the other takes it.
  EXPECT_FALSE(*b->try_lock_refresh("linear", kAlice, "agent-b", kNow + 10'001, 10'000));
  EXPECT_TRUE(*b->try_lock_refresh("linear", kAlice, "agent-b", kNow + 10'002, 10'000));
  EXPECT_FALSE(*a->try_lock_refresh("linear", kAlice, "agent-a", kNow + 10'003, 10'000));
  // Unlocked by someone else: nothing; by its holder: free.
  ASSERT_TRUE(a->unlock_refresh("linear", kAlice, "agent-a").ok());
  EXPECT_FALSE(*a->try_lock_refresh("linear", kAlice, "agent-a", kNow + 10'004, 10'000));
  ASSERT_TRUE(b->unlock_refresh("linear", kAlice, "agent-b").ok());
  EXPECT_TRUE(*a->try_lock_refresh("linear", kAlice, "agent-a", kNow + 10'005, 10'000));
}

// A step-up in progress: kept per (connection, principal), replaced, deleted; a version 1 file
// (before step_ups existed) gets the table when opened and keeps its rows.
TEST(TokenStoreTest, StepUpsRoundTripAndAVersionOneFileIsUpgraded) {
  TempDir dir;
  const std::string path = dir.path("oauth-tokens.db");
  {
    auto store = open_store(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(
        store->put_authorization("linear", kAlice, authorization("at-1", "rt-1"), kNow).ok());
    EXPECT_FALSE(store->step_up("linear", kAlice)->has_value());
    ASSERT_TRUE(store->put_step_up("linear", kAlice, StepUpRecord{"read write", 1, kNow}).ok());
    ASSERT_TRUE(
        store->put_step_up("linear", kAlice, StepUpRecord{"read write admin", 2, kNow + 1}).ok());
    auto got = store->step_up("linear", kAlice);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->scope, "read write admin");
    EXPECT_EQ((*got)->attempts, 2);
    EXPECT_EQ((*got)->updated_at_ms, kNow + 1);
    EXPECT_FALSE(store->step_up("linear", Principal::shared())->has_value());
    EXPECT_TRUE(*store->delete_step_up("linear", kAlice));
    EXPECT_FALSE(*store->delete_step_up("linear", kAlice));
  }
  // Back to version 1: no step_ups table.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "DROP TABLE step_ups; PRAGMA user_version = 1;", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto upgraded = open_store(path);
  ASSERT_TRUE(upgraded);
  ASSERT_TRUE(upgraded->put_step_up("linear", kAlice, StepUpRecord{"read", 1, kNow}).ok());
  auto kept = upgraded->authorization("linear", kAlice);
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ((*kept)->authorization.tokens.access_token, "at-1");
}

TEST(TokenStoreTest, MaintenanceDeletesAuthorizationsNoLongerConfigured) {
  TempDir dir;
  auto store = open_store(dir.path("oauth-tokens.db"));
  const Principal bob = *Principal::member("bob");
  ASSERT_TRUE(store->put_authorization("linear", kAlice, authorization("1", "r"), kNow).ok());
  ASSERT_TRUE(store->put_authorization("linear", bob, authorization("2", "r"), kNow).ok());
  ASSERT_TRUE(store->put_authorization("gone", kAlice, authorization("3", "r"), kNow).ok());
  Result<int> n = store->delete_authorizations_except({{"linear", kAlice}});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(*store->authorized(),
            (std::vector<std::pair<std::string, Principal>>{{"linear", kAlice}}));
}

}  // namespace
}  // namespace quiver
