#include "native-agent/api/api_server.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>

#include "native-agent/api/api_context.h"
#include "native-agent/api/api_handlers.h"
#include "native-agent/api/api_http.h"
#include "native-agent/api/http_front.h"
#include "native-agent/engine/mcp_calls.h"
#include "native-agent/engine/tracer.h"
#include "shared/caller_token.h"
#include "shared/discovery_http.h"
#include "shared/mcp_endpoint.h"
#include "shared/oauth_callback.h"
#include "shared/webhook_signature.h"

namespace quiver {

using api::ApiContext;
using api::LockedSearcher;
using api::overloaded_response;
using api::refusal_response;
using api::Router;
using api::send_error;
using api::to_http1;

ApiServerOptions api_server_options(const AgentConfig& config) {
  ApiServerOptions options;
  options.listen = config.listen;
  return options;
}

// ---- the server --------------------------------------------------------------------------------

struct ApiServer::Impl : ApiContext {
  Impl(AgentService& a, ApiServerOptions o) : ApiContext(a, std::move(o)) {}

  Router router;
  int bound_port = 0;
  bool started = false;
  std::atomic<bool> stopped{false};

  // The caller of a request, or nullopt when the 401 has been sent.
  std::optional<api::Caller> caller_of(const httplib::Request& req, httplib::Response& res) {
    CallerAuth caller = authenticate(req);
    if (!caller.member_id) {
      send_error(res, HttpErrorCode::kUnauthenticated, caller.failure);
      return std::nullopt;
    }
    Result<Principal> member = Principal::member(*caller.member_id);
    if (!member.ok()) {
      send_error(res, HttpErrorCode::kUnauthenticated, "the token names no valid member");
      return std::nullopt;
    }
    return api::Caller{std::move(*member), caller.operator_claim};
  }

  // Wraps a handler of an authenticated endpoint: 401 unless the bearer token names a member.
  using MemberHandler =
      std::function<void(const httplib::Request&, httplib::Response&, const Principal& member)>;
  Router::Handler authed(MemberHandler handler) {
    return authed_caller([handler = std::move(handler)](
                             const httplib::Request& req, httplib::Response& res,
                             const api::Caller& caller) { handler(req, res, caller.member); });
  }
  using CallerHandler =
      std::function<void(const httplib::Request&, httplib::Response&, const api::Caller&)>;
  Router::Handler authed_caller(CallerHandler handler) {
    return
        [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
          if (std::optional<api::Caller> caller = caller_of(req, res)) handler(req, res, *caller);
        };
  }

  // Wraps a handler of an operators-only endpoint (the admin API, the status page's data): 401
  // without a valid token, 403 "operators only" for a member who is not an operator
  // (ApiContext::is_operator), 503 when the store cannot say.
  Router::Handler operator_only(CallerHandler handler) {
    return authed_caller([this, handler = std::move(handler)](const httplib::Request& req,
                                                              httplib::Response& res,
                                                              const api::Caller& caller) {
      Result<bool> allowed = is_operator(caller);
      if (!allowed.ok()) return fail_store(res, allowed.error(), "operator check");
      if (!*allowed) return send_error(res, HttpErrorCode::kForbidden, "operators only");
      handler(req, res, caller);
    });
  }

  // ---- wiring: every route, hook and limit in one place ----

  void register_routes() {
    Router& s = router;
    const std::string id = "/v1/mcp-connections/{}";

    s.Get("/healthz", [this](const auto& req, auto& res) { api::healthz(*this, req, res); });
    s.Get("/metrics", [this](const auto& req, auto& res) { api::metrics(*this, req, res); });

    // Discovery and the webhook are routed by the core before this table (serve): the edge
    // serves the same.

    // The agent's own.
    s.Get("/v1/mcp-connections", authed([this](const auto& req, auto& res, const Principal& m) {
            api::list_connections(*this, req, res, m);
          }));
    s.Post(id + "/test", authed([this](const auto& req, auto& res, const Principal& m) {
             api::test_connection(*this, req, res, m);
           }));
    s.Post(id + "/evidence", authed([this](const auto& req, auto& res, const Principal& m) {
             api::evidence(*this, req, res, m);
           }));
    s.Get(id + "/preferences", authed([this](const auto& req, auto& res, const Principal& m) {
            api::get_preferences(*this, req, res, m);
          }));
    auto set = authed_caller([this](const auto& req, auto& res, const api::Caller& c) {
      api::set_preferences(*this, req, res, c);
    });
    s.Put(id + "/preferences", set);
    s.Patch(id + "/preferences", set);

    // OAuth connections (api_oauth.cpp). The callback has no caller token: the browser comes from
    // the authorization server, and the state authenticates it.
    s.Post(id + "/authorize",
           authed_caller([this](const auto& req, auto& res, const api::Caller& c) {
             api::oauth_authorize(*this, req, res, c);
           }));
    s.Delete(id + "/authorization",
             authed_caller([this](const auto& req, auto& res, const api::Caller& c) {
               api::oauth_disconnect(*this, req, res, c);
             }));
    s.Get(kOAuthCallbackPath,
          [this](const auto& req, auto& res) { api::oauth_callback(*this, req, res); });

    // The operators' status page (api_status.cpp): static files; its JSON and its button are
    // admin routes.
    for (const char* file : {"/status", "/status.js", "/status.css"}) {
      s.Get(file, [this](const auto& req, auto& res) { api::status_page(*this, req, res); });
    }
    register_admin_routes();
  }

