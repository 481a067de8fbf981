#include "shared/call_relay.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <iterator>
#include <utility>

#include "shared/canonical_json.h"
#include "shared/json.h"
#include "shared/principal.h"
#include "shared/schema_assets.h"
#include "shared/sha256.h"

namespace quiver {

namespace {

constexpr const char* kRelayedMethods[] = {"tools/call", "resources/read", "prompts/get",
                                           "completion/complete"};
constexpr int64_t kResourceNotFound = -32002;  // MCP's "resource not found"

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool says_unknown(std::string_view message) {
  const std::string m = lower(message);
  return m.find("not found") != std::string::npos || m.find("unknown") != std::string::npos ||
         m.find("does not exist") != std::string::npos || m.find("no such") != std::string::npos;
}

bool is_rid(std::string_view s) {
  if (s.size() != 64) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::optional<int64_t> to_int(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

constexpr const char* kFailureNames[] = {
    "unavailable", "agent_unreachable", "upstream_unavailable", "timeout",
    "too_large",   "refused",           "store_unavailable"};
static_assert(std::size(kFailureNames) ==
                  static_cast<std::size_t>(RelayFailure::kStoreUnavailable) + 1,
              "one name per RelayFailure");

const char* failure_name(RelayFailure f) {
  const auto i = static_cast<std::size_t>(f);
  return i < std::size(kFailureNames) ? kFailureNames[i] : "unavailable";
}

std::optional<RelayFailure> parse_failure(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kFailureNames); ++i) {
    if (name == kFailureNames[i]) return static_cast<RelayFailure>(i);
  }
  return std::nullopt;
}

Json error_json(const JsonRpcError& e) {
  Json out = {{"code", e.code}, {"message", e.message}};
  if (!e.data.is_null()) out["data"] = e.data;
  return out;
}

std::string text_of(const Json& value) {
  Result<std::string> text = canonical_json(value);
  return text.ok() ? *text : serialize_json(value);
}

}  // namespace

bool is_relayed_method(std::string_view method) {
  return std::find(std::begin(kRelayedMethods), std::end(kRelayedMethods), method) !=
         std::end(kRelayedMethods);
}

Result<CalledCapability> called_capability(std::string_view method, const Json& params) {
  if (!params.is_object()) return invalid(std::string(method) + ": params must be an object");
  if (method == "tools/call" || method == "prompts/get") {
    std::optional<std::string> name = json_string(params, "name");
    if (!name || name->empty()) return invalid(std::string(method) + ": params.name is required");
    return CalledCapability{
        method == "tools/call" ? CapabilityType::kTool : CapabilityType::kPrompt, *name};
  }
  if (method == "resources/read") {
    std::optional<std::string> uri = json_string(params, "uri");
    if (!uri || uri->empty()) return invalid("resources/read: params.uri is required");
    return CalledCapability{CapabilityType::kResource, *uri};
  }
  if (method == "completion/complete") {
    const Json* ref = json_field(params, "ref");
    if (ref == nullptr || !ref->is_object()) {
      return invalid("completion/complete: params.ref is required");
    }
    std::optional<std::string> type = json_string(*ref, "type");
    if (type == std::optional<std::string>("ref/prompt")) {
      std::optional<std::string> name = json_string(*ref, "name");
      if (!name || name->empty()) return invalid("completion/complete: ref.name is required");
      return CalledCapability{CapabilityType::kPrompt, *name};
    }
    if (type == std::optional<std::string>("ref/resource")) {
      std::optional<std::string> uri = json_string(*ref, "uri");
      if (!uri || uri->empty()) return invalid("completion/complete: ref.uri is required");
      return CalledCapability{CapabilityType::kResourceTemplate, *uri};
    }
    return invalid("completion/complete: ref.type must be ref/prompt or ref/resource");
  }
  return invalid("`" + std::string(method) + "` is not a method relayed to an upstream");
}

bool is_unknown_capability_answer(std::string_view method, const std::optional<Json>& result,
                                  const std::optional<JsonRpcError>& error) {
  if (error) {
    const bool code = error->code == kJsonRpcInvalidParams ||
                      (method == "resources/read" && error->code == kResourceNotFound);
    return code && says_unknown(error->message);
  }
  // A tools/call result with isError naming an unknown tool (some servers answer so).
  if (method != "tools/call" || !result || !result->is_object()) return false;
  if (json_bool(*result, "isError") != std::optional<bool>(true)) return false;
  const Json* content = json_field(*result, "content");
  if (content == nullptr || !content->is_array() || content->empty()) return false;
  std::optional<std::string> text = json_string((*content)[0], "text");
  if (!text) return false;
  const std::string t = lower(*text);
  return t.find("unknown tool") != std::string::npos ||
         (t.find("tool") != std::string::npos && t.find("not found") != std::string::npos);
}

RelayReply relay_reply_for_failure(const Error& error) {
  RelayFailure failure = RelayFailure::kUpstreamUnavailable;
  switch (error.code) {
    case ErrorCode::kNotFound:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kStoreUnavailable:
    case ErrorCode::kStoreNotReady:
    case ErrorCode::kAuthorizationRequired:
      failure = RelayFailure::kRefused;
      break;
    case ErrorCode::kTimeout:
      failure = RelayFailure::kTimeout;
      break;
    case ErrorCode::kTooLarge:
      failure = RelayFailure::kTooLarge;
      break;
    default:
      break;
  }
  RelayReply reply = RelayReply::failed(failure, error.message);
  reply.error.data = Json{{"code", error_code_name(error.code)}};
  return reply;
}

RelayReply agent_unreachable_reply() {
  RelayReply reply = RelayReply::failed(
      RelayFailure::kAgentUnreachable,
      "no Quiver agent is consuming calls: the call cannot reach its upstream (lists still work "
      "from the cache)");
  reply.error.data = Json{{"code", kAgentUnreachable}};
  return reply;
}

// ---- the Redis relay ---------------------------------------------------------------------------

Status validate_relay_request(const RelayRequest& r) {
  if (!is_rid(r.rid)) return invalid("relay request: rid must be 64 lowercase hex digits");
  if (Status s = validate_connection_id(r.connection_id); !s.ok()) return s;
  if (Status s = validate_member_id(r.member_id); !s.ok()) return s;
  if (!is_relayed_method(r.method)) {
    return invalid("relay request: `" + r.method + "` is not a relayed method");
  }
  if (!r.params.is_object()) return invalid("relay request: params must be an object");
  if (r.deadline_ms <= 0) return invalid("relay request: no deadline");
  return Status::Ok();
}

std::vector<std::string> relay_request_fields(const RelayRequest& r) {
  namespace f = redis_field;
  return {f::kRid,      r.rid,
          f::kCid,      r.connection_id,
          f::kMember,   r.member_id,
          f::kMethod,   r.method,
          f::kParams,   text_of(r.params),
          f::kDeadline, std::to_string(r.deadline_ms),
          f::kAt,       std::to_string(r.at_ms)};
}

Result<RedisCommand> relay_cancel_command(const RedisKeys& keys, std::string_view rid,
                                          int64_t deadline_ms, int64_t now_ms) {
  Result<std::string> key = keys.call_cancel(rid);
  if (!key.ok()) return key.error();
  const int64_t ttl_ms = std::max<int64_t>(deadline_ms - now_ms, 0) + kCallCancelGraceMs;
  return RedisCommand{"SET", std::move(*key), "1", "PX", std::to_string(ttl_ms)};
}

namespace {

// BLPOP takes seconds, with decimals since Redis 6.
std::string blpop_wait(int64_t wait_ms) {
  char wait[32];
  std::snprintf(wait, sizeof wait, "%lld.%03lld", static_cast<long long>(wait_ms / 1000),
                static_cast<long long>(wait_ms % 1000));
  return wait;
}

// The relay's pipeline in either layout: `script_name` (call_enqueue.lua or its v2) over the calls
// stream, the call's reply list and the agents' registry, then BLPOP on the reply list. The first
// `numkeys` of the three are KEYS (v1 passes the registry as ARGV[1]: all three share the
// namespace's slot there; v2 declares it), the rest ARGV. `keys_of` gives the three keys once the
// request is known valid.
template <typename KeysOf>
Result<std::vector<RedisCommand>> relay_pipeline(const char* script_name, const char* numkeys,
                                                 const RelayRequest& request, int64_t wait_ms,
                                                 int64_t stream_maxlen, KeysOf&& keys_of) {
  if (Status s = validate_relay_request(request); !s.ok()) return s.error();
  if (wait_ms < 1) return invalid("relay: no time left to wait for the reply");
  if (stream_maxlen <= 0) return invalid("relay: stream_maxlen must be positive");
  std::vector<std::string> fields = relay_request_fields(request);
  if (fields[9].size() > kMaxRelayParamsBytes) {
    return Error(ErrorCode::kTooLarge, "relay: the call's params are over " +
                                           std::to_string(kMaxRelayParamsBytes) + " bytes");
  }
  const std::string asset = std::string("lua/") + script_name;
  std::string_view script = schema_asset(asset);
  if (script.empty()) {
    return Error(ErrorCode::kInternal, "schema/" + asset + " is not compiled in");
  }
  Result<std::array<std::string, 3>> keys = keys_of();
  if (!keys.ok()) return keys.error();
  auto& [stream, reply_key, agents] = *keys;
  RedisCommand eval = {"EVAL",
                       std::string(script),
                       numkeys,
                       stream,
                       reply_key,
                       agents,
                       std::to_string(stream_maxlen),
                       std::to_string(kCallReplyTtlMs),
                       relay_reply_record(agent_unreachable_reply())};
  for (std::string& f : fields) eval.push_back(std::move(f));
  return std::vector<RedisCommand>{std::move(eval), {"BLPOP", reply_key, blpop_wait(wait_ms)}};
}

}  // namespace

Result<std::vector<RedisCommand>> relay_call_commands(const RedisKeys& keys,
                                                      const RelayRequest& request, int64_t wait_ms,
                                                      int64_t stream_maxlen) {
  return relay_pipeline(
      "call_enqueue.lua", "2", request, wait_ms, stream_maxlen,
      [&]() -> Result<std::array<std::string, 3>> {
        Result<std::string> reply_key = keys.call_reply(request.rid);
        if (!reply_key.ok()) return reply_key.error();
        return std::array<std::string, 3>{keys.calls(), std::move(*reply_key), keys.call_agents()};
      });
}

namespace {

Result<uint32_t> call_shard_v2(const RedisKeys& keys, std::string_view connection_id) {
  if (keys.key_layout() != KeyLayout::kV2) {
    return invalid("relay: the v2 relay needs key layout v2's keys");
  }
  return keys.connection_shard(connection_id);
}

}  // namespace

Result<std::string> relay_reply_key_v2(const RedisKeys& keys, std::string_view rid,
                                       std::string_view connection_id) {
  Result<uint32_t> shard = call_shard_v2(keys, connection_id);
  if (!shard.ok()) return shard.error();
  return keys.call_reply(rid, *shard);
}

Result<std::string> relay_cancel_key_v2(const RedisKeys& keys, std::string_view rid,
                                        std::string_view connection_id) {
  Result<uint32_t> shard = call_shard_v2(keys, connection_id);
  if (!shard.ok()) return shard.error();
  return keys.call_cancel(rid, *shard);
}

Result<std::vector<RedisCommand>> relay_call_commands_v2(const RedisKeys& keys,
                                                         const RelayRequest& request,
                                                         int64_t wait_ms, int64_t stream_maxlen) {
  return relay_pipeline("call_enqueue_v2.lua", "3", request, wait_ms, stream_maxlen,
                        [&]() -> Result<std::array<std::string, 3>> {
                          Result<uint32_t> shard = call_shard_v2(keys, request.connection_id);
                          if (!shard.ok()) return shard.error();
                          Result<std::string> stream = keys.calls(*shard);
                          Result<std::string> reply_key = keys.call_reply(request.rid, *shard);
                          Result<std::string> agents = keys.call_agents(*shard);
                          for (const Result<std::string>* k : {&stream, &reply_key, &agents}) {
                            if (!k->ok()) return k->error();
                          }
                          return std::array<std::string, 3>{
                              std::move(*stream), std::move(*reply_key), std::move(*agents)};
                        });
}

Result<RedisCommand> relay_cancel_command_v2(const RedisKeys& keys, std::string_view rid,
                                             std::string_view connection_id, int64_t deadline_ms,
                                             int64_t now_ms) {
  Result<std::string> key = relay_cancel_key_v2(keys, rid, connection_id);
  if (!key.ok()) return key.error();
  const int64_t ttl_ms = std::max<int64_t>(deadline_ms - now_ms, 0) + kCallCancelGraceMs;
  return RedisCommand{"SET", std::move(*key), "1", "PX", std::to_string(ttl_ms)};
}

std::string relay_reply_record(const RelayReply& reply, std::size_t max_bytes) {
  Json record = Json::object();
  switch (reply.kind) {
    case RelayReply::Kind::kResult:
      record["kind"] = "result";
      record["result"] = reply.result.is_null() ? Json::object() : reply.result;
      break;
    case RelayReply::Kind::kUpstreamError:
      record["kind"] = "upstream_error";
      record["error"] = error_json(reply.error);
      break;
    case RelayReply::Kind::kFailed:
      record["kind"] = "failed";
      record["failure"] = failure_name(reply.failure);
      record["error"] = error_json(reply.error);
      break;
  }
  std::string text = text_of(record);
  if (text.size() <= max_bytes) return text;
  return relay_reply_record(relay_reply_for_failure(
      Error(ErrorCode::kTooLarge, "the upstream's answer is " + std::to_string(text.size()) +
                                      " bytes, over the bound of " + std::to_string(max_bytes) +
                                      " bytes")));
}

Result<RelayReply> parse_relay_reply(std::string_view record) {
  JsonParseOptions options;
  options.max_bytes = kMaxRelayReplyBytes + 1024;
  options.keep_number_literals = true;
  Result<Json> parsed = parse_json(record, options);
  if (!parsed.ok() || !parsed->is_object()) {
    return Error(
        ErrorCode::kInvalidReply,
        "relay reply: " + (parsed.ok() ? std::string("not an object") : parsed.error().message));
  }
  const std::string kind = json_string(*parsed, "kind").value_or("");
  if (kind == "result") {
    Json* result = json_field(*parsed, "result");
    if (result == nullptr) return Error(ErrorCode::kInvalidReply, "relay reply: no result");
    return RelayReply::ok(std::move(*result));
  }
  const Json* error = json_field(*parsed, "error");
  std::optional<int64_t> code = error != nullptr ? json_int(*error, "code") : std::nullopt;
  if (!code) return Error(ErrorCode::kInvalidReply, "relay reply: no error code");
  JsonRpcError e;
  e.code = *code;
  e.message = json_string(*error, "message").value_or("");
  if (const Json* data = json_field(*error, "data")) e.data = *data;
  if (kind == "upstream_error") return RelayReply::upstream_error(std::move(e));
  std::optional<RelayFailure> failure =
      kind == "failed" ? parse_failure(json_string(*parsed, "failure").value_or("")) : std::nullopt;
  if (!failure) return Error(ErrorCode::kInvalidReply, "relay reply: unknown kind or failure");
  RelayReply reply = RelayReply::failed(*failure, e.message);
  reply.error = std::move(e);
  return reply;
}

Result<RelayReply> parse_relay_call_replies(const std::vector<RespValue>& replies) {
  if (replies.size() != 2) return Error(ErrorCode::kInvalidReply, "relay: expected two replies");
  for (const RespValue& r : replies) {
    if (r.is_error()) return Error(ErrorCode::kStoreUnavailable, "relay: Redis error: " + r.str);
  }
  const RespValue& popped = replies[1];
  if (popped.is_nil()) {
    return relay_reply_for_failure(
        Error(ErrorCode::kTimeout, "no agent answered the call by its deadline"));
  }
  const std::vector<RespValue>* pair = popped.as_array();
  if (pair == nullptr || pair->size() != 2 || !(*pair)[1].as_string()) {
    return Error(ErrorCode::kInvalidReply, "relay: BLPOP answered an unexpected shape");
  }
  return parse_relay_reply(*(*pair)[1].as_string());
}

Result<std::string> relay_rid(std::string_view seed, uint32_t index) {
  if (seed.size() < kRelaySeedBytes) {
    return invalid("relay: the host gave " + std::to_string(seed.size()) +
                   " random bytes for the call's rid, not " + std::to_string(kRelaySeedBytes));
  }
  std::string input(seed);
  for (int shift = 24; shift >= 0; shift -= 8) {
    input.push_back(static_cast<char>((index >> shift) & 0xff));
  }
  return sha256_hex(input);
}

RelayReply relay_store_failure_reply(bool maybe_sent) {
  RelayReply reply = RelayReply::failed(
      RelayFailure::kStoreUnavailable,
      maybe_sent ? "the relay's store (Redis) stopped answering while the call was relayed: its "
                   "outcome is unknown (lists still work from the cache)"
                 : "the relay's store (Redis) is unavailable: the call was not relayed (lists "
                   "still work from the cache)");
  reply.error.data = Json{{"code", error_code_name(ErrorCode::kStoreUnavailable)}};
  return reply;
}

RelayRequest relay_request_for(const RelayCall& call, std::string rid, int64_t now_ms) {
  RelayRequest r;
  r.rid = std::move(rid);
  r.connection_id = call.connection_id;
  r.member_id = std::string(call.member.member_id());
  r.method = call.method;
  r.params = call.params;
  r.deadline_ms = call.deadline_ms;
  r.at_ms = now_ms;
  return r;
}

Result<RelayRequest> relay_request_from_fields(
    const std::map<std::string, std::string, std::less<>>& fields) {
  namespace f = redis_field;
  auto get = [&](const char* name) {
    auto it = fields.find(name);
    return it == fields.end() ? std::string() : it->second;
  };
  RelayRequest r;
  r.rid = get(f::kRid);
  r.connection_id = get(f::kCid);
  r.member_id = get(f::kMember);
  r.method = get(f::kMethod);
  std::optional<int64_t> deadline = to_int(get(f::kDeadline));
  std::optional<int64_t> at = to_int(get(f::kAt));
  if (!deadline || !at) return invalid("relay request: deadline and at must be integers");
  r.deadline_ms = *deadline;
  r.at_ms = *at;
  JsonParseOptions options;
  options.max_bytes = kMaxRelayParamsBytes;
  options.keep_number_literals = true;
  Result<Json> params = parse_json(get(f::kParams), options);
  if (!params.ok()) return invalid("relay request: params: " + params.error().message);
  r.params = std::move(*params);
  if (Status s = validate_relay_request(r); !s.ok()) return s.error();
  return r;
}

}  // namespace quiver
