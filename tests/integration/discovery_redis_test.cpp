// The discovery read and the revalidation queue against a real redis-server. Keys are written
// with hiredis from RedisKeys (and by the lease module's real commit script); the read goes the
// edge's way: the core's RESP bytes over a plain socket, the core's decoder, the core's renderer.
#include "shared/discovery_redis.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/store/redis_store.h"
#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/lease.h"
#include "shared/schema_assets.h"
#include "tests/support/discovery_fixture.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/loopback_socket.h"
#include "tests/support/redis_fixture.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/ (fixture, Redis server)

using RawSocket = testing::LoopbackSocket;

class DiscoveryRedisIntegration : public RedisFixture {
 protected:
  void SetUp() override {
    RedisFixture::SetUp();
    if (HasFatalFailure()) return;
    // As an agent leaves a namespace it has synced (schema/redis-keys.md, `namespace`).
    cmd({"SET", keys_.namespace_record(), "ready:1"});
  }

  // Writes every key of `store` with hiredis, spelled by RedisKeys.
  void populate(const MemoryStore& store) {
    for (const auto& [cid, fields] : store.conns) {
      std::vector<std::string> argv = {"HSET", *keys_.conn(cid)};
      for (const auto& [k, v] : fields) {
        argv.push_back(k);
        argv.push_back(v);
      }
      cmd(argv);
      cmd({"SADD", keys_.conns(), cid});
    }
    for (const auto& [member, ids] : store.grants) {
      for (const std::string& id : ids) {
        cmd({"SADD", *keys_.grants(*Principal::parse(member)), id});
      }
    }
    for (const auto& [key, fields] : store.manifests) {
      std::vector<std::string> argv = {"HSET",
                                       *keys_.manifest(key.first, *Principal::parse(key.second))};
      for (const auto& [k, v] : fields) {
        argv.push_back(k);
        argv.push_back(v);
      }
      cmd(argv);
    }
    for (const auto& [key, members] : store.disabled_sets) {
      for (const std::string& m : members) {
        cmd({"SADD", *keys_.disabled(key.first, *Principal::parse(key.second)), m});
      }
    }
    for (const auto& [cid, principal] : store.leases) {
      cmd({"SET", *keys_.lease(cid, *Principal::parse(principal)), "1:" + std::string(32, 'a'),
           "PX", "60000"});
    }
    cmd({"SET", keys_.epoch(), std::to_string(store.epoch_value)});
  }

  // The read as the edge does it: one EVAL, our bytes, our decoder.
  Result<DiscoverySnapshot> read(const std::string& member, const SnapshotQuery& query = {}) {
    Result<RedisCommand> command = discovery_read_command(keys_, member_principal(member), query);
    if (!command.ok()) return command.error();
    RawSocket socket(redis_->port());
    Result<std::vector<RespValue>> replies = socket.exchange(encode_command(*command), 1);
    if (!replies.ok()) return replies.error();
    return decode_discovery_reply((*replies)[0], member_principal(member));
  }

  std::vector<Result<RevalidationResult>> enqueue(const std::vector<Revalidation>& page,
                                                  int64_t now, const EnqueueOptions& options = {}) {
    Result<Pipeline> pipeline = revalidate_enqueue_pipeline(keys_, page, now, options);
    EXPECT_TRUE(pipeline.ok());
    RawSocket socket(redis_->port());
    Result<std::vector<RespValue>> replies =
        socket.exchange(pipeline->bytes(), pipeline->expected_replies());
    EXPECT_TRUE(replies.ok()) << replies.error().message;
    return replies.ok() ? parse_enqueue_replies(*replies)
                        : std::vector<Result<RevalidationResult>>{};
  }

  int64_t xlen() { return cmd({"XLEN", keys_.revalidate_stream()}).integer; }

  // Rewrites every manifest hash holding its body inline into the layout commits write now: the
  // body under body:<sha256> (once per content), the record naming it in `body`.
  void store_bodies_apart() {
    RespValue found = cmd({"KEYS", keys_.manifest_match_pattern()});
    for (const RespValue& key : found.elements) {
      RespValue text = cmd({"HGET", key.str, "manifest"});
      if (!text.is_string()) continue;
      const std::string digest = manifest_body_digest(text.str);
      cmd({"SET", *keys_.body(digest), text.str});
      cmd({"HDEL", key.str, "manifest"});
      cmd({"HSET", key.str, "body", digest});
    }
  }

  // The second round a reader makes: the bodies `snapshot` lacks, in one MGET (the edge's bytes).
  void fill_bodies(DiscoverySnapshot& snapshot) {
    const std::vector<std::string> wanted = missing_bodies(snapshot);
    if (wanted.empty()) return;
    Result<RedisCommand> mget = body_read_command(keys_, wanted);
    ASSERT_TRUE(mget.ok()) << mget.error().message;
    RawSocket socket(redis_->port());
    Result<std::vector<RespValue>> replies = socket.exchange(encode_command(*mget), 1);
    ASSERT_TRUE(replies.ok()) << replies.error().message;
    Result<std::vector<std::optional<std::string>>> bodies =
        decode_body_reply((*replies)[0], wanted);
    ASSERT_TRUE(bodies.ok()) << bodies.error().message;
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      if ((*bodies)[i]) fill_body(snapshot, wanted[i], *(*bodies)[i]);
    }
  }

  RedisKeys keys_ = *RedisKeys::create("itest");
};

// Three members, three connections in mixed modes, manifests for every principal, grants
// varying, plus disabled tools (shared and per member), a held lease, a removed connection and a
// bad grant.
MemoryStore matrix_store() {
  MemoryStore store;
  const std::map<std::string, std::string> mode = {
      {"shared-docs", "shared"}, {"pm-github", "per_member"}, {"pm-mail", "per_member"}};
  for (const auto& [cid, m] : mode) store.add_connection(cid, m);
  for (const auto& [cid, m] : mode) {
    for (const std::string p : {"shared", "member/alice", "member/bob", "member/carol"}) {
      std::string tool = "tool-" + cid + "-" + p.substr(p.find('/') + 1);
      store.manifests[{cid, p}] =
          data_entry("h-" + cid, kNow - kMinute, kNow + 14 * kMinute, manifest_json({tool, "x"}));
    }
  }
  store.manifests[{"pm-mail", "member/bob"}] = data_entry(
      "h-pm-mail", kNow - 20 * kMinute, kNow - 5 * kMinute, manifest_json({"tool-pm-mail-bob"}));
  add_failure(&store.manifests[{"pm-mail", "member/bob"}], "TIMEOUT", "slow", kNow - 1000);
  for (const char* cid : {"pm-github", "pm-mail", "shared-docs", "removed"}) {
    store.grant("alice", cid);
  }
  store.grant("alice", "bad}id");
  store.grant("bob", "pm-mail");
  store.grant("bob", "shared-docs");
  store.grant("carol", "pm-github");
  store.disabled_sets[{"shared-docs", "shared"}] = {"tool:x"};
  // A per-member overlay hides from its own member only: alice hid `x` on pm-github, carol not.
  store.disabled_sets[{"pm-github", "member/alice"}] = {"tool:x"};
  store.leases.insert({"pm-github", "member/carol"});
  return store;
}

