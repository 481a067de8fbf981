// The state behind HttpTransport, shared by its two source files: http_transport.cpp (requests,
// replies, receive, close) and http_listen_stream.cpp (the listen stream's thread). Private to
// those files. The MCP rules it carries out are in shared/streamable_http.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "native-agent/upstream/http_client.h"
#include "native-agent/upstream/http_transport.h"
#include "shared/streamable_http.h"

namespace quiver {

struct HttpTransport::Impl {
  // One POST (and the GETs that resume its stream) and what came of it.
  struct Exchange {
    Exchange(std::string where, std::size_t max_reply_bytes, std::set<std::string> pending)
        : reader(std::move(where), max_reply_bytes, std::move(pending)) {}
    int64_t deadline_ms = 0;  // steady clock
    bool is_initialize = false;
    bool sent_session = false;
    ReplyReader reader;
    bool done = false;             // every response arrived; the rest of the stream is unread
    std::optional<Error> failure;  // why reading was stopped
    std::string new_session_id;
  };

  enum class StreamState { kIdle, kConnecting, kOpen, kNotOffered, kFailed };

  HttpTransportOptions options;
  HttpUrl url;
  std::vector<std::string> secret_terms;     // header values and their longer words
  std::shared_ptr<const Redactor> redactor;  // every configured secret (may be null)

  // Owner thread only.
  std::unique_ptr<httplib::ClientImpl> post_client;
  std::string pinned_address;
  Watchdog watchdog;
  bool close_started = false;

  // Shared with the listen-stream thread, behind `mu`.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::string session_id;
  std::string protocol_version;
  std::deque<TransportMessage> queue;  // what `receive` hands out, in arrival order
  std::size_t stream_bytes_queued = 0;
  std::optional<Error> fatal;
  bool closed = false;
  bool expired = false;
  StreamState stream_state = StreamState::kIdle;
  int64_t stream_opens = 0;  // the GET stream's successful (re)connections
  std::optional<Error> stream_open_error;
  bool stream_stop = false;
  bool stream_running = false;
  std::unique_ptr<httplib::ClientImpl> stream_client;  // created before, destroyed after the thread
  // subscriptions/listen (2026-07-28): when set, the stream thread POSTs this request instead of
  // opening the GET stream, and ends once the request is answered. Written by the owner thread
  // while no stream thread runs.
  std::string listen_body;
  std::string listen_id;  // its JSON-RPC id, as JSON text
  std::thread stream_thread;

  // ---- http_transport.cpp ---------------------------------------------------------------------
  std::string scrub(std::string text) const;
  Error fail(ErrorCode code, const std::string& message) const;
  Error scrubbed(const Error& e) const { return fail(e.code, e.message); }
  std::string snippet(const std::string& body) const;
  std::string where() const { return url.redacted(); }
  Result<std::unique_ptr<httplib::ClientImpl>> make_client(bool keep_alive) const;
  Status ensure_target(int64_t deadline_ms);
  httplib::Headers base_headers(bool with_session, bool* sent_session) const;
  bool on_headers(Exchange& ex, const httplib::Response& res);
  bool on_body(Exchange& ex, const char* data, std::size_t n);
  Status run_exchange(const std::string& method, httplib::Headers headers, const std::string& body,
                      Exchange& ex);
  Status carry_out(Exchange& ex, const ReplyReader::Next& next, HttpExchangeKind kind);
  Error status_error(Exchange& ex, HttpExchangeKind kind);
  void end_session(const Error& e);
  void deliver(ReplyReader& reader);
  void set_fatal(const Error& e);
  Status unusable() const;
  Status send(const std::string& message_text, int64_t timeout_ms);
  Status resume(Exchange& ex);
  Result<std::vector<TransportMessage>> receive(int64_t timeout_ms);
  void close();
  std::string describe() const;

  // ---- http_listen_stream.cpp -----------------------------------------------------------------
  Status start_listen(const std::string& message_text, const std::string& id, int64_t timeout_ms);
  Result<bool> open_stream(int64_t timeout_ms);
  void stop_stream();
  void stream_main(int64_t first_timeout_ms);
  bool stopping() const;
  void stream_loop(int64_t first_timeout_ms);
};

}  // namespace quiver
