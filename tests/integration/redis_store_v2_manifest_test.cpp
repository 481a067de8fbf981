// The fenced manifest path of RedisStore in key layout v2 (docs/design.md "What crosses slots, and
// what it changes"), on one real redis-server and on a real six-node Redis Cluster: leases, commits
// (the body stored first, by its SHA-256 alone when Redis holds it), failures, drops and the
// refresh-due index on the connection's shard. A v2 store and a v1 store make the same operations
// on a namespace each; the discovery answers compare byte for byte, the fence refusals are the
// same, and every key the v2 store writes parses back as a v2 key of the slot the design gives it.
// What moves out of the per-member commit (the connection's config_hash and existence) is tested
// from the reader's side.
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_store.h"
#include "shared/connection_record.h"
#include "shared/discovery.h"
#include "shared/discovery_redis.h"
#include "shared/redis_cluster.h"
#include "tests/support/discovery_reads.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/one_redis_or_cluster.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

using testing::listing_write;
using testing::RedisConnection;
using testing::run_argv;
using testing::stdio_record;

constexpr int64_t kNow = 1'790'000'000'000;
constexpr char kV1Ns[] = "one";
constexpr char kV2Ns[] = "two";
// `alpha` shared, `beta` per-member; member m1 is granted both.
constexpr char kShared[] = "alpha";
constexpr char kPerMember[] = "beta";

Principal m1() { return *Principal::member("m1"); }

std::string token(char c) { return std::string(32, c); }

using testing::Deployment;

