// The MCP client session: a sans-I/O state machine that connects to one upstream MCP server,
// learns what it is, and lists everything it offers (every page of tools, resources, resource
// templates and prompts) into a `Listing`.
//
// It never does I/O, reads a clock or draws randomness. The host (the native agent's stdio and
// Streamable HTTP transports, possibly the edge) carries out what it asks for, quinn-proto style:
//   start(now)                  queues the first request
//   poll_transmit()             one message text to send (an NDJSON line, an HTTP POST body)
//   handle_text(text, now)      each message from the server (handle_message: already parsed)
//   next_deadline()             when to call handle_timeout(now) if nothing arrives first
//   on_request_failed(id, ...)  one request got no JSON-RPC answer (HTTP 404/405/5xx, empty 400)
//   on_transport_error(e, now)  the pipe broke, the child exited: the session closes
//   poll_event()                ListingReady, ListChanged, Failed, Closed
//   relist(kinds, now)          list again on the same session (after ListChanged), no handshake
// Call poll_transmit() and poll_event() until empty after every input.
//
// Two protocol eras (https://modelcontextprotocol.io/specification/2026-07-28/basic/versioning):
// - legacy (2024-11-05 .. 2025-11-25): `initialize` → result → `notifications/initialized`, then
//   the lists. The server's protocolVersion must be one we speak, else the session fails with
//   kProtocol naming both versions.
// - modern (2026-07-28, stateless): no handshake. We send `server/discover` (servers MUST
//   implement it: .../2026-07-28/server/discover), pick the newest version in both its
//   `supportedVersions` and ours, and every request after that carries `_meta` with
//   `io.modelcontextprotocol/protocolVersion`, `.../clientInfo` and `.../clientCapabilities` ({}).
//   Capabilities, serverInfo (`_meta["io.modelcontextprotocol/serverInfo"]`) and instructions
//   come from the DiscoverResult. A result whose `resultType` is not "complete" (absent counts as
//   complete) is an invalid reply: a discovery client has no input to give. An
//   UnsupportedProtocolVersionError (-32022) on discover: the spec has the client retry with a
//   mutually supported version from `data.supported`; we speak one modern revision, so with
//   EraPolicy::kProbe a legacy version in that list means `initialize`, else kProtocol naming
//   both sides' versions.
// - EraPolicy::kProbe (default), per .../2026-07-28/basic/transports/stdio#backward-compatibility:
//   probe with `server/discover` first; a DiscoverResult or a recognized modern error (-32020,
//   -32021, -32022) means a modern server; any other error, no answer within
//   `discover_timeout_ms` (by default the request deadline), or on_request_failed() for the probe
//   (HTTP: a 4xx without a modern JSON-RPC body,
//   .../transports/streamable-http#backward-compatibility) means legacy: fall back to
//   `initialize`. A slow-starting modern server is not mistaken for legacy: a DiscoverResult to
//   the given-up probe that arrives while `initialize` runs is accepted (the initialize is
//   abandoned), and -32022 (UnsupportedProtocolVersion) in answer to `initialize` means "modern":
//   `server/discover` is sent once more, with the request deadline, and no further fallback. The
//   era is a property of the server: `era()` reports it so the host can cache it and pass
//   EraPolicy::kLegacy / kModern to the next session for that server. With kModern, server/discover
//   is the handshake and has `handshake_timeout_ms`. `sent_initialize()` tells the host that a
//   modern session also received `initialize` (a mixed session).
// Not implemented from 2026-07-28: MRTR input (we never supply input). `subscriptions/listen`
// is: see "Listening" below.
//
// Listing rules. A kind is listed only if the server advertises it (tools ← capabilities.tools;
// resources and resource templates ← capabilities.resources; prompts ← capabilities.prompts), as
// MCP clients generally do; a kind not advertised is kAbsent without a request (set
// `probe_unadvertised` to ask anyway). The advertised kinds are listed concurrently, each
// following every `nextCursor` (absent, null or "" ends the list, as in the official TypeScript
// client; a cursor seen before in the same run is a loop → kInvalidReply, which catches every
// cycle; a cursor over `max_cursor_bytes` → kInvalidReply; past `max_pages_per_list` pages →
// kTooLarge). -32601 on the first page of resources, templates or prompts = kAbsent; on an
// advertised tools/list it is kFailed/kMethodNotFound. Other JSON-RPC errors: kUpstreamError
// (code and clipped message). A malformed result: kInvalidReply. A request past
// `request_timeout_ms`, or any list still running at the whole-listing deadline: kTimeout, with
// the pages that did arrive kept. Cache hints (`ttlMs`, `cacheScope`) combine over pages: the
// shortest ttl wins, one private page makes the list private; a page without a hint does not
// constrain the others.
//
// Byte budget. A hostile server can send many large pages (1,000 pages of 10 items with 100 KB
// descriptions is 1 GB) long before the manifest's 256 KiB bound applies. The bytes of every page
// received in one listing (start() or relist(), all kinds together, restarts included) count
// against `max_listing_bytes`; the page that goes over it fails its list with kTooLarge, and so
// does every later page of that listing. What the session holds is thus bounded by the budget plus
// one message.
//
// list_changed during a listing: the affected kind (resources/list_changed: resources and
// templates) is listed again from the first page, so the ListingReady does not carry a list
// older than a change notice that arrived while it ran. At most `max_restarts_per_list` times per
// listing; past that, and whenever no listing of that kind is running, the notice becomes a
// ListChanged event: whatever the host holds for that kind may be stale, relist() it. Notices
// before the handshake completes are dropped: the listing that follows sees the change.
//
// Listening (2026-07-28). A modern server has no GET stream and sends no notification outside a
// request: list changes reach a client on a long-lived `subscriptions/listen` request, whose
// stream (an SSE response over HTTP, the process's stdout over stdio) carries
// `notifications/subscriptions/acknowledged`, then `notifications/*/list_changed` for as long as
// the server keeps it open; the request's response ends the subscription. `listen(now)` opens one
// asking for every list_changed the server advertised (`capabilities.<kind>.listChanged`); the
// notices then become ListChanged events exactly like a legacy server's notifications, and
// restart a running list the same way. The request has no deadline and does not hold up a
// listing. When it ends (a result, an error, on_request_failed), ListenEnded says how, and the
// host may listen() again after a pause of its choosing.
//
// Calls (the relay, issue 13). Once the handshake is done (ready or listing), `call(method,
// params, timeout_ms, now)` sends one request of the host's choosing (`tools/call`,
// `resources/read`, `prompts/get`, `completion/complete`) on the session, with the 2026-07-28
// `_meta` like every request of a modern session, and answers its id. Exactly one CallDone
// follows for it: the upstream's result, its JSON-RPC error (as sent, the message clipped), or a
// failure (kTimeout past `timeout_ms`; kTransport and the like from on_request_failed or a
// session that ended). A call that times out, or that the host gives up on with
// `cancel_call(id, reason)` (its client went away), is abandoned with `notifications/cancelled`
// to the upstream; a cancelled call reports nothing more. Calls never change the session's state
// and run beside a listing.
//
// Server → client: `ping` is answered with {}, any other request with -32601, notifications other
// than list_changed are ignored. Responses with unknown ids are ignored and counted; an error with
// a null id is attributed to the only request in flight, if there is exactly one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/jsonrpc.h"
#include "shared/listing.h"
#include "shared/status.h"
#include "shared/version.h"

