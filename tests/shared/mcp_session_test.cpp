#include "shared/mcp_session.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/state_tables.h"

namespace quiver {
namespace {

// --- a scripted fake MCP server on a virtual clock ------------------------------------------

int idx(ListKind k) { return static_cast<int>(k); }

std::string base64(std::string_view in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t n = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(n >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t n = uint8_t(in[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t n = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

std::vector<Json> named(const std::vector<std::string>& names) {
  std::vector<Json> out;
  for (const auto& n : names) {
    out.push_back({{"name", n},
                   {"description", "the " + n + " tool"},
                   {"inputSchema", {{"type", "object"}}}});
  }
  return out;
}

// Modelled on @modelcontextprotocol/server-everything 2026.8.31 for a client without
// capabilities: 13 tools, 7 resources, 2 templates, 4 prompts, one page each.
std::vector<Json> everything_tools() {
  return named({"echo", "get-annotated-message", "get-env", "get-resource-links",
                "get-resource-reference", "get-structured-content", "get-sum", "get-tiny-image",
                "gzip-file-as-resource", "toggle-simulated-logging", "toggle-subscriber-updates",
                "trigger-long-running-operation", "simulate-research-query"});
}
std::vector<Json> everything_resources() {
  std::vector<Json> out;
  for (const char* f : {"architecture.md", "extension.md", "features.md", "how-it-works.md",
                        "instructions.md", "startup.md", "structure.md"}) {
    out.push_back({{"uri", std::string("demo://resource/static/document/") + f},
                   {"name", f},
                   {"mimeType", "text/markdown"}});
  }
  return out;
}
std::vector<Json> everything_templates() {
  return {{{"uriTemplate", "demo://resource/dynamic/text/{resourceId}"}, {"name", "Text"}},
          {{"uriTemplate", "demo://resource/dynamic/blob/{resourceId}"}, {"name", "Blob"}}};
}
std::vector<Json> everything_prompts() {
  return named({"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"});
}
// server-everything@2025.12.18: 100 resources (FakePeer::serve_numbered_resources pages them).
std::vector<Json> numbered_resources(int n) {
  std::vector<Json> out;
  for (int i = 1; i <= n; ++i) {
    out.push_back({{"uri", "test://static/resource/" + std::to_string(i)},
                   {"name", "Resource " + std::to_string(i)}});
  }
  return out;
}

struct FakePeer {
  enum class Era { kLegacy, kModern };
  Era era = Era::kLegacy;
  std::vector<std::string> legacy_versions = {"2025-11-25", "2025-06-18", "2025-03-26",
                                              "2024-11-05"};
  std::vector<std::string> modern_versions = {"2026-07-28"};
  std::string forced_version;  // answer initialize with this, whatever was asked
  Json capabilities = {{"tools", {{"listChanged", true}}},
                       {"resources", {{"subscribe", true}, {"listChanged", true}}},
                       {"prompts", {{"listChanged", true}}},
                       {"logging", Json::object()}};
  Json server_info = {{"name", "mcp-servers/everything"}, {"version", "2.0.0"}};
  std::optional<std::vector<Json>> lists[kListKindCount] = {
      everything_tools(), everything_resources(), everything_templates(), everything_prompts()};
  std::size_t page_size[kListKindCount] = {0, 0, 0, 0};  // 0: everything in one page
  Json page_extra = Json::object();                      // merged into every list result
  int64_t latency_ms = 5;
  std::optional<int64_t> legacy_discover_error = kJsonRpcMethodNotFound;  // nullopt: silence
  // Runs first for every message; returns true when it handled the message itself.
  std::function<bool(FakePeer&, const JsonRpcMessage&, int64_t)> hook;

  std::vector<JsonRpcMessage> received;
  std::multimap<int64_t, std::string> outbox;

  void send_at(int64_t at, std::string text) { outbox.emplace(at, std::move(text)); }
  void reply(const JsonRpcMessage& m, int64_t now, const Json& result) {
    send_at(now + latency_ms, encode_result(m.id, result));
  }
  void reply_error(const JsonRpcMessage& m, int64_t now, int64_t code, const std::string& msg) {
    send_at(now + latency_ms, encode_error(m.id, code, msg));
  }
  void notify_at(int64_t at, const std::string& method) {
    send_at(at, encode_notification(method, Json()));
  }

  void receive(const std::string& text, int64_t now) {
    auto parsed = parse_jsonrpc_batch(text);
    ASSERT_TRUE(parsed.ok()) << text;
    for (const auto& m : *parsed) {
      received.push_back(m);
      if (hook && hook(*this, m, now)) continue;
      handle(m, now);
    }
  }

  void handle(const JsonRpcMessage& m, int64_t now) {
    if (m.kind != JsonRpcKind::kRequest) return;
    if (m.method == "server/discover") {
      if (era == Era::kLegacy) {
        if (legacy_discover_error) reply_error(m, now, *legacy_discover_error, "Method not found");
        return;
      }
      return reply(m, now,
                   {{"resultType", "complete"},
                    {"supportedVersions", modern_versions},
                    {"capabilities", capabilities},
                    {"_meta", {{"io.modelcontextprotocol/serverInfo", server_info}}},
                    {"instructions", "Try the echo tool."},
                    {"ttlMs", 3600000},
                    {"cacheScope", "public"}});
    }
    if (m.method == "initialize") {
      std::string asked = json_string(m.params, "protocolVersion").value_or("");
      std::string v = forced_version;
      if (v.empty()) {
        bool known = std::find(legacy_versions.begin(), legacy_versions.end(), asked) !=
                     legacy_versions.end();
        v = known ? asked : legacy_versions.front();
      }
      return reply(
          m, now,
          {{"protocolVersion", v}, {"capabilities", capabilities}, {"serverInfo", server_info}});
    }
    for (ListKind k : {ListKind::kTools, ListKind::kResources, ListKind::kResourceTemplates,
                       ListKind::kPrompts}) {
      if (m.method == list_method(k)) return answer_list(k, m, now);
    }
    if (m.method == "ping") return reply(m, now, Json::object());
    reply_error(m, now, kJsonRpcMethodNotFound, "Method not found");
  }

  // Resources like server-everything@2025.12.18's: `n` of them, served 10 per page.
  void serve_numbered_resources(int n) {
    lists[idx(ListKind::kResources)] = numbered_resources(n);
    page_size[idx(ListKind::kResources)] = 10;
  }

  static std::string cursor_for(std::size_t offset) { return base64(std::to_string(offset)); }

  void answer_list(ListKind k, const JsonRpcMessage& m, int64_t now) {
    const auto& list = lists[idx(k)];
    if (!list) return reply_error(m, now, kJsonRpcMethodNotFound, "Method not found");
    std::size_t start = 0;
    if (auto cursor = json_string(m.params, "cursor")) {
      while (start < list->size() && cursor_for(start) != *cursor) ++start;
    }
    std::size_t size = page_size[idx(k)] == 0 ? list->size() : page_size[idx(k)];
    std::size_t end = std::min(start + size, list->size());
    Json result = page_extra;
    result[list_result_field(k)] =
        Json(std::vector<Json>(list->begin() + static_cast<std::ptrdiff_t>(start),
                               list->begin() + static_cast<std::ptrdiff_t>(end)));
    if (end < list->size()) result["nextCursor"] = cursor_for(end);
    if (era == Era::kModern) result["resultType"] = "complete";
    reply(m, now, result);
  }

  std::vector<JsonRpcMessage> requests(const std::string& method) const {
    std::vector<JsonRpcMessage> out;
    for (const auto& m : received) {
      if (m.kind == JsonRpcKind::kRequest && m.method == method) out.push_back(m);
    }
    return out;
  }
  int count(const std::string& method) const {
    int n = 0;
    for (const auto& m : received) n += m.method == method ? 1 : 0;
    return n;
  }
};

using PeerHook = std::function<bool(FakePeer&, const JsonRpcMessage&, int64_t)>;

// Hooks that take `method` over from the peer: answered with `result`, refused with an error,
// or never answered. Every other message goes to the peer as usual.
PeerHook reply_to(std::string method, Json result) {
  return [method, result](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method != method) return false;
    p.reply(m, now, result);
    return true;
  };
}
PeerHook refuse(std::string method, int64_t code, std::string message) {
  return [method, code, message](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method != method) return false;
    p.reply_error(m, now, code, message);
    return true;
  };
}
PeerHook never_answer(std::string method) {
  return [method](FakePeer&, const JsonRpcMessage& m, int64_t) { return m.method == method; };
}

// A hook that answers every page of `kind` with one item, "t1", "t2", ... for tools ("p1", ...
// for prompts), and the nextCursor `cursor_after(page)` gives (nullopt: the page has none).
PeerHook one_item_pages(ListKind kind, std::function<std::optional<Json>(int)> cursor_after) {
  auto pages = std::make_shared<int>(0);
  return [kind, cursor_after, pages](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method != list_method(kind)) return false;
    const int page = ++*pages;
    const std::string field = list_result_field(kind);
    Json result = {{field, Json::array({{{"name", field.substr(0, 1) + std::to_string(page)}}})}};
    if (auto cursor = cursor_after(page)) result["nextCursor"] = *cursor;
    p.reply(m, now, result);
    return true;
  };
}

// The first of `hooks` that takes the message over handles it.
PeerHook first_of(std::vector<PeerHook> hooks) {
  return [hooks](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    for (const PeerHook& hook : hooks) {
      if (hook(p, m, now)) return true;
    }
    return false;
  };
}

McpSessionConfig legacy_config() {
  McpSessionConfig c;
  c.era = EraPolicy::kLegacy;
  return c;
}

// One session and one fake peer on a virtual clock, quinn style: transmits go to the peer at
// once, the peer's answers arrive after its latency, deadlines fire when nothing comes first.
struct Sim {
  explicit Sim(McpSessionConfig config = legacy_config()) : session(std::move(config)) {}

  McpSession session;
  FakePeer peer;
  int64_t now = 100000;
  int64_t started_at = 0;
  std::vector<McpSession::Event> events;

  void start() {
    started_at = now;
    ASSERT_TRUE(session.start(now).ok());
    flush();
  }
  void flush() {
    for (;;) {
      bool any = false;
      while (auto t = session.poll_transmit()) {
        any = true;
        EXPECT_EQ(t->find('\n'), std::string::npos);
        peer.receive(*t, now);
      }
      while (auto e = session.poll_event()) {
        any = true;
        events.push_back(std::move(*e));
      }
      if (!any) return;
    }
  }
  void deliver(const std::string& text) {
    (void)session.handle_text(text, now);
    flush();
  }
  // Advances the clock event by event until nothing is scheduled or `for_ms` has passed.
  void run(int64_t for_ms = 600000) {
    int64_t until = now + for_ms;
    flush();
    for (int guard = 0; guard < 100000; ++guard) {
      std::optional<int64_t> next;
      if (!peer.outbox.empty()) next = peer.outbox.begin()->first;
      if (auto d = session.next_deadline()) next = next ? std::min(*next, *d) : *d;
      if (!next || *next > until) return;
      now = std::max(now, *next);
      while (!peer.outbox.empty() && peer.outbox.begin()->first <= now) {
        std::string text = peer.outbox.begin()->second;
        peer.outbox.erase(peer.outbox.begin());
        deliver(text);
      }
      session.handle_timeout(now);
      flush();
    }
    ADD_FAILURE() << "the simulation did not settle";
  }

  // start() and run(): the listing of a session left to itself.
  Listing list_all() {
    start();
    run();
    return listing();
  }

  // start() and run(): the session failed with `code`, the message naming `needle`.
  void expect_failure(ErrorCode code, std::string_view needle = "") {
    start();
    run();
    std::optional<Error> error = failure();
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, code);
    EXPECT_NE(error->message.find(needle), std::string::npos) << error->message;
  }

  std::vector<Listing> listings() const {
    std::vector<Listing> out;
    for (const auto& e : events) {
      if (auto* r = std::get_if<McpSession::ListingReady>(&e)) out.push_back(r->listing);
    }
    return out;
  }
  Listing listing() const {
    auto all = listings();
    EXPECT_EQ(all.size(), 1u);
    return all.empty() ? Listing{} : all.back();
  }
  std::optional<Error> failure() const {
    for (const auto& e : events) {
      if (auto* f = std::get_if<McpSession::Failed>(&e)) return f->error;
    }
    return std::nullopt;
  }
  int closed_events() const {
    int n = 0;
    for (const auto& e : events) n += std::holds_alternative<McpSession::Closed>(e) ? 1 : 0;
    return n;
  }
  std::vector<ListKind> changed() const {
    std::vector<ListKind> out;
    for (const auto& e : events) {
      if (auto* c = std::get_if<McpSession::ListChanged>(&e)) out.push_back(c->kind);
    }
    return out;
  }
};

// A list that failed with `code`, its message naming `needle`.
void expect_failed(const ListOutcome& out, ErrorCode code, std::string_view needle = "") {
  EXPECT_EQ(out.state, ListState::kFailed);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->code, code);
  EXPECT_NE(out.error->message.find(needle), std::string::npos) << out.error->message;
}

std::vector<std::string> names(const ListOutcome& out, const char* key = "name") {
  std::vector<std::string> n;
  for (const auto& item : out.items) n.push_back(json_string(item, key).value_or("?"));
  return n;
}

// --- the state table ----------------------------------------------------------------------
// The table's properties and the paths a session takes, rather than a second copy of the table.
// Between them, the properties below decide every (state, input) pair.

using S = SessionState;
using I = SessionInput;

std::vector<S> all_states() { return quiver::testing::enum_values<S>(kSessionStateCount); }
std::vector<I> all_inputs() { return quiver::testing::enum_values<I>(kSessionInputCount); }

// The handshake runs (McpSession::starting()).
bool handshaking(S s) { return s == S::kDiscovering || s == S::kInitializing; }

// Where `inputs` take a session that was just constructed; nullopt at the first refused one.
std::optional<S> walk(std::initializer_list<I> inputs) {
  return quiver::testing::walk_table(session_transition, S::kIdle, inputs);
}

TEST(McpSessionTable, TheSessionsPathsEndWhereTheyShould) {
  // Legacy: initialize, the lists, a relist after list_changed, then the host closes.
  EXPECT_EQ(walk({I::kStartInitialize, I::kHandshakeDone, I::kListingDone, I::kRelist,
                  I::kListingDone, I::kClose}),
            S::kClosed);
  // The probe finds a legacy server and falls back to initialize.
  EXPECT_EQ(walk({I::kStartDiscover, I::kStartInitialize, I::kHandshakeDone, I::kListingDone}),
            S::kReady);
  // -32022 to that initialize: the server is modern after all, discover once more.
  EXPECT_EQ(walk({I::kStartDiscover, I::kStartInitialize, I::kStartDiscover, I::kHandshakeDone}),
            S::kListing);
  // A refused handshake and a broken pipe mid-listing both close the session.
  EXPECT_EQ(walk({I::kStartDiscover, I::kFail}), S::kClosed);
  EXPECT_EQ(walk({I::kStartInitialize, I::kHandshakeDone, I::kFail}), S::kClosed);
  // Refused: starting twice, relisting while a listing runs, a listing before the handshake.
  EXPECT_EQ(walk({I::kStartInitialize, I::kHandshakeDone, I::kListingDone, I::kStartDiscover}),
            std::nullopt);
  EXPECT_EQ(walk({I::kStartInitialize, I::kHandshakeDone, I::kRelist}), std::nullopt);
  EXPECT_EQ(walk({I::kStartInitialize, I::kListingDone}), std::nullopt);
  EXPECT_EQ(walk({I::kRelist}), std::nullopt);
}

TEST(McpSessionTable, OnlyAnIdleSessionStartsAndTheHandshakeMaySwitchEraOnce) {
  const std::pair<I, S> starts[] = {{I::kStartDiscover, S::kDiscovering},
                                    {I::kStartInitialize, S::kInitializing}};
  for (const auto& [start, handshake] : starts) {
    for (S from : all_states()) {
      // Idle starts either handshake; a running handshake may turn into the other one (the probe
      // fell back, or initialize was answered -32022); nothing else starts.
      std::optional<S> expected;
      if (from == S::kIdle || (handshaking(from) && from != handshake)) expected = handshake;
      EXPECT_EQ(session_transition(from, start), expected)
          << session_state_name(from) << " + " << session_input_name(start);
    }
  }
}

TEST(McpSessionTable, EitherHandshakeLeadsToTheListing) {
  for (S from : all_states()) {
    EXPECT_EQ(session_transition(from, I::kHandshakeDone),
              handshaking(from) ? std::optional<S>(S::kListing) : std::nullopt)
        << session_state_name(from);
  }
}

TEST(McpSessionTable, ListingAndReadyAlternate) {
  for (S from : all_states()) {
    EXPECT_EQ(session_transition(from, I::kListingDone),
              from == S::kListing ? std::optional<S>(S::kReady) : std::nullopt)
        << session_state_name(from);
    EXPECT_EQ(session_transition(from, I::kRelist),
              from == S::kReady ? std::optional<S>(S::kListing) : std::nullopt)
        << session_state_name(from);
  }
}

TEST(McpSessionTable, EveryLiveSessionCanEndAndClosedIsTerminal) {
  for (S from : all_states()) {
    for (I end : {I::kFail, I::kClose}) {
      EXPECT_EQ(session_transition(from, end),
                from == S::kClosed ? std::nullopt : std::optional<S>(S::kClosed))
          << session_state_name(from) << " + " << session_input_name(end);
    }
  }
  for (I input : all_inputs()) {
    EXPECT_EQ(session_transition(S::kClosed, input), std::nullopt) << session_input_name(input);
  }
}

TEST(McpSessionTable, EveryStateIsReachableAndNoneLeadsBackToIdle) {
  std::set<S> reached =
      quiver::testing::reachable_states(session_transition, S::kIdle, all_inputs());
  EXPECT_EQ(reached.size(), static_cast<std::size_t>(kSessionStateCount));
  for (S from : all_states()) {
    for (I input : all_inputs()) {
      EXPECT_NE(session_transition(from, input), std::optional<S>(S::kIdle))
          << session_state_name(from) << " + " << session_input_name(input);
    }
  }
}

TEST(McpSessionTable, NamesAreDistinct) {
  std::set<std::string> states;
  for (S s : all_states()) states.insert(session_state_name(s));
  EXPECT_EQ(states.size(), static_cast<std::size_t>(kSessionStateCount));
  EXPECT_EQ(states.count("unknown"), 0u);
  std::set<std::string> inputs;
  for (I i : all_inputs()) inputs.insert(session_input_name(i));
  EXPECT_EQ(inputs.size(), static_cast<std::size_t>(kSessionInputCount));
  EXPECT_EQ(inputs.count("unknown"), 0u);
}

// Brings a fresh simulation into `state` through the public API.
void drive_to(Sim& sim, SessionState state) {
  switch (state) {
    case SessionState::kIdle:
      return;
    case SessionState::kDiscovering:
      sim.session = McpSession(McpSessionConfig{});  // the default policy probes
      sim.peer.era = FakePeer::Era::kModern;
      sim.start();
      return;
    case SessionState::kInitializing:
      sim.start();
      return;
    case SessionState::kListing:
      sim.start();
      sim.run(7);  // initialize answered at +5, the lists would be at +10
      return;
    case SessionState::kReady:
      sim.start();
      sim.run();
      return;
    case SessionState::kClosed:
      return;
  }
}

// Performs `input` through the public API on a session in `from`.
void apply(Sim& sim, SessionState from, SessionInput input) {
  switch (input) {
    case SessionInput::kStartDiscover: {
      if (from == SessionState::kInitializing) {
        // A probing session whose probe was refused, then -32022 to initialize: rediscover.
        sim.session = McpSession(McpSessionConfig{});
        sim.peer.latency_ms = 1000;
        sim.start();
        sim.deliver(encode_error(Json(1), kJsonRpcMethodNotFound, "Method not found"));
        sim.deliver(encode_error(Json(2), kMcpUnsupportedProtocolVersion, "Unsupported"));
        return;
      }
      McpSessionConfig probe;
      sim.session = McpSession(probe);
      sim.peer.era = FakePeer::Era::kModern;
      sim.start();
      return;
    }
    case SessionInput::kStartInitialize:
      if (from == SessionState::kIdle) return sim.start();
      sim.deliver(encode_error(Json(1), kJsonRpcMethodNotFound, "Method not found"));
      return;
    case SessionInput::kHandshakeDone:
      sim.peer.latency_ms = 1000;  // the handshake answer is due at +5, the lists stay in flight
      sim.run(5);
      return;
    case SessionInput::kListingDone:
      sim.run();
      return;
    case SessionInput::kRelist:
      sim.peer.latency_ms = 1000;
      ASSERT_TRUE(sim.session.relist({ListKind::kTools}, sim.now).ok());
      return;
    case SessionInput::kFail:
      sim.session.on_transport_error(Error(ErrorCode::kTransport, "pipe closed"), sim.now);
      sim.flush();
      return;
    case SessionInput::kClose:
      sim.session.close(sim.now);
      sim.flush();
      return;
  }
}

TEST(McpSessionTable, EveryTransitionHappensThroughTheApi) {
  int transitions = 0;
  for (S from : all_states()) {
    for (I input : all_inputs()) {
      std::optional<S> to = session_transition(from, input);
      if (!to) continue;
      ++transitions;
      SCOPED_TRACE(std::string(session_state_name(from)) + " + " + session_input_name(input));
      Sim sim;
      drive_to(sim, from);
      ASSERT_EQ(sim.session.state(), from);
      apply(sim, from, input);
      EXPECT_EQ(sim.session.state(), *to);
      if (*to == SessionState::kClosed) {
        EXPECT_EQ(sim.closed_events(), 1);
        EXPECT_FALSE(sim.session.next_deadline().has_value());
        EXPECT_FALSE(sim.session.poll_transmit().has_value());
      }
    }
  }
  // Two starts, two era switches, two handshakes, the listing and the relist, and the five live
  // states' two ways to end.
  EXPECT_EQ(transitions, 2 + 2 + 2 + 2 + 5 * 2);
}

TEST(McpSessionTable, RefusesCallsTheTableDoesNotAllow) {
  for (SessionState s : {SessionState::kIdle, SessionState::kInitializing, SessionState::kListing,
                         SessionState::kReady}) {
    SCOPED_TRACE(session_state_name(s));
    Sim sim;
    drive_to(sim, s);
    if (s != SessionState::kIdle) {
      Status again = sim.session.start(sim.now);
      ASSERT_FALSE(again.ok());
      EXPECT_EQ(again.error().code, ErrorCode::kConflict);
    }
    if (s != SessionState::kReady) {
      Status r = sim.session.relist({ListKind::kTools}, sim.now);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().code,
                s == SessionState::kListing ? ErrorCode::kConflict : ErrorCode::kInvalidArgument);
    }
    EXPECT_EQ(sim.session.state(), s);
  }
  Sim closed;
  drive_to(closed, SessionState::kReady);
  closed.session.close(closed.now);
  EXPECT_FALSE(closed.session.relist({ListKind::kTools}, closed.now).ok());
  EXPECT_FALSE(closed.session.start(closed.now).ok());
}

