// The rules of MCP's Streamable HTTP transport (protocol 2025-03-26 … 2026-07-28), without
// sockets: what an HTTP status means, how a reply body is read, when a POST's event stream is
// resumed, and when and after how long the listen stream reconnects. The native transport
// (native-agent/http_transport.*) only moves bytes and carries these decisions out.
//
// - `classify_http_status` is the one status classifier: a dead session (404 or 400 to a request
//   that carried a session id), refused credentials (401/403), a GET stream the server does not
//   offer (404/405 when opening it, 405 when resuming), anything else.
// - `ReplyReader` reads the answer to one POST (a JSON body or an event stream, across SEP-1699
//   resumptions) and decides what comes next: done, resume after a delay, or fail. The listen
//   stream reads its events through one too.
// - `StreamReconnector` decides, after each connection of the listen stream ends, whether it was
//   not offered, failed to open, is lost, or reconnects after the server's `retry:` or a doubling
//   backoff.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/framing.h"
#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

struct HttpHeader {
  std::string name;
  std::string value;
};

// ---- outgoing requests ----------------------------------------------------------------------

// The standard headers (Mcp-Method, Mcp-Name; 2026-07-28, SEP-2243) for one outgoing message;
// empty for a batch, a response or a message without a method.
std::vector<HttpHeader> mcp_standard_headers(const Json& message);
// A header value for `value`: itself when it is visible ASCII (inner spaces allowed) with no
// leading or trailing whitespace, else `=?base64?…?=`.
std::string mcp_header_value(std::string_view value);

// What an outgoing message (one message or a batch) waits for.
struct OutgoingMessage {
  std::set<std::string> request_ids;  // ids (as JSON text) of its requests
  bool is_initialize = false;         // opens a session: sent without a session id
  bool is_listen = false;             // one subscriptions/listen request: answered by a stream
};
OutgoingMessage describe_outgoing(const Json& message);

constexpr std::size_t kMaxSessionIdBytes = 1024;
constexpr std::size_t kMaxProtocolVersionBytes = 64;

// Session ids and protocol versions: 1..max_bytes visible ASCII characters (the spec's rule for
// session ids; a protocol version comes from the server and must not break a header line).
bool is_visible_ascii(std::string_view s, std::size_t max_bytes);

// Configured headers: names are HTTP tokens the transport does not manage itself, values have no
// control characters. The values are secrets: errors name the header only.
Status check_configured_headers(const std::vector<HttpHeader>& headers);
// What to scrub from server text quoted in errors: every header value and, for "Bearer <token>"
// style values, each of their longer words.
std::vector<std::string> secret_header_terms(const std::vector<HttpHeader>& headers);

// ---- text ---------------------------------------------------------------------------------

// "text/event-stream; charset=utf-8" -> "text/event-stream" (lower case, trimmed).
std::string http_media_type(std::string_view content_type);
// Server text for an error message: control characters become spaces (one line), cut at
// `max_bytes` on a UTF-8 boundary with "…" when cut.
std::string clip_server_text(std::string_view text, std::size_t max_bytes);

// ---- statuses ------------------------------------------------------------------------------

enum class HttpExchangeKind {
  kPost,             // a JSON-RPC message (or the DELETE that ends a session)
  kResume,           // GET + Last-Event-ID resuming a POST's event stream
  kOpenStream,       // the first connection of the listen stream
  kReconnectStream,  // a later connection of the listen stream
};

enum class HttpStatusClass {
  kSuccess,          // 2xx
  kNotOffered,       // no GET stream here (404/405 when opening it, 405 when resuming)
  kSessionExpired,   // the session is gone: re-initialize on a new transport
  kUnauthenticated,  // 401/403
  kFailed,           // any other status
};

HttpStatusClass classify_http_status(HttpExchangeKind kind, int status, bool sent_session);

// The error for a status that is not kSuccess. `snippet` (": <server text>", scrubbed) is
// appended for POST and resume exchanges. Session expiry messages start with "session expired".
Error http_status_error(HttpExchangeKind kind, int status, bool sent_session,
                        std::string_view where, std::string_view snippet);

// ---- replies ------------------------------------------------------------------------------

enum class ReplyBody { kNone, kJson, kSse, kOther };
// How a response's body is read: a non-2xx body is kept only as an error text.
ReplyBody reply_body_kind(int status, std::string_view content_type);

// The session id of an initialize response: empty when the server uses none.
Result<std::string> reply_session_id(std::string_view header_value, std::string_view where);

// The answer to one outgoing message: which of its requests are still unanswered, the messages
// to hand out, and what comes after each response. One reader lives across the resumptions of
// one POST, so its SSE parser keeps the last event id and `retry:`.
class ReplyReader {
 public:
  enum class Mode {
    kReply,   // one POST's answer: all its bytes are bounded; reading stops once answered
    kListen,  // the listen stream: only each event is bounded; it is read until it ends
  };
  ReplyReader(std::string where, std::size_t max_reply_bytes, std::set<std::string> pending,
              Mode mode = Mode::kReply);

