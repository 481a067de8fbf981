// An upstream connection: one live MCP session to one upstream server, kept open, watched and
// healed, that lists everything the server offers on demand.
//
// The MCP protocol logic lives in the sans-I/O `McpSession` (shared/mcp_session.h); a
// `MessageTransport` (stdio child or Streamable HTTP) moves its messages. `UpstreamConnection`
// owns one of each and runs the session's poll loop on the calling thread:
//   session.poll_transmit() → transport.send();  transport.receive() → session.handle_text();
//   session.next_deadline() passed → session.handle_timeout().
//
//   UpstreamConnection conn(UpstreamSpec::stdio("everything", "node", {js, "stdio"}));
//   auto listing = conn.list(conn.now_ms() + 3500);   // spawns, handshakes, lists every page
//   auto again = conn.list(conn.now_ms() + 3500);     // same session: no spawn, no handshake
//   conn.set_change_callback(cb);  while (...) conn.pump(100);   // list_changed, debounced
//
// Reuse and self-heal (Coffer ADR-004, 2026-06-04 update). The session is kept after a listing
// and reused by the next. A request that fails on a REUSED session, other than METHOD_NOT_FOUND or
// a timeout (`should_evict_and_retry`), evicts the session (the child is killed, the HTTP session
// deleted) and the listing is retried once on a fresh one within the same deadline; if the retry
// fails too, the error is kUpstreamUnavailable (UPSTREAM_UNAVAILABLE). A Streamable HTTP session
// the server expired (404, or server-everything's 400) is such a failure: the retry re-initializes.
// A failure on a fresh session is reported as it is (kTransport, kTimeout, ...): that is the
// upstream's real problem, and what "test connection" must show.
//
// Restarts back off. Every fresh session that fails, or dies less than `stable_session_ms` after
// it opened, counts as a consecutive failure; the n-th one (n ≥ 2) makes the connection refuse
// fresh sessions for min(backoff_max, backoff_initial · 2^(n-2)) ms: `list` then answers
// kUpstreamUnavailable at once (saying when it will try again) instead of spawning. The first
// failure allows an immediate retry (the self-heal retry). A crashing upstream therefore costs a
// few spawns, then one per backoff period: never a spin.
//
// Results. `list` returns a `Listing` whenever the handshake succeeded, with each list's own
// state (ok, absent, failed): one list failing does not hide the others. It returns an error only
// when no listing could be had at all (spawn or dial failed, handshake refused or timed out,
// transport lost, still failing after the self-heal retry, backing off).
//
// Deadlines. `list(deadline_ms)` returns by `deadline_ms` (on this connection's clock,
// `now_ms()`), give or take a send or receive slice. The session's own budget for a listing is
// `UpstreamOptions::list_timeout_ms` and each request has the session's request timeout; when the
// caller's deadline comes first, every request still waiting is expired there and then: the
// unfinished lists fail with kTimeout and the session stays (a timeout is no reason to evict).
// Over Streamable HTTP a send blocks until its answer, so the lists of one upstream go one after
// another (TODO(perf): concurrent POSTs); over stdio they are in flight together.
//
// Slow starts (`startup_timeout_ms` > 0). A fresh session's first attempt waits up to the
// caller's deadline plus the start-up budget. A session still in its handshake when that passes
// (the server has not answered yet) is kept, not killed, for one more start-up budget: the attempt
// fails with kTimeout ("still starting"), and the next `list` waits on the same session (the
// caller's deadline plus the budget still left) instead of spawning another; an answer that came
// meanwhile is read at once. This is no failed session (no backoff). Over stdio; an HTTP handshake
// POST is cut at the deadline, so an HTTP session is not kept. A 2026-07-28 server that answered
// the era probe after the legacy `initialize` had gone out (a mixed session, which the SDKs serve
// as a 2025 one, without cache hints) is closed and re-opened as a clean modern session within the
// same `list`; the mixed listing is returned only if that fails.
//
// Watching. Between listings the upstream may send `notifications/*/list_changed` (stdio: on the
// pipe; HTTP: on the GET stream, which `pump` opens when `watch` is set). `pump` reads them and
// calls the change callback once per debounce window (`change_debounce_ms`) with every kind that
// changed; it also reports a session lost while idle (the next `list` opens a fresh one). Notices
// for kinds a `list` call re-lists before the window ends are dropped: that listing is newer.
// Nobody pumping means nobody is told; `list` never calls the callback.
// A 2026-07-28 subscription (`subscriptions/listen`) that is open again after a gap (the HTTP
// transport re-sent a broken listen stream and the server acknowledged it once more, or it ended
// and was sent anew) reports every kind it watches as changed: a change in the gap reached
// nobody, and the host re-lists instead of waiting for the TTL.
//
// Calls (issue 13: the relay). `call` sends one request of the caller's choosing (tools/call,
// resources/read, prompts/get, completion/complete) on the live session and waits for its
// answer until `deadline_ms`; with no session open it opens one first (its handshake and listing,
// within the same deadline). The answer is the upstream's result or its JSON-RPC error, as sent
// (secrets redacted at the door like every upstream text). No answer by the deadline: kTimeout,
// `notifications/cancelled` sent, the session kept. `cancelled()` turning true (the client went
// away) ends the wait the same way, within kCallCancelPollMs (kTimeout, "cancelled" in the
// message). Over Streamable HTTP the request is one POST that blocks until the answer or the
// deadline, so a client going away is noticed only when it returns (TODO: cancel a POST under way).
// Self-heal as for listings, but only where the request cannot have run: a REUSED session found
// dead when sending (the child exited, the HTTP session expired) is evicted and the call sent once
// on a fresh session; any other failure is not retried (a tool call is not idempotent) and a
// session that died under the call is ended, kUpstreamUnavailable. Calls on one connection go one
// at a time, like listings (the same lock): a long call holds up the next call and a listing of
// that connection until its deadline (TODO(perf): several calls in flight on one session).
//
// Secrets. Header values and env values of the spec are secrets: they are handed to the
// transport and appear nowhere else (not in `describe`, errors, logs or the listing).
//
// Threads. All methods may be called from any thread; one call runs at a time per connection
// (a `list` waits for a running `pump` or `list`, within its deadline; `pump` returns at once
// when the connection is busy). The change callback runs on the pumping thread, outside the
// connection's lock: it may call `list`, though a pool should rather schedule the work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/base/redactor.h"
#include "native-agent/upstream/transport.h"
#include "shared/listing.h"
#include "shared/mcp_session.h"
#include "shared/status.h"

