#include "native-agent/api_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <httplib.h>

#include "native-agent/http_front.h"
#include "native-agent/locked_render_cache.h"
#include "native-agent/metrics.h"
#include "shared/ascii.h"
#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/json.h"
#include "shared/preferences.h"
#include "shared/search_index.h"
#include "shared/utf8.h"
#include "shared/webhook_exchange.h"
#include "shared/webhook_signature.h"

namespace quiver {

namespace {

constexpr char kJson[] = "application/json";
constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

// ---- small helpers -----------------------------------------------------------------------------

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

// The body is moved: an answer is sent once.
void send(HttpResponse&& from, httplib::Response& to) {
  to.status = from.status;
  std::string content_type;
  for (const auto& [name, value] : from.headers) {
    if (ascii_iequals(name, "Content-Type")) {
      content_type = value;
    } else {
      to.set_header(name, value);
    }
  }
  if (!from.body.empty() || !content_type.empty()) {
    to.headers.erase("Content-Type");  // what set_content does, without copying the body
    to.set_header("Content-Type", content_type.empty() ? kJson : content_type.c_str());
    to.body = std::move(from.body);
  }
}
void send(const HttpResponse& from, httplib::Response& to) { send(HttpResponse(from), to); }

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

// The raw query of a request (after '?', still percent-encoded), as the core parses it.
std::string_view raw_query(const httplib::Request& req) {
  std::size_t q = req.target.find('?');
  return q == std::string::npos ? std::string_view() : std::string_view(req.target).substr(q + 1);
}

// Query parameters of an agent-owned endpoint, checked by the core's parser (the discovery
// endpoints' rules: only `allowed` ones, each once, never a principal).
QueryParams check_params(const httplib::Request& req, std::initializer_list<const char*> allowed) {
  return parse_query_params(raw_query(req), allowed);
}

// The request as the core's exchanges take it: the raw path and query as they arrived.
HttpRequest core_request(const httplib::Request& req) {
  HttpRequest request;
  request.method = req.method;
  std::size_t q = req.target.find('?');
  request.path = req.target.substr(0, q);
  request.query = std::string(raw_query(req));
  for (const auto& [name, value] : req.headers) request.headers.emplace_back(name, value);
  request.body = req.body;
  return request;
}

// Errors the front refuses with before any handler runs, in the API's JSON error shape: the
// statuses discovery_http.h names keep their codes, the others get one here.
HttpResponse refusal_response(int status, const std::string& message) {
  switch (status) {
    case 400: return error_response(HttpErrorCode::kBadRequest, message);
    case 413: return error_response(HttpErrorCode::kPayloadTooLarge, message);
    case 414: return error_response(HttpErrorCode::kUriTooLong, message);
    case 500: return error_response(HttpErrorCode::kInternal, message);
    default: break;
  }
  const char* code = status == 408   ? "REQUEST_TIMEOUT"
                     : status == 415 ? "UNSUPPORTED_MEDIA_TYPE"
                     : status == 417 ? "EXPECTATION_FAILED"
                     : status == 421 ? "MISDIRECTED_REQUEST"
                     : status == 431 ? "HEADERS_TOO_LARGE"
                     : status == 501 ? "NOT_IMPLEMENTED"
                     : status == 505 ? "HTTP_VERSION_NOT_SUPPORTED"
                                     : "BAD_REQUEST";
  return json_response(
      status, Json::object({{"error", Json::object({{"code", code}, {"message", message}})}}));
}

Http1Response to_http1(HttpResponse r) {
  Http1Response out;
  out.status = r.status;
  out.headers = std::move(r.headers);
  out.body = std::move(r.body);
  return out;
}

bool is_loopback_ipv4(const std::string& h) {
  in_addr a{};
  return ::inet_pton(AF_INET, h.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// Whether a request's Host names this server: a loopback name or address, the configured listen
// host, or the address the connection arrived on (an IP literal never rebinds). Any other name is
// what a browser page sends when it reaches a loopback service by DNS rebinding: refused (421),
// whatever the endpoint. An HTTP/1.0 request without Host is let through (browsers always send
// one; HTTP/1.1 requires it, and the parser refuses a 1.1 request without it).
bool host_allowed(const std::string* host_header, const std::string& listen_host,
                  const HttpPeer& peer) {
  if (host_header == nullptr) return true;
  std::string host = ascii_lower(*host_header);
  if (!host.empty() && host.front() == '[') {
    std::size_t close = host.find(']');
    if (close == std::string::npos) return false;
    std::string rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    host = host.substr(1, close - 1);
  } else if (std::size_t colon = host.rfind(':'); colon != std::string::npos) {
    if (host.find(':') != colon) return false;  // an IPv6 literal needs brackets
    host.resize(colon);
  }
  if (!host.empty() && host.back() == '.') host.pop_back();
  if (host.empty()) return false;
  if (host == "localhost" || host == "::1" || is_loopback_ipv4(host)) return true;
  const std::string listen = ascii_lower(listen_host);
  if (host == listen && listen != "0.0.0.0" && listen != "::") return true;
  std::string local = ascii_lower(peer.local_addr);
  if (local.rfind("::ffff:", 0) == 0 && local.find('.') != std::string::npos) local.erase(0, 7);
  return !local.empty() && host == local;
}

// Every route in one table: method, a whole-path pattern and a handler that reads cpp-httplib's
// plain Request/Response types. A pattern is '/'-separated segments, each literal or `{}` (any
// non-empty segment: handlers read it with path_segment). Matching compares segments, no regex:
// std::regex cost as much per request as the rest of the routing and authentication together.
// The capitalized methods keep cpp-httplib's names, so that the routes read as they did.
class Router {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  enum class Found { kRoute, kNoPath, kNoMethod };

  void Get(const std::string& pattern, Handler h) { add("GET", pattern, std::move(h)); }
  void Post(const std::string& pattern, Handler h) { add("POST", pattern, std::move(h)); }
  void Put(const std::string& pattern, Handler h) { add("PUT", pattern, std::move(h)); }
  void Patch(const std::string& pattern, Handler h) { add("PATCH", pattern, std::move(h)); }

  // The handler of req's method and path (HEAD is GET without the body); otherwise why not, and
  // for kNoMethod the methods the path takes (`allow`).
  const Handler* find(const httplib::Request& req, Found* found, std::string* allow) const {
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    const std::vector<std::string_view> path = split(req.path);
    *found = Found::kNoPath;
    for (const Route& r : routes_) {
      if (!matches(r.segments, path)) continue;
      if (r.method == method) {
        *found = Found::kRoute;
        return &r.handler;
      }
      *found = Found::kNoMethod;
      *allow += (allow->empty() ? "" : ", ") + r.method;
    }
    return nullptr;
  }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;  // "{}": any non-empty segment
    Handler handler;
  };
  static std::vector<std::string_view> split(std::string_view path) {
    std::vector<std::string_view> out;
    if (path.empty() || path[0] != '/') return out;
    path.remove_prefix(1);
    for (;;) {
      std::size_t slash = path.find('/');
      out.push_back(path.substr(0, slash));
      if (slash == std::string_view::npos) return out;
      path.remove_prefix(slash + 1);
    }
  }
  static bool matches(const std::vector<std::string>& pattern,
                      const std::vector<std::string_view>& path) {
    if (pattern.size() != path.size()) return false;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == "{}" ? path[i].empty() : pattern[i] != path[i]) return false;
    }
    return true;
  }
  void add(const char* method, const std::string& pattern, Handler h) {
    std::vector<std::string> segments;
    for (std::string_view seg : split(pattern)) segments.emplace_back(seg);
    routes_.push_back(Route{method, std::move(segments), std::move(h)});
  }
  std::vector<Route> routes_;
};

// Segment `index` of a path that matched a route ("/v1/mcp-connections/x/test": 2 is "x").
std::string path_segment(std::string_view path, std::size_t index) {
  if (!path.empty() && path[0] == '/') path.remove_prefix(1);
  for (std::size_t i = 0; i < index; ++i) {
    std::size_t slash = path.find('/');
    if (slash == std::string_view::npos) return "";
    path.remove_prefix(slash + 1);
  }
  return std::string(path.substr(0, path.find('/')));
}

// RAII: one of a bounded number of slots (the concurrent connection tests), or none.
class Slot {
 public:
  Slot(std::atomic<int>& in_use, int max) : in_use_(in_use) {
    held_ = in_use_.fetch_add(1) < max;
    if (!held_) in_use_.fetch_sub(1);
  }
  ~Slot() {
    if (held_) in_use_.fetch_sub(1);
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  bool held() const { return held_; }

 private:
  std::atomic<int>& in_use_;
  bool held_ = false;
};

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
  Router router;
  std::unique_ptr<HttpFront> front;
  int bound_port = 0;
  bool started = false;
  std::atomic<bool> stopped{false};

