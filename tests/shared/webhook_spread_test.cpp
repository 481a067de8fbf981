// The refresh webhook on key layout v2 (shared/webhook_spread.h) without a server: the commands
// each round sends and what it makes of recorded replies: every status, a replay (before anything
// is written, and one that completed meanwhile), a namespace not ready, a namespace not in v2, a
// Redis error mid-way, replies of the wrong shape; and the recorded rounds that seed its fuzz
// target (tests/fuzz/seeds/webhook_spread). tests/integration/redis_store_v2_webhook_test.cpp runs
// it against a real redis-server and a real cluster.
#include "shared/webhook_spread.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/layout.h"
#include "shared/redis_cluster.h"
#include "shared/resp.h"
#include "shared/schema_assets.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/resp_values.h

constexpr int64_t kAt = 1'800'000'000'000;
const RedisKeys kKeys = *RedisKeys::create("fz", KeyLayout::kV2, kLayoutV2Shards);

WebhookVerified verified() {
  WebhookVerified v;
  v.replay_key = "wh:0123";
  v.retain_for_ms = 600'000;
  return v;
}

WebhookRefreshTarget target(const std::string& cid, const std::string& principal = "") {
  WebhookRefreshTarget t;
  t.connection_id = cid;
  if (!principal.empty()) t.principal = *Principal::parse(principal);
  t.reason = "webhook";
  return t;
}

EnqueueOptions options() {
  EnqueueOptions o;
  o.window_ms = 30'000;
  o.stream_maxlen = 1000;
  o.manual_requeue_after_ms = 5'000;
  return o;
}

// What round 1 reads of one target: its record's credential mode (nil: no record), the grantees
// check (SISMEMBER of the member named, or EXISTS of the set), the manifest's `body` and `manifest`
// fields, the lease.
std::vector<RespValue> reads(std::optional<std::string> mode, bool grantee, bool data, bool lease) {
  return {mode ? S(*mode) : RespValue::nil(), I(grantee ? 1 : 0), I(data ? 1 : 0), I(0),
          I(lease ? 1 : 0)};
}

std::vector<RespValue> checks(RespValue layout, RespValue ns, bool seen,
                              const std::vector<std::vector<RespValue>>& targets) {
  std::vector<RespValue> out = {std::move(layout), std::move(ns), I(seen ? 1 : 0)};
  for (const std::vector<RespValue>& t : targets) out.insert(out.end(), t.begin(), t.end());
  return out;
}

// Every command of a round touches one slot; round 1 writes nothing.
void expect_one_slot_each(const std::vector<RedisCommand>& commands, bool reads_only) {
  for (const RedisCommand& c : commands) {
    Result<std::optional<uint16_t>> slot = command_slot(c);
    ASSERT_TRUE(slot.ok()) << c[0] << " " << (c.size() > 1 ? c[1] : "") << ": "
                           << slot.error().message;
    EXPECT_TRUE(slot->has_value()) << c[0];
    if (reads_only) {
      EXPECT_TRUE(redis_command_changes_nothing(c)) << c[0] << " " << c[1];
    }
  }
}

// The script a command runs (by the file's text), or "" for a plain command.
std::string script_of(const RedisCommand& c) {
  if (c[0] != "EVAL") return "";
  for (const char* name : {"webhook_mark_v2.lua", "webhook_conn_mark_v2.lua"}) {
    if (c[1] == schema_asset(std::string("lua/") + name)) return name;
  }
  return "?";
}

// Declared keys of an EVAL.
std::vector<std::string> keys_of(const RedisCommand& c) {
  const std::size_t n = std::stoul(c[2]);
  return {c.begin() + 3, c.begin() + 3 + static_cast<std::ptrdiff_t>(n)};
}

