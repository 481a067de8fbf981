#include "shared/edge_wire.h"

#include <cctype>
#include <utility>

#include "shared/enum_names.h"
#include "shared/json.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint32_t get_u32(std::string_view in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

constexpr const char* const kActionNames[] = {"respond", "redis", "read", "done", "wait"};
static_assert(covers_enum(kActionNames, EdgeAction::kWait));

// u32 meta length | meta JSON | body: the request's and the rendered answer's layout.
std::string meta_then_body(const Json& meta, const std::string& body) {
  std::string m = json_text(meta);
  std::string out;
  put_u32(out, static_cast<uint32_t>(m.size()));
  out += m;
  out += body;
  return out;
}

Json headers_json(const HttpHeaders& headers) {
  Json a = Json::array();
  for (const auto& [name, value] : headers) a.push_back(Json::array({name, value}));
  return a;
}

}  // namespace

const char* edge_action_name(EdgeAction action) { return name_of(kActionNames, action, "done"); }

namespace {

// The meta exactly as worker.mjs writes it (JSON.stringify of {method, path, query, headers}):
// {"method":"…","path":"…","query":"…","headers":[["…","…"],…]}, every string printable ASCII
// without escapes (what nearly every request is); nullopt for anything else, which the generic
// parser then reads (escapes, UTF-8, other orders, errors). Both give the same request.
std::optional<HttpRequest> plain_request_meta(std::string_view m) {
  std::size_t i = 0;
  auto lit = [&](std::string_view t) {
    if (m.substr(i, t.size()) != t) return false;
    i += t.size();
    return true;
  };
  auto str = [&]() -> std::optional<std::string_view> {
    if (i >= m.size() || m[i] != '"') return std::nullopt;
    std::size_t j = i + 1;
    for (; j < m.size() && m[j] != '"'; ++j) {
      const char c = m[j];
      if (c < 0x20 || c > 0x7e || c == '\\') return std::nullopt;
    }
    if (j >= m.size()) return std::nullopt;
    std::string_view out = m.substr(i + 1, j - i - 1);
    i = j + 1;
    return out;
  };
  HttpRequest r;
  std::optional<std::string_view> method, path, query;
  if (!lit("{\"method\":") || !(method = str()) || !lit(",\"path\":") || !(path = str()) ||
      !lit(",\"query\":") || !(query = str()) || !lit(",\"headers\":[")) {
    return std::nullopt;
  }
  r.method = std::string(*method);
  r.path = std::string(*path);
  r.query = std::string(*query);
  for (bool first = true; !lit("]"); first = false) {
    std::optional<std::string_view> name, value;
    if ((!first && !lit(",")) || !lit("[") || !(name = str()) || !lit(",") || !(value = str()) ||
        !lit("]")) {
      return std::nullopt;
    }
    r.headers.emplace_back(std::string(*name), std::string(*value));
  }
  if (!lit("}") || i != m.size()) return std::nullopt;
  return r;
}

Status check_request_line(const HttpRequest& r) {
  if (r.method.empty() || r.method.size() > 16) return invalid("request: bad method");
  if (r.path.empty() || r.path[0] != '/') return invalid("request: bad path");
  return Status::Ok();
}

}  // namespace

Result<HttpRequest> edge_request_from_wire(std::string_view bytes) {
  if (bytes.size() < 4) return invalid("request: shorter than its header");
  uint32_t meta_len = get_u32(bytes);
  if (meta_len > kMaxEdgeRequestMetaBytes) {
    return Error(ErrorCode::kTooLarge, "request: the request line and headers are too large");
  }
  if (meta_len > bytes.size() - 4) return invalid("request: truncated");
  HttpRequest r;
  if (std::optional<HttpRequest> plain = plain_request_meta(bytes.substr(4, meta_len))) {
    r = std::move(*plain);
  } else {
    Result<Json> meta = parse_json(bytes.substr(4, meta_len), kMaxEdgeRequestMetaBytes);
    if (!meta.ok()) return invalid("request: " + meta.error().message);
    if (!meta->is_object()) return invalid("request: meta is not an object");
    std::optional<std::string> method = json_string(*meta, "method");
    std::optional<std::string> path = json_string(*meta, "path");
    std::optional<std::string> query = json_string(*meta, "query");
    r.method = method.value_or("");
    r.path = path.value_or("");
    r.query = query.value_or("");
    if (Status bad = check_request_line(r); !bad.ok()) return bad.error();
    if (const Json* headers = json_field(*meta, "headers")) {
      if (!headers->is_array()) return invalid("request: headers is not an array");
      for (const Json& h : *headers) {
        if (!h.is_array() || h.size() != 2 || !h[0].is_string() || !h[1].is_string()) {
          return invalid("request: a header is not a [name, value] pair");
        }
        r.headers.emplace_back(h[0].get<std::string>(), h[1].get<std::string>());
      }
    }
  }
  if (Status bad = check_request_line(r); !bad.ok()) return bad.error();
  r.body = std::string(bytes.substr(4 + meta_len));
  return r;
}

