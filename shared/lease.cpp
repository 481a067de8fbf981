#include "shared/lease.h"

#include <initializer_list>
#include <utility>

#include "shared/enum_names.h"
#include "shared/schema_assets.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

// Redis Cluster's hash tag: the text between the first '{' and the next '}', if not empty.
std::string_view hash_tag(std::string_view key) {
  std::size_t open = key.find('{');
  if (open == std::string_view::npos) return {};
  std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return {};
  return key.substr(open + 1, close - open - 1);
}

// Every key non-empty and all in one slot: a script touching two slots fails with CROSSSLOT on
// a cluster, which is better caught here, on every deployment.
Status check_keys(const std::vector<const std::string*>& keys) {
  std::string_view tag;
  for (const std::string* key : keys) {
    if (key->empty()) return invalid("lease script: a Redis key is missing");
    std::string_view t = hash_tag(*key);
    if (t.empty()) return invalid("lease script: key '" + *key + "' has no {hash tag}");
    if (tag.empty()) tag = t;
    if (t != tag) return invalid("lease script: keys '" + *key + "' span more than one hash tag");
  }
  return Status::Ok();
}

bool valid_token(std::string_view token) {
  if (token.size() < 2 * kMinLeaseTokenBytes || token.size() > 2 * kMaxLeaseTokenBytes) {
    return false;
  }
  for (char c : token) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status check_lease(const Lease& lease) {
  if (lease.fence <= 0) return invalid("lease: fence must be positive");
  if (!valid_token(lease.token)) return invalid("lease: token must be 32 to 128 lowercase hex");
  return Status::Ok();
}

// The refresh-due index entry a fenced write scores: a member (`<cid>:<principal>`, the key's
// own: the manifest key ends with it) and a time Lua keeps exact (at most 2^53 - 1).
Status check_due(const LeaseKeys& keys, const FencedWriteOptions& options) {
  const std::string& m = keys.due_member;
  if (m.empty() || m.find(':') == std::string::npos || keys.manifest.size() <= m.size() ||
      keys.manifest.compare(keys.manifest.size() - m.size() - 1, std::string::npos, ":" + m) != 0) {
    return invalid(
        "fenced write: the due index member is not the manifest key's <cid>:<principal>");
  }
  return validate_due_at(options.due_at_ms);
}

Result<RedisCommand> eval(const char* script, const std::vector<const std::string*>& keys,
                          std::initializer_list<std::string> args) {
  std::string_view text = schema_asset(std::string("lua/") + script);
  if (text.empty()) {
    return Error(ErrorCode::kInternal, std::string("schema/lua/") + script + " is not compiled in");
  }
  // Built as EVAL; the Redis conversation (shared/redis_conversation.h) sends it as EVALSHA and
  // falls back to this text only when Redis answers NOSCRIPT.
  RedisCommand argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back("EVAL");
  argv.emplace_back(text);
  argv.push_back(std::to_string(keys.size()));
  for (const std::string* key : keys) argv.push_back(*key);
  for (const std::string& arg : args) argv.push_back(arg);
  return argv;
}

// The reply of every script is an array whose first element names the outcome.
Result<const std::vector<RespValue>*> outcome_array(const RespValue& reply, const char* script) {
  if (reply.is_error()) {
    return Error(ErrorCode::kInternal, std::string(script) + ": Redis error: " + reply.str);
  }
  if (!reply.is_array() || reply.elements.empty() || !reply.elements[0].is_string()) {
    return Error(ErrorCode::kInvalidReply,
                 std::string(script) + ": expected an array starting with an outcome name");
  }
  return &reply.elements;
}

bool integer_at(const std::vector<RespValue>& e, std::size_t i, int64_t* out) {
  if (i >= e.size() || !e[i].is_integer()) return false;
  *out = e[i].integer;
  return true;
}

Error unexpected(const char* script, const std::string& word) {
  return Error(ErrorCode::kInvalidReply, std::string(script) + ": unexpected reply '" + word + "'");
}

Result<LeaseOutcome> parse_compare_reply(const RespValue& reply, const char* script,
                                         const char* success) {
  Result<const std::vector<RespValue>*> e = outcome_array(reply, script);
  if (!e.ok()) return e.error();
  const std::string& word = (**e)[0].str;
  if (word == success) return LeaseOutcome::kOk;
  if (word == "lease_lost") return LeaseOutcome::kLeaseLost;
  return unexpected(script, word);
}

Result<FencedWriteResult> parse_fenced_reply(const RespValue& reply, const char* script,
                                             const char* success) {
  Result<const std::vector<RespValue>*> parsed = outcome_array(reply, script);
  if (!parsed.ok()) return parsed.error();
  const std::vector<RespValue>& e = **parsed;
  const std::string& word = e[0].str;
  FencedWriteResult r;
  if (word == success) {
    r.outcome = LeaseOutcome::kOk;
    if (e.size() > 1 && !integer_at(e, 1, &r.epoch)) return unexpected(script, word);
  } else if (word == "lease_lost") {
    r.outcome = LeaseOutcome::kLeaseLost;
  } else if (word == "stale_fence") {
    r.outcome = LeaseOutcome::kStaleFence;
    if (!integer_at(e, 1, &r.current_fence)) return unexpected(script, word);
  } else if (word == "config_changed") {
    r.outcome = LeaseOutcome::kConfigChanged;
  } else if (word == "connection_removed") {
    r.outcome = LeaseOutcome::kConnectionRemoved;
  } else {
    return unexpected(script, word);
  }
  return r;
}

Status check_fenced_write(const Lease& lease, const std::string& config_hash) {
  if (Status s = check_lease(lease); !s.ok()) return s;
  if (config_hash.empty()) return invalid("fenced write: config_hash is empty");
  return Status::Ok();
}

}  // namespace