TEST(SpreadWebhookRefresh, RefusesWhatTheV1CommandRefuses) {
  WebhookRefreshRequest one{{target("docs")}};
  EXPECT_EQ(SpreadWebhookRefresh::start(*RedisKeys::create("fz"), verified(), one, kAt, options())
                .error()
                .code,
            ErrorCode::kInvalidArgument)
      << "keys spelled in v1";
  EXPECT_FALSE(SpreadWebhookRefresh::start(kKeys, verified(), {}, kAt, options()).ok());
  EXPECT_FALSE(
      SpreadWebhookRefresh::start(kKeys, verified(), {{target("bad id")}}, kAt, options()).ok());
  WebhookVerified no_key = verified();
  no_key.replay_key.clear();
  EXPECT_FALSE(SpreadWebhookRefresh::start(kKeys, no_key, one, kAt, options()).ok());
  EnqueueOptions bad = options();
  bad.window_ms = 0;
  EXPECT_FALSE(SpreadWebhookRefresh::start(kKeys, verified(), one, kAt, bad).ok());
}

// Every status of the v1 script, in the order the targets were sent.
TEST(SpreadWebhookRefresh, EveryStatusInFourRounds) {
  const WebhookRefreshRequest request{{
      target("docs"),                // 0 shared, data, no lease: queued, marked
      target("docs", "member/bob"),  // 1 shared connection, a member named: unknown_principal
      target("mail", "member/bob"),  // 2 per_member, granted, data, lease: in_progress
      target("mail"),                // 3 per_member as a whole: marked (it has grantees)
      target("mail", "member/eve"),  // 4 not a grantee: unknown_principal
      target("gone"),                // 5 no record: unknown_connection
      target("mail", "shared"),      // 6 `shared` on a per_member connection: unknown_principal
      target("wiki", "shared"),      // 7 shared, no data, gate set: already_queued
      target("team"),                // 8 per_member as a whole, no grantees: marked '0'
  }};
  Result<SpreadWebhookRefresh> hook =
      SpreadWebhookRefresh::start(kKeys, verified(), request, kAt, options());
  ASSERT_TRUE(hook.ok()) << hook.error().message;

  // Round 1: reads only, one slot each; the layout record, the namespace record, the guard first.
  EXPECT_EQ(hook->round(), 1);
  const std::vector<RedisCommand>& r1 = hook->commands();
  ASSERT_EQ(r1.size(), 3u + 5u * request.targets.size());
  expect_one_slot_each(r1, /*reads_only=*/true);
  EXPECT_EQ(r1[0], (RedisCommand{"GET", "quiver:{fz}:layout"}));
  EXPECT_EQ(r1[1], (RedisCommand{"GET", "quiver:{fz}:namespace"}));
  EXPECT_EQ(r1[2], (RedisCommand{"EXISTS", kKeys.replay("wh:0123")}));
  EXPECT_EQ(r1[2][1].rfind("quiver:{fz:r:", 0), 0u) << r1[2][1];
  EXPECT_EQ(r1[3 + 2 * 5], (RedisCommand{"HGET", "quiver:{fz:c:mail}:conn", "credential_mode"}));
  EXPECT_EQ(r1[3 + 2 * 5 + 1],
            (RedisCommand{"SISMEMBER", "quiver:{fz:c:mail}:grantees", "member/bob"}));
  EXPECT_EQ(r1[3 + 2 * 5 + 2],
            (RedisCommand{"HEXISTS", "quiver:{fz:m:bob}:manifest:mail", "body"}));
  EXPECT_EQ(r1[3 + 2 * 5 + 4], (RedisCommand{"EXISTS", "quiver:{fz:m:bob}:lease:mail"}));
  EXPECT_EQ(r1[3 + 3 * 5 + 1], (RedisCommand{"EXISTS", "quiver:{fz:c:mail}:grantees"}));
  ASSERT_TRUE(
      hook
          ->feed(checks(
              S("v2:ready:1"), S("ready:1"), false,
              {reads("shared", false, true, false), reads("shared", false, true, false),
               reads("per_member", true, true, true), reads("per_member", true, false, false),
               reads("per_member", false, false, false), reads(std::nullopt, false, false, false),
               reads("per_member", true, false, false), reads("shared", true, false, false),
               reads("per_member", false, false, false)}))
          .ok());
  EXPECT_EQ(hook->layout_seen(), KeyLayout::kV2);

  // Round 2: one script per (connection, principal) on the manifest's slot, one per connection
  // marked as a whole on the connection's.
  ASSERT_EQ(hook->round(), 2);
  const std::vector<RedisCommand>& r2 = hook->commands();
  ASSERT_EQ(r2.size(), 5u);  // targets 0, 2, 3, 7, 8
  expect_one_slot_each(r2, false);
  EXPECT_EQ(script_of(r2[0]), "webhook_mark_v2.lua");
  EXPECT_EQ(keys_of(r2[0]),
            (std::vector<std::string>{"quiver:{fz:c:docs}:invalidated",
                                      "quiver:{fz:c:docs}:version", "quiver:{fz:c:docs}:gate"}));
  EXPECT_EQ(std::vector<std::string>(r2[0].begin() + 6, r2[0].end()),
            (std::vector<std::string>{std::to_string(kAt), "30000", "5000", "1", "0"}));
  EXPECT_EQ(keys_of(r2[1]),
            (std::vector<std::string>{"quiver:{fz:m:bob}:invalidated:mail",
                                      "quiver:{fz:m:bob}:version", "quiver:{fz:m:bob}:gate:mail"}));
  EXPECT_EQ(r2[1].back(), "1") << "the lease read in round 1";
  EXPECT_EQ(script_of(r2[2]), "webhook_conn_mark_v2.lua");
  EXPECT_EQ(keys_of(r2[2]),
            (std::vector<std::string>{"quiver:{fz:c:mail}:marked", "quiver:{fz:c:mail}:version"}));
  EXPECT_EQ(keys_of(r2[3])[0], "quiver:{fz:c:wiki}:invalidated");
  EXPECT_EQ(r2[3][r2[3].size() - 2], "0") << "no data: not marked";
  EXPECT_EQ(keys_of(r2[4])[0], "quiver:{fz:c:team}:marked");
  ASSERT_TRUE(hook->feed({A({S("queued"), S("1")}), A({S("in_progress"), S("1")}), I(1),
                          A({S("already_queued"), S("0")}), I(0)})
                  .ok());

  // Round 3: the requests not already queued, on each connection's shard.
  ASSERT_EQ(hook->round(), 3);
  const std::vector<RedisCommand>& r3 = hook->commands();
  ASSERT_EQ(r3.size(), 2u);
  expect_one_slot_each(r3, false);
  const std::string at = std::to_string(kAt);
  EXPECT_EQ(r3[0], (RedisCommand{"XADD", *kKeys.revalidate_stream(*kKeys.connection_shard("docs")),
                                 "MAXLEN", "~", "1000", "*", "cid", "docs", "principal", "shared",
                                 "reason", "webhook", "at", at}));
  EXPECT_EQ(r3[1], (RedisCommand{"XADD", *kKeys.revalidate_stream(*kKeys.connection_shard("mail")),
                                 "MAXLEN", "~", "1000", "*", "cid", "mail", "principal",
                                 "member/bob", "reason", "webhook", "at", at}));
  ASSERT_TRUE(hook->feed({S("1-0"), S("1-1")}).ok());

  // Round 4: the replay guard, alone, last.
  ASSERT_EQ(hook->round(), 4);
  ASSERT_EQ(hook->commands().size(), 1u);
  EXPECT_EQ(hook->commands()[0],
            (RedisCommand{"SET", kKeys.replay("wh:0123"), at, "NX", "PX", "600000"}));
  ASSERT_TRUE(hook->feed({S("OK")}).ok());
  ASSERT_TRUE(hook->done());
  EXPECT_TRUE(hook->commands().empty());

  WebhookRefreshReply reply = hook->take_reply();
  EXPECT_FALSE(reply.replay);
  struct Want {
    const char* cid;
    const char* principal;
    const char* status;
    bool marked;
  };
  const std::vector<Want> want = {
      {"docs", "shared", "queued", true},
      {"docs", "member/bob", "unknown_principal", false},
      {"mail", "member/bob", "in_progress", true},
      {"mail", "", "marked", true},
      {"mail", "member/eve", "unknown_principal", false},
      {"gone", "", "unknown_connection", false},
      {"mail", "shared", "unknown_principal", false},
      {"wiki", "shared", "already_queued", false},
      {"team", "", "marked", false},
  };
  ASSERT_EQ(reply.results.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const WebhookRefreshResult& r = reply.results[i];
    EXPECT_EQ(r.connection_id, want[i].cid) << i;
    EXPECT_EQ(r.principal ? r.principal->str() : "", want[i].principal) << i;
    EXPECT_EQ(r.status, want[i].status) << i;
    EXPECT_EQ(r.marked_stale, want[i].marked) << i;
  }
}