class RedisStoreV2Manifest : public testing::OneRedisOrCluster {
 protected:
  std::unique_ptr<RedisStore> store(const std::string& ns, KeyLayout layout) {
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(store_options(ns, layout));
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  static std::vector<ConnectionRecord> records() {
    return {stdio_record(kShared, CredentialMode::kShared, kNow),
            stdio_record(kPerMember, CredentialMode::kPerMember, kNow)};
  }

  // A v1 namespace written by a v1 store, as the agent writes it.
  std::unique_ptr<RedisStore> v1_namespace() {
    std::unique_ptr<RedisStore> s = store(kV1Ns, KeyLayout::kV1);
    if (s == nullptr) return nullptr;
    EXPECT_TRUE(s->begin_namespace_restore(kNow).ok());
    EXPECT_TRUE(s->sync_connections(records()).ok());
    EXPECT_TRUE(s->sync_grants({{"m1", {kShared, kPerMember}}}).ok());
    EXPECT_TRUE(*s->mark_namespace_ready(kNow));
    return s;
  }

  // A v2 namespace as schema/redis-keys.md "Keys in layout v2" spells it, written with plain
  // commands (the config and grant writers are not v2 yet): the layout and namespace records, each
  // connection's record, version and registry entry, m1's grants HASH (cid → credential_mode) with
  // its version and registry entry, and the grantees.
  void v2_namespace() {
    const std::string at = std::to_string(kNow);
    ASSERT_EQ(raw({"SET", v2_.layout(), "v2:ready:" + at}).str, "OK");
    ASSERT_EQ(raw({"SET", v2_.namespace_record(), "ready:" + at}).str, "OK");
    for (const ConnectionRecord& r : records()) {
      RedisCommand hset = {"HSET", *v2_.conn(r.id)};
      for (const auto& [f, v] : connection_record_fields(r)) {
        hset.push_back(f);
        hset.push_back(v);
      }
      ASSERT_FALSE(raw(hset).is_error());
      ASSERT_FALSE(raw({"INCR", *v2_.conn_version(r.id)}).is_error());
      ASSERT_FALSE(raw({"SADD", *v2_.conns(*v2_.connection_shard(r.id)), r.id}).is_error());
      ASSERT_FALSE(raw({"SADD", *v2_.grantees(r.id), m1().str()}).is_error());
    }
    ASSERT_FALSE(
        raw({"HSET", *v2_.grants(m1()), kShared, "shared", kPerMember, "per_member"}).is_error());
    ASSERT_FALSE(raw({"INCR", *v2_.member_version(m1())}).is_error());
    ASSERT_FALSE(raw({"SADD", *v2_.grant_members(*v2_.member_shard(m1())), m1().str()}).is_error());
  }

  static AcquireResult acquire(RedisStore& s, const std::string& cid, const Principal& p, char t) {
    Result<AcquireResult> r = s.acquire_lease(cid, p, token(t), 60'000);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : AcquireResult{};
  }

  static LeaseOutcome commit(RedisStore& s, const std::string& cid, const Principal& p,
                             const Lease& lease, const ManifestWrite& w, int64_t due_at = 0) {
    FencedWriteOptions o;
    o.due_at_ms = due_at;
    Result<FencedWriteResult> r = s.commit_manifest(cid, p, lease, w, o);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->outcome : LeaseOutcome::kLeaseLost;
  }

  static LeaseOutcome fail(RedisStore& s, const std::string& cid, const Principal& p,
                           const Lease& lease, int64_t due_at = 0) {
    RefreshFailure f;
    f.config_hash = "hash-" + cid;
    f.error_code = "UPSTREAM_UNAVAILABLE";
    f.error_message = "connection reset";
    f.error_at_ms = kNow + 5;
    f.attempt_at_ms = kNow + 4;
    FencedWriteOptions o;
    o.due_at_ms = due_at;
    Result<FencedWriteResult> r = s.record_failure(cid, p, lease, f, o);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->outcome : LeaseOutcome::kLeaseLost;
  }

  static std::string answer(RedisStore& s, const Principal& who) {
    Result<DiscoverySnapshot> snap = s.read_discovery(who, SnapshotQuery{});
    EXPECT_TRUE(snap.ok()) << snap.error().message;
    return snap.ok() ? testing::rendered_answer(*snap, kNow + 10) : std::string();
  }

  // The same operations on either store: listings of both connections, the shared one listed
  // again unchanged (its body already stored: need_body saves the bytes), then a failed refresh of
  // the per-member one recorded beside its data. What the test checks after each step is the
  // caller's.
  void same_operations(RedisStore& s) {
    AcquireResult a = acquire(s, kShared, Principal::shared(), 'a');
    ASSERT_TRUE(a.acquired);
    EXPECT_EQ(commit(s, kShared, Principal::shared(), a.lease, listing_write(kShared, kNow),
                     kNow + 720'000),
              LeaseOutcome::kOk);
    AcquireResult b = acquire(s, kPerMember, m1(), 'b');
    ASSERT_TRUE(b.acquired);
    EXPECT_EQ(commit(s, kPerMember, m1(), b.lease, listing_write(kPerMember, kNow), kNow + 720'000),
              LeaseOutcome::kOk);
    AcquireResult again = acquire(s, kShared, Principal::shared(), 'c');
    ASSERT_TRUE(again.acquired);
    EXPECT_GT(again.lease.fence, a.lease.fence);
    EXPECT_EQ(commit(s, kShared, Principal::shared(), again.lease, listing_write(kShared, kNow + 1),
                     kNow + 720'001),
              LeaseOutcome::kOk);
    AcquireResult f = acquire(s, kPerMember, m1(), 'd');
    ASSERT_TRUE(f.acquired);
    EXPECT_EQ(fail(s, kPerMember, m1(), f.lease, kNow + 30'000), LeaseOutcome::kOk);
  }

  RedisKeys v1_ = *RedisKeys::create(kV1Ns);
  RedisKeys v2_ = *RedisKeys::create(kV2Ns, KeyLayout::kV2);
};

TEST_P(RedisStoreV2Manifest, WritesReadBackByteForByteAsV1AndLandInTheirSlots) {
  std::unique_ptr<RedisStore> one = v1_namespace();
  ASSERT_NE(one, nullptr);
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(two->read_namespace().ok());
  ASSERT_NO_FATAL_FAILURE(same_operations(*one));
  ASSERT_NO_FATAL_FAILURE(same_operations(*two));

  // The discovery answers, the records and their metadata are v1's, byte for byte.
  const std::string v2_answer = answer(*two, m1());
  EXPECT_EQ(answer(*one, m1()), v2_answer);
  EXPECT_NE(v2_answer.find("x_alpha"), std::string::npos) << v2_answer;
  EXPECT_NE(v2_answer.find("x_beta"), std::string::npos) << v2_answer;
  EXPECT_NE(v2_answer.find("connection reset"), std::string::npos) << v2_answer;
  for (const auto& [cid, p] : {std::pair<std::string, Principal>{kShared, Principal::shared()},
                               std::pair<std::string, Principal>{kPerMember, m1()}}) {
    Result<std::optional<StoredManifest>> r1 = one->read_manifest(cid, p);
    Result<std::optional<StoredManifest>> r2 = two->read_manifest(cid, p);
    ASSERT_TRUE(r1.ok() && r2.ok() && *r1 && *r2);
    EXPECT_EQ((*r1)->manifest, (*r2)->manifest);
    EXPECT_EQ((*r1)->meta.etag, (*r2)->meta.etag);
    EXPECT_EQ((*r1)->meta.fence, (*r2)->meta.fence);
    EXPECT_EQ((*r1)->meta.fetched_at_ms, (*r2)->meta.fetched_at_ms);
    EXPECT_EQ((*r1)->meta.body_digest, (*r2)->meta.body_digest);
    Result<std::optional<ManifestMeta>> m1r = one->read_manifest_meta(cid, p);
    Result<std::optional<ManifestMeta>> m2r = two->read_manifest_meta(cid, p);
    ASSERT_TRUE(m1r.ok() && m2r.ok() && *m1r && *m2r);
    EXPECT_EQ((*m1r)->has_data, (*m2r)->has_data);
    EXPECT_EQ((*m1r)->error_code, (*m2r)->error_code);
    EXPECT_EQ((*m1r)->error_at_ms, (*m2r)->error_at_ms);
    EXPECT_EQ((*m1r)->expires_at_ms, (*m2r)->expires_at_ms);
  }

  // Every key the v2 store wrote is a v2 key, in the slot the design gives it: the record's keys
  // in its connection's tag (`shared`) or its member's (a member), the body in its own, the due
  // entries in the connection's shard; no epoch, no v1 key.
  const std::set<std::string> written = keys_of(kV2Ns);
  std::map<KeyKind, int> kinds;
  for (const std::string& key : written) {
    Result<ParsedKey> p = v2_.parse(key);
    ASSERT_TRUE(p.ok()) << key << ": " << p.error().message;
    ++kinds[p->kind];
    const std::string tag = key.substr(key.find('{') + 1, key.find('}') - key.find('{') - 1);
    switch (p->kind) {
      case KeyKind::kManifest:
      case KeyKind::kLease:
      case KeyKind::kFence:
        EXPECT_EQ(tag, p->principal->is_shared() ? std::string(kV2Ns) + ":c:" + p->connection_id
                                                 : std::string(kV2Ns) + ":m:m1")
            << key;
        break;
      case KeyKind::kBody:
        EXPECT_EQ(tag, std::string(kV2Ns) + ":b:" + p->digest) << key;
        break;
      case KeyKind::kDue:
        EXPECT_EQ(tag, std::string(kV2Ns) + ":s:" + std::to_string(*p->shard)) << key;
        break;
      default:
        break;
    }
    if (on_cluster()) {
      EXPECT_EQ(raw({"CLUSTER", "KEYSLOT", key}).integer, cluster_key_slot(key)) << key;
    }
  }
  EXPECT_EQ(kinds[KeyKind::kManifest], 2);
  EXPECT_EQ(kinds[KeyKind::kBody], 2) << "one body per content";
  EXPECT_EQ(kinds[KeyKind::kEpoch], 0);
  for (const char* cid : {kShared, kPerMember}) {
    const std::string due = *v2_.due(*v2_.connection_shard(cid));
    const Principal p = std::string(cid) == kShared ? Principal::shared() : m1();
    EXPECT_FALSE(raw({"ZSCORE", due, *due_member(cid, p)}).is_nil()) << due;
  }
  // The shared commits moved alpha's version twice; m1's commit and failure moved m1's twice
  // (each from the fixture's 1).
  EXPECT_EQ(raw({"GET", *v2_.conn_version(kShared)}).str, "3");
  EXPECT_EQ(raw({"GET", *v2_.member_version(m1())}).str, "3");
}

TEST_P(RedisStoreV2Manifest, AnUnchangedBodyIsNotSentAgain) {
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  const ManifestWrite w = listing_write(kShared, kNow);
  AcquireResult a = acquire(*two, kShared, Principal::shared(), 'a');
  ASSERT_EQ(commit(*two, kShared, Principal::shared(), a.lease, w), LeaseOutcome::kOk);
  const std::string body = *v2_.body(manifest_body_digest(w.manifest));
  ASSERT_EQ(raw({"GET", body}).str, w.manifest);
  const int64_t expiry = raw({"PEXPIRETIME", body}).integer;
  // Other bytes under the name (which no writer stores): a commit that sent the body would repair
  // them, one that named it by its SHA-256 alone leaves them. The second commit sends the digest.
  ASSERT_EQ(raw({"SET", body, "placeholder", "KEEPTTL"}).str, "OK");
  AcquireResult b = acquire(*two, kShared, Principal::shared(), 'b');
  ManifestWrite later = w;
  later.expires_at_ms = 4'000'000'000'000;  // past Redis's clock: the body's expiry follows it
  ASSERT_EQ(commit(*two, kShared, Principal::shared(), b.lease, later), LeaseOutcome::kOk);
  EXPECT_EQ(raw({"GET", body}).str, "placeholder") << "the bytes were sent again";
  EXPECT_GT(raw({"PEXPIRETIME", body}).integer, expiry) << "its expiry moves with the commit";
  // Absent (evicted): need_body, and the bytes go.
  ASSERT_EQ(raw({"DEL", body}).integer, 1);
  AcquireResult c = acquire(*two, kShared, Principal::shared(), 'c');
  ASSERT_EQ(commit(*two, kShared, Principal::shared(), c.lease, w), LeaseOutcome::kOk);
  EXPECT_EQ(raw({"GET", body}).str, w.manifest);
}

TEST_P(RedisStoreV2Manifest, FenceChecksRefuseAsInV1) {
  std::unique_ptr<RedisStore> one = v1_namespace();
  ASSERT_NE(one, nullptr);
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  for (RedisStore* s : {one.get(), two.get()}) {
    SCOPED_TRACE(s == one.get() ? "v1" : "v2");
    for (const Principal& p : {Principal::shared(), m1()}) {
      const std::string cid = p.is_shared() ? kShared : kPerMember;
      AcquireResult first = acquire(*s, cid, p, 'a');
      ASSERT_TRUE(first.acquired);
      AcquireResult held = acquire(*s, cid, p, 'b');
      EXPECT_FALSE(held.acquired);
      EXPECT_EQ(held.holder_fence, first.lease.fence);
      EXPECT_EQ(*s->renew_lease(cid, p, first.lease, 60'000), LeaseOutcome::kOk);
      // Released: the holder's lease is lost, and nobody newer holds it.
      EXPECT_EQ(*s->release_lease(cid, p, first.lease), LeaseOutcome::kOk);
      EXPECT_EQ(*s->renew_lease(cid, p, first.lease, 60'000), LeaseOutcome::kLeaseLost);
      EXPECT_EQ(commit(*s, cid, p, first.lease, listing_write(cid, kNow)),
                LeaseOutcome::kLeaseLost);
      EXPECT_EQ(fail(*s, cid, p, first.lease), LeaseOutcome::kLeaseLost);
      // A newer holder: the old fence is stale, for commits and failures alike.
      AcquireResult second = acquire(*s, cid, p, 'c');
      ASSERT_TRUE(second.acquired);
      EXPECT_GT(second.lease.fence, first.lease.fence);
      FencedWriteOptions o;
      Result<FencedWriteResult> stale =
          s->commit_manifest(cid, p, first.lease, listing_write(cid, kNow), o);
      ASSERT_TRUE(stale.ok());
      EXPECT_EQ(stale->outcome, LeaseOutcome::kStaleFence);
      EXPECT_EQ(stale->current_fence, second.lease.fence);
      EXPECT_EQ(fail(*s, cid, p, first.lease), LeaseOutcome::kStaleFence);
      EXPECT_FALSE(*s->read_manifest_meta(cid, p)) << "a refused write writes no record";
      EXPECT_EQ(commit(*s, cid, p, second.lease, listing_write(cid, kNow)), LeaseOutcome::kOk);
    }
  }
  // Refused writes scored no due entry either: only the two commits did.
  std::map<std::string, int> expected;
  for (const char* cid : {kShared, kPerMember}) ++expected[*v2_.due(*v2_.connection_shard(cid))];
  for (const auto& [due, n] : expected) EXPECT_EQ(raw({"ZCARD", due}).integer, n) << due;
}

// A per-member commit cannot read the connection's config_hash (another slot): it stores the one
// its listing started under, and the reader treats a mismatch as a miss. The shared commit still
// checks it in its script.
TEST_P(RedisStoreV2Manifest, APerMemberCommitUnderAnOldConfigIsAMissForReaders) {
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  ManifestWrite old_beta = listing_write(kPerMember, kNow);
  old_beta.config_hash = "hash-before";
  AcquireResult b = acquire(*two, kPerMember, m1(), 'b');
  EXPECT_EQ(commit(*two, kPerMember, m1(), b.lease, old_beta), LeaseOutcome::kOk);
  ManifestWrite old_alpha = listing_write(kShared, kNow);
  old_alpha.config_hash = "hash-before";
  AcquireResult a = acquire(*two, kShared, Principal::shared(), 'a');
  EXPECT_EQ(commit(*two, kShared, Principal::shared(), a.lease, old_alpha),
            LeaseOutcome::kConfigChanged);

  Result<DiscoverySnapshot> snap = two->read_discovery(m1(), SnapshotQuery{});
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  const std::string rendered = testing::rendered_answer(*snap, kNow + 10);
  EXPECT_EQ(rendered.find("x_beta"), std::string::npos) << "data of an old config is never served";
  EXPECT_NE(rendered.find("beta/member/m1/"), std::string::npos) << "and a miss is revalidated";
  EXPECT_NE(rendered.find(R"("pending_reason":"config_changed","principal":"member/m1")"),
            std::string::npos)
      << rendered;

  // Listed again under the current config: served.
  AcquireResult again = acquire(*two, kPerMember, m1(), 'c');
  EXPECT_EQ(commit(*two, kPerMember, m1(), again.lease, listing_write(kPerMember, kNow)),
            LeaseOutcome::kOk);
  EXPECT_NE(answer(*two, m1()).find("x_beta"), std::string::npos);
}

// A commit for a removed connection: the shared one still sees the record (its slot) and refuses;
// a member's cannot, and leaves an orphan record that no reader reaches.
TEST_P(RedisStoreV2Manifest, ACommitForARemovedConnection) {
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  AcquireResult a = acquire(*two, kShared, Principal::shared(), 'a');
  AcquireResult b = acquire(*two, kPerMember, m1(), 'b');
  // Both removed while listing, as a config sync removes them: the records, m1's grants.
  ASSERT_EQ(raw({"DEL", *v2_.conn(kShared)}).integer, 1);
  ASSERT_EQ(raw({"DEL", *v2_.conn(kPerMember)}).integer, 1);
  ASSERT_EQ(raw({"HDEL", *v2_.grants(m1()), kShared, kPerMember}).integer, 2);
  EXPECT_EQ(commit(*two, kShared, Principal::shared(), a.lease, listing_write(kShared, kNow)),
            LeaseOutcome::kConnectionRemoved);
  EXPECT_EQ(fail(*two, kShared, Principal::shared(), a.lease), LeaseOutcome::kConnectionRemoved);
  EXPECT_TRUE(raw({"EXISTS", *v2_.manifest(kShared, Principal::shared())}).integer == 0);
  EXPECT_EQ(commit(*two, kPerMember, m1(), b.lease, listing_write(kPerMember, kNow)),
            LeaseOutcome::kOk);
  EXPECT_EQ(raw({"EXISTS", *v2_.manifest(kPerMember, m1())}).integer, 1) << "the orphan";
  // Indexed with it: maintenance lists it when due and drops it (its connection is unconfigured).
  Result<DuePage> due = two->list_due(kNow + 1, 0, 10);
  ASSERT_TRUE(due.ok()) << due.error().message;
  ASSERT_EQ(due->entries.size(), 1u);
  EXPECT_EQ(due->entries[0].connection_id, kPerMember);
  EXPECT_TRUE(due->entries[0].meta.has_value());
  // Nobody reads it: m1 is granted nothing, and a grant of beta again finds no record of beta.
  EXPECT_EQ(answer(*two, m1()).find("x_beta"), std::string::npos);
  ASSERT_FALSE(raw({"HSET", *v2_.grants(m1()), kPerMember, "per_member"}).is_error());
  Result<DiscoverySnapshot> snap = two->read_discovery(m1(), SnapshotQuery{});
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(testing::rendered_answer(*snap, kNow + 10).find("x_beta"), std::string::npos);
}

TEST_P(RedisStoreV2Manifest, TheDueIndexIsOnTheConnectionsShard) {
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  // v2 is filled with its index built: no backfill, no SCAN.
  Result<DueBackfill> backfill = two->backfill_due_index(1000);
  ASSERT_TRUE(backfill.ok());
  EXPECT_TRUE(backfill->done);
  EXPECT_EQ(backfill->scanned, 0u);
  Result<std::vector<bool>> before =
      two->has_due_entries({{kShared, Principal::shared()}, {kPerMember, m1()}});
  ASSERT_TRUE(before.ok()) << before.error().message;
  EXPECT_EQ(*before, (std::vector<bool>{false, false}));

  AcquireResult a = acquire(*two, kShared, Principal::shared(), 'a');
  ASSERT_EQ(
      commit(*two, kShared, Principal::shared(), a.lease, listing_write(kShared, kNow), kNow + 100),
      LeaseOutcome::kOk);
  AcquireResult b = acquire(*two, kPerMember, m1(), 'b');
  ASSERT_EQ(fail(*two, kPerMember, m1(), b.lease, kNow + 50), LeaseOutcome::kOk);
  // A member no writer makes, in a shard: listed as unreadable and taken out.
  const std::string junk_due = *v2_.due(3);
  ASSERT_EQ(raw({"ZADD", junk_due, "10", "not a member"}).integer, 1);

  Result<std::vector<bool>> indexed =
      two->has_due_entries({{kShared, Principal::shared()}, {kPerMember, m1()}});
  ASSERT_TRUE(indexed.ok());
  EXPECT_EQ(*indexed, (std::vector<bool>{true, true}));
  for (const auto& [cid, p, score] : {std::tuple<std::string, Principal, std::string>{
                                          kShared, Principal::shared(), std::to_string(kNow + 100)},
                                      std::tuple<std::string, Principal, std::string>{
                                          kPerMember, m1(), std::to_string(kNow + 50)}}) {
    EXPECT_EQ(raw({"ZSCORE", *v2_.due(*v2_.connection_shard(cid)), *due_member(cid, p)}).str,
              score);
  }

  // Not yet due at kNow + 49: only the junk member (score 10).
  Result<DuePage> early = two->list_due(kNow + 49, 0, 10);
  ASSERT_TRUE(early.ok()) << early.error().message;
  EXPECT_EQ(early->listed, 1u);
  EXPECT_TRUE(early->entries.empty());
  EXPECT_EQ(early->unreadable.size(), 1u);
  EXPECT_TRUE(raw({"ZSCORE", junk_due, "not a member"}).is_nil()) << "taken out of its shard";

  // Both due: soonest first across shards, paged by offset.
  Result<DuePage> first = two->list_due(kNow + 1000, 0, 1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->entries.size(), 1u);
  EXPECT_EQ(first->entries[0].connection_id, kPerMember);
  EXPECT_EQ(first->entries[0].due_at_ms, kNow + 50);
  ASSERT_TRUE(first->entries[0].meta.has_value());
  EXPECT_EQ(first->entries[0].meta->error_code, "UPSTREAM_UNAVAILABLE");
  Result<DuePage> second = two->list_due(kNow + 1000, 1, 1);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->entries.size(), 1u);
  EXPECT_EQ(second->entries[0].connection_id, kShared);
  ASSERT_TRUE(second->entries[0].meta.has_value());
  EXPECT_TRUE(second->entries[0].meta->has_data);
  Result<DuePage> past = two->list_due(kNow + 1000, 2, 1);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->listed, 0u);

  // Settled: moved while the score is the one read; a stale read moves nothing.
  Result<std::vector<bool>> settled = two->settle_due(
      {{kShared, Principal::shared(), kNow + 100, kNow + 5000}, {kPerMember, m1(), 1, kNow + 9}});
  ASSERT_TRUE(settled.ok()) << settled.error().message;
  EXPECT_EQ(*settled, (std::vector<bool>{true, false}));
  EXPECT_EQ(raw({"ZSCORE", *v2_.due(*v2_.connection_shard(kShared)),
                 *due_member(kShared, Principal::shared())})
                .str,
            std::to_string(kNow + 5000));

  // Forgotten only when the record is gone: it exists, so the entry stays.
  Result<std::vector<bool>> kept = two->settle_due({{kPerMember, m1(), kNow + 50, std::nullopt}});
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, std::vector<bool>{false});
  // Dropped: the record, its gate and mark, its due entry; m1's version moves.
  const std::string m1_version = raw({"GET", *v2_.member_version(m1())}).str;
  Result<bool> dropped = two->drop_manifest(kPerMember, m1());
  ASSERT_TRUE(dropped.ok()) << dropped.error().message;
  EXPECT_TRUE(*dropped);
  EXPECT_EQ(raw({"EXISTS", *v2_.manifest(kPerMember, m1())}).integer, 0);
  EXPECT_TRUE(
      raw({"ZSCORE", *v2_.due(*v2_.connection_shard(kPerMember)), *due_member(kPerMember, m1())})
          .is_nil());
  EXPECT_EQ(raw({"GET", *v2_.member_version(m1())}).str,
            std::to_string(std::stoll(m1_version) + 1));
  EXPECT_FALSE(*two->drop_manifest(kPerMember, m1())) << "nothing left to drop";

  // A record deleted by hand leaves its entry: it comes due without metadata and is forgotten.
  ASSERT_EQ(raw({"DEL", *v2_.manifest(kShared, Principal::shared())}).integer, 1);
  Result<DuePage> gone = two->list_due(kNow + 6000, 0, 10);
  ASSERT_TRUE(gone.ok());
  ASSERT_EQ(gone->entries.size(), 1u);
  EXPECT_FALSE(gone->entries[0].meta.has_value());
  Result<std::vector<bool>> forgot =
      two->settle_due({{kShared, Principal::shared(), kNow + 5000, std::nullopt}});
  ASSERT_TRUE(forgot.ok());
  EXPECT_EQ(*forgot, std::vector<bool>{true});
  Result<std::vector<bool>> after =
      two->has_due_entries({{kShared, Principal::shared()}, {kPerMember, m1()}});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, (std::vector<bool>{false, false}));
}

// The gate: a store that writes v2 sends nothing to a namespace whose layout record says v1
// (absent), and reads nothing there that would pose as data.
TEST_P(RedisStoreV2Manifest, AV2StoreWritesNothingToAV1Namespace) {
  std::unique_ptr<RedisStore> one = v1_namespace();
  ASSERT_NE(one, nullptr);
  std::unique_ptr<RedisStore> two = store(kV1Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  Result<AcquireResult> lease = two->acquire_lease(kShared, Principal::shared(), token('a'), 1000);
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.error().code, ErrorCode::kStoreUnavailable) << lease.error().message;
  Lease made{1, token('a')};
  Result<FencedWriteResult> c =
      two->commit_manifest(kShared, Principal::shared(), made, listing_write(kShared, kNow), {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::kStoreUnavailable);
  RefreshFailure f;
  f.config_hash = "hash-alpha";
  f.error_code = "UPSTREAM_UNAVAILABLE";
  Result<FencedWriteResult> r = two->record_failure(kShared, Principal::shared(), made, f, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kStoreUnavailable);
  Result<bool> d = two->drop_manifest(kShared, Principal::shared());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kStoreUnavailable);
  for (const std::string& key : keys_of(kV1Ns)) {
    EXPECT_EQ(key.rfind("quiver:{one}:", 0), 0u) << "a v2 key written: " << key;
  }
}

// The walk over every manifest record (list_manifest_metas: tests and the maintenance benchmark's
// "before"; maintenance reads the due index): on v2 every master is SCANned in turn, the cursor
// naming the master by its lowest slot. Paged one at a time it lists what a v1 store lists for
// the same writes, each once; a cursor of the other layout's shape is refused. And v2 has no
// epoch: the store says so instead of reading or writing a key v2 does not have.
TEST_P(RedisStoreV2Manifest, TheWalkOfEveryManifestVisitsEveryMaster) {
  std::unique_ptr<RedisStore> one = v1_namespace();
  ASSERT_NE(one, nullptr);
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(two->read_namespace().ok());
  // Twelve more shared connections, so the records spread over the masters.
  std::vector<ConnectionRecord> more = records();
  for (int i = 0; i < 12; ++i) {
    more.push_back(stdio_record("extra-" + std::to_string(i), CredentialMode::kShared, kNow));
  }
  for (RedisStore* s : {one.get(), two.get()}) {
    ASSERT_TRUE(s->sync_connections(more).ok());
    ASSERT_NO_FATAL_FAILURE(same_operations(*s));
    for (int i = 0; i < 12; ++i) {
      const std::string cid = "extra-" + std::to_string(i);
      AcquireResult a = acquire(*s, cid, Principal::shared(), 'e');
      ASSERT_TRUE(a.acquired);
      ASSERT_EQ(commit(*s, cid, Principal::shared(), a.lease, listing_write(cid, kNow)),
                LeaseOutcome::kOk);
    }
  }
  auto walk = [](RedisStore& s, std::size_t batch) {
    std::multiset<std::string> seen;
    std::string cursor;
    for (int pages = 0; pages < 1000; ++pages) {
      Result<ManifestPage> page = s.list_manifest_metas(cursor, batch);
      EXPECT_TRUE(page.ok()) << page.error().message;
      if (!page.ok()) break;
      EXPECT_TRUE(page->unreadable.empty());
      for (const ManifestMeta& m : page->metas) {
        seen.insert(m.connection_id + " " + m.principal.str() + " " + m.etag.value_or("-"));
      }
      if (page->next_cursor.empty()) break;
      cursor = page->next_cursor;
    }
    return seen;
  };
  const std::multiset<std::string> v1_all = walk(*one, 100);
  EXPECT_EQ(v1_all.size(), 14u);
  for (std::size_t batch : {std::size_t{1}, std::size_t{3}, std::size_t{100}}) {
    EXPECT_EQ(walk(*two, batch), v1_all) << "batch " << batch;
  }
  if (on_cluster()) {
    std::set<std::string> masters;
    const std::set<std::string> written = keys_of(kV2Ns);
    const ClusterSlotMap map = pool_->map();
    for (const std::string& key : written) {
      if (v2_.parse(key)->kind != KeyKind::kManifest) continue;
      const ClusterShard* shard = map.shard_for_slot(cluster_key_slot(key));
      ASSERT_NE(shard, nullptr);
      masters.insert(shard->master.host + ":" + std::to_string(shard->master.port));
    }
    EXPECT_GT(masters.size(), 1u) << "the records are on several masters";
  }
  Result<ManifestPage> bad = two->list_manifest_metas("17", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(two->list_manifest_metas("16384.0", 1).ok());
  EXPECT_FALSE(one->list_manifest_metas("0.0", 1).ok());

  EXPECT_TRUE(one->has_epoch());
  EXPECT_FALSE(two->has_epoch());
  for (Result<int64_t> e : {two->read_epoch(), two->bump_epoch()}) {
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.error().code, ErrorCode::kStoreUnavailable) << e.error().message;
  }
}

// What the split costs a refresh on one Redis (loopback): acquire + commit of an unchanged listing,
// v1's one script against v2's body check, commit script and ZADD. Printed, not asserted.
TEST_P(RedisStoreV2Manifest, WhatACommitCosts) {
  std::unique_ptr<RedisStore> one = v1_namespace();
  ASSERT_NE(one, nullptr);
  ASSERT_NO_FATAL_FAILURE(v2_namespace());
  std::unique_ptr<RedisStore> two = store(kV2Ns, KeyLayout::kV2);
  ASSERT_NE(two, nullptr);
  constexpr int kCommits = 300;
  for (RedisStore* s : {one.get(), two.get()}) {
    for (const Principal& p : {Principal::shared(), m1()}) {
      const std::string cid = p.is_shared() ? kShared : kPerMember;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCommits; ++i) {
        AcquireResult a = acquire(*s, cid, p, 'a');
        ASSERT_TRUE(a.acquired);
        ASSERT_EQ(commit(*s, cid, p, a.lease, listing_write(cid, kNow + i)), LeaseOutcome::kOk);
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          kCommits;
      std::cout << (on_cluster() ? "cluster " : "one redis ") << (s == one.get() ? "v1 " : "v2 ")
                << (p.is_shared() ? "shared" : "member") << ": acquire + unchanged commit "
                << static_cast<int>(us) << " us\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Deployments, RedisStoreV2Manifest,
                         ::testing::Values(Deployment::kSingle, Deployment::kCluster),
                         testing::deployment_name);

}  // namespace
}  // namespace quiver