  // The admin API (api_admin.cpp, api_admin_connections.cpp): operators only, every route.
  void register_admin_routes() {
    Router& s = router;
    auto admin = [this](api::AdminHandler h) {
      return operator_only(
          [this, h](const auto& req, auto& res, const api::Caller& c) { h(*this, req, res, c); });
    };
    const std::string member = "/v1/admin/members/{}";
    s.Get("/v1/admin/members", admin(api::admin_list_members));
    s.Get(member, admin(api::admin_get_member));
    s.Put(member, admin(api::admin_put_member));
    s.Delete(member, admin(api::admin_delete_member));
    s.Get(member + "/grants", admin(api::admin_get_grants));
    s.Put(member + "/grants", admin(api::admin_set_grants));
    s.Patch(member + "/grants", admin(api::admin_set_grants));
    s.Get("/v1/admin/grants/everyone", admin(api::admin_get_everyone));
    s.Put("/v1/admin/grants/everyone", admin(api::admin_put_everyone));
    s.Put("/v1/admin/grants", admin(api::admin_put_bulk_grants));
    s.Get("/v1/admin/audit", admin(api::admin_audit));
    const std::string connection = "/v1/admin/connections/{}";
    s.Get("/v1/admin/connections", admin(api::admin_list_connections));
    s.Get(connection, admin(api::admin_get_connection));
    s.Put(connection, admin(api::admin_put_connection));
    s.Patch(connection, admin(api::admin_patch_connection));
    s.Delete(connection, admin(api::admin_delete_connection));
    s.Get("/v1/admin/status", admin(api::admin_status));  // the status page's (api_status.cpp)
    s.Post(connection + "/refresh", admin(api::admin_refresh));
  }

  // A body without a Content-Type is labelled JSON (as send() labels it).
  static Http1Response finish(HttpResponse r) {
    if (!r.body.empty() && !find_header(r.headers, "Content-Type")) {
      r.headers.emplace_back("Content-Type", api::kJson);
    }
    return to_http1(std::move(r));
  }

  // Runs `answer` for `in`: every escaping exception a 500 whose detail goes to the log.
  template <typename Answer>
  Http1Response guarded(const Http1Request& in, Answer&& answer) {
    HttpResponse r;
    const std::string path(std::string_view(in.target).substr(0, in.target.find('?')));
    try {
      r = answer();
    } catch (const std::exception& e) {
      log("api: " + in.method + " " + path + ": " + e.what());
      r = error_response(HttpErrorCode::kInternal, "internal error");
    } catch (...) {
      log("api: " + in.method + " " + path + ": an unknown exception");
      r = error_response(HttpErrorCode::kInternal, "internal error");
    }
    return finish(std::move(r));
  }

  // A discovery request (routed by the core on the raw path, as the edge routes it) in the core's
  // shape; nullopt for every other path, and for every route but the manifest reads when
  // `manifests_only` (a search may build an index, a refresh queues).
  static std::optional<HttpRequest> discovery_request(const Http1Request& in,
                                                      bool manifests_only = false) {
    const std::size_t q = in.target.find('?');
    const SharedRoute shared = match_shared_route(std::string_view(in.target).substr(0, q)).route;
    if (shared == SharedRoute::kNone || shared == SharedRoute::kWebhook) return std::nullopt;
    if (manifests_only && shared != SharedRoute::kManifests &&
        shared != SharedRoute::kConnectionManifest) {
      return std::nullopt;
    }
    return core_request(in);
  }

