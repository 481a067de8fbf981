#include "native-agent/upstream/http_transport.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "native-agent/base/clock.h"
#include "native-agent/upstream/http_transport_impl.h"
#include "shared/ascii.h"
#include "shared/json.h"

namespace quiver {
namespace {

constexpr std::size_t kErrorSnippetBytes = 200;
constexpr int64_t kSocketTimeoutSlackMs = 100;
constexpr const char* kUserAgent = "quiver-agent";
constexpr const char* kRedacted = "[redacted]";

}  // namespace

// ---- secrets never leave --------------------------------------------------------------------

// Replaces every secret (header values, their long words, the session id) in `text`. Call without
// holding `mu`.
std::string HttpTransport::Impl::scrub(std::string text) const {
  std::vector<std::string> terms = secret_terms;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!session_id.empty()) terms.push_back(session_id);
  }
  // Longest first, so a value is replaced whole before its words are looked for.
  std::sort(terms.begin(), terms.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& term : terms) {
    if (term.empty()) continue;
    std::size_t at = 0;
    while ((at = text.find(term, at)) != std::string::npos) {
      text.replace(at, term.size(), kRedacted);
      at += std::char_traits<char>::length(kRedacted);
    }
  }
  return redactor ? redactor->redact(text) : text;
}

Error HttpTransport::Impl::fail(ErrorCode code, const std::string& message) const {
  return Error(code, scrub(message));
}

// What a server said in an error body: scrubbed first, then cut, so no secret is half-shown.
std::string HttpTransport::Impl::snippet(const std::string& body) const {
  if (body.empty()) return std::string();
  return ": " + clip_server_text(scrub(body), kErrorSnippetBytes);
}

// ---- connection -----------------------------------------------------------------------------

Result<std::unique_ptr<httplib::ClientImpl>> HttpTransport::Impl::make_client(
    bool keep_alive) const {
  return make_pinned_client(url, pinned_address, keep_alive);
}

// Resolves and checks the host once, then builds the POST client.
Status HttpTransport::Impl::ensure_target(int64_t deadline_ms) {
  if (post_client) return Status::Ok();
  int64_t left = deadline_ms - steady_ms();
  if (left <= 0)
    return fail(ErrorCode::kTimeout, "deadline passed before connecting to " + where());
  UrlGuardOptions guard;
  guard.allow_private_addresses = options.allow_private_addresses;
  HostResolver resolver = options.resolver ? options.resolver : HostResolver(resolve_host_system);
  auto target = guard_url(url, guard, resolver, left);
  if (!target.ok()) return scrubbed(target.error());
  pinned_address = target->addresses.front();
  auto client = make_client(/*keep_alive=*/true);
  if (!client.ok()) return client.error();
  post_client = std::move(*client);
  return Status::Ok();
}

// Headers of every request: the secrets, our user agent, the session and protocol version.
httplib::Headers HttpTransport::Impl::base_headers(bool with_session, bool* sent_session) const {
  httplib::Headers headers;
  bool user_agent = false;
  for (const HttpHeader& h : options.secret_headers) {
    headers.emplace(h.name, h.value);
    if (ascii_iequals(h.name, "user-agent")) user_agent = true;
  }
  if (!user_agent) headers.emplace("User-Agent", kUserAgent);
  std::lock_guard<std::mutex> lock(mu);
  if (with_session && !session_id.empty()) headers.emplace("Mcp-Session-Id", session_id);
  if (sent_session != nullptr) *sent_session = with_session && !session_id.empty();
  if (!protocol_version.empty()) headers.emplace("MCP-Protocol-Version", protocol_version);
  return headers;
}

// ---- replies --------------------------------------------------------------------------------

bool HttpTransport::Impl::on_headers(Exchange& ex, const httplib::Response& res) {
  ex.reader.begin_response(res.status, res.get_header_value("Content-Type"));
  if ((res.status == 401 || res.status == 403) && options.on_auth_challenge) {
    constexpr std::size_t kMaxChallengeBytes = 4096;
    std::string challenge = res.get_header_value("WWW-Authenticate");
    if (challenge.size() > kMaxChallengeBytes) challenge.resize(kMaxChallengeBytes);
    options.on_auth_challenge(res.status, challenge);
  }
  if (res.status < 200 || res.status > 299 || !ex.is_initialize) return true;
  auto sid = reply_session_id(res.get_header_value("Mcp-Session-Id"), where());
  if (!sid.ok()) {
    ex.failure = scrubbed(sid.error());
    return false;
  }
  if (!sid->empty()) ex.new_session_id = std::move(*sid);
  return true;
}