// --- the happy paths ----------------------------------------------------------------------

TEST(McpSession, ListsEverythingFromAServerEverythingStylePeer) {
  Sim sim;
  sim.start();
  ASSERT_EQ(sim.peer.received.size(), 1u);
  const JsonRpcMessage& init = sim.peer.received[0];
  EXPECT_EQ(init.method, "initialize");
  EXPECT_EQ(init.params["protocolVersion"], "2025-11-25");  // the newest legacy version
  EXPECT_EQ(init.params["capabilities"], Json::object());   // a discovery client: none
  EXPECT_EQ(init.params["clientInfo"]["name"], "quiver");
  EXPECT_EQ(sim.session.protocol_version(), "");  // no MCP-Protocol-Version on initialize
  EXPECT_EQ(sim.session.next_deadline(), sim.started_at + 3000);

  sim.run();
  EXPECT_EQ(sim.session.state(), SessionState::kReady);
  EXPECT_EQ(sim.session.protocol_version(), "2025-11-25");
  EXPECT_EQ(sim.session.era(), ProtocolEra::kLegacy);
  EXPECT_FALSE(sim.failure());
  EXPECT_FALSE(sim.session.next_deadline().has_value());

  // initialized goes out before any list request.
  ASSERT_GE(sim.peer.received.size(), 2u);
  EXPECT_EQ(sim.peer.received[1].method, "notifications/initialized");
  EXPECT_EQ(sim.peer.received[1].kind, JsonRpcKind::kNotification);
  int64_t last_id = 0;
  for (const auto& m : sim.peer.received) {
    if (m.kind != JsonRpcKind::kRequest) continue;
    ASSERT_TRUE(m.id.is_number_integer());
    EXPECT_GT(m.id.get<int64_t>(), last_id);
    last_id = m.id.get<int64_t>();
  }

  Listing l = sim.listing();
  EXPECT_EQ(l.protocol_version, "2025-11-25");
  EXPECT_EQ(l.server_info["name"], "mcp-servers/everything");
  EXPECT_TRUE(l.server_capabilities.contains("tools"));
  EXPECT_EQ(l.started_at_ms, sim.started_at);
  EXPECT_EQ(l.finished_at_ms, sim.started_at + 10);  // two round trips of 5 ms
  const std::pair<ListKind, std::size_t> expected[] = {{ListKind::kTools, 13},
                                                       {ListKind::kResources, 7},
                                                       {ListKind::kResourceTemplates, 2},
                                                       {ListKind::kPrompts, 4}};
  for (const auto& [kind, count] : expected) {
    SCOPED_TRACE(list_kind_name(kind));
    const ListOutcome& out = l.list(kind);
    EXPECT_EQ(out.state, ListState::kOk);
    EXPECT_EQ(out.items.size(), count);
    EXPECT_EQ(out.pages, 1);
    EXPECT_FALSE(out.error.has_value());
    EXPECT_FALSE(out.hints.ttl_ms.has_value());  // a legacy server gives no cache hints
  }
  EXPECT_EQ(names(l.list(ListKind::kTools)).front(), "echo");
  EXPECT_EQ(l.list(ListKind::kTools).items[0]["inputSchema"]["type"], "object");  // as received
  EXPECT_EQ(sim.closed_events(), 0);
}