// Nothing to mark or queue: the guard alone follows the checks (the v1 script sets it too).
TEST(SpreadWebhookRefresh, OnlyUnknownTargetsGoStraightToTheGuard) {
  Result<SpreadWebhookRefresh> hook = SpreadWebhookRefresh::start(
      kKeys, verified(), {{target("gone"), target("docs", "member/bob")}}, kAt, options());
  ASSERT_TRUE(hook.ok());
  ASSERT_TRUE(hook->feed(checks(S("v2:ready:1"), S("ready:1"), false,
                                {reads(std::nullopt, false, false, false),
                                 reads("shared", true, true, false)}))
                  .ok());
  ASSERT_EQ(hook->round(), 4);
  ASSERT_EQ(hook->commands().size(), 1u);
  EXPECT_EQ(hook->commands()[0][0], "SET");
  ASSERT_TRUE(hook->feed({S("OK")}).ok());
  WebhookRefreshReply reply = hook->take_reply();
  ASSERT_EQ(reply.results.size(), 2u);
  EXPECT_EQ(reply.results[0].status, "unknown_connection");
  EXPECT_EQ(reply.results[1].status, "unknown_principal");
}

// A guard that stands: a replay, and nothing after the reads.
TEST(SpreadWebhookRefresh, AReplayWritesNothing) {
  Result<SpreadWebhookRefresh> hook =
      SpreadWebhookRefresh::start(kKeys, verified(), {{target("docs")}}, kAt, options());
  ASSERT_TRUE(hook.ok());
  ASSERT_TRUE(
      hook->feed(checks(S("v2:ready:1"), S("ready:1"), true, {reads("shared", false, true, false)}))
          .ok());
  ASSERT_TRUE(hook->done());
  EXPECT_TRUE(hook->commands().empty());
  WebhookRefreshReply reply = hook->take_reply();
  EXPECT_TRUE(reply.replay);
  EXPECT_TRUE(reply.results.empty());
}

