#include "shared/lease.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/schema_assets.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

using R = RespValue;

constexpr char kManifestText[] = R"({"tools":[]})";

// Built by hand from the Redis key layout (the key builder is another concept). `body` is the
// body key of kManifestText, what good_write() commits.
LeaseKeys keys_for(const std::string& ns, const std::string& cid, const std::string& principal) {
  std::string p = "quiver:{" + ns + "}:";
  return LeaseKeys{
      p + "manifest:" + cid + ":" + principal,
      p + "lease:" + cid + ":" + principal,
      p + "fence:" + cid + ":" + principal,
      p + "conn:" + cid,
      p + "epoch",
      p + "body:" + sha256_hex(kManifestText),
      p + "due",
      cid + ":" + principal,
      principal == "shared" ? p + "conn-version:" + cid : p + "member-version:" + principal};
}

const std::string kToken(32, 'a');

Lease lease(int64_t fence) { return Lease{fence, kToken}; }

ManifestWrite good_write() {
  ManifestWrite w;
  w.manifest = kManifestText;
  w.etag = "\"e1\"";
  w.config_hash = "h1";
  w.fetched_at_ms = 1000;
  w.fresh_until_ms = 2000;
  w.expires_at_ms = 3000;
  w.cache_scope = "public";
  return w;
}

RefreshFailure failure() {
  RefreshFailure f;
  f.config_hash = "h1";
  f.error_code = "TIMEOUT";
  f.error_message = "listing deadline of 3500 ms passed";
  f.error_at_ms = 1000;
  f.attempt_at_ms = 900;
  return f;
}

const FencedWriteOptions kOptions{true};

TEST(Lease, EveryScriptIsCompiledIn) {
  for (const char* name : {"lua/lease_acquire.lua", "lua/lease_renew.lua", "lua/lease_release.lua",
                           "lua/manifest_commit.lua", "lua/manifest_fail.lua", "lua/body_store.lua",
                           "lua/manifest_commit_v2.lua", "lua/manifest_fail_v2.lua"}) {
    EXPECT_NE(schema_asset(name).find("redis.call"), std::string_view::npos) << name;
  }
  EXPECT_EQ(schema_asset("lua/manifest_fail_v2.lua").find("'config_hash', ARGV"),
            std::string_view::npos);
  // The failure record must never write config_hash: the script only reads it (from the
  // connection record).
  std::string_view fail = schema_asset("lua/manifest_fail.lua");
  EXPECT_EQ(fail.find("'config_hash', ARGV"), std::string_view::npos);
  EXPECT_NE(schema_asset("lua/manifest_commit.lua").find("'config_hash', ARGV[3]"),
            std::string_view::npos);
}

TEST(Lease, TokensAreHexOfTheHostsRandomBytes) {
  Result<std::string> t =
      make_lease_token(std::string("\x00\x01\xfe\xff", 4) + std::string(12, 'A'));
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t, "0001feff414141414141414141414141");

  Result<std::string> short_token = make_lease_token(std::string(15, 'x'));
  ASSERT_FALSE(short_token.ok());
  EXPECT_EQ(short_token.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(short_token.error().message.find("got 15"), std::string::npos);
  EXPECT_FALSE(make_lease_token(std::string(65, 'x')).ok());
  EXPECT_TRUE(make_lease_token(std::string(64, 'x')).ok());
  EXPECT_EQ(Lease({12, "ab"}).value(), "12:ab");
}