TEST(McpSession, ReplaysRealServerEverythingStdoutOutput) {
  // tests/fixtures/ndjson: what server-everything 2026.8.31 wrote on stdout for initialize (id 1)
  // and tools/list (id 2): its tools/list_changed comes before the initialize result.
  std::ifstream in(
      std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/ndjson/server-everything-stdio.txt",
      std::ios::binary);
  ASSERT_TRUE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);

  McpSession session(legacy_config());
  ASSERT_TRUE(session.start(0).ok());
  while (session.poll_transmit()) {
  }
  for (const auto& line : lines) ASSERT_TRUE(session.handle_text(line, 5).ok()) << line;
  std::vector<std::string> sent;
  while (auto t = session.poll_transmit()) sent.push_back(*t);
  ASSERT_EQ(sent.size(), 5u);  // initialized and the four lists, tools/list as id 2
  EXPECT_NE(sent[0].find("notifications/initialized"), std::string::npos);
  EXPECT_NE(sent[1].find(R"("id":2)"), std::string::npos);
  EXPECT_NE(sent[1].find("tools/list"), std::string::npos);
  for (int id : {3, 4, 5}) {
    std::string field = id == 3 ? "resources" : id == 4 ? "resourceTemplates" : "prompts";
    ASSERT_TRUE(session.handle_text(encode_result(Json(id), {{field, Json::array()}}), 6).ok());
  }
  auto event = session.poll_event();
  ASSERT_TRUE(event.has_value());
  auto* ready = std::get_if<McpSession::ListingReady>(&*event);
  ASSERT_NE(ready, nullptr);
  const Listing& l = ready->listing;
  EXPECT_EQ(l.protocol_version, "2025-11-25");
  EXPECT_EQ(l.server_info["name"], "mcp-servers/everything");
  EXPECT_TRUE(l.instructions.has_value());
  const ListOutcome& tools = l.list(ListKind::kTools);
  EXPECT_EQ(tools.state, ListState::kOk);
  ASSERT_EQ(tools.items.size(), 13u);
  EXPECT_EQ(tools.items[0]["name"], "echo");
  EXPECT_EQ(tools.items[0]["annotations"]["readOnlyHint"], true);  // unknown fields kept
  EXPECT_EQ(session.stats().ignored_notifications, 1);  // list_changed before the handshake
  EXPECT_FALSE(session.poll_event().has_value());       // no ListChanged: nothing is stale
}

TEST(McpSession, FollowsEveryCursorOfAPaginatedList) {
  Sim sim;
  sim.peer.serve_numbered_resources(100);
  sim.start();
  sim.run();
  const ListOutcome out = sim.listing().list(ListKind::kResources);
  EXPECT_EQ(out.state, ListState::kOk);
  EXPECT_EQ(out.pages, 10);
  ASSERT_EQ(out.items.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(out.items[i]["uri"], "test://static/resource/" + std::to_string(i + 1));
  }
  auto requests = sim.peer.requests("resources/list");
  ASSERT_EQ(requests.size(), 10u);
  EXPECT_TRUE(requests[0].params.is_null());  // first page: no cursor, no params
  for (std::size_t i = 1; i < requests.size(); ++i) {
    EXPECT_EQ(requests[i].params["cursor"], FakePeer::cursor_for(i * 10));  // opaque, echoed
  }
}

// Issue 10: servers end with `"nextCursor": ""`; the official TypeScript client stops there.
// Quiver used to ask for `cursor: ""`, get the first page again, call it a loop and drop the list.
TEST(McpSession, AnEmptyCursorEndsTheListAsNullDoes) {
  for (const Json& last : {Json(""), Json(nullptr)}) {
    Sim sim;
    sim.peer.hook = one_item_pages(ListKind::kPrompts,
                                   [&](int page) { return page == 1 ? Json("next") : last; });
    sim.start();
    sim.run();
    const ListOutcome out = sim.listing().list(ListKind::kPrompts);
    EXPECT_EQ(out.state, ListState::kOk) << last;
    EXPECT_EQ(names(out), (std::vector<std::string>{"p1", "p2"}));
    EXPECT_EQ(out.pages, 2);
    ASSERT_EQ(sim.peer.requests("prompts/list").size(), 2u);
    EXPECT_EQ(sim.peer.requests("prompts/list")[1].params["cursor"], "next");
  }
  // An empty cursor on the only page: one request, the page's items.
  Sim sim;
  sim.peer.page_extra = {{"nextCursor", ""}};
  sim.start();
  sim.run();
  EXPECT_EQ(sim.listing().list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(sim.listing().list(ListKind::kTools).items.size(), everything_tools().size());
  EXPECT_EQ(sim.peer.count("tools/list"), 1);
}

// --- absent, not failed -------------------------------------------------------------------

TEST(McpSession, MethodNotFoundOnPromptsMeansNoneLikeServerMemory) {
  Sim sim;
  sim.peer.server_info = {{"name", "memory-server"}, {"version", "0.6.3"}};
  sim.peer.lists[idx(ListKind::kTools)] = named(
      {"create_entities", "create_relations", "add_observations", "delete_entities",
       "delete_observations", "delete_relations", "read_graph", "search_nodes", "open_nodes"});
  sim.peer.lists[idx(ListKind::kResources)] =
      std::vector<Json>{{{"uri", "memory://graph"}, {"name", "graph"}}};
  sim.peer.lists[idx(ListKind::kResourceTemplates)] = std::nullopt;  // -32601
  sim.peer.lists[idx(ListKind::kPrompts)] = std::nullopt;            // -32601
  sim.start();
  sim.run();
  Listing l = sim.listing();
  EXPECT_EQ(l.list(ListKind::kTools).items.size(), 9u);
  EXPECT_EQ(l.list(ListKind::kResources).items.size(), 1u);
  for (ListKind k : {ListKind::kResourceTemplates, ListKind::kPrompts}) {
    EXPECT_EQ(l.list(k).state, ListState::kAbsent) << list_kind_name(k);
    EXPECT_FALSE(l.list(k).error.has_value());
    EXPECT_TRUE(l.list(k).items.empty());
  }
}

TEST(McpSession, KindsNotAdvertisedAreAbsentWithoutARequest) {
  Sim sim;
  sim.peer.capabilities = {{"tools", Json::object()}};  // like server-filesystem
  sim.start();
  sim.run();
  Listing l = sim.listing();
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  for (ListKind k : {ListKind::kResources, ListKind::kResourceTemplates, ListKind::kPrompts}) {
    EXPECT_EQ(l.list(k).state, ListState::kAbsent) << list_kind_name(k);
    EXPECT_EQ(sim.peer.count(list_method(k)), 0) << list_kind_name(k);
  }
}

TEST(McpSession, ProbingUnadvertisedKindsTreatsMethodNotFoundAsAbsent) {
  McpSessionConfig c = legacy_config();
  c.probe_unadvertised = true;
  Sim sim(c);
  sim.peer.capabilities = Json::object();
  sim.peer.lists[idx(ListKind::kTools)] = std::nullopt;
  sim.peer.lists[idx(ListKind::kPrompts)] = std::nullopt;
  sim.start();
  sim.run();
  Listing l = sim.listing();
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kAbsent);  // not promised: none
  EXPECT_EQ(l.list(ListKind::kPrompts).state, ListState::kAbsent);
  EXPECT_EQ(l.list(ListKind::kResources).state, ListState::kOk);  // answered anyway
  EXPECT_EQ(sim.peer.count("tools/list"), 1);
}

// --- every error class --------------------------------------------------------------------

TEST(McpSession, MethodNotFoundOnAdvertisedToolsIsAFailure) {
  Sim sim;
  sim.peer.lists[idx(ListKind::kTools)] = std::nullopt;
  const ListOutcome tools = sim.list_all().list(ListKind::kTools);
  expect_failed(tools, ErrorCode::kMethodNotFound);
  EXPECT_FALSE(should_evict_and_retry(*tools.error));
  EXPECT_EQ(sim.listing().list(ListKind::kPrompts).state, ListState::kOk);
}

TEST(McpSession, UpstreamErrorsFailTheirListWithAClippedMessage) {
  Sim sim;
  sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "resources/list") {
      p.reply_error(m, now, kJsonRpcInternalError, "database down\n" + std::string(5000, 'x'));
      return true;
    }
    if (m.method == "prompts/list") {
      p.reply_error(m, now, -32000, "héllo wörld " + std::string(300, '\xc3') + "end");
      return true;
    }
    return false;
  };
  sim.start();
  sim.run();
  Listing l = sim.listing();
  const ListOutcome& resources = l.list(ListKind::kResources);
  EXPECT_EQ(resources.state, ListState::kFailed);
  ASSERT_TRUE(resources.error.has_value());
  EXPECT_EQ(resources.error->code, ErrorCode::kUpstreamError);
  EXPECT_NE(resources.error->message.find("resources/list"), std::string::npos);
  EXPECT_NE(resources.error->message.find("-32603"), std::string::npos);
  EXPECT_NE(resources.error->message.find("database down"), std::string::npos);
  EXPECT_EQ(resources.error->message.find('\n'), std::string::npos);
  EXPECT_LT(resources.error->message.size(), 300u);
  EXPECT_TRUE(should_evict_and_retry(*resources.error));
  const ListOutcome& prompts = l.list(ListKind::kPrompts);
  ASSERT_TRUE(prompts.error.has_value());
  EXPECT_NE(prompts.error->message.find("-32000"), std::string::npos);
  EXPECT_LT(prompts.error->message.size(), 300u);
  // Other lists are unaffected.
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(l.list(ListKind::kResourceTemplates).state, ListState::kOk);
}

