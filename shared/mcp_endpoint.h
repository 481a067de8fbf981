// The MCP endpoint (`/mcp` on the edge and on the agent), sans I/O: one HTTP request in, either a
// complete HTTP response or the upstream calls the host must relay, out. Both hosts drive the same
// `McpEndpoint`, so both answer the same request the same way (as `DiscoveryExchange` does for
// the REST discovery API, whose snapshot, classification and rendering rules it reuses).
//
// Steps, poll-style like shared/discovery_http.h:
//   start(request, caller, now)   → Respond | NeedSnapshot
//   NeedSnapshot  read the caller's DiscoverySnapshot for `query` exactly as discovery does
//                 (Redis: discovery_read_command → decode_discovery_reply; other stores:
//                 read_snapshot) → resume_snapshot(result, now)
//   NeedRelay     perform each RelayCall (agent: its live upstream session; edge: the Redis relay)
//                 and hand back one RelayReply per call, in order → resume_relay(replies, now)
//   Respond       send `response`; then queue `background` (the stale-while-revalidate requests of
//                 the read) without delaying it, as for discovery.
// A host that cannot relay (no relay wired yet, or none configured) answers every RelayCall with
// RelayReply::failed(RelayFailure::kUnavailable, ...): the client gets a JSON-RPC error saying so.
//
// Transport: MCP Streamable HTTP, one POST per message (or batch). Every answer to a request is a
// single JSON body (`application/json`), except where a host that must wait on a relay opens an
// event stream first (open_stream: the edge, for a client whose Accept names text/event-stream;
// every era lets the server answer a POST so): then the answer is that stream's events, one
// `event: message` per response. Stateless in every era, so any isolate or agent thread
// can answer any request. Change notifications (`list_changed` in the config, the agent only: a
// host sets it only where it honours it, and the capabilities it advertises say so) are the one
// long-lived answer:
//   - 2025-era listen stream: GET with `Accept: text/event-stream` answers 200 with an event
//     stream (no body yet) and `listen()` set; the host keeps the stream open and writes
//     mcp_list_changed_event(...) when the caller's merged lists change.
//   - 2026-07-28 `subscriptions/listen` (a single POST): answered 200 with an event stream whose
//     first event is `notifications/subscriptions/acknowledged` (the honoured filter: the three
//     list_changed kinds asked for; `resourceSubscriptions` is never honoured), `listen()` set;
//     every notification carries `_meta["io.modelcontextprotocol/subscriptionId"]` (the listen
//     request's id) and mcp_listen_end_event is the graceful end (the listen result).
// Without `list_changed`, GET is 405 with `Allow: POST` and `subscriptions/listen` is -32601;
// DELETE (session end) is always 405. Per era:
//   - 2025-03-26, 2025-06-18, 2025-11-25 (`initialize`): answered with the newest of those
//     versions that the client asked for or, if it asked for one we do not speak, our newest
//     legacy version (the spec's negotiation). No `Mcp-Session-Id` is issued (the spec lets a
//     server omit it), so nothing is kept between requests; a session id a client sends anyway is
//     ignored. Later requests may carry `MCP-Protocol-Version`; an unknown one is 400.
//     Batches (JSON arrays) are accepted under 2025-03-26 (the only era that has them): a batch is
//     answered with an array of the responses to its requests (202 if it holds none).
//   - 2026-07-28 (`server/discover`, no handshake; a request is of this era when its _meta names
//     a version or its MCP-Protocol-Version header says 2026-07-28): every request carries
//     `_meta["io.modelcontextprotocol/protocolVersion"]` and `.../clientCapabilities` (else
//     -32602 with HTTP 400; clientInfo is optional); the header and _meta must agree (-32020,
//     judged before the version); `Mcp-Method` (and `Mcp-Name` for methods naming a tool, prompt
//     or resource) must agree with the body, else -32020 (HeaderMismatch) with HTTP 400. An
//     unsupported version is -32022 with `data.supported` (the request's id echoed). Removed
//     methods (initialize, ping, logging/setLevel, resources/subscribe and unsubscribe) and
//     unknown ones are -32601 with HTTP 404; an unknown resource is -32602 (SEP-2164; the older
//     eras keep -32002). Results carry `resultType: "complete"`.
//   - `ping` → {}; notifications (`notifications/initialized`, `notifications/cancelled`, ...)
//     → 202 with no body; a client's response (to nothing we sent) → 202.
// Errors for malformed or hostile input are JSON-RPC errors (shared/jsonrpc.h): unparseable
// -32700, not JSON-RPC -32600, unknown method -32601, bad params (and a bad cursor) -32602.
// Bounded: the body (`max_body_bytes`, 413), a batch's length, a cursor's length, a page's items.
//
// Authentication is the host's, as for discovery: `authenticate_caller` → CallerAuth. An
// unauthenticated request gets 401 with `WWW-Authenticate: Bearer` (plus `resource_metadata` when
// configured, as the MCP authorization spec describes for protected resource metadata).
//
// Lists (`tools/list`, `resources/list`, `resources/templates/list`, `prompts/list`): the union of
// the caller's granted connections in the snapshot, with discovery's rules exactly (this module
// calls shared/discovery*.h, it does not re-classify): fresh and stale entries are served (stale
// queues its revalidation), pending / error / expired / authorization_required connections are
// missing from the list (and queued where discovery queues them) — never shown as an empty list.
// Disabled capabilities are hidden. A kind the upstream does not have (absent) or could not list
// contributes nothing. Order: connections by id, each connection's items in its listing order.
// Each result carries `ttlMs` (the least time left until a contributing entry turns stale; 0 if
// any is stale or none contributed) and `cacheScope: "private"`, plus `_meta["quiver/missing"]`:
// the granted connections that contributed nothing and why ({id, status}), so a client can tell
// "could not load" from "has none".
// Cursors are opaque (base64url of a small JSON object: method, the connection before, the
// connection and the offset within it); one issued for another method, or that does not decode,
// is -32602. A page holds at most `page_size` items; the snapshot is read from the cursor's
// connection onward, at most `max_connections_per_read` connections at a time.
//
// Calls (`tools/call`, `resources/read`, `prompts/get`, `completion/complete`): the exposed name is
// mapped back (below), the connection must be granted in the snapshot and the capability not
// disabled, else the MCP error (unknown tool: -32602; unknown resource: -32002) without any
// relay. Then a RelayCall with the upstream's ORIGINAL name / URI. The host (the agent, at call
// time) checks grant and preference again: the snapshot here is only the first gate.
//
// Search mode (`search_mode`): `tools/list` lists three tools of the endpoint's own instead of
// every tool: `quiver_search_tools` {query, limit?} (the caller's visible tools ranked by the
// configured ToolSearcher, shared/search_index.h), `quiver_describe_tool` {name} (one tool's full
// definition under its exposed name) and `quiver_call_tool` {name, arguments?} (becomes a
// RelayCall as tools/call would). Calling a listed tool directly by its exposed name still works.
//
// ---- The naming scheme (reversible, per connection; also in docs/design.md)
// ---------------------- Connection ids are [A-Za-z0-9._-]{1,128} (shared/principal.h); they never
// contain `/`.
//   tools, prompts:  exposed = escape(connection id) + "__" + upstream name, where escape writes
//                    every `_` of the id as `_-` (so the escaped id never holds "__" and never
//                    ends in `_`). The FIRST "__" of an exposed name is thus the separator:
//                    "github__create_issue" ↔ (github, create_issue);
//                    "my_-srv__get__x" ↔ (my_srv, get__x). Most ids (no `_`) read unchanged.
//   resources, resource templates:  exposed URI = "quiver://" + connection id + "/" + upstream
//                    URI verbatim: "quiver://fs/file:///tmp/a.txt" ↔ (fs, file:///tmp/a.txt);
//                    templates alike ("quiver://fs/file:///{path}"), so a URI a client expands
//                    from an exposed template maps back to one the upstream's template matches.
// Only `name` / `uri` / `uriTemplate` change; titles, descriptions, schemas, `_meta` are kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/freshness.h"
#include "shared/json.h"
#include "shared/jsonrpc.h"
#include "shared/listing.h"
#include "shared/status.h"

