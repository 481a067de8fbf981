#include "shared/mcp_endpoint.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/canonical_json.h"
#include "shared/mcp_session.h"
#include "shared/render_cache.h"
#include "tests/support/discovery_fixture.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/discovery_fixture.h

// alice is granted `docs` (shared, fresh: tools search/fetch, resource file:///readme, template
// file:///{path}, prompt summarize) and `mail` (per_member, stale: tool inbox); `secret` exists
// but is granted to nobody; bob is granted `mail` only (his own per-member manifest: tool
// bob_inbox).
MemoryStore store() {
  MemoryStore s;
  s.add_connection("docs", "shared");
  s.add_connection("mail", "per_member");
  s.add_connection("secret", "shared");
  s.grant("alice", "docs");
  s.grant("alice", "mail");
  s.grant("bob", "mail");
  s.manifests[{"docs", "shared"}] =
      data_entry("h-docs", kNow - kMinute, kNow + 14 * kMinute,
                 manifest_json({"search", "fetch"}, {"file:///readme"}, {"file:///{path}"},
                               {"summarize"}, "docs"));
  s.manifests[{"mail", "member/alice"}] = data_entry(
      "h-mail", kNow - 20 * kMinute, kNow - 5 * kMinute, manifest_json({"inbox"}, {}, {}, {}));
  s.manifests[{"mail", "member/bob"}] = data_entry("h-mail", kNow - kMinute, kNow + 5 * kMinute,
                                                   manifest_json({"bob_inbox"}, {}, {}, {}));
  s.manifests[{"secret", "shared"}] =
      data_entry("h-secret", kNow, kNow + kMinute, manifest_json({"launch"}));
  return s;
}

struct Driven {
  Respond respond;
  std::vector<NeedSnapshot> snapshots;
  std::vector<RelayCall> relays;
  Json body;  // the parsed response body (null when empty)
};

using Relay = std::function<RelayReply(const RelayCall&)>;

Driven drive(McpEndpoint& e, MemoryStore& s, const HttpRequest& request, const CallerAuth& caller,
             const Relay& relay = nullptr) {
  Driven d;
  McpStep step = e.start(request, caller, kNow);
  for (int guard = 0; guard < 20; ++guard) {
    if (auto* r = std::get_if<Respond>(&step)) {
      d.respond = std::move(*r);
      if (!d.respond.response.body.empty()) {
        Result<Json> parsed = parse_json(d.respond.response.body);
        EXPECT_TRUE(parsed.ok()) << d.respond.response.body;
        if (parsed.ok()) d.body = *parsed;
      }
      return d;
    }
    if (auto* n = std::get_if<NeedSnapshot>(&step)) {
      d.snapshots.push_back(*n);
      step = e.resume_snapshot(read_snapshot(s, n->member, n->query), kNow);
      continue;
    }
    auto& need = std::get<NeedRelay>(step);
    std::vector<RelayReply> replies;
    for (const RelayCall& call : need.calls) {
      d.relays.push_back(call);
      replies.push_back(relay ? relay(call)
                              : RelayReply::failed(RelayFailure::kUnavailable, "no relay"));
    }
    step = e.resume_relay(std::move(replies), kNow);
  }
  ADD_FAILURE() << "the endpoint did not end";
  return d;
}

McpEndpointConfig config() {
  McpEndpointConfig c;
  c.freshness = policy();
  return c;
}

HttpRequest post(const Json& body, HttpHeaders extra = {}) {
  HttpRequest r{
      "POST",
      "/mcp",
      "",
      {{"Content-Type", "application/json"}, {"Accept", "application/json, text/event-stream"}},
      serialize_json(body)};
  for (auto& h : extra) r.headers.push_back(std::move(h));
  return r;
}

