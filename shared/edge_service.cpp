#include "shared/edge_service.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "shared/ascii.h"
#include "shared/call_relay.h"
#include "shared/edge_snapshot.h"
#include "shared/json.h"
#include "shared/layout.h"
#include "shared/oauth_callback.h"
#include "shared/sha256.h"
#include "shared/webhook_exchange.h"
#include "shared/webhook_spread.h"

namespace quiver {

namespace {

// A step of `handle` that does `action` (and carries `log`); the other fields as they default.
EdgeStep step_of(uint32_t handle, EdgeAction action, std::string log = {}) {
  EdgeStep s;
  s.handle = handle;
  s.action = action;
  s.log = std::move(log);
  return s;
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

constexpr char kStaleIfError[] = "stale-if-error";

// What a path that writes the namespace answers on key layout v2: no agent consumes v2's streams
// yet, so the edge writes nothing there rather than v1 keys nobody reads (docs/design.md, "The
// discovery read on v2, round by round").
constexpr char kNotServedOnV2[] = "not served on key layout v2 by this build";

// The L1 keys of a read: a copy read in one layout is never served, nor validated, as the other's.
std::string layout_key(KeyLayout layout, std::string key) {
  return layout == KeyLayout::kV1 ? key : key_layout_name(layout) + std::string("\n") + key;
}

// A v1 script's reply saying the namespace's record names key layout v2, ready: {tag, value, key}.
bool names_v2_ready(const RespValue& reply) {
  std::optional<std::string> record = layout_reply_readable_record(reply);
  return record && read_layout(*record) == KeyLayout::kV2;
}

// The L1 bound shared by its parts: snapshot reads and rendered answers (a half each), and, with
// conditional reads on, also the validatable copies of snapshot reads and the answers rendered
// from them kept for splicing (a quarter each).
EdgeCacheOptions share_of(EdgeCacheOptions o) {
  o.max_bytes /= o.validate_max_age_ms > 0 ? 4 : 2;
  o.max_entry_bytes = std::min(o.max_entry_bytes, o.max_bytes);
  return o;
}

// The splice templates' share (EdgeService::rendered_): none without conditional reads.
std::size_t rendered_share(const EdgeCacheOptions& o) {
  return o.validate_max_age_ms > 0 ? share_of(o).max_bytes : 0;
}

// What a kept rendered answer costs against its bound: its key (twice: list node and index),
// its body, holes, revalidations and headers, plus bookkeeping.
std::size_t rendered_bytes(const std::string& key, const RenderedDiscovery& rendered) {
  std::size_t n = 256 + 2 * key.size() + rendered.body.size() + rendered.etag.size();
  if (rendered.clock) n += rendered.clock->holes.size() * sizeof(ClockHole);
  for (const Revalidation& rev : rendered.revalidations) {
    n += 64 + rev.connection_id.size() + rev.principal.str().size() + rev.reason.size();
  }
  return n;
}

// The validatable copies: no TTL of their own (every use is checked against the store), kept
// `validate_max_age_ms` after their full read; off (no bytes) when that is 0.
EdgeCacheOptions kept_options(EdgeCacheOptions o) {
  o = share_of(o);
  o.ttl_ms = 0;
  o.stale_if_error_ms = o.validate_max_age_ms;
  if (o.validate_max_age_ms <= 0) o.max_bytes = o.max_entry_bytes = 0;
  return o;
}

}  // namespace

// ---- the service -------------------------------------------------------------------------------

struct EdgeService::Request {
  uint32_t handle = 0;
  std::string id;     // hex, from the host's random bytes
  bool read = false;  // GET or HEAD: may be answered from L1
  std::optional<DiscoveryExchange> exchange;
  std::optional<McpEndpoint> mcp;  // POST /mcp: the MCP endpoint instead of the exchange
  std::optional<Principal> member;
  SnapshotQuery query;
  std::string l1_key;
  // The key layout its reads use (the isolate's when it began), whether it switched once already,
  // and a read in rounds under way (key layout v2: shared/discovery_spread.h).
  KeyLayout layout = KeyLayout::kV1;
  bool switched = false;
  std::optional<SpreadDiscoveryRead> spread;
  bool bodies_spread = false;  // kReadingBodies: one GET per body (v2), not one MGET
  bool changed = false;        // a conditional read on v2 said "changed": the full read follows
  bool head = false;
  const char* source = nullptr;  // X-Quiver-Cache
  // A rendered answer to remember: under this key (the caller and the exact path and query), if
  // it is built from a snapshot read at `snapshot_epoch`, until `answer_fresh_until`.
  std::string answer_key;
  bool from_snapshot = false;
  int64_t snapshot_epoch = 0;
  int64_t answer_fresh_until = EdgeCache::kForever;
  int64_t stale_age_ms = 0;
  std::string store_error;         // why stale-if-error was used
  bool fail_fast = false;          // answered without Redis: the fail-fast window was open
  bool round_unsent = false;       // the latest round failed before anything was written
  int64_t now_ms = 0;              // of the host's latest call for this request (log throttling)
  std::string webhook_reason;      // the sender's, for the log
  bool webhook_legacy_v1 = false;  // signed with the deprecated v1 form only: said in the log
  // A checked webhook (kept for a switch of layout), and its rounds on key layout v2.
  std::optional<WebhookChecked> webhook;
  std::optional<SpreadWebhookRefresh> hook;
  std::vector<Revalidation> background;
  // Key layout v2's enqueue in flight (kQueueing or kBackground): every revalidation's result so
  // far, the indexes the open round's commands stand for, and whether that round is the XADDs.
  struct EnqueueV2 {
    std::vector<Revalidation> revalidations;
    std::vector<std::optional<Result<RevalidationResult>>> results;
    std::vector<std::size_t> in_flight;
    bool xadds = false;
  };
  std::optional<EnqueueV2> enqueue_v2;
  // A snapshot waiting for the bodies its records name (kReadingBodies), and their digests.
  std::optional<DiscoverySnapshot> pending;
  std::vector<std::string> wanted_bodies;
  // A conditional read (kReadingSnapshot): the kept snapshot it checks (shared, not copied
  // until it answers), and the entries whose lease it asked for.
  SnapshotCache::Value held;
  // The kept snapshot the answer is about to be rendered from (a full read's, or one confirmed
  // unchanged): its render is kept for splice() (keep_rendered).
  SnapshotCache::Value render_source;
  std::vector<std::size_t> lease_entries;
  // /mcp calls relayed to the agents, one round each (mcp_relay): the calls, the replies so far,
  // the seed of their rids, and how long the open round's BLPOP may hold its reply.
  std::vector<RelayCall> relay_calls;
  std::vector<RelayReply> relay_replies;
  std::string relay_seed;
  uint32_t relay_count = 0;  // calls relayed so far (the next rid's index)
  std::string relay_rid;     // the call whose round is outstanding (its cancel mark's name)
  std::string relay_cid;     // ... its connection (key layout v2: the shard of its keys)
  KeyLayout relay_layout = KeyLayout::kV1;  // ... the layout its keys are spelled in
  int64_t relay_deadline_ms = 0;
  int64_t redis_blocks_ms = 0;

