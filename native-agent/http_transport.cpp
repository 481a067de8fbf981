#include "native-agent/http_transport.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <httplib.h>
#include <signal.h>

#include "shared/json.h"
#include "shared/jsonrpc.h"

namespace quiver {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kErrorBodyKeep = 4096;  // bytes of an error body kept for the message
constexpr std::size_t kErrorSnippetBytes = 200;
constexpr std::size_t kMaxSessionIdBytes = 1024;
constexpr int kMaxResumptions = 32;  // SEP-1699 reconnections for one POST
constexpr int64_t kSocketTimeoutSlackMs = 100;
constexpr const char* kUserAgent = "quiver-agent";
constexpr const char* kRedacted = "[redacted]";

int64_t ms_until(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

void set_timeouts(httplib::ClientImpl& client, int64_t connect_ms, int64_t read_ms,
                  int64_t write_ms) {
  auto split = [](int64_t ms, auto&& set) {
    ms = std::max<int64_t>(ms, 1);
    set(static_cast<time_t>(ms / 1000), static_cast<time_t>((ms % 1000) * 1000));
  };
  split(connect_ms, [&](time_t s, time_t us) { client.set_connection_timeout(s, us); });
  split(read_ms, [&](time_t s, time_t us) { client.set_read_timeout(s, us); });
  split(write_ms, [&](time_t s, time_t us) { client.set_write_timeout(s, us); });
}

std::string to_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// "text/event-stream; charset=utf-8" -> "text/event-stream"
std::string media_type(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  std::size_t b = t.find_first_not_of(" \t");
  std::size_t e = t.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : to_lower(t.substr(b, e - b + 1));
}

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool valid_header_value(const std::string& v) {
  for (char c : v) {
    auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return false;
  }
  return true;
}

// Session ids and protocol versions: visible ASCII only (the spec's rule for session ids).
bool visible_ascii(const std::string& s, std::size_t max_bytes) {
  if (s.empty() || s.size() > max_bytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
}

bool is_managed_header(const std::string& name) {
  static const char* const kManaged[] = {
      "accept",
      "content-type",
      "content-length",
      "host",
      "mcp-session-id",
      "last-event-id",
      "mcp-protocol-version",
      "mcp-method",
      "mcp-name",
      "connection",
      "transfer-encoding",
      "content-encoding",
      "te",
      "upgrade",
  };
  std::string n = to_lower(name);
  if (n.rfind("mcp-param-", 0) == 0) return true;  // SEP-2243 tool-parameter headers
  return std::any_of(std::begin(kManaged), std::end(kManaged),
                     [&](const char* m) { return n == m; });
}

std::string base64_encode(std::string_view data) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    uint32_t v = (static_cast<unsigned char>(data[i]) << 16) |
                 (static_cast<unsigned char>(data[i + 1]) << 8) |
                 static_cast<unsigned char>(data[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < data.size()) {
    uint32_t v = static_cast<unsigned char>(data[i]) << 16;
    if (i + 1 < data.size()) v |= static_cast<unsigned char>(data[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Control characters in server text become spaces, so an error message stays one line.
std::string one_line(std::string s) {
  for (char& c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return s;
}

// Cuts at `max` bytes without splitting a UTF-8 sequence.
std::string truncate_utf8(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  s.resize(cut);
  return s + "\xE2\x80\xA6";
}

// Stops an exchange at its deadline however the server stalls (slow headers, drip-fed body):
// cpp-httplib's timeouts bound each socket operation, not the whole request. ClientImpl::stop()
// is the library's thread-safe way to break a request in flight (it shuts the socket down).
class Watchdog {
 public:
  Watchdog() : thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void arm(httplib::ClientImpl* client, Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mu_);
    client_ = client;
    deadline_ = deadline;
    fired_ = false;
    cv_.notify_all();
  }

  // True when the deadline passed while armed (the request was stopped).
  bool disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    client_ = nullptr;
    return fired_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      if (client_ == nullptr) {
        cv_.wait(lock);
      } else if (Clock::now() >= deadline_) {
        client_->stop();
        fired_ = true;
        client_ = nullptr;
      } else {
        cv_.wait_until(lock, deadline_);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  httplib::ClientImpl* client_ = nullptr;
  Clock::time_point deadline_;
  bool fired_ = false;
  bool quit_ = false;
  std::thread thread_;  // last: starts after the members it reads are initialized
};

void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

std::string mcp_header_value(std::string_view value) {
  bool plain = !value.empty() && value.front() != ' ' && value.back() != ' ';
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) plain = false;
  }
  // A value that reads as the encoding itself is encoded, so the server decodes it back to itself.
  if (value.size() >= 11 && value.substr(0, 9) == "=?base64?" &&
      value.substr(value.size() - 2) == "?=") {
    plain = false;
  }
  if (plain || value.empty()) return std::string(value);
  return "=?base64?" + base64_encode(value) + "?=";
}

std::vector<HttpHeader> mcp_standard_headers(const Json& message) {
  std::vector<HttpHeader> out;
  if (!message.is_object()) return out;
  const Json* method = json_field(message, "method");
  if (method == nullptr || !method->is_string()) return out;
  const std::string& m = method->get_ref<const std::string&>();
  out.push_back({"Mcp-Method", mcp_header_value(m)});
  const char* name_field = nullptr;
  if (m == "tools/call" || m == "prompts/get") {
    name_field = "name";
  } else if (m == "resources/read" || m == "resources/subscribe" || m == "resources/unsubscribe") {
    name_field = "uri";
  }
  if (name_field != nullptr) {
    const Json* params = json_field(message, "params");
    if (params != nullptr) {
      if (auto name = json_string(*params, name_field)) {
        out.push_back({"Mcp-Name", mcp_header_value(*name)});
      }
    }
  }
  return out;
}

struct HttpTransport::Impl {
  // One HTTP exchange (a POST, or a GET that resumes its stream) and what came of it.
  struct Exchange {
    enum class Body { kNone, kJson, kSse, kOther };
    Clock::time_point deadline;
    std::set<std::string> pending;  // ids (as JSON text) of requests still awaiting a response
    bool expects_response = false;  // the message held at least one request
    bool is_initialize = false;
    bool sent_session = false;
    SseParser* sse = nullptr;  // one parser across resumptions: it keeps the last event id
    std::size_t received = 0;  // reply bytes so far, across resumptions
    std::string unreadable;    // why the first unreadable message could not be read, if any
    // Per HTTP request:
    int status = 0;
    std::string content_type;
    Body body = Body::kNone;
    std::string buffer;            // a JSON body, or the head of any other body
    bool body_cut = false;         // stopped reading an error body after its head
    bool done = false;             // every response arrived; the rest of the stream is unread
    std::optional<Error> failure;  // why reading was stopped
    std::string new_session_id;
    std::vector<TransportMessage> messages;

    void reset_request() {
      status = 0;
      content_type.clear();
      body = Body::kNone;
      buffer.clear();
      body_cut = false;
      failure.reset();
    }
  };

  struct Queued {
    TransportMessage message;
    bool from_stream = false;
  };

  enum class StreamState { kIdle, kConnecting, kOpen, kNotOffered, kFailed };

  HttpTransportOptions options;
  HttpUrl url;
  std::vector<std::string> secret_terms;  // header values and their longer words
  std::shared_ptr<const Redactor> redactor;  // every configured secret (may be null)

  // Owner thread only.
  std::unique_ptr<httplib::ClientImpl> post_client;
  std::string pinned_address;
  Watchdog watchdog;
  bool close_started = false;

  // Shared with the notification-stream thread, behind `mu`.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::string session_id;
  std::string protocol_version;
  std::deque<Queued> queue;
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

  // ---- secrets never leave ------------------------------------------------------------------

  // Replaces every secret (header values, their long words, the session id) in `text`. Call
  // without holding `mu`.
  std::string scrub(std::string text) const {
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

  Error fail(ErrorCode code, const std::string& message) const {
    return Error(code, scrub(message));
  }

  // What a server said in an error body: scrubbed first, then cut, so no secret is half-shown.
  std::string snippet(const std::string& body) const {
    if (body.empty()) return std::string();
    return ": " + truncate_utf8(one_line(scrub(body)), kErrorSnippetBytes);
  }

  std::string where() const { return url.redacted(); }

  // ---- connection ---------------------------------------------------------------------------

  Result<std::unique_ptr<httplib::ClientImpl>> make_client(bool keep_alive) const {
    std::unique_ptr<httplib::ClientImpl> client;
    if (url.scheme == "https") {
      client = std::make_unique<httplib::SSLClient>(url.host, url.port);
    } else {
      client = std::make_unique<httplib::ClientImpl>(url.host, url.port);
    }
    if (!client->is_valid()) {
      return Error(ErrorCode::kInternal, "could not set up an HTTP client for " + where());
    }
    // Dial exactly the address the guard checked: the name is not resolved again.
    client->set_hostname_addr_map({{url.host, pinned_address}});
    client->set_follow_location(false);
    client->set_decompress(true);
    client->set_tcp_nodelay(true);
    client->set_keep_alive(keep_alive);
    return client;
  }

  // Resolves and checks the host once, then builds the POST client.
  Status ensure_target(Clock::time_point deadline) {
    if (post_client) return Status::Ok();
    int64_t left = ms_until(deadline);
    if (left <= 0)
      return fail(ErrorCode::kTimeout, "deadline passed before connecting to " + where());
    UrlGuardOptions guard;
    guard.allow_private_addresses = options.allow_private_addresses;
    HostResolver resolver = options.resolver ? options.resolver : HostResolver(resolve_host_system);
    auto target = guard_url(url, guard, resolver, left);
    if (!target.ok()) return fail(target.error().code, target.error().message);
    pinned_address = target->addresses.front();
    auto client = make_client(/*keep_alive=*/true);
    if (!client.ok()) return client.error();
    post_client = std::move(*client);
    return Status::Ok();
  }

  // Headers of every request: the secrets, our user agent, the session and protocol version.
  httplib::Headers base_headers(bool with_session, bool* sent_session) const {
    httplib::Headers headers;
    bool user_agent = false;
    for (const HttpHeader& h : options.secret_headers) {
      headers.emplace(h.name, h.value);
      if (to_lower(h.name) == "user-agent") user_agent = true;
    }
    if (!user_agent) headers.emplace("User-Agent", kUserAgent);
    std::lock_guard<std::mutex> lock(mu);
    if (with_session && !session_id.empty()) headers.emplace("Mcp-Session-Id", session_id);
    if (sent_session != nullptr) *sent_session = with_session && !session_id.empty();
    if (!protocol_version.empty()) headers.emplace("MCP-Protocol-Version", protocol_version);
    return headers;
  }

  Error transport_error(httplib::Error err) const {
    switch (err) {
      case httplib::Error::Connection:
        return fail(ErrorCode::kTransport, "could not connect to " + where());
      case httplib::Error::ConnectionTimeout:
        return fail(ErrorCode::kTimeout, "connecting to " + where() + " timed out");
      case httplib::Error::Read:
        return fail(ErrorCode::kTransport, "the connection to " + where() + " broke while reading");
      case httplib::Error::Write:
        return fail(ErrorCode::kTransport, "could not send the request to " + where());
      case httplib::Error::SSLConnection:
        return fail(ErrorCode::kTransport, "TLS handshake with " + where() + " failed");
      case httplib::Error::SSLServerVerification:
        return fail(ErrorCode::kTransport, "the TLS certificate of " + where() + " did not verify");
      case httplib::Error::SSLLoadingCerts:
        return fail(ErrorCode::kTransport, "could not load the CA certificates");
      case httplib::Error::Compression:
        return fail(ErrorCode::kInvalidReply, "could not decompress the reply of " + where());
      default:
        return fail(ErrorCode::kTransport,
                    "request to " + where() + " failed (" + httplib::to_string(err) + ")");
    }
  }

  // ---- replies ------------------------------------------------------------------------------

  // Checks one message text (a message or a batch) and records answered requests.
  Status accept_message_text(const std::string& text, std::set<std::string>* pending,
                             std::vector<TransportMessage>* out,
                             std::string* unreadable = nullptr) const {
    auto parsed = parse_jsonrpc_batch(text, options.max_reply_bytes);
    if (!parsed.ok() && parsed.error().code == ErrorCode::kTooLarge) {
      return fail(ErrorCode::kTooLarge,
                  "the reply of " + where() + " is not JSON-RPC (" + parsed.error().message + ")");
    }
    if (!parsed.ok()) {
      // Unreadable (nested too deep, not JSON-RPC): handed to the session as over stdio, which
      // counts it and fails the request it answers, if it answers one; a notification that
      // cannot be read is skipped and the rest of the stream still counts.
      if (std::optional<int64_t> id = unreadable_response_id(text); id && pending != nullptr) {
        pending->erase(std::to_string(*id));
      }
      if (unreadable != nullptr && unreadable->empty()) *unreadable = parsed.error().message;
      out->push_back(TransportMessage{text});
      return Status::Ok();
    }
    for (const JsonRpcMessage& m : *parsed) {
      if (pending != nullptr && (m.kind == JsonRpcKind::kResult || m.kind == JsonRpcKind::kError)) {
        pending->erase(m.id.dump());
      }
    }
    out->push_back(TransportMessage{text});
    return Status::Ok();
  }

  // One server-sent event: priming events and events of other types carry no MCP message.
  Status accept_event(const SseEvent& event, std::set<std::string>* pending,
                      std::vector<TransportMessage>* out, std::string* unreadable = nullptr) const {
    if (event.priming || event.type != "message") return Status::Ok();
    return accept_message_text(event.data, pending, out, unreadable);
  }

  bool on_headers(Exchange& ex, const httplib::Response& res) {
    ex.status = res.status;
    ex.content_type = res.get_header_value("Content-Type");
    std::string type = media_type(ex.content_type);
    if (res.status < 200 || res.status > 299) {
      ex.body = Exchange::Body::kOther;
      return true;
    }
    if (ex.is_initialize) {
      std::string sid = res.get_header_value("Mcp-Session-Id");
      if (!sid.empty()) {
        if (!visible_ascii(sid, kMaxSessionIdBytes)) {
          ex.failure = fail(ErrorCode::kInvalidReply,
                            where() + " sent an invalid Mcp-Session-Id (visible ASCII, at most " +
                                std::to_string(kMaxSessionIdBytes) + " bytes)");
          return false;
        }
        ex.new_session_id = sid;
      }
    }
    if (type == "application/json") {
      ex.body = Exchange::Body::kJson;
    } else if (type == "text/event-stream") {
      ex.body = Exchange::Body::kSse;
    } else {
      ex.body = Exchange::Body::kOther;
    }
    return true;
  }

  bool on_body(Exchange& ex, const char* data, std::size_t n) {
    if (Clock::now() >= ex.deadline) {
      ex.failure =
          fail(ErrorCode::kTimeout, "the reply of " + where() + " was not complete in time");
      return false;
    }
    if (ex.body == Exchange::Body::kOther) {
      std::size_t keep = std::min(n, kErrorBodyKeep - std::min(kErrorBodyKeep, ex.buffer.size()));
      ex.buffer.append(data, keep);
      if (keep < n) ex.body_cut = true;
      return keep == n;
    }
    ex.received += n;
    if (ex.received > options.max_reply_bytes) {
      ex.failure =
          fail(ErrorCode::kTooLarge, "the reply of " + where() + " exceeds " +
                                         std::to_string(options.max_reply_bytes) + " bytes");
      return false;
    }
    if (ex.body == Exchange::Body::kJson) {
      ex.buffer.append(data, n);
      return true;
    }
    ex.sse->feed(std::string_view(data, n));
    for (;;) {
      auto event = ex.sse->next();
      if (!event.ok()) {
        ex.failure =
            fail(event.error().code, "event stream of " + where() + ": " + event.error().message);
        return false;
      }
      if (!event->has_value()) break;
      Status st = accept_event(**event, &ex.pending, &ex.messages, &ex.unreadable);
      if (!st.ok()) {
        ex.failure = st.error();
        return false;
      }
      if (ex.expects_response && ex.pending.empty()) {
        ex.done = true;  // every answer is in: the rest of the stream is not ours to wait for
        return false;
      }
    }
    return true;
  }

  // Runs one request on the POST client under the watchdog. Ok when a response (any status)
  // was read or when reading stopped because every answer was in.
  Status run_exchange(const std::string& method, httplib::Headers headers, const std::string& body,
                      Exchange& ex) {
    ex.reset_request();
    int64_t left = ms_until(ex.deadline);
    if (left <= 0) return fail(ErrorCode::kTimeout, "no time left for " + where());
    // The socket timeouts run a little past the deadline: the watchdog ends the exchange at the
    // deadline itself, so every way of running out of time reports kTimeout alike.
    int64_t socket_ms = left + kSocketTimeoutSlackMs;
    set_timeouts(*post_client, socket_ms, socket_ms, socket_ms);
    httplib::Request req;
    req.method = method;
    req.path = url.target;
    req.headers = std::move(headers);
    req.body = body;
    req.response_handler = [&](const httplib::Response& res) { return on_headers(ex, res); };
    req.content_receiver = [&](const char* data, std::size_t n, uint64_t, uint64_t) {
      return on_body(ex, data, n);
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    bool ok = false;
    watchdog.arm(post_client.get(), ex.deadline);
    try {
      ok = post_client->send(req, res, err);
    } catch (...) {
      ok = false;
      err = httplib::Error::Unknown;
    }
    bool fired = watchdog.disarm();
    if (ex.done) return Status::Ok();
    if (ex.failure) return *ex.failure;
    if (fired || (!ok && Clock::now() >= ex.deadline)) {
      return fail(ErrorCode::kTimeout, where() + " did not answer in time");
    }
    if (!ok && !(err == httplib::Error::Canceled && ex.body_cut)) return transport_error(err);
    return Status::Ok();
  }

  // A 4xx (not 401/403, not a dead session) whose whole body is a JSON-RPC message answering a
  // request of this exchange: delivered like a 200 answer. Else an error (the caller reports the
  // HTTP status).
  Status accept_error_answer(Exchange& ex) {
    const bool dead_session = (ex.status == 404 || ex.status == 400) && ex.sent_session;
    if (ex.status < 400 || ex.status > 499 || ex.status == 401 || ex.status == 403 ||
        dead_session || ex.body_cut || !ex.expects_response ||
        media_type(ex.content_type) != "application/json") {
      return Error(ErrorCode::kTransport, "not an answer");
    }
    std::set<std::string> pending = ex.pending;
    std::vector<TransportMessage> got;
    auto parsed = parse_jsonrpc_batch(ex.buffer, options.max_reply_bytes);
    if (!parsed.ok()) return parsed.error();
    for (const JsonRpcMessage& m : *parsed) {
      if (m.kind != JsonRpcKind::kError && m.kind != JsonRpcKind::kResult) {
        return Error(ErrorCode::kTransport, "not an answer");
      }
      pending.erase(m.id.dump());
    }
    if (pending.size() == ex.pending.size()) return Error(ErrorCode::kTransport, "not an answer");
    got.push_back(TransportMessage{ex.buffer});
    deliver(&got);
    return Status::Ok();
  }

  // An HTTP status outside 2xx as an error. A dead session also ends the transport.
  Error status_error(const Exchange& ex) {
    std::string what = "HTTP " + std::to_string(ex.status) + " from " + where();
    if ((ex.status == 404 || ex.status == 400) && ex.sent_session) {
      Error e = fail(ErrorCode::kTransport,
                     "session expired: " + what +
                         " to a request in a session; re-initialize on a new transport" +
                         snippet(ex.buffer));
      {
        std::lock_guard<std::mutex> lock(mu);
        expired = true;
        if (!fatal) fatal = e;
      }
      cv.notify_all();
      stop_stream();
      return e;
    }
    if (ex.status == 401 || ex.status == 403) {
      return fail(ErrorCode::kUnauthenticated,
                  what + " (credentials missing or refused)" + snippet(ex.buffer));
    }
    return fail(ErrorCode::kTransport, what + snippet(ex.buffer));
  }

  void deliver(std::vector<TransportMessage>* messages) {
    if (messages->empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (TransportMessage& m : *messages) queue.push_back(Queued{std::move(m), false});
    }
    messages->clear();
    cv.notify_all();
  }

  void set_fatal(const Error& e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!fatal) fatal = e;
    }
    cv.notify_all();
  }

  Status unusable() const {
    std::lock_guard<std::mutex> lock(mu);
    if (fatal) return *fatal;
    if (closed) return Error(ErrorCode::kTransport, "the transport to " + where() + " is closed");
    return Status::Ok();
  }

  // ---- send ---------------------------------------------------------------------------------

  Status send(const std::string& message_text, int64_t timeout_ms) {
    if (timeout_ms <= 0) return Error(ErrorCode::kInvalidArgument, "timeout_ms must be positive");
    Status state = unusable();
    if (!state.ok()) return state;

    Exchange ex;
    ex.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    auto parsed = parse_json(message_text, options.max_reply_bytes);
    if (!parsed.ok()) {
      return Error(ErrorCode::kInvalidArgument,
                   "the message to send is not JSON (" + parsed.error().message + ")");
    }
    auto note = [&](const Json& m) {
      if (!m.is_object()) return;
      const Json* method = json_field(m, "method");
      const Json* id = json_field(m, "id");
      if (method == nullptr || !method->is_string()) return;
      if (id != nullptr && !id->is_null()) ex.pending.insert(id->dump());
      if (method->get<std::string>() == "initialize") ex.is_initialize = true;
    };
    if (parsed->is_array()) {
      for (const Json& m : *parsed) note(m);
    } else {
      note(*parsed);
    }
    ex.expects_response = !ex.pending.empty();
    if (parsed->is_object() && json_string(*parsed, "method") == "subscriptions/listen" &&
        ex.pending.size() == 1) {
      return start_listen(message_text, *ex.pending.begin(), timeout_ms);
    }

    Status target = ensure_target(ex.deadline);
    if (!target.ok()) return target;

    // initialize opens a new session: it carries no session id.
    httplib::Headers headers = base_headers(!ex.is_initialize, &ex.sent_session);
    headers.emplace("Content-Type", "application/json");
    headers.emplace("Accept", "application/json, text/event-stream");
    for (HttpHeader& h : mcp_standard_headers(*parsed)) {
      headers.emplace(std::move(h.name), std::move(h.value));
    }
    SseParser sse(options.max_reply_bytes);
    ex.sse = &sse;

    Status st = run_exchange("POST", std::move(headers), message_text, ex);
    if (!ex.new_session_id.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      session_id = ex.new_session_id;
    }
    deliver(&ex.messages);
    if (!st.ok()) return st;
    if (ex.done) return Status::Ok();
    if (ex.status < 200 || ex.status > 299) {
      // 2026-07-28 servers refuse a request with a 4xx whose body is the JSON-RPC error (-32020
      // header mismatch, -32022 unsupported version, ...): that is the answer, not a failure.
      if (Status answered = accept_error_answer(ex); answered.ok()) return answered;
      return status_error(ex);
    }

    // 202 Accepted / 204 No Content acknowledge a notification or response; whatever body a
    // server adds ("Accepted") carries no message.
    bool acknowledgement = ex.status == 202 || ex.status == 204;
    bool blank = ex.buffer.find_first_not_of(" \t\r\n") == std::string::npos;
    switch (ex.body) {
      case Exchange::Body::kJson: {
        if (acknowledgement || (blank && !ex.expects_response)) break;
        Status ok = accept_message_text(ex.buffer, &ex.pending, &ex.messages, &ex.unreadable);
        if (!ok.ok()) return ok;
        deliver(&ex.messages);
        break;
      }
      case Exchange::Body::kSse:
        (void)sse.finish();  // an event cut off by the close is resumed below or lost
        break;
      case Exchange::Body::kOther:
      case Exchange::Body::kNone:
        if (!acknowledgement && !blank) {
          return fail(ErrorCode::kInvalidReply, where() + " answered with Content-Type '" +
                                                    truncate_utf8(one_line(ex.content_type), 80) +
                                                    "', not JSON or an event stream");
        }
        break;
    }
    if (ex.pending.empty()) return Status::Ok();
    if (!ex.unreadable.empty()) {
      return fail(ErrorCode::kInvalidReply, "the reply of " + where() +
                                                " is not JSON-RPC (" + ex.unreadable + ")");
    }
    if (ex.body != Exchange::Body::kSse) {
      return fail(ErrorCode::kInvalidReply, "HTTP " + std::to_string(ex.status) + " from " +
                                                where() + " carries no response to the request");
    }
    return resume(ex);
  }

  // SEP-1699: the server may close a POST's event stream before the response once it has sent
  // an event id; the client then polls with GET + Last-Event-ID after the server's `retry:`.
  Status resume(Exchange& ex) {
    for (int attempt = 1; !ex.pending.empty(); ++attempt) {
      if (ex.sse->last_event_id().empty()) {
        return fail(ErrorCode::kTransport,
                    where() +
                        " ended the event stream before the response (no event id to "
                        "resume from)");
      }
      if (attempt > kMaxResumptions) {
        return fail(ErrorCode::kTransport, where() + " never delivered the response after " +
                                               std::to_string(kMaxResumptions) + " resumptions");
      }
      int64_t delay = std::clamp(ex.sse->retry().value_or(options.stream_initial_backoff_ms),
                                 options.stream_min_retry_ms, options.stream_max_backoff_ms);
      if (ms_until(ex.deadline) <= delay) {
        return fail(ErrorCode::kTimeout, where() +
                                             " closed the event stream before the response "
                                             "and asked to reconnect after " +
                                             std::to_string(delay) + " ms, past the deadline");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      httplib::Headers headers = base_headers(true, &ex.sent_session);
      headers.emplace("Accept", "text/event-stream");
      headers.emplace("Last-Event-ID", ex.sse->last_event_id());
      Status st = run_exchange("GET", std::move(headers), std::string(), ex);
      deliver(&ex.messages);
      if (!st.ok()) return st;
      if (ex.done) return Status::Ok();
      if (ex.status == 405) {
        return fail(ErrorCode::kTransport,
                    where() +
                        " ended the event stream before the response and offers no GET "
                        "stream to resume it (HTTP 405)");
      }
      if (ex.status < 200 || ex.status > 299) return status_error(ex);
      if (ex.body != Exchange::Body::kSse) {
        return fail(ErrorCode::kInvalidReply,
                    where() + " answered the resumption GET without an event stream");
      }
      (void)ex.sse->finish();
    }
    return Status::Ok();
  }

  // ---- the notification stream (its own thread) ---------------------------------------------

  // subscriptions/listen: its answer is a long-lived event stream, read on the stream thread
  // like the GET stream. A JSON answer (an error, or a server that ends it at once) is queued
  // like any reply. A stream that breaks before the request was answered is POSTed again.
  Status start_listen(const std::string& message_text, const std::string& id, int64_t timeout_ms) {
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

  Result<bool> open_stream(int64_t timeout_ms) {
    if (timeout_ms <= 0) return Error(ErrorCode::kInvalidArgument, "timeout_ms must be positive");
    Status state = unusable();
    if (!state.ok()) return state.error();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stream_state == StreamState::kOpen) return true;
      if (stream_state == StreamState::kNotOffered) return false;
    }
    Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    Status target = ensure_target(deadline);
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
      cv.wait_until(lock, deadline, [&] { return stream_state != StreamState::kConnecting; });
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

  // Stops the notification-stream thread and waits for it. Owner thread.
  void stop_stream() {
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
      // stop() is cpp-httplib's thread-safe way to break a request in flight. Repeated, since
      // the thread may be between requests when it is first called.
      client->stop();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(10), [&] { return !stream_running; });
    }
    stream_thread.join();
    std::lock_guard<std::mutex> lock(mu);
    stream_client.reset();
  }

  void stream_main(int64_t first_timeout_ms) {
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

  bool stopping() const {
    std::lock_guard<std::mutex> lock(mu);
    return stream_stop;
  }

  void stream_loop(int64_t first_timeout_ms) {
    std::string post_body;
    std::set<std::string> listen_pending;
    {
      std::lock_guard<std::mutex> lock(mu);
      post_body = listen_body;
      if (!post_body.empty()) listen_pending.insert(listen_id);
    }
    const bool post = !post_body.empty();
    SseParser parser(options.max_reply_bytes);
    int failures = 0;
    int64_t backoff = options.stream_initial_backoff_ms;
    std::string last_failure;
    for (bool first = true;; first = false) {
      if (stopping()) return;
      bool sent_session = false;
      httplib::Headers headers = base_headers(true, &sent_session);
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
        if (!parser.last_event_id().empty()) {
          headers.emplace("Last-Event-ID", parser.last_event_id());
        }
      }
      int64_t connect_ms = first ? first_timeout_ms : options.stream_connect_timeout_ms;
      httplib::ClientImpl* client = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        client = stream_client.get();
      }
      // A quiet stream is normal: reads may wait up to the idle timeout, then we reconnect.
      set_timeouts(*client, connect_ms, options.stream_idle_timeout_ms, connect_ms);

      int status = 0;
      bool is_stream = false;
      bool delivered = false;
      bool json_answer = false;  // listen answered with one JSON body
      std::string json_body;
      std::optional<Error> failure;
      httplib::Request req;
      req.method = post ? "POST" : "GET";
      req.path = url.target;
      req.headers = std::move(headers);
      if (post) req.body = post_body;
      req.response_handler = [&](const httplib::Response& res) {
        status = res.status;
        is_stream = res.status >= 200 && res.status <= 299 &&
                    media_type(res.get_header_value("Content-Type")) == "text/event-stream";
        json_answer = post && !is_stream &&
                      media_type(res.get_header_value("Content-Type")) == "application/json";
        if (json_answer) return true;
        if (!is_stream) return false;  // nothing to read from a refusal
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
        parser.feed(std::string_view(data, n));
        std::vector<TransportMessage> got;
        for (;;) {
          auto event = parser.next();
          if (!event.ok()) {
            failure = fail(event.error().code,
                           "notification stream of " + where() + ": " + event.error().message);
            return false;
          }
          if (!event->has_value()) break;
          Status st = accept_event(**event, post ? &listen_pending : nullptr, &got);
          if (!st.ok()) {
            failure = st.error();
            return false;
          }
        }
        if (!got.empty()) {
          delivered = true;
          std::lock_guard<std::mutex> lock(mu);
          for (TransportMessage& m : got) {
            stream_bytes_queued += m.text.size();
            queue.push_back(Queued{std::move(m), true});
          }
          if (stream_bytes_queued > options.max_pending_bytes) {
            failure = Error(ErrorCode::kTooLarge, "more than " +
                                                      std::to_string(options.max_pending_bytes) +
                                                      " bytes of notifications from " + where() +
                                                      " wait unread: receive() is not called");
          }
        }
        if (!got.empty()) cv.notify_all();
        return !failure && !stopping();
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      bool ok = false;
      try {
        ok = client->send(req, res, err);
      } catch (...) {
        ok = false;
        err = httplib::Error::Unknown;
      }
      (void)parser.finish();  // an event cut off by the disconnect is discarded, as SSE says
      if (stopping()) return;
      if (json_answer && !failure) {
        std::vector<TransportMessage> got;
        Status st = accept_message_text(json_body, &listen_pending, &got);
        std::lock_guard<std::mutex> lock(mu);
        if (st.ok()) {
          for (TransportMessage& m : got) queue.push_back(Queued{std::move(m), true});
        } else if (!fatal) {
          fatal = Error(st.error().code, scrub(st.error().message));
        }
        if (stream_state == StreamState::kConnecting) stream_state = StreamState::kNotOffered;
        cv.notify_all();
        return;
      }
      if (post && listen_pending.empty()) return;  // the subscription was answered: it is over

      std::optional<Error> fatal_error = failure;
      if (!fatal_error && first && !is_stream) {
        std::lock_guard<std::mutex> lock(mu);
        if (status == 405 || status == 404) {
          stream_state = StreamState::kNotOffered;  // the server offers no GET stream
        } else {
          stream_state = StreamState::kFailed;
          if (status == 0) {
            stream_open_error = transport_error_unlocked(ok ? httplib::Error::Unknown : err);
          } else if (status == 401 || status == 403) {
            stream_open_error = Error(ErrorCode::kUnauthenticated,
                                      "HTTP " + std::to_string(status) + " from " + where() +
                                          " to the GET stream (credentials missing or refused)");
          } else if ((status == 400) && sent_session) {
            expired = true;
            stream_open_error = Error(ErrorCode::kTransport,
                                      "session expired: HTTP 400 from " + where() +
                                          " to the GET stream; re-initialize on a new transport");
            if (!fatal) fatal = stream_open_error;
          } else {
            stream_open_error =
                Error(ErrorCode::kTransport,
                      "HTTP " + std::to_string(status) + " from " + where() + " to the GET stream");
          }
        }
        cv.notify_all();
        return;
      }
      if (!fatal_error && !is_stream) {
        std::string what = "HTTP " + std::to_string(status) + " from " + where();
        if ((status == 404 || status == 400) && sent_session) {
          fatal_error = Error(ErrorCode::kTransport,
                              "session expired: " + what +
                                  " when the GET stream reconnected; re-initialize on a new "
                                  "transport");
          std::lock_guard<std::mutex> lock(mu);
          expired = true;
        } else if (status == 401 || status == 403) {
          fatal_error =
              Error(ErrorCode::kUnauthenticated, what + " when the GET stream reconnected");
        } else if (status >= 200 && status <= 299) {
          fatal_error = Error(ErrorCode::kInvalidReply,
                              where() + " answered the GET stream without an event stream");
        } else {
          last_failure = status == 0 ? transport_error_unlocked(err).message : what;
          if (++failures >= options.stream_max_failures) {
            fatal_error = Error(ErrorCode::kTransport,
                                "notification stream of " + where() + " lost after " +
                                    std::to_string(failures) +
                                    " failed reconnections (last: " + last_failure + ")");
          }
        }
      }
      if (is_stream && !failure) {
        failures = 0;
        if (delivered) backoff = options.stream_initial_backoff_ms;
      }
      if (fatal_error) {
        set_fatal(Error(fatal_error->code, scrub(fatal_error->message)));
        return;
      }
      int64_t delay = backoff;
      if (parser.retry()) {
        delay =
            std::clamp(*parser.retry(), options.stream_min_retry_ms, options.stream_max_backoff_ms);
      } else {
        backoff = std::min(backoff * 2, options.stream_max_backoff_ms);
      }
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(delay), [&] { return stream_stop; })) return;
    }
  }

  // transport_error() without scrubbing (the caller scrubs, or holds `mu`).
  Error transport_error_unlocked(httplib::Error err) const {
    switch (err) {
      case httplib::Error::Connection:
        return Error(ErrorCode::kTransport, "could not connect to " + where());
      case httplib::Error::ConnectionTimeout:
        return Error(ErrorCode::kTimeout, "connecting to " + where() + " timed out");
      case httplib::Error::Read:
        return Error(ErrorCode::kTransport, "the connection to " + where() + " broke");
      default:
        return Error(ErrorCode::kTransport,
                     "request to " + where() + " failed (" + httplib::to_string(err) + ")");
    }
  }

  // ---- receive / close ----------------------------------------------------------------------

  Result<std::vector<TransportMessage>> receive(int64_t timeout_ms) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)),
                [&] { return !queue.empty() || fatal.has_value() || closed; });
    if (!queue.empty()) {
      std::vector<TransportMessage> out;
      out.reserve(queue.size());
      for (Queued& q : queue) out.push_back(std::move(q.message));
      queue.clear();
      stream_bytes_queued = 0;
      return out;
    }
    if (fatal) return *fatal;
    if (closed) return Error(ErrorCode::kTransport, "the transport to " + where() + " is closed");
    return std::vector<TransportMessage>{};
  }

  void close() {
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
    Exchange ex;
    ex.deadline = Clock::now() + std::chrono::milliseconds(options.close_timeout_ms);
    if (!ensure_target(ex.deadline).ok()) return;
    SseParser sse(options.max_reply_bytes);
    ex.sse = &sse;
    // Any answer is fine: 200/204 ended it, 405 means the server does not let clients end
    // sessions, 404 means it was gone already.
    (void)run_exchange("DELETE", base_headers(true, &ex.sent_session), std::string(), ex);
  }

  std::string describe() const {
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
};

