#include "shared/discovery_redis.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "shared/layout.h"
#include "shared/numbers.h"
#include "shared/schema_assets.h"
#include "shared/sha256.h"

namespace quiver {

Result<RedisCommand> schema_script_command(const char* script, std::vector<std::string> keys,
                                           std::vector<std::string> args, bool read_only) {
  std::string_view text = schema_asset(std::string("lua/") + script);
  if (text.empty()) {
    return Error(ErrorCode::kInternal, std::string("schema/lua/") + script + " is not compiled in");
  }
  // EVAL, the form every host can send; a host that keeps a connection's script cache warm sends
  // scripts by SHA-1 and falls back to this on NOSCRIPT (shared/redis_conversation.h).
  RedisCommand argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back(read_only ? "EVAL_RO" : "EVAL");
  argv.emplace_back(text);
  argv.push_back(std::to_string(keys.size()));
  for (std::string& k : keys) argv.push_back(std::move(k));
  for (std::string& a : args) argv.push_back(std::move(a));
  return argv;
}

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

Error bad_reply(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kInvalidReply, "discovery reply: " + where + ": " + what);
}

const std::vector<RespValue>* array_of(const RespValue& v, std::size_t size) {
  const std::vector<RespValue>* a = v.as_array();
  if (a == nullptr || (size != 0 && a->size() != size)) return nullptr;
  return a;
}

// A flat HGETALL array into fields: an even number of strings, each field once.
Result<HashFields> hash_fields(const RespValue& v, const std::string& where) {
  const std::vector<RespValue>* a = v.as_array();
  if (a == nullptr) return bad_reply(where, "expected an array, got " + v.debug_string());
  if (a->size() % 2 != 0) return bad_reply(where, "odd number of elements");
  HashFields fields;
  for (std::size_t i = 0; i < a->size(); i += 2) {
    std::optional<std::string_view> name = (*a)[i].as_string();
    std::optional<std::string_view> value = (*a)[i + 1].as_string();
    if (!name || !value) return bad_reply(where, "element " + std::to_string(i) + " is no string");
    if (!fields.emplace(std::string(*name), std::string(*value)).second) {
      return bad_reply(where, "field '" + std::string(*name) + "' repeats");
    }
  }
  return fields;
}

bool short_token(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || c == '_')) return false;
  }
  return true;
}

}  // namespace

Result<GrantedConnection> decode_discovery_entry(const RespValue& v, std::size_t index,
                                                 const Principal& member) {
  std::string where = "entry " + std::to_string(index);
  const std::vector<RespValue>* e = array_of(v, 7);
  if (e == nullptr) return bad_reply(where, "expected an array of 7, got " + v.debug_string());
  std::optional<std::string_view> cid = (*e)[0].as_string();
  if (!cid || !validate_connection_id(*cid).ok()) return bad_reply(where, "invalid connection id");
  GrantedConnection conn;
  conn.id = std::string(*cid);
  where += " ('" + conn.id + "')";

  Result<HashFields> conn_fields = hash_fields((*e)[1], where + ": connection record");
  if (!conn_fields.ok()) return conn_fields.error();
  conn.record = connection_record_for_discovery(conn.id, *conn_fields);

  std::optional<std::string_view> used = (*e)[2].as_string();
  if (!used) return bad_reply(where, "principal is no string");
  if (conn.record) {
    Result<Principal> expected = applicable_principal(*conn.record, member);
    if (expected.ok()) {
      if (*used != expected->str()) {
        return bad_reply(where, "read under principal '" + std::string(*used) + "' where '" +
                                    expected->str() + "' applies");
      }
      conn.principal = *expected;
    } else if (!used->empty()) {
      return bad_reply(where, "read under a principal although the credential mode is unknown");
    }
  } else if (!used->empty()) {
    return bad_reply(where, "read under a principal although the connection is removed");
  }

  Result<HashFields> manifest = hash_fields((*e)[3], where + ": manifest");
  if (!manifest.ok()) return manifest.error();
  if (!conn.principal && !manifest->empty()) {
    return bad_reply(where, "a manifest without a principal");
  }
  // The webhook's mark (invalidated:<cid>:<principal>) belongs with the data it marks.
  if (std::optional<std::string_view> mark = (*e)[6].as_string()) {
    if (!conn.principal) return bad_reply(where, "an invalidation mark without a principal");
    if (!manifest->empty()) (*manifest)[redis_field::kInvalidatedAt] = std::string(*mark);
  } else if (!(*e)[6].is_nil()) {
    return bad_reply(where, "invalidation mark is neither a string nor nil");
  }
  conn.manifest = manifest_entry_from_fields(*manifest);

  const std::vector<RespValue>* disabled = (*e)[4].as_array();
  if (disabled == nullptr) return bad_reply(where, "disabled set is no array");
  for (const RespValue& d : *disabled) {
    std::optional<std::string_view> member_text = d.as_string();
    if (!member_text) return bad_reply(where, "disabled member is no string");
    conn.disabled.emplace(*member_text);
  }
  // The overlay is the principal's own (disabled:<cid>:<principal>): without a principal there
  // is none to read, and a set there would be someone else's.
  if (!conn.principal && !conn.disabled.empty()) {
    return bad_reply(where, "a disabled set without a principal");
  }
  if ((*e)[5].type != RespValue::Type::kInteger || ((*e)[5].integer != 0 && (*e)[5].integer != 1)) {
    return bad_reply(where, "lease flag is not 0 or 1");
  }
  conn.lease_held = (*e)[5].integer == 1;
  if (conn.lease_held && !conn.principal) {
    return bad_reply(where, "a lease without a principal");
  }
  return conn;
}