namespace quiver {

// A header sent on every HTTP request to the upstream; the value is a secret.
struct UpstreamHeader {
  std::string name;
  std::string value;
};

// Where an upstream is and how to reach it: what a connection's configuration boils down to.
// Deliberately small and free of the config module, which maps onto it.
struct UpstreamSpec {
  enum class Transport { kStdio = 0, kHttp };

  std::string name;  // the connection's name: logs, errors, stderr lines (never a secret)
  Transport transport = Transport::kStdio;
  // stdio
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;  // values are secrets
  std::string working_dir;                 // empty: the agent's
  // Streamable HTTP
  std::string url;
  std::vector<UpstreamHeader> headers;  // values are secrets
  bool allow_private = false;           // loopback, RFC 1918, link-local hosts allowed
  // This connection's deadlines (nullopt: UpstreamOptions'): each request, and the start-up
  // budget a fresh session gets on top of the listing deadline (spawn or dial, the handshake;
  // 0: none).
  std::optional<int64_t> request_timeout_ms;
  std::optional<int64_t> startup_timeout_ms;
  // Set: redacts this upstream's text instead of UpstreamOptions::redactor, for a credential the
  // configuration does not hold (an OAuth access token: every configured secret plus the token).
  // Not compared by the pool: a new token is a new header, so a new connection anyway.
  std::shared_ptr<const Redactor> redactor;

