// The MCP endpoint: see shared/mcp_endpoint.h for the protocol, the lists, calls and naming.
#include "shared/mcp_endpoint.h"

#include <algorithm>
#include <set>
#include <utility>

#include "shared/ascii.h"
#include "shared/canonical_json.h"
#include "shared/json_splice.h"
#include "shared/mcp_session.h"
#include "shared/preferences.h"
#include "shared/principal.h"
#include "shared/render_cache.h"
#include "shared/sha256.h"
#include "shared/uri_template.h"
#include "shared/version.h"

namespace quiver {

namespace {

constexpr const char* kModernVersion = "2026-07-28";
// Legacy versions we answer `initialize` with, newest first (2024-11-05 is not offered: the
// endpoint follows 2025-03-26 and later; a client asking for it gets our newest and decides).
constexpr const char* kLegacyVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
constexpr const char* kBatchVersion = "2025-03-26";  // the only revision with JSON-RPC batches

constexpr const char* kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
constexpr const char* kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

constexpr const char* kSearchTool = "quiver_search_tools";
constexpr const char* kDescribeTool = "quiver_describe_tool";
constexpr const char* kCallTool = "quiver_call_tool";
constexpr std::size_t kDefaultSearchHits = 10;
constexpr std::size_t kMaxSearchHits = 50;

bool is_legacy_version(std::string_view v) {
  for (const char* k : kLegacyVersions) {
    if (v == k) return true;
  }
  return false;
}
bool is_served_version(std::string_view v) { return v == kModernVersion || is_legacy_version(v); }

Json supported_versions() {
  Json out = Json::array();
  out.push_back(kModernVersion);
  for (const char* v : kLegacyVersions) out.push_back(v);
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// A header value as SEP-2243 encodes it: plain, or `=?base64?…?=`. nullopt: a bad encoding.
std::optional<std::string> decode_header_value(std::string_view value) {
  if (value.size() >= 11 && value.substr(0, 9) == "=?base64?" &&
      value.substr(value.size() - 2) == "?=") {
    return base64_decode(value.substr(9, value.size() - 11));
  }
  return std::string(value);
}

Json rpc_error_object(int64_t code, std::string message, Json data = Json()) {
  Json e = Json::object({{"code", code}, {"message", std::move(message)}});
  if (!data.is_null()) e["data"] = std::move(data);
  return e;
}

HttpResponse json_response(int status, const std::string& body) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "application/json"}, {"Cache-Control", "no-store"}};
  r.body = body;
  return r;
}

HttpResponse rpc_error_response(int status, const Json& id, int64_t code, std::string message,
                                Json data = Json()) {
  Json m = Json::object({{"jsonrpc", "2.0"},
                         {"id", id},
                         {"error", rpc_error_object(code, std::move(message), std::move(data))}});
  return json_response(status, serialize_json(m));
}

// ---- cursors -----------------------------------------------------------------------------------

struct Cursor {
  std::string method;
  std::string after;       // the snapshot is read after this id ("" = from the start)
  std::string connection;  // resume in this connection ("" = the first after `after`)
  std::size_t offset = 0;  // items of `connection` already given
};

std::string encode_cursor(const Cursor& c) {
  Json j = Json::object({{"m", c.method}, {"a", c.after}, {"c", c.connection}, {"i", c.offset}});
  return base64url_encode(serialize_json(j));
}

std::optional<Cursor> decode_cursor(const Json& value, std::string_view method,
                                    std::size_t max_bytes) {
  if (!value.is_string()) return std::nullopt;
  const std::string& text = value.get_ref<const std::string&>();
  if (text.empty() || text.size() > max_bytes) return std::nullopt;
  std::string raw;
  if (!base64url_decode(text, &raw)) return std::nullopt;
  Result<Json> j = parse_json(raw, max_bytes);
  if (!j.ok() || !j->is_object()) return std::nullopt;
  Cursor c;
  std::optional<std::string> m = json_string(*j, "m");
  std::optional<std::string> a = json_string(*j, "a");
  std::optional<std::string> cid = json_string(*j, "c");
  std::optional<int64_t> i = json_int(*j, "i");
  if (!m || *m != method || !a || !cid || !i || *i < 0 || *i > 1'000'000) return std::nullopt;
  if (!a->empty() && !validate_connection_id(*a).ok()) return std::nullopt;
  if (!cid->empty() && !validate_connection_id(*cid).ok()) return std::nullopt;
  c.method = *m;
  c.after = *a;
  c.connection = *cid;
  c.offset = static_cast<std::size_t>(*i);
  return c;
}

std::optional<ListKind> list_kind_of(std::string_view method) {
  for (int i = 0; i < kListKindCount; ++i) {
    auto kind = static_cast<ListKind>(i);
    if (method == list_method(kind)) return kind;
  }
  return std::nullopt;
}

// The field of an item that the naming scheme rewrites.
const char* exposed_field(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
    case ListKind::kPrompts:
      return "name";
    case ListKind::kResources:
      return "uri";
    case ListKind::kResourceTemplates:
      return "uriTemplate";
  }
  return "name";
}

std::string encode_for(ListKind kind, std::string_view cid, std::string_view name) {
  return (kind == ListKind::kTools || kind == ListKind::kPrompts) ? encode_mcp_name(cid, name)
                                                                  : encode_mcp_uri(cid, name);
}

// The item with its name or URI exposed; nullopt when it has none to expose.
std::optional<Json> expose_item(ListKind kind, std::string_view cid, Json item) {
  const char* field = exposed_field(kind);
  std::optional<std::string> name = item.is_object() ? json_string(item, field) : std::nullopt;
  if (!name || name->empty()) return std::nullopt;
  item[field] = encode_for(kind, cid, *name);
  return item;
}

// The state a manifest records for a list that is not listed: "failed" means it could not be
// loaded (the connection is then named missing); anything else contributes nothing.
bool list_failed(const Json& manifest, ListKind kind) {
  const Json* list = nullptr;
  for (const char* f : {list_kind_name(kind), list_result_field(kind)}) {
    if (const Json* l = json_field(manifest, f)) list = l;
  }
  std::optional<std::string> state =
      list != nullptr && list->is_object() ? json_string(*list, "state") : std::nullopt;
  return state == std::optional<std::string>("failed");
}

// The render cache's view of the endpoint's lists (RenderedFragment::lists).
constexpr char kMcpItemsView[] = "mcp-items";

// One servable connection's lists as the endpoint serves them, from its filtered manifest: per
// kind its state and each item exposed under the connection's names, serialized ("" for an item
// without a name or URI to expose: it is skipped, but counts for the cursor's offset as before).
std::shared_ptr<const RenderedFragment> render_mcp_items(std::string_view cid,
                                                         const Json& manifest) {
  auto fragment = std::make_shared<RenderedFragment>();
  fragment->lists.resize(kListKindCount);
  for (int k = 0; k < kListKindCount; ++k) {
    const auto kind = static_cast<ListKind>(k);
    RenderedFragment::ItemList& list = fragment->lists[static_cast<std::size_t>(k)];
    std::optional<std::vector<Json>> listed = listed_items(manifest, kind);
    if (!listed) {
      if (list_failed(manifest, kind)) list.state = RenderedFragment::ItemList::State::kFailed;
      continue;
    }
    list.state = RenderedFragment::ItemList::State::kListed;
    list.items.reserve(listed->size());
    Sha256 digest;
    for (Json& item : *listed) {
      std::optional<Json> exposed = expose_item(kind, cid, std::move(item));
      list.items.push_back(exposed ? serialize_json(*exposed) : std::string());
      digest.update(std::to_string(list.items.back().size()) + ":");
      digest.update(list.items.back());
    }
    Digest256 d = digest.finish();
    list.digest.assign(reinterpret_cast<const char*>(d.data()), d.size());
  }
  return fragment;
}

