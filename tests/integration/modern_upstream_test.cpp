// 2026-07-28 upstreams built on the official TypeScript SDK 2.x (`@modelcontextprotocol/server`,
// tests/peers/sdk2-upstream.mjs), over Streamable HTTP and stdio: Quiver negotiates 2026-07-28 on
// both (the SDK's HTTP entry refuses a request without Mcp-Method: 400, -32020), keeps the cache
// hints, lists every page, keeps numbers a double cannot hold exactly as sent, and sees list
// changes through subscriptions/listen. Also the standard-header rules themselves.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "native-agent/upstream/http_transport.h"
#include "native-agent/upstream/upstream.h"
#include "shared/canonical_json.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using testing::append_line;
using testing::ChangeLog;
using testing::expect_a_change_across_a_gap;
using testing::free_loopback_port;
using testing::HttpPeer;
using testing::node_modules;
using testing::peers_dir;
using testing::steady_now_ms;
using testing::TempDir;

std::string sdk2_js() { return peers_dir() + "/sdk2-upstream.mjs"; }
std::string node22() { return node_modules() + "/node/bin/node"; }

const Json* find_tool(const Listing& l, const std::string& name) {
  for (const Json& t : l.list(ListKind::kTools).items) {
    if (t.value("name", "") == name) return &t;
  }
  return nullptr;
}

// ---- the header rules -------------------------------------------------------------------------

TEST(McpStandardHeaders, EveryRequestAndNotificationNamesItsMethod) {
  auto h = mcp_standard_headers(Json{
      {"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}, {"params", {{"cursor", "abc"}}}});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].name, "Mcp-Method");
  EXPECT_EQ(h[0].value, "tools/list");
  h = mcp_standard_headers(Json{{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].value, "notifications/cancelled");
  // Responses and batches name no method.
  EXPECT_TRUE(mcp_standard_headers(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"result", {}}}).empty());
  EXPECT_TRUE(mcp_standard_headers(Json::array({Json{{"method", "ping"}}})).empty());
}

TEST(McpStandardHeaders, NameCarriesTheToolPromptOrResourceItAddresses) {
  auto h = mcp_standard_headers(
      Json{{"id", 2}, {"method", "tools/call"}, {"params", {{"name", "my-hyphenated-tool"}}}});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].name, "Mcp-Name");
  EXPECT_EQ(h[1].value, "my-hyphenated-tool");
  h = mcp_standard_headers(Json{{"id", 3},
                                {"method", "resources/read"},
                                {"params", {{"uri", "file:///path/to/file%20name.txt"}}}});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].value, "file:///path/to/file%20name.txt");
  h = mcp_standard_headers(Json{{"id", 4}, {"method", "prompts/get"}, {"params", {{"name", "p"}}}});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].value, "p");
  // A list request addresses nothing.
  EXPECT_EQ(mcp_standard_headers(Json{{"id", 5}, {"method", "prompts/list"}}).size(), 1u);
}

TEST(McpStandardHeaders, ValuesAHeaderCannotCarryAreBase64Encoded) {
  EXPECT_EQ(mcp_header_value("internal spaces ok"), "internal spaces ok");
  EXPECT_EQ(mcp_header_value("Région"), "=?base64?UsOpZ2lvbg==?=");
  EXPECT_EQ(mcp_header_value(" lead"), "=?base64?IGxlYWQ=?=");
  EXPECT_EQ(mcp_header_value("trail "), "=?base64?dHJhaWwg?=");
  EXPECT_EQ(mcp_header_value("a\r\nb"), "=?base64?YQ0KYg==?=");
  EXPECT_EQ(mcp_header_value("\tx"), "=?base64?CXg=?=");
  // A plain value that reads as the encoding is encoded, so it decodes back to itself.
  EXPECT_EQ(mcp_header_value("=?base64?eA==?="), "=?base64?PT9iYXNlNjQ/ZUE9PT89?=");
}