namespace quiver {

// Error codes the 2026-07-28 revision reserves (-32020 .. -32099): "recognized modern errors".
inline constexpr int64_t kMcpHeaderMismatch = -32020;
inline constexpr int64_t kMcpMissingRequiredClientCapability = -32021;
inline constexpr int64_t kMcpUnsupportedProtocolVersion = -32022;

// Every protocol revision this session implements, oldest first.
inline constexpr const char* kMcpKnownVersions[] = {"2024-11-05", "2025-03-26", "2025-06-18",
                                                    "2025-11-25", "2026-07-28"};

enum class ProtocolEra { kLegacy = 0, kModern };
const char* protocol_era_name(ProtocolEra era);  // "legacy", "modern"

bool is_known_protocol_version(std::string_view version);
// Modern = version, identity and capabilities per request (2026-07-28 and later).
bool is_modern_protocol_version(std::string_view version);

enum class EraPolicy {
  kProbe = 0,  // server/discover first, fall back to initialize for a legacy server
  kLegacy,     // initialize only (the host knows, or cached, that the server is legacy)
  kModern,     // server/discover only; a legacy server is a kProtocol failure
};

struct McpSessionConfig {
  std::string client_name = "quiver";
  std::string client_version = kQuiverVersion;
  // The versions we speak; the newest of each era is preferred, order does not matter.
  std::vector<std::string> protocol_versions = {"2026-07-28", "2025-11-25", "2025-06-18",
                                                "2025-03-26", "2024-11-05"};
  EraPolicy era = EraPolicy::kProbe;
  int64_t request_timeout_ms = 3000;  // each request (initialize, each page)
  // `initialize` alone (0: request_timeout_ms): a host with a start-up budget gives a server that
  // is still starting (a stdio child, a cold remote) that long to answer its first request.
  int64_t handshake_timeout_ms = 0;
  // The era probe: silence past this means legacy (0: request_timeout_ms, the default). A
  // DiscoverResult arriving later, while the initialize that replaced the probe runs, is still
  // accepted: the server is modern (a slow start, not a legacy server).
  int64_t discover_timeout_ms = 0;
  // The whole listing: from start() (handshake included) or relist() until every list ended.
  int64_t listing_deadline_ms = 3500;
  // A host that keeps a slow-starting session across listing attempts: the handshake may take
  // this long from start() (0: the listing deadline covers it), and the lists then get
  // `listing_deadline_ms` from the end of the handshake.
  int64_t startup_deadline_ms = 0;
  int max_pages_per_list = 1000;
  // Sum of the page bytes one listing may receive (see "Byte budget").
  std::size_t max_listing_bytes = 16u << 20;
  std::size_t max_cursor_bytes = 16u << 10;  // a longer nextCursor is an invalid reply
  std::size_t max_items_per_list = 10000;
  int max_restarts_per_list = 3;    // list_changed restarts within one listing
  bool probe_unadvertised = false;  // list kinds the server did not advertise (-32601 = absent)
  bool send_cancellations = true;   // notifications/cancelled for requests we give up on
  std::size_t max_message_bytes = 16u << 20;  // handle_text refuses larger texts
  std::size_t max_error_message_chars = 200;  // upstream error messages are clipped to this
};

// kInvalidArgument naming the first bad field.
Status validate_session_config(const McpSessionConfig& config);

// The state table (h11 style): every legal transition is one row in mcp_session.cpp.
enum class SessionState {
  kIdle = 0,      // constructed, start() not called
  kDiscovering,   // server/discover in flight (probe or modern)
  kInitializing,  // initialize in flight (legacy)
  kListing,       // list requests in flight
  kReady,         // handshake done, no listing running: relist() allowed
  kClosed,        // failed or closed: inert
};
enum class SessionInput {
  kStartDiscover,    // start() with EraPolicy::kProbe or kModern
  kStartInitialize,  // start() with EraPolicy::kLegacy; or the probe found a legacy server
  kHandshakeDone,    // discover or initialize result accepted: the lists are requested
  kListingDone,      // every requested list ended (ok, absent or failed): ListingReady
  kRelist,           // relist()
  kFail,             // handshake refused or timed out, transport error: Failed, Closed
  kClose,            // close() by the host: Closed
};
inline constexpr int kSessionStateCount = 6;
inline constexpr int kSessionInputCount = 7;
const char* session_state_name(SessionState state);
const char* session_input_name(SessionInput input);
// The next state, or nullopt when the input is not allowed in `from`.
std::optional<SessionState> session_transition(SessionState from, SessionInput input);

// ADR-004 self-heal: evict the upstream connection and retry once on a fresh one, unless the
// error is METHOD_NOT_FOUND (a legitimate "has none") or a timeout (a fresh connection would not
// be faster).
bool should_evict_and_retry(const Error& error);

struct McpSessionStats {
  int64_t requests_sent = 0;
  int64_t unknown_responses = 0;      // ids we never sent, or already answered (duplicates)
  int64_t late_responses = 0;         // answers to requests we gave up on (timeout, restart)
  int64_t garbage_messages = 0;       // texts that are not JSON-RPC (or too large)
  int64_t ignored_notifications = 0;  // notifications/message, progress, ...
  int64_t answered_server_requests = 0;
  int64_t list_restarts = 0;  // lists started again after list_changed
};

class McpSession {
 public:
  struct ListingReady {
    Listing listing;
  };
  struct ListChanged {
    ListKind kind;
  };
  struct Failed {  // the session is unusable; Closed follows
    Error error;
  };
  struct Closed {};
  struct ListenEnded {           // the subscriptions/listen request was answered or failed
    std::optional<Error> error;  // nullopt: the server ended it with a result
  };
  struct CallDone {  // the answer to call(), exactly one per call not cancelled
    int64_t id = 0;
    std::optional<Json> result;         // the upstream's result
    std::optional<JsonRpcError> error;  // the upstream's JSON-RPC error (message clipped)
    std::optional<Error> failure;       // no answer: kTimeout, kTransport, kInvalidReply, ...
  };
  using Event = std::variant<ListingReady, ListChanged, Failed, Closed, ListenEnded, CallDone>;