  // A request in the core's shape (shared/discovery_http.h's HttpRequest).
  static HttpRequest core_request(const Http1Request& in) {
    const std::size_t q = in.target.find('?');
    HttpRequest request;
    request.method = in.method;
    request.path = in.target.substr(0, q);
    if (q != std::string::npos) request.query = in.target.substr(q + 1);
    request.headers = in.headers;
    request.body = in.body;
    return request;
  }

  // The span of one API request (native-agent/engine/tracer.h): "{method} {route}", a child of
  // the caller's `traceparent` when it sends one. Inert when tracing is off.
  Span request_span(const Http1Request& in) {
    Tracer* t = agent.tracer();
    if (t == nullptr || !t->enabled()) return Span();
    std::optional<SpanContext> parent;
    if (const std::string* tp = in.header("traceparent")) parent = parse_traceparent(*tp);
    Span span = t->start(in.method, SpanKind::kServer, parent);
    span.set("http.request.method", in.method);
    return span;
  }
  // Its route (a template: a connection id is `{id}`; a path no endpoint has is "unmatched",
  // so that no caller's text reaches a trace) and status; a 5xx is an error.
  static void end_request_span(Span& span, const Http1Request& in, int status) {
    if (!span.recording()) return;
    const std::string route = status == 404 ? "unmatched" : api::route_template(in.target);
    span.rename(in.method + " " + route);
    span.set("http.route", route);
    span.set("http.response.status_code", int64_t{status});
    if (status >= 500) {
      span.error("HTTP " + std::to_string(status));
    } else {
      span.ok();
    }
    span.end();
  }

  // On the front's loop thread (HttpFront's inline handler): a manifest read answered from the
  // store's readers and the render cache when that needs no waiting; everything else, and
  // anything that would wait or throws, is declined and goes to a worker (serve).
  std::optional<Http1Response> serve_now(const Http1Request& in, const HttpPeer& peer) {
    if (!api::host_allowed(in.header("Host"), options.listen.host, peer)) return std::nullopt;
    std::optional<HttpRequest> request = discovery_request(in, true);
    if (!request) return std::nullopt;
    std::optional<HttpResponse> r = api::discovery_exchange_now(*this, *request);
    if (!r) return std::nullopt;
    return finish(std::move(*r));
  }