  // A new response began (its status and Content-Type are known).
  void begin_response(int status, std::string_view content_type);

  enum class Feed {
    kContinue,  // read on
    kAnswered,  // every awaited answer is in: the rest of the stream is not ours to wait for
    kBodyCut,   // an error body's head is kept; the rest is not read
    kFailed,    // `failure()` says why
  };
  Feed feed(std::string_view bytes);

  // One message text (a message or a batch) outside a stream, e.g. a listen request's JSON
  // answer. Unreadable text is handed on like any message; only an oversized one fails.
  Status accept_text(std::string_view text);

  struct Next {
    enum class Action {
      kDone,         // every answer is in (or none was awaited)
      kResume,       // GET + Last-Event-ID (`sse().last_event_id()`) after `delay_ms`
      kStatusError,  // `status_class`: build the error with http_status_error
      kFail,         // `error`
    };
    Action action = Action::kDone;
    HttpStatusClass status_class = HttpStatusClass::kSuccess;
    int64_t delay_ms = 0;
    std::optional<Error> error;
  };

  // After the POST's response ended (the body read, or reading stopped once answered).
  Next after_post(bool sent_session);
  // After a resumption GET's response ended.
  Next after_resume(bool sent_session);
  // Whether, and after how long, to resume a stream that ended unanswered: attempt `attempt`
  // (1-based) with `ms_left` before the deadline.
  Next plan_resume(int attempt, int64_t ms_left, std::optional<int64_t> retry_ms,
                   int64_t min_retry_ms, int64_t initial_backoff_ms, int64_t max_backoff_ms) const;

  std::vector<std::string> take_messages();
  const std::set<std::string>& pending() const { return pending_; }
  bool expects_response() const { return expects_response_; }
  bool answered() const { return expects_response_ && pending_.empty(); }
  int status() const { return status_; }
  ReplyBody body() const { return body_; }
  const std::string& body_text() const { return buffer_; }  // a JSON body or an error body's head
  bool body_cut() const { return body_cut_; }
  const std::optional<Error>& failure() const { return failure_; }
  SseParser& sse() { return sse_; }

  static constexpr int kMaxResumptions = 32;  // SEP-1699 reconnections for one POST
  static constexpr std::size_t kErrorBodyKeep = 4096;

 private:
  Status accept(std::string_view text);
  bool accept_error_answer(bool sent_session);
  Next fail(ErrorCode code, std::string message) const;

  std::string where_;
  std::size_t max_reply_bytes_;
  Mode mode_;
  std::set<std::string> pending_;
  bool expects_response_;
  SseParser sse_;
  std::size_t received_ = 0;  // reply bytes so far, across resumptions
  std::string unreadable_;    // why the first unreadable message could not be read, if any
  std::vector<std::string> messages_;
  // Per response:
  int status_ = 0;
  std::string content_type_;
  ReplyBody body_ = ReplyBody::kNone;
  std::string buffer_;
  bool body_cut_ = false;
  std::optional<Error> failure_;
};

// ---- the listen stream --------------------------------------------------------------------

struct ReconnectBounds {
  int64_t min_retry_ms = 100;
  int64_t initial_backoff_ms = 500;
  int64_t max_backoff_ms = 30000;
  int max_failures = 5;  // failed reconnections in a row before the stream counts as lost
};

// The delay before reconnecting: the server's `retry:` clamped to [min_retry, max_backoff], else
// `backoff`.
int64_t reconnect_delay_ms(std::optional<int64_t> retry_ms, int64_t backoff_ms,
                           const ReconnectBounds& bounds);

// How one connection of the listen stream (GET, or a subscriptions/listen POST) ended.
struct StreamAttempt {
  bool first = false;      // the connection that opens the stream
  int status = 0;          // 0: no response (see `no_response`)
  bool is_stream = false;  // 2xx with an event stream
  bool delivered = false;  // it carried at least one message
  bool sent_session = false;
  std::optional<Error> no_response;   // why there was no response
  std::optional<Error> read_failure;  // why reading was stopped (garbage, backlog): fatal
};

class StreamReconnector {
 public:
  explicit StreamReconnector(ReconnectBounds bounds);

  struct Step {
    enum class Action {
      kReconnect,   // after `delay_ms`
      kNotOffered,  // the server offers no stream (first connection only)
      kOpenFailed,  // the first connection failed: `error` is the open's answer
      kLost,        // the stream ends the transport with `error`
    };
    Action action = Action::kReconnect;
    int64_t delay_ms = 0;
    std::optional<Error> error;
    bool session_expired = false;
  };

  Step after(const StreamAttempt& attempt, std::optional<int64_t> retry_ms, std::string_view where);

  int failures() const { return failures_; }
  int64_t backoff_ms() const { return backoff_ms_; }

 private:
  ReconnectBounds bounds_;
  int failures_ = 0;
  int64_t backoff_ms_;
  std::string last_failure_;
};

}  // namespace quiver
