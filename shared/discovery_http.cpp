#include "shared/discovery_http.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <set>

#include "shared/ascii.h"
#include "shared/enum_names.h"
#include "shared/json.h"
#include "shared/layout.h"
#include "shared/numbers.h"
#include "shared/utf8.h"
#include "shared/webhook_signature.h"

namespace quiver {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hex_value(s[i + 1]);
      int lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    std::size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) break;
    s.remove_prefix(at + 1);
  }
  return parts;
}

// A query parameter's name as an error message shows it: printable ASCII, at most 64 bytes.
std::string shown_name(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (name.size() > 64) out += "...";
  return out;
}

HttpHeaders json_headers() { return {{"Content-Type", "application/json"}}; }

}  // namespace

// ---- plain values ------------------------------------------------------------------------------

std::optional<std::string_view> find_header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (ascii_iequals(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

const char* http_error_name(HttpErrorCode code) {
  static constexpr const char* const kNames[] = {
      "UNAUTHENTICATED",   "NOT_FOUND",    "METHOD_NOT_ALLOWED", "BAD_REQUEST",
      "PAYLOAD_TOO_LARGE", "URI_TOO_LONG", "STORE_UNAVAILABLE",  "UPSTREAM_UNAVAILABLE",
      "INTERNAL",          "FORBIDDEN"};
  static_assert(std::size(kNames) == kHttpErrorCodeCount);
  return name_of(kNames, code, "INTERNAL");
}

int http_error_status(HttpErrorCode code) {
  switch (code) {
    case HttpErrorCode::kUnauthenticated:
      return 401;
    case HttpErrorCode::kNotFound:
      return 404;
    case HttpErrorCode::kMethodNotAllowed:
      return 405;
    case HttpErrorCode::kBadRequest:
      return 400;
    case HttpErrorCode::kPayloadTooLarge:
      return 413;
    case HttpErrorCode::kUriTooLong:
      return 414;
    case HttpErrorCode::kStoreUnavailable:
    case HttpErrorCode::kUpstreamUnavailable:
      return 503;
    case HttpErrorCode::kForbidden:
      return 403;
    case HttpErrorCode::kInternal:
      return 500;
  }
  return 500;
}

const char* store_unavailable_message(const Error& error) {
  if (is_layout_migrating_error(error)) {
    return "the cache store's namespace is being copied to key layout v2 (its `layout` record); "
           "writes wait for the switch: retry shortly";
  }
  if (is_unknown_layout_error(error)) {
    return "the cache store holds the namespace in a key layout this server does not read (its "
           "`layout` record); upgrade it";
  }
  return error.code == ErrorCode::kStoreNotReady
             ? "the cache store is being restored (namespace not initialised); retry shortly"
             : "the cache store is unavailable";
}

HttpResponse error_response(HttpErrorCode code, std::string_view message) {
  HttpResponse r;
  r.status = http_error_status(code);
  r.headers = json_headers();
  r.headers.emplace_back("Cache-Control", "no-store");
  if (code == HttpErrorCode::kUnauthenticated) {
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"quiver\"");
  }
  Json body = Json::object();
  body["error"] = Json::object({{"code", http_error_name(code)}, {"message", message}});
  r.body = json_text(body);
  return r;
}

CallerAuth authenticate_caller(const HttpHeaders& headers, const Keyring* keyring, int64_t now_ms,
                               const VerifyOptions& options, std::string_view no_keyring_reason,
                               VerifiedTokenCache* tokens) {
  std::optional<std::string_view> authorization;
  for (const auto& [name, value] : headers) {
    if (!ascii_iequals(name, "Authorization")) continue;
    if (authorization) return CallerAuth::unauthenticated("more than one Authorization header");
    authorization = value;
  }
  if (!authorization) {
    return CallerAuth::unauthenticated("a bearer token is required (Authorization: Bearer ...)");
  }
  Result<std::string> token = parse_bearer(*authorization);
  if (!token.ok()) return CallerAuth::unauthenticated(token.error().message);
  if (keyring == nullptr) return CallerAuth::unauthenticated(std::string(no_keyring_reason));
  Result<CallerIdentity> caller = tokens != nullptr
                                      ? tokens->verify(*token, *keyring, now_ms, options)
                                      : verify_caller_token(*token, *keyring, now_ms, options);
  if (!caller.ok()) return CallerAuth::unauthenticated(caller.error().message);
  return CallerAuth::member(caller->member_id, caller->is_operator());
}

// ---- routing and queries -----------------------------------------------------------------------

SharedRouteMatch match_shared_route(std::string_view raw_path) {
  SharedRouteMatch m;
  if (raw_path == "/v1/manifests") {
    m.route = SharedRoute::kManifests;
  } else if (raw_path == "/v1/search") {
    m.route = SharedRoute::kSearch;
  } else if (raw_path == kWebhookRefreshPath) {
    m.route = SharedRoute::kWebhook;
  } else {
    std::vector<std::string_view> parts = split(raw_path, '/');
    if (parts.size() == 5 && parts[0].empty() && parts[1] == "v1" &&
        parts[2] == "mcp-connections" && !parts[3].empty() &&
        (parts[4] == "manifest" || parts[4] == "refresh-tools")) {
      m.route = parts[4] == "manifest" ? SharedRoute::kConnectionManifest : SharedRoute::kRefresh;
      m.raw_id = parts[3];
    }
  }
  return m;
}

const char* shared_route_allow(SharedRoute route) {
  return route == SharedRoute::kRefresh || route == SharedRoute::kWebhook ? "POST" : "GET, HEAD";
}

bool shared_route_allows(SharedRoute route, std::string_view method) {
  if (route == SharedRoute::kNone) return false;
  if (route == SharedRoute::kRefresh || route == SharedRoute::kWebhook) return method == "POST";
  return method == "GET" || method == "HEAD";
}

bool is_discovery_path(std::string_view path) {
  SharedRoute r = match_shared_route(path).route;
  return r != SharedRoute::kNone && r != SharedRoute::kWebhook;
}

const std::string* QueryParams::find(std::string_view name) const {
  for (const auto& [n, v] : params) {
    if (n == name) return &v;
  }
  return nullptr;
}

namespace {

QueryParams parse_params(std::string_view text, std::initializer_list<const char*> allowed,
                         bool ignore_unknown) {
  QueryParams q;
  if (text.empty()) return q;
  for (std::string_view part : split(text, '&')) {
    if (part.empty()) continue;  // "a=1&&b=2", a trailing '&'
    std::size_t eq = part.find('=');
    std::optional<std::string> name = percent_decode(part.substr(0, eq), true);
    std::optional<std::string> value =
        percent_decode(eq == std::string_view::npos ? "" : part.substr(eq + 1), true);
    if (!name || !value) {
      q.error = "malformed percent-encoding in the query";
      return q;
    }
    if (*name == "principal" || *name == "member") {
      q.error = "`" + *name + "` is not a parameter: the caller comes from the bearer token";
      return q;
    }
    bool known =
        std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return *name == a; });
    if (!known && ignore_unknown) continue;
    if (!known) {
      q.error = "unknown query parameter `" + shown_name(*name) + "`";
      return q;
    }
    if (q.find(*name) != nullptr) {
      q.error = "query parameter `" + *name + "` repeats";
      return q;
    }
    q.params.emplace_back(std::move(*name), std::move(*value));
  }
  return q;
}

}  // namespace