namespace {

Result<std::vector<std::string>> discovery_read_argv(const RedisKeys& keys, const Principal& member,
                                                     const SnapshotQuery& query,
                                                     std::string* grants_key) {
  if (member.is_shared()) return invalid("discovery read: the caller must be a member principal");
  if (query.only && !validate_connection_id(*query.only).ok()) {
    return invalid("discovery read: `only` is not a connection id");
  }
  if (query.limit == 0 || query.limit > kMaxSnapshotLimit) {
    return invalid("discovery read: limit must be between 1 and " +
                   std::to_string(kMaxSnapshotLimit));
  }
  if (query.after.size() > kMaxIdLength) return invalid("discovery read: `after` is too long");
  Result<std::string> grants = keys.grants(member);
  if (!grants.ok()) return grants.error();
  *grants_key = std::move(*grants);
  return std::vector<std::string>{keys.prefix(), member.str(), query.only.value_or(""), query.after,
                                  std::to_string(query.limit)};
}

}  // namespace

Result<RedisCommand> discovery_read_command(const RedisKeys& keys, const Principal& member,
                                            const SnapshotQuery& query) {
  std::string grants;
  Result<std::vector<std::string>> argv = discovery_read_argv(keys, member, query, &grants);
  if (!argv.ok()) return argv.error();
  return schema_script_command("discovery_read.lua", {std::move(grants)}, std::move(*argv),
                               /*read_only=*/true);
}

Result<RedisCommand> conditional_discovery_read_command(
    const RedisKeys& keys, const DiscoverySnapshot& held, const SnapshotQuery& query,
    const std::vector<std::size_t>& lease_entries) {
  std::string grants;
  Result<std::vector<std::string>> argv = discovery_read_argv(keys, held.member, query, &grants);
  if (!argv.ok()) return argv.error();
  if (held.namespace_record.empty() || held.connection_versions.size() != held.connections.size()) {
    return invalid("conditional discovery read: the snapshot holds no versions of a full read");
  }
  std::vector<std::string>& a = *argv;
  a.reserve(a.size() + 4 + 2 * held.connections.size() + 2 * lease_entries.size());
  a.emplace_back("if-unchanged");
  a.push_back(held.namespace_record);
  a.push_back(held.member_version);
  a.push_back(std::to_string(held.connections.size()));
  for (std::size_t i = 0; i < held.connections.size(); ++i) {
    a.push_back(held.connections[i].id);
    a.push_back(held.connection_versions[i]);
  }
  for (std::size_t i : lease_entries) {
    if (i >= held.connections.size() || !held.connections[i].principal) {
      return invalid("conditional discovery read: a lease entry out of range or without principal");
    }
    a.push_back(held.connections[i].id);
    a.push_back(held.connections[i].principal->str());
  }
  return schema_script_command("discovery_read.lua", {std::move(grants)}, std::move(a),
                               /*read_only=*/true);
}