// The same signed request completed between this one's checks and its guard: a replay (the other
// was answered 202).
TEST(SpreadWebhookRefresh, AGuardSetMeanwhileIsAReplay) {
  Result<SpreadWebhookRefresh> hook =
      SpreadWebhookRefresh::start(kKeys, verified(), {{target("docs")}}, kAt, options());
  ASSERT_TRUE(hook.ok());
  ASSERT_TRUE(hook->feed(checks(S("v2:ready:1"), S("ready:1"), false,
                                {reads("shared", false, true, false)}))
                  .ok());
  ASSERT_TRUE(hook->feed({A({S("already_queued"), S("1")})}).ok());
  ASSERT_EQ(hook->round(), 4) << "already queued: no XADD";
  ASSERT_TRUE(hook->feed({RespValue::nil()}).ok());
  ASSERT_TRUE(hook->done());
  EXPECT_TRUE(hook->take_reply().replay);
}

TEST(SpreadWebhookRefresh, ANamespaceNotReadyOrNotInV2WritesNothing) {
  struct Case {
    RespValue layout;
    RespValue ns;
    ErrorCode code;
    std::optional<KeyLayout> seen;
    const char* says;
  };
  const std::vector<Case> cases = {
      {S("v2:ready:1"), RespValue::nil(), ErrorCode::kStoreNotReady, KeyLayout::kV2, "missing"},
      {S("v2:ready:1"), S("restoring:5"), ErrorCode::kStoreNotReady, KeyLayout::kV2, "restor"},
      {RespValue::nil(), S("ready:1"), ErrorCode::kStoreUnavailable, KeyLayout::kV1, "layout v1"},
      {S("v1:ready:1"), S("ready:1"), ErrorCode::kStoreUnavailable, KeyLayout::kV1, "layout v1"},
      {S("v2:filling:1"), S("ready:1"), ErrorCode::kStoreUnavailable, std::nullopt,
       "quiver:{fz}:layout"},
  };
  for (const Case& c : cases) {
    Result<SpreadWebhookRefresh> hook =
        SpreadWebhookRefresh::start(kKeys, verified(), {{target("docs")}}, kAt, options());
    ASSERT_TRUE(hook.ok());
    // Round 1 writes nothing; it is the only round sent.
    expect_one_slot_each(hook->commands(), /*reads_only=*/true);
    Status s = hook->feed(checks(c.layout, c.ns, false, {reads("shared", false, true, false)}));
    ASSERT_FALSE(s.ok()) << c.says;
    EXPECT_EQ(s.error().code, c.code) << c.says << ": " << s.error().message;
    EXPECT_NE(s.error().message.find(c.says), std::string::npos) << s.error().message;
    EXPECT_EQ(hook->layout_seen(), c.seen) << c.says;
    EXPECT_FALSE(hook->done());
    EXPECT_EQ(hook->feed({}).error().code, ErrorCode::kInternal) << "over after an error";
  }
}