TEST(McpStandardHeaders, ConfiguredHeadersCannotImpersonateThem) {
  for (const char* name : {"Mcp-Method", "mcp-name", "Mcp-Param-Region"}) {
    HttpTransportOptions options;
    options.url = "http://127.0.0.1:9/mcp";
    options.allow_private_addresses = true;
    options.secret_headers.push_back({name, "x"});
    auto t = HttpTransport::create(std::move(options));
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
  }
}

// ---- the TypeScript SDK 2.x server ------------------------------------------------------------

class Sdk2Http : public ::testing::Test {
 protected:
  void start(std::vector<std::string> flags, const std::string& node = "node") {
    port_ = free_loopback_port();
    std::vector<std::string> argv = {node, sdk2_js(), "http", "--port", std::to_string(port_)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    peer_ = std::make_unique<HttpPeer>(argv, std::map<std::string, std::string>{}, port_);
    ASSERT_TRUE(peer_->ok()) << peer_->error();
  }
  UpstreamSpec spec() const {
    return UpstreamSpec::http("sdk2-http", "http://127.0.0.1:" + std::to_string(port_) + "/mcp", {},
                              /*allow_private=*/true);
  }
  std::unique_ptr<HttpPeer> peer_;
  int port_ = 0;
};

// The SDK's stdio server takes longer than the era probe's default 1 s to import and answer
// server/discover on a loaded machine; a silent probe means "legacy". Give it time here (the
// probe's own deadline is issue 10's part A).
UpstreamOptions patient_stdio_options() {
  UpstreamOptions options;
  options.session.discover_timeout_ms = 6000;
  options.session.request_timeout_ms = 6000;
  return options;
}

void expect_modern_listing_with_hints(const Listing& l) {
  EXPECT_EQ(l.protocol_version, "2026-07-28");
  EXPECT_EQ(l.server_info.value("name", ""), "quiver-sdk2-upstream");
  const ListOutcome& tools = l.list(ListKind::kTools);
  EXPECT_EQ(tools.state, ListState::kOk);
  EXPECT_EQ(tools.items.size(), 6u);  // tool_1..tool_5, show_chart
  EXPECT_EQ(tools.pages, 3);          // --page-size 2
  EXPECT_EQ(tools.hints.ttl_ms, 120000);
  EXPECT_EQ(tools.hints.cache_scope, "public");
  EXPECT_EQ(l.list(ListKind::kResources).hints.ttl_ms, 120000);
  EXPECT_EQ(l.list(ListKind::kPrompts).hints.cache_scope, "public");
  // The MCP Apps-style tool keeps its _meta.ui.
  const Json* chart = find_tool(l, "show_chart");
  ASSERT_NE(chart, nullptr);
  EXPECT_EQ((*chart)["_meta"]["ui"]["resourceUri"], "ui://charts/chart.html");
}

TEST_F(Sdk2Http, NegotiatesTheModernRevisionAndKeepsTheCacheHints) {
  start({"--tools", "5", "--page-size", "2"});
  UpstreamConnection conn(spec());
  auto listing = conn.list(conn.now_ms() + 8000);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  expect_modern_listing_with_hints(*listing);
  EXPECT_EQ(conn.stats().era, ProtocolEra::kModern);
}

TEST_F(Sdk2Http, HttpAndStdioListTheSameDefinitionsWithTheSameHints) {
  start({"--tools", "5", "--page-size", "2"});
  UpstreamConnection http(spec());
  UpstreamConnection stdio(
      UpstreamSpec::stdio("sdk2-stdio", "node",
                          {sdk2_js(), "stdio", "--tools", "5", "--page-size", "2"}),
      patient_stdio_options());
  auto h = http.list(http.now_ms() + 8000);
  auto s = stdio.list(stdio.now_ms() + 8000);
  ASSERT_TRUE(h.ok()) << h.error().message;
  ASSERT_TRUE(s.ok()) << s.error().message;
  expect_modern_listing_with_hints(*s);
  for (ListKind k : {ListKind::kTools, ListKind::kResources, ListKind::kPrompts}) {
    const ListOutcome& a = h->list(k);
    const ListOutcome& b = s->list(k);
    ASSERT_EQ(a.items.size(), b.items.size()) << list_kind_name(k);
    for (std::size_t i = 0; i < a.items.size(); ++i) EXPECT_EQ(a.items[i], b.items[i]);
    EXPECT_EQ(a.hints.ttl_ms, b.hints.ttl_ms);
    EXPECT_EQ(a.hints.cache_scope, b.hints.cache_scope);
  }
}

TEST_F(Sdk2Http, NumbersBeyondADoubleArriveExactlyAsTheServerWroteThem) {
  if (access(node22().c_str(), X_OK) != 0) GTEST_SKIP() << "no Node 22 at " << node22();
  start({"--tools", "1", "--big-numbers"}, node22());
  UpstreamConnection conn(spec());
  auto listing = conn.list(conn.now_ms() + 8000);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  const Json* big = find_tool(*listing, "big_numbers");
  ASSERT_NE(big, nullptr);
  // The whole definition, byte for byte (keys in canonical order; the server's numbers as sent).
  const std::string expected =
      R"({"description":"numbers beyond 64 bits and doubles","inputSchema":{"properties":{)"
      R"("huge":{"maximum":1e400,"type":"number"},)"
      R"("id":{"maximum":123456789012345678901234567890,"minimum":-98765432109876543210987654321,"type":"integer"},)"
      R"("plain":{"maximum":9007199254740993,"type":"integer"},)"
      R"("ratio":{"default":1.0,"multipleOf":0.1000000000000000055511151231257827,"type":"number"},)"
      R"("small":{"exclusiveMinimum":1E-7,"type":"number"},)"
      R"("zeros":{"default":0e5,"maximum":-0.0,"minimum":-0,"multipleOf":-0E-3,"type":"number"}},)"
      R"("type":"object"},"name":"big_numbers"})";
  Result<std::string> got = canonical_json(*big);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, expected);
  EXPECT_EQ(serialize_json(*big), expected);
}