const FragmentRenderer& mcp_items_renderer() {
  static const FragmentRenderer renderer{kMcpItemsView, &render_mcp_items};
  return renderer;
}

// URIs inside a relayed result (resources/read contents, tools/call resource links and embedded
// resources) exposed, so the client can read them back through the endpoint.
void expose_result_uris(Json& result, std::string_view cid) {
  auto fix = [&](Json& obj) {
    if (!obj.is_object()) return;
    if (Json* uri = json_field(obj, "uri"); uri != nullptr && uri->is_string()) {
      *uri = encode_mcp_uri(cid, uri->get_ref<const std::string&>());
    }
  };
  if (!result.is_object()) return;
  if (Json* contents = json_field(result, "contents"); contents && contents->is_array()) {
    for (Json& c : *contents) fix(c);
  }
  auto content_uris = [&](Json* content) {
    if (content == nullptr || !content->is_array()) return;
    for (Json& c : *content) {
      if (!c.is_object()) continue;
      std::optional<std::string> type = json_string(c, "type");
      if (type == std::optional<std::string>("resource_link")) fix(c);
      if (type == std::optional<std::string>("resource")) {
        if (Json* r = json_field(c, "resource")) fix(*r);
      }
    }
  };
  content_uris(json_field(result, "content"));
  if (Json* messages = json_field(result, "messages"); messages && messages->is_array()) {
    for (Json& m : *messages) {
      if (!m.is_object()) continue;
      Json* content = json_field(m, "content");
      if (content != nullptr && content->is_object()) {
        Json one = Json::array({*content});
        content_uris(&one);
        *content = std::move(one[0]);
      }
    }
  }
}

Json search_mode_tools() {
  auto schema = [](Json properties, Json required) {
    return Json::object({{"type", "object"},
                         {"properties", std::move(properties)},
                         {"required", std::move(required)}});
  };
  Json tools = Json::array();
  tools.push_back(Json::object(
      {{"name", kSearchTool},
       {"title", "Search tools"},
       {"description",
        "Search the tools of every MCP server you can use, by words in their names, titles and "
        "descriptions. Returns the best matches (name, title, description); describe one with " +
            std::string(kDescribeTool) + " and call it with " + kCallTool + "."},
       {"inputSchema",
        schema(Json::object({{"query", {{"type", "string"}, {"description", "what you need"}}},
                             {"limit",
                              {{"type", "integer"},
                               {"minimum", 1},
                               {"maximum", kMaxSearchHits},
                               {"description", "at most this many results (10)"}}}}),
               Json::array({"query"}))},
       {"annotations", {{"readOnlyHint", true}, {"openWorldHint", false}}}}));
  tools.push_back(Json::object(
      {{"name", kDescribeTool},
       {"title", "Describe a tool"},
       {"description", "The full definition of one tool found by " + std::string(kSearchTool) +
                           ": its input schema, output schema and annotations."},
       {"inputSchema",
        schema(Json::object({{"name", {{"type", "string"}, {"description", "the tool's name"}}}}),
               Json::array({"name"}))},
       {"annotations", {{"readOnlyHint", true}, {"openWorldHint", false}}}}));
  tools.push_back(Json::object(
      {{"name", kCallTool},
       {"title", "Call a tool"},
       {"description", "Call one tool found by " + std::string(kSearchTool) +
                           " with arguments matching its input schema."},
       {"inputSchema",
        schema(Json::object({{"name", {{"type", "string"}, {"description", "the tool's name"}}},
                             {"arguments", {{"type", "object"}}}}),
               Json::array({"name"}))}}));
  return tools;
}

Json text_result(std::string text, Json structured = Json(), bool is_error = false) {
  Json r = Json::object(
      {{"content", Json::array({Json::object({{"type", "text"}, {"text", std::move(text)}})})}});
  if (!structured.is_null()) r["structuredContent"] = std::move(structured);
  if (is_error) r["isError"] = true;
  return r;
}

}  // namespace

// ---- naming
// --------------------------------------------------------------------------------------

std::string encode_mcp_name(std::string_view connection_id, std::string_view upstream_name) {
  std::string out;
  out.reserve(connection_id.size() + 2 + upstream_name.size());
  for (char c : connection_id) {
    out += c;
    if (c == '_') out += '-';
  }
  out += kMcpNameSeparator;
  out += upstream_name;
  return out;
}

std::optional<UpstreamName> decode_mcp_name(std::string_view exposed) {
  UpstreamName out;
  for (std::size_t i = 0; i < exposed.size(); ++i) {
    if (exposed[i] != '_') {
      out.connection_id += exposed[i];
      continue;
    }
    if (i + 1 >= exposed.size()) return std::nullopt;
    if (exposed[i + 1] == '-') {
      out.connection_id += '_';
      ++i;
      continue;
    }
    if (exposed[i + 1] != '_') return std::nullopt;  // a lone `_` is never written
    out.name = std::string(exposed.substr(i + 2));
    if (out.name.empty() || !validate_connection_id(out.connection_id).ok()) return std::nullopt;
    return out;
  }
  return std::nullopt;
}

std::string encode_mcp_uri(std::string_view connection_id, std::string_view upstream_uri) {
  std::string out(kMcpResourceScheme);
  out += connection_id;
  out += '/';
  out += upstream_uri;
  return out;
}

std::optional<UpstreamName> decode_mcp_uri(std::string_view exposed) {
  std::string_view scheme(kMcpResourceScheme);
  if (exposed.substr(0, scheme.size()) != scheme) return std::nullopt;
  exposed.remove_prefix(scheme.size());
  std::size_t slash = exposed.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  UpstreamName out{std::string(exposed.substr(0, slash)), std::string(exposed.substr(slash + 1))};
  if (out.name.empty() || !validate_connection_id(out.connection_id).ok()) return std::nullopt;
  return out;
}

bool is_mcp_path(std::string_view path) { return path == "/mcp"; }

// ---- DNS rebinding protection
// ---------------------------------------------------------------------

namespace {

// The host of an origin key (mcp_origin_key's form): without brackets or port.
std::string_view origin_host(std::string_view key) {
  std::string_view authority = key.substr(key.find("://") + 3);
  if (!authority.empty() && authority.front() == '[') {
    return authority.substr(1, authority.find(']') - 1);
  }
  return authority.substr(0, authority.find(':'));
}

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ascii_hex(char c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'f'); }  // lower case
bool is_host_char(char c) {
  return is_ascii_digit(c) || (c >= 'a' && c <= 'z') || c == '-' || c == '.' || c == '_';
}

}  // namespace

std::optional<std::string> mcp_origin_key(std::string_view origin) {
  std::string key = ascii_lower(origin);
  std::size_t sep = key.find("://");
  if (sep == std::string::npos) return std::nullopt;
  std::string_view scheme = std::string_view(key).substr(0, sep);
  if (scheme != "http" && scheme != "https") return std::nullopt;
  std::string_view authority = std::string_view(key).substr(sep + 3);
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos || close < 2) return std::nullopt;
    for (char c : authority.substr(1, close - 1)) {
      if (!is_ascii_hex(c) && c != ':' && c != '.') return std::nullopt;
    }
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || rest.size() < 2)) return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
  } else {
    std::size_t colon = authority.find(':');
    std::string_view host = authority.substr(0, colon);
    if (host.empty()) return std::nullopt;
    for (char c : host) {
      if (!is_host_char(c)) return std::nullopt;
    }
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return std::nullopt;
    }
  }
  if (port.size() > 5) return std::nullopt;
  for (char c : port) {
    if (!is_ascii_digit(c)) return std::nullopt;
  }
  return key;
}