QueryParams parse_query_params(std::string_view text, std::initializer_list<const char*> allowed) {
  return parse_params(text, allowed, false);
}

QueryParams parse_known_query_params(std::string_view text,
                                     std::initializer_list<const char*> known) {
  return parse_params(text, known, true);
}

std::optional<std::size_t> parse_count_param(std::string_view s, std::size_t min, std::size_t max) {
  if (s.size() > 6) return std::nullopt;
  std::optional<uint64_t> v = parse_decimal_u64(s, max);
  if (!v || *v < min) return std::nullopt;
  return static_cast<std::size_t>(*v);
}

// ---- search ------------------------------------------------------------------------------------

std::vector<SearchEntry> search_entries(const SearchCorpus& corpus) {
  std::vector<SearchEntry> entries;
  entries.reserve(corpus.tools.size());
  for (const ToolCandidate& c : corpus.tools) {
    SearchEntry e;
    e.connection_id = c.connection_id;
    e.name = json_string(c.tool, "name").value_or("");
    std::optional<std::string> title = json_string(c.tool, "title");
    if (!title) {
      if (const Json* annotations = json_field(c.tool, "annotations")) {
        title = json_string(*annotations, "title");
      }
    }
    e.title = title.value_or("");
    e.description = json_string(c.tool, "description").value_or("");
    entries.push_back(std::move(e));
  }
  return entries;
}