std::optional<Error> namespace_not_ready(const RespValue& reply, std::string_view what) {
  const std::vector<RespValue>* a = array_of(reply, 2);
  if (a == nullptr ||
      (*a)[0].as_string() != std::optional<std::string_view>(kNamespaceNotReadyTag)) {
    return std::nullopt;
  }
  std::optional<std::string_view> state = (*a)[1].as_string();
  if (!state) {
    return Error(ErrorCode::kInvalidReply,
                 std::string(what) + " reply: the namespace state is no string");
  }
  return Error(ErrorCode::kStoreNotReady,
               std::string(what) + ": the namespace is not initialised in the store (record " +
                   std::string(*state) + "): its data was lost or is being restored by an agent");
}

Result<DiscoverySnapshot> decode_discovery_reply(const RespValue& reply, const Principal& member) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "discovery read: Redis error: " + reply.str);
  }
  if (std::optional<Error> layout = layout_unknown_reply(reply, "discovery read")) return *layout;
  if (std::optional<Error> not_ready = namespace_not_ready(reply, "discovery read")) {
    return *not_ready;
  }
  const std::vector<RespValue>* top = array_of(reply, 8);
  if (top == nullptr) {
    return bad_reply("top level", "expected an array of 8, got " + reply.debug_string());
  }
  const std::vector<RespValue>& t = *top;
  if (t[0].as_string() != std::optional<std::string_view>(kDiscoveryReplyTag)) {
    return bad_reply("top level", "not a " + std::string(kDiscoveryReplyTag) + " reply");
  }
  if (t[1].as_string() != std::optional<std::string_view>(member.str())) {
    return bad_reply("top level", "the reply is for another caller");
  }
  for (int i : {2, 3, 5}) {
    if (t[i].type != RespValue::Type::kInteger || t[i].integer < 0) {
      return bad_reply("top level", "element " + std::to_string(i) + " is not a count");
    }
  }
  std::optional<std::string_view> next_after = t[4].as_string();
  if (!next_after) return bad_reply("top level", "next_after is no string");
  const std::vector<RespValue>* entries = t[6].as_array();
  if (entries == nullptr) return bad_reply("top level", "entries are no array");

  DiscoverySnapshot snapshot(member);
  snapshot.epoch = t[2].integer;
  snapshot.granted_total = t[3].integer;
  snapshot.ignored_grants = t[5].integer;
  if (!next_after->empty()) {
    if (!validate_connection_id(*next_after).ok()) {
      return bad_reply("top level", "next_after is not a connection id");
    }
    snapshot.next_after = std::string(*next_after);
  }
  if (static_cast<int64_t>(entries->size()) > snapshot.granted_total) {
    return bad_reply("top level", "more entries than granted connections");
  }
  for (std::size_t i = 0; i < entries->size(); ++i) {
    Result<GrantedConnection> conn = decode_discovery_entry((*entries)[i], i, member);
    if (!conn.ok()) return conn.error();
    if (!snapshot.connections.empty() && !(snapshot.connections.back().id < conn->id)) {
      return bad_reply("entry " + std::to_string(i), "ids are not strictly ascending");
    }
    snapshot.connections.push_back(std::move(*conn));
  }
  if (snapshot.next_after &&
      (snapshot.connections.empty() || snapshot.connections.back().id != *snapshot.next_after)) {
    return bad_reply("top level", "next_after is not the last entry");
  }
  // {namespace record, member version, one connection version per entry}
  const std::vector<RespValue>* versions = t[7].as_array();
  if (versions == nullptr || versions->size() != 2 + snapshot.connections.size()) {
    return bad_reply("versions", "expected the record, the member's and one per entry");
  }
  for (std::size_t i = 0; i < versions->size(); ++i) {
    std::optional<std::string_view> v = (*versions)[i].as_string();
    if (!v) return bad_reply("versions", "element " + std::to_string(i) + " is no string");
    if (i == 0) {
      if (v->substr(0, sizeof(kNamespaceReady)) != std::string(kNamespaceReady) + ":") {
        return bad_reply("versions", "the namespace record read is not `ready`");
      }
      snapshot.namespace_record = std::string(*v);
    } else if (i == 1) {
      snapshot.member_version = std::string(*v);
    } else {
      snapshot.connection_versions.emplace_back(*v);
    }
  }
  return snapshot;
}