  EdgePhase phase = EdgePhase::kDeciding;  // the only state: shared/edge_request_state.h
  RoutedConversation redis;  // this request's connections (one per cluster node), opened lazily
};

EdgeService::EdgeService(Result<EdgeSettings> settings)
    : cache_(share_of(settings.ok() ? settings->l1 : EdgeCacheOptions{})),
      answers_(share_of(settings.ok() ? settings->l1 : EdgeCacheOptions{})),
      kept_(kept_options(settings.ok() ? settings->l1 : EdgeCacheOptions{})),
      rendered_(std::numeric_limits<std::size_t>::max(),
                rendered_share(settings.ok() ? settings->l1 : EdgeCacheOptions{})),
      rendered_max_entry_bytes_(
          share_of(settings.ok() ? settings->l1 : EdgeCacheOptions{}).max_entry_bytes),
      bodies_((settings.ok() ? settings->l1 : EdgeCacheOptions{}).body_max_bytes),
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
  Result<RedisKeys> v2 = keys_for_layout(settings->ns, KeyLayout::kV2);
  if (!v2.ok()) {
    settings_error_ = v2.error().message;
    return;
  }
  keys_v2_ = std::move(*v2);
  if (settings->cluster) {
    // Key layout v1: every key of the namespace is in the slot of its `{ns}` tag.
    cluster_ =
        std::make_unique<ClusterRouter>(*settings->cluster, cluster_key_slot(keys_->prefix()));
  }
  settings_ = std::move(*settings);
  search_cache_ = std::make_unique<SearchIndexCache>(kSearchCacheEntries, kSearchCacheBytes);
  searcher_ = std::make_unique<IndexedToolSearcher>(search_cache_.get());
  settings_->discovery.searcher = searcher_.get();
  render_cache_ = std::make_unique<RenderCache>();
  settings_->discovery.render.cache = render_cache_.get();
  mcp_config_.freshness = settings_->discovery.freshness;
  mcp_config_.render = settings_->discovery.render;
  mcp_config_.searcher = searcher_.get();
  mcp_config_.max_body_bytes = kMaxEdgeRequestBodyBytes;
  mcp_config_.server_name = "quiver-edge";
  mcp_config_.search_mode = settings_->mcp_search_mode;
  mcp_config_.relay_timeout_ms = settings_->call_timeout_ms;  // QUIVER_CALL_TIMEOUT_MS
}

EdgeService::~EdgeService() = default;

EdgeService::Request* EdgeService::find(uint32_t handle) {
  auto it = requests_.find(handle);
  return it == requests_.end() ? nullptr : it->second.get();
}

EdgeService::Request* EdgeService::find(uint32_t handle, int64_t now_ms) {
  Request* r = find(handle);
  if (r != nullptr) r->now_ms = now_ms;
  return r;
}

EdgeStep EdgeService::unknown_handle(uint32_t handle) {
  return step_of(handle, EdgeAction::kDone,
                 "edge: unknown request handle " + std::to_string(handle));
}

EdgeStep EdgeService::respond_now(Request& r, HttpResponse response, std::string log) {
  Respond respond;
  respond.response = std::move(response);
  if (!log.empty()) respond.log = Error(ErrorCode::kInternal, std::move(log));
  return finish(r, std::move(respond));
}

uint32_t EdgeService::new_handle() {
  uint32_t handle = next_handle_++;
  while (handle == 0 || requests_.count(handle) != 0 || cancels_.count(handle) != 0) {
    handle = next_handle_++;
  }
  return handle;
}

EdgeService::Request& EdgeService::new_request(std::string_view random) {
  const uint32_t handle = new_handle();
  auto owned = std::make_unique<Request>();
  Request& r = *owned;
  r.handle = handle;
  r.layout = layout_;
  if (settings_) {
    r.redis = RoutedConversation(
        settings_->resp, RedisCredentials{settings_->redis_username, settings_->redis_password},
        cluster_.get());
  }
  if (!random.empty()) {
    std::string_view head = random.substr(0, 8);
    r.id = hex_encode(reinterpret_cast<const uint8_t*>(head.data()), head.size());
  }
  if (random.size() >= 16 + kRelaySeedBytes) r.relay_seed = random.substr(16, kRelaySeedBytes);
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

namespace {

// The answers cache key of a POST /mcp (a body of at most 16 KiB), or "" for any other request.
// Only the answers of POSTs that list (tools/list, resources/list, resources/templates/list,
// prompts/list: one request, not a batch; McpEndpoint::one_list_request says so once it has
// parsed the body) are kept, so any other POST finds nothing under its key, and the body is
// never parsed for the lookup. The answer is a function of the caller, the body's exact bytes
// (method, params and cursor, the JSON-RPC id, a 2026-07-28 request's _meta) and the headers the
// endpoint reads; the cached answer is replayed only to the same request, under the rules of a
// GET answer (200 only, built from a snapshot, until the snapshot's next transition or a newer
// epoch).
std::string mcp_list_answer_key(const std::string& member_id, const HttpRequest& request) {
  if (request.method != "POST" || request.body.size() > 16 * 1024) return {};
  std::string key = std::string(kMemberPrincipalPrefix) + member_id + "\nPOST " + request.path;
  for (const char* name :
       {"Content-Type", "Accept", "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"}) {
    std::optional<std::string_view> value = find_header(request.headers, name);
    key += '\n';
    if (value) key.append(value->data(), value->size());
  }
  key += "\n\n";
  key += request.body;
  return key;
}

}  // namespace

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
  if (request.path == kOAuthCallbackPath) return oauth_callback(r, request, now_ms);
  if (is_mcp_path(request.path)) return mcp(r, request, now_ms);
  if (!is_discovery_path(request.path)) {
    return respond_now(r, error_response(HttpErrorCode::kNotFound, "no such endpoint"));
  }

  CallerAuth caller = authenticate_caller(request.headers, &*settings_->keyring, now_ms,
                                          settings_->token, "no caller token keys", &tokens_);
  r.read = request.method == "GET" || request.method == "HEAD";
  r.head = request.method == "HEAD";
  r.exchange.emplace(settings_->discovery);
  if (r.read && caller.member_id) {
    r.answer_key =
        kMemberPrincipalPrefix + *caller.member_id + "\n" + request.path + "?" + request.query;
    int64_t age = 0;
    if (EdgeCache::Value stored = answers_.get_fresh(r.answer_key, now_ms, &age)) {
      if (std::optional<StoredAnswer> answer = decode_edge_answer(*stored)) {
        return replay(r, request, std::move(answer->response), std::move(answer->revalidations),
                      age, now_ms);
      }
    }
  }
  return drive(r, r.exchange->start(request, caller, now_ms), now_ms);
}

// POST /mcp (shared/mcp_endpoint.h): lists from the same snapshot read and L1 as discovery
// (stale-if-error included); calls through mcp_relay.
EdgeStep EdgeService::mcp(Request& r, const HttpRequest& request, int64_t now_ms) {
  // Before the token, and before any answer is replayed: a foreign web page gets nothing.
  if (std::optional<HttpResponse> refused =
          mcp_origin_refusal(request.headers, settings_->mcp_allowed_origins)) {
    return respond_now(r, std::move(*refused));
  }
  CallerAuth caller = authenticate_caller(request.headers, &*settings_->keyring, now_ms,
                                          settings_->token, "no caller token keys", &tokens_);
  r.read = true;  // a cache read: L1 snapshots serve it, as they serve GET /v1/manifests
  r.mcp.emplace(mcp_config_);
  if (caller.member_id) {
    r.answer_key = mcp_list_answer_key(*caller.member_id, request);
    int64_t age = 0;
    EdgeCache::Value stored =
        r.answer_key.empty() ? nullptr : answers_.get_fresh(r.answer_key, now_ms, &age);
    if (stored) {
      if (std::optional<StoredAnswer> answer = decode_edge_answer(*stored)) {
        return replay(r, request, std::move(answer->response), std::move(answer->revalidations),
                      age, now_ms);
      }
    }
  }
  McpStep step = r.mcp->start(request, caller, now_ms);
  if (!r.mcp->one_list_request()) r.answer_key.clear();  // never kept: not a list
  return drive_mcp(r, std::move(step), now_ms);
}

EdgeStep EdgeService::drive_mcp(Request& r, McpStep step, int64_t now_ms) {
  if (auto* respond = std::get_if<Respond>(&step)) return drive(r, std::move(*respond), now_ms);
  if (auto* need = std::get_if<NeedSnapshot>(&step)) return drive(r, std::move(*need), now_ms);
  return mcp_relay(r, std::move(std::get<NeedRelay>(step)), now_ms);
}

// THE RELAY HOOK of the edge's /mcp: tools/call, resources/read, prompts/get and
// completion/complete go to an agent through Redis (shared/call_relay.h), one round per call.
EdgeStep EdgeService::mcp_relay(Request& r, NeedRelay need, int64_t now_ms) {
  r.relay_calls = std::move(need.calls);
  r.relay_replies.clear();
  return relay_next(r, now_ms);
}

EdgeStep EdgeService::relay_next(Request& r, int64_t now_ms) {
  if (r.relay_replies.size() >= r.relay_calls.size()) {
    r.relay_calls.clear();
    return drive_mcp(r, r.mcp->resume_relay(std::move(r.relay_replies), now_ms), now_ms);
  }
  const RelayCall& call = r.relay_calls[r.relay_replies.size()];
  const int64_t wait_ms = call.deadline_ms - now_ms;
  if (wait_ms < 1) {
    return relay_answered(
        r,
        relay_reply_for_failure(
            Error(ErrorCode::kTimeout, "the call's deadline passed before it was sent")),
        {}, now_ms);
  }
  Result<std::string> rid = relay_rid(r.relay_seed, r.relay_count++);
  if (!rid.ok()) {
    return relay_answered(
        r, RelayReply::failed(RelayFailure::kUnavailable, kMcpCallsUnavailableMessage),
        "relay: " + rid.error().message, now_ms);
  }
  // The layout the call was resolved in (its snapshot's). On v2 every key of the call is on its
  // connection's shard (call_enqueue_v2.lua): the round is one slot, sent as a spread round so
  // that it goes to that slot's node (on one Redis: one pipeline, as on v1).
  const bool v2 = r.layout == KeyLayout::kV2;
  Result<std::vector<RedisCommand>> commands =
      v2 ? relay_call_commands_v2(*keys_v2_, relay_request_for(call, *rid, now_ms), wait_ms)
         : relay_call_commands(*keys_, relay_request_for(call, *rid, now_ms), wait_ms);
  if (!commands.ok())
    return relay_answered(r, relay_reply_for_failure(commands.error()), {}, now_ms);
  r.relay_rid = std::move(*rid);
  r.relay_cid = call.connection_id;
  r.relay_layout = r.layout;
  r.relay_deadline_ms = call.deadline_ms;
  // A BLPOP blocks its connection: the round gets one of its own (the host closes any other).
  r.redis.drop();
  r.redis_blocks_ms = wait_ms;
  // EVAL with the text: after an EVALSHA answered NOSCRIPT, the BLPOP behind it would wait out the
  // deadline for a call that was never queued.
  EdgeStep s = send(r, EdgeEvent::kRelay, std::move(*commands), ScriptForm::kText, /*spread=*/v2);
  // About to wait: a client that takes an event stream gets its head now and keep-alives while
  // the BLPOP waits, so that a client gone even by a graceful close fails a write (workerd tells
  // a request nothing of a FIN before its response started: docs/design.md).
  if (s.action == EdgeAction::kRedis && !r.mcp->streaming()) {
    if (std::optional<HttpResponse> head = r.mcp->open_stream()) {
      stamp_headers(r, *head);
      s.open_stream = true;
      s.response = std::move(*head);
      s.keepalive_ms = settings_->mcp_keepalive_ms;
      s.keepalive = kMcpSseKeepalive;
    }
  }
  return s;
}

EdgeStep EdgeService::relay_answered(Request& r, RelayReply reply, std::string log,
                                     int64_t now_ms) {
  r.redis_blocks_ms = 0;
  r.relay_rid.clear();
  r.relay_cid.clear();
  r.relay_replies.push_back(std::move(reply));
  EdgeStep s = relay_next(r, now_ms);
  if (!log.empty()) s.log = s.log.empty() ? std::move(log) : std::move(log) + "; " + s.log;
  return s;
}

EdgeStep EdgeService::resume_snapshot(Request& r, Result<DiscoverySnapshot> snapshot,
                                      int64_t now_ms) {
  if (r.mcp) return drive_mcp(r, r.mcp->resume_snapshot(std::move(snapshot), now_ms), now_ms);
  // Rendered from the kept snapshot itself, every body it names in hand (a splice checks that the
  // body cache still holds them: a render then would not read Redis): worth keeping for splice().
  const bool record = r.render_source != nullptr && !r.answer_key.empty() && snapshot.ok() &&
                      rendered_share(settings_->l1) > 0 && missing_bodies(*snapshot).empty();
  r.exchange->record_clock(record);
  DiscoveryStep step = r.exchange->resume_snapshot(std::move(snapshot), now_ms);
  if (record) keep_rendered(r);
  return drive(r, std::move(step), now_ms);
}

void EdgeService::keep_rendered(Request& r) {
  std::optional<RenderedDiscovery> rendered = r.exchange->take_rendered();
  if (!rendered) return;
  const std::size_t bytes = rendered_bytes(r.answer_key, *rendered);
  if (bytes > rendered_max_entry_bytes_) {
    rendered_.erase(r.answer_key);
    return;
  }
  rendered_.insert(r.answer_key,
                   RenderedAnswer{r.render_source,
                                  std::make_shared<const RenderedDiscovery>(std::move(*rendered))},
                   bytes);
}

std::optional<EdgeStep> EdgeService::splice(Request& r, const SnapshotCache::Value& source,
                                            int64_t now_ms) {
  if (!r.exchange || r.answer_key.empty() || rendered_share(settings_->l1) == 0) {
    return std::nullopt;
  }
  const RenderedAnswer* kept = rendered_.find_if(r.answer_key, [&](const RenderedAnswer& a) {
    return a.source.lock() == source;  // the same object: an expired one never matches
  });
  if (kept == nullptr) return std::nullopt;
  std::shared_ptr<const RenderedDiscovery> rendered = kept->rendered;
  // A render now would take every body from the body cache (else read it from Redis first).
  for (const std::string& digest : missing_bodies(*source)) {
    if (bodies_.find(digest) == nullptr) return std::nullopt;
  }
  std::optional<DiscoveryStep> step = r.exchange->resume_spliced(*rendered, now_ms);
  if (!step) return std::nullopt;  // outside its window: rendered (and kept) again
  ++revalidated_spliced_;
  return drive(r, std::move(*step), now_ms);
}

EdgeStep EdgeService::healthz(Request& r, const HttpRequest& request) {
  if (request.method != "GET" && request.method != "HEAD") {
    HttpResponse res = error_response(HttpErrorCode::kMethodNotAllowed, "method not allowed");
    res.headers.emplace_back("Allow", "GET, HEAD");
    return respond_now(r, std::move(res));
  }
  Json body = Json::object();
  body["service"] = "quiver-edge";
  body["version"] = kQuiverVersion;
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
                               {"validate_max_age_ms", cache_.options().validate_max_age_ms},
                               {"revalidated", revalidated_},
                               {"revalidate_changed", revalidate_changed_},
                               {"revalidated_spliced", revalidated_spliced_},
                               {"splice_entries", rendered_.size()},
                               {"splice_bytes", rendered_.bytes()},
                               {"stale_served", snapshots.stale_served},
                               {"body_entries", bodies_.entries()},
                               {"body_bytes", bodies_.bytes()},
                               {"body_hits", bodies_.stats().hits},
                               {"body_misses", bodies_.stats().misses}});
    body["layout"] = Json::object({{"reads", key_layout_name(layout_)}});
    if (cluster_) {
      const ClusterRouterStats& c = cluster_->stats();
      body["cluster"] = Json::object({{"slot", cluster_->slot()},
                                      {"map_known", cluster_->have_map()},
                                      {"refreshes", c.refreshes},
                                      {"moved", c.moved},
                                      {"ask", c.ask},
                                      {"retries", c.retries},
                                      {"split", c.split}});
    }
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
  r.webhook_reason = checked.request.targets.front().reason;
  r.webhook_legacy_v1 = checked.verified.legacy_v1;
  r.webhook = std::move(checked);
  return webhook_send(r, now_ms);
}