Result<std::vector<SearchHit>> IndexedToolSearcher::search(const SearchCorpus& corpus,
                                                           std::string_view query,
                                                           std::size_t limit) {
  if (corpus.tools.empty()) {
    // Nothing to rank, but the query is still checked: the answer must not depend on the data.
    Result<std::string> expression = search_match_expression(query);
    if (!expression.ok()) return expression.error();
    return std::vector<SearchHit>{};
  }
  const int capped = static_cast<int>(std::min<std::size_t>(limit, kMaxSearchLimit));
  std::string key;
  std::shared_ptr<const SearchIndex> index;
  if (cache_ != nullptr && corpus.member.has_value()) {
    key = search_cache_key(*corpus.member, {corpus.version});
    index = cache_->find(key);
  }
  if (index == nullptr) {
    Result<SearchIndex> built = SearchIndex::build(search_entries(corpus), weights_);
    if (!built.ok()) return built.error();
    index = std::make_shared<const SearchIndex>(std::move(*built));
    if (!key.empty()) cache_->insert(key, index);
  }
  return index->search(query, capped);
}

// ---- the exchange ------------------------------------------------------------------------------

DiscoveryStep DiscoveryExchange::respond(HttpResponse response) {
  stage_ = Stage::kDone;
  if (head_) response.body.clear();
  Respond r;
  r.response = std::move(response);
  return r;
}

DiscoveryStep DiscoveryExchange::fail(HttpErrorCode code, std::string message,
                                      std::optional<Error> log) {
  stage_ = Stage::kDone;
  Respond r;
  r.response = error_response(code, message);
  if (head_) r.response.body.clear();
  r.log = std::move(log);
  return r;
}

DiscoveryStep DiscoveryExchange::out_of_turn(const char* what) {
  return fail(HttpErrorCode::kInternal, "internal error",
              Error(ErrorCode::kInternal, std::string("discovery: ") + what + " out of turn"));
}