std::string Lease::value() const { return std::to_string(fence) + ":" + token; }

Result<std::string> make_lease_token(std::string_view random_bytes) {
  if (random_bytes.size() < kMinLeaseTokenBytes || random_bytes.size() > kMaxLeaseTokenBytes) {
    return invalid("lease token: need 16 to 64 random bytes, got " +
                   std::to_string(random_bytes.size()));
  }
  return hex_encode(reinterpret_cast<const uint8_t*>(random_bytes.data()), random_bytes.size());
}

const char* lease_outcome_name(LeaseOutcome outcome) {
  static constexpr const char* const kNames[] = {"ok", "lease_lost", "stale_fence",
                                                 "config_changed", "connection_removed"};
  static_assert(covers_enum(kNames, LeaseOutcome::kConnectionRemoved));
  return name_of(kNames, outcome, "lease_lost");
}

Status validate_acquire(std::string_view token, int64_t lease_ms) {
  if (!valid_token(token)) return invalid("lease: token must be 32 to 128 lowercase hex");
  if (lease_ms <= 0) return invalid("lease: lease_ms must be positive");
  return Status::Ok();
}

Status validate_renew(const Lease& lease, int64_t lease_ms) {
  if (Status s = check_lease(lease); !s.ok()) return s;
  if (lease_ms <= 0) return invalid("lease: lease_ms must be positive");
  return Status::Ok();
}

Status validate_release(const Lease& lease) { return check_lease(lease); }

Status validate_due_at(int64_t due_at_ms) {
  if (due_at_ms < 0 || due_at_ms > (int64_t{1} << 53) - 1) {
    return invalid("fenced write: due_at_ms must be 0 to 2^53 - 1");
  }
  return Status::Ok();
}