// On v1 the one script; on v2 the first of its rounds (shared/webhook_spread.h), each a spread
// round of the request's RoutedConversation. `now_ms` is the marks' time.
EdgeStep EdgeService::webhook_send(Request& r, int64_t now_ms) {
  const WebhookChecked& checked = *r.webhook;
  if (layout_ == KeyLayout::kV2) {
    Result<SpreadWebhookRefresh> hook = SpreadWebhookRefresh::start(
        *keys_v2_, checked.verified, checked.request, now_ms, settings_->enqueue);
    if (!hook.ok()) {
      return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                         "webhook: " + hook.error().message);
    }
    r.hook = std::move(*hook);
    return send(r, EdgeEvent::kSendWebhook, r.hook->commands(), ScriptForm::kBySha,
                /*spread=*/true);
  }
  r.hook.reset();
  Result<RedisCommand> command = webhook_refresh_command(*keys_, checked.verified, checked.request,
                                                         now_ms, settings_->enqueue);
  if (!command.ok()) {
    return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                       "webhook: " + command.error().message);
  }
  return send(r, EdgeEvent::kSendWebhook, {std::move(*command)});
}

// The browser coming back from an authorization server: no bearer token (the state is what
// authenticates it, and only the agent holding it can use it). Queued for the agents with the
// outcome already reported, if any, in one script (shared/oauth_callback.h).
EdgeStep EdgeService::oauth_callback(Request& r, const HttpRequest& request, int64_t now_ms) {
  if (request.method != "GET") {
    return respond_now(r, oauth_callback_refusal(405, "The callback takes GET only"));
  }
  Result<oauth::CallbackParams> params = parse_oauth_callback(request.query);
  if (!params.ok()) {
    return respond_now(r, oauth_callback_refusal(400, params.error().message));
  }
  Result<RedisCommand> command = oauth_callback_command(*keys_, *params, now_ms);
  if (!command.ok()) {
    return respond_now(r, oauth_callback_refusal(500, "Quiver could not record the sign-in"),
                       "oauth callback: " + command.error().message);
  }
  return send(r, EdgeEvent::kSendOAuthCallback, {std::move(*command)});
}