Result<std::vector<std::string>> parse_mcp_allowed_origins(std::string_view list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string_view item = list.substr(at, comma - at);
    at = comma + 1;
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.empty()) continue;
    std::optional<std::string> key = mcp_origin_key(item);
    if (!key) {
      return Error(ErrorCode::kInvalidArgument,
                   "\"" + std::string(item.substr(0, 100)) +
                       "\" is not an origin (scheme://host[:port], http or https, no path)");
    }
    out.push_back(std::move(*key));
  }
  return out;
}

std::optional<HttpResponse> mcp_origin_refusal(const HttpHeaders& headers,
                                               const std::vector<std::string>& allowed) {
  const std::string* origin = nullptr;
  for (const auto& [name, value] : headers) {
    if (!ascii_iequals(name, "Origin")) continue;
    if (origin != nullptr) {
      return error_response(HttpErrorCode::kForbidden,
                            "more than one Origin header: refused (DNS rebinding protection)");
    }
    origin = &value;
  }
  if (origin == nullptr) return std::nullopt;
  if (std::optional<std::string> key = mcp_origin_key(*origin)) {
    std::string_view host = origin_host(*key);
    if (is_loopback_host(host)) return std::nullopt;
    if (std::find(allowed.begin(), allowed.end(), *key) != allowed.end()) return std::nullopt;
  }
  return error_response(HttpErrorCode::kForbidden,
                        "a web page of this Origin may not call the MCP endpoint (DNS rebinding "
                        "protection): only loopback origins and the allowed ones may");
}

// ---- change notifications
// ------------------------------------------------------------------------

std::string mcp_sse_event(const Json& message) {
  // serialize_json writes no raw newline (strings escape theirs), so one data line holds it.
  return mcp_sse_event_text(serialize_json(message));
}

std::string mcp_sse_event_text(std::string_view json_text) {
  std::string event = "event: message\ndata: ";
  event.reserve(event.size() + json_text.size() + 2);
  event.append(json_text.data(), json_text.size());
  event += "\n\n";
  return event;
}

namespace {

void set_event_stream_headers(HttpResponse& r) {
  r.headers = {{"Content-Type", "text/event-stream"},
               {"Cache-Control", "no-store"},
               {"X-Accel-Buffering", "no"}};
}

}  // namespace

std::string mcp_list_changed_event(const McpListen& listen, McpChangeKind kind) {
  const char* method = nullptr;
  bool asked = false;
  switch (kind) {
    case McpChangeKind::kTools:
      method = "notifications/tools/list_changed";
      asked = listen.tools;
      break;
    case McpChangeKind::kResources:
      method = "notifications/resources/list_changed";
      asked = listen.resources;
      break;
    case McpChangeKind::kPrompts:
      method = "notifications/prompts/list_changed";
      asked = listen.prompts;
      break;
  }
  if (!asked || method == nullptr) return "";
  Json message = Json::object({{"jsonrpc", "2.0"}, {"method", method}});
  if (listen.modern) {
    message["params"] = Json::object(
        {{"_meta",
          Json::object({{"io.modelcontextprotocol/subscriptionId", listen.subscription_id}})}});
  }
  return mcp_sse_event(message);
}

std::string mcp_listen_end_event(const McpListen& listen) {
  if (!listen.modern) return "";
  return mcp_sse_event(Json::object(
      {{"jsonrpc", "2.0"},
       {"id", listen.subscription_id},
       {"result", Json::object({{"_meta", Json::object({{"io.modelcontextprotocol/subscriptionId",
                                                         listen.subscription_id}})},
                                {"resultType", "complete"}})}}));
}

// ---- relaying
// ------------------------------------------------------------------------------------

int64_t relay_failure_code(RelayFailure failure) {
  switch (failure) {
    case RelayFailure::kUnavailable:
      return kMcpErrorCallsUnavailable;
    case RelayFailure::kAgentUnreachable:
      return kMcpErrorAgentUnreachable;
    case RelayFailure::kUpstreamUnavailable:
      return kMcpErrorUpstreamUnavailable;
    case RelayFailure::kTimeout:
      return kMcpErrorTimeout;
    case RelayFailure::kTooLarge:
      return kMcpErrorResultTooLarge;
    case RelayFailure::kRefused:
      return kJsonRpcInvalidParams;
    case RelayFailure::kStoreUnavailable:
      return kMcpErrorStoreUnavailable;
  }
  return kJsonRpcInternalError;
}

RelayReply RelayReply::ok(Json result) {
  RelayReply r;
  r.kind = Kind::kResult;
  r.result = std::move(result);
  return r;
}

RelayReply RelayReply::upstream_error(JsonRpcError error) {
  RelayReply r;
  r.kind = Kind::kUpstreamError;
  r.error = std::move(error);
  return r;
}

RelayReply RelayReply::failed(RelayFailure failure, std::string message) {
  RelayReply r;
  r.kind = Kind::kFailed;
  r.failure = failure;
  r.error = JsonRpcError{relay_failure_code(failure), std::move(message), Json()};
  return r;
}

// ---- the endpoint -------------------------------------------------------------------------------

// One request of the POST and what became of it.
struct McpEndpoint::Pending {
  enum class Stage { kNew = 0, kNeedSnapshot, kNeedRelay, kDone };
  enum class Work { kNone = 0, kList, kCall, kSearch, kDescribe, kListen };

  Json id;
  std::string method;
  Json params;  // object (null → {})
  bool modern = false;
  Stage stage = Stage::kNew;
  Work work = Work::kNone;
  // kList
  ListKind kind = ListKind::kTools;
  Cursor cursor;
  // kCall, kDescribe
  UpstreamName target;
  CapabilityType capability = CapabilityType::kTool;
  std::string exposed;
  Json relay_params;
  // kSearch
  std::string query;
  std::size_t limit = kDefaultSearchHits;
  // the answer
  Json response;  // a complete JSON-RPC response object once kDone
  // When not empty, the response's JSON text (a list spliced from cached fragments: `response`
  // then lacks the items); else serialize_json(response).
  std::string response_text;
  int http_status = 200;
};

