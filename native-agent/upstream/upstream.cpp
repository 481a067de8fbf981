#include "native-agent/upstream/upstream.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <variant>

#include "native-agent/base/clock.h"
#include "native-agent/upstream/http_transport.h"
#include "native-agent/upstream/stdio_transport.h"
#include "shared/jsonrpc.h"

namespace quiver {
namespace {

constexpr ListKind kAllKinds[] = {ListKind::kTools, ListKind::kResources,
                                  ListKind::kResourceTemplates, ListKind::kPrompts};
// How long pump() may wait for the HTTP notification stream to open.
constexpr int64_t kOpenStreamTimeoutMs = 2000;
constexpr int64_t kListenRetryMs = 5000;  // pause before listening again after a subscription ended
// Upper bound on the forced expiry rounds at a deadline (discover → initialize → fail: 3).
constexpr int kMaxForcedExpiries = 8;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<ListKind> normalized(const std::vector<ListKind>& kinds) {
  if (kinds.empty()) return {std::begin(kAllKinds), std::end(kAllKinds)};
  std::vector<ListKind> out;
  for (ListKind k : kAllKinds) {
    if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) out.push_back(k);
  }
  return out;
}

// The first failed list whose error calls for evicting a reused session.
std::optional<Error> evictable_failure(const Listing& listing, const std::vector<ListKind>& kinds) {
  for (ListKind k : kinds) {
    const ListOutcome& out = listing.list(k);
    if (out.state == ListState::kFailed && out.error && should_evict_and_retry(*out.error)) {
      return out.error;
    }
  }
  return std::nullopt;
}

int64_t backoff_delay(int64_t failures, int64_t initial_ms, int64_t max_ms) {
  if (failures <= 1) return 0;
  int64_t delay = std::max<int64_t>(initial_ms, 1);
  for (int64_t i = 2; i < failures && delay < max_ms; ++i) delay *= 2;
  return std::min(delay, max_ms);
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

// ---- UpstreamSpec -------------------------------------------------------------------------

UpstreamSpec UpstreamSpec::stdio(std::string name, std::string command,
                                 std::vector<std::string> args,
                                 std::map<std::string, std::string> env) {
  UpstreamSpec s;
  s.name = std::move(name);
  s.transport = Transport::kStdio;
  s.command = std::move(command);
  s.args = std::move(args);
  s.env = std::move(env);
  return s;
}

UpstreamSpec UpstreamSpec::http(std::string name, std::string url,
                                std::vector<UpstreamHeader> headers, bool allow_private) {
  UpstreamSpec s;
  s.name = std::move(name);
  s.transport = Transport::kHttp;
  s.url = std::move(url);
  s.headers = std::move(headers);
  s.allow_private = allow_private;
  return s;
}

std::string UpstreamSpec::describe() const {
  if (transport == Transport::kStdio) {
    std::string out = "stdio " + command + " (" + std::to_string(args.size()) + " args";
    std::vector<std::string> names;
    for (const auto& [name, value] : env) names.push_back(name);
    if (!names.empty()) out += ", env " + join_names(names);
    return out + ")";
  }
  // The query part of a URL may carry a key: show it as "?…".
  std::string shown = url.substr(0, url.find('?'));
  if (shown.size() < url.size()) shown += "?…";
  std::string out = "http " + shown;
  std::vector<std::string> names;
  for (const auto& h : headers) names.push_back(h.name);
  if (!names.empty()) out += " (headers " + join_names(names) + ")";
  return out;
}

// ---- the default transport factory --------------------------------------------------------

Result<UpstreamTransport> make_upstream_transport(const UpstreamSpec& spec,
                                                  const TransportSettings& settings) {
  if (spec.transport == UpstreamSpec::Transport::kStdio) {
    ChildSpec child(spec.command, spec.args, spec.env);
    child.working_dir = spec.working_dir;
    StdioTransportOptions options;
    options.max_message_bytes = settings.max_message_bytes;
    options.on_stderr_line = settings.on_stderr_line;
    auto t = StdioTransport::start(child, spec.name, options);
    if (!t.ok()) return t.error();
    UpstreamTransport out;
    out.transport = std::move(*t);
    return out;
  }
  HttpTransportOptions options;
  options.url = spec.url;
  for (const auto& h : spec.headers) options.secret_headers.push_back({h.name, h.value});
  options.allow_private_addresses = spec.allow_private;
  options.max_reply_bytes = settings.max_message_bytes;
  options.redactor = settings.redactor;
  options.on_auth_challenge = settings.on_auth_challenge;
  auto t = HttpTransport::create(std::move(options));
  if (!t.ok()) {
    Error e = t.error();
    e.message = "upstream " + spec.name + ": " + e.message;
    return e;
  }
  HttpTransport* http = t->get();
  UpstreamTransport out;
  out.transport = std::move(*t);
  out.request_scoped_send_errors = true;
  out.session_expired = [http] { return http->session_expired(); };
  out.open_notification_stream = [http](int64_t timeout_ms) {
    return http->open_notification_stream(timeout_ms);
  };
  out.notification_stream_opens = [http] { return http->notification_stream_opens(); };
  return out;
}

// ---- UpstreamConnection -------------------------------------------------------------------

struct UpstreamConnection::Session {
  UpstreamTransport t;
  std::unique_ptr<McpSession> mcp;
  int64_t opened_at = 0;
  std::optional<int64_t> handshake_at;
  // Still in its handshake when an attempt ended: kept (not killed) until then, and the next
  // list() waits on it instead of starting another (0: never kept).
  int64_t keep_until = 0;
  int64_t startup_ms = 0;  // the connection's start-up budget when the session was opened
  int64_t send_until = 0;  // sends give up by then (the running drive's horizon)
  bool closed = false;     // the McpSession reported Closed
  std::optional<Error> failure;
  std::optional<Listing> ready;  // a ListingReady not taken yet
  bool stream_tried = false;
  // subscriptions/listen (2026-07-28 servers): when the next listen() may be tried; nullopt:
  // never again on this session (the server has none, or advertises no list_changed).
  std::optional<int64_t> listen_at = 0;
  // A subscription was open before, so the next acknowledged one follows a gap in which changes
  // went unseen: the watched kinds are then reported as changed (re-listed by the host).
  bool listened_before = false;
  // This subscription follows one that ended: report the gap at its acknowledgement, or by then
  // if the server sends none.
  std::optional<int64_t> gap_report_at;
  int64_t acks_seen = 0;          // acknowledgements of the open subscription seen so far
  int64_t stream_opens_seen = 0;  // HTTP GET stream (2025 servers): openings seen so far
  std::string header_version;     // the MCP-Protocol-Version the transport was last given
  int64_t garbage = 0;            // unreadable texts during the running listing
  std::string last_garbage;
  std::map<int64_t, McpSession::CallDone> calls_done;  // answers to call(), by request id
};

// The outcome of driving one listing.
struct UpstreamConnection::Attempt {
  std::optional<Listing> listing;
  std::optional<Error> failure;  // the session failed (Failed event)
  bool starting = false;         // the handshake was still running at the deadline: session kept
};

UpstreamConnection::UpstreamConnection(UpstreamSpec spec, UpstreamOptions options)
    : spec_(std::move(spec)), options_(std::move(options)) {
  if (spec_.redactor) options_.redactor = spec_.redactor;
  clock_ = options_.clock ? options_.clock : steady_ms;
  if (!options_.factory) options_.factory = make_upstream_transport;
  settings_.max_message_bytes = options_.max_message_bytes;
  settings_.redactor = options_.redactor;
  // Shared pointers, not `this`: a transport (and its notification thread) may outlive a moved
  // settings copy, never the state it writes to.
  settings_.on_auth_challenge = [mu = challenge_mu_, last = last_challenge_](
                                    int /*status*/, const std::string& www_authenticate) {
    std::lock_guard<std::mutex> lock(*mu);
    *last = www_authenticate;
  };
  log_target_->log = options_.log;
  log_target_->redactor = options_.redactor;
  std::string prefix = label() + ": stderr: ";
  settings_.on_stderr_line = [target = log_target_, prefix](const std::string& line) {
    std::lock_guard<std::mutex> lock(target->mu);
    if (target->log) {
      target->log(prefix + (target->redactor ? target->redactor->redact(line) : line));
    }
  };
}

void UpstreamConnection::rebind(std::function<void(const std::string& line)> log,
                                std::shared_ptr<const Redactor> redactor) {
  std::lock_guard<std::timed_mutex> busy(busy_);
  if (!spec_.redactor) options_.redactor = std::move(redactor);
  options_.log = log;
  std::lock_guard<std::mutex> lock(log_target_->mu);
  log_target_->log = std::move(log);
  log_target_->redactor = options_.redactor;
}

bool UpstreamConnection::same_session_options(const UpstreamOptions& o) const {
  const McpSessionConfig& a = options_.session;
  const McpSessionConfig& b = o.session;
  return a.client_name == b.client_name && a.client_version == b.client_version &&
         a.protocol_versions == b.protocol_versions && a.era == b.era &&
         a.request_timeout_ms == b.request_timeout_ms &&
         a.handshake_timeout_ms == b.handshake_timeout_ms &&
         a.discover_timeout_ms == b.discover_timeout_ms &&
         a.max_pages_per_list == b.max_pages_per_list &&
         a.max_listing_bytes == b.max_listing_bytes && a.max_cursor_bytes == b.max_cursor_bytes &&
         a.max_items_per_list == b.max_items_per_list &&
         a.max_restarts_per_list == b.max_restarts_per_list &&
         a.probe_unadvertised == b.probe_unadvertised &&
         a.send_cancellations == b.send_cancellations &&
         a.max_message_bytes == b.max_message_bytes &&
         a.max_error_message_chars == b.max_error_message_chars &&
         options_.list_timeout_ms == o.list_timeout_ms &&
         options_.startup_timeout_ms == o.startup_timeout_ms &&
         options_.change_debounce_ms == o.change_debounce_ms && options_.watch == o.watch &&
         options_.backoff_initial_ms == o.backoff_initial_ms &&
         options_.backoff_max_ms == o.backoff_max_ms &&
         options_.stable_session_ms == o.stable_session_ms &&
         options_.max_message_bytes == o.max_message_bytes;
}

std::string UpstreamConnection::scrub(std::string text) const {
  return options_.redactor ? options_.redactor->redact(text) : text;
}

Error UpstreamConnection::scrub(Error error) const {
  error.message = scrub(std::move(error.message));
  return error;
}

UpstreamConnection::~UpstreamConnection() { close(); }

int64_t UpstreamConnection::now_ms() const { return clock_(); }

std::string UpstreamConnection::label() const { return "upstream " + spec_.name; }

void UpstreamConnection::log(const std::string& line) const {
  std::lock_guard<std::mutex> lock(log_target_->mu);
  if (log_target_->log) log_target_->log(label() + ": " + line);
}

bool UpstreamConnection::connected() const {
  std::lock_guard<std::timed_mutex> lock(busy_);
  return session_ && !session_->closed && session_->mcp->state() == SessionState::kReady;
}

int64_t UpstreamConnection::backoff_remaining_ms() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (consecutive_failures_ == 0) return 0;
  return std::max<int64_t>(0, next_attempt_at_ - clock_());
}

UpstreamStats UpstreamConnection::stats() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  UpstreamStats s = stats_;
  s.consecutive_failures = consecutive_failures_;
  s.era = era_;
  return s;
}

