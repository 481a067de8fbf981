#include "native-agent/engine/agent_context.h"

#include <algorithm>
#include <chrono>

#include "native-agent/base/clock.h"

namespace quiver {

Status check_principal(const ConnectionConfig& cfg, const Principal& principal) {
  if (cfg.credential_mode == CredentialMode::kPerMember) {
    if (principal.is_shared()) {
      return Error(ErrorCode::kInvalidArgument,
                   "connection `" + cfg.id +
                       "` uses per-member credentials: a member principal "
                       "is required");
    }
    if (cfg.granted_members.count(std::string(principal.member_id())) == 0) {
      return Error(ErrorCode::kNotFound, "member `" + std::string(principal.member_id()) +
                                             "` is not granted connection `" + cfg.id + "`");
    }
    return Status::Ok();
  }
  if (!principal.is_shared()) {
    return Error(ErrorCode::kInvalidArgument,
                 "connection `" + cfg.id + "` uses shared credentials: its principal is `shared`");
  }
  return Status::Ok();
}

int64_t list_timeout_for(const ConnectionConfig& c, const RuntimeControls& rt) {
  return c.list_timeout_ms.value_or(rt.list_timeout_ms);
}

UpstreamSpec with_deadlines(UpstreamSpec spec, const ConnectionConfig& c,
                            const RuntimeControls& rt) {
  int64_t list = list_timeout_for(c, rt);
  spec.request_timeout_ms = std::min(c.request_timeout_ms.value_or(rt.request_timeout_ms), list);
  spec.startup_timeout_ms = c.startup_timeout_ms.value_or(rt.startup_timeout_ms);
  return spec;
}

bool refused_credential(const Result<Listing>& listing) {
  if (!listing.ok()) return listing.error().code == ErrorCode::kUnauthenticated;
  return std::any_of(std::begin(listing->lists), std::end(listing->lists),
                     [](const ListOutcome& l) {
                       return l.state == ListState::kFailed && l.error &&
                              l.error->code == ErrorCode::kUnauthenticated;
                     });
}

Result<UpstreamSpec> AgentContext::spec_for(const std::string& name, const ConnectionConfig& c,
                                            const Principal& principal, int64_t deadline_ms,
                                            const std::optional<Secret>& rejected,
                                            std::optional<Secret>* bearer) const {
  Result<UpstreamEndpoint> upstream = c.upstream_for(principal);
  if (!upstream.ok()) return upstream.error();
  if (c.auth != AuthType::kOAuth) {
    return with_deadlines(upstream_spec_for(name, *upstream), c, config.runtime);
  }
  if (!oauth) {
    return Error(ErrorCode::kInternal,
                 "connection `" + c.id + "` uses auth oauth, and this agent has no OAuth manager");
  }
  Result<Secret> token = oauth->access_token(c, principal, deadline_ms, rejected);
  if (!token.ok()) return token.error();
  upstream->headers["Authorization"] = Secret("Bearer " + token->reveal(), token->source());
  UpstreamSpec spec = with_deadlines(upstream_spec_for(name, *upstream), c, config.runtime);
  std::vector<std::string> secrets = {token->reveal()};
  for (const Secret& s : config.secrets()) secrets.push_back(s.reveal());
  spec.redactor = std::make_shared<const Redactor>(secrets);
  if (bearer != nullptr) *bearer = *token;
  return spec;
}

Result<const ConnectionConfig*> AgentContext::connection(const std::string& cid) const {
  if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  const ConnectionConfig* cfg = config.find_connection(cid);
  if (cfg == nullptr) {
    return Error(ErrorCode::kNotFound, "no connection `" + cid + "` is configured");
  }
  return cfg;
}

UpstreamOptions AgentContext::upstream_options() const {
  UpstreamOptions u;
  u.list_timeout_ms = config.runtime.list_timeout_ms;
  u.startup_timeout_ms = config.runtime.startup_timeout_ms;
  u.session.request_timeout_ms =
      std::min(config.runtime.request_timeout_ms, config.runtime.list_timeout_ms);
  u.change_debounce_ms = options.change_debounce_ms;
  u.session.max_listing_bytes = static_cast<std::size_t>(config.runtime.max_listing_bytes);
  u.max_message_bytes = std::max<std::size_t>(
      static_cast<std::size_t>(config.runtime.max_manifest_bytes) * 8, std::size_t{16} << 20);
  Logger* log = logger.get();
  u.log = [log](const std::string& line) { log->debug("upstream", line); };
  u.redactor = config.redactor;  // every upstream-originated string passes it on entry
  return u;
}

int64_t AgentContext::revalidation_window_ms() const {
  return options.revalidation_window_ms > 0 ? options.revalidation_window_ms
                                            : config.runtime.revalidate_window_ms;
}

Result<RevalidationOutcome> AgentContext::enqueue(const std::string& cid,
                                                  const Principal& principal,
                                                  const std::string& trigger) {
  return store->enqueue_revalidation(cid, principal, trigger, revalidation_window_ms());
}

void AgentContext::log_store_error(std::string_view what, const Error& e) {
  int64_t now = steady_ms();
  int64_t last = store_error_logged_at_.load();
  if (now - last < 5000 && last != 0) return;
  store_error_logged_at_.store(now);
  logger->warn(kAgentLog, std::string(what) + ": " + e.message);
}

bool AgentContext::is_running() {
  std::lock_guard<std::mutex> lock(run_mu_);
  return running_;
}

bool AgentContext::wait_running(int64_t ms) {
  std::unique_lock<std::mutex> lock(run_mu_);
  run_cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !running_; });
  return running_;
}

bool AgentContext::started() {
  std::lock_guard<std::mutex> lock(run_mu_);
  return started_;
}

void AgentContext::mark_started() {
  std::lock_guard<std::mutex> lock(run_mu_);
  started_ = true;
  running_ = true;
}

bool AgentContext::mark_stopped() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    if (!running_ && !started_) return false;
    running_ = false;
    started_ = false;
  }
  run_cv_.notify_all();
  return true;
}

}  // namespace quiver