namespace {

using Pending = McpEndpoint::Pending;

void answer(Pending& p, Json result) {
  if (p.modern && result.is_object() && json_field(result, "resultType") == nullptr) {
    result["resultType"] = "complete";
  }
  p.response = Json::object({{"jsonrpc", "2.0"}, {"id", p.id}, {"result", std::move(result)}});
  p.stage = Pending::Stage::kDone;
}

void answer_error(Pending& p, int64_t code, std::string message, Json data = Json(),
                  int http_status = 200) {
  p.response =
      Json::object({{"jsonrpc", "2.0"},
                    {"id", p.id},
                    {"error", rpc_error_object(code, std::move(message), std::move(data))}});
  p.http_status = http_status;
  p.stage = Pending::Stage::kDone;
}

Json capabilities(bool list_changed) {
  return Json::object({{"tools", {{"listChanged", list_changed}}},
                       {"resources", {{"subscribe", false}, {"listChanged", list_changed}}},
                       {"prompts", {{"listChanged", list_changed}}},
                       {"completions", Json::object()}});
}

constexpr const char* kMetaSubscriptionId = "io.modelcontextprotocol/subscriptionId";

// The GET listen stream (2025 eras), or its refusal.
HttpResponse open_get_stream(const McpEndpointConfig& config, const HttpRequest& request) {
  if (!config.list_changed) {
    HttpResponse r = error_response(
        HttpErrorCode::kMethodNotAllowed,
        "the MCP endpoint takes POST only: it opens no event stream and keeps no session");
    r.headers.emplace_back("Allow", "POST");
    return r;
  }
  std::optional<std::string_view> accept = find_header(request.headers, "Accept");
  if (!accept || lower(*accept).find("text/event-stream") == std::string::npos) {
    HttpResponse r = error_response(HttpErrorCode::kBadRequest,
                                    "GET /mcp opens an event stream: Accept text/event-stream");
    r.status = 406;
    return r;
  }
  HttpResponse r;
  r.status = 200;
  r.headers = {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-store"}};
  return r;
}

Json server_info(const McpEndpointConfig& config) {
  return Json::object({{"name", config.server_name},
                       {"version", config.server_version.empty() ? std::string(kQuiverVersion)
                                                                 : config.server_version}});
}

// The name a method's `Mcp-Name` header mirrors (2026-07-28), if any.
std::optional<std::string> mcp_name_of(const std::string& method, const Json& params) {
  if (method == "tools/call" || method == "prompts/get") return json_string(params, "name");
  if (method == "resources/read") return json_string(params, "uri");
  return std::nullopt;
}

}  // namespace

McpStep McpEndpoint::start(const HttpRequest& request, const CallerAuth& caller, int64_t now_ms) {
  if (started_) {
    return Respond{error_response(HttpErrorCode::kInternal, "the MCP request was started twice"),
                   {},
                   Error(ErrorCode::kInternal, "McpEndpoint::start called twice"),
                   {}};
  }
  started_ = true;
  if (!caller.member_id) {
    HttpResponse r = error_response(HttpErrorCode::kUnauthenticated, caller.failure);
    std::string challenge = "Bearer realm=\"quiver\", error=\"invalid_token\"";
    if (!config_.resource_metadata_url.empty()) {
      challenge += ", resource_metadata=\"" + config_.resource_metadata_url + "\"";
    }
    for (auto& [name, value] : r.headers) {
      if (lower(name) == "www-authenticate") value = challenge;
    }
    return Respond{std::move(r), {}, {}, {}};
  }
  Result<Principal> member = Principal::member(*caller.member_id);
  if (!member.ok()) {
    return Respond{
        error_response(HttpErrorCode::kUnauthenticated, member.error().message), {}, {}, {}};
  }
  member_ = *member;

  if (request.method == "GET") {
    HttpResponse r = open_get_stream(config_, request);
    std::optional<std::string_view> version = find_header(request.headers, "MCP-Protocol-Version");
    if (r.status == 200 && version && *version == kModernVersion) {
      r = error_response(HttpErrorCode::kMethodNotAllowed,
                         "protocol 2026-07-28 has no GET stream: use subscriptions/listen");
      r.headers.emplace_back("Allow", "POST");
    } else if (r.status == 200 && version && !is_served_version(*version)) {
      r = rpc_error_response(400, Json(), kMcpUnsupportedProtocolVersion,
                             "unsupported MCP-Protocol-Version",
                             Json::object({{"supported", supported_versions()},
                                           {"requested", std::string(*version)}}));
    }
    if (r.status == 200) {
      McpListen listen;
      listen.member = *member_;
      listen.tools = listen.resources = listen.prompts = true;
      listen_ = std::move(listen);
    }
    return Respond{std::move(r), {}, {}, {}};
  }
  if (request.method != "POST") {
    HttpResponse r = error_response(
        HttpErrorCode::kMethodNotAllowed,
        config_.list_changed ? "the MCP endpoint takes POST, and GET for its event stream; it "
                               "keeps no session"
                             : "the MCP endpoint takes POST only: it opens no event stream and "
                               "keeps no session");
    r.headers.emplace_back("Allow", config_.list_changed ? "GET, POST" : "POST");
    return Respond{std::move(r), {}, {}, {}};
  }
  std::optional<std::string_view> content_type = find_header(request.headers, "Content-Type");
  if (!content_type || lower(*content_type).rfind("application/json", 0) != 0) {
    HttpResponse r = error_response(HttpErrorCode::kBadRequest,
                                    "the body must be JSON (Content-Type: application/json)");
    r.status = 415;
    return Respond{std::move(r), {}, {}, {}};
  }
  if (std::optional<std::string_view> accept = find_header(request.headers, "Accept")) {
    std::string a = lower(*accept);
    accepts_event_stream_ = a.find("text/event-stream") != std::string::npos;
    if (a.find("application/json") == std::string::npos && a.find("*/*") == std::string::npos &&
        a.find("application/*") == std::string::npos) {
      HttpResponse r = error_response(HttpErrorCode::kBadRequest,
                                      "the MCP endpoint answers application/json: Accept it");
      r.status = 406;
      return Respond{std::move(r), {}, {}, {}};
    }
  }
  if (request.body.size() > config_.max_body_bytes) {
    return Respond{rpc_error_response(413, Json(), kJsonRpcInvalidRequest,
                                      "the request body is over " +
                                          std::to_string(config_.max_body_bytes) + " bytes"),
                   {},
                   {},
                   {}};
  }
  std::optional<std::string_view> version_header =
      find_header(request.headers, "MCP-Protocol-Version");
  if (version_header && !is_served_version(*version_header)) {
    // The request's id, and its era, if the body says (an error carries the request's id).
    Json id;
    bool modern_body = false;
    JsonParseOptions peek;
    peek.max_bytes = config_.max_body_bytes;
    if (Result<Json> body = parse_json(request.body, peek); body.ok() && body->is_object()) {
      if (const Json* i = json_field(*body, "id");
          i && (i->is_string() || i->is_number_integer())) {
        id = *i;
      }
      const Json* params = json_field(*body, "params");
      const Json* meta = params && params->is_object() ? json_field(*params, "_meta") : nullptr;
      modern_body = meta && meta->is_object() && json_field(*meta, kMetaProtocolVersion);
    }
    return Respond{
        rpc_error_response(
            400, std::move(id), kMcpUnsupportedProtocolVersion, "unsupported MCP-Protocol-Version",
            Json::object(
                {{"supported", modern_body ? Json::array({kModernVersion}) : supported_versions()},
                 {"requested", std::string(*version_header)}})),
        {},
        {},
        {}};
  }
  protocol_version_ = version_header ? std::string(*version_header) : "";

  JsonParseOptions parse_options;
  parse_options.max_bytes = config_.max_body_bytes;
  parse_options.keep_number_literals = true;
  Result<Json> parsed = parse_json(request.body, parse_options);
  if (!parsed.ok()) {
    return Respond{rpc_error_response(400, Json(), kJsonRpcParseError,
                                      "parse error: " + parsed.error().message),
                   {},
                   {},
                   {}};
  }
  std::vector<Json> items;
  if (parsed->is_array()) {
    if (!protocol_version_.empty() && protocol_version_ != kBatchVersion) {
      return Respond{rpc_error_response(
                         400, Json(), kJsonRpcInvalidRequest,
                         "JSON-RPC batches exist only in protocol " + std::string(kBatchVersion)),
                     {},
                     {},
                     {}};
    }
    if (parsed->empty() || parsed->size() > config_.max_batch) {
      return Respond{
          rpc_error_response(400, Json(), kJsonRpcInvalidRequest,
                             parsed->empty() ? "empty batch"
                                             : "a batch holds at most " +
                                                   std::to_string(config_.max_batch) + " messages"),
          {},
          {},
          {}};
    }
    batch_ = true;
    for (Json& item : *parsed) items.push_back(std::move(item));
  } else {
    items.push_back(std::move(*parsed));
  }

  std::optional<std::string_view> method_header = find_header(request.headers, "Mcp-Method");
  std::optional<std::string_view> name_header = find_header(request.headers, "Mcp-Name");
  for (Json& item : items) {
    Json raw_id = item.is_object() && item.contains("id") ? item["id"] : Json();
    if (!raw_id.is_string() && !raw_id.is_number_integer()) raw_id = Json();
    Result<JsonRpcMessage> message = parse_jsonrpc(std::move(item));
    auto p = std::make_shared<Pending>();
    if (!message.ok()) {
      p->id = raw_id;
      answer_error(*p, kJsonRpcInvalidRequest, "invalid request: " + message.error().message, {},
                   400);
      pending_.push_back(std::move(p));
      continue;
    }
    if (message->kind == JsonRpcKind::kResult || message->kind == JsonRpcKind::kError) {
      continue;  // a response to nothing we sent: accepted, nothing to answer
    }
    if (message->kind == JsonRpcKind::kNotification) {
      if (!batch_ && method_header && *method_header != message->method) {
        p->id = Json();
        answer_error(*p, kMcpHeaderMismatch,
                     "the Mcp-Method header names " + std::string(*method_header) +
                         " but the body names " + message->method,
                     {}, 400);
        pending_.push_back(std::move(p));
      }
      continue;  // notifications are accepted (202): the endpoint keeps no state to update
    }
    p->id = message->id;
    p->method = message->method;
    p->params = message->params.is_null() ? Json::object() : std::move(message->params);
    pending_.push_back(p);
    if (!p->params.is_object()) {
      answer_error(*p, kJsonRpcInvalidParams, "params must be an object");
      continue;
    }
    // The era of this request: a modern one names its version in _meta.
    const Json* meta = json_field(p->params, "_meta");
    const Json* version =
        meta != nullptr && meta->is_object() ? json_field(*meta, kMetaProtocolVersion) : nullptr;
    const bool header_modern = version_header && *version_header == kModernVersion;
    if (version != nullptr || header_modern) {
      p->modern = true;
      if (batch_) {
        answer_error(*p, kJsonRpcInvalidRequest, "protocol 2026-07-28 has no batches", {}, 400);
        continue;
      }
      // The header and _meta must agree before either is judged (-32020, not -32022).
      if (version != nullptr && version_header &&
          (!version->is_string() || version->get_ref<const std::string&>() != *version_header)) {
        answer_error(*p, kMcpHeaderMismatch,
                     "the MCP-Protocol-Version header says " + std::string(*version_header) +
                         " but _meta names another version",
                     {}, 400);
        continue;
      }
      // Every 2026-07-28 request carries its version and the client's capabilities in _meta.
      const Json* client_caps =
          meta != nullptr && meta->is_object()
              ? json_field(*meta, "io.modelcontextprotocol/clientCapabilities")
              : nullptr;
      if (version == nullptr || client_caps == nullptr || !client_caps->is_object()) {
        answer_error(*p, kJsonRpcInvalidParams,
                     std::string("protocol 2026-07-28: _meta[\"") +
                         (version == nullptr ? kMetaProtocolVersion
                                             : "io.modelcontextprotocol/clientCapabilities") +
                         "\"] is required",
                     {}, 400);
        continue;
      }
      if (!version->is_string() || version->get_ref<const std::string&>() != kModernVersion) {
        answer_error(
            *p, kMcpUnsupportedProtocolVersion, "unsupported protocol version",
            Json::object({{"supported", Json::array({kModernVersion})}, {"requested", *version}}),
            400);
        continue;
      }
      if (version_header && *version_header != kModernVersion) {
        answer_error(*p, kMcpHeaderMismatch,
                     "the MCP-Protocol-Version header says " + std::string(*version_header) +
                         " but _meta says " + kModernVersion,
                     {}, 400);
        continue;
      }
      if (!method_header || *method_header != p->method) {
        answer_error(*p, kMcpHeaderMismatch,
                     method_header ? "the Mcp-Method header names " + std::string(*method_header) +
                                         " but the body names " + p->method
                                   : "the Mcp-Method header is missing",
                     {}, 400);
        continue;
      }
      if (std::optional<std::string> name = mcp_name_of(p->method, p->params)) {
        std::optional<std::string> decoded =
            name_header ? decode_header_value(*name_header) : std::nullopt;
        if (!decoded || *decoded != *name) {
          answer_error(*p, kMcpHeaderMismatch,
                       name_header ? "the Mcp-Name header does not match the body"
                                   : "the Mcp-Name header is missing",
                       {}, 400);
          continue;
        }
      }
    } else if (!batch_ && method_header && *method_header != p->method) {
      answer_error(*p, kMcpHeaderMismatch,
                   "the Mcp-Method header names " + std::string(*method_header) +
                       " but the body names " + p->method,
                   {}, 400);
      continue;
    }
    classify(*p, now_ms);
  }
  return advance(now_ms);
}

void McpEndpoint::classify(Pending& p, int64_t now_ms) {
  (void)now_ms;
  const std::string& m = p.method;
  // 2026-07-28 removed these methods; a method a server does not implement is HTTP 404 there.
  if (p.modern && (m == "initialize" || m == "ping" || m == "logging/setLevel" ||
                   m == "resources/subscribe" || m == "resources/unsubscribe")) {
    return answer_error(p, kJsonRpcMethodNotFound,
                        m == "initialize"
                            ? "protocol 2026-07-28 has no initialize: use server/discover"
                            : "protocol 2026-07-28 has no " + m,
                        Json(), 404);
  }
  if (m == "initialize") {
    std::optional<std::string> asked = json_string(p.params, "protocolVersion");
    if (!asked) return answer_error(p, kJsonRpcInvalidParams, "initialize: protocolVersion");
    std::string version = is_legacy_version(*asked) ? *asked : kLegacyVersions[0];
    Json result = Json::object({{"protocolVersion", version},
                                {"capabilities", capabilities(config_.list_changed)},
                                {"serverInfo", server_info(config_)}});
    if (!config_.instructions.empty()) result["instructions"] = config_.instructions;
    return answer(p, std::move(result));
  }
  if (m == "server/discover") {
    // A cacheable result (ttlMs and cacheScope are required by 2026-07-28's DiscoverResult). What
    // it says changes only with the deployment, but a client must not carry it across one: 0 asks
    // it to discover again rather than trust an old answer, and private keeps shared caches out.
    Json result =
        Json::object({{"supportedVersions", Json::array({kModernVersion})},
                      {"capabilities", capabilities(config_.list_changed)},
                      {"ttlMs", 0},
                      {"cacheScope", "private"},
                      {"_meta", Json::object({{kMetaServerInfo, server_info(config_)}})}});
    if (!config_.instructions.empty()) result["instructions"] = config_.instructions;
    return answer(p, std::move(result));
  }
  if (m == "ping") return answer(p, Json::object());
  if (m == "subscriptions/listen" && config_.list_changed) {
    if (!p.modern) {
      return answer_error(p, kJsonRpcMethodNotFound,
                          "subscriptions/listen is protocol 2026-07-28's: earlier protocols "
                          "listen with GET /mcp");
    }
    if (batch_ || (!p.id.is_string() && !p.id.is_number_integer())) {
      return answer_error(p, kJsonRpcInvalidRequest, "subscriptions/listen: a single request");
    }
    const Json* filter = json_field(p.params, "notifications");
    if (filter == nullptr || !filter->is_object()) {
      return answer_error(p, kJsonRpcInvalidParams, "subscriptions/listen: notifications");
    }
    auto asked = [&](const char* field) {
      const Json* f = json_field(*filter, field);
      return f != nullptr && f->is_boolean() && f->get<bool>();
    };
    McpListen listen;
    listen.member = *member_;
    listen.modern = true;
    listen.subscription_id = p.id;
    listen.tools = asked("toolsListChanged");
    listen.resources = asked("resourcesListChanged");
    listen.prompts = asked("promptsListChanged");
    Json honoured = Json::object();
    if (listen.tools) honoured["toolsListChanged"] = true;
    if (listen.resources) honoured["resourcesListChanged"] = true;
    if (listen.prompts) honoured["promptsListChanged"] = true;
    p.response = Json::object(
        {{"jsonrpc", "2.0"},
         {"method", "notifications/subscriptions/acknowledged"},
         {"params", Json::object({{"notifications", std::move(honoured)},
                                  {"_meta", Json::object({{kMetaSubscriptionId, p.id}})}})}});
    p.work = Pending::Work::kListen;
    p.stage = Pending::Stage::kDone;
    listen_ = std::move(listen);
    return;
  }
  if (std::optional<ListKind> kind = list_kind_of(m)) {
    p.kind = *kind;
    if (config_.search_mode && *kind == ListKind::kTools) {
      return answer(
          p,
          Json::object({{"tools", search_mode_tools()}, {"ttlMs", 0}, {"cacheScope", "private"}}));
    }
    p.cursor.method = m;
    if (const Json* cursor = json_field(p.params, "cursor"); cursor && !cursor->is_null()) {
      std::optional<Cursor> c = decode_cursor(*cursor, m, config_.max_cursor_bytes);
      if (!c) return answer_error(p, kJsonRpcInvalidParams, "invalid cursor");
      p.cursor = *c;
    }
    p.work = Pending::Work::kList;
    p.stage = Pending::Stage::kNeedSnapshot;
    return;
  }
  auto unknown_tool = [&](const std::string& name) {
    answer_error(p, kJsonRpcInvalidParams, "Unknown tool: " + name);
  };
  if (m == "tools/call") {
    std::optional<std::string> name = json_string(p.params, "name");
    if (!name) return answer_error(p, kJsonRpcInvalidParams, "tools/call: name");
    if (const Json* a = json_field(p.params, "arguments"); a && !a->is_null() && !a->is_object()) {
      return answer_error(p, kJsonRpcInvalidParams, "tools/call: arguments must be an object");
    }
    if (*name == kSearchTool || *name == kDescribeTool || *name == kCallTool) {
      if (!config_.search_mode) return unknown_tool(*name);
      const Json* args = json_field(p.params, "arguments");
      Json arguments = args != nullptr && args->is_object() ? *args : Json::object();
      if (*name == kSearchTool) {
        std::optional<std::string> query = json_string(arguments, "query");
        if (!query || query->empty()) {
          return answer(p, text_result("query: a non-empty string is required", Json(), true));
        }
        p.query = *query;
        if (const Json* l = json_field(arguments, "limit"); l && !l->is_null()) {
          std::optional<int64_t> limit = json_int(arguments, "limit");
          if (!limit || *limit < 1 || *limit > static_cast<int64_t>(kMaxSearchHits)) {
            return answer(
                p, text_result("limit: an integer from 1 to " + std::to_string(kMaxSearchHits),
                               Json(), true));
          }
          p.limit = static_cast<std::size_t>(*limit);
        }
        p.work = Pending::Work::kSearch;
        p.stage = Pending::Stage::kNeedSnapshot;
        return;
      }
      std::optional<std::string> target = json_string(arguments, "name");
      if (!target) return answer(p, text_result("name: a tool's name is required", Json(), true));
      std::optional<UpstreamName> up = decode_mcp_name(*target);
      if (!up) return answer(p, text_result("no tool named " + *target, Json(), true));
      p.target = *up;
      p.exposed = *target;
      p.capability = CapabilityType::kTool;
      if (*name == kDescribeTool) {
        p.work = Pending::Work::kDescribe;
      } else {
        p.work = Pending::Work::kCall;
        p.method = "tools/call";
        p.relay_params = Json::object({{"name", up->name}});
        if (const Json* a = json_field(arguments, "arguments"); a && a->is_object()) {
          p.relay_params["arguments"] = *a;
        }
      }
      p.stage = Pending::Stage::kNeedSnapshot;
      return;
    }
    std::optional<UpstreamName> up = decode_mcp_name(*name);
    if (!up) return unknown_tool(*name);
    p.target = *up;
    p.exposed = *name;
    p.capability = CapabilityType::kTool;
    p.relay_params = p.params;
    p.relay_params["name"] = up->name;
    p.work = Pending::Work::kCall;
    p.stage = Pending::Stage::kNeedSnapshot;
    return;
  }
  if (m == "prompts/get") {
    std::optional<std::string> name = json_string(p.params, "name");
    if (!name) return answer_error(p, kJsonRpcInvalidParams, "prompts/get: name");
    std::optional<UpstreamName> up = decode_mcp_name(*name);
    if (!up) return answer_error(p, kJsonRpcInvalidParams, "Unknown prompt: " + *name);
    p.target = *up;
    p.exposed = *name;
    p.capability = CapabilityType::kPrompt;
    p.relay_params = p.params;
    p.relay_params["name"] = up->name;
    p.work = Pending::Work::kCall;
    p.stage = Pending::Stage::kNeedSnapshot;
    return;
  }
  if (m == "resources/read") {
    std::optional<std::string> uri = json_string(p.params, "uri");
    if (!uri) return answer_error(p, kJsonRpcInvalidParams, "resources/read: uri");
    std::optional<UpstreamName> up = decode_mcp_uri(*uri);
    if (!up) {
      return answer_error(p, p.modern ? kJsonRpcInvalidParams : kMcpErrorResourceNotFound,
                          "Resource not found", Json::object({{"uri", *uri}}));
    }
    p.target = *up;
    p.exposed = *uri;
    p.capability = CapabilityType::kResource;
    p.relay_params = p.params;
    p.relay_params["uri"] = up->name;
    p.work = Pending::Work::kCall;
    p.stage = Pending::Stage::kNeedSnapshot;
    return;
  }
  if (m == "completion/complete") {
    const Json* ref = json_field(p.params, "ref");
    std::optional<std::string> type =
        ref && ref->is_object() ? json_string(*ref, "type") : std::nullopt;
    std::optional<UpstreamName> up;
    std::string field;
    if (type == std::optional<std::string>("ref/prompt")) {
      field = "name";
      if (auto n = json_string(*ref, "name")) up = decode_mcp_name(*n), p.exposed = *n;
      p.capability = CapabilityType::kPrompt;
    } else if (type == std::optional<std::string>("ref/resource")) {
      field = "uri";
      if (auto u = json_string(*ref, "uri")) up = decode_mcp_uri(*u), p.exposed = *u;
      p.capability = CapabilityType::kResourceTemplate;
    } else {
      return answer_error(p, kJsonRpcInvalidParams, "completion/complete: ref");
    }
    if (!up) return answer_error(p, kJsonRpcInvalidParams, "completion/complete: unknown ref");
    p.target = *up;
    p.relay_params = p.params;
    p.relay_params["ref"][field] = up->name;
    p.work = Pending::Work::kCall;
    p.stage = Pending::Stage::kNeedSnapshot;
    return;
  }
  answer_error(p, kJsonRpcMethodNotFound, "Method not found: " + m, Json(), p.modern ? 404 : 200);
}

McpStep McpEndpoint::advance(int64_t now_ms) {
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = *pending_[i];
    if (p.stage == Pending::Stage::kNeedSnapshot) {
      current_ = i;
      NeedSnapshot need{*member_, SnapshotQuery{}};
      if (p.work == Pending::Work::kList || p.work == Pending::Work::kSearch) {
        need.query.after = p.work == Pending::Work::kList ? p.cursor.after : "";
        need.query.limit = std::min(config_.max_connections_per_read, kMaxSnapshotLimit);
      } else {
        need.query.only = p.target.connection_id;
        need.query.limit = 1;
      }
      return need;
    }
    if (p.stage == Pending::Stage::kNeedRelay) {
      current_ = i;
      return NeedRelay{{*relay_}};
    }
  }
  return finish(now_ms);
}

