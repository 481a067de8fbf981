#include "shared/edge_service.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "shared/ascii.h"
#include "shared/json.h"
#include "shared/runtime_settings.h"
#include "shared/sha256.h"
#include "shared/webhook_exchange.h"

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

Json headers_json(const HttpHeaders& headers) {
  Json a = Json::array();
  for (const auto& [name, value] : headers) a.push_back(Json::array({name, value}));
  return a;
}

void set_header(HttpHeaders& headers, std::string_view name, std::string value) {
  for (auto& [n, v] : headers) {
    if (ascii_iequals(n, name)) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::string(name), std::move(value));
}

HttpResponse json_response(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "application/json"}, {"Cache-Control", "no-store"}};
  r.body = json_text(body);
  return r;
}

// The revalidation's identity for claims in this isolate.
std::string claim_key(const Revalidation& r) { return r.connection_id + "\n" + r.principal.str(); }

Result<DiscoverySnapshot> snapshot_from_reply(std::string_view bytes, const Principal& member,
                                              const RespLimits& limits) {
  Result<std::vector<RespValue>> replies = decode_all(bytes, 1, limits);
  if (!replies.ok()) return replies.error();
  return decode_discovery_reply((*replies)[0], member);
}

constexpr char kAuthOk[] = "+OK\r\n";
constexpr char kStaleIfError[] = "stale-if-error";

// When the first entry of `snapshot` changes status (fresh → stale, stale → expired): a rendered
// answer is right until then. Entries without servable data change only by a commit (epoch).
int64_t next_transition(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                        int64_t now_ms) {
  int64_t next = EdgeCache::kForever;
  for (const GrantedConnection& c : snapshot.connections) {
    if (!c.record) continue;
    Result<std::optional<CacheEntryMeta>> meta = cache_entry_meta(c.manifest);
    if (!meta.ok() || !meta->has_value()) continue;
    Classification k = classify(*meta, policy, c.record->config_hash, now_ms);
    if (k.state == Freshness::kFresh) next = std::min(next, k.fresh_until_ms);
    if (k.state == Freshness::kStale) next = std::min(next, k.expires_at_ms);
  }
  return next;
}

// A rendered answer as L1 keeps it: status, headers and the revalidations it asked for (JSON),
// then the body. Only our own encoding is ever decoded, but a bad one is still just a miss.
std::string encode_answer(const HttpResponse& response, const std::vector<Revalidation>& revs) {
  Json meta = Json::object();
  meta["status"] = response.status;
  meta["headers"] = headers_json(response.headers);
  Json r = Json::array();
  for (const Revalidation& rev : revs) {
    r.push_back(Json::array({rev.connection_id, rev.principal.str(), rev.reason, rev.manual}));
  }
  meta["revalidations"] = std::move(r);
  std::string m = json_text(meta);
  std::string out;
  put_u32(out, static_cast<uint32_t>(m.size()));
  out += m;
  out += response.body;
  return out;
}

struct StoredAnswer {
  HttpResponse response;
  std::vector<Revalidation> revalidations;
};

std::optional<StoredAnswer> decode_answer(std::string_view bytes) {
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

// The L1 halves (snapshots, rendered answers) share the configured byte bound.
EdgeCacheOptions half_of(EdgeCacheOptions o) {
  o.max_bytes /= 2;
  o.max_entry_bytes = std::min(o.max_entry_bytes, o.max_bytes);
  return o;
}

}  // namespace

// ---- settings ----------------------------------------------------------------------------------