Status validate_manifest_write(const Lease& lease, const ManifestWrite& write) {
  if (Status s = check_fenced_write(lease, write.config_hash); !s.ok()) return s;
  if (write.manifest.empty()) return invalid("manifest commit: the manifest is empty");
  if (write.etag.empty()) return invalid("manifest commit: the etag is empty");
  if (write.fetched_at_ms < 0 || write.fresh_until_ms < write.fetched_at_ms ||
      write.expires_at_ms < write.fresh_until_ms) {
    return invalid("manifest commit: need 0 <= fetched_at <= fresh_until <= expires_at");
  }
  if (!write.cache_scope.empty() && write.cache_scope != "public" &&
      write.cache_scope != "private") {
    return invalid("manifest commit: cache_scope must be public, private or empty");
  }
  return Status::Ok();
}

Status validate_refresh_failure(const Lease& lease, const RefreshFailure& failure) {
  if (Status s = check_fenced_write(lease, failure.config_hash); !s.ok()) return s;
  if (failure.error_code.empty()) return invalid("failure record: the error code is empty");
  if (failure.error_at_ms < 0 || failure.attempt_at_ms < 0) {
    return invalid("failure record: times must not be negative");
  }
  return Status::Ok();
}

Result<RedisCommand> acquire_lease_command(const LeaseKeys& keys, std::string_view token,
                                           int64_t lease_ms) {
  if (Status s = check_keys({&keys.lease, &keys.fence, &keys.manifest}); !s.ok()) {
    return s.error();
  }
  if (Status s = validate_acquire(token, lease_ms); !s.ok()) return s.error();
  return eval("lease_acquire.lua", {&keys.lease, &keys.fence, &keys.manifest},
              {std::string(token), std::to_string(lease_ms)});
}

Result<AcquireResult> parse_acquire_reply(const RespValue& reply, std::string_view token) {
  const char* script = "lease_acquire.lua";
  Result<const std::vector<RespValue>*> parsed = outcome_array(reply, script);
  if (!parsed.ok()) return parsed.error();
  const std::vector<RespValue>& e = **parsed;
  const std::string& word = e[0].str;
  AcquireResult r;
  if (word == "acquired") {
    if (!integer_at(e, 1, &r.lease.fence) || r.lease.fence <= 0) return unexpected(script, word);
    r.acquired = true;
    r.lease.token = std::string(token);
  } else if (word == "held") {
    if (!integer_at(e, 1, &r.holder_remaining_ms) || !integer_at(e, 2, &r.holder_fence)) {
      return unexpected(script, word);
    }
  } else {
    return unexpected(script, word);
  }
  return r;
}

Result<RedisCommand> renew_lease_command(const LeaseKeys& keys, const Lease& lease,
                                         int64_t lease_ms) {
  if (Status s = check_keys({&keys.lease}); !s.ok()) return s.error();
  if (Status s = validate_renew(lease, lease_ms); !s.ok()) return s.error();
  return eval("lease_renew.lua", {&keys.lease}, {lease.value(), std::to_string(lease_ms)});
}

Result<LeaseOutcome> parse_renew_reply(const RespValue& reply) {
  return parse_compare_reply(reply, "lease_renew.lua", "renewed");
}

Result<RedisCommand> release_lease_command(const LeaseKeys& keys, const Lease& lease) {
  if (Status s = check_keys({&keys.lease}); !s.ok()) return s.error();
  if (Status s = validate_release(lease); !s.ok()) return s.error();
  return eval("lease_release.lua", {&keys.lease}, {lease.value()});
}

Result<LeaseOutcome> parse_release_reply(const RespValue& reply) {
  return parse_compare_reply(reply, "lease_release.lua", "released");
}