TEST_F(DiscoveryRedisIntegration, OneRoundTripGivesTheSnapshotTheInMemoryReaderGives) {
  MemoryStore store = matrix_store();
  populate(store);
  for (const char* member : {"alice", "bob", "carol", "dave"}) {
    SCOPED_TRACE(member);
    Result<DiscoverySnapshot> redis = read(member);
    ASSERT_TRUE(redis.ok()) << redis.error().message;
    Result<DiscoverySnapshot> memory = read_snapshot(store, member_principal(member), {});
    ASSERT_TRUE(memory.ok());
    EXPECT_EQ(redis->connections, memory->connections);
    EXPECT_EQ(redis->epoch, 7);
    EXPECT_EQ(redis->granted_total, memory->granted_total);
    EXPECT_EQ(redis->ignored_grants, memory->ignored_grants);
    EXPECT_EQ(redis->next_after, memory->next_after);
    FreshnessPolicy policy;
    EXPECT_EQ(render_manifests(*redis, policy, kNow).body,
              render_manifests(*memory, policy, kNow).body);
  }
}

TEST_F(DiscoveryRedisIntegration, EachMemberSeesExactlyItsGrantsUnderTheRightPrincipal) {
  populate(matrix_store());
  const std::map<std::string, std::vector<std::string>> shown = {
      {"alice", {"pm-github", "pm-mail", "shared-docs"}},
      {"bob", {"pm-mail", "shared-docs"}},
      {"carol", {"pm-github"}},
      {"dave", {}}};
  for (const auto& [member, ids] : shown) {
    SCOPED_TRACE(member);
    Result<DiscoverySnapshot> s = read(member);
    ASSERT_TRUE(s.ok()) << s.error().message;
    RenderedDiscovery r = render_manifests(*s, FreshnessPolicy{}, kNow);
    Json body = *parse_json(r.body);
    std::vector<std::string> seen;
    for (const Json& c : body["connections"]) {
      const std::string id = c["id"];
      seen.push_back(id);
      const std::string expected = id == "shared-docs" ? "shared" : "member/" + member;
      EXPECT_EQ(c["principal"], expected);
      const std::string own = "tool-" + id + "-" + expected.substr(expected.find('/') + 1);
      if (c.contains("manifest")) {
        EXPECT_EQ(c["manifest"]["tools"]["items"][0]["name"], own);
      }
    }
    EXPECT_EQ(seen, ids);
    for (const std::string other : {"alice", "bob", "carol"}) {
      if (other == member) continue;
      EXPECT_EQ(r.body.find("-" + other + "\""), std::string::npos) << other;
    }
  }
  // Spot checks of what the statuses became end to end.
  Json bob = *parse_json(render_manifests(*read("bob"), FreshnessPolicy{}, kNow).body);
  EXPECT_EQ(bob["connections"][0]["status"], "stale");
  EXPECT_EQ(bob["connections"][0]["error"]["code"], "TIMEOUT");
  EXPECT_EQ(bob["connections"][1]["manifest"]["tools"]["items"].size(), 1u);  // tool:x hidden
  Json carol =
      *parse_json(render_manifests(*read("carol"), FreshnessPolicy{}, kNow + 20 * kMinute).body);
  EXPECT_EQ(carol["connections"][0]["refresh"], "in_progress");
  EXPECT_EQ(carol["connections"][0]["manifest"]["tools"]["items"].size(), 2u);  // x shown
  Json alice = *parse_json(render_manifests(*read("alice"), FreshnessPolicy{}, kNow).body);
  EXPECT_EQ(alice["connections"][0]["id"], "pm-github");
  EXPECT_EQ(alice["connections"][0]["manifest"]["tools"]["items"].size(), 1u);  // x hidden
}

TEST_F(DiscoveryRedisIntegration, PagingAndSingleReadsFollowTheGrants) {
  populate(matrix_store());
  SnapshotQuery page;
  page.limit = 2;
  Result<DiscoverySnapshot> first = read("alice", page);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->granted_ids(), (std::vector<std::string>{"pm-github", "pm-mail"}));
  EXPECT_EQ(first->next_after, std::optional<std::string>("pm-mail"));
  EXPECT_EQ(first->granted_total, 4);
  EXPECT_EQ(first->ignored_grants, 1);
  page.after = *first->next_after;
  Result<DiscoverySnapshot> second = read("alice", page);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->granted_ids(), (std::vector<std::string>{"removed", "shared-docs"}));
  EXPECT_FALSE(second->next_after.has_value());

  SnapshotQuery only;
  only.only = "pm-github";
  Result<DiscoverySnapshot> one = read("bob", only);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->connections.empty());  // bob is not granted pm-github
  EXPECT_EQ(render_connection_manifest(*one, "pm-github", FreshnessPolicy{}, kNow).error().code,
            ErrorCode::kNotFound);
  one = read("carol", only);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->connections.size(), 1u);
  EXPECT_EQ(one->connections[0].principal, member_principal("carol"));
  EXPECT_TRUE(one->connections[0].lease_held);
}

TEST_F(DiscoveryRedisIntegration, ReadsWhatTheRealCommitScriptWrote) {
  MemoryStore store;
  store.add_connection("gh", "per_member", "cfg-1");
  store.grant("alice", "gh");
  populate(store);
  const Principal alice = member_principal("alice");
  LeaseKeys lk{*keys_.manifest("gh", alice), *keys_.lease("gh", alice), *keys_.fence("gh", alice),
               *keys_.conn("gh"), keys_.epoch()};
  lk.due = keys_.due();
  lk.due_member = *due_member("gh", alice);
  lk.version = *keys_.version_of("gh", alice);
  const std::string committed_text = manifest_json({"create_issue", "search_code"});
  lk.body = *keys_.body(manifest_body_digest(committed_text));
  const std::string token(32, 'b');
  Result<AcquireResult> acquired =
      parse_acquire_reply(cmd(*acquire_lease_command(lk, token)), token);
  ASSERT_TRUE(acquired.ok() && acquired->acquired);

  // While the listing runs, readers see pending and queue nothing.
  Json during = *parse_json(render_manifests(*read("alice"), FreshnessPolicy{}, kNow).body);
  EXPECT_EQ(during["connections"][0]["status"], "pending");
  EXPECT_EQ(during["connections"][0]["refresh"], "in_progress");

  ManifestWrite w;
  w.manifest = committed_text;
  w.etag = "sha256-committed";
  w.config_hash = "cfg-1";
  w.fetched_at_ms = kNow - 1000;
  w.fresh_until_ms = kNow - 1000 + 15 * kMinute;
  w.expires_at_ms = kNow - 1000 + 86'400'000;
  w.cache_scope = "private";
  Result<FencedWriteResult> committed = parse_commit_reply(
      cmd(*commit_manifest_command(lk, acquired->lease, w, FencedWriteOptions{true})));
  ASSERT_TRUE(committed.ok() && committed->ok());

  Result<DiscoverySnapshot> s = read("alice");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->epoch, committed->epoch);
  // The script returned the metadata and the body's name; the body comes apart.
  ASSERT_EQ(missing_bodies(*s), std::vector<std::string>{manifest_body_digest(committed_text)});
  fill_bodies(*s);
  RenderedDiscovery r = render_manifests(*s, FreshnessPolicy{}, kNow);
  Json c = (*parse_json(r.body))["connections"][0];
  EXPECT_EQ(c["status"], "fresh");
  EXPECT_EQ(c["etag"], "sha256-committed");
  EXPECT_EQ(c["cache_scope"], "private");
  EXPECT_EQ(c["manifest"]["tools"]["items"].size(), 2u);
  EXPECT_FALSE(c.contains("refresh"));
  EXPECT_TRUE(r.revalidations.empty());
}