  // One request, on a front worker: Host checked, routed, the handler run, every escaping
  // exception a 500 whose detail goes to the log. The front (native-agent/api/http_front.h) has
  // already refused what breaks a bound, and sheds what no worker can take.
  Http1Response serve(const Http1Request& in, const HttpPeer& peer) {
    if (!api::host_allowed(in.header("Host"), options.listen.host, peer)) {
      return to_http1(refusal_response(
          421, "the Host header names neither a loopback address nor this agent's listen address"));
    }
    const bool mcp = is_mcp_path(std::string_view(in.target).substr(0, in.target.find('?')));
    if (!mcp && in.body.size() > options.max_body_bytes) {
      return to_http1(refusal_response(
          413, "the request body is over " + std::to_string(options.max_body_bytes) + " bytes"));
    }
    // The shared endpoints are routed by the core on the raw path (shared/discovery_http.h), as
    // the edge routes them: discovery straight to the core's exchange, then the webhook and the
    // agent's own endpoints through cpp-httplib's types.
    if (std::optional<HttpRequest> request = discovery_request(in)) {
      return guarded(in, [&] { return api::discovery_exchange(*this, *request); });
    }
    if (mcp) {
      // DNS rebinding protection for a page whose Host passed (a loopback name): its Origin must
      // be a loopback one or an allowed one (403 otherwise), as at the edge.
      if (std::optional<HttpResponse> refused =
              mcp_origin_refusal(in.headers, agent.config().mcp_allowed_origins)) {
        return to_http1(std::move(*refused));
      }
      return guarded(in, [&] { return api::mcp_endpoint(*this, core_request(in)); });
    }

    const std::size_t q = in.target.find('?');
    const SharedRoute shared = match_shared_route(std::string_view(in.target).substr(0, q)).route;
    httplib::Request req;
    req.method = in.method;
    req.target = in.target;
    req.version = in.minor_version == 0 ? "HTTP/1.0" : "HTTP/1.1";
    req.path = httplib::detail::decode_url(in.target.substr(0, q), false);
    if (q != std::string::npos)
      httplib::detail::parse_query_text(in.target.substr(q + 1), req.params);
    for (const auto& [name, value] : in.headers) req.headers.emplace(name, value);
    req.body = in.body;
    req.remote_addr = peer.remote_addr;
    req.remote_port = peer.remote_port;
    req.local_addr = peer.local_addr;
    req.local_port = peer.local_port;

    httplib::Response res;
    Router::Found found = Router::Found::kNoPath;
    std::string allow;
    Router::Handler core_handler;
    if (shared == SharedRoute::kWebhook) {
      core_handler = [this](const httplib::Request& r, httplib::Response& out) {
        api::webhook(*this, r, out);
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
      s.options.mcp_max_body_bytes < 1 || s.options.max_concurrent_tests < 1 || !s.options.now_ms) {
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
  s.mcp.freshness = s.discovery.freshness;
  s.mcp.render = s.discovery.render;
  s.mcp.searcher = s.discovery.searcher;
  s.mcp.search_mode = s.options.mcp_search_mode || config.runtime.mcp_search_mode != 0;
  s.mcp.max_body_bytes = s.options.mcp_max_body_bytes;
  s.mcp.relay_timeout_ms = config.runtime.call_timeout_ms;  // a call's deadline, not a listing's
  s.mcp.server_name = "quiver-agent";
  // Calls at the agent's own /mcp go straight to its live sessions (engine/mcp_calls.h), with the
  // grant and the preference checked again; RelayCall deadlines are on the API's wall clock.
  // A caller that leaves mid-call has it cancelled upstream (HttpFront::client_gone: the relay
  // runs on the worker answering the request).
  s.mcp_relay = [&s](const RelayCall& call) {
    return perform_relay_call(s.agent, call, s.options.now_ms(), HttpFront::client_gone());
  };

  // Change notifications on the agent's /mcp (it honours listChanged; the edge does not).
  s.mcp.list_changed = true;
  api::McpNotifierOptions notify;
  notify.poll_ms = s.options.mcp_notify_poll_ms;
  notify.max_streams_per_member = s.options.mcp_max_streams_per_member;
  notify.max_streams = s.options.mcp_max_streams;
  s.notifier = std::make_unique<api::McpNotifier>(s, notify);

  s.register_routes();
  HttpFrontOptions front;
  front.stream_keepalive_ms = s.options.mcp_stream_keepalive_ms;
  front.host = s.options.listen.host;
  front.port = s.options.listen.port;
  front.worker_threads = s.options.worker_threads;
  front.max_queued_requests = s.options.max_queued_requests;
  // The front reads up to the larger bound (and a margin, so that a body just over /mcp's gets
  // its JSON-RPC 413); serve() holds every other endpoint to max_body_bytes.
  front.limits.max_body_bytes =
      std::max(s.options.max_body_bytes, s.options.mcp_max_body_bytes + 64 * 1024);
  front.header_timeout_ms = s.options.header_timeout_ms;
  front.body_timeout_ms = s.options.body_timeout_ms;
  front.keep_alive_timeout_ms = s.options.keep_alive_timeout_ms;
  front.write_timeout_ms = s.options.write_timeout_ms;
  front.keep_alive_max_requests = s.options.keep_alive_max_requests;
  front.max_connections = s.options.max_connections;
  front.max_connections_per_peer = s.options.max_connections_per_peer;
  s.front = std::make_unique<HttpFront>(
      front,
      [&s](const Http1Request& req, const HttpPeer& peer) {
        Span span = s.request_span(req);
        Http1Response response = s.serve(req, peer);
        Impl::end_request_span(span, req, response.status);
        return response;
      },
      [](int status, const std::string& message) {
        return to_http1(refusal_response(status, message));
      },
      [] { return to_http1(overloaded_response()); },
      s.options.inline_discovery
          ? HttpInlineHandler([&s](const Http1Request& req, const HttpPeer& peer) {
              Span span = s.request_span(req);
              std::optional<Http1Response> response = s.serve_now(req, peer);
              if (response) {
                Impl::end_request_span(span, req, response->status);
              } else {
                span.discard();  // a worker answers it, in a span of its own
              }
              return response;
            })
          : HttpInlineHandler());
  Status listening = s.front->start();
  if (!listening.ok()) {
    s.front.reset();
    return Error(ErrorCode::kResourceUnavailable, "api server: " + listening.error().message);
  }
  s.bound_port = s.front->port();
  s.started = true;
  s.notifier->start();
  s.bg_thread = std::thread([&s] { s.run_background(); });
  return Status::Ok();
}

void ApiServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped.exchange(true)) return;
  s.notifier->stop();  // every listen stream ends cleanly (the front writes what they queued)
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