  std::optional<Keyring> keyring;
  std::string keyring_problem;  // why there is none
  VerifyOptions verify;
  mutable std::mutex tokens_mu;
  mutable VerifiedTokenCache tokens;  // bearer tokens already verified; shared by the workers
  std::vector<std::string> webhook_secrets;
  std::set<std::string> operators;  // quiver.operators: may toggle shared connections

  std::unique_ptr<LockedSearcher> searcher;
  LockedRenderCache render_cache;  // each servable entry's rendered payload, for every thread
  DiscoveryConfig discovery;

  std::atomic<int> tests_running{0};  // POST .../test calls in flight (options.max_concurrent_tests)

  // Stale-while-revalidate requests, queued after the answer went out.
  std::mutex bg_mu;
  std::condition_variable bg_cv;
  std::deque<Revalidation> bg_queue;
  bool bg_stop = false;
  std::thread bg_thread;

  // Routine events, not problems (INFO where `log` is WARN).
  void note(const std::string& line) const {
    if (options.log_info) return options.log_info(agent.config().redact(line));
    log(line);
  }

  void log(const std::string& line) const {
    if (options.log) options.log(agent.config().redact(line));
  }

  // ---- authentication: the one place a request becomes a member ----

  CallerAuth authenticate(const httplib::Request& req) const {
    HttpHeaders headers;
    for (const auto& [name, value] : req.headers) headers.emplace_back(name, value);
    std::lock_guard<std::mutex> lock(tokens_mu);
    return authenticate_caller(headers, keyring ? &*keyring : nullptr, options.now_ms(), verify,
                               keyring_problem, &tokens);
  }

