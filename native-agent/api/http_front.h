// HttpFront: the agent API's network side: one epoll thread that owns accepting, reading,
// writing, every deadline and the per-peer and total connection caps, in front of a small bounded
// pool of worker threads that only ever see complete requests.
//
// Why: in a thread-per-connection server (cpp-httplib, any version) an idle keep-alive socket or a
// client sending a byte a second holds a worker: nine slow clients stalled the whole API, and 16
// keep-alive benchmark connections queued behind 8 workers (p99 270 ms). Here a connection costs
// a file descriptor and its parser's buffer until its request is complete (shared/http1.h bounds
// that buffer); only then does it take a worker, for the handler's run alone. When every worker
// is busy and `max_queued_requests` wait, a request is answered 503 by `overloaded()` on the loop
// thread at once (counted in `shed_count()`), never queued without bound. A worker writes its
// answer itself and, while no other request waits and another worker is idle, answers the
// connection's next complete request
// if it arrives within `hot_connection_ms` (a busy keep-alive connection then costs one thread
// wake-up per request, as in a thread-per-connection server, without holding a worker when idle).
//
// A host may also pass an inline handler: it runs on the loop thread for each complete request
// first, and answers there when it can do so without waiting (the agent: discovery served from
// its local SQLite readers and render cache). Such an answer costs no thread hand-off at all, as
// in a single-threaded event loop (nginx's model); anything else it declines (nullopt) goes to a
// worker as above. The loop watches the handler's time: one call over `inline_budget_us` pauses
// inline answers for `inline_pause_ms` (counted in `inline_paused_count()`), so a store that
// starts to wait (a disk stall, a busy lock) costs the other connections one slow answer, not a
// stalled loop. With an inline handler a worker keeps a connection hot only during such a pause:
// otherwise the connection goes back to the loop after each worker's answer.
//
// Deadlines (each explicit, all in HttpFrontOptions): the whole request head within
// `header_timeout_ms` of its first byte (or of the connection's start); the whole body within
// `body_timeout_ms` of the head; an idle keep-alive connection closes after
// `keep_alive_timeout_ms`; a response must be written within `write_timeout_ms`. A request cut off
// by its deadline is answered 408 and the connection closed.
//
// Caps: at most `max_connections` connections, at most `max_connections_per_peer` from one
// address. A new connection past a cap first displaces the oldest idle one (of that peer for the
// per-peer cap: it has no request in flight, and a client must be ready for an idle keep-alive
// connection to close); when none is idle it is answered 503 and closed.
//
// Streams (server-sent events): a handler on a worker may call `HttpFront::open_stream()`; its
// response then goes out as the head of a chunked body that stays open (no keep-alive after it),
// and the connection belongs to the loop as a stream: whatever a producer thread `send`s through
// the returned HttpStream is written as one chunk, bounded (`max_stream_buffer_bytes` unwritten:
// past it the stream is cut, a slow reader costs nothing), with `keepalive` bytes written after
// `stream_keepalive_ms` without any. The client closing its side, a write that fails or the
// producer's `close(last)` ends it (the last bytes, then the terminating chunk); `stop()` ends
// every open stream the same way with the `farewell` bytes the producer set, so a client sees a
// clean end, not a reset. A stream holds no worker.
//
// A refused request (a parser failure, a timeout) gets `refuse(status, message)`'s answer and the
// connection is closed after a short lingering drain (the client's unread bytes are read and
// discarded, never kept) so that the client reads the answer instead of a reset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "shared/http1.h"
#include "shared/status.h"

