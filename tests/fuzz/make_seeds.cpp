// Writes each fuzz target's seed corpus: tests/fixtures (real-peer captures, tokens) in each
// target's input format, plus small hand-written inputs for the paths no fixture reaches.
//   quiver_fuzz_make_seeds <tests/fixtures> <out>   →  <out>/<target>/<name>
// The MCP session seeds are scripts recorded by running the real session against the captured
// answers (so their ids are the ones the fuzz target's session will use); the manifest and edge
// seeds carry the manifests those listings build. Deterministic: the same fixtures give the same
// files.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <sys/stat.h>

#include "shared/caller_token.h"
#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/jsonrpc.h"
#include "shared/layout.h"
#include "shared/manifest.h"
#include "shared/mcp_session.h"
#include "shared/redis_cluster.h"
#include "shared/redis_keys.h"
#include "shared/sha256.h"
#include "shared/webhook_signature.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/resp_values.h

std::string g_out;
int g_failures = 0;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "make_seeds: cannot read " << path << "\n";
    ++g_failures;
    return "";
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  std::string dir = g_out + "/" + target;
  ::mkdir(g_out.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
  f << bytes;
  if (!f.good()) {
    std::cerr << "make_seeds: cannot write " << dir << "/" << name << "\n";
    ++g_failures;
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// ---- the MCP session against a captured server ---------------------------------------------

struct Recording {
  std::string script;  // the mcp_session_fuzz input
  std::vector<std::string> messages;
  std::optional<Manifest> manifest;
};

// The captured answer to `request` (tests/fixtures/mcp/README.md describes the capture).
std::optional<std::string> fixture_answer(const Json& fx, const JsonRpcMessage& request,
                                          bool legacy_probe_error) {
  if (request.method == "server/discover") {
    if (!legacy_probe_error) return std::nullopt;
    return encode_error(request.id, kJsonRpcMethodNotFound, "Method not found");
  }
  if (request.method == "initialize") return encode_result(request.id, fx["initialize"]);
  const Json* pages = json_field(fx["lists"], request.method.c_str());
  if (pages == nullptr) return encode_error(request.id, kJsonRpcMethodNotFound, "Method not found");
  Json cursor = request.params.is_object() && request.params.contains("cursor")
                    ? request.params["cursor"]
                    : Json();
  for (const Json& page : *pages) {
    const Json params = page.value("params", Json::object());
    Json page_cursor = params.is_object() && params.contains("cursor") ? params["cursor"] : Json();
    if (page_cursor != cursor) continue;
    if (page.contains("error")) {
      return encode_error(request.id, page["error"].value("code", 0),
                          page["error"].value("message", ""));
    }
    return encode_result(request.id, page["result"]);
  }
  return encode_error(request.id, kJsonRpcInvalidParams, "unknown cursor");
}

Recording record_session(const Json& fx, EraPolicy era) {
  McpSessionConfig config;  // as in mcp_session_fuzz.cpp
  config.max_pages_per_list = 20;
  config.max_items_per_list = 500;
  config.max_message_bytes = std::size_t{1} << 20;
  config.era = era;
  Recording rec;
  if (era == EraPolicy::kLegacy) rec.script = "#p1\n";
  int64_t now = 1'000'000;
  McpSession session(config);
  if (!session.start(now).ok()) ++g_failures;
  std::deque<JsonRpcMessage> requests;
  auto drain = [&] {
    while (auto text = session.poll_transmit()) {
      auto parsed = parse_jsonrpc_batch(*text);
      if (parsed.ok() && (*parsed)[0].kind == JsonRpcKind::kRequest) {
        requests.push_back((*parsed)[0]);
      }
    }
    while (auto event = session.poll_event()) {
      if (auto* ready = std::get_if<McpSession::ListingReady>(&*event)) {
        auto m = manifest_from_listing(ready->listing);
        if (m.ok()) rec.manifest = *m;
      }
    }
  };
  drain();
  if (era == EraPolicy::kLegacy) now += 1;  // the "#p1" line is a step too
  while (!requests.empty()) {
    JsonRpcMessage request = requests.front();
    requests.pop_front();
    auto answer = fixture_answer(fx, request, true);
    if (!answer) continue;
    rec.script += *answer + "\n";
    rec.messages.push_back(*answer);
    now += 1;
    (void)session.handle_text(*answer, now);
    drain();
  }
  if (!rec.manifest) {
    std::cerr << "make_seeds: a fixture session built no manifest\n";
    ++g_failures;
  }
  return rec;
}

// ---- edge ------------------------------------------------------------------------------------

constexpr int64_t kEdgeNow = 1'800'000'000'000;  // edge_fuzz.cpp's clock

// The discovery script's answer (shared/discovery_redis.h) for member alice: one shared
// connection `docs` holding `manifest`.
std::string discovery_reply(const std::string& manifest, bool lease) {
  int64_t fetched = kEdgeNow - 20 * 60'000;
  auto conn = flat({{"config_hash", "h1"},
                    {"credential_mode", "shared"},
                    {"name", "Docs"},
                    {"transport", "http"},
                    {"updated_at", "1"}});
  auto record = flat({{"manifest", manifest},
                      {"etag", content_hash(manifest)},
                      {"config_hash", "h1"},
                      {"fence", "1"},
                      {"fetched_at", std::to_string(fetched)},
                      {"fresh_until", std::to_string(fetched + 15 * 60'000)},
                      {"expires_at", std::to_string(fetched + 24 * 3'600'000)},
                      {"truncated", "0"}});
  return encode_reply(
      A({S("quiver.discovery.v2"), S("member/alice"), I(3), I(1), S(""), I(0),
         A({A({S("docs"), conn, S("shared"), record, A({}), I(lease ? 1 : 0), RespValue::nil()})}),
         A({S("ready:1"), S("3"), S("3")})}));
}

// edge_fuzz.cpp's input: flags, the request's length and wire bytes, then Redis' answer to each
// round trip, separated by "\n~~~\n".
std::string edge_input(uint8_t flags, const HttpRequest& request,
                       const std::vector<std::string>& round_trips) {
  std::string wire = edge_request_to_wire(request);
  std::string out(1, char(flags));
  uint32_t n = static_cast<uint32_t>(wire.size());
  for (int i = 0; i < 4; ++i) out += char((n >> (8 * i)) & 0xff);
  out += wire;
  for (std::size_t i = 0; i < round_trips.size(); ++i) {
    if (i > 0) out += "\n~~~\n";
    out += round_trips[i];
  }
  return out;
}

HttpRequest request(const std::string& method, const std::string& path,
                    const std::string& query = "", const std::string& body = "") {
  HttpRequest r;
  r.method = method;
  r.path = path;
  r.query = query;
  r.body = body;
  r.headers.emplace_back("accept", "application/json");
  return r;
}

void edge_seeds(const std::string& manifest) {
  const std::string ok = "+OK\r\n";  // AUTH
  const std::string read = discovery_reply(manifest, false);
  const std::string queued = encode_reply(A({S("queued"), S("1-0")}));
  struct Case {
    const char* name;
    uint8_t flags;
    HttpRequest req;
    std::vector<std::string> redis;
  };
  std::vector<Case> cases = {
      {"manifests", 1 | 4, request("GET", "/v1/manifests", "view=mcp&limit=5"), {ok + read, read}},
      {"manifest-one", 1, request("GET", "/v1/mcp-connections/docs/manifest"), {ok + read, queued}},
      {"manifest-head",
       1,
       request("HEAD", "/v1/mcp-connections/docs/manifest", "view=manifest"),
       {ok + discovery_reply(manifest, true)}},
      {"search",
       1 | 4,
       request("GET", "/v1/search", "q=create%20entities&limit=3"),
       {ok + read, read}},
      {"refresh",
       1,
       request("POST", "/v1/mcp-connections/docs/refresh-tools"),
       {ok + read, queued}},
      {"noscript",
       1,
       request("GET", "/v1/manifests"),
       {ok + "-NOSCRIPT No matching script.\r\n", read}},
      {"no-token", 0, request("GET", "/v1/manifests"), {}},
      // The namespace in a key layout the edge does not read (shared/layout.h): 503, and the
      // webhook refused the same way.
      {"layout-unknown",
       1,
       request("GET", "/v1/manifests"),
       {ok +
        encode_reply(A({S("quiver.layout.v1"), S("v2:filling:1"), S("quiver:{default}:layout")}))}},
      {"webhook-layout-unknown",
       2,
       request("POST", kWebhookRefreshPath, "", R"({"connection_id": "docs"})"),
       {ok +
        encode_reply(A({S("quiver.layout.v1"), S("v2:filling:1"), S("quiver:{default}:layout")}))}},
      {"store-down", 1, request("GET", "/v1/manifests"), {"-ERR invalid password\r\n"}},
      {"healthz", 0, request("GET", "/healthz"), {}},
      {"webhook",
       2,
       request("POST", kWebhookRefreshPath, "",
               R"({"connections": ["docs", {"connection_id": "mail", "principal": "member/bob"}],
                   "reason": "deploy"})"),
       {ok +
        encode_reply(A({S("accepted"), A({S("docs"), S("shared"), S("queued"), S("1"), S("mail"),
                                          S("member/bob"), S("in_progress"), S("0")})}))}},
      {"webhook-replay",
       2,
       request("POST", kWebhookRefreshPath, "", R"({"connection_id": "docs"})"),
       {ok + encode_reply(A({S("replay")}))}},
  };
  // On a Redis Cluster (flag 8, seeded at 127.0.0.1:7000): the map, then the namespace's slot
  // moved (MOVED), or migrating (ASK: ASKING's +OK, then the reply).
  const std::string slot = std::to_string(cluster_key_slot(RedisKeys::create("default")->prefix()));
  auto cnode = [](const std::string& id, int port, const char* role) {
    return A({S("id"), S(id), S("port"), I(port), S("ip"), S("127.0.0.1"), S("role"), S(role),
              S("health"), S("online")});
  };
  const std::string shards =
      encode_reply(A({A({S("slots"), A({I(0), I(16383)}), S("nodes"),
                         A({cnode("a", 7001, "master"), cnode("b", 7004, "replica")})})}));
  cases.push_back({"cluster-moved",
                   1 | 8,
                   request("GET", "/v1/manifests"),
                   {ok + shards, ok + "-MOVED " + slot + " 127.0.0.1:7002\r\n", ok + read}});
  cases.push_back(
      {"cluster-ask",
       1 | 8,
       request("GET", "/v1/mcp-connections/docs/manifest"),
       {ok + shards, ok + "-ASK " + slot + " 127.0.0.1:7002\r\n", ok + ok + read, queued}});
  cases.push_back({"cluster-down",
                   1 | 8,
                   request("GET", "/v1/manifests"),
                   {ok + shards, ok + "-CLUSTERDOWN The cluster is down\r\n", shards, read}});
  // Key layout v2 on a cluster whose master 7001 serves alice's slot alone: the v1 script names
  // v2:ready, and round 1 of the read in rounds goes out in two parts (the namespace's slot at
  // 7000, alice's at 7001, a new connection), each part answered by its own segment.
  {
    const int64_t m = cluster_key_slot("{default:m:alice}");
    std::vector<RespValue> rest;
    if (m > 0) {
      rest.push_back(I(0));
      rest.push_back(I(m - 1));
    }
    if (m < 16383) {
      rest.push_back(I(m + 1));
      rest.push_back(I(16383));
    }
    const std::string apart = encode_reply(
        A({A({S("slots"), A(std::move(rest)), S("nodes"), A({cnode("a", 7000, "master")})}),
           A({S("slots"), A({I(m), I(m)}), S("nodes"), A({cnode("b", 7001, "master")})})}));
    cases.push_back(
        {"cluster-v2-parts",
         1 | 8,
         request("GET", "/v1/manifests"),
         {ok + apart,
          encode_reply(A({S(kLayoutUnknownTag), S("v2:ready:7"), S("quiver:{default}:layout")})),
          encode_reply(S("v2:ready:7")) + encode_reply(S("ready:1")),
          ok + encode_reply(S("3")) + encode_reply(A({}))}});
  }
  for (const Case& c : cases) write_seed("edge", c.name, edge_input(c.flags, c.req, c.redis));
  write_seed("edge", "wire-garbage",
             std::string("\x01\x08\x00\x00\x00", 5) + "\x04\x00\x00\x00{}}}");

  // The same answers as plain RESP streams for the decoder.
  write_seed("resp", "discovery-reply", ok + read);
  write_seed("resp", "noscript-then-reply", "-NOSCRIPT No matching script.\r\n" + read + queued);
}

// ---- the rest ----------------------------------------------------------------------------------

void token_seeds(const std::string& fixtures) {
  auto fx = parse_json(read_file(fixtures + "/tokens/caller-tokens.json"));
  if (!fx.ok()) {
    ++g_failures;
    return;
  }
  int i = 0;
  for (const Json& c : (*fx)["cases"]) {
    std::string token = c.value("token", "");
    std::string name = std::to_string(i++);
    write_seed("caller_token", "bearer-" + name, std::string(1, '\0') + "Bearer " + token);
    // The signed mode: "<header JSON>\n<claims JSON>", decoded from the fixture token.
    std::size_t dot1 = token.find('.');
    std::size_t dot2 = token.find('.', dot1 + 1);
    std::string header, claims;
    if (dot1 == std::string::npos || dot2 == std::string::npos ||
        !base64url_decode(token.substr(0, dot1), &header) ||
        !base64url_decode(token.substr(dot1 + 1, dot2 - dot1 - 1), &claims)) {
      continue;
    }
    write_seed("caller_token", "signed-" + name, std::string(1, '\1') + header + "\n" + claims);
  }
}

void hand_written() {
  // framing: line-end and field corner cases the captures do not have.
  write_seed(
      "framing", "sse-fields",
      "\xEF\xBB\xBF: comment\r\nretry: 1500\r\nid: 7\r\nevent: message\r\ndata: {\"a\":1}\r\n"
      "data:  two\r\n\r\nid\nevent\ndata\n\ndata: x\rdata: y\r\r\n:\nid: a\0b\ndata:\n\n");
  write_seed("framing", "ndjson-crlf",
             "{\"jsonrpc\":\"2.0\"}\r\n  \t\r\n\n[1,2]\n{\"a\":\"\\u00e9\"}");
  // jsonrpc
  write_seed("jsonrpc", "batch",
             R"([{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"ping","id":"x"},)"
             R"({"jsonrpc":"2.0","method":"notifications/progress","params":[1]},)"
             R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad","data":[]}}])");
  // resp
  write_seed("resp", "types",
             "+OK\r\n-ERR wrong\r\n:-42\r\n$-1\r\n*-1\r\n$0\r\n\r\n*0\r\n"
             "*2\r\n*1\r\n$3\r\nabc\r\n:9223372036854775807\r\n");
  write_seed("resp", "nested", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n");
  // webhook: "<header>\n<body>"
  auto sig = sign_webhook("fuzz-webhook-secret-0123456789abcdef", "default",
                          R"({"connection_id":"docs"})", 1800000000000);
  write_seed("webhook", "signed", (sig.ok() ? *sig : "") + "\n" + R"({"connection_id":"docs"})");
  write_seed("webhook", "list",
             "t=1800000000,v1=" + std::string(64, 'a') + ",v1=" + std::string(64, 'B') + ",v0=x\n" +
                 R"({"connections":["a",{"connection_id":"b","principal":"member/bob",)" +
                 R"("reason":"x"},{"connection_id":"c","principal":"shared"}],"reason":"deploy"})");
  // url: one input is tried as every kind of URL and as an address list.
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"https", "https://mcp.example.com:8443/mcp/v1?key=abc"},
           {"ipv6", "http://[::ffff:127.0.0.1]:80/"},
           {"ipv4", "http://192.168.0.1"},
           {"redis", "rediss://user:p%40ss@[::1]:6380/2"},
           {"redis-plain", "redis://localhost"},
           {"listen", "[::1]:0"},
           {"resolved", "ignored\n93.184.216.34\n2606:2800:220:1::\n169.254.169.254\nfe80::1"},
           {"name", "My Server (staging)"}}) {
    write_seed("url", name, text);
  }
  // config: the header comment's example, with an environment.
  write_seed("config", "full",
             R"({"mcpServers": {
  "everything": {"command": "node", "args": ["server.js", "stdio"], "env": {"K": "${TOKEN}"}},
  "github": {"url": "https://api.example.com/mcp?x=${PORT}", "headers": {"X-Org": "acme"}},
  "other": {"type": "streamable-http", "url": "http://127.0.0.1:${PORT:-9}/mcp", "disabled": false},
  "old": {"type": "sse", "url": "https://x/sse", "disabled": true}},
 "quiver": {
  "namespace": "default", "redis": "rediss://:${REDIS_PASSWORD}@host:6380/0",
  "data_dir": "${HOME}/quiver", "listen": "127.0.0.1:8787", "allow_private_upstreams": false,
  "runtime": {"list_timeout_ms": 3500, "refresh_ahead_ratio": 0.5},
  "caller_token_keys": {"2026-01": {"env": "QUIVER_TOKEN_KEY"}},
  "caller_token_signing_kid": "2026-01",
  "webhook_secrets": {"ci": {"file": "/run/secrets/quiver-webhook"}},
  "members": ["alice", "bob"],
  "grants": {"alice": ["everything", "github"], "*": ["everything"]},
  "connections": {"github": {
     "credential_mode": "per_member", "auth": "bearer", "credential_version": 3,
     "credentials": {"alice": {"env": "GITHUB_TOKEN"}, "bob": {"file": "/run/secrets/bob"}},
     "auto_enable_new_capabilities": false}}}})" +
                 std::string(1, '\0') + "QUIVER_LIST_TIMEOUT_MS=2000\nQUIVER_REDIS_URL=\n");
}

}  // namespace
}  // namespace quiver