Json request(int id, const std::string& method, Json params = Json::object()) {
  return Json::object({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
}

Driven run(const HttpRequest& r, const std::string& member = "alice",
           const McpEndpointConfig& c = config(), const Relay& relay = nullptr) {
  MemoryStore s = store();
  McpEndpoint e(c);
  return drive(e, s, r, CallerAuth::member(member), relay);
}

std::vector<std::string> names(const Json& list, const char* field = "name") {
  std::vector<std::string> out;
  for (const Json& item : list) out.push_back(item[field].get<std::string>());
  return out;
}

// ---- naming -------------------------------------------------------------------------------------

TEST(McpNaming, ToolAndPromptNamesRoundTripPerConnection) {
  EXPECT_EQ(encode_mcp_name("github", "create_issue"), "github__create_issue");
  EXPECT_EQ(encode_mcp_name("my_srv", "get__x"), "my_-srv__get__x");
  for (auto [cid, name] :
       std::vector<std::pair<std::string, std::string>>{{"github", "create_issue"},
                                                        {"my_srv", "get__x"},
                                                        {"a__b", "c"},
                                                        {"a", "b__c"},
                                                        {"_", "_"},
                                                        {"x-_.", "__"},
                                                        {"docs", "名前 with spaces"}}) {
    std::optional<UpstreamName> back = decode_mcp_name(encode_mcp_name(cid, name));
    ASSERT_TRUE(back.has_value()) << cid << " " << name;
    EXPECT_EQ(back->connection_id, cid);
    EXPECT_EQ(back->name, name);
  }
  // Two connections whose ids differ only by underscores never share an exposed name.
  EXPECT_NE(encode_mcp_name("a", "b__c"), encode_mcp_name("a__b", "c"));
  for (const char* bad : {"", "plain", "docs_", "docs__", "__tool", "a_b__c", "bad id__x"}) {
    EXPECT_FALSE(decode_mcp_name(bad).has_value()) << bad;
  }
}

TEST(McpNaming, ResourceUrisRoundTripAndKeepTemplates) {
  EXPECT_EQ(encode_mcp_uri("fs", "file:///tmp/a.txt"), "quiver://fs/file:///tmp/a.txt");
  for (const char* uri : {"file:///tmp/a.txt", "file:///{path}", "https://x/y?q=1#f", "a/b/c"}) {
    std::optional<UpstreamName> back = decode_mcp_uri(encode_mcp_uri("my_fs", uri));
    ASSERT_TRUE(back.has_value()) << uri;
    EXPECT_EQ(back->connection_id, "my_fs");
    EXPECT_EQ(back->name, uri);
  }
  for (const char* bad :
       {"", "file:///x", "quiver://fs", "quiver://fs/", "quiver:///x", "quiver://b d/x"}) {
    EXPECT_FALSE(decode_mcp_uri(bad).has_value()) << bad;
  }
}

// ---- transport and errors before any store access
// -------------------------------------------------

TEST(McpEndpoint, UnauthenticatedIs401WithABearerChallenge) {
  McpEndpointConfig c = config();
  c.resource_metadata_url = "https://q.example/.well-known/oauth-protected-resource";
  MemoryStore s = store();
  McpEndpoint e(c);
  Driven d = drive(e, s, post(request(1, "tools/list")), CallerAuth::unauthenticated("expired"));
  EXPECT_EQ(d.respond.response.status, 401);
  std::string challenge(find_header(d.respond.response.headers, "WWW-Authenticate").value_or(""));
  EXPECT_EQ(challenge.rfind("Bearer ", 0), 0u) << challenge;
  EXPECT_NE(challenge.find("resource_metadata=\"" + c.resource_metadata_url + "\""),
            std::string::npos);
  EXPECT_TRUE(d.snapshots.empty());
}

TEST(McpEndpoint, OnlyPostIsServedAndTheBodyMustBeJson) {
  HttpRequest get{"GET", "/mcp", "", {{"Accept", "text/event-stream"}}, ""};
  Driven d = run(get);
  EXPECT_EQ(d.respond.response.status, 405);
  EXPECT_EQ(find_header(d.respond.response.headers, "Allow").value_or(""), "POST");
  HttpRequest del{"DELETE", "/mcp", "", {}, ""};
  EXPECT_EQ(run(del).respond.response.status, 405);

  HttpRequest text = post(request(1, "ping"));
  text.headers[0].second = "text/plain";
  EXPECT_EQ(run(text).respond.response.status, 415);
  HttpRequest html = post(request(1, "ping"));
  html.headers[1].second = "text/html";
  EXPECT_EQ(run(html).respond.response.status, 406);

  McpEndpointConfig small = config();
  small.max_body_bytes = 64;
  Driven big =
      run(post(request(1, "ping", Json::object({{"x", std::string(100, 'x')}}))), "alice", small);
  EXPECT_EQ(big.respond.response.status, 413);
}

TEST(McpEndpoint, MalformedInputGetsJsonRpcErrors) {
  HttpRequest garbage = post(Json());
  garbage.body = "{not json";
  Driven d = run(garbage);
  EXPECT_EQ(d.respond.response.status, 400);
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcParseError);
  EXPECT_TRUE(d.body["id"].is_null());

  d = run(post(Json::object({{"jsonrpc", "1.0"}, {"id", 4}, {"method", "ping"}})));
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidRequest);
  EXPECT_EQ(d.body["id"], 4);

  d = run(post(request(5, "no/such/method")));
  EXPECT_EQ(d.respond.response.status, 200);
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcMethodNotFound);
  EXPECT_EQ(d.body["id"], 5);

  d = run(post(Json::object(
      {{"jsonrpc", "2.0"}, {"id", 6}, {"method", "tools/list"}, {"params", Json::array()}})));
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams);

  // Deeply nested input is refused by the parser's bound, not by a crash.
  HttpRequest deep = post(Json());
  deep.body = std::string(10'000, '[') + std::string(10'000, ']');
  EXPECT_EQ(run(deep).body["error"]["code"], kJsonRpcParseError);
}

TEST(McpEndpoint, NotificationsAndResponsesAreAcceptedWith202) {
  Driven d = run(post(Json::object({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}})));
  EXPECT_EQ(d.respond.response.status, 202);
  EXPECT_TRUE(d.respond.response.body.empty());
  d = run(post(Json::object({{"jsonrpc", "2.0"}, {"id", 1}, {"result", Json::object()}})));
  EXPECT_EQ(d.respond.response.status, 202);
}

// ---- eras
// ----------------------------------------------------------------------------------------