bool HttpTransport::Impl::on_body(Exchange& ex, const char* data, std::size_t n) {
  if (steady_ms() >= ex.deadline_ms) {
    ex.failure = fail(ErrorCode::kTimeout, "the reply of " + where() + " was not complete in time");
    return false;
  }
  switch (ex.reader.feed(std::string_view(data, n))) {
    case ReplyReader::Feed::kContinue:
      return true;
    case ReplyReader::Feed::kAnswered:
      ex.done = true;  // every answer is in: the rest of the stream is not ours to wait for
      return false;
    case ReplyReader::Feed::kBodyCut:
      return false;
    case ReplyReader::Feed::kFailed:
      ex.failure = scrubbed(*ex.reader.failure());
      return false;
  }
  return false;
}

// Runs one request on the POST client under the watchdog. Ok when a response (any status) was
// read or when reading stopped because every answer was in.
Status HttpTransport::Impl::run_exchange(const std::string& method, httplib::Headers headers,
                                         const std::string& body, Exchange& ex) {
  ex.failure.reset();
  int64_t left = ex.deadline_ms - steady_ms();
  if (left <= 0) return fail(ErrorCode::kTimeout, "no time left for " + where());
  // The socket timeouts run a little past the deadline: the watchdog ends the exchange at the
  // deadline itself, so every way of running out of time reports kTimeout alike.
  int64_t socket_ms = left + kSocketTimeoutSlackMs;
  set_client_timeouts(*post_client, socket_ms, socket_ms, socket_ms);
  httplib::Request req;
  req.method = method;
  req.path = url.target;
  req.headers = std::move(headers);
  req.body = body;
  req.response_handler = [&](const httplib::Response& res) { return on_headers(ex, res); };
  req.content_receiver = [&](const char* data, std::size_t n, uint64_t, uint64_t) {
    return on_body(ex, data, n);
  };
  ex.reader.begin_response(0, std::string_view());
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  watchdog.arm(post_client.get(), ex.deadline_ms);
  bool ok = send_request(*post_client, req, res, err);
  bool fired = watchdog.disarm();
  if (ex.done) return Status::Ok();
  if (ex.failure) return *ex.failure;
  if (fired || (!ok && steady_ms() >= ex.deadline_ms)) {
    return fail(ErrorCode::kTimeout, where() + " did not answer in time");
  }
  if (!ok && !(err == httplib::Error::Canceled && ex.reader.body_cut())) {
    return scrubbed(http_client_error(err, where()));
  }
  return Status::Ok();
}

Status HttpTransport::Impl::carry_out(Exchange& ex, const ReplyReader::Next& next,
                                      HttpExchangeKind kind) {
  deliver(ex.reader);
  switch (next.action) {
    case ReplyReader::Next::Action::kDone:
      return Status::Ok();
    case ReplyReader::Next::Action::kResume:
      return resume(ex);
    case ReplyReader::Next::Action::kStatusError:
      return status_error(ex, kind);
    case ReplyReader::Next::Action::kFail:
      break;
  }
  return scrubbed(*next.error);
}

// An HTTP status outside 2xx as an error. A dead session also ends the transport.
Error HttpTransport::Impl::status_error(Exchange& ex, HttpExchangeKind kind) {
  const int status = ex.reader.status();
  Error e = scrubbed(
      http_status_error(kind, status, ex.sent_session, where(), snippet(ex.reader.body_text())));
  if (classify_http_status(kind, status, ex.sent_session) == HttpStatusClass::kSessionExpired) {
    end_session(e);
  }
  return e;
}

void HttpTransport::Impl::end_session(const Error& e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    expired = true;
    if (!fatal) fatal = e;
  }
  cv.notify_all();
  stop_stream();
}

void HttpTransport::Impl::deliver(ReplyReader& reader) {
  std::vector<std::string> messages = reader.take_messages();
  if (messages.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (std::string& m : messages) queue.push_back(TransportMessage{std::move(m)});
  }
  cv.notify_all();
}

void HttpTransport::Impl::set_fatal(const Error& e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!fatal) fatal = e;
  }
  cv.notify_all();
}

