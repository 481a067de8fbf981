#include "shared/mcp_session.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "shared/enum_names.h"
#include "shared/state_table.h"
#include "shared/utf8.h"

namespace quiver {
namespace {

// The state table: every legal (state, input) → state. Anything else is refused.
using S = SessionState;
using I = SessionInput;
constexpr Transition<S, I> kTransitions[] = {
    {S::kIdle, I::kStartDiscover, S::kDiscovering},
    {S::kIdle, I::kStartInitialize, S::kInitializing},
    {S::kDiscovering, I::kStartInitialize, S::kInitializing},  // legacy server: fall back
    {S::kDiscovering, I::kHandshakeDone, S::kListing},
    {S::kInitializing, I::kHandshakeDone, S::kListing},
    {S::kInitializing, I::kStartDiscover, S::kDiscovering},  // -32022 to initialize: rediscover
    {S::kListing, I::kListingDone, S::kReady},
    {S::kReady, I::kRelist, S::kListing},
    {S::kIdle, I::kFail, S::kClosed},
    {S::kDiscovering, I::kFail, S::kClosed},
    {S::kInitializing, I::kFail, S::kClosed},
    {S::kListing, I::kFail, S::kClosed},
    {S::kReady, I::kFail, S::kClosed},
    {S::kIdle, I::kClose, S::kClosed},
    {S::kDiscovering, I::kClose, S::kClosed},
    {S::kInitializing, I::kClose, S::kClosed},
    {S::kListing, I::kClose, S::kClosed},
    {S::kReady, I::kClose, S::kClosed},
};

constexpr const char* const kStateNames[] = {"idle",    "discovering", "initializing",
                                             "listing", "ready",       "closed"};
static_assert(std::size(kStateNames) == kSessionStateCount);
constexpr const char* const kInputNames[] = {"start_discover", "start_initialize", "handshake_done",
                                             "listing_done",   "relist",           "fail",
                                             "close"};
static_assert(std::size(kInputNames) == kSessionInputCount);

constexpr ListKind kAllKinds[] = {ListKind::kTools, ListKind::kResources,
                                  ListKind::kResourceTemplates, ListKind::kPrompts};

constexpr std::size_t kMaxAbandonedIds = 4096;
constexpr std::size_t kMaxCursorInMessage = 64;

const char* kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
const char* kMetaClientInfo = "io.modelcontextprotocol/clientInfo";
const char* kMetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities";
const char* kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

int idx(ListKind k) { return static_cast<int>(k); }

// Upstream text goes into error messages: no control characters, bounded, cut on a UTF-8
// character boundary.
std::string clip(std::string_view text, std::size_t max_chars) {
  std::string out;
  out.reserve(std::min(text.size(), max_chars + 4));
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
    if (out.size() > max_chars + 4) break;
  }
  if (out.size() > max_chars) out = cut_utf8(out, max_chars) + "...";
  return out;
}

std::string quoted(std::string_view s, std::size_t max_chars) {
  return "\"" + clip(s, max_chars) + "\"";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out.empty() ? "(none)" : out;
}

// A JSON array of version strings, clipped for messages; non-strings are skipped.
std::vector<std::string> string_array(const Json* value, std::size_t max_chars) {
  std::vector<std::string> out;
  if (value == nullptr || !value->is_array()) return out;
  for (const Json& v : *value) {
    if (v.is_string()) out.push_back(clip(v.get<std::string>(), max_chars));
  }
  return out;
}

// Newest version in `ours` (newest first) that `theirs` lists.
std::optional<std::string> pick(const std::vector<std::string>& ours, const Json* theirs) {
  if (theirs == nullptr || !theirs->is_array()) return std::nullopt;
  for (const auto& v : ours) {
    for (const Json& t : *theirs) {
      if (t.is_string() && t.get<std::string>() == v) return v;
    }
  }
  return std::nullopt;
}

// 2026-07-28 basic/index "ResultType": absent = complete; anything else is invalid for us.
std::optional<std::string> result_type_problem(const Json& result) {
  const Json* t = json_field(result, "resultType");
  if (t == nullptr) return std::nullopt;
  if (!t->is_string()) return std::string("\"resultType\" is not a string");
  const auto& s = t->get_ref<const std::string&>();
  if (s == "complete") return std::nullopt;
  if (s == "input_required") {
    return std::string(
        "the server asked for client input (input_required); a discovery client "
        "has none to give");
  }
  return "unknown resultType " + quoted(s, 40);
}

bool advertised(const Json& capabilities, const char* key) {
  const Json* v = json_field(capabilities, key);
  return v != nullptr && !v->is_null() && !(v->is_boolean() && !v->get<bool>());
}

const char* capability_key(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return "tools";
    case ListKind::kResources:
    case ListKind::kResourceTemplates:
      return "resources";
    case ListKind::kPrompts:
      return "prompts";
  }
  return "";
}

std::optional<int64_t> ttl_of(const Json& result) {
  const Json* t = json_field(result, "ttlMs");
  if (t == nullptr || !json_number(*t)) return std::nullopt;  // a number literal counts
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t ttl = 0;
  if (t->is_number_unsigned()) {
    auto u = t->get<uint64_t>();
    ttl = u > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(u);
  } else if (t->is_number_integer()) {
    ttl = t->get<int64_t>();
  } else {
    double d = *json_number(*t);
    ttl = !(d > 0) ? 0 : d >= 9.0e18 ? kMax : static_cast<int64_t>(d);
  }
  return std::max<int64_t>(ttl, 0);  // caching: "negative: treat it as 0"
}

void merge_hints(CacheHints& hints, const Json& result) {
  if (auto ttl = ttl_of(result)) hints.ttl_ms = hints.ttl_ms ? std::min(*hints.ttl_ms, *ttl) : *ttl;
  auto scope = json_string(result, "cacheScope");
  if (!scope) return;
  if (*scope == "private") {
    hints.cache_scope = "private";
  } else if (*scope == "public" && !hints.cache_scope) {
    hints.cache_scope = "public";
  }
}

}  // namespace