int main(int argc, char** argv) {
  using namespace quiver;
  if (argc != 3) {
    std::cerr << "usage: quiver_fuzz_make_seeds <tests/fixtures> <out dir>\n";
    return 2;
  }
  const std::string fixtures = argv[1];
  g_out = argv[2];

  // Raw captures: framing takes them as they are; each message is a jsonrpc seed.
  for (const char* f :
       {"ndjson/server-everything-stdio.txt", "sse/server-everything-initialize.txt",
        "sse/server-everything-tools-list.txt"}) {
    std::string text = read_file(fixtures + "/" + f);
    std::string name = f;
    for (char& c : name) c = c == '/' ? '-' : c;
    write_seed("framing", name, text);
    int i = 0;
    for (const std::string& line : lines_of(text)) {
      std::string message = line;
      if (message.rfind("data: ", 0) == 0) message = message.substr(6);
      if (message.empty() || (message[0] != '{' && message[0] != '[')) continue;
      write_seed("jsonrpc", name + "-" + std::to_string(i++), message);
    }
  }

  std::string edge_manifest;
  for (const char* f : {"server-everything.json", "server-everything-paginated.json",
                        "server-memory.json", "server-filesystem.json"}) {
    auto fx = parse_json(read_file(fixtures + "/mcp/" + f));
    if (!fx.ok()) {
      std::cerr << "make_seeds: " << f << ": " << fx.error().message << "\n";
      ++g_failures;
      continue;
    }
    std::string name = std::string(f).substr(0, std::string(f).size() - 5);
    Recording probe = record_session(*fx, EraPolicy::kProbe);
    Recording legacy = record_session(*fx, EraPolicy::kLegacy);
    write_seed("mcp_session", name + "-probe", probe.script);
    write_seed("mcp_session", name + "-legacy", legacy.script);
    for (std::size_t i = 0; i < probe.messages.size(); ++i) {
      write_seed("jsonrpc", name + "-" + std::to_string(i), probe.messages[i]);
    }
    if (probe.manifest) {
      auto encoded = encode_manifest(*probe.manifest);
      if (encoded.ok()) {
        write_seed("manifest", name, encoded->bytes);
        if (name == "server-memory") edge_manifest = encoded->bytes;
      }
    }
  }
  // Session scripts with the controls: a timeout, a failed request, a relist, a close.
  write_seed("mcp_session", "controls", "#t\n#f2\n#t\n#r\n#e\n#c\n");

  token_seeds(fixtures);
  edge_seeds(edge_manifest);
  hand_written();
  if (g_failures != 0) {
    std::cerr << "make_seeds: " << g_failures << " problem(s)\n";
    return 1;
  }
  return 0;
}