// A Redis error in any round is a store failure and ends the webhook (no guard is set: the
// sender's retry of the same signed request does it again).
TEST(SpreadWebhookRefresh, ARedisErrorMidWayIsAStoreFailure) {
  for (int failing_round = 1; failing_round <= 4; ++failing_round) {
    Result<SpreadWebhookRefresh> hook =
        SpreadWebhookRefresh::start(kKeys, verified(), {{target("docs")}}, kAt, options());
    ASSERT_TRUE(hook.ok());
    std::vector<std::vector<RespValue>> rounds = {
        checks(S("v2:ready:1"), S("ready:1"), false, {reads("shared", false, true, false)}),
        {A({S("queued"), S("1")})},
        {S("1-0")},
        {S("OK")}};
    rounds[failing_round - 1].back() = RespValue::error("MOVED 12 127.0.0.1:7001");
    Status s;
    for (int r = 1; r <= failing_round; ++r) {
      ASSERT_EQ(hook->round(), r);
      s = hook->feed(rounds[r - 1]);
      if (r < failing_round) {
        ASSERT_TRUE(s.ok()) << s.error().message;
      }
    }
    ASSERT_FALSE(s.ok()) << "round " << failing_round;
    EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable) << s.error().message;
    EXPECT_NE(s.error().message.find("MOVED"), std::string::npos);
    EXPECT_FALSE(hook->done());
    EXPECT_EQ(hook->feed(rounds[0]).error().code, ErrorCode::kInternal);
  }
}