Result<std::optional<DiscoverySnapshot>> decode_conditional_reply(
    const RespValue& reply, DiscoverySnapshot& held,
    const std::vector<std::size_t>& lease_entries) {
  const std::vector<RespValue>* a = array_of(reply, 4);
  if (a == nullptr ||
      (*a)[0].as_string() != std::optional<std::string_view>(kDiscoveryUnchangedTag)) {
    Result<DiscoverySnapshot> full = decode_discovery_reply(reply, held.member);
    if (!full.ok()) return full.error();
    return std::optional<DiscoverySnapshot>(std::move(*full));
  }
  if ((*a)[1].as_string() != std::optional<std::string_view>(held.member.str())) {
    return bad_reply("unchanged", "the reply is for another caller");
  }
  if ((*a)[2].type != RespValue::Type::kInteger || (*a)[2].integer < 0) {
    return bad_reply("unchanged", "the epoch is not a count");
  }
  const std::vector<RespValue>* leases = (*a)[3].as_array();
  if (leases == nullptr || leases->size() != lease_entries.size()) {
    return bad_reply("unchanged", "not one lease flag per entry asked");
  }
  for (std::size_t i = 0; i < lease_entries.size(); ++i) {
    const RespValue& flag = (*leases)[i];
    if (flag.type != RespValue::Type::kInteger || (flag.integer != 0 && flag.integer != 1)) {
      return bad_reply("unchanged", "lease flag is not 0 or 1");
    }
    if (lease_entries[i] >= held.connections.size()) {
      return bad_reply("unchanged", "a lease entry out of range");
    }
  }
  for (std::size_t i = 0; i < lease_entries.size(); ++i) {
    held.connections[lease_entries[i]].lease_held = (*leases)[i].integer == 1;
  }
  held.epoch = (*a)[2].integer;
  return std::optional<DiscoverySnapshot>();
}

std::string manifest_body_digest(std::string_view body) { return sha256_hex(body); }

std::vector<std::string> missing_bodies(const DiscoverySnapshot& snapshot) {
  std::vector<std::string> out;
  std::set<std::string_view> seen;
  for (const GrantedConnection& c : snapshot.connections) {
    if (!c.manifest || !c.manifest->body_missing()) continue;
    if (seen.insert(c.manifest->body_digest).second) out.push_back(c.manifest->body_digest);
  }
  return out;
}

std::size_t fill_body(DiscoverySnapshot& snapshot, std::string_view digest, std::string_view body) {
  std::size_t filled = 0;
  for (GrantedConnection& c : snapshot.connections) {
    if (c.manifest && c.manifest->body_missing() && c.manifest->body_digest == digest) {
      c.manifest->text = std::string(body);
      ++filled;
    }
  }
  return filled;
}

Result<RedisCommand> body_read_command(const RedisKeys& keys,
                                       const std::vector<std::string>& digests) {
  if (digests.empty() || digests.size() > kMaxSnapshotLimit) {
    return invalid("body read: between 1 and " + std::to_string(kMaxSnapshotLimit) + " bodies");
  }
  RedisCommand argv;
  argv.reserve(1 + digests.size());
  argv.emplace_back("MGET");
  for (const std::string& d : digests) {
    Result<std::string> key = keys.body(d);
    if (!key.ok()) return key.error();
    argv.push_back(std::move(*key));
  }
  return argv;
}

Result<std::vector<std::optional<std::string>>> decode_body_reply(
    const RespValue& reply, const std::vector<std::string>& digests) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "body read: Redis error: " + reply.str);
  }
  const std::vector<RespValue>* a = array_of(reply, digests.size());
  if (a == nullptr || digests.empty()) {
    return Error(ErrorCode::kInvalidReply,
                 "body read: expected an array of " + std::to_string(digests.size()));
  }
  std::vector<std::optional<std::string>> out(digests.size());
  for (std::size_t i = 0; i < digests.size(); ++i) {
    if ((*a)[i].is_nil()) continue;
    std::optional<std::string_view> body = (*a)[i].as_string();
    if (!body) {
      return Error(ErrorCode::kInvalidReply,
                   "body read: element " + std::to_string(i) + " is neither a string nor nil");
    }
    // Content-named and cached without expiry: bytes that are not what the name says would be
    // served to every record naming it, so they count as absent (a refresh writes them anew).
    if (!body->empty() && manifest_body_digest(*body) == digests[i]) out[i] = std::string(*body);
  }
  return out;
}