TEST_F(DiscoveryRedisIntegration, AWipedNamespaceIsNotReadyRatherThanEmpty) {
  MemoryStore store = matrix_store();
  populate(store);
  ASSERT_TRUE(read("alice").ok());
  cmd({"FLUSHALL"});
  Result<DiscoverySnapshot> wiped = read("alice");
  ASSERT_FALSE(wiped.ok());
  EXPECT_EQ(wiped.error().code, ErrorCode::kStoreNotReady) << wiped.error().message;
  // Restoring (an agent is re-syncing): still not served, even once the grants are back.
  populate(store);
  cmd({"SET", keys_.namespace_record(), "restoring:5"});
  EXPECT_EQ(read("alice").error().code, ErrorCode::kStoreNotReady);
  cmd({"SET", keys_.namespace_record(), "ready:6"});
  Result<DiscoverySnapshot> back = read("alice");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->connections, read_snapshot(store, member_principal("alice"), {})->connections);
}

TEST_F(DiscoveryRedisIntegration, TheScriptRefusesAGrantsKeyThatIsNotTheCallers) {
  Result<RedisCommand> command = discovery_read_command(keys_, member_principal("alice"));
  ASSERT_TRUE(command.ok());
  (*command)[3] = *keys_.grants(member_principal("bob"));
  Result<DiscoverySnapshot> s = decode_discovery_reply(cmd(*command), member_principal("alice"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(s.error().message.find("not the grants key"), std::string::npos);
}

// ---- revalidation ------------------------------------------------------------------------------

TEST_F(DiscoveryRedisIntegration, TwoHundredConcurrentEnqueuesQueueExactlyOnce) {
  const Revalidation stale{"docs", Principal::shared(), "stale", false};
  Result<RedisCommand> command = revalidate_enqueue_command(keys_, stale, kNow, {});
  ASSERT_TRUE(command.ok());
  constexpr int kThreads = 8;
  constexpr int kPerThread = 25;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::vector<Result<RevalidationResult>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RedisConnection c(redis_->connect());
      ++ready;
      while (!go) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i) {
        results[t].push_back(parse_enqueue_reply(run_argv(c.get(), *command)));
      }
    });
  }
  while (ready < kThreads) std::this_thread::yield();
  go = true;
  for (std::thread& t : threads) t.join();

  int queued = 0, already = 0;
  for (const auto& per_thread : results) {
    for (const Result<RevalidationResult>& r : per_thread) {
      ASSERT_TRUE(r.ok()) << r.error().message;
      if (r->outcome == RevalidationOutcome::kQueued) ++queued;
      if (r->outcome == RevalidationOutcome::kAlreadyQueued) ++already;
    }
  }
  EXPECT_EQ(queued, 1);
  EXPECT_EQ(already, kThreads * kPerThread - 1);
  EXPECT_EQ(xlen(), 1);
  RespValue entries = cmd({"XRANGE", keys_.revalidate_stream(), "-", "+"});
  ASSERT_EQ(entries.elements.size(), 1u);
  const RespValue& fields = entries.elements[0].elements[1];
  std::vector<std::string> flat;
  for (const RespValue& f : fields.elements) flat.push_back(f.str);
  EXPECT_EQ(flat, (std::vector<std::string>{"cid", "docs", "principal", "shared", "reason", "stale",
                                            "at", std::to_string(kNow)}));
  int64_t pttl = cmd({"PTTL", *keys_.revalidate_gate("docs", Principal::shared())}).integer;
  EXPECT_GT(pttl, 25'000);
  EXPECT_LE(pttl, 30'000);
}

TEST_F(DiscoveryRedisIntegration, HeldLeaseMeansInProgressAndNothingQueued) {
  const Principal alice = member_principal("alice");
  cmd({"SET", *keys_.lease("mail", alice), "3:" + std::string(32, 'c'), "PX", "60000"});
  std::vector<Result<RevalidationResult>> r = enqueue(
      {Revalidation{"mail", alice, "stale", false}, Revalidation{"mail", alice, "manual", true}},
      kNow);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]->outcome, RevalidationOutcome::kInProgress);
  EXPECT_EQ(r[1]->outcome, RevalidationOutcome::kInProgress);
  EXPECT_EQ(xlen(), 0);
  EXPECT_EQ(cmd({"EXISTS", *keys_.revalidate_gate("mail", alice)}).integer, 0);
}

TEST_F(DiscoveryRedisIntegration, APageOfRevalidationsIsOnePipeline) {
  const Principal alice = member_principal("alice");
  cmd({"SET", *keys_.lease("leased", Principal::shared()), "1:x", "PX", "60000"});
  std::vector<Result<RevalidationResult>> r =
      enqueue({Revalidation{"a", Principal::shared(), "stale", false},
               Revalidation{"b", alice, "miss", false},
               Revalidation{"leased", Principal::shared(), "expired", false},
               Revalidation{"a", Principal::shared(), "stale", false}},
              kNow);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0]->outcome, RevalidationOutcome::kQueued);
  EXPECT_FALSE(r[0]->stream_id.empty());
  EXPECT_EQ(r[1]->outcome, RevalidationOutcome::kQueued);
  EXPECT_EQ(r[2]->outcome, RevalidationOutcome::kInProgress);
  EXPECT_EQ(r[3]->outcome, RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(xlen(), 2);
}