// ---- subscriptions/listen -----------------------------------------------------------------------

// Lists, waits for the subscription, adds a tool on the server, and expects the change to be
// reported and the relist to show it.
void expect_listen_reports_a_new_tool(UpstreamConnection& conn, const std::string& control) {
  ChangeLog changes;
  conn.set_change_callback(changes.callback());
  auto first = conn.list(conn.now_ms() + 8000);
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(first->protocol_version, "2026-07-28");
  EXPECT_EQ(find_tool(*first, "fresh_tool"), nullptr);
  // Let the subscription open (the server acknowledges it), then change the tool list.
  int64_t end = steady_now_ms() + 1500;
  while (steady_now_ms() < end) conn.pump(100);
  append_line(control, R"({"add_tool":"fresh_tool"})");
  end = steady_now_ms() + 10000;
  while (changes.size() == 0 && steady_now_ms() < end) conn.pump(100);
  ASSERT_GE(changes.size(), 1u) << "no change reported through subscriptions/listen";
  UpstreamChange change = changes.at(0);
  EXPECT_FALSE(change.session_lost);
  ASSERT_EQ(change.kinds.size(), 1u);
  EXPECT_EQ(change.kinds[0], ListKind::kTools);
  auto second = conn.list(conn.now_ms() + 8000, change.kinds);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_NE(find_tool(*second, "fresh_tool"), nullptr);
}

TEST_F(Sdk2Http, ListChangesArriveThroughSubscriptionsListen) {
  TempDir dir;
  start({"--control", dir.path("ctl")});
  UpstreamOptions options;
  options.watch = true;
  options.change_debounce_ms = 100;
  UpstreamConnection conn(spec(), options);
  expect_listen_reports_a_new_tool(conn, dir.path("ctl"));
}