TEST(McpSession, MalformedListResultsAreInvalidReplies) {
  const Json bad_results[] = {
      Json("tools"),
      Json{{"tools", Json::object()}},
      Json{{"tools", nullptr}},
      Json::object(),
      Json{{"tools", Json::array({1})}},
      Json{{"tools", Json::array({{{"name", "a"}}})}, {"nextCursor", 7}},
  };
  for (const Json& bad : bad_results) {
    SCOPED_TRACE(bad.dump());
    Sim sim;
    sim.peer.hook = reply_to("tools/list", bad);
    const ListOutcome tools = sim.list_all().list(ListKind::kTools);
    expect_failed(tools, ErrorCode::kInvalidReply, "tools/list");
    EXPECT_TRUE(tools.items.empty());
    EXPECT_EQ(sim.listing().list(ListKind::kPrompts).state, ListState::kOk);
  }
}

TEST(McpSession, AMalformedLaterPageKeepsTheEarlierPages) {
  Sim sim;
  sim.peer.serve_numbered_resources(30);
  sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "resources/list" && json_string(m.params, "cursor") == p.cursor_for(20)) {
      p.reply(m, now, {{"resources", "oops"}});
      return true;
    }
    return false;
  };
  const ListOutcome out = sim.list_all().list(ListKind::kResources);
  expect_failed(out, ErrorCode::kInvalidReply);
  EXPECT_EQ(out.items.size(), 20u);
  EXPECT_EQ(out.pages, 2);
}

TEST(McpSession, ARepeatedCursorIsALoop) {
  Sim sim;
  // a, b, a, b, ... forever
  sim.peer.hook = one_item_pages(ListKind::kTools, [](int page) { return page % 2 ? "a" : "b"; });
  const ListOutcome tools = sim.list_all().list(ListKind::kTools);
  expect_failed(tools, ErrorCode::kInvalidReply, "loop");
  EXPECT_EQ(tools.pages, 3);
  EXPECT_EQ(sim.peer.count("tools/list"), 3);
}

// Every cursor of the run is remembered, so a cycle of any length is caught the first time it
// comes round, not only a cursor repeated at once.
TEST(McpSession, ALoopOfAnyLengthIsCaught) {
  for (int cycle : {1, 2, 7}) {
    SCOPED_TRACE(cycle);
    Sim sim;
    // c1, c2, ..., c<cycle>, c1, ...
    sim.peer.hook = one_item_pages(ListKind::kTools, [cycle](int page) {
      return "c" + std::to_string((page - 1) % cycle + 1);
    });
    const ListOutcome tools = sim.list_all().list(ListKind::kTools);
    expect_failed(tools, ErrorCode::kInvalidReply, "pagination loop");
    EXPECT_EQ(tools.pages, cycle + 1);
    EXPECT_EQ(sim.peer.count("tools/list"), cycle + 1);
  }
}

TEST(McpSession, AnOverlongCursorIsAnInvalidReply) {
  McpSessionConfig c = legacy_config();
  Sim sim(c);
  const std::string huge(c.max_cursor_bytes + 1, 'c');
  sim.peer.hook =
      reply_to("tools/list", {{"tools", Json::array({{{"name", "t"}}})}, {"nextCursor", huge}});
  const ListOutcome tools = sim.list_all().list(ListKind::kTools);
  expect_failed(tools, ErrorCode::kInvalidReply);
  EXPECT_EQ(tools.error->message,
            "tools/list: \"nextCursor\" of 16385 bytes exceeds the bound of 16384");
  EXPECT_EQ(sim.peer.count("tools/list"), 1);  // never sent back
  // Exactly at the bound is a cursor.
  Sim ok(c);
  ok.peer.hook = one_item_pages(ListKind::kTools, [&](int page) -> std::optional<Json> {
    if (page == 1) return Json(std::string(c.max_cursor_bytes, 'c'));
    return std::nullopt;
  });
  ok.start();
  ok.run();
  EXPECT_EQ(ok.listing().list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(ok.listing().list(ListKind::kTools).pages, 2);
}

// A hostile server sends endless large pages with fresh cursors: the listing's byte budget stops
// it long before the page bound, and bounds what the session holds.
TEST(McpSession, TheListingByteBudgetStopsEndlessLargePages) {
  McpSessionConfig c = legacy_config();
  c.max_listing_bytes = 100000;
  Sim sim(c);
  int tool_pages = 0;
  const std::string description(10000, 'd');
  sim.peer.hook = [&](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method != "tools/list") return false;
    ++tool_pages;
    p.reply(m, now,
            {{"tools", Json::array({{{"name", "t" + std::to_string(tool_pages)},
                                     {"description", description}}})},
             {"nextCursor", "c" + std::to_string(tool_pages)}});
    return true;
  };
  sim.start();
  sim.run();
  const Listing listing = sim.listing();
  const ListOutcome& tools = listing.list(ListKind::kTools);
  EXPECT_EQ(tools.state, ListState::kFailed);
  EXPECT_EQ(tools.error->code, ErrorCode::kTooLarge);
  EXPECT_NE(tools.error->message.find("tools/list: the listing's pages exceed its byte budget of "
                                      "100000 bytes"),
            std::string::npos)
      << tools.error->message;
  // About ten pages of 10 KB, not the 1,000-page bound.
  EXPECT_GE(tool_pages, 9);
  EXPECT_LE(tool_pages, 11);
  EXPECT_LE(tools.items.size(), 10u);
  // The small lists that arrived before are whole.
  EXPECT_EQ(listing.list(ListKind::kPrompts).state, ListState::kOk);

  // The budget is per listing: a relist starts from zero (and fails the same way).
  ASSERT_TRUE(sim.session.relist({ListKind::kPrompts}, sim.now).ok());
  sim.run();
  ASSERT_EQ(sim.listings().size(), 2u);
  EXPECT_EQ(sim.listings()[1].list(ListKind::kPrompts).state, ListState::kOk);
}

