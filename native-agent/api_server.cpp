#include "native-agent/api_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>

#include "native-agent/locked_render_cache.h"
#include "native-agent/metrics.h"
#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/json.h"
#include "shared/preferences.h"
#include "shared/search_index.h"
#include "shared/utf8.h"
#include "shared/webhook_signature.h"

namespace quiver {

namespace {

constexpr char kJson[] = "application/json";
constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

// ---- the bounded pool --------------------------------------------------------------------------

// Set on the shedding thread: every request it handles is answered 503 OVERLOADED at once (the
// pre-routing hook checks it), so an overloaded server still answers quickly and never touches
// the store for a request it cannot serve.
thread_local bool t_shedding = false;

// httplib's TaskQueue (one job = one accepted connection) with bounded waiting. cpp-httplib 0.11
// has no max_queued_requests, and its enqueue cannot refuse a job (it owns the socket), so the
// overflow goes to a shedding thread instead; when that queue is full too, enqueue (the accept
// loop) waits for room: further connections wait in the kernel's listen backlog.
// The 503 says `Connection: close`; a client that keeps the connection open anyway holds the
// shedding thread until the keep-alive timeout (httplib 0.11 decides keep-alive before routing).
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(int threads, std::size_t max_queued, std::size_t max_shed,
                   std::atomic<int64_t>* shed_count)
      : max_queued_(max_queued), max_shed_(max_shed), shed_count_(shed_count) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(jobs_, false); });
    shedder_ = std::thread([this] { work(shed_jobs_, true); });
  }
  ~BoundedTaskQueue() override = default;

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (jobs_.size() < max_queued_ || idle_ > jobs_.size()) {
      jobs_.push_back(std::move(fn));
      cv_.notify_all();
      return;
    }
    room_.wait(lock, [&] { return shed_jobs_.size() < max_shed_ || shutdown_; });
    shed_jobs_.push_back(std::move(fn));
    if (shed_count_ != nullptr) ++*shed_count_;
    cv_.notify_all();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    room_.notify_all();
    for (std::thread& t : workers_) t.join();
    shedder_.join();
  }

 private:
  void work(std::deque<std::function<void()>>& queue, bool shedding) {
    t_shedding = shedding;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!shedding) ++idle_;
        cv_.wait(lock, [&] { return !queue.empty() || shutdown_; });
        if (!shedding) --idle_;
        if (queue.empty()) return;  // shut down and drained
        fn = std::move(queue.front());
        queue.pop_front();
        if (shedding) room_.notify_all();
      }
      fn();
    }
  }

  const std::size_t max_queued_;
  const std::size_t max_shed_;
  std::atomic<int64_t>* shed_count_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable room_;
  std::deque<std::function<void()>> jobs_;
  std::deque<std::function<void()>> shed_jobs_;
  std::size_t idle_ = 0;
  bool shutdown_ = false;
  std::vector<std::thread> workers_;
  std::thread shedder_;
};

// ---- small helpers -----------------------------------------------------------------------------

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

bool is_loopback_peer(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "::1" || addr.rfind("::ffff:127.", 0) == 0;
}

HttpResponse json_response(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", kJson}, {"Cache-Control", "no-store"}};
  r.body = json_text(body);
  return r;
}

// Errors that discovery_http.h's HttpErrorCode does not name, in the same JSON shape.
HttpResponse overloaded_response() {
  HttpResponse r = json_response(
      503,
      Json::object({{"error", Json::object({{"code", "OVERLOADED"},
                                            {"message", "the agent is busy; retry shortly"}})}}));
  r.headers.emplace_back("Retry-After", "1");
  r.headers.emplace_back("Connection", "close");
  return r;
}

void send(const HttpResponse& from, httplib::Response& to) {
  to.status = from.status;
  std::string content_type;
  for (const auto& [name, value] : from.headers) {
    if (iequals(name, "Content-Type")) {
      content_type = value;
    } else {
      to.set_header(name, value);
    }
  }
  if (!from.body.empty() || !content_type.empty()) {
    to.set_content(from.body, content_type.empty() ? kJson : content_type.c_str());
  }
}

void send_error(httplib::Response& res, HttpErrorCode code, const std::string& message) {
  send(error_response(code, message), res);
}

HttpErrorCode store_or_internal(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument ? HttpErrorCode::kBadRequest
         : e.code == ErrorCode::kNotFound      ? HttpErrorCode::kNotFound
         : e.code == ErrorCode::kInternal      ? HttpErrorCode::kInternal
                                               : HttpErrorCode::kStoreUnavailable;
}