DiscoveryStep DiscoveryExchange::start(const HttpRequest& request, const CallerAuth& caller,
                                       int64_t now_ms) {
  if (stage_ != Stage::kStart) return out_of_turn("start");
  const HttpLimits& limits = config_.limits;
  head_ = request.method == "HEAD";
  if (request.path.size() > limits.max_path_bytes) {
    return fail(HttpErrorCode::kUriTooLong, "the path is too long");
  }
  if (request.query.size() > limits.max_query_bytes) {
    return fail(HttpErrorCode::kUriTooLong, "the query is too long");
  }
  if (request.body.size() > limits.max_body_bytes) {
    return fail(HttpErrorCode::kPayloadTooLarge, "the request body is too large");
  }

  // Route by shape; the connection id is checked only after authentication.
  const SharedRouteMatch match = match_shared_route(request.path);
  const std::string_view raw_id = match.raw_id;
  switch (match.route) {
    case SharedRoute::kManifests:
      route_ = Route::kManifests;
      break;
    case SharedRoute::kSearch:
      route_ = Route::kSearch;
      break;
    case SharedRoute::kConnectionManifest:
      route_ = Route::kConnectionManifest;
      break;
    case SharedRoute::kRefresh:
      route_ = Route::kRefresh;
      break;
    case SharedRoute::kWebhook:
    case SharedRoute::kNone:
      return fail(HttpErrorCode::kNotFound, "no such endpoint");
  }
  if (!shared_route_allows(match.route, request.method)) {
    head_ = false;
    DiscoveryStep step = fail(HttpErrorCode::kMethodNotAllowed, "method not allowed");
    std::get<Respond>(step).response.headers.emplace_back("Allow", shared_route_allow(match.route));
    return step;
  }

  if (!caller.member_id.has_value()) {
    return fail(HttpErrorCode::kUnauthenticated,
                caller.failure.empty() ? "a bearer token is required" : caller.failure);
  }
  Result<Principal> member = Principal::member(*caller.member_id);
  if (!member.ok()) {
    return fail(HttpErrorCode::kUnauthenticated, "the token names no valid member");
  }
  member_ = *member;

  if (route_ == Route::kConnectionManifest || route_ == Route::kRefresh) {
    std::optional<std::string> id = percent_decode(raw_id, false);
    // An id that cannot exist is answered like one that is not granted.
    if (!id || !validate_connection_id(*id).ok()) {
      return fail(HttpErrorCode::kNotFound, "no such connection");
    }
    connection_id_ = *id;
  }

  QueryParams query;
  switch (route_) {
    case Route::kManifests:
      query = parse_query_params(request.query, {"view", "after", "limit"});
      break;
    case Route::kConnectionManifest:
      query = parse_query_params(request.query, {"view"});
      break;
    case Route::kSearch:
      query = parse_query_params(request.query, {"q", "limit"});
      break;
    case Route::kRefresh:
    case Route::kNone:
      query = parse_query_params(request.query, {});
      break;
  }
  if (query.error) return fail(HttpErrorCode::kBadRequest, *query.error);
  auto param = [&](const char* name) { return query.find(name); };
  if (const std::string* v = param("view")) {
    std::optional<DiscoveryView> view = discovery_view_from_name(*v);
    if (!view) return fail(HttpErrorCode::kBadRequest, "view must be `manifest` or `mcp`");
    view_ = *view;
  }
  if (std::optional<std::string_view> inm = find_header(request.headers, "If-None-Match")) {
    if_none_match_ = std::string(*inm);
  }

  NeedSnapshot need{*member_, SnapshotQuery{}};
  switch (route_) {
    case Route::kManifests: {
      need.query.limit = std::min(limits.default_page_size, limits.max_page_size);
      if (const std::string* v = param("limit")) {
        std::optional<std::size_t> n =
            parse_count_param(*v, 1, std::min(limits.max_page_size, kMaxSnapshotLimit));
        if (!n) {
          return fail(HttpErrorCode::kBadRequest,
                      "limit must be between 1 and " + std::to_string(limits.max_page_size));
        }
        need.query.limit = *n;
      }
      if (const std::string* v = param("after")) {
        if (!validate_connection_id(*v).ok()) {
          return fail(HttpErrorCode::kBadRequest, "after must be a connection id");
        }
        need.query.after = *v;
      }
      break;
    }
    case Route::kSearch: {
      const std::string* q = param("q");
      if (q == nullptr || q->empty()) return fail(HttpErrorCode::kBadRequest, "q is required");
      if (q->size() > limits.max_search_query_bytes) {
        return fail(HttpErrorCode::kBadRequest, "q is too long");
      }
      if (!is_valid_utf8(*q)) return fail(HttpErrorCode::kBadRequest, "q is not UTF-8");
      search_query_ = *q;
      search_limit_ = std::min(limits.default_search_limit, limits.max_search_limit);
      if (const std::string* v = param("limit")) {
        std::optional<std::size_t> n = parse_count_param(*v, 1, limits.max_search_limit);
        if (!n) {
          return fail(HttpErrorCode::kBadRequest,
                      "limit must be between 1 and " + std::to_string(limits.max_search_limit));
        }
        search_limit_ = *n;
      }
      need.query.limit = std::min(limits.search_max_connections, kMaxSnapshotLimit);
      break;
    }
    case Route::kConnectionManifest:
    case Route::kRefresh:
      need.query.only = connection_id_;
      need.query.limit = 1;
      break;
    case Route::kNone:
      return out_of_turn("routing");
  }
  stage_ = Stage::kSnapshot;
  return need;
}

