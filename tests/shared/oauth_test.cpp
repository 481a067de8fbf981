#include "shared/oauth.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "shared/json.h"
#include "shared/oauth_callback.h"
#include "shared/oauth_internal.h"
#include "shared/sha256.h"

namespace quiver::oauth {
namespace {

// ---- parsers ------------------------------------------------------------------------------------

TEST(OAuthChallenge, QuotedAndTokenParams) {
  auto c = parse_www_authenticate(
      R"(Bearer realm="mcp", error=insufficient_scope, scope="files:read files:write", )"
      R"(resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp")");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->error, "insufficient_scope");
  EXPECT_EQ((*c)->scope, "files:read files:write");
  EXPECT_EQ((*c)->resource_metadata,
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp");
}

TEST(OAuthChallenge, EscapesInQuotedStrings) {
  auto c = parse_www_authenticate(R"(Bearer error_description="say \"hi\", \\ok", scope="a")");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->error_description, R"(say "hi", \ok)");
  EXPECT_EQ((*c)->scope, "a");
}

TEST(OAuthChallenge, SeveralChallengesInOneValue) {
  auto c = parse_www_authenticate(
      R"(Basic realm="x", Newauth abc==, Bearer resource_metadata="https://a.example/m", scope=s1)");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->resource_metadata, "https://a.example/m");
  EXPECT_EQ((*c)->scope, "s1");
  auto only_basic = parse_www_authenticate(R"(Basic realm="x")");
  ASSERT_TRUE(only_basic.ok());
  EXPECT_FALSE(only_basic->has_value());
  auto bare = parse_www_authenticate("Bearer");
  ASSERT_TRUE(bare.ok());
  ASSERT_TRUE(bare->has_value());
  EXPECT_FALSE((*bare)->scope.has_value());
}

TEST(OAuthChallenge, JunkIsAnError) {
  for (const char* junk : {R"(Bearer scope="unterminated)", "Bearer a=b c", "Bearer =x", "\x01\x02",
                           "Bearer a=b, a=c"}) {
    auto c = parse_www_authenticate(junk);
    EXPECT_FALSE(c.ok()) << junk;
    if (!c.ok()) {
      EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
    }
  }
  EXPECT_FALSE(parse_www_authenticate(std::string(20000, 'a')).ok());
}

TEST(OAuthUrls, ProtectedResourceMetadataPathAware) {
  EXPECT_EQ(protected_resource_metadata_urls("https://Mcp.Example.com/public/mcp"),
            (std::vector<std::string>{
                "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"}));
  EXPECT_EQ(
      protected_resource_metadata_urls("https://mcp.example.com/"),
      (std::vector<std::string>{"https://mcp.example.com/.well-known/oauth-protected-resource"}));
  EXPECT_TRUE(protected_resource_metadata_urls("not a url").empty());
}

TEST(OAuthUrls, AuthorizationServerMetadataOrder) {
  EXPECT_EQ(authorization_server_metadata_urls("https://auth.example.com/tenant1"),
            (std::vector<std::string>{
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration"}));
  EXPECT_EQ(
      authorization_server_metadata_urls("https://auth.example.com"),
      (std::vector<std::string>{"https://auth.example.com/.well-known/oauth-authorization-server",
                                "https://auth.example.com/.well-known/openid-configuration"}));
}

TEST(OAuthUrls, CanonicalResource) {
  EXPECT_EQ(canonical_resource("HTTPS://MCP.Example.com/mcp#frag"), "https://mcp.example.com/mcp");
  EXPECT_EQ(canonical_resource("https://mcp.example.com/"), "https://mcp.example.com");
  EXPECT_EQ(canonical_resource("https://mcp.example.com:8443"), "https://mcp.example.com:8443");
}

TEST(OAuthDocuments, AuthorizationServerMetadataStrictIssuer) {
  std::string body =
      R"({"issuer":"https://auth.example.com","authorization_endpoint":"https://auth.example.com/a",
    "token_endpoint":"https://auth.example.com/t","code_challenge_methods_supported":["S256"]})";
  auto ok = parse_authorization_server_metadata(body, "https://auth.example.com");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->token_endpoint, "https://auth.example.com/t");
  auto other = parse_authorization_server_metadata(body, "https://auth.example.com/");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, ErrorCode::kInvalidReply);
  EXPECT_FALSE(parse_authorization_server_metadata(R"({"issuer":"https://auth.example.com"})",
                                                   "https://auth.example.com")
                   .ok());
  EXPECT_FALSE(parse_authorization_server_metadata("[]", "x").ok());
  EXPECT_FALSE(parse_authorization_server_metadata(R"({"issuer":5})", "x").ok());
}

TEST(OAuthDocuments, ProtectedResourceMetadata) {
  auto m = parse_protected_resource_metadata(
      R"({"resource":"https://mcp.example.com/mcp","authorization_servers":["https://auth.example.com"],"scopes_supported":["a","b"]})");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->authorization_servers.size(), 1u);
  EXPECT_EQ(m->scopes_supported.size(), 2u);
  EXPECT_FALSE(parse_protected_resource_metadata(R"({"authorization_servers":[]})").ok());
  EXPECT_FALSE(
      parse_protected_resource_metadata(R"({"resource":"x","authorization_servers":[1]})").ok());
  EXPECT_EQ(parse_protected_resource_metadata(std::string(kMaxResponseBytes + 1, ' ')).error().code,
            ErrorCode::kTooLarge);
}

TEST(OAuthDocuments, TokenResponses) {
  HttpResponse r{
      200,
      {},
      R"({"access_token":"AT","token_type":"bearer","expires_in":60,"refresh_token":"RT","scope":"a b"})"};
  auto t = parse_token_response(r, 1000);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->access_token, "AT");
  EXPECT_EQ(t->refresh_token, "RT");
  EXPECT_EQ(t->expires_at_ms, 61000);
  EXPECT_EQ(t->scope, "a b");

  HttpResponse garbage{200, {}, "<html>"};
  EXPECT_EQ(parse_token_response(garbage, 0).error().code, ErrorCode::kInvalidReply);
  HttpResponse no_token{200, {}, R"({"token_type":"Bearer"})"};
  EXPECT_EQ(parse_token_response(no_token, 0).error().code, ErrorCode::kInvalidReply);
  HttpResponse mac{200, {}, R"({"access_token":"AT","token_type":"mac"})"};
  EXPECT_EQ(parse_token_response(mac, 0).error().code, ErrorCode::kInvalidReply);

  HttpResponse grant{400, {}, R"({"error":"invalid_grant","error_description":"revoked"})"};
  auto g = parse_token_response(grant, 0);
  EXPECT_EQ(g.error().code, ErrorCode::kAuthorizationRequired);
  EXPECT_NE(g.error().message.find("invalid_grant"), std::string::npos);
  EXPECT_NE(g.error().message.find("revoked"), std::string::npos);
  HttpResponse client{401, {}, R"({"error":"invalid_client"})"};
  EXPECT_EQ(parse_token_response(client, 0).error().code, ErrorCode::kUnauthenticated);
  HttpResponse long_desc{
      400,
      {},
      Json{{"error", "invalid_request"}, {"error_description", std::string(5000, 'x')}}.dump()};
  EXPECT_LT(parse_token_response(long_desc, 0).error().message.size(), 400u);
}

TEST(OAuthDocuments, CallbackQuery) {
  auto c =
      quiver::parse_oauth_callback("code=abc%2Bd&state=s+1&iss=https%3A%2F%2Fauth.example.com");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->code, "abc+d");
  EXPECT_EQ(c->state, "s 1");
  EXPECT_EQ(c->iss, "https://auth.example.com");
  EXPECT_FALSE(quiver::parse_oauth_callback("code=abc").ok());
  EXPECT_FALSE(quiver::parse_oauth_callback("state=a&state=b").ok());
  EXPECT_FALSE(quiver::parse_oauth_callback("state=%zz").ok());
  auto denied = quiver::parse_oauth_callback("state=s&error=access_denied");
  ASSERT_TRUE(denied.ok());
  EXPECT_EQ(denied->error, "access_denied");
}

TEST(OAuthDocuments, JsonRoundTrips) {
  Authorization a;
  a.resource = "https://mcp.example.com/mcp";
  a.server.issuer = "https://auth.example.com";
  a.server.token_endpoint = "https://auth.example.com/t";
  a.server.scopes_supported = {"a"};
  a.client.issuer = a.server.issuer;
  a.client.client_id = "cid";
  a.client.dynamic = true;
  a.tokens.access_token = "AT";
  a.tokens.refresh_token = "RT";
  a.tokens.expires_at_ms = 5;
  auto back = Authorization::from_json(a.to_json());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->to_json(), a.to_json());
  EXPECT_FALSE(Authorization::from_json(Json::object()).ok());
}

