// The listen stream of HttpTransport, on a thread of its own: the GET stream for the server's
// own messages, or the event stream of a subscriptions/listen POST. When each connection ends,
// shared/streamable_http.h's StreamReconnector decides what comes next.
#include <chrono>
#include <utility>

#include "native-agent/base/clock.h"
#include "native-agent/upstream/http_transport_impl.h"
#include "shared/json.h"

namespace quiver {

// subscriptions/listen: its answer is a long-lived event stream, read on the stream thread like
// the GET stream. A JSON answer (an error, or a server that ends it at once) is queued like any
// reply. A stream that breaks before the request was answered is POSTed again.
Status HttpTransport::Impl::start_listen(const std::string& message_text, const std::string& id,
                                         int64_t timeout_ms) {
  stop_stream();
  {
    std::lock_guard<std::mutex> lock(mu);
    listen_body = message_text;
    listen_id = id;
    stream_state = StreamState::kIdle;
  }
  Result<bool> opened = open_stream(timeout_ms);
  if (!opened.ok()) return opened.error();
  return Status::Ok();  // open, or answered at once (the answer is queued)
}

Result<bool> HttpTransport::Impl::open_stream(int64_t timeout_ms) {
  if (timeout_ms <= 0) return Error(ErrorCode::kInvalidArgument, "timeout_ms must be positive");
  Status state = unusable();
  if (!state.ok()) return state.error();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stream_state == StreamState::kOpen) return true;
    if (stream_state == StreamState::kNotOffered) return false;
  }
  const int64_t deadline_ms = steady_ms() + timeout_ms;
  Status target = ensure_target(deadline_ms);
  if (!target.ok()) return target.error();
  stop_stream();  // a failed earlier attempt: join its thread
  auto client = make_client(/*keep_alive=*/false);
  if (!client.ok()) return client.error();
  {
    std::lock_guard<std::mutex> lock(mu);
    stream_client = std::move(*client);
    stream_state = StreamState::kConnecting;
    stream_open_error.reset();
    stream_stop = false;
    stream_running = true;
  }
  try {
    stream_thread = std::thread([this, timeout_ms] { stream_main(timeout_ms); });
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    stream_running = false;
    stream_state = StreamState::kIdle;
    return Error(ErrorCode::kInternal, "could not start the notification stream thread");
  }
  StreamState outcome;
  std::optional<Error> open_error;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(deadline_ms - steady_ms()),
                [&] { return stream_state != StreamState::kConnecting; });
    outcome = stream_state;
    open_error = stream_open_error;
  }
  switch (outcome) {
    case StreamState::kOpen:
      return true;
    case StreamState::kNotOffered:
      stop_stream();
      return false;
    case StreamState::kFailed:
      stop_stream();
      return open_error ? *open_error
                        : fail(ErrorCode::kTransport, "the GET stream of " + where() + " failed");
    default:
      stop_stream();
      {
        std::lock_guard<std::mutex> lock(mu);
        stream_state = StreamState::kIdle;
      }
      return fail(ErrorCode::kTimeout, where() + " did not open the GET stream within " +
                                           std::to_string(timeout_ms) + " ms");
  }
}

// Stops the listen-stream thread and waits for it. Owner thread.
void HttpTransport::Impl::stop_stream() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!stream_thread.joinable()) return;
    stream_stop = true;
  }
  cv.notify_all();
  for (;;) {
    httplib::ClientImpl* client = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!stream_running) break;
      client = stream_client.get();
    }
    // stop() is cpp-httplib's thread-safe way to break a request in flight. Repeated, since the
    // thread may be between requests when it is first called.
    client->stop();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(10), [&] { return !stream_running; });
  }
  stream_thread.join();
  std::lock_guard<std::mutex> lock(mu);
  stream_client.reset();
}

void HttpTransport::Impl::stream_main(int64_t first_timeout_ms) {
  try {
    stream_loop(first_timeout_ms);
  } catch (...) {
    set_fatal(Error(ErrorCode::kInternal, "the notification stream of " + where() + " failed"));
    std::lock_guard<std::mutex> lock(mu);
    if (stream_state == StreamState::kConnecting) stream_state = StreamState::kFailed;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stream_running = false;
  }
  cv.notify_all();
}

bool HttpTransport::Impl::stopping() const {
  std::lock_guard<std::mutex> lock(mu);
  return stream_stop;
}