DiscoveryStep DiscoveryExchange::answer_read(RenderedDiscovery rendered) {
  stage_ = Stage::kDone;
  Respond r;
  r.background = std::move(rendered.revalidations);
  r.stats = rendered.stats;
  HttpHeaders headers = json_headers();
  headers.emplace_back("ETag", rendered.etag);
  headers.emplace_back("Cache-Control", rendered.cache_control);
  headers.emplace_back("Vary", "Authorization");
  // The renderers compare If-None-Match before rendering the body (`not_modified`, the body is
  // then empty); the search answer's strong ETag is its body's hash, compared here.
  if (rendered.not_modified ||
      (!if_none_match_.empty() && if_none_match_matches(if_none_match_, rendered.etag))) {
    r.response.status = 304;
    headers.erase(headers.begin());  // no body, no Content-Type
  } else {
    r.response.status = 200;
    if (!head_) r.response.body = std::move(rendered.body);
  }
  r.response.headers = std::move(headers);
  return r;
}

DiscoveryStep DiscoveryExchange::resume_snapshot(Result<DiscoverySnapshot> snapshot,
                                                 int64_t now_ms) {
  if (stage_ != Stage::kSnapshot) return out_of_turn("resume_snapshot");
  if (!snapshot.ok()) {
    return fail(HttpErrorCode::kStoreUnavailable, store_unavailable_message(snapshot.error()),
                snapshot.error());
  }
  if (snapshot->member != *member_) {
    return fail(HttpErrorCode::kInternal, "internal error",
                Error(ErrorCode::kInternal, "discovery: the snapshot is for another caller"));
  }
  RenderOptions options = config_.render;
  options.view = view_;
  options.if_none_match = if_none_match_;
  options.omit_body = head_;  // HEAD: headers only, the body is never rendered
  options.record_clock = record_clock_;
  // A rendered answer whose clock holes were recorded is kept (a copy) for take_rendered().
  auto keep = [this](RenderedDiscovery rendered) {
    if (rendered.clock) rendered_ = rendered;
    return answer_read(std::move(rendered));
  };

  switch (route_) {
    case Route::kManifests:
      return keep(render_manifests(*snapshot, config_.freshness, now_ms, options));

    case Route::kConnectionManifest: {
      Result<RenderedDiscovery> rendered =
          render_connection_manifest(*snapshot, connection_id_, config_.freshness, now_ms, options);
      if (!rendered.ok()) return fail(HttpErrorCode::kNotFound, "no such connection");
      return keep(std::move(*rendered));
    }

    case Route::kSearch: {
      SearchCorpus corpus = search_corpus(*snapshot, config_.freshness, now_ms, options);
      IndexedToolSearcher uncached;
      ToolSearcher* searcher = config_.searcher ? config_.searcher : &uncached;
      Result<std::vector<SearchHit>> hits = searcher->search(corpus, search_query_, search_limit_);
      if (!hits.ok()) {
        const ErrorCode code = hits.error().code;
        DiscoveryStep step =
            (code == ErrorCode::kInvalidArgument || code == ErrorCode::kTooLarge)
                ? fail(HttpErrorCode::kBadRequest, "q cannot be searched: " + hits.error().message)
                : fail(HttpErrorCode::kInternal, "search failed", hits.error());
        std::get<Respond>(step).background = corpus.revalidations;
        return step;
      }
      Json results = Json::array();
      for (const SearchHit& hit : *hits) {
        if (hit.entry >= corpus.tools.size() || results.size() >= search_limit_) continue;
        const ToolCandidate& c = corpus.tools[hit.entry];
        Json r = Json::object();
        r["connection_id"] = c.connection_id;
        r["connection_name"] = c.connection_name;
        r["status"] = entry_status_name(c.status);
        r["score"] = hit.score;
        r["tool"] = c.tool;
        results.push_back(std::move(r));
      }
      Json unavailable = Json::array();
      for (const auto& [id, status] : corpus.unavailable) {
        unavailable.push_back(Json::object({{"id", id}, {"status", entry_status_name(status)}}));
      }
      Json body = Json::object();
      body["query"] = search_query_;
      body["results"] = std::move(results);
      body["unavailable"] = std::move(unavailable);
      if (snapshot->next_after) body["connections_truncated"] = true;
      RenderedDiscovery rendered;
      rendered.body = json_text(body);
      rendered.etag = strong_etag(rendered.body);
      rendered.cache_control = "private, max-age=0";
      rendered.revalidations = std::move(corpus.revalidations);
      return answer_read(std::move(rendered));
    }

    case Route::kRefresh: {
      const GrantedConnection* conn = snapshot->find(connection_id_);
      if (conn == nullptr || !conn->record) {
        return fail(HttpErrorCode::kNotFound, "no such connection");
      }
      Result<Principal> principal = applicable_principal(*conn->record, *member_);
      if (!principal.ok()) {
        return fail(HttpErrorCode::kInternal, "the connection cannot be refreshed",
                    principal.error());
      }
      stage_ = Stage::kEnqueue;
      return NeedEnqueue{{Revalidation{connection_id_, *principal, "manual", true}},
                         {conn->lease_held}};
    }

    case Route::kNone:
      break;
  }
  return out_of_turn("resume_snapshot");
}

