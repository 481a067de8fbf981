// Fuzzes the MCP endpoint's request handling (shared/mcp_endpoint.h): the first byte picks the
// MCP-Protocol-Version / Mcp-Method headers, the rest is the POST body. Against a fixed snapshot
// (one shared connection `docs` with tools, a resource and a prompt) and a relay that echoes, the
// endpoint must end with a response (never more than a few steps), a non-empty body must be JSON
// written exactly as serialize_json writes it (the lists splice their items' text from the render
// cache's fragments: odd-sized inputs use a cache kept across inputs, even-sized ones none),
// every RelayCall must name the granted connection with a name or URI that maps back to what the
// client sent, and the naming scheme must round-trip any name it decodes. With bit 0x20 of the
// first byte the client accepts text/event-stream and the host opens the stream before relaying
// (as the edge does): the answer must then be 200 and events only, each `event: message` with
// one response written as serialize_json writes it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "shared/canonical_json.h"
#include "shared/connection_record.h"
#include "shared/mcp_endpoint.h"
#include "shared/render_cache.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

constexpr int64_t kNow = 100'000'000;

DiscoverySnapshot snapshot(const Principal& member) {
  DiscoverySnapshot s(member);
  GrantedConnection c;
  c.id = "docs";
  c.record = connection_record_for_discovery("docs", HashFields{{"config_hash", "h"},
                                                                {"credential_mode", "shared"},
                                                                {"name", "Docs"},
                                                                {"transport", "stdio"},
                                                                {"updated_at", "1"}});
  c.principal = Principal::shared();
  ManifestEntry m;
  m.text = R"({"tools":[{"name":"search","inputSchema":{"type":"object"}},{"name":"a__b"}],)"
           R"("resources":[{"uri":"file:///x","name":"x"}],"prompts":[{"name":"p"}]})";
  m.config_hash = "h";
  m.fetched_at_ms = kNow - 1000;
  m.fresh_until_ms = kNow + 60'000;
  c.manifest = m;
  c.disabled = {"tool:a__b"};
  s.connections.push_back(std::move(c));
  s.granted_total = 1;
  return s;
}

void check_relay(const RelayCall& call) {
  fuzz::check(call.connection_id == "docs", "mcp_endpoint: a relay to an ungranted connection");
  fuzz::check(call.member.str() == "member/fuzz", "mcp_endpoint: a relay for another member");
  const Json* name = json_field(call.params, "name");
  const Json* uri = json_field(call.params, "uri");
  if (call.method == "tools/call" && name != nullptr && name->is_string()) {
    fuzz::check(encode_mcp_name("docs", name->get<std::string>()) == call.exposed_name,
                "mcp_endpoint: a relayed tool name does not map back");
    fuzz::check(name->get<std::string>() != "a__b", "mcp_endpoint: a disabled tool relayed");
  }
  if (call.method == "resources/read") {
    fuzz::check(uri != nullptr && uri->is_string() &&
                    encode_mcp_uri("docs", uri->get<std::string>()) == call.exposed_name,
                "mcp_endpoint: a relayed URI does not map back");
  }
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  // The naming scheme on the raw input.
  if (auto n = decode_mcp_name(input)) {
    fuzz::check(encode_mcp_name(n->connection_id, n->name) == input,
                "mcp_endpoint: a decoded name does not encode back");
  }
  if (auto u = decode_mcp_uri(input)) {
    fuzz::check(encode_mcp_uri(u->connection_id, u->name) == input,
                "mcp_endpoint: a decoded URI does not encode back");
  }
  if (input.empty()) return 0;
  const unsigned char mode = static_cast<unsigned char>(input[0]);
  input.remove_prefix(1);
  HttpRequest request{
      "POST", "/mcp", "", {{"Content-Type", "application/json"}}, std::string(input)};
  static const char* kVersions[] = {"", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"};
  if (const char* v = kVersions[mode % 5]; *v)
    request.headers.emplace_back("MCP-Protocol-Version", v);
  static const char* kMethods[] = {"", "tools/list", "tools/call", "resources/read"};
  if (const char* m = kMethods[(mode / 5) % 4]; *m) request.headers.emplace_back("Mcp-Method", m);
  if (mode & 0x80) request.headers.emplace_back("Mcp-Name", "docs__search");
  if (mode & 0x20) request.headers.emplace_back("Accept", "application/json, text/event-stream");

  McpEndpointConfig config;
  config.search_mode = (mode & 0x40) != 0;
  config.page_size = 1;
  static RenderCache cache;
  if (size % 2 == 1) config.render.cache = &cache;
  McpEndpoint endpoint(config);
  Principal member = *Principal::member("fuzz");
  McpStep step = endpoint.start(request, CallerAuth::member("fuzz"), kNow);
  for (int guard = 0;; ++guard) {
    fuzz::check(guard < 80, "mcp_endpoint: the request does not end");
    if (auto* r = std::get_if<Respond>(&step)) {
      const HttpResponse& res = r->response;
      fuzz::check(res.status >= 200 && res.status < 600, "mcp_endpoint: a bad status");
      if (endpoint.streaming()) {
        fuzz::check(res.status == 200, "mcp_endpoint: a streamed answer that is not a 200");
        const std::string head = "event: message\ndata: ";
        std::string_view rest = res.body;
        fuzz::check(!rest.empty(), "mcp_endpoint: a stream without its answer");
        while (!rest.empty()) {
          fuzz::check(rest.substr(0, head.size()) == head, "mcp_endpoint: not an event", res.body);
          const std::size_t end = rest.find("\n\n");
          fuzz::check(end != std::string_view::npos, "mcp_endpoint: an unended event", res.body);
          if (rest.substr(0, head.size()) != head || end == std::string_view::npos) break;
          const std::string data(rest.substr(head.size(), end - head.size()));
          JsonParseOptions keep;
          keep.keep_number_literals = true;
          Result<Json> parsed = parse_json(data, keep);
          fuzz::check(parsed.ok() && parsed->is_object() && serialize_json(*parsed) == data,
                      "mcp_endpoint: an event whose data is not one response", data);
          rest.remove_prefix(end + 2);
        }
        break;
      }
      if (!res.body.empty()) {
        JsonParseOptions keep;
        keep.keep_number_literals = true;
        Result<Json> parsed = parse_json(res.body, keep);
        fuzz::check(parsed.ok(), "mcp_endpoint: a body that is not JSON", res.body);
        if (parsed.ok() && res.body.front() != 'e') {  // not an event stream
          fuzz::check(serialize_json(*parsed) == res.body,
                      "mcp_endpoint: a body not written as serialize_json writes it", res.body);
        }
      }
      break;
    }
    if (auto* n = std::get_if<NeedSnapshot>(&step)) {
      fuzz::check(n->member == member, "mcp_endpoint: a snapshot of another member");
      step = endpoint.resume_snapshot(snapshot(member), kNow);
      continue;
    }
    auto& need = std::get<NeedRelay>(step);
    if (endpoint.may_stream() && !endpoint.streaming()) {
      std::optional<HttpResponse> head = endpoint.open_stream();
      fuzz::check(head && head->status == 200 && head->body.empty() &&
                      find_header(head->headers, "Content-Type") == "text/event-stream",
                  "mcp_endpoint: a bad event-stream head");
    }
    std::vector<RelayReply> replies;
    for (const RelayCall& call : need.calls) {
      check_relay(call);
      replies.push_back(RelayReply::ok(Json::object({{"echo", call.params}})));
    }
    step = endpoint.resume_relay(std::move(replies), kNow);
  }
  return 0;
}