// The refresh triggers of service.h for the reasons discovery queues revalidations with.
const char* trigger_for(const std::string& reason) {
  if (reason == "stale" || reason == "expired") return "stale";
  if (reason == "config_changed") return "config";
  if (reason == "manual") return "manual";
  return "miss";  // miss, corrupt, anything new
}

Json preference_json(const PreferenceRow& row) {
  return Json::object({{"type", capability_type_name(row.capability_type)},
                       {"key", row.capability_key},
                       {"enabled", row.enabled},
                       {"first_seen_at", row.first_seen_at},
                       {"last_seen_at", row.last_seen_at},
                       {"toggled_at", row.toggled_at}});
}

// Query parameters of an agent-owned endpoint: only `allowed` ones, each once. A principal never
// comes from the query.
std::optional<std::string> check_params(const httplib::Request& req,
                                        std::initializer_list<const char*> allowed) {
  for (const auto& [name, value] : req.params) {
    if (name == "principal" || name == "member") {
      return "`" + name + "` is not a parameter: the caller comes from the bearer token";
    }
    bool known = false;
    for (const char* a : allowed) known = known || name == a;
    if (!known) return "unknown query parameter `" + name + "`";
    if (req.get_param_value_count(name) > 1) return "query parameter `" + name + "` repeated";
  }
  return std::nullopt;
}

// A ToolSearcher shared by every worker thread: IndexedToolSearcher and its cache are not
// synchronized, so searches take turns (an index build is the slow part, and happens once per
// version of what a caller sees).
class LockedSearcher final : public ToolSearcher {
 public:
  LockedSearcher(std::size_t entries, std::size_t bytes)
      : cache_(entries, bytes), inner_(&cache_) {}
  Result<std::vector<SearchHit>> search(const SearchCorpus& corpus, std::string_view query,
                                        std::size_t limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.search(corpus, query, limit);
  }

 private:
  std::mutex mu_;
  SearchIndexCache cache_;
  IndexedToolSearcher inner_;
};

}  // namespace

ApiServerOptions api_server_options(const AgentConfig& config) {
  ApiServerOptions options;
  options.listen = config.listen;
  return options;
}

// ---- the server --------------------------------------------------------------------------------

struct ApiServer::Impl {
  Impl(AgentService& a, ApiServerOptions o) : agent(a), options(std::move(o)) {}

  AgentService& agent;
  ApiServerOptions options;
  httplib::Server server;
  std::thread listener;
  int bound_port = 0;
  bool started = false;
  std::atomic<bool> stopped{false};
  std::atomic<bool> listener_done{false};

  std::optional<Keyring> keyring;
  std::string keyring_problem;  // why there is none
  VerifyOptions verify;
  std::vector<std::string> webhook_secrets;
  std::set<std::string> operators;  // quiver.operators: may toggle shared connections

  std::unique_ptr<LockedSearcher> searcher;
  LockedRenderCache render_cache;  // each servable entry's rendered payload, for every thread
  DiscoveryConfig discovery;

  std::atomic<int64_t> shed{0};

  // Stale-while-revalidate requests, queued after the answer went out.
  std::mutex bg_mu;
  std::condition_variable bg_cv;
  std::deque<Revalidation> bg_queue;
  bool bg_stop = false;
  std::thread bg_thread;

  void log(const std::string& line) const {
    if (options.log) options.log(agent.config().redact(line));
  }

  // ---- authentication: the one place a request becomes a member ----

  CallerAuth authenticate(const httplib::Request& req) const {
    if (!req.has_header("Authorization")) {
      return CallerAuth::unauthenticated("a bearer token is required (Authorization: Bearer ...)");
    }
    if (req.get_header_value_count("Authorization") > 1) {
      return CallerAuth::unauthenticated("more than one Authorization header");
    }
    Result<std::string> token = parse_bearer(req.get_header_value("Authorization"));
    if (!token.ok()) return CallerAuth::unauthenticated(token.error().message);
    if (!keyring) return CallerAuth::unauthenticated(keyring_problem);
    Result<CallerIdentity> who = verify_caller_token(*token, *keyring, options.now_ms(), verify);
    if (!who.ok()) return CallerAuth::unauthenticated(who.error().message);
    return CallerAuth::member(who->member_id);
  }

