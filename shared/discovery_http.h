// The discovery API's HTTP handling, sans I/O: the one routing core that the edge (wasm, Redis
// over sockets) and the agent's embedded default (native, SQLite or Redis) both drive, so both
// give the same answers to the same request.
//
// A `DiscoveryExchange` handles one request, poll-style like the MCP session: `start` returns a
// step, and every step but `Respond` asks the host for a store operation whose outcome the host
// hands back through the matching `resume_*`:
//   NeedSnapshot  read a DiscoverySnapshot (Redis: discovery_read_command → decode_discovery_reply;
//                 other stores: read_snapshot) → resume_snapshot(result)
//   NeedEnqueue   queue these revalidations and report each outcome (Redis:
//                 revalidate_enqueue_pipeline → parse_enqueue_replies) → resume_enqueue(results)
//   Respond       send `response`; then queue `background` without delaying the response
//                 (workerd: ctx.waitUntil) — the stale-while-revalidate requests of the read.
//
// Endpoints (schema/openapi.yaml):
//   GET  /v1/manifests?view=&after=&limit=          every granted connection (paged)
//   GET  /v1/mcp-connections/{id}/manifest?view=    one; 404 when not granted or absent
//   GET  /v1/search?q=&limit=                       tools ranked by a ToolSearcher
//   POST /v1/mcp-connections/{id}/refresh-tools     202 {"status":"queued"|"in_progress"}
// HEAD is answered like GET without a body. Errors are JSON {"error": {"code", "message"}} with
// a stable code (`HttpErrorCode`).
//
// Authentication is not done by the exchange. The host verifies the bearer token with
// shared/caller_token.h (`authenticate_caller` does exactly that) and passes the outcome in as a
// `CallerAuth`: a member id, or why not (→ 401). The principal comes
// from that member alone — never from a query parameter (`principal=` is refused outright).
// Inputs are bounded (`HttpLimits`): a long path or query is 414, a large body 413, unknown or
// repeated query parameters 400.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/freshness.h"
#include "shared/search_index.h"
#include "shared/status.h"

namespace quiver {

// ---- plain HTTP values -------------------------------------------------------------------------

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The first value of header `name` (case-insensitive), if any.
std::optional<std::string_view> find_header(const HttpHeaders& headers, std::string_view name);

// Percent-decoding; `plus_is_space` for query components (application/x-www-form-urlencoded).
// nullopt on a malformed escape. Also the OAuth callback's query (shared/oauth.h).
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // "/v1/manifests", without the query
  std::string query;   // "q=weather&limit=5", without the '?'
  HttpHeaders headers;
  std::string body;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;
  std::string body;
};

// ---- errors ------------------------------------------------------------------------------------

enum class HttpErrorCode {
  kUnauthenticated = 0,  // 401: missing or bad bearer token
  kNotFound,             // 404: no such route, or a connection not granted / absent
  kMethodNotAllowed,     // 405 (with Allow)
  kBadRequest,           // 400: malformed or unknown query parameter
  kPayloadTooLarge,      // 413: body over the limit
  kUriTooLong,           // 414: path or query over the limit
  kStoreUnavailable,     // 503: Redis / SQLite unreachable or answering nonsense
  kUpstreamUnavailable,  // 503: an upstream failed twice (ADR-004 self-heal); hosts' endpoints
  kInternal,             // 500: a bug or a broken configuration; details only in the log
  kForbidden,            // 403: authenticated and granted, but not allowed this (hosts' endpoints)
};
inline constexpr int kHttpErrorCodeCount = 10;

const char* http_error_name(HttpErrorCode code);  // "UNAUTHENTICATED", "NOT_FOUND", ...
int http_error_status(HttpErrorCode code);        // 401, 404, ...

// {"error": {"code", "message"}}, Content-Type application/json, Cache-Control no-store; 401
// carries WWW-Authenticate: Bearer. For hosts' own endpoints too, so every error looks the same.
HttpResponse error_response(HttpErrorCode code, std::string_view message);

// The 503 STORE_UNAVAILABLE message for a store error, the same on every host: a namespace the
// store lost or an agent is restoring (ErrorCode::kStoreNotReady) says so, a key layout this build
// does not read (shared/layout.h) says so, anything else is "the cache store is unavailable".
// Details (hosts, why, the record's value) stay in the log.
const char* store_unavailable_message(const Error& error);

// ---- inputs ------------------------------------------------------------------------------------

// The caller as the host authenticated it.
struct CallerAuth {
  std::optional<std::string> member_id;  // set: authenticated as this member
  std::string failure;                   // otherwise, why not (shown in the 401 body)
  // The token carries `"role": "operator"` (shared/caller_token.h). Only the agent's admin API
  // reads it; discovery answers an operator exactly as any member.
  bool operator_claim = false;

