// Calls relayed to the upstreams (issue 13): `tools/call`, `resources/read`, `prompts/get` and
// `completion/complete` reach an upstream only through the agent that holds its live session and
// its credential. This header is what both hosts agree on, with no I/O:
//
// - which methods are relayed, and which capability a call names (the grant and the preference
//   are checked against it by the agent at call time: a disabled capability is never called);
// - whether an upstream's answer says the capability does not exist (evidence: the listing is
//   refreshed);
// - the JSON-RPC error a failed call becomes (agent unreachable, upstream unavailable, timeout,
//   result too large, refused);
// - the Redis relay between the edge (which has no route to the agent) and the agents: a request
//   stream the agents read in a consumer group, and a reply list per request the edge waits on.
//
// The Redis relay, in one pipelined round trip at the edge (schema/redis-keys.md, keys `calls`,
// `call-reply:<rid>`, `call-agents`):
//   relay_call_commands(keys, request, wait_ms)
//     1. EVAL schema/lua/call_enqueue.lua: no agent alive (`call-agents` absent) → the reply
//        list gets an agent_unreachable reply at once; else XADD the request to `calls`.
//     2. BLPOP call-reply:<rid> wait_s: the agent's reply, or nil when the deadline passed.
//   parse_relay_call_replies(...) → the RelayReply (shared/mcp_endpoint.h) or a timeout.
// The agents read `calls` with XREADGROUP ... NOACK (each request goes to one agent, once: a
// call is never repeated), drop a request whose deadline passed (never performed late), perform
// the rest as the request's member (the grant and preference checked again), and RPUSH one reply
// record (relay_reply_record, bounded) with a PEXPIRE. While they consume they keep
// `call-agents` alive (SET PX); an edge that finds it absent answers agent_unreachable at once.
//
// A client that goes away while the edge waits (the BLPOP round outstanding): the edge sends
// relay_cancel_command (SET call-cancel:<rid> 1 PX <the call's remaining time + a grace>) on a
// fresh connection, best effort, and forgets the call. The agent running the call checks the marks
// of all its running calls in one MGET every few hundred ms (only while one runs); a mark turns the
// call's `cancelled` predicate true, so the upstream is told (notifications/cancelled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/jsonrpc.h"
#include "shared/mcp_endpoint.h"
#include "shared/preferences.h"
#include "shared/redis_conversation.h"
#include "shared/redis_keys.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

// tools/call, resources/read, prompts/get, completion/complete.
bool is_relayed_method(std::string_view method);

// What a call names: the tool or prompt name, the resource URI, or for completion/complete the
// prompt (ref/prompt) or resource template (ref/resource) it completes.
struct CalledCapability {
  CapabilityType type = CapabilityType::kTool;
  std::string key;
};
// kInvalidArgument when `method` is not relayed or `params` lacks the name, URI or ref.
Result<CalledCapability> called_capability(std::string_view method, const Json& params);

// An upstream answer that says the called capability does not exist: a JSON-RPC error -32602
// (invalid params, what the SDKs answer for an unknown tool or prompt) or -32002 (resource not
// found) whose message says unknown / not found, or a tools/call result with isError whose text
// says so. It feeds the evidence trigger: the cached listing is out of date.
bool is_unknown_capability_answer(std::string_view method, const std::optional<Json>& result,
                                  const std::optional<JsonRpcError>& error);

// The RelayReply (shared/mcp_endpoint.h) of a call that got no answer, by the Error's code:
// kNotFound / kInvalidArgument / kStoreUnavailable / kAuthorizationRequired (not granted,
// disabled, the grant or preference could not be checked, no authorization) → kRefused;
// kTimeout → kTimeout; kTooLarge → kTooLarge; the rest → kUpstreamUnavailable. The message is
// the error's (already redacted); `data.code` its ErrorCode name.
RelayReply relay_reply_for_failure(const Error& error);
RelayReply agent_unreachable_reply();
inline constexpr char kAgentUnreachable[] = "AGENT_UNREACHABLE";

// ---- the Redis relay ---------------------------------------------------------------------------

inline constexpr int64_t kCallStreamMaxLen = 10'000;
// How long a reply waits in its list for the edge (past the request's deadline it is useless).
inline constexpr int64_t kCallReplyTtlMs = 30'000;
// How long `call-agents` stays alive after an agent's last mark (agents mark it every second).
inline constexpr int64_t kCallAgentsTtlMs = 3'000;
// How long a cancel mark outlives the call's deadline (clock skew between edge and agent).
inline constexpr int64_t kCallCancelGraceMs = 5'000;
// A reply record's bound: a larger result is replaced by a TOO_LARGE error.
inline constexpr std::size_t kMaxRelayReplyBytes = 4u << 20;
// The request's params bound (a request over it is refused before it is queued).
inline constexpr std::size_t kMaxRelayParamsBytes = 1u << 20;

struct RelayRequest {
  std::string rid;  // 64 lowercase hex digits, random per request (the reply list's name)
  std::string connection_id;
  std::string member_id;  // the caller, as the edge authenticated it
  std::string method;
  Json params;              // the upstream's own name / URI
  int64_t deadline_ms = 0;  // wall clock: the edge gives up then; the agent never starts later
  int64_t at_ms = 0;        // when the edge queued it
};