const char* protocol_era_name(ProtocolEra era) {
  return era == ProtocolEra::kModern ? "modern" : "legacy";
}

bool is_known_protocol_version(std::string_view version) {
  for (const char* v : kMcpKnownVersions) {
    if (version == v) return true;
  }
  return false;
}

bool is_modern_protocol_version(std::string_view version) {
  return version.size() == 10 && version >= std::string_view("2026-07-28");
}

Status validate_session_config(const McpSessionConfig& c) {
  auto bad = [](std::string what) { return Error(ErrorCode::kInvalidArgument, std::move(what)); };
  if (c.client_name.empty()) return bad("client_name is empty");
  if (c.client_version.empty()) return bad("client_version is empty");
  if (c.protocol_versions.empty()) return bad("protocol_versions is empty");
  bool modern = false, legacy = false;
  for (const auto& v : c.protocol_versions) {
    if (!is_known_protocol_version(v)) {
      return bad("protocol_versions: unknown MCP protocol version " + quoted(v, 40));
    }
    (is_modern_protocol_version(v) ? modern : legacy) = true;
  }
  if (c.era == EraPolicy::kModern && !modern) {
    return bad("era policy modern needs a modern protocol version (2026-07-28)");
  }
  if (c.era == EraPolicy::kLegacy && !legacy) {
    return bad("era policy legacy needs a legacy protocol version (2025-11-25 or older)");
  }
  if (c.request_timeout_ms <= 0) return bad("request_timeout_ms must be positive");
  if (c.discover_timeout_ms < 0) return bad("discover_timeout_ms must not be negative");
  if (c.handshake_timeout_ms < 0) return bad("handshake_timeout_ms must not be negative");
  if (c.listing_deadline_ms <= 0) return bad("listing_deadline_ms must be positive");
  if (c.startup_deadline_ms < 0) return bad("startup_deadline_ms must not be negative");
  if (c.max_pages_per_list < 1) return bad("max_pages_per_list must be at least 1");
  if (c.max_items_per_list < 1) return bad("max_items_per_list must be at least 1");
  if (c.max_listing_bytes < 1) return bad("max_listing_bytes must be at least 1");
  if (c.max_cursor_bytes < 1) return bad("max_cursor_bytes must be at least 1");
  if (c.max_restarts_per_list < 0) return bad("max_restarts_per_list must not be negative");
  if (c.max_message_bytes < 1) return bad("max_message_bytes must be at least 1");
  if (c.max_error_message_chars < 16) return bad("max_error_message_chars must be at least 16");
  return Status::Ok();
}

const char* session_state_name(SessionState state) {
  return name_of(kStateNames, state, "unknown");
}

const char* session_input_name(SessionInput input) {
  return name_of(kInputNames, input, "unknown");
}

std::optional<SessionState> session_transition(SessionState from, SessionInput input) {
  return next_state(kTransitions, from, input);
}

bool should_evict_and_retry(const Error& error) {
  return error.code != ErrorCode::kMethodNotFound && error.code != ErrorCode::kTimeout;
}

McpSession::McpSession(McpSessionConfig config) : config_(std::move(config)) {}

void McpSession::transition(SessionInput input) {
  // Callers only feed inputs the table allows in the current state; a miss is a bug here, and
  // the safe reaction is to stop talking to the peer.
  auto next = session_transition(state_, input);
  state_ = next ? *next : S::kClosed;
}

Status McpSession::start(int64_t now_ms) {
  if (state_ != S::kIdle) {
    return Error(ErrorCode::kConflict,
                 std::string("start: the session is already ") + session_state_name(state_));
  }
  Status valid = validate_session_config(config_);
  if (!valid.ok()) return valid;

  for (const auto& v : config_.protocol_versions) {
    auto& list = is_modern_protocol_version(v) ? modern_versions_ : legacy_versions_;
    if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
  }
  std::sort(modern_versions_.rbegin(), modern_versions_.rend());
  std::sort(legacy_versions_.rbegin(), legacy_versions_.rend());
  policy_ = config_.era;
  if (policy_ == EraPolicy::kProbe && legacy_versions_.empty()) policy_ = EraPolicy::kModern;
  if (policy_ == EraPolicy::kProbe && modern_versions_.empty()) policy_ = EraPolicy::kLegacy;

  listing_ = Listing{};
  listing_.started_at_ms = now_ms;
  deadline_ms_ = now_ms + (config_.startup_deadline_ms > 0 ? config_.startup_deadline_ms
                                                           : config_.listing_deadline_ms);
  if (policy_ == EraPolicy::kLegacy) {
    era_ = ProtocolEra::kLegacy;
    transition(I::kStartInitialize);
    send_initialize(now_ms);
  } else {
    transition(I::kStartDiscover);
    send_discover(modern_versions_.front(), now_ms);
  }
  return Status::Ok();
}

int64_t McpSession::send_request(std::string_view method, Json params, Purpose purpose,
                                 ListKind kind, int64_t timeout_ms, int64_t now_ms) {
  if (purpose == Purpose::kDiscover || era_ == ProtocolEra::kModern) {
    // 2026-07-28 basic/index#meta: every request carries its version, identity, capabilities.
    if (!params.is_object()) params = Json::object();
    params["_meta"] = Json{
        {kMetaProtocolVersion, protocol_version_},
        {kMetaClientInfo, {{"name", config_.client_name}, {"version", config_.client_version}}},
        {kMetaClientCapabilities, Json::object()}};
  }
  int64_t id = next_id_++;
  pending_[id] = Pending{purpose, kind, now_ms + timeout_ms, now_ms};
  transmits_.push_back(encode_request(id, method, params));
  ++stats_.requests_sent;
  return id;
}

