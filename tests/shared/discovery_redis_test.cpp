#include "shared/discovery_redis.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/schema_assets.h"
#include "shared/sha256.h"
#include "tests/support/discovery_fixture.h"
#include "tests/support/resp_values.h"
namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/ (fixture, RESP values)

HashFields conn_fields(const std::string& mode) {
  return {{"config_hash", "h1"},
          {"credential_mode", mode},
          {"name", "N"},
          {"transport", "http"},
          {"updated_at", "1"}};
}

// What discovery_read.lua answers for alice with: `docs` (shared, fresh manifest, one disabled
// tool, a webhook's mark at 900 that its listing at 1000 made moot), `mail` (per_member, no
// manifest, lease held), `old` (removed).
RespValue good_reply() {
  HashFields manifest = data_entry("h1", 1000, 2000, manifest_json({"a", "b"}));
  return A({S("quiver.discovery.v2"), S("member/alice"), I(42), I(3), S(""), I(1),
            A({A({S("docs"), flat(conn_fields("shared")), S("shared"), flat(manifest),
                  A({S("tool:b")}), I(0), S("900")}),
               A({S("mail"), flat(conn_fields("per_member")), S("member/alice"), A({}), A({}), I(1),
                  RespValue::nil()}),
               A({S("old"), A({}), S(""), A({}), A({}), I(0), RespValue::nil()})}),
            A({S("ready:1"), S("7"), S("3"), S("5"), S("")})});
}

TEST(DiscoveryRedis, AConditionalReadSendsTheVersionsAndTheLeasesItNeeds) {
  RedisKeys keys = *RedisKeys::create("team-a");
  Result<DiscoverySnapshot> held = decode_discovery_reply(good_reply(), member_principal("alice"));
  ASSERT_TRUE(held.ok()) << held.error().message;
  EXPECT_EQ(held->namespace_record, "ready:1");
  EXPECT_EQ(held->member_version, "7");
  EXPECT_EQ(held->connection_versions, (std::vector<std::string>{"3", "5", ""}));
  Result<RedisCommand> c = conditional_discovery_read_command(keys, *held, {}, {1});
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, (RedisCommand{"EVAL_RO",
                              std::string(schema_asset("lua/discovery_read.lua")),
                              "1",
                              "quiver:{team-a}:grants:member/alice",
                              "quiver:{team-a}:",
                              "member/alice",
                              "",
                              "",
                              "200",
                              "if-unchanged",
                              "ready:1",
                              "7",
                              "3",
                              "docs",
                              "3",
                              "mail",
                              "5",
                              "old",
                              "",
                              "mail",
                              "member/alice"}));
  // A lease of an entry without a principal (removed) or out of range cannot be asked for.
  EXPECT_FALSE(conditional_discovery_read_command(keys, *held, {}, {2}).ok());
  EXPECT_FALSE(conditional_discovery_read_command(keys, *held, {}, {3}).ok());
  DiscoverySnapshot bare(member_principal("alice"));  // not from a full read: no versions
  EXPECT_FALSE(conditional_discovery_read_command(keys, bare, {}, {}).ok());
}

TEST(DiscoveryRedis, AnUnchangedReplyGivesTheHeldSnapshotItsEpochAndLeases) {
  DiscoverySnapshot held = *decode_discovery_reply(good_reply(), member_principal("alice"));
  ASSERT_TRUE(held.connections[1].lease_held);
  Result<std::optional<DiscoverySnapshot>> r = decode_conditional_reply(
      A({S("quiver.discovery.unchanged"), S("member/alice"), I(43), A({I(0)})}), held, {1});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(held.epoch, 43);
  EXPECT_FALSE(held.connections[1].lease_held);
  // Anything else is the full reply, decoded as one.
  r = decode_conditional_reply(good_reply(), held, {1});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->epoch, 42);
  const std::vector<std::pair<RespValue, std::string>> bad = {
      {A({S("quiver.discovery.unchanged"), S("member/bob"), I(43), A({I(0)})}), "another caller"},
      {A({S("quiver.discovery.unchanged"), S("member/alice"), I(-1), A({I(0)})}), "epoch"},
      {A({S("quiver.discovery.unchanged"), S("member/alice"), I(43), A({})}), "one lease flag"},
      {A({S("quiver.discovery.unchanged"), S("member/alice"), I(43), A({I(2)})}), "0 or 1"},
      {A({S("quiver.discovery.unchanged"), S("member/alice"), I(43), S("x")}), "one lease flag"},
  };
  for (const auto& [reply, expected] : bad) {
    r = decode_conditional_reply(reply, held, {1});
    ASSERT_FALSE(r.ok()) << expected;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply);
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(held.epoch, 43) << "a refused reply changes nothing";
}