TEST(McpEndpoint, InitializeNegotiatesALegacyVersionWithoutASession) {
  Json params = Json::object({{"protocolVersion", "2025-06-18"},
                              {"capabilities", Json::object()},
                              {"clientInfo", {{"name", "t"}, {"version", "1"}}}});
  Driven d = run(post(request(1, "initialize", params)));
  ASSERT_EQ(d.respond.response.status, 200);
  EXPECT_EQ(d.body["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(d.body["result"]["serverInfo"]["name"], "quiver");
  EXPECT_TRUE(d.body["result"]["capabilities"].contains("tools"));
  EXPECT_FALSE(find_header(d.respond.response.headers, "Mcp-Session-Id").has_value());
  EXPECT_TRUE(d.snapshots.empty());

  params["protocolVersion"] = "2099-01-01";
  EXPECT_EQ(run(post(request(2, "initialize", params))).body["result"]["protocolVersion"],
            "2025-11-25");
  params["protocolVersion"] = "2025-03-26";
  EXPECT_EQ(run(post(request(3, "initialize", params))).body["result"]["protocolVersion"],
            "2025-03-26");

  // Later requests name their version in a header; one we do not speak is refused.
  Driven bad = run(post(request(4, "ping"), {{"MCP-Protocol-Version", "1999-01-01"}}));
  EXPECT_EQ(bad.respond.response.status, 400);
  Driven ok = run(post(request(4, "ping"), {{"MCP-Protocol-Version", "2025-06-18"}}));
  EXPECT_EQ(ok.body["result"], Json::object());
}

Json modern_params(Json params = Json::object()) {
  params["_meta"] =
      Json::object({{"io.modelcontextprotocol/protocolVersion", "2026-07-28"},
                    {"io.modelcontextprotocol/clientInfo", {{"name", "t"}, {"version", "1"}}},
                    {"io.modelcontextprotocol/clientCapabilities", Json::object()}});
  return params;
}

HttpHeaders modern_headers(const std::string& method, const std::string& name = "") {
  HttpHeaders h{{"MCP-Protocol-Version", "2026-07-28"}, {"Mcp-Method", method}};
  if (!name.empty()) h.emplace_back("Mcp-Name", name);
  return h;
}

TEST(McpEndpoint, ServerDiscoverAndModernRequestsAreStateless) {
  Driven d =
      run(post(request(1, "server/discover", modern_params()), modern_headers("server/discover")));
  ASSERT_EQ(d.respond.response.status, 200) << d.respond.response.body;
  EXPECT_EQ(d.body["result"]["supportedVersions"], Json::array({"2026-07-28"}));
  EXPECT_EQ(d.body["result"]["resultType"], "complete");
  EXPECT_EQ(d.body["result"]["ttlMs"], 0);  // DiscoverResult is cacheable: both fields required
  EXPECT_EQ(d.body["result"]["cacheScope"], "private");
  EXPECT_EQ(d.body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "quiver");

  d = run(post(request(2, "tools/list", modern_params()), modern_headers("tools/list")));
  EXPECT_EQ(d.body["result"]["resultType"], "complete");
  EXPECT_EQ(d.body["result"]["tools"].size(), 3u);

  // Headers must agree with the body: -32020 with HTTP 400.
  d = run(
      post(request(3, "tools/list", modern_params()), {{"MCP-Protocol-Version", "2026-07-28"}}));
  EXPECT_EQ(d.respond.response.status, 400);
  EXPECT_EQ(d.body["error"]["code"], kMcpHeaderMismatch);
  d = run(post(request(3, "tools/list", modern_params()), modern_headers("prompts/list")));
  EXPECT_EQ(d.body["error"]["code"], kMcpHeaderMismatch);
  Json call = modern_params(Json::object({{"name", "docs__search"}}));
  d = run(post(request(4, "tools/call", call), modern_headers("tools/call", "docs__fetch")));
  EXPECT_EQ(d.body["error"]["code"], kMcpHeaderMismatch);
  EXPECT_TRUE(d.relays.empty());
  d = run(post(request(4, "tools/call", call),
               modern_headers("tools/call", "=?base64?ZG9jc19fc2VhcmNo?=")));
  EXPECT_EQ(d.relays.size(), 1u) << d.respond.response.body;

  // A relayed result of an older-era upstream gets the cache hints 2026-07-28 requires: not to
  // be kept (ttlMs 0), the caller's own (private). The upstream's own hints are kept.
  Relay read = [](const RelayCall& c) {
    return RelayReply::ok(Json::object(
        {{"contents", Json::array({Json::object({{"uri", c.params["uri"]}, {"text", "hi"}})})}}));
  };
  Json uri = modern_params(Json::object({{"uri", "quiver://docs/file:///readme"}}));
  d = run(post(request(5, "resources/read", uri),
               modern_headers("resources/read", "quiver://docs/file:///readme")),
          "alice", config(), read);
  ASSERT_EQ(d.relays.size(), 1u) << d.respond.response.body;
  EXPECT_EQ(d.body["result"]["ttlMs"], 0);
  EXPECT_EQ(d.body["result"]["cacheScope"], "private");
  Relay hinted = [](const RelayCall&) {
    return RelayReply::ok(
        Json::object({{"contents", Json::array()}, {"ttlMs", 5000}, {"cacheScope", "private"}}));
  };
  d = run(post(request(6, "resources/read", uri),
               modern_headers("resources/read", "quiver://docs/file:///readme")),
          "alice", config(), hinted);
  EXPECT_EQ(d.body["result"]["ttlMs"], 5000);
  // The older eras' results are the upstream's as they are.
  d = run(
      post(request(7, "resources/read", Json::object({{"uri", "quiver://docs/file:///readme"}}))),
      "alice", config(), read);
  EXPECT_FALSE(d.body["result"].contains("ttlMs")) << d.body.dump();

  // An unknown modern version: -32022 naming what we support.
  Json future = modern_params();
  future["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2030-01-01";
  d = run(post(request(5, "ping", future), {{"Mcp-Method", "ping"}}));
  EXPECT_EQ(d.body["error"]["code"], kMcpUnsupportedProtocolVersion);
  EXPECT_EQ(d.body["error"]["data"]["supported"], Json::array({"2026-07-28"}));
}

TEST(McpEndpoint, BatchesOnlyIn2025_03_26) {
  Json batch = Json::array({request(1, "ping"), request(2, "tools/list"),
                            Json::object({{"jsonrpc", "2.0"}, {"method", "notifications/x"}})});
  Driven d = run(post(batch, {{"MCP-Protocol-Version", "2025-03-26"}}));
  ASSERT_EQ(d.respond.response.status, 200);
  ASSERT_TRUE(d.body.is_array());
  ASSERT_EQ(d.body.size(), 2u);
  EXPECT_EQ(d.body[0]["id"], 1);
  EXPECT_EQ(d.body[1]["id"], 2);
  EXPECT_EQ(d.body[1]["result"]["tools"].size(), 3u);

  d = run(post(batch, {{"MCP-Protocol-Version", "2025-06-18"}}));
  EXPECT_EQ(d.respond.response.status, 400);
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidRequest);
  EXPECT_EQ(run(post(Json::array())).body["error"]["code"], kJsonRpcInvalidRequest);
}

// ---- lists -------------------------------------------------------------------------------------

TEST(McpEndpoint, ListsAreTheUnionOfGrantedConnectionsWithExposedNames) {
  Driven d = run(post(request(1, "tools/list")));
  ASSERT_EQ(d.respond.response.status, 200) << d.respond.response.body;
  const Json& result = d.body["result"];
  EXPECT_EQ(names(result["tools"]),
            (std::vector<std::string>{"docs__search", "docs__fetch", "mail__inbox"}));
  EXPECT_EQ(result["cacheScope"], "private");
  EXPECT_EQ(result["ttlMs"], 0);  // mail is stale
  EXPECT_FALSE(result.contains("nextCursor"));
  // Everything else of a definition is kept.
  EXPECT_EQ(result["tools"][0]["description"], "about search for docs");
  // The stale connection is served and revalidated; the ungranted one never appears.
  ASSERT_EQ(d.respond.background.size(), 1u);
  EXPECT_EQ(d.respond.background[0].connection_id, "mail");
  EXPECT_EQ(d.respond.background[0].reason, "stale");
  EXPECT_EQ(d.respond.response.body.find("launch"), std::string::npos);

  d = run(post(request(2, "resources/list")));
  EXPECT_EQ(names(d.body["result"]["resources"], "uri"),
            std::vector<std::string>{"quiver://docs/file:///readme"});
  EXPECT_EQ(d.body["result"]["ttlMs"], 0);  // the stale mail lists no resources but contributes
  d = run(post(request(3, "resources/templates/list")));
  EXPECT_EQ(names(d.body["result"]["resourceTemplates"], "uriTemplate"),
            std::vector<std::string>{"quiver://docs/file:///{path}"});
  d = run(post(request(4, "prompts/list")));
  EXPECT_EQ(names(d.body["result"]["prompts"]), std::vector<std::string>{"docs__summarize"});

  // Only fresh entries: ttlMs is the time left until the soonest turns stale.
  d = run(post(request(5, "tools/list")), "bob");
  EXPECT_EQ(names(d.body["result"]["tools"]), std::vector<std::string>{"mail__bob_inbox"});
  EXPECT_EQ(d.body["result"]["ttlMs"], 5 * kMinute);
}

TEST(McpEndpoint, PrincipalsAreIsolated) {
  Driven d = run(post(request(1, "tools/list")), "bob");
  EXPECT_EQ(d.respond.response.body.find("\"mail__inbox\""), std::string::npos);
  EXPECT_EQ(d.respond.response.body.find("docs__"), std::string::npos);
  // bob calling alice's docs tool: refused, nothing relayed.
  d = run(post(request(2, "tools/call", Json::object({{"name", "docs__search"}}))), "bob");
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams);
  EXPECT_TRUE(d.relays.empty());
  // A per-member call carries the caller's own principal.
  d = run(post(request(3, "tools/call", Json::object({{"name", "mail__bob_inbox"}}))), "bob");
  ASSERT_EQ(d.relays.size(), 1u);
  EXPECT_EQ(d.relays[0].principal.str(), "member/bob");
  EXPECT_EQ(d.relays[0].member.str(), "member/bob");
  // Nobody's snapshot is read for another member.
  for (const NeedSnapshot& n : d.snapshots) EXPECT_EQ(n.member.str(), "member/bob");
}

TEST(McpEndpoint, MissingConnectionsAreNamedNeverShownAsEmpty) {
  MemoryStore s = store();
  s.add_connection("new", "shared");
  s.grant("alice", "new");  // granted, never listed: pending
  s.add_connection("broken", "shared");
  s.grant("alice", "broken");
  HashFields failed;
  add_failure(&failed, "UPSTREAM_UNAVAILABLE", "down", kNow - kMinute);
  failed["config_hash"] = "h-broken";
  s.manifests[{"broken", "shared"}] = failed;
  McpEndpointConfig c = config();
  McpEndpoint e(c);
  Driven d = drive(e, s, post(request(1, "tools/list")), CallerAuth::member("alice"));
  ASSERT_EQ(d.respond.response.status, 200) << d.respond.response.body;
  EXPECT_EQ(names(d.body["result"]["tools"]),
            (std::vector<std::string>{"docs__search", "docs__fetch", "mail__inbox"}));
  const Json& missing = d.body["result"]["_meta"]["quiver/missing"];
  ASSERT_EQ(missing.size(), 2u) << missing;
  EXPECT_EQ(missing[0]["id"], "broken");
  EXPECT_EQ(missing[0]["status"], "error");
  EXPECT_EQ(missing[1]["id"], "new");
  EXPECT_EQ(missing[1]["status"], "pending");
  std::vector<std::string> queued;
  for (const Revalidation& r : d.respond.background) queued.push_back(r.connection_id);
  EXPECT_EQ(queued, (std::vector<std::string>{"broken", "mail", "new"}));
  EXPECT_EQ(d.respond.stats.pending, 1);
  EXPECT_EQ(d.respond.stats.stale, 1);
}

TEST(McpEndpoint, AStoreFailureIsAnErrorNotAnEmptyList) {
  MemoryStore s = store();
  s.failure = Error(ErrorCode::kStoreUnavailable, "redis is down");
  McpEndpointConfig c = config();
  McpEndpoint e(c);
  Driven d = drive(e, s, post(request(1, "tools/list")), CallerAuth::member("alice"));
  EXPECT_EQ(d.body["error"]["code"], kMcpErrorStoreUnavailable);
  EXPECT_FALSE(d.body.contains("result"));
  ASSERT_TRUE(d.respond.log.has_value());
}

TEST(McpEndpoint, DisabledCapabilitiesAreHiddenAndRefused) {
  MemoryStore s = store();
  s.disabled_sets[{"docs", "shared"}] = DisabledOverlay{"tool:fetch", "prompt:summarize"};
  McpEndpointConfig c = config();
  {
    McpEndpoint e(c);
    Driven d = drive(e, s, post(request(1, "tools/list")), CallerAuth::member("alice"));
    EXPECT_EQ(names(d.body["result"]["tools"]),
              (std::vector<std::string>{"docs__search", "mail__inbox"}));
  }
  {
    McpEndpoint e(c);
    Driven d = drive(e, s, post(request(2, "tools/call", Json::object({{"name", "docs__fetch"}}))),
                     CallerAuth::member("alice"));
    EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams);
    EXPECT_TRUE(d.relays.empty());
  }
  {
    McpEndpoint e(c);
    Driven d =
        drive(e, s, post(request(3, "prompts/get", Json::object({{"name", "docs__summarize"}}))),
              CallerAuth::member("alice"));
    EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams);
    EXPECT_TRUE(d.relays.empty());
  }
}