EdgeStep EdgeService::oauth_callback_answered(Request& r,
                                              const Result<std::optional<std::string>>& reply) {
  if (!reply.ok()) {
    return respond_now(r,
                       oauth_callback_refusal(503,
                                              "Quiver could not record the sign-in: its "
                                              "store is unavailable; try again shortly"),
                       store_log_.admit("oauth callback: " + reply.error().message, r.now_ms));
  }
  OAuthCallbackResult result;  // received: queued, no outcome yet
  if (reply->has_value()) {
    if (std::optional<OAuthCallbackResult> stored = parse_oauth_result_record(**reply)) {
      result = std::move(*stored);
    }
  }
  EdgeStep s = respond_now(r, oauth_callback_page(result));
  s.log = std::string("oauth callback: ") +
          (reply->has_value() ? "outcome shown" : "queued for the agents");
  s.log_info = true;
  return s;
}

EdgeStep EdgeService::replay(Request& r, const HttpRequest& request, HttpResponse response,
                             std::vector<Revalidation> revalidations, int64_t age_ms,
                             int64_t now_ms) {
  std::optional<std::string_view> etag = find_header(response.headers, "ETag");
  std::optional<std::string_view> inm = find_header(request.headers, "If-None-Match");
  if (request.method != "POST" && etag && inm && if_none_match_matches(*inm, *etag)) {
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
  r.snapshot_epoch = l1_epoch(r, snapshot);
  r.answer_fresh_until = snapshot_next_transition(snapshot, settings_->discovery.freshness, now_ms);
}

EdgeStep EdgeService::with_bodies(Request& r, DiscoverySnapshot snapshot, int64_t now_ms,
                                  bool may_read) {
  std::vector<std::string> lacking;
  for (const std::string& digest : missing_bodies(snapshot)) {
    if (BodyCache::Value body = bodies_.find(digest)) {
      fill_body(snapshot, digest, *body);
    } else {
      lacking.push_back(digest);
    }
  }
  if (!lacking.empty() && may_read && r.layout == KeyLayout::kV2) {
    // Each body is its own slot on v2: one GET per body, grouped per node by the conversation.
    std::vector<RedisCommand> gets;
    for (const std::string& digest : lacking) {
      Result<std::string> key = keys_v2_->body(digest);
      if (!key.ok()) break;
      gets.push_back({"GET", std::move(*key)});
    }
    if (gets.size() == lacking.size()) {
      r.pending = std::move(snapshot);
      r.wanted_bodies = std::move(lacking);
      r.bodies_spread = true;
      r.source = "miss";
      return send(r, EdgeEvent::kReadBodies, std::move(gets), ScriptForm::kBySha, /*spread=*/true);
    }
  }
  if (!lacking.empty() && may_read && r.layout == KeyLayout::kV1) {
    Result<RedisCommand> command = body_read_command(*keys_, lacking);
    if (command.ok()) {
      r.pending = std::move(snapshot);
      r.wanted_bodies = std::move(lacking);
      r.bodies_spread = false;
      r.source = "miss";  // Redis was asked, if only for bodies
      return send(r, EdgeEvent::kReadBodies, {std::move(*command)});
    }
  }
  return resume_snapshot(r, std::move(snapshot), now_ms);
}

EdgeStep EdgeService::drive(Request& r, DiscoveryStep step, int64_t now_ms) {
  if (Respond* respond = std::get_if<Respond>(&step)) {
    // Revalidations go out in the background, once per key per claim period from this isolate;
    // the Redis gate dedups across isolates.
    std::vector<Revalidation> wanted = std::move(respond->background);
    respond->background.clear();
    bool stale_if_error = r.source != nullptr && std::string_view(r.source) == kStaleIfError;
    if (r.from_snapshot && !stale_if_error && !r.head && !r.answer_key.empty() &&
        respond->response.status == 200 && answers_.keeps_fresh()) {
      answers_.put(r.answer_key, encode_edge_answer(respond->response, wanted), r.snapshot_epoch,
                   now_ms, r.answer_fresh_until);
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
    r.query = need->query;
    r.l1_key = layout_key(r.layout, snapshot_cache_key(need->member, need->query));
    if (r.read) {
      if (SnapshotCache::Value cached = cache_.get_fresh(r.l1_key, now_ms)) {
        r.source = "hit";
        note_snapshot(r, *cached, now_ms);
        return with_bodies(r, *cached, now_ms, /*may_read=*/true);
      }
    }
    return read_snapshot(r, now_ms);
  }

  NeedEnqueue& need = std::get<NeedEnqueue>(step);
  if (r.layout == KeyLayout::kV2) {
    return enqueue_v2(r, EdgeEvent::kQueue, need.revalidations, need.lease_held, now_ms);
  }
  Result<std::vector<RedisCommand>> commands =
      revalidate_enqueue_commands(*keys_, need.revalidations, now_ms, settings_->enqueue);
  if (!commands.ok()) {
    return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                       "revalidation: " + commands.error().message);
  }
  return send(r, EdgeEvent::kQueue, std::move(*commands));
}

EdgeStep EdgeService::read_snapshot(Request& r, int64_t now_ms) {
  r.held.reset();
  r.lease_entries.clear();
  r.spread.reset();
  const RedisKeys& keys = keys_of(r.layout);
  const bool v2 = r.layout == KeyLayout::kV2;
  // Past the TTL: the copy kept since its full read (in this layout: the layout is part of the
  // key), checked against the store's versions (reads only, as L1: a write such as a manual
  // refresh reads afresh).
  SnapshotCache::Value kept = r.read && !r.changed ? kept_.get_stale(r.l1_key, now_ms) : nullptr;
  if (kept) {
    std::vector<std::size_t> leases = lease_sensitive_entries(
        *kept, settings_->discovery.freshness, now_ms,
        [this](std::string_view digest) { return bodies_.find(digest) != nullptr; });
    if (v2) {
      Result<std::vector<RedisCommand>> commands = spread_conditional_commands(keys, *kept, leases);
      if (commands.ok()) {
        r.held = std::move(kept);
        r.lease_entries = std::move(leases);
        r.source = "miss";
        return send(r, EdgeEvent::kReadSnapshot, std::move(*commands), ScriptForm::kBySha,
                    /*spread=*/true);
      }
    } else {
      Result<RedisCommand> command =
          conditional_discovery_read_command(keys, *kept, r.query, leases);
      if (command.ok()) {
        r.held = std::move(kept);
        r.lease_entries = std::move(leases);
        r.source = "miss";
        return send(r, EdgeEvent::kReadSnapshot, {std::move(*command)});
      }
    }
  }
  r.source = "miss";
  if (v2) {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(keys, *r.member, r.query);
    if (!read.ok()) {
      return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                         "discovery read: " + read.error().message);
    }
    r.spread = std::move(*read);
    return send(r, EdgeEvent::kReadSnapshot, r.spread->commands(), ScriptForm::kBySha,
                /*spread=*/true);
  }
  Result<RedisCommand> command = discovery_read_command(keys, *r.member, r.query);
  if (!command.ok()) {
    return respond_now(r, error_response(HttpErrorCode::kInternal, "internal error"),
                       "discovery read: " + command.error().message);
  }
  return send(r, EdgeEvent::kReadSnapshot, {std::move(*command)});
}

EdgeStep EdgeService::switch_layout(Request& r, KeyLayout layout, int64_t now_ms) {
  layout_ = layout;
  r.switched = true;
  r.layout = layout;
  r.l1_key = layout_key(layout, snapshot_cache_key(*r.member, r.query));
  advance(r, EdgeEvent::kRedisAnswered);
  return read_snapshot(r, now_ms);
}