TEST(DiscoveryRedis, ReadCommandCarriesTheScriptTheGrantsKeyAndTheQuery) {
  RedisKeys keys = *RedisKeys::create("team-a");
  Result<RedisCommand> c = discovery_read_command(keys, member_principal("alice"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, (RedisCommand{"EVAL_RO", std::string(schema_asset("lua/discovery_read.lua")), "1",
                              "quiver:{team-a}:grants:member/alice",
                              "quiver:{team-a}:", "member/alice", "", "", "200"}));
  SnapshotQuery q;
  q.only = "docs";
  q.after = "a";
  q.limit = 7;
  c = discovery_read_command(keys, member_principal("alice"), q);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[6], "docs");
  EXPECT_EQ((*c)[7], "a");
  EXPECT_EQ((*c)[8], "7");
  EXPECT_NE(schema_asset("lua/discovery_read.lua").find("redis.call('SMEMBERS'"),
            std::string_view::npos);
}

TEST(DiscoveryRedis, ReadCommandRefusesWhatCouldEscapeTheCaller) {
  RedisKeys keys = *RedisKeys::create();
  EXPECT_EQ(discovery_read_command(keys, Principal::shared()).error().code,
            ErrorCode::kInvalidArgument);
  SnapshotQuery q;
  q.only = "a:b";
  EXPECT_FALSE(discovery_read_command(keys, member_principal("a"), q).ok());
  q.only.reset();
  q.limit = 0;
  EXPECT_FALSE(discovery_read_command(keys, member_principal("a"), q).ok());
  q.limit = kMaxSnapshotLimit + 1;
  EXPECT_FALSE(discovery_read_command(keys, member_principal("a"), q).ok());
  q.limit = 1;
  q.after = std::string(200, 'a');
  EXPECT_FALSE(discovery_read_command(keys, member_principal("a"), q).ok());
}

TEST(DiscoveryRedis, DecodesTheScriptReply) {
  Result<DiscoverySnapshot> s = decode_discovery_reply(good_reply(), member_principal("alice"));
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->epoch, 42);
  EXPECT_EQ(s->granted_total, 3);
  EXPECT_EQ(s->ignored_grants, 1);
  EXPECT_FALSE(s->next_after.has_value());
  ASSERT_EQ(s->connections.size(), 3u);
  const GrantedConnection& docs = s->connections[0];
  EXPECT_EQ(docs.id, "docs");
  EXPECT_EQ(docs.record->credential_mode, CredentialMode::kShared);
  EXPECT_EQ(docs.record->transport, "http");
  EXPECT_EQ(docs.principal, Principal::shared());
  ASSERT_TRUE(docs.manifest);
  EXPECT_EQ(docs.manifest->fetched_at_ms, 1000);
  // The webhook's mark (its own key) is read with the manifest it marks.
  EXPECT_EQ(docs.manifest->invalidated_at_ms, 900);
  EXPECT_EQ(docs.disabled, (DisabledOverlay{"tool:b"}));
  EXPECT_FALSE(docs.lease_held);
  EXPECT_EQ(s->connections[1].principal, member_principal("alice"));
  EXPECT_TRUE(s->connections[1].lease_held);
  EXPECT_FALSE(s->connections[2].record.has_value());

  RenderedDiscovery r = render_manifests(*s, FreshnessPolicy{}, 1500);
  Json body = *parse_json(r.body);
  ASSERT_EQ(body["connections"].size(), 2u);  // `old` was removed
  EXPECT_EQ(body["connections"][0]["status"], "fresh");
  EXPECT_EQ(body["connections"][0]["manifest"]["tools"]["items"].size(), 1u);
  EXPECT_EQ(body["connections"][1]["refresh"], "in_progress");
}