TEST(Lease, AcquireIsOneEvalOverTheLeaseFenceAndManifestKeys) {
  LeaseKeys k = keys_for("team-a", "github", "member/alice");
  Result<RedisCommand> cmd = acquire_lease_command(k, kToken, 60'000);
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  ASSERT_EQ(cmd->size(), 8u);
  EXPECT_EQ((*cmd)[0], "EVAL");
  EXPECT_EQ((*cmd)[1], schema_asset("lua/lease_acquire.lua"));
  EXPECT_EQ((*cmd)[2], "3");
  EXPECT_EQ((*cmd)[3], "quiver:{team-a}:lease:github:member/alice");
  EXPECT_EQ((*cmd)[4], "quiver:{team-a}:fence:github:member/alice");
  EXPECT_EQ((*cmd)[5], "quiver:{team-a}:manifest:github:member/alice");
  EXPECT_EQ((*cmd)[6], kToken);
  EXPECT_EQ((*cmd)[7], "60000");
}

TEST(Lease, CommandsRefuseBadInput) {
  LeaseKeys k = keys_for("default", "c1", "shared");
  auto refused = [](const Result<RedisCommand>& r, const char* part) {
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
  };
  refused(acquire_lease_command(k, "short", 1000), "token");
  refused(acquire_lease_command(k, std::string(32, 'A'), 1000), "token");  // uppercase
  refused(acquire_lease_command(k, kToken, 0), "lease_ms");
  LeaseKeys missing = k;
  missing.fence.clear();
  refused(acquire_lease_command(missing, kToken, 1000), "missing");
  LeaseKeys untagged = k;
  untagged.fence = "quiver:default:fence:c1:shared";
  refused(acquire_lease_command(untagged, kToken, 1000), "hash tag");
  LeaseKeys two_slots = k;
  two_slots.epoch = "quiver:{other}:epoch";
  refused(commit_manifest_command(two_slots, lease(1), good_write(), kOptions), "hash tag");
  // ...but a script that does not touch the foreign key does not care.
  EXPECT_TRUE(record_failure_command(two_slots, lease(1), failure(), kOptions).ok());

  refused(renew_lease_command(k, lease(0), 1000), "fence");
  refused(renew_lease_command(k, lease(1), -5), "lease_ms");
  refused(release_lease_command(k, Lease{1, "xyz"}), "token");

  ManifestWrite w = good_write();
  w.config_hash.clear();
  refused(commit_manifest_command(k, lease(1), w, kOptions), "config_hash");
  w = good_write();
  w.fresh_until_ms = 500;
  refused(commit_manifest_command(k, lease(1), w, kOptions), "fetched_at <= fresh_until");
  w = good_write();
  w.cache_scope = "team";
  refused(commit_manifest_command(k, lease(1), w, kOptions), "cache_scope");
  w = good_write();
  w.etag.clear();
  refused(commit_manifest_command(k, lease(1), w, kOptions), "etag");
  RefreshFailure f = failure();
  f.error_code.clear();
  refused(record_failure_command(k, lease(1), f, kOptions), "error code");
  f = failure();
  f.config_hash.clear();
  refused(record_failure_command(k, lease(1), f, kOptions), "config_hash");
}

// A store without Redis (SQLite) checks its arguments with the validators alone: the same
// refusals as the command builders, no command built.
TEST(Lease, ValidatorsRefuseWhatTheCommandsRefuse) {
  LeaseKeys k = keys_for("default", "c1", "shared");
  auto same = [](const Status& validated, const Result<RedisCommand>& built) {
    ASSERT_EQ(validated.ok(), built.ok());
    if (!built.ok()) {
      EXPECT_EQ(validated.error().message, built.error().message);
    }
  };
  for (const std::string& token : {kToken, std::string("short"), std::string(32, 'A')}) {
    for (int64_t ms : {1000, 0})
      same(validate_acquire(token, ms), acquire_lease_command(k, token, ms));
  }
  for (const Lease& l : {lease(1), lease(0), Lease{1, "xyz"}}) {
    same(validate_renew(l, 1000), renew_lease_command(k, l, 1000));
    same(validate_renew(l, -5), renew_lease_command(k, l, -5));
    same(validate_release(l), release_lease_command(k, l));
  }
  std::vector<ManifestWrite> writes(5, good_write());
  writes[1].config_hash.clear();
  writes[2].fresh_until_ms = 500;
  writes[3].cache_scope = "team";
  writes[4].etag.clear();
  for (const ManifestWrite& w : writes) {
    same(validate_manifest_write(lease(1), w), commit_manifest_command(k, lease(1), w, kOptions));
  }
  std::vector<RefreshFailure> failures(4, failure());
  failures[1].error_code.clear();
  failures[2].config_hash.clear();
  failures[3].error_at_ms = -1;
  for (const RefreshFailure& f : failures) {
    same(validate_refresh_failure(lease(1), f), record_failure_command(k, lease(1), f, kOptions));
  }
}

TEST(Lease, CommitCarriesEveryManifestFieldAndTheFence) {
  LeaseKeys k = keys_for("default", "c1", "shared");
  ManifestWrite w = good_write();
  w.truncated = true;
  w.cache_scope.clear();
  FencedWriteOptions options{false};
  options.due_at_ms = 1800;
  Result<RedisCommand> cmd = commit_manifest_command(k, lease(7), w, options);
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  std::vector<std::string> expected = {"EVAL",
                                       std::string(schema_asset("lua/manifest_commit.lua")),
                                       "8",
                                       k.manifest,
                                       k.lease,
                                       k.fence,
                                       k.connection,
                                       k.epoch,
                                       k.body,
                                       k.due,
                                       k.version,
                                       "7",
                                       kToken,
                                       "h1",
                                       w.manifest,
                                       w.etag,
                                       "1000",
                                       "2000",
                                       "3000",
                                       "",
                                       "1",
                                       "0",
                                       sha256_hex(w.manifest),
                                       std::to_string(kDefaultBodyGraceMs),
                                       "1800",
                                       "c1:shared"};
  EXPECT_EQ(*cmd, expected);
}

// Both fenced writes score the key's own refresh-due index entry in the same script: an entry
// for another key, a due index in another slot or a score Lua cannot hold exactly is refused.
TEST(Lease, FencedWritesScoreTheirOwnDueEntry) {
  auto refused = [](const Result<RedisCommand>& r, const char* part) {
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
  };
  const LeaseKeys good = keys_for("default", "c1", "member/alice");
  ASSERT_TRUE(commit_manifest_command(good, lease(1), good_write(), kOptions).ok());
  ASSERT_TRUE(record_failure_command(good, lease(1), failure(), kOptions).ok());
  LeaseKeys k = good;
  k.due_member = "c1:member/bob";
  refused(commit_manifest_command(k, lease(1), good_write(), kOptions), "due index member");
  refused(record_failure_command(k, lease(1), failure(), kOptions), "due index member");
  k.due_member.clear();
  refused(record_failure_command(k, lease(1), failure(), kOptions), "due index member");
  k = good;
  k.due = "quiver:{other}:due";
  refused(commit_manifest_command(k, lease(1), good_write(), kOptions), "hash tag");
  refused(record_failure_command(k, lease(1), failure(), kOptions), "hash tag");
  FencedWriteOptions late = kOptions;
  late.due_at_ms = int64_t{1} << 53;
  refused(commit_manifest_command(good, lease(1), good_write(), late), "due_at_ms");
  late.due_at_ms = -1;
  refused(record_failure_command(good, lease(1), failure(), late), "due_at_ms");
}

// The body key names the bytes committed: a key for other bytes (or none) is refused before
// anything reaches Redis, so one content name never holds two contents.
TEST(Lease, CommitRefusesABodyKeyThatDoesNotNameTheManifest) {
  auto refused = [](const Result<RedisCommand>& r, const char* part) {
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
  };
  LeaseKeys k = keys_for("default", "c1", "shared");
  ManifestWrite w = good_write();
  w.manifest = R"({"tools":[{"name":"other"}]})";
  refused(commit_manifest_command(k, lease(1), w, kOptions), "SHA-256");
  k.body.clear();
  refused(commit_manifest_command(k, lease(1), good_write(), kOptions), "missing");
  k = keys_for("default", "c1", "shared");
  k.body = "quiver:{other}:body:" + sha256_hex(kManifestText);
  refused(commit_manifest_command(k, lease(1), good_write(), kOptions), "hash tag");
  FencedWriteOptions negative = kOptions;
  negative.body_grace_ms = -1;
  refused(commit_manifest_command(keys_for("default", "c1", "shared"), lease(1), good_write(),
                                  negative),
          "body_grace_ms");
}

TEST(Lease, FailureRecordCutsLongMessagesAtACharacterBoundary) {
  LeaseKeys k = keys_for("default", "c1", "shared");
  RefreshFailure f = failure();
  // 1023 ASCII bytes, then a 3-byte character that would straddle the limit.
  f.error_message = std::string(kMaxErrorMessageBytes - 1, 'x') + "\xe2\x82\xac" + "tail";
  Result<RedisCommand> cmd = record_failure_command(k, lease(3), f, kOptions);
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  ASSERT_EQ(cmd->size(), 19u);
  EXPECT_EQ((*cmd)[2], "6");
  EXPECT_EQ((*cmd)[7], k.due);
  EXPECT_EQ((*cmd)[8], k.version);
  EXPECT_EQ((*cmd)[9], "3");
  EXPECT_EQ((*cmd)[11], "h1");
  EXPECT_EQ((*cmd)[12], "TIMEOUT");
  EXPECT_EQ((*cmd)[13], std::string(kMaxErrorMessageBytes - 1, 'x'));
  EXPECT_EQ((*cmd)[14], "1000");
  EXPECT_EQ((*cmd)[15], "900");
  EXPECT_EQ((*cmd)[16], "1");  // release the lease (no retention argument any more)
  EXPECT_EQ((*cmd)[17], "0");  // due at once (the default score)
  EXPECT_EQ((*cmd)[18], "c1:shared");
  f.error_message = "short";
  EXPECT_EQ((*record_failure_command(k, lease(3), f, kOptions))[13], "short");
}

TEST(Lease, AcquireReplies) {
  Result<AcquireResult> won =
      parse_acquire_reply(R::array({R::bulk_string("acquired"), R::integer_value(4)}), kToken);
  ASSERT_TRUE(won.ok()) << won.error().message;
  EXPECT_TRUE(won->acquired);
  EXPECT_EQ(won->lease.fence, 4);
  EXPECT_EQ(won->lease.token, kToken);
  EXPECT_EQ(won->lease.value(), "4:" + kToken);

  Result<AcquireResult> held = parse_acquire_reply(
      R::array({R::bulk_string("held"), R::integer_value(41'250), R::integer_value(3)}), kToken);
  ASSERT_TRUE(held.ok()) << held.error().message;
  EXPECT_FALSE(held->acquired);
  EXPECT_EQ(held->holder_remaining_ms, 41'250);
  EXPECT_EQ(held->holder_fence, 3);
}

TEST(Lease, MalformedRepliesAreErrorsNotGuesses) {
  struct Case {
    RespValue reply;
    ErrorCode code;
    const char* part;
  };
  std::vector<Case> cases = {
      {R::nil(), ErrorCode::kInvalidReply, "expected an array"},
      {R::integer_value(1), ErrorCode::kInvalidReply, "expected an array"},
      {R::array({}), ErrorCode::kInvalidReply, "expected an array"},
      {R::array({R::integer_value(1)}), ErrorCode::kInvalidReply, "expected an array"},
      {R::array({R::bulk_string("acquired")}), ErrorCode::kInvalidReply, "'acquired'"},
      {R::array({R::bulk_string("acquired"), R::bulk_string("4")}), ErrorCode::kInvalidReply,
       "'acquired'"},
      {R::array({R::bulk_string("acquired"), R::integer_value(0)}), ErrorCode::kInvalidReply,
       "'acquired'"},
      {R::array({R::bulk_string("held"), R::integer_value(5)}), ErrorCode::kInvalidReply, "'held'"},
      {R::array({R::bulk_string("granted"), R::integer_value(5)}), ErrorCode::kInvalidReply,
       "'granted'"},
      {R::error("WRONGTYPE Operation against a key holding the wrong kind of value"),
       ErrorCode::kInternal, "lease_acquire.lua: Redis error: WRONGTYPE"},
  };
  for (const Case& c : cases) {
    Result<AcquireResult> r = parse_acquire_reply(c.reply, kToken);
    ASSERT_FALSE(r.ok()) << c.part;
    EXPECT_EQ(r.error().code, c.code) << c.part;
    EXPECT_NE(r.error().message.find(c.part), std::string::npos) << r.error().message;
  }
}

TEST(Lease, RenewAndReleaseReplies) {
  EXPECT_EQ(*parse_renew_reply(R::array({R::bulk_string("renewed")})), LeaseOutcome::kOk);
  EXPECT_EQ(*parse_renew_reply(R::array({R::bulk_string("lease_lost")})), LeaseOutcome::kLeaseLost);
  EXPECT_EQ(*parse_release_reply(R::array({R::bulk_string("released")})), LeaseOutcome::kOk);
  EXPECT_EQ(*parse_release_reply(R::array({R::bulk_string("lease_lost")})),
            LeaseOutcome::kLeaseLost);
  // The outcome word may come as a status reply (a Lua table {ok = ...}) as well.
  EXPECT_EQ(*parse_renew_reply(R::array({R::simple_string("renewed")})), LeaseOutcome::kOk);
  // A word of another script is not accepted.
  EXPECT_FALSE(parse_release_reply(R::array({R::bulk_string("renewed")})).ok());
  EXPECT_FALSE(parse_renew_reply(R::error("NOSCRIPT")).ok());
}

TEST(Lease, FencedWriteRepliesNameEachRefusal) {
  Result<FencedWriteResult> ok =
      parse_commit_reply(R::array({R::bulk_string("committed"), R::integer_value(12)}));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_TRUE(ok->ok());
  EXPECT_EQ(ok->epoch, 12);
  EXPECT_FALSE(parse_commit_reply(R::array({R::bulk_string("committed")})).ok());
  EXPECT_FALSE(parse_commit_reply(R::array({R::bulk_string("recorded")})).ok());
  EXPECT_TRUE(parse_failure_reply(R::array({R::bulk_string("recorded")}))->ok());

  struct Case {
    RespValue reply;
    LeaseOutcome outcome;
    const char* name;
  };
  for (const Case& c : {
           Case{R::array({R::bulk_string("lease_lost")}), LeaseOutcome::kLeaseLost, "lease_lost"},
           Case{R::array({R::bulk_string("stale_fence"), R::integer_value(9)}),
                LeaseOutcome::kStaleFence, "stale_fence"},
           Case{R::array({R::bulk_string("config_changed")}), LeaseOutcome::kConfigChanged,
                "config_changed"},
           Case{R::array({R::bulk_string("connection_removed")}), LeaseOutcome::kConnectionRemoved,
                "connection_removed"},
       }) {
    for (auto parse : {parse_commit_reply, parse_failure_reply}) {
      Result<FencedWriteResult> r = parse(c.reply);
      ASSERT_TRUE(r.ok()) << c.name << ": " << r.error().message;
      EXPECT_FALSE(r->ok());
      EXPECT_EQ(r->outcome, c.outcome);
      EXPECT_STREQ(lease_outcome_name(r->outcome), c.name);
      Error e = fenced_write_error(*r, lease(8));
      EXPECT_EQ(e.code, ErrorCode::kConflict);
      EXPECT_NE(e.message.find(c.name), std::string::npos) << e.message;
    }
  }
  Result<FencedWriteResult> stale =
      parse_commit_reply(R::array({R::bulk_string("stale_fence"), R::integer_value(9)}));
  EXPECT_EQ(stale->current_fence, 9);
  EXPECT_NE(fenced_write_error(*stale, lease(8)).message.find("fence 9 is newer than ours, 8"),
            std::string::npos);
  EXPECT_FALSE(parse_commit_reply(R::array({R::bulk_string("stale_fence")})).ok());
  EXPECT_STREQ(lease_outcome_name(LeaseOutcome::kOk), "ok");
}

// Key layout v2 (docs/design.md "What crosses slots"): the fenced scripts declare the record's slot
// only (the connection record for `shared` alone), the body is its own step.
TEST(Lease, V2FencedWritesDeclareOneSlot) {
  LeaseKeys shared;
  shared.manifest = "quiver:{t:c:c1}:manifest";
  shared.lease = "quiver:{t:c:c1}:lease";
  shared.fence = "quiver:{t:c:c1}:fence";
  shared.version = "quiver:{t:c:c1}:version";
  shared.connection = "quiver:{t:c:c1}:conn";
  Result<RedisCommand> c = commit_manifest_v2_command(shared, lease(7), good_write(), kOptions);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ((*c)[2], "5");
  EXPECT_EQ((*c)[7], shared.connection);
  EXPECT_EQ(c->back(), sha256_hex(kManifestText)) << "the record names its body";
  LeaseKeys member = shared;
  member.manifest = "quiver:{t:m:u1}:manifest:c1";
  member.lease = "quiver:{t:m:u1}:lease:c1";
  member.fence = "quiver:{t:m:u1}:fence:c1";
  member.version = "quiver:{t:m:u1}:version";
  Result<RedisCommand> crossing =
      commit_manifest_v2_command(member, lease(7), good_write(), kOptions);
  ASSERT_FALSE(crossing.ok()) << "the connection record is another slot";
  member.connection.clear();
  Result<RedisCommand> m = commit_manifest_v2_command(member, lease(7), good_write(), kOptions);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)[2], "4");
  Result<RedisCommand> f = record_failure_v2_command(member, lease(7), failure(), kOptions);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)[2], "4");
  EXPECT_FALSE(commit_manifest_v2_command(member, lease(0), good_write(), kOptions).ok());

  const std::string body = "quiver:{t:b:" + sha256_hex(kManifestText) + "}";
  Result<RedisCommand> digest_only =
      store_body_command(body, good_write(), kOptions, CommitBody::kIfStored);
  ASSERT_TRUE(digest_only.ok()) << digest_only.error().message;
  EXPECT_EQ((*digest_only)[2], "1");
  EXPECT_EQ((*digest_only)[4], "") << "the bytes stay here";
  Result<RedisCommand> bytes = store_body_command(body, good_write(), kOptions, CommitBody::kSend);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)[4], kManifestText);
  EXPECT_FALSE(store_body_command("quiver:{t:b:" + std::string(64, '0') + "}", good_write(),
                                  kOptions, CommitBody::kSend)
                   .ok())
      << "a key naming other content";
  EXPECT_EQ(*parse_store_body_reply(R::array({R::bulk_string("stored")})), true);
  EXPECT_EQ(*parse_store_body_reply(R::array({R::bulk_string("need_body")})), false);
  EXPECT_FALSE(parse_store_body_reply(R::array({R::bulk_string("maybe")})).ok());
}

}  // namespace
}  // namespace quiver
