// The agent API's HTTP plumbing: how its handlers read a request and write an answer, and the
// route table. Every handler (native-agent/api/api_*.cpp) answers through these, so every error has
// the JSON shape and codes of shared/discovery_http.h, whichever endpoint refused.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

#include "native-agent/api/http_front.h"
#include "shared/discovery_http.h"
#include "shared/http1.h"
#include "shared/json.h"
#include "shared/status.h"

namespace quiver::api {

inline constexpr char kJson[] = "application/json";

bool is_loopback_peer(const std::string& addr);

// JSON with `Cache-Control: no-store`.
HttpResponse json_response(int status, const Json& body);
// 503 OVERLOADED: not an HttpErrorCode (only this host sheds), in the same JSON shape.
HttpResponse overloaded_response();

// Copies a core answer into cpp-httplib's response; the rvalue form moves the body.
void send(HttpResponse&& from, httplib::Response& to);
void send(const HttpResponse& from, httplib::Response& to);
void send_error(httplib::Response& res, HttpErrorCode code, const std::string& message);

// The HTTP error a store operation's failure answers: 400 / 404 for the caller's mistakes, 500 for
// ours, else 503 STORE_UNAVAILABLE.
HttpErrorCode store_or_internal(const Error& e);

// The raw query of a request (after '?', still percent-encoded), as the core parses it.
std::string_view raw_query(const httplib::Request& req);
// Query parameters of an agent-owned endpoint, checked by the core's parser (the discovery
// endpoints' rules: only `allowed` ones, each once, never a principal).
QueryParams check_params(const httplib::Request& req, std::initializer_list<const char*> allowed);
// The request as the core's exchanges take it: the raw path and query as they arrived.
HttpRequest core_request(const httplib::Request& req);

// Errors the front refuses with before any handler runs, in the API's JSON error shape: the
// statuses discovery_http.h names keep their codes, the others get one here.
HttpResponse refusal_response(int status, const std::string& message);
Http1Response to_http1(HttpResponse r);

// Whether a request's Host names this server (see api_http.cpp): 421 otherwise.
bool host_allowed(const std::string* host_header, const std::string& listen_host,
                  const HttpPeer& peer);

// The route of a request target for traces: the path without its query, a connection or member
// id (`/v1/mcp-connections/<id>/...`, `/v1/admin/members/<id>/...`, `/v1/admin/connections/<id>`)
// as `{id}`, at most 64 characters of what remains.
std::string route_template(std::string_view target);

// Segment `index` of a path that matched a route ("/v1/mcp-connections/x/test": 2 is "x").
std::string path_segment(std::string_view path, std::size_t index);

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
  void Delete(const std::string& pattern, Handler h) { add("DELETE", pattern, std::move(h)); }

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

}  // namespace quiver::api