// ---- HttpTransport ------------------------------------------------------------------------------

Result<std::unique_ptr<HttpTransport>> HttpTransport::create(HttpTransportOptions options) {
  try {
    auto url = parse_http_url(options.url);
    if (!url.ok()) return url.error();
    for (const HttpHeader& h : options.secret_headers) {
      if (h.name.empty() || !std::all_of(h.name.begin(), h.name.end(), is_tchar)) {
        return Error(ErrorCode::kInvalidArgument,
                     "header name '" + one_line(h.name) + "' is not an HTTP token");
      }
      if (is_managed_header(h.name)) {
        return Error(ErrorCode::kInvalidArgument,
                     "header '" + h.name + "' is managed by the transport and cannot be set");
      }
      // The value is a secret: the message names the header only.
      if (!valid_header_value(h.value)) {
        return Error(ErrorCode::kInvalidArgument,
                     "the value of header '" + h.name + "' contains a control character");
      }
    }
    if (!options.session_id.empty() && !visible_ascii(options.session_id, kMaxSessionIdBytes)) {
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
    for (const HttpHeader& h : options.secret_headers) {
      if (h.value.empty()) continue;
      impl->secret_terms.push_back(h.value);
      // "Bearer <token>": the token alone may be echoed too.
      std::size_t start = 0;
      while (start < h.value.size()) {
        std::size_t end = h.value.find_first_of(" \t,;", start);
        if (end == std::string::npos) end = h.value.size();
        if (end - start >= 8 && end - start < h.value.size()) {
          impl->secret_terms.push_back(h.value.substr(start, end - start));
        }
        start = end + 1;
      }
    }
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
  if (!version.empty() && !visible_ascii(version, 64)) return;
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