void UpstreamConnection::set_change_callback(ChangeCallback callback) {
  std::lock_guard<std::mutex> lock(state_mu_);
  callback_ = std::move(callback);
}

void UpstreamConnection::close() {
  std::lock_guard<std::timed_mutex> lock(busy_);
  end_session(/*failure=*/false, std::nullopt);
}

// ---- the poll loop ------------------------------------------------------------------------

void UpstreamConnection::send_one(const std::string& text) {
  Session& s = *session_;
  const std::string& version = s.mcp->protocol_version();
  if (version != s.header_version) {
    // Empty unsets the header: the legacy initialize after an era probe must not carry the
    // probe's MCP-Protocol-Version (servers answer -32020).
    s.t.transport->set_protocol_version(version);
    s.header_version = version;
  }
  int64_t now = clock_();
  int64_t horizon = s.send_until;
  if (auto d = s.mcp->next_deadline()) horizon = std::min(horizon, *d);
  Status sent = s.t.transport->send(text, std::max<int64_t>(1, horizon - now));
  if (sent.ok()) return;
  now = clock_();
  bool expired = s.t.session_expired && s.t.session_expired();
  if (!s.t.request_scoped_send_errors || expired) {
    Error e = scrub(sent.error());
    if (!s.t.request_scoped_send_errors) {
      // The stdio transport's own account names the child's exit status.
      auto gone = s.t.transport->receive(0);
      if (!gone.ok() && scrub(gone.error().message) != e.message) {
        e.message = scrub(gone.error().message) + "; writing to it failed: " + e.message;
      }
    }
    s.mcp->on_transport_error(e, now);
    return;
  }
  // One request failed (HTTP status, timeout): tell the session which.
  auto parsed = parse_jsonrpc_batch(text);
  if (!parsed.ok()) return;
  bool any = false;
  for (const auto& m : *parsed) {
    if (m.kind == JsonRpcKind::kRequest && m.id.is_number_integer()) {
      s.mcp->on_request_failed(m.id.get<int64_t>(), scrub(sent.error()), now);
      any = true;
    }
  }
  if (!any) log("a notification was not delivered: " + scrub(sent.error().message));
}

