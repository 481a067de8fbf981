// Conditional discovery reads on a real redis-server (shared/discovery_redis.h, "conditional
// reads"): every kind of change made through the real store API (RedisStore, as the agent makes
// it; the webhook through the same script the edge sends) is seen by the next conditional read,
// never answered from the copy held before it; and an "unchanged" answer renders byte for byte
// what a full read renders at that moment (the leases read again included).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "native-agent/store/redis_store.h"
#include "shared/discovery.h"
#include "shared/discovery_redis.h"
#include "shared/edge_snapshot.h"
#include "tests/support/discovery_reads.h"
#include "tests/support/preference_rows.h"
#include "tests/support/redis_fixture.h"
#include "tests/support/store_pair.h"

namespace quiver {
namespace {

using testing::commit_listing;
using testing::disabled_rows;
using testing::listing_write;
using testing::stdio_record;

constexpr int64_t kNow = 1'790'000'000'000;
constexpr char kNs[] = "cond";

Principal member(const char* id) { return *Principal::member(id); }

enum class Expect { kChanged, kUnchanged };

class ConditionalRead : public testing::RedisFixture {
 protected:
  void SetUp() override {
    RedisFixture::SetUp();
    if (HasFatalFailure()) return;
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = redis_->port();
    o.ns = kNs;
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    ASSERT_TRUE(s.ok()) << s.error().message;
    store_ = std::move(*s);
    // As Agent::start leaves a namespace: records, grants, listings, overlays, then ready.
    ASSERT_TRUE(store_->begin_namespace_restore(kNow).ok());
    ASSERT_TRUE(store_->sync_connections(records()).ok());
    ASSERT_TRUE(store_->sync_grants({{"alice", {"a", "b", "c"}}, {"bob", {"a", "b"}}}).ok());
    commit("a", Principal::shared(), kNow);
    commit("b", member("alice"), kNow);
    commit("b", member("bob"), kNow);
    commit("c", Principal::shared(), kNow - 1'000'000);  // stale at kNow: its lease matters
    ASSERT_TRUE(store_->mark_namespace_ready(ready_at_).ok());
  }

  static std::vector<ConnectionRecord> records() {
    return {stdio_record("a", CredentialMode::kShared, kNow),
            stdio_record("b", CredentialMode::kPerMember, kNow),
            stdio_record("c", CredentialMode::kShared, kNow),
            stdio_record("d", CredentialMode::kShared, kNow)};
  }

  void commit(const std::string& cid, const Principal& p, int64_t at) {
    commit_listing(*store_, cid, p, listing_write(cid, at));
  }

  // One full read of alice's manifests as the edge makes it: the script, then the bodies.
  DiscoverySnapshot full_read() {
    RespValue reply = cmd(*discovery_read_command(keys_, member("alice")));
    Result<DiscoverySnapshot> s = decode_discovery_reply(reply, member("alice"));
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (!s.ok()) return DiscoverySnapshot(member("alice"));
    fill_bodies(*s);
    return std::move(*s);
  }

  void fill_bodies(DiscoverySnapshot& s) {
    testing::fill_bodies(
        s, [&](const std::vector<std::string>& d) { return cmd(*body_read_command(keys_, d)); });
  }

  // A conditional read of `held` at `now`: the snapshot to render, and whether it was unchanged.
  std::pair<DiscoverySnapshot, bool> conditional_read(DiscoverySnapshot held, int64_t now) {
    const std::vector<std::size_t> leases = lease_sensitive_entries(
        held, FreshnessPolicy{}, now, [](std::string_view) { return true; });
    Result<RedisCommand> c = conditional_discovery_read_command(keys_, held, {}, leases);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    Result<std::optional<DiscoverySnapshot>> r = decode_conditional_reply(cmd(*c), held, leases);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    if (!r.ok() || !r->has_value()) return {std::move(held), true};
    fill_bodies(**r);
    return {std::move(**r), false};
  }

  static std::string render(const DiscoverySnapshot& s, int64_t now) {
    return testing::rendered_answer(s, now);
  }