namespace quiver {

// ---- naming
// --------------------------------------------------------------------------------------

// A capability of one upstream, as the endpoint names it.
struct UpstreamName {
  std::string connection_id;
  std::string name;  // the upstream's own tool or prompt name, or resource URI (template)

  bool operator==(const UpstreamName& o) const {
    return connection_id == o.connection_id && name == o.name;
  }
};

inline constexpr char kMcpNameSeparator[] = "__";
inline constexpr char kMcpResourceScheme[] = "quiver://";

// Tool and prompt names. `encode_mcp_name` expects a valid connection id (anything else gives a
// name that decodes to nullopt); `decode_mcp_name` returns nullopt for a name this scheme never
// produces (no separator, an empty or invalid id, an empty upstream name, a `_` in the escaped id
// not followed by `-`).
std::string encode_mcp_name(std::string_view connection_id, std::string_view upstream_name);
std::optional<UpstreamName> decode_mcp_name(std::string_view exposed);

// Resource URIs and URI templates.
std::string encode_mcp_uri(std::string_view connection_id, std::string_view upstream_uri);
std::optional<UpstreamName> decode_mcp_uri(std::string_view exposed);

// ---- configuration ----------------------------------------------------------------------------

// The JSON-RPC codes of the endpoint's own failures (implementation-defined server errors, below
// the -32020..-32099 range MCP 2026-07-28 reserves; -32001 is the SDKs' request timeout).
inline constexpr int64_t kMcpErrorTimeout = -32001;
inline constexpr int64_t kMcpErrorResourceNotFound = -32002;  // MCP's own code
inline constexpr int64_t kMcpErrorCallsUnavailable = -32010;
inline constexpr int64_t kMcpErrorAgentUnreachable = -32011;
inline constexpr int64_t kMcpErrorUpstreamUnavailable = -32012;
inline constexpr int64_t kMcpErrorResultTooLarge = -32013;
inline constexpr int64_t kMcpErrorStoreUnavailable = -32014;

struct McpEndpointConfig {
  FreshnessPolicy freshness;
  RenderOptions render;  // max_manifest_bytes, render cache; the view is the endpoint's own
  std::string server_name = "quiver";
  std::string server_version;  // "" = kQuiverVersion
  std::string instructions;    // "" = none
  bool search_mode = false;
  ToolSearcher* searcher = nullptr;  // not owned; nullptr: an IndexedToolSearcher without cache
  std::size_t page_size = 100;       // items per list page
  std::size_t max_connections_per_read = 200;  // ≤ kMaxSnapshotLimit
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_batch = 32;
  std::size_t max_cursor_bytes = 512;
  int64_t relay_timeout_ms = 60'000;  // a RelayCall's deadline = now + this
  // Absolute URL of the protected resource metadata (RFC 9728), named in the 401's
  // WWW-Authenticate when set.
  std::string resource_metadata_url;
  // The host sends notifications/{tools,resources,prompts}/list_changed on a listen stream (GET,
  // or subscriptions/listen): `listChanged: true` in the capabilities. Off: advertised false,
  // and no stream is opened (the edge).
  bool list_changed = false;
};

// ---- change notifications
// ------------------------------------------------------------------------

// A listen stream the host must keep open after a Respond (McpEndpoint::listen()).
struct McpListen {
  Principal member = Principal::shared();
  bool modern = false;     // subscriptions/listen (2026-07-28); else the 2025-era GET stream
  Json subscription_id;    // modern: the listen request's JSON-RPC id
  bool tools = false;      // the kinds honoured (legacy: all three)
  bool resources = false;  // resources and resource templates
  bool prompts = false;
};

// The kinds a list_changed notification names: tools, resources (resource templates included),
// prompts.
enum class McpChangeKind { kTools = 0, kResources, kPrompts };
inline constexpr int kMcpChangeKindCount = 3;

// One server-sent event carrying `message` (`event: message`, the JSON on one `data:` line).
std::string mcp_sse_event(const Json& message);
// The same for a message already serialized (compact: serialize_json's text holds no newline).
std::string mcp_sse_event_text(std::string_view json_text);
// notifications/<kind>/list_changed for `listen` ("" when `listen` did not ask for `kind`).
std::string mcp_list_changed_event(const McpListen& listen, McpChangeKind kind);
// The graceful end of the stream: modern, the listen request's (empty) result; legacy, "".
std::string mcp_listen_end_event(const McpListen& listen);
// An SSE comment that keeps an idle stream (and the proxies on its way) open.
inline constexpr char kMcpSseKeepalive[] = ": keepalive\n\n";

// ---- DNS rebinding protection
// ---------------------------------------------------------------------

// MCP Streamable HTTP, "Security Warning": a server MUST validate the `Origin` header, and answer
// 403 Forbidden to one present and invalid. A request without `Origin` (every client but a
// browser page) passes. One with it passes when the origin is a loopback one (http or https to
// `localhost`, a dotted-quad 127.0.0.0/8 or `[::1]`, any port: a page that rebound its own name
// to this server sends its own origin, never a loopback one) or one of `allowed` (origins as
// mcp_origin_key gives them). Otherwise, and for more than one `Origin` header, the 403 FORBIDDEN
// to answer. The edge asks it before anything else of a /mcp request (the agent refuses foreign
// `Host` names instead, for every endpoint: 421).
std::optional<HttpResponse> mcp_origin_refusal(const HttpHeaders& headers,
                                               const std::vector<std::string>& allowed);
// An origin (`scheme://host[:port]`, http or https, nothing after the authority) in the form
// `allowed` holds (lower case), or nullopt when `origin` is not one.
std::optional<std::string> mcp_origin_key(std::string_view origin);
// A comma-separated list of origins (QUIVER_MCP_ALLOWED_ORIGINS at both hosts; blanks around an
// item and empty items are ignored) as mcp_origin_key gives them, or the reason the first item
// that is not an origin is refused (without the setting's name, which the caller adds).
Result<std::vector<std::string>> parse_mcp_allowed_origins(std::string_view list);

// ---- relaying
// ------------------------------------------------------------------------------------

// One call for the host to perform on an upstream, for the caller.
struct RelayCall {
  std::string connection_id;
  Principal member;          // the caller (member/<id>)
  Principal principal;       // applicable_principal(record, member): whose credential applies
  std::string method;        // "tools/call", "resources/read", "prompts/get", "completion/complete"
  Json params;               // as the client sent them, with the upstream's original name / URI
  std::string exposed_name;  // the name or URI the client used (for errors and logs)
  Json request_id;           // the client's JSON-RPC id
  int64_t deadline_ms = 0;   // absolute; past it the host answers kTimeout
  std::string protocol_version;  // the era the client spoke ("2025-06-18", "2026-07-28", ...)
};

enum class RelayFailure {
  kUnavailable = 0,      // this host cannot relay calls (kMcpErrorCallsUnavailable)
  kAgentUnreachable,     // no agent took the call (kMcpErrorAgentUnreachable)
  kUpstreamUnavailable,  // the upstream could not be reached or failed
                         // (kMcpErrorUpstreamUnavailable)
  kTimeout,              // the deadline passed (kMcpErrorTimeout)
  kTooLarge,             // the result is over the bound (kMcpErrorResultTooLarge)
  kRefused,              // the agent's own grant / preference check refused it (unknown tool etc.)
  kStoreUnavailable,     // the edge's relay store (Redis) could not be reached or answered
                         // wrongly (kMcpErrorStoreUnavailable)
};
int64_t relay_failure_code(RelayFailure failure);
// The message of RelayFailure::kUnavailable where a host has no relay wired.
inline constexpr char kMcpCallsUnavailableMessage[] =
    "calls are not available at this endpoint: tools/call, resources/read, prompts/get and "
    "completion/complete cannot be relayed to the upstream from here";

// What became of one RelayCall.
struct RelayReply {
  enum class Kind { kResult = 0, kUpstreamError, kFailed };
  Kind kind = Kind::kFailed;
  Json result;         // kResult: the upstream's JSON-RPC result, verbatim
  JsonRpcError error;  // kUpstreamError: the upstream's error, verbatim; kFailed: ours
  RelayFailure failure = RelayFailure::kUnavailable;  // kFailed