  // Wraps a handler of an authenticated endpoint: 401 unless the bearer token names a member.
  using MemberHandler =
      std::function<void(const httplib::Request&, httplib::Response&, const Principal& member)>;
  httplib::Server::Handler authed(MemberHandler handler) {
    return [this, handler = std::move(handler)](const httplib::Request& req,
                                                httplib::Response& res) {
      CallerAuth caller = authenticate(req);
      if (!caller.member_id)
        return send_error(res, HttpErrorCode::kUnauthenticated, caller.failure);
      Result<Principal> member = Principal::member(*caller.member_id);
      if (!member.ok()) {
        return send_error(res, HttpErrorCode::kUnauthenticated, "the token names no valid member");
      }
      handler(req, res, *member);
    };
  }

  // ---- store reads ----

  Result<DiscoverySnapshot> snapshot(const Principal& member, const SnapshotQuery& query) {
    return agent.store().read_discovery(member, query);
  }

  // The granted connection `cid` of `member` with its applicable principal, from one snapshot
  // read. kNotFound when not granted, unknown or removed (indistinguishable, by design).
  Result<GrantedConnection> granted(const Principal& member, const std::string& cid) {
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

  void fail_store(httplib::Response& res, const Error& e, const char* what) {
    HttpErrorCode code = store_or_internal(e);
    if (code == HttpErrorCode::kStoreUnavailable || code == HttpErrorCode::kInternal) {
      log(std::string("api: ") + what + ": " + e.message);
      send_error(
          res, code,
          code == HttpErrorCode::kInternal ? "internal error" : "the cache store is unavailable");
    } else {
      send_error(res, code, e.message);
    }
  }

  // ---- the discovery core ----

  void count(const DiscoveryStats& stats) {
    Metrics& m = agent.metrics();
    if (stats.fresh > 0) m.discovery_hit(stats.fresh);
    if (stats.stale > 0) m.discovery_stale_serve(stats.stale);
    int misses = stats.pending + stats.error + stats.expired;
    if (misses > 0) m.discovery_miss(misses);
  }

  Result<RevalidationResult> enqueue(const Revalidation& r) {
    Result<EnqueueOutcome> outcome =
        agent.request_refresh(r.connection_id, r.principal, trigger_for(r.reason));
    if (!outcome.ok()) return outcome.error();
    RevalidationResult out;
    out.outcome = *outcome == EnqueueOutcome::kInProgress      ? RevalidationOutcome::kInProgress
                  : *outcome == EnqueueOutcome::kAlreadyQueued ? RevalidationOutcome::kAlreadyQueued
                                                               : RevalidationOutcome::kQueued;
    return out;
  }

  void queue_background(std::vector<Revalidation> revalidations) {
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

  void run_background() {
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

  // Drives one DiscoveryExchange to its answer: snapshot reads from the store, enqueues through
  // the agent, stats into the metrics, background revalidations onto the background queue.
  void discovery_exchange(const httplib::Request& req, httplib::Response& res) {
    HttpRequest request;
    request.method = req.method;
    std::size_t q = req.target.find('?');
    request.path = req.target.substr(0, q);
    request.query = q == std::string::npos ? "" : req.target.substr(q + 1);
    for (const auto& [name, value] : req.headers) request.headers.emplace_back(name, value);
    request.body = req.body;

    DiscoveryExchange exchange(discovery);
    DiscoveryStep step = exchange.start(request, authenticate(req), options.now_ms());
    for (int guard = 0; guard < 8; ++guard) {
      if (auto* need = std::get_if<NeedSnapshot>(&step)) {
        step = exchange.resume_snapshot(snapshot(need->member, need->query), options.now_ms());
      } else if (auto* need = std::get_if<NeedEnqueue>(&step)) {
        std::vector<Result<RevalidationResult>> results;
        for (const Revalidation& r : need->revalidations) results.push_back(enqueue(r));
        step = exchange.resume_enqueue(results, options.now_ms());
      } else {
        Respond& done = std::get<Respond>(step);
        if (done.log) log("api: " + request.path + ": " + done.log->message);
        count(done.stats);
        send(done.response, res);
        queue_background(std::move(done.background));
        return;
      }
    }
    log("api: " + request.path + ": the discovery exchange did not finish");
    send_error(res, HttpErrorCode::kInternal, "internal error");
  }

  // ---- agent-owned endpoints ----

  void healthz(const httplib::Request&, httplib::Response& res) {
    Status health = agent.store().health();
    if (!health.ok()) {
      log("api: healthz: " + health.error().message);
      HttpResponse r = error_response(HttpErrorCode::kStoreUnavailable,
                                      "the cache store is unavailable: " + health.error().message);
      return send(r, res);
    }
    send(json_response(200, Json::object({{"status", "ok"}, {"store", agent.store().describe()}})),
         res);
  }

  void metrics(const httplib::Request& req, httplib::Response& res) {
    if (!is_loopback_peer(req.remote_addr)) {
      CallerAuth caller = authenticate(req);
      if (!caller.member_id) {
        return send_error(
            res, HttpErrorCode::kUnauthenticated,
            "/metrics needs a bearer token from a non-loopback address: " + caller.failure);
      }
    }
    res.status = 200;
    res.set_header("Cache-Control", "no-store");
    std::string text = agent.metrics().prometheus_text();
    text += "# HELP quiver_api_shed_total Connections answered 503 OVERLOADED by the API.\n";
    text += "# TYPE quiver_api_shed_total counter\n";
    text += "quiver_api_shed_total " + std::to_string(shed.load()) + "\n";
    res.set_content(text, kPrometheusText);
  }

  void list_connections(const httplib::Request& req, httplib::Response& res,
                        const Principal& member) {
    if (auto problem = check_params(req, {"after", "limit"})) {
      return send_error(res, HttpErrorCode::kBadRequest, *problem);
    }
    SnapshotQuery query;
    query.limit = discovery.limits.max_page_size;
    if (req.has_param("limit")) {
      const std::string v = req.get_param_value("limit");
      std::size_t n = 0;
      bool ok = !v.empty() && v.size() <= 4 &&
                std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (ok) n = static_cast<std::size_t>(std::stoul(v));
      if (!ok || n < 1 || n > discovery.limits.max_page_size) {
        return send_error(
            res, HttpErrorCode::kBadRequest,
            "limit must be between 1 and " + std::to_string(discovery.limits.max_page_size));
      }
      query.limit = n;
    }
    if (req.has_param("after")) {
      query.after = req.get_param_value("after");
      if (!validate_connection_id(query.after).ok()) {
        return send_error(res, HttpErrorCode::kBadRequest, "after must be a connection id");
      }
    }
    Result<DiscoverySnapshot> snap = snapshot(member, query);
    if (!snap.ok()) return fail_store(res, snap.error(), "GET /v1/mcp-connections");
    // The same classification the discovery endpoints serve, without the manifests themselves:
    // one batched read, no query per connection.
    RenderOptions render = discovery.render;
    RenderedDiscovery rendered =
        render_manifests(*snap, discovery.freshness, options.now_ms(), render);
    Result<Json> body = parse_json(rendered.body);
    if (!body.ok() || !body->is_object()) {
      log("api: GET /v1/mcp-connections: the rendered body does not parse");
      return send_error(res, HttpErrorCode::kInternal, "internal error");
    }
    Json connections = Json::array();
    if (const Json* entries = json_field(*body, "connections"); entries && entries->is_array()) {
      for (const Json& entry : *entries) {
        if (!entry.is_object()) continue;
        Json out = entry;
        if (const Json* manifest = json_field(entry, "manifest");
            manifest && manifest->is_object()) {
          Json counts = Json::object();
          for (const char* list : {"tools", "resources", "resource_templates", "prompts"}) {
            const Json* l = json_field(*manifest, list);
            if (l == nullptr) continue;
            const Json* items = l->is_array() ? l : json_field(*l, "items");
            if (items != nullptr && items->is_array()) counts[list] = items->size();
          }
          out["counts"] = std::move(counts);
        }
        out.erase("manifest");
        out.erase("mcp");
        connections.push_back(std::move(out));
      }
    }
    Json answer =
        Json::object({{"principal", member.str()}, {"connections", std::move(connections)}});
    if (snap->next_after) answer["next_after"] = *snap->next_after;
    count(rendered.stats);
    send(json_response(200, answer), res);
    queue_background(std::move(rendered.revalidations));
  }

  void test_connection(const httplib::Request& req, httplib::Response& res,
                       const Principal& member) {
    if (auto problem = check_params(req, {})) {
      return send_error(res, HttpErrorCode::kBadRequest, *problem);
    }
    const std::string cid = req.matches[1];
    Result<GrantedConnection> conn = granted(member, cid);
    if (!conn.ok()) return fail_store(res, conn.error(), "test");
    Result<Json> probe = agent.test_connection(cid, *conn->principal);
    if (!probe.ok()) {
      const Error& e = probe.error();
      if (e.code == ErrorCode::kNotFound) {
        return send_error(res, HttpErrorCode::kNotFound, "no such connection");
      }
      log("api: test of " + cid + " (" + conn->principal->str() + ") failed: " + e.message);
      return send_error(
          res, HttpErrorCode::kUpstreamUnavailable,
          std::string(error_code_name(e.code)) + ": " + agent.config().redact(e.message));
    }
    Json body = Json::object({{"connection_id", cid},
                              {"principal", conn->principal->str()},
                              {"result", std::move(*probe)}});
    send(json_response(200, body), res);
  }

  // A caller's evidence that the cached list is out of date: the upstream refused a capability
  // the manifest lists (an unknown-tool error), or offered one it does not. The agent refreshes
  // the caller's (connection, principal) as a change trigger: followed up until a listing that
  // started after the report is stored.
  void evidence(const httplib::Request& req, httplib::Response& res, const Principal& member) {
    if (auto problem = check_params(req, {})) {
      return send_error(res, HttpErrorCode::kBadRequest, *problem);
    }
    const std::string cid = req.matches[1];
    Result<GrantedConnection> conn = granted(member, cid);
    if (!conn.ok()) return fail_store(res, conn.error(), "evidence");
    Result<Json> body = parse_json(req.body, options.max_body_bytes);
    static const char* kKinds[] = {"unknown_tool", "unknown_resource", "unknown_prompt",
                                   "unlisted_capability"};
    std::optional<std::string> kind = body.ok() ? json_string(*body, "kind") : std::nullopt;
    std::optional<std::string> name = body.ok() ? json_string(*body, "name") : std::nullopt;
    bool known_kind = false;
    for (const char* k : kKinds) known_kind = known_kind || (kind && *kind == k);
    if (!known_kind || !name || name->empty() || name->size() > 2048 || !is_valid_utf8(*name)) {
      return send_error(res, HttpErrorCode::kBadRequest,
                        "the body must be {\"kind\": \"unknown_tool\" | \"unknown_resource\" | "
                        "\"unknown_prompt\" | \"unlisted_capability\", \"name\": \"...\"}");
    }
    Result<EnqueueOutcome> outcome = agent.request_refresh(cid, *conn->principal, "evidence");
    if (!outcome.ok()) return fail_store(res, outcome.error(), "evidence");
    log("api: evidence (" + *kind + ") for " + cid + " (" + conn->principal->str() + "): refresh " +
        enqueue_outcome_name(*outcome));
    send(json_response(202, Json::object({{"status", enqueue_outcome_name(*outcome)}})), res);
  }

  // Preferences are the caller's principal's (conn.principal: `shared` on a shared connection, the
  // caller on a per-member one). Another member's rows are never read, so a key only they listed
  // answers exactly like a key nobody listed.
  void get_preferences(const httplib::Request& req, httplib::Response& res,
                       const Principal& member) {
    if (auto problem = check_params(req, {})) {
      return send_error(res, HttpErrorCode::kBadRequest, *problem);
    }
    const std::string cid = req.matches[1];
    Result<GrantedConnection> conn = granted(member, cid);
    if (!conn.ok()) return fail_store(res, conn.error(), "preferences");
    answer_preferences(res, cid, *conn->principal);
  }

  void answer_preferences(httplib::Response& res, const std::string& cid,
                          const Principal& principal) {
    Result<std::vector<PreferenceRow>> rows = agent.preferences(cid, principal);
    if (!rows.ok()) return fail_store(res, rows.error(), "preferences");
    Json list = Json::array();
    for (const PreferenceRow& row : *rows) list.push_back(preference_json(row));
    send(json_response(200, Json::object({{"connection_id", cid},
                                          {"principal", principal.str()},
                                          {"preferences", std::move(list)}})),
         res);
  }

  // PUT and PATCH: {"type", "key", "enabled"}, or {"changes": [those]} applied in order.
  // A shared connection's choices are everyone's: only an operator (quiver.operators) may change
  // them; any other granted member is refused with 403. On a per-member connection each member
  // changes their own.
  void set_preferences(const httplib::Request& req, httplib::Response& res,
                       const Principal& member) {
    if (auto problem = check_params(req, {})) {
      return send_error(res, HttpErrorCode::kBadRequest, *problem);
    }
    const std::string cid = req.matches[1];
    Result<GrantedConnection> conn = granted(member, cid);
    if (!conn.ok()) return fail_store(res, conn.error(), "preferences");
    if (conn->principal->is_shared() && operators.count(std::string(member.member_id())) == 0) {
      return send_error(res, HttpErrorCode::kForbidden,
                        "only an operator (quiver.operators) may change the preferences of a "
                        "shared connection");
    }
    Result<Json> body = parse_json(req.body, options.max_body_bytes);
    if (!body.ok() || !body->is_object()) {
      return send_error(res, HttpErrorCode::kBadRequest,
                        "the body must be a JSON object {\"type\", \"key\", \"enabled\"}");
    }
    std::vector<Json> changes;
    if (const Json* list = json_field(*body, "changes")) {
      if (!list->is_array() || list->empty() || list->size() > 1000) {
        return send_error(res, HttpErrorCode::kBadRequest,
                          "changes must be a list of 1 to 1000 {type, key, enabled} objects");
      }
      changes.assign(list->begin(), list->end());
    } else {
      changes.push_back(*body);
    }
    struct Change {
      CapabilityType type;
      std::string key;
      bool enabled;
    };
    std::vector<Change> parsed;
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const Json& c = changes[i];
      std::string at = changes.size() > 1 ? "changes[" + std::to_string(i) + "]." : "";
      std::optional<std::string> type = c.is_object() ? json_string(c, "type") : std::nullopt;
      std::optional<CapabilityType> t = type ? parse_capability_type(*type) : std::nullopt;
      if (!t) {
        return send_error(res, HttpErrorCode::kBadRequest,
                          at + "type must be tool, resource, resource_template or prompt");
      }
      std::optional<std::string> key = json_string(c, "key");
      if (!key || key->empty() || key->size() > kMaxCapabilityKeyBytes) {
        return send_error(res, HttpErrorCode::kBadRequest,
                          at + "key must be a capability's name, uri or uriTemplate");
      }
      std::optional<bool> enabled = json_bool(c, "enabled");
      if (!enabled)
        return send_error(res, HttpErrorCode::kBadRequest, at + "enabled must be a boolean");
      parsed.push_back(Change{*t, *key, *enabled});
    }
    for (const Change& c : parsed) {
      Status st = agent.set_preference(cid, *conn->principal, c.type, c.key, c.enabled);
      if (!st.ok()) {
        if (st.error().code == ErrorCode::kNotFound) {
          return send_error(res, HttpErrorCode::kNotFound,
                            std::string("no ") + capability_type_name(c.type) + " `" + c.key +
                                "` has been listed for this connection");
        }
        return fail_store(res, st.error(), "set preference");
      }
    }
    answer_preferences(res, cid, *conn->principal);
  }

  // Signed with X-Quiver-Signature (shared/webhook_signature.h); no bearer token.
  void webhook(const httplib::Request& req, httplib::Response& res) {
    if (webhook_secrets.empty()) {
      return send_error(res, HttpErrorCode::kNotFound,
                        "webhooks are off: quiver.webhook_secrets names no secret");
    }
    if (!req.has_header(kWebhookSignatureHeader)) {
      return send_error(res, HttpErrorCode::kUnauthenticated,
                        std::string("the ") + kWebhookSignatureHeader + " header is missing");
    }
    Result<WebhookVerified> verified = verify_webhook(req.get_header_value(kWebhookSignatureHeader),
                                                      req.body, webhook_secrets, options.now_ms());
    if (!verified.ok()) {
      if (verified.error().code != ErrorCode::kUnauthenticated) {
        log("api: webhook: " + verified.error().message);
        return send_error(res, HttpErrorCode::kInternal, "the webhook secrets are misconfigured");
      }
      return send_error(res, HttpErrorCode::kUnauthenticated, verified.error().message);
    }
    Result<bool> first = agent.store().remember_once(verified->replay_key, verified->retain_for_ms);
    if (!first.ok()) return fail_store(res, first.error(), "webhook replay guard");
    if (!*first) {
      return send_error(res, HttpErrorCode::kUnauthenticated,
                        "this signed request was already delivered (replay)");
    }
    Result<WebhookRefreshRequest> parsed = parse_webhook_refresh(req.body);
    if (!parsed.ok()) {
      return send_error(res,
                        parsed.error().code == ErrorCode::kTooLarge
                            ? HttpErrorCode::kPayloadTooLarge
                            : HttpErrorCode::kBadRequest,
                        parsed.error().message);
    }
    const AgentConfig& config = agent.config();
    std::vector<WebhookRefreshResult> results;
    for (const WebhookRefreshTarget& target : parsed->targets) {
      const ConnectionConfig* conn = config.find_connection(target.connection_id);
      if (conn == nullptr) {
        results.push_back({target.connection_id, std::nullopt, "unknown_connection", false});
        continue;
      }
      std::vector<Principal> principals = conn->principals();
      if (target.principal) {
        bool known =
            std::find(principals.begin(), principals.end(), *target.principal) != principals.end();
        if (!known) {
          results.push_back({target.connection_id, target.principal, "unknown_principal", false});
          continue;
        }
        principals = {*target.principal};
      }
      for (const Principal& p : principals) {
        // Marked stale first: a reader between the two sees `stale`, never a fresh answer
        // that predates the change.
        Result<bool> marked = agent.store().invalidate_manifest(conn->id, p);
        Result<EnqueueOutcome> outcome = marked.ok() ? agent.request_refresh(conn->id, p, "webhook")
                                                     : Result<EnqueueOutcome>(marked.error());
        if (!outcome.ok()) {
          log("api: webhook refresh of " + conn->id + " (" + p.str() +
              "): " + outcome.error().message);
        }
        results.push_back({conn->id, p, outcome.ok() ? enqueue_outcome_name(*outcome) : "error",
                           marked.ok() && *marked});
      }
    }
    log("api: webhook accepted (" + std::to_string(parsed->targets.size()) + " target(s), reason " +
        parsed->targets.front().reason + ")");
    HttpResponse accepted;
    accepted.status = 202;
    accepted.headers = {{"Content-Type", "application/json"}, {"Cache-Control", "no-store"}};
    accepted.body = webhook_accepted_body(results);
    send(accepted, res);
  }

  // ---- wiring: every route, hook and limit in one place ----

  void register_routes() {
    httplib::Server& s = server;
    auto discovery_route = [this](const httplib::Request& req, httplib::Response& res) {
      discovery_exchange(req, res);
    };
    const std::string id = R"(/v1/mcp-connections/([^/]+))";

    s.Get("/healthz", [this](const auto& req, auto& res) { healthz(req, res); });
    s.Get("/metrics", [this](const auto& req, auto& res) { metrics(req, res); });

    // Discovery (shared/discovery_http.h; the edge serves the same).
    s.Get("/v1/manifests", discovery_route);
    s.Get("/v1/search", discovery_route);
    s.Get(id + "/manifest", discovery_route);
    s.Post(id + "/refresh-tools", discovery_route);

    // The agent's own.
    s.Get("/v1/mcp-connections", authed([this](const auto& req, auto& res, const Principal& m) {
            list_connections(req, res, m);
          }));
    s.Post(id + "/test", authed([this](const auto& req, auto& res, const Principal& m) {
             test_connection(req, res, m);
           }));
    s.Post(id + "/evidence", authed([this](const auto& req, auto& res, const Principal& m) {
             evidence(req, res, m);
           }));
    s.Get(id + "/preferences", authed([this](const auto& req, auto& res, const Principal& m) {
            get_preferences(req, res, m);
          }));
    auto set = authed(
        [this](const auto& req, auto& res, const Principal& m) { set_preferences(req, res, m); });
    s.Put(id + "/preferences", set);
    s.Patch(id + "/preferences", set);
    s.Post(kWebhookRefreshPath, [this](const auto& req, auto& res) { webhook(req, res); });

    s.set_pre_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!t_shedding) return httplib::Server::HandlerResponse::Unhandled;
      send(overloaded_response(), res);
      return httplib::Server::HandlerResponse::Handled;
    });
    // Routing misses and httplib's own refusals (413 over the body limit, 400 for a bad request
    // line) get the JSON error shape too; a handler's own errors already have a body.
    s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      HttpErrorCode code = res.status == 404   ? HttpErrorCode::kNotFound
                           : res.status == 405 ? HttpErrorCode::kMethodNotAllowed
                           : res.status == 413 ? HttpErrorCode::kPayloadTooLarge
                           : res.status == 414 ? HttpErrorCode::kUriTooLong
                           : res.status >= 500 ? HttpErrorCode::kInternal
                                               : HttpErrorCode::kBadRequest;
      int status = res.status;
      send(error_response(code, code == HttpErrorCode::kNotFound ? "no such endpoint"
                                                                 : "the request was refused"),
           res);
      res.status = status;
    });
    s.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "an unknown exception";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          log("api: " + req.method + " " + req.path + ": " + what);
          res = httplib::Response();
          send_error(res, HttpErrorCode::kInternal, "internal error");
        });

    s.set_tcp_nodelay(true);
    s.set_read_timeout(std::chrono::milliseconds(options.read_timeout_ms));
    s.set_write_timeout(std::chrono::milliseconds(options.write_timeout_ms));
    s.set_keep_alive_timeout(std::max<time_t>(1, options.keep_alive_timeout_ms / 1000));
    s.set_keep_alive_max_count(options.keep_alive_max_requests);
    s.set_payload_max_length(options.max_body_bytes);
    s.new_task_queue = [this] {
      return new BoundedTaskQueue(options.worker_threads, options.max_queued_requests,
                                  options.max_shed_queue, &shed);
    };
  }
};