Result<EdgeSettings> edge_settings_from_env(std::string_view env_json) {
  Result<Json> env = parse_json(env_json, 1 << 20);
  if (!env.ok()) return invalid("the environment is not JSON: " + env.error().message);
  if (!env->is_object()) return invalid("the environment is not a JSON object");
  auto get = [&](const char* name) -> std::optional<std::string> {
    std::optional<std::string> v = json_string(*env, name);
    if (v && v->empty()) return std::nullopt;  // an empty variable is an unset one
    return v;
  };
  // A setting of the one runtime table (shared/runtime_settings.h): its syntax and bounds, as
  // the agent checks the same variable.
  auto get_ms = [&](const char* name, int64_t* out) -> Status {
    std::optional<std::string> v = get(name);
    if (!v) return Status::Ok();
    const RuntimeSetting* setting = find_runtime_setting_env(name);
    if (setting == nullptr || (setting->hosts & kRuntimeEdge) == 0) {
      return Error(ErrorCode::kInternal, std::string(name) + " is not an edge setting");
    }
    Result<double> n = runtime_setting_from_env(*setting, *v);
    if (!n.ok()) return n.error();
    *out = static_cast<int64_t>(*n);
    return Status::Ok();
  };

  EdgeSettings s;
  if (std::optional<std::string> ns = get("QUIVER_NAMESPACE")) s.ns = *ns;
  if (Status st = validate_namespace(s.ns); !st.ok()) {
    return invalid("QUIVER_NAMESPACE: " + st.error().message);
  }
  std::optional<std::string> keys = get("QUIVER_TOKEN_KEYS");
  if (!keys) return invalid("QUIVER_TOKEN_KEYS is not set: no caller token can be verified");
  Result<Keyring> keyring = Keyring::from_json(*keys);
  if (!keyring.ok()) return invalid("QUIVER_TOKEN_KEYS: " + keyring.error().message);
  s.keyring = std::move(*keyring);
  if (std::optional<std::string> aud = get("QUIVER_TOKEN_AUDIENCE")) s.token.audience = *aud;
  s.token.ns = s.ns;
  if (std::optional<std::string> user = get("REDIS_USERNAME")) s.redis_username = *user;
  if (std::optional<std::string> password = get("REDIS_PASSWORD")) s.redis_password = *password;
  if (!s.redis_username.empty() && s.redis_password.empty()) {
    return invalid("REDIS_USERNAME is set without REDIS_PASSWORD");
  }

  int64_t max_bytes = static_cast<int64_t>(s.l1.max_bytes);
  for (Status st : {get_ms("QUIVER_L1_TTL_MS", &s.l1.ttl_ms),
                    get_ms("QUIVER_L1_STALE_IF_ERROR_MS", &s.l1.stale_if_error_ms),
                    get_ms("QUIVER_L1_MAX_BYTES", &max_bytes),
                    get_ms("QUIVER_FRESH_TTL_MS", &s.discovery.freshness.fresh_ttl_ms),
                    get_ms("QUIVER_MAX_AGE_MS", &s.discovery.freshness.max_age_ms),
                    get_ms("QUIVER_MIN_UPSTREAM_TTL_MS",
                           &s.discovery.freshness.min_upstream_ttl_ms),
                    get_ms("QUIVER_REVALIDATE_WINDOW_MS", &s.enqueue.window_ms),
                    get_ms("QUIVER_REDIS_FAIL_FAST_MS", &s.fail_fast_ms)}) {
    if (!st.ok()) return st.error();
  }
  s.l1.max_bytes = static_cast<std::size_t>(max_bytes);
  s.l1.max_entry_bytes = std::min(s.l1.max_entry_bytes, s.l1.max_bytes);
  s.l1.stale_if_error_ms = std::max(s.l1.stale_if_error_ms, s.l1.ttl_ms);
  if (Status st = validate_edge_cache_options(s.l1); !st.ok()) return st.error();
  // An upstream ttlMs may shorten the fresh TTL, but not below the floor; the floor follows a
  // configured TTL shorter than its default.
  s.discovery.freshness.min_upstream_ttl_ms =
      std::min(s.discovery.freshness.min_upstream_ttl_ms, s.discovery.freshness.fresh_ttl_ms);
  if (Status st = validate_freshness_policy(s.discovery.freshness); !st.ok()) {
    return invalid("QUIVER_FRESH_TTL_MS / QUIVER_MAX_AGE_MS: " + st.error().message);
  }
  if (std::optional<std::string> secrets = get("QUIVER_WEBHOOK_SECRETS")) {
    Result<Json> parsed = parse_json(*secrets, 64 * 1024);
    if (!parsed.ok() || !parsed->is_object() || parsed->empty()) {
      return invalid("QUIVER_WEBHOOK_SECRETS must be a JSON object {\"name\": \"secret\"}");
    }
    for (const auto& [name, value] : parsed->items()) {
      if (!value.is_string() || value.get<std::string>().size() < kMinWebhookSecretBytes) {
        return invalid("QUIVER_WEBHOOK_SECRETS." + name + ": not a string of at least " +
                       std::to_string(kMinWebhookSecretBytes) + " bytes");
      }
      s.webhook_secrets.push_back(value.get<std::string>());
    }
  }
  s.l1.revalidation_claim_ms = std::min<int64_t>(5'000, s.enqueue.window_ms);
  return s;
}

// ---- wire formats ------------------------------------------------------------------------------

const char* edge_action_name(EdgeAction action) {
  switch (action) {
    case EdgeAction::kRespond:
      return "respond";
    case EdgeAction::kRedis:
      return "redis";
    case EdgeAction::kRead:
      return "read";
    case EdgeAction::kDone:
      return "done";
  }
  return "done";
}

Result<HttpRequest> edge_request_from_wire(std::string_view bytes) {
  if (bytes.size() < 4) return invalid("request: shorter than its header");
  uint32_t meta_len = get_u32(bytes);
  if (meta_len > kMaxEdgeRequestMetaBytes) {
    return Error(ErrorCode::kTooLarge, "request: the request line and headers are too large");
  }
  if (meta_len > bytes.size() - 4) return invalid("request: truncated");
  Result<Json> meta = parse_json(bytes.substr(4, meta_len), kMaxEdgeRequestMetaBytes);
  if (!meta.ok()) return invalid("request: " + meta.error().message);
  if (!meta->is_object()) return invalid("request: meta is not an object");
  HttpRequest r;
  std::optional<std::string> method = json_string(*meta, "method");
  std::optional<std::string> path = json_string(*meta, "path");
  std::optional<std::string> query = json_string(*meta, "query");
  if (!method || method->empty() || method->size() > 16) return invalid("request: bad method");
  if (!path || path->empty() || (*path)[0] != '/') return invalid("request: bad path");
  r.method = std::move(*method);
  r.path = std::move(*path);
  r.query = query.value_or("");
  if (const Json* headers = json_field(*meta, "headers")) {
    if (!headers->is_array()) return invalid("request: headers is not an array");
    for (const Json& h : *headers) {
      if (!h.is_array() || h.size() != 2 || !h[0].is_string() || !h[1].is_string()) {
        return invalid("request: a header is not a [name, value] pair");
      }
      r.headers.emplace_back(h[0].get<std::string>(), h[1].get<std::string>());
    }
  }
  r.body = std::string(bytes.substr(4 + meta_len));
  return r;
}

std::string edge_request_to_wire(const HttpRequest& request) {
  Json meta = Json::object();
  meta["method"] = request.method;
  meta["path"] = request.path;
  meta["query"] = request.query;
  meta["headers"] = headers_json(request.headers);
  std::string m = json_text(meta);
  std::string out;
  put_u32(out, static_cast<uint32_t>(m.size()));
  out += m;
  out += request.body;
  return out;
}

std::string edge_step_to_wire(const EdgeStep& step) {
  Json meta = Json::object();
  meta["handle"] = step.handle;
  meta["action"] = edge_action_name(step.action);
  const std::string* payload = nullptr;
  if (step.action == EdgeAction::kRespond) {
    meta["status"] = step.response.status;
    meta["headers"] = headers_json(step.response.headers);
    meta["background"] = step.background;
    payload = &step.response.body;
  } else if (step.action == EdgeAction::kRedis) {
    meta["new_connection"] = step.new_connection;
    payload = &step.redis_bytes;
  }
  if (!step.log.empty()) meta["log"] = step.log;
  if (!step.log.empty() && step.log_info) meta["log_level"] = "info";
  std::string m = json_text(meta);
  std::string out;
  out.reserve(8 + m.size() + (payload ? payload->size() : 0));
  put_u32(out, static_cast<uint32_t>(m.size()));
  put_u32(out, static_cast<uint32_t>(payload ? payload->size() : 0));
  out += m;
  if (payload) out += *payload;
  return out;
}

// ---- fail-fast ---------------------------------------------------------------------------------

FailFast::Admit FailFast::admit(uint32_t handle, int64_t now_ms) {
  if (!open(now_ms)) return Admit::kGo;
  if (probe_ == 0 || probe_ == handle) {
    probe_ = handle;
    return Admit::kProbe;
  }
  return Admit::kFailFast;
}

void FailFast::timed_out(uint32_t handle, int64_t now_ms) {
  if (probe_ == handle) probe_ = 0;
  if (window_ms_ <= 0) return;
  if (!open(now_ms)) opened_at_ms_ = now_ms;
  open_until_ms_ = std::max(open_until_ms_, now_ms + window_ms_);
}

void FailFast::answered(uint32_t handle) {
  (void)handle;
  open_until_ms_ = 0;
  probe_ = 0;
}

void FailFast::ended(uint32_t handle) {
  if (probe_ == handle) probe_ = 0;
}

// ---- the service -------------------------------------------------------------------------------

struct EdgeService::Request {
  uint32_t handle = 0;
  std::string id;          // hex, from the host's random bytes
  bool read = false;       // GET or HEAD: may be answered from L1
  bool responded = false;  // kRespond was returned
  std::optional<DiscoveryExchange> exchange;
  std::optional<Principal> member;
  std::string l1_key;
  bool head = false;
  const char* source = nullptr;  // X-Quiver-Cache
  // A rendered answer to remember: under this key (the caller and the exact path and query), if
  // it is built from a snapshot read at `snapshot_epoch`, until `answer_fresh_until`.
  std::string answer_key;
  bool from_snapshot = false;
  int64_t snapshot_epoch = 0;
  int64_t answer_fresh_until = EdgeCache::kForever;
  int64_t stale_age_ms = 0;
  std::string store_error;     // why stale-if-error was used
  bool fail_fast = false;      // answered without Redis: the fail-fast window was open
  int64_t now_ms = 0;          // of the host's latest call for this request (log throttling)
  std::string webhook_reason;  // the sender's, for the log
  bool webhook_legacy_v1 = false;  // signed with the deprecated v1 form only: said in the log
  std::vector<Revalidation> background;

  // The Redis conversation of this request (one connection, opened lazily).
  Waiting waiting = Waiting::kNothing;
  bool connected = false;
  bool auth_pending = false;  // the first reply expected is AUTH's
  std::size_t expected = 0;
  std::vector<RespValue> replies;
  // The commands sent (EVAL forms; they went out as EVALSHA). When Redis answers NOSCRIPT to some,
  // the replies so far wait in `first_replies` while those (`noscript_slots`) go again as EVAL.
  std::vector<RedisCommand> commands;
  std::vector<std::size_t> noscript_slots;
  std::vector<RespValue> first_replies;
  std::string received;  // the bytes of a snapshot read, for L1
  std::optional<RespDecoder> decoder;
};

EdgeService::EdgeService(Result<EdgeSettings> settings)
    : cache_(half_of(settings.ok() ? settings->l1 : EdgeCacheOptions{})),
      answers_(half_of(settings.ok() ? settings->l1 : EdgeCacheOptions{})),
      fail_fast_(settings.ok() ? settings->fail_fast_ms : 0) {
  if (!settings.ok()) {
    settings_error_ = settings.error().message;
    return;
  }
  Result<RedisKeys> keys = RedisKeys::create(settings->ns);
  if (!keys.ok()) {
    settings_error_ = keys.error().message;
    return;
  }
  keys_ = std::move(*keys);
  settings_ = std::move(*settings);
  search_cache_ = std::make_unique<SearchIndexCache>(kSearchCacheEntries, kSearchCacheBytes);
  searcher_ = std::make_unique<IndexedToolSearcher>(search_cache_.get());
  settings_->discovery.searcher = searcher_.get();
  render_cache_ = std::make_unique<RenderCache>();
  settings_->discovery.render.cache = render_cache_.get();
}

EdgeService::~EdgeService() = default;

EdgeService::Request* EdgeService::find(uint32_t handle) {
  auto it = requests_.find(handle);
  return it == requests_.end() ? nullptr : it->second.get();
}

EdgeStep EdgeService::unknown_handle(uint32_t handle) {
  EdgeStep s;
  s.handle = handle;
  s.action = EdgeAction::kDone;
  s.log = "edge: unknown request handle " + std::to_string(handle);
  return s;
}

EdgeStep EdgeService::respond_now(Request& r, HttpResponse response, std::string log) {
  Respond respond;
  respond.response = std::move(response);
  if (!log.empty()) respond.log = Error(ErrorCode::kInternal, std::move(log));
  return finish(r, std::move(respond));
}

EdgeService::Request& EdgeService::new_request(std::string_view random) {
  uint32_t handle = next_handle_++;
  while (handle == 0 || requests_.count(handle) != 0) handle = next_handle_++;
  auto owned = std::make_unique<Request>();
  Request& r = *owned;
  r.handle = handle;
  if (!random.empty()) {
    std::string_view head = random.substr(0, 8);
    r.id = hex_encode(reinterpret_cast<const uint8_t*>(head.data()), head.size());
  }
  requests_.emplace(handle, std::move(owned));
  return r;
}

EdgeStep EdgeService::begin_wire(std::string_view request_wire, int64_t now_ms,
                                 std::string_view random) {
  Result<HttpRequest> request = edge_request_from_wire(request_wire);
  if (request.ok()) return begin(std::move(*request), now_ms, random);
  bool too_large = request.error().code == ErrorCode::kTooLarge;
  HttpResponse res =
      error_response(too_large ? HttpErrorCode::kPayloadTooLarge : HttpErrorCode::kBadRequest,
                     too_large ? "the request headers are too large" : "malformed request");
  return respond_now(new_request(random), std::move(res), request.error().message);
}

EdgeStep EdgeService::begin(HttpRequest request, int64_t now_ms, std::string_view random) {
  Request& r = new_request(random);
  r.now_ms = now_ms;
  if (request.path == "/healthz") return healthz(r, request);
  if (!settings_) {
    return respond_now(r, error_response(HttpErrorCode::kInternal, "the edge is misconfigured"),
                       "configuration: " + settings_error_);
  }
  if (request.body.size() > kMaxEdgeRequestBodyBytes) {
    return respond_now(
        r, error_response(HttpErrorCode::kPayloadTooLarge, "the request body is too large"));
  }
  if (request.path == kWebhookRefreshPath) return webhook(r, request, now_ms);
  if (!is_discovery_path(request.path)) {
    return respond_now(r, error_response(HttpErrorCode::kNotFound, "no such endpoint"));
  }

  CallerAuth caller =
      authenticate_caller(request.headers, &*settings_->keyring, now_ms, settings_->token,
                          "no caller token keys", &tokens_);
  r.read = request.method == "GET" || request.method == "HEAD";
  r.head = request.method == "HEAD";
  r.exchange.emplace(settings_->discovery);
  if (r.read && caller.member_id) {
    r.answer_key =
        kMemberPrincipalPrefix + *caller.member_id + "\n" + request.path + "?" + request.query;
    int64_t age = 0;
    if (EdgeCache::Value stored = answers_.get_fresh(r.answer_key, now_ms, &age)) {
      if (std::optional<StoredAnswer> answer = decode_answer(*stored)) {
        return replay(r, request, std::move(answer->response), std::move(answer->revalidations),
                      age, now_ms);
      }
    }
  }
  return drive(r, r.exchange->start(request, caller, now_ms), now_ms);
}

EdgeStep EdgeService::healthz(Request& r, const HttpRequest& request) {
  if (request.method != "GET" && request.method != "HEAD") {
    HttpResponse res = error_response(HttpErrorCode::kMethodNotAllowed, "method not allowed");
    res.headers.emplace_back("Allow", "GET, HEAD");
    return respond_now(r, std::move(res));
  }
  Json body = Json::object();
  body["service"] = "quiver-edge";
  body["version"] = kEdgeVersion;
  int status = 200;
  if (!settings_) {
    status = 503;
    body["status"] = "misconfigured";
    body["error"] = settings_error_;
  } else {
    body["status"] = "ok";
    body["namespace"] = settings_->ns;
    body["open_requests"] = requests_.size() - 1;  // not this one
    EdgeCacheStats snapshots = cache_.stats();
    EdgeCacheStats answers = answers_.stats();
    body["l1"] = Json::object({{"ttl_ms", cache_.options().ttl_ms},
                               {"epoch", snapshots.epoch},
                               {"entries", snapshots.entries + answers.entries},
                               {"bytes", snapshots.bytes + answers.bytes},
                               {"answer_hits", answers.hits},
                               {"snapshot_hits", snapshots.hits},
                               {"snapshot_misses", snapshots.misses},
                               {"stale_served", snapshots.stale_served}});
  }
  HttpResponse res = json_response(status, body);
  if (request.method == "HEAD") res.body.clear();
  return respond_now(r, std::move(res));
}

// Signed, not bearer-authenticated: checked by shared/webhook_exchange.h (the agent runs the same
// checks in the same order), then the replay guard, the marking and the queuing in one script
// (shared/discovery_redis.h).
EdgeStep EdgeService::webhook(Request& r, const HttpRequest& request, int64_t now_ms) {
  WebhookCheck check = check_webhook(request, settings_->webhook_secrets, keys_->ns(), now_ms,
                                     "webhooks are off: QUIVER_WEBHOOK_SECRETS is not set");
  if (auto* refused = std::get_if<WebhookRefusal>(&check)) {
    return respond_now(r, std::move(refused->response), std::move(refused->log));
  }
  WebhookChecked& checked = std::get<WebhookChecked>(check);
  Result<RedisCommand> command = webhook_refresh_command(*keys_, checked.verified, checked.request,
                                                         now_ms, settings_->enqueue);
  if (!command.ok()) {
    return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                       "webhook: " + command.error().message);
  }
  r.webhook_reason = checked.request.targets.front().reason;
  r.webhook_legacy_v1 = checked.verified.legacy_v1;
  return send(r, Waiting::kWebhook, {std::move(*command)});
}