  explicit McpSession(McpSessionConfig config = {});

  // Validates the config and queues server/discover or initialize. Fails (kConflict) if called
  // twice, kInvalidArgument for a bad config (the session stays idle).
  Status start(int64_t now_ms);
  // Takes the message by value: move it in, and list items are moved, never copied.
  void handle_message(JsonRpcMessage message, int64_t now_ms);
  // One message or a batch. Text that is not JSON-RPC is counted and reported; the session goes
  // on (stdio servers that print banners exist), a request waiting for an answer times out.
  Status handle_text(std::string_view text, int64_t now_ms);
  void handle_timeout(int64_t now_ms);
  // One request got no JSON-RPC answer (the id is in the text poll_transmit gave). The probe
  // falls back to initialize; a list page fails its list with `error` (kTransport if the code is
  // kUnknown); initialize fails the session.
  void on_request_failed(int64_t request_id, const Error& error, int64_t now_ms);
  // The transport is gone: lists still running fail with kTransport, Failed and Closed follow.
  void on_transport_error(const Error& error, int64_t now_ms);
  // Lists `kinds` again on the established session. kConflict while a listing runs,
  // kInvalidArgument before the handshake, after close or for no kinds.
  Status relist(const std::vector<ListKind>& kinds, int64_t now_ms);
  // The host ends the session: a running listing is reported with its unfinished lists failed
  // (kTransport), then Closed.
  void close(int64_t now_ms);