TEST(OAuthDocuments, PkceS256) {
  // BASE64URL(SHA-256(verifier)), unpadded (computed independently with Python's hashlib).
  EXPECT_EQ(pkce_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wIlcjJDgZQ2cM"),
            "Zi3VhumyZNzh3tRkqBj4MDhtnGMG09hfSGCdDG0w6QE");
}

// ---- the flow, driven by hand-written responses -------------------------------------------------

constexpr const char* kServer = "https://mcp.example.com/mcp";
constexpr const char* kIssuer = "https://auth.example.com";

OAuthHost test_host(int64_t* now) {
  OAuthHost h;
  h.random_bytes = [](std::size_t n) -> Result<std::string> { return std::string(n, 'r'); };
  h.now_ms = [now] { return *now; };
  h.sign = [](std::string_view alg, std::string_view input) -> Result<std::string> {
    return std::string("sig-") + std::string(alg);
  };
  return h;
}

HttpResponse json_response(int status, const Json& body) {
  return HttpResponse{status, {}, body.dump()};
}

Json prm(const std::string& resource = kServer) {
  return Json{{"resource", resource},
              {"authorization_servers", {kIssuer}},
              {"scopes_supported", {"mcp:read"}}};
}
Json as_metadata(Json extra = Json::object()) {
  Json j = {{"issuer", kIssuer},
            {"authorization_endpoint", std::string(kIssuer) + "/authorize"},
            {"token_endpoint", std::string(kIssuer) + "/token"},
            {"registration_endpoint", std::string(kIssuer) + "/register"},
            {"code_challenge_methods_supported", {"S256"}}};
  j.update(extra);
  return j;
}