int64_t EdgeService::l1_epoch(const Request& r, const DiscoverySnapshot& snapshot) const {
  if (r.layout == KeyLayout::kV1) return snapshot.epoch;
  return std::max(snapshot.epoch, cache_.stats().epoch);
}

const RedisKeys& EdgeService::keys_of(KeyLayout layout) const {
  return layout == KeyLayout::kV2 ? *keys_v2_ : *keys_;
}

bool EdgeService::advance(Request& r, EdgeEvent event) {
  std::optional<EdgePhase> next = edge_transition(r.phase, event);
  if (!next) return false;
  r.phase = *next;
  return true;
}

EdgeStep EdgeService::misstep(Request& r, EdgeEvent event) {
  return internal_error(r.handle, std::string("edge: ") + edge_event_name(event) + " while " +
                                      edge_phase_name(r.phase));
}

EdgeStep EdgeService::send(Request& r, EdgeEvent event, std::vector<RedisCommand> commands,
                           ScriptForm form, bool spread) {
  if (!advance(r, event)) return misstep(r, event);
  // A discovery read changes nothing. On a cluster with replica reads on, the conditional read
  // (`held`: the kept copy checked against the versions) goes to a replica first: a key a
  // migration moved away reads as absent there, which it takes for a change and reads in full.
  // A full read goes to the masters, which answer ASK for what moved: its answer is rendered
  // from what it reads (docs/design.md, "Replica reads").
  RoundAccess access = RoundAccess::kWrite;
  if (event == EdgeEvent::kReadSnapshot) {
    access = r.held ? RoundAccess::kReplicaRead : RoundAccess::kRead;
  }
  return transmit(r, std::move(commands), form, spread, access);
}

EdgeStep EdgeService::transmit(Request& r, std::vector<RedisCommand> commands, ScriptForm form,
                               bool spread, RoundAccess access) {
  r.round_unsent = false;
  if (fail_fast_.admit(r.handle, r.now_ms) == FailFast::Admit::kFailFast) {
    // Redis timed out moments ago and a probe is testing it: no waiting on it meanwhile.
    r.fail_fast = true;
    r.round_unsent = true;
    return store_failed(
        r,
        Error(ErrorCode::kStoreUnavailable,
              "fail-fast: Redis timed out " + std::to_string(r.now_ms - fail_fast_.opened_at_ms()) +
                  " ms ago; one probe request is testing it"),
        r.now_ms);
  }
  // A read round's scripts (a connection's, the member's) refused by a split slot are read key by
  // key: the TRYAGAIN is handed back to the read at once (SpreadDiscoveryRead::hand_back_split).
  const bool read = access != RoundAccess::kWrite;
  RoutedWrite write = spread
                          ? r.redis.begin_spread(std::move(commands), form, access,
                                                 read && r.spread ? r.spread->hand_back_split()
                                                                  : std::vector<bool>{})
                          : r.redis.begin(std::move(commands), form, /*keep_bytes=*/false, access);
  if (!r.redis.in_round()) return store_failed(r, r.redis.error(), r.now_ms);
  EdgeStep s = redis_step(r.handle, std::move(write));
  s.redis_blocks_ms = r.redis_blocks_ms;
  return s;
}

EdgeStep EdgeService::redis_step(uint32_t handle, RoutedWrite write) {
  EdgeStep s = step_of(handle, EdgeAction::kRedis);
  s.redis_bytes = std::move(write.bytes);
  s.new_connection = write.new_connection;
  if (write.node) {
    s.redis_host = std::move(write.node->host);
    s.redis_port = write.node->port;
  }
  s.redis_delay_ms = write.delay_ms;
  s.redis_close = std::move(write.close);
  for (RoutedPart& p : write.parts) {
    s.redis_parts.push_back(
        EdgeStep::Part{std::move(p.bytes), p.new_connection, std::move(p.node.host), p.node.port});
  }
  return s;
}

EdgeStep EdgeService::feed(uint32_t handle, std::string_view bytes, int64_t now_ms) {
  if (auto c = cancels_.find(handle); c != cancels_.end()) {
    return cancel_turn(handle, c->second, c->second.feed(bytes));
  }
  Request* r = find(handle, now_ms);
  if (r == nullptr) return unknown_handle(handle);
  if (!edge_waits_on_redis(r->phase) || !r->redis.in_round()) {
    return internal_error(handle, "edge: Redis bytes arrived while none were expected");
  }
  RedisTurn turn = r->redis.feed(bytes);
  if (r->redis.answered()) fail_fast_.answered(handle);  // even error replies: not stalled
  return round_turn(*r, turn, now_ms);
}

EdgeStep EdgeService::round_turn(Request& r, RedisTurn turn, int64_t now_ms) {
  switch (turn) {
    case RedisTurn::kRead: {
      EdgeStep s = step_of(r.handle, EdgeAction::kRead);
      s.redis_blocks_ms = r.redis_blocks_ms;
      return s;
    }
    case RedisTurn::kWrite: {  // the scripts Redis lacked, as EVAL; or a cluster's redirect
      EdgeStep s = redis_step(r.handle, r.redis.take_write());
      s.redis_blocks_ms = r.redis_blocks_ms;
      return s;
    }
    case RedisTurn::kFailed:
      return store_failed(r, r.redis.error(), now_ms);
    case RedisTurn::kDone:
      break;
  }
  return complete(r, r.redis.take_replies(), now_ms);
}

EdgeStep EdgeService::feed_part(uint32_t handle, uint32_t part, std::string_view bytes,
                                int64_t now_ms) {
  if (auto c = cancels_.find(handle); c != cancels_.end()) {
    return cancel_part_turn(handle, c->second, part, c->second.feed_part(part, bytes));
  }
  Request* r = find(handle, now_ms);
  if (r == nullptr) return unknown_handle(handle);
  if (!edge_waits_on_redis(r->phase) || !r->redis.in_round() || r->redis.parts() == 0) {
    return internal_error(handle, "edge: Redis bytes of a part arrived while none were expected");
  }
  PartTurn turn = r->redis.feed_part(part, bytes);
  if (r->redis.answered()) fail_fast_.answered(handle);  // even error replies: not stalled
  return part_turn(*r, part, turn, now_ms);
}

EdgeStep EdgeService::fail_part(uint32_t handle, uint32_t part, std::string_view why,
                                int64_t now_ms) {
  if (auto c = cancels_.find(handle); c != cancels_.end()) {
    return cancel_part_turn(handle, c->second, part, c->second.connection_failed_part(part, why));
  }
  Request* r = find(handle, now_ms);
  if (r == nullptr) return unknown_handle(handle);
  if (!edge_waits_on_redis(r->phase) || !r->redis.in_round() || r->redis.parts() == 0) {
    return internal_error(handle, "edge: a part failed while none was in flight");
  }
  return part_turn(*r, part, r->redis.connection_failed_part(part, why), now_ms);
}

EdgeStep EdgeService::part_turn(Request& r, uint32_t part, PartTurn turn, int64_t now_ms) {
  EdgeStep s;
  switch (turn) {
    case PartTurn::kRead:
      s = step_of(r.handle, EdgeAction::kRead);
      break;
    case PartTurn::kWrite:  // the scripts that node lacked, as EVAL, on the part's connection
      s = redis_step(r.handle, r.redis.take_write());
      break;
    case PartTurn::kWait:
      s = step_of(r.handle, EdgeAction::kWait);
      break;
    case PartTurn::kRound:
      return round_turn(r, r.redis.round_turn(), now_ms);
  }
  s.redis_part = static_cast<int>(part);
  s.redis_blocks_ms = r.redis_blocks_ms;
  return s;
}

EdgeStep EdgeService::full_read(Request& r, DiscoverySnapshot snapshot, int64_t now_ms) {
  auto kept = std::make_shared<const DiscoverySnapshot>(snapshot);
  const std::size_t bytes = snapshot_bytes(snapshot);
  kept_.put(r.l1_key, kept, bytes, 0, now_ms);
  if (r.read) r.render_source = kept;
  cache_.put(r.l1_key, std::move(kept), bytes, l1_epoch(r, snapshot), now_ms);
  answers_.observe_epoch(snapshot.epoch);
  note_snapshot(r, snapshot, now_ms);
  return with_bodies(r, std::move(snapshot), now_ms, /*may_read=*/true);
}