void McpSession::send_notification(std::string_view method, Json params) {
  transmits_.push_back(encode_notification(method, params));
}

void McpSession::abandon(int64_t id, const char* reason, bool cancel) {
  pending_.erase(id);
  abandoned_.insert(id);
  while (abandoned_.size() > kMaxAbandonedIds) abandoned_.erase(abandoned_.begin());
  if (cancel && config_.send_cancellations) {
    send_notification("notifications/cancelled", Json{{"requestId", id}, {"reason", reason}});
  }
}

// --- inputs -------------------------------------------------------------------------------

Status McpSession::handle_text(std::string_view text, int64_t now_ms) {
  auto parsed = parse_jsonrpc_batch(text, config_.max_message_bytes);
  if (!parsed.ok()) {
    ++stats_.garbage_messages;
    if (parsed.error().code != ErrorCode::kTooLarge) {
      if (std::optional<int64_t> id = unreadable_response_id(text)) {
        if (pending_.count(*id) != 0) {
          on_request_failed(*id,
                            Error(ErrorCode::kInvalidReply,
                                  "the reply cannot be read: " + parsed.error().message),
                            now_ms);
        }
      }
    }
    return parsed.error();
  }
  for (JsonRpcMessage& m : *parsed) handle_message(std::move(m), now_ms);
  return Status::Ok();
}

void McpSession::handle_message(JsonRpcMessage message, int64_t now_ms) {
  if (state_ == S::kClosed) return;
  expire(now_ms);  // an answer after its deadline does not count
  if (state_ == S::kClosed) return;
  switch (message.kind) {
    case JsonRpcKind::kRequest:
      on_server_request(message);
      return;
    case JsonRpcKind::kNotification:
      on_notification(message, now_ms);
      return;
    case JsonRpcKind::kResult:
    case JsonRpcKind::kError:
      break;
  }
  if (message.id.is_number_integer()) {
    int64_t id = message.id.get<int64_t>();
    if (pending_.count(id) != 0) {
      dispatch_response(id, message, now_ms);
    } else if (id == late_probe_id_ && on_late_probe_answer(message, now_ms)) {
      return;
    } else if (abandoned_.count(id) != 0) {
      ++stats_.late_responses;
    } else {
      ++stats_.unknown_responses;
    }
    return;
  }
  // JSON-RPC: an error whose request id could not be read carries a null id. With one request in
  // flight there is no doubt which one it answers.
  if (message.kind == JsonRpcKind::kError && message.id.is_null() && pending_.size() == 1) {
    dispatch_response(pending_.begin()->first, message, now_ms);
    return;
  }
  ++stats_.unknown_responses;
}

void McpSession::on_server_request(const JsonRpcMessage& message) {
  ++stats_.answered_server_requests;
  if (message.method == "ping") {
    transmits_.push_back(encode_result(message.id, Json::object()));
    return;
  }
  // roots/list, sampling/createMessage, elicitation/create, ...: we declared no capabilities.
  transmits_.push_back(encode_error(message.id, kJsonRpcMethodNotFound, "Method not found"));
}

void McpSession::on_notification(const JsonRpcMessage& message, int64_t now_ms) {
  const std::string& m = message.method;
  if (m == "notifications/tools/list_changed") {
    on_list_changed(ListKind::kTools, now_ms);
  } else if (m == "notifications/resources/list_changed") {
    on_list_changed(ListKind::kResources, now_ms);
    on_list_changed(ListKind::kResourceTemplates, now_ms);
  } else if (m == "notifications/prompts/list_changed") {
    on_list_changed(ListKind::kPrompts, now_ms);
  } else if (m == "notifications/subscriptions/acknowledged" && listen_id_) {
    listen_acknowledged_ = true;  // subscriptions/listen part
    ++listen_acks_;
  } else {
    ++stats_.ignored_notifications;
  }
}

void McpSession::handle_timeout(int64_t now_ms) { expire(now_ms); }

void McpSession::expire(int64_t now_ms) {
  std::vector<int64_t> due;
  for (const auto& [id, p] : pending_) {
    if (p.purpose != Purpose::kListen && p.deadline_ms <= now_ms) due.push_back(id);
  }
  for (int64_t id : due) {
    auto it = pending_.find(id);
    if (it == pending_.end() || state_ == S::kClosed) continue;
    Pending p = it->second;
    switch (p.purpose) {
      case Purpose::kDiscover: {
        abandon(id, "timeout", /*cancel=*/false);
        late_probe_id_ = id;  // a slow modern server may still answer it: accepted then
        on_probe_unanswered(
            Error(ErrorCode::kTimeout, "server/discover: no answer within " +
                                           std::to_string(probe_timeout_ms()) + " ms"),
            now_ms);
        break;
      }
      case Purpose::kInitialize:
        abandon(id, "timeout", /*cancel=*/false);  // initialize must not be cancelled
        shut_down(I::kFail,
                  Error(ErrorCode::kTimeout, "initialize: no answer within " +
                                                 std::to_string(handshake_timeout_ms()) + " ms"),
                  Error(), now_ms);
        break;
      case Purpose::kListPage: {
        abandon(id, "timeout", /*cancel=*/true);
        const ListOutcome& out = listing_.list(p.kind);
        fail_list(
            p.kind,
            Error(ErrorCode::kTimeout, std::string(list_method(p.kind)) + ": no answer within " +
                                           std::to_string(config_.request_timeout_ms) +
                                           " ms (after " + std::to_string(out.pages) + " pages)"),
            now_ms);
        break;
      }
      case Purpose::kListen:  // never due: the subscription has no deadline
        break;
      case Purpose::kCall:
        abandon(id, "timeout", /*cancel=*/true);
        call_failed(id, Error(ErrorCode::kTimeout, "no answer within " +
                                                       std::to_string(p.deadline_ms - p.sent_at) +
                                                       " ms (notifications/cancelled sent)"));
        break;
    }
  }
  if (now_ms < deadline_ms_) return;
  if (state_ == S::kDiscovering || state_ == S::kInitializing) {
    const bool startup = config_.startup_deadline_ms > 0;
    shut_down(I::kFail,
              Error(ErrorCode::kTimeout,
                    std::string(state_ == S::kDiscovering ? "server/discover" : "initialize") +
                        (startup ? ": the start-up deadline of " : ": the listing deadline of ") +
                        std::to_string(startup ? config_.startup_deadline_ms
                                               : config_.listing_deadline_ms) +
                        " ms passed during the handshake"),
              Error(), now_ms);
  } else if (state_ == S::kListing) {
    for (ListKind k : kAllKinds) {
      ListRun& run = runs_[idx(k)];
      if (!run.active) continue;
      abandon(run.request_id, "listing deadline", /*cancel=*/true);
      run.active = false;
      ListOutcome& out = listing_.list(k);
      out.state = ListState::kFailed;
      out.error = Error(ErrorCode::kTimeout,
                        std::string(list_method(k)) + ": the listing deadline of " +
                            std::to_string(config_.listing_deadline_ms) + " ms passed after " +
                            std::to_string(out.pages) + " pages");
    }
    maybe_finish_listing(now_ms);
  }
}