TEST(DiscoveryRedis, DecodesTheSameSnapshotWhateverWayTheBytesArrive) {
  const std::string bytes = encode_reply(good_reply());
  const DiscoverySnapshot expected =
      decode_discovery_reply(good_reply(), member_principal("alice")).value();
  for (std::size_t split = 0; split <= bytes.size(); ++split) {
    RespDecoder decoder;
    ASSERT_TRUE(decoder.feed(std::string_view(bytes).substr(0, split)).ok());
    Result<std::optional<RespValue>> first = decoder.next();
    ASSERT_TRUE(first.ok());
    if (split < bytes.size()) {
      ASSERT_FALSE(first->has_value()) << split;
      ASSERT_TRUE(decoder.feed(std::string_view(bytes).substr(split)).ok());
      first = decoder.next();
      ASSERT_TRUE(first.ok());
    }
    ASSERT_TRUE(first->has_value()) << split;
    Result<DiscoverySnapshot> s = decode_discovery_reply(**first, member_principal("alice"));
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->connections, expected.connections) << split;
  }
}

TEST(DiscoveryRedis, RedisErrorsAreStoreFailures) {
  Result<DiscoverySnapshot> s = decode_discovery_reply(
      RespValue::error("NOSCRIPT No matching script"), member_principal("alice"));
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(s.error().message.find("NOSCRIPT"), std::string::npos);
}

// discovery_read.lua when the namespace record is not `ready` (the store lost its data).
TEST(DiscoveryRedis, ANamespaceNotReadyIsItsOwnErrorNotAnEmptySnapshot) {
  for (const char* state : {"missing", "restoring"}) {
    Result<DiscoverySnapshot> s =
        decode_discovery_reply(A({S("quiver.namespace.v1"), S(state)}), member_principal("alice"));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kStoreNotReady);
    EXPECT_NE(s.error().message.find(state), std::string::npos) << s.error().message;
  }
  EXPECT_EQ(decode_discovery_reply(A({S("quiver.namespace.v1"), I(1)}), member_principal("alice"))
                .error()
                .code,
            ErrorCode::kInvalidReply);
  // The script reads the record before anything else.
  std::string_view script = schema_asset("lua/discovery_read.lua");
  EXPECT_LT(script.find("prefix .. 'namespace'"), script.find("redis.call('SMEMBERS'"));
}

