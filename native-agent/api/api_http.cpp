#include "native-agent/api/api_http.h"

#include "shared/ascii.h"

namespace quiver::api {

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
    case 400:
      return error_response(HttpErrorCode::kBadRequest, message);
    case 413:
      return error_response(HttpErrorCode::kPayloadTooLarge, message);
    case 414:
      return error_response(HttpErrorCode::kUriTooLong, message);
    case 500:
      return error_response(HttpErrorCode::kInternal, message);
    default:
      break;
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

// Whether a request's Host names this server: a loopback name or address, the configured listen
// host, or the address the connection arrived on (an IP literal never rebinds). Any other name is
// what a browser page sends when it reaches a loopback service by DNS rebinding: refused (421),
// whatever the endpoint. An HTTP/1.0 request without Host is let through (browsers always send
// one; HTTP/1.1 requires it, and the parser refuses a 1.1 request without it).
std::string route_template(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  std::string out(path);
  for (std::string_view prefix :
       {"/v1/mcp-connections/", "/v1/admin/members/", "/v1/admin/connections/"}) {
    if (path.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest = path.substr(prefix.size());
    const std::size_t slash = rest.find('/');
    out = std::string(prefix) + "{id}" +
          std::string(slash == std::string_view::npos ? "" : rest.substr(slash));
    break;
  }
  if (out.size() > 64) out.resize(64);
  return out;
}

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
  if (is_loopback_host(host)) return true;
  const std::string listen = ascii_lower(listen_host);
  if (host == listen && listen != "0.0.0.0" && listen != "::") return true;
  std::string local = ascii_lower(peer.local_addr);
  if (local.rfind("::ffff:", 0) == 0 && local.find('.') != std::string::npos) local.erase(0, 7);
  return !local.empty() && host == local;
}

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

}  // namespace quiver::api