std::string edge_request_to_wire(const HttpRequest& request) {
  Json meta = Json::object();
  meta["method"] = request.method;
  meta["path"] = request.path;
  meta["query"] = request.query;
  meta["headers"] = headers_json(request.headers);
  return meta_then_body(meta, request.body);
}

namespace {

// A JSON string, as json_text writes it: plain ASCII directly (the common case: header names and
// values, actions), anything else through json_text (escapes, UTF-8 checked and replaced).
void append_json_string(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      out += json_text(Json(std::string(s)));
      return;
    }
  }
  out += '"';
  out.append(s.data(), s.size());
  out += '"';
}

void append_headers(std::string& out, const HttpHeaders& headers) {
  out += '[';
  bool first = true;
  for (const auto& [name, value] : headers) {
    out += first ? "[" : ",[";
    first = false;
    append_json_string(out, name);
    out += ',';
    append_json_string(out, value);
    out += ']';
  }
  out += ']';
}

}  // namespace

namespace {

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// A response's headers as an object {name: value} when no name repeats (case-insensitively): what
// the host hands to its Response as it is; else as [[name, value], ...].
void append_response_headers(std::string& out, const HttpHeaders& headers) {
  for (std::size_t i = 0; i < headers.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (same_name(headers[i].first, headers[j].first)) return append_headers(out, headers);
    }
  }
  out += '{';
  bool first = true;
  for (const auto& [name, value] : headers) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, name);
    out += ':';
    append_json_string(out, value);
  }
  out += '}';
}

}  // namespace

// The meta object written field by field (it goes out with every step; building a Json for it
// cost as much as the rest of a small answer's step).
EdgeStepWire edge_step_wire(const EdgeStep& step, std::string* joined) {
  EdgeStepWire w;
  std::string& m = w.meta;
  m = "{\"handle\":" + std::to_string(step.handle) + ",\"action\":";
  append_json_string(m, edge_action_name(step.action));
  if (step.action == EdgeAction::kRespond) {
    m += ",\"status\":" + std::to_string(step.response.status) + ",\"headers\":";
    append_response_headers(m, step.response.headers);
    m += step.background ? ",\"background\":true" : ",\"background\":false";
    if (step.ended) m += ",\"ended\":true";
    w.payload = step.response.body;
  } else if (step.action == EdgeAction::kRedis) {
    m += step.new_connection ? ",\"new_connection\":true" : ",\"new_connection\":false";
    w.payload = step.redis_bytes;
    if (!step.redis_parts.empty()) {
      // The parts' bytes one after the other, each part's length in its meta.
      joined->clear();
      m += ",\"parts\":[";
      for (std::size_t k = 0; k < step.redis_parts.size(); ++k) {
        const EdgeStep::Part& p = step.redis_parts[k];
        m += k == 0 ? "{\"node\":" : ",{\"node\":";
        m += json_text(Json::object({{"host", p.host}, {"port", p.port}}));
        m += p.new_connection ? ",\"new_connection\":true" : ",\"new_connection\":false";
        m += ",\"bytes\":" + std::to_string(p.bytes.size()) + "}";
        *joined += p.bytes;
      }
      m += ']';
      w.payload = *joined;
    }
    if (!step.redis_host.empty()) {
      m += ",\"node\":" +
           json_text(Json::object({{"host", step.redis_host}, {"port", step.redis_port}}));
    }
    if (step.redis_delay_ms > 0) m += ",\"delay_ms\":" + std::to_string(step.redis_delay_ms);
    if (!step.redis_close.empty()) {
      Json close = Json::array();
      for (const std::string& a : step.redis_close) close.push_back(a);
      m += ",\"close\":" + json_text(close);
    }
    if (step.open_stream) {
      m +=
          ",\"stream\":" + json_text(Json::object({{"status", step.response.status},
                                                   {"headers", headers_json(step.response.headers)},
                                                   {"keepalive_ms", step.keepalive_ms},
                                                   {"keepalive", step.keepalive}}));
    }
  }
  if ((step.action == EdgeAction::kRedis || step.action == EdgeAction::kRead) &&
      step.redis_blocks_ms > 0) {
    m += ",\"redis_blocks_ms\":" + std::to_string(step.redis_blocks_ms);
  }
  if (step.redis_part >= 0 &&
      (step.action == EdgeAction::kRedis || step.action == EdgeAction::kRead ||
       step.action == EdgeAction::kWait)) {
    m += ",\"part\":" + std::to_string(step.redis_part);
  }
  if (!step.log.empty()) {
    m += ",\"log\":";
    append_json_string(m, step.log);
    if (step.log_info) m += ",\"log_level\":\"info\"";
  }
  m += '}';
  return w;
}

