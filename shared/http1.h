// Http1: an HTTP/1.1 server's side of the wire, without any I/O: a request parser that the host
// feeds bytes in whatever pieces they arrive, and the writer of a response's bytes.
//
// Why: the agent's API faces clients it does not control. A parser that buffers a header line
// until its newline, counts no headers, inflates compressed bodies or reads a chunked body without
// a bound lets one client hold gigabytes before any authentication runs. Every bound is here, in
// one place, decided from the bytes alone (h11's model): the host (native-agent/api/http_front.h)
// only moves bytes, keeps the clocks and writes what the parser decides.
//
// What it bounds and refuses (each refusal is an `Http1Failure` with the status to answer, after
// which the connection must be closed; the parser stops reading at the offending byte):
//   - the request line (414 past `max_request_line_bytes`), each header line and the number of
//     headers and the whole head (431); malformed lines, obs-fold, bare CR, a missing or repeated
//     Host in HTTP/1.1, Content-Length with Transfer-Encoding, conflicting lengths (400);
//   - a body over `max_body_bytes` (413): a Content-Length over the bound is refused before one
//     body byte is read; a chunked body is counted while it streams and refused at the chunk that
//     crosses the bound;
//   - a `Content-Encoding` other than identity (415: nothing is ever inflated); a transfer coding
//     other than `chunked` (501); an `Expect` other than `100-continue` (417); an HTTP version
//     other than 1.0 or 1.1 (505).
// A request with neither Content-Length nor Transfer-Encoding has an empty body (RFC 9112 6.3):
// bytes after its head are the next request's, so a length-less stream meets the request-line
// bound, never a buffer without one. (411 would refuse `curl -X POST` without a body, which is a
// valid request.)
//
// Keep-alive follows HTTP/1.0 and 1.1 (`keep_alive` on each request); pipelined requests are
// parsed one after the other from the bytes left over; `Expect: 100-continue` is a step of its own
// (`Http1SendContinue`) so the host can answer "100 Continue" before the client sends the body.
//
// When to call what: `feed(bytes)`, then `next()` until it returns `Http1NeedMore`; a host that
// answers requests one at a time stops reading while one is in flight (the bytes it has fed stay
// bounded by its read size). `idle()` says whether a byte of the next request has arrived (an
// idle keep-alive connection may be closed without an answer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace quiver {

struct Http1Limits {
  std::size_t max_request_line_bytes = 8 * 1024;
  std::size_t max_header_line_bytes = 8 * 1024;
  std::size_t max_header_count = 100;
  std::size_t max_head_bytes = 32 * 1024;  // request line + header lines (+ chunked trailers)
  std::size_t max_body_bytes = 64 * 1024;  // the decoded body
};

using Http1Headers = std::vector<std::pair<std::string, std::string>>;

bool http1_iequals(std::string_view a, std::string_view b);
// A header name or method: one or more tchar (RFC 9110 5.6.2).
bool http1_is_token(std::string_view s);

struct Http1Request {
  std::string method;
  std::string target;     // as sent: origin-form "/path?query" (or whatever the client sent)
  int minor_version = 1;  // HTTP/1.<minor_version>
  Http1Headers headers;   // in order, names as sent
  std::string body;       // decoded from chunked when it was
  bool keep_alive = true;

  // The first header named `name` (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
  std::size_t header_count(std::string_view name) const;
};

// The request cannot be served; answer `status` and close the connection.
struct Http1Failure {
  int status = 400;
  std::string message;
};

struct Http1NeedMore {};
struct Http1SendContinue {};  // write "HTTP/1.1 100 Continue\r\n\r\n", then keep reading

using Http1Step = std::variant<Http1NeedMore, Http1SendContinue, Http1Request, Http1Failure>;

class Http1RequestParser {
 public:
  explicit Http1RequestParser(Http1Limits limits = {});

  // Appends bytes read from the connection. Cheap: the work happens in `next()`.
  void feed(std::string_view bytes);

  // The next decision. After an `Http1Request` the parser starts on the next (pipelined) request
  // with the bytes left over; after an `Http1Failure` every call returns that failure again.
  Http1Step next();

  // No byte of the next request has arrived (between requests, or before the first).
  bool idle() const;
  // The head of the current request is complete and its body is being read.
  bool reading_body() const;
  // Bytes fed and not yet consumed.
  std::size_t buffered() const { return buf_.size() - pos_; }
  const Http1Limits& limits() const { return limits_; }

 private:
  enum class State {
    kRequestLine,
    kHeaders,
    kBody,
    kChunkSize,
    kChunkData,
    kChunkEnd,
    kTrailers,
    kFailed
  };

  Http1Step fail(int status, std::string message);
  // One line from buf_ (without its "\n" and one "\r" before it), or false when it is not
  // complete yet. `limit` bounds the line; over it, `*too_long` is set.
  bool take_line(std::size_t limit, std::string_view* line, bool* too_long);
  // One line of the head (request line, header, trailer) into `*line`: nullopt when it was taken,
  // else what next() returns: need more, or a failure (`too_long_status` and `too_long_message`
  // for a line over `limit`, 431 for a head over max_head_bytes).
  std::optional<Http1Step> take_head_line(std::size_t limit, int too_long_status,
                                          const char* too_long_message, std::string_view* line);
  Http1Step parse_request_line(std::string_view line);
  Http1Step parse_header_line(std::string_view line);
  Http1Step end_of_head();
  Http1Step finish_request();
  void compact();

  Http1Limits limits_;
  std::string buf_;
  std::size_t pos_ = 0;   // first unconsumed byte
  std::size_t scan_ = 0;  // where the search for "\n" resumes (>= pos_)
  State state_ = State::kRequestLine;
  Http1Request req_;
  std::size_t head_bytes_ = 0;
  std::size_t header_count_ = 0;
  std::size_t body_left_ = 0;  // Content-Length bytes or the current chunk's bytes still to read
  bool expect_continue_ = false;
  Http1Failure failure_;
};

// ---- responses ----------------------------------------------------------------------------------

struct Http1Response {
  int status = 200;
  Http1Headers headers;  // Content-Length, Transfer-Encoding and Connection are the writer's
  std::string body;
};

// "OK", "Not Found", ... ("Unknown" for a status without a standard phrase).
const char* http1_reason(int status);

// The bytes of `response` for a request of HTTP/1.`minor_version`: the status line, the headers
// (CR, LF and NUL in names or values become spaces: a handler cannot split a response), a
// Content-Length, `Connection: close` when `keep_alive` is false (`keep-alive` for an HTTP/1.0
// client that keeps it), and the body unless `head_only` (a HEAD request).
std::string http1_serialize(const Http1Response& response, int minor_version, bool keep_alive,
                            bool head_only = false);

// True when `response` asks for the connection to close (a `Connection: close` header).
bool http1_response_closes(const Http1Response& response);

}  // namespace quiver