TEST(McpSession, TheByteBudgetCountsEveryListTogether) {
  McpSessionConfig c = legacy_config();
  c.max_listing_bytes = 2500;  // each page is about 1,100 bytes: two fit, the third does not
  Sim sim(c);
  const std::string padding(1000, 'x');
  sim.peer.hook = [&](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    for (ListKind k : {ListKind::kTools, ListKind::kResources, ListKind::kResourceTemplates,
                       ListKind::kPrompts}) {
      if (m.method != list_method(k)) continue;
      Json item = {{"name", "n"}, {"uri", "u:"}, {"uriTemplate", "u:{x}"}, {"pad", padding}};
      p.reply(m, now, {{list_result_field(k), Json::array({item})}});
      return true;
    }
    return false;
  };
  sim.start();
  sim.run();
  // The four requests go out together and the answers come back in order.
  const Listing listing = sim.listing();
  EXPECT_EQ(listing.list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(listing.list(ListKind::kResources).state, ListState::kOk);
  for (ListKind k : {ListKind::kResourceTemplates, ListKind::kPrompts}) {
    const ListOutcome& out = listing.list(k);
    EXPECT_EQ(out.state, ListState::kFailed) << list_method(k);
    ASSERT_TRUE(out.error.has_value());
    EXPECT_EQ(out.error->code, ErrorCode::kTooLarge);
    EXPECT_NE(out.error->message.find("byte budget of 2500 bytes"), std::string::npos);
  }
}

TEST(McpSession, PagesAndItemsAreBounded) {
  {
    McpSessionConfig c = legacy_config();
    c.max_pages_per_list = 4;
    Sim sim(c);
    sim.peer.serve_numbered_resources(100);
    const ListOutcome out = sim.list_all().list(ListKind::kResources);
    expect_failed(out, ErrorCode::kTooLarge, "4 pages");
    EXPECT_EQ(out.pages, 4);
    EXPECT_EQ(out.items.size(), 40u);
    EXPECT_EQ(sim.peer.count("resources/list"), 4);
  }
  {
    McpSessionConfig c = legacy_config();
    c.max_items_per_list = 25;
    Sim sim(c);
    sim.peer.serve_numbered_resources(100);
    const ListOutcome out = sim.list_all().list(ListKind::kResources);
    expect_failed(out, ErrorCode::kTooLarge);
    EXPECT_EQ(out.items.size(), 25u);
    EXPECT_EQ(sim.listing().list(ListKind::kTools).state, ListState::kOk);
  }
}

TEST(McpSession, ARequestTimeoutFailsOnlyItsList) {
  Sim sim;
  std::optional<Json> silent_id;
  sim.peer.hook = [&](FakePeer&, const JsonRpcMessage& m, int64_t) {
    if (m.method != "prompts/list") return false;
    silent_id = m.id;  // never answered
    return true;
  };
  sim.start();
  sim.run();
  Listing l = sim.listing();
  const ListOutcome& prompts = l.list(ListKind::kPrompts);
  EXPECT_EQ(prompts.state, ListState::kFailed);
  EXPECT_EQ(prompts.error->code, ErrorCode::kTimeout);
  EXPECT_NE(prompts.error->message.find("3000 ms"), std::string::npos);
  EXPECT_FALSE(should_evict_and_retry(*prompts.error));
  EXPECT_EQ(l.finished_at_ms, sim.started_at + 5 + 3000);
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  // We told the server we gave up; its late answer is ignored.
  ASSERT_EQ(sim.peer.count("notifications/cancelled"), 1);
  ASSERT_TRUE(silent_id.has_value());
  for (const auto& m : sim.peer.received) {
    if (m.method == "notifications/cancelled") {
      EXPECT_EQ(m.params["requestId"], *silent_id);
    }
  }
  sim.deliver(encode_result(*silent_id, {{"prompts", Json::array()}}));
  EXPECT_EQ(sim.session.stats().late_responses, 1);
  EXPECT_EQ(sim.listings().size(), 1u);
  EXPECT_EQ(sim.session.state(), SessionState::kReady);
}

TEST(McpSession, CancellationsCanBeTurnedOff) {
  // A modern Streamable HTTP host cancels by closing the response stream instead.
  McpSessionConfig c = legacy_config();
  c.send_cancellations = false;
  Sim sim(c);
  sim.peer.hook = never_answer("prompts/list");
  sim.start();
  sim.run();
  EXPECT_EQ(sim.listing().list(ListKind::kPrompts).error->code, ErrorCode::kTimeout);
  EXPECT_EQ(sim.peer.count("notifications/cancelled"), 0);
}

TEST(McpSession, AnAnswerAfterItsDeadlineDoesNotCountEvenBeforeHandleTimeout) {
  Sim sim;
  std::optional<Json> held;
  sim.peer.hook = [&](FakePeer&, const JsonRpcMessage& m, int64_t) {
    if (m.method != "prompts/list") return false;
    held = m.id;
    return true;
  };
  sim.start();
  sim.run(10);  // everything but prompts has arrived
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(sim.session.state(), SessionState::kListing);
  sim.now = sim.started_at + 3005;  // the host was late to call handle_timeout
  sim.deliver(encode_result(*held, {{"prompts", Json::array()}}));
  const ListOutcome prompts = sim.listing().list(ListKind::kPrompts);
  EXPECT_EQ(prompts.state, ListState::kFailed);
  EXPECT_EQ(prompts.error->code, ErrorCode::kTimeout);
  EXPECT_EQ(sim.session.stats().late_responses, 1);
}

TEST(McpSession, ASlowPeerHitsTheDeadlineWithPartialPagesKept) {
  Sim sim;
  sim.peer.latency_ms = 400;
  sim.peer.serve_numbered_resources(100);
  sim.start();
  sim.run();
  Listing l = sim.listing();
  EXPECT_EQ(l.finished_at_ms, sim.started_at + 3500);
  const ListOutcome& resources = l.list(ListKind::kResources);
  EXPECT_EQ(resources.state, ListState::kFailed);
  EXPECT_EQ(resources.error->code, ErrorCode::kTimeout);
  EXPECT_NE(resources.error->message.find("deadline"), std::string::npos);
  // initialize answered at +400, pages at +800, +1200, ..., +3200: seven pages arrived.
  EXPECT_EQ(resources.pages, 7);
  EXPECT_EQ(resources.items.size(), 70u);
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(l.list(ListKind::kPrompts).state, ListState::kOk);
  EXPECT_EQ(sim.peer.count("notifications/cancelled"), 1);
  EXPECT_GE(sim.session.stats().late_responses, 1);  // the eighth page, arriving at +3600
}

TEST(McpSession, HandshakeTimeoutsFailTheSession) {
  {
    Sim sim;
    sim.peer.hook = never_answer("initialize");
    sim.expect_failure(ErrorCode::kTimeout, "initialize");
    EXPECT_EQ(sim.closed_events(), 1);
    EXPECT_TRUE(sim.listings().empty());
    EXPECT_EQ(sim.session.state(), SessionState::kClosed);
    EXPECT_EQ(sim.peer.count("notifications/cancelled"), 0);  // initialize is never cancelled
  }
  {
    McpSessionConfig c = legacy_config();
    c.request_timeout_ms = 10000;  // the whole-listing deadline comes first
    Sim sim(c);
    sim.peer.hook = never_answer("initialize");
    sim.expect_failure(ErrorCode::kTimeout, "3500 ms");
  }
}

// A peer hook: `method` is answered `latency_ms` late, everything else as usual.
PeerHook answer_late(std::string method, int64_t latency_ms) {
  return [method, latency_ms](FakePeer& peer, const JsonRpcMessage& m, int64_t now) {
    if (m.method != method) return false;
    int64_t usual = peer.latency_ms;
    peer.latency_ms = latency_ms;
    peer.handle(m, now);
    peer.latency_ms = usual;
    return true;
  };
}

// Issue 10: a host that keeps a slow-starting session gives the handshake its own start-up
// deadline; the lists then get the listing deadline from the end of the handshake (not from the
// start, which a late handshake would have used up).
TEST(McpSession, AStartUpDeadlineLetsALateHandshakeListInFull) {
  McpSessionConfig c = legacy_config();
  c.listing_deadline_ms = 1000;
  c.request_timeout_ms = 800;
  c.handshake_timeout_ms = 10000;
  c.startup_deadline_ms = 10000;
  Sim sim(c);
  sim.peer.hook = answer_late("initialize", 6000);  // the lists at 5 ms again
  sim.start();
  sim.run();
  EXPECT_FALSE(sim.failure());
  Listing l = sim.listing();
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(l.list(ListKind::kPrompts).state, ListState::kOk);
  EXPECT_TRUE(sim.session.sent_initialize());
  EXPECT_EQ(sim.session.list_changed_kinds().size(), 4u);  // tools, resources, templates, prompts

  // Past the start-up deadline, the handshake fails and says which deadline passed.
  c.startup_deadline_ms = 3000;
  Sim late(c);
  late.peer.hook = sim.peer.hook;
  late.expect_failure(ErrorCode::kTimeout, "start-up deadline of 3000 ms");
}

// A session started for a server known to be modern sends no initialize, and its discover has
// the handshake's time (a slow start is not a refusal).
TEST(McpSession, AKnownModernServerGetsTheHandshakeTimeForDiscover) {
  McpSessionConfig c;
  c.era = EraPolicy::kModern;
  c.request_timeout_ms = 500;
  c.handshake_timeout_ms = 5000;
  c.startup_deadline_ms = 5000;
  Sim sim(c);
  sim.peer.era = FakePeer::Era::kModern;
  sim.peer.hook = answer_late("server/discover", 2000);  // a slow start; the lists at once
  sim.start();
  sim.run();
  EXPECT_FALSE(sim.failure());
  EXPECT_EQ(sim.listing().protocol_version, "2026-07-28");
  EXPECT_FALSE(sim.session.sent_initialize());
  EXPECT_EQ(sim.peer.count("initialize"), 0);
}

TEST(McpSession, ATransportFailureClosesTheSessionAndReportsWhatArrived) {
  Sim sim;
  sim.peer.serve_numbered_resources(100);
  sim.start();
  sim.run(22);  // +5 initialize, +10 first pages, +15 and +20 more resource pages
  ASSERT_EQ(sim.session.state(), SessionState::kListing);
  sim.session.on_transport_error(Error(ErrorCode::kUnknown, "child exited with status 1"), sim.now);
  sim.flush();
  EXPECT_EQ(sim.session.state(), SessionState::kClosed);
  Listing l = sim.listing();
  const ListOutcome& resources = l.list(ListKind::kResources);
  EXPECT_EQ(resources.state, ListState::kFailed);
  EXPECT_EQ(resources.error->code, ErrorCode::kTransport);
  EXPECT_NE(resources.error->message.find("child exited"), std::string::npos);
  EXPECT_EQ(resources.items.size(), 30u);
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  ASSERT_TRUE(sim.failure());
  EXPECT_EQ(sim.failure()->code, ErrorCode::kTransport);
  EXPECT_TRUE(should_evict_and_retry(*sim.failure()));
  EXPECT_EQ(sim.closed_events(), 1);
  // The order is ListingReady, Failed, Closed.
  ASSERT_EQ(sim.events.size(), 3u);
  EXPECT_TRUE(std::holds_alternative<McpSession::ListingReady>(sim.events[0]));
  EXPECT_TRUE(std::holds_alternative<McpSession::Failed>(sim.events[1]));
  EXPECT_TRUE(std::holds_alternative<McpSession::Closed>(sim.events[2]));
  // Inert afterwards.
  sim.run();
  EXPECT_EQ(sim.events.size(), 3u);
  EXPECT_FALSE(sim.session.next_deadline().has_value());
}

TEST(McpSession, ARequestWithoutAJsonRpcAnswerFailsItsList) {
  Sim sim;
  sim.peer.hook = [&](FakePeer&, const JsonRpcMessage& m, int64_t) {
    if (m.method != "prompts/list") return false;
    // The HTTP host got a 502 for this POST.
    sim.session.on_request_failed(m.id.get<int64_t>(),
                                  Error(ErrorCode::kUnknown, "HTTP 502 Bad Gateway"), sim.now);
    return true;
  };
  const ListOutcome prompts = sim.list_all().list(ListKind::kPrompts);
  expect_failed(prompts, ErrorCode::kTransport, "HTTP 502");
  EXPECT_EQ(sim.session.state(), SessionState::kReady);  // the session lives on
}

TEST(McpSession, ShouldEvictAndRetryExceptMethodNotFoundAndTimeout) {
  for (ErrorCode code : {ErrorCode::kTransport, ErrorCode::kProtocol, ErrorCode::kInvalidReply,
                         ErrorCode::kUpstreamError, ErrorCode::kTooLarge}) {
    EXPECT_TRUE(should_evict_and_retry(Error(code, ""))) << error_code_name(code);
  }
  EXPECT_FALSE(should_evict_and_retry(Error(ErrorCode::kMethodNotFound, "")));
  EXPECT_FALSE(should_evict_and_retry(Error(ErrorCode::kTimeout, "")));
}

// --- list_changed -------------------------------------------------------------------------

TEST(McpSession, ListChangedDuringListingRelistsThatKind) {
  // server-everything registers its tools late and says so right after notifications/initialized.
  Sim sim;
  int64_t registered_at = 0;
  sim.peer.hook = [&](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "notifications/initialized") {
      registered_at = now + 1;
      p.notify_at(registered_at, "notifications/tools/list_changed");
      return true;
    }
    if (m.method == "tools/list") {
      p.lists[idx(ListKind::kTools)] =
          now >= registered_at ? everything_tools() : std::vector<Json>{};
    }
    return false;
  };
  sim.start();
  sim.run();
  const ListOutcome tools = sim.listing().list(ListKind::kTools);
  EXPECT_EQ(tools.state, ListState::kOk);
  EXPECT_EQ(tools.items.size(), 13u);  // not the stale empty answer
  EXPECT_EQ(tools.pages, 1);
  EXPECT_EQ(sim.peer.count("tools/list"), 2);
  EXPECT_EQ(sim.peer.count("notifications/cancelled"), 1);
  EXPECT_EQ(sim.session.stats().list_restarts, 1);
  EXPECT_EQ(sim.session.stats().late_responses, 1);
  EXPECT_TRUE(sim.changed().empty());  // absorbed: the listing already reflects the change
  EXPECT_EQ(sim.peer.count("resources/list"), 1);
}

TEST(McpSession, ListChangedAfterAKindFinishedStillRelistsIt) {
  Sim sim;
  sim.peer.serve_numbered_resources(30);
  bool renamed = false;
  sim.peer.hook = [&](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    // When the second resources page is asked for, prompts (already listed) change.
    if (m.method == "resources/list" && !renamed && m.params.is_object()) {
      renamed = true;
      p.lists[idx(ListKind::kPrompts)] = named({"new-prompt"});
      p.notify_at(now + 1, "notifications/prompts/list_changed");
    }
    return false;
  };
  sim.start();
  sim.run();
  Listing l = sim.listing();
  EXPECT_EQ(names(l.list(ListKind::kPrompts)), std::vector<std::string>{"new-prompt"});
  EXPECT_EQ(sim.peer.count("prompts/list"), 2);
  EXPECT_EQ(l.list(ListKind::kResources).items.size(), 30u);
  EXPECT_TRUE(sim.changed().empty());
}

TEST(McpSession, ResourcesListChangedRelistsResourcesAndTemplates) {
  Sim sim;
  sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "notifications/initialized") {
      p.notify_at(now + 1, "notifications/resources/list_changed");
    }
    return false;
  };
  sim.start();
  sim.run();
  EXPECT_EQ(sim.peer.count("resources/list"), 2);
  EXPECT_EQ(sim.peer.count("resources/templates/list"), 2);
  EXPECT_EQ(sim.peer.count("tools/list"), 1);
  EXPECT_EQ(sim.listing().list(ListKind::kResourceTemplates).items.size(), 2u);
}

TEST(McpSession, PastTheRestartBudgetListChangedIsAnEvent) {
  McpSessionConfig c = legacy_config();
  c.max_restarts_per_list = 1;
  Sim sim(c);
  sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "tools/list") {
      p.notify_at(now + 1, "notifications/tools/list_changed");  // a server that never settles
    }
    return false;
  };
  sim.start();
  sim.run();
  EXPECT_EQ(sim.peer.count("tools/list"), 2);
  EXPECT_EQ(sim.listing().list(ListKind::kTools).state, ListState::kOk);
  // The second notice could not be absorbed: the host learns its tools may be stale.
  EXPECT_EQ(sim.changed(), std::vector<ListKind>{ListKind::kTools});
}

TEST(McpSession, RelistsOnTheSameSessionAfterListChanged) {
  Sim sim;
  sim.start();
  sim.run();
  ASSERT_EQ(sim.session.state(), SessionState::kReady);
  sim.peer.lists[idx(ListKind::kTools)] = named({"only-tool"});
  sim.peer.notify_at(sim.now + 100, "notifications/tools/list_changed");
  sim.peer.notify_at(sim.now + 100, "notifications/resources/list_changed");
  sim.run();
  EXPECT_EQ(sim.changed(), (std::vector<ListKind>{ListKind::kTools, ListKind::kResources,
                                                  ListKind::kResourceTemplates}));
  EXPECT_EQ(sim.session.relist({}, sim.now).error().code, ErrorCode::kInvalidArgument);
  int64_t relisted_at = sim.now;
  ASSERT_TRUE(sim.session.relist({ListKind::kTools}, sim.now).ok());
  EXPECT_EQ(sim.session.relist({ListKind::kTools}, sim.now).error().code, ErrorCode::kConflict);
  sim.run();
  auto all = sim.listings();
  ASSERT_EQ(all.size(), 2u);
  const Listing& again = all[1];
  EXPECT_EQ(again.started_at_ms, relisted_at);
  EXPECT_EQ(again.finished_at_ms, relisted_at + 5);
  EXPECT_EQ(again.protocol_version, "2025-11-25");
  EXPECT_EQ(again.server_info["name"], "mcp-servers/everything");
  EXPECT_EQ(names(again.list(ListKind::kTools)), std::vector<std::string>{"only-tool"});
  EXPECT_EQ(again.list(ListKind::kPrompts).state, ListState::kNotListed);
  EXPECT_EQ(sim.peer.count("initialize"), 1);  // no second handshake
  EXPECT_EQ(sim.session.state(), SessionState::kReady);
}