void UpstreamConnection::flush_transmits() {
  while (session_ && !session_->closed) {
    auto text = session_->mcp->poll_transmit();
    if (!text) break;
    send_one(*text);
    process_events();
  }
}

void UpstreamConnection::process_events() {
  Session& s = *session_;
  while (auto event = s.mcp->poll_event()) {
    if (auto* ready = std::get_if<McpSession::ListingReady>(&*event)) {
      s.ready = std::move(ready->listing);
    } else if (auto* changed = std::get_if<McpSession::ListChanged>(&*event)) {
      note_change(changed->kind);
    } else if (auto* failed = std::get_if<McpSession::Failed>(&*event)) {
      s.failure = failed->error;
    } else if (std::holds_alternative<McpSession::Closed>(*event)) {
      s.closed = true;
    } else if (auto* done = std::get_if<McpSession::CallDone>(&*event)) {
      int64_t id = done->id;
      s.calls_done.insert_or_assign(id, std::move(*done));
    } else if (auto* ended = std::get_if<McpSession::ListenEnded>(&*event)) {
      // The subscription ended: listen again a little later, unless the server has none.
      if (ended->error) log("subscriptions/listen ended: " + scrub(ended->error->message));
      bool none = ended->error && ended->error->code == ErrorCode::kMethodNotFound;
      s.listen_at = none ? std::nullopt : std::optional<int64_t>(clock_() + kListenRetryMs);
    }
  }
  if (!s.handshake_at) {
    SessionState st = s.mcp->state();
    if (st == SessionState::kListing || st == SessionState::kReady) s.handshake_at = clock_();
  }
}

void UpstreamConnection::drive(int64_t until_ms, const std::function<bool()>& done) {
  Session& s = *session_;
  s.send_until = until_ms;
  bool polled = false;  // read at least once, even when called with no time left (pump(0))
  for (;;) {
    flush_transmits();
    process_events();
    if (done() || s.closed) return;
    int64_t now = clock_();
    if (polled && now >= until_ms) return;
    polled = true;
    int64_t wake = until_ms;
    if (auto d = s.mcp->next_deadline()) wake = std::min(wake, *d);
    // At least 1 ms: a stdio receive(0) hands out lines already read but does not read the pipe.
    auto got = s.t.transport->receive(std::max<int64_t>(1, wake - now));
    now = clock_();
    if (!got.ok()) {
      s.mcp->on_transport_error(scrub(got.error()), now);
      continue;
    }
    for (const TransportMessage& m : *got) {
      // The door: nothing the upstream wrote reaches the session (and from there listings,
      // error messages, the store, logs and answers) before every secret is redacted from it.
      Status handled = options_.redactor
                           ? s.mcp->handle_text(options_.redactor->redact_json_text(m.text), now)
                           : s.mcp->handle_text(m.text, now);
      if (!handled.ok()) {
        ++s.garbage;
        s.last_garbage = scrub(handled.error().message);
        std::lock_guard<std::mutex> lock(state_mu_);
        ++stats_.garbage_messages;
      }
    }
    s.mcp->handle_timeout(now);
  }
}

