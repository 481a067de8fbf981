#include "shared/edge_service.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/call_relay.h"
#include "shared/caller_token.h"
#include "shared/json.h"
#include "shared/schema_assets.h"
#include "shared/sha256.h"
#include "shared/webhook_signature.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kMinute = 60'000;
constexpr char kKid[] = "k1";
constexpr char kSecret[] = "edge-service-test-secret-0123456789abcdef";
const std::string kRandom(16, '\x5a');

// ---- canned Redis replies ----------------------------------------------------------------------

using namespace testing;  // quiver::testing: tests/support/resp_values.h

std::string manifest_json(const std::vector<std::string>& tools) {
  Json items = Json::array();
  Json hashes = Json::object();
  for (const std::string& t : tools) {
    items.push_back(Json::object({{"name", t},
                                  {"description", "about " + t},
                                  {"inputSchema", Json::object({{"type", "object"}})}}));
    hashes[t] = "sha256-" + std::string(43, 'A');
  }
  Json list = Json::object({{"state", "ok"}, {"items", items}, {"hashes", hashes}});
  return Json::object({{"tools", list}}).dump();
}

// One shared connection `docs` granted to `member`, its manifest fetched `age` ago (15 min fresh).
RespValue discovery_reply(const std::string& member, int64_t epoch, int64_t age,
                          bool lease = false) {
  int64_t fetched = kNow - age;
  auto conn = flat({{"config_hash", "h1"},
                    {"credential_mode", "shared"},
                    {"name", "Docs"},
                    {"transport", "http"},
                    {"updated_at", "1"}});
  auto manifest = flat({{"manifest", manifest_json({"search", "fetch"})},
                        {"etag", "sha256-etag"},
                        {"config_hash", "h1"},
                        {"fence", "1"},
                        {"fetched_at", std::to_string(fetched)},
                        {"fresh_until", std::to_string(fetched + 15 * kMinute)},
                        {"expires_at", std::to_string(fetched + 24 * 60 * kMinute)},
                        {"truncated", "0"}});
  return A(
      {S("quiver.discovery.v2"), S("member/" + member), I(epoch), I(1), S(""), I(0),
       A({A({S("docs"), conn, S("shared"), manifest, A({}), I(lease ? 1 : 0), RespValue::nil()})}),
       A({S("ready:1"), S(std::to_string(epoch)), S(std::to_string(epoch))})});
}

// The same, written the way commits write now: the record names its body (stored apart).
RespValue discovery_reply_naming_body(const std::string& member, int64_t epoch, int64_t age,
                                      const std::string& body) {
  RespValue reply = discovery_reply(member, epoch, age);
  RespValue& fields = reply.elements[6].elements[0].elements[3];
  for (std::size_t i = 0; i + 1 < fields.elements.size(); i += 2) {
    if (fields.elements[i].str == "manifest") {
      fields.elements[i] = S("body");
      fields.elements[i + 1] = S(sha256_hex(body));
    }
  }
  return reply;
}

std::string enqueue_reply(const char* outcome) {
  if (std::string(outcome) == "queued") return encode_reply(A({S("queued"), S("1-0")}));
  return encode_reply(A({S(outcome)}));
}

// ---- the service under test --------------------------------------------------------------------

std::string env_json(std::vector<std::pair<std::string, std::string>> extra = {}) {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kSecret}}).dump();
  env["REDIS_PASSWORD"] = "redis-pw";
  env["REDIS_HOST"] = "127.0.0.1";  // the host's: ignored here
  env["SOME_BINDING"] = 7;          // not a string: ignored
  for (auto& [k, v] : extra) env[k] = v;
  return env.dump();
}

std::unique_ptr<EdgeService> service(std::vector<std::pair<std::string, std::string>> extra = {}) {
  Result<EdgeSettings> settings = edge_settings_from_env(env_json(std::move(extra)));
  EXPECT_TRUE(settings.ok()) << settings.error().message;
  return std::make_unique<EdgeService>(std::move(settings));
}

std::string token_for(const std::string& member, int64_t now = kNow) {
  Result<std::string> t = mint_caller_token(member, kSecret, kKid, now, 3'600'000);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? *t : "";
}

HttpRequest get(const std::string& path, const std::string& token = "",
                const std::string& query = "") {
  HttpRequest r;
  r.method = "GET";
  r.path = path;
  r.query = query;
  if (!token.empty()) r.headers.emplace_back("authorization", "Bearer " + token);
  return r;
}

// GET /v1/manifests with `token`, Redis answering "+OK" and `reply`.
EdgeStep read_manifests(EdgeService& edge, const std::string& token, const RespValue& reply,
                        int64_t now) {
  EdgeStep s = edge.begin(get("/v1/manifests", token), now, kRandom);
  return edge.feed(s.handle, "+OK\r\n" + encode_reply(reply), now);
}

// A read of /v1/manifests whose Redis round fails with `reason`: the step after the failure.
EdgeStep read_manifests_failing(EdgeService& edge, const std::string& token,
                                const std::string& reason, int64_t now) {
  EdgeStep s = edge.begin(get("/v1/manifests", token), now, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  return edge.fail(s.handle, reason, now);
}

std::string header(const HttpResponse& r, const std::string& name) {
  std::optional<std::string_view> v = find_header(r.headers, name);
  return v ? std::string(*v) : "<absent>";
}

Json body_of(const EdgeStep& s) {
  Result<Json> j = parse_json(s.response.body);
  return j.ok() ? *j : Json();
}

std::string error_code_of(const EdgeStep& s) {
  Json b = body_of(s);
  return b.is_object() && b.contains("error") ? b["error"].value("code", "") : "";
}

// ---- settings ----------------------------------------------------------------------------------

TEST(EdgeService, SettingsComeFromTheEnvironmentWithDefaults) {
  Result<EdgeSettings> s = edge_settings_from_env(env_json());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->ns, "default");
  EXPECT_EQ(s->l1.ttl_ms, 2'000);
  EXPECT_EQ(s->redis_password, "redis-pw");
  EXPECT_EQ(s->token.ns, "default");
  EXPECT_EQ(s->enqueue.window_ms, 30'000);

  s = edge_settings_from_env(env_json({{"QUIVER_NAMESPACE", "team-a"},
                                       {"QUIVER_L1_TTL_MS", "500"},
                                       {"QUIVER_FRESH_TTL_MS", "1000"},
                                       {"QUIVER_MAX_AGE_MS", "5000"},
                                       {"QUIVER_REVALIDATE_WINDOW_MS", "2000"},
                                       {"QUIVER_L1_MAX_BYTES", ""}}));  // empty: unset
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->ns, "team-a");
  EXPECT_EQ(s->token.ns, "team-a");
  EXPECT_EQ(s->l1.ttl_ms, 500);
  EXPECT_EQ(s->discovery.freshness.fresh_ttl_ms, 1'000);
  EXPECT_EQ(s->discovery.freshness.min_upstream_ttl_ms, 1'000);
  EXPECT_EQ(s->enqueue.window_ms, 2'000);
  EXPECT_EQ(s->l1.revalidation_claim_ms, 2'000);
}

TEST(EdgeService, BadSettingsNameTheVariableNeverItsValue) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> env;
    const char* names;
  };
  for (const Case& c : std::vector<Case>{
           {{{"QUIVER_L1_TTL_MS", "two"}}, "QUIVER_L1_TTL_MS"},
           {{{"QUIVER_L1_TTL_MS", "-1"}}, "QUIVER_L1_TTL_MS"},
           {{{"QUIVER_NAMESPACE", "a:b"}}, "QUIVER_NAMESPACE"},
           {{{"QUIVER_TOKEN_KEYS", "{\"k1\":\"short\"}"}}, "QUIVER_TOKEN_KEYS"},
           {{{"QUIVER_TOKEN_KEYS", "not json s3cr3t"}}, "QUIVER_TOKEN_KEYS"},
           {{{"QUIVER_REVALIDATE_WINDOW_MS", "0"}}, "QUIVER_REVALIDATE_WINDOW_MS"},
           {{{"QUIVER_FRESH_TTL_MS", "10"}, {"QUIVER_MAX_AGE_MS", "5"}}, "QUIVER_FRESH_TTL_MS"},
           {{{"REDIS_USERNAME", "u"}, {"REDIS_PASSWORD", ""}}, "REDIS_USERNAME"},
           {{{"QUIVER_WEBHOOK_SECRETS", "{\"ci\":\"s3cr3t\"}"}}, "QUIVER_WEBHOOK_SECRETS.ci"},
           {{{"QUIVER_WEBHOOK_SECRETS", "s3cr3t"}}, "QUIVER_WEBHOOK_SECRETS"},
           {{{"QUIVER_WEBHOOK_SECRETS", "{}"}}, "QUIVER_WEBHOOK_SECRETS"},
       }) {
    Result<EdgeSettings> s = edge_settings_from_env(env_json(c.env));
    ASSERT_FALSE(s.ok()) << c.names;
    EXPECT_NE(s.error().message.find(c.names), std::string::npos) << s.error().message;
    EXPECT_EQ(s.error().message.find("s3cr3t"), std::string::npos);
  }
  Json no_keys = Json::object();
  Result<EdgeSettings> s = edge_settings_from_env(no_keys.dump());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("QUIVER_TOKEN_KEYS"), std::string::npos);
  EXPECT_FALSE(edge_settings_from_env("[1,2]").ok());
  EXPECT_FALSE(edge_settings_from_env("{").ok());
}

TEST(EdgeService, AMisconfiguredEdgeAnswers500AndSaysWhyOnHealthz) {
  EdgeService edge(edge_settings_from_env("{}"));
  EXPECT_FALSE(edge.configured());
  EdgeStep s = edge.begin(get("/v1/manifests", "x"), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 500);
  EXPECT_EQ(error_code_of(s), "INTERNAL");
  EXPECT_NE(s.log.find("QUIVER_TOKEN_KEYS"), std::string::npos);
  edge.end(s.handle);
  s = edge.begin(get("/healthz"), kNow, kRandom);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(body_of(s)["status"], "misconfigured");
  edge.end(s.handle);
  EXPECT_EQ(edge.open_requests(), 0u);
}

// ---- host endpoints and wire -------------------------------------------------------------------

TEST(EdgeService, HealthzAnswersWithoutRedis) {
  auto edge = service();
  EdgeStep s = edge->begin(get("/healthz"), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  Json b = body_of(s);
  EXPECT_EQ(b["status"], "ok");
  EXPECT_EQ(b["service"], "quiver-edge");
  EXPECT_EQ(b["open_requests"], 0);
  EXPECT_EQ(header(s.response, "X-Request-Id"), "5a5a5a5a5a5a5a5a");
  EXPECT_FALSE(s.background);
  edge->end(s.handle);

  HttpRequest post = get("/healthz");
  post.method = "POST";
  s = edge->begin(post, kNow, kRandom);
  EXPECT_EQ(s.response.status, 405);
  EXPECT_EQ(header(s.response, "Allow"), "GET, HEAD");
  edge->end(s.handle);
}

TEST(EdgeService, UnknownPathsAndLargeBodiesAreJsonErrors) {
  auto edge = service();
  EdgeStep s = edge->begin(get("/nope"), kNow, kRandom);
  EXPECT_EQ(s.response.status, 404);
  EXPECT_EQ(error_code_of(s), "NOT_FOUND");
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  edge->end(s.handle);

  HttpRequest big = get("/v1/manifests", token_for("alice"));
  big.method = "POST";
  big.body.assign(kMaxEdgeRequestBodyBytes + 1, 'x');
  s = edge->begin(big, kNow, kRandom);
  EXPECT_EQ(s.response.status, 413);
  edge->end(s.handle);
}

TEST(EdgeService, RequestWireRoundTripsAndRejectsMalformedInput) {
  HttpRequest r = get("/v1/search", "tok", "q=a%20b");
  r.body = std::string("\0\r\nbody", 7);
  std::string wire = edge_request_to_wire(r);
  Result<HttpRequest> back = edge_request_from_wire(wire);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->method, "GET");
  EXPECT_EQ(back->path, "/v1/search");
  EXPECT_EQ(back->query, "q=a%20b");
  EXPECT_EQ(back->headers, r.headers);
  EXPECT_EQ(back->body, r.body);

  // Every truncation of the header is refused, never read past its end.
  for (std::size_t cut = 0; cut < wire.size() - r.body.size(); ++cut) {
    EXPECT_FALSE(edge_request_from_wire(wire.substr(0, cut)).ok()) << cut;
  }
  auto with_meta = [](const std::string& meta) {
    std::string w;
    for (int i = 0; i < 4; ++i) w.push_back(static_cast<char>((meta.size() >> (8 * i)) & 0xFF));
    return w + meta;
  };
  EXPECT_FALSE(edge_request_from_wire(with_meta("{}")).ok());
  EXPECT_FALSE(edge_request_from_wire(with_meta(R"({"method":"GET","path":"x"})")).ok());
  EXPECT_FALSE(
      edge_request_from_wire(with_meta(R"({"method":"GET","path":"/","headers":[["a"]]})")).ok());
  EXPECT_FALSE(
      edge_request_from_wire(with_meta(R"({"method":"GET","path":"/","headers":{"a":"b"}})")).ok());
  // The meta as worker.mjs writes it (read without the generic parser) and the same request
  // written otherwise (escapes, UTF-8, another key order: the generic parser) read the same.
  const std::string plain =
      R"({"method":"GET","path":"/v1/manifests","query":"a=1","headers":[["authorization",)"
      R"("Bearer t"],["x-e","caf"]]})";
  const std::string escaped =
      R"({"path":"\/v1\/manifests","method":"G\u0045T","query":"a=1","headers":[[)"
      R"("authorization","Bearer t"],["x-e","caf"]]})";
  for (const std::string& meta : {plain, escaped}) {
    Result<HttpRequest> read = edge_request_from_wire(with_meta(meta) + "b");
    ASSERT_TRUE(read.ok()) << meta;
    EXPECT_EQ(read->method, "GET");
    EXPECT_EQ(read->path, "/v1/manifests");
    EXPECT_EQ(read->query, "a=1");
    EXPECT_EQ(read->headers, (HttpHeaders{{"authorization", "Bearer t"}, {"x-e", "caf"}}));
    EXPECT_EQ(read->body, "b");
  }
  Result<HttpRequest> utf8 = edge_request_from_wire(
      with_meta(R"({"method":"GET","path":"/","query":"","headers":[["x","caf)"
                "\xc3\xa9"
                R"("]]})"));
  ASSERT_TRUE(utf8.ok());
  EXPECT_EQ(utf8->headers[0].second, "caf\xc3\xa9");
  for (const char* bad : {R"({"method":"GET","path":"/","query":"","headers":[["a"]]})",
                          R"({"method":"","path":"/","query":"","headers":[]})",
                          R"({"method":"GET","path":"x","query":"","headers":[]})",
                          R"({"method":"GET","path":"/","query":"","headers":[]}x)",
                          R"({"method":"GET","path":"/","query":"","headers":[["a","b"],]})"}) {
    EXPECT_FALSE(edge_request_from_wire(with_meta(bad)).ok()) << bad;
  }
  std::string huge = "\xff\xff\xff\x7f";
  EXPECT_EQ(edge_request_from_wire(huge).error().code, ErrorCode::kTooLarge);

  auto edge = service();
  EdgeStep s = edge->begin_wire(with_meta("[]"), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 400);
  EXPECT_EQ(error_code_of(s), "BAD_REQUEST");
  edge->end(s.handle);
  s = edge->begin_wire(edge_request_to_wire(get("/healthz")), kNow, kRandom);
  EXPECT_EQ(s.response.status, 200);
  edge->end(s.handle);
}