Result<RedisCommand> revalidate_enqueue_command(const RedisKeys& keys, const Revalidation& r,
                                                int64_t now_ms, const EnqueueOptions& options) {
  if (options.window_ms <= 0 || options.stream_maxlen <= 0 || options.manual_requeue_after_ms < 0) {
    return invalid("revalidation: window_ms and stream_maxlen must be positive");
  }
  if (!short_token(r.reason)) return invalid("revalidation: reason must match [a-z_]{1,32}");
  Result<std::string> gate = keys.revalidate_gate(r.connection_id, r.principal);
  if (!gate.ok()) return gate.error();
  const std::string at = std::to_string(now_ms);
  return schema_script_command(
      "revalidate_enqueue.lua", {*gate, keys.revalidate_stream()},
      {std::to_string(options.window_ms), std::to_string(options.stream_maxlen), at,
       r.manual ? std::to_string(options.manual_requeue_after_ms) : "-1", redis_field::kCid,
       r.connection_id, redis_field::kPrincipal, r.principal.str(), redis_field::kReason, r.reason,
       redis_field::kAt, at});
}

Result<RevalidationResult> parse_enqueue_reply(const RespValue& reply) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "revalidation: Redis error: " + reply.str);
  }
  const std::vector<RespValue>* a = reply.as_array();
  std::optional<std::string_view> word;
  if (a != nullptr && !a->empty()) word = (*a)[0].as_string();
  if (!word) {
    return Error(ErrorCode::kInvalidReply,
                 "revalidation: expected an outcome array, got " + reply.debug_string());
  }
  RevalidationResult r;
  if (*word == "queued" && a->size() == 2 && (*a)[1].as_string()) {
    r.outcome = RevalidationOutcome::kQueued;
    r.stream_id = std::string(*(*a)[1].as_string());
    return r;
  }
  if (*word == "already_queued" && a->size() == 1) {
    r.outcome = RevalidationOutcome::kAlreadyQueued;
    return r;
  }
  if (*word == "in_progress" && a->size() == 1) {
    r.outcome = RevalidationOutcome::kInProgress;
    return r;
  }
  return Error(ErrorCode::kInvalidReply, "revalidation: unexpected reply " + reply.debug_string());
}

Result<std::vector<RedisCommand>> revalidate_enqueue_commands(
    const RedisKeys& keys, const std::vector<Revalidation>& revalidations, int64_t now_ms,
    const EnqueueOptions& options) {
  std::vector<RedisCommand> commands;
  commands.reserve(revalidations.size());
  for (const Revalidation& r : revalidations) {
    Result<RedisCommand> command = revalidate_enqueue_command(keys, r, now_ms, options);
    if (!command.ok()) return command.error();
    commands.push_back(std::move(*command));
  }
  return commands;
}

Result<Pipeline> revalidate_enqueue_pipeline(const RedisKeys& keys,
                                             const std::vector<Revalidation>& revalidations,
                                             int64_t now_ms, const EnqueueOptions& options) {
  Result<std::vector<RedisCommand>> commands =
      revalidate_enqueue_commands(keys, revalidations, now_ms, options);
  if (!commands.ok()) return commands.error();
  Pipeline p;
  for (const RedisCommand& command : *commands) p.add(command);
  return p;
}

Result<RedisCommand> revalidate_gate_command(const RedisKeys& keys, const Revalidation& r,
                                             int64_t now_ms, const EnqueueOptions& options,
                                             bool declare_lease) {
  if (options.window_ms <= 0 || options.stream_maxlen <= 0 || options.manual_requeue_after_ms < 0) {
    return invalid("revalidation: window_ms and stream_maxlen must be positive");
  }
  if (!short_token(r.reason)) return invalid("revalidation: reason must match [a-z_]{1,32}");
  Result<std::string> gate = keys.revalidate_gate(r.connection_id, r.principal);
  if (!gate.ok()) return gate.error();
  std::vector<std::string> declared{std::move(*gate)};
  if (declare_lease) {
    Result<std::string> lease = keys.lease(r.connection_id, r.principal);
    if (!lease.ok()) return lease.error();
    declared.push_back(std::move(*lease));
  }
  return schema_script_command("revalidate_gate.lua", std::move(declared),
                               {std::to_string(options.window_ms), std::to_string(now_ms),
                                r.manual ? std::to_string(options.manual_requeue_after_ms) : "-1"});
}