std::map<std::string, std::string> form_fields(const std::string& body) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  while (i < body.size()) {
    std::size_t amp = body.find('&', i);
    if (amp == std::string::npos) amp = body.size();
    std::string part = body.substr(i, amp - i);
    std::size_t eq = part.find('=');
    out[*internal::form_decode(part.substr(0, eq))] = *internal::form_decode(part.substr(eq + 1));
    i = amp + 1;
  }
  return out;
}

std::map<std::string, std::string> query_of(const std::string& url) {
  return form_fields(url.substr(url.find('?') + 1));
}

// Answers each request by URL; unknown URLs get a 404.
void drive(OAuthFlow& flow, const std::map<std::string, HttpResponse>& answers,
           std::vector<HttpRequest>* seen = nullptr) {
  while (flow.step() == FlowStep::kNeedsHttp) {
    std::optional<HttpRequest> r = flow.poll_request();
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(flow.poll_request().has_value()) << "a request is returned once";
    if (seen) seen->push_back(*r);
    auto it = answers.find(r->url);
    flow.handle_response(it == answers.end() ? HttpResponse{404, {}, "not found"} : it->second);
  }
}

OAuthClientSettings code_settings() {
  OAuthClientSettings s;
  s.redirect_uri = "http://127.0.0.1:5000/callback";
  s.application_type = "native";
  return s;
}

std::map<std::string, HttpResponse> standard_answers() {
  return {
      {"https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
       json_response(200, prm())},
      {"https://auth.example.com/.well-known/oauth-authorization-server",
       json_response(200, as_metadata())},
      {"https://auth.example.com/register", json_response(201, {{"client_id", "dyn-client"}})},
      {"https://auth.example.com/token", json_response(200, {{"access_token", "AT1"},
                                                             {"token_type", "Bearer"},
                                                             {"expires_in", 3600},
                                                             {"refresh_token", "RT1"}})},
  };
}