EdgeStep EdgeService::replay(Request& r, const HttpRequest& request, HttpResponse response,
                             std::vector<Revalidation> revalidations, int64_t age_ms,
                             int64_t now_ms) {
  std::optional<std::string_view> etag = find_header(response.headers, "ETag");
  std::optional<std::string_view> inm = find_header(request.headers, "If-None-Match");
  if (etag && inm && if_none_match_matches(*inm, *etag)) {
    response.status = 304;
    response.body.clear();
    response.headers.erase(std::remove_if(response.headers.begin(), response.headers.end(),
                                          [](const auto& h) { return h.first == "Content-Type"; }),
                           response.headers.end());
  }
  if (r.head) response.body.clear();
  // An HTTP cache's answer: as rendered then, with its age (RFC 9111 §5.1).
  response.headers.emplace_back("Age", std::to_string(age_ms / 1000));
  r.source = "hit";
  Respond respond;
  respond.response = std::move(response);
  respond.background = std::move(revalidations);
  return drive(r, std::move(respond), now_ms);
}

void EdgeService::note_snapshot(Request& r, const DiscoverySnapshot& snapshot, int64_t now_ms) {
  r.from_snapshot = true;
  r.snapshot_epoch = snapshot.epoch;
  r.answer_fresh_until = next_transition(snapshot, settings_->discovery.freshness, now_ms);
}