void UpstreamConnection::note_change(ListKind kind) {
  std::lock_guard<std::mutex> lock(state_mu_);
  ++stats_.list_changed_notices;
  changed_[static_cast<int>(kind)] = true;
  if (!change_due_at_) change_due_at_ = clock_() + options_.change_debounce_ms;
}

std::optional<UpstreamChange> UpstreamConnection::take_due_change() {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (lost_) {
    UpstreamChange change = std::move(*lost_);
    lost_.reset();
    for (ListKind k : kAllKinds) {
      if (changed_[static_cast<int>(k)]) change.kinds.push_back(k);
      changed_[static_cast<int>(k)] = false;
    }
    change_due_at_.reset();
    return change;
  }
  if (!change_due_at_ || clock_() < *change_due_at_) return std::nullopt;
  UpstreamChange change;
  for (ListKind k : kAllKinds) {
    if (changed_[static_cast<int>(k)]) change.kinds.push_back(k);
    changed_[static_cast<int>(k)] = false;
  }
  change_due_at_.reset();
  if (change.kinds.empty()) return std::nullopt;
  return change;
}

// ---- sessions -----------------------------------------------------------------------------

void UpstreamConnection::end_session(bool failure, const std::optional<Error>& why) {
  if (!session_) return;
  int64_t now = clock_();
  int64_t lifetime = now - session_->opened_at;
  if (!session_->closed) session_->mcp->close(now);
  session_->t.transport->close();
  session_.reset();
  last_listing_.reset();
  if (!failure) return;
  std::lock_guard<std::mutex> lock(state_mu_);
  if (why) last_failure_ = *why;
  consecutive_failures_ = lifetime >= options_.stable_session_ms ? 1 : consecutive_failures_ + 1;
  next_attempt_at_ = now + backoff_delay(consecutive_failures_, options_.backoff_initial_ms,
                                         options_.backoff_max_ms);
  if (why) log("session ended: " + why->message);
}

UpstreamConnection::Attempt UpstreamConnection::run_listing(int64_t deadline_ms) {
  Session& s = *session_;
  s.ready.reset();
  s.failure.reset();
  s.garbage = 0;
  s.last_garbage.clear();
  drive(deadline_ms, [&] { return s.ready.has_value(); });
  if (!s.ready && !s.closed && s.mcp->starting() && clock_() < s.keep_until) {
    // The server is still starting (no handshake answer yet) within its start-up budget: the
    // session is kept, and the next attempt waits on this process instead of spawning another.
    Attempt a;
    a.starting = true;
    a.failure = Error(ErrorCode::kTimeout,
                      std::string(s.mcp->state() == SessionState::kDiscovering ? "server/discover"
                                                                               : "initialize") +
                          ": no answer yet after " + std::to_string(clock_() - s.opened_at) +
                          " ms; the server is still starting (kept for the next attempt, for " +
                          std::to_string(s.keep_until - clock_()) + " ms more)");
    return a;
  }
  if (!s.ready && !s.closed) {
    // The caller's deadline passed first. Expire everything the session waits for, as if its own
    // deadlines had passed: the lists that did not finish fail with kTimeout and the session
    // stays usable (a timeout is no reason to evict).
    for (int i = 0; i < kMaxForcedExpiries && !s.ready && !s.closed; ++i) {
      auto next = s.mcp->next_deadline();
      if (!next) break;
      s.mcp->handle_timeout(std::max(clock_(), *next));
      flush_transmits();
      process_events();
    }
  }
  Attempt a;
  a.failure = s.failure;
  if (s.ready) {
    a.listing = std::move(s.ready);
    s.ready.reset();
    if (s.garbage > 0) {
      // A reply that could not be read leaves its request to time out: say why.
      for (auto& out : a.listing->lists) {
        if (out.state == ListState::kFailed && out.error &&
            out.error->code == ErrorCode::kTimeout) {
          out.error->message += " (meanwhile the upstream sent " + std::to_string(s.garbage) +
                                " unreadable message(s): " + s.last_garbage + ")";
        }
      }
    }
  } else if (!a.failure) {
    a.failure = Error(ErrorCode::kTimeout, "no listing by the deadline");
  }
  if (a.failure && s.garbage > 0 && a.failure->code == ErrorCode::kTimeout) {
    a.failure->message += " (meanwhile the upstream sent " + std::to_string(s.garbage) +
                          " unreadable message(s): " + s.last_garbage + ")";
  }
  return a;
}