  std::optional<std::string> poll_transmit();  // compact JSON, no newline
  std::optional<int64_t> next_deadline() const;
  std::optional<Event> poll_event();

  SessionState state() const { return state_; }
  // For the HTTP MCP-Protocol-Version header of the message just polled: the probed version while
  // discovering, empty during the initialize request, the negotiated version after.
  const std::string& protocol_version() const { return protocol_version_; }
  std::optional<ProtocolEra> era() const { return era_; }
  // The handshake is running (discover or initialize in flight).
  bool starting() const {
    return state_ == SessionState::kDiscovering || state_ == SessionState::kInitializing;
  }
  // A legacy `initialize` went out on this session (the probe gave up, or the era is legacy).
  // With era() modern, the server saw both eras: a 2026-07-28 SDK then treats the session as a
  // 2025 one (no cache hints on its answers), and the host should replace it with a clean one.
  bool sent_initialize() const { return sent_initialize_; }
  const McpSessionStats& stats() const { return stats_; }

  // ---- subscriptions/listen (2026-07-28; see "Listening") ----------------------------------
  // Opens the subscription. kInvalidArgument unless the handshake is done with a modern server
  // (the session is ready or listing); kNotFound when the server advertises no list_changed;
  // kConflict while one is open.
  Status listen(int64_t now_ms);
  // The id of the open subscriptions/listen request (its transport stream stays open).
  std::optional<int64_t> listen_request_id() const { return listen_id_; }
  // The server acknowledged the open subscription (notifications/subscriptions/acknowledged).
  bool listen_acknowledged() const { return listen_acknowledged_; }
  // Acknowledgements of the open subscription: more than one means its stream was re-established
  // under it (the HTTP transport re-sends a broken listen), with a gap between the two.
  int64_t listen_acknowledgements() const { return listen_acks_; }
  // The kinds whose capability advertises listChanged (resources: resources and resource
  // templates): what a subscription or a GET stream watches. Empty before the handshake.
  std::vector<ListKind> list_changed_kinds() const;
  // ---- end of subscriptions/listen ----------------------------------------------------------

  // ---- calls (see "Calls") -------------------------------------------------------------------
  // kInvalidArgument before the handshake is done, after close, for an empty method or a
  // timeout <= 0; else the request id its CallDone will carry.
  Result<int64_t> call(std::string_view method, Json params, int64_t timeout_ms, int64_t now_ms);
  // Gives up on a call still waiting: notifications/cancelled with `reason`; no CallDone. False
  // when the call is not waiting (answered, unknown).
  bool cancel_call(int64_t id, const std::string& reason);
  std::size_t calls_in_flight() const;