TEST(EdgeService, StepWireCarriesMetaAndPayload) {
  EdgeStep s;
  s.handle = 7;
  s.action = EdgeAction::kRespond;
  s.response.status = 201;
  s.response.headers = {{"A", "b"}, {"Q", "say \"hi\" \\ tab\t"}, {"U", "caf\xc3\xa9"}};
  s.response.body = "hello";
  s.log = std::string("bad \xff byte");  // not UTF-8: replaced, never thrown on
  std::string wire = edge_step_to_wire(s);
  ASSERT_GE(wire.size(), 8u);
  uint32_t meta_len = static_cast<unsigned char>(wire[0]) | static_cast<unsigned char>(wire[1])
                                                                << 8;
  uint32_t payload_len = static_cast<unsigned char>(wire[4]);
  ASSERT_EQ(wire.size(), 8 + meta_len + payload_len);
  Json meta = *parse_json(wire.substr(8, meta_len));
  EXPECT_EQ(meta["handle"], 7);
  EXPECT_EQ(meta["action"], "respond");
  EXPECT_EQ(meta["status"], 201);
  // No name repeats: an object, as the host hands it to its Response.
  EXPECT_EQ(meta["headers"], Json::parse(R"({"A":"b","Q":"say \"hi\" \\ tab\t","U":"caf\u00e9"})"));
  EXPECT_EQ(meta["log"], "bad \xef\xbf\xbd byte");
  EXPECT_EQ(meta["background"], false);
  EXPECT_FALSE(meta.contains("ended"));
  EXPECT_EQ(wire.substr(8 + meta_len), "hello");

  // The same step read where it lies: the payload is a view of the body, not a copy.
  std::string joined;
  EdgeStepWire in_place = edge_step_wire(s, &joined);
  EXPECT_EQ(in_place.meta, wire.substr(8, meta_len));
  EXPECT_EQ(in_place.payload.data(), s.response.body.data());
  EXPECT_EQ(in_place.payload.size(), s.response.body.size());

  // A name repeated (case-insensitively): the pairs, in order. An ended request says so.
  s.response.headers = {{"Set-Cookie", "a=1"}, {"X", "y"}, {"set-cookie", "b=2"}};
  s.ended = true;
  meta = *parse_json(edge_step_wire(s, &joined).meta);
  EXPECT_EQ(meta["headers"],
            Json::parse(R"([["Set-Cookie","a=1"],["X","y"],["set-cookie","b=2"]])"));
  EXPECT_EQ(meta["ended"], true);

  s.action = EdgeAction::kRedis;
  s.redis_bytes = "*1\r\n$4\r\nPING\r\n";
  s.new_connection = true;
  wire = edge_step_to_wire(s);
  meta_len = static_cast<unsigned char>(wire[0]);
  meta = *parse_json(wire.substr(8, meta_len));
  EXPECT_EQ(meta["action"], "redis");
  EXPECT_EQ(meta["new_connection"], true);
  EXPECT_EQ(wire.substr(8 + meta_len), s.redis_bytes);
}

// ---- authentication ----------------------------------------------------------------------------

TEST(EdgeService, MissingOrBadTokensAre401WithoutTouchingRedis) {
  auto edge = service();
  std::string other_key = *mint_caller_token("alice", std::string(40, 'w'), kKid, kNow, 60'000);
  std::string expired = *mint_caller_token("alice", kSecret, kKid, kNow - 7'200'000, 60'000);
  for (const std::string& authz :
       {std::string(), std::string("Bearer"), std::string("Basic YWxpY2U6cHc="),
        std::string("Bearer garbage"), "Bearer " + other_key, "Bearer " + expired,
        std::string("Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.")}) {
    HttpRequest r = get("/v1/manifests");
    if (!authz.empty()) r.headers.emplace_back("Authorization", authz);
    EdgeStep s = edge->begin(r, kNow, kRandom);
    ASSERT_EQ(s.action, EdgeAction::kRespond) << authz;
    EXPECT_EQ(s.response.status, 401) << authz;
    EXPECT_EQ(error_code_of(s), "UNAUTHENTICATED");
    EXPECT_EQ(header(s.response, "WWW-Authenticate").rfind("Bearer", 0), 0u);
    edge->end(s.handle);
  }
  EXPECT_EQ(edge->open_requests(), 0u);
}

// ---- reads -------------------------------------------------------------------------------------

// Feeds `bytes` one byte at a time: every split point of the reply.
EdgeStep feed_bytewise(EdgeService& edge, uint32_t handle, const std::string& bytes) {
  EdgeStep s;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    s = edge.feed(handle, bytes.substr(i, 1), kNow);
    if (i + 1 < bytes.size()) {
      EXPECT_EQ(s.action, EdgeAction::kRead) << "at byte " << i;
    }
  }
  return s;
}

TEST(EdgeService, AReadIsOneRoundTripWithAuthThenTheL1AnswersUntilItsTtl) {
  auto edge = service();
  std::string alice = token_for("alice");
  EdgeStep s = edge->begin(get("/v1/manifests", alice), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_TRUE(s.new_connection);
  EXPECT_EQ(s.redis_bytes.rfind("*2\r\n$4\r\nAUTH\r\n$8\r\nredis-pw\r\n*", 0), 0u);
  // The script by its SHA-1, not its text (NOSCRIPT falls back to EVAL: see below).
  EXPECT_NE(
      s.redis_bytes.find("$10\r\nEVALSHA_RO\r\n$40\r\n" +
                         std::string(schema_asset_sha1_of(schema_asset("lua/discovery_read.lua")))),
      std::string::npos);
  EXPECT_EQ(s.redis_bytes.find("$4\r\nEVAL\r\n"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:grants:member/alice"), std::string::npos);
  uint32_t h = s.handle;

  s = feed_bytewise(*edge, h, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)));
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  EXPECT_FALSE(s.background);  // fresh: nothing to revalidate
  Json b = body_of(s);
  ASSERT_EQ(b["connections"].size(), 1u);
  EXPECT_EQ(b["connections"][0]["id"], "docs");
  EXPECT_EQ(b["connections"][0]["status"], "fresh");
  edge->end(h);

  // Within the TTL: answered at once, the same data, no Redis.
  s = edge->begin(get("/v1/manifests", alice), kNow + 1'999, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(body_of(s)["connections"][0]["id"], "docs");
  edge->end(s.handle);

  // Another caller is never answered from alice's entry.
  s = edge->begin(get("/v1/manifests", token_for("bob")), kNow + 1, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("grants:member/bob"), std::string::npos);
  edge->end(s.handle);

  // Past the TTL: Redis again.
  s = edge->begin(get("/v1/manifests", alice), kNow + 2'000, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

RespValue unchanged_reply(const std::string& member, int64_t epoch, std::vector<int64_t> leases) {
  std::vector<RespValue> flags;
  for (int64_t l : leases) flags.push_back(I(l));
  return A({S("quiver.discovery.unchanged"), S("member/" + member), I(epoch), A(std::move(flags))});
}

TEST(EdgeService, PastTheTtlTheCopyIsCheckedAgainstTheVersionsInOneRoundTrip) {
  auto edge = service();
  const std::string alice = token_for("alice");
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 5, kMinute), kNow);
  ASSERT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  edge->end(s.handle);

  // Past the TTL: the same script, with the versions the copy was read at; no lease asked for
  // (the entry is fresh, its lease changes nothing).
  const int64_t later = kNow + 3'000;
  s = edge->begin(get("/v1/manifests", alice), later, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("$12\r\nif-unchanged\r\n$7\r\nready:1\r\n$1\r\n5\r\n$1\r\n1\r\n"
                               "$4\r\ndocs\r\n$1\r\n5\r\n"),
            std::string::npos)
      << s.redis_bytes;
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(unchanged_reply("alice", 5, {})), later);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "revalidated");
  // Byte for byte what a full read renders at that moment.
  auto other = service();
  EdgeStep full = read_manifests(*other, alice, discovery_reply("alice", 5, kMinute), later);
  EXPECT_EQ(s.response.body, full.response.body);
  EXPECT_EQ(header(s.response, "ETag"), header(full.response, "ETag"));
  EXPECT_EQ(edge->revalidated(), 1u);
  edge->end(s.handle);
  other->end(full.handle);

  // Revalidated: within the TTL again, answered from L1.
  s = edge->begin(get("/v1/manifests", alice), later + 1'000, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  edge->end(s.handle);

  // Something changed: the script answers the full read in the same round trip.
  const int64_t changed_at = later + 3'000;
  s = edge->begin(get("/v1/manifests", alice), changed_at, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("if-unchanged"), std::string::npos);
  RespValue newer = discovery_reply("alice", 6, 0);
  newer.elements[6].elements[0].elements[4] = A({S("tool:search")});  // a toggled preference
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(newer), changed_at);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  EXPECT_EQ(edge->revalidate_changed(), 1u);
  edge->end(s.handle);

  // Past the max age of the copy read at changed_at: a full read, no versions sent.
  s = edge->begin(get("/v1/manifests", alice), changed_at + 30'000, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_bytes.find("if-unchanged"), std::string::npos);
  edge->end(s.handle);
}

TEST(EdgeService, WithTheL1OffNoRenderedAnswerIsKept) {
  // TTL 0: an answer could never be a fresh hit, so none is encoded and stored; with a TTL, one.
  const std::string alice = token_for("alice");
  auto off = service({{"QUIVER_L1_TTL_MS", "0"}});
  EdgeStep s = read_manifests(*off, alice, discovery_reply("alice", 5, 20 * kMinute), kNow);
  ASSERT_EQ(s.response.status, 200);
  off->end(s.handle);
  EXPECT_EQ(off->answers().stats().entries, 0u);
  auto on = service({});
  s = read_manifests(*on, alice, discovery_reply("alice", 5, 20 * kMinute), kNow);
  ASSERT_EQ(s.response.status, 200);
  on->end(s.handle);
  EXPECT_EQ(on->answers().stats().entries, 1u);
}

TEST(EdgeService, ALeaseIsAskedForOnlyWhereItChangesTheAnswer) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  const std::string alice = token_for("alice");
  // Stale: the answer queues a revalidation unless a refresh holds the lease.
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 5, 20 * kMinute), kNow);
  ASSERT_EQ(s.response.status, 200);
  EXPECT_TRUE(s.background);
  edge->end(s.handle);
  s = edge->begin(get("/v1/manifests", alice), kNow + 1, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  // The lease of (docs, shared) is named after the versions.
  EXPECT_NE(s.redis_bytes.find("$4\r\ndocs\r\n$1\r\n5\r\n$4\r\ndocs\r\n$6\r\nshared\r\n"),
            std::string::npos);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(unchanged_reply("alice", 5, {1})), kNow + 1);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "revalidated");
  EXPECT_FALSE(s.background);  // the lease is held now: refreshing, nothing queued
  auto other = service({{"QUIVER_L1_TTL_MS", "0"}});
  EdgeStep full =
      read_manifests(*other, alice, discovery_reply("alice", 5, 20 * kMinute, true), kNow + 1);
  EXPECT_EQ(s.response.body, full.response.body);
  edge->end(s.handle);
  other->end(full.handle);

  // An "unchanged" answer whose leases do not match what was asked is a store failure (served
  // from the L1 copy within its stale-if-error period, as for any broken reply).
  s = edge->begin(get("/v1/manifests", alice), kNow + 2, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(unchanged_reply("alice", 5, {})), kNow + 2);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "stale-if-error");
  edge->end(s.handle);
}

// An "unchanged" answer read under a newer epoch (another member's change bumped it) goes to L1
// as what it is: the copy at the epoch read. Its answers are then kept like those of any read
// of that epoch (before, the L1 held the kept copy's old epoch, so every answer rendered from it
// was refused by the answers' newer epoch and rendered again on each request).
TEST(EdgeService, AnUnchangedAnswerGoesToL1UnderTheEpochItRead) {
  auto edge = service();
  const std::string alice = token_for("alice");
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 5, kMinute), kNow);
  edge->end(s.handle);
  const int64_t later = kNow + 3'000;
  s = edge->begin(get("/v1/manifests", alice), later, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(unchanged_reply("alice", 6, {})), later);
  ASSERT_EQ(header(s.response, "X-Quiver-Cache"), "revalidated");
  edge->end(s.handle);
  EXPECT_EQ(edge->cache().stats().epoch, 6);
  const uint64_t superseded = edge->answers().stats().superseded;

  // Another view of the same read, within the TTL: from the L1 snapshot, its answer kept ...
  s = edge->begin(get("/v1/manifests", alice, "view=mcp"), later + 100, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(header(s.response, "Age"), "<absent>");  // rendered, not repeated
  const std::string body = s.response.body;
  edge->end(s.handle);
  EXPECT_EQ(edge->answers().stats().superseded, superseded);
  // ... and repeated to the same request.
  const uint64_t hits = edge->answers().stats().hits;
  s = edge->begin(get("/v1/manifests", alice, "view=mcp"), later + 200, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "Age"), "0");
  EXPECT_EQ(s.response.body, body);
  EXPECT_EQ(edge->answers().stats().hits, hits + 1);
  edge->end(s.handle);
}