EdgeStep EdgeService::drive(Request& r, DiscoveryStep step, int64_t now_ms) {
  if (Respond* respond = std::get_if<Respond>(&step)) {
    // Revalidations go out in the background, once per key per claim period from this isolate;
    // the Redis gate dedups across isolates.
    std::vector<Revalidation> wanted = std::move(respond->background);
    respond->background.clear();
    bool stale_if_error = r.source != nullptr && std::string_view(r.source) == kStaleIfError;
    if (r.from_snapshot && !stale_if_error && !r.head && !r.answer_key.empty() &&
        respond->response.status == 200) {
      answers_.put(r.answer_key, encode_answer(respond->response, wanted), r.snapshot_epoch, now_ms,
                   r.answer_fresh_until);
    }
    if (!stale_if_error) {
      for (Revalidation& rev : wanted) {
        if (cache_.claim_revalidation(claim_key(rev), now_ms)) {
          respond->background.push_back(std::move(rev));
        }
      }
    }
    return finish(r, std::move(*respond));
  }

  if (NeedSnapshot* need = std::get_if<NeedSnapshot>(&step)) {
    r.member = need->member;
    r.l1_key = need->member.str() + "\n" + (need->query.only ? "=" + *need->query.only : "*") +
               "\n" + need->query.after + "\n" + std::to_string(need->query.limit);
    if (r.read) {
      if (EdgeCache::Value cached = cache_.get_fresh(r.l1_key, now_ms)) {
        Result<DiscoverySnapshot> snapshot =
            snapshot_from_reply(*cached, need->member, settings_->resp);
        if (snapshot.ok()) {
          r.source = "hit";
          note_snapshot(r, *snapshot, now_ms);
          return drive(r, r.exchange->resume_snapshot(std::move(snapshot), now_ms), now_ms);
        }
      }
    }
    Result<RedisCommand> command = discovery_read_command(*keys_, need->member, need->query);
    if (!command.ok()) {
      return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                         "discovery read: " + command.error().message);
    }
    r.source = "miss";
    return send(r, Waiting::kSnapshot, {std::move(*command)});
  }

  NeedEnqueue& need = std::get<NeedEnqueue>(step);
  Result<std::vector<RedisCommand>> commands =
      revalidate_enqueue_commands(*keys_, need.revalidations, now_ms, settings_->enqueue);
  if (!commands.ok()) {
    return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                       "revalidation: " + commands.error().message);
  }
  return send(r, Waiting::kEnqueue, std::move(*commands));
}

