// The lease and fenced-write scripts (schema/lua/) run by a real redis-server, driven by exactly
// the argv that shared/lease.h builds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shared/lease.h"
#include "shared/sha256.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_fixture.h"

namespace quiver {
namespace {

using quiver::testing::RedisConnection;
using quiver::testing::run_argv;

LeaseKeys keys_for(const std::string& cid, const std::string& principal) {
  std::string p = "quiver:{default}:";
  return LeaseKeys{
      p + "manifest:" + cid + ":" + principal,
      p + "lease:" + cid + ":" + principal,
      p + "fence:" + cid + ":" + principal,
      p + "conn:" + cid,
      p + "epoch",
      "",
      p + "due",
      cid + ":" + principal,
      principal == "shared" ? p + "conn-version:" + cid : p + "member-version:" + principal};
}

std::string token(int n) {
  std::string t = std::to_string(n);
  return std::string(32 - t.size(), '0') + t;  // distinct, valid hex tokens
}

ManifestWrite manifest_v(const std::string& version, const std::string& config_hash) {
  ManifestWrite w;
  w.manifest = R"({"tools":[{"name":"search","version":")" + version + R"("}]})";
  w.etag = "\"etag-" + version + "\"";
  w.config_hash = config_hash;
  w.fetched_at_ms = 1'000;
  w.fresh_until_ms = 901'000;
  w.expires_at_ms = 86'401'000;
  w.cache_scope = "public";
  return w;
}

RefreshFailure failure_under(const std::string& config_hash) {
  RefreshFailure f;
  f.config_hash = config_hash;
  f.error_code = "UPSTREAM_UNAVAILABLE";
  f.error_message = "tools/list failed twice: connection reset";
  f.error_at_ms = 5'000;
  f.attempt_at_ms = 4'000;
  return f;
}

class LeaseScripts : public testing::RedisFixture {
 protected:
  void SetUp() override {
    RedisFixture::SetUp();
    if (HasFatalFailure()) return;
    keys_ = keys_for("github", "member/alice");
    set_config_hash("h1");
  }

  std::string get(const std::vector<std::string>& argv) {
    RespValue r = cmd(argv);
    return r.is_string() ? r.str : "(nil)";
  }
  int64_t integer(const std::vector<std::string>& argv) { return cmd(argv).integer; }
  std::map<std::string, std::string> hash(const std::string& key) {
    std::map<std::string, std::string> out;
    RespValue r = cmd({"HGETALL", key});
    for (size_t i = 0; i + 1 < r.elements.size(); i += 2) {
      out[r.elements[i].str] = r.elements[i + 1].str;
    }
    return out;
  }
  // The body a record names (`body`: its SHA-256, stored apart), or "(nil)".
  std::string body_of(const std::map<std::string, std::string>& record) {
    auto it = record.find("body");
    if (it == record.end()) return "(nil)";
    return get({"GET", "quiver:{default}:body:" + it->second});
  }
  void set_config_hash(const std::string& h) {
    cmd({"HSET", keys_.connection, "config_hash", h, "credential_mode", "per_member"});
  }

  // Runs `command` and parses its reply with `parse`; a failure at either step fails the test
  // and gives `otherwise`.
  template <typename T, typename Parse>
  T run(const Result<RedisCommand>& command, Parse parse, T otherwise, redisContext* c = nullptr) {
    EXPECT_TRUE(command.ok()) << command.error().message;
    if (!command.ok()) return otherwise;
    Result<T> r = parse(run_argv(c ? c : c_.get(), *command));
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : otherwise;
  }
  AcquireResult acquire(const std::string& tok, int64_t lease_ms = kDefaultLeaseMs,
                        redisContext* c = nullptr) {
    return run(
        acquire_lease_command(keys_, tok, lease_ms),
        [&](const RespValue& reply) { return parse_acquire_reply(reply, tok); }, AcquireResult{},
        c);
  }
  // The body key of `w` (RedisKeys::body spells it the same way).
  LeaseKeys with_body(const ManifestWrite& w) const {
    LeaseKeys k = keys_;
    k.body = "quiver:{default}:body:" + sha256_hex(w.manifest);
    return k;
  }
  FencedWriteResult commit(const Lease& lease, const ManifestWrite& w, bool release = true) {
    return run(commit_manifest_command(with_body(w), lease, w, FencedWriteOptions{release}),
               parse_commit_reply, FencedWriteResult{});
  }
  FencedWriteResult fail(const Lease& lease, const RefreshFailure& f, bool release = true) {
    return run(record_failure_command(keys_, lease, f, FencedWriteOptions{release}),
               parse_failure_reply, FencedWriteResult{});
  }
  LeaseOutcome renew(const Lease& lease, int64_t lease_ms) {
    return run(renew_lease_command(keys_, lease, lease_ms), parse_renew_reply,
               LeaseOutcome::kLeaseLost);
  }
  LeaseOutcome release(const Lease& lease) {
    return run(release_lease_command(keys_, lease), parse_release_reply, LeaseOutcome::kLeaseLost);
  }
  void let_lease_expire(const AcquireResult& a) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (get({"GET", keys_.lease}) == a.lease.value() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(integer({"EXISTS", keys_.lease}), 0);
  }