TEST(McpEndpoint, CursorsPageDeterministicallyAndBadOnesAreRefused) {
  McpEndpointConfig c = config();
  c.page_size = 1;
  std::vector<std::string> all;
  Json cursor;
  for (int page = 0; page < 10; ++page) {
    Json params = Json::object();
    if (!cursor.is_null()) params["cursor"] = cursor;
    Driven d = run(post(request(page, "tools/list", params)), "alice", c);
    ASSERT_TRUE(d.body.contains("result")) << d.respond.response.body;
    for (const std::string& n : names(d.body["result"]["tools"])) all.push_back(n);
    EXPECT_LE(d.body["result"]["tools"].size(), 1u);
    if (!d.body["result"].contains("nextCursor")) break;
    cursor = d.body["result"]["nextCursor"];
  }
  EXPECT_EQ(all, (std::vector<std::string>{"docs__search", "docs__fetch", "mail__inbox"}));

  // Connections per read bounded too: the cursor continues after the last one read.
  c.page_size = 100;
  c.max_connections_per_read = 1;
  all.clear();
  cursor = Json();
  for (int page = 0; page < 10; ++page) {
    Json params = Json::object();
    if (!cursor.is_null()) params["cursor"] = cursor;
    Driven d = run(post(request(page, "tools/list", params)), "alice", c);
    for (const std::string& n : names(d.body["result"]["tools"])) all.push_back(n);
    if (!d.body["result"].contains("nextCursor")) break;
    cursor = d.body["result"]["nextCursor"];
  }
  EXPECT_EQ(all, (std::vector<std::string>{"docs__search", "docs__fetch", "mail__inbox"}));

  // A cursor of another list, or garbage: -32602.
  c = config();
  c.page_size = 1;
  Driven first = run(post(request(1, "tools/list")), "alice", c);
  Json tools_cursor = first.body["result"]["nextCursor"];
  Driven d = run(post(request(2, "prompts/list", Json::object({{"cursor", tools_cursor}}))));
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams);
  for (Json bad : {Json("!!"), Json(""), Json(7), Json(std::string(600, 'A'))}) {
    d = run(post(request(3, "tools/list", Json::object({{"cursor", bad}}))));
    EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams) << bad;
  }
}

