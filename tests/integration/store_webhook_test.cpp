// ManifestStore::apply_webhook on both stores: the same table of signed webhooks, applied to the
// same data on a real redis-server (RedisStore: the edge's own schema/lua/webhook_refresh.lua) and
// on a real SQLite file (SqliteStore: the same rules in one transaction), must give the same
// replies — result for result, in the same order — and leave the same marks, epoch moves and
// queued requests. What the agent answers to a webhook is then what the edge answers.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/store.h"
#include "shared/discovery_redis.h"
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
      // per_member without a principal: every grantee, sorted; marked only where data is cached
      result("pm", member("alice"), "queued", true),
      result("pm", member("bob"), "in_progress", true),  // a lease is held: queued behind it
      result("pm", member("carol"), "queued", false),
      result("pm", member("zed"), "unknown_principal", false),  // not a grantee
      result("pm", Principal::shared(), "unknown_principal", false),
      result("docs", member("alice"), "unknown_principal", false),  // shared is cached as shared
      result("nope", std::nullopt, "unknown_connection", false),
      // `lonely`: a per_member connection nobody is granted expands to nobody
  };
  EXPECT_EQ(r->results, expected) << describe(r);
  expect_queued(
      {"docs shared" + w, "pm member/alice" + w, "pm member/bob" + w, "pm member/carol" + w});
  for (std::size_t i = 0; i < 2; ++i) {
    ManifestStore& store = *stores()[i];
    EXPECT_EQ(invalidated_at(store, "docs", Principal::shared()), kNow) << i;
    EXPECT_EQ(invalidated_at(store, "pm", member("bob")), kNow) << i;
    EXPECT_EQ(epoch_moved(i), 1) << i;  // once for the whole webhook
  }

  // The same signed request again: a replay, nothing done.
  r = apply("1", {target("docs")}, kNow + 5);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->replay);
  expect_queued({});

  // Another one within the requeue interval stands behind the first (nothing queued), but the mark
  // moves forward; a held lease is queued behind all the same.
  r = apply("2", {target("pm", member("alice")), target("pm", member("bob"))}, kNow + 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results, (std::vector<WebhookRefreshResult>{
                            result("pm", member("alice"), "already_queued", true),
                            result("pm", member("bob"), "in_progress", true)}));
  expect_queued({"pm member/bob webhook " + std::to_string(kNow + 10)});
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
    EXPECT_EQ(epoch_moved(i), 4) << i;
  }
  // Nothing cached, nothing marked: no epoch move, no manifest created.
  r = apply("5", {target("pm", member("carol"))}, kNow + 9'000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_FALSE(r->results[0].marked_stale);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(epoch_moved(i), 4) << i;
    Result<std::optional<ManifestMeta>> meta =
        stores()[i]->read_manifest_meta("pm", member("carol"));
    ASSERT_TRUE(meta.ok());
    EXPECT_FALSE(meta->has_value()) << i;
  }
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