std::string edge_step_to_wire(const EdgeStep& step) {
  std::string joined;
  EdgeStepWire w = edge_step_wire(step, &joined);
  std::string out;
  out.reserve(8 + w.meta.size() + w.payload.size());
  put_u32(out, static_cast<uint32_t>(w.meta.size()));
  put_u32(out, static_cast<uint32_t>(w.payload.size()));
  out += w.meta;
  out.append(w.payload.data(), w.payload.size());
  return out;
}

std::string encode_edge_answer(const HttpResponse& response,
                               const std::vector<Revalidation>& revs) {
  Json meta = Json::object();
  meta["status"] = response.status;
  meta["headers"] = headers_json(response.headers);
  Json r = Json::array();
  for (const Revalidation& rev : revs) {
    r.push_back(Json::array({rev.connection_id, rev.principal.str(), rev.reason, rev.manual}));
  }
  meta["revalidations"] = std::move(r);
  return meta_then_body(meta, response.body);
}

std::optional<StoredAnswer> decode_edge_answer(std::string_view bytes) {
  if (bytes.size() < 4 || get_u32(bytes) > bytes.size() - 4) return std::nullopt;
  uint32_t meta_len = get_u32(bytes);
  Result<Json> meta = parse_json(bytes.substr(4, meta_len));
  if (!meta.ok() || !meta->is_object()) return std::nullopt;
  StoredAnswer a;
  std::optional<int64_t> status = json_int(*meta, "status");
  const Json* headers = json_field(*meta, "headers");
  const Json* revs = json_field(*meta, "revalidations");
  if (!status || !headers || !headers->is_array() || !revs || !revs->is_array()) {
    return std::nullopt;
  }
  a.response.status = static_cast<int>(*status);
  for (const Json& h : *headers) {
    if (!h.is_array() || h.size() != 2 || !h[0].is_string() || !h[1].is_string()) {
      return std::nullopt;
    }
    a.response.headers.emplace_back(h[0].get<std::string>(), h[1].get<std::string>());
  }
  for (const Json& v : *revs) {
    if (!v.is_array() || v.size() != 4 || !v[0].is_string() || !v[1].is_string() ||
        !v[2].is_string() || !v[3].is_boolean()) {
      return std::nullopt;
    }
    Result<Principal> principal = Principal::parse(v[1].get<std::string>());
    if (!principal.ok()) return std::nullopt;
    a.revalidations.push_back(Revalidation{v[0].get<std::string>(), *principal,
                                           v[2].get<std::string>(), v[3].get<bool>()});
  }
  a.response.body = std::string(bytes.substr(4 + meta_len));
  return a;
}

}  // namespace quiver