// The lists are spliced from the render cache's fragments (view "mcp-items"): the same bytes as
// with no cache, cold or warm, paged or not, in a batch too; each answer's text is exactly
// serialize_json of the JSON it holds (what the endpoint wrote before it spliced).
TEST(McpEndpoint, ListsFromTheRenderCacheAreTheSameBytes) {
  MemoryStore s = store();
  s.add_connection("my_srv", "shared");  // an id the naming scheme escapes
  s.grant("alice", "my_srv");
  s.manifests[{"my_srv", "shared"}] =
      data_entry("h-my_srv", kNow - kMinute, kNow + 3 * kMinute,
                 manifest_json({"get__x", "b", "c"}, {"mem://1"}, {}, {"p"}, "my"));
  s.disabled_sets[{"docs", "shared"}] = DisabledOverlay{"tool:fetch"};
  RenderCache cache;
  auto body_of = [&](const McpEndpointConfig& c, const HttpRequest& r) {
    McpEndpoint e(c);
    Driven d = drive(e, s, r, CallerAuth::member("alice"));
    EXPECT_EQ(d.respond.response.status, 200) << d.respond.response.body;
    JsonParseOptions keep;
    keep.keep_number_literals = true;
    Result<Json> parsed = parse_json(d.respond.response.body, keep);
    EXPECT_TRUE(parsed.ok());
    if (parsed.ok()) EXPECT_EQ(serialize_json(*parsed), d.respond.response.body);
    return d.respond.response.body;
  };
  for (std::size_t page_size : {std::size_t{1}, std::size_t{2}, std::size_t{100}}) {
    McpEndpointConfig plain = config();
    plain.page_size = page_size;
    McpEndpointConfig cached = plain;
    cached.render.cache = &cache;
    for (const char* method :
         {"tools/list", "resources/list", "resources/templates/list", "prompts/list"}) {
      Json cursor;
      for (int page = 0; page < 20; ++page) {
        Json params = Json::object();
        if (!cursor.is_null()) params["cursor"] = cursor;
        HttpRequest r = post(request(page, method, params));
        const std::string expected = body_of(plain, r);
        const auto before = cache.stats();
        EXPECT_EQ(body_of(cached, r), expected) << method << " page " << page;  // cold or warm
        EXPECT_EQ(body_of(cached, r), expected) << method << " page " << page;  // warm
        EXPECT_GT(cache.stats().hits, before.hits);
        Result<Json> j = parse_json(expected);
        ASSERT_TRUE(j.ok());
        if (!(*j)["result"].contains("nextCursor")) break;
        cursor = (*j)["result"]["nextCursor"];
      }
    }
  }
  // Every servable connection once per (principal, content, disabled set): docs, mail, my_srv.
  EXPECT_EQ(cache.size(), 3u);
  // The escaped id and the upstream name with a separator in it, and the disabled tool hidden.
  McpEndpointConfig cached = config();
  cached.render.cache = &cache;
  Result<Json> tools = parse_json(body_of(cached, post(request(9, "tools/list"))));
  ASSERT_TRUE(tools.ok());
  EXPECT_EQ(names((*tools)["result"]["tools"]),
            (std::vector<std::string>{"docs__search", "mail__inbox", "my_-srv__get__x",
                                      "my_-srv__b", "my_-srv__c"}));
  // A batch (2025-03-26) of list answers: the array of the same texts.
  HttpRequest batch = post(Json::array({request(1, "tools/list"), request(2, "prompts/list")}),
                           {{"MCP-Protocol-Version", "2025-03-26"}});
  EXPECT_EQ(body_of(cached, batch), body_of(config(), batch));
  // 2026-07-28: resultType is written beside the spliced items.
  HttpRequest modern = post(
      request(
          3, "tools/list",
          Json::object(
              {{"_meta",
                Json::object({{"io.modelcontextprotocol/protocolVersion", "2026-07-28"},
                              {"io.modelcontextprotocol/clientCapabilities", Json::object()}})}})),
      {{"MCP-Protocol-Version", "2026-07-28"}, {"Mcp-Method", "tools/list"}});
  const std::string modern_body = body_of(cached, modern);
  EXPECT_EQ(modern_body, body_of(config(), modern));
  EXPECT_NE(modern_body.find("\"resultType\":\"complete\""), std::string::npos) << modern_body;
}