// discovery_read.lua when the layout record names a layout this build does not read: the store is
// unavailable (503 at both hosts), never an empty snapshot, and the message names the record.
TEST(DiscoveryRedis, AnUnknownLayoutIsTheStoreUnavailableNamingTheRecord) {
  const RespValue reply =
      A({S("quiver.layout.v1"), S("v3:ready:1700000000000"), S("quiver:{team}:layout")});
  Result<DiscoverySnapshot> s = decode_discovery_reply(reply, member_principal("alice"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(s.error().message.find("quiver:{team}:layout"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("`v3:ready:1700000000000`"), std::string::npos)
      << s.error().message;
  // A conditional read answered so is no "unchanged": the same error.
  DiscoverySnapshot held = *decode_discovery_reply(good_reply(), member_principal("alice"));
  Result<std::optional<DiscoverySnapshot>> c = decode_conditional_reply(reply, held, {1});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::kStoreUnavailable);
  // A webhook answered so wrote nothing: 503 too.
  Result<WebhookRefreshReply> w = parse_webhook_refresh_reply(reply);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(w.error().message.find("webhook"), std::string::npos) << w.error().message;
  // Garbage in the record is quoted, escaped and cut, never echoed raw.
  s = decode_discovery_reply(
      A({S("quiver.layout.v1"), S(std::string("x\r\n") + std::string(100, 'y')),
         S("quiver:{team}:layout")}),
      member_principal("alice"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_EQ(s.error().message.find('\r'), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("\\x0d"), std::string::npos) << s.error().message;
  // The tag with anything but two strings is a bad reply.
  for (const RespValue& bad : {A({S("quiver.layout.v1"), I(2), S("quiver:{team}:layout")}),
                               A({S("quiver.layout.v1"), S("v2:x:1"), RespValue::nil()})}) {
    EXPECT_EQ(decode_discovery_reply(bad, member_principal("alice")).error().code,
              ErrorCode::kInvalidReply)
        << bad.debug_string();
  }
  // Both scripts read the record before anything else: discovery before the namespace record,
  // the webhook before its replay guard.
  std::string_view read = schema_asset("lua/discovery_read.lua");
  const std::size_t layout_read = read.find("redis.call('GET', prefix .. 'layout')");
  ASSERT_NE(layout_read, std::string_view::npos);
  EXPECT_LT(layout_read, read.find("redis.call('GET', prefix .. 'namespace')"));
  EXPECT_LT(layout_read, read.find("redis.call('SMEMBERS'"));
  std::string_view webhook = schema_asset("lua/webhook_refresh.lua");
  EXPECT_LT(webhook.find("prefix .. 'layout'"), webhook.find("redis.call('SET'"));
}

TEST(DiscoveryRedis, EveryShapeMismatchIsAClearError) {
  using Mutation = std::function<void(RespValue&)>;
  auto entries = [](RespValue& r) -> std::vector<RespValue>& { return r.elements[6].elements; };
  const std::vector<std::pair<Mutation, std::string>> cases = {
      {[](RespValue& r) { r = S("OK"); }, "expected an array of 8"},
      {[](RespValue& r) { r.elements.pop_back(); }, "expected an array of 8"},
      {[](RespValue& r) { r.elements[7].elements.pop_back(); }, "one per entry"},
      {[](RespValue& r) { r.elements[7].elements[0] = S("restoring:1"); }, "not `ready`"},
      {[](RespValue& r) { r.elements[7].elements[2] = I(3); }, "versions: element 2 is no string"},
      {[](RespValue& r) { r.elements[0] = S("quiver.discovery.v0"); }, "not a quiver.discovery"},
      {[](RespValue& r) { r.elements[1] = S("member/bob"); }, "another caller"},
      {[](RespValue& r) { r.elements[2] = S("42"); }, "element 2 is not a count"},
      {[](RespValue& r) { r.elements[3] = I(-1); }, "element 3 is not a count"},
      {[](RespValue& r) { r.elements[4] = I(0); }, "next_after is no string"},
      {[](RespValue& r) { r.elements[4] = S("zzz"); }, "next_after is not the last entry"},
      {[](RespValue& r) { r.elements[4] = S("a b"); }, "next_after is not a connection id"},
      {[](RespValue& r) { r.elements[6] = S("x"); }, "entries are no array"},
      {[](RespValue& r) { r.elements[3] = I(2); }, "more entries than granted"},
      {[&](RespValue& r) { entries(r)[0].elements.pop_back(); }, "entry 0: expected an array of 7"},
      {[&](RespValue& r) { entries(r)[0].elements[6] = I(900); }, "invalidation mark"},
      {[&](RespValue& r) { entries(r)[2].elements[6] = S("900"); },
       "an invalidation mark without a principal"},
      {[&](RespValue& r) { entries(r)[0].elements[0] = S("do:cs"); }, "invalid connection id"},
      {[&](RespValue& r) { entries(r)[0].elements[1].elements.pop_back(); }, "odd number"},
      {[&](RespValue& r) { entries(r)[0].elements[1].elements[1] = I(1); }, "is no string"},
      {[&](RespValue& r) {
         entries(r)[0].elements[1] = flat({});
         entries(r)[0].elements[1].elements = {S("name"), S("a"), S("name"), S("b")};
       },
       "repeats"},
      {[&](RespValue& r) { entries(r)[0].elements[2] = S("member/alice"); },
       "read under principal 'member/alice' where 'shared' applies"},
      {[&](RespValue& r) { entries(r)[1].elements[2] = S("member/bob"); },
       "read under principal 'member/bob' where 'member/alice' applies"},
      {[&](RespValue& r) { entries(r)[1].elements[2] = S("shared"); }, "where 'member/alice'"},
      {[&](RespValue& r) { entries(r)[2].elements[2] = S("shared"); }, "connection is removed"},
      {[&](RespValue& r) { entries(r)[1].elements[1] = flat(conn_fields("team")); },
       "credential mode is unknown"},
      {[&](RespValue& r) {
         entries(r)[2].elements[3] = flat({{"manifest", "{}"}});
       },
       "a manifest without a principal"},
      {[&](RespValue& r) { entries(r)[0].elements[4] = S("tool:b"); }, "disabled set is no array"},
      {[&](RespValue& r) { entries(r)[0].elements[4].elements[0] = I(3); }, "disabled member"},
      {[&](RespValue& r) { entries(r)[0].elements[5] = I(2); }, "lease flag"},
      {[&](RespValue& r) { entries(r)[2].elements[5] = I(1); }, "a lease without a principal"},
      {[&](RespValue& r) { std::swap(entries(r)[0], entries(r)[1]); }, "strictly ascending"},
      {[&](RespValue& r) { entries(r)[1] = entries(r)[0]; }, "strictly ascending"},
  };
  for (const auto& [mutate, expected] : cases) {
    RespValue reply = good_reply();
    mutate(reply);
    Result<DiscoverySnapshot> s = decode_discovery_reply(reply, member_principal("alice"));
    ASSERT_FALSE(s.ok()) << expected;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidReply) << expected;
    EXPECT_NE(s.error().message.find(expected), std::string::npos)
        << "want '" << expected << "' in: " << s.error().message;
  }
}

TEST(DiscoveryRedis, PagedReplyNamesItsLastEntry) {
  RespValue reply = good_reply();
  reply.elements[4] = S("old");
  Result<DiscoverySnapshot> s = decode_discovery_reply(reply, member_principal("alice"));
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->next_after, std::optional<std::string>("old"));
}

// ---- revalidation enqueue ----------------------------------------------------------------------

Revalidation stale_docs() { return Revalidation{"docs", Principal::shared(), "stale", false}; }

TEST(DiscoveryRedis, EnqueueCommandGatesLeasesAndStreams) {
  RedisKeys keys = *RedisKeys::create();
  EnqueueOptions options;
  Result<RedisCommand> c = revalidate_enqueue_command(keys, stale_docs(), 5000, options);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, (RedisCommand{"EVAL", std::string(schema_asset("lua/revalidate_enqueue.lua")), "2",
                              "quiver:{default}:revalidate-gate:docs:shared",
                              "quiver:{default}:revalidate", "30000", "10000", "5000", "-1", "cid",
                              "docs", "principal", "shared", "reason", "stale", "at", "5000"}));
  Revalidation manual{"docs", member_principal("alice"), "manual", true};
  c = revalidate_enqueue_command(keys, manual, 5000, options);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[3], "quiver:{default}:revalidate-gate:docs:member/alice");
  EXPECT_EQ((*c)[8], "1000");
}

