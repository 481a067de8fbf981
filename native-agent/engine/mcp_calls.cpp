#include "native-agent/engine/mcp_calls.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "native-agent/base/clock.h"
#include "native-agent/engine/revalidation_consumer.h"
#include "shared/uri_template.h"

namespace quiver {

namespace {

constexpr char kCallsLog[] = "calls";

}  // namespace

Result<RelayReply> McpCalls::perform(const UpstreamCall& call,
                                     const std::function<bool()>& cancelled, CallReport* report) {
  CallReport local;
  CallReport& out = report != nullptr ? *report : local;
  out = CallReport{};
  const int64_t started = steady_ms();

  // 1. What the call names.
  if (!is_relayed_method(call.method)) {
    return Error(ErrorCode::kInvalidArgument,
                 "`" + call.method + "` is not a method Quiver relays to an upstream");
  }
  Result<CalledCapability> named = called_capability(call.method, call.params);
  if (!named.ok()) return named.error();

  // 2. The grant, now: the configuration's and the store's live grants. An unknown connection
  // and an ungranted one answer alike (a member learns nothing of connections not theirs).
  const Error not_granted(
      ErrorCode::kNotFound,
      "no connection `" + call.connection_id + "` is granted to member `" + call.member_id + "`");
  const ConnectionConfig* cfg = ctx_.config.find_connection(call.connection_id);
  if (cfg == nullptr) return not_granted;
  Result<Principal> principal = cfg->principal_for_member(call.member_id);
  if (!principal.ok()) return not_granted;
  Result<std::set<std::string>> grants = ctx_.store->read_grants(call.member_id);
  if (!grants.ok()) {
    return Error(ErrorCode::kStoreUnavailable,
                 "the grant could not be checked (refused): " + grants.error().message);
  }
  if (grants->count(call.connection_id) == 0) return not_granted;

  // 3. The preference, now: the overlay discovery serves to this principal.
  Result<DisabledOverlay> disabled = ctx_.store->read_disabled(call.connection_id, *principal);
  if (!disabled.ok()) {
    return Error(ErrorCode::kStoreUnavailable,
                 "the preference could not be checked (refused): " + disabled.error().message);
  }
  // A resource read is hidden too by a disabled template it expands from (shared/uri_template.h).
  if (disabled->count(overlay_member(named->type, named->key)) != 0 ||
      (named->type == CapabilityType::kResource && !resource_read_visible(*disabled, named->key))) {
    return Error(ErrorCode::kInvalidArgument, std::string(capability_type_name(named->type)) +
                                                  " `" + named->key + "` of connection `" +
                                                  call.connection_id + "` is disabled");
  }

  // 4. The principal's own pooled connection and credential.
  const RuntimeControls& rt = ctx_.config.runtime;
  // A call's own deadline (runtime.call_timeout_ms), never the listing's per-request one.
  int64_t timeout = rt.call_timeout_ms;
  if (call.timeout_ms > 0) timeout = std::min(timeout, call.timeout_ms);
  out.timeout_ms = timeout;
  const int64_t deadline = started + timeout;
  out.pool_name = AgentContext::pool_name(call.connection_id, *principal);
  Result<UpstreamSpec> spec = ctx_.spec_for(out.pool_name, *cfg, *principal, deadline);
  if (!spec.ok()) return spec.error();
  if (Status put = ctx_.pool->put(std::move(*spec)); !put.ok()) return put.error();
  std::shared_ptr<UpstreamConnection> conn = ctx_.pool->get(out.pool_name);
  if (!conn) {
    return Error(ErrorCode::kUpstreamUnavailable,
                 "connection `" + call.connection_id + "` was removed meanwhile");
  }

  // 5. The call, within the deadline (cancelled upstream past it or when the caller leaves).
  const int64_t conn_deadline = conn->now_ms() + std::max<int64_t>(1, deadline - steady_ms());
  Result<CallAnswer> answer =
      conn->call(call.method, call.params, conn_deadline, cancelled, &out.upstream);
  if (!answer.ok()) {
    ctx_.logger->info(kCallsLog, call.method + " on " +
                                     AgentContext::who(call.connection_id, *principal) +
                                     " failed: " + answer.error().message);
    return answer.error();
  }

  // 6. Evidence: the upstream does not know what its cached listing offers.
  if (is_unknown_capability_answer(call.method, answer->result, answer->error)) {
    out.evidence = true;
    Result<RevalidationOutcome> queued =
        triggers_.request_refresh(call.connection_id, *principal, "evidence");
    ctx_.logger->info(kCallsLog, "the upstream of " +
                                     AgentContext::who(call.connection_id, *principal) +
                                     " does not know " + capability_type_name(named->type) + " `" +
                                     named->key + "`: listing refreshed (" +
                                     (queued.ok() ? "requested" : queued.error().message) + ")");
  }
  RelayReply reply = answer->error ? RelayReply::upstream_error(std::move(*answer->error))
                                   : RelayReply::ok(std::move(answer->result).value_or(Json()));
  // The answer's bound, the same for the agent's own endpoint and the relay (whose record is
  // this text). TODO(perf): the relay serializes it once more for its record.
  const std::size_t bytes = relay_reply_record(reply, SIZE_MAX).size();
  if (bytes > kMaxRelayReplyBytes) {
    return Error(ErrorCode::kTooLarge, "the upstream's answer to " + call.method + " is " +
                                           std::to_string(bytes) + " bytes, over the bound of " +
                                           std::to_string(kMaxRelayReplyBytes) + " bytes");
  }
  return reply;
}

RelayReply perform_relay_call(AgentService& agent, const RelayCall& call, int64_t now_ms,
                              const std::function<bool()>& cancelled) {
  UpstreamCall upstream;
  upstream.connection_id = call.connection_id;
  upstream.member_id = std::string(call.member.member_id());
  upstream.method = call.method;
  upstream.params = call.params;
  if (call.deadline_ms > 0) {
    if (call.deadline_ms <= now_ms) {
      return relay_reply_for_failure(
          Error(ErrorCode::kTimeout, call.method + ": the deadline passed before it was sent"));
    }
    upstream.timeout_ms = call.deadline_ms - now_ms;
  }
  Result<RelayReply> reply = agent.call_upstream(upstream, cancelled);
  return reply.ok() ? std::move(*reply) : relay_reply_for_failure(reply.error());
}

// ---- the Redis relay's consumer ----------------------------------------------------------------

void CallRelayConsumer::handle(const RelayRequest& request) {
  const int64_t now = ctx_.options.now_ms();
  if (now >= request.deadline_ms) {
    // The edge has stopped waiting: performing it now would run a call nobody reads.
    ++expired_;
    ctx_.logger->warn(kCallsLog, "dropped relayed " + request.method + " on " +
                                     request.connection_id + " for " + request.member_id +
                                     ": read " + std::to_string(now - request.deadline_ms) +
                                     " ms after its deadline (not performed)");
    return;
  }
  UpstreamCall call;
  call.connection_id = request.connection_id;
  call.member_id = request.member_id;
  call.method = request.method;
  call.params = request.params;
  call.timeout_ms = request.deadline_ms - now;
  const std::shared_ptr<std::atomic<bool>> cancel = track(request);
  Result<RelayReply> reply = calls_.perform(call, [&cancel] { return cancel->load(); });
  untrack(request.rid);
  ++performed_;
  if (cancel->load()) {
    // The edge's client went away (the edge forgot the call): the reply would go unread.
    ++cancelled_;
    ctx_.logger->info(kCallsLog, "relayed " + request.method + " on " + request.connection_id +
                                     " for " + request.member_id +
                                     " cancelled: its client went away at the edge");
    return;
  }
  const RelayReply record = reply.ok() ? std::move(*reply) : relay_reply_for_failure(reply.error());
  Status put = ctx_.store->put_call_reply({request.rid, request.connection_id},
                                          relay_reply_record(record), kCallReplyTtlMs);
  if (!put.ok()) {
    ++reply_failures_;
    ctx_.log_store_error("replying to a relayed call", put.error());
  }
}

std::size_t CallRelayConsumer::drain_once(int64_t block_ms, bool* store_failed) {
  Result<RelayedCallBatch> batch = ctx_.store->read_relayed_calls(ctx_.consumer, 1, block_ms);
  if (!batch.ok()) {
    if (store_failed != nullptr) *store_failed = true;
    ctx_.log_store_error("reading relayed calls", batch.error());
    return 0;
  }
  for (const std::string& bad : batch->malformed_ids) {
    ++malformed_;
    ctx_.logger->warn(kCallsLog, "dropped a malformed relayed call: " + bad);
  }
  for (const RelayRequest& request : batch->requests) handle(request);
  return batch->requests.size();
}

void CallRelayConsumer::worker_loop() {
  consume_until_stopped(
      ctx_, [this](int64_t block_ms, bool* store_failed) { drain_once(block_ms, store_failed); });
}

Status CallRelayConsumer::mark_alive() {
  return ctx_.store->mark_call_agent_alive(ctx_.consumer, kCallAgentsTtlMs);
}

void CallRelayConsumer::heartbeat_loop() {
  do {
    if (Status st = mark_alive(); !st.ok()) {
      ctx_.log_store_error("marking call-agents alive", st.error());
    }
  } while (ctx_.wait_running(kCallAgentsMarkMs));
}

std::shared_ptr<std::atomic<bool>> CallRelayConsumer::track(const RelayRequest& request) {
  auto flag = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(running_mu_);
  // rids are random per call: a repeat is a repeated request, same flag use
  running_[request.rid] = Running{request.connection_id, flag};
  return flag;
}

void CallRelayConsumer::untrack(const std::string& rid) {
  std::lock_guard<std::mutex> lock(running_mu_);
  running_.erase(rid);
}

std::size_t CallRelayConsumer::poll_cancel_marks_once(bool* store_failed) {
  std::vector<RelayedCallRef> calls;
  std::vector<std::shared_ptr<std::atomic<bool>>> flags;
  {
    std::lock_guard<std::mutex> lock(running_mu_);
    for (const auto& [rid, running] : running_) {
      if (running.cancelled->load()) continue;
      calls.push_back({rid, running.connection_id});
      flags.push_back(running.cancelled);
    }
  }
  if (calls.empty()) return 0;  // no relayed call runs: no Redis round
  Result<std::vector<bool>> marks = ctx_.store->call_cancel_marks(calls);
  if (!marks.ok()) {
    if (store_failed != nullptr) *store_failed = true;
    ctx_.log_store_error("reading relayed calls' cancel marks", marks.error());
    return 0;
  }
  std::size_t n = 0;
  for (std::size_t i = 0; i < marks->size() && i < flags.size(); ++i) {
    if ((*marks)[i] && !flags[i]->exchange(true)) ++n;
  }
  return n;
}

void CallRelayConsumer::cancel_loop() {
  while (ctx_.wait_running(kCallCancelMarkPollMs)) (void)poll_cancel_marks_once();
}

CallRelayStats CallRelayConsumer::stats() const {
  CallRelayStats s;
  s.cancelled = cancelled_.load();
  {
    std::lock_guard<std::mutex> lock(running_mu_);
    s.running = static_cast<int64_t>(running_.size());
  }
  s.performed = performed_.load();
  s.expired = expired_.load();
  s.malformed = malformed_.load();
  s.reply_failures = reply_failures_.load();
  return s;
}

}  // namespace quiver