  static UpstreamSpec stdio(std::string name, std::string command,
                            std::vector<std::string> args = {},
                            std::map<std::string, std::string> env = {});
  static UpstreamSpec http(std::string name, std::string url,
                           std::vector<UpstreamHeader> headers = {}, bool allow_private = false);

  // Log-safe: "stdio node (2 args, env A,B)" / "http https://host/mcp (headers Authorization)".
  // Argument values are left out too (some servers take tokens as arguments).
  std::string describe() const;
};

// What a connection needs from a transport beyond moving messages.
struct UpstreamTransport {
  std::unique_ptr<MessageTransport> transport;
  // true: a failed send() fails only that request and the transport stays usable (HTTP);
  // false: a failed send() means the transport is gone (stdio: the child).
  bool request_scoped_send_errors = false;
  // HTTP: the server expired our session (the transport is then dead). Empty for stdio.
  std::function<bool()> session_expired;
  // HTTP: opens the GET stream for server notifications; true when open, false when the server
  // offers none. Empty for stdio (notifications arrive on the pipe).
  std::function<Result<bool>(int64_t timeout_ms)> open_notification_stream;
  // HTTP: how many times the GET stream opened (more than once: reconnected after a break).
  std::function<int64_t()> notification_stream_opens;
};

struct TransportSettings {
  std::size_t max_message_bytes = 16u << 20;
  // The connection's redactor (UpstreamOptions::redactor): the HTTP transport redacts an error
  // body with it before cutting the body to a snippet.
  std::shared_ptr<const Redactor> redactor;
  std::function<void(const std::string& line)> on_stderr_line;  // stdio: each stderr line
  // HTTP: each 401/403 (HttpTransportOptions::on_auth_challenge).
  std::function<void(int status, const std::string& www_authenticate)> on_auth_challenge;
};

// Builds the transport for a spec; the default is `make_upstream_transport`. Tests inject fakes.
using TransportFactory =
    std::function<Result<UpstreamTransport>(const UpstreamSpec&, const TransportSettings&)>;

// The default factory: a StdioTransport (spawns the child) or a Streamable HTTP transport
// (checked by the URL guard; dials on first use).
Result<UpstreamTransport> make_upstream_transport(const UpstreamSpec& spec,
                                                  const TransportSettings& settings);

struct UpstreamChange {
  std::vector<ListKind> kinds;  // lists the upstream said changed (each once, in ListKind order)
  bool session_lost = false;    // the session ended while idle; the next list() opens a new one
  std::optional<Error> error;   // why it was lost
};
using ChangeCallback = std::function<void(const UpstreamChange&)>;

struct UpstreamOptions {
  // Request timeouts, limits, client identity. listing_deadline_ms and era are set per session.
  McpSessionConfig session;
  int64_t list_timeout_ms = 3500;  // the session's budget for one whole listing
  // A fresh session's start-up budget (spawn or dial, the handshake), on top of the listing
  // deadline the caller gives: a server that needs 6 s to answer `initialize` is listed, not
  // killed and restarted on every attempt. `initialize` may take this long. 0: none (the
  // listing deadline covers the start-up too).
  int64_t startup_timeout_ms = 0;
  int64_t change_debounce_ms = 250;
  // HTTP: open the GET notification stream (2025 servers) or a subscriptions/listen request
  // (2026-07-28 servers) when idle (pump). Over stdio a modern server is always listened to.
  bool watch = false;
  int64_t backoff_initial_ms = 250;
  int64_t backoff_max_ms = 30000;
  int64_t stable_session_ms = 10000;  // a session that lived this long did not "crash"
  std::size_t max_message_bytes = 16u << 20;
  // Connection events and the stdio child's stderr lines, one line each; never a secret.
  std::function<void(const std::string& line)> log;
  // Every configured secret (AgentConfig::redactor). The connection is where upstream text
  // enters the agent, and it applies this at the door: every message text before the session
  // parses it (inside JSON strings: error messages, serverInfo, instructions, every tool,
  // resource and prompt field), every transport error and stderr line, and the HTTP transport's
  // error-body snippets before they are cut. Null: nothing is redacted (tests without secrets).
  std::shared_ptr<const Redactor> redactor;
  // Monotonic milliseconds; default: std::chrono::steady_clock.
  std::function<int64_t()> clock;
  TransportFactory factory;  // default: make_upstream_transport
};

// How one list() call went.
struct ListInfo {
  bool reused = false;      // ran (first) on a session kept from an earlier listing
  bool retried = false;     // that session failed: evicted, retried on a fresh one
  bool resumed = false;     // waited on a session kept from an earlier attempt while it started
  int64_t connect_ms = -1;  // spawn/dial plus handshake of the fresh session (-1: none opened)
  int64_t list_ms = 0;      // the lists themselves (every page), on the session that answered
  int64_t total_ms = 0;
  // The `WWW-Authenticate` value of the last 401/403 the upstream answered during this listing
  // (HTTP only): a 403 `insufficient_scope` asks the OAuth side for a step-up.
  std::optional<std::string> auth_challenge;
};

// How one call() went.
struct CallInfo {
  bool reused = false;      // sent on a session kept from before
  bool retried = false;     // that session was found dead: evicted, sent on a fresh one
  int64_t connect_ms = -1;  // a session opened for the call (handshake and listing), -1: none
  int64_t call_ms = 0;      // from sending the request to its answer
};

// The upstream's answer to a call: exactly one of the two.
struct CallAnswer {
  std::optional<Json> result;
  std::optional<JsonRpcError> error;
};

// How often a waiting call looks at its `cancelled` predicate.
inline constexpr int64_t kCallCancelPollMs = 50;

struct UpstreamStats {
  int64_t sessions_opened = 0;   // fresh sessions attempted (spawns, HTTP initializations)
  int64_t listings = 0;          // list() calls that returned a Listing
  int64_t reused_listings = 0;   // ... of which on a kept session
  int64_t evictions = 0;         // kept sessions dropped after a failed request (self-heal)
  int64_t sessions_lost = 0;     // sessions that died while idle
  int64_t backoff_refusals = 0;  // list() calls refused while backing off
  int64_t consecutive_failures = 0;
  int64_t list_changed_notices = 0;
  int64_t garbage_messages = 0;  // texts from the upstream that were not JSON-RPC
  int64_t kept_starting = 0;     // attempts that ended with the session still starting (kept)
  int64_t mixed_sessions_replaced = 0;  // modern sessions that had also received initialize
  int64_t listen_gaps = 0;   // change streams open again after a break (watched kinds re-listed)
  int64_t calls = 0;         // call()s that got an answer (result or JSON-RPC error)
  int64_t calls_failed = 0;  // ... that got none (timeout, cancelled, transport, no session)
  std::optional<ProtocolEra> era;
};

class UpstreamConnection {
 public:
  explicit UpstreamConnection(UpstreamSpec spec, UpstreamOptions options = {});
  ~UpstreamConnection();  // close()
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;