EdgeStep EdgeService::complete(Request& r, std::vector<RespValue> replies, int64_t now_ms) {
  switch (r.phase) {
    case EdgePhase::kReadingSnapshot: {
      const bool v2 = r.layout == KeyLayout::kV2;
      if (!v2 && !r.switched && names_v2_ready(replies[0])) {
        return switch_layout(r, KeyLayout::kV2, now_ms);
      }
      if (r.held) {
        SnapshotCache::Value kept = std::move(r.held);
        DiscoverySnapshot held = *kept;
        std::optional<DiscoverySnapshot> changed;
        if (v2) {
          // Unchanged, or read in full in rounds (the layout record is among what it compares).
          Result<bool> same = decode_spread_conditional(replies, held, r.lease_entries);
          if (!same.ok()) return store_failed(r, same.error(), now_ms);
          if (!*same) {
            ++revalidate_changed_;
            advance(r, EdgeEvent::kRedisAnswered);
            r.changed = true;
            return read_snapshot(r, now_ms);
          }
        } else {
          Result<std::optional<DiscoverySnapshot>> read =
              decode_conditional_reply(replies[0], held, r.lease_entries);
          if (!read.ok()) return store_failed(r, read.error(), now_ms);
          if (read->has_value() && r.redis.sent_to_replica()) {
            // Changed, read by a replica, which answers for keys its master's migration moved
            // away as absent (not ASK): read in full at the master (send()).
            ++revalidate_changed_;
            advance(r, EdgeEvent::kRedisAnswered);
            r.changed = true;
            return read_snapshot(r, now_ms);
          }
          changed = std::move(*read);
        }
        if (!changed.has_value()) {
          // Unchanged: what a full read would return now, its leases and epoch read again (in
          // `held`), so it goes to L1 as a full read's snapshot does, under the epoch it says
          // (the copy kept, when neither differs).
          advance(r, EdgeEvent::kRedisAnswered);
          ++revalidated_;
          // Leases are what a render of `held` may read differently from the kept copy (the
          // epoch is not rendered): with the same leases, the kept copy's render is this one's.
          bool same_leases = true;
          for (std::size_t i : r.lease_entries) {
            same_leases =
                same_leases && held.connections[i].lease_held == kept->connections[i].lease_held;
          }
          const SnapshotCache::Value source = kept;
          if (!same_leases || held.epoch != kept->epoch) {
            kept = std::make_shared<const DiscoverySnapshot>(held);
          }
          cache_.put(r.l1_key, std::move(kept), snapshot_bytes(held), l1_epoch(r, held), now_ms);
          answers_.observe_epoch(held.epoch);
          r.source = "revalidated";
          note_snapshot(r, held, now_ms);
          if (same_leases) {
            if (std::optional<EdgeStep> spliced = splice(r, source, now_ms)) return *spliced;
            r.render_source = source;
          }
          return with_bodies(r, std::move(held), now_ms, /*may_read=*/true);
        }
        ++revalidate_changed_;
        advance(r, EdgeEvent::kRedisAnswered);
        return full_read(r, std::move(*changed), now_ms);
      }
      if (r.spread) {
        if (Status fed = r.spread->feed(replies); !fed.ok()) {
          // The namespace went back to v1 between the isolate's reads: read there, once.
          if (r.spread->layout_seen() == KeyLayout::kV1 && !r.switched) {
            return switch_layout(r, KeyLayout::kV1, now_ms);
          }
          return store_failed(r, fed.error(), now_ms);
        }
        advance(r, EdgeEvent::kRedisAnswered);
        if (!r.spread->done()) {
          return send(r, EdgeEvent::kReadSnapshot, r.spread->commands(), ScriptForm::kBySha,
                      /*spread=*/true);
        }
        DiscoverySnapshot snapshot = r.spread->take_snapshot();
        r.spread.reset();
        return full_read(r, std::move(snapshot), now_ms);
      }
      Result<DiscoverySnapshot> snapshot = decode_discovery_reply(replies[0], *r.member);
      if (!snapshot.ok()) return store_failed(r, snapshot.error(), now_ms);
      advance(r, EdgeEvent::kRedisAnswered);
      return full_read(r, std::move(*snapshot), now_ms);
    }
    case EdgePhase::kReadingBodies: {
      // On v2 the GETs' replies, one per body, read as the one MGET's would be.
      Result<std::vector<std::optional<std::string>>> bodies = decode_body_reply(
          r.bodies_spread ? RespValue::array(std::move(replies)) : std::move(replies[0]),
          r.wanted_bodies);
      if (!bodies.ok()) return store_failed(r, bodies.error(), now_ms);
      advance(r, EdgeEvent::kRedisAnswered);
      DiscoverySnapshot snapshot = std::move(*r.pending);
      r.pending.reset();
      for (std::size_t i = 0; i < bodies->size(); ++i) {
        std::optional<std::string>& body = (*bodies)[i];
        if (!body) continue;  // absent: its entries render as store failures and revalidate
        fill_body(snapshot, r.wanted_bodies[i], *body);
        bodies_.put(std::move(r.wanted_bodies[i]), std::move(*body));
      }
      return resume_snapshot(r, std::move(snapshot), now_ms);
    }
    case EdgePhase::kQueueing:
      if (r.enqueue_v2) return enqueue_v2_answered(r, std::move(replies), now_ms);
      advance(r, EdgeEvent::kRedisAnswered);
      return drive(r, r.exchange->resume_enqueue(parse_enqueue_replies(replies), now_ms), now_ms);
    case EdgePhase::kWebhook: {
      if (r.hook) {
        if (Status fed = r.hook->feed(replies); !fed.ok()) {
          // The namespace is in v1 (back, or this isolate had not seen it move): its script
          // serves it, once per request. Nothing was written by the rounds.
          if (r.hook->layout_seen() == KeyLayout::kV1 && !r.switched) {
            layout_ = KeyLayout::kV1;
            r.switched = true;
            advance(r, EdgeEvent::kRedisAnswered);
            return webhook_send(r, now_ms);
          }
          return store_failed(r, fed.error(), now_ms);
        }
        advance(r, EdgeEvent::kRedisAnswered);
        if (!r.hook->done()) {
          return send(r, EdgeEvent::kSendWebhook, r.hook->commands(), ScriptForm::kBySha,
                      /*spread=*/true);
        }
        Result<WebhookRefreshReply> reply = r.hook->take_reply();
        r.hook.reset();
        return webhook_answered(r, reply);
      }
      if (!r.switched && names_v2_ready(replies[0])) {
        // webhook_refresh.lua found the namespace in v2 (it wrote nothing): its rounds serve it.
        layout_ = KeyLayout::kV2;
        r.switched = true;
        advance(r, EdgeEvent::kRedisAnswered);
        return webhook_send(r, now_ms);
      }
      Result<WebhookRefreshReply> reply = parse_webhook_refresh_reply(replies[0]);
      if (!reply.ok()) return store_failed(r, reply.error(), now_ms);
      advance(r, EdgeEvent::kRedisAnswered);
      return webhook_answered(r, reply);
    }
    case EdgePhase::kOAuthCallback: {
      Result<std::optional<std::string>> reply = parse_oauth_callback_reply(replies[0]);
      if (!reply.ok() && reply.error().code != ErrorCode::kStoreUnavailable) {
        return store_failed(r, reply.error(), now_ms);
      }
      advance(r, EdgeEvent::kRedisAnswered);
      return oauth_callback_answered(r, reply);
    }
    case EdgePhase::kRelaying: {
      Result<RelayReply> reply = parse_relay_call_replies(replies);
      if (!reply.ok()) return store_failed(r, reply.error(), now_ms);
      advance(r, EdgeEvent::kRedisAnswered);
      r.redis.drop();  // the BLPOP's own connection: not reused by a later round
      return relay_answered(r, std::move(*reply), {}, now_ms);
    }
    case EdgePhase::kBackground: {
      if (r.enqueue_v2) return enqueue_v2_answered(r, std::move(replies), now_ms);
      return enqueued(r, parse_enqueue_replies(replies), now_ms);
    }
    default:
      return misstep(r, EdgeEvent::kRedisAnswered);
  }
}

