// ManifestStore::read_discovery on both stores: the same writes through the store API give the
// same DiscoverySnapshot from a real redis-server (discovery_read.lua, one round trip) and from a
// real SQLite file (read_snapshot in one read transaction) — field for field, so the discovery
// core classifies and renders both the same way. Plus grants, removed connections, per-member
// principals, leases, paging, and a store that is down.
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_store.h"
#include "native-agent/store/sqlite_store.h"
#include "native-agent/store/store.h"
#include "shared/discovery.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/preference_rows.h"
#include "tests/support/redis_server.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

constexpr int64_t kNow = 1'790'000'000'000;

Principal member(const char* id) { return *Principal::member(id); }

ConnectionRecord record(const std::string& id, CredentialMode mode) {
  return testing::stdio_record(id, mode, kNow);
}

void commit(ManifestStore& store, const std::string& cid, const Principal& p,
            const std::string& scope = "") {
  testing::commit_listing(store, cid, p, testing::listing_write(cid, kNow, scope));
}

void fail(ManifestStore& store, const std::string& cid, const Principal& p) {
  testing::record_listing_failure(store, cid, p, kNow + 1, kNow);
}

// The same history written to a store: records, grants, manifests, a failure, an overlay, a lease.
void seed(ManifestStore& store) {
  // An agent marks the namespace restoring, syncs, then ready (Agent::start).
  ASSERT_TRUE(store.begin_namespace_restore(kNow).ok());
  ASSERT_TRUE(store
                  .sync_connections({record("a", CredentialMode::kShared),
                                     record("b", CredentialMode::kPerMember),
                                     record("c", CredentialMode::kShared),
                                     record("gone", CredentialMode::kShared)})
                  .ok());
  ASSERT_TRUE(store.sync_grants({{"alice", {"a", "b", "c", "gone"}}, {"bob", {"a", "b"}}}).ok());
  commit(store, "a", Principal::shared(), "public");
  commit(store, "b", member("alice"));
  commit(store, "b", member("bob"), "private");
  fail(store, "b", member("bob"));
  ASSERT_TRUE(store
                  .merge_preferences(
                      "a", Principal::shared(),
                      testing::disabled_rows("a", Principal::shared(), {"tool:x_a", "prompt:p"}))
                  .ok());
  // bob's own overlay on the per-member connection hides from bob only.
  ASSERT_TRUE(store
                  .merge_preferences("b", member("bob"),
                                     testing::disabled_rows("b", member("bob"), {"tool:x_b"}))
                  .ok());
  Result<AcquireResult> held =
      store.acquire_lease("c", Principal::shared(), std::string(32, 'd'), 60'000);
  ASSERT_TRUE(held.ok() && held->acquired);
  // `gone` is removed from the configuration; alice's grant of it stays in the map she was given.
  ASSERT_TRUE(store
                  .sync_connections({record("a", CredentialMode::kShared),
                                     record("b", CredentialMode::kPerMember),
                                     record("c", CredentialMode::kShared)})
                  .ok());
  ASSERT_TRUE(store.sync_grants({{"alice", {"a", "b", "c", "gone"}}, {"bob", {"a", "b"}}}).ok());
  ASSERT_TRUE(*store.mark_namespace_ready(kNow));
}

class StoreDiscovery : public testing::StorePairTest {
 protected:
  void SetUp() override {
    open_stores("discovery-test", kNow);
    if (HasFatalFailure()) return;
    seed(*redis_store_);
    seed(*sqlite_store_);
  }
};

TEST_F(StoreDiscovery, BothStoresGiveTheSameSnapshot) {
  for (const char* who : {"alice", "bob", "carol"}) {
    Result<DiscoverySnapshot> r = redis_store_->read_discovery(member(who));
    Result<DiscoverySnapshot> s = sqlite_store_->read_discovery(member(who));
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(r->member, s->member);
    EXPECT_EQ(r->granted_total, s->granted_total) << who;
    EXPECT_EQ(r->next_after, s->next_after) << who;
    ASSERT_EQ(r->connections.size(), s->connections.size()) << who;
    for (std::size_t i = 0; i < r->connections.size(); ++i) {
      EXPECT_EQ(r->connections[i].id, s->connections[i].id);
      EXPECT_EQ(r->connections[i].manifest, s->connections[i].manifest)
          << who << " " << r->connections[i].id;
      EXPECT_TRUE(r->connections[i] == s->connections[i]) << who << " " << r->connections[i].id;
    }
    EXPECT_GT(s->epoch, 0);
  }
}

TEST_F(StoreDiscovery, ASnapshotHoldsWhatTheCallerMaySee) {
  for (ManifestStore* store : stores()) {
    SCOPED_TRACE(store->describe());
    Result<DiscoverySnapshot> snap = store->read_discovery(member("alice"));
    ASSERT_TRUE(snap.ok()) << snap.error().message;
    EXPECT_EQ(snap->granted_ids(), (std::vector<std::string>{"a", "b", "c", "gone"}));
    const GrantedConnection* a = snap->find("a");
    ASSERT_NE(a, nullptr);
    ASSERT_TRUE(a->record);
    EXPECT_EQ(a->record->config_hash, "hash-a");
    EXPECT_EQ(a->principal, Principal::shared());
    ASSERT_TRUE(a->manifest);
    EXPECT_EQ(a->manifest->etag, "sha256-a");
    EXPECT_EQ(a->manifest->cache_scope, CacheScope::kPublic);
    EXPECT_EQ(a->disabled, (DisabledOverlay{"prompt:p", "tool:x_a"}));
    EXPECT_FALSE(a->lease_held);
    const GrantedConnection* b = snap->find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->principal, member("alice"));  // per-member: her own listing, never bob's
    ASSERT_TRUE(b->manifest);
    EXPECT_EQ(b->manifest->etag, "sha256-b");
    EXPECT_EQ(b->manifest->error_code, "");
    EXPECT_TRUE(snap->find("c")->lease_held);
    EXPECT_FALSE(snap->find("c")->manifest.has_value());
    EXPECT_FALSE(snap->find("gone")->record.has_value());  // removed: never shown

    Result<DiscoverySnapshot> bob = store->read_discovery(member("bob"));
    ASSERT_TRUE(bob.ok());
    EXPECT_EQ(bob->granted_ids(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(bob->find("b")->principal, member("bob"));
    ASSERT_TRUE(bob->find("b")->manifest);
    EXPECT_EQ(bob->find("b")->manifest->error_code, "UPSTREAM_UNAVAILABLE");
    EXPECT_EQ(bob->find("b")->manifest->cache_scope, CacheScope::kPrivate);

    Result<DiscoverySnapshot> carol = store->read_discovery(member("carol"));
    ASSERT_TRUE(carol.ok());
    EXPECT_TRUE(carol->connections.empty());

    EXPECT_EQ(store->read_discovery(Principal::shared()).error().code, ErrorCode::kInvalidArgument);
  }
}

TEST_F(StoreDiscovery, PagesAndSingleConnections) {
  for (ManifestStore* store : stores()) {
    SCOPED_TRACE(store->describe());
    SnapshotQuery q;
    q.limit = 2;
    Result<DiscoverySnapshot> first = store->read_discovery(member("alice"), q);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->granted_ids(), (std::vector<std::string>{"a", "b"}));
    ASSERT_TRUE(first->next_after);
    EXPECT_EQ(*first->next_after, "b");
    q.after = *first->next_after;
    Result<DiscoverySnapshot> second = store->read_discovery(member("alice"), q);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->granted_ids(), (std::vector<std::string>{"c", "gone"}));
    EXPECT_FALSE(second->next_after);

    SnapshotQuery only;
    only.only = "b";
    only.limit = 1;
    Result<DiscoverySnapshot> one = store->read_discovery(member("alice"), only);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->granted_ids(), (std::vector<std::string>{"b"}));
    only.only = "c";
    Result<DiscoverySnapshot> ungranted = store->read_discovery(member("bob"), only);
    ASSERT_TRUE(ungranted.ok());
    EXPECT_TRUE(ungranted->connections.empty());

    SnapshotQuery bad;
    bad.limit = 0;
    EXPECT_EQ(store->read_discovery(member("alice"), bad).error().code,
              ErrorCode::kInvalidArgument);
  }
}

TEST_F(StoreDiscovery, RedisDownIsUnavailableThenRecovers) {
  redis_.stop();
  Result<DiscoverySnapshot> down = redis_store_->read_discovery(member("alice"));
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.error().code, ErrorCode::kStoreUnavailable);
  ASSERT_TRUE(redis_.start());
  // The server came back empty (no persistence): not an empty snapshot ("nothing granted") but
  // "not ready", until an agent has restored the namespace.
  ASSERT_TRUE(testing::wait_until(
      [&] {
        Result<DiscoverySnapshot> r = redis_store_->read_discovery(member("alice"));
        return !r.ok() && r.error().code == ErrorCode::kStoreNotReady;
      },
      5000));
  seed(*redis_store_);
  Result<DiscoverySnapshot> back = redis_store_->read_discovery(member("alice"));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->connections, sqlite_store_->read_discovery(member("alice"))->connections);
}

}  // namespace
}  // namespace quiver