  static CallerAuth member(std::string id, bool operator_claim = false) {
    return CallerAuth{std::move(id), "", operator_claim};
  }
  static CallerAuth unauthenticated(std::string why) {
    return CallerAuth{std::nullopt, std::move(why), false};
  }
};

// The hosts' one way to authenticate a request (both call it, so both answer alike): exactly one
// `Authorization: Bearer` header in `headers` (none, or more than one, is refused: two headers
// are ambiguous, and a proxy may forward either), parsed and verified by shared/caller_token.h
// (parse_bearer, verify_caller_token). Any failure is an unauthenticated CallerAuth carrying that
// module's message. Without a keyring (`keyring` null) every token is refused with
// `no_keyring_reason`, after the same header checks. With `tokens`, verification goes through
// that cache (the same answers, fewer HMACs).
CallerAuth authenticate_caller(const HttpHeaders& headers, const Keyring* keyring, int64_t now_ms,
                               const VerifyOptions& options = {},
                               std::string_view no_keyring_reason = "no caller token keys",
                               VerifiedTokenCache* tokens = nullptr);
inline CallerAuth authenticate_caller(const HttpHeaders& headers, const Keyring& keyring,
                                      int64_t now_ms, const VerifyOptions& options = {}) {
  return authenticate_caller(headers, &keyring, now_ms, options);
}

struct HttpLimits {
  std::size_t max_path_bytes = 1024;
  std::size_t max_query_bytes = 2048;
  std::size_t max_body_bytes = 16 * 1024;  // nothing here reads a body: generous for proxies
  std::size_t max_search_query_bytes = 256;
  std::size_t default_search_limit = 10;
  std::size_t max_search_limit = 50;
  std::size_t default_page_size = 100;  // connections per /v1/manifests page
  std::size_t max_page_size = 200;
  // Connections searched at most (each may carry a 256 KiB manifest: this bounds the read).
  std::size_t search_max_connections = 200;
};

// The search index's side of /v1/search. Hits are shared/search_index.h's `SearchHit`s, whose
// `entry` indexes `corpus.tools`. `corpus.version` changes whenever the candidates can, so an
// index built for one version may be cached under it.
class ToolSearcher {
 public:
  virtual ~ToolSearcher() = default;
  // At most `limit` hits, best first. kInvalidArgument / kTooLarge for a query that cannot be
  // searched (no word in it, too long): the caller answers 400 with the message.
  virtual Result<std::vector<SearchHit>> search(const SearchCorpus& corpus, std::string_view query,
                                                std::size_t limit) = 0;
};

// The index entries of a corpus, in corpus order: each tool's name, title (or annotations.title)
// and description, and its connection id.
std::vector<SearchEntry> search_entries(const SearchCorpus& corpus);

// The FTS5/bm25 index of shared/search_index.h over the corpus, kept in `cache` under
// search_cache_key(caller, {corpus.version}) so that a caller's index is built once per version
// of what it can see. Without a cache the index is built for every search. Not synchronized (nor
// is the cache): a multi-threaded host gives each thread its own, or guards it.
class IndexedToolSearcher : public ToolSearcher {
 public:
  explicit IndexedToolSearcher(SearchIndexCache* cache = nullptr, SearchWeights weights = {})
      : cache_(cache), weights_(weights) {}
  Result<std::vector<SearchHit>> search(const SearchCorpus& corpus, std::string_view query,
                                        std::size_t limit) override;

 private:
  SearchIndexCache* cache_;
  SearchWeights weights_;
};

struct DiscoveryConfig {
  FreshnessPolicy freshness;
  RenderOptions render;  // `view` is taken from each request
  HttpLimits limits;
  ToolSearcher* searcher = nullptr;  // not owned; nullptr: an IndexedToolSearcher without cache
};

// ---- routing and queries of the shared endpoints ------------------------------------------------

// The endpoints both hosts serve, routed here for both: by the raw path as it arrived (before any
// percent-decoding, so `%2F` in an id never makes a new segment), exact segments (no empty ones:
// `//v1/manifests` and `/v1/manifests/` are no route).
enum class SharedRoute {
  kNone = 0,
  kManifests,           // GET /v1/manifests
  kSearch,              // GET /v1/search
  kConnectionManifest,  // GET /v1/mcp-connections/{id}/manifest
  kRefresh,             // POST /v1/mcp-connections/{id}/refresh-tools
  kWebhook,             // POST /v1/webhooks/refresh (signed; shared/webhook_exchange.h)
};
struct SharedRouteMatch {
  SharedRoute route = SharedRoute::kNone;
  std::string_view raw_id;  // the {id} segment, still percent-encoded
};
SharedRouteMatch match_shared_route(std::string_view raw_path);
// The methods a route takes, as an Allow header says them ("GET, HEAD" or "POST").
const char* shared_route_allow(SharedRoute route);
bool shared_route_allows(SharedRoute route, std::string_view method);

