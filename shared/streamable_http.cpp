#include "shared/streamable_http.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "shared/ascii.h"
#include "shared/http1.h"
#include "shared/jsonrpc.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {
namespace {

bool is_managed_header(std::string_view name) {
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
  if (ascii_istarts_with(name, "mcp-param-")) return true;  // SEP-2243 tool-parameter headers
  return std::any_of(std::begin(kManaged), std::end(kManaged),
                     [&](const char* m) { return ascii_iequals(name, m); });
}

bool valid_header_value(std::string_view v) {
  return std::none_of(v.begin(), v.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7f;
  });
}

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return out;
}

bool is_success(int status) { return status >= 200 && status <= 299; }

}  // namespace

// ---- outgoing requests ----------------------------------------------------------------------

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
  return "=?base64?" + base64_encode(value) + "?=";  // SEP-2243: RFC 4648 base64, padded
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

OutgoingMessage describe_outgoing(const Json& message) {
  OutgoingMessage out;
  auto note = [&](const Json& m) {
    if (!m.is_object()) return;
    const Json* method = json_field(m, "method");
    const Json* id = json_field(m, "id");
    if (method == nullptr || !method->is_string()) return;
    if (id != nullptr && !id->is_null()) out.request_ids.insert(id->dump());
    if (method->get_ref<const std::string&>() == "initialize") out.is_initialize = true;
  };
  if (message.is_array()) {
    for (const Json& m : message) note(m);
  } else {
    note(message);
  }
  out.is_listen = message.is_object() && json_string(message, "method") == "subscriptions/listen" &&
                  out.request_ids.size() == 1;
  return out;
}