Result<RevalidationGate> parse_gate_reply(const RespValue& reply) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "revalidation gate: Redis error: " + reply.str);
  }
  const std::vector<RespValue>* a = reply.as_array();
  std::optional<std::string_view> word;
  if (a != nullptr && a->size() == 1) word = (*a)[0].as_string();
  if (word == std::optional<std::string_view>("won")) return RevalidationGate::kWon;
  if (word == std::optional<std::string_view>("already_queued")) {
    return RevalidationGate::kAlreadyQueued;
  }
  if (word == std::optional<std::string_view>("in_progress")) return RevalidationGate::kInProgress;
  return Error(ErrorCode::kInvalidReply,
               "revalidation gate: unexpected reply " + reply.debug_string());
}

Result<RedisCommand> revalidate_xadd_command(const RedisKeys& keys, const Revalidation& r,
                                             int64_t at_ms, int64_t maxlen) {
  if (maxlen <= 0) return invalid("revalidation: stream_maxlen must be positive");
  if (!short_token(r.reason)) return invalid("revalidation: reason must match [a-z_]{1,32}");
  Result<uint32_t> shard = keys.connection_shard(r.connection_id);
  if (!shard.ok()) return shard.error();
  Result<std::string> stream = keys.revalidate_stream(*shard);
  if (!stream.ok()) return stream.error();
  return RedisCommand{"XADD",
                      std::move(*stream),
                      "MAXLEN",
                      "~",
                      std::to_string(maxlen),
                      "*",
                      redis_field::kCid,
                      r.connection_id,
                      redis_field::kPrincipal,
                      r.principal.str(),
                      redis_field::kReason,
                      r.reason,
                      redis_field::kAt,
                      std::to_string(at_ms)};
}

Result<RevalidationResult> parse_xadd_reply(const RespValue& reply) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "revalidation: Redis error: " + reply.str);
  }
  std::optional<std::string_view> id = reply.as_string();
  if (!id || id->empty()) {
    return Error(ErrorCode::kInvalidReply,
                 "revalidation: expected the XADD's entry id, got " + reply.debug_string());
  }
  RevalidationResult r;
  r.outcome = RevalidationOutcome::kQueued;
  r.stream_id = std::string(*id);
  return r;
}

Result<RedisCommand> webhook_refresh_command(const RedisKeys& keys, const WebhookVerified& verified,
                                             const WebhookRefreshRequest& request, int64_t now_ms,
                                             const EnqueueOptions& options) {
  if (options.window_ms <= 0 || options.stream_maxlen <= 0 || options.manual_requeue_after_ms < 0) {
    return invalid("webhook: window_ms and stream_maxlen must be positive");
  }
  if (request.targets.empty()) return invalid("webhook: no target");
  if (verified.replay_key.empty()) return invalid("webhook: no replay key");
  const std::string at = std::to_string(now_ms);
  std::vector<std::string> args = {keys.prefix(),
                                   std::to_string(std::max<int64_t>(1, verified.retain_for_ms)),
                                   at,
                                   std::to_string(options.window_ms),
                                   std::to_string(options.stream_maxlen),
                                   std::to_string(options.manual_requeue_after_ms),
                                   kWebhookRefreshReason};
  for (const WebhookRefreshTarget& t : request.targets) {
    if (Status s = validate_connection_id(t.connection_id); !s.ok()) return s.error();
    args.push_back(t.connection_id);
    args.push_back(t.principal ? t.principal->str() : std::string());
  }
  return schema_script_command(
      "webhook_refresh.lua",
      {keys.replay(verified.replay_key), keys.revalidate_stream(), keys.epoch()}, std::move(args));
}

std::optional<std::string> effective_invalidation(std::optional<std::string_view> own,
                                                  std::optional<std::string_view> connection) {
  if (!own) return connection ? std::optional<std::string>(*connection) : std::nullopt;
  if (!connection) return std::string(*own);
  std::optional<int64_t> a = parse_decimal_i64(*own);
  std::optional<int64_t> b = parse_decimal_i64(*connection);
  if (b && (!a || *b > *a)) return std::string(*connection);
  return std::string(*own);
}