TEST_F(DiscoveryRedisIntegration, TheGateReopensAfterItsWindow) {
  EnqueueOptions short_window;
  short_window.window_ms = 50;
  const Revalidation r{"docs", Principal::shared(), "stale", false};
  EXPECT_EQ(enqueue({r}, kNow, short_window)[0]->outcome, RevalidationOutcome::kQueued);
  EXPECT_EQ(enqueue({r}, kNow, short_window)[0]->outcome, RevalidationOutcome::kAlreadyQueued);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(enqueue({r}, kNow + 120, short_window)[0]->outcome, RevalidationOutcome::kQueued);
  EXPECT_EQ(xlen(), 2);
}

TEST_F(DiscoveryRedisIntegration, AManualRefreshIsNotSwallowedByAReadersGate) {
  const Revalidation stale{"docs", Principal::shared(), "stale", false};
  const Revalidation manual{"docs", Principal::shared(), "manual", true};
  EXPECT_EQ(enqueue({stale}, kNow)[0]->outcome, RevalidationOutcome::kQueued);
  // Within manual_requeue_after_ms (1 s, by the callers' clock) of the gate: a double click.
  EXPECT_EQ(enqueue({manual}, kNow + 500)[0]->outcome, RevalidationOutcome::kAlreadyQueued);
  // Later, still inside the reader's 30 s window: queued again, and the gate restarts.
  EXPECT_EQ(enqueue({manual}, kNow + 5000)[0]->outcome, RevalidationOutcome::kQueued);
  EXPECT_EQ(cmd({"GET", *keys_.revalidate_gate("docs", Principal::shared())}).str,
            std::to_string(kNow + 5000));
  EXPECT_EQ(enqueue({stale}, kNow + 6000)[0]->outcome, RevalidationOutcome::kAlreadyQueued);
  EXPECT_EQ(xlen(), 2);
}

// ---- refresh webhooks (schema/lua/webhook_refresh.lua) ------------------------------------------

class WebhookRedisIntegration : public DiscoveryRedisIntegration {
 protected:
  Result<WebhookRefreshReply> webhook(const std::string& signed_id,
                                      const std::vector<WebhookRefreshTarget>& targets,
                                      int64_t now) {
    WebhookRefreshRequest request;
    request.targets = targets;
    Result<RedisCommand> command = webhook_refresh_command(
        keys_, WebhookVerified{now, signed_id, 300'000}, request, now, EnqueueOptions{});
    if (!command.ok()) return command.error();
    RawSocket socket(redis_->port());
    Result<std::vector<RespValue>> replies = socket.exchange(encode_command(*command), 1);
    if (!replies.ok()) return replies.error();
    return parse_webhook_refresh_reply((*replies)[0]);
  }

  Freshness state_of(const std::string& cid, const std::string& principal, int64_t now) {
    RespValue all = cmd({"HGETALL", *keys_.manifest(cid, *Principal::parse(principal))});
    HashFields fields;
    for (size_t i = 0; i + 1 < all.elements.size(); i += 2) {
      fields[all.elements[i].str] = all.elements[i + 1].str;
    }
    // The webhook's marks are keys of their own (schema/redis-keys.md), read with the manifest:
    // the principal's and the connection's; the later one applies.
    RespValue own = cmd({"GET", *keys_.invalidated(cid, *Principal::parse(principal))});
    RespValue whole = cmd({"GET", *keys_.marked(cid)});
    if (std::optional<std::string> mark = effective_invalidation(
            own.is_string() ? std::optional<std::string_view>(own.str) : std::nullopt,
            whole.is_string() ? std::optional<std::string_view>(whole.str) : std::nullopt)) {
      fields[redis_field::kInvalidatedAt] = *mark;
    }
    Result<std::optional<CacheEntryMeta>> meta =
        cache_entry_meta(manifest_entry_from_fields(fields));
    EXPECT_TRUE(meta.ok() && meta->has_value());
    return classify(**meta, FreshnessPolicy{}, "h-" + cid, now).state;
  }
};

// A namespace the store lost (or an agent is restoring): nothing written, not even the replay
// guard, so the sender's retry of the same signed request is accepted once it is ready again.
TEST_F(WebhookRedisIntegration, AWipedNamespaceIsNotReadyAndNothingIsWritten) {
  const std::vector<WebhookRefreshTarget> targets = {{"shared-docs", std::nullopt, "deploy"}};
  cmd({"FLUSHALL"});
  for (const char* record : {"", "restoring:5"}) {
    if (*record != '\0') cmd({"SET", keys_.namespace_record(), record});
    Result<WebhookRefreshReply> r = webhook("wh:wiped", targets, kNow);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kStoreNotReady) << r.error().message;
    EXPECT_EQ(cmd({"DBSIZE"}).integer, *record != '\0' ? 1 : 0);  // the record alone
  }
  populate(matrix_store());  // an agent restored it, and marked it ready
  cmd({"SET", keys_.namespace_record(), "ready:6"});
  Result<WebhookRefreshReply> r = webhook("wh:wiped", targets, kNow);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->replay);
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_EQ(r->results[0].status, "queued");
}

TEST_F(WebhookRedisIntegration, MarksStaleQueuesEachNamedPrincipalAndRefusesAReplay) {
  populate(matrix_store());
  cmd({"SADD", *keys_.grantees("pm-github"), "member/alice", "member/carol"});
  cmd({"SADD", *keys_.grantees("pm-mail"), "member/alice", "member/bob"});
  const int64_t epoch = std::stoll(cmd({"GET", keys_.epoch()}).str);
  ASSERT_EQ(state_of("shared-docs", "shared", kNow), Freshness::kFresh);

  const std::vector<WebhookRefreshTarget> targets = {{"shared-docs", std::nullopt, "deploy"},
                                                     {"pm-github", std::nullopt, "deploy"},
                                                     {"pm-mail", member_principal("bob"), "deploy"},
                                                     {"pm-mail", member_principal("zed"), "deploy"},
                                                     {"nope", std::nullopt, "deploy"}};
  Result<WebhookRefreshReply> r = webhook("wh:1", targets, kNow);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->replay);
  const std::vector<WebhookRefreshResult> expected = {
      {"shared-docs", Principal::shared(), "queued", true},
      {"pm-github", std::nullopt, "marked", true},  // the connection as a whole, once
      {"pm-mail", member_principal("bob"), "queued", true},
      {"pm-mail", member_principal("zed"), "unknown_principal", false},
      {"nope", std::nullopt, "unknown_connection", false}};
  EXPECT_EQ(r->results, expected);

  // Marked stale: the data predates the webhook; the epoch moved so L1 copies retire. pm-github's
  // members through the connection's one mark (no key of theirs was written).
  EXPECT_EQ(state_of("shared-docs", "shared", kNow), Freshness::kStale);
  EXPECT_EQ(state_of("pm-github", "member/carol", kNow), Freshness::kStale);
  EXPECT_EQ(state_of("pm-github", "member/alice", kNow), Freshness::kStale);
  EXPECT_EQ(cmd({"KEYS", "quiver:{itest}:invalidated:pm-github:*"}).elements.size(), 0u);
  EXPECT_EQ(cmd({"GET", *keys_.marked("pm-github")}).str, std::to_string(kNow));
  EXPECT_EQ(state_of("shared-docs", "member/alice", kNow), Freshness::kFresh);  // not named
  EXPECT_EQ(std::stoll(cmd({"GET", keys_.epoch()}).str), epoch + 1);

  // Queued for the agents: each named principal (pm-github's members are queued by their reads).
  RespValue entries = cmd({"XRANGE", keys_.revalidate_stream(), "-", "+"});
  ASSERT_EQ(entries.elements.size(), 2u);
  for (const RespValue& e : entries.elements) {
    const RespValue& f = e.elements[1];
    EXPECT_EQ(f.elements[4].str, "reason");
    EXPECT_EQ(f.elements[5].str, "webhook");
    EXPECT_EQ(f.elements[7].str, std::to_string(kNow));
  }

  // The same signed request again: refused, nothing done.
  Result<WebhookRefreshReply> again = webhook("wh:1", targets, kNow + 10);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->replay);
  EXPECT_EQ(xlen(), 2);
  EXPECT_GT(cmd({"PTTL", keys_.replay("wh:1")}).integer, 290'000);

  // Another signed request within the requeue interval stands behind the first; after it, queued.
  Result<WebhookRefreshReply> soon = webhook("wh:2", {targets[0]}, kNow + 10);
  ASSERT_TRUE(soon.ok());
  EXPECT_EQ(soon->results.at(0).status, "already_queued");
  Result<WebhookRefreshReply> later = webhook("wh:3", {targets[0]}, kNow + 2000);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->results.at(0).status, "queued");
  EXPECT_EQ(xlen(), 3);
}