// --- version negotiation (legacy) ---------------------------------------------------------

TEST(McpSession, AcceptsAnOlderVersionWeSpeak) {
  Sim sim;
  sim.peer.legacy_versions = {"2024-11-05"};
  sim.start();
  sim.run();
  EXPECT_FALSE(sim.failure());
  EXPECT_EQ(sim.session.protocol_version(), "2024-11-05");
  EXPECT_EQ(sim.listing().protocol_version, "2024-11-05");
}

TEST(McpSession, RefusesAVersionWeDoNotSpeakNamingBoth) {
  for (const char* version : {"1999-01-01", "2026-07-28"}) {
    SCOPED_TRACE(version);
    Sim sim;
    sim.peer.forced_version = version;
    sim.expect_failure(ErrorCode::kProtocol, version);
    EXPECT_NE(sim.failure()->message.find("2025-11-25"), std::string::npos);
    EXPECT_EQ(sim.closed_events(), 1);
    EXPECT_EQ(sim.peer.count("notifications/initialized"), 0);
    EXPECT_EQ(sim.peer.count("tools/list"), 0);
  }
}

TEST(McpSession, RestrictedVersionsAreWhatWeAskFor) {
  McpSessionConfig c = legacy_config();
  c.protocol_versions = {"2025-03-26", "2024-11-05"};
  Sim sim(c);
  sim.start();
  EXPECT_EQ(sim.peer.received[0].params["protocolVersion"], "2025-03-26");
  sim.run();
  EXPECT_EQ(sim.session.protocol_version(), "2025-03-26");
}

TEST(McpSession, InvalidInitializeResultsFailTheSession) {
  const Json bad_results[] = {
      Json::array(),
      Json{{"capabilities", Json::object()}, {"serverInfo", {{"name", "x"}}}},
      Json{{"protocolVersion", "2025-11-25"}, {"serverInfo", {{"name", "x"}}}},
      Json{{"protocolVersion", "2025-11-25"}, {"capabilities", Json::object()}},
      Json{{"protocolVersion", "2025-11-25"}, {"capabilities", 1}, {"serverInfo", Json::object()}},
  };
  for (const Json& bad : bad_results) {
    SCOPED_TRACE(bad.dump());
    Sim sim;
    sim.peer.hook = reply_to("initialize", bad);
    sim.expect_failure(ErrorCode::kInvalidReply);
    EXPECT_EQ(sim.session.state(), SessionState::kClosed);
  }
  Sim refused;
  refused.peer.hook =
      refuse("initialize", kJsonRpcInvalidParams, "Unsupported protocol version; try 2026-07-28");
  refused.expect_failure(ErrorCode::kUpstreamError, "2026-07-28");
}

// --- garbage and strangers ----------------------------------------------------------------

TEST(McpSession, GarbageIsCountedAndIgnored) {
  Sim sim;
  sim.peer.latency_ms = 50;
  sim.start();
  for (const char* junk : {"hello from a server banner", "{\"foo\":1}", "[]",
                           "{\"jsonrpc\":\"2.0\"", "{\"jsonrpc\":\"2.0\",\"id\":1}"}) {
    Status s = sim.session.handle_text(junk, sim.now);
    EXPECT_FALSE(s.ok()) << junk;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidReply) << junk;
  }
  EXPECT_EQ(sim.session.stats().garbage_messages, 5);
  EXPECT_EQ(sim.session.state(), SessionState::kInitializing);
  sim.run();
  EXPECT_EQ(sim.listing().list(ListKind::kTools).items.size(), 13u);
}

// Issue 9: a reply nested 200,000 deep is refused by the parse (nothing deep is built). Its id can
// still be read, so its request fails at once as an invalid reply rather than at its deadline; a
// deep notification is garbage and the listing goes on.
TEST(McpSession, ADeepReplyFailsItsRequestAtOnceAndADeepNotificationIsSkipped) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  Sim sim;
  sim.peer.hook = [&](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "tools/list") {
      p.send_at(now + 1, R"({"jsonrpc":"2.0","method":"notifications/message","params":{"data":)" +
                             deep + "}}");
      p.send_at(now + 2, R"({"jsonrpc":"2.0","id":)" + m.id.dump() +
                             R"(,"result":{"tools":[{"name":"t","inputSchema":{"default":)" + deep +
                             "}}]}}");
      return true;
    }
    return false;
  };
  sim.start();
  sim.run();
  const Listing listing = sim.listing();
  const ListOutcome& tools = listing.list(ListKind::kTools);
  EXPECT_EQ(tools.state, ListState::kFailed);
  ASSERT_TRUE(tools.error.has_value());
  EXPECT_EQ(tools.error->code, ErrorCode::kInvalidReply);
  EXPECT_EQ(tools.error->message,
            "tools/list: the reply cannot be read: JSON nested deeper than 128 levels (the limit)");
  EXPECT_LT(listing.finished_at_ms - sim.started_at, 1000);  // not the 3 s request timeout
  EXPECT_EQ(sim.session.stats().garbage_messages, 2);
  EXPECT_EQ(listing.list(ListKind::kPrompts).state, ListState::kOk);
  EXPECT_EQ(listing.list(ListKind::kResources).state, ListState::kOk);
}

TEST(McpSession, EveryPrefixOfAnAnswerIsGarbageUntilItIsWhole) {
  Sim sim;
  sim.peer.hook = never_answer("initialize");
  sim.start();
  std::string answer =
      encode_result(Json(1), {{"protocolVersion", "2025-11-25"},
                              {"capabilities", {{"tools", Json::object()}}},
                              {"serverInfo", {{"name", "split"}, {"version", "1"}}}});
  for (std::size_t cut = 0; cut < answer.size(); ++cut) {
    ASSERT_FALSE(sim.session.handle_text(answer.substr(0, cut), sim.now).ok()) << cut;
  }
  EXPECT_EQ(sim.session.state(), SessionState::kInitializing);
  EXPECT_EQ(sim.session.stats().garbage_messages, static_cast<int64_t>(answer.size()));
  sim.peer.hook = nullptr;
  sim.deliver(answer);
  EXPECT_EQ(sim.session.state(), SessionState::kListing);
}

TEST(McpSession, OversizedTextIsRefused) {
  McpSessionConfig c = legacy_config();
  c.max_message_bytes = 64;
  Sim sim(c);
  sim.start();
  Status s = sim.session.handle_text(std::string(65, ' '), sim.now);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kTooLarge);
  EXPECT_EQ(sim.session.stats().garbage_messages, 1);
}

TEST(McpSession, DuplicateAndUnknownResponseIdsAreIgnored) {
  Sim sim;
  sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "tools/list") {
      p.handle(m, now);
      p.handle(m, now + 1);  // the same answer twice
      p.send_at(now + 1, encode_result(Json(9999), {{"tools", Json::array()}}));
      p.send_at(now + 1, encode_result(Json(std::to_string(m.id.get<int64_t>())),
                                       {{"tools", Json::array()}}));  // "3" is not 3
      p.send_at(now + 1, encode_error(Json(nullptr), -32700, "Parse error"));
      return true;
    }
    return false;
  };
  sim.start();
  sim.run();
  EXPECT_EQ(sim.listing().list(ListKind::kTools).items.size(), 13u);
  EXPECT_EQ(sim.session.stats().unknown_responses, 4);
  EXPECT_FALSE(sim.failure());
}

TEST(McpSession, AnswersPingAndRefusesOtherServerRequests) {
  Sim sim;
  sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "notifications/initialized") {
      p.send_at(now + 1, R"({"jsonrpc":"2.0","id":"srv-1","method":"ping"})");
      p.send_at(now + 1, R"({"jsonrpc":"2.0","id":77,"method":"roots/list"})");
      p.send_at(now + 1, R"({"jsonrpc":"2.0","id":78,"method":"sampling/createMessage",)"
                         R"("params":{"messages":[]}})");
      p.send_at(now + 1, R"({"jsonrpc":"2.0","id":79,"method":"elicitation/create"})");
      p.send_at(now + 1, R"({"jsonrpc":"2.0","method":"notifications/message",)"
                         R"("params":{"level":"info","data":"hi"}})");
      p.send_at(now + 1, R"({"jsonrpc":"2.0","method":"notifications/progress",)"
                         R"("params":{"progressToken":1,"progress":1}})");
    }
    return false;
  };
  sim.start();
  sim.run();
  std::map<Json, JsonRpcMessage> answers;
  for (const auto& m : sim.peer.received) {
    if (m.kind == JsonRpcKind::kResult || m.kind == JsonRpcKind::kError) answers[m.id] = m;
  }
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers[Json("srv-1")].kind, JsonRpcKind::kResult);
  EXPECT_EQ(answers[Json("srv-1")].result, Json::object());
  for (int id : {77, 78, 79}) {
    EXPECT_EQ(answers[Json(id)].kind, JsonRpcKind::kError) << id;
    EXPECT_EQ(answers[Json(id)].error.code, kJsonRpcMethodNotFound) << id;
  }
  EXPECT_EQ(sim.session.stats().answered_server_requests, 4);
  EXPECT_EQ(sim.session.stats().ignored_notifications, 2);
  EXPECT_EQ(sim.listing().list(ListKind::kTools).state, ListState::kOk);
}

TEST(McpSession, AcceptsBatches) {
  Sim sim;
  sim.peer.hook = never_answer("initialize");
  sim.start();
  std::string batch = "[" + encode_notification("notifications/message", Json()) + "," +
                      encode_result(Json(1), {{"protocolVersion", "2025-03-26"},
                                              {"capabilities", Json::object()},
                                              {"serverInfo", {{"name", "batchy"}}}}) +
                      "]";
  ASSERT_TRUE(sim.session.handle_text(batch, sim.now).ok());
  sim.flush();
  EXPECT_EQ(sim.session.protocol_version(), "2025-03-26");
  // No capabilities advertised: the listing is over at once, every kind absent.
  Listing l = sim.listing();
  for (const auto& out : l.lists) EXPECT_EQ(out.state, ListState::kAbsent);
  EXPECT_EQ(sim.session.state(), SessionState::kReady);
}

// --- the stateless 2026-07-28 era ---------------------------------------------------------