// kInvalidArgument for a bad rid, connection id, member id, method or oversized params.
Status validate_relay_request(const RelayRequest& request);

// The cancel mark of call `rid` whose client went away (the edge sends it on a fresh connection,
// best effort): SET call-cancel:<rid> 1 PX <max(deadline_ms - now_ms, 0) + kCallCancelGraceMs>.
// kInvalidArgument for a bad rid.
Result<RedisCommand> relay_cancel_command(const RedisKeys& keys, std::string_view rid,
                                          int64_t deadline_ms, int64_t now_ms);

// The edge's pipeline: [EVAL call_enqueue.lua, BLPOP call-reply:<rid> wait]. `wait_ms` >= 1
// (BLPOP waits whole... seconds with a fraction: Redis >= 6 takes a decimal timeout).
Result<std::vector<RedisCommand>> relay_call_commands(const RedisKeys& keys,
                                                      const RelayRequest& request, int64_t wait_ms,
                                                      int64_t stream_maxlen = kCallStreamMaxLen);

// ---- key layout v2 (docs/design.md "Relayed calls on v2") ----
// On v2 every key of a call is on the shard of its connection, `quiver:{<ns>:s:<k>}:...` with
// k = RedisKeys::connection_shard(cid): the stream, the agents' mark, the reply list and the cancel
// mark share one slot, so the edge's XADD and BLPOP go to one node in one round trip. `keys` is a
// v2 RedisKeys (kInvalidArgument for a v1 one).

// The shard keys of call `rid` on connection `connection_id`: its reply list and cancel mark.
Result<std::string> relay_reply_key_v2(const RedisKeys& keys, std::string_view rid,
                                       std::string_view connection_id);
Result<std::string> relay_cancel_key_v2(const RedisKeys& keys, std::string_view rid,
                                        std::string_view connection_id);

// The edge's pipeline on v2: [EVAL call_enqueue_v2.lua (KEYS: the shard's calls, the call's reply
// list, the shard's call-agents), BLPOP <the reply list> wait]. Same checks and bounds as
// relay_call_commands; parse_relay_call_replies reads its replies.
Result<std::vector<RedisCommand>> relay_call_commands_v2(const RedisKeys& keys,
                                                         const RelayRequest& request,
                                                         int64_t wait_ms,
                                                         int64_t stream_maxlen = kCallStreamMaxLen);

// relay_cancel_command on v2: SET <the call's shard>:call-cancel:<rid> 1 PX ...
Result<RedisCommand> relay_cancel_command_v2(const RedisKeys& keys, std::string_view rid,
                                             std::string_view connection_id, int64_t deadline_ms,
                                             int64_t now_ms);

// The record an agent pushes, one JSON object: {"kind": "result", "result": ...},
// {"kind": "upstream_error", "error": {code, message, data?}} or {"kind": "failed", "failure":
// "timeout" | "upstream_unavailable" | ..., "error": {...}}. A record over `max_bytes` becomes a
// kTooLarge failure (the result is not sent).
std::string relay_reply_record(const RelayReply& reply,
                               std::size_t max_bytes = kMaxRelayReplyBytes);
Result<RelayReply> parse_relay_reply(std::string_view record);
// The replies of relay_call_commands' pipeline: the reply (a kTimeout failure when BLPOP gave up:
// no agent answered by the deadline), or kStoreUnavailable for a Redis error, kInvalidReply.
Result<RelayReply> parse_relay_call_replies(const std::vector<RespValue>& replies);

// The request of a RelayCall (the edge's hook): `rid` random, the deadline the call's, `now_ms`
// the edge's wall clock.
RelayRequest relay_request_for(const RelayCall& call, std::string rid, int64_t now_ms);

// ---- the edge's side (shared/edge_service.cpp drives it)
// ------------------------------------------

// The bytes of the host's CSPRNG a request's relay draws its rids from.
inline constexpr std::size_t kRelaySeedBytes = 32;
// The rid of the `index`-th call of one HTTP request: hex(SHA-256(seed || index)), so a batch's
// calls get distinct, unpredictable rids from one draw of the host's CSPRNG. kInvalidArgument when
// `seed` is shorter than kRelaySeedBytes (the host gave no randomness: nothing is relayed).
Result<std::string> relay_rid(std::string_view seed, uint32_t index);
// The RelayReply of a relay round that failed at the store (Redis unreachable or stalled, the
// fail-fast window open, a command refused, a broken reply): kStoreUnavailable with
// `data.code` STORE_UNAVAILABLE, the message saying whether the call may have reached an agent.
// Never a result: the client gets a JSON-RPC error.
RelayReply relay_store_failure_reply(bool maybe_sent);

// An agent's side: one stream entry's fields as a request (kInvalidArgument naming what is
// wrong; the entry is then dropped and counted).
Result<RelayRequest> relay_request_from_fields(
    const std::map<std::string, std::string, std::less<>>& fields);
// XADD field/value pairs of a request (what call_enqueue.lua appends).
std::vector<std::string> relay_request_fields(const RelayRequest& request);

}  // namespace quiver
