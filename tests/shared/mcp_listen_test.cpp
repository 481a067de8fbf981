// The MCP endpoint's listen streams (shared/mcp_endpoint.h, McpEndpointConfig::list_changed): the
// 2025-era GET stream, 2026-07-28 subscriptions/listen, the capabilities each host advertises, and
// the events the host writes. Neither needs a snapshot: what the stream carries is the host's
// (native-agent/api/mcp_notifier.h; tests/integration/mcp_endpoint_notify.mjs end to end).
#include <algorithm>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "shared/canonical_json.h"
#include "shared/json.h"
#include "shared/mcp_endpoint.h"

namespace quiver {
namespace {

struct Answer {
  HttpResponse response;
  std::optional<McpListen> listen;
};

Answer answer(const HttpRequest& request, bool list_changed, const char* member = "alice") {
  McpEndpointConfig config;
  config.list_changed = list_changed;
  McpEndpoint e(config);
  McpStep step = e.start(request, CallerAuth::member(member), 1'000);
  auto* respond = std::get_if<Respond>(&step);
  EXPECT_NE(respond, nullptr) << "a listen or a handshake needs no snapshot";
  if (respond == nullptr) return {};
  return {respond->response, e.listen()};
}

HttpRequest get_stream(HttpHeaders extra = {}) {
  HttpRequest r{"GET", "/mcp", "", {{"Accept", "text/event-stream"}}, ""};
  for (auto& h : extra) r.headers.push_back(std::move(h));
  return r;
}

const char* kModern = "2026-07-28";

Json modern_meta() {
  return Json::object(
      {{"io.modelcontextprotocol/protocolVersion", kModern},
       {"io.modelcontextprotocol/clientInfo", Json::object({{"name", "t"}, {"version", "1"}})},
       {"io.modelcontextprotocol/clientCapabilities", Json::object()}});
}

HttpRequest post(const Json& body, const std::string& method, bool modern) {
  HttpRequest r{
      "POST",
      "/mcp",
      "",
      {{"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}},
      serialize_json(body)};
  if (modern) {
    r.headers.emplace_back("Mcp-Method", method);
    r.headers.emplace_back("MCP-Protocol-Version", kModern);
  }
  return r;
}

HttpRequest listen_request(Json id, Json filter) {
  Json params = Json::object({{"notifications", std::move(filter)}, {"_meta", modern_meta()}});
  return post(Json::object({{"jsonrpc", "2.0"},
                            {"id", std::move(id)},
                            {"method", "subscriptions/listen"},
                            {"params", std::move(params)}}),
              "subscriptions/listen", true);
}

// The JSON of each `data:` line of an SSE body.
std::vector<Json> events(const std::string& body) {
  std::vector<Json> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    std::size_t end = body.find('\n', at);
    Result<Json> j = parse_json(body.substr(at + 6, end - at - 6));
    EXPECT_TRUE(j.ok());
    if (j.ok()) out.push_back(*j);
    at = end;
  }
  return out;
}

TEST(McpListen, TheGetStreamOpensOnlyWhereListChangedIsHonoured) {
  Answer on = answer(get_stream(), true);
  EXPECT_EQ(on.response.status, 200);
  EXPECT_EQ(*find_header(on.response.headers, "Content-Type"), "text/event-stream");
  ASSERT_TRUE(on.listen.has_value());
  EXPECT_FALSE(on.listen->modern);
  EXPECT_EQ(on.listen->member.str(), "member/alice");
  EXPECT_TRUE(on.listen->tools && on.listen->resources && on.listen->prompts);

  Answer off = answer(get_stream(), false);
  EXPECT_EQ(off.response.status, 405);
  EXPECT_EQ(*find_header(off.response.headers, "Allow"), "POST");
  EXPECT_FALSE(off.listen.has_value());

  // Without Accept: text/event-stream: 406; in 2026-07-28 (no GET stream there): 405; an unknown
  // version: 400. None opens a stream.
  HttpRequest json_only{"GET", "/mcp", "", {{"Accept", "application/json"}}, ""};
  Answer a = answer(json_only, true);
  EXPECT_EQ(a.response.status, 406);
  EXPECT_FALSE(a.listen.has_value());
  Answer modern = answer(get_stream({{"MCP-Protocol-Version", kModern}}), true);
  EXPECT_EQ(modern.response.status, 405);
  EXPECT_FALSE(modern.listen.has_value());
  Answer unknown = answer(get_stream({{"MCP-Protocol-Version", "2024-01-01"}}), true);
  EXPECT_EQ(unknown.response.status, 400);
  EXPECT_FALSE(unknown.listen.has_value());
  // No token: 401 before anything else.
  McpEndpointConfig config;
  config.list_changed = true;
  McpEndpoint e(config);
  McpStep step = e.start(get_stream(), CallerAuth{}, 1'000);
  EXPECT_EQ(std::get<Respond>(step).response.status, 401);
  EXPECT_FALSE(e.listen().has_value());
  // DELETE stays 405, naming both methods the endpoint takes.
  HttpRequest del{"DELETE", "/mcp", "", {}, ""};
  Answer d = answer(del, true);
  EXPECT_EQ(d.response.status, 405);
  EXPECT_EQ(*find_header(d.response.headers, "Allow"), "GET, POST");
}

TEST(McpListen, CapabilitiesSayListChangedExactlyWhereHonoured) {
  for (bool honoured : {true, false}) {
    Json init = Json::object(
        {{"jsonrpc", "2.0"},
         {"id", 1},
         {"method", "initialize"},
         {"params",
          Json::object({{"protocolVersion", "2025-06-18"},
                        {"capabilities", Json::object()},
                        {"clientInfo", Json::object({{"name", "t"}, {"version", "1"}})}})}});
    Answer a = answer(post(init, "initialize", false), honoured);
    Result<Json> body = parse_json(a.response.body);
    ASSERT_TRUE(body.ok());
    const Json& caps = (*body)["result"]["capabilities"];
    for (const char* kind : {"tools", "resources", "prompts"}) {
      EXPECT_EQ(caps[kind]["listChanged"].get<bool>(), honoured) << kind;
    }
    Json discover = Json::object({{"jsonrpc", "2.0"},
                                  {"id", 2},
                                  {"method", "server/discover"},
                                  {"params", Json::object({{"_meta", modern_meta()}})}});
    Answer m = answer(post(discover, "server/discover", true), honoured);
    Result<Json> mb = parse_json(m.response.body);
    ASSERT_TRUE(mb.ok()) << m.response.body;
    EXPECT_EQ((*mb)["result"]["capabilities"]["tools"]["listChanged"].get<bool>(), honoured);
  }
}

TEST(McpListen, SubscriptionsListenAcknowledgesTheHonouredFilter) {
  Answer a =
      answer(listen_request("listen:1",
                            Json::object({{"toolsListChanged", true},
                                          {"promptsListChanged", false},
                                          {"resourceSubscriptions", Json::array({"file:///x"})}})),
             true);
  EXPECT_EQ(a.response.status, 200);
  EXPECT_EQ(*find_header(a.response.headers, "Content-Type"), "text/event-stream");
  ASSERT_TRUE(a.listen.has_value());
  EXPECT_TRUE(a.listen->modern);
  EXPECT_TRUE(a.listen->tools);
  EXPECT_FALSE(a.listen->resources);
  EXPECT_FALSE(a.listen->prompts);
  std::vector<Json> got = events(a.response.body);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["method"], "notifications/subscriptions/acknowledged");
  EXPECT_EQ(got[0]["params"]["notifications"], Json::object({{"toolsListChanged", true}}));
  EXPECT_EQ(got[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen:1");
  EXPECT_FALSE(got[0].contains("id"));  // a notification, not the (final) response

  // Where list_changed is not honoured (the edge): no such method, no stream.
  Answer off = answer(listen_request(7, Json::object({{"toolsListChanged", true}})), false);
  EXPECT_FALSE(off.listen.has_value());
  Result<Json> body = parse_json(off.response.body);
  ASSERT_TRUE(body.ok()) << off.response.body;
  EXPECT_EQ((*body)["error"]["code"], -32601);

  // A filter that is not an object: -32602, no stream.
  Answer bad = answer(listen_request(8, Json("all")), true);
  EXPECT_FALSE(bad.listen.has_value());
  Result<Json> bb = parse_json(bad.response.body);
  ASSERT_TRUE(bb.ok()) << bad.response.body;
  EXPECT_EQ((*bb)["error"]["code"], -32602);
}

TEST(McpListen, EventsCarryTheSubscriptionIdAndOnlyTheKindsAskedFor) {
  McpListen legacy;
  legacy.tools = legacy.resources = legacy.prompts = true;
  std::vector<Json> t = events(mcp_list_changed_event(legacy, McpChangeKind::kTools));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0],
            Json::object({{"jsonrpc", "2.0"}, {"method", "notifications/tools/list_changed"}}));
  EXPECT_EQ(events(mcp_list_changed_event(legacy, McpChangeKind::kResources))[0]["method"],
            "notifications/resources/list_changed");
  EXPECT_EQ(mcp_listen_end_event(legacy), "");  // the GET stream just ends

  McpListen modern;
  modern.modern = true;
  modern.subscription_id = 42;
  modern.prompts = true;
  EXPECT_EQ(mcp_list_changed_event(modern, McpChangeKind::kTools), "");  // not asked for
  std::vector<Json> p = events(mcp_list_changed_event(modern, McpChangeKind::kPrompts));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["method"], "notifications/prompts/list_changed");
  EXPECT_EQ(p[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
  std::vector<Json> end = events(mcp_listen_end_event(modern));
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0]["id"], 42);
  EXPECT_EQ(end[0]["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
  // Each event is one SSE message: `event: message`, one data line, a blank line.
  const std::string e = mcp_list_changed_event(legacy, McpChangeKind::kPrompts);
  EXPECT_EQ(e.rfind("event: message\ndata: {", 0), 0u);
  EXPECT_EQ(e.substr(e.size() - 2), "\n\n");
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 3);
}

}  // namespace
}  // namespace quiver