 private:
  enum class Purpose { kDiscover, kInitialize, kListPage, kListen, kCall };
  struct Pending {
    Purpose purpose = Purpose::kListPage;
    ListKind kind = ListKind::kTools;
    int64_t deadline_ms = 0;
    int64_t sent_at = 0;
  };
  struct ListRun {
    bool wanted = false;     // part of the running listing
    bool requested = false;  // advertised (or probed): a request is made
    bool active = false;     // a page request is in flight
    int64_t request_id = 0;
    std::set<std::string> cursors;
    int restarts = 0;
  };

  void transition(SessionInput input);
  int64_t send_request(std::string_view method, Json params, Purpose purpose, ListKind kind,
                       int64_t timeout_ms, int64_t now_ms);
  void send_notification(std::string_view method, Json params);
  void expire(int64_t now_ms);
  void dispatch_response(int64_t id, JsonRpcMessage& message, int64_t now_ms);
  void on_server_request(const JsonRpcMessage& message);
  void on_notification(const JsonRpcMessage& message, int64_t now_ms);

  void send_discover(const std::string& version, int64_t now_ms);
  void on_discover_result(const Json& result, int64_t now_ms);
  void on_discover_error(const JsonRpcError& error, int64_t now_ms);
  void on_probe_unanswered(const Error& why, int64_t now_ms);
  bool on_late_probe_answer(JsonRpcMessage& message, int64_t now_ms);
  int64_t probe_timeout_ms() const;
  int64_t handshake_timeout_ms() const;
  void fall_back_to_initialize(int64_t now_ms);
  void send_initialize(int64_t now_ms);
  void on_initialize_result(const Json& result, int64_t now_ms);

  void begin_listing(const std::vector<ListKind>& kinds, int64_t now_ms);
  void request_page(ListKind kind, const std::optional<std::string>& cursor, int64_t now_ms);
  void on_page_result(ListKind kind, Json& result, std::size_t wire_bytes, int64_t now_ms);
  void on_page_error(ListKind kind, const JsonRpcError& error, int64_t now_ms);
  void fail_list(ListKind kind, Error error, int64_t now_ms);
  void end_list(ListKind kind, ListState state, int64_t now_ms);
  void maybe_finish_listing(int64_t now_ms);
  Listing take_listing();  // the finished listing, its items moved out
  void on_list_changed(ListKind kind, int64_t now_ms);
  void abandon(int64_t id, const char* reason, bool cancel);
  // Ends the session: a running listing is reported with unfinished lists failed by
  // `list_error`, then Failed (when `failure`) and Closed.
  void shut_down(SessionInput input, const std::optional<Error>& failure, const Error& list_error,
                 int64_t now_ms);
  std::string versions_we_speak(bool legacy_only) const;
  void on_listen_ended(std::optional<Error> error);  // subscriptions/listen part
  void call_failed(int64_t id, Error error);         // calls part: CallDone with a failure

  McpSessionConfig config_;
  EraPolicy policy_ = EraPolicy::kProbe;      // config_.era, narrowed by the versions configured
  std::vector<std::string> modern_versions_;  // newest first
  std::vector<std::string> legacy_versions_;  // newest first
  SessionState state_ = SessionState::kIdle;
  std::string protocol_version_;
  std::optional<ProtocolEra> era_;
  int64_t next_id_ = 1;
  std::map<int64_t, Pending> pending_;
  std::set<int64_t> abandoned_;
  std::deque<std::string> transmits_;
  std::deque<Event> events_;
  Listing listing_;
  ListRun runs_[kListKindCount];
  std::size_t listing_bytes_ = 0;  // page bytes received by the running listing
  int64_t deadline_ms_ = 0;
  int64_t late_probe_id_ = 0;  // the probe given up on by its deadline (0: none)
  bool rediscovered_ = false;  // initialize was refused with -32022: discovering once more
  bool sent_initialize_ = false;
  McpSessionStats stats_;
  bool discover_retried_ = false;     // -32022 with a version we speak: discover once more
  std::optional<int64_t> listen_id_;  // subscriptions/listen part
  bool listen_acknowledged_ = false;
  int64_t listen_acks_ = 0;
};

}  // namespace quiver