  static RelayReply ok(Json result);
  static RelayReply upstream_error(JsonRpcError error);
  static RelayReply failed(RelayFailure failure, std::string message);
};

struct NeedRelay {
  std::vector<RelayCall> calls;
};

using McpStep = std::variant<Respond, NeedSnapshot, NeedRelay>;

// ---- the endpoint -------------------------------------------------------------------------------

class McpEndpoint {
 public:
  // `config` must outlive the endpoint. One McpEndpoint per request.
  explicit McpEndpoint(const McpEndpointConfig& config) : config_(config) {}

  McpStep start(const HttpRequest& request, const CallerAuth& caller, int64_t now_ms);
  // After NeedSnapshot. A store error answers each request needing it with
  // kMcpErrorStoreUnavailable (a list that failed never poses as an empty list).
  McpStep resume_snapshot(Result<DiscoverySnapshot> snapshot, int64_t now_ms);
  // After NeedRelay: one reply per call, in order (a missing one counts as kUnavailable).
  McpStep resume_relay(std::vector<RelayReply> replies, int64_t now_ms);
  // Set once a Respond opened a listen stream (config.list_changed only): the host keeps the
  // connection and writes the change notifications of `listen()->member` to it.
  const std::optional<McpListen>& listen() const { return listen_; }
  // After start: the POST held one request (not a batch) of a list method (tools/list,
  // resources/list, resources/templates/list, prompts/list), whatever became of it. The edge
  // keeps the 200 answers of such a POST read from a snapshot (EdgeService's answers cache)
  // without parsing the body again to learn its method.
  bool one_list_request() const;
  // After start: the POST's Accept names text/event-stream (and it is no listen), so its answer
  // may be an event stream. Streamable HTTP lets the server choose per request in every era we
  // speak (2025-03-26 to 2026-07-28); a client that accepts it MUST handle it.
  bool may_stream() const { return accepts_event_stream_ && !listen_; }
  // The head of that stream, for a host about to wait (a relay) that sends it at once: 200,
  // `text/event-stream`, `Cache-Control: no-store`, `X-Accel-Buffering: no` (2026-07-28 asks it
  // of a server opening an SSE stream: buffering proxies pass events on). From then on the
  // Respond's body is the answer's events: one `event: message` per response (a batch's too, as
  // the 2025-03-26 transport allows), status 200; a JSON-RPC error is such an event too. Only
  // when may_stream() (else the head of the JSON answer to come is not known: nullopt).
  std::optional<HttpResponse> open_stream();
  bool streaming() const { return streaming_; }