Result<RedisCommand> commit_manifest_command(const LeaseKeys& keys, const Lease& lease,
                                             const ManifestWrite& write,
                                             const FencedWriteOptions& options, CommitBody body) {
  if (Status s = check_keys({&keys.manifest, &keys.lease, &keys.fence, &keys.connection,
                             &keys.epoch, &keys.body, &keys.due, &keys.version});
      !s.ok()) {
    return s.error();
  }
  if (Status s = validate_manifest_write(lease, write); !s.ok()) return s.error();
  if (options.body_grace_ms < 0) return invalid("manifest commit: body_grace_ms is negative");
  if (Status s = check_due(keys, options); !s.ok()) return s.error();
  // The body key names the body's content: a key for other bytes would serve them to every record
  // with that content.
  const std::string digest = sha256_hex(write.manifest);
  if (keys.body.size() <= digest.size() ||
      keys.body.compare(keys.body.size() - digest.size() - 1, std::string::npos, ":" + digest) !=
          0) {
    return invalid("manifest commit: the body key does not name the manifest's SHA-256");
  }
  return eval("manifest_commit.lua",
              {&keys.manifest, &keys.lease, &keys.fence, &keys.connection, &keys.epoch, &keys.body,
               &keys.due, &keys.version},
              {std::to_string(lease.fence), lease.token, write.config_hash,
               body == CommitBody::kSend ? write.manifest : std::string(), write.etag,
               std::to_string(write.fetched_at_ms), std::to_string(write.fresh_until_ms),
               std::to_string(write.expires_at_ms), write.cache_scope, write.truncated ? "1" : "0",
               options.release_lease ? "1" : "0", digest, std::to_string(options.body_grace_ms),
               std::to_string(options.due_at_ms), keys.due_member});
}

Result<RedisCommand> record_failure_command(const LeaseKeys& keys, const Lease& lease,
                                            const RefreshFailure& failure,
                                            const FencedWriteOptions& options) {
  if (Status s = check_keys(
          {&keys.manifest, &keys.lease, &keys.fence, &keys.connection, &keys.due, &keys.version});
      !s.ok()) {
    return s.error();
  }
  if (Status s = validate_refresh_failure(lease, failure); !s.ok()) return s.error();
  if (Status s = check_due(keys, options); !s.ok()) return s.error();
  return eval(
      "manifest_fail.lua",
      {&keys.manifest, &keys.lease, &keys.fence, &keys.connection, &keys.due, &keys.version},
      {std::to_string(lease.fence), lease.token, failure.config_hash, failure.error_code,
       cut_utf8(failure.error_message, kMaxErrorMessageBytes), std::to_string(failure.error_at_ms),
       std::to_string(failure.attempt_at_ms), options.release_lease ? "1" : "0",
       std::to_string(options.due_at_ms), keys.due_member});
}

namespace {

// The keys a v2 fenced script declares: the record's own, and the connection record for `shared`
// (empty for a member: another slot).
std::vector<const std::string*> v2_script_keys(const LeaseKeys& keys) {
  std::vector<const std::string*> out = {&keys.manifest, &keys.lease, &keys.fence, &keys.version};
  if (!keys.connection.empty()) out.push_back(&keys.connection);
  return out;
}

}  // namespace

Result<RedisCommand> store_body_command(const std::string& body_key, const ManifestWrite& write,
                                        const FencedWriteOptions& options, CommitBody body) {
  if (Status s = check_keys({&body_key}); !s.ok()) return s.error();
  if (write.manifest.empty()) return invalid("manifest commit: the manifest is empty");
  if (options.body_grace_ms < 0) return invalid("manifest commit: body_grace_ms is negative");
  const std::string digest = sha256_hex(write.manifest);
  if (body_key.find(digest) == std::string::npos) {
    return invalid("manifest commit: the body key does not name the manifest's SHA-256");
  }
  return eval("body_store.lua", {&body_key},
              {body == CommitBody::kSend ? write.manifest : std::string(), digest,
               std::to_string(write.expires_at_ms), std::to_string(options.body_grace_ms)});
}

Result<bool> parse_store_body_reply(const RespValue& reply) {
  const char* script = "body_store.lua";
  Result<const std::vector<RespValue>*> e = outcome_array(reply, script);
  if (!e.ok()) return e.error();
  const std::string& word = (**e)[0].str;
  if (word == "stored") return true;
  if (word == "need_body") return false;
  return unexpected(script, word);
}