Status HttpTransport::Impl::unusable() const {
  std::lock_guard<std::mutex> lock(mu);
  if (fatal) return *fatal;
  if (closed) return Error(ErrorCode::kTransport, "the transport to " + where() + " is closed");
  return Status::Ok();
}

// ---- send -----------------------------------------------------------------------------------

Status HttpTransport::Impl::send(const std::string& message_text, int64_t timeout_ms) {
  if (timeout_ms <= 0) return Error(ErrorCode::kInvalidArgument, "timeout_ms must be positive");
  Status state = unusable();
  if (!state.ok()) return state;

  auto parsed = parse_json(message_text, options.max_reply_bytes);
  if (!parsed.ok()) {
    return Error(ErrorCode::kInvalidArgument,
                 "the message to send is not JSON (" + parsed.error().message + ")");
  }
  OutgoingMessage outgoing = describe_outgoing(*parsed);
  if (outgoing.is_listen) {
    return start_listen(message_text, *outgoing.request_ids.begin(), timeout_ms);
  }
  Exchange ex(where(), options.max_reply_bytes, std::move(outgoing.request_ids));
  ex.deadline_ms = steady_ms() + timeout_ms;
  ex.is_initialize = outgoing.is_initialize;

  Status target = ensure_target(ex.deadline_ms);
  if (!target.ok()) return target;

  // initialize opens a new session: it carries no session id.
  httplib::Headers headers = base_headers(!ex.is_initialize, &ex.sent_session);
  headers.emplace("Content-Type", "application/json");
  headers.emplace("Accept", "application/json, text/event-stream");
  for (HttpHeader& h : mcp_standard_headers(*parsed)) {
    headers.emplace(std::move(h.name), std::move(h.value));
  }

  Status st = run_exchange("POST", std::move(headers), message_text, ex);
  if (!ex.new_session_id.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    session_id = ex.new_session_id;
  }
  deliver(ex.reader);
  if (!st.ok()) return st;
  if (ex.done) return Status::Ok();
  ReplyReader::Next next = ex.reader.after_post(ex.sent_session);
  return carry_out(ex, next, HttpExchangeKind::kPost);
}

// SEP-1699: the server may close a POST's event stream before the response once it has sent an
// event id; the client then polls with GET + Last-Event-ID after the server's `retry:`.
Status HttpTransport::Impl::resume(Exchange& ex) {
  for (int attempt = 1;; ++attempt) {
    ReplyReader::Next plan = ex.reader.plan_resume(
        attempt, ex.deadline_ms - steady_ms(), ex.reader.sse().retry(), options.stream_min_retry_ms,
        options.stream_initial_backoff_ms, options.stream_max_backoff_ms);
    if (plan.action != ReplyReader::Next::Action::kResume) return scrubbed(*plan.error);
    std::this_thread::sleep_for(std::chrono::milliseconds(plan.delay_ms));
    httplib::Headers headers = base_headers(true, &ex.sent_session);
    headers.emplace("Accept", "text/event-stream");
    headers.emplace("Last-Event-ID", ex.reader.sse().last_event_id());
    Status st = run_exchange("GET", std::move(headers), std::string(), ex);
    deliver(ex.reader);
    if (!st.ok()) return st;
    if (ex.done) return Status::Ok();
    ReplyReader::Next next = ex.reader.after_resume(ex.sent_session);
    if (next.action != ReplyReader::Next::Action::kResume) {
      return carry_out(ex, next, HttpExchangeKind::kResume);
    }
  }
}

// ---- receive / close ------------------------------------------------------------------------

Result<std::vector<TransportMessage>> HttpTransport::Impl::receive(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)),
              [&] { return !queue.empty() || fatal.has_value() || closed; });
  if (!queue.empty()) {
    std::vector<TransportMessage> out;
    out.reserve(queue.size());
    for (TransportMessage& m : queue) out.push_back(std::move(m));
    queue.clear();
    stream_bytes_queued = 0;
    return out;
  }
  if (fatal) return *fatal;
  if (closed) return Error(ErrorCode::kTransport, "the transport to " + where() + " is closed");
  return std::vector<TransportMessage>{};
}