// A fragment is used only for the exact text and disabled set it was made from: a rewritten
// manifest under the same content id, a toggled preference, another principal read afresh.
TEST(McpEndpoint, ListFragmentsAreExactAndIsolated) {
  MemoryStore s = store();
  RenderCache cache;
  McpEndpointConfig c = config();
  c.render.cache = &cache;
  auto tools = [&](const std::string& member) {
    McpEndpoint e(c);
    Driven d = drive(e, s, post(request(1, "tools/list")), CallerAuth::member(member));
    return names(d.body["result"]["tools"]);
  };
  EXPECT_EQ(tools("alice"),
            (std::vector<std::string>{"docs__search", "docs__fetch", "mail__inbox"}));
  EXPECT_EQ(tools("alice"),
            (std::vector<std::string>{"docs__search", "docs__fetch", "mail__inbox"}));
  // bob's per-member manifest of mail is his own, under the same connection and content id.
  EXPECT_EQ(tools("bob"), std::vector<std::string>{"mail__bob_inbox"});
  // The same etag (content id), another text: never the old fragment.
  s.manifests[{"docs", "shared"}]["manifest"] = manifest_json({"lookup"}, {}, {}, {}, "docs");
  EXPECT_EQ(tools("alice"), (std::vector<std::string>{"docs__lookup", "mail__inbox"}));
  s.disabled_sets[{"mail", "member/alice"}] = DisabledOverlay{"tool:inbox"};
  EXPECT_EQ(tools("alice"), std::vector<std::string>{"docs__lookup"});
  s.disabled_sets.clear();
  EXPECT_EQ(tools("alice"), (std::vector<std::string>{"docs__lookup", "mail__inbox"}));
  // A manifest that does not parse is an error, never an empty list, cached or not.
  s.manifests[{"docs", "shared"}]["manifest"] = "{not json";
  McpEndpoint e(c);
  Driven d = drive(e, s, post(request(2, "tools/list")), CallerAuth::member("alice"));
  EXPECT_EQ(names(d.body["result"]["tools"]), std::vector<std::string>{"mail__inbox"});
  const Json& missing = d.body["result"]["_meta"]["quiver/missing"];
  ASSERT_EQ(missing.size(), 1u) << d.body;
  EXPECT_EQ(missing[0]["id"], "docs");
  EXPECT_EQ(missing[0]["status"], "error");
}

