// The MCP Streamable HTTP transport (protocol 2025-03-26 … 2026-07-28) to one upstream.
//
// Every JSON-RPC message is POSTed to the endpoint with `Accept: application/json,
// text/event-stream`. The answer is JSON (one message or a batch), an event stream that carries
// the response (and maybe notifications first), or 202 Accepted for a notification. `send`
// blocks until the whole answer to its message is in (or the deadline passes) and queues what
// arrived; `receive` hands the queue out. The server's own notifications (list_changed) arrive
// on an optional GET stream that `open_notification_stream` opens on a thread of its own; it
// reconnects with `Last-Event-ID` after the server's `retry:` (else a bounded backoff).
//
// Standard MCP request headers (2026-07-28, SEP-2243; sent to every server, older ones ignore
// them): every POST of one JSON-RPC request or notification carries `Mcp-Method` (the body's
// method) and, for the methods that address one object (tools/call, prompts/get: params.name;
// resources/read, resources/subscribe, resources/unsubscribe: params.uri), `Mcp-Name`. A value
// a header cannot carry as is (non-ASCII, a control character, leading or trailing whitespace,
// or one that looks like the encoding itself) is sent as `=?base64?<RFC 4648 base64 of its
// UTF-8>?=`. Batches and responses carry neither: there is no one method to name.
//
// subscriptions/listen (2026-07-28): `send` of that request does not wait for its answer (it
// comes when the subscription ends); its event stream is read on the stream thread, like the GET
// stream, and what it carries arrives through `receive`. A stream that breaks before the request
// was answered is POSTed again after the usual backoff.
//
// A 4xx whose body is a JSON-RPC answer to the request (2026-07-28 servers answer -32020 or
// -32022 so) is delivered as that answer, not as an HTTP failure.
//
// Sessions: the `Mcp-Session-Id` of the initialize response is sent on every later request, and
// `MCP-Protocol-Version` once `set_protocol_version` was called. A dead session (HTTP 404 to a
// request that carried a session id, or 400: server-everything's answer to an unknown session) is
// a kTransport error whose message starts with "session expired", and `session_expired()` turns
// true: the owner re-initializes on a NEW transport; this one never retries by itself.
//
// Failures of one request (timeout, HTTP 5xx, refused connection, oversized or garbage reply)
// are returned by `send` and leave the transport usable; the owner decides (self-heal). Fatal
// failures (session expired, the notification stream lost, an undrained notification backlog)
// end the transport: every later call returns that error.
//
// Secrets: header values given in `secret_headers` (bearer tokens, API keys) are sent on every
// request and appear nowhere else: not in `describe()`, not in an error message (server text
// quoted in an error is scrubbed of them), and the transport logs nothing. The URL's query is
// shown as "?…" for the same reason.
//
// Safety: the URL must be http(s); its host is resolved once and every address checked by the
// URL guard (native-agent/base/url_guard.h), then the connection is pinned to the checked address.
// Every request has connect, read and write timeouts plus a watchdog for the whole exchange, so a
// hung or slow-drip server costs at most the caller's `timeout_ms`. Creating a transport sets
// SIGPIPE to ignored when it is at its default: cpp-httplib 0.11.4 writes to sockets without
// MSG_NOSIGNAL, and a peer closing mid-write must not kill the agent.
//
// The rules above (status classes, reply reading, resumption, reconnection, the standard headers)
// are decisions of the core, shared/streamable_http.h; this transport carries them out over
// cpp-httplib (native-agent/upstream/http_client.h).
//
// Threads: the owner calls everything from one thread; the notification stream runs on its own
// thread and only touches the queue behind a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/redactor.h"
#include "native-agent/base/url_guard.h"
#include "native-agent/upstream/transport.h"
#include "shared/framing.h"
#include "shared/json.h"
#include "shared/status.h"
#include "shared/streamable_http.h"