TEST(DiscoveryRedis, EnqueueCommandRefusesBadInput) {
  RedisKeys keys = *RedisKeys::create();
  for (const char* reason :
       {"", "Stale", "stale reason", "a-b", "abcdefghijklmnopqrstuvwxyzabcdefg"}) {
    Revalidation r = stale_docs();
    r.reason = reason;
    EXPECT_EQ(revalidate_enqueue_command(keys, r, 1, {}).error().code, ErrorCode::kInvalidArgument)
        << reason;
  }
  Revalidation r = stale_docs();
  r.connection_id = "a:b";
  EXPECT_FALSE(revalidate_enqueue_command(keys, r, 1, {}).ok());
  EnqueueOptions zero;
  zero.window_ms = 0;
  EXPECT_FALSE(revalidate_enqueue_command(keys, stale_docs(), 1, zero).ok());
  zero = EnqueueOptions{};
  zero.stream_maxlen = 0;
  EXPECT_FALSE(revalidate_enqueue_command(keys, stale_docs(), 1, zero).ok());
}

TEST(DiscoveryRedis, EnqueueRepliesParse) {
  Result<RevalidationResult> q = parse_enqueue_reply(A({S("queued"), S("1700-0")}));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->outcome, RevalidationOutcome::kQueued);
  EXPECT_EQ(q->stream_id, "1700-0");
  EXPECT_EQ(parse_enqueue_reply(A({S("already_queued")}))->outcome,
            RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(parse_enqueue_reply(A({S("in_progress")}))->outcome, RevalidationOutcome::kInProgress);
  EXPECT_EQ(parse_enqueue_reply(RespValue::error("OOM")).error().code,
            ErrorCode::kStoreUnavailable);
  for (const RespValue& bad : {A({S("queued")}), A({}), I(1), A({S("held")}),
                               A({S("in_progress"), S("x")}), RespValue::nil()}) {
    EXPECT_EQ(parse_enqueue_reply(bad).error().code, ErrorCode::kInvalidReply)
        << bad.debug_string();
  }
  EXPECT_STREQ(revalidation_outcome_name(RevalidationOutcome::kAlreadyQueued), "already_queued");
}