// ---- calls -------------------------------------------------------------------------------------

TEST(McpEndpoint, CallsBecomeRelayCallsWithTheUpstreamsNames) {
  Json args = Json::object({{"q", "x"}});
  Relay echo = [](const RelayCall& call) {
    return RelayReply::ok(Json::object(
        {{"content", Json::array({Json::object({{"type", "text"}, {"text", "ok"}})})}}));
  };
  Driven d = run(
      post(request(7, "tools/call", Json::object({{"name", "docs__search"}, {"arguments", args}}))),
      "alice", config(), echo);
  ASSERT_EQ(d.relays.size(), 1u);
  const RelayCall& call = d.relays[0];
  EXPECT_EQ(call.connection_id, "docs");
  EXPECT_EQ(call.method, "tools/call");
  EXPECT_EQ(call.params["name"], "search");
  EXPECT_EQ(call.params["arguments"], args);
  EXPECT_EQ(call.principal.str(), "shared");
  EXPECT_EQ(call.request_id, 7);
  EXPECT_EQ(call.deadline_ms, kNow + config().relay_timeout_ms);
  EXPECT_EQ(d.body["result"]["content"][0]["text"], "ok");

  // resources/read: the URI maps back, and URIs in the result are exposed again.
  Relay read = [](const RelayCall& call) {
    return RelayReply::ok(Json::object(
        {{"contents",
          Json::array({Json::object({{"uri", call.params["uri"]}, {"text", "hi"}})})}}));
  };
  d = run(
      post(request(8, "resources/read", Json::object({{"uri", "quiver://docs/file:///readme"}}))),
      "alice", config(), read);
  ASSERT_EQ(d.relays.size(), 1u);
  EXPECT_EQ(d.relays[0].params["uri"], "file:///readme");
  EXPECT_EQ(d.body["result"]["contents"][0]["uri"], "quiver://docs/file:///readme");

  d = run(post(request(9, "prompts/get", Json::object({{"name", "docs__summarize"}}))));
  ASSERT_EQ(d.relays.size(), 1u);
  EXPECT_EQ(d.relays[0].params["name"], "summarize");

  Json ref = Json::object({{"type", "ref/prompt"}, {"name", "docs__summarize"}});
  d = run(
      post(request(10, "completion/complete",
                   Json::object({{"ref", ref}, {"argument", {{"name", "a"}, {"value", "b"}}}}))));
  ASSERT_EQ(d.relays.size(), 1u);
  EXPECT_EQ(d.relays[0].params["ref"]["name"], "summarize");
}

TEST(McpEndpoint, RelayFailuresAndUpstreamErrorsAreJsonRpcErrors) {
  // No relay wired: a real error saying so, not a fake result.
  Driven d = run(post(request(1, "tools/call", Json::object({{"name", "docs__search"}}))));
  EXPECT_EQ(d.body["error"]["code"], kMcpErrorCallsUnavailable);
  EXPECT_FALSE(d.body.contains("result"));

  Relay timeout = [](const RelayCall&) {
    return RelayReply::failed(RelayFailure::kTimeout, "the upstream did not answer in time");
  };
  d = run(post(request(2, "tools/call", Json::object({{"name", "docs__search"}}))), "alice",
          config(), timeout);
  EXPECT_EQ(d.body["error"]["code"], kMcpErrorTimeout);

  Relay upstream = [](const RelayCall&) {
    return RelayReply::upstream_error(JsonRpcError{-32602, "Unknown tool: search", Json(3)});
  };
  d = run(post(request(3, "tools/call", Json::object({{"name", "docs__search"}}))), "alice",
          config(), upstream);
  EXPECT_EQ(d.body["error"]["code"], -32602);
  EXPECT_EQ(d.body["error"]["message"], "Unknown tool: search");
  EXPECT_EQ(d.body["error"]["data"], 3);

  // Names the scheme never produced, and ungranted connections: refused without a relay.
  for (const char* name : {"search", "secret__launch", "nosuch__x"}) {
    d = run(post(request(4, "tools/call", Json::object({{"name", name}}))));
    EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams) << name;
    EXPECT_TRUE(d.relays.empty()) << name;
  }
  d = run(post(request(5, "resources/read", Json::object({{"uri", "file:///etc/passwd"}}))));
  EXPECT_EQ(d.body["error"]["code"], kMcpErrorResourceNotFound);
  d = run(post(request(6, "resources/read", Json::object({{"uri", "quiver://secret/x"}}))));
  EXPECT_EQ(d.body["error"]["code"], kMcpErrorResourceNotFound);
  EXPECT_TRUE(d.relays.empty());
}