void HttpTransport::Impl::close() {
  if (close_started) return;
  close_started = true;
  stop_stream();
  std::string sid;
  bool dead = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
    sid = session_id;
    dead = expired;
  }
  cv.notify_all();
  if (sid.empty() || dead || options.close_timeout_ms <= 0) return;
  Exchange ex(where(), options.max_reply_bytes, {});
  ex.deadline_ms = steady_ms() + options.close_timeout_ms;
  if (!ensure_target(ex.deadline_ms).ok()) return;
  // Any answer is fine: 200/204 ended it, 405 means the server does not let clients end
  // sessions, 404 means it was gone already.
  (void)run_exchange("DELETE", base_headers(true, &ex.sent_session), std::string(), ex);
}

std::string HttpTransport::Impl::describe() const {
  std::string out = "streamable HTTP " + url.redacted() + " (";
  if (!options.secret_headers.empty()) {
    out += "headers:";
    for (std::size_t i = 0; i < options.secret_headers.size(); ++i) {
      out += (i == 0 ? " " : ", ") + options.secret_headers[i].name;
    }
    out += "; ";
  }
  std::lock_guard<std::mutex> lock(mu);
  out += expired ? "session expired" : session_id.empty() ? "no session" : "in a session";
  if (!protocol_version.empty()) out += "; protocol " + protocol_version;
  if (options.allow_private_addresses) out += "; private addresses allowed";
  if (closed) out += "; closed";
  return out + ")";
}

// ---- HttpTransport ------------------------------------------------------------------------------

Result<std::unique_ptr<HttpTransport>> HttpTransport::create(HttpTransportOptions options) {
  try {
    auto url = parse_http_url(options.url);
    if (!url.ok()) return url.error();
    if (Status headers = check_configured_headers(options.secret_headers); !headers.ok()) {
      return headers.error();
    }
    if (!options.session_id.empty() && !is_visible_ascii(options.session_id, kMaxSessionIdBytes)) {
      return Error(ErrorCode::kInvalidArgument, "session_id must be visible ASCII");
    }
    if (options.max_reply_bytes == 0 || options.max_pending_bytes == 0 ||
        options.stream_min_retry_ms < 0 || options.stream_initial_backoff_ms <= 0 ||
        options.stream_max_backoff_ms < options.stream_min_retry_ms ||
        options.stream_max_failures < 1 || options.stream_connect_timeout_ms <= 0 ||
        options.stream_idle_timeout_ms <= 0) {
      return Error(ErrorCode::kInvalidArgument, "invalid HTTP transport limits");
    }
    ignore_sigpipe_once();
    auto impl = std::make_unique<Impl>();
    impl->url = std::move(*url);
    impl->secret_terms = secret_header_terms(options.secret_headers);
    impl->redactor = options.redactor;
    impl->session_id = options.session_id;
    impl->options = std::move(options);
    return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
  } catch (...) {
    return Error(ErrorCode::kInternal, "could not create the HTTP transport");
  }
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpTransport::~HttpTransport() { close(); }

Status HttpTransport::send(const std::string& message_text, int64_t timeout_ms) {
  try {
    return impl_->send(message_text, timeout_ms);
  } catch (...) {
    return Error(ErrorCode::kInternal, "unexpected failure in the HTTP transport");
  }
}

Result<std::vector<TransportMessage>> HttpTransport::receive(int64_t timeout_ms) {
  try {
    return impl_->receive(timeout_ms);
  } catch (...) {
    return Error(ErrorCode::kInternal, "unexpected failure in the HTTP transport");
  }
}

void HttpTransport::set_protocol_version(const std::string& version) {
  // A header value from the server's initialize result: refuse anything that could break the
  // header line (the owner checks the version against the ones it speaks anyway). Empty unsets
  // it: a legacy initialize after a 2026-07-28 probe must not carry the probe's version.
  if (!version.empty() && !is_visible_ascii(version, kMaxProtocolVersionBytes)) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->protocol_version = version;
}

void HttpTransport::close() {
  try {
    impl_->close();
  } catch (...) {
  }
}

std::string HttpTransport::describe() const {
  try {
    return impl_->describe();
  } catch (...) {
    return "streamable HTTP";
  }
}

Result<bool> HttpTransport::open_notification_stream(int64_t timeout_ms) {
  try {
    return impl_->open_stream(timeout_ms);
  } catch (...) {
    return Error(ErrorCode::kInternal, "unexpected failure in the HTTP transport");
  }
}

int64_t HttpTransport::notification_stream_opens() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stream_opens;
}

bool HttpTransport::session_expired() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->expired;
}

bool HttpTransport::has_session() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return !impl_->session_id.empty() && !impl_->expired;
}

}  // namespace quiver