  // Wraps a handler of an authenticated endpoint: 401 unless the bearer token names a member.
  using MemberHandler =
      std::function<void(const httplib::Request&, httplib::Response&, const Principal& member)>;
  Router::Handler authed(MemberHandler handler) {
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
          code == HttpErrorCode::kInternal ? "internal error" : store_unavailable_message(e));
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
    Result<RevalidationOutcome> outcome =
        agent.request_refresh(r.connection_id, r.principal, trigger_for(r.reason));
    if (!outcome.ok()) return outcome.error();
    RevalidationResult out;
    out.outcome = *outcome;
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
    const HttpRequest request = core_request(req);
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
        send(std::move(done.response), res);
        queue_background(std::move(done.background));
        return;
      }
    }
    log("api: " + request.path + ": the discovery exchange did not finish");
    send_error(res, HttpErrorCode::kInternal, "internal error");
  }

  // ---- agent-owned endpoints ----

  // Without a valid token: only ok / unavailable. Where the store is (a Redis host, user and
  // namespace, a SQLite path) and why it fails only to an authenticated caller.
  void healthz(const httplib::Request& req, httplib::Response& res) {
    const bool details = req.has_header("Authorization") && authenticate(req).member_id;
    Status health = agent.store().health();
    if (!health.ok()) {
      log("api: healthz: " + health.error().message);
      HttpResponse r = error_response(
          HttpErrorCode::kStoreUnavailable,
          details ? "the cache store is unavailable: " + health.error().message
                  : std::string("the cache store is unavailable"));
      return send(r, res);
    }
    // The namespace record: a store that lost its data (restarted empty, flushed) answers PING
    // but holds nothing to serve until an agent restores it; discovery answers 503 meanwhile.
    Result<NamespaceRecord> ns = agent.store().read_namespace();
    if (!ns.ok() || ns->state != NamespaceState::kReady) {
      const std::string state = !ns.ok()                                   ? "unknown"
                                : ns->state == NamespaceState::kMissing ? "namespace_missing"
                                                                          : "restoring";
      if (!ns.ok()) log("api: healthz: " + ns.error().message);
      HttpResponse r = error_response(
          HttpErrorCode::kStoreUnavailable,
          state == "namespace_missing"
              ? "the store lost this namespace (restarted empty or flushed); an agent is restoring it"
              : "the store's namespace is being restored");
      Result<Json> parsed = parse_json(r.body);
      if (parsed.ok() && parsed->is_object()) {
        (*parsed)["status"] = "restoring";
        (*parsed)["store"] = state;
        r.body = json_text(*parsed);
      }
      return send(r, res);
    }
    Json body = Json::object({{"status", "ok"}});
    if (std::optional<int64_t> skew = agent.metrics().clock_skew_ms()) {
      body["clock_skew_ms"] = *skew;  // this agent's clock minus the store's
    }
    if (details) body["store"] = agent.store().describe();
    send(json_response(200, body), res);
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
    text += "quiver_api_shed_total " + std::to_string(front ? front->shed_count() : 0) + "\n";
    res.set_content(text, kPrometheusText);
  }

  void list_connections(const httplib::Request& req, httplib::Response& res,
                        const Principal& member) {
    QueryParams params = check_params(req, {"after", "limit"});
    if (params.error) return send_error(res, HttpErrorCode::kBadRequest, *params.error);
    SnapshotQuery query;
    query.limit = discovery.limits.max_page_size;
    if (const std::string* v = params.find("limit")) {
      std::optional<std::size_t> n = parse_count_param(
          *v, 1, std::min(discovery.limits.max_page_size, kMaxSnapshotLimit));
      if (!n) {
        return send_error(
            res, HttpErrorCode::kBadRequest,
            "limit must be between 1 and " + std::to_string(discovery.limits.max_page_size));
      }
      query.limit = *n;
    }
    if (const std::string* v = params.find("after")) {
      query.after = *v;
      if (!validate_connection_id(query.after).ok()) {
        return send_error(res, HttpErrorCode::kBadRequest, "after must be a connection id");
      }
    }
    Result<DiscoverySnapshot> snap = snapshot(member, query);
    if (!snap.ok()) return fail_store(res, snap.error(), "GET /v1/mcp-connections");
    // The same classification the discovery endpoints serve, without the manifests themselves:
    // one batched read, no query per connection.
    ConnectionList list =
        connection_list(*snap, discovery.freshness, options.now_ms(), discovery.render);
    count(list.stats);
    send(json_response(200, list.body), res);
    queue_background(std::move(list.revalidations));
  }

  void test_connection(const httplib::Request& req, httplib::Response& res,
                       const Principal& member) {
    if (QueryParams q = check_params(req, {}); q.error) {
      return send_error(res, HttpErrorCode::kBadRequest, *q.error);
    }
    const std::string cid = path_segment(req.path, 2);  // /v1/mcp-connections/{}/...
    Result<GrantedConnection> conn = granted(member, cid);
    if (!conn.ok()) return fail_store(res, conn.error(), "test");
    // Each test spawns a child or opens a connection outside the pool and holds a worker for up
    // to the listing deadline: only a few at a time, the rest are told to retry.
    Slot slot(tests_running, options.max_concurrent_tests);
    if (!slot.held()) return send(overloaded_response(), res);
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
    if (QueryParams q = check_params(req, {}); q.error) {
      return send_error(res, HttpErrorCode::kBadRequest, *q.error);
    }
    const std::string cid = path_segment(req.path, 2);  // /v1/mcp-connections/{}/...
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
    Result<RevalidationOutcome> outcome = agent.request_refresh(cid, *conn->principal, "evidence");
    if (!outcome.ok()) return fail_store(res, outcome.error(), "evidence");
    log("api: evidence (" + *kind + ") for " + cid + " (" + conn->principal->str() + "): refresh " +
        revalidation_outcome_name(*outcome));
    send(json_response(202, Json::object({{"status", revalidation_outcome_name(*outcome)}})), res);
  }

  // Preferences are the caller's principal's (conn.principal: `shared` on a shared connection, the
  // caller on a per-member one). Another member's rows are never read, so a key only they listed
  // answers exactly like a key nobody listed.
  void get_preferences(const httplib::Request& req, httplib::Response& res,
                       const Principal& member) {
    if (QueryParams q = check_params(req, {}); q.error) {
      return send_error(res, HttpErrorCode::kBadRequest, *q.error);
    }
    const std::string cid = path_segment(req.path, 2);  // /v1/mcp-connections/{}/...
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
    if (QueryParams q = check_params(req, {}); q.error) {
      return send_error(res, HttpErrorCode::kBadRequest, *q.error);
    }
    const std::string cid = path_segment(req.path, 2);  // /v1/mcp-connections/{}/...
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

  // Signed with X-Quiver-Signature; no bearer token. The checks and their order are the core's
  // (shared/webhook_exchange.h), as at the edge; then the replay guard and the refreshes.
  void webhook(const httplib::Request& req, httplib::Response& res) {
    WebhookCheck check = check_webhook(core_request(req), webhook_secrets, agent.config().ns,
                                       options.now_ms(),
                                       "webhooks are off: quiver.webhook_secrets names no secret");
    if (auto* refused = std::get_if<WebhookRefusal>(&check)) {
      if (!refused->log.empty()) {
        if (refused->response.status >= 500) {
          log("api: " + refused->log);
        } else {
          note("api: " + refused->log);  // a refused sender: routine, not a problem here
        }
      }
      return send(refused->response, res);
    }
    const WebhookChecked& checked = std::get<WebhookChecked>(check);
    const WebhookVerified* verified = &checked.verified;
    const WebhookRefreshRequest* parsed = &checked.request;
    if (verified->legacy_v1) log(std::string("api: ") + kWebhookV1DeprecatedLog);
    // As the edge's webhook_refresh.lua: a namespace the store lost (or an agent is restoring) is
    // 503, before the replay guard, so the sender's retry of this very request is not a replay.
    if (Status ready = namespace_ready(agent.store()); !ready.ok()) {
      log("api: webhook: " + ready.error().message);
      return send(webhook_store_failed_response(ready.error()), res);
    }
    Result<bool> first = agent.store().remember_once(verified->replay_key, verified->retain_for_ms);
    if (!first.ok()) {
      log("api: webhook replay guard: " + first.error().message);
      return send(webhook_store_failed_response(first.error()), res);
    }
    if (!*first) return send(webhook_replay_response(), res);
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
        Result<RevalidationOutcome> outcome = marked.ok() ? agent.request_refresh(conn->id, p, "webhook")
                                                     : Result<RevalidationOutcome>(marked.error());
        if (!outcome.ok()) {
          log("api: webhook refresh of " + conn->id + " (" + p.str() +
              "): " + outcome.error().message);
        }
        results.push_back({conn->id, p, outcome.ok() ? revalidation_outcome_name(*outcome) : "error",
                           marked.ok() && *marked});
      }
    }
    note("api: webhook accepted (" + std::to_string(parsed->targets.size()) + " target(s), reason " +
        parsed->targets.front().reason + ")");
    send(webhook_accepted_response(results), res);
  }

  // ---- wiring: every route, hook and limit in one place ----

  void register_routes() {
    Router& s = router;
    const std::string id = "/v1/mcp-connections/{}";

    s.Get("/healthz", [this](const auto& req, auto& res) { healthz(req, res); });
    s.Get("/metrics", [this](const auto& req, auto& res) { metrics(req, res); });

    // Discovery and the webhook are routed by the core before this table (serve): the edge
    // serves the same.

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
  }

  // One request, on a front worker: Host checked, routed, the handler run, every escaping
  // exception a 500 whose detail goes to the log. The front (native-agent/http_front.h) has
  // already refused what breaks a bound, and sheds what no worker can take.
  Http1Response serve(const Http1Request& in, const HttpPeer& peer) {
    if (!host_allowed(in.header("Host"), options.listen.host, peer)) {
      return to_http1(refusal_response(
          421, "the Host header names neither a loopback address nor this agent's listen address"));
    }
    httplib::Request req;
    req.method = in.method;
    req.target = in.target;
    req.version = in.minor_version == 0 ? "HTTP/1.0" : "HTTP/1.1";
    std::size_t q = in.target.find('?');
    req.path = httplib::detail::decode_url(in.target.substr(0, q), false);
    if (q != std::string::npos) httplib::detail::parse_query_text(in.target.substr(q + 1), req.params);
    for (const auto& [name, value] : in.headers) req.headers.emplace(name, value);
    req.body = in.body;
    req.remote_addr = peer.remote_addr;
    req.remote_port = peer.remote_port;
    req.local_addr = peer.local_addr;
    req.local_port = peer.local_port;

    httplib::Response res;
    Router::Found found = Router::Found::kNoPath;
    std::string allow;
    // The shared endpoints, routed by the core on the raw path (shared/discovery_http.h), as the
    // edge routes them; then the agent's own.
    const SharedRoute shared = match_shared_route(in.target.substr(0, q)).route;
    Router::Handler core_handler;
    if (shared == SharedRoute::kWebhook) {
      core_handler = [this](const httplib::Request& r, httplib::Response& out) { webhook(r, out); };
    } else if (shared != SharedRoute::kNone) {
      core_handler = [this](const httplib::Request& r, httplib::Response& out) {
        discovery_exchange(r, out);
      };
    }
    const Router::Handler* handler =
        core_handler ? &core_handler : router.find(req, &found, &allow);
    if (core_handler) found = Router::Found::kRoute;
    if (found == Router::Found::kNoMethod) res.set_header("Allow", allow);
    if (handler == nullptr) {
      send_error(res,
                 found == Router::Found::kNoMethod ? HttpErrorCode::kMethodNotAllowed
                                                   : HttpErrorCode::kNotFound,
                 found == Router::Found::kNoMethod ? "this endpoint does not take " + req.method
                                                   : std::string("no such endpoint"));
    } else {
      try {
        (*handler)(req, res);
      } catch (const std::exception& e) {
        log("api: " + req.method + " " + req.path + ": " + e.what());
        res = httplib::Response();
        send_error(res, HttpErrorCode::kInternal, "internal error");
      } catch (...) {
        log("api: " + req.method + " " + req.path + ": an unknown exception");
        res = httplib::Response();
        send_error(res, HttpErrorCode::kInternal, "internal error");
      }
    }
    Http1Response out;
    out.status = res.status < 0 ? 200 : res.status;
    for (const auto& [name, value] : res.headers) out.headers.emplace_back(name, value);
    out.body = std::move(res.body);
    return out;
  }
};