Result<WebhookRefreshReply> parse_webhook_refresh_reply(const RespValue& reply) {
  if (reply.is_error())
    return Error(ErrorCode::kStoreUnavailable, "webhook: Redis error: " + reply.str);
  auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidReply, "webhook reply: " + what);
  };
  if (std::optional<Error> layout = layout_unknown_reply(reply, "webhook")) return *layout;
  if (std::optional<Error> not_ready = namespace_not_ready(reply, "webhook")) return *not_ready;
  const std::vector<RespValue>* a = reply.as_array();
  std::optional<std::string_view> word;
  if (a != nullptr && !a->empty()) word = (*a)[0].as_string();
  if (!word) return bad("expected an outcome array, got " + reply.debug_string());
  WebhookRefreshReply out;
  if (*word == "replay" && a->size() == 1) {
    out.replay = true;
    return out;
  }
  const std::vector<RespValue>* flat = a->size() == 2 ? (*a)[1].as_array() : nullptr;
  if (*word != "accepted" || flat == nullptr || flat->size() % 4 != 0) {
    return bad("unexpected reply " + reply.debug_string());
  }
  static const std::set<std::string_view> kStatuses = {"queued",
                                                       "already_queued",
                                                       "in_progress",
                                                       "unknown_connection",
                                                       "unknown_principal",
                                                       kWebhookConnectionMarked};
  for (std::size_t i = 0; i < flat->size(); i += 4) {
    std::optional<std::string_view> cid = (*flat)[i].as_string();
    std::optional<std::string_view> principal = (*flat)[i + 1].as_string();
    std::optional<std::string_view> status = (*flat)[i + 2].as_string();
    std::optional<std::string_view> marked = (*flat)[i + 3].as_string();
    const std::string where = "result " + std::to_string(i / 4);
    if (!cid || !principal || !status || !marked) return bad(where + " is not four strings");
    if (kStatuses.count(*status) == 0) return bad(where + ": unknown status");
    // No principal exactly for an unknown connection and a connection marked as a whole.
    if (principal->empty() !=
        (*status == "unknown_connection" || *status == kWebhookConnectionMarked)) {
      return bad(where + ": status " + std::string(*status) + " with principal '" +
                 std::string(*principal) + "'");
    }
    if (*marked != "0" && *marked != "1") return bad(where + ": marked is not 0 or 1");
    WebhookRefreshResult r;
    r.connection_id = std::string(*cid);
    if (!principal->empty()) {
      Result<Principal> p = Principal::parse(*principal);
      if (!p.ok()) return bad(where + ": " + p.error().message);
      r.principal = std::move(*p);
    }
    r.status = std::string(*status);
    r.marked_stale = *marked == "1";
    out.results.push_back(std::move(r));
  }
  return out;
}

std::vector<Result<RevalidationResult>> parse_enqueue_replies(
    const std::vector<RespValue>& replies) {
  std::vector<Result<RevalidationResult>> out;
  out.reserve(replies.size());
  for (const RespValue& r : replies) out.push_back(parse_enqueue_reply(r));
  return out;
}

Result<RedisCommand> oauth_callback_command(const RedisKeys& keys,
                                            const oauth::CallbackParams& callback, int64_t now_ms,
                                            int64_t stream_maxlen) {
  if (callback.state.empty()) return invalid("oauth callback: no state");
  if (stream_maxlen <= 0) return invalid("oauth callback: stream_maxlen must be positive");
  namespace f = redis_field;
  return schema_script_command(
      "oauth_callback.lua", {keys.oauth_callbacks()},
      {keys.oauth_result(callback.state), std::to_string(stream_maxlen), f::kState, callback.state,
       f::kCode, callback.code.value_or(""), f::kIss, callback.iss.value_or(""), f::kError,
       callback.error.value_or(""), f::kErrorDescription, callback.error_description.value_or(""),
       f::kAt, std::to_string(now_ms)});
}

Result<std::optional<std::string>> parse_oauth_callback_reply(const RespValue& reply) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "oauth callback: Redis error: " + reply.str);
  }
  const std::vector<RespValue>* a = reply.as_array();
  std::optional<std::string_view> word;
  std::optional<std::string_view> value;
  if (a != nullptr && a->size() == 2) {
    word = (*a)[0].as_string();
    value = (*a)[1].as_string();
  }
  if (word == std::optional<std::string_view>("queued") && value) {
    return std::optional<std::string>();
  }
  if (word == std::optional<std::string_view>("result") && value) {
    return std::optional<std::string>(std::string(*value));
  }
  return Error(ErrorCode::kInvalidReply,
               "oauth callback reply: unexpected " + reply.debug_string());
}

}  // namespace quiver