TEST_F(WebhookRedisIntegration, NothingIsMarkedWhereNothingIsCachedAndNoKeyIsCreated) {
  MemoryStore store;
  store.add_connection("fresh-conn", "shared");
  populate(store);
  Result<WebhookRefreshReply> r = webhook("wh:x", {{"fresh-conn", std::nullopt, "x"}}, kNow);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_EQ(r->results[0].status, "queued");
  EXPECT_FALSE(r->results[0].marked_stale);
  EXPECT_EQ(cmd({"EXISTS", *keys_.manifest("fresh-conn", Principal::shared())}).integer, 0);
  // A per_member connection without grantees: marked all the same (a later grantee's data
  // listed before it reads stale), nothing reads stale now.
  store.add_connection("lonely", "per_member");
  populate(store);
  r = webhook("wh:y", {{"lonely", std::nullopt, "x"}}, kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results,
            (std::vector<WebhookRefreshResult>{{"lonely", std::nullopt, "marked", false}}));
  EXPECT_EQ(cmd({"GET", *keys_.marked("lonely")}).str, std::to_string(kNow));
}

// ---- EVALSHA ------------------------------------------------------------------------------------

TEST_F(DiscoveryRedisIntegration, TheBuildTimeSha1IsTheNameRedisGivesEachScript) {
  int scripts = 0;
  for (const SchemaAsset& asset : schema_assets()) {
    if (asset.path.substr(0, 4) != "lua/") continue;
    ++scripts;
    RespValue loaded = cmd({"SCRIPT", "LOAD", std::string(asset.text)});
    EXPECT_EQ(loaded.str, asset.sha1) << asset.path;
  }
  EXPECT_GT(scripts, 3);
}

// The edge's whole request against a real Redis: EdgeService's bytes over a plain socket, the
// bytes as they come back fed to it, until it answers. SCRIPT FLUSH between requests: the
// EVALSHA meets NOSCRIPT and the same request sends EVAL on the same connection.
TEST_F(DiscoveryRedisIntegration, TheEdgeFallsBackToEvalWhenRedisLostItsScripts) {
  MemoryStore store = matrix_store();
  populate(store);
  const std::string secret = "edge-evalsha-integration-secret-0123456789";
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{"k", secret}}).dump();
  env["QUIVER_NAMESPACE"] = "itest";
  env["QUIVER_L1_TTL_MS"] = "0";
  EdgeService edge(edge_settings_from_env(env.dump()));
  ASSERT_TRUE(edge.configured());
  Result<std::string> token = mint_caller_token("alice", secret, "k", kNow, 3'600'000);
  ASSERT_TRUE(token.ok());

  struct Outcome {
    int status = 0;
    std::string body;
    int round_trips = 0;
    std::string sent;
  };
  auto get = [&](int64_t now) {
    HttpRequest request;
    request.method = "GET";
    request.path = "/v1/manifests";
    request.headers.emplace_back("Authorization", "Bearer " + *token);
    Outcome out;
    std::unique_ptr<RawSocket> socket;
    EdgeStep step = edge.begin(request, now, std::string(16, 'r'));
    for (int guard = 0; guard < 20 && step.action != EdgeAction::kRespond; ++guard) {
      if (step.action == EdgeAction::kRedis) {
        if (step.new_connection || socket == nullptr) {
          socket = std::make_unique<RawSocket>(redis_->port());
        }
        ++out.round_trips;
        out.sent += step.redis_bytes;
        EXPECT_TRUE(socket->send_all(step.redis_bytes));
      }
      std::string bytes = socket->receive();
      if (bytes.empty()) {
        step = edge.fail(step.handle, "closed or timed out", now);
      } else {
        step = edge.feed(step.handle, bytes, now);
      }
    }
    EXPECT_EQ(step.action, EdgeAction::kRespond);
    out.status = step.response.status;
    out.body = step.response.body;
    edge.end(step.handle);
    return out;
  };

  const std::string read_sha(schema_asset_sha1_of(schema_asset("lua/discovery_read.lua")));
  cmd({"SCRIPT", "FLUSH"});
  Outcome first = get(kNow);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.round_trips, 2);  // EVALSHA → NOSCRIPT, then EVAL
  EXPECT_NE(first.sent.find("EVALSHA"), std::string::npos);
  EXPECT_NE(first.body.find("tool-shared-docs-shared"), std::string::npos);
  EXPECT_EQ(cmd({"SCRIPT", "EXISTS", read_sha}).elements.at(0).integer, 1);

  Outcome second = get(kNow + 1);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.round_trips, 1);  // the script is loaded now: EVALSHA alone
  EXPECT_EQ(second.sent.find("$4\r\nEVAL\r\n"), std::string::npos);
  EXPECT_LT(second.sent.size(), 1024u);  // not the script's text
  // The same answer (the clock moved by 1 ms: only age_ms and ttl values differ in length-free
  // places, so compare what does not move).
  EXPECT_EQ(first.body.size(), second.body.size());

  cmd({"SCRIPT", "FLUSH"});
  Outcome third = get(kNow + 2);
  EXPECT_EQ(third.status, 200);
  EXPECT_EQ(third.round_trips, 2);
}