ApiServer::ApiServer(AgentService& agent, ApiServerOptions options)
    : impl_(std::make_unique<Impl>(agent, std::move(options))) {}

ApiServer::~ApiServer() { stop(); }

Status ApiServer::start() {
  Impl& s = *impl_;
  if (s.started) return Error(ErrorCode::kInvalidArgument, "api server: already started");
  if (s.options.worker_threads < 1 || s.options.max_queued_requests < 1 ||
      s.options.header_timeout_ms < 1 || s.options.body_timeout_ms < 1 ||
      s.options.write_timeout_ms < 1 || s.options.max_body_bytes < 1 ||
      s.options.max_concurrent_tests < 1 || !s.options.now_ms) {
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
  HttpFrontOptions front;
  front.host = s.options.listen.host;
  front.port = s.options.listen.port;
  front.worker_threads = s.options.worker_threads;
  front.max_queued_requests = s.options.max_queued_requests;
  front.limits.max_body_bytes = s.options.max_body_bytes;
  front.header_timeout_ms = s.options.header_timeout_ms;
  front.body_timeout_ms = s.options.body_timeout_ms;
  front.keep_alive_timeout_ms = s.options.keep_alive_timeout_ms;
  front.write_timeout_ms = s.options.write_timeout_ms;
  front.keep_alive_max_requests = s.options.keep_alive_max_requests;
  front.max_connections = s.options.max_connections;
  front.max_connections_per_peer = s.options.max_connections_per_peer;
  s.front = std::make_unique<HttpFront>(
      front, [&s](const Http1Request& req, const HttpPeer& peer) { return s.serve(req, peer); },
      [](int status, const std::string& message) {
        return to_http1(refusal_response(status, message));
      },
      [] { return to_http1(overloaded_response()); });
  Status listening = s.front->start();
  if (!listening.ok()) {
    s.front.reset();
    return Error(ErrorCode::kResourceUnavailable, "api server: " + listening.error().message);
  }
  s.bound_port = s.front->port();
  s.started = true;
  s.bg_thread = std::thread([&s] { s.run_background(); });
  return Status::Ok();
}

void ApiServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped.exchange(true)) return;
  s.front->stop();
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