EdgeStep EdgeService::enqueued(Request& r, std::vector<Result<RevalidationResult>> results,
                               int64_t now_ms) {
  r.enqueue_v2.reset();
  switch (r.phase) {
    case EdgePhase::kQueueing:
      advance(r, EdgeEvent::kRedisAnswered);
      return drive(r, r.exchange->resume_enqueue(results, now_ms), now_ms);
    case EdgePhase::kBackground: {
      advance(r, EdgeEvent::kRedisAnswered);
      EdgeStep s = step_of(r.handle, EdgeAction::kDone);
      for (std::size_t i = 0; i < results.size() && i < r.background.size(); ++i) {
        if (results[i].ok()) continue;
        cache_.release_revalidation(claim_key(r.background[i]));
        s.log += (s.log.empty() ? "" : "; ") + std::string("revalidation of ") +
                 r.background[i].connection_id + " not queued: " + results[i].error().message;
      }
      s.log = store_log_.admit(std::move(s.log), now_ms);
      return s;
    }
    default:
      return misstep(r, EdgeEvent::kRedisAnswered);
  }
}

EdgeStep EdgeService::enqueue_v2(Request& r, EdgeEvent event,
                                 const std::vector<Revalidation>& revalidations,
                                 const std::vector<bool>& lease_held, int64_t now_ms) {
  Request::EnqueueV2 e;
  e.revalidations = revalidations;
  e.results.resize(revalidations.size());
  std::vector<RedisCommand> gates;
  for (std::size_t i = 0; i < revalidations.size(); ++i) {
    if (i < lease_held.size() && lease_held[i]) {
      RevalidationResult held;
      held.outcome = RevalidationOutcome::kInProgress;
      e.results[i] = std::move(held);
      continue;
    }
    Result<RedisCommand> gate =
        revalidate_gate_command(*keys_v2_, revalidations[i], now_ms, settings_->enqueue,
                                /*declare_lease=*/false);
    if (!gate.ok()) {
      e.results[i] = gate.error();
      continue;
    }
    gates.push_back(std::move(*gate));
    e.in_flight.push_back(i);
  }
  r.enqueue_v2 = std::move(e);
  if (gates.empty()) {
    // Nothing to send (every lease held, or nothing valid): the results as they stand, the
    // request moved through its phase as a round would have.
    if (!advance(r, event)) return misstep(r, event);
    std::vector<Result<RevalidationResult>> results;
    for (std::optional<Result<RevalidationResult>>& one : r.enqueue_v2->results) {
      results.push_back(std::move(*one));
    }
    return enqueued(r, std::move(results), now_ms);
  }
  return send(r, event, std::move(gates), ScriptForm::kBySha, /*spread=*/true);
}

EdgeStep EdgeService::enqueue_v2_answered(Request& r, std::vector<RespValue> replies,
                                          int64_t now_ms) {
  Request::EnqueueV2& e = *r.enqueue_v2;
  if (replies.size() != e.in_flight.size()) {
    return store_failed(r,
                        Error(ErrorCode::kInvalidReply,
                              "revalidation: " + std::to_string(replies.size()) + " replies for " +
                                  std::to_string(e.in_flight.size()) + " commands"),
                        now_ms);
  }
  std::vector<RedisCommand> xadds;
  std::vector<std::size_t> won;
  for (std::size_t j = 0; j < replies.size(); ++j) {
    const std::size_t i = e.in_flight[j];
    if (e.xadds) {
      e.results[i] = parse_xadd_reply(replies[j]);
      continue;
    }
    Result<RevalidationGate> gate = parse_gate_reply(replies[j]);
    if (!gate.ok()) {
      e.results[i] = gate.error();
      continue;
    }
    if (*gate != RevalidationGate::kWon) {
      RevalidationResult out;
      out.outcome = *gate == RevalidationGate::kInProgress ? RevalidationOutcome::kInProgress
                                                           : RevalidationOutcome::kAlreadyQueued;
      e.results[i] = std::move(out);
      continue;
    }
    Result<RedisCommand> xadd = revalidate_xadd_command(*keys_v2_, e.revalidations[i], now_ms,
                                                        settings_->enqueue.stream_maxlen);
    if (!xadd.ok()) {
      e.results[i] = xadd.error();
      continue;
    }
    xadds.push_back(std::move(*xadd));
    won.push_back(i);
  }
  if (!e.xadds && !xadds.empty()) {
    // (b): the gates won, each request on its connection's shard stream, one spread round. A
    // failure from here on loses them: the gates expire and the next stale read queues them.
    e.xadds = true;
    e.in_flight = std::move(won);
    if (r.phase == EdgePhase::kQueueing) {
      advance(r, EdgeEvent::kRedisAnswered);
      return send(r, EdgeEvent::kQueue, std::move(xadds), ScriptForm::kBySha, /*spread=*/true);
    }
    // kBackground: the XADDs continue the background round (no answer is waiting on them).
    return transmit(r, std::move(xadds), ScriptForm::kBySha, /*spread=*/true, RoundAccess::kWrite);
  }
  std::vector<Result<RevalidationResult>> results;
  for (std::optional<Result<RevalidationResult>>& one : e.results) {
    results.push_back(
        one ? std::move(*one)
            : Result<RevalidationResult>(Error(ErrorCode::kInternal, "revalidation: no result")));
  }
  return enqueued(r, std::move(results), now_ms);
}

EdgeStep EdgeService::webhook_answered(Request& r, const Result<WebhookRefreshReply>& outcome) {
  WebhookAnswer a = webhook_answer(outcome, r.webhook_reason, r.webhook_legacy_v1);
  // A store failure is logged as every other one (the code answered, throttled).
  if (!outcome.ok()) return respond_now(r, std::move(a.response), std::move(a.log));
  EdgeStep s = respond_now(r, std::move(a.response));
  s.log = std::move(a.log);
  s.log_info = a.log_info;
  return s;
}

EdgeStep EdgeService::fail(uint32_t handle, std::string_view why, int64_t now_ms) {
  if (auto c = cancels_.find(handle); c != cancels_.end()) {
    return cancel_turn(handle, c->second, c->second.connection_failed(why));
  }
  Request* r = find(handle, now_ms);
  if (r == nullptr) return unknown_handle(handle);
  // On a cluster a failed node may be retried elsewhere (shared/routed_conversation.h).
  if (r->redis.connection_failed(why) == RedisTurn::kWrite) {
    EdgeStep s = redis_step(handle, r->redis.take_write());
    s.redis_blocks_ms = r->redis_blocks_ms;
    return s;
  }
  return store_failed(*r, r->redis.error(), now_ms);
}

EdgeStep EdgeService::store_failed(Request& r, Error error, int64_t now_ms) {
  if (error.code == ErrorCode::kTimeout && settings_ && settings_->fail_fast_ms > 0) {
    fail_fast_.timed_out(r.handle, now_ms);
    error.message += " (fail-fast for the next " + std::to_string(settings_->fail_fast_ms) +
                     " ms, while one request probes Redis)";
  }
  // The connection is out of sync or gone: the host drops it, a later step opens another.
  r.redis.drop();
  r.enqueue_v2.reset();
  const EdgePhase phase = r.phase;
  if (!advance(r, EdgeEvent::kStoreFailed)) {
    if (!edge_responded(phase)) return internal_error(r.handle, "edge: " + error.message);
    return step_of(r.handle, EdgeAction::kDone, error.message);
  }
  switch (phase) {
    case EdgePhase::kReadingSnapshot: {
      if (r.read) {
        int64_t age = 0;
        if (SnapshotCache::Value cached = cache_.get_stale(r.l1_key, now_ms, &age)) {
          r.source = kStaleIfError;
          r.stale_age_ms = age;
          r.store_error = error.message;
          return with_bodies(r, *cached, now_ms, /*may_read=*/false);
        }
      }
      return resume_snapshot(r, std::move(error), now_ms);
    }
    case EdgePhase::kReadingBodies: {
      // The snapshot was read; its bodies were not. Answered from it with what bodies_ holds,
      // the others shown as store failures, marked and not kept like any stale-if-error answer.
      r.source = kStaleIfError;
      r.stale_age_ms = 0;
      r.store_error = error.message;
      DiscoverySnapshot snapshot = std::move(*r.pending);
      r.pending.reset();
      return with_bodies(r, std::move(snapshot), now_ms, /*may_read=*/false);
    }
    case EdgePhase::kQueueing:
      return drive(
          r, r.exchange->resume_enqueue({Result<RevalidationResult>(std::move(error))}, now_ms),
          now_ms);
    case EdgePhase::kWebhook:
      return webhook_answered(r, Result<WebhookRefreshReply>(std::move(error)));
    case EdgePhase::kOAuthCallback:
      return oauth_callback_answered(r, Result<std::optional<std::string>>(std::move(error)));
    case EdgePhase::kRelaying:
      // Never a made-up result: the client gets STORE_UNAVAILABLE.
      return relay_answered(r, relay_store_failure_reply(/*maybe_sent=*/!r.round_unsent),
                            store_log_.admit("relay: " + error.message, now_ms), now_ms);
    default: {  // kBackground: logged, the claims released; the answer went out
      for (const Revalidation& rev : r.background) cache_.release_revalidation(claim_key(rev));
      return step_of(r.handle, EdgeAction::kDone,
                     store_log_.admit("revalidations not queued: " + error.message, now_ms));
    }
  }
}