// An "unchanged" answer whose leases were read again goes to L1 with them: within the TTL the
// copy renders what a full read with that lease renders (before, such a copy was not kept).
TEST(EdgeService, AnUnchangedAnswerGoesToL1WithTheLeasesItRead) {
  auto edge = service();
  const std::string alice = token_for("alice");
  // Stale: its lease matters.
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 5, 20 * kMinute), kNow);
  EXPECT_TRUE(s.background);
  edge->end(s.handle);
  const int64_t later = kNow + 3'000;
  s = edge->begin(get("/v1/manifests", alice), later, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(unchanged_reply("alice", 5, {1})), later);
  ASSERT_EQ(header(s.response, "X-Quiver-Cache"), "revalidated");
  EXPECT_FALSE(s.background);  // a refresh holds the lease
  edge->end(s.handle);

  s = edge->begin(get("/v1/manifests", alice, "view=mcp"), later + 100, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_FALSE(s.background);
  auto other = service();
  EdgeStep full = other->begin(get("/v1/manifests", alice, "view=mcp"), later + 100, kRandom);
  full = other->feed(full.handle,
                     "+OK\r\n" + encode_reply(discovery_reply("alice", 5, 20 * kMinute, true)),
                     later + 100);
  EXPECT_EQ(s.response.body, full.response.body);
  EXPECT_EQ(header(s.response, "ETag"), header(full.response, "ETag"));
  edge->end(s.handle);
  other->end(full.handle);
}

TEST(EdgeService, ConditionalReadsCanBeTurnedOff) {
  auto edge = service({{"QUIVER_L1_VALIDATE_MAX_AGE_MS", "0"}});
  const std::string alice = token_for("alice");
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 5, kMinute), kNow);
  edge->end(s.handle);
  s = edge->begin(get("/v1/manifests", alice), kNow + 3'000, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_bytes.find("if-unchanged"), std::string::npos);
  edge->end(s.handle);
}

// The headers an answer is made of (not the ones that say where it came from or name the request).
HttpHeaders answer_headers(const HttpResponse& r) {
  HttpHeaders out;
  for (const auto& [name, value] : r.headers) {
    if (name != "X-Quiver-Cache" && name != "X-Request-Id") out.emplace_back(name, value);
  }
  return out;
}

// `request` answered by a new edge from a full read replying `reply`, at `now`.
EdgeStep full_render(const HttpRequest& request, const RespValue& reply, int64_t now) {
  auto other = service();
  EdgeStep s = other->begin(request, now, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  s = other->feed(s.handle, "+OK\r\n" + encode_reply(reply), now);
  EXPECT_EQ(s.action, EdgeAction::kRespond);
  other->end(s.handle);
  return s;
}

// `request` past the TTL: a conditional read, answered "unchanged" with `leases`.
EdgeStep revalidated(EdgeService& edge, const HttpRequest& request, int64_t now,
                     std::vector<int64_t> leases = {}) {
  EdgeStep s = edge.begin(request, now, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("if-unchanged"), std::string::npos);
  s = edge.feed(s.handle, "+OK\r\n" + encode_reply(unchanged_reply("alice", 5, std::move(leases))),
                now);
  EXPECT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "revalidated");
  edge.end(s.handle);
  return s;
}

void expect_same_answer(const EdgeStep& got, const EdgeStep& want) {
  EXPECT_EQ(got.response.status, want.response.status);
  EXPECT_EQ(got.response.body, want.response.body);
  EXPECT_EQ(answer_headers(got.response), answer_headers(want.response));
  EXPECT_EQ(got.background, want.background);
}

uint64_t healthz_spliced(EdgeService& edge, int64_t now) {
  EdgeStep s = edge.begin(get("/healthz"), now, kRandom);
  edge.end(s.handle);
  return body_of(s)["l1"].value("revalidated_spliced", uint64_t{999});
}