namespace quiver {

struct HttpPeer {
  std::string remote_addr;  // "127.0.0.1", "::1"
  int remote_port = 0;
  std::string local_addr;  // the address the connection arrived on
  int local_port = 0;
};

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int worker_threads = 16;
  std::size_t max_queued_requests = 64;  // complete requests waiting for a worker
  Http1Limits limits;
  int64_t header_timeout_ms = 10'000;
  int64_t body_timeout_ms = 10'000;
  int64_t keep_alive_timeout_ms = 5'000;
  int64_t write_timeout_ms = 5'000;
  int64_t linger_ms = 1'000;  // draining a refused connection before closing it
  std::size_t keep_alive_max_requests = 1'000;
  // A worker that answered a request keeps the connection while its next request arrives within
  // this many ms, no other request waits and another worker is idle (0: always hand it back).
  int64_t hot_connection_ms = 2;
  // The inline handler's budget per call and the pause after a call over it.
  int64_t inline_budget_us = 10'000;
  int64_t inline_pause_ms = 250;
  std::size_t max_connections = 4'096;
  std::size_t max_connections_per_peer = 256;
  // Streams: a keep-alive write after this long without one, and the unwritten bytes one may hold.
  int64_t stream_keepalive_ms = 15'000;
  std::size_t max_stream_buffer_bytes = 256 * 1024;
};

// The producer's side of one open stream (thread-safe). Lives as long as either side holds it.
class HttpStream {
 public:
  HttpStream(std::string keepalive, std::string farewell)
      : keepalive_(std::move(keepalive)), farewell_(std::move(farewell)) {}
  // Queues `bytes` as one chunk; false once the stream has ended (the client left, the front
  // stopped, the buffer bound was passed, or close() was called): the producer drops it then.
  bool send(std::string bytes);
  // Ends the stream after `last` (and what is queued).
  void close(std::string last = {});
  bool ended() const;

  // The front's side.
  struct Drained {
    std::string bytes;
    bool end = false;  // write `bytes`, then end the body
  };
  Drained drain();
  void attach(std::function<void()> wake, std::size_t max_buffer);
  void end_by_front();
  const std::string& keepalive() const { return keepalive_; }
  std::string farewell() const;

 private:
  mutable std::mutex mu_;
  std::string keepalive_;
  std::string farewell_;
  std::string queued_;
  bool producer_closed_ = false;
  bool ended_ = false;
  std::size_t max_buffer_ = 256 * 1024;
  std::function<void()> wake_;
};

// Runs on a worker thread with a complete request.
using HttpHandler = std::function<Http1Response(const Http1Request&, const HttpPeer&)>;
// Runs on the loop thread: answers without waiting, or declines (nullopt) and the request goes to
// a worker. It must not wait for a lock held across I/O, a network round trip or a full pool.
using HttpInlineHandler =
    std::function<std::optional<Http1Response>(const Http1Request&, const HttpPeer&)>;
// Runs on the loop thread: must not block (no store, no I/O).
using HttpRefusal = std::function<Http1Response(int status, const std::string& message)>;
using HttpOverloaded = std::function<Http1Response()>;

class HttpFront {
 public:
  HttpFront(HttpFrontOptions options, HttpHandler handler, HttpRefusal refuse,
            HttpOverloaded overloaded, HttpInlineHandler inline_handler = nullptr);
  ~HttpFront();  // stop()
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Binds (SO_REUSEADDR, never SO_REUSEPORT: a port in use is refused) and starts the loop and
  // the workers. kResourceUnavailable when the address cannot be bound.
  Status start();
  // Stops accepting, lets the workers finish the requests they hold, closes every connection and
  // joins every thread. Idempotent.
  void stop();

  // From a handler on a worker thread (not the inline handler): makes this request's response
  // the head of a stream and returns its producer side; `keepalive` is written when the stream
  // is idle, `farewell` when the front stops. nullptr outside a worker's handler call.
  static std::shared_ptr<HttpStream> open_stream(std::string keepalive, std::string farewell);

  // From a handler on a worker thread: a predicate that says whether this request's client has
  // gone (its end of the socket closed or reset), valid while the handler runs. The request is
  // read whole before the handler runs, so the socket holds nothing but what the client does
  // next: a FIN reads as gone (a half-closed HTTP/1.1 client still waiting is rare, and most
  // servers take a FIN for an abort), bytes of a pipelined request as still there. Outside a
  // worker's handler call: never gone.
  static std::function<bool()> client_gone();

  int port() const;
  std::size_t open_streams() const;
  int64_t shed_count() const;
  int64_t inline_count() const;         // requests answered on the loop thread
  int64_t inline_paused_count() const;  // inline answers over budget (each paused inlining)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