// True for the paths the discovery exchange answers (the shared routes but the webhook).
bool is_discovery_path(std::string_view path);

// Query parameters as both hosts check them: `name=value` pairs split on '&' (empty pairs
// skipped), percent- and '+'-decoded, each name in `allowed` and at most once. `principal` and
// `member` are refused by name (the caller comes from the token). On the first problem `error`
// says it (→ 400 BAD_REQUEST) and `params` is incomplete.
struct QueryParams {
  std::vector<std::pair<std::string, std::string>> params;
  std::optional<std::string> error;
  const std::string* find(std::string_view name) const;
};
QueryParams parse_query_params(std::string_view query, std::initializer_list<const char*> allowed);
// The same, but names not in `known` are skipped instead of refused (a redirect from an
// authorization server may carry parameters of its own: shared/oauth_callback.h).
QueryParams parse_known_query_params(std::string_view query,
                                     std::initializer_list<const char*> known);

// A count parameter (`limit`): decimal digits only, at most 6 of them, within [min, max].
std::optional<std::size_t> parse_count_param(std::string_view text, std::size_t min,
                                             std::size_t max);

// ---- steps -------------------------------------------------------------------------------------

struct Respond {
  HttpResponse response;
  std::vector<Revalidation> background;  // queue after responding
  std::optional<Error> log;              // the detail behind a 5xx, for the host's log
  DiscoveryStats stats;                  // what the read served (metrics)
};

struct NeedSnapshot {
  Principal member;
  SnapshotQuery query;
};

struct NeedEnqueue {
  std::vector<Revalidation> revalidations;
  // Per revalidation, whether the snapshot read says its refresh lease is held. On key layout v2
  // the edge cannot ask the gate script to check the lease (its Redis user may only read leases:
  // docs/design.md "The scripts that may not declare a key today"), so it queues nothing for one
  // held and reports it in progress. v1's script checks the lease itself and ignores this.
  std::vector<bool> lease_held;
};

using DiscoveryStep = std::variant<Respond, NeedSnapshot, NeedEnqueue>;

class DiscoveryExchange {
 public:
  // `config` must outlive the exchange.
  explicit DiscoveryExchange(const DiscoveryConfig& config) : config_(config) {}

  DiscoveryStep start(const HttpRequest& request, const CallerAuth& caller, int64_t now_ms);
  // After NeedSnapshot. An error (store down, bad reply) becomes 503 STORE_UNAVAILABLE.
  DiscoveryStep resume_snapshot(Result<DiscoverySnapshot> snapshot, int64_t now_ms);
  // After NeedEnqueue: one result per requested revalidation, in order.
  DiscoveryStep resume_enqueue(const std::vector<Result<RevalidationResult>>& results,
                               int64_t now_ms);

  // Splicing (shared/discovery_render.h splice_rendered). Before resume_snapshot: have the
  // manifests answers (GET /v1/manifests, one connection's manifest) record their clock holes;
  // after it, the rendered answer so recorded (body, ETag, holes; taken once), or nullopt.
  void record_clock(bool on) { record_clock_ = on; }
  std::optional<RenderedDiscovery> take_rendered() { return std::exchange(rendered_, {}); }
  // Instead of resume_snapshot, with the snapshot the caller knows `rendered` was rendered from
  // (unchanged since): the answer to this request spliced from it at `now_ms` (HEAD and
  // If-None-Match as resume_snapshot answers them). nullopt, and nothing changes, when it cannot
  // be (another route, outside its window): the caller renders with resume_snapshot.
  std::optional<DiscoveryStep> resume_spliced(const RenderedDiscovery& rendered, int64_t now_ms);

 private:
  enum class Route { kNone = 0, kManifests, kConnectionManifest, kSearch, kRefresh };
  enum class Stage { kStart = 0, kSnapshot, kEnqueue, kDone };

  DiscoveryStep out_of_turn(const char* what);
  DiscoveryStep respond(HttpResponse response);
  DiscoveryStep fail(HttpErrorCode code, std::string message, std::optional<Error> log = {});
  DiscoveryStep answer_read(RenderedDiscovery rendered);

  const DiscoveryConfig& config_;
  Stage stage_ = Stage::kStart;
  Route route_ = Route::kNone;
  bool head_ = false;
  std::string if_none_match_;
  std::string connection_id_;
  std::optional<Principal> member_;
  DiscoveryView view_ = DiscoveryView::kManifest;
  std::string search_query_;
  std::size_t search_limit_ = 0;
  bool record_clock_ = false;
  std::optional<RenderedDiscovery> rendered_;  // record_clock_: the answer as rendered
};

}  // namespace quiver