TEST(OAuthFlow, AuthorizeThenResume) {
  int64_t now = 1'000'000;
  BearerChallenge ch;
  ch.scope = "mcp:read mcp:write";
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(&now), ch);
  std::vector<HttpRequest> seen;
  auto answers = standard_answers();
  drive(flow, answers, &seen);
  ASSERT_EQ(flow.step(), FlowStep::kNeedsUser) << flow.error().message;
  ASSERT_EQ(seen.size(), 3u);
  Json reg = Json::parse(seen[2].body);
  EXPECT_EQ(reg["application_type"], "native");
  EXPECT_EQ(reg["redirect_uris"], Json::array({"http://127.0.0.1:5000/callback"}));
  EXPECT_EQ(reg["token_endpoint_auth_method"], "none");

  auto q = query_of(flow.authorization_url());
  EXPECT_EQ(flow.authorization_url().rfind("https://auth.example.com/authorize?", 0), 0u);
  EXPECT_EQ(q["client_id"], "dyn-client");
  EXPECT_EQ(q["code_challenge_method"], "S256");
  EXPECT_EQ(q["code_challenge"], pkce_s256(flow.pending().code_verifier));
  EXPECT_EQ(q["resource"], kServer);
  EXPECT_EQ(q["scope"], "mcp:read mcp:write");
  EXPECT_EQ(q["state"], flow.pending().state);

  PendingAuthorization pending = *PendingAuthorization::from_json(flow.pending().to_json());
  auto cb = quiver::parse_oauth_callback("code=C0DE&state=" + pending.state + "&iss=" + kIssuer);
  ASSERT_TRUE(cb.ok());
  now += 1000;
  OAuthFlow resumed = OAuthFlow::resume(pending, *cb, code_settings(), test_host(&now));
  seen.clear();
  drive(resumed, answers, &seen);
  ASSERT_EQ(resumed.step(), FlowStep::kDone) << resumed.error().message;
  auto f = form_fields(seen.at(0).body);
  EXPECT_EQ(f["grant_type"], "authorization_code");
  EXPECT_EQ(f["code"], "C0DE");
  EXPECT_EQ(f["code_verifier"], pending.code_verifier);
  EXPECT_EQ(f["redirect_uri"], "http://127.0.0.1:5000/callback");
  EXPECT_EQ(f["resource"], kServer);
  EXPECT_EQ(f["client_id"], "dyn-client");
  const Authorization& a = resumed.authorization();
  EXPECT_EQ(a.tokens.access_token, "AT1");
  EXPECT_EQ(a.tokens.expires_at_ms, now + 3600 * 1000);
  EXPECT_EQ(a.tokens.scope, "mcp:read mcp:write");
  EXPECT_TRUE(a.client.dynamic);
  EXPECT_EQ(a.client.issuer, kIssuer);

  // Refresh: invalid_grant means authorize again.
  OAuthFlow refresh = OAuthFlow::refresh(a, code_settings(), test_host(&now));
  drive(refresh,
        {{"https://auth.example.com/token", json_response(400, {{"error", "invalid_grant"}})}},
        &seen);
  ASSERT_EQ(refresh.step(), FlowStep::kFailed);
  EXPECT_EQ(refresh.error().code, ErrorCode::kAuthorizationRequired);
  EXPECT_EQ(form_fields(seen.back().body)["refresh_token"], "RT1");
  // A refresh answer without a refresh token keeps the old one.
  OAuthFlow again = OAuthFlow::refresh(a, code_settings(), test_host(&now));
  drive(again, {{"https://auth.example.com/token", json_response(200, {{"access_token", "AT2"}})}});
  ASSERT_EQ(again.step(), FlowStep::kDone);
  EXPECT_EQ(again.authorization().tokens.refresh_token, "RT1");
}

PendingAuthorization pending_for_tests(int64_t* now, Json extra_metadata = Json::object()) {
  auto answers = standard_answers();
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, as_metadata(std::move(extra_metadata)));
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(now), std::nullopt);
  drive(flow, answers);
  EXPECT_EQ(flow.step(), FlowStep::kNeedsUser);
  return flow.pending();
}