std::optional<DiscoveryStep> DiscoveryExchange::resume_spliced(const RenderedDiscovery& rendered,
                                                               int64_t now_ms) {
  if (stage_ != Stage::kSnapshot) return std::nullopt;
  if (route_ != Route::kManifests && route_ != Route::kConnectionManifest) return std::nullopt;
  // No body for a HEAD or a 304: answer_read would drop it.
  const bool with_body =
      !head_ && (if_none_match_.empty() || !if_none_match_matches(if_none_match_, rendered.etag));
  std::optional<RenderedDiscovery> spliced = splice_rendered(rendered, now_ms, with_body);
  if (!spliced) return std::nullopt;
  return answer_read(std::move(*spliced));
}

DiscoveryStep DiscoveryExchange::resume_enqueue(
    const std::vector<Result<RevalidationResult>>& results, int64_t now_ms) {
  if (stage_ != Stage::kEnqueue) return out_of_turn("resume_enqueue");
  if (results.size() != 1) {
    return fail(HttpErrorCode::kInternal, "internal error",
                Error(ErrorCode::kInternal, "discovery: expected one enqueue result"));
  }
  if (!results[0].ok()) {
    return fail(HttpErrorCode::kStoreUnavailable, "the cache store is unavailable",
                results[0].error());
  }
  const char* status =
      results[0]->outcome == RevalidationOutcome::kInProgress ? "in_progress" : "queued";
  HttpResponse response;
  response.status = 202;
  response.headers = json_headers();
  response.headers.emplace_back("Cache-Control", "no-store");
  response.body = json_text(Json::object({{"status", status}}));
  return respond(std::move(response));
}

}  // namespace quiver