// An unchanged conditional read answers with the answer rendered from the same kept copy, its
// clock fields recomputed (shared/discovery_render.h splice_rendered): byte for byte what a
// full read renders at that moment, HEAD and If-None-Match included; at a transition (here the
// entry turning stale) it renders, then splices again from that render.
TEST(EdgeService, ARevalidatedAnswerIsSplicedFromTheRenderOfTheSameCopy) {
  auto edge = service();
  const std::string alice = token_for("alice");
  // Fresh until kNow + 20 s (refresh-ahead long past), then stale.
  const int64_t age = 15 * kMinute - 20'000;
  const RespValue reply = discovery_reply("alice", 5, age);
  for (const std::string& query : {std::string(), std::string("view=mcp")}) {
    SCOPED_TRACE(query);
    auto view_edge = service();
    EdgeStep s = view_edge->begin(get("/v1/manifests", alice, query), kNow, kRandom);
    s = view_edge->feed(s.handle, "+OK\r\n" + encode_reply(reply), kNow);
    ASSERT_EQ(s.response.status, 200);
    view_edge->end(s.handle);
    // Past the L1 TTL each time (2 s), the answers' L1 included.
    uint64_t spliced = 0;
    for (int64_t now : {kNow + 2'000, kNow + 4'999, kNow + 9'001, kNow + 19'999}) {
      expect_same_answer(revalidated(*view_edge, get("/v1/manifests", alice, query), now),
                         full_render(get("/v1/manifests", alice, query), reply, now));
      EXPECT_EQ(view_edge->revalidated_spliced(), ++spliced);
    }
    // At the transition: rendered (and a revalidation queued), not spliced; stale, the lease is
    // asked for ...
    EdgeStep stale =
        revalidated(*view_edge, get("/v1/manifests", alice, query), kNow + 22'000, {0});
    expect_same_answer(stale,
                       full_render(get("/v1/manifests", alice, query), reply, kNow + 22'000));
    EXPECT_TRUE(stale.background);
    EXPECT_EQ(view_edge->revalidated_spliced(), spliced);
    // ... then spliced from that render (past the isolate's claim on that revalidation).
    expect_same_answer(
        revalidated(*view_edge, get("/v1/manifests", alice, query), kNow + 27'500, {0}),
        full_render(get("/v1/manifests", alice, query), reply, kNow + 27'500));
    EXPECT_EQ(view_edge->revalidated_spliced(), ++spliced);
    EXPECT_EQ(healthz_spliced(*view_edge, kNow + 27'501), spliced);
  }

  // HEAD, If-None-Match and one connection's manifest, spliced from the GET's render.
  EdgeStep s = read_manifests(*edge, alice, reply, kNow);
  const std::string etag = header(s.response, "ETag");
  edge->end(s.handle);
  HttpRequest head = get("/v1/manifests", alice);
  head.method = "HEAD";
  EdgeStep h = revalidated(*edge, head, kNow + 3'000);
  EXPECT_TRUE(h.response.body.empty());
  expect_same_answer(h, full_render(head, reply, kNow + 3'000));
  HttpRequest inm = get("/v1/manifests", alice);
  inm.headers.emplace_back("If-None-Match", etag);
  EdgeStep n = revalidated(*edge, inm, kNow + 6'000);
  EXPECT_EQ(n.response.status, 304);
  expect_same_answer(n, full_render(inm, reply, kNow + 6'000));
  EXPECT_EQ(edge->revalidated_spliced(), 2u);

  HttpRequest one = get("/v1/mcp-connections/docs/manifest", alice, "view=mcp");
  s = edge->begin(one, kNow + 7'000, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(reply), kNow + 7'000);
  ASSERT_EQ(s.response.status, 200);
  edge->end(s.handle);
  expect_same_answer(revalidated(*edge, one, kNow + 10'000),
                     full_render(one, reply, kNow + 10'000));
  EXPECT_EQ(edge->revalidated_spliced(), 3u);
}

// The splice is tied to the kept copy the answer was rendered from: a lease that reads otherwise,
// or a new full read, renders.
TEST(EdgeService, AnAnswerIsSplicedOnlyFromTheSameCopyWithTheSameLeases) {
  auto edge = service();
  const std::string alice = token_for("alice");
  const RespValue stale = discovery_reply("alice", 5, 20 * kMinute);
  EdgeStep s = read_manifests(*edge, alice, stale, kNow);
  edge->end(s.handle);
  // A refresh took the lease: `refresh: in_progress`, rendered.
  expect_same_answer(revalidated(*edge, get("/v1/manifests", alice), kNow + 3'000, {1}),
                     full_render(get("/v1/manifests", alice),
                                 discovery_reply("alice", 5, 20 * kMinute, true), kNow + 3'000));
  EXPECT_EQ(edge->revalidated_spliced(), 0u);
  // The lease free again: the first render's answer, spliced.
  expect_same_answer(revalidated(*edge, get("/v1/manifests", alice), kNow + 6'000, {0}),
                     full_render(get("/v1/manifests", alice), stale, kNow + 6'000));
  EXPECT_EQ(edge->revalidated_spliced(), 1u);
}

TEST(EdgeService, AnL1HitRepeatsTheRenderedAnswerWithItsAge) {
  auto edge = service();
  std::string alice = token_for("alice");
  EdgeStep s = edge->begin(get("/v1/manifests", alice, "view=mcp"), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 1, kMinute)), kNow);
  ASSERT_EQ(s.response.status, 200);
  std::string body = s.response.body;
  std::string etag = header(s.response, "ETag");
  edge->end(s.handle);

  s = edge->begin(get("/v1/manifests", alice, "view=mcp"), kNow + 1'500, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(s.response.body, body);           // as rendered 1.5 s ago ...
  EXPECT_EQ(header(s.response, "Age"), "1");  // ... and says so
  EXPECT_EQ(header(s.response, "ETag"), etag);
  EXPECT_EQ(edge->answers().stats().hits, 1u);
  edge->end(s.handle);

  // Conditional and HEAD requests are answered from it too.
  HttpRequest conditional = get("/v1/manifests", alice, "view=mcp");
  conditional.headers.emplace_back("If-None-Match", etag);
  s = edge->begin(conditional, kNow + 1'600, kRandom);
  EXPECT_EQ(s.response.status, 304);
  EXPECT_TRUE(s.response.body.empty());
  EXPECT_EQ(header(s.response, "Content-Type"), "<absent>");
  edge->end(s.handle);
  HttpRequest head = get("/v1/manifests", alice, "view=mcp");
  head.method = "HEAD";
  s = edge->begin(head, kNow + 1'600, kRandom);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_TRUE(s.response.body.empty());
  edge->end(s.handle);

  // Another query of the same caller is rendered afresh from the L1 snapshot.
  s = edge->begin(get("/v1/manifests", alice), kNow + 1'700, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(header(s.response, "Age"), "<absent>");
  EXPECT_NE(s.response.body, body);
  edge->end(s.handle);
}

TEST(EdgeService, ARenderedAnswerIsNotRepeatedPastAStatusChange) {
  auto edge = service();
  std::string alice = token_for("alice");
  // Fresh for another 500 ms.
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 1, 15 * kMinute - 500), kNow);
  ASSERT_EQ(body_of(s)["connections"][0]["status"], "fresh");
  EXPECT_FALSE(s.background);
  edge->end(s.handle);

  s = edge->begin(get("/v1/manifests", alice), kNow + 499, kRandom);
  EXPECT_EQ(header(s.response, "Age"), "0");  // the rendered answer, still right
  edge->end(s.handle);

  // Within the L1 TTL but past fresh_until: rendered again from the snapshot, stale, queued.
  s = edge->begin(get("/v1/manifests", alice), kNow + 500, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(header(s.response, "Age"), "<absent>");
  EXPECT_EQ(body_of(s)["connections"][0]["status"], "stale");
  EXPECT_TRUE(s.background);
  edge->end(s.handle);
}

TEST(EdgeService, RenderedAnswersArePerCaller) {
  auto edge = service();
  for (const char* member : {"alice", "bob"}) {
    EdgeStep s = edge->begin(get("/v1/manifests", token_for(member)), kNow, kRandom);
    ASSERT_EQ(s.action, EdgeAction::kRedis) << member;  // bob is never answered with alice's
    s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply(member, 1, 0)), kNow);
    EXPECT_EQ(body_of(s)["principal"], std::string("member/") + member);
    edge->end(s.handle);
  }
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("bob")), kNow + 1, kRandom);
  EXPECT_EQ(body_of(s)["principal"], "member/bob");
  EXPECT_EQ(header(s.response, "Age"), "0");
  edge->end(s.handle);
}

TEST(EdgeService, WithoutAPasswordThereIsNoAuth) {
  Json env = Json::object();
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kSecret}}).dump();
  EdgeService edge(edge_settings_from_env(env.dump()));
  EdgeStep s = edge.begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_bytes.rfind("*9\r\n$10\r\nEVALSHA_RO", 0), 0u);
  s = edge.feed(s.handle, encode_reply(discovery_reply("alice", 1, 0)), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  edge.end(s.handle);
}

TEST(EdgeService, ConcurrentRequestsKeepTheirOwnState) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  EdgeStep a = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  EdgeStep b = edge->begin(get("/v1/manifests", token_for("bob")), kNow, kRandom);
  ASSERT_EQ(a.action, EdgeAction::kRedis);
  ASSERT_EQ(b.action, EdgeAction::kRedis);
  ASSERT_NE(a.handle, b.handle);
  std::string ra = "+OK\r\n" + encode_reply(discovery_reply("alice", 1, 0));
  std::string rb = "+OK\r\n" + encode_reply(discovery_reply("bob", 1, 0));
  // Interleaved halves, bob finishing first.
  EXPECT_EQ(edge->feed(a.handle, ra.substr(0, ra.size() / 2), kNow).action, EdgeAction::kRead);
  EXPECT_EQ(edge->feed(b.handle, rb.substr(0, rb.size() / 2), kNow).action, EdgeAction::kRead);
  EdgeStep done_b = edge->feed(b.handle, rb.substr(rb.size() / 2), kNow);
  EdgeStep done_a = edge->feed(a.handle, ra.substr(ra.size() / 2), kNow);
  ASSERT_EQ(done_a.action, EdgeAction::kRespond);
  ASSERT_EQ(done_b.action, EdgeAction::kRespond);
  EXPECT_EQ(body_of(done_a)["principal"], "member/alice");
  EXPECT_EQ(body_of(done_b)["principal"], "member/bob");
  // A reply for another member (a crossed connection) is never served.
  EdgeStep c = edge->begin(get("/v1/manifests", token_for("carol")), kNow, kRandom);
  EdgeStep wrong =
      edge->feed(c.handle, "+OK\r\n" + encode_reply(discovery_reply("bob", 1, 0)), kNow);
  ASSERT_EQ(wrong.action, EdgeAction::kRespond);
  EXPECT_EQ(wrong.response.status, 503);
  EXPECT_EQ(error_code_of(wrong), "STORE_UNAVAILABLE");
  for (uint32_t h : {a.handle, b.handle, c.handle}) edge->end(h);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// A namespace in a key layout the edge does not read (shared/layout.h: discovery_read.lua's
// {'quiver.layout.v1', value, key}): 503 STORE_UNAVAILABLE saying so, the record in the log,
// never an empty list.
TEST(EdgeService, AnUnknownKeyLayoutIs503NeverAnEmptyList) {
  auto edge = service();
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle,
                 "+OK\r\n" + encode_reply(A({S("quiver.layout.v1"), S("v3:ready:1"),
                                             S("quiver:{default}:layout")})),
                 kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
  EXPECT_NE(body_of(s)["error"]["message"].get<std::string>().find("key layout"), std::string::npos)
      << s.response.body;
  EXPECT_EQ(s.response.body.find("v3:ready"), std::string::npos) << "details stay in the log";
  EXPECT_NE(s.log.find("`v3:ready:1`"), std::string::npos) << s.log;
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

TEST(EdgeService, RedisDownServesTheL1CopyMarkedStaleElse503) {
  auto edge = service();
  std::string alice = token_for("alice");
  // No copy yet: 503.
  EdgeStep s = read_manifests_failing(*edge, alice, "connect timed out", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
  EXPECT_NE(s.log.find("connect timed out"), std::string::npos);
  edge->end(s.handle);

  s = read_manifests(*edge, alice, discovery_reply("alice", 1, 14 * kMinute + 45'000), kNow);
  ASSERT_EQ(s.response.status, 200);
  edge->end(s.handle);

  // 30 s later Redis is gone: the copy is served, marked, with no revalidation attempted.
  int64_t later = kNow + 30'000;
  s = read_manifests_failing(*edge, alice, "connection refused", later);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "stale-if-error");
  EXPECT_EQ(header(s.response, "Cache-Control"), "private, no-cache");
  EXPECT_EQ(header(s.response, "Age"), "30");
  EXPECT_FALSE(s.background);
  // The statuses are computed now: the entry turned stale in the meantime, and says so.
  EXPECT_EQ(body_of(s)["connections"][0]["status"], "stale");
  edge->end(s.handle);

  // Beyond the stale-if-error period: 503 again.
  int64_t much_later = kNow + 60'000;
  s = read_manifests_failing(*edge, alice, "connection refused", much_later);
  EXPECT_EQ(s.response.status, 503);
  edge->end(s.handle);
}

TEST(EdgeService, BrokenRepliesAndFailedAuthAreStoreFailures) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  std::string alice = token_for("alice");
  struct Case {
    std::string bytes;
    const char* log;
  };
  for (const Case& c : std::vector<Case>{
           {"-WRONGPASS invalid username-password pair\r\n" +
                encode_reply(discovery_reply("alice", 1, 0)),
            "STORE_UNAVAILABLE: Redis refused AUTH: WRONGPASS"},
           {"+OK\r\n:12\r\n", "discovery reply"},
           {"+OK\r\n!garbage\r\n", ""},
           {"+OK\r\n" + encode_reply(discovery_reply("alice", 1, 0)) + "+EXTRA\r\n",
            "more than was asked"},
       }) {
    EdgeStep s = edge->begin(get("/v1/manifests", alice), kNow, kRandom);
    s = edge->feed(s.handle, c.bytes, kNow);
    ASSERT_EQ(s.action, EdgeAction::kRespond) << c.bytes;
    EXPECT_EQ(s.response.status, 503) << c.bytes;
    EXPECT_NE(s.log.find(c.log), std::string::npos) << s.log;
    EXPECT_EQ(s.log.find("redis-pw"), std::string::npos);
    edge->end(s.handle);
  }
}

TEST(EdgeService, StoreFailuresLogTheAnsweredCodeOncePerWindowThenACount) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  std::string alice = token_for("alice");
  const std::string oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
  auto read_once = [&](int64_t at) {
    EdgeStep s = edge->begin(get("/v1/manifests", alice), at, kRandom);
    s = edge->feed(s.handle, "+OK\r\n" + oom, at);
    EXPECT_EQ(s.response.status, 503);
    EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
    edge->end(s.handle);
    return s.log;
  };
  // The code answered, not the cause's internal one (UPSTREAM_UNAVAILABLE, INTERNAL).
  std::string first = read_once(kNow);
  EXPECT_EQ(first.rfind("STORE_UNAVAILABLE: ", 0), 0u) << first;
  EXPECT_NE(first.find("OOM"), std::string::npos) << first;
  for (int i = 1; i <= 25; ++i) EXPECT_EQ(read_once(kNow + i * 100), "");
  std::string summary = read_once(kNow + kStoreLogWindowMs + 1);
  EXPECT_EQ(summary, first + " (and 25 more like it in the last 10 s)");
  EXPECT_EQ(read_once(kNow + kStoreLogWindowMs + 2), "");
}

TEST(EdgeService, AnAuthThatTimesOutIsLoggedAsATimeoutNotARefusal) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  ASSERT_NE(s.redis_bytes.find("AUTH"), std::string::npos);
  s = edge->fail(s.handle, "read timed out after 2000 ms", kNow);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_NE(s.log.find("AUTH timed out"), std::string::npos) << s.log;
  EXPECT_EQ(s.log.find("AUTH failed"), std::string::npos) << s.log;
  edge->end(s.handle);
  // A Redis still loading its data set cannot take AUTH: not a credentials problem either.
  s = edge->begin(get("/v1/manifests", token_for("alice")), kNow + kStoreLogWindowMs, kRandom);
  const std::string loading = "-LOADING Redis is loading the dataset in memory\r\n";
  s = edge->feed(s.handle, loading + loading, kNow + kStoreLogWindowMs);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_NE(s.log.find("could not take AUTH: LOADING"), std::string::npos) << s.log;
  edge->end(s.handle);
}

TEST(EdgeService, AfterARedisTimeoutOneRequestProbesAndTheOthersFailFast) {
  auto edge = service({{"QUIVER_REDIS_FAIL_FAST_MS", "1500"}});
  std::string alice = token_for("alice");
  std::string bob = token_for("bob");
  // alice has an L1 copy; bob has none.
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 1, 0), kNow);
  ASSERT_EQ(s.response.status, 200);
  edge->end(s.handle);

  // Redis stalls: a read times out (after the host's REDIS_TIMEOUT_MS).
  int64_t t = kNow + 5'000;
  s = read_manifests_failing(*edge, bob, "read timed out after 2000 ms", t);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_NE(s.log.find("fail-fast"), std::string::npos) << s.log;
  edge->end(s.handle);
  EXPECT_TRUE(edge->fail_fast().open(t));

  // The next request is the one probe: it goes to Redis.
  EdgeStep probe = edge->begin(get("/v1/manifests", bob), t + 10, kRandom);
  ASSERT_EQ(probe.action, EdgeAction::kRedis);
  // Meanwhile: no waiting. alice gets her copy, bob a 503, both marked fail-fast.
  s = edge->begin(get("/v1/manifests", alice), t + 20, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "fail-fast");
  EXPECT_EQ(header(s.response, "Cache-Control"), "private, no-cache");
  edge->end(s.handle);
  s = edge->begin(get("/v1/manifests", bob), t + 30, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "fail-fast");
  edge->end(s.handle);
  // A manual refresh fails fast too.
  HttpRequest refresh = get("/v1/mcp-connections/docs/refresh-tools", bob);
  refresh.method = "POST";
  s = edge->begin(refresh, t + 40, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  edge->end(s.handle);

  // The probe times out too: the window is extended; another request becomes the probe.
  s = edge->fail(probe.handle, "read timed out after 2000 ms", t + 2'010);
  edge->end(probe.handle);
  EXPECT_TRUE(edge->fail_fast().open(t + 3'000));
  probe = edge->begin(get("/v1/manifests", bob), t + 3'000, kRandom);
  ASSERT_EQ(probe.action, EdgeAction::kRedis);
  // It is answered: Redis is back, the window closes, everyone reads Redis again.
  s = edge->feed(probe.handle, "+OK\r\n" + encode_reply(discovery_reply("bob", 2, 0)), t + 3'010);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  edge->end(probe.handle);
  EXPECT_FALSE(edge->fail_fast().open(t + 3'020));
  s = edge->begin(get("/v1/manifests", token_for("carol")), t + 3'020, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  edge->end(s.handle);
}

TEST(EdgeService, TheFailFastWindowIsBoundedAndCanBeTurnedOff) {
  auto edge = service({{"QUIVER_REDIS_FAIL_FAST_MS", "1000"}});
  std::string bob = token_for("bob");
  EdgeStep s = read_manifests_failing(*edge, bob, "connect timed out after 1000 ms", kNow);
  edge->end(s.handle);
  EdgeStep probe = edge->begin(get("/v1/manifests", bob), kNow + 1, kRandom);
  ASSERT_EQ(probe.action, EdgeAction::kRedis);
  // The window ends even while the probe hangs: requests wait on Redis again.
  s = edge->begin(get("/v1/manifests", bob), kNow + 1'001, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  edge->end(s.handle);
  edge->end(probe.handle);
  // A refused connection is not a stall: no window.
  s = read_manifests_failing(*edge, bob, "connection refused", kNow + 5'000);
  edge->end(s.handle);
  EXPECT_FALSE(edge->fail_fast().open(kNow + 5'001));

  auto off = service({{"QUIVER_REDIS_FAIL_FAST_MS", "0"}});
  s = read_manifests_failing(*off, bob, "read timed out after 2000 ms", kNow);
  off->end(s.handle);
  EXPECT_FALSE(off->fail_fast().open(kNow + 1));
  EXPECT_FALSE(edge_settings_from_env(env_json({{"QUIVER_REDIS_FAIL_FAST_MS", "600000"}})).ok());
}

TEST(EdgeService, AStaleEntryIsServedAndOneRevalidationQueuedInTheBackground) {
  auto edge = service();
  std::string alice = token_for("alice");
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 1, 20 * kMinute), kNow);
  uint32_t h = s.handle;
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(body_of(s)["connections"][0]["status"], "stale");
  EXPECT_TRUE(s.background);

  // The background work reuses the request's connection: no new one, no AUTH.
  s = edge->background(h, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_FALSE(s.new_connection);
  EXPECT_EQ(s.redis_bytes.find("AUTH"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("revalidate-gate:docs:shared"), std::string::npos);
  s = feed_bytewise(*edge, h, enqueue_reply("queued"));
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_TRUE(s.log.empty()) << s.log;
  edge->end(h);

  // From L1, within the claim period: served, nothing more to queue from this isolate.
  s = edge->begin(get("/v1/manifests", alice), kNow + 500, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_FALSE(s.background);
  edge->end(s.handle);
}

TEST(EdgeService, AFailedBackgroundQueueIsRetriedByTheNextStaleRead) {
  auto edge = service();
  std::string alice = token_for("alice");
  EdgeStep s = read_manifests(*edge, alice, discovery_reply("alice", 1, 20 * kMinute), kNow);
  uint32_t h = s.handle;
  ASSERT_TRUE(s.background);
  s = edge->background(h, kNow);
  s = edge->fail(h, "reset by peer", kNow);
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_NE(s.log.find("reset by peer"), std::string::npos);
  edge->end(h);

  // Served from L1: the claim was released, so this read queues again, on a new connection.
  s = edge->begin(get("/v1/manifests", alice), kNow + 100, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  ASSERT_TRUE(s.background);
  h = s.handle;
  s = edge->background(h, kNow + 100);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_TRUE(s.new_connection);
  EXPECT_EQ(s.redis_bytes.rfind("*2\r\n$4\r\nAUTH", 0), 0u);
  s = edge->feed(h, "+OK\r\n" + enqueue_reply("already_queued"), kNow + 100);
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_TRUE(s.log.empty()) << s.log;
  edge->end(h);
}

TEST(EdgeService, ANewerEpochSeenByAnyReadRetiresOlderL1Entries) {
  auto edge = service();
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 1, 0)), kNow);
  edge->end(s.handle);
  s = edge->begin(get("/v1/manifests", token_for("bob")), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("bob", 2, 0)), kNow);
  edge->end(s.handle);
  // A grant changed (epoch 2): alice's copy from epoch 1 is not served any more.
  s = edge->begin(get("/v1/manifests", token_for("alice")), kNow + 10, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  edge->end(s.handle);
}

TEST(EdgeService, SearchReadsTheSameSnapshotAndRanksTools) {
  auto edge = service();
  EdgeStep s =
      edge->begin(get("/v1/search", token_for("alice"), "q=search%20fetch&limit=5"), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 1, 0)), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200) << s.response.body;
  Json b = body_of(s);
  ASSERT_EQ(b["results"].size(), 2u) << s.response.body;
  EXPECT_EQ(b["results"][0]["connection_id"], "docs");
  edge->end(s.handle);
}

TEST(EdgeService, RefreshQueuesThroughTheSameConnection) {
  auto edge = service();
  HttpRequest post = get("/v1/mcp-connections/docs/refresh-tools", token_for("alice"));
  post.method = "POST";
  EdgeStep s = edge->begin(post, kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  uint32_t h = s.handle;
  s = edge->feed(h, "+OK\r\n" + encode_reply(discovery_reply("alice", 1, 0)), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_FALSE(s.new_connection);
  EXPECT_NE(s.redis_bytes.find("manual"), std::string::npos);
  s = edge->feed(h, enqueue_reply("queued"), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 202);
  EXPECT_EQ(body_of(s)["status"], "queued");
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  edge->end(h);

  // Redis gone between the read and the queue: 503, not a false "queued".
  s = edge->begin(post, kNow, kRandom);
  h = s.handle;
  s = edge->feed(h, "+OK\r\n" + encode_reply(discovery_reply("alice", 1, 0)), kNow);
  s = edge->fail(h, "closed", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  edge->end(h);
}

// ---- OAuth callbacks ---------------------------------------------------------------------------

HttpRequest callback(const std::string& query) {
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/oauth/callback";
  r.query = query;
  return r;
}

TEST(EdgeService, AnOAuthCallbackIsQueuedInOneScriptAndTheAgentsOutcomeShown) {
  auto edge = service();
  // No caller token: the state authenticates the browser.
  EdgeStep s =
      edge->begin(callback("state=st-1&code=the-code&iss=https%3A%2F%2Fas.example"), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(
      s.redis_bytes.find(std::string(schema_asset_sha1_of(schema_asset("lua/oauth_callback.lua")))),
      std::string::npos);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:oauth-callbacks"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:oauth-result:" + sha256_hex("st-1")),
            std::string::npos);
  uint32_t h = s.handle;
  s = edge->feed(h, "+OK\r\n" + encode_reply(A({S("queued"), S("1-0")})), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(header(s.response, "Referrer-Policy"), "no-referrer");
  EXPECT_NE(header(s.response, "Content-Security-Policy").find("default-src 'none'"),
            std::string::npos);
  EXPECT_NE(s.response.body.find("finishing the connection"), std::string::npos);
  EXPECT_EQ(s.response.body.find("the-code"), std::string::npos);
  edge->end(h);

  // An agent reported: the page says so (escaped), nothing queued again.
  s = edge->begin(callback("state=st-1&code=the-code"), kNow, kRandom);
  s = edge->feed(
      s.handle,
      "+OK\r\n" +
          encode_reply(A({S("result"), S(R"({"status":"failed","message":"<b>denied</b>"})")})),
      kNow);
  EXPECT_EQ(s.response.status, 400);
  EXPECT_NE(s.response.body.find("&lt;b&gt;denied&lt;/b&gt;"), std::string::npos);
  edge->end(s.handle);
  s = edge->begin(callback("state=st-1&code=the-code"), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(A({S("result"), S(R"({"status":"connected",
                                                                 "connection":"Linear"})")})),
                 kNow);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_NE(s.response.body.find("connected to Linear"), std::string::npos);
  edge->end(s.handle);

  // Redis gone: a 503 page, never "connected".
  s = edge->begin(callback("state=st-1&code=c"), kNow, kRandom);
  s = edge->fail(s.handle, "connection refused", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

TEST(EdgeService, HostileOAuthCallbacksAreRefusedWithoutTouchingRedis) {
  auto edge = service();
  for (const std::string& q :
       {std::string("code=abc"), std::string("state=s&code=a&code=b"),
        std::string("state=s&state=t&code=a"), "state=s&code=" + std::string(5000, 'c'),
        "state=" + std::string(600, 's') + "&code=a", std::string("state=s"),
        std::string("state=s&code=a&error=x"), std::string("state=s%00&code=a"),
        std::string("state=%zz&code=a"), std::string(9000, 'q')}) {
    EdgeStep s = edge->begin(callback(q), kNow, kRandom);
    ASSERT_EQ(s.action, EdgeAction::kRespond) << q.substr(0, 40);
    EXPECT_EQ(s.response.status, 400) << q.substr(0, 40);
    EXPECT_EQ(header(s.response, "Content-Type"), "text/html; charset=utf-8");
    edge->end(s.handle);
  }
  HttpRequest post = callback("state=s&code=a");
  post.method = "POST";
  EdgeStep s = edge->begin(post, kNow, kRandom);
  EXPECT_EQ(s.response.status, 405);
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// ---- refresh webhooks --------------------------------------------------------------------------

constexpr char kWebhookSecret[] = "edge-webhook-secret-0123456789abcdef";

HttpRequest signed_webhook(const std::string& body, int64_t signed_at = kNow) {
  HttpRequest r;
  r.method = "POST";
  r.path = kWebhookRefreshPath;
  r.body = body;
  Result<std::string> sig = sign_webhook(kWebhookSecret, "default", body, signed_at);
  EXPECT_TRUE(sig.ok());
  r.headers.emplace_back("x-quiver-signature", sig.ok() ? *sig : "");
  return r;
}

std::unique_ptr<EdgeService> webhook_service() {
  return service({{"QUIVER_WEBHOOK_SECRETS", Json::object({{"ci", kWebhookSecret}}).dump()}});
}

TEST(EdgeService, AWebhookIsVerifiedThenAppliedInOneScript) {
  auto edge = webhook_service();
  const std::string body = R"({"connections": ["docs", {"connection_id": "mail",
                               "principal": "member/bob"}], "reason": "deploy"})";
  EdgeStep s = edge->begin(signed_webhook(body), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_TRUE(s.new_connection);
  EXPECT_NE(s.redis_bytes.find("AUTH"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find(
                std::string(schema_asset_sha1_of(schema_asset("lua/webhook_refresh.lua")))),
            std::string::npos);                                // the script, by its SHA-1
  EXPECT_EQ(s.redis_bytes.find("deploy"), std::string::npos);  // the sender's reason: logs only
  uint32_t h = s.handle;
  s = edge->feed(
      h,
      "+OK\r\n" +
          encode_reply(A({S("accepted"), A({S("docs"), S("shared"), S("queued"), S("1"), S("mail"),
                                            S("member/bob"), S("in_progress"), S("0")})})),
      kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 202);
  EXPECT_FALSE(s.background);
  Json b = body_of(s);
  EXPECT_EQ(b["status"], "accepted");
  ASSERT_EQ(b["refreshes"].size(), 2u);
  EXPECT_EQ(b["refreshes"][0], Json::parse(R"({"connection_id": "docs", "principal": "shared",
                                               "status": "queued", "marked_stale": true})"));
  EXPECT_EQ(b["refreshes"][1]["status"], "in_progress");
  EXPECT_NE(s.log.find("deploy"), std::string::npos);
  edge->end(h);

  // Seen before: 401.
  s = edge->begin(signed_webhook(body), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(A({S("replay")})), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 401);
  EXPECT_NE(body_of(s)["error"]["message"].get<std::string>().find("replay"), std::string::npos);
  edge->end(s.handle);

  // Redis gone, or answering nonsense: 503, never a false "accepted".
  s = edge->begin(signed_webhook(body), kNow, kRandom);
  s = edge->fail(s.handle, "connection refused", kNow);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
  edge->end(s.handle);
  s = edge->begin(signed_webhook(body), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(I(7)), kNow);
  EXPECT_EQ(s.response.status, 503);
  edge->end(s.handle);
  // A namespace the store lost (the script read its record first): 503 that says so, never 202
  // with every target `unknown_connection`.
  s = edge->begin(signed_webhook(body), kNow, kRandom);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(A({S("quiver.namespace.v1"), S("missing")})),
                 kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
  EXPECT_NE(body_of(s)["error"]["message"].get<std::string>().find("being restored"),
            std::string::npos);
  edge->end(s.handle);
  // A key layout the edge does not read (shared/layout.h): 503 as well, nothing written.
  s = edge->begin(signed_webhook(body), kNow, kRandom);
  s = edge->feed(s.handle,
                 "+OK\r\n" + encode_reply(A({S("quiver.layout.v1"), S("v2:filling:1"),
                                             S("quiver:{default}:layout")})),
                 kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  EXPECT_EQ(error_code_of(s), "STORE_UNAVAILABLE");
  EXPECT_NE(body_of(s)["error"]["message"].get<std::string>().find("key layout"),
            std::string::npos);
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// The deprecated v1 signature (no namespace) is still accepted in this release, and the log says
// so, so that senders can be found and moved to v2.
TEST(EdgeService, ADeprecatedV1WebhookIsAcceptedAndLogged) {
  auto edge = webhook_service();
  const std::string body = R"({"connection_id": "docs"})";
  HttpRequest old_form = signed_webhook(body);
  old_form.headers = {{"X-Quiver-Signature", *sign_webhook_v1(kWebhookSecret, body, kNow)}};
  EdgeStep s = edge->begin(std::move(old_form), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle,
                 "+OK\r\n" + encode_reply(A({S("accepted"),
                                             A({S("docs"), S("shared"), S("queued"), S("1")})})),
                 kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 202);
  EXPECT_NE(s.log.find("deprecated v1 signature"), std::string::npos) << s.log;
  edge->end(s.handle);
  // A v2 request logs no deprecation.
  s = edge->begin(signed_webhook(body), kNow, kRandom);
  s = edge->feed(s.handle,
                 "+OK\r\n" + encode_reply(A({S("accepted"),
                                             A({S("docs"), S("shared"), S("queued"), S("1")})})),
                 kNow);
  EXPECT_EQ(s.response.status, 202);
  EXPECT_EQ(s.log.find("deprecated"), std::string::npos) << s.log;
  edge->end(s.handle);
}

TEST(EdgeService, BadWebhooksAreRefusedWithoutTouchingRedis) {
  auto edge = webhook_service();
  const std::string body = R"({"connection_id": "docs"})";
  auto answer = [&](HttpRequest r, std::unique_ptr<EdgeService>& e) {
    EdgeStep s = e->begin(std::move(r), kNow, kRandom);
    EXPECT_EQ(s.action, EdgeAction::kRespond);
    e->end(s.handle);
    return s;
  };
  HttpRequest no_sig = signed_webhook(body);
  no_sig.headers.clear();
  EXPECT_EQ(answer(no_sig, edge).response.status, 401);
  HttpRequest tampered = signed_webhook(body);
  tampered.body = R"({"connection_id": "mail"})";
  EdgeStep s = answer(tampered, edge);
  EXPECT_EQ(s.response.status, 401);
  EXPECT_EQ(s.response.body.find(kWebhookSecret), std::string::npos);
  EXPECT_EQ(s.log.find(kWebhookSecret), std::string::npos);
  EXPECT_EQ(answer(signed_webhook(body, kNow - 10 * kMinute), edge).response.status, 401);
  HttpRequest other_key = signed_webhook(body);
  other_key.headers = {{"X-Quiver-Signature",
                        *sign_webhook("another-secret-0123456789abcdef", "default", body, kNow)}};
  EXPECT_EQ(answer(other_key, edge).response.status, 401);
  // Signed for another namespace that shares the secret: not a request for this one.
  HttpRequest other_ns = signed_webhook(body);
  other_ns.headers = {{"X-Quiver-Signature", *sign_webhook(kWebhookSecret, "team-b", body, kNow)}};
  EdgeStep refused = answer(other_ns, edge);
  EXPECT_EQ(refused.response.status, 401);
  EXPECT_NE(refused.response.body.find("namespace default"), std::string::npos);
  EXPECT_EQ(answer(signed_webhook("{\"connection_id\": 7}"), edge).response.status, 400);
  EXPECT_EQ(answer(signed_webhook("not json"), edge).response.status, 400);
  HttpRequest get_it = signed_webhook(body);
  get_it.method = "GET";
  s = answer(get_it, edge);
  EXPECT_EQ(s.response.status, 405);
  EXPECT_EQ(header(s.response, "Allow"), "POST");
  // A caller token is no webhook signature.
  HttpRequest bearer = get(kWebhookRefreshPath, token_for("alice"));
  bearer.method = "POST";
  bearer.body = body;
  EXPECT_EQ(answer(bearer, edge).response.status, 401);

  // Off unless configured: 404, as an endpoint that does not exist.
  auto off = service();
  s = answer(signed_webhook(body), off);
  EXPECT_EQ(s.response.status, 404);
  EXPECT_EQ(error_code_of(s), "NOT_FOUND");
}

TEST(EdgeService, HostMistakesAndEscapedExceptionsBecome500sNeverACrash) {
  auto edge = service();
  EdgeStep s = edge->feed(999, "+OK\r\n", kNow);
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_NE(s.log.find("unknown"), std::string::npos);

  s = edge->begin(get("/healthz"), kNow, kRandom);
  uint32_t h = s.handle;
  s = edge->feed(h, "+OK\r\n", kNow);      // nothing was asked of Redis
  EXPECT_EQ(s.action, EdgeAction::kDone);  // already responded
  edge->end(h);

  s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  h = s.handle;
  s = edge->internal_error(h, "std::bad_alloc");
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 500);
  EXPECT_EQ(error_code_of(s), "INTERNAL");
  EXPECT_NE(s.log.find("bad_alloc"), std::string::npos);
  EXPECT_EQ(edge->internal_error(h, "again").action, EdgeAction::kDone);
  edge->end(h);
  EXPECT_EQ(edge->internal_error(0, "before a handle").response.status, 500);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// ---- EVALSHA and NOSCRIPT -----------------------------------------------------------------------

const char kNoScript[] = "-NOSCRIPT No matching script. Please use EVAL.\r\n";

TEST(EdgeService, NoScriptIsAnsweredByOneEvalOnTheSameConnection) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  std::string alice = token_for("alice");
  EdgeStep s = edge->begin(get("/v1/manifests", alice), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  uint32_t h = s.handle;
  s = edge->feed(h, "+OK\r\n" + std::string(kNoScript), kNow);
  // The same read again, as EVAL with the script's text, without AUTH or a new connection.
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_FALSE(s.new_connection);
  EXPECT_EQ(s.redis_bytes.rfind("*9\r\n$7\r\nEVAL_RO\r\n", 0), 0u);
  EXPECT_EQ(s.redis_bytes.find("AUTH"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find(std::string(schema_asset("lua/discovery_read.lua"))),
            std::string::npos);
  s = feed_bytewise(*edge, h, encode_reply(discovery_reply("alice", 5, 20 * kMinute)));
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  EXPECT_EQ(body_of(s)["connections"][0]["status"], "stale");
  ASSERT_TRUE(s.background);

  // The background enqueue: EVALSHA too; NOSCRIPT again (SCRIPT FLUSH in between) → EVAL.
  s = edge->background(h, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("EVALSHA"), std::string::npos);
  s = edge->feed(h, kNoScript, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_bytes.rfind("*", 0), 0u);
  EXPECT_NE(s.redis_bytes.find("$4\r\nEVAL\r\n"), std::string::npos);
  s = edge->feed(h, enqueue_reply("queued"), kNow);
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_EQ(s.log, "");
  edge->end(h);

  // The L1 snapshot copy holds the EVAL reply alone: with Redis down it serves the stale answer.
  s = read_manifests_failing(*edge, alice, "connection refused", kNow + 1);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "stale-if-error");
  edge->end(s.handle);
}

TEST(EdgeService, ASecondNoScriptIsAStoreErrorNotALoop) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  uint32_t h = s.handle;
  s = edge->feed(h, "+OK\r\n" + std::string(kNoScript), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(h, kNoScript, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 503);
  edge->end(h);
}

TEST(EdgeService, OnlyTheNoScriptCommandsOfAPipelineAreSentAgain) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  RespValue two = discovery_reply("alice", 5, 20 * kMinute);
  // A second stale connection, so that the background pipeline holds two enqueues.
  RespValue second = two.elements[6].elements[0];
  second.elements[0] = S("eeee");
  two.elements[6].elements.push_back(second);
  two.elements[3] = I(2);                      // granted_total
  two.elements[7].elements.push_back(S("1"));  // its connection version
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  uint32_t h = s.handle;
  s = edge->feed(h, "+OK\r\n" + encode_reply(two), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  ASSERT_EQ(body_of(s)["connections"].size(), 2u);
  ASSERT_TRUE(s.background);
  s = edge->background(h, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  // The first was queued; the second met a flushed script cache.
  s = edge->feed(h, enqueue_reply("queued") + kNoScript, kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(s.redis_bytes.rfind("*", 0), 0u);
  EXPECT_NE(s.redis_bytes.find("revalidate-gate:eeee"), std::string::npos);
  EXPECT_EQ(s.redis_bytes.find("revalidate-gate:docs"), std::string::npos);
  s = edge->feed(h, enqueue_reply("already_queued"), kNow);
  EXPECT_EQ(s.action, EdgeAction::kDone);
  EXPECT_EQ(s.log, "");
  edge->end(h);
}

TEST(EdgeService, ARepeatedReadRendersFromTheRenderCacheWithTheSameBytes) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  std::string bodies[2];
  for (std::string& body : bodies) {
    EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
    s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 1, kMinute)), kNow);
    ASSERT_EQ(s.response.status, 200);
    EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");  // from Redis both times
    body = s.response.body;
    edge->end(s.handle);
  }
  EXPECT_EQ(bodies[0], bodies[1]);
  ASSERT_NE(edge->render_cache(), nullptr);
  EXPECT_EQ(edge->render_cache()->stats().hits, 1u);
  EXPECT_EQ(edge->render_cache()->size(), 1u);
}

// ---- manifest bodies stored apart (shared/discovery_redis.h, "manifest bodies") -----------------

TEST(EdgeService, ABodyTheIsolateLacksIsReadInASecondRoundThenServedFromItsBodyCache) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  const std::string body = manifest_json({"search", "fetch"});
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  const uint32_t h = s.handle;
  s = edge->feed(
      h, "+OK\r\n" + encode_reply(discovery_reply_naming_body("alice", 1, kMinute, body)), kNow);
  // The metadata named a body this isolate does not hold: one MGET on the same connection.
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_FALSE(s.new_connection);
  EXPECT_EQ(s.redis_bytes.find("AUTH"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("MGET"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:body:" + sha256_hex(body)), std::string::npos);
  s = feed_bytewise(*edge, h, encode_reply(A({S(body)})));
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  Json c = body_of(s)["connections"][0];
  EXPECT_EQ(c["status"], "fresh");
  EXPECT_EQ(c["manifest"]["tools"]["items"].size(), 2u);
  edge->end(h);
  EXPECT_EQ(edge->bodies().entries(), 1u);

  // Bob's record names the same content: the script's metadata alone answers him.
  s = read_manifests(*edge, token_for("bob"), discovery_reply_naming_body("bob", 1, kMinute, body),
                     kNow + 1);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(body_of(s)["connections"][0]["manifest"]["tools"]["items"].size(), 2u);
  edge->end(s.handle);

  // Records written before bodies were stored apart still answer as they did.
  s = read_manifests(*edge, token_for("carol"), discovery_reply("carol", 1, kMinute), kNow + 2);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(body_of(s)["connections"][0]["manifest"]["tools"]["items"].size(), 2u);
  edge->end(s.handle);

  Json health = body_of(edge->begin(get("/healthz"), kNow, kRandom))["l1"];
  EXPECT_EQ(health["body_entries"], 1);
  EXPECT_EQ(health["body_hits"], 1);
}

TEST(EdgeService, ABodyMissingFromTheStoreIsAnErrorEntryThatRevalidatesNeverAnEmptyList) {
  auto edge = service();
  const std::string body = manifest_json({"search"});
  // Evicted: nil. Bytes that are not what the body's name says count as missing too.
  int64_t now = kNow;
  for (const RespValue& reply : {RespValue::nil(), S("{\"tools\":{}}")}) {
    SCOPED_TRACE(reply.debug_string());
    now += 10'000;  // past the isolate's revalidation claim of the case before
    EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), now, kRandom);
    const uint32_t h = s.handle;
    s = edge->feed(
        h, "+OK\r\n" + encode_reply(discovery_reply_naming_body("alice", 1, kMinute, body)), now);
    ASSERT_EQ(s.action, EdgeAction::kRedis);
    s = edge->feed(h, encode_reply(A({reply})), now);
    ASSERT_EQ(s.action, EdgeAction::kRespond);
    EXPECT_EQ(s.response.status, 200);
    Json c = body_of(s)["connections"][0];
    EXPECT_EQ(c["status"], "error");
    EXPECT_EQ(c["error"]["code"], "STORE_UNAVAILABLE");
    EXPECT_FALSE(c.contains("manifest"));  // never an empty manifest
    ASSERT_TRUE(s.background);             // the refresh that writes the body again
    s = edge->background(h, now);
    ASSERT_EQ(s.action, EdgeAction::kRedis);
    EXPECT_NE(s.redis_bytes.find("body_missing"), std::string::npos);
    edge->end(h);
    EXPECT_EQ(edge->bodies().entries(), 0u);  // nothing wrong is kept
  }
}

TEST(EdgeService, ABodyRoundThatFailsAnswersFromTheSnapshotMarkedStaleIfError) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "0"}});
  const std::string body = manifest_json({"search"});
  EdgeStep s = edge->begin(get("/v1/manifests", token_for("alice")), kNow, kRandom);
  s = edge->feed(s.handle,
                 "+OK\r\n" + encode_reply(discovery_reply_naming_body("alice", 1, kMinute, body)),
                 kNow);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->fail(s.handle, "connection reset", kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "stale-if-error");
  EXPECT_EQ(header(s.response, "Cache-Control"), "private, no-cache");
  EXPECT_EQ(body_of(s)["connections"][0]["status"], "error");
  EXPECT_FALSE(s.background);
  edge->end(s.handle);
}

}  // namespace
}  // namespace quiver

namespace quiver {
namespace {

HttpRequest mcp_post(const std::string& token, const Json& body) {
  HttpRequest r;
  r.method = "POST";
  r.path = "/mcp";
  r.headers = {{"content-type", "application/json"}};
  if (!token.empty()) r.headers.emplace_back("authorization", "Bearer " + token);
  r.body = body.dump();
  return r;
}

// POST /mcp at the edge (shared/mcp_endpoint.h): the same one-round-trip read and L1 as discovery,
// 401 before Redis.
TEST(EdgeService, McpListsFromTheSameReadAndL1) {
  auto edge = service();
  std::string alice = token_for("alice");
  Json list = Json::object({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}});
  EdgeStep s = edge->begin(mcp_post("", list), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 401);
  EXPECT_EQ(header(s.response, "WWW-Authenticate").rfind("Bearer ", 0), 0u);
  edge->end(s.handle);

  s = edge->begin(mcp_post(alice, list), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:grants:member/alice"), std::string::npos);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "miss");
  Json b = body_of(s);
  ASSERT_EQ(b["result"]["tools"].size(), 2u) << s.response.body;
  EXPECT_EQ(b["result"]["tools"][0]["name"], "docs__search");
  EXPECT_EQ(b["result"]["cacheScope"], "private");
  EXPECT_EQ(b["result"]["ttlMs"], 14 * kMinute);
  edge->end(s.handle);

  // Within the L1 TTL the snapshot is not read again.
  s = edge->begin(mcp_post(alice, list), kNow + 1, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(body_of(s)["result"]["tools"][1]["name"], "docs__fetch");
  edge->end(s.handle);

  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// A list POST's answer is kept like a GET answer and replayed to the same request only: the same
// caller, body bytes (the JSON-RPC id included) and endpoint headers. Another id renders from the
// L1 snapshot; another protocol version header is another request.
TEST(EdgeService, McpListAnswersAreReplayedToTheSameRequestOnly) {
  auto edge = service();
  std::string alice = token_for("alice");
  Json list = Json::object({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}});
  EdgeStep s = edge->begin(mcp_post(alice, list), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  const std::string first = s.response.body;
  edge->end(s.handle);
  EXPECT_EQ(edge->answers().stats().entries, 1u);

  s = edge->begin(mcp_post(alice, list), kNow + 1, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
  EXPECT_EQ(s.response.body, first);
  EXPECT_EQ(edge->answers().stats().hits, 1u);
  edge->end(s.handle);

  Json other = list;
  other["id"] = 2;
  s = edge->begin(mcp_post(alice, other), kNow + 2, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(body_of(s)["id"], 2);
  EXPECT_EQ(body_of(s)["result"]["tools"].size(), 2u);
  EXPECT_EQ(edge->answers().stats().hits, 1u);  // rendered from the snapshot, not replayed
  edge->end(s.handle);

  HttpRequest versioned = mcp_post(alice, list);
  versioned.headers.emplace_back("mcp-protocol-version", "2099-01-01");
  s = edge->begin(versioned, kNow + 3, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(edge->answers().stats().hits, 1u);
  EXPECT_NE(s.response.body, first);  // the endpoint's own answer to that header
  edge->end(s.handle);

  // Bob's identical request is his own.
  s = edge->begin(mcp_post(token_for("bob"), list), kNow + 4, kRandom);
  EXPECT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_EQ(edge->answers().stats().hits, 1u);
  edge->end(s.handle);

  // Only lists are kept (the endpoint says what the body held): a call answered 200 from the
  // snapshot (an unknown tool, refused without a relay) is read afresh each time.
  Json call = Json::object(
      {{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/call"}, {"params", {{"name", "nope__x"}}}});
  const std::size_t kept = edge->answers().stats().entries;
  for (int i = 0; i < 2; ++i) {
    s = edge->begin(mcp_post(alice, call), kNow + 5 + i, kRandom);
    if (s.action == EdgeAction::kRedis) {
      s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)),
                     kNow + 5 + i);
    }
    ASSERT_EQ(s.action, EdgeAction::kRespond);
    EXPECT_EQ(s.response.status, 200);
    EXPECT_EQ(body_of(s)["error"]["code"], kJsonRpcInvalidParams);
    edge->end(s.handle);
  }
  EXPECT_EQ(edge->answers().stats().entries, kept);
  EXPECT_EQ(edge->answers().stats().hits, 1u);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// 48 bytes from the "host's CSPRNG": the request id's and the relay's seed.
const std::string kRelayRandom = std::string(16, '\x5a') + std::string(32, '\x33');

Json tools_call(int id, const std::string& name) {
  return Json::object({{"jsonrpc", "2.0"},
                       {"id", id},
                       {"method", "tools/call"},
                       {"params", {{"name", name}, {"arguments", {{"q", "x"}}}}}});
}

bool is_relay_round(const EdgeStep& s) {
  return s.action == EdgeAction::kRedis && s.redis_bytes.find("BLPOP") != std::string::npos;
}

// Begins a tools/call by alice and answers its snapshot read unless L1 held it: the next step is
// the relay round.
EdgeStep begin_call_request(EdgeService& edge, HttpRequest request,
                            const std::string& random = kRelayRandom, int64_t now = kNow) {
  EdgeStep s = edge.begin(std::move(request), now, random);
  if (is_relay_round(s) || s.action == EdgeAction::kRespond) return s;  // the grant came from L1
  EXPECT_EQ(s.action, EdgeAction::kRedis);  // a read of that one connection: its grant, live
  return edge.feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)), now);
}

EdgeStep begin_call(EdgeService& edge, const Json& body, const std::string& random = kRelayRandom,
                    int64_t now = kNow) {
  return begin_call_request(edge, mcp_post(token_for("alice"), body), random, now);
}

std::string queued_reply() { return encode_reply(A({S("queued"), S("1-0")})); }
std::string popped(const std::string& record) {
  return encode_reply(A({S("quiver:{default}:call-reply:x"), S(record)}));
}
// A relay round's replies (AUTH's, the enqueue's, the BLPOP's) for a call the agent answered
// with one text content, "found".
std::string found_relay_replies() {
  return "+OK\r\n" + queued_reply() +
         popped(relay_reply_record(RelayReply::ok(Json::object(
             {{"content", Json::array({Json::object({{"type", "text"}, {"text", "found"}})})}}))));
}

// The relay round of a call (shared/call_relay.h): one pipeline on a connection of its own,
// EVAL (by text) + BLPOP for the call's deadline, the host told to read that long; the agent's
// reply is the client's answer.
TEST(EdgeService, McpCallsGoThroughTheRedisRelayOnAConnectionOfTheirOwn) {
  auto edge = service();
  EdgeStep s = begin_call(*edge, tools_call(2, "docs__search"));
  ASSERT_EQ(s.action, EdgeAction::kRedis) << s.response.body;
  EXPECT_TRUE(s.new_connection);
  EXPECT_EQ(s.redis_blocks_ms, McpEndpointConfig{}.relay_timeout_ms);
  EXPECT_EQ(s.redis_bytes.rfind("*2\r\n$4\r\nAUTH\r\n", 0), 0u) << s.redis_bytes.substr(0, 40);
  EXPECT_NE(s.redis_bytes.find("$4\r\nEVAL\r\n"), std::string::npos);
  EXPECT_EQ(s.redis_bytes.find("EVALSHA"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:calls"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("$5\r\nBLPOP\r\n"), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("$6\r\n60.000\r\n"), std::string::npos);
  // The upstream's own name goes to the agent, with the caller.
  EXPECT_NE(s.redis_bytes.find("\"name\":\"search\""), std::string::npos);
  EXPECT_NE(s.redis_bytes.find("$5\r\nalice\r\n"), std::string::npos);
  // The rid: SHA-256 of the seed and the call's index, in the reply key.
  const std::string rid = *relay_rid(kRelayRandom.substr(16), 0);
  EXPECT_NE(s.redis_bytes.find("quiver:{default}:call-reply:" + rid), std::string::npos);

  // Bytes arrive in pieces: each read step keeps the long timeout.
  const std::string replies = found_relay_replies();
  s = edge->feed(s.handle, replies.substr(0, 10), kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRead);
  EXPECT_EQ(s.redis_blocks_ms, McpEndpointConfig{}.relay_timeout_ms);
  s = edge->feed(s.handle, replies.substr(10), kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  Json b = body_of(s);
  EXPECT_EQ(b["id"], 2);
  EXPECT_EQ(b["result"]["content"][0]["text"], "found") << s.response.body;
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);

  // The wire carries the wait to the host.
  EdgeStep blocking;
  blocking.action = EdgeAction::kRead;
  blocking.redis_blocks_ms = 1234;
  const std::string wire = edge_step_to_wire(blocking);
  EXPECT_NE(wire.find("\"redis_blocks_ms\":1234"), std::string::npos);
}

// A client that goes away while its call's BLPOP is outstanding: the request ends, and the host
// gets the call's cancel mark to send on a connection of its own (a new handle), best effort.
TEST(EdgeService, AnAbandonedRelayedCallGetsItsCancelMarkOnAFreshConnection) {
  auto edge = service();
  EdgeStep s = begin_call(*edge, tools_call(2, "docs__search"));
  ASSERT_TRUE(is_relay_round(s)) << s.response.body;
  const uint32_t call = s.handle;
  const std::string rid = *relay_rid(kRelayRandom.substr(16), 0);

  EdgeStep cancel = edge->abandon(call, kNow + 1'000);
  ASSERT_EQ(cancel.action, EdgeAction::kRedis) << cancel.log;
  EXPECT_NE(cancel.handle, call);
  EXPECT_TRUE(cancel.new_connection);
  EXPECT_EQ(cancel.redis_blocks_ms, 0);
  // AUTH first (a fresh connection), then one SET of the call's own mark, for the call's
  // remaining time (60 s from kNow) plus the grace.
  EXPECT_EQ(cancel.redis_bytes.rfind("*2\r\n$4\r\nAUTH\r\n", 0), 0u);
  EXPECT_NE(
      cancel.redis_bytes.find(encode_command(
          {"SET", "quiver:{default}:call-cancel:" + rid, "1", "PX",
           std::to_string(McpEndpointConfig{}.relay_timeout_ms - 1'000 + kCallCancelGraceMs)})),
      std::string::npos)
      << cancel.redis_bytes;
  // The abandoned request is gone: its handle is unknown now.
  EXPECT_EQ(edge->feed(call, "+OK\r\n", kNow + 1'001).action, EdgeAction::kDone);
  // The mark's replies in pieces: AUTH's, then SET's.
  EdgeStep more = edge->feed(cancel.handle, "+OK\r\n", kNow + 1'002);
  EXPECT_EQ(more.action, EdgeAction::kRead);
  EdgeStep done = edge->feed(cancel.handle, "+OK\r\n", kNow + 1'003);
  EXPECT_EQ(done.action, EdgeAction::kDone);
  EXPECT_EQ(done.log, "");
  edge->end(cancel.handle);
  EXPECT_EQ(edge->open_requests(), 0u);

  // A mark that cannot be sent is logged, never raised: a refused SET (an edge user without the
  // new rule), a connection that failed.
  auto unsent_mark_log = [&](int id, int64_t at,
                             const std::function<EdgeStep(uint32_t handle)>& answer) {
    EdgeStep call = begin_call(*edge, tools_call(id, "docs__search"), kRelayRandom, at);
    EXPECT_TRUE(is_relay_round(call));
    EdgeStep mark = edge->abandon(call.handle, at + 1);
    EXPECT_EQ(mark.action, EdgeAction::kRedis);
    EdgeStep after = answer(mark.handle);
    EXPECT_EQ(after.action, EdgeAction::kDone);
    EXPECT_NE(after.log.find("cancel mark not sent"), std::string::npos) << after.log;
    edge->end(mark.handle);
    return after.log;
  };
  EXPECT_NE(unsent_mark_log(3, kNow + 2'000,
                            [&](uint32_t h) {
                              return edge->feed(h,
                                                "+OK\r\n-NOPERM this user has no permissions\r\n",
                                                kNow + 2'002);
                            })
                .find("NOPERM"),
            std::string::npos);
  unsent_mark_log(4, kNow + 3'000,
                  [&](uint32_t h) { return edge->fail(h, "connection refused", kNow + 3'002); });
  EXPECT_EQ(edge->open_requests(), 0u);

  // No relayed call outstanding yet (a fresh isolate: the call's snapshot read is in flight):
  // nothing to cancel.
  auto fresh = service();
  EdgeStep read =
      fresh->begin(mcp_post(token_for("alice"), tools_call(5, "docs__search")), kNow, kRelayRandom);
  ASSERT_EQ(read.action, EdgeAction::kRedis);
  ASSERT_FALSE(is_relay_round(read));
  EdgeStep none = fresh->abandon(read.handle, kNow + 1);
  EXPECT_EQ(none.action, EdgeAction::kDone);
  EXPECT_EQ(none.log, "");
  EXPECT_EQ(fresh->open_requests(), 0u);
}

TEST(EdgeService, McpCallFailuresAreTheirOwnJsonRpcErrorsNeverAResult) {
  auto edge = service();
  auto error_of = [](const EdgeStep& s) {
    EXPECT_EQ(s.action, EdgeAction::kRespond) << s.log;
    return body_of(s)["error"];
  };
  // No agent consumes: call_enqueue.lua pushed the agent_unreachable record itself.
  EdgeStep s = begin_call(*edge, tools_call(3, "docs__search"));
  s = edge->feed(s.handle,
                 "+OK\r\n" + encode_reply(A({S("no_agent")})) +
                     popped(relay_reply_record(agent_unreachable_reply())),
                 kNow);
  Json e = error_of(s);
  EXPECT_EQ(e["code"], kMcpErrorAgentUnreachable);
  EXPECT_EQ(e["data"]["code"], kAgentUnreachable);
  edge->end(s.handle);

  // The upstream's own error comes through verbatim.
  s = begin_call(*edge, tools_call(4, "docs__search"));
  s = edge->feed(s.handle,
                 "+OK\r\n" + queued_reply() +
                     popped(relay_reply_record(
                         RelayReply::upstream_error(JsonRpcError{-32603, "boom", Json()}))),
                 kNow);
  e = error_of(s);
  EXPECT_EQ(e["code"], -32603);
  EXPECT_EQ(e["message"], "boom");
  edge->end(s.handle);

  // BLPOP gave up at the deadline: the timeout error.
  s = begin_call(*edge, tools_call(5, "docs__search"));
  s = edge->feed(s.handle, "+OK\r\n" + queued_reply() + encode_reply(RespValue::nil()), kNow);
  e = error_of(s);
  EXPECT_EQ(e["code"], kMcpErrorTimeout);
  edge->end(s.handle);

  // Redis unreachable: STORE_UNAVAILABLE, logged (the detail in the log, not the answer).
  s = begin_call(*edge, tools_call(6, "docs__search"));
  s = edge->fail(s.handle, "connection refused", kNow);
  e = error_of(s);
  EXPECT_EQ(e["code"], kMcpErrorStoreUnavailable);
  EXPECT_EQ(e["data"]["code"], "STORE_UNAVAILABLE");
  EXPECT_EQ(s.response.status, 200);  // a JSON-RPC error, in a 200
  EXPECT_NE(s.log.find("connection refused"), std::string::npos) << s.log;
  EXPECT_EQ(e["message"].get<std::string>().find("refused"), std::string::npos);
  edge->end(s.handle);

  // A command refused (an ACL without the relay's rights): the store's error too.
  s = begin_call(*edge, tools_call(7, "docs__search"));
  s = edge->feed(s.handle,
                 "+OK\r\n-NOPERM this user has no permissions to run the 'eval' command\r\n" +
                     encode_reply(RespValue::nil()),
                 kNow + 10 * kMinute);  // another log window
  e = error_of(s);
  EXPECT_EQ(e["code"], kMcpErrorStoreUnavailable);
  EXPECT_NE(s.log.find("NOPERM"), std::string::npos) << s.log;
  edge->end(s.handle);

  // The host gave no randomness for the rid: nothing is relayed.
  s = begin_call(*edge, tools_call(8, "docs__search"), kRandom);
  e = error_of(s);
  EXPECT_EQ(e["code"], kMcpErrorCallsUnavailable);
  edge->end(s.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// QUIVER_CALL_TIMEOUT_MS is the edge's deadline of a relayed call: the BLPOP's wait, how long the
// host reads for, and the deadline the request carries to the agent (which never starts the call
// later, nor runs it longer). A bad value is refused naming the variable, never the value.
TEST(EdgeService, QuiverCallTimeoutMsIsTheRelayedCallsDeadline) {
  Result<EdgeSettings> settings =
      edge_settings_from_env(env_json({{"QUIVER_CALL_TIMEOUT_MS", "2500"}}));
  ASSERT_TRUE(settings.ok()) << settings.error().message;
  EXPECT_EQ(settings->call_timeout_ms, 2'500);
  EXPECT_EQ(edge_settings_from_env(env_json())->call_timeout_ms,
            McpEndpointConfig{}.relay_timeout_ms);

  auto edge = service({{"QUIVER_CALL_TIMEOUT_MS", "2500"}});
  EdgeStep s = begin_call(*edge, tools_call(2, "docs__search"));
  ASSERT_TRUE(is_relay_round(s)) << s.response.body;
  EXPECT_EQ(s.redis_blocks_ms, 2'500);
  EXPECT_NE(s.redis_bytes.find("$5\r\n2.500\r\n"), std::string::npos);  // BLPOP ... 2.500
  EXPECT_NE(s.redis_bytes.find("\r\n" + std::to_string(kNow + 2'500) + "\r\n"), std::string::npos)
      << "the request's deadline";
  // The BLPOP gave up at that deadline: the timeout error.
  s = edge->feed(s.handle, "+OK\r\n" + queued_reply() + encode_reply(RespValue::nil()),
                 kNow + 2'500);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(body_of(s)["error"]["code"], kMcpErrorTimeout) << s.response.body;
  edge->end(s.handle);

  for (const char* bad : {"0", "3600001", "ten", "-5", "1.5", "60s"}) {
    Result<EdgeSettings> r = edge_settings_from_env(env_json({{"QUIVER_CALL_TIMEOUT_MS", bad}}));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("QUIVER_CALL_TIMEOUT_MS"), std::string::npos)
        << r.error().message;
  }
  Result<EdgeSettings> words =
      edge_settings_from_env(env_json({{"QUIVER_CALL_TIMEOUT_MS", "s3cr3t"}}));
  ASSERT_FALSE(words.ok());
  EXPECT_EQ(words.error().message.find("s3cr3t"), std::string::npos) << words.error().message;
  EXPECT_TRUE(edge_settings_from_env(env_json({{"QUIVER_CALL_TIMEOUT_MS", "3600000"}})).ok());
}

TEST(EdgeService, AnMcpCallRelayedAfterARedisTimeoutFailsFastAsStoreUnavailable) {
  auto edge = service({{"QUIVER_L1_TTL_MS", "600000"}});  // the grant stays in L1 throughout
  EdgeStep s = begin_call(*edge, tools_call(1, "docs__search"));
  ASSERT_TRUE(is_relay_round(s));
  // The host's read gave up (deadline + its own timeout): Redis stalled. The window opens.
  s = edge->fail(s.handle, "read timed out after 62000 ms", kNow + 62'000);
  EXPECT_EQ(body_of(s)["error"]["code"], kMcpErrorStoreUnavailable);
  EXPECT_NE(body_of(s)["error"]["message"].get<std::string>().find("outcome is unknown"),
            std::string::npos);
  const uint32_t first = s.handle;
  // The next call probes Redis...
  EdgeStep probe = begin_call(*edge, tools_call(2, "docs__search"), kRelayRandom, kNow + 62'001);
  ASSERT_TRUE(is_relay_round(probe));
  // ...while another fails fast without waiting, saying it was not relayed.
  EdgeStep third = begin_call(*edge, tools_call(3, "docs__search"), kRelayRandom, kNow + 62'002);
  ASSERT_EQ(third.action, EdgeAction::kRespond);
  Json e = body_of(third)["error"];
  EXPECT_EQ(e["code"], kMcpErrorStoreUnavailable) << third.response.body;
  EXPECT_NE(e["message"].get<std::string>().find("not relayed"), std::string::npos);
  EXPECT_EQ(header(third.response, "X-Quiver-Cache"), "fail-fast");
  edge->end(first);
  edge->end(probe.handle);
  edge->end(third.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

TEST(EdgeService, ABatchRelaysEachCallInItsOwnRoundWithItsOwnRid) {
  auto edge = service();
  Json batch = Json::array({tools_call(1, "docs__search"), tools_call(2, "docs__fetch")});
  HttpRequest post = mcp_post(token_for("alice"), batch);
  post.headers.emplace_back("mcp-protocol-version", "2025-03-26");
  EdgeStep s = edge->begin(post, kNow, kRelayRandom);
  std::vector<std::string> rids;
  for (int round = 0; round < 8 && s.action == EdgeAction::kRedis; ++round) {
    if (!is_relay_round(s)) {  // a snapshot read
      s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)),
                     kNow);
      continue;
    }
    EXPECT_TRUE(s.new_connection);
    const std::string key = "quiver:{default}:call-reply:";
    const std::size_t at = s.redis_bytes.find(key);
    ASSERT_NE(at, std::string::npos);
    rids.push_back(s.redis_bytes.substr(at + key.size(), 64));
    s = edge->feed(s.handle,
                   "+OK\r\n" + queued_reply() +
                       popped(relay_reply_record(RelayReply::ok(
                           Json::object({{"n", static_cast<int64_t>(rids.size())}})))),
                   kNow);
  }
  ASSERT_EQ(s.action, EdgeAction::kRespond) << s.response.body;
  ASSERT_EQ(rids.size(), 2u);
  EXPECT_NE(rids[0], rids[1]);
  Json b = body_of(s);
  ASSERT_TRUE(b.is_array()) << s.response.body;
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0]["result"]["n"], 1);
  EXPECT_EQ(b[1]["result"]["n"], 2);
  edge->end(s.handle);
}

// ---- event-stream answers
// ------------------------------------------------------------------------

// A /mcp POST whose Accept names both answers, as MCP clients send it.
HttpRequest mcp_post_streaming(const std::string& token, const Json& body) {
  HttpRequest r = mcp_post(token, body);
  r.headers.emplace_back("accept", "application/json, text/event-stream");
  return r;
}

// One `event: message` per JSON-RPC message, in order (a body that is not such events: nothing).
std::vector<Json> sse_messages(const std::string& body) {
  std::vector<Json> out;
  std::size_t at = 0;
  while (at < body.size()) {
    const std::string head = "event: message\ndata: ";
    if (body.compare(at, head.size(), head) != 0) return {};
    const std::size_t end = body.find("\n\n", at);
    if (end == std::string::npos) return {};
    Result<Json> message = parse_json(body.substr(at + head.size(), end - at - head.size()));
    if (!message.ok()) return {};
    out.push_back(*message);
    at = end + 2;
  }
  return out;
}

// A client that takes an event stream (its Accept names text/event-stream) gets the head of one
// on the step that sends the relay round, before the BLPOP waits: 200, text/event-stream,
// no-store, X-Accel-Buffering: no and the request's id, with the keep-alive to write meanwhile.
// The answer is then the stream's one event. The wire carries it all to the host.
TEST(EdgeService, ARelayedCallOpensAnEventStreamBeforeItWaitsWhenTheClientTakesOne) {
  auto edge = service();
  EdgeStep s = begin_call_request(
      *edge, mcp_post_streaming(token_for("alice"), tools_call(2, "docs__search")));
  ASSERT_TRUE(is_relay_round(s)) << s.response.body;
  ASSERT_TRUE(s.open_stream);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "Content-Type"), "text/event-stream");
  EXPECT_EQ(header(s.response, "Cache-Control"), "no-store");
  EXPECT_EQ(header(s.response, "X-Accel-Buffering"), "no");
  const std::string request_id = header(s.response, "X-Request-Id");
  EXPECT_EQ(request_id, "5a5a5a5a5a5a5a5a");
  EXPECT_TRUE(s.response.body.empty());
  EXPECT_EQ(s.keepalive_ms, 1'000);
  EXPECT_EQ(s.keepalive, kMcpSseKeepalive);
  EXPECT_EQ(s.redis_blocks_ms, McpEndpointConfig{}.relay_timeout_ms);

  const std::string wire = edge_step_to_wire(s);
  const uint32_t meta_len =
      static_cast<unsigned char>(wire[0]) | static_cast<unsigned char>(wire[1]) << 8;
  Json meta = *parse_json(wire.substr(8, meta_len));
  EXPECT_EQ(meta["action"], "redis");
  EXPECT_EQ(meta["stream"]["status"], 200);
  EXPECT_EQ(meta["stream"]["keepalive_ms"], 1'000);
  EXPECT_EQ(meta["stream"]["keepalive"], kMcpSseKeepalive);
  EXPECT_NE(meta["stream"]["headers"].dump().find("text/event-stream"), std::string::npos);
  EXPECT_EQ(wire.substr(8 + meta_len), s.redis_bytes);

  const std::string replies = found_relay_replies();
  s = edge->feed(s.handle, replies.substr(0, 10), kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRead);
  EXPECT_FALSE(s.open_stream);  // opened once
  EXPECT_EQ(edge_step_to_wire(s).find("\"stream\""), std::string::npos);
  s = edge->feed(s.handle, replies.substr(10), kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  EXPECT_EQ(header(s.response, "Content-Type"), "text/event-stream");
  std::vector<Json> events = sse_messages(s.response.body);
  ASSERT_EQ(events.size(), 1u) << s.response.body;
  EXPECT_EQ(events[0]["id"], 2);
  EXPECT_EQ(events[0]["result"]["content"][0]["text"], "found");
  edge->end(s.handle);

  // The keep-alive interval is QUIVER_MCP_KEEPALIVE_MS, bounded; a bad one names the variable.
  auto quick = service({{"QUIVER_MCP_KEEPALIVE_MS", "250"}});
  s = begin_call_request(*quick,
                         mcp_post_streaming(token_for("alice"), tools_call(3, "docs__search")));
  ASSERT_TRUE(s.open_stream);
  EXPECT_EQ(s.keepalive_ms, 250);
  quick->end(s.handle);
  for (const char* bad : {"99", "60001", "0", "1s"}) {
    Result<EdgeSettings> r = edge_settings_from_env(env_json({{"QUIVER_MCP_KEEPALIVE_MS", bad}}));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("QUIVER_MCP_KEEPALIVE_MS"), std::string::npos);
  }
  EXPECT_EQ(edge->open_requests(), 0u);
  EXPECT_EQ(quick->open_requests(), 0u);
}

// Without text/event-stream in Accept: today's JSON answer, no stream. Nothing that does not wait
// on a relay opens one: lists, and every refusal before the relay keep their JSON and status.
TEST(EdgeService, OnlyACallAboutToWaitOpensAStreamNeverAListOrAnEarlyError) {
  auto edge = service();
  HttpRequest json_only = mcp_post(token_for("alice"), tools_call(2, "docs__search"));
  json_only.headers.emplace_back("accept", "application/json");
  EdgeStep s = begin_call_request(*edge, json_only);
  ASSERT_TRUE(is_relay_round(s));
  EXPECT_FALSE(s.open_stream);
  s = edge->feed(s.handle,
                 "+OK\r\n" + queued_reply() +
                     popped(relay_reply_record(RelayReply::ok(Json::object({{"n", 1}})))),
                 kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  EXPECT_EQ(body_of(s)["result"]["n"], 1);
  edge->end(s.handle);

  // A list: one snapshot read (no stream), a JSON answer.
  auto fresh = service();
  Json list = Json::object({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}});
  s = fresh->begin(mcp_post_streaming(token_for("alice"), list), kNow, kRelayRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  EXPECT_FALSE(s.open_stream);
  s = fresh->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)), kNow);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_FALSE(s.open_stream);
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  EXPECT_EQ(body_of(s)["result"]["tools"].size(), 2u) << s.response.body;
  fresh->end(s.handle);

  // A call refused from the snapshot (an unknown tool): JSON, never relayed.
  s = begin_call_request(*fresh, mcp_post_streaming(token_for("alice"), tools_call(3, "nope__x")));
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_FALSE(s.open_stream);
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  EXPECT_EQ(body_of(s)["error"]["code"], kJsonRpcInvalidParams);
  fresh->end(s.handle);

  // No token: 401 JSON. A bad protocol version header: 400 JSON.
  s = fresh->begin(mcp_post_streaming("", tools_call(4, "docs__search")), kNow, kRelayRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 401);
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  fresh->end(s.handle);
  HttpRequest bad_version = mcp_post_streaming(token_for("alice"), tools_call(5, "docs__search"));
  bad_version.headers.emplace_back("mcp-protocol-version", "1999-01-01");
  s = fresh->begin(bad_version, kNow, kRelayRandom);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 400);
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  fresh->end(s.handle);

  // The fail-fast window open: refused before any wait, so JSON too.
  auto stalled = service({{"QUIVER_L1_TTL_MS", "600000"}});
  s = begin_call_request(*stalled,
                         mcp_post_streaming(token_for("alice"), tools_call(6, "docs__search")));
  ASSERT_TRUE(s.open_stream);
  s = stalled->fail(s.handle, "read timed out after 62000 ms", kNow + 62'000);
  const uint32_t timed_out = s.handle;
  EdgeStep probe = begin_call(*stalled, tools_call(7, "docs__search"), kRelayRandom, kNow + 62'001);
  ASSERT_TRUE(is_relay_round(probe));
  s = begin_call_request(*stalled,
                         mcp_post_streaming(token_for("alice"), tools_call(8, "docs__search")),
                         kRelayRandom, kNow + 62'002);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_FALSE(s.open_stream);
  EXPECT_EQ(header(s.response, "Content-Type"), "application/json");
  EXPECT_EQ(body_of(s)["error"]["code"], kMcpErrorStoreUnavailable);
  stalled->end(s.handle);
  stalled->end(probe.handle);
  stalled->end(timed_out);
  EXPECT_EQ(edge->open_requests(), 0u);
  EXPECT_EQ(fresh->open_requests(), 0u);
  EXPECT_EQ(stalled->open_requests(), 0u);
}

// Once the stream is open, every outcome is an event in it (status 200): the store's failure,
// the timeout, an internal error; a batch's answers are one event each; a client gone still
// gets its call's cancel mark.
TEST(EdgeService, AfterTheStreamOpenedEveryOutcomeIsAnEvent) {
  auto edge = service();
  EdgeStep s = begin_call_request(
      *edge, mcp_post_streaming(token_for("alice"), tools_call(2, "docs__search")));
  ASSERT_TRUE(s.open_stream);
  s = edge->fail(s.handle, "connection reset", kNow + 5);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  std::vector<Json> events = sse_messages(s.response.body);
  ASSERT_EQ(events.size(), 1u) << s.response.body;
  EXPECT_EQ(events[0]["id"], 2);
  EXPECT_EQ(events[0]["error"]["code"], kMcpErrorStoreUnavailable);
  edge->end(s.handle);

  s = begin_call_request(*edge,
                         mcp_post_streaming(token_for("alice"), tools_call(3, "docs__search")));
  ASSERT_TRUE(s.open_stream);
  s = edge->feed(s.handle, "+OK\r\n" + queued_reply() + encode_reply(RespValue::nil()), kNow);
  events = sse_messages(s.response.body);
  ASSERT_EQ(events.size(), 1u) << s.response.body;
  EXPECT_EQ(events[0]["error"]["code"], kMcpErrorTimeout);
  edge->end(s.handle);

  s = begin_call_request(*edge,
                         mcp_post_streaming(token_for("alice"), tools_call(4, "docs__search")));
  ASSERT_TRUE(s.open_stream);
  s = edge->internal_error(s.handle, "a host mistake");
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  EXPECT_EQ(s.response.status, 200);
  events = sse_messages(s.response.body);
  ASSERT_EQ(events.size(), 1u) << s.response.body;
  EXPECT_EQ(events[0]["error"]["code"], kJsonRpcInternalError);
  EXPECT_NE(s.log.find("a host mistake"), std::string::npos);
  edge->end(s.handle);

  // A 2025-03-26 batch of two calls: the first round opens the stream, the second does not; the
  // answers are two events, in order.
  HttpRequest post = mcp_post_streaming(
      token_for("alice"),
      Json::array({tools_call(5, "docs__search"), tools_call(6, "docs__fetch")}));
  post.headers.emplace_back("mcp-protocol-version", "2025-03-26");
  s = begin_call_request(*edge, post);
  int opened = 0;
  int rounds = 0;
  for (int i = 0; i < 8 && s.action == EdgeAction::kRedis; ++i) {
    ASSERT_TRUE(is_relay_round(s));
    opened += s.open_stream ? 1 : 0;
    ++rounds;
    s = edge->feed(s.handle,
                   "+OK\r\n" + queued_reply() +
                       popped(relay_reply_record(RelayReply::ok(Json::object({{"n", rounds}})))),
                   kNow);
  }
  EXPECT_EQ(rounds, 2);
  EXPECT_EQ(opened, 1);
  ASSERT_EQ(s.action, EdgeAction::kRespond);
  events = sse_messages(s.response.body);
  ASSERT_EQ(events.size(), 2u) << s.response.body;
  EXPECT_EQ(events[0]["id"], 5);
  EXPECT_EQ(events[0]["result"]["n"], 1);
  EXPECT_EQ(events[1]["id"], 6);
  EXPECT_EQ(events[1]["result"]["n"], 2);
  edge->end(s.handle);

  // Gone while it waits (a keep-alive write failed): the same cancel mark as a reset.
  s = begin_call_request(*edge,
                         mcp_post_streaming(token_for("alice"), tools_call(7, "docs__search")));
  ASSERT_TRUE(s.open_stream);
  EdgeStep cancel = edge->abandon(s.handle, kNow + 1'000);
  ASSERT_EQ(cancel.action, EdgeAction::kRedis);
  EXPECT_NE(cancel.redis_bytes.find("call-cancel:"), std::string::npos);
  EXPECT_FALSE(cancel.open_stream);
  edge->end(cancel.handle);
  EXPECT_EQ(edge->open_requests(), 0u);
}

// A /mcp request from a foreign web page (DNS rebinding: its own name, resolved to the edge) is
// 403 before the token is looked at and before any answer is replayed: nothing reaches Redis.
// Loopback origins and QUIVER_MCP_ALLOWED_ORIGINS pass; a malformed setting names the variable.
TEST(EdgeService, McpRefusesAForeignOriginBeforeTheTokenAndTheAnswersCache) {
  auto edge =
      service({{"QUIVER_MCP_ALLOWED_ORIGINS", " https://app.example.com, http://x.test:81"}});
  std::string alice = token_for("alice");
  Json list = Json::object({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}});
  EdgeStep s = edge->begin(mcp_post(alice, list), kNow, kRandom);
  ASSERT_EQ(s.action, EdgeAction::kRedis);
  s = edge->feed(s.handle, "+OK\r\n" + encode_reply(discovery_reply("alice", 5, kMinute)), kNow);
  ASSERT_EQ(s.response.status, 200);
  edge->end(s.handle);

  for (const char* origin : {"http://evil.example.com", "null", "http://127.0.0.1.nip.io"}) {
    for (const std::string& token : {alice, std::string()}) {
      HttpRequest foreign = mcp_post(token, list);
      foreign.headers.emplace_back("Origin", origin);
      s = edge->begin(foreign, kNow + 1, kRandom);
      ASSERT_EQ(s.action, EdgeAction::kRespond) << origin;
      EXPECT_EQ(s.response.status, 403) << origin;
      EXPECT_EQ(error_code_of(s), "FORBIDDEN");
      EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "<absent>");
      edge->end(s.handle);
    }
  }
  for (const char* origin : {"http://localhost:8787", "http://127.0.0.1", "HTTPS://APP.example.com",
                             "http://x.test:81"}) {
    HttpRequest page = mcp_post(alice, list);
    page.headers.emplace_back("Origin", origin);
    s = edge->begin(page, kNow + 1, kRandom);
    ASSERT_EQ(s.action, EdgeAction::kRespond) << origin;
    EXPECT_EQ(s.response.status, 200) << origin;
    EXPECT_EQ(header(s.response, "X-Quiver-Cache"), "hit");
    edge->end(s.handle);
  }
  EXPECT_EQ(edge->open_requests(), 0u);

  for (const char* bad : {"https://app.example.com/", "app.example.com", "https://a.test,*"}) {
    Result<EdgeSettings> settings =
        edge_settings_from_env(env_json({{"QUIVER_MCP_ALLOWED_ORIGINS", bad}}));
    ASSERT_FALSE(settings.ok()) << bad;
    EXPECT_NE(settings.error().message.find("QUIVER_MCP_ALLOWED_ORIGINS"), std::string::npos);
  }
}

}  // namespace
}  // namespace quiver