ApiServer::ApiServer(AgentService& agent, ApiServerOptions options)
    : impl_(std::make_unique<Impl>(agent, std::move(options))) {}

ApiServer::~ApiServer() { stop(); }

Status ApiServer::start() {
  Impl& s = *impl_;
  if (s.started) return Error(ErrorCode::kInvalidArgument, "api server: already started");
  if (s.options.worker_threads < 1 || s.options.max_queued_requests < 1 ||
      s.options.max_shed_queue < 1 || s.options.read_timeout_ms < 1 ||
      s.options.write_timeout_ms < 1 || s.options.max_body_bytes < 1 || !s.options.now_ms) {
    return Error(ErrorCode::kInvalidArgument, "api server: invalid options");
  }
  const AgentConfig& config = s.agent.config();

  std::vector<Keyring::Key> keys;
  for (const auto& [kid, secret] : config.caller_token_keys) keys.push_back({kid, secret.reveal()});
  if (keys.empty()) {
    s.keyring_problem = "the agent has no caller_token_keys configured: no token is accepted";
  } else {
    Result<Keyring> ring = Keyring::create(std::move(keys));
    if (!ring.ok()) return ring.error();
    s.keyring = std::move(*ring);
  }
  s.verify.ns = config.ns;
  for (const auto& [name, secret] : config.webhook_secrets) {
    if (secret.reveal().size() < kMinWebhookSecretBytes) {
      return Error(ErrorCode::kInvalidArgument,
                   "quiver.webhook_secrets." + name + ": shorter than " +
                       std::to_string(kMinWebhookSecretBytes) + " bytes");
    }
    s.webhook_secrets.push_back(secret.reveal());
  }
  s.operators = config.operators;

  s.searcher = std::make_unique<LockedSearcher>(s.options.search_cache_entries,
                                                s.options.search_cache_bytes);
  s.discovery.freshness = config.runtime.freshness_policy();
  s.discovery.render.max_cache_age_s = s.options.max_cache_age_s;
  s.discovery.render.max_manifest_bytes = std::max<std::size_t>(
      std::size_t{1} << 20, static_cast<std::size_t>(config.runtime.max_manifest_bytes) * 2);
  s.discovery.searcher = s.searcher.get();
  s.discovery.render.cache = &s.render_cache;

  s.register_routes();
  // httplib's default sets SO_REUSEPORT: a second agent on a port in use would then bind too
  // and silently take half the connections. SO_REUSEADDR alone only allows a restart over
  // connections still in TIME_WAIT; a port someone listens on is refused.
  s.server.set_socket_options([](socket_t sock) {
    int yes = 1;
    (void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const std::string& host = s.options.listen.host;
  if (s.options.listen.port == 0) {
    s.bound_port = s.server.bind_to_any_port(host);
    if (s.bound_port <= 0) s.bound_port = 0;
  } else if (s.server.bind_to_port(host, s.options.listen.port)) {
    s.bound_port = s.options.listen.port;
  }
  if (s.bound_port == 0) {
    return Error(ErrorCode::kUnavailable, "api server: cannot listen on " +
                                              s.options.listen.describe() +
                                              " (address in use or not local)");
  }
  s.started = true;
  s.bg_thread = std::thread([&s] { s.run_background(); });
  s.listener = std::thread([&s] {
    s.server.listen_after_bind();
    s.listener_done = true;
  });
  // httplib's stop() does nothing until the listener runs: wait for it, so that a stop() right
  // after start() cannot miss it (and leave the listener waiting in accept forever).
  while (!s.server.is_running() && !s.listener_done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!s.server.is_running()) {
    stop();
    return Error(ErrorCode::kUnavailable, "api server: the listener stopped at once");
  }
  return Status::Ok();
}

void ApiServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped.exchange(true)) return;
  s.server.stop();
  if (s.listener.joinable()) s.listener.join();
  {
    std::lock_guard<std::mutex> lock(s.bg_mu);
    s.bg_stop = true;
  }
  s.bg_cv.notify_all();
  if (s.bg_thread.joinable()) s.bg_thread.join();
}

int ApiServer::port() const { return impl_->bound_port; }

std::string ApiServer::base_url() const {
  const std::string& host = impl_->options.listen.host;
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (h == "0.0.0.0") h = "127.0.0.1";
  if (h == "[::]") h = "[::1]";
  return "http://" + h + ":" + std::to_string(impl_->bound_port);
}

}  // namespace quiver