// ---- search mode -------------------------------------------------------------------------------

TEST(McpEndpoint, SearchModeListsItsOwnToolsAndRelaysTheChosenOne) {
  McpEndpointConfig c = config();
  c.search_mode = true;
  Driven d = run(post(request(1, "tools/list")), "alice", c);
  EXPECT_EQ(names(d.body["result"]["tools"]),
            (std::vector<std::string>{"quiver_search_tools", "quiver_describe_tool",
                                      "quiver_call_tool"}));
  EXPECT_TRUE(d.snapshots.empty());

  d = run(post(request(2, "tools/call",
                       Json::object({{"name", "quiver_search_tools"},
                                     {"arguments", {{"query", "inbox"}}}}))),
          "alice", c);
  ASSERT_TRUE(d.body.contains("result")) << d.respond.response.body;
  const Json& found = d.body["result"]["structuredContent"]["tools"];
  ASSERT_EQ(found.size(), 1u) << found;
  EXPECT_EQ(found[0]["name"], "mail__inbox");

  d = run(post(request(3, "tools/call",
                       Json::object({{"name", "quiver_describe_tool"},
                                     {"arguments", {{"name", "docs__fetch"}}}}))),
          "alice", c);
  EXPECT_EQ(d.body["result"]["structuredContent"]["tool"]["name"], "docs__fetch");
  EXPECT_EQ(d.body["result"]["structuredContent"]["tool"]["inputSchema"]["type"], "object");

  d = run(
      post(request(
          4, "tools/call",
          Json::object({{"name", "quiver_call_tool"},
                        {"arguments", {{"name", "docs__fetch"}, {"arguments", {{"id", 1}}}}}}))),
      "alice", c);
  ASSERT_EQ(d.relays.size(), 1u);
  EXPECT_EQ(d.relays[0].method, "tools/call");
  EXPECT_EQ(d.relays[0].params["name"], "fetch");
  EXPECT_EQ(d.relays[0].params["arguments"]["id"], 1);

  // Not in search mode, the endpoint's own tools do not exist.
  d = run(post(request(5, "tools/call", Json::object({{"name", "quiver_search_tools"}}))));
  EXPECT_EQ(d.body["error"]["code"], kJsonRpcInvalidParams);
}

// DNS rebinding protection (Streamable HTTP's "Security Warning"): no Origin passes; a loopback
// origin or an allowed one passes; any other, a malformed one, `null` or two Origin headers is
// 403 FORBIDDEN.
TEST(McpOrigin, OnlyLoopbackAndAllowedOriginsPass) {
  const std::vector<std::string> allowed = {"https://app.example.com"};
  auto refused = [&](std::vector<std::string> origins) {
    HttpHeaders headers = {{"Content-Type", "application/json"}};
    for (std::string& o : origins) headers.emplace_back("Origin", std::move(o));
    return mcp_origin_refusal(headers, allowed);
  };
  EXPECT_FALSE(refused({}));
  for (const char* ok : {"http://localhost", "http://localhost:8787", "https://LOCALHOST:3000",
                         "http://127.0.0.1", "http://127.1.2.3:9", "http://[::1]:8080",
                         "https://app.example.com", "HTTPS://App.Example.com"}) {
    EXPECT_FALSE(refused({ok})) << ok;
  }
  for (const char* bad : {"http://evil.example.com",
                          "http://evil.example.com:8787",
                          "null",
                          "",
                          "http://127.0.0.1.nip.io",
                          "http://127.0.0.1.evil.example.com:80",
                          "http://0127.0.0.1",
                          "http://128.0.0.1",
                          "http://127.0.0",
                          "http://127.0.0.256",
                          "http://[::2]",
                          "http://app.example.com",
                          "https://app.example.com:8443",
                          "https://app.example.com/",
                          "ftp://localhost",
                          "http://localhost@evil.example.com",
                          "http://localhost:",
                          "localhost",
                          "http://localhost:123456",
                          "http://localhost/path"}) {
    std::optional<HttpResponse> r = refused({bad});
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 403) << bad;
    Result<Json> body = parse_json(r->body);
    ASSERT_TRUE(body.ok());
    EXPECT_EQ((*body)["error"]["code"], "FORBIDDEN");
  }
  std::optional<HttpResponse> twice = refused({"http://localhost", "http://evil.example.com"});
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->status, 403);
  // The header name in any case.
  EXPECT_TRUE(mcp_origin_refusal({{"oRiGiN", "http://evil.example.com"}}, allowed));

  EXPECT_EQ(mcp_origin_key("HTTPS://App.Example.com:8443"), "https://app.example.com:8443");
  EXPECT_EQ(mcp_origin_key("http://[::1]:80"), "http://[::1]:80");
  EXPECT_FALSE(mcp_origin_key("https://app.example.com/x"));
  EXPECT_FALSE(mcp_origin_key("https://"));
  EXPECT_FALSE(mcp_origin_key("https://[zz]"));
}

}  // namespace
}  // namespace quiver