void McpSession::on_request_failed(int64_t request_id, const Error& error, int64_t now_ms) {
  if (state_ == S::kClosed) return;
  expire(now_ms);
  auto it = pending_.find(request_id);
  if (it == pending_.end() || state_ == S::kClosed) return;
  Pending p = it->second;
  Error e = error;
  if (e.code == ErrorCode::kUnknown) e.code = ErrorCode::kTransport;
  switch (p.purpose) {
    case Purpose::kDiscover:
      abandon(request_id, "rejected", /*cancel=*/false);
      on_probe_unanswered(Error(e.code, "server/discover: " + e.message), now_ms);
      break;
    case Purpose::kInitialize:
      abandon(request_id, "rejected", /*cancel=*/false);
      shut_down(I::kFail, Error(e.code, "initialize: " + e.message), Error(), now_ms);
      break;
    case Purpose::kListPage:
      abandon(request_id, "rejected", /*cancel=*/false);
      fail_list(p.kind, Error(e.code, std::string(list_method(p.kind)) + ": " + e.message), now_ms);
      break;
    case Purpose::kListen:
      abandon(request_id, "rejected", /*cancel=*/false);
      on_listen_ended(Error(e.code, "subscriptions/listen: " + e.message));
      break;
    case Purpose::kCall:
      abandon(request_id, "rejected", /*cancel=*/false);
      call_failed(request_id, e);
      break;
  }
}

void McpSession::on_transport_error(const Error& error, int64_t now_ms) {
  if (state_ == S::kClosed) return;
  Error e(ErrorCode::kTransport, error.message.empty() ? "transport failed" : error.message);
  shut_down(I::kFail, e, e, now_ms);
}

void McpSession::close(int64_t now_ms) {
  if (state_ == S::kClosed) return;
  shut_down(I::kClose, std::nullopt, Error(ErrorCode::kTransport, "session closed by the host"),
            now_ms);
}

Status McpSession::relist(const std::vector<ListKind>& kinds, int64_t now_ms) {
  expire(now_ms);
  if (state_ == S::kListing) {
    return Error(ErrorCode::kConflict, "relist: a listing is already running");
  }
  if (state_ != S::kReady) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("relist: the session is ") + session_state_name(state_));
  }
  if (kinds.empty()) return Error(ErrorCode::kInvalidArgument, "relist: no kinds given");
  for (auto& out : listing_.lists) out = ListOutcome{};
  listing_.started_at_ms = now_ms;
  listing_.finished_at_ms = 0;
  deadline_ms_ = now_ms + config_.listing_deadline_ms;
  transition(I::kRelist);
  begin_listing(kinds, now_ms);
  return Status::Ok();
}

// --- outputs ------------------------------------------------------------------------------

std::optional<std::string> McpSession::poll_transmit() {
  if (transmits_.empty()) return std::nullopt;
  std::string text = std::move(transmits_.front());
  transmits_.pop_front();
  return text;
}