McpStep McpEndpoint::finish(int64_t now_ms) {
  (void)now_ms;
  // Dedup the background revalidations (a batch may read the same connection twice).
  std::vector<Revalidation> background;
  for (Revalidation& r : background_) {
    if (std::find(background.begin(), background.end(), r) == background.end()) {
      background.push_back(std::move(r));
    }
  }
  std::vector<const Pending*> answers;
  int status = 200;
  for (const auto& p : pending_) {
    if (p->stage != Pending::Stage::kDone) continue;
    answers.push_back(p.get());
    if (!batch_ && p->http_status != 200) status = p->http_status;
  }
  auto text_of = [](const Pending* p) {
    return p->response_text.empty() ? serialize_json(p->response) : p->response_text;
  };
  HttpResponse response;
  if (listen_) {
    // subscriptions/listen: the stream opens with the acknowledgement (classify made it the
    // POST's only request).
    response.status = 200;
    response.headers = {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-store"}};
    for (const auto& p : pending_) {
      if (p->work == Pending::Work::kListen) response.body = mcp_sse_event(p->response);
    }
  } else if (streaming_) {
    // The head went out with open_stream(): the answers are its events, one per response.
    response.status = 200;
    set_event_stream_headers(response);
    for (const Pending* p : answers) response.body += mcp_sse_event_text(text_of(p));
  } else if (answers.empty()) {
    response.status = 202;
    response.headers = {{"Cache-Control", "no-store"}};
  } else if (!batch_) {
    response = json_response(status, text_of(answers.front()));
  } else {
    // serialize_json writes an array as its elements' texts joined by ','.
    std::string body = "[";
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (i > 0) body += ',';
      body += text_of(answers[i]);
    }
    body += ']';
    response = json_response(200, body);
  }
  return Respond{std::move(response), std::move(background), std::move(log_), stats_};
}