// ---- manifest bodies stored apart (schema/redis-keys.md, "Manifest bodies")
// ----------------------

// One request through a real EdgeService against the real Redis: its bytes over a plain socket,
// Redis's bytes fed back, until it answers (and, when asked, its background round).
struct EdgeOutcome {
  int status = 0;
  std::string body;
  std::string cache;    // X-Quiver-Cache
  int round_trips = 0;  // before the answer
  std::string sent;     // every byte written to Redis before the answer
  std::size_t received = 0;
};

EdgeOutcome edge_get(EdgeService& edge, int port, const std::string& token, int64_t now,
                     const std::string& path = "/v1/manifests") {
  HttpRequest request;
  request.method = "GET";
  request.path = path;
  request.headers.emplace_back("Authorization", "Bearer " + token);
  EdgeOutcome out;
  std::unique_ptr<LoopbackSocket> socket;
  EdgeStep step = edge.begin(request, now, std::string(16, 'r'));
  bool answered = false;
  for (int guard = 0; guard < 40 && step.action != EdgeAction::kDone; ++guard) {
    if (step.action == EdgeAction::kRespond) {
      answered = true;
      out.status = step.response.status;
      out.body = step.response.body;
      std::optional<std::string_view> cache = find_header(step.response.headers, "X-Quiver-Cache");
      out.cache = cache ? std::string(*cache) : "";
      if (!step.background) break;
      step = edge.background(step.handle, now);
      continue;
    }
    if (step.action == EdgeAction::kRedis) {
      if (step.new_connection || socket == nullptr) {
        socket = std::make_unique<LoopbackSocket>(port);
      }
      if (!answered) {
        ++out.round_trips;
        out.sent += step.redis_bytes;
      }
      EXPECT_TRUE(socket->send_all(step.redis_bytes));
    }
    std::string bytes = socket->receive(1 << 16);
    if (!answered) out.received += bytes.size();
    step = bytes.empty() ? edge.fail(step.handle, "closed or timed out", now)
                         : edge.feed(step.handle, bytes, now);
  }
  EXPECT_TRUE(answered);
  edge.end(step.handle);
  return out;
}

std::unique_ptr<EdgeService> edge_for(const std::string& secret, const std::string& ns,
                                      std::vector<std::pair<std::string, std::string>> extra = {}) {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{"k", secret}}).dump();
  env["QUIVER_NAMESPACE"] = ns;
  env["QUIVER_L1_TTL_MS"] = "0";  // every request reads Redis: what is measured is the body cache
  for (auto& [k, v] : extra) env[k] = v;
  return std::make_unique<EdgeService>(edge_settings_from_env(env.dump()));
}

TEST_F(DiscoveryRedisIntegration, BodiesStoredApartAnswerExactlyAsInlineBodiesDid) {
  MemoryStore store = matrix_store();
  populate(store);
  const FreshnessPolicy policy;
  std::map<std::string, std::string> inline_answers;
  for (const char* member : {"alice", "bob", "carol"}) {
    Result<DiscoverySnapshot> s = read(member);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_TRUE(missing_bodies(*s).empty());  // inline: nothing to fetch
    inline_answers[member] = render_manifests(*s, policy, kNow).body;
  }
  store_bodies_apart();
  for (const char* member : {"alice", "bob", "carol"}) {
    SCOPED_TRACE(member);
    Result<DiscoverySnapshot> s = read(member);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_FALSE(missing_bodies(*s).empty());
    fill_bodies(*s);
    EXPECT_TRUE(missing_bodies(*s).empty());
    EXPECT_EQ(render_manifests(*s, policy, kNow).body, inline_answers[member]);
    Result<DiscoverySnapshot> memory = read_snapshot(store, member_principal(member), {});
    ASSERT_TRUE(memory.ok());
    EXPECT_EQ(s->connections, memory->connections);  // the same content, wherever it is kept
  }
}

TEST_F(DiscoveryRedisIntegration, TheEdgeFetchesABodyOnceAndThenMovesMetadataOnly) {
  // Two members on a shared connection and a per-member connection whose two members list the
  // same bytes: three records, two bodies.
  MemoryStore store;
  store.add_connection("docs", "shared");
  store.add_connection("gh", "per_member");
  const std::string docs = manifest_json({"search", "fetch"}, {}, {}, {}, std::string(4000, 'd'));
  const std::string gh = manifest_json({"create_issue"}, {}, {}, {}, std::string(4000, 'g'));
  store.manifests[{"docs", "shared"}] = data_entry("h-docs", kNow - kMinute, kNow + kMinute, docs);
  for (const char* m : {"member/alice", "member/bob"}) {
    store.manifests[{"gh", m}] = data_entry("h-gh", kNow - kMinute, kNow + kMinute, gh);
  }
  for (const char* m : {"alice", "bob"}) {
    store.grant(m, "docs");
    store.grant(m, "gh");
  }
  populate(store);
  store_bodies_apart();
  EXPECT_EQ(cmd({"KEYS", "quiver:{itest}:body:*"}).elements.size(), 2u);

  const std::string secret = "edge-bodies-integration-secret-0123456789";
  std::unique_ptr<EdgeService> edge = edge_for(secret, "itest");
  ASSERT_TRUE(edge->configured());
  cmd({"SCRIPT", "LOAD", std::string(schema_asset("lua/discovery_read.lua"))});
  const std::string alice = *mint_caller_token("alice", secret, "k", kNow, 3'600'000);
  const std::string bob = *mint_caller_token("bob", secret, "k", kNow, 3'600'000);

  EdgeOutcome first = edge_get(*edge, redis_->port(), alice, kNow);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.cache, "miss");
  EXPECT_EQ(first.round_trips, 2);  // the script, then one MGET of both bodies
  EXPECT_NE(first.sent.find("MGET"), std::string::npos);
  EXPECT_NE(first.body.find(std::string(4000, 'd')), std::string::npos);
  EXPECT_NE(first.body.find(std::string(4000, 'g')), std::string::npos);
  EXPECT_EQ(edge->bodies().entries(), 2u);

  // Bob's records name the same two bodies: the script alone, and only metadata comes back.
  EdgeOutcome second = edge_get(*edge, redis_->port(), bob, kNow + 1);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.round_trips, 1);
  EXPECT_EQ(second.sent.find("MGET"), std::string::npos);
  EXPECT_LT(second.received, 2000u);
  EXPECT_GT(first.received, 8000u);
  EXPECT_NE(second.body.find(std::string(4000, 'g')), std::string::npos);

  // The same answer as from the inline layout the edge read before.
  Json a = *parse_json(second.body);
  EXPECT_EQ(a["connections"].size(), 2u);
  for (const Json& c : a["connections"]) EXPECT_EQ(c["status"], "fresh") << c.dump();
}