Result<RedisCommand> commit_manifest_v2_command(const LeaseKeys& keys, const Lease& lease,
                                                const ManifestWrite& write,
                                                const FencedWriteOptions& options) {
  const std::vector<const std::string*> named = v2_script_keys(keys);
  if (Status s = check_keys(named); !s.ok()) return s.error();
  if (Status s = validate_manifest_write(lease, write); !s.ok()) return s.error();
  if (Status s = validate_due_at(options.due_at_ms); !s.ok()) return s.error();
  return eval("manifest_commit_v2.lua", named,
              {std::to_string(lease.fence), lease.token, write.config_hash, write.etag,
               std::to_string(write.fetched_at_ms), std::to_string(write.fresh_until_ms),
               std::to_string(write.expires_at_ms), write.cache_scope, write.truncated ? "1" : "0",
               options.release_lease ? "1" : "0", sha256_hex(write.manifest)});
}

Result<RedisCommand> record_failure_v2_command(const LeaseKeys& keys, const Lease& lease,
                                               const RefreshFailure& failure,
                                               const FencedWriteOptions& options) {
  const std::vector<const std::string*> named = v2_script_keys(keys);
  if (Status s = check_keys(named); !s.ok()) return s.error();
  if (Status s = validate_refresh_failure(lease, failure); !s.ok()) return s.error();
  if (Status s = validate_due_at(options.due_at_ms); !s.ok()) return s.error();
  return eval(
      "manifest_fail_v2.lua", named,
      {std::to_string(lease.fence), lease.token, failure.config_hash, failure.error_code,
       cut_utf8(failure.error_message, kMaxErrorMessageBytes), std::to_string(failure.error_at_ms),
       std::to_string(failure.attempt_at_ms), options.release_lease ? "1" : "0"});
}

Result<FencedWriteResult> parse_commit_reply(const RespValue& reply) {
  Result<FencedWriteResult> r = parse_fenced_reply(reply, "manifest_commit.lua", "committed");
  if (r.ok() && r->ok() && r->epoch <= 0) {
    return Error(ErrorCode::kInvalidReply, "manifest_commit.lua: committed without an epoch");
  }
  return r;
}

Result<std::optional<FencedWriteResult>> parse_commit_if_stored_reply(const RespValue& reply) {
  if (reply.is_array() && reply.elements.size() == 1 && reply.elements[0].is_string() &&
      reply.elements[0].str == "need_body") {
    return std::optional<FencedWriteResult>();
  }
  Result<FencedWriteResult> r = parse_commit_reply(reply);
  if (!r.ok()) return r.error();
  return std::optional<FencedWriteResult>(*r);
}

Result<FencedWriteResult> parse_failure_reply(const RespValue& reply) {
  return parse_fenced_reply(reply, "manifest_fail.lua", "recorded");
}

Error fenced_write_error(const FencedWriteResult& result, const Lease& lease) {
  std::string message = "fenced write refused: ";
  message += lease_outcome_name(result.outcome);
  switch (result.outcome) {
    case LeaseOutcome::kOk:
      return Error(ErrorCode::kInternal, "fenced write succeeded");
    case LeaseOutcome::kLeaseLost:
      message += " (the lease of fence " + std::to_string(lease.fence) + " expired)";
      break;
    case LeaseOutcome::kStaleFence:
      if (result.current_fence > lease.fence) {
        message += " (fence " + std::to_string(result.current_fence) + " is newer than ours, " +
                   std::to_string(lease.fence) + ")";
      } else {  // the counter was reset under a live lease
        message += " (the fence counter is at " + std::to_string(result.current_fence) +
                   ", ours is " + std::to_string(lease.fence) + ")";
      }
      break;
    case LeaseOutcome::kConfigChanged:
      message += " (the connection's config changed during the listing)";
      break;
    case LeaseOutcome::kConnectionRemoved:
      message += " (the connection was removed during the listing)";
      break;
  }
  return Error(ErrorCode::kConflict, message);
}

}  // namespace quiver