bool is_visible_ascii(std::string_view s, std::size_t max_bytes) {
  if (s.empty() || s.size() > max_bytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
}

Status check_configured_headers(const std::vector<HttpHeader>& headers) {
  for (const HttpHeader& h : headers) {
    if (!http1_is_token(h.name)) {
      return Error(ErrorCode::kInvalidArgument,
                   "header name '" + one_line(h.name) + "' is not an HTTP token");
    }
    if (is_managed_header(h.name)) {
      return Error(ErrorCode::kInvalidArgument,
                   "header '" + h.name + "' is managed by the transport and cannot be set");
    }
    if (!valid_header_value(h.value)) {
      return Error(ErrorCode::kInvalidArgument,
                   "the value of header '" + h.name + "' contains a control character");
    }
  }
  return Status::Ok();
}

std::vector<std::string> secret_header_terms(const std::vector<HttpHeader>& headers) {
  std::vector<std::string> terms;
  for (const HttpHeader& h : headers) {
    if (h.value.empty()) continue;
    terms.push_back(h.value);
    // "Bearer <token>": the token alone may be echoed too.
    std::size_t start = 0;
    while (start < h.value.size()) {
      std::size_t end = h.value.find_first_of(" \t,;", start);
      if (end == std::string::npos) end = h.value.size();
      if (end - start >= 8 && end - start < h.value.size()) {
        terms.push_back(h.value.substr(start, end - start));
      }
      start = end + 1;
    }
  }
  return terms;
}

// ---- text ---------------------------------------------------------------------------------

std::string http_media_type(std::string_view content_type) {
  std::string_view t = content_type.substr(0, content_type.find(';'));
  std::size_t b = t.find_first_not_of(" \t");
  std::size_t e = t.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string() : ascii_lower(t.substr(b, e - b + 1));
}

std::string clip_server_text(std::string_view text, std::size_t max_bytes) {
  std::string line = one_line(text);
  if (line.size() <= max_bytes) return line;
  return cut_utf8(line, max_bytes) + "\xE2\x80\xA6";
}

// ---- statuses ------------------------------------------------------------------------------

HttpStatusClass classify_http_status(HttpExchangeKind kind, int status, bool sent_session) {
  if (is_success(status)) return HttpStatusClass::kSuccess;
  switch (kind) {
    case HttpExchangeKind::kOpenStream:
      // The spec lets a server answer 405 (or 404) when it offers no GET stream; 404 wins over
      // the dead-session reading here.
      if (status == 405 || status == 404) return HttpStatusClass::kNotOffered;
      break;
    case HttpExchangeKind::kResume:
      if (status == 405) return HttpStatusClass::kNotOffered;
      break;
    case HttpExchangeKind::kPost:
    case HttpExchangeKind::kReconnectStream:
      break;
  }
  // 400: server-everything's answer to an unknown session.
  if ((status == 404 || status == 400) && sent_session) return HttpStatusClass::kSessionExpired;
  if (status == 401 || status == 403) return HttpStatusClass::kUnauthenticated;
  return HttpStatusClass::kFailed;
}

Error http_status_error(HttpExchangeKind kind, int status, bool sent_session,
                        std::string_view where, std::string_view snippet) {
  const std::string what = "HTTP " + std::to_string(status) + " from " + std::string(where);
  const HttpStatusClass cls = classify_http_status(kind, status, sent_session);
  switch (kind) {
    case HttpExchangeKind::kOpenStream:
      if (cls == HttpStatusClass::kSessionExpired) {
        return Error(
            ErrorCode::kTransport,
            "session expired: " + what + " to the GET stream; re-initialize on a new transport");
      }
      if (cls == HttpStatusClass::kUnauthenticated) {
        return Error(ErrorCode::kUnauthenticated,
                     what + " to the GET stream (credentials missing or refused)");
      }
      return Error(ErrorCode::kTransport, what + " to the GET stream");
    case HttpExchangeKind::kReconnectStream:
      if (cls == HttpStatusClass::kSessionExpired) {
        return Error(ErrorCode::kTransport,
                     "session expired: " + what +
                         " when the GET stream reconnected; re-initialize on a new transport");
      }
      if (cls == HttpStatusClass::kUnauthenticated) {
        return Error(ErrorCode::kUnauthenticated, what + " when the GET stream reconnected");
      }
      if (cls == HttpStatusClass::kSuccess) {
        return Error(ErrorCode::kInvalidReply,
                     std::string(where) + " answered the GET stream without an event stream");
      }
      return Error(ErrorCode::kTransport, what);
    case HttpExchangeKind::kResume:
      if (cls == HttpStatusClass::kNotOffered) {
        return Error(ErrorCode::kTransport,
                     std::string(where) +
                         " ended the event stream before the response and offers no GET "
                         "stream to resume it (HTTP 405)");
      }
      break;
    case HttpExchangeKind::kPost:
      break;
  }
  if (cls == HttpStatusClass::kSessionExpired) {
    return Error(ErrorCode::kTransport,
                 "session expired: " + what +
                     " to a request in a session; re-initialize on a new transport" +
                     std::string(snippet));
  }
  if (cls == HttpStatusClass::kUnauthenticated) {
    return Error(ErrorCode::kUnauthenticated,
                 what + " (credentials missing or refused)" + std::string(snippet));
  }
  return Error(ErrorCode::kTransport, what + std::string(snippet));
}

// ---- replies ------------------------------------------------------------------------------

ReplyBody reply_body_kind(int status, std::string_view content_type) {
  if (!is_success(status)) return ReplyBody::kOther;
  const std::string type = http_media_type(content_type);
  if (type == "application/json") return ReplyBody::kJson;
  if (type == "text/event-stream") return ReplyBody::kSse;
  return ReplyBody::kOther;
}

Result<std::string> reply_session_id(std::string_view header_value, std::string_view where) {
  if (header_value.empty()) return std::string();
  if (!is_visible_ascii(header_value, kMaxSessionIdBytes)) {
    return Error(ErrorCode::kInvalidReply,
                 std::string(where) + " sent an invalid Mcp-Session-Id (visible ASCII, at most " +
                     std::to_string(kMaxSessionIdBytes) + " bytes)");
  }
  return std::string(header_value);
}

ReplyReader::ReplyReader(std::string where, std::size_t max_reply_bytes,
                         std::set<std::string> pending, Mode mode)
    : where_(std::move(where)),
      max_reply_bytes_(max_reply_bytes),
      mode_(mode),
      pending_(std::move(pending)),
      expects_response_(!pending_.empty()),
      sse_(max_reply_bytes) {}

void ReplyReader::begin_response(int status, std::string_view content_type) {
  status_ = status;
  content_type_.assign(content_type.data(), content_type.size());
  body_ = status == 0 ? ReplyBody::kNone : reply_body_kind(status, content_type);
  buffer_.clear();
  body_cut_ = false;
  failure_.reset();
}

Status ReplyReader::accept(std::string_view text) {
  auto parsed = parse_jsonrpc_batch(text, max_reply_bytes_);
  if (!parsed.ok() && parsed.error().code == ErrorCode::kTooLarge) {
    return Error(ErrorCode::kTooLarge,
                 "the reply of " + where_ + " is not JSON-RPC (" + parsed.error().message + ")");
  }
  if (!parsed.ok()) {
    // Unreadable (nested too deep, not JSON-RPC): handed to the session as over stdio, which
    // counts it and fails the request it answers, if it answers one; a notification that cannot
    // be read is skipped and the rest of the stream still counts.
    if (std::optional<int64_t> id = unreadable_response_id(text)) {
      pending_.erase(std::to_string(*id));
    }
    if (unreadable_.empty()) unreadable_ = parsed.error().message;
  } else {
    for (const JsonRpcMessage& m : *parsed) {
      if (m.kind == JsonRpcKind::kResult || m.kind == JsonRpcKind::kError) {
        pending_.erase(m.id.dump());
      }
    }
  }
  messages_.emplace_back(text);
  return Status::Ok();
}

Status ReplyReader::accept_text(std::string_view text) { return accept(text); }

ReplyReader::Feed ReplyReader::feed(std::string_view bytes) {
  if (body_ == ReplyBody::kOther || body_ == ReplyBody::kNone) {
    std::size_t keep =
        std::min(bytes.size(), kErrorBodyKeep - std::min(kErrorBodyKeep, buffer_.size()));
    buffer_.append(bytes.data(), keep);
    if (keep < bytes.size()) {
      body_cut_ = true;
      return Feed::kBodyCut;
    }
    return Feed::kContinue;
  }
  if (mode_ == Mode::kReply) {
    received_ += bytes.size();
    if (received_ > max_reply_bytes_) {
      failure_ = Error(ErrorCode::kTooLarge, "the reply of " + where_ + " exceeds " +
                                                 std::to_string(max_reply_bytes_) + " bytes");
      return Feed::kFailed;
    }
  }
  if (body_ == ReplyBody::kJson) {
    buffer_.append(bytes.data(), bytes.size());
    return Feed::kContinue;
  }
  sse_.feed(bytes);
  for (;;) {
    auto event = sse_.next();
    if (!event.ok()) {
      const char* stream = mode_ == Mode::kReply ? "event stream of " : "notification stream of ";
      failure_ = Error(event.error().code, stream + where_ + ": " + event.error().message);
      return Feed::kFailed;
    }
    if (!event->has_value()) return Feed::kContinue;
    const SseEvent& e = **event;
    // Priming events and events of other types carry no MCP message.
    if (e.priming || e.type != "message") continue;
    Status st = accept(e.data);
    if (!st.ok()) {
      failure_ = st.error();
      return Feed::kFailed;
    }
    if (mode_ == Mode::kReply && answered()) return Feed::kAnswered;
  }
}

// A 4xx (not 401/403, not a dead session) whose whole body is a JSON-RPC message answering a
// request of this exchange: 2026-07-28 servers refuse a request so (-32020 header mismatch,
// -32022 unsupported version, ...), and that is the answer, not a failure.
bool ReplyReader::accept_error_answer(bool sent_session) {
  if (status_ < 400 || status_ > 499 || body_cut_ || !expects_response_ ||
      classify_http_status(HttpExchangeKind::kPost, status_, sent_session) !=
          HttpStatusClass::kFailed ||
      http_media_type(content_type_) != "application/json") {
    return false;
  }
  auto parsed = parse_jsonrpc_batch(buffer_, max_reply_bytes_);
  if (!parsed.ok()) return false;
  std::set<std::string> pending = pending_;
  for (const JsonRpcMessage& m : *parsed) {
    if (m.kind != JsonRpcKind::kError && m.kind != JsonRpcKind::kResult) return false;
    pending.erase(m.id.dump());
  }
  if (pending.size() == pending_.size()) return false;
  pending_ = std::move(pending);
  messages_.push_back(buffer_);
  return true;
}

ReplyReader::Next ReplyReader::fail(ErrorCode code, std::string message) const {
  Next next;
  next.action = Next::Action::kFail;
  next.error = Error(code, std::move(message));
  return next;
}

ReplyReader::Next ReplyReader::after_post(bool sent_session) {
  if (answered()) return Next{};
  if (!is_success(status_)) {
    if (accept_error_answer(sent_session)) return Next{};
    Next next;
    next.action = Next::Action::kStatusError;
    next.status_class = classify_http_status(HttpExchangeKind::kPost, status_, sent_session);
    return next;
  }
  // 202 Accepted / 204 No Content acknowledge a notification or response; whatever body a server
  // adds ("Accepted") carries no message.
  const bool acknowledgement = status_ == 202 || status_ == 204;
  const bool blank = buffer_.find_first_not_of(" \t\r\n") == std::string::npos;
  switch (body_) {
    case ReplyBody::kJson:
      if (acknowledgement || (blank && !expects_response_)) break;
      if (Status st = accept(buffer_); !st.ok()) return fail(st.error().code, st.error().message);
      break;
    case ReplyBody::kSse:
      (void)sse_.finish();  // an event cut off by the close is resumed below or lost
      break;
    case ReplyBody::kOther:
    case ReplyBody::kNone:
      if (!acknowledgement && !blank) {
        return fail(ErrorCode::kInvalidReply, where_ + " answered with Content-Type '" +
                                                  clip_server_text(content_type_, 80) +
                                                  "', not JSON or an event stream");
      }
      break;
  }
  if (pending_.empty()) return Next{};
  if (!unreadable_.empty()) {
    return fail(ErrorCode::kInvalidReply,
                "the reply of " + where_ + " is not JSON-RPC (" + unreadable_ + ")");
  }
  if (body_ != ReplyBody::kSse) {
    return fail(ErrorCode::kInvalidReply, "HTTP " + std::to_string(status_) + " from " + where_ +
                                              " carries no response to the request");
  }
  Next next;
  next.action = Next::Action::kResume;
  return next;
}

ReplyReader::Next ReplyReader::after_resume(bool sent_session) {
  if (answered()) return Next{};
  if (!is_success(status_)) {
    Next next;
    next.action = Next::Action::kStatusError;
    next.status_class = classify_http_status(HttpExchangeKind::kResume, status_, sent_session);
    return next;
  }
  if (body_ != ReplyBody::kSse) {
    return fail(ErrorCode::kInvalidReply,
                where_ + " answered the resumption GET without an event stream");
  }
  (void)sse_.finish();
  if (pending_.empty()) return Next{};
  Next next;
  next.action = Next::Action::kResume;
  return next;
}

ReplyReader::Next ReplyReader::plan_resume(int attempt, int64_t ms_left,
                                           std::optional<int64_t> retry_ms, int64_t min_retry_ms,
                                           int64_t initial_backoff_ms,
                                           int64_t max_backoff_ms) const {
  if (sse_.last_event_id().empty()) {
    return fail(ErrorCode::kTransport,
                where_ +
                    " ended the event stream before the response (no event id to resume "
                    "from)");
  }
  if (attempt > kMaxResumptions) {
    return fail(ErrorCode::kTransport, where_ + " never delivered the response after " +
                                           std::to_string(kMaxResumptions) + " resumptions");
  }
  const int64_t delay =
      std::clamp(retry_ms.value_or(initial_backoff_ms), min_retry_ms, max_backoff_ms);
  if (ms_left <= delay) {
    return fail(ErrorCode::kTimeout, where_ +
                                         " closed the event stream before the response and "
                                         "asked to reconnect after " +
                                         std::to_string(delay) + " ms, past the deadline");
  }
  Next next;
  next.action = Next::Action::kResume;
  next.delay_ms = delay;
  return next;
}

std::vector<std::string> ReplyReader::take_messages() {
  std::vector<std::string> out;
  out.swap(messages_);
  return out;
}

// ---- the listen stream --------------------------------------------------------------------

int64_t reconnect_delay_ms(std::optional<int64_t> retry_ms, int64_t backoff_ms,
                           const ReconnectBounds& bounds) {
  if (retry_ms) return std::clamp(*retry_ms, bounds.min_retry_ms, bounds.max_backoff_ms);
  return backoff_ms;
}

StreamReconnector::StreamReconnector(ReconnectBounds bounds)
    : bounds_(bounds), backoff_ms_(bounds.initial_backoff_ms) {}

StreamReconnector::Step StreamReconnector::after(const StreamAttempt& a,
                                                 std::optional<int64_t> retry_ms,
                                                 std::string_view where) {
  Step step;
  auto lost = [&](Error e) {
    step.action = Step::Action::kLost;
    step.error = std::move(e);
    return step;
  };
  if (a.read_failure) return lost(*a.read_failure);
  if (!a.is_stream) {
    const HttpExchangeKind kind =
        a.first ? HttpExchangeKind::kOpenStream : HttpExchangeKind::kReconnectStream;
    const HttpStatusClass cls = a.status == 0
                                    ? HttpStatusClass::kFailed
                                    : classify_http_status(kind, a.status, a.sent_session);
    step.session_expired = cls == HttpStatusClass::kSessionExpired;
    const Error no_response = a.no_response ? *a.no_response
                                            : Error(ErrorCode::kTransport,
                                                    "request to " + std::string(where) + " failed");
    if (a.first) {
      if (cls == HttpStatusClass::kNotOffered) {
        step.action = Step::Action::kNotOffered;
        return step;
      }
      step.action = Step::Action::kOpenFailed;
      step.error = a.status == 0 ? no_response
                                 : http_status_error(kind, a.status, a.sent_session, where, "");
      return step;
    }
    if (cls != HttpStatusClass::kFailed) {
      return lost(http_status_error(kind, a.status, a.sent_session, where, ""));
    }
    last_failure_ = a.status == 0
                        ? no_response.message
                        : "HTTP " + std::to_string(a.status) + " from " + std::string(where);
    if (++failures_ >= bounds_.max_failures) {
      return lost(Error(ErrorCode::kTransport, "notification stream of " + std::string(where) +
                                                   " lost after " + std::to_string(failures_) +
                                                   " failed reconnections (last: " + last_failure_ +
                                                   ")"));
    }
  } else {
    failures_ = 0;
    if (a.delivered) backoff_ms_ = bounds_.initial_backoff_ms;
  }
  step.action = Step::Action::kReconnect;
  step.delay_ms = reconnect_delay_ms(retry_ms, backoff_ms_, bounds_);
  if (!retry_ms) backoff_ms_ = std::min(backoff_ms_ * 2, bounds_.max_backoff_ms);
  return step;
}

}  // namespace quiver