std::optional<McpSession::Event> McpSession::poll_event() {
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<int64_t> McpSession::next_deadline() const {
  if (state_ == S::kClosed) return std::nullopt;
  std::optional<int64_t> next;
  for (const auto& [id, p] : pending_) {
    if (p.purpose == Purpose::kListen) continue;  // no deadline
    if (!next || p.deadline_ms < *next) next = p.deadline_ms;
  }
  if (state_ == S::kDiscovering || state_ == S::kInitializing || state_ == S::kListing) {
    if (!next || deadline_ms_ < *next) next = deadline_ms_;
  }
  return next;
}

// --- responses ----------------------------------------------------------------------------

void McpSession::dispatch_response(int64_t id, JsonRpcMessage& message, int64_t now_ms) {
  Pending p = pending_[id];
  pending_.erase(id);
  bool ok = message.kind == JsonRpcKind::kResult;
  switch (p.purpose) {
    case Purpose::kDiscover:
      if (ok) {
        on_discover_result(message.result, now_ms);
      } else {
        on_discover_error(message.error, now_ms);
      }
      return;
    case Purpose::kInitialize:
      if (ok) {
        on_initialize_result(message.result, now_ms);
      } else if (message.error.code == kMcpUnsupportedProtocolVersion &&
                 policy_ == EraPolicy::kProbe && !rediscovered_ && !modern_versions_.empty()) {
        // A 2026-07-28 server refusing initialize: the probe only gave up too early (a slow
        // start). It is modern: discover again, once, with the request deadline.
        rediscovered_ = true;
        era_ = ProtocolEra::kModern;
        transition(I::kStartDiscover);
        send_discover(modern_versions_.front(), now_ms);
      } else {
        shut_down(I::kFail,
                  Error(ErrorCode::kUpstreamError,
                        "initialize: upstream error " + std::to_string(message.error.code) + ": " +
                            clip(message.error.message, config_.max_error_message_chars)),
                  Error(), now_ms);
      }
      return;
    case Purpose::kListPage:
      runs_[idx(p.kind)].active = false;
      if (ok) {
        on_page_result(p.kind, message.result, message.wire_bytes, now_ms);
      } else {
        on_page_error(p.kind, message.error, now_ms);
      }
      return;
    case Purpose::kListen:
      if (ok) {
        on_listen_ended(std::nullopt);
      } else {
        on_listen_ended(
            Error(message.error.code == kJsonRpcMethodNotFound ? ErrorCode::kMethodNotFound
                                                               : ErrorCode::kUpstreamError,
                  "subscriptions/listen: upstream error " + std::to_string(message.error.code) +
                      ": " + clip(message.error.message, config_.max_error_message_chars)));
      }
      return;
    case Purpose::kCall: {
      CallDone done;
      done.id = id;
      if (ok) {
        done.result = std::move(message.result);
      } else {
        done.error = std::move(message.error);
        done.error->message = clip(done.error->message, config_.max_error_message_chars);
      }
      events_.push_back(std::move(done));
      return;
    }
  }
}

std::string McpSession::versions_we_speak(bool legacy_only) const {
  std::vector<std::string> all = legacy_versions_;
  if (!legacy_only) all.insert(all.begin(), modern_versions_.begin(), modern_versions_.end());
  return join(all);
}

int64_t McpSession::handshake_timeout_ms() const {
  return config_.handshake_timeout_ms > 0 ? config_.handshake_timeout_ms
                                          : config_.request_timeout_ms;
}

int64_t McpSession::probe_timeout_ms() const {
  // A server known to be modern: server/discover is its handshake, with the handshake's time.
  if (policy_ == EraPolicy::kModern) return handshake_timeout_ms();
  if (rediscovered_ || config_.discover_timeout_ms <= 0) return config_.request_timeout_ms;
  return config_.discover_timeout_ms;
}

void McpSession::send_discover(const std::string& version, int64_t now_ms) {
  protocol_version_ = version;
  send_request("server/discover", Json::object(), Purpose::kDiscover, ListKind::kTools,
               probe_timeout_ms(), now_ms);
}

bool McpSession::on_late_probe_answer(JsonRpcMessage& message, int64_t now_ms) {
  // Only while the handshake that replaced the probe is still running, and only a DiscoverResult
  // naming a modern version we speak: anything else stays a late answer.
  if (state_ != S::kInitializing && state_ != S::kDiscovering) return false;
  if (message.kind != JsonRpcKind::kResult || !message.result.is_object()) return false;
  if (!pick(modern_versions_, json_field(message.result, "supportedVersions"))) return false;
  late_probe_id_ = 0;
  ++stats_.late_responses;
  // The initialize (or second probe) in flight is superseded; its answer will be ignored.
  std::vector<int64_t> superseded;
  for (const auto& [id, p] : pending_) {
    if (p.purpose != Purpose::kListPage) superseded.push_back(id);
  }
  for (int64_t id : superseded) abandon(id, "superseded", /*cancel=*/false);
  if (state_ == S::kInitializing) transition(I::kStartDiscover);
  on_discover_result(message.result, now_ms);
  return true;
}

void McpSession::on_discover_result(const Json& result, int64_t now_ms) {
  auto invalid = [&](const std::string& why) {
    shut_down(I::kFail, Error(ErrorCode::kInvalidReply, "server/discover: " + why), Error(),
              now_ms);
  };
  if (!result.is_object()) return invalid("the result is not an object");
  if (auto problem = result_type_problem(result)) return invalid(*problem);
  const Json* supported = json_field(result, "supportedVersions");
  if (supported == nullptr || !supported->is_array()) {
    return invalid("\"supportedVersions\" is not an array");
  }
  const Json* capabilities = json_field(result, "capabilities");
  if (capabilities == nullptr || !capabilities->is_object()) {
    return invalid("\"capabilities\" is not an object");
  }
  auto version = pick(modern_versions_, supported);
  if (!version) {
    if (policy_ == EraPolicy::kProbe && pick(legacy_versions_, supported)) {
      return fall_back_to_initialize(now_ms);  // a dual-era server that lists legacy versions
    }
    return shut_down(I::kFail,
                     Error(ErrorCode::kProtocol, "server/discover: the server supports " +
                                                     join(string_array(supported, 40)) +
                                                     "; we speak " + versions_we_speak(false)),
                     Error(), now_ms);
  }
  era_ = ProtocolEra::kModern;
  protocol_version_ = *version;
  listing_.protocol_version = *version;
  listing_.server_capabilities = *capabilities;
  listing_.server_info = Json::object();
  const Json* meta = json_field(result, "_meta");
  const Json* info = meta != nullptr ? json_field(*meta, kMetaServerInfo) : nullptr;
  if (info == nullptr) info = json_field(result, "serverInfo");  // early drafts put it here
  if (info != nullptr && info->is_object()) listing_.server_info = *info;
  listing_.instructions = json_string(result, "instructions");
  if (config_.startup_deadline_ms > 0) deadline_ms_ = now_ms + config_.listing_deadline_ms;
  transition(I::kHandshakeDone);
  begin_listing({std::begin(kAllKinds), std::end(kAllKinds)}, now_ms);
}

void McpSession::on_discover_error(const JsonRpcError& error, int64_t now_ms) {
  std::string upstream = "upstream error " + std::to_string(error.code) + ": " +
                         clip(error.message, config_.max_error_message_chars);
  if (error.code == kMcpUnsupportedProtocolVersion) {
    // A modern server that does not serve our version. We speak one modern revision, so there is
    // no other modern version to retry with (TODO(protocol): retry here once we speak two); a
    // legacy version in its `supported` list lets the probe fall back to initialize.
    era_ = ProtocolEra::kModern;
    const Json* supported = json_field(error.data, "supported");
    // basic/versioning: retry once with a version both sides support, even the one just sent
    // (a server may refuse the first request of a client it does not know yet).
    if (auto again = pick(modern_versions_, supported); again && !discover_retried_) {
      discover_retried_ = true;
      return send_discover(*again, now_ms);
    }
    if (policy_ == EraPolicy::kProbe && pick(legacy_versions_, supported)) {
      return fall_back_to_initialize(now_ms);
    }
    return shut_down(
        I::kFail,
        Error(ErrorCode::kProtocol,
              "server/discover: the server does not support protocol version " +
                  quoted(protocol_version_, 40) + " and supports " +
                  join(string_array(supported, 40)) + "; we speak " + versions_we_speak(false)),
        Error(), now_ms);
  }
  if (error.code == kMcpHeaderMismatch || error.code == kMcpMissingRequiredClientCapability) {
    era_ = ProtocolEra::kModern;
    return shut_down(I::kFail, Error(ErrorCode::kProtocol, "server/discover: " + upstream), Error(),
                     now_ms);
  }
  // Not a modern error: a legacy server refusing an unknown pre-initialize request. The
  // fallback is deliberately not keyed to one code (stdio#backward-compatibility).
  on_probe_unanswered(
      Error(ErrorCode::kProtocol, "server/discover refused (" + upstream +
                                      "): the server does not speak " + protocol_version_),
      now_ms);
}

void McpSession::on_probe_unanswered(const Error& why, int64_t now_ms) {
  if (policy_ == EraPolicy::kProbe && !rediscovered_) return fall_back_to_initialize(now_ms);
  shut_down(I::kFail, why, Error(), now_ms);
}

void McpSession::fall_back_to_initialize(int64_t now_ms) {
  era_ = ProtocolEra::kLegacy;
  transition(I::kStartInitialize);
  send_initialize(now_ms);
}

void McpSession::send_initialize(int64_t now_ms) {
  protocol_version_.clear();  // nothing negotiated yet: no MCP-Protocol-Version header
  sent_initialize_ = true;
  Json params = {
      {"protocolVersion", legacy_versions_.front()},
      {"capabilities", Json::object()},
      {"clientInfo", {{"name", config_.client_name}, {"version", config_.client_version}}}};
  send_request("initialize", std::move(params), Purpose::kInitialize, ListKind::kTools,
               handshake_timeout_ms(), now_ms);
}

void McpSession::on_initialize_result(const Json& result, int64_t now_ms) {
  auto fail = [&](ErrorCode code, const std::string& why) {
    shut_down(I::kFail, Error(code, "initialize: " + why), Error(), now_ms);
  };
  if (!result.is_object()) return fail(ErrorCode::kInvalidReply, "the result is not an object");
  const Json* version = json_field(result, "protocolVersion");
  if (version == nullptr || !version->is_string()) {
    return fail(ErrorCode::kInvalidReply, "\"protocolVersion\" is not a string");
  }
  const auto& v = version->get_ref<const std::string&>();
  if (std::find(legacy_versions_.begin(), legacy_versions_.end(), v) == legacy_versions_.end()) {
    return fail(ErrorCode::kProtocol, "the server answered protocol version " + quoted(v, 40) +
                                          "; we asked for " + quoted(legacy_versions_.front(), 40) +
                                          " and speak " + versions_we_speak(true));
  }
  const Json* capabilities = json_field(result, "capabilities");
  if (capabilities == nullptr || !capabilities->is_object()) {
    return fail(ErrorCode::kInvalidReply, "\"capabilities\" is not an object");
  }
  const Json* info = json_field(result, "serverInfo");
  if (info == nullptr || !info->is_object()) {
    return fail(ErrorCode::kInvalidReply, "\"serverInfo\" is not an object");
  }
  era_ = ProtocolEra::kLegacy;
  protocol_version_ = v;
  listing_.protocol_version = v;
  listing_.server_capabilities = *capabilities;
  listing_.server_info = *info;
  listing_.instructions = json_string(result, "instructions");
  send_notification("notifications/initialized", Json());
  if (config_.startup_deadline_ms > 0) deadline_ms_ = now_ms + config_.listing_deadline_ms;
  transition(I::kHandshakeDone);
  begin_listing({std::begin(kAllKinds), std::end(kAllKinds)}, now_ms);
}

// --- listing ------------------------------------------------------------------------------

void McpSession::begin_listing(const std::vector<ListKind>& kinds, int64_t now_ms) {
  listing_bytes_ = 0;
  for (ListKind k : kAllKinds) {
    runs_[idx(k)] = ListRun{};
    listing_.list(k) = ListOutcome{};
  }
  for (ListKind k : kinds) {
    ListRun& run = runs_[idx(k)];
    if (run.wanted) continue;
    run.wanted = true;
    run.requested =
        config_.probe_unadvertised || advertised(listing_.server_capabilities, capability_key(k));
    if (!run.requested) listing_.list(k).state = ListState::kAbsent;
  }
  for (ListKind k : kAllKinds) {
    if (runs_[idx(k)].requested) request_page(k, std::nullopt, now_ms);
  }
  maybe_finish_listing(now_ms);
}

void McpSession::request_page(ListKind kind, const std::optional<std::string>& cursor,
                              int64_t now_ms) {
  Json params;  // legacy first page: no params, as the reference SDK client sends it
  if (cursor) params = Json{{"cursor", *cursor}};
  ListRun& run = runs_[idx(kind)];
  run.request_id = send_request(list_method(kind), std::move(params), Purpose::kListPage, kind,
                                config_.request_timeout_ms, now_ms);
  run.active = true;
}

void McpSession::on_page_result(ListKind kind, Json& result, std::size_t wire_bytes,
                                int64_t now_ms) {
  const std::string method = list_method(kind);
  const char* field = list_result_field(kind);
  auto invalid = [&](const std::string& why) {
    fail_list(kind, Error(ErrorCode::kInvalidReply, method + ": " + why), now_ms);
  };
  // The budget counts every page that arrives, even one that turns out malformed.
  listing_bytes_ += wire_bytes;
  if (listing_bytes_ > config_.max_listing_bytes) {
    return fail_list(
        kind,
        Error(ErrorCode::kTooLarge, method + ": the listing's pages exceed its byte budget of " +
                                        std::to_string(config_.max_listing_bytes) + " bytes (" +
                                        std::to_string(listing_bytes_) + " received)"),
        now_ms);
  }
  if (!result.is_object()) return invalid("the result is not an object");
  if (era_ == ProtocolEra::kModern) {
    if (auto problem = result_type_problem(result)) return invalid(*problem);
  }
  Json* items = json_field(result, field);
  if (items == nullptr || !items->is_array()) {
    return invalid(std::string("\"") + field + "\" is not an array");
  }
  for (std::size_t i = 0; i < items->size(); ++i) {
    if (!(*items)[i].is_object()) {
      return invalid(std::string(field) + "[" + std::to_string(i) + "] is not an object");
    }
  }
  const Json* next = json_field(result, "nextCursor");
  if (next != nullptr && !next->is_null() && !next->is_string()) {
    return invalid("\"nextCursor\" is not a string");
  }

  ListOutcome& out = listing_.list(kind);
  ListRun& run = runs_[idx(kind)];
  ++out.pages;
  merge_hints(out.hints, result);
  for (Json& item : *items) {
    if (out.items.size() >= config_.max_items_per_list) {
      return fail_list(
          kind,
          Error(ErrorCode::kTooLarge,
                method + ": more than " + std::to_string(config_.max_items_per_list) + " items"),
          now_ms);
    }
    out.items.push_back(std::move(item));
  }
  // An empty cursor ends the list, as in the official TypeScript client: servers send "" on the
  // last page, and asking for `cursor: ""` would start the list over.
  if (next == nullptr || next->is_null() || next->get_ref<const std::string&>().empty()) {
    return end_list(kind, ListState::kOk, now_ms);
  }

  const auto& cursor = next->get_ref<const std::string&>();
  if (cursor.size() > config_.max_cursor_bytes) {
    return invalid("\"nextCursor\" of " + std::to_string(cursor.size()) +
                   " bytes exceeds the bound of " + std::to_string(config_.max_cursor_bytes));
  }
  if (run.cursors.count(cursor) != 0) {
    return invalid("the server repeated cursor " + quoted(cursor, kMaxCursorInMessage) +
                   " (a pagination loop)");
  }
  if (out.pages >= config_.max_pages_per_list) {
    return fail_list(
        kind,
        Error(ErrorCode::kTooLarge,
              method + ": more than " + std::to_string(config_.max_pages_per_list) + " pages"),
        now_ms);
  }
  run.cursors.insert(cursor);
  request_page(kind, cursor, now_ms);
}

void McpSession::on_page_error(ListKind kind, const JsonRpcError& error, int64_t now_ms) {
  const std::string method = list_method(kind);
  const ListOutcome& out = listing_.list(kind);
  std::string upstream = method + ": upstream error " + std::to_string(error.code) + ": " +
                         clip(error.message, config_.max_error_message_chars);
  if (error.code == kJsonRpcMethodNotFound) {
    // "Has none": for resources, templates and prompts (many servers advertise resources without
    // templates), and for tools we only probed. Not mid-pagination, and not for advertised tools.
    bool tools_promised =
        kind == ListKind::kTools && advertised(listing_.server_capabilities, capability_key(kind));
    if (out.pages == 0 && !tools_promised) return end_list(kind, ListState::kAbsent, now_ms);
    return fail_list(kind, Error(ErrorCode::kMethodNotFound, upstream), now_ms);
  }
  if (error.code == kMcpUnsupportedProtocolVersion) {
    return fail_list(kind, Error(ErrorCode::kProtocol, upstream), now_ms);
  }
  fail_list(kind, Error(ErrorCode::kUpstreamError, upstream), now_ms);
}

void McpSession::fail_list(ListKind kind, Error error, int64_t now_ms) {
  ListOutcome& out = listing_.list(kind);
  out.error = std::move(error);
  end_list(kind, ListState::kFailed, now_ms);
}

void McpSession::end_list(ListKind kind, ListState state, int64_t now_ms) {
  listing_.list(kind).state = state;
  runs_[idx(kind)].active = false;
  maybe_finish_listing(now_ms);
}

// The listing's items are moved into the event, not copied: they can be the whole listing budget,
// and the next listing starts from empty lists anyway. What the session still needs (the
// handshake's capabilities, for relist) stays.
Listing McpSession::take_listing() {
  Listing out;
  out.protocol_version = listing_.protocol_version;
  out.server_info = listing_.server_info;
  out.server_capabilities = listing_.server_capabilities;
  out.instructions = listing_.instructions;
  out.started_at_ms = listing_.started_at_ms;
  out.finished_at_ms = listing_.finished_at_ms;
  for (int i = 0; i < kListKindCount; ++i) {
    out.lists[i] = std::move(listing_.lists[i]);
    listing_.lists[i] = ListOutcome{};
  }
  return out;
}

void McpSession::maybe_finish_listing(int64_t now_ms) {
  if (state_ != S::kListing) return;
  for (const auto& run : runs_) {
    if (run.active) return;
  }
  listing_.finished_at_ms = now_ms;
  events_.push_back(ListingReady{take_listing()});
  transition(I::kListingDone);
}

void McpSession::on_list_changed(ListKind kind, int64_t now_ms) {
  if (state_ == S::kDiscovering || state_ == S::kInitializing || state_ == S::kIdle) {
    ++stats_.ignored_notifications;  // the listing that follows sees the change anyway
    return;
  }
  ListRun& run = runs_[idx(kind)];
  if (state_ == S::kListing && run.wanted && run.requested &&
      run.restarts < config_.max_restarts_per_list) {
    if (run.active) abandon(run.request_id, "list changed", /*cancel=*/true);
    int restarts = run.restarts + 1;
    run = ListRun{};
    run.wanted = true;
    run.requested = true;
    run.restarts = restarts;
    listing_.list(kind) = ListOutcome{};
    ++stats_.list_restarts;
    request_page(kind, std::nullopt, now_ms);
    return;
  }
  events_.push_back(ListChanged{kind});
}

void McpSession::shut_down(SessionInput input, const std::optional<Error>& failure,
                           const Error& list_error, int64_t now_ms) {
  if (state_ == S::kClosed) return;
  if (state_ == S::kListing) {
    for (ListKind k : kAllKinds) {
      ListRun& run = runs_[idx(k)];
      if (!run.active) continue;
      run.active = false;
      ListOutcome& out = listing_.list(k);
      out.state = ListState::kFailed;
      out.error = Error(list_error.code, std::string(list_method(k)) + ": " + list_error.message);
    }
    listing_.finished_at_ms = now_ms;
    events_.push_back(ListingReady{take_listing()});
  }
  for (const auto& [id, p] : pending_) {
    if (p.purpose != Purpose::kCall) continue;
    call_failed(id, Error(list_error.code, failure ? failure->message : list_error.message));
  }
  pending_.clear();
  listen_id_.reset();
  transmits_.clear();
  transition(input);
  if (failure) events_.push_back(Failed{*failure});
  events_.push_back(Closed{});
}

// ==== subscriptions/listen (2026-07-28) =====================================================
// Kept apart from the handshake and listing code above: the subscription is one more pending
// request (Purpose::kListen) that never expires; its notices go through on_notification like any
// server's list_changed.

Status McpSession::listen(int64_t now_ms) {
  expire(now_ms);
  if (state_ != S::kReady && state_ != S::kListing) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("listen: the session is ") + session_state_name(state_));
  }
  if (era_ != ProtocolEra::kModern) {
    return Error(ErrorCode::kInvalidArgument,
                 "listen: subscriptions/listen is a 2026-07-28 request; a " +
                     std::string(protocol_version_) + " server notifies on its own");
  }
  if (listen_id_) return Error(ErrorCode::kConflict, "listen: a subscription is already open");
  const Json& caps = listing_.server_capabilities;
  auto advertises = [&](const char* kind) {
    const Json* c = json_field(caps, kind);
    return c != nullptr && json_bool(*c, "listChanged").value_or(false);
  };
  Json filter = Json::object();
  if (advertises("tools")) filter["toolsListChanged"] = true;
  if (advertises("resources")) filter["resourcesListChanged"] = true;
  if (advertises("prompts")) filter["promptsListChanged"] = true;
  if (filter.empty()) {
    return Error(ErrorCode::kNotFound, "listen: the server advertises no list_changed");
  }
  int64_t id = send_request("subscriptions/listen", Json{{"notifications", std::move(filter)}},
                            Purpose::kListen, ListKind::kTools, 0, now_ms);
  pending_[id].deadline_ms = std::numeric_limits<int64_t>::max();
  listen_id_ = id;
  listen_acknowledged_ = false;
  listen_acks_ = 0;
  return Status::Ok();
}