VisibleConnections mcp_visible_lists(const DiscoverySnapshot& snapshot,
                                     const McpEndpointConfig& config, int64_t now_ms) {
  return visible_connections(snapshot, config.freshness, now_ms, config.render,
                             &mcp_items_renderer());
}

std::optional<HttpResponse> McpEndpoint::open_stream() {
  if (!may_stream()) return std::nullopt;
  streaming_ = true;
  HttpResponse head;
  head.status = 200;
  set_event_stream_headers(head);
  return head;
}

bool McpEndpoint::one_list_request() const {
  return !batch_ && pending_.size() == 1 && list_kind_of(pending_.front()->method).has_value();
}

McpStep McpEndpoint::resume_snapshot(Result<DiscoverySnapshot> snapshot, int64_t now_ms) {
  if (current_ >= pending_.size() || pending_[current_]->stage != Pending::Stage::kNeedSnapshot) {
    return Respond{error_response(HttpErrorCode::kInternal, "internal error"),
                   {},
                   Error(ErrorCode::kInternal, "McpEndpoint::resume_snapshot out of turn"),
                   {}};
  }
  Pending& p = *pending_[current_];
  if (!snapshot.ok()) {
    log_ = snapshot.error();
    answer_error(p, kMcpErrorStoreUnavailable, store_unavailable_message(snapshot.error()));
    return advance(now_ms);
  }
  if (snapshot->member != *member_) {
    log_ = Error(ErrorCode::kInternal, "the snapshot is of another member");
    answer_error(p, kJsonRpcInternalError, "internal error");
    return advance(now_ms);
  }
  // A list reads each connection's exposed items from the render cache (parsed only on a miss).
  VisibleConnections visible =
      p.work == Pending::Work::kList
          ? mcp_visible_lists(*snapshot, config_, now_ms)
          : visible_connections(*snapshot, config_.freshness, now_ms, config_.render);
  for (Revalidation& r : visible.revalidations) background_.push_back(std::move(r));
  stats_.fresh += visible.stats.fresh;
  stats_.stale += visible.stats.stale;
  stats_.pending += visible.stats.pending;
  stats_.error += visible.stats.error;
  stats_.expired += visible.stats.expired;
  stats_.authorization_required += visible.stats.authorization_required;
  switch (p.work) {
    case Pending::Work::kList:
      serve_list(p, *snapshot, visible);
      break;
    case Pending::Work::kSearch:
      serve_search(p, *snapshot, now_ms);
      break;
    case Pending::Work::kDescribe:
    case Pending::Work::kCall:
      prepare_call(p, *snapshot, visible, now_ms);
      break;
    case Pending::Work::kNone:
    case Pending::Work::kListen:
      answer_error(p, kJsonRpcInternalError, "internal error");
      break;
  }
  return advance(now_ms);
}