Result<Listing> UpstreamConnection::open_and_list(int64_t deadline_ms, ListInfo* info) {
  int64_t now = clock_();
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (consecutive_failures_ > 0 && now < next_attempt_at_) {
      ++stats_.backoff_refusals;
      // The real cause stays what is reported (its code: a server that keeps timing out is
      // kTimeout, not "unavailable"); the backoff is said beside it.
      std::string what =
          label() + " failed " + std::to_string(consecutive_failures_) + " times in a row";
      if (last_failure_) what += " (last: " + last_failure_->message + ")";
      return Error(last_failure_ ? last_failure_->code : ErrorCode::kUpstreamUnavailable,
                   what + "; backing off, next attempt in " +
                       std::to_string(next_attempt_at_ - now) + " ms");
    }
    ++stats_.sessions_opened;
  }
  auto transport = options_.factory(spec_, settings_);
  if (!transport.ok()) {
    session_.reset();
    std::lock_guard<std::mutex> lock(state_mu_);
    consecutive_failures_ += 1;
    last_failure_ = transport.error();
    next_attempt_at_ = now + backoff_delay(consecutive_failures_, options_.backoff_initial_ms,
                                           options_.backoff_max_ms);
    return scrub(transport.error());
  }

  session_ = std::make_unique<Session>();
  session_->t = std::move(*transport);
  session_->opened_at = now;
  EraPolicy policy =
      !era_ ? EraPolicy::kProbe
            : (*era_ == ProtocolEra::kModern ? EraPolicy::kModern : EraPolicy::kLegacy);
  const int64_t caller_deadline = deadline_ms;
  // A fresh session: the start-up budget comes on top of the caller's listing deadline. A server
  // still starting when that has passed is kept for one start-up budget more (see keep_until).
  const int64_t startup = spec_.startup_timeout_ms.value_or(options_.startup_timeout_ms);
  const int64_t listing_budget = std::max<int64_t>(1, deadline_ms - now);
  if (startup > 0) {
    deadline_ms = now + startup + listing_budget;
    session_->startup_ms = startup;
    session_->keep_until = deadline_ms + startup;
  }
  Attempt a;
  for (int round = 0; round < 2; ++round) {
    McpSessionConfig config = options_.session;
    if (startup > 0) {
      // The handshake may run until keep_until (over attempts); the lists then get the listing
      // budget from the end of the handshake.
      config.listing_deadline_ms = listing_budget;
      config.startup_deadline_ms = session_->keep_until - now;
      config.handshake_timeout_ms = session_->keep_until - now;
    } else {
      config.listing_deadline_ms = listing_budget;
    }
    if (spec_.request_timeout_ms) {
      config.request_timeout_ms = std::min(*spec_.request_timeout_ms, listing_budget);
    }
    config.max_message_bytes = options_.max_message_bytes;
    config.era = policy;
    session_->mcp = std::make_unique<McpSession>(config);
    session_->closed = false;
    session_->handshake_at.reset();
    Status started = session_->mcp->start(clock_());
    if (!started.ok()) {
      end_session(/*failure=*/false, std::nullopt);
      return started.error();
    }
    a = run_listing(deadline_ms);
    // A legacy server that answers the era probe (server/discover) with a result that is no
    // DiscoverResult (a bare {} from servers that answer every unknown method) instead of an
    // error: it is legacy. Start over with initialize on the same transport.
    bool bogus_discover = !a.listing && a.failure && policy == EraPolicy::kProbe &&
                          a.failure->code == ErrorCode::kInvalidReply &&
                          starts_with(a.failure->message, "server/discover:");
    if (!bogus_discover || clock_() >= deadline_ms) break;
    log("server/discover answered with no DiscoverResult; trying initialize");
    policy = EraPolicy::kLegacy;
  }
  return finish_start(std::move(a), caller_deadline, info);
}

Result<Listing> UpstreamConnection::resume_start(int64_t deadline_ms, ListInfo* info) {
  Session& s = *session_;
  info->resumed = true;
  // As for a fresh session, the start-up budget still left comes on top of the caller's deadline.
  int64_t extra = std::min(s.startup_ms, std::max<int64_t>(0, s.keep_until - deadline_ms));
  Attempt a = run_listing(deadline_ms + extra);
  return finish_start(std::move(a), deadline_ms, info);
}

Result<Listing> UpstreamConnection::finish_start(Attempt a, int64_t caller_deadline,
                                                 ListInfo* info) {
  auto labelled = [&](Error e) {
    if (!starts_with(e.message, "stdio upstream") && !starts_with(e.message, "upstream")) {
      e.message = label() + ": " + e.message;
    }
    return e;
  };
  if (a.starting) {
    Error e = labelled(*a.failure);
    log(e.message);
    std::lock_guard<std::mutex> lock(state_mu_);
    ++stats_.kept_starting;
    return e;
  }
  if (!a.listing || (a.failure && session_->closed)) {
    Error e =
        labelled(a.failure ? *a.failure : Error(ErrorCode::kTimeout, "no listing by the deadline"));
    end_session(/*failure=*/true, e);
    return e;
  }
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    era_ = session_->mcp->era();
  }
  if (info) {
    int64_t handshake_at = session_->handshake_at.value_or(a.listing->started_at_ms);
    info->connect_ms = handshake_at - session_->opened_at;
    info->list_ms = a.listing->finished_at_ms - handshake_at;
  }
  if (session_->closed) {
    end_session(/*failure=*/true, a.failure);
    return std::move(*a.listing);
  }
  if (era_ == ProtocolEra::kModern && session_->mcp->sent_initialize()) {
    // The server answered the era probe late, after the legacy initialize that replaced it had
    // gone out: a 2026-07-28 SDK then serves the process as a 2025 session (no cache hints).
    // Replace the mixed session with a clean modern one (server/discover only); should that fail,
    // the mixed session's listing is still the server's data.
    log("the server is modern but also received a legacy initialize (it answered the era probe "
        "late); replacing the session with a clean 2026-07-28 one");
    Listing mixed = std::move(*a.listing);
    end_session(/*failure=*/false, std::nullopt);
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      ++stats_.mixed_sessions_replaced;
    }
    auto clean = open_and_list(std::max(caller_deadline, clock_() + 1), info);
    if (clean.ok()) return clean;
    log("the clean session failed (" + clean.error().message +
        "); keeping the listing of the mixed one");
    return mixed;
  }
  return std::move(*a.listing);
}