TEST(DiscoveryRedis, OnePipelineForAPageOfRevalidations) {
  RedisKeys keys = *RedisKeys::create();
  std::vector<Revalidation> page = {stale_docs(),
                                    Revalidation{"mail", member_principal("a"), "miss", false},
                                    Revalidation{"web", Principal::shared(), "expired", false}};
  Result<Pipeline> p = revalidate_enqueue_pipeline(keys, page, 9, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->expected_replies(), 3u);
  std::string expected;
  for (const Revalidation& r : page) {
    expected += encode_command(*revalidate_enqueue_command(keys, r, 9, {}));
  }
  EXPECT_EQ(p->bytes(), expected);
  EXPECT_TRUE(revalidate_enqueue_pipeline(keys, {}, 9, {})->empty());
  page[1].reason = "";
  EXPECT_FALSE(revalidate_enqueue_pipeline(keys, page, 9, {}).ok());

  std::vector<Result<RevalidationResult>> results = parse_enqueue_replies(
      {A({S("queued"), S("1-0")}), RespValue::error("ERR"), A({S("in_progress")})});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_FALSE(results[1].ok());
  EXPECT_EQ(results[2]->outcome, RevalidationOutcome::kInProgress);
}

TEST(DiscoveryRedis, WebhookCommandIsOneScriptWithTheReplayKeyAndEveryTarget) {
  RedisKeys keys = *RedisKeys::create("team");
  WebhookVerified verified{1000, "wh:abc", 299000};
  WebhookRefreshRequest request;
  request.targets = {{"docs", std::nullopt, "deploy"}, {"mail", member_principal("bob"), "deploy"}};
  EnqueueOptions options;
  Result<RedisCommand> c = webhook_refresh_command(keys, verified, request, 5000, options);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, (RedisCommand{"EVAL", std::string(schema_asset("lua/webhook_refresh.lua")), "3",
                              keys.replay("wh:abc"), "quiver:{team}:revalidate",
                              "quiver:{team}:epoch", "quiver:{team}:", "299000", "5000", "30000",
                              "10000", "1000", "webhook", "docs", "", "mail", "member/bob"}));

  WebhookRefreshRequest none;
  EXPECT_EQ(webhook_refresh_command(keys, verified, none, 5000, options).error().code,
            ErrorCode::kInvalidArgument);
  WebhookRefreshRequest bad;
  bad.targets = {{"a:b", std::nullopt, "x"}};
  EXPECT_FALSE(webhook_refresh_command(keys, verified, bad, 5000, options).ok());
  EnqueueOptions zero;
  zero.window_ms = 0;
  EXPECT_FALSE(webhook_refresh_command(keys, verified, request, 5000, zero).ok());
}