TEST(McpSessionModern, DiscoversAndListsWithPerRequestMeta) {
  Sim sim{McpSessionConfig{}};
  sim.peer.era = FakePeer::Era::kModern;
  sim.peer.page_extra = {{"ttlMs", 300000}, {"cacheScope", "public"}};
  sim.start();
  ASSERT_EQ(sim.peer.received.size(), 1u);
  const JsonRpcMessage& discover = sim.peer.received[0];
  EXPECT_EQ(discover.method, "server/discover");
  const Json& meta = discover.params["_meta"];
  EXPECT_EQ(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
  EXPECT_EQ(meta["io.modelcontextprotocol/clientInfo"]["name"], "quiver");
  EXPECT_EQ(meta["io.modelcontextprotocol/clientCapabilities"], Json::object());
  EXPECT_EQ(sim.session.protocol_version(), "2026-07-28");  // the HTTP header for the probe
  // The probe waits the request deadline (discover_timeout_ms 0, the default).
  EXPECT_EQ(sim.session.next_deadline(), sim.started_at + 3000);

  sim.run();
  EXPECT_FALSE(sim.failure());
  EXPECT_EQ(sim.session.era(), ProtocolEra::kModern);
  EXPECT_EQ(sim.peer.count("initialize"), 0);
  EXPECT_EQ(sim.peer.count("notifications/initialized"), 0);
  for (const char* method :
       {"tools/list", "resources/list", "resources/templates/list", "prompts/list"}) {
    auto requests = sim.peer.requests(method);
    ASSERT_EQ(requests.size(), 1u) << method;
    EXPECT_EQ(requests[0].params["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
  }
  Listing l = sim.listing();
  EXPECT_EQ(l.protocol_version, "2026-07-28");
  EXPECT_EQ(l.server_info["name"], "mcp-servers/everything");
  EXPECT_EQ(l.instructions, "Try the echo tool.");
  EXPECT_EQ(l.list(ListKind::kTools).items.size(), 13u);
  EXPECT_EQ(l.list(ListKind::kTools).hints.ttl_ms, 300000);
  EXPECT_EQ(l.list(ListKind::kTools).hints.cache_scope, "public");
}

TEST(McpSessionModern, CacheHintsCombineOverPages) {
  Sim sim{McpSessionConfig{}};
  sim.peer.era = FakePeer::Era::kModern;
  sim.peer.serve_numbered_resources(40);
  int page = 0;
  sim.peer.hook = [&](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method != "resources/list") return false;
    ++page;
    const Json hints[] = {{{"ttlMs", 60000}, {"cacheScope", "public"}},
                          {{"ttlMs", 30000}, {"cacheScope", "public"}},
                          {{"ttlMs", 90000}, {"cacheScope", "private"}},
                          {{"cacheScope", "public"}}};  // no ttl: does not constrain
    p.page_extra = hints[page - 1];
    p.handle(m, now);
    return true;
  };
  sim.start();
  sim.run();
  const ListOutcome out = sim.listing().list(ListKind::kResources);
  EXPECT_EQ(out.state, ListState::kOk);
  EXPECT_EQ(out.pages, 4);
  EXPECT_EQ(out.hints.ttl_ms, 30000);           // the shortest wins
  EXPECT_EQ(out.hints.cache_scope, "private");  // one private page makes it private
  // A negative ttl counts as 0 (caching: "treat it as 0").
  Sim neg{McpSessionConfig{}};
  neg.peer.era = FakePeer::Era::kModern;
  neg.peer.page_extra = {{"ttlMs", -5}};
  neg.start();
  neg.run();
  EXPECT_EQ(neg.listing().list(ListKind::kTools).hints.ttl_ms, 0);
  EXPECT_FALSE(neg.listing().list(ListKind::kTools).hints.cache_scope.has_value());
}

TEST(McpSessionModern, InputRequiredOrUnknownResultTypesAreInvalid) {
  for (const char* type : {"input_required", "something_new"}) {
    SCOPED_TRACE(type);
    Sim sim{McpSessionConfig{}};
    sim.peer.era = FakePeer::Era::kModern;
    sim.peer.hook =
        reply_to("tools/list", {{"resultType", type}, {"inputRequests", Json::object()}});
    const ListOutcome tools = sim.list_all().list(ListKind::kTools);
    expect_failed(tools, ErrorCode::kInvalidReply);
    EXPECT_EQ(sim.listing().list(ListKind::kPrompts).state, ListState::kOk);
  }
}

TEST(McpSessionModern, ProbeFallsBackToInitializeForALegacyServer) {
  // Any error that is not a modern one means legacy: the fallback is not keyed to one code.
  for (int64_t code : {kJsonRpcMethodNotFound, kJsonRpcInvalidParams, int64_t{-32000}}) {
    SCOPED_TRACE(code);
    Sim sim{McpSessionConfig{}};
    sim.peer.legacy_discover_error = code;
    sim.start();
    EXPECT_EQ(sim.session.state(), SessionState::kDiscovering);
    sim.run(5);
    EXPECT_EQ(sim.session.state(), SessionState::kInitializing);
    EXPECT_EQ(sim.session.protocol_version(), "");
    EXPECT_EQ(sim.session.era(), ProtocolEra::kLegacy);
    sim.run();
    EXPECT_FALSE(sim.failure());
    EXPECT_EQ(sim.session.protocol_version(), "2025-11-25");
    auto init = sim.peer.requests("initialize");
    ASSERT_EQ(init.size(), 1u);
    EXPECT_FALSE(init[0].params.contains("_meta"));
    EXPECT_FALSE(sim.peer.requests("tools/list")[0].params.contains("_meta"));
    EXPECT_EQ(sim.listing().list(ListKind::kTools).items.size(), 13u);
  }
}

TEST(McpSessionModern, ASilentProbeMeansLegacyAfterTheDiscoverTimeout) {
  Sim sim{McpSessionConfig{}};
  sim.peer.legacy_discover_error = std::nullopt;
  sim.start();
  sim.run();
  EXPECT_FALSE(sim.failure());
  EXPECT_EQ(sim.session.era(), ProtocolEra::kLegacy);
  Listing l = sim.listing();
  // The probe waits the request deadline (3000 ms), then initialize and the lists.
  EXPECT_EQ(l.finished_at_ms, sim.started_at + 3000 + 10);  // still inside the deadline
  EXPECT_EQ(sim.peer.count("notifications/cancelled"), 0);  // nothing cancelled before initialize
}

// Issue 10: a 2026-07-28 server that answers the probe after it was given up (a slow start) and
// then refuses initialize with -32022 is listed as modern, not failed.
TEST(McpSessionModern, ALateAnswerToTheProbeMeansModern) {
  McpSessionConfig c;
  c.discover_timeout_ms = 1000;
  Sim sim{c};
  sim.peer.era = FakePeer::Era::kModern;
  sim.peer.hook = [](FakePeer& peer, const JsonRpcMessage& m, int64_t now) {
    if (m.method == "server/discover" && peer.count("server/discover") == 1) {
      peer.latency_ms = 1500;  // answered at +1500, the probe gave up at +1000
      peer.handle(m, now);
      peer.latency_ms = 5;
      return true;
    }
    if (m.method == "initialize") {  // sent at +1000, refused at +1600
      peer.send_at(now + 600, encode_error(m.id, kMcpUnsupportedProtocolVersion,
                                           "Unsupported protocol version"));
      return true;
    }
    return false;
  };
  sim.start();
  sim.run();
  EXPECT_FALSE(sim.failure()) << sim.failure()->message;
  EXPECT_EQ(sim.session.era(), ProtocolEra::kModern);
  EXPECT_EQ(sim.session.protocol_version(), "2026-07-28");
  Listing l = sim.listing();
  EXPECT_EQ(l.protocol_version, "2026-07-28");
  EXPECT_EQ(l.list(ListKind::kTools).items.size(), 13u);
  EXPECT_EQ(sim.peer.count("server/discover"), 1);  // the late answer was enough
  EXPECT_EQ(sim.peer.count("initialize"), 1);
  EXPECT_TRUE(sim.peer.requests("tools/list")[0].params.contains("_meta"));
  EXPECT_GE(sim.session.stats().late_responses, 2);  // the probe's answer and initialize's error
}

// -32022 to initialize means "modern": discover again (with the request deadline), then list.
TEST(McpSessionModern, UnsupportedVersionToInitializeRediscoversOnce) {
  McpSessionConfig c;
  c.discover_timeout_ms = 500;
  c.listing_deadline_ms = 10000;
  Sim sim{c};
  sim.peer.era = FakePeer::Era::kModern;
  const PeerHook refuse_initialize =
      refuse("initialize", kMcpUnsupportedProtocolVersion, "Unsupported protocol version");
  sim.peer.hook =
      first_of({[](FakePeer& peer, const JsonRpcMessage& m, int64_t) {
                  // the first discover is lost
                  return m.method == "server/discover" && peer.count("server/discover") == 1;
                },
                refuse_initialize});
  sim.start();
  sim.run();
  EXPECT_FALSE(sim.failure()) << sim.failure()->message;
  EXPECT_EQ(sim.session.era(), ProtocolEra::kModern);
  EXPECT_EQ(sim.listing().list(ListKind::kPrompts).items.size(), 4u);
  EXPECT_EQ(sim.peer.count("server/discover"), 2);
  EXPECT_EQ(sim.peer.count("initialize"), 1);

  // A second probe that goes unanswered fails the session: no endless fallback.
  Sim silent{c};
  silent.peer.era = FakePeer::Era::kModern;
  silent.peer.hook = first_of({never_answer("server/discover"), refuse_initialize});
  silent.expect_failure(ErrorCode::kTimeout,
                        "3000 ms");  // the second probe waits the request deadline
  EXPECT_EQ(silent.peer.count("initialize"), 1);

  // A legacy-only session does not rediscover: -32022 to initialize is an upstream error.
  Sim legacy;
  legacy.peer.hook = refuse_initialize;
  legacy.start();
  legacy.run();
  ASSERT_TRUE(legacy.failure());
  EXPECT_EQ(legacy.peer.count("server/discover"), 0);
}

TEST(McpSessionModern, AnHttpRejectionOfTheProbeMeansLegacy) {
  {
    // 404/405, or a 400 without a JSON-RPC body: the host reports the request failed.
    Sim sim{McpSessionConfig{}};
    sim.peer.hook = [&](FakePeer&, const JsonRpcMessage& m, int64_t) {
      if (m.method != "server/discover") return false;
      sim.session.on_request_failed(m.id.get<int64_t>(), Error(ErrorCode::kTransport, "HTTP 405"),
                                    sim.now);
      return true;
    };
    sim.start();
    sim.run();
    EXPECT_FALSE(sim.failure());
    EXPECT_EQ(sim.session.era(), ProtocolEra::kLegacy);
    EXPECT_EQ(sim.listing().list(ListKind::kPrompts).items.size(), 4u);
  }
  {
    // The TypeScript SDK's stateful HTTP server: 400 with an id-less JSON-RPC error.
    Sim sim{McpSessionConfig{}};
    sim.peer.hook = [](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
      if (m.method != "server/discover") return false;
      p.send_at(now + 1,
                encode_error(Json(nullptr), -32000, "Bad Request: Server not initialized"));
      return true;
    };
    sim.start();
    sim.run();
    EXPECT_FALSE(sim.failure());
    EXPECT_EQ(sim.session.era(), ProtocolEra::kLegacy);
    EXPECT_EQ(sim.peer.count("initialize"), 1);
    EXPECT_EQ(sim.session.stats().unknown_responses, 0);
    EXPECT_EQ(sim.listing().finished_at_ms, sim.started_at + 1 + 10);  // not after a timeout
  }
}

TEST(McpSessionModern, UnsupportedProtocolVersionErrors) {
  auto unsupported = [](std::vector<std::string> supported) {
    return [supported](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
      if (m.method != "server/discover") return false;
      p.send_at(now + 1, R"({"jsonrpc":"2.0","id":)" + m.id.dump() +
                             R"(,"error":{"code":-32022,"message":"Unsupported protocol version",)"
                             R"("data":{"supported":)" +
                             Json(supported).dump() + R"(,"requested":"2026-07-28"}}})");
      return true;
    };
  };
  {
    // A dual-era server that serves only a legacy version to us: initialize.
    Sim sim{McpSessionConfig{}};
    sim.peer.hook = unsupported({"2025-11-25"});
    sim.start();
    sim.run();
    EXPECT_FALSE(sim.failure());
    EXPECT_EQ(sim.session.protocol_version(), "2025-11-25");
  }
  {
    // Nothing in common: a protocol error naming both sides.
    Sim sim{McpSessionConfig{}};
    sim.peer.hook = unsupported({"2027-01-01"});
    sim.expect_failure(ErrorCode::kProtocol, "2027-01-01");
    EXPECT_NE(sim.failure()->message.find("2026-07-28"), std::string::npos);
    EXPECT_EQ(sim.session.era(), ProtocolEra::kModern);
    EXPECT_EQ(sim.peer.count("initialize"), 0);
  }
  {
    // Missing client capability: a modern server, not a reason to fall back.
    Sim sim{McpSessionConfig{}};
    sim.peer.hook =
        refuse("server/discover", kMcpMissingRequiredClientCapability, "needs elicitation");
    sim.expect_failure(ErrorCode::kProtocol);
    EXPECT_EQ(sim.peer.count("initialize"), 0);
  }
}

TEST(McpSessionModern, DiscoverResultsAreValidated) {
  const Json bad_results[] = {
      Json("x"),
      Json{{"capabilities", Json::object()}},
      Json{{"supportedVersions", "2026-07-28"}, {"capabilities", Json::object()}},
      Json{{"supportedVersions", {"2026-07-28"}}},
      Json{{"supportedVersions", {"2026-07-28"}},
           {"capabilities", Json::object()},
           {"resultType", "input_required"}},
  };
  for (const Json& bad : bad_results) {
    SCOPED_TRACE(bad.dump());
    Sim sim{McpSessionConfig{}};
    sim.peer.hook = reply_to("server/discover", bad);
    sim.expect_failure(ErrorCode::kInvalidReply);
  }
}

TEST(McpSessionModern, ModernPolicyDoesNotFallBack) {
  McpSessionConfig c;
  c.era = EraPolicy::kModern;
  Sim sim(c);
  sim.expect_failure(ErrorCode::kProtocol, "-32601");
  EXPECT_EQ(sim.peer.count("initialize"), 0);

  Sim silent(c);
  silent.peer.legacy_discover_error = std::nullopt;
  silent.expect_failure(ErrorCode::kTimeout);
}

TEST(McpSessionModern, ADualEraServerListingLegacyVersionsStaysModern) {
  Sim sim{McpSessionConfig{}};
  sim.peer.era = FakePeer::Era::kModern;
  sim.peer.modern_versions = {"2025-11-25", "2026-07-28"};
  sim.start();
  sim.run();
  EXPECT_EQ(sim.session.era(), ProtocolEra::kModern);
  EXPECT_EQ(sim.session.protocol_version(), "2026-07-28");

  // A discover answer that lists only legacy versions: the probe falls back.
  Sim legacy_only{McpSessionConfig{}};
  legacy_only.peer.era = FakePeer::Era::kModern;
  legacy_only.peer.modern_versions = {"2025-06-18"};
  legacy_only.start();
  legacy_only.run();
  EXPECT_FALSE(legacy_only.failure());
  EXPECT_EQ(legacy_only.session.era(), ProtocolEra::kLegacy);
  EXPECT_EQ(legacy_only.session.protocol_version(), "2025-11-25");
}

// --- configuration ------------------------------------------------------------------------

TEST(McpSessionConfigTest, ValidatesEveryBound) {
  EXPECT_TRUE(validate_session_config(McpSessionConfig{}).ok());
  std::vector<std::pair<const char*, std::function<void(McpSessionConfig&)>>> bad = {
      {"client_name", [](McpSessionConfig& c) { c.client_name.clear(); }},
      {"protocol_versions", [](McpSessionConfig& c) { c.protocol_versions.clear(); }},
      {"unknown", [](McpSessionConfig& c) { c.protocol_versions = {"2025-13-01"}; }},
      {"modern",
       [](McpSessionConfig& c) {
         c.era = EraPolicy::kModern;
         c.protocol_versions = {"2025-11-25"};
       }},
      {"legacy",
       [](McpSessionConfig& c) {
         c.era = EraPolicy::kLegacy;
         c.protocol_versions = {"2026-07-28"};
       }},
      {"request_timeout_ms", [](McpSessionConfig& c) { c.request_timeout_ms = 0; }},
      {"listing_deadline_ms", [](McpSessionConfig& c) { c.listing_deadline_ms = -1; }},
      {"max_pages_per_list", [](McpSessionConfig& c) { c.max_pages_per_list = 0; }},
      {"max_listing_bytes", [](McpSessionConfig& c) { c.max_listing_bytes = 0; }},
      {"max_cursor_bytes", [](McpSessionConfig& c) { c.max_cursor_bytes = 0; }},
  };
  for (auto& [what, mutate] : bad) {
    McpSessionConfig c;
    mutate(c);
    Status s = validate_session_config(c);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message.find(what), std::string::npos) << s.error().message;
    McpSession session(c);
    EXPECT_FALSE(session.start(0).ok());
    EXPECT_EQ(session.state(), SessionState::kIdle);
    EXPECT_FALSE(session.poll_transmit().has_value());
  }
}

TEST(McpSessionConfigTest, ProbeWithOnlyOneEraBehavesAsThatEra) {
  McpSessionConfig legacy_only;
  legacy_only.protocol_versions = {"2025-06-18"};
  Sim a(legacy_only);
  a.start();
  EXPECT_EQ(a.peer.received[0].method, "initialize");

  McpSessionConfig modern_only;
  modern_only.protocol_versions = {"2026-07-28"};
  Sim b(modern_only);
  b.start();
  b.run();
  EXPECT_EQ(b.peer.received[0].method, "server/discover");
  ASSERT_TRUE(b.failure());  // a legacy peer: nothing to fall back to
  EXPECT_EQ(b.peer.count("initialize"), 0);
}

TEST(McpSessionConfigTest, KnowsTheVersionsAndEras) {
  EXPECT_TRUE(is_known_protocol_version("2025-06-18"));
  EXPECT_FALSE(is_known_protocol_version("2025-06-19"));
  EXPECT_TRUE(is_modern_protocol_version("2026-07-28"));
  EXPECT_FALSE(is_modern_protocol_version("2025-11-25"));
  EXPECT_STREQ(protocol_era_name(ProtocolEra::kModern), "modern");
}

// --- calls (the relay, issue 13) -----------------------------------------------------------

std::vector<McpSession::CallDone> calls_done(const Sim& sim) {
  std::vector<McpSession::CallDone> out;
  for (const auto& e : sim.events) {
    if (auto* d = std::get_if<McpSession::CallDone>(&e)) out.push_back(*d);
  }
  return out;
}

TEST(McpSessionCalls, ACallIsAnsweredWithTheUpstreamsResultOrErrorAsSent) {
  Sim sim;
  sim.peer.hook = first_of({[](FakePeer& p, const JsonRpcMessage& m, int64_t now) {
    if (m.method != "tools/call") return false;
    if (json_string(m.params, "name") == std::optional<std::string>("echo")) {
      p.reply(m, now, {{"content", {{{"type", "text"}, {"text", "Echo: hi"}}}}});
    } else {
      p.reply_error(m, now, kJsonRpcInvalidParams, "Tool nope not found");
    }
    return true;
  }});
  McpSession idle;
  EXPECT_EQ(idle.call("tools/call", Json::object(), 1000, 0).error().code,
            ErrorCode::kInvalidArgument)
      << "no call before the handshake";
  sim.list_all();
  EXPECT_EQ(sim.session.call("", Json::object(), 1000, sim.now).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(sim.session.call("tools/call", Json::object(), 0, sim.now).error().code,
            ErrorCode::kInvalidArgument);
  sim.events.clear();
  Result<int64_t> ok = sim.session.call("tools/call", {{"name", "echo"}}, 1000, sim.now);
  Result<int64_t> bad = sim.session.call("tools/call", {{"name", "nope"}}, 1000, sim.now);
  ASSERT_TRUE(ok.ok() && bad.ok());
  EXPECT_EQ(sim.session.calls_in_flight(), 2u);
  sim.run();
  std::vector<McpSession::CallDone> done = calls_done(sim);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, *ok);
  ASSERT_TRUE(done[0].result.has_value());
  EXPECT_EQ((*done[0].result)["content"][0]["text"], "Echo: hi");
  EXPECT_EQ(done[1].id, *bad);
  ASSERT_TRUE(done[1].error.has_value());
  EXPECT_EQ(done[1].error->code, kJsonRpcInvalidParams);
  EXPECT_EQ(done[1].error->message, "Tool nope not found");
  EXPECT_EQ(sim.session.state(), SessionState::kReady) << "calls do not change the state";
  EXPECT_EQ(sim.session.calls_in_flight(), 0u);
}

TEST(McpSessionCalls, ACallPastItsTimeoutFailsAndIsCancelledUpstreamTheSessionStays) {
  Sim sim;
  sim.peer.hook = never_answer("tools/call");
  sim.list_all();
  sim.events.clear();
  const int64_t sent_at = sim.now;
  Result<int64_t> id = sim.session.call("tools/call", {{"name", "slow"}}, 700, sim.now);
  ASSERT_TRUE(id.ok());
  sim.run();
  std::vector<McpSession::CallDone> done = calls_done(sim);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].failure.has_value());
  EXPECT_EQ(done[0].failure->code, ErrorCode::kTimeout);
  EXPECT_EQ(sim.now, sent_at + 700);
  std::vector<JsonRpcMessage> cancels;
  for (const auto& m : sim.peer.received) {
    if (m.method == "notifications/cancelled") cancels.push_back(m);
  }
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].params["requestId"], *id);
  EXPECT_EQ(sim.session.state(), SessionState::kReady);
  EXPECT_FALSE(sim.failure().has_value());
}