Error resume_error(const PendingAuthorization& p, const std::string& query, int64_t* now) {
  auto cb = quiver::parse_oauth_callback(query);
  if (!cb.ok()) return cb.error();
  OAuthFlow f = OAuthFlow::resume(p, *cb, code_settings(), test_host(now));
  EXPECT_EQ(f.step(), FlowStep::kFailed);
  EXPECT_FALSE(f.poll_request().has_value()) << "nothing is sent after a refused callback";
  return f.error();
}

TEST(OAuthFlow, ForgedReplayedAndExpiredState) {
  int64_t now = 5000;
  PendingAuthorization p = pending_for_tests(&now);
  EXPECT_EQ(resume_error(p, "code=c&state=forged", &now).code, ErrorCode::kInvalidArgument);
  now += kPendingTtlMs + 1;
  Error expired = resume_error(p, "code=c&state=" + p.state, &now);
  EXPECT_EQ(expired.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(expired.message.find("expired"), std::string::npos);
  EXPECT_EQ(expired.message.find(p.state), std::string::npos) << "no secret in the message";
}

TEST(OAuthFlow, IssChecks) {
  int64_t now = 0;
  PendingAuthorization p = pending_for_tests(&now);
  // Not advertised: absent is fine, present must match exactly (no normalisation).
  EXPECT_NE(resume_error(p, "code=c&state=" + p.state + "&iss=https://evil.example", &now)
                .message.find("iss"),
            std::string::npos);
  EXPECT_EQ(
      resume_error(p, "code=c&state=" + p.state + "&iss=https://auth.example.com/", &now).code,
      ErrorCode::kInvalidArgument);
  auto cb = quiver::parse_oauth_callback("code=c&state=" + p.state);
  OAuthFlow ok = OAuthFlow::resume(p, *cb, code_settings(), test_host(&now));
  EXPECT_EQ(ok.step(), FlowStep::kNeedsHttp);
  // Advertised: required.
  PendingAuthorization strict =
      pending_for_tests(&now, {{"authorization_response_iss_parameter_supported", true}});
  EXPECT_EQ(resume_error(strict, "code=c&state=" + strict.state, &now).code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(resume_error(strict, "state=" + strict.state + "&error=access_denied", &now).code,
            ErrorCode::kUnauthenticated);
}

TEST(OAuthFlow, RefusesMetadataForAnotherResource) {
  int64_t now = 0;
  auto answers = standard_answers();
  answers["https://mcp.example.com/.well-known/oauth-protected-resource/mcp"] =
      json_response(200, prm("https://other.example.com/mcp"));
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(&now), std::nullopt);
  drive(flow, answers);
  ASSERT_EQ(flow.step(), FlowStep::kFailed);
  EXPECT_EQ(flow.error().code, ErrorCode::kInvalidReply);
}

TEST(OAuthFlow, RefusesIssuerMismatch) {
  int64_t now = 0;
  auto answers = standard_answers();
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, as_metadata({{"issuer", "https://evil.example.com"}}));
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(&now), std::nullopt);
  drive(flow, answers);
  ASSERT_EQ(flow.step(), FlowStep::kFailed);
  EXPECT_EQ(flow.error().code, ErrorCode::kInvalidReply);
}

TEST(OAuthFlow, GarbageTokenResponse) {
  int64_t now = 0;
  PendingAuthorization p = pending_for_tests(&now);
  auto cb = quiver::parse_oauth_callback("code=c&state=" + p.state);
  OAuthFlow f = OAuthFlow::resume(p, *cb, code_settings(), test_host(&now));
  drive(f, {{"https://auth.example.com/token", HttpResponse{200, {}, "{not json"}}});
  ASSERT_EQ(f.step(), FlowStep::kFailed);
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidReply);
  OAuthFlow hung = OAuthFlow::resume(p, *cb, code_settings(), test_host(&now));
  ASSERT_TRUE(hung.poll_request().has_value());
  hung.handle_response(Error(ErrorCode::kTimeout, "no answer"));
  ASSERT_EQ(hung.step(), FlowStep::kFailed);
  EXPECT_EQ(hung.error().code, ErrorCode::kTimeout);
}