  // Lists `kinds` (empty: all four) by `deadline_ms`, on the kept session when there is one (a
  // partial list is merged with the kinds of the previous listing of that session), else on a
  // fresh one (always all four). See the header comment for errors and self-heal.
  Result<Listing> list(int64_t deadline_ms, const std::vector<ListKind>& kinds = {},
                       ListInfo* info = nullptr);

  // Sends `method` with `params` and waits for the answer; see "Calls" in the header comment.
  Result<CallAnswer> call(const std::string& method, const Json& params, int64_t deadline_ms,
                          const std::function<bool()>& cancelled = {}, CallInfo* info = nullptr);

  // Services the idle session for up to `wait_ms`: reads what arrived, answers pings, opens the
  // HTTP notification stream (watch), and calls the change callback when a debounce window
  // ended. Returns at once when another call holds the connection.
  void pump(int64_t wait_ms);
  void set_change_callback(ChangeCallback callback);

  // Ends the session (stdio: the child is terminated and reaped; HTTP: DELETE). The next list()
  // opens a fresh one. Not counted as a failure.
  void close();

  // Hands the connection, its session kept, to another owner (an engine reloaded in-process:
  // UpstreamPool::adopt). Its log lines (stderr lines too) go to `log` from now on, and upstream
  // text is redacted with `redactor` (unless the spec has its own). Waits for a running call.
  void rebind(std::function<void(const std::string& line)> log,
              std::shared_ptr<const Redactor> redactor);
  // Whether a connection built with `options` would run its sessions as this one does (the
  // deadlines, limits, debounce, backoff and watching; not the log, redactor, clock or factory).
  bool same_session_options(const UpstreamOptions& options) const;