void McpEndpoint::serve_list(Pending& p, const DiscoverySnapshot& snapshot,
                             const VisibleConnections& visible) {
  using ItemList = RenderedFragment::ItemList;
  const Cursor& from = p.cursor;
  // The items' JSON text: the cached fragments' parts, never parsed again.
  std::string items = "[";
  std::size_t count = 0;
  Json missing = Json::array();
  std::optional<int64_t> ttl;
  std::optional<Cursor> next;
  for (std::size_t k = 0; k < visible.connections.size(); ++k) {
    const VisibleConnection& c = visible.connections[k];
    if (!from.connection.empty() && c.id < from.connection) continue;
    std::size_t offset = c.id == from.connection ? from.offset : 0;
    if (!c.servable) {
      if (offset == 0) {
        missing.push_back(Json::object({{"id", c.id}, {"status", entry_status_name(c.status)}}));
      }
      continue;
    }
    const ItemList* list = c.fragment != nullptr && c.fragment->lists.size() ==
                                                        static_cast<std::size_t>(kListKindCount)
                               ? &c.fragment->lists[static_cast<std::size_t>(p.kind)]
                               : nullptr;
    if (list == nullptr || list->state != ItemList::State::kListed) {
      if (list != nullptr && list->state == ItemList::State::kFailed && offset == 0) {
        missing.push_back(Json::object({{"id", c.id}, {"status", "failed"}}));
      }
      continue;
    }
    ttl = std::min(ttl.value_or(c.ttl_ms), c.ttl_ms);
    const std::vector<std::string>& all = list->items;
    std::size_t i = offset;
    for (; i < all.size(); ++i) {
      if (count >= config_.page_size) break;
      if (all[i].empty()) continue;  // nothing to expose
      if (count > 0) items += ',';
      items += all[i];
      ++count;
    }
    if (i < all.size()) {
      // The page is full inside this connection: resume here.
      Cursor n;
      n.method = p.method;
      n.connection = c.id;
      n.offset = i;
      // The id before this one in the snapshot (or where this read began): a read after it
      // starts with this connection.
      n.after = from.after;
      for (const GrantedConnection& g : snapshot.connections) {
        if (g.id < c.id) n.after = g.id;
      }
      next = n;
      break;
    }
  }
  items += ']';
  if (!next && snapshot.next_after) {
    Cursor n;
    n.method = p.method;
    n.after = *snapshot.next_after;
    next = n;
  }
  Json result = Json::object({{"ttlMs", ttl.value_or(0)}, {"cacheScope", "private"}});
  if (!missing.empty()) result["_meta"] = Json::object({{"quiver/missing", std::move(missing)}});
  if (next) result["nextCursor"] = encode_cursor(*next);
  answer(p, std::move(result));
  // The text serialize_json would write with the items in place (objects' keys in order).
  const std::string field = list_result_field(p.kind);
  std::string text;
  text.reserve(items.size() + 256);
  append_json_object_with(text, p.response, "result", [&](std::string& out) {
    append_json_object_with(out, p.response["result"], field, [&](std::string& o) { o += items; });
  });
  p.response_text = std::move(text);
}