TEST(OAuthFlow, LegacyFallbacks) {
  int64_t now = 0;
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(&now), std::nullopt);
  std::vector<HttpRequest> seen;
  drive(flow, {{"https://mcp.example.com/register", json_response(201, {{"client_id", "c"}})}},
        &seen);
  ASSERT_EQ(flow.step(), FlowStep::kNeedsUser) << flow.error().message;
  EXPECT_EQ(flow.pending().server.issuer, "https://mcp.example.com");
  EXPECT_TRUE(flow.pending().server.defaults);
  EXPECT_EQ(flow.authorization_url().rfind("https://mcp.example.com/authorize?", 0), 0u);
}

TEST(OAuthFlow, ScopeRules) {
  int64_t now = 0;
  auto scope_of = [&](std::optional<BearerChallenge> ch, Json metadata_extra,
                      std::vector<std::string> settings_scopes, Json prm_doc) {
    auto answers = standard_answers();
    answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
        json_response(200, as_metadata(std::move(metadata_extra)));
    answers["https://mcp.example.com/.well-known/oauth-protected-resource/mcp"] =
        json_response(200, prm_doc);
    OAuthClientSettings s = code_settings();
    s.scopes = std::move(settings_scopes);
    OAuthFlow flow = OAuthFlow::authorize(kServer, s, test_host(&now), std::move(ch));
    drive(flow, answers);
    EXPECT_EQ(flow.step(), FlowStep::kNeedsUser);
    auto q = query_of(flow.authorization_url());
    return q.count("scope") ? q["scope"] : std::string("<none>");
  };
  BearerChallenge ch;
  ch.scope = "from:challenge";
  EXPECT_EQ(scope_of(ch, Json::object(), {"from:settings"}, prm()), "from:settings");
  EXPECT_EQ(scope_of(ch, Json::object(), {}, prm()), "from:challenge");
  EXPECT_EQ(scope_of(std::nullopt, Json::object(), {}, prm()), "mcp:read");
  Json bare_prm = {{"resource", kServer}, {"authorization_servers", {kIssuer}}};
  EXPECT_EQ(scope_of(std::nullopt, Json::object(), {}, bare_prm), "<none>");
  EXPECT_EQ(
      scope_of(std::nullopt, {{"scopes_supported", {"mcp:read", "offline_access"}}}, {}, prm()),
      "mcp:read offline_access");
  EXPECT_EQ(
      scope_of(std::nullopt, {{"scopes_supported", {"mcp:read"}}}, {"offline_access", "x"}, prm()),
      "x");
}

TEST(OAuthFlow, StepUpUnionAndLimit) {
  int64_t now = 0;
  Authorization current;
  current.server.issuer = kIssuer;
  current.client.issuer = kIssuer;
  current.client.client_id = "known";
  current.tokens.access_token = "AT";
  current.tokens.scope = "a b";
  BearerChallenge ch;
  ch.error = "insufficient_scope";
  ch.scope = "b c";
  OAuthFlow up = OAuthFlow::step_up(current, ch, 1, kServer, code_settings(), test_host(&now));
  std::vector<HttpRequest> seen;
  drive(up, standard_answers(), &seen);
  ASSERT_EQ(up.step(), FlowStep::kNeedsUser) << up.error().message;
  auto q = query_of(up.authorization_url());
  EXPECT_EQ(q["scope"], "a b c");
  EXPECT_EQ(q["client_id"], "known") << "the client registered with this issuer is reused";
  for (const HttpRequest& r : seen) EXPECT_NE(r.url, "https://auth.example.com/register");
  OAuthFlow over =
      OAuthFlow::step_up(current, ch, kMaxStepUps + 1, kServer, code_settings(), test_host(&now));
  ASSERT_EQ(over.step(), FlowStep::kFailed);
  EXPECT_EQ(over.error().code, ErrorCode::kUnauthenticated);
}