  bool connected() const;  // a session is open and ready for reuse (waits for a running call)
  int64_t now_ms() const;
  // Milliseconds until a fresh session may be opened; 0 when it may now.
  int64_t backoff_remaining_ms() const;
  UpstreamStats stats() const;
  const UpstreamSpec& spec() const { return spec_; }

 private:
  struct Session;
  struct Attempt;
  // Where log lines go; shared with the stdio transport's stderr callback, so that rebind()
  // reaches a transport built before it.
  struct LogTarget {
    std::mutex mu;
    std::function<void(const std::string& line)> log;
    std::shared_ptr<const Redactor> redactor;
  };

  Result<Listing> list_locked(int64_t deadline_ms, const std::vector<ListKind>& kinds,
                              ListInfo* info);
  Result<Listing> open_and_list(int64_t deadline_ms, ListInfo* info);
  Result<Listing> resume_start(int64_t deadline_ms, ListInfo* info);
  Result<Listing> finish_start(Attempt a, int64_t caller_deadline, ListInfo* info);
  Attempt run_listing(int64_t deadline_ms);
  Result<CallAnswer> call_locked(const std::string& method, const Json& params, int64_t deadline_ms,
                                 const std::function<bool()>& cancelled, CallInfo* info);
  bool session_ready() const;
  void drive(int64_t until_ms, const std::function<bool()>& done);
  void flush_transmits();
  void process_events();
  void send_one(const std::string& text);
  void note_change(ListKind kind);
  void end_session(bool failure, const std::optional<Error>& why);
  void log(const std::string& line) const;
  // `redactor` applied to upstream-originated text (identity without one).
  std::string scrub(std::string text) const;
  Error scrub(Error error) const;
  std::optional<UpstreamChange> take_due_change();
  std::string label() const;

  UpstreamSpec spec_;
  UpstreamOptions options_;
  std::function<int64_t()> clock_;
  TransportSettings settings_;
  std::shared_ptr<LogTarget> log_target_ = std::make_shared<LogTarget>();

  mutable std::timed_mutex busy_;  // held by list() and pump()
  mutable std::mutex state_mu_;    // guards the stats, callback and backoff fields below
  std::unique_ptr<Session> session_;
  std::optional<Listing> last_listing_;  // of the current session, all kinds merged
  std::optional<ProtocolEra> era_;       // learned from the last handshake
  int64_t consecutive_failures_ = 0;
  int64_t next_attempt_at_ = 0;
  std::optional<Error> last_failure_;  // why the last session failed (reported while backing off)
  UpstreamStats stats_;
  ChangeCallback callback_;
  bool changed_[kListKindCount] = {};
  std::optional<int64_t> change_due_at_;
  // Set by the transports' on_auth_challenge; list() reports it in ListInfo::auth_challenge.
  std::shared_ptr<std::mutex> challenge_mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::optional<std::string>> last_challenge_ =
      std::make_shared<std::optional<std::string>>();
  std::optional<UpstreamChange> lost_;  // a session lost while idle, not reported yet
};

}  // namespace quiver
