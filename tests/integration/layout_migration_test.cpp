// The migration of a namespace from key layout v1 to v2 in place (`quiver-agent migrate-layout v2`,
// RedisStore::migrate_layout_to_v2; docs/design.md "Migration from v1, and the `layout` record"),
// on one real redis-server and on a real six-node Redis Cluster: a namespace the real store wrote
// in v1 is moved through `v2:filling` (readers read v1, nobody writes) to `v2:ready`, after which
// every reader renders what it rendered before, byte for byte, from the v2 keys; a v1 writer is
// refused and a v2 writer writes; the v1 keys are then cleaned up, the shared `{<ns>}` records
// kept. A record someone else moves stops the migration, and a migration cut short resumes.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/layout.h"
#include "tests/support/discovery_reads.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/one_redis_or_cluster.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

using testing::commit_listing;
using testing::listing_write;
using testing::stdio_record;

constexpr int64_t kStart = 1'790'000'000'000;
constexpr char kNs[] = "moving";

using testing::Deployment;

class MigrateLayout : public testing::OneRedisOrCluster {
 protected:
  std::set<std::string> keys_of_namespace() { return keys_of(kNs); }

  std::unique_ptr<RedisStore> store(KeyLayout layout) {
    RedisStoreOptions o = store_options(kNs, layout);
    o.now_ms = [this] { return now_; };
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  // A v1 namespace as the agent writes it: ten connections (every third per-member), members m1
  // and m2 granted overlapping sets, a listing for every shared connection and every granted
  // per-member pair, and m1's toggle hiding a tool of one of them.
  void write_v1_namespace(RedisStore& s) {
    ASSERT_TRUE(s.begin_namespace_restore(now_).ok());
    std::vector<ConnectionRecord> records;
    for (int i = 0; i < 10; ++i) {
      records.push_back(stdio_record(
          cid(i), i % 3 == 0 ? CredentialMode::kPerMember : CredentialMode::kShared, now_));
    }
    ASSERT_TRUE(s.sync_connections(records).ok());
    GrantMap grants;
    for (int i = 0; i < 10; ++i) {
      if (i < 7) grants["m1"].insert(cid(i));
      if (i >= 3) grants["m2"].insert(cid(i));
    }
    ASSERT_TRUE(s.sync_grants(grants).ok());
    for (int i = 0; i < 10; ++i) {
      if (i % 3 != 0) {
        ASSERT_NO_FATAL_FAILURE(
            commit_listing(s, cid(i), Principal::shared(), listing_write(cid(i), now_)));
        continue;
      }
      for (const char* m : {"m1", "m2"}) {
        if (grants[m].count(cid(i)) == 0) continue;
        ASSERT_NO_FATAL_FAILURE(
            commit_listing(s, cid(i), *Principal::member(m), listing_write(cid(i), now_)));
      }
    }
    PreferenceRow hide;
    hide.resource_id = cid(3);
    hide.capability_type = CapabilityType::kTool;
    hide.capability_key = "x_" + cid(3);
    hide.enabled = false;
    hide.first_seen_at = hide.last_seen_at = hide.toggled_at = now_;
    hide.principal = *Principal::member("m1");
    ASSERT_TRUE(s.merge_preferences(cid(3), hide.principal, {hide}).ok());
    ASSERT_TRUE(*s.mark_namespace_ready(now_));
  }

  static std::string cid(int i) { return "conn-" + std::to_string(i); }

  std::string answer(RedisStore& s, const char* member) {
    Result<DiscoverySnapshot> snap = s.read_discovery(*Principal::member(member), SnapshotQuery{});
    EXPECT_TRUE(snap.ok()) << snap.error().message;
    // Rendered at one instant whatever the test's clock says since (the ages would differ).
    return snap.ok() ? testing::rendered_answer(*snap, kStart + 10) : std::string();
  }

  int64_t now_ = kStart;
  RedisKeys v1_ = *RedisKeys::create(kNs);
  RedisKeys v2_ = *RedisKeys::create(kNs, KeyLayout::kV2);
};

TEST_P(MigrateLayout, MovesInPlaceAndEveryReaderRendersWhatItRenderedBefore) {
  std::unique_ptr<RedisStore> agent = store(KeyLayout::kV1);  // an agent of the namespace
  ASSERT_NE(agent, nullptr);
  ASSERT_NO_FATAL_FAILURE(write_v1_namespace(*agent));
  const std::string m1_before = answer(*agent, "m1");
  const std::string m2_before = answer(*agent, "m2");
  ASSERT_NE(m1_before.find("x_conn-1"), std::string::npos) << m1_before;
  ASSERT_EQ(m1_before.find("x_conn-3\""), std::string::npos) << "m1's toggle hides it";
  const std::set<std::string> v1_keys = keys_of_namespace();

  std::unique_ptr<RedisStore> cli = store(KeyLayout::kV1);  // what migrate-layout opens
  ASSERT_NE(cli, nullptr);
  std::vector<std::string> said;
  LayoutMigrationOptions mo;
  mo.settle_ms = 0;
  mo.progress = [&](const std::string& line) {
    said.push_back(line);
    if (said.size() == 1) {
      // While the record says filling: readers read v1 as before; the agent writes nothing.
      EXPECT_EQ(answer(*agent, "m1"), m1_before);
      Result<NamespaceRecord> check = agent->read_namespace();
      ASSERT_FALSE(check.ok());
      EXPECT_TRUE(is_layout_migrating_error(check.error())) << check.error().message;
      Result<AcquireResult> lease =
          agent->acquire_lease(cid(1), Principal::shared(), std::string(32, 'd'), 60'000);
      ASSERT_FALSE(lease.ok());
      EXPECT_EQ(lease.error().code, ErrorCode::kStoreUnavailable);
      EXPECT_TRUE(is_layout_migrating_error(lease.error())) << lease.error().message;
    }
  };
  now_ += 1'000;
  Result<LayoutMigration> done = cli->migrate_layout_to_v2(mo);
  ASSERT_TRUE(done.ok()) << done.error().message;
  EXPECT_FALSE(done->already_v2);
  EXPECT_EQ(done->filling_record, "v2:filling:" + std::to_string(now_));
  EXPECT_EQ(done->ready_record, "v2:ready:" + std::to_string(now_));
  EXPECT_EQ(said.size(), 3u);
  EXPECT_EQ(raw({"GET", v1_.layout()}).str, done->ready_record);
  EXPECT_GT(done->copy.keys_restored, 0);
  EXPECT_GT(done->copy.grants_converted, 0);

  // Every reader renders what it rendered: a store that writes v2 (an agent restarted after the
  // switch) and the v1 agent's store, which follows the record into the rounds.
  std::unique_ptr<RedisStore> restarted = store(KeyLayout::kV2);
  ASSERT_NE(restarted, nullptr);
  ASSERT_TRUE(restarted->read_namespace().ok());
  EXPECT_EQ(answer(*restarted, "m1"), m1_before);
  EXPECT_EQ(answer(*restarted, "m2"), m2_before);
  EXPECT_EQ(answer(*agent, "m1"), m1_before);
  // The v1 writer writes nothing any more; the v2 one does, into v2 keys.
  Result<AcquireResult> refused =
      agent->acquire_lease(cid(1), Principal::shared(), std::string(32, 'e'), 60'000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kStoreUnavailable);
  ASSERT_NO_FATAL_FAILURE(
      commit_listing(*restarted, cid(1), Principal::shared(), listing_write(cid(1), now_ + 5)));
  EXPECT_FALSE(raw({"EXISTS", *v2_.manifest(cid(1), Principal::shared())}).is_nil());

  // Run again: nothing to do.
  Result<LayoutMigration> again = cli->migrate_layout_to_v2(mo);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(again->already_v2);

  // The cleanup: refused while the switch is recent; then every v1 key v2 does not share goes.
  Result<LayoutCleanup> early = cli->cleanup_layout_v1(60'000);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().code, ErrorCode::kConflict) << early.error().message;
  now_ += 60'000;
  Result<LayoutCleanup> cleaned = cli->cleanup_layout_v1(60'000);
  ASSERT_TRUE(cleaned.ok()) << cleaned.error().message;
  EXPECT_GT(cleaned->deleted, 0);
  const std::set<std::string> after = keys_of_namespace();
  for (const std::string& k : v1_keys) {
    const bool shared_name = v2_.parse(k).ok();
    EXPECT_EQ(after.count(k), shared_name ? 1u : 0u) << k;
  }
  EXPECT_EQ(after.count(v1_.namespace_record()), 1u);
  EXPECT_EQ(after.count(v1_.layout()), 1u);
  EXPECT_EQ(answer(*restarted, "m2"), m2_before);
  if (on_cluster()) {
    // The namespace now spans the masters.
    std::set<std::string> masters;
    const ClusterSlotMap map = pool_->map();
    for (const std::string& k : after) {
      const ClusterShard* shard = map.shard_for_slot(cluster_key_slot(k));
      ASSERT_NE(shard, nullptr);
      masters.insert(std::to_string(shard->master.port));
    }
    EXPECT_EQ(masters.size(), 3u);
  }
}

TEST_P(MigrateLayout, ACopyCutShortResumesAndAMovedRecordStopsIt) {
  std::unique_ptr<RedisStore> agent = store(KeyLayout::kV1);
  ASSERT_NE(agent, nullptr);
  ASSERT_NO_FATAL_FAILURE(write_v1_namespace(*agent));
  const std::string m1_before = answer(*agent, "m1");
  std::unique_ptr<RedisStore> cli = store(KeyLayout::kV1);
  ASSERT_NE(cli, nullptr);
  LayoutMigrationOptions mo;
  mo.settle_ms = 0;

  // Someone moves the record while the copy runs: the switch is refused, nothing is switched.
  mo.progress = [&](const std::string& line) {
    if (line.find("filling") != std::string::npos && line.find("layout record") == 0) {
      EXPECT_EQ(raw({"SET", v1_.layout(), "v1:rollback:1"}).str, "OK");
    }
  };
  Result<LayoutMigration> moved = cli->migrate_layout_to_v2(mo);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.error().code, ErrorCode::kConflict) << moved.error().message;
  EXPECT_EQ(raw({"GET", v1_.layout()}).str, "v1:rollback:1");
  EXPECT_EQ(answer(*agent, "m1"), m1_before);

  // A migration cut short after `filling`: run again, it copies again and switches.
  const std::string filling = "v2:filling:" + std::to_string(now_);
  EXPECT_EQ(raw({"SET", v1_.layout(), filling}).str, "OK");
  mo.progress = nullptr;
  Result<LayoutMigration> resumed = cli->migrate_layout_to_v2(mo);
  ASSERT_TRUE(resumed.ok()) << resumed.error().message;
  EXPECT_EQ(resumed->filling_record, filling);
  std::unique_ptr<RedisStore> restarted = store(KeyLayout::kV2);
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(answer(*restarted, "m1"), m1_before);

  // A record naming a layout this build does not know: nothing done. And no cleanup of a
  // namespace that is not v2.
  EXPECT_EQ(raw({"SET", v1_.layout(), "v3:ready:1"}).str, "OK");
  Result<LayoutMigration> unknown = cli->migrate_layout_to_v2(mo);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::kStoreUnavailable) << unknown.error().message;
  EXPECT_EQ(raw({"GET", v1_.layout()}).str, "v3:ready:1");
  EXPECT_EQ(raw({"DEL", v1_.layout()}).integer, 1);
  Result<LayoutCleanup> cleanup = cli->cleanup_layout_v1(0);
  ASSERT_FALSE(cleanup.ok());
  EXPECT_EQ(cleanup.error().code, ErrorCode::kConflict) << cleanup.error().message;
}

INSTANTIATE_TEST_SUITE_P(Deployments, MigrateLayout,
                         ::testing::Values(Deployment::kSingle, Deployment::kCluster),
                         testing::deployment_name);

}  // namespace
}  // namespace quiver