EdgeStep EdgeService::send(Request& r, Waiting waiting, std::vector<RedisCommand> commands) {
  if (fail_fast_.admit(r.handle, r.now_ms) == FailFast::Admit::kFailFast) {
    // Redis timed out moments ago and a probe is testing it: no waiting on it meanwhile.
    r.waiting = waiting;
    r.fail_fast = true;
    return store_failed(r,
                        Error(ErrorCode::kStoreUnavailable,
                              "fail-fast: Redis timed out " +
                                  std::to_string(r.now_ms - fail_fast_.opened_at_ms()) +
                                  " ms ago; one probe request is testing it"),
                        r.now_ms);
  }
  Pipeline pipeline;
  for (const RedisCommand& command : commands) pipeline.add(evalsha_form(command));
  r.commands = std::move(commands);
  r.noscript_slots.clear();
  r.first_replies.clear();
  EdgeStep s;
  s.handle = r.handle;
  s.action = EdgeAction::kRedis;
  r.expected = pipeline.expected_replies();
  r.auth_pending = false;
  if (!r.connected) {
    s.new_connection = true;
    r.connected = true;
    r.decoder.emplace(settings_->resp);
    if (!settings_->redis_password.empty()) {
      if (settings_->redis_username.empty()) {
        append_command(s.redis_bytes, {"AUTH", settings_->redis_password});
      } else {
        append_command(s.redis_bytes,
                       {"AUTH", settings_->redis_username, settings_->redis_password});
      }
      r.auth_pending = true;
      ++r.expected;
    }
  }
  s.redis_bytes += pipeline.bytes();
  r.replies.clear();
  r.received.clear();
  r.waiting = waiting;
  return s;
}