TEST_F(DiscoveryRedisIntegration, AMissingBodyIsAStoreFailureOfItsEntryAndIsRevalidated) {
  MemoryStore store;
  store.add_connection("docs", "shared");
  store.add_connection("old", "shared");
  store.manifests[{"docs", "shared"}] =
      data_entry("h-docs", kNow - kMinute, kNow + kMinute, manifest_json({"search"}));
  // Past its expires_at: never served, so its body is not needed.
  store.manifests[{"old", "shared"}] =
      data_entry("h-old", kNow - 2 * 86'400'000, kNow - 2 * 86'400'000, manifest_json({"gone"}));
  store.grant("alice", "docs");
  store.grant("alice", "old");
  populate(store);
  store_bodies_apart();
  RespValue bodies = cmd({"KEYS", "quiver:{itest}:body:*"});
  for (const RespValue& k : bodies.elements) cmd({"DEL", k.str});  // evicted, lost

  const std::string secret = "edge-bodies-integration-secret-0123456789";
  std::unique_ptr<EdgeService> edge = edge_for(secret, "itest");
  const std::string alice = *mint_caller_token("alice", secret, "k", kNow, 3'600'000);
  EdgeOutcome out = edge_get(*edge, redis_->port(), alice, kNow);
  ASSERT_EQ(out.status, 200) << out.body;
  Json answer = *parse_json(out.body);
  ASSERT_EQ(answer["connections"].size(), 2u);
  const Json& docs = answer["connections"][0];
  EXPECT_EQ(docs["id"], "docs");
  EXPECT_EQ(docs["status"], "error");
  EXPECT_EQ(docs["error"]["code"], "STORE_UNAVAILABLE") << docs.dump();
  EXPECT_FALSE(docs.contains("manifest"));  // never an empty manifest
  EXPECT_EQ(answer["connections"][1]["status"], "expired");
  // The refresh that writes the body again is queued.
  RespValue entries = cmd({"XRANGE", keys_.revalidate_stream(), "-", "+"});
  std::string flat;
  for (const RespValue& entry : entries.elements) {
    for (const RespValue& f : entry.elements.at(1).elements) flat += f.str + "=";
    flat += "\n";
  }
  EXPECT_NE(flat.find("cid=docs=principal=shared=reason=body_missing="), std::string::npos) << flat;
}

// The edge's side of a connection marked as a whole, against a real Redis: the webhook's one key,
// then each member's read through a real EdgeService shows that member's data stale and queues
// that member's refresh once (its gate), a member whose listing is under way is not queued, and a
// commit listed after the mark reads fresh again.
TEST_F(WebhookRedisIntegration, TheEdgeAppliesAConnectionsMarkToEachMemberItServes) {
  populate(matrix_store());
  cmd({"SADD", *keys_.grantees("pm-github"), "member/alice", "member/carol"});
  const int64_t keys_before = cmd({"DBSIZE"}).integer;
  Result<WebhookRefreshReply> r = webhook("wh:whole", {{"pm-github", std::nullopt, "d"}}, kNow);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->results,
            (std::vector<WebhookRefreshResult>{{"pm-github", std::nullopt, "marked", true}}));
  // marked:pm-github, its connection's version and the replay guard
  EXPECT_EQ(cmd({"DBSIZE"}).integer, keys_before + 3);
  EXPECT_EQ(xlen(), 0);

  const std::string secret = "edge-marked-integration-secret-0123456789";
  std::unique_ptr<EdgeService> edge = edge_for(secret, "itest");
  ASSERT_TRUE(edge->configured());
  auto status_of = [&](const char* member, int64_t now) {
    const std::string token = *mint_caller_token(member, secret, "k", kNow, 3'600'000);
    EdgeOutcome out =
        edge_get(*edge, redis_->port(), token, now, "/v1/mcp-connections/pm-github/manifest");
    EXPECT_EQ(out.status, 200) << out.body;
    Result<Json> answer = parse_json(out.body);
    EXPECT_TRUE(answer.ok()) << out.body;
    if (!answer.ok()) return std::string();
    const Json& entry = answer->contains("connections") ? (*answer)["connections"][0] : *answer;
    return entry.value("status", std::string());
  };
  auto queued_for = [&](const std::string& principal) {
    int n = 0;
    for (const RespValue& e : cmd({"XRANGE", keys_.revalidate_stream(), "-", "+"}).elements) {
      const std::vector<RespValue>& f = e.elements.at(1).elements;
      if (f.at(1).str == "pm-github" && f.at(3).str == principal) ++n;
    }
    return n;
  };
  EXPECT_EQ(status_of("alice", kNow + 1), "stale");
  EXPECT_EQ(queued_for("member/alice"), 1);
  EXPECT_EQ(status_of("alice", kNow + 2), "stale");
  EXPECT_EQ(queued_for("member/alice"), 1);  // its gate: once
  EXPECT_EQ(status_of("carol", kNow + 3), "stale");
  EXPECT_EQ(queued_for("member/carol"), 0);  // her listing under way (a lease) follows
  // alice's refresh commits, listed after the mark: fresh.
  cmd({"HSET", *keys_.manifest("pm-github", member_principal("alice")), "fetched_at",
       std::to_string(kNow + 5), "fresh_until", std::to_string(kNow + 15 * kMinute)});
  // Written by hand: the member's version moved as manifest_commit.lua moves it with a commit
  // (else the edge's conditional read rightly answers from the copy it holds).
  cmd({"INCR", *keys_.member_version(member_principal("alice"))});
  EXPECT_EQ(status_of("alice", kNow + 6), "fresh");
  // carol's, listed before the mark but committed after it: still stale.
  cmd({"HSET", *keys_.manifest("pm-github", member_principal("carol")), "fetched_at",
       std::to_string(kNow - 1), "fresh_until", std::to_string(kNow + 15 * kMinute)});
  cmd({"INCR", *keys_.member_version(member_principal("carol"))});
  EXPECT_EQ(status_of("carol", kNow + 7), "stale");
}

// ---- a commit sends its body only when Redis lacks it (manifest_commit.lua) ---------------------