void HttpTransport::Impl::stream_loop(int64_t first_timeout_ms) {
  std::string post_body;
  std::set<std::string> listen_pending;
  {
    std::lock_guard<std::mutex> lock(mu);
    post_body = listen_body;
    if (!post_body.empty()) listen_pending.insert(listen_id);
  }
  const bool post = !post_body.empty();
  ReplyReader reader(where(), options.max_reply_bytes, std::move(listen_pending),
                     ReplyReader::Mode::kListen);
  ReconnectBounds bounds;
  bounds.min_retry_ms = options.stream_min_retry_ms;
  bounds.initial_backoff_ms = options.stream_initial_backoff_ms;
  bounds.max_backoff_ms = options.stream_max_backoff_ms;
  bounds.max_failures = options.stream_max_failures;
  StreamReconnector reconnector(bounds);
  for (bool first = true;; first = false) {
    if (stopping()) return;
    StreamAttempt attempt;
    attempt.first = first;
    httplib::Headers headers = base_headers(true, &attempt.sent_session);
    if (post) {
      headers.emplace("Content-Type", "application/json");
      headers.emplace("Accept", "application/json, text/event-stream");
      auto listen_message = parse_json(post_body, options.max_reply_bytes);
      if (listen_message.ok()) {
        for (HttpHeader& h : mcp_standard_headers(*listen_message)) {
          headers.emplace(std::move(h.name), std::move(h.value));
        }
      }
    } else {
      headers.emplace("Accept", "text/event-stream");
      if (!reader.sse().last_event_id().empty()) {
        headers.emplace("Last-Event-ID", reader.sse().last_event_id());
      }
    }
    int64_t connect_ms = first ? first_timeout_ms : options.stream_connect_timeout_ms;
    httplib::ClientImpl* client = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      client = stream_client.get();
    }
    // A quiet stream is normal: reads may wait up to the idle timeout, then we reconnect.
    set_client_timeouts(*client, connect_ms, options.stream_idle_timeout_ms, connect_ms);

    bool json_answer = false;  // listen answered with one JSON body
    std::string json_body;
    httplib::Request req;
    req.method = post ? "POST" : "GET";
    req.path = url.target;
    req.headers = std::move(headers);
    if (post) req.body = post_body;
    req.response_handler = [&](const httplib::Response& res) {
      const std::string content_type = res.get_header_value("Content-Type");
      attempt.status = res.status;
      attempt.is_stream = reply_body_kind(res.status, content_type) == ReplyBody::kSse;
      json_answer =
          post && !attempt.is_stream && http_media_type(content_type) == "application/json";
      if (json_answer) return true;
      if (!attempt.is_stream) return false;  // nothing to read from a refusal
      reader.begin_response(res.status, content_type);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stream_state == StreamState::kConnecting) stream_state = StreamState::kOpen;
        if (!post) ++stream_opens;
      }
      cv.notify_all();
      return !stopping();
    };
    req.content_receiver = [&](const char* data, std::size_t n, uint64_t, uint64_t) {
      if (json_answer) {
        json_body.append(data, n);
        return json_body.size() <= options.max_reply_bytes;
      }
      const bool failed = reader.feed(std::string_view(data, n)) == ReplyReader::Feed::kFailed;
      if (failed) attempt.read_failure = reader.failure();
      std::vector<std::string> got = reader.take_messages();
      if (!got.empty()) {
        attempt.delivered = true;
        {
          std::lock_guard<std::mutex> lock(mu);
          for (std::string& m : got) {
            stream_bytes_queued += m.size();
            queue.push_back(TransportMessage{std::move(m)});
          }
          if (stream_bytes_queued > options.max_pending_bytes && !attempt.read_failure) {
            attempt.read_failure = Error(ErrorCode::kTooLarge,
                                         "more than " + std::to_string(options.max_pending_bytes) +
                                             " bytes of notifications from " + where() +
                                             " wait unread: receive() is not called");
          }
        }
        cv.notify_all();
      }
      return !attempt.read_failure && !stopping();
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    bool ok = send_request(*client, req, res, err);
    (void)reader.sse().finish();  // an event cut off by the disconnect is discarded, as SSE says
    if (stopping()) return;
    if (json_answer && !attempt.read_failure) {
      Status st = reader.accept_text(json_body);
      std::vector<std::string> got = reader.take_messages();
      std::lock_guard<std::mutex> lock(mu);
      if (st.ok()) {
        for (std::string& m : got) queue.push_back(TransportMessage{std::move(m)});
      } else if (!fatal) {
        fatal = Error(st.error().code, scrub(st.error().message));
      }
      if (stream_state == StreamState::kConnecting) stream_state = StreamState::kNotOffered;
      cv.notify_all();
      return;
    }
    if (post && reader.pending().empty()) return;  // the subscription was answered: it is over

    if (attempt.status == 0) {
      attempt.no_response = http_client_error(ok ? httplib::Error::Unknown : err, where());
    }
    StreamReconnector::Step step = reconnector.after(attempt, reader.sse().retry(), where());
    switch (step.action) {
      case StreamReconnector::Step::Action::kNotOffered: {
        std::lock_guard<std::mutex> lock(mu);
        stream_state = StreamState::kNotOffered;
        cv.notify_all();
        return;
      }
      case StreamReconnector::Step::Action::kOpenFailed: {
        std::lock_guard<std::mutex> lock(mu);
        stream_state = StreamState::kFailed;
        stream_open_error = step.error;
        if (step.session_expired) {
          expired = true;
          if (!fatal) fatal = stream_open_error;
        }
        cv.notify_all();
        return;
      }
      case StreamReconnector::Step::Action::kLost:
        if (step.session_expired) {
          std::lock_guard<std::mutex> lock(mu);
          expired = true;
        }
        set_fatal(scrubbed(*step.error));
        return;
      case StreamReconnector::Step::Action::kReconnect:
        break;
    }
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, std::chrono::milliseconds(step.delay_ms), [&] { return stream_stop; })) {
      return;
    }
  }
}

}  // namespace quiver
