// ManifestStore::apply_webhook on both stores: the same table of signed webhooks, applied to the
// same data on a real redis-server (RedisStore: the edge's own schema/lua/webhook_refresh.lua) and
// on a real SQLite file (SqliteStore: the same rules in one transaction), must give the same
// replies — result for result, in the same order — and leave the same marks, epoch moves and
// queued requests. What the agent answers to a webhook is then what the edge answers.
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/store.h"
#include "shared/discovery_classification.h"
#include "shared/discovery_redis.h"
#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/redis_keys.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

constexpr int64_t kNow = 1'790'000'000'000;
constexpr int64_t kWindow = 30'000;
constexpr char kNs[] = "webhook-test";

Principal member(const char* id) { return *Principal::member(id); }

ConnectionRecord record(const std::string& id, CredentialMode mode) {
  return testing::stdio_record(id, mode, kNow);
}

void commit(ManifestStore& store, const std::string& cid, const Principal& p) {
  testing::commit_listing(store, cid, p, testing::listing_write(cid, kNow - 60'000));
}

// The same data in each store, written through the store API as an agent writes it: a shared
// connection, a per_member one with three grantees (data cached for two of them, a listing of one
// under way), a per_member one nobody is granted.
void seed(ManifestStore& store) {
  ASSERT_TRUE(store.begin_namespace_restore(kNow).ok());
  ASSERT_TRUE(store
                  .sync_connections({record("docs", CredentialMode::kShared),
                                     record("pm", CredentialMode::kPerMember),
                                     record("lonely", CredentialMode::kPerMember)})
                  .ok());
  ASSERT_TRUE(
      store
          .sync_grants(
              {{"alice", {"docs", "pm"}}, {"bob", {"pm"}}, {"carol", {"pm"}}, {"dave", {"docs"}}})
          .ok());
  commit(store, "docs", Principal::shared());
  commit(store, "pm", member("alice"));
  commit(store, "pm", member("bob"));
  Result<AcquireResult> held =
      store.acquire_lease("pm", member("bob"), std::string(32, 'd'), 60'000);
  ASSERT_TRUE(held.ok() && held->acquired);
  ASSERT_TRUE(*store.mark_namespace_ready(kNow));
}

WebhookRefreshTarget target(const std::string& cid, std::optional<Principal> p = std::nullopt) {
  return {cid, std::move(p), "deploy"};
}

WebhookRefreshResult result(const std::string& cid, std::optional<Principal> p, const char* status,
                            bool marked) {
  return {cid, std::move(p), status, marked};
}

std::string describe(const Result<WebhookRefreshReply>& r) {
  if (!r.ok()) return "error " + std::to_string(static_cast<int>(r.error().code));
  if (r->replay) return "replay";
  std::string out = "accepted";
  for (const WebhookRefreshResult& x : r->results) {
    out += " [" + x.connection_id + " " + (x.principal ? x.principal->str() : "-") + " " +
           x.status + (x.marked_stale ? " marked" : "") + "]";
  }
  return out;
}

class StoreWebhook : public testing::StorePairTest {
 protected:
  void SetUp() override {
    open_stores(kNs, kNow);
    if (HasFatalFailure()) return;
    seed(*redis_store_);
    seed(*sqlite_store_);
    for (ManifestStore* store : stores()) epoch_before_.push_back(*store->read_epoch());
  }

  // The same webhook applied to both stores: the replies must be equal; the Redis one returned.
  Result<WebhookRefreshReply> apply(const std::string& signed_id,
                                    const std::vector<WebhookRefreshTarget>& targets, int64_t at) {
    WebhookRefreshRequest request;
    request.targets = targets;
    const WebhookVerified verified{at, "wh:" + signed_id, 300'000};
    Result<WebhookRefreshReply> on_redis =
        redis_store_->apply_webhook(verified, request, at, kWindow);
    Result<WebhookRefreshReply> on_sqlite =
        sqlite_store_->apply_webhook(verified, request, at, kWindow);
    EXPECT_EQ(describe(on_redis), describe(on_sqlite)) << signed_id;
    return on_redis;
  }

  // What each store queued since the last call (acknowledged now), as "cid principal reason at".
  std::vector<std::string> queued(ManifestStore& store) {
    Result<RevalidationBatch> batch = store.read_revalidations("webhook-test", 100, 0);
    EXPECT_TRUE(batch.ok()) << batch.error().message;
    std::vector<std::string> out;
    std::vector<std::string> ids;
    if (!batch.ok()) return out;
    for (const RevalidationRequest& r : batch->requests) {
      out.push_back(r.connection_id + " " + r.principal.str() + " " + r.reason + " " +
                    std::to_string(r.at_ms));
      ids.push_back(r.id);
    }
    EXPECT_TRUE(store.ack_revalidations(ids).ok());
    return out;
  }
  void expect_queued(const std::vector<std::string>& expected) {
    EXPECT_EQ(queued(*redis_store_), expected) << "redis";
    EXPECT_EQ(queued(*sqlite_store_), expected) << "sqlite";
  }

  std::optional<int64_t> invalidated_at(ManifestStore& store, const std::string& cid,
                                        const Principal& p) {
    Result<std::optional<ManifestMeta>> meta = store.read_manifest_meta(cid, p);
    EXPECT_TRUE(meta.ok());
    if (!meta.ok() || !meta->has_value()) return std::nullopt;
    return (*meta)->invalidated_at_ms;
  }

  int64_t epoch_moved(std::size_t i) { return *stores()[i]->read_epoch() - epoch_before_[i]; }

  std::vector<int64_t> epoch_before_;
};

TEST_F(StoreWebhook, BothStoresExpandMarkAndQueueTheSame) {
  const std::string w = " webhook " + std::to_string(kNow);
  Result<WebhookRefreshReply> r = apply(
      "1",
      {target("docs"), target("pm"), target("pm", member("zed")), target("pm", Principal::shared()),
       target("docs", member("alice")), target("nope"), target("lonely")},
      kNow);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->replay);
  const std::vector<WebhookRefreshResult> expected = {
      result("docs", Principal::shared(), "queued", true),  // shared: the one principal
      // per_member without a principal: the connection marked once as a whole (it has grantees)
      result("pm", std::nullopt, "marked", true),
      result("pm", member("zed"), "unknown_principal", false),  // not a grantee
      result("pm", Principal::shared(), "unknown_principal", false),
      result("docs", member("alice"), "unknown_principal", false),  // shared is cached as shared
      result("nope", std::nullopt, "unknown_connection", false),
      // `lonely`: a per_member connection nobody is granted is marked all the same
      result("lonely", std::nullopt, "marked", false),
  };
  EXPECT_EQ(r->results, expected) << describe(r);
  expect_queued({"docs shared" + w});  // the members are queued by their readers, not here
  for (std::size_t i = 0; i < 2; ++i) {
    ManifestStore& store = *stores()[i];
    EXPECT_EQ(invalidated_at(store, "docs", Principal::shared()), kNow) << i;
    EXPECT_EQ(invalidated_at(store, "pm", member("alice")), kNow) << i;  // the connection's mark
    EXPECT_EQ(invalidated_at(store, "pm", member("bob")), kNow) << i;
    EXPECT_EQ(epoch_moved(i), 1) << i;  // once for the whole webhook
  }

  // The same signed request again: a replay, nothing done.
  r = apply("1", {target("docs")}, kNow + 5);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->replay);
  expect_queued({});

  // Named members: each marked and queued on its own; a held lease is queued behind all the same.
  r = apply("2", {target("pm", member("alice")), target("pm", member("bob"))}, kNow + 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results,
            (std::vector<WebhookRefreshResult>{result("pm", member("alice"), "queued", true),
                                               result("pm", member("bob"), "in_progress", true)}));
  expect_queued({"pm member/alice webhook " + std::to_string(kNow + 10),
                 "pm member/bob webhook " + std::to_string(kNow + 10)});
  // Another one within the requeue interval stands behind the first (nothing queued), but the mark
  // moves forward.
  r = apply("2b", {target("pm", member("alice"))}, kNow + 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(
      r->results,
      (std::vector<WebhookRefreshResult>{result("pm", member("alice"), "already_queued", true)}));
  expect_queued({});
  // After the requeue interval (still inside the gate's window): queued again.
  r = apply("3", {target("pm", member("alice"))}, kNow + 2'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results,
            (std::vector<WebhookRefreshResult>{result("pm", member("alice"), "queued", true)}));
  expect_queued({"pm member/alice webhook " + std::to_string(kNow + 2'000)});
  // A mark never moves back: a webhook signed earlier leaves the later mark.
  r = apply("4", {target("pm", member("alice"))}, kNow + 1'000);
  ASSERT_TRUE(r.ok());
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(invalidated_at(*stores()[i], "pm", member("alice")), kNow + 2'000) << i;
    EXPECT_EQ(epoch_moved(i), 5) << i;
  }
  // Nothing cached, nothing marked: no epoch move, no manifest created.
  r = apply("5", {target("pm", member("carol"))}, kNow + 9'000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_FALSE(r->results[0].marked_stale);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(epoch_moved(i), 5) << i;
    Result<std::optional<ManifestMeta>> meta =
        stores()[i]->read_manifest_meta("pm", member("carol"));
    ASSERT_TRUE(meta.ok());
    EXPECT_FALSE(meta->has_value()) << i;
  }
}

// A webhook for a per_member connection as a whole writes ONE key (marked:<cid>) however many
// members are granted it: no per-member mark, gate or stream entry. Each member's reads then
// apply it lazily (the later of its own mark and the connection's), at both stores: discovery
// shows the member's data stale, the stale read queues that member once through its gate, a
// listing that started after the mark makes it fresh again, and one that started before it
// stays stale even when it commits after.
TEST_F(StoreWebhook, AConnectionIsMarkedOnceAndEachMemberReadsItLazily) {
  testing::RedisConnection c(redis_.connect());
  ASSERT_NE(c, nullptr);
  const RedisKeys keys = *RedisKeys::create(kNs);
  auto keyspace = [&] {
    std::set<std::string> out;
    for (const RespValue& k : testing::run_argv(c.get(), {"KEYS", keys.prefix() + "*"}).elements) {
      out.insert(k.str);
    }
    return out;
  };
  // Many more grantees than the seed's: their number must not matter.
  GrantMap grants = {
      {"alice", {"docs", "pm"}}, {"bob", {"pm"}}, {"carol", {"pm"}}, {"dave", {"docs"}}};
  for (int i = 0; i < 200; ++i) grants["m" + std::to_string(i)] = {"pm"};
  for (ManifestStore* store : stores()) ASSERT_TRUE(store->sync_grants(grants).ok());
  const std::set<std::string> before = keyspace();
  const int64_t stream_before =
      testing::run_argv(c.get(), {"XLEN", keys.revalidate_stream()}).integer;
  const int64_t at = kNow + 5'000;
  Result<WebhookRefreshReply> r = apply("whole", {target("pm")}, at);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->results,
            (std::vector<WebhookRefreshResult>{result("pm", std::nullopt, "marked", true)}));
  // Redis: exactly the mark and the replay guard are new; the epoch moved; nothing queued.
  std::set<std::string> added;
  for (const std::string& k : keyspace()) {
    if (before.count(k) == 0) added.insert(k);
  }
  EXPECT_EQ(added, (std::set<std::string>{*keys.marked("pm"), keys.replay("wh:whole")}));
  EXPECT_EQ(testing::run_argv(c.get(), {"GET", *keys.marked("pm")}).str, std::to_string(at));
  EXPECT_EQ(testing::run_argv(c.get(), {"XLEN", keys.revalidate_stream()}).integer, stream_before);
  expect_queued({});
  // A mark never moves back.
  ASSERT_TRUE(apply("whole-earlier", {target("pm")}, at - 1'000).ok());
  EXPECT_EQ(testing::run_argv(c.get(), {"GET", *keys.marked("pm")}).str, std::to_string(at));

  const FreshnessPolicy policy;
  auto status_in_discovery = [&](ManifestStore& store, const char* id) {
    Result<DiscoverySnapshot> snap = store.read_discovery(member(id), SnapshotQuery{});
    EXPECT_TRUE(snap.ok()) << snap.error().message;
    const GrantedConnection* pm = snap.ok() ? snap->find("pm") : nullptr;
    EXPECT_NE(pm, nullptr) << id;
    if (pm == nullptr || !pm->manifest) return std::string("no entry");
    EXPECT_EQ(pm->manifest->invalidated_at_ms, std::optional<int64_t>(at)) << id;
    Result<std::optional<CacheEntryMeta>> meta = cache_entry_meta(pm->manifest);
    EXPECT_TRUE(meta.ok());
    if (!meta.ok()) return std::string("unreadable");
    return std::string(freshness_name(classify(*meta, policy, "hash-pm", at + 1).state));
  };
  for (std::size_t i = 0; i < 2; ++i) {
    ManifestStore& store = *stores()[i];
    // alice and bob hold data listed before the mark: both read stale, through discovery and
    // through the agent's own reads; carol has nothing cached.
    EXPECT_EQ(status_in_discovery(store, "alice"), "stale") << i;
    EXPECT_EQ(status_in_discovery(store, "bob"), "stale") << i;
    EXPECT_EQ(invalidated_at(store, "pm", member("carol")), std::nullopt) << i;
    Result<std::optional<StoredManifest>> full = store.read_manifest("pm", member("alice"));
    ASSERT_TRUE(full.ok() && full->has_value()) << i;
    EXPECT_EQ((*full)->meta.invalidated_at_ms, std::optional<int64_t>(at)) << i;
    // The walk maintenance classifies with reads the same mark.
    Result<ManifestPage> page = store.list_manifest_metas("", 100);
    ASSERT_TRUE(page.ok()) << i;
    int marked = 0;
    for (const ManifestMeta& m : page->metas) {
      if (m.connection_id == "pm") {
        EXPECT_EQ(m.invalidated_at_ms, std::optional<int64_t>(at)) << i << m.principal.str();
        ++marked;
      }
    }
    EXPECT_EQ(marked, 2) << i;
    // The stale read queues alice's refresh through her gate: once.
    Result<RevalidationOutcome> first =
        store.enqueue_revalidation("pm", member("alice"), "stale", kWindow);
    ASSERT_TRUE(first.ok()) << i;
    EXPECT_EQ(*first, RevalidationOutcome::kQueued) << i;
    Result<RevalidationOutcome> second =
        store.enqueue_revalidation("pm", member("alice"), "stale", kWindow);
    ASSERT_TRUE(second.ok()) << i;
    EXPECT_EQ(*second, RevalidationOutcome::kAlreadyQueued) << i;
    // carol's listing started before the mark and commits after it: her data reads stale.
    testing::commit_listing(store, "pm", member("carol"), testing::listing_write("pm", at - 1));
    EXPECT_EQ(status_in_discovery(store, "carol"), "stale") << i;
    // alice's refresh, listed after the mark: fresh again.
    testing::commit_listing(store, "pm", member("alice"), testing::listing_write("pm", at + 1));
    Result<DiscoverySnapshot> snap = store.read_discovery(member("alice"), SnapshotQuery{});
    ASSERT_TRUE(snap.ok()) << i;
    Result<std::optional<CacheEntryMeta>> meta = cache_entry_meta(snap->find("pm")->manifest);
    ASSERT_TRUE(meta.ok()) << i;
    EXPECT_EQ(classify(*meta, policy, "hash-pm", at + 2).state, Freshness::kFresh) << i;
  }
  for (ManifestStore* store : stores()) {
    const std::vector<std::string> q = queued(*store);
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q[0].rfind("pm member/alice stale ", 0), 0u) << q[0];
  }

  // The connection's mark goes with the connection.
  for (ManifestStore* store : stores()) {
    ASSERT_TRUE(store->sync_connections({record("docs", CredentialMode::kShared)}).ok());
  }
  EXPECT_EQ(testing::run_argv(c.get(), {"EXISTS", *keys.marked("pm")}).integer, 0);
}

TEST_F(StoreWebhook, BadRequestsAreRefusedAlikeAndWriteNothing) {
  for (const std::vector<WebhookRefreshTarget>& targets :
       {std::vector<WebhookRefreshTarget>{}, {target("docs"), target("bad id!")}}) {
    Result<WebhookRefreshReply> r = apply("bad", targets, kNow);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  expect_queued({});
  // The guard was not spent: the same signature with a good body is accepted.
  Result<WebhookRefreshReply> r = apply("bad", {target("docs")}, kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->replay);
  for (ManifestStore* store : stores()) {
    WebhookRefreshRequest request;
    request.targets = {target("docs")};
    Result<WebhookRefreshReply> no_window =
        store->apply_webhook(WebhookVerified{kNow, "wh:w", 300'000}, request, kNow, 0);
    ASSERT_FALSE(no_window.ok());
    EXPECT_EQ(no_window.error().code, ErrorCode::kInvalidArgument);
    Result<WebhookRefreshReply> no_key =
        store->apply_webhook(WebhookVerified{kNow, "", 300'000}, request, kNow, kWindow);
    ASSERT_FALSE(no_key.ok());
    EXPECT_EQ(no_key.error().code, ErrorCode::kInvalidArgument);
  }
}

// A namespace the Redis store lost (or an agent is restoring): kStoreNotReady with nothing written,
// not even the replay guard. (The SQLite file is the agent's own: its namespace is always ready.)
TEST_F(StoreWebhook, ANamespaceThatIsNotReadyWritesNothing) {
  testing::RedisConnection c(redis_.connect());
  ASSERT_NE(c, nullptr);
  const RedisKeys keys = *RedisKeys::create(kNs);
  WebhookRefreshRequest request;
  request.targets = {target("docs")};
  const WebhookVerified verified{kNow, "wh:wiped", 300'000};
  for (const char* state : {"", "restoring:5"}) {
    if (*state == '\0') {
      testing::run_argv(c.get(), {"DEL", keys.namespace_record()});
    } else {
      testing::run_argv(c.get(), {"SET", keys.namespace_record(), state});
    }
    const int64_t keys_before = testing::run_argv(c.get(), {"DBSIZE"}).integer;
    Result<WebhookRefreshReply> r = redis_store_->apply_webhook(verified, request, kNow, kWindow);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kStoreNotReady) << r.error().message;
    EXPECT_EQ(testing::run_argv(c.get(), {"DBSIZE"}).integer, keys_before);
    EXPECT_EQ(testing::run_argv(c.get(), {"EXISTS", keys.replay("wh:wiped")}).integer, 0);
  }
  EXPECT_TRUE(queued(*redis_store_).empty());
  ASSERT_TRUE(*redis_store_->mark_namespace_ready(kNow));  // restored
  Result<WebhookRefreshReply> r = redis_store_->apply_webhook(verified, request, kNow, kWindow);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->replay);
  Result<NamespaceRecord> ready = sqlite_store_->read_namespace();
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->state, NamespaceState::kReady);
}

}  // namespace
}  // namespace quiver