std::vector<ListKind> McpSession::list_changed_kinds() const {
  std::vector<ListKind> out;
  if (state_ == S::kIdle || starting()) return out;
  const Json& caps = listing_.server_capabilities;
  for (ListKind k : kAllKinds) {
    const Json* c = json_field(caps, capability_key(k));
    if (c != nullptr && json_bool(*c, "listChanged").value_or(false)) out.push_back(k);
  }
  return out;
}

void McpSession::on_listen_ended(std::optional<Error> error) {
  listen_id_.reset();
  listen_acknowledged_ = false;
  listen_acks_ = 0;
  events_.push_back(ListenEnded{std::move(error)});
}

// ==== end of subscriptions/listen ===========================================================

// ==== calls (the relay, issue 13) ===========================================================
// One more pending request (Purpose::kCall) with its own deadline; its answer, error or failure
// becomes a CallDone event. The listing code above never looks at it.

Result<int64_t> McpSession::call(std::string_view method, Json params, int64_t timeout_ms,
                                 int64_t now_ms) {
  expire(now_ms);
  if (state_ != S::kReady && state_ != S::kListing) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("call: the session is ") + session_state_name(state_));
  }
  if (method.empty()) return Error(ErrorCode::kInvalidArgument, "call: no method");
  if (timeout_ms <= 0) return Error(ErrorCode::kInvalidArgument, "call: no time left");
  if (!params.is_object()) params = Json::object();
  return send_request(method, std::move(params), Purpose::kCall, ListKind::kTools, timeout_ms,
                      now_ms);
}

bool McpSession::cancel_call(int64_t id, const std::string& reason) {
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second.purpose != Purpose::kCall || state_ == S::kClosed) {
    return false;
  }
  abandon(id, reason.c_str(), /*cancel=*/true);
  return true;
}

std::size_t McpSession::calls_in_flight() const {
  std::size_t n = 0;
  for (const auto& [id, p] : pending_) n += p.purpose == Purpose::kCall ? 1 : 0;
  return n;
}

void McpSession::call_failed(int64_t id, Error error) {
  CallDone done;
  done.id = id;
  done.failure = std::move(error);
  events_.push_back(std::move(done));
}

}  // namespace quiver