Result<Listing> UpstreamConnection::list(int64_t deadline_ms, const std::vector<ListKind>& kinds,
                                         ListInfo* info) {
  std::unique_lock<std::timed_mutex> lock(busy_, std::defer_lock);
  int64_t wait = deadline_ms - clock_();
  if (!lock.try_lock_for(std::chrono::milliseconds(std::max<int64_t>(wait, 0)))) {
    return Error(ErrorCode::kTimeout, label() + ": busy with another listing until the deadline");
  }
  int64_t start = clock_();
  ListInfo local;
  ListInfo* out = info ? info : &local;
  *out = ListInfo{};
  {
    std::lock_guard<std::mutex> challenge_lock(*challenge_mu_);
    last_challenge_->reset();
  }
  auto result = list_locked(deadline_ms, normalized(kinds), out);
  out->total_ms = clock_() - start;
  {
    std::lock_guard<std::mutex> challenge_lock(*challenge_mu_);
    out->auth_challenge = *last_challenge_;
  }
  std::lock_guard<std::mutex> state_lock(state_mu_);
  if (result.ok()) {
    ++stats_.listings;
    if (out->reused && !out->retried) ++stats_.reused_listings;
    // Change notices for the kinds just listed are older than this listing.
    for (ListKind k : normalized(kinds)) changed_[static_cast<int>(k)] = false;
    bool any = false;
    for (bool c : changed_) any = any || c;
    if (!any) change_due_at_.reset();
  }
  return result;
}

Result<Listing> UpstreamConnection::list_locked(int64_t deadline_ms,
                                                const std::vector<ListKind>& kinds,
                                                ListInfo* info) {
  if (session_ && !session_->closed && session_->mcp->starting() && session_->keep_until > 0) {
    // Kept from an earlier attempt while it was still starting: wait on it, no new start.
    auto resumed = resume_start(deadline_ms, info);
    if (resumed.ok() && session_) last_listing_ = *resumed;
    return resumed;
  }
  bool reusable = session_ && !session_->closed && session_->mcp->state() == SessionState::kReady &&
                  last_listing_;
  if (!reusable) {
    end_session(/*failure=*/false, std::nullopt);  // a leftover that cannot be reused
    auto fresh = open_and_list(deadline_ms, info);
    if (fresh.ok() && session_) last_listing_ = *fresh;
    return fresh;
  }

  info->reused = true;
  Status relisted = session_->mcp->relist(kinds, clock_());
  std::optional<Error> failure;
  if (!relisted.ok()) {
    failure = relisted.error();
  } else {
    Attempt a = run_listing(deadline_ms);
    if (a.listing && !a.failure) {
      if (info) info->list_ms = a.listing->finished_at_ms - a.listing->started_at_ms;
      failure = evictable_failure(*a.listing, kinds);
      if (!failure) {
        Listing merged = *last_listing_;
        merged.protocol_version = a.listing->protocol_version;
        merged.server_info = a.listing->server_info;
        merged.server_capabilities = a.listing->server_capabilities;
        merged.instructions = a.listing->instructions;
        merged.started_at_ms = a.listing->started_at_ms;
        merged.finished_at_ms = a.listing->finished_at_ms;
        for (ListKind k : kinds) merged.list(k) = std::move(a.listing->list(k));
        last_listing_ = merged;
        return merged;
      }
    } else {
      failure = a.failure ? *a.failure : Error(ErrorCode::kTimeout, "no listing by the deadline");
      if (!should_evict_and_retry(*failure)) {
        Error e = *failure;
        if (!starts_with(e.message, "stdio upstream") && !starts_with(e.message, "upstream")) {
          e.message = label() + ": " + e.message;
        }
        if (session_ && session_->closed) end_session(/*failure=*/true, e);
        return e;
      }
    }
  }

  // ADR-004 self-heal: evict the reused session, retry once on a fresh one.
  log("evicting the reused session after a failed request (" + failure->message +
      "); retrying on a fresh session");
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    ++stats_.evictions;
  }
  end_session(/*failure=*/true, failure);
  info->retried = true;
  auto retry = open_and_list(deadline_ms, info);
  if (!retry.ok()) {
    return Error(ErrorCode::kUpstreamUnavailable,
                 label() + " is unavailable: a request failed on the kept session (" +
                     failure->message + ") and the retry on a fresh session failed too (" +
                     retry.error().message + ")");
  }
  Listing listing = std::move(*retry);
  for (ListKind k : kAllKinds) {
    ListOutcome& out = listing.list(k);
    if (out.state == ListState::kFailed && out.error && should_evict_and_retry(*out.error)) {
      out.error = Error(ErrorCode::kUpstreamUnavailable,
                        out.error->message + " (also on a fresh session: upstream unavailable)");
    }
  }
  if (session_) last_listing_ = listing;
  return listing;
}

// ---- watching -----------------------------------------------------------------------------