namespace quiver {

struct HttpTransportOptions {
  std::string url;  // the MCP endpoint, e.g. https://mcp.example.com/mcp
  // Sent on every request (Authorization: Bearer …, X-Api-Key: …, custom). The values are
  // secrets. Names must be HTTP tokens; headers the transport manages (Accept, Content-Type,
  // Host, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, …) are refused.
  std::vector<HttpHeader> secret_headers;
  bool allow_private_addresses = false;  // loopback, RFC 1918, link-local … (see url_guard.h)
  // Every configured secret, in every form (the agent's one Redactor): error bodies quoted in
  // error messages pass it before they are cut. Null: only the header values are scrubbed.
  std::shared_ptr<const Redactor> redactor;
  // One reply body (a JSON answer or the whole event stream of one POST) and one event of the
  // notification stream may hold at most this many bytes: past it, kTooLarge.
  std::size_t max_reply_bytes = kDefaultMaxMessageBytes;
  // Notification-stream messages waiting for `receive`, in bytes; past it the transport fails
  // (kTooLarge) rather than drop a notification silently.
  std::size_t max_pending_bytes = kDefaultMaxMessageBytes;
  // Called with the status and the `WWW-Authenticate` value (cut to 4 KiB; empty when absent) of
  // every 401 or 403: the OAuth side reads a step-up request (`insufficient_scope`) from it.
  // Runs on the thread of the request; must not call back into the transport.
  std::function<void(int status, const std::string& www_authenticate)> on_auth_challenge;
  // A session to continue (sent from the first request on). Empty: the initialize response
  // assigns one, if the server uses sessions.
  std::string session_id;
  // Notification stream: connect timeout of a reconnection, how long it may stay silent before
  // the transport reconnects, the bounds of the reconnection delay (a server's `retry:` is
  // clamped to [min_retry, max_backoff]; without one the delay starts at initial_backoff and
  // doubles), and how many reconnections in a row may fail before the stream counts as lost.
  int64_t stream_connect_timeout_ms = 10000;
  int64_t stream_idle_timeout_ms = 300000;
  int64_t stream_min_retry_ms = 100;
  int64_t stream_initial_backoff_ms = 500;
  int64_t stream_max_backoff_ms = 30000;
  int stream_max_failures = 5;
  int64_t close_timeout_ms = 2000;  // the DELETE that ends the session
  // Resolves the host name (once). Empty: the system resolver. Tests inject their own.
  HostResolver resolver;
};

class HttpTransport final : public MessageTransport {
 public:
  // Validates the URL and the headers (kInvalidArgument). Nothing is resolved or dialled yet:
  // the first request does that, within its deadline.
  static Result<std::unique_ptr<HttpTransport>> create(HttpTransportOptions options);
  ~HttpTransport() override;  // close()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // POSTs one message (or batch) and reads the whole answer within `timeout_ms`: for a request,
  // until its response arrived (the rest of an event stream is not read); a stream that the
  // server closes early after sending an event id is resumed with GET + Last-Event-ID (SEP-1699
  // polling). Errors: kTimeout, kTooLarge, kInvalidReply (not JSON-RPC, wrong Content-Type, no
  // response), kUnauthenticated (401/403), kTransport (connection, HTTP status, session expired),
  // kInvalidArgument (`message_text` is not JSON, or the URL guard refused the host).
  Status send(const std::string& message_text, int64_t timeout_ms) override;
  // Every message that arrived, in arrival order (what `send` read and what the notification
  // stream delivered); waits up to `timeout_ms` when there are none. A fatal failure is returned
  // once the queue is drained.
  Result<std::vector<TransportMessage>> receive(int64_t timeout_ms) override;
  // Sent as MCP-Protocol-Version from now on; ignored unless 1-64 visible ASCII characters
  // (the value comes from the server and must not break a header line).
  void set_protocol_version(const std::string& version) override;
  // Stops the notification stream and DELETEs the session (a 405 or any failure is ignored).
  void close() override;
  std::string describe() const override;

  // Opens the GET stream for server-initiated messages (call after initialize; any time after
  // the initialize response is fine). Waits up to `timeout_ms` for the server's answer: true when
  // the stream is open (its messages then arrive through `receive`), false when the server offers
  // none (405 or 404 here, as the spec allows). Calling it again while open returns true.
  Result<bool> open_notification_stream(int64_t timeout_ms);

  // How many times the GET stream has opened (1 once open; more: it broke and was reconnected,
  // and what the server sent in between may be lost unless it replays it for Last-Event-ID).
  int64_t notification_stream_opens() const;

  // True once a request carrying a session id was answered 404 (or 400): re-initialize elsewhere.
  bool session_expired() const;
  // Whether a session id is held (never the id itself: it is a bearer capability).
  bool has_session() const;

 private:
  struct Impl;
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