TEST(DiscoveryRedis, WebhookRepliesParseStrictly) {
  Result<WebhookRefreshReply> replay = parse_webhook_refresh_reply(A({S("replay")}));
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(replay->replay);
  EXPECT_TRUE(replay->results.empty());

  Result<WebhookRefreshReply> ok = parse_webhook_refresh_reply(
      A({S("accepted"),
         A({S("docs"), S("shared"), S("queued"), S("1"), S("nope"), S(""), S("unknown_connection"),
            S("0"), S("mail"), S("member/bob"), S("in_progress"), S("0")})}));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_FALSE(ok->replay);
  ASSERT_EQ(ok->results.size(), 3u);
  EXPECT_EQ(ok->results[0], (WebhookRefreshResult{"docs", Principal::shared(), "queued", true}));
  EXPECT_EQ(ok->results[1],
            (WebhookRefreshResult{"nope", std::nullopt, "unknown_connection", false}));
  EXPECT_EQ(ok->results[2],
            (WebhookRefreshResult{"mail", member_principal("bob"), "in_progress", false}));
  EXPECT_EQ(parse_webhook_refresh_reply(A({S("accepted"), A({})}))->results.size(), 0u);
  // A per_member connection marked as a whole: no principal, status `marked`.
  Result<WebhookRefreshReply> whole =
      parse_webhook_refresh_reply(A({S("accepted"), A({S("team"), S(""), S("marked"), S("1")})}));
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  ASSERT_EQ(whole->results.size(), 1u);
  EXPECT_EQ(whole->results[0],
            (WebhookRefreshResult{"team", std::nullopt, kWebhookConnectionMarked, true}));
  const std::string body = webhook_accepted_body(whole->results);
  EXPECT_NE(body.find(R"("status":"marked")"), std::string::npos) << body;
  EXPECT_EQ(body.find("principal"), std::string::npos) << body;

  EXPECT_EQ(parse_webhook_refresh_reply(RespValue::error("NOSCRIPT")).error().code,
            ErrorCode::kStoreUnavailable);
  // webhook_refresh.lua when the namespace record is not `ready`: the store lost its data (503),
  // never every target `unknown_connection`.
  for (const char* state : {"missing", "restoring"}) {
    Result<WebhookRefreshReply> r =
        parse_webhook_refresh_reply(A({S("quiver.namespace.v1"), S(state)}));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kStoreNotReady);
    EXPECT_NE(r.error().message.find(state), std::string::npos) << r.error().message;
  }
  // The script reads the record before it writes anything (the replay guard first of all).
  std::string_view script = schema_asset("lua/webhook_refresh.lua");
  EXPECT_LT(script.find("prefix .. 'namespace'"), script.find("redis.call('SET'"));
  for (const RespValue& bad :
       {A({}), I(1), RespValue::nil(), A({S("replay"), S("x")}), A({S("accepted")}),
        A({S("accepted"), A({S("docs"), S("shared"), S("queued")})}),
        A({S("accepted"), A({S("docs"), S("shared"), S("done"), S("0")})}),
        A({S("accepted"), A({S("docs"), S("shared"), S("queued"), S("2")})}),
        A({S("accepted"), A({S("docs"), S("nobody"), S("queued"), S("0")})}),
        A({S("accepted"), A({S("docs"), I(1), S("queued"), S("0")})}),
        // no principal only for an unknown connection or one marked as a whole
        A({S("accepted"), A({S("docs"), S(""), S("queued"), S("0")})}),
        A({S("accepted"), A({S("docs"), S("shared"), S("marked"), S("1")})}),
        A({S("accepted"), A({S("docs"), S("shared"), S("unknown_connection"), S("0")})})}) {
    EXPECT_EQ(parse_webhook_refresh_reply(bad).error().code, ErrorCode::kInvalidReply)
        << bad.debug_string();
  }
}

// The effective mark of (connection, principal): the later of its own and its connection's.
TEST(DiscoveryRedis, TheEffectiveInvalidationIsTheLaterMark) {
  using Mark = std::optional<std::string_view>;
  EXPECT_EQ(effective_invalidation(Mark(), Mark()), std::nullopt);
  EXPECT_EQ(effective_invalidation(Mark("900"), Mark()), "900");
  EXPECT_EQ(effective_invalidation(Mark(), Mark("900")), "900");
  EXPECT_EQ(effective_invalidation(Mark("900"), Mark("1000")), "1000");  // numbers, not text
  EXPECT_EQ(effective_invalidation(Mark("1000"), Mark("900")), "1000");
  EXPECT_EQ(effective_invalidation(Mark("1000"), Mark("1000")), "1000");
  // A malformed mark loses to a number; alone, it stays, for the decoder to refuse.
  EXPECT_EQ(effective_invalidation(Mark("x"), Mark("5")), "5");
  EXPECT_EQ(effective_invalidation(Mark("5"), Mark("x")), "5");
  EXPECT_EQ(effective_invalidation(Mark("x"), Mark()), "x");
}

// ---- manifest bodies stored apart ---------------------------------------------------------------