EdgeStep EdgeService::resend_noscript(Request& r) {
  EdgeStep s;
  s.handle = r.handle;
  s.action = EdgeAction::kRedis;
  Pipeline pipeline;
  for (std::size_t slot : r.noscript_slots) pipeline.add(r.commands[slot]);
  s.redis_bytes = pipeline.bytes();
  r.expected = pipeline.expected_replies();
  r.replies.clear();
  r.received.clear();  // a snapshot read's bytes are now the EVAL's reply alone
  return s;            // same connection, same `waiting`
}

EdgeStep EdgeService::feed(uint32_t handle, std::string_view bytes, int64_t now_ms) {
  Request* r = find(handle);
  if (r == nullptr) return unknown_handle(handle);
  r->now_ms = now_ms;
  if (r->waiting == Waiting::kNothing || !r->decoder) {
    return internal_error(handle, "edge: Redis bytes arrived while none were expected");
  }
  if (r->waiting == Waiting::kSnapshot) r->received.append(bytes);
  if (Status st = r->decoder->feed(bytes); !st.ok()) return store_failed(*r, st.error(), now_ms);
  while (r->replies.size() < r->expected) {
    Result<std::optional<RespValue>> next = r->decoder->next();
    if (!next.ok()) return store_failed(*r, next.error(), now_ms);
    if (!next->has_value()) break;
    r->replies.push_back(std::move(**next));
  }
  if (r->replies.size() < r->expected) {
    EdgeStep s;
    s.handle = handle;
    s.action = EdgeAction::kRead;
    return s;
  }
  if (!r->decoder->at_boundary()) {
    return store_failed(*r, Error(ErrorCode::kInvalidReply, "Redis sent more than was asked"),
                        now_ms);
  }
  return complete(*r, now_ms);
}