// The agent's RedisStore committing as the refresh runner does, against the real Redis; what the
// commits sent is read from Redis's own counters (INFO stats total_net_input_bytes, INFO
// commandstats), and what they wrote is read the agent's way and the edge's way.
class CommitBodyIntegration : public DiscoveryRedisIntegration {
 protected:
  // A store with no body cache: every read asks Redis for the bodies.
  std::unique_ptr<RedisStore> agent() {
    RedisStoreOptions o;
    o.redis.host = "127.0.0.1";
    o.redis.port = redis_->port();
    o.ns = "itest";
    o.body_cache_max_bytes = 0;
    o.now_ms = [] { return kNow; };
    Result<std::unique_ptr<RedisStore>> s = RedisStore::create(o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::move(*s) : nullptr;
  }

  // Shared connections `cids`, granted to alice, the namespace synced.
  void seed(RedisStore& s, const std::vector<std::string>& cids) {
    cmd({"DEL", keys_.namespace_record()});  // as a fresh Redis: the store syncs it
    std::vector<ConnectionRecord> records;
    for (const std::string& cid : cids) {
      ConnectionRecord r;
      r.id = cid;
      r.config_hash = "hash-" + cid;
      r.credential_mode = CredentialMode::kShared;
      r.name = "Connection " + cid;
      r.transport = "stdio";
      r.updated_at_ms = kNow;
      records.push_back(r);
    }
    ASSERT_TRUE(s.sync_connections(records).ok());
    ASSERT_TRUE(s.sync_grants({{"alice", std::set<std::string>(cids.begin(), cids.end())}}).ok());
    ASSERT_TRUE(s.begin_namespace_restore(kNow).ok());
    ASSERT_TRUE(*s.mark_namespace_ready(kNow));
  }

  int64_t info_field(const std::string& section, const std::string& line,
                     const std::string& field) {
    const std::string text = cmd({"INFO", section}).str;
    const std::size_t at = text.find(line);
    if (at == std::string::npos) return 0;
    const std::size_t end = text.find('\n', at);
    const std::size_t f = text.find(field, at);
    if (f == std::string::npos || f > end) return 0;
    return std::atoll(text.c_str() + f + field.size());
  }
  // Every script Redis has run (EVALSHA and EVAL, a NOSCRIPT fallback's too).
  int64_t scripts() {
    return info_field("commandstats", "cmdstat_evalsha:", "calls=") +
           info_field("commandstats", "cmdstat_eval:", "calls=");
  }

  struct Sent {
    int64_t bytes = 0;    // received by Redis while the commit ran (and two INFO commands)
    int64_t scripts = 0;  // scripts run for it
  };
  // A listing of `cid` whose body is about `pad` bytes, told apart by `version`.
  static ManifestWrite listing(const std::string& cid, const std::string& version,
                               std::size_t pad) {
    ManifestWrite w;
    w.manifest = manifest_json({"search_" + version}, {}, {}, {}, std::string(pad, 'd'));
    w.etag = "\"etag-" + version + "\"";
    w.config_hash = "hash-" + cid;
    w.fetched_at_ms = kNow - kMinute;
    w.fresh_until_ms = kNow + 14 * kMinute;
    w.expires_at_ms = kNow + 86'400'000;
    w.cache_scope = "public";
    return w;
  }
  // One fenced commit as the refresh runner makes it: the lease, then the commit releasing it.
  Sent commit(RedisStore& s, const std::string& cid, const ManifestWrite& w) {
    Result<AcquireResult> lease =
        s.acquire_lease(cid, Principal::shared(), std::string(32, 'a'), 60'000);
    EXPECT_TRUE(lease.ok() && lease->acquired);
    Sent sent;
    if (!lease.ok() || !lease->acquired) return sent;
    const int64_t bytes = info_field("stats", "total_net_input_bytes:", ":");
    const int64_t ran = scripts();
    Result<FencedWriteResult> r =
        s.commit_manifest(cid, Principal::shared(), lease->lease, w, FencedWriteOptions{true});
    EXPECT_TRUE(r.ok() && r->ok()) << (r.ok() ? lease_outcome_name(r->outcome) : r.error().message);
    sent.scripts = scripts() - ran;
    sent.bytes = info_field("stats", "total_net_input_bytes:", ":") - bytes;
    return sent;
  }
};

TEST_F(CommitBodyIntegration, AnUnchangedListingSendsItsDigestAndABodyGoesOnlyWhenRedisLacksIt) {
  std::unique_ptr<RedisStore> s = agent();
  ASSERT_NE(s, nullptr);
  seed(*s, {"docs", "gh"});
  commit(*s, "gh", listing("gh", "warm-up", 10));  // the scripts loaded: EVALSHA from here on

  const ManifestWrite docs = listing("docs", "v1", 20'000);
  const std::string body_key = *keys_.body(manifest_body_digest(docs.manifest));
  // New content: the digest first, then the bytes.
  const Sent first = commit(*s, "docs", docs);
  EXPECT_EQ(first.scripts, 2);
  EXPECT_GT(first.bytes, 20'000);
  // A refresh that found the same content: the digest alone.
  const Sent unchanged = commit(*s, "docs", docs);
  EXPECT_EQ(unchanged.scripts, 1);
  EXPECT_LT(unchanged.bytes, 2'000) << "vs " << first.bytes;
  // Another principal (here another connection) listing the same bytes: the digest alone too.
  ManifestWrite same_elsewhere = docs;
  same_elsewhere.config_hash = "hash-gh";
  const Sent elsewhere = commit(*s, "gh", same_elsewhere);
  EXPECT_EQ(elsewhere.scripts, 1);
  EXPECT_LT(elsewhere.bytes, 2'000);
  EXPECT_EQ(cmd({"KEYS", "quiver:{itest}:body:*"}).elements.size(), 2u);  // warm-up's, docs'

  // The body key evicted (or deleted) between two commits: the commit still stores it.
  cmd({"DEL", body_key});
  const Sent again = commit(*s, "docs", docs);
  EXPECT_EQ(again.scripts, 2);
  EXPECT_GT(again.bytes, 20'000);
  EXPECT_EQ(cmd({"GET", body_key}).str, docs.manifest);
  EXPECT_GT(cmd({"PTTL", body_key}).integer, 0);

  // The agent's read and the edge's read give the same answer, with the body.
  Result<DiscoverySnapshot> snap = s->read_discovery(member_principal("alice"), {});
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  const std::string from_agent = render_manifests(*snap, FreshnessPolicy{}, kNow).body;
  const std::string secret = "edge-commit-body-integration-secret-0123456789";
  std::unique_ptr<EdgeService> edge = edge_for(secret, "itest");
  ASSERT_TRUE(edge->configured());
  const std::string alice = *mint_caller_token("alice", secret, "k", kNow, 3'600'000);
  EdgeOutcome from_edge = edge_get(*edge, redis_->port(), alice, kNow);
  ASSERT_EQ(from_edge.status, 200) << from_edge.body;
  EXPECT_EQ(from_edge.body, from_agent);
  Json answer = *parse_json(from_edge.body);
  ASSERT_EQ(answer["connections"].size(), 2u);
  for (const Json& c : answer["connections"]) {
    EXPECT_EQ(c["status"], "fresh") << c.dump();
    EXPECT_EQ(c["etag"], docs.etag);
  }
  EXPECT_NE(from_edge.body.find(std::string(20'000, 'd')), std::string::npos);
}

}  // namespace
}  // namespace quiver