TEST(McpSessionCalls, ACancelledCallSendsCancelledAndReportsNothingMore) {
  Sim sim;
  sim.peer.latency_ms = 500;
  sim.peer.hook = reply_to("tools/call", {{"content", Json::array()}});
  sim.list_all();
  sim.events.clear();
  Result<int64_t> id = sim.session.call("tools/call", {{"name", "x"}}, 5000, sim.now);
  ASSERT_TRUE(id.ok());
  sim.flush();
  EXPECT_TRUE(sim.session.cancel_call(*id, "the client went away"));
  EXPECT_FALSE(sim.session.cancel_call(*id, "again")) << "no longer waiting";
  sim.run();  // the upstream's late answer is counted as late, not reported
  EXPECT_TRUE(calls_done(sim).empty());
  EXPECT_EQ(sim.peer.count("notifications/cancelled"), 1);
  EXPECT_EQ(sim.session.stats().late_responses, 1);
}

TEST(McpSessionCalls, ACallRunsBesideAListingAndFailsWhenTheSessionEnds) {
  Sim sim;
  sim.peer.hook = never_answer("prompts/get");
  sim.list_all();
  sim.events.clear();
  ASSERT_TRUE(sim.session.relist({ListKind::kTools}, sim.now).ok());
  Result<int64_t> id = sim.session.call("prompts/get", {{"name", "p"}}, 5000, sim.now);
  ASSERT_TRUE(id.ok()) << "a call may go out while a listing runs";
  sim.run(100);
  EXPECT_EQ(sim.listings().size(), 1u);
  sim.session.on_transport_error(Error(ErrorCode::kTransport, "the child exited"), sim.now);
  sim.flush();
  std::vector<McpSession::CallDone> done = calls_done(sim);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, *id);
  ASSERT_TRUE(done[0].failure.has_value());
  EXPECT_EQ(done[0].failure->code, ErrorCode::kTransport);
  EXPECT_NE(done[0].failure->message.find("the child exited"), std::string::npos);
}

TEST(McpSessionCalls, AModernSessionsCallCarriesTheMetaOfEveryRequest) {
  McpSessionConfig config;
  config.era = EraPolicy::kModern;
  Sim sim(config);
  sim.peer.era = FakePeer::Era::kModern;
  sim.peer.hook = reply_to("tools/call", {{"resultType", "complete"}, {"content", Json::array()}});
  sim.list_all();
  ASSERT_TRUE(sim.session.call("tools/call", {{"name", "echo"}}, 1000, sim.now).ok());
  sim.run();
  std::vector<JsonRpcMessage> sent = sim.peer.requests("tools/call");
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].params["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
  EXPECT_EQ(sent[0].params["name"], "echo");
}

}  // namespace
}  // namespace quiver