TEST(SpreadWebhookRefresh, RepliesOfAnotherShapeAreInvalid) {
  auto started = [] {
    Result<SpreadWebhookRefresh> hook =
        SpreadWebhookRefresh::start(kKeys, verified(), {{target("docs")}}, kAt, options());
    EXPECT_TRUE(hook.ok());
    return std::move(*hook);
  };
  const std::vector<RespValue> good =
      checks(S("v2:ready:1"), S("ready:1"), false, {reads("shared", false, true, false)});
  {
    SpreadWebhookRefresh hook = started();
    EXPECT_EQ(hook.feed({good.begin(), good.end() - 1}).error().code, ErrorCode::kInvalidReply)
        << "a reply short";
  }
  {
    SpreadWebhookRefresh hook = started();
    std::vector<RespValue> bad = good;
    bad[2] = I(2);
    EXPECT_EQ(hook.feed(bad).error().code, ErrorCode::kInvalidReply) << "EXISTS 2";
  }
  {
    SpreadWebhookRefresh hook = started();
    std::vector<RespValue> bad = good;
    bad[3] = I(1);
    EXPECT_EQ(hook.feed(bad).error().code, ErrorCode::kInvalidReply) << "a mode that is a number";
  }
  for (const RespValue& mark :
       {A({S("queued")}), A({S("done"), S("1")}), A({S("queued"), S("2")}), S("queued"), I(1)}) {
    SpreadWebhookRefresh hook = started();
    ASSERT_TRUE(hook.feed(good).ok());
    EXPECT_EQ(hook.feed({mark}).error().code, ErrorCode::kInvalidReply) << mark.debug_string();
  }
  {
    SpreadWebhookRefresh hook = started();
    ASSERT_TRUE(hook.feed(good).ok());
    ASSERT_TRUE(hook.feed({A({S("queued"), S("1")})}).ok());
    EXPECT_EQ(hook.feed({I(1)}).error().code, ErrorCode::kInvalidReply) << "XADD without an id";
  }
  {
    SpreadWebhookRefresh hook = started();
    ASSERT_TRUE(hook.feed(good).ok());
    ASSERT_TRUE(hook.feed({A({S("queued"), S("1")})}).ok());
    ASSERT_TRUE(hook.feed({S("1-0")}).ok());
    EXPECT_EQ(hook.feed({I(1)}).error().code, ErrorCode::kInvalidReply) << "SET answering 1";
  }
}

// The rounds that seed the fuzz target (tests/fuzz/webhook_spread_fuzz.cpp): a byte of flags,
// then the replies of every round, in the shapes redis-server answers (written by hand; the
// integration test runs the same rounds against a real server). The request is the fuzz target's:
// docs (no principal), mail for member/bob, mail (no principal), gone; flag 1: requeue_after 0.
std::vector<RespValue> seed_replies(const std::string& name, uint8_t* flags) {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/tests/fuzz/seeds/webhook_spread/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  EXPECT_FALSE(bytes.empty()) << name;
  if (bytes.empty()) return {};
  *flags = static_cast<uint8_t>(bytes[0]);
  RespDecoder d;
  EXPECT_TRUE(d.feed(std::string_view(bytes).substr(1)).ok());
  std::vector<RespValue> out;
  for (;;) {
    auto r = d.next();
    EXPECT_TRUE(r.ok());
    if (!r.ok() || !r->has_value()) break;
    out.push_back(std::move(**r));
  }
  return out;
}

WebhookRefreshRequest seed_request() {
  return {{target("docs"), target("mail", "member/bob"), target("mail"), target("gone")}};
}
EnqueueOptions seed_options(uint8_t flags) {
  EnqueueOptions o = options();
  if (flags & 1) o.manual_requeue_after_ms = 0;
  return o;
}

TEST(SpreadWebhookRefresh, TheFuzzSeedsRunToTheirEnd) {
  struct Seed {
    const char* name;
    bool ok;
    bool replay;
  };
  for (const Seed& seed : {Seed{"accepted", true, false}, Seed{"replay", true, true},
                           Seed{"not-ready", false, false}, Seed{"layout-v1", false, false}}) {
    uint8_t flags = 0;
    std::vector<RespValue> replies = seed_replies(seed.name, &flags);
    Result<SpreadWebhookRefresh> hook =
        SpreadWebhookRefresh::start(kKeys, verified(), seed_request(), kAt, seed_options(flags));
    ASSERT_TRUE(hook.ok()) << seed.name;
    std::size_t used = 0;
    Status s;
    while (!hook->done()) {
      const std::size_t n = hook->commands().size();
      ASSERT_LE(n, replies.size() - used) << seed.name << ": the seed ran out";
      s = hook->feed({replies.begin() + used, replies.begin() + used + n});
      used += n;
      if (!s.ok()) break;
    }
    EXPECT_EQ(used, replies.size()) << seed.name << ": every reply used";
    EXPECT_EQ(s.ok(), seed.ok) << seed.name << ": " << (s.ok() ? "" : s.error().message);
    if (s.ok()) {
      EXPECT_EQ(hook->take_reply().replay, seed.replay) << seed.name;
    }
  }
}

}  // namespace
}  // namespace quiver