  RedisKeys keys_ = *RedisKeys::create(kNs);
  std::unique_ptr<RedisStore> store_;
  int64_t ready_at_ = kNow;  // when the agent marked the namespace ready (its clock)
};

TEST_F(ConditionalRead, NothingChangedIsUnchangedAndRendersAsAFullRead) {
  DiscoverySnapshot held = full_read();
  ASSERT_EQ(held.connections.size(), 3u);
  ASSERT_FALSE(held.namespace_record.empty());
  // Later, each entry's time-based status moves on; the copy is rendered at the later `now`.
  for (int64_t now : {kNow, kNow + 600'000, kNow + 1'000'000}) {
    auto [snapshot, unchanged] = conditional_read(held, now);
    EXPECT_TRUE(unchanged) << now;
    EXPECT_EQ(render(snapshot, now), render(full_read(), now)) << now;
  }
}

TEST_F(ConditionalRead, EveryKindOfChangeIsSeenByTheNextConditionalRead) {
  struct Case {
    const char* name;
    std::function<void(RedisStore&)> change;
    Expect expect;
  };
  auto webhook = [](RedisStore& s, const std::string& cid, std::optional<Principal> p,
                    const std::string& id) {
    WebhookRefreshRequest request;
    request.targets.push_back({cid, std::move(p), "deploy"});
    Result<WebhookRefreshReply> r =
        s.apply_webhook(WebhookVerified{kNow + 5, "wh:" + id, 300'000}, request, kNow + 5, 30'000);
    ASSERT_TRUE(r.ok()) << r.error().message;
  };
  auto fail = [](RedisStore& s, const std::string& cid, const Principal& p) {
    testing::record_listing_failure(s, cid, p, kNow + 1, kNow + 1);
  };
  const std::vector<Case> cases = {
      {"shared commit", [&](RedisStore&) { commit("a", Principal::shared(), kNow + 1); },
       Expect::kChanged},
      {"per-member commit of the reader",
       [&](RedisStore&) { commit("b", member("alice"), kNow + 1); }, Expect::kChanged},
      {"shared failure", [&](RedisStore& s) { fail(s, "a", Principal::shared()); },
       Expect::kChanged},
      {"per-member failure of the reader", [&](RedisStore& s) { fail(s, "b", member("alice")); },
       Expect::kChanged},
      {"grant added",
       [](RedisStore& s) {
         ASSERT_TRUE(*s.set_member_grants("alice", {"a", "b", "c", "d"}));
       },
       Expect::kChanged},
      {"grant removed",
       [](RedisStore& s) {
         ASSERT_TRUE(*s.set_member_grants("alice", {"a", "b"}));
       },
       Expect::kChanged},
      {"grants synced",
       [](RedisStore& s) {
         ASSERT_TRUE(s.sync_grants({{"alice", {"a", "c"}}, {"bob", {"a"}}}).ok());
       },
       Expect::kChanged},
      {"shared preference toggled",
       [](RedisStore& s) {
         ASSERT_TRUE(
             s.merge_preferences("a", Principal::shared(),
                                 disabled_rows("a", Principal::shared(), {"tool:x_a"}, kNow))
                 .ok());
       },
       Expect::kChanged},
      {"the reader's own preference toggled",
       [](RedisStore& s) {
         ASSERT_TRUE(s.merge_preferences("b", member("alice"),
                                         disabled_rows("b", member("alice"), {"tool:x_b"}, kNow))
                         .ok());
       },
       Expect::kChanged},
      {"webhook: a per-member connection as a whole",
       [&](RedisStore& s) { webhook(s, "b", std::nullopt, "whole"); }, Expect::kChanged},
      {"webhook: the reader on a per-member connection",
       [&](RedisStore& s) { webhook(s, "b", member("alice"), "alice"); }, Expect::kChanged},
      {"webhook: a shared connection",
       [&](RedisStore& s) { webhook(s, "a", std::nullopt, "shared"); }, Expect::kChanged},
      {"connection removed",
       [](RedisStore& s) {
         std::vector<ConnectionRecord> r = records();
         r.erase(r.begin() + 2);  // c
         ASSERT_TRUE(s.sync_connections(r).ok());
       },
       Expect::kChanged},
      {"connection config changed",
       [](RedisStore& s) {
         std::vector<ConnectionRecord> r = records();
         r[0].config_hash = "hash-a-2";
         ASSERT_TRUE(s.sync_connections(r).ok());
       },
       Expect::kChanged},
      {"manifest dropped",
       [](RedisStore& s) { ASSERT_TRUE(s.drop_manifest("a", Principal::shared()).ok()); },
       Expect::kChanged},
      // Selectivity: what only another member reads leaves the reader's copy valid.
      {"another member's commit", [&](RedisStore&) { commit("b", member("bob"), kNow + 1); },
       Expect::kUnchanged},
      {"another member's preference",
       [](RedisStore& s) {
         ASSERT_TRUE(s.merge_preferences("b", member("bob"),
                                         disabled_rows("b", member("bob"), {"tool:x_b"}, kNow))
                         .ok());
       },
       Expect::kUnchanged},
      {"a connection the reader is not granted",
       [&](RedisStore&) { commit("d", Principal::shared(), kNow + 1); }, Expect::kUnchanged},
      // A lease taken on the stale entry: the records are unchanged, the lease is read again.
      {"lease taken on a stale entry",
       [](RedisStore& s) {
         Result<AcquireResult> l =
             s.acquire_lease("c", Principal::shared(), std::string(32, 'e'), 60'000);
         ASSERT_TRUE(l.ok()) << l.error().message;
         ASSERT_TRUE(l->acquired);
       },
       Expect::kUnchanged},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TearDown();
    SetUp();
    ASSERT_FALSE(HasFatalFailure());
    const int64_t now = kNow + 10;
    DiscoverySnapshot held = full_read();
    const std::string before = render(held, now);
    c.change(*store_);
    ASSERT_FALSE(HasFatalFailure());
    auto [snapshot, unchanged] = conditional_read(held, now);
    EXPECT_EQ(unchanged, c.expect == Expect::kUnchanged);
    const std::string expected = render(full_read(), now);
    EXPECT_EQ(render(snapshot, now), expected);
    if (c.expect == Expect::kChanged || std::string(c.name).find("lease") != std::string::npos) {
      EXPECT_NE(expected, before) << "the change is visible in the answer";
    } else {
      EXPECT_EQ(expected, before);
    }
  }
}

TEST_F(ConditionalRead, AWipedAndRestoredNamespaceIsNeverUnchanged) {
  DiscoverySnapshot held = full_read();
  cmd({"FLUSHALL"});
  {
    Result<std::optional<DiscoverySnapshot>> r = decode_conditional_reply(
        cmd(*conditional_discovery_read_command(keys_, held, {}, {})), held, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kStoreNotReady);
  }
  // Restored with the same data: versions start again, the namespace record does not repeat (an
  // agent marks it ready at its clock's time, later than the read held).
  ready_at_ = kNow + 1;
  SetUp();
  ASSERT_FALSE(HasFatalFailure());
  auto [snapshot, unchanged] = conditional_read(held, kNow);
  EXPECT_FALSE(unchanged);
  EXPECT_NE(snapshot.namespace_record, held.namespace_record);
}

TEST_F(ConditionalRead, ARemovedConnectionsVersionOutlivesItSoAReAddNeverRepeatsIt) {
  auto version = [&] {
    std::optional<std::string_view> v = cmd({"GET", *keys_.conn_version("c")}).as_string();
    return v ? std::stoll(std::string(*v)) : -1;
  };
  const int64_t added = version();
  ASSERT_GE(added, 1);
  std::vector<ConnectionRecord> without_c = records();
  without_c.erase(without_c.begin() + 2);
  ASSERT_TRUE(store_->sync_connections(without_c).ok());
  // Moved by the removal and kept through its sweep (which deletes every other key of c).
  const int64_t removed = version();
  EXPECT_GT(removed, added);
  EXPECT_TRUE(cmd({"EXISTS", *keys_.manifest("c", Principal::shared())}).integer == 0);
  ASSERT_TRUE(store_->sync_connections(records()).ok());
  EXPECT_GT(version(), removed) << "added again: a value no reader held";
}

}  // namespace
}  // namespace quiver