EdgeStep EdgeService::finish(Request& r, Respond respond) {
  if (!advance(r, EdgeEvent::kRespond)) return misstep(r, EdgeEvent::kRespond);
  r.background = std::move(respond.background);
  HttpResponse& res = respond.response;
  EdgeStep s = step_of(r.handle, EdgeAction::kRespond);
  stamp_headers(r, res);
  if (r.source != nullptr && std::string_view(r.source) == kStaleIfError) {
    s.log = store_log_.admit("served from L1 (stale-if-error): " + r.store_error, r.now_ms);
  }
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
    if (answered == "STORE_UNAVAILABLE") s.log = store_log_.admit(std::move(s.log), r.now_ms);
  }
  s.response = std::move(res);
  s.background = !r.background.empty();
  return s;
}

void EdgeService::stamp_headers(const Request& r, HttpResponse& res) const {
  if (r.fail_fast) {
    res.headers.emplace_back("X-Quiver-Cache", "fail-fast");  // an L1 copy or a 503, no wait
  } else if (r.source != nullptr) {
    res.headers.emplace_back("X-Quiver-Cache", r.source);
  }
  if (r.source != nullptr && std::string_view(r.source) == kStaleIfError) {
    set_header(res.headers, "Cache-Control", "private, no-cache");
    res.headers.emplace_back("Age", std::to_string(r.stale_age_ms / 1000));
  }
  if (!r.id.empty()) res.headers.emplace_back("X-Request-Id", r.id);
}

EdgeStep EdgeService::background(uint32_t handle, int64_t now_ms) {
  Request* r = find(handle, now_ms);
  if (r == nullptr) return unknown_handle(handle);
  EdgeStep done = step_of(handle, EdgeAction::kDone);
  if (r->phase != EdgePhase::kResponded) return done;
  if (r->background.empty()) {
    advance(*r, EdgeEvent::kNothingLeft);
    return done;
  }
  if (r->layout == KeyLayout::kV2) {
    // The answer queued these only for entries whose lease its snapshot says is free
    // (render_manifests: a held lease reads `refresh: in_progress` and asks for nothing).
    return enqueue_v2(*r, EdgeEvent::kBackground, r->background, {}, now_ms);
  }
  Result<std::vector<RedisCommand>> commands =
      revalidate_enqueue_commands(*keys_, r->background, now_ms, settings_->enqueue);
  if (!commands.ok()) {
    advance(*r, EdgeEvent::kNothingLeft);
    for (const Revalidation& rev : r->background) cache_.release_revalidation(claim_key(rev));
    done.log = "revalidations not queued: " + commands.error().message;
    return done;
  }
  return send(*r, EdgeEvent::kBackground, std::move(*commands));
}

void EdgeService::end(uint32_t handle) {
  fail_fast_.ended(handle);
  requests_.erase(handle);
  cancels_.erase(handle);
}

// A client that went away: the request is forgotten; a relayed call it was waiting on gets its
// cancel mark, best effort, on a connection of its own (the request's holds the BLPOP).
EdgeStep EdgeService::abandon(uint32_t handle, int64_t now_ms) {
  Request* r = find(handle, now_ms);
  if (r == nullptr) return unknown_handle(handle);
  const bool waiting = r->phase == EdgePhase::kRelaying && !r->relay_rid.empty();
  // On v2 the mark is on the call's shard, where the agent running it looks.
  const bool v2 = r->relay_layout == KeyLayout::kV2;
  Result<RedisCommand> command =
      !waiting ? Result<RedisCommand>(Error(ErrorCode::kNotFound, "no relayed call outstanding"))
      : v2 ? relay_cancel_command_v2(*keys_v2_, r->relay_rid, r->relay_cid, r->relay_deadline_ms,
                                     now_ms)
           : relay_cancel_command(*keys_, r->relay_rid, r->relay_deadline_ms, now_ms);
  end(handle);
  if (!waiting) return step_of(handle, EdgeAction::kDone);
  if (!command.ok()) {
    return step_of(handle, EdgeAction::kDone,
                   "relay: cancel mark not sent: " + command.error().message);
  }
  if (fail_fast_.open(now_ms)) {
    return step_of(handle, EdgeAction::kDone,
                   "relay: cancel mark not sent: fail-fast (Redis timed out moments ago)");
  }
  const uint32_t cancel = new_handle();
  RoutedConversation& c =
      cancels_
          .emplace(cancel, RoutedConversation(settings_->resp,
                                              RedisCredentials{settings_->redis_username,
                                                               settings_->redis_password},
                                              cluster_.get()))
          .first->second;
  EdgeStep s = redis_step(cancel, v2 ? c.begin_spread({std::move(*command)}, ScriptForm::kText)
                                     : c.begin({std::move(*command)}, ScriptForm::kText));
  if (!c.in_round())
    return step_of(cancel, EdgeAction::kDone, "relay: cancel mark not sent: " + c.error().message);
  s.new_connection = true;
  return s;
}

EdgeStep EdgeService::cancel_part_turn(uint32_t handle, RoutedConversation& c, uint32_t part,
                                       PartTurn turn) {
  EdgeStep s;
  switch (turn) {
    case PartTurn::kRead:
      s = step_of(handle, EdgeAction::kRead);
      break;
    case PartTurn::kWrite:
      s = redis_step(handle, c.take_write());
      break;
    case PartTurn::kWait:
      s = step_of(handle, EdgeAction::kWait);
      break;
    case PartTurn::kRound:
      return cancel_turn(handle, c, c.round_turn());
  }
  s.redis_part = static_cast<int>(part);
  return s;
}

EdgeStep EdgeService::cancel_turn(uint32_t handle, RoutedConversation& c, RedisTurn turn) {
  switch (turn) {
    case RedisTurn::kRead:
      return step_of(handle, EdgeAction::kRead);
    case RedisTurn::kWrite:  // a cluster's redirect (no scripts in this round)
      return redis_step(handle, c.take_write());
    case RedisTurn::kFailed:
      return step_of(handle, EdgeAction::kDone,
                     "relay: cancel mark not sent: " + c.error().message);
    case RedisTurn::kDone:
      break;
  }
  std::vector<RespValue> replies = c.take_replies();
  if (replies.size() != 1 || !replies[0].is_ok()) {
    const Error e = replies.empty() ? Error(ErrorCode::kInvalidReply, "no reply")
                                    : redis_reply_error(replies[0], "SET call-cancel");
    return step_of(handle, EdgeAction::kDone, "relay: cancel mark not sent: " + e.message);
  }
  return step_of(handle, EdgeAction::kDone);
}

EdgeStep EdgeService::internal_error(uint32_t handle, std::string_view what) {
  EdgeStep s = step_of(handle, EdgeAction::kDone, "INTERNAL: " + std::string(what));
  Request* r = find(handle);
  const bool responded = r != nullptr && edge_responded(r->phase);
  if (r != nullptr) advance(*r, EdgeEvent::kInternalError);
  if (responded) return s;
  if (r != nullptr) r->background.clear();
  s.action = EdgeAction::kRespond;
  if (r != nullptr && r->mcp && r->mcp->streaming()) {
    // The stream's head (200) went out: the failure is the answer's one event.
    s.response.status = 200;
    s.response.body =
        mcp_sse_event(Json::object({{"jsonrpc", "2.0"},
                                    {"id", Json()},
                                    {"error", Json::object({{"code", kJsonRpcInternalError},
                                                            {"message", "internal error"}})}}));
    return s;
  }
  s.response = error_response(HttpErrorCode::kInternal, "internal error");
  return s;
}

}  // namespace quiver