// `docs` as good_reply() has it, but naming its body instead of holding it (what commits write).
RespValue reply_naming_body(const std::string& digest) {
  HashFields manifest = data_entry("h1", 1000, 2000, "");
  manifest.erase("manifest");
  manifest["body"] = digest;
  return A({S("quiver.discovery.v2"), S("member/alice"), I(42), I(1), S(""), I(0),
            A({A({S("docs"), flat(conn_fields("shared")), S("shared"), flat(manifest), A({}), I(0),
                  RespValue::nil()})}),
            A({S("ready:1"), S("7"), S("3")})});
}

TEST(DiscoveryRedis, ARecordNamingItsBodyHasDataWhoseTextIsFetchedApart) {
  const std::string text = manifest_json({"a", "b"});
  const std::string digest = manifest_body_digest(text);
  EXPECT_EQ(digest, sha256_hex(text));
  Result<DiscoverySnapshot> s =
      decode_discovery_reply(reply_naming_body(digest), member_principal("alice"));
  ASSERT_TRUE(s.ok()) << s.error().message;
  const ManifestEntry& entry = *s->connections[0].manifest;
  EXPECT_TRUE(entry.text.empty());
  EXPECT_EQ(entry.body_digest, digest);
  EXPECT_TRUE(entry.has_body());
  EXPECT_TRUE(entry.body_missing());
  EXPECT_EQ(missing_bodies(*s), std::vector<std::string>{digest});

  EXPECT_EQ(fill_body(*s, std::string(64, '0'), text), 0u);  // another body: nothing filled
  EXPECT_EQ(fill_body(*s, digest, text), 1u);
  EXPECT_EQ(s->connections[0].manifest->text, text);
  EXPECT_TRUE(missing_bodies(*s).empty());

  // A `body` that is not a SHA-256 makes the entry unreadable, as any malformed field does.
  Result<DiscoverySnapshot> bad =
      decode_discovery_reply(reply_naming_body("sha256-not-hex"), member_principal("alice"));
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->connections[0].manifest->unreadable.find("body"), std::string::npos);
}

TEST(DiscoveryRedis, TheBodyReadIsOneMgetOfTheBodyKeys) {
  RedisKeys keys = *RedisKeys::create("team-a");
  const std::string d1(64, 'a'), d2(64, 'b');
  Result<RedisCommand> c = body_read_command(keys, {d1, d2});
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(*c, (RedisCommand{"MGET", "quiver:{team-a}:body:" + d1, "quiver:{team-a}:body:" + d2}));
  EXPECT_FALSE(body_read_command(keys, {}).ok());
  EXPECT_FALSE(body_read_command(keys, {"sha256-AAAA"}).ok());
  EXPECT_FALSE(body_read_command(keys, {std::string(64, 'A')}).ok());  // uppercase hex
  EXPECT_FALSE(body_read_command(keys, std::vector<std::string>(kMaxSnapshotLimit + 1, d1)).ok());
}

TEST(DiscoveryRedis, BodyRepliesGiveOnlyBytesThatAreWhatTheirNameSays) {
  const std::string good = manifest_json({"a"});
  const std::string other = manifest_json({"b"});
  const std::vector<std::string> digests = {manifest_body_digest(good), manifest_body_digest(good),
                                            manifest_body_digest(other)};
  // Found; absent (expired, evicted); bytes that are not the content its name says.
  Result<std::vector<std::optional<std::string>>> bodies =
      decode_body_reply(A({S(good), RespValue::nil(), S(good)}), digests);
  ASSERT_TRUE(bodies.ok()) << bodies.error().message;
  EXPECT_EQ((*bodies)[0], std::optional<std::string>(good));
  EXPECT_EQ((*bodies)[1], std::nullopt);
  EXPECT_EQ((*bodies)[2], std::nullopt);

  Result<std::vector<std::optional<std::string>>> error =
      decode_body_reply(RespValue::error("NOPERM no permissions"), digests);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error().code, ErrorCode::kStoreUnavailable);
  for (const RespValue& bad : {A({S(good)}), S(good), A({S(good), I(1), S(good)})}) {
    Result<std::vector<std::optional<std::string>>> r = decode_body_reply(bad, digests);
    ASSERT_FALSE(r.ok()) << bad.debug_string();
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply);
  }
}

}  // namespace
}  // namespace quiver