EdgeStep EdgeService::complete(Request& r, int64_t now_ms) {
  fail_fast_.answered(r.handle);  // Redis answers (even with an error reply): not stalled
  Waiting waiting = r.waiting;
  std::size_t first = 0;
  if (r.auth_pending) {
    const RespValue& auth = r.replies[0];
    if (!auth.is_ok()) {
      std::string why = auth.is_error() ? std::string(*auth.error_message()) : "unexpected reply";
      // WRONGPASS / an ACL refusal is about the credentials; LOADING, BUSY and the like are a
      // Redis that cannot take commands yet.
      const bool refused = why.rfind("WRONGPASS", 0) == 0 || why.rfind("NOPERM", 0) == 0 ||
                           why.find("invalid password") != std::string::npos ||
                           why.find("invalid username-password") != std::string::npos;
      return store_failed(
          r,
          Error(refused ? ErrorCode::kUnauthenticated : ErrorCode::kStoreUnavailable,
                (refused ? "Redis refused AUTH: " : "Redis could not take AUTH: ") + why),
          now_ms);
    }
    r.auth_pending = false;
    first = 1;
  }
  if (r.noscript_slots.empty()) {
    // Scripts Redis does not have (a restart, SCRIPT FLUSH): send those once more as EVAL, which
    // also loads them for the next request. Never a 503 or a stale-if-error for that.
    for (std::size_t i = first; i < r.replies.size(); ++i) {
      if (is_noscript_reply(r.replies[i])) r.noscript_slots.push_back(i - first);
    }
    if (!r.noscript_slots.empty() && r.noscript_slots.size() <= r.commands.size()) {
      r.first_replies.assign(std::make_move_iterator(r.replies.begin() + first),
                             std::make_move_iterator(r.replies.end()));
      return resend_noscript(r);
    }
    r.noscript_slots.clear();
  } else {
    // The EVAL replies, in the order sent, into the places of the NOSCRIPT ones.
    for (std::size_t k = 0; k < r.noscript_slots.size(); ++k) {
      r.first_replies[r.noscript_slots[k]] = std::move(r.replies[first + k]);
    }
    r.replies = std::move(r.first_replies);
    r.first_replies.clear();
    r.noscript_slots.clear();
    first = 0;
  }
  r.waiting = Waiting::kNothing;

  switch (waiting) {
    case Waiting::kSnapshot: {
      Result<DiscoverySnapshot> snapshot = decode_discovery_reply(r.replies[first], *r.member);
      if (!snapshot.ok()) {
        r.waiting = waiting;
        return store_failed(r, snapshot.error(), now_ms);
      }
      std::string_view reply_bytes = r.received;
      if (first == 1) reply_bytes.remove_prefix(sizeof(kAuthOk) - 1);
      cache_.put(r.l1_key, std::string(reply_bytes), snapshot->epoch, now_ms);
      answers_.observe_epoch(snapshot->epoch);
      r.received.clear();
      note_snapshot(r, *snapshot, now_ms);
      return drive(r, r.exchange->resume_snapshot(std::move(snapshot), now_ms), now_ms);
    }
    case Waiting::kEnqueue: {
      std::vector<RespValue> replies(r.replies.begin() + first, r.replies.end());
      return drive(r, r.exchange->resume_enqueue(parse_enqueue_replies(replies), now_ms), now_ms);
    }
    case Waiting::kWebhook: {
      Result<WebhookRefreshReply> reply = parse_webhook_refresh_reply(r.replies[first]);
      if (!reply.ok()) {
        r.waiting = waiting;
        return store_failed(r, reply.error(), now_ms);
      }
      if (reply->replay) {
        EdgeStep s = respond_now(r, webhook_replay_response());
        s.log = "webhook refused: a replay";
        return s;
      }
      EdgeStep s = respond_now(r, webhook_accepted_response(reply->results));
      s.log = "webhook accepted (" + std::to_string(reply->results.size()) +
              " refresh(es), reason " + r.webhook_reason + ")";
      if (r.webhook_legacy_v1) {
        s.log += std::string("; ") + kWebhookV1DeprecatedLog;  // a warning: the sender must move
      } else {
        s.log_info = true;
      }
      return s;
    }
    case Waiting::kBackground: {
      std::vector<RespValue> replies(r.replies.begin() + first, r.replies.end());
      std::vector<Result<RevalidationResult>> results = parse_enqueue_replies(replies);
      EdgeStep s;
      s.handle = r.handle;
      s.action = EdgeAction::kDone;
      for (std::size_t i = 0; i < results.size() && i < r.background.size(); ++i) {
        if (results[i].ok()) continue;
        cache_.release_revalidation(claim_key(r.background[i]));
        s.log += (s.log.empty() ? "" : "; ") + std::string("revalidation of ") +
                 r.background[i].connection_id + " not queued: " + results[i].error().message;
      }
      s.log = throttle_store_log(std::move(s.log), now_ms);
      return s;
    }
    case Waiting::kNothing:
      break;
  }
  return internal_error(r.handle, "edge: a Redis reply completed nothing");
}

EdgeStep EdgeService::fail(uint32_t handle, std::string_view why, int64_t now_ms) {
  Request* r = find(handle);
  if (r == nullptr) return unknown_handle(handle);
  r->now_ms = now_ms;
  // Before AUTH answered, the failure is the connection's (a timeout, a reset), not a refusal of
  // the credentials: say so, and say which.
  const bool timed_out = why.find("timed out") != std::string_view::npos;
  const std::string what = r->auth_pending
                               ? (timed_out ? "Redis: AUTH timed out (no reply): "
                                            : "Redis: the connection failed before AUTH answered: ")
                               : "Redis: ";
  return store_failed(*r, Error(timed_out ? ErrorCode::kTimeout : ErrorCode::kTransport,
                                what + std::string(why)),
                      now_ms);
}