  LeaseKeys keys_;
};

TEST_F(LeaseScripts, AcquireGrantsOneHolderAndTellsOthersHowLongToWait) {
  AcquireResult a = acquire(token(1), 60'000);
  ASSERT_TRUE(a.acquired);
  EXPECT_EQ(a.lease.fence, 1);
  EXPECT_EQ(get({"GET", keys_.lease}), "1:" + token(1));
  int64_t pttl = integer({"PTTL", keys_.lease});
  EXPECT_GT(pttl, 50'000);
  EXPECT_LE(pttl, 60'000);

  AcquireResult b = acquire(token(2), 60'000);
  EXPECT_FALSE(b.acquired);
  EXPECT_GT(b.holder_remaining_ms, 50'000);
  EXPECT_EQ(b.holder_fence, 1);
  // A refused attempt does not move the fence (the holder's fence stays the newest).
  EXPECT_EQ(get({"GET", keys_.fence}), "1");

  // Only the holder can give it back; then the next one gets the next fence.
  EXPECT_EQ(release(Lease{1, token(2)}), LeaseOutcome::kLeaseLost);
  EXPECT_EQ(release(a.lease), LeaseOutcome::kOk);
  EXPECT_EQ(release(a.lease), LeaseOutcome::kLeaseLost);
  AcquireResult c = acquire(token(2));
  ASSERT_TRUE(c.acquired);
  EXPECT_EQ(c.lease.fence, 2);

  // Leases of another principal are independent.
  keys_ = keys_for("github", "member/bob");
  AcquireResult bob = acquire(token(3));
  ASSERT_TRUE(bob.acquired);
  EXPECT_EQ(bob.lease.fence, 1);
}

TEST_F(LeaseScripts, RenewExtendsOnlyTheHoldersLease) {
  AcquireResult a = acquire(token(1), 1'000);
  ASSERT_TRUE(a.acquired);
  EXPECT_EQ(renew(a.lease, 60'000), LeaseOutcome::kOk);
  EXPECT_GT(integer({"PTTL", keys_.lease}), 50'000);
  EXPECT_EQ(renew(Lease{a.lease.fence, token(9)}, 60'000), LeaseOutcome::kLeaseLost);
  EXPECT_EQ(renew(Lease{a.lease.fence + 1, a.lease.token}, 60'000), LeaseOutcome::kLeaseLost);
  EXPECT_EQ(get({"GET", keys_.lease}), a.lease.value());
}

TEST_F(LeaseScripts, CommitWritesTheManifestClearsTheErrorAndBumpsTheEpoch) {
  AcquireResult first = acquire(token(1));
  ASSERT_TRUE(first.acquired);
  EXPECT_TRUE(fail(first.lease, failure_under("h1")).ok());
  EXPECT_EQ(hash(keys_.manifest).count("error_code"), 1u);

  AcquireResult a = acquire(token(2));
  ASSERT_TRUE(a.acquired);
  ManifestWrite w = manifest_v("1", "h1");
  w.truncated = true;
  FencedWriteResult r = commit(a.lease, w, /*release=*/false);
  ASSERT_TRUE(r.ok()) << lease_outcome_name(r.outcome);
  EXPECT_EQ(r.epoch, 1);
  EXPECT_EQ(get({"GET", keys_.epoch}), "1");

  std::map<std::string, std::string> expected = {{"body", sha256_hex(w.manifest)},
                                                 {"etag", w.etag},
                                                 {"config_hash", "h1"},
                                                 {"fence", "2"},
                                                 {"fetched_at", "1000"},
                                                 {"fresh_until", "901000"},
                                                 {"expires_at", "86401000"},
                                                 {"cache_scope", "public"},
                                                 {"truncated", "1"},
                                                 {"attempt_at", "1000"}};
  EXPECT_EQ(hash(keys_.manifest), expected);         // no error_* left
  EXPECT_EQ(integer({"PTTL", keys_.manifest}), -1);  // no TTL (schema/redis-keys.md)
  EXPECT_EQ(body_of(expected), w.manifest);          // the body, stored apart
  // Not released on request: the holder may still renew.
  EXPECT_EQ(get({"GET", keys_.lease}), a.lease.value());

  // A second commit by the same holder without a cache hint drops the old hint, and releases.
  ManifestWrite w2 = manifest_v("2", "h1");
  w2.cache_scope.clear();
  r = commit(a.lease, w2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.epoch, 2);
  EXPECT_EQ(hash(keys_.manifest).count("cache_scope"), 0u);
  EXPECT_EQ(hash(keys_.manifest)["truncated"], "0");
  EXPECT_EQ(integer({"EXISTS", keys_.lease}), 0);
}

TEST_F(LeaseScripts, ALeaseThatExpiresMidListingMakesTheLateCommitFail) {
  AcquireResult a = acquire(token(1), 40);
  ASSERT_TRUE(a.acquired);
  let_lease_expire(a);  // the listing took longer than the lease

  FencedWriteResult r = commit(a.lease, manifest_v("late", "h1"));
  EXPECT_EQ(r.outcome, LeaseOutcome::kLeaseLost);
  EXPECT_EQ(fail(a.lease, failure_under("h1")).outcome, LeaseOutcome::kLeaseLost);
  EXPECT_EQ(integer({"EXISTS", keys_.manifest}), 0);
  EXPECT_EQ(integer({"EXISTS", keys_.epoch}), 0);
  EXPECT_EQ(renew(a.lease, 60'000), LeaseOutcome::kLeaseLost);
}

TEST_F(LeaseScripts, ANewerFenceWinsOverAnOlderHolder) {
  AcquireResult old_holder = acquire(token(1), 40);
  ASSERT_TRUE(old_holder.acquired);
  let_lease_expire(old_holder);
  AcquireResult new_holder = acquire(token(2));
  ASSERT_TRUE(new_holder.acquired);
  EXPECT_EQ(new_holder.lease.fence, 2);

  // The new holder commits first; the old one's late write, success or failure, is refused.
  ASSERT_TRUE(commit(new_holder.lease, manifest_v("new", "h1"), false).ok());
  FencedWriteResult late = commit(old_holder.lease, manifest_v("old", "h1"));
  EXPECT_EQ(late.outcome, LeaseOutcome::kStaleFence);
  EXPECT_EQ(late.current_fence, 2);
  EXPECT_NE(fenced_write_error(late, old_holder.lease).message.find("fence 2 is newer"),
            std::string::npos);
  FencedWriteResult late_failure = fail(old_holder.lease, failure_under("h1"));
  EXPECT_EQ(late_failure.outcome, LeaseOutcome::kStaleFence);
  // The old holder cannot release the new holder's lease either.
  EXPECT_EQ(release(old_holder.lease), LeaseOutcome::kLeaseLost);

  std::map<std::string, std::string> m = hash(keys_.manifest);
  EXPECT_EQ(body_of(m), manifest_v("new", "h1").manifest);
  EXPECT_EQ(m["fence"], "2");
  EXPECT_EQ(m.count("error_code"), 0u);
  EXPECT_EQ(get({"GET", keys_.lease}), new_holder.lease.value());
}

TEST_F(LeaseScripts, AConfigChangeMidListingRefusesTheCommit) {
  AcquireResult a = acquire(token(1));
  ASSERT_TRUE(a.acquired);
  set_config_hash("h2");  // the URL or credentials changed while listing under h1

  EXPECT_EQ(commit(a.lease, manifest_v("1", "h1")).outcome, LeaseOutcome::kConfigChanged);
  // Its failure, seen under the old config, is not recorded against the new one either.
  EXPECT_EQ(fail(a.lease, failure_under("h1")).outcome, LeaseOutcome::kConfigChanged);
  EXPECT_EQ(integer({"EXISTS", keys_.manifest}), 0);
  EXPECT_EQ(integer({"EXISTS", keys_.epoch}), 0);
  // A refusal leaves the lease in place: the holder releases it (or lists again under h2).
  EXPECT_EQ(get({"GET", keys_.lease}), a.lease.value());
  ASSERT_TRUE(commit(a.lease, manifest_v("1", "h2")).ok());
  EXPECT_EQ(hash(keys_.manifest)["config_hash"], "h2");

  // A connection removed mid-listing.
  AcquireResult b = acquire(token(2));
  ASSERT_TRUE(b.acquired);
  cmd({"DEL", keys_.connection});
  FencedWriteResult gone = commit(b.lease, manifest_v("2", "h2"));
  EXPECT_EQ(gone.outcome, LeaseOutcome::kConnectionRemoved);
  EXPECT_EQ(fail(b.lease, failure_under("h2")).outcome, LeaseOutcome::kConnectionRemoved);
  EXPECT_EQ(body_of(hash(keys_.manifest)), manifest_v("1", "h2").manifest);
}

TEST_F(LeaseScripts, AFailedRefreshKeepsTheLastGoodManifestAndItsConfigHash) {
  AcquireResult a = acquire(token(1));
  ASSERT_TRUE(a.acquired);
  ManifestWrite good = manifest_v("good", "h1");
  ASSERT_TRUE(commit(a.lease, good).ok());
  std::map<std::string, std::string> before = hash(keys_.manifest);
  cmd({"PEXPIRE", keys_.manifest, "600000"});  // a TTL an older agent set

  // The credentials are rotated; the refresh under the new config fails.
  set_config_hash("h2");
  AcquireResult b = acquire(token(2));
  ASSERT_TRUE(b.acquired);
  FencedWriteResult r = fail(b.lease, failure_under("h2"));
  ASSERT_TRUE(r.ok()) << lease_outcome_name(r.outcome);

  std::map<std::string, std::string> after = hash(keys_.manifest);
  EXPECT_EQ(body_of(after), good.manifest);
  EXPECT_EQ(after["etag"], good.etag);
  EXPECT_EQ(after["config_hash"], "h1");  // not restamped: readers see a config mismatch
  EXPECT_EQ(after["fence"], "1");
  EXPECT_EQ(after["fetched_at"], before["fetched_at"]);
  EXPECT_EQ(after["error_code"], "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ(after["error_message"], "tools/list failed twice: connection reset");
  EXPECT_EQ(after["error_at"], "5000");
  EXPECT_EQ(after["attempt_at"], "4000");
  EXPECT_EQ(integer({"PTTL", keys_.manifest}), -1);  // the old TTL is dropped: kept for good
  EXPECT_EQ(get({"GET", keys_.epoch}), "1");         // only commits bump the epoch
  EXPECT_EQ(integer({"EXISTS", keys_.lease}), 0);    // released
}

TEST_F(LeaseScripts, AFailureWithoutAManifestRecordsAnErrorRowWithoutConfigHash) {
  AcquireResult a = acquire(token(1));
  ASSERT_TRUE(a.acquired);
  ASSERT_TRUE(fail(a.lease, failure_under("h1"), /*release=*/false).ok());
  std::map<std::string, std::string> row = hash(keys_.manifest);
  EXPECT_EQ(row, (std::map<std::string, std::string>{
                     {"error_code", "UPSTREAM_UNAVAILABLE"},
                     {"error_message", "tools/list failed twice: connection reset"},
                     {"error_at", "5000"},
                     {"attempt_at", "4000"}}));
  // No TTL: the error record stays until the connection goes (readers show it, not `pending`).
  EXPECT_EQ(integer({"PTTL", keys_.manifest}), -1);
  EXPECT_EQ(get({"GET", keys_.lease}), a.lease.value());

  // The next successful listing replaces the error row with a manifest.
  ASSERT_TRUE(commit(a.lease, manifest_v("1", "h1")).ok());
  EXPECT_EQ(hash(keys_.manifest).count("error_code"), 0u);
  EXPECT_EQ(hash(keys_.manifest)["config_hash"], "h1");
}

TEST_F(LeaseScripts, FencesStayAheadOfTheCommittedManifestIfTheCounterIsLost) {
  AcquireResult a = acquire(token(1));
  ASSERT_TRUE(a.acquired);
  cmd({"SET", keys_.fence, "5"});
  a.lease.fence = 5;
  cmd({"SET", keys_.lease, a.lease.value(), "PX", "60000"});
  ASSERT_TRUE(commit(a.lease, manifest_v("1", "h1")).ok());
  cmd({"DEL", keys_.fence});  // evicted or flushed

  AcquireResult b = acquire(token(2));
  ASSERT_TRUE(b.acquired);
  EXPECT_EQ(b.lease.fence, 6);
  EXPECT_EQ(get({"GET", keys_.fence}), "6");
  EXPECT_TRUE(commit(b.lease, manifest_v("2", "h1")).ok());
}

// ---- manifest bodies, stored once per content (schema/redis-keys.md, "Manifest bodies")
// ----------

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(LeaseScripts, ABodyIsStoredOnceForEveryRecordThatListsTheSameBytes) {
  const ManifestWrite same = manifest_v("1", "h1");
  ASSERT_TRUE(commit(acquire(token(1)).lease, same).ok());
  const LeaseKeys alice = keys_;
  keys_ = keys_for("github", "member/bob");  // another principal, identical content
  ASSERT_TRUE(commit(acquire(token(2)).lease, same).ok());
  EXPECT_EQ(hash(alice.manifest)["body"], hash(keys_.manifest)["body"]);
  EXPECT_EQ(cmd({"KEYS", "quiver:{default}:body:*"}).elements.size(), 1u);
  EXPECT_EQ(body_of(hash(keys_.manifest)), same.manifest);

  // New content for bob: a second body; alice's record still names, and reads, the first.
  ASSERT_TRUE(commit(acquire(token(3)).lease, manifest_v("2", "h1")).ok());
  EXPECT_EQ(cmd({"KEYS", "quiver:{default}:body:*"}).elements.size(), 2u);
  EXPECT_EQ(body_of(hash(alice.manifest)), same.manifest);
  EXPECT_EQ(body_of(hash(keys_.manifest)), manifest_v("2", "h1").manifest);
}

TEST_F(LeaseScripts, ABodyIsKeptWhileARecordNamingItIsServableAndThenExpires) {
  const int64_t now = wall_ms();
  auto commit_expiring = [&](int n, int64_t expires_at, int64_t grace) {
    ManifestWrite w = manifest_v("gc", "h1");
    w.fetched_at_ms = std::min(now, expires_at) - 1000;
    w.fresh_until_ms = w.fetched_at_ms;
    w.expires_at_ms = expires_at;
    FencedWriteOptions options;
    options.body_grace_ms = grace;
    AcquireResult a = acquire(token(n));
    EXPECT_TRUE(a.acquired);
    return run(commit_manifest_command(with_body(w), a.lease, w, options), parse_commit_reply,
               FencedWriteResult{});
  };
  const std::string body_key = with_body(manifest_v("gc", "h1")).body;
  const int64_t hour = 3'600'000;
  ASSERT_TRUE(commit_expiring(1, now + 2 * hour, kDefaultBodyGraceMs).ok());
  EXPECT_EQ(integer({"PEXPIRETIME", body_key}), now + 2 * hour + kDefaultBodyGraceMs);
  // A commit of the same content that expires sooner never shortens it; a later one moves it.
  ASSERT_TRUE(commit_expiring(2, now + hour, kDefaultBodyGraceMs).ok());
  EXPECT_EQ(integer({"PEXPIRETIME", body_key}), now + 2 * hour + kDefaultBodyGraceMs);
  ASSERT_TRUE(commit_expiring(3, now + 3 * hour, kDefaultBodyGraceMs).ok());
  EXPECT_EQ(integer({"PEXPIRETIME", body_key}), now + 3 * hour + kDefaultBodyGraceMs);

  // An agent clock far behind (expires_at long past by Redis's clock): kept from Redis's now.
  ASSERT_TRUE(commit(acquire(token(4)).lease, manifest_v("old-clock", "h1")).ok());
  const std::string lagging = with_body(manifest_v("old-clock", "h1")).body;
  EXPECT_GE(integer({"PEXPIRETIME", lagging}), now + kDefaultBodyGraceMs);

  // Nothing names a body any more and its time passes: it leaves Redis, the record stays (past
  // its expires_at: shown expired, never served, so nothing needs the body).
  cmd({"DEL", body_key});
  ASSERT_TRUE(commit_expiring(5, now - 2 * hour, 50).ok());
  EXPECT_EQ(integer({"EXISTS", body_key}), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(integer({"EXISTS", body_key}), 0);
  EXPECT_EQ(hash(keys_.manifest)["body"], sha256_hex(manifest_v("gc", "h1").manifest));
}

TEST_F(LeaseScripts, ACommitMovesAnInlineBodyOutAndRepairsABodyKeyHoldingOtherBytes) {
  // A record as agents wrote it before bodies were stored apart.
  cmd({"HSET", keys_.manifest, "manifest", R"({"tools":[]})", "etag", "sha256-old", "config_hash",
       "h1", "fence", "1", "fetched_at", "1000", "fresh_until", "2000", "expires_at", "3000"});
  const ManifestWrite w = manifest_v("1", "h1");
  const std::string body_key = with_body(w).body;
  cmd({"SET", body_key, "not the bytes its name says"});
  ASSERT_TRUE(commit(acquire(token(1)).lease, w).ok());
  std::map<std::string, std::string> record = hash(keys_.manifest);
  EXPECT_EQ(record.count("manifest"), 0u);
  EXPECT_EQ(record["body"], sha256_hex(w.manifest));
  EXPECT_EQ(get({"GET", body_key}), w.manifest);
  EXPECT_GT(integer({"PTTL", body_key}), 0);
}

// A commit naming its body by the SHA-256 alone (CommitBody::kIfStored): it goes through when the
// body key exists, moving the body's expiry as a commit with the bytes does; when the key is absent
// it asks for the body and writes nothing (the lease stays held for the commit with the bytes); a
// refusal of the fenced checks comes first and stays what it was.
TEST_F(LeaseScripts, ACommitNamingItsBodyAloneGoesThroughOnlyWhenTheBodyIsStored) {
  auto commit_if_stored = [&](const Lease& lease, const ManifestWrite& w) {
    return run(commit_manifest_command(with_body(w), lease, w, FencedWriteOptions{true},
                                       CommitBody::kIfStored),
               parse_commit_if_stored_reply, std::optional<FencedWriteResult>());
  };
  // Times by the wall clock, so the body's expiry is expires_at + grace (not Redis's now + grace).
  ManifestWrite w = manifest_v("1", "h1");
  w.fetched_at_ms = wall_ms() - 1000;
  w.fresh_until_ms = w.fetched_at_ms;
  w.expires_at_ms = w.fetched_at_ms + 7'200'000;
  const std::string body_key = with_body(w).body;
  Result<RedisCommand> digest_only = commit_manifest_command(
      with_body(w), Lease{1, token(1)}, w, FencedWriteOptions{true}, CommitBody::kIfStored);
  ASSERT_TRUE(digest_only.ok());
  for (const std::string& arg : *digest_only) EXPECT_EQ(arg.find(w.manifest), std::string::npos);

  // The body key absent: "need_body", and nothing written.
  AcquireResult a = acquire(token(1));
  ASSERT_TRUE(a.acquired);
  EXPECT_FALSE(commit_if_stored(a.lease, w).has_value());
  EXPECT_EQ(integer({"EXISTS", keys_.manifest, keys_.epoch, keys_.version, body_key}), 0);
  EXPECT_EQ(integer({"ZCARD", keys_.due}), 0);
  EXPECT_EQ(get({"GET", keys_.lease}), a.lease.value());  // still held: the bytes follow
  // The same commit with the bytes.
  FencedWriteResult first = commit(a.lease, w);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(get({"GET", body_key}), w.manifest);
  const int64_t kept = integer({"PEXPIRETIME", body_key});

  // Stored: the digest alone commits, the record as a commit with the bytes writes it, the body's
  // expiry moved later by a later expires_at.
  ManifestWrite later = w;
  later.fetched_at_ms += 60'000;
  later.fresh_until_ms += 60'000;
  later.expires_at_ms += 60'000;
  std::optional<FencedWriteResult> second = commit_if_stored(acquire(token(2)).lease, later);
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(second->ok());
  EXPECT_EQ(second->epoch, first.epoch + 1);
  std::map<std::string, std::string> record = hash(keys_.manifest);
  EXPECT_EQ(record["body"], sha256_hex(w.manifest));
  EXPECT_EQ(record["fetched_at"], std::to_string(later.fetched_at_ms));
  EXPECT_EQ(record["fence"], "2");
  EXPECT_EQ(body_of(record), w.manifest);
  EXPECT_EQ(integer({"PEXPIRETIME", body_key}), kept + 60'000);
  EXPECT_EQ(integer({"EXISTS", keys_.lease}), 0);  // released in the same script

  // The fenced checks answer before the body is looked at: new content (its key absent) under a
  // lease nobody holds is lease_lost, under a changed config config_changed, never need_body.
  const ManifestWrite other = manifest_v("2", "h1");
  std::optional<FencedWriteResult> lost = commit_if_stored(Lease{2, token(2)}, other);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->outcome, LeaseOutcome::kLeaseLost);
  AcquireResult b = acquire(token(3));
  set_config_hash("h2");
  std::optional<FencedWriteResult> changed = commit_if_stored(b.lease, other);
  ASSERT_TRUE(changed.has_value());
  EXPECT_EQ(changed->outcome, LeaseOutcome::kConfigChanged);
  EXPECT_EQ(integer({"EXISTS", with_body(other).body}), 0);
  EXPECT_EQ(hash(keys_.manifest)["fence"], "2");
}

TEST_F(LeaseScripts, RedisErrorsSurfaceAsErrors) {
  cmd({"HSET", keys_.lease, "not", "a string"});
  Result<RedisCommand> command = acquire_lease_command(keys_, token(1), 1000);
  ASSERT_TRUE(command.ok());
  Result<AcquireResult> r = parse_acquire_reply(cmd(*command), token(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  EXPECT_NE(r.error().message.find("WRONGTYPE"), std::string::npos) << r.error().message;
}

TEST_F(LeaseScripts, ThreadsRacingToAcquireProduceExactlyOneHolder) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 5; ++round) {
    cmd({"DEL", keys_.lease});
    std::vector<RedisConnection> conns;
    for (int i = 0; i < kThreads; ++i) {
      conns.emplace_back(redis_->connect());
      ASSERT_NE(conns.back(), nullptr);
    }
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<Result<AcquireResult>> results(kThreads, Error(ErrorCode::kUnknown, "not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        std::string tok = token(round * 100 + i);
        Result<RedisCommand> command = acquire_lease_command(keys_, tok, 60'000);
        ++ready;
        while (!go.load()) std::this_thread::yield();
        if (command.ok()) results[i] = parse_acquire_reply(run_argv(conns[i].get(), *command), tok);
      });
    }
    while (ready.load() < kThreads) std::this_thread::yield();
    go = true;
    for (std::thread& t : threads) t.join();

    int winners = 0;
    int64_t winning_fence = 0;
    for (const Result<AcquireResult>& r : results) {
      ASSERT_TRUE(r.ok()) << r.error().message;
      if (r->acquired) {
        ++winners;
        winning_fence = r->lease.fence;
      }
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(winning_fence, round + 1);  // the losers did not move the counter
    for (const Result<AcquireResult>& r : results) {
      if (!r->acquired) {
        EXPECT_EQ(r->holder_fence, winning_fence);
      }
    }
  }
}

}  // namespace
}  // namespace quiver
