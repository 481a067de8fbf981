#include "native-agent/api/api_context.h"

#include <utility>

#include "native-agent/api/api_http.h"
#include "native-agent/engine/metrics.h"

namespace quiver::api {

namespace {

// The refresh triggers of service.h for the reasons discovery queues revalidations with.
const char* trigger_for(const std::string& reason) {
  if (reason == "stale" || reason == "expired") return "stale";
  if (reason == "config_changed") return "config";
  if (reason == "manual") return "manual";
  return "miss";  // miss, corrupt, anything new
}

}  // namespace

void ApiContext::note(const std::string& line) const {
  if (options.log_info) return options.log_info(agent.config().redact(line));
  log(line);
}

void ApiContext::log(const std::string& line) const {
  if (options.log) options.log(agent.config().redact(line));
}

// ---- authentication ----

CallerAuth ApiContext::authenticate(const HttpHeaders& headers) const {
  std::lock_guard<std::mutex> lock(tokens_mu);
  return authenticate_caller(headers, keyring ? &*keyring : nullptr, options.now_ms(), verify,
                             keyring_problem, &tokens);
}

CallerAuth ApiContext::authenticate(const httplib::Request& req) const {
  HttpHeaders headers;
  for (const auto& [name, value] : req.headers) headers.emplace_back(name, value);
  return authenticate(headers);
}

Result<bool> ApiContext::is_operator(const Caller& caller) {
  if (caller.operator_claim || operators.count(caller.id()) > 0) return true;
  Result<std::optional<CatalogEntry>> entry =
      agent.store().catalog_read(CatalogKind::kMember, caller.member.member_id());
  if (!entry.ok()) return entry.error();
  if (!*entry || !(*entry)->value) return false;
  return json_bool(*(*entry)->value, "operator").value_or(false);
}

// ---- store reads ----

Result<DiscoverySnapshot> ApiContext::snapshot(const Principal& member,
                                               const SnapshotQuery& query) {
  return agent.store().read_discovery(member, query);
}

std::optional<Result<DiscoverySnapshot>> ApiContext::snapshot_now(const Principal& member,
                                                                  const SnapshotQuery& query) {
  return agent.store().read_discovery_now(member, query);
}

Result<GrantedConnection> ApiContext::granted(const Principal& member, const std::string& cid) {
  if (!validate_connection_id(cid).ok()) return Error(ErrorCode::kNotFound, "no such connection");
  SnapshotQuery query;
  query.only = cid;
  query.limit = 1;
  Result<DiscoverySnapshot> snap = snapshot(member, query);
  if (!snap.ok()) return snap.error();
  const GrantedConnection* conn = snap->find(cid);
  if (conn == nullptr || !conn->record || !conn->principal) {
    return Error(ErrorCode::kNotFound, "no such connection");
  }
  return *conn;
}

std::optional<GrantedConnection> ApiContext::connection_of(const httplib::Request& req,
                                                           httplib::Response& res,
                                                           const Principal& member,
                                                           const char* what) {
  if (QueryParams q = check_params(req, {}); q.error) {
    send_error(res, HttpErrorCode::kBadRequest, *q.error);
    return std::nullopt;
  }
  const std::string cid = path_segment(req.path, 2);  // /v1/mcp-connections/{}/...
  Result<GrantedConnection> conn = granted(member, cid);
  if (!conn.ok()) {
    fail_store(res, conn.error(), what);
    return std::nullopt;
  }
  return std::move(*conn);
}

void ApiContext::fail_store(httplib::Response& res, const Error& e, const char* what) {
  HttpErrorCode code = store_or_internal(e);
  if (code == HttpErrorCode::kStoreUnavailable || code == HttpErrorCode::kInternal) {
    log(std::string("api: ") + what + ": " + e.message);
    send_error(res, code,
               code == HttpErrorCode::kInternal ? "internal error" : store_unavailable_message(e));
  } else {
    send_error(res, code, e.message);
  }
}

// ---- the discovery core ----

void ApiContext::count(const DiscoveryStats& stats) {
  Metrics& m = agent.metrics();
  if (stats.fresh > 0) m.discovery_hit(stats.fresh);
  if (stats.stale > 0) m.discovery_stale_serve(stats.stale);
  int misses = stats.pending + stats.error + stats.expired;
  if (misses > 0) m.discovery_miss(misses);
}

Result<RevalidationResult> ApiContext::enqueue(const Revalidation& r) {
  Result<RevalidationOutcome> outcome =
      agent.request_refresh(r.connection_id, r.principal, trigger_for(r.reason));
  if (!outcome.ok()) return outcome.error();
  RevalidationResult out;
  out.outcome = *outcome;
  return out;
}

void ApiContext::queue_background(std::vector<Revalidation> revalidations) {
  if (revalidations.empty()) return;
  std::lock_guard<std::mutex> lock(bg_mu);
  for (Revalidation& r : revalidations) {
    if (bg_queue.size() >= options.background_queue) {
      agent.metrics().revalidation_dropped();
      continue;
    }
    bg_queue.push_back(std::move(r));
  }
  bg_cv.notify_one();
}

void ApiContext::run_background() {
  for (;;) {
    std::optional<Revalidation> next;
    {
      std::unique_lock<std::mutex> lock(bg_mu);
      bg_cv.wait(lock, [&] { return !bg_queue.empty() || bg_stop; });
      if (bg_queue.empty()) return;
      next.emplace(std::move(bg_queue.front()));
      bg_queue.pop_front();
    }
    const Revalidation& r = *next;
    Result<RevalidationResult> done = enqueue(r);
    if (!done.ok()) {
      agent.metrics().revalidation_dropped();
      log("api: queuing a revalidation of " + r.connection_id + " (" + r.principal.str() +
          ") failed: " + done.error().message);
    }
  }
}

}  // namespace quiver::api