EdgeStep EdgeService::store_failed(Request& r, Error error, int64_t now_ms) {
  if (error.code == ErrorCode::kTimeout && settings_ && settings_->fail_fast_ms > 0) {
    fail_fast_.timed_out(r.handle, now_ms);
    error.message += " (fail-fast for the next " + std::to_string(settings_->fail_fast_ms) +
                     " ms, while one request probes Redis)";
  }
  Waiting waiting = r.waiting;
  // The connection is out of sync or gone: the host drops it, a later step opens another.
  r.waiting = Waiting::kNothing;
  r.connected = false;
  r.auth_pending = false;
  r.decoder.reset();
  r.received.clear();

  switch (waiting) {
    case Waiting::kSnapshot: {
      if (r.read) {
        int64_t age = 0;
        if (EdgeCache::Value cached = cache_.get_stale(r.l1_key, now_ms, &age)) {
          Result<DiscoverySnapshot> snapshot =
              snapshot_from_reply(*cached, *r.member, settings_->resp);
          if (snapshot.ok()) {
            r.source = kStaleIfError;
            r.stale_age_ms = age;
            r.store_error = error.message;
            return drive(r, r.exchange->resume_snapshot(std::move(snapshot), now_ms), now_ms);
          }
        }
      }
      return drive(r, r.exchange->resume_snapshot(std::move(error), now_ms), now_ms);
    }
    case Waiting::kEnqueue:
      return drive(
          r, r.exchange->resume_enqueue({Result<RevalidationResult>(std::move(error))}, now_ms),
          now_ms);
    case Waiting::kWebhook:
      return respond_now(r, webhook_store_failed_response(error), "webhook: " + error.message);
    case Waiting::kBackground: {
      for (const Revalidation& rev : r.background) cache_.release_revalidation(claim_key(rev));
      EdgeStep s;
      s.handle = r.handle;
      s.action = EdgeAction::kDone;
      s.log = throttle_store_log("revalidations not queued: " + error.message, now_ms);
      return s;
    }
    case Waiting::kNothing:
      break;
  }
  if (!r.responded) return internal_error(r.handle, "edge: " + error.message);
  EdgeStep s;
  s.handle = r.handle;
  s.action = EdgeAction::kDone;
  s.log = error.message;
  return s;
}

EdgeStep EdgeService::finish(Request& r, Respond respond) {
  r.responded = true;
  r.background = std::move(respond.background);
  HttpResponse& res = respond.response;
  EdgeStep s;
  s.handle = r.handle;
  s.action = EdgeAction::kRespond;
  if (r.fail_fast) {
    res.headers.emplace_back("X-Quiver-Cache", "fail-fast");  // an L1 copy or a 503, no wait
  } else if (r.source != nullptr) {
    res.headers.emplace_back("X-Quiver-Cache", r.source);
  }
  if (r.source != nullptr && std::string_view(r.source) == kStaleIfError) {
    set_header(res.headers, "Cache-Control", "private, no-cache");
    res.headers.emplace_back("Age", std::to_string(r.stale_age_ms / 1000));
    s.log = throttle_store_log("served from L1 (stale-if-error): " + r.store_error, r.now_ms);
  }
  if (!r.id.empty()) res.headers.emplace_back("X-Request-Id", r.id);
  if (respond.log) {
    // The code the caller was answered (what an operator matches the log against), then the
    // detail: never the internal code of the cause, which reads like another answer.
    std::string answered = std::to_string(res.status);
    if (res.status >= 400) {
      Result<Json> body = parse_json(res.body);
      if (body.ok()) {
        if (const Json* error = json_field(*body, "error")) {
          if (std::optional<std::string> code = json_string(*error, "code")) answered = *code;
        }
      }
    }
    s.log = answered + ": " + respond.log->message;
    if (answered == "STORE_UNAVAILABLE") s.log = throttle_store_log(std::move(s.log), r.now_ms);
  }
  s.response = std::move(res);
  s.background = !r.background.empty();
  return s;
}

std::string EdgeService::throttle_store_log(std::string line, int64_t now_ms) {
  if (line.empty()) return line;
  auto it = log_bursts_.find(line);
  if (it == log_bursts_.end()) {
    if (log_bursts_.size() >= kMaxLogBursts) log_bursts_.clear();  // bounded; at worst a repeat
    log_bursts_.emplace(line, LogBurst{now_ms, 0});
    return line;
  }
  LogBurst& burst = it->second;
  if (now_ms - burst.window_start_ms < kStoreLogWindowMs) {
    ++burst.suppressed;
    return std::string();
  }
  const int64_t more = burst.suppressed;
  burst = LogBurst{now_ms, 0};
  if (more > 0) {
    line += " (and " + std::to_string(more) + " more like it in the last " +
            std::to_string(kStoreLogWindowMs / 1000) + " s)";
  }
  return line;
}

EdgeStep EdgeService::background(uint32_t handle, int64_t now_ms) {
  Request* r = find(handle);
  if (r == nullptr) return unknown_handle(handle);
  r->now_ms = now_ms;
  EdgeStep done;
  done.handle = handle;
  done.action = EdgeAction::kDone;
  if (!r->responded || r->background.empty() || r->waiting != Waiting::kNothing) return done;
  Result<std::vector<RedisCommand>> commands =
      revalidate_enqueue_commands(*keys_, r->background, now_ms, settings_->enqueue);
  if (!commands.ok()) {
    for (const Revalidation& rev : r->background) cache_.release_revalidation(claim_key(rev));
    done.log = "revalidations not queued: " + commands.error().message;
    return done;
  }
  return send(*r, Waiting::kBackground, std::move(*commands));
}

void EdgeService::end(uint32_t handle) {
  fail_fast_.ended(handle);
  requests_.erase(handle);
}

EdgeStep EdgeService::internal_error(uint32_t handle, std::string_view what) {
  EdgeStep s;
  s.handle = handle;
  s.log = "INTERNAL: " + std::string(what);
  Request* r = find(handle);
  if (r != nullptr && r->responded) {
    s.action = EdgeAction::kDone;
    return s;
  }
  if (r != nullptr) {
    r->responded = true;
    r->waiting = Waiting::kNothing;
    r->background.clear();
  }
  s.action = EdgeAction::kRespond;
  s.response = error_response(HttpErrorCode::kInternal, "internal error");
  return s;
}

}  // namespace quiver