void UpstreamConnection::pump(int64_t wait_ms) {
  std::unique_lock<std::timed_mutex> lock(busy_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (session_ && !session_->closed && session_->mcp->starting() && session_->keep_until > 0 &&
      clock_() >= session_->keep_until) {
    // Kept while it started, and no listing came back for it within the budget: end it.
    end_session(/*failure=*/true,
                Error(ErrorCode::kTimeout, label() + ": still starting when its start-up budget "
                                                     "was spent; the session is ended"));
  }
  int64_t end = clock_() + std::max<int64_t>(wait_ms, 0);
  for (;;) {
    int64_t now = clock_();
    std::optional<int64_t> due;
    {
      std::lock_guard<std::mutex> state_lock(state_mu_);
      due = change_due_at_;
      if (lost_) due = now;
    }
    int64_t until = due ? std::min(end, *due) : end;
    bool idle_session =
        session_ && !session_->closed && session_->mcp->state() == SessionState::kReady;
    if (!idle_session) {
      lock.unlock();
      if (until > now) std::this_thread::sleep_for(std::chrono::milliseconds(until - now));
      break;
    }
    Session& s = *session_;
    if (options_.watch && !s.stream_tried && s.t.open_notification_stream &&
        s.mcp->era() == ProtocolEra::kLegacy) {
      s.stream_tried = true;
      auto opened = s.t.open_notification_stream(kOpenStreamTimeoutMs);
      if (!opened.ok()) {
        log("the notification stream could not be opened: " + scrub(opened.error().message));
      } else if (!*opened) {
        log("the server offers no notification stream; list changes are not seen");
      }
      now = clock_();
    }
    // A 2026-07-28 server's changes arrive on a subscriptions/listen request (over stdio always,
    // as a legacy stdio server's notifications do; over HTTP when watching).
    const bool stdio = !s.t.open_notification_stream;
    if ((options_.watch || stdio) && s.mcp->era() == ProtocolEra::kModern && s.listen_at &&
        *s.listen_at <= now && !s.mcp->listen_request_id()) {
      Status listening = s.mcp->listen(now);
      if (listening.ok()) {
        if (s.listened_before) s.gap_report_at = now + kOpenStreamTimeoutMs;
        s.listened_before = true;
        s.acks_seen = 0;
        s.listen_at = now + kListenRetryMs;         // not before it ended
        s.send_until = now + kOpenStreamTimeoutMs;  // HTTP: until the stream opens
        flush_transmits();
      } else {
        if (listening.error().code != ErrorCode::kNotFound) {
          log("subscriptions/listen: " + scrub(listening.error().message));
        }
        s.listen_at.reset();
      }
      now = clock_();
    }
    int64_t notices = stats().list_changed_notices;
    drive(until, [&] {
      return stats().list_changed_notices != notices ||
             s.mcp->listen_acknowledgements() != s.acks_seen;
    });
    // A subscription open again after a gap: the transport re-sent a broken listen (a second
    // acknowledgement of the same request), or it had ended and was sent anew.
    const int64_t acks = s.mcp->listen_acknowledgements();
    bool gap = !s.closed && ((acks > s.acks_seen && (s.acks_seen > 0 || s.gap_report_at)) ||
                             (s.gap_report_at && clock_() >= *s.gap_report_at));
    if (acks > s.acks_seen) s.gap_report_at.reset();
    s.acks_seen = acks;
    // The same gap on a 2025 server's GET stream: the transport reconnected it after a break
    // (what the server sent in between is lost unless it replays it for Last-Event-ID).
    if (s.t.notification_stream_opens) {
      const int64_t opens = s.t.notification_stream_opens();
      if (opens > s.stream_opens_seen && s.stream_opens_seen > 0 && !s.closed) gap = true;
      s.stream_opens_seen = opens;
    }
    if (gap) {
      // A change between the two streams was told to nobody. Report every watched kind as
      // changed, so the host re-lists them now rather than at the TTL (after the acknowledgement:
      // a change after it arrives on the stream).
      s.gap_report_at.reset();
      std::vector<ListKind> kinds = s.mcp->list_changed_kinds();
      log("the change stream is open again after a break; re-listing what it watches (" +
          std::to_string(kinds.size()) + " kinds), as changes in the gap were not seen");
      std::lock_guard<std::mutex> state_lock(state_mu_);
      ++stats_.listen_gaps;
      for (ListKind k : kinds) changed_[static_cast<int>(k)] = true;
      if (!kinds.empty() && !change_due_at_)
        change_due_at_ = clock_() + options_.change_debounce_ms;
      due = change_due_at_;
    }
    if (s.closed) {
      Error why = s.failure ? *s.failure : Error(ErrorCode::kTransport, "the session closed");
      {
        std::lock_guard<std::mutex> state_lock(state_mu_);
        ++stats_.sessions_lost;
        UpstreamChange change;
        change.session_lost = true;
        change.error = why;
        lost_ = std::move(change);
      }
      end_session(/*failure=*/true, why);
      lock.unlock();
      break;
    }
    now = clock_();
    if (now >= end || (due && now >= *due)) {
      lock.unlock();
      break;
    }
  }
  auto change = take_due_change();
  if (!change) return;
  ChangeCallback callback;
  {
    std::lock_guard<std::mutex> state_lock(state_mu_);
    callback = callback_;
  }
  if (callback) callback(*change);
}

// ---- calls --------------------------------------------------------------------------------

bool UpstreamConnection::session_ready() const {
  return session_ && !session_->closed && session_->mcp->state() == SessionState::kReady &&
         last_listing_.has_value();
}

Result<CallAnswer> UpstreamConnection::call(const std::string& method, const Json& params,
                                            int64_t deadline_ms,
                                            const std::function<bool()>& cancelled,
                                            CallInfo* info) {
  std::unique_lock<std::timed_mutex> lock(busy_, std::defer_lock);
  int64_t wait = deadline_ms - clock_();
  if (!lock.try_lock_for(std::chrono::milliseconds(std::max<int64_t>(wait, 0)))) {
    std::lock_guard<std::mutex> state_lock(state_mu_);
    ++stats_.calls_failed;
    return Error(ErrorCode::kTimeout,
                 label() + ": busy with another call or listing until the deadline");
  }
  CallInfo local;
  CallInfo* out = info ? info : &local;
  *out = CallInfo{};
  auto answer = call_locked(method, params, deadline_ms, cancelled, out);
  std::lock_guard<std::mutex> state_lock(state_mu_);
  ++(answer.ok() ? stats_.calls : stats_.calls_failed);
  return answer;
}

Result<CallAnswer> UpstreamConnection::call_locked(const std::string& method, const Json& params,
                                                   int64_t deadline_ms,
                                                   const std::function<bool()>& cancelled,
                                                   CallInfo* info) {
  auto labelled = [&](Error e) {
    if (!starts_with(e.message, "stdio upstream") && !starts_with(e.message, "upstream")) {
      e.message = label() + ": " + e.message;
    }
    return e;
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!session_ready()) {
      // No live session: open one (its handshake and listing) within the call's deadline.
      int64_t opened_at = clock_();
      ListInfo li;
      auto opened = list_locked(deadline_ms, normalized({}), &li);
      if (!opened.ok()) return opened.error();
      info->connect_ms = clock_() - opened_at;
      if (!session_ready()) {
        return Error(ErrorCode::kUpstreamUnavailable,
                     label() + ": no session to call on (the listing ended without one)");
      }
    } else if (attempt == 0) {
      info->reused = true;
    }
    Session& s = *session_;
    int64_t now = clock_();
    if (now >= deadline_ms) {
      return Error(ErrorCode::kTimeout, label() + ": " + method + ": no time left to send it");
    }
    Result<int64_t> id = s.mcp->call(method, params, deadline_ms - now, now);
    if (!id.ok()) return labelled(id.error());
    const int64_t sent_at = now;
    // The request goes out with the whole deadline (an HTTP POST blocks until its answer).
    s.send_until = deadline_ms;
    flush_transmits();
    process_events();
    // Dead when sending (the write failed: the child exited while idle): the request cannot
    // have run.
    const bool dead_on_send = s.closed;
    auto answered = [&] { return s.calls_done.count(*id) != 0 || s.closed; };
    while (!answered()) {
      now = clock_();
      if (cancelled && cancelled()) {
        s.mcp->cancel_call(*id, "the client went away");
        s.send_until = now + kCallCancelPollMs;
        flush_transmits();
        process_events();
        return Error(ErrorCode::kTimeout,  // no code of its own: nobody reads it (the client left)
                     label() + ": " + method +
                         ": cancelled, the client went away "
                         "(notifications/cancelled sent)");
      }
      if (now >= deadline_ms) {
        // The session's own timer for the call fires at the deadline: expire it there (the
        // notifications/cancelled it queues gets a short send budget of its own).
        s.mcp->handle_timeout(std::max(now, deadline_ms));
        s.send_until = now + kCallCancelPollMs;
        flush_transmits();
        process_events();
        break;
      }
      drive(std::min(deadline_ms, now + kCallCancelPollMs), answered);
    }
    auto it = s.calls_done.find(*id);
    if (it == s.calls_done.end()) {
      // The session ended under the call (the child exited, the transport broke).
      Error why = s.failure ? *s.failure : Error(ErrorCode::kTransport, "the session closed");
      bool reused = info->reused && !info->retried;
      end_session(/*failure=*/true, why);
      if (reused && attempt == 0 && dead_on_send) {
        // Found dead when sending on a kept session: the request cannot have run. Once more on
        // a fresh session (ADR-004's self-heal, narrowed to what is safe for a call).
        log("the kept session was dead when " + method + " was sent (" + why.message +
            "); sending it on a fresh session");
        info->retried = true;
        continue;
      }
      return Error(ErrorCode::kUpstreamUnavailable,
                   labelled(why).message + " (the session ended during " + method + ")");
    }
    McpSession::CallDone done = std::move(it->second);
    s.calls_done.erase(it);
    info->call_ms = clock_() - sent_at;
    if (done.failure) {
      Error e = labelled(*done.failure);
      e.message = label() + ": " + method + ": " + done.failure->message;
      bool expired = s.t.session_expired && s.t.session_expired();
      if ((expired || dead_on_send) && attempt == 0 && info->reused) {
        // A kept session found dead when sending (the child had exited, the server had expired
        // the HTTP session): the request was refused, not run. Once more on a fresh session
        // (ADR-004's self-heal, narrowed to what is safe for a call).
        end_session(/*failure=*/true, e);
        log("the kept session was dead when " + method + " was sent (" + e.message +
            "); sending it on a fresh session");
        info->retried = true;
        continue;
      }
      if (s.closed || expired) end_session(/*failure=*/true, e);
      if (e.code == ErrorCode::kTransport) e.code = ErrorCode::kUpstreamUnavailable;
      return e;
    }
    CallAnswer answer;
    answer.result = std::move(done.result);
    answer.error = std::move(done.error);
    return answer;
  }
  return Error(ErrorCode::kUpstreamUnavailable, label() + ": " + method + ": unavailable");
}

}  // namespace quiver