TEST(OAuthFlow, NewIssuerRegistersAgain) {
  int64_t now = 0;
  RegisteredClient old;
  old.issuer = "https://old-auth.example.com";
  old.client_id = "old";
  old.dynamic = true;
  OAuthFlow flow =
      OAuthFlow::authorize(kServer, code_settings(), test_host(&now), std::nullopt, old);
  drive(flow, standard_answers());
  ASSERT_EQ(flow.step(), FlowStep::kNeedsUser);
  EXPECT_EQ(query_of(flow.authorization_url())["client_id"], "dyn-client");
}

// Each token endpoint auth method's request shape, through client_credentials.
HttpRequest client_credentials_request(OAuthClientSettings s,
                                       Json metadata_extra = Json::object()) {
  int64_t now = 1'700'000'000'000;
  s.grant = GrantType::kClientCredentials;
  auto answers = standard_answers();
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, as_metadata(std::move(metadata_extra)));
  OAuthFlow flow = OAuthFlow::authorize(kServer, s, test_host(&now), std::nullopt);
  std::vector<HttpRequest> seen;
  drive(flow, answers, &seen);
  EXPECT_EQ(flow.step(), FlowStep::kDone) << flow.error().message;
  return seen.empty() ? HttpRequest{} : seen.back();
}

std::optional<std::string> header_of(const HttpRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return std::nullopt;
}

TEST(OAuthFlow, ClientSecretBasicEncodesBeforeBase64) {
  OAuthClientSettings s;
  s.client_id = "id:1";
  s.client_secret = "s e/cret";
  HttpRequest r = client_credentials_request(s);
  EXPECT_EQ(header_of(r, "Authorization"), "Basic " + base64_encode("id%3A1:s+e%2Fcret"));
  auto f = form_fields(r.body);
  EXPECT_EQ(f["grant_type"], "client_credentials");
  EXPECT_EQ(f.count("client_secret"), 0u);
  EXPECT_EQ(f["resource"], kServer);
}

TEST(OAuthFlow, ClientSecretPost) {
  OAuthClientSettings s;
  s.client_id = "id";
  s.client_secret = "secret";
  HttpRequest r = client_credentials_request(
      s, {{"token_endpoint_auth_methods_supported", {"client_secret_post"}}});
  EXPECT_FALSE(header_of(r, "Authorization").has_value());
  auto f = form_fields(r.body);
  EXPECT_EQ(f["client_id"], "id");
  EXPECT_EQ(f["client_secret"], "secret");
}

TEST(OAuthFlow, PrivateKeyJwt) {
  OAuthClientSettings s;
  s.client_id = "id";
  s.private_key_pem = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
  s.private_key_id = "k1";
  HttpRequest r = client_credentials_request(s);
  auto f = form_fields(r.body);
  EXPECT_EQ(f["client_assertion_type"], "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
  std::string jwt = f["client_assertion"];
  std::size_t d1 = jwt.find('.');
  std::size_t d2 = jwt.find('.', d1 + 1);
  std::string header, claims, sig;
  ASSERT_TRUE(base64url_decode(jwt.substr(0, d1), &header));
  ASSERT_TRUE(base64url_decode(jwt.substr(d1 + 1, d2 - d1 - 1), &claims));
  ASSERT_TRUE(base64url_decode(jwt.substr(d2 + 1), &sig));
  Json h = Json::parse(header);
  Json c = Json::parse(claims);
  EXPECT_EQ(h["alg"], "ES256");
  EXPECT_EQ(h["kid"], "k1");
  EXPECT_EQ(c["iss"], "id");
  EXPECT_EQ(c["sub"], "id");
  EXPECT_EQ(c["aud"], kIssuer);
  EXPECT_EQ(c["exp"].get<int64_t>() - c["iat"].get<int64_t>(), 300);
  EXPECT_EQ(sig, "sig-ES256");
}

TEST(OAuthFlow, PublicClientSendsItsId) {
  int64_t now = 0;
  PendingAuthorization p = pending_for_tests(&now);
  auto cb = quiver::parse_oauth_callback("code=c&state=" + p.state);
  OAuthFlow f = OAuthFlow::resume(p, *cb, code_settings(), test_host(&now));
  std::optional<HttpRequest> r = f.poll_request();
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(header_of(*r, "Authorization").has_value());
  EXPECT_EQ(form_fields(r->body)["client_id"], "dyn-client");
}

TEST(OAuthFlow, RefusesPlainHttpEndpoints) {
  int64_t now = 0;
  auto answers = standard_answers();
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, as_metadata({{"token_endpoint", "http://auth.example.com/token"}}));
  OAuthClientSettings s;
  s.grant = GrantType::kClientCredentials;
  s.client_id = "id";
  OAuthFlow flow = OAuthFlow::authorize(kServer, s, test_host(&now), std::nullopt);
  drive(flow, answers);
  ASSERT_EQ(flow.step(), FlowStep::kFailed);
  EXPECT_EQ(flow.error().code, ErrorCode::kInvalidReply);
}