// Issue 10: a 2026-07-28 server that starts slowly answers the era probe after the probe gave
// up, while `initialize` (the legacy fallback) is already on its way on the same process. The
// late DiscoverResult still counts: the session is modern, with the server's cache hints, not a
// 2025-11-25 session. (Before, the late answer was dropped and the listing went legacy, or failed
// when the server refused initialize with -32022.) The server starts 2.5 s late; the probe's
// deadline is the 1 s request deadline; the start-up budget covers the rest.
TEST(Sdk2Stdio, AServerThatAnswersTheProbeLateIsStillModern) {
  UpstreamOptions options;
  options.session.request_timeout_ms = 1000;
  options.startup_timeout_ms = 15000;
  UpstreamConnection conn(
      UpstreamSpec::stdio(
          "sdk2-slow", "sh",
          {"-c", "sleep 2.5; exec node \"$0\" stdio --tools 5 --page-size 2", sdk2_js()}),
      options);
  auto listing = conn.list(conn.now_ms() + 5000);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  const Listing& l = *listing;
  EXPECT_EQ(l.protocol_version, "2026-07-28");
  EXPECT_EQ(conn.stats().era, ProtocolEra::kModern);
  EXPECT_EQ(l.server_info.value("name", ""), "quiver-sdk2-upstream");
  EXPECT_EQ(l.list(ListKind::kTools).state, ListState::kOk);
  EXPECT_EQ(l.list(ListKind::kTools).items.size(), 6u);
  EXPECT_EQ(l.list(ListKind::kTools).pages, 3);
  EXPECT_EQ(l.list(ListKind::kPrompts).state, ListState::kOk);
  // That process also received the legacy `initialize` sent after the probe gave up, and the SDK
  // answers such a session as a 2025 one, without cache hints. The connection replaces it with a
  // clean 2026-07-28 session (server/discover only, the era remembered), whose answers carry them.
  EXPECT_EQ(l.list(ListKind::kTools).hints.ttl_ms, 120000);
  EXPECT_EQ(l.list(ListKind::kTools).hints.cache_scope, "public");
  EXPECT_EQ(l.list(ListKind::kResources).hints.ttl_ms, 120000);
  EXPECT_EQ(l.list(ListKind::kPrompts).hints.cache_scope, "public");
  EXPECT_EQ(conn.stats().mixed_sessions_replaced, 1);
  EXPECT_EQ(conn.stats().sessions_opened, 2);
  // The clean session is the one kept: the next listing reuses it, with the hints.
  ListInfo info;
  auto again = conn.list(conn.now_ms() + 5000, {}, &info);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(info.reused);
  EXPECT_EQ(again->list(ListKind::kTools).hints.ttl_ms, 120000);
  EXPECT_EQ(conn.stats().sessions_opened, 2);
}

// Issue 10: a subscriptions/listen stream that breaks is re-sent by the transport, and a change
// made on the server between the two streams was told to nobody: it waited for the TTL. Now the
// reopened subscription (the server acknowledges it a second time) makes the connection report
// every kind it watches as changed, so the host re-lists them at once. The server cuts every
// listen stream (its sockets close with no response, as a proxy's or the network's break would)
// and adds a tool in the same breath, before the transport's re-sent listen arrives.
TEST_F(Sdk2Http, ABrokenListenStreamIsReopenedAndAChangeInTheGapIsSeen) {
  TempDir dir;
  const std::string control = dir.path("ctl");
  start({"--control", control});
  UpstreamOptions options;
  options.watch = true;
  options.change_debounce_ms = 100;
  UpstreamConnection conn(spec(), options);
  ChangeLog changes;
  conn.set_change_callback(changes.callback());
  auto first = conn.list(conn.now_ms() + 8000);
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(first->protocol_version, "2026-07-28");
  // 1.5 s for the subscription to open and be acknowledged.
  expect_a_change_across_a_gap(conn, changes, control,
                               R"({"drop_listens":true,"add_tool":"gap_tool"})", 1500, 8000);
}

TEST(Sdk2Stdio, ListChangesArriveThroughSubscriptionsListen) {
  TempDir dir;
  UpstreamOptions options = patient_stdio_options();
  options.change_debounce_ms = 100;
  UpstreamConnection conn(
      UpstreamSpec::stdio("sdk2-stdio", "node", {sdk2_js(), "stdio", "--control", dir.path("ctl")}),
      options);
  expect_listen_reports_a_new_tool(conn, dir.path("ctl"));
}

}  // namespace
}  // namespace quiver