  struct Pending;  // mcp_endpoint.cpp: one request of the POST (a batch holds several)

 private:
  void classify(Pending& p, int64_t now_ms);
  McpStep advance(int64_t now_ms);
  McpStep finish(int64_t now_ms);
  void serve_list(Pending& p, const DiscoverySnapshot& snapshot, const VisibleConnections& visible);
  void serve_search(Pending& p, const DiscoverySnapshot& snapshot, int64_t now_ms);
  void prepare_call(Pending& p, const DiscoverySnapshot& snapshot,
                    const VisibleConnections& visible, int64_t now_ms);

  const McpEndpointConfig& config_;
  bool started_ = false;
  std::optional<Principal> member_;
  bool batch_ = false;
  std::string protocol_version_;  // the MCP-Protocol-Version header, "" without one
  // The requests of the POST in order (notifications and responses are not kept); handled one
  // at a time: `current_` is the one a NeedSnapshot or NeedRelay was asked for.
  std::vector<std::shared_ptr<Pending>> pending_;
  std::size_t current_ = 0;
  std::optional<RelayCall> relay_;
  std::vector<Revalidation> background_;
  DiscoveryStats stats_;
  std::optional<Error> log_;
  std::optional<McpListen> listen_;
  bool accepts_event_stream_ = false;  // a POST whose Accept names text/event-stream
  bool streaming_ = false;             // open_stream() was called: the answer is events
};

// True for the path the hosts route to the endpoint ("/mcp").
bool is_mcp_path(std::string_view path);

// The caller's granted connections as the endpoint lists them: visible_connections with, per
// servable connection, its lists exposed under the connection's names in `fragment->lists`
// (indexed by ListKind; see RenderedFragment). They are kept in `config.render.cache` (view
// "mcp-items", keyed like REST's fragments by connection, principal, content id, disabled set),
// so a list read with a warm cache parses no manifest: it splices the kept items' text.
VisibleConnections mcp_visible_lists(const DiscoverySnapshot& snapshot,
                                     const McpEndpointConfig& config, int64_t now_ms);

}  // namespace quiver