TEST(OAuthFlow, CimdWhenSupported) {
  int64_t now = 0;
  auto answers = standard_answers();
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, as_metadata({{"client_id_metadata_document_supported", true}}));
  OAuthClientSettings s = code_settings();
  s.client_id_metadata_url = "https://client.example.com/meta.json";
  OAuthFlow flow = OAuthFlow::authorize(kServer, s, test_host(&now), std::nullopt);
  std::vector<HttpRequest> seen;
  drive(flow, answers, &seen);
  ASSERT_EQ(flow.step(), FlowStep::kNeedsUser);
  EXPECT_EQ(query_of(flow.authorization_url())["client_id"],
            "https://client.example.com/meta.json");
  for (const HttpRequest& r : seen) EXPECT_NE(r.url, "https://auth.example.com/register");
}

TEST(OAuthFlow, RefusesWithoutS256) {
  int64_t now = 0;
  auto answers = standard_answers();
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, as_metadata({{"code_challenge_methods_supported", {"plain"}}}));
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(&now), std::nullopt);
  drive(flow, answers);
  ASSERT_EQ(flow.step(), FlowStep::kFailed);
}

// Metadata without code_challenge_methods_supported means no PKCE: refused before any client is
// registered or the user is sent anywhere. A client_credentials flow needs no PKCE and goes on.
TEST(OAuthFlow, RefusesMetadataThatAdvertisesNoPkce) {
  int64_t now = 0;
  auto answers = standard_answers();
  Json no_pkce = as_metadata();
  no_pkce.erase("code_challenge_methods_supported");
  answers["https://auth.example.com/.well-known/oauth-authorization-server"] =
      json_response(200, no_pkce);
  OAuthFlow flow = OAuthFlow::authorize(kServer, code_settings(), test_host(&now), std::nullopt);
  std::vector<HttpRequest> seen;
  drive(flow, answers, &seen);
  ASSERT_EQ(flow.step(), FlowStep::kFailed);
  EXPECT_EQ(flow.error().code, ErrorCode::kInvalidReply);
  EXPECT_NE(flow.error().message.find("code_challenge_methods_supported"), std::string::npos);
  for (const HttpRequest& r : seen) EXPECT_NE(r.url, "https://auth.example.com/register");
}

// Plain http is for loopback only: a name that merely starts like a loopback address is a public
// host (127.0.0.1.nip.io resolves wherever its owner likes).
TEST(OAuthEndpoints, PlainHttpOnlyToALoopbackHost) {
  for (const char* url :
       {"https://as.example.com/token", "http://127.0.0.1:5000/token", "http://127.9.8.7/token",
        "http://localhost:80/authorize", "http://[::1]:9000/token"}) {
    EXPECT_TRUE(internal::is_allowed_endpoint(url)) << url;
  }
  for (const char* url : {"http://127.0.0.1.nip.io/token", "http://127.evil.example/token",
                          "http://as.example.com/token", "http://10.0.0.1/token",
                          "http://1270.0.0.1/token", "ftp://127.0.0.1/token", "not a url"}) {
    EXPECT_FALSE(internal::is_allowed_endpoint(url)) << url;
  }
}

}  // namespace
}  // namespace quiver::oauth