void McpEndpoint::serve_search(Pending& p, const DiscoverySnapshot& snapshot, int64_t now_ms) {
  SearchCorpus corpus = search_corpus(snapshot, config_.freshness, now_ms, config_.render);
  IndexedToolSearcher fallback;
  ToolSearcher* searcher = config_.searcher != nullptr ? config_.searcher : &fallback;
  Result<std::vector<SearchHit>> hits = searcher->search(corpus, p.query, p.limit);
  if (!hits.ok()) {
    if (hits.error().code == ErrorCode::kInvalidArgument ||
        hits.error().code == ErrorCode::kTooLarge) {
      return answer(p, text_result("query: " + hits.error().message, Json(), true));
    }
    log_ = hits.error();
    return answer_error(p, kJsonRpcInternalError, "the search failed");
  }
  Json found = Json::array();
  std::string text;
  for (const SearchHit& hit : *hits) {
    if (hit.entry >= corpus.tools.size()) continue;
    const ToolCandidate& t = corpus.tools[hit.entry];
    Json row = Json::object(
        {{"name", encode_mcp_name(t.connection_id, hit.name)}, {"connection", t.connection_id}});
    if (auto title = json_string(t.tool, "title")) row["title"] = *title;
    if (auto d = json_string(t.tool, "description")) row["description"] = *d;
    text += row["name"].get<std::string>();
    if (auto d = json_string(t.tool, "description")) text += ": " + d->substr(0, 200);
    text += "\n";
    found.push_back(std::move(row));
  }
  if (found.empty()) text = "no tool matches";
  Json structured = Json::object({{"tools", std::move(found)}});
  if (!corpus.unavailable.empty()) {
    Json missing = Json::array();
    for (const auto& [id, status] : corpus.unavailable) {
      missing.push_back(Json::object({{"id", id}, {"status", entry_status_name(status)}}));
    }
    structured["missing"] = std::move(missing);
  }
  answer(p, text_result(std::move(text), std::move(structured)));
}

void McpEndpoint::prepare_call(Pending& p, const DiscoverySnapshot& snapshot,
                               const VisibleConnections& visible, int64_t now_ms) {
  const VisibleConnection* c = nullptr;
  for (const VisibleConnection& v : visible.connections) {
    if (v.id == p.target.connection_id) c = &v;
  }
  const GrantedConnection* g = snapshot.find(p.target.connection_id);
  auto refuse = [&](const std::string& why) {
    if (p.work == Pending::Work::kDescribe) {
      return answer(p, text_result("no tool named " + p.exposed + why, Json(), true));
    }
    switch (p.capability) {
      case CapabilityType::kTool:
        return answer_error(p, kJsonRpcInvalidParams, "Unknown tool: " + p.exposed + why);
      case CapabilityType::kPrompt:
        return answer_error(p, kJsonRpcInvalidParams, "Unknown prompt: " + p.exposed + why);
      case CapabilityType::kResource:
      case CapabilityType::kResourceTemplate:
        // SEP-2164 (2026-07-28): an unknown resource is -32602; the older eras' -32002 stays.
        return answer_error(p, p.modern ? kJsonRpcInvalidParams : kMcpErrorResourceNotFound,
                            "Resource not found" + why, Json::object({{"uri", p.exposed}}));
    }
  };
  // Not granted, removed, or unknown: indistinguishable, by design.
  if (c == nullptr || g == nullptr || !c->principal) return refuse("");
  if (p.capability != CapabilityType::kResourceTemplate &&
      !quiver::visible(g->disabled, p.capability, p.target.name)) {
    return refuse(" (disabled)");
  }
  // A read of a URI that expands from a disabled template is hidden with it.
  if (p.capability == CapabilityType::kResource &&
      !resource_read_visible(g->disabled, p.target.name)) {
    return refuse(" (disabled)");
  }
  if (p.work == Pending::Work::kDescribe) {
    std::optional<std::vector<Json>> tools =
        c->servable ? listed_items(c->manifest, ListKind::kTools) : std::nullopt;
    if (tools) {
      for (Json& t : *tools) {
        if (json_string(t, "name") == std::optional<std::string>(p.target.name)) {
          std::optional<Json> exposed = expose_item(ListKind::kTools, c->id, std::move(t));
          return answer(p,
                        text_result(serialize_json(*exposed), Json::object({{"tool", *exposed}})));
        }
      }
    }
    return refuse(c->servable ? ""
                              : std::string(" (the connection's list is ") +
                                    entry_status_name(c->status) + ")");
  }
  relay_ =
      RelayCall{p.target.connection_id,
                *member_,
                *c->principal,
                p.method,
                p.relay_params,
                p.exposed,
                p.id,
                now_ms + config_.relay_timeout_ms,
                p.modern ? kModernVersion
                         : (protocol_version_.empty() ? kLegacyVersions[0] : protocol_version_)};
  p.stage = Pending::Stage::kNeedRelay;
}

McpStep McpEndpoint::resume_relay(std::vector<RelayReply> replies, int64_t now_ms) {
  if (current_ >= pending_.size() || pending_[current_]->stage != Pending::Stage::kNeedRelay) {
    return Respond{error_response(HttpErrorCode::kInternal, "internal error"),
                   {},
                   Error(ErrorCode::kInternal, "McpEndpoint::resume_relay out of turn"),
                   {}};
  }
  Pending& p = *pending_[current_];
  RelayReply reply = replies.empty()
                         ? RelayReply::failed(RelayFailure::kUnavailable,
                                              "tool calls are not available at this endpoint")
                         : std::move(replies.front());
  switch (reply.kind) {
    case RelayReply::Kind::kResult:
      expose_result_uris(reply.result, p.target.connection_id);
      if (p.modern && reply.result.is_object()) {
        // 2026-07-28 results carry cache hints (resources/read requires them): an upstream of an
        // older era sends none, and a relayed answer is the caller's own, not to be kept.
        if (!reply.result.contains("ttlMs")) reply.result["ttlMs"] = 0;
        if (!reply.result.contains("cacheScope")) reply.result["cacheScope"] = "private";
      }
      answer(p, std::move(reply.result));
      break;
    case RelayReply::Kind::kUpstreamError:
    case RelayReply::Kind::kFailed:
      answer_error(p, reply.error.code, reply.error.message, reply.error.data);
      break;
  }
  return advance(now_ms);
}

}  // namespace quiver
