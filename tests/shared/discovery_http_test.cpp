#include "shared/discovery_http.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/discovery_fixture.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/discovery_fixture.h

HttpRequest get(std::string path, std::string query = "") {
  return HttpRequest{"GET", std::move(path), std::move(query), {}, ""};
}

// alice is granted `docs` (shared, fresh, tools search/fetch) and `mail` (per_member, stale,
// tool inbox); `secret` exists but is granted to nobody.
MemoryStore store() {
  MemoryStore s;
  s.add_connection("docs", "shared");
  s.add_connection("mail", "per_member");
  s.add_connection("secret", "shared");
  s.grant("alice", "docs");
  s.grant("alice", "mail");
  s.manifests[{"docs", "shared"}] =
      data_entry("h-docs", kNow - kMinute, kNow + 14 * kMinute,
                 manifest_json({"search", "fetch"}, {}, {}, {}, "docs"));
  s.manifests[{"mail", "member/alice"}] =
      data_entry("h-mail", kNow - 20 * kMinute, kNow - 5 * kMinute,
                 manifest_json({"inbox"}, {}, {}, {}, "mail"));
  s.manifests[{"secret", "shared"}] =
      data_entry("h-secret", kNow, kNow + kMinute, manifest_json({"launch"}));
  return s;
}

// Drives one exchange to its response like a host would, from `store`.
struct Driven {
  Respond respond;
  std::vector<NeedSnapshot> snapshots;
  std::vector<NeedEnqueue> enqueues;
};

Driven drive(DiscoveryExchange& x, MemoryStore& s, const HttpRequest& request,
             const CallerAuth& caller,
             std::function<RevalidationResult(const Revalidation&)> enqueue = nullptr) {
  Driven d;
  DiscoveryStep step = x.start(request, caller, kNow);
  for (int guard = 0; guard < 5; ++guard) {
    if (auto* r = std::get_if<Respond>(&step)) {
      d.respond = std::move(*r);
      return d;
    }
    if (auto* n = std::get_if<NeedSnapshot>(&step)) {
      d.snapshots.push_back(*n);
      step = x.resume_snapshot(read_snapshot(s, n->member, n->query), kNow);
      continue;
    }
    auto& e = std::get<NeedEnqueue>(step);
    d.enqueues.push_back(e);
    std::vector<Result<RevalidationResult>> results;
    for (const Revalidation& r : e.revalidations) {
      results.push_back(enqueue ? enqueue(r)
                                : RevalidationResult{RevalidationOutcome::kQueued, "1-0"});
    }
    step = x.resume_enqueue(results, kNow);
  }
  ADD_FAILURE() << "the exchange did not end";
  return d;
}

Driven run(const HttpRequest& request, const CallerAuth& caller = CallerAuth::member("alice"),
           const DiscoveryConfig& config = DiscoveryConfig{}) {
  MemoryStore s = store();
  DiscoveryExchange x(config);
  return drive(x, s, request, caller);
}

std::string header(const HttpResponse& r, const char* name) {
  return std::string(find_header(r.headers, name).value_or(""));
}

std::string error_code(const HttpResponse& r) {
  Result<Json> body = parse_json(r.body);
  if (!body.ok()) return "<no json: " + r.body + ">";
  return (*body)["error"]["code"].get<std::string>();
}

// ---- errors before any store access ------------------------------------------------------------

TEST(DiscoveryHttp, UnauthenticatedIs401WithABearerChallenge) {
  Driven d = run(get("/v1/manifests"), CallerAuth::unauthenticated("the token has expired"));
  EXPECT_EQ(d.respond.response.status, 401);
  EXPECT_EQ(error_code(d.respond.response), "UNAUTHENTICATED");
  EXPECT_NE(d.respond.response.body.find("the token has expired"), std::string::npos);
  EXPECT_EQ(header(d.respond.response, "WWW-Authenticate"), "Bearer realm=\"quiver\"");
  EXPECT_EQ(header(d.respond.response, "Cache-Control"), "no-store");
  EXPECT_TRUE(d.snapshots.empty());

  d = run(get("/v1/manifests"), CallerAuth::member("not a member id"));
  EXPECT_EQ(d.respond.response.status, 401);
  d = run(get("/v1/manifests"), CallerAuth::unauthenticated(""));
  EXPECT_NE(d.respond.response.body.find("bearer token is required"), std::string::npos);
}

TEST(DiscoveryHttp, HostsAuthenticateWithTheCallerTokenModule) {
  const std::string secret(32, 's');
  Keyring keyring = *Keyring::create({{"k1", secret}});
  const std::string token = *mint_caller_token("alice", secret, "k1", kNow, 60'000);
  CallerAuth ok = authenticate_caller({{"authorization", "Bearer " + token}}, keyring, kNow);
  EXPECT_EQ(ok.member_id, std::optional<std::string>("alice"));

  HttpRequest request = get("/v1/manifests");
  request.headers.emplace_back("Authorization", "Bearer " + token);
  MemoryStore s = store();
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  Driven d = drive(x, s, request, authenticate_caller(request.headers, keyring, kNow));
  EXPECT_EQ(d.respond.response.status, 200);

  for (const HttpHeaders& headers : std::vector<HttpHeaders>{
           {}, {{"Authorization", "Basic YTpi"}}, {{"Authorization", "Bearer " + token + "x"}}}) {
    CallerAuth bad = authenticate_caller(headers, keyring, kNow);
    EXPECT_FALSE(bad.member_id.has_value());
    EXPECT_FALSE(bad.failure.empty());
  }
  CallerAuth expired =
      authenticate_caller({{"Authorization", "Bearer " + token}}, keyring, kNow + 10 * kMinute);
  EXPECT_FALSE(expired.member_id.has_value());
}

// Both hosts call this one function: two Authorization headers are refused (a proxy may forward
// either), whatever they hold; without a keyring the header checks still come first.
TEST(DiscoveryHttp, AuthenticateCallerRules) {
  const std::string secret(32, 's');
  Keyring keyring = *Keyring::create({{"k1", secret}});
  const std::string token = *mint_caller_token("alice", secret, "k1", kNow, 60'000);
  const std::string bearer = "Bearer " + token;
  CallerAuth two =
      authenticate_caller({{"Authorization", bearer}, {"authorization", bearer}}, keyring, kNow);
  EXPECT_FALSE(two.member_id.has_value());
  EXPECT_EQ(two.failure, "more than one Authorization header");
  EXPECT_FALSE(authenticate_caller({{"Authorization", bearer + ", " + bearer}}, keyring, kNow)
                   .member_id.has_value());

  CallerAuth none = authenticate_caller({{"Authorization", bearer}}, nullptr, kNow, {}, "no keys");
  EXPECT_FALSE(none.member_id.has_value());
  EXPECT_EQ(none.failure, "no keys");
  EXPECT_EQ(
      authenticate_caller({{"Authorization", "Basic YTpi"}}, nullptr, kNow, {}, "no keys").failure,
      "Authorization scheme is not Bearer");
  EXPECT_EQ(authenticate_caller({}, nullptr, kNow, {}, "no keys").failure,
            "a bearer token is required (Authorization: Bearer ...)");
}

TEST(DiscoveryHttp, SharedRoutes) {
  EXPECT_EQ(match_shared_route("/v1/manifests").route, SharedRoute::kManifests);
  EXPECT_EQ(match_shared_route("/v1/search").route, SharedRoute::kSearch);
  EXPECT_EQ(match_shared_route("/v1/webhooks/refresh").route, SharedRoute::kWebhook);
  SharedRouteMatch m = match_shared_route("/v1/mcp-connections/a%2Fb/manifest");
  EXPECT_EQ(m.route, SharedRoute::kConnectionManifest);
  EXPECT_EQ(m.raw_id, "a%2Fb");  // one segment: decoded only after routing
  EXPECT_EQ(match_shared_route("/v1/mcp-connections/x/refresh-tools").route, SharedRoute::kRefresh);
  for (const char* odd :
       {"//v1/manifests", "/v1/manifests/", "/v1//manifests", "/v1/Manifests", "/v1/%6Danifests",
        "/v1/mcp-connections//manifest", "/v1/mcp-connections/a/b/manifest",
        "/v1/mcp-connections/x/test", "", "v1/manifests", "/v1/manifests?x"}) {
    EXPECT_EQ(match_shared_route(odd).route, SharedRoute::kNone) << odd;
  }
  EXPECT_TRUE(is_discovery_path("/v1/search"));
  EXPECT_FALSE(is_discovery_path("/v1/webhooks/refresh"));
  EXPECT_TRUE(shared_route_allows(SharedRoute::kManifests, "HEAD"));
  EXPECT_FALSE(shared_route_allows(SharedRoute::kManifests, "POST"));
  EXPECT_TRUE(shared_route_allows(SharedRoute::kWebhook, "POST"));
  EXPECT_STREQ(shared_route_allow(SharedRoute::kRefresh), "POST");
  EXPECT_STREQ(shared_route_allow(SharedRoute::kSearch), "GET, HEAD");
}

TEST(DiscoveryHttp, QueryParams) {
  QueryParams q = parse_query_params("q=a+b%21&&limit=5&", {"q", "limit"});
  ASSERT_FALSE(q.error) << *q.error;
  ASSERT_NE(q.find("q"), nullptr);
  EXPECT_EQ(*q.find("q"), "a b!");
  EXPECT_EQ(*q.find("limit"), "5");
  EXPECT_EQ(q.find("view"), nullptr);
  EXPECT_EQ(*parse_query_params("x=1", {"q"}).error, "unknown query parameter `x`");
  EXPECT_EQ(*parse_query_params("q=1&q=2", {"q"}).error, "query parameter `q` repeats");
  EXPECT_EQ(*parse_query_params("q=%zz", {"q"}).error, "malformed percent-encoding in the query");
  EXPECT_NE(parse_query_params("principal=shared", {"principal"}).error->find("bearer token"),
            std::string::npos);
  EXPECT_EQ(*parse_query_params("%01x=1", {}).error, "unknown query parameter `?x`");

  EXPECT_EQ(parse_count_param("5", 1, 50), std::optional<std::size_t>(5));
  EXPECT_EQ(parse_count_param("000050", 1, 50), std::optional<std::size_t>(50));
  for (const char* bad : {"", "0", "51", "-1", "+5", " 5", "5 ", "1e1", "0000005", "99999999999"}) {
    EXPECT_FALSE(parse_count_param(bad, 1, 50).has_value()) << bad;
  }
}

TEST(DiscoveryHttp, RoutingErrors) {
  EXPECT_EQ(run(get("/v1/nope")).respond.response.status, 404);
  EXPECT_EQ(run(get("/v1/manifests/")).respond.response.status, 404);
  EXPECT_EQ(run(get("/v1/mcp-connections//manifest")).respond.response.status, 404);
  EXPECT_EQ(error_code(run(get("/v1/nope")).respond.response), "NOT_FOUND");

  Driven d = run(HttpRequest{"POST", "/v1/manifests", "", {}, ""});
  EXPECT_EQ(d.respond.response.status, 405);
  EXPECT_EQ(error_code(d.respond.response), "METHOD_NOT_ALLOWED");
  EXPECT_EQ(header(d.respond.response, "Allow"), "GET, HEAD");
  d = run(get("/v1/mcp-connections/docs/refresh-tools"));
  EXPECT_EQ(d.respond.response.status, 405);
  EXPECT_EQ(header(d.respond.response, "Allow"), "POST");
  EXPECT_TRUE(is_discovery_path("/v1/search"));
  EXPECT_FALSE(is_discovery_path("/healthz"));
}

TEST(DiscoveryHttp, InputsAreBounded) {
  DiscoveryConfig config;
  Driven d = run(get("/v1/" + std::string(2000, 'a')), CallerAuth::member("alice"), config);
  EXPECT_EQ(d.respond.response.status, 414);
  EXPECT_EQ(error_code(d.respond.response), "URI_TOO_LONG");
  d = run(get("/v1/search", "q=" + std::string(3000, 'a')));
  EXPECT_EQ(d.respond.response.status, 414);
  d = run(HttpRequest{
      "POST", "/v1/mcp-connections/docs/refresh-tools", "", {}, std::string(20'000, 'x')});
  EXPECT_EQ(d.respond.response.status, 413);
  EXPECT_EQ(error_code(d.respond.response), "PAYLOAD_TOO_LARGE");
  d = run(get("/v1/search", "q=" + std::string(300, 'a')));
  EXPECT_EQ(d.respond.response.status, 400);
}

TEST(DiscoveryHttp, QueryParametersAreCheckedAndThePrincipalNeverComesFromThem) {
  for (const char* query :
       {"principal=member/bob", "member=bob", "view=mcp&view=manifest", "colour=red", "view=MCP",
        "limit=0", "limit=201", "limit=ten", "after=a:b", "view=%zz"}) {
    Driven d = run(get("/v1/manifests", query));
    EXPECT_EQ(d.respond.response.status, 400) << query;
    EXPECT_EQ(error_code(d.respond.response), "BAD_REQUEST") << query;
    EXPECT_TRUE(d.snapshots.empty()) << query;
  }
  Driven d = run(get("/v1/manifests", "principal=shared"));
  EXPECT_NE(d.respond.response.body.find("bearer token"), std::string::npos);
  for (const char* query : {"", "limit=3", "q=", "q=a&limit=51", "q=%FF"}) {
    EXPECT_EQ(run(get("/v1/search", query)).respond.response.status, 400) << query;
  }
  EXPECT_EQ(run(HttpRequest{"POST", "/v1/mcp-connections/docs/refresh-tools", "force=1", {}, ""})
                .respond.response.status,
            400);
}

// ---- GET /v1/manifests -------------------------------------------------------------------------

TEST(DiscoveryHttp, ManifestsReadsOnceAndAnswersWithCachingHeaders) {
  Driven d = run(get("/v1/manifests"));
  ASSERT_EQ(d.snapshots.size(), 1u);
  EXPECT_EQ(d.snapshots[0].member, member_principal("alice"));
  EXPECT_FALSE(d.snapshots[0].query.only.has_value());
  EXPECT_EQ(d.snapshots[0].query.limit, 100u);
  const HttpResponse& r = d.respond.response;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(header(r, "Content-Type"), "application/json");
  EXPECT_EQ(header(r, "Cache-Control"), "private, max-age=0");  // mail is stale
  EXPECT_EQ(header(r, "Vary"), "Authorization");
  EXPECT_EQ(header(r, "ETag").rfind("W/\"fp-", 0), 0u);
  Json body = *parse_json(r.body);
  ASSERT_EQ(body["connections"].size(), 2u);
  EXPECT_EQ(body["connections"][0]["id"], "docs");
  EXPECT_EQ(body["connections"][1]["status"], "stale");
  EXPECT_EQ(r.body.find("launch"), std::string::npos);
  // Stale-while-revalidate: the answer does not wait; the revalidation goes to the background.
  EXPECT_TRUE(d.enqueues.empty());
  ASSERT_EQ(d.respond.background.size(), 1u);
  EXPECT_EQ(d.respond.background[0],
            (Revalidation{"mail", member_principal("alice"), "stale", false}));
  EXPECT_EQ(d.respond.stats, (DiscoveryStats{1, 1, 0, 0, 0}));
}

TEST(DiscoveryHttp, IfNoneMatchGivesA304ThatStillRevalidates) {
  Driven first = run(get("/v1/manifests"));
  const std::string etag = header(first.respond.response, "ETag");
  HttpRequest again = get("/v1/manifests");
  again.headers.emplace_back("if-none-match", etag);
  Driven d = run(again);
  EXPECT_EQ(d.respond.response.status, 304);
  EXPECT_TRUE(d.respond.response.body.empty());
  EXPECT_EQ(header(d.respond.response, "ETag"), etag);
  EXPECT_EQ(header(d.respond.response, "Cache-Control"), "private, max-age=0");
  EXPECT_EQ(header(d.respond.response, "Content-Type"), "");
  EXPECT_EQ(d.respond.background.size(), 1u);

  again.headers[0].second = "\"something-else\"";
  EXPECT_EQ(run(again).respond.response.status, 200);
}

TEST(DiscoveryHttp, HeadAnswersWithoutABody) {
  Driven d = run(HttpRequest{"HEAD", "/v1/manifests", "", {}, ""});
  EXPECT_EQ(d.respond.response.status, 200);
  EXPECT_TRUE(d.respond.response.body.empty());
  EXPECT_FALSE(header(d.respond.response, "ETag").empty());
}

TEST(DiscoveryHttp, PagesAndViewsComeFromTheQuery) {
  Driven d = run(get("/v1/manifests", "limit=1&view=mcp"));
  EXPECT_EQ(d.snapshots[0].query.limit, 1u);
  Json body = *parse_json(d.respond.response.body);
  EXPECT_EQ(body["next_after"], "docs");
  EXPECT_TRUE(body["connections"][0].contains("mcp"));
  EXPECT_EQ(body["connections"][0]["mcp"]["tools/list"]["cacheScope"], "private");

  d = run(get("/v1/manifests", "after=docs&limit=5"));
  EXPECT_EQ(d.snapshots[0].query.after, "docs");
  body = *parse_json(d.respond.response.body);
  ASSERT_EQ(body["connections"].size(), 1u);
  EXPECT_EQ(body["connections"][0]["id"], "mail");
  EXPECT_FALSE(body.contains("next_after"));
}

TEST(DiscoveryHttp, StoreFailureIs503WithTheDetailOnlyInTheLog) {
  MemoryStore s = store();
  s.failure = Error(ErrorCode::kTransport, "connection refused (127.0.0.1:6379)");
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  Driven d = drive(x, s, get("/v1/manifests"), CallerAuth::member("alice"));
  EXPECT_EQ(d.respond.response.status, 503);
  EXPECT_EQ(error_code(d.respond.response), "STORE_UNAVAILABLE");
  EXPECT_EQ(d.respond.response.body.find("6379"), std::string::npos);
  ASSERT_TRUE(d.respond.log.has_value());
  EXPECT_NE(d.respond.log->message.find("6379"), std::string::npos);
}

TEST(DiscoveryHttp, AWipedNamespaceIs503NeverAnEmptyListOrANotFound) {
  MemoryStore s = store();
  s.failure = Error(ErrorCode::kStoreNotReady, "discovery read: the namespace is not initialised");
  DiscoveryConfig config;
  for (const char* path : {"/v1/manifests", "/v1/mcp-connections/docs/manifest", "/v1/search"}) {
    DiscoveryExchange x(config);
    Driven d = drive(x, s, get(path, std::string(path) == "/v1/search" ? "q=x" : ""),
                     CallerAuth::member("alice"));
    EXPECT_EQ(d.respond.response.status, 503) << path;
    EXPECT_EQ(error_code(d.respond.response), "STORE_UNAVAILABLE") << path;
    EXPECT_NE(d.respond.response.body.find("being restored"), std::string::npos)
        << d.respond.response.body;
  }
}

// ---- one connection ----------------------------------------------------------------------------

TEST(DiscoveryHttp, OneConnectionReadsOnlyIt) {
  Driven d = run(get("/v1/mcp-connections/docs/manifest"));
  ASSERT_EQ(d.snapshots.size(), 1u);
  EXPECT_EQ(d.snapshots[0].query.only, std::optional<std::string>("docs"));
  EXPECT_EQ(d.respond.response.status, 200);
  Json body = *parse_json(d.respond.response.body);
  EXPECT_EQ(body["id"], "docs");
  EXPECT_EQ(body["status"], "fresh");
  EXPECT_EQ(header(d.respond.response, "Cache-Control"), "private, max-age=30");

  d = run(get("/v1/mcp-connections/d%6Fcs/manifest"));  // percent-encoded id
  EXPECT_EQ(d.respond.response.status, 200);
}

TEST(DiscoveryHttp, NotGrantedAndAbsentAreIndistinguishable) {
  Driven secret = run(get("/v1/mcp-connections/secret/manifest"));
  Driven absent = run(get("/v1/mcp-connections/no-such/manifest"));
  Driven invalid = run(get("/v1/mcp-connections/a%3Ab/manifest"));
  for (const Driven* d : {&secret, &absent, &invalid}) {
    EXPECT_EQ(d->respond.response.status, 404);
    EXPECT_EQ(d->respond.response.body, secret.respond.response.body);
    EXPECT_EQ(d->respond.response.headers, secret.respond.response.headers);
  }
  EXPECT_EQ(secret.respond.response.body.find("launch"), std::string::npos);
}

// ---- refresh -----------------------------------------------------------------------------------

TEST(DiscoveryHttp, RefreshQueuesAManualRevalidationUnderTheCallersPrincipal) {
  MemoryStore s = store();
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  Driven d = drive(x, s, HttpRequest{"POST", "/v1/mcp-connections/mail/refresh-tools", "", {}, ""},
                   CallerAuth::member("alice"));
  ASSERT_EQ(d.enqueues.size(), 1u);
  EXPECT_EQ(d.enqueues[0].revalidations,
            (std::vector<Revalidation>{{"mail", member_principal("alice"), "manual", true}}));
  EXPECT_EQ(d.respond.response.status, 202);
  EXPECT_EQ(*parse_json(d.respond.response.body), Json::parse(R"({"status":"queued"})"));
  EXPECT_EQ(header(d.respond.response, "Cache-Control"), "no-store");
}

TEST(DiscoveryHttp, RefreshReportsALeaseHolderAsInProgress) {
  for (RevalidationOutcome outcome :
       {RevalidationOutcome::kInProgress, RevalidationOutcome::kQueued,
        RevalidationOutcome::kAlreadyQueued}) {
    MemoryStore s = store();
    DiscoveryConfig config;
    DiscoveryExchange x(config);
    Driven d =
        drive(x, s, HttpRequest{"POST", "/v1/mcp-connections/docs/refresh-tools", "", {}, ""},
              CallerAuth::member("alice"), [&](const Revalidation&) {
                return RevalidationResult{outcome, ""};
              });
    EXPECT_EQ(d.respond.response.status, 202);
    std::string expected = outcome == RevalidationOutcome::kInProgress ? "in_progress" : "queued";
    EXPECT_EQ((*parse_json(d.respond.response.body))["status"], expected);
    EXPECT_EQ(d.enqueues[0].revalidations[0].principal, Principal::shared());
  }
}

TEST(DiscoveryHttp, RefreshOfAConnectionNotGrantedIs404AndQueuesNothing) {
  for (const char* id : {"secret", "no-such"}) {
    MemoryStore s = store();
    DiscoveryConfig config;
    DiscoveryExchange x(config);
    Driven d =
        drive(x, s,
              HttpRequest{
                  "POST", std::string("/v1/mcp-connections/") + id + "/refresh-tools", "", {}, ""},
              CallerAuth::member("alice"));
    EXPECT_EQ(d.respond.response.status, 404) << id;
    EXPECT_TRUE(d.enqueues.empty()) << id;
  }
}

TEST(DiscoveryHttp, RefreshWhenTheQueueFailsIs503) {
  MemoryStore s = store();
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  DiscoveryStep step =
      x.start(HttpRequest{"POST", "/v1/mcp-connections/docs/refresh-tools", "", {}, ""},
              CallerAuth::member("alice"), kNow);
  auto& need = std::get<NeedSnapshot>(step);
  step = x.resume_snapshot(read_snapshot(s, need.member, need.query), kNow);
  ASSERT_TRUE(std::holds_alternative<NeedEnqueue>(step));
  step = x.resume_enqueue({Error(ErrorCode::kStoreUnavailable, "READONLY replica")}, kNow);
  const Respond& r = std::get<Respond>(step);
  EXPECT_EQ(r.response.status, 503);
  EXPECT_EQ(error_code(r.response), "STORE_UNAVAILABLE");
}

TEST(DiscoveryHttp, RefreshOfAConnectionWithAnUnknownModeIs500) {
  MemoryStore s = store();
  s.add_connection("docs", "team");
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  Driven d = drive(x, s, HttpRequest{"POST", "/v1/mcp-connections/docs/refresh-tools", "", {}, ""},
                   CallerAuth::member("alice"));
  EXPECT_EQ(d.respond.response.status, 500);
  EXPECT_EQ(error_code(d.respond.response), "INTERNAL");
  EXPECT_TRUE(d.enqueues.empty());
}

// ---- search ------------------------------------------------------------------------------------

TEST(DiscoveryHttp, SearchRanksGrantedVisibleTools) {
  Driven d = run(get("/v1/search", "q=search+docs&limit=5"));
  EXPECT_EQ(d.respond.response.status, 200);
  Json body = *parse_json(d.respond.response.body);
  EXPECT_EQ(body["query"], "search docs");
  ASSERT_GE(body["results"].size(), 1u);
  EXPECT_EQ(body["results"][0]["tool"]["name"], "search");
  EXPECT_EQ(body["results"][0]["connection_id"], "docs");
  EXPECT_EQ(d.respond.response.body.find("launch"), std::string::npos);
  EXPECT_EQ(header(d.respond.response, "ETag").front(), '"');
  EXPECT_EQ(d.respond.background.size(), 1u);  // mail is stale
}

class RecordingSearcher : public ToolSearcher {
 public:
  Result<std::vector<SearchHit>> search(const SearchCorpus& corpus, std::string_view query,
                                        std::size_t limit) override {
    seen_tools.clear();
    for (const ToolCandidate& c : corpus.tools) seen_tools.push_back(c.tool["name"]);
    version = corpus.version;
    seen_query = std::string(query);
    seen_limit = limit;
    if (fail) return Error(ErrorCode::kInternal, "fts5: database disk image is malformed");
    // Out-of-range and surplus hits are dropped by the caller.
    return std::vector<SearchHit>{
        {1, "", "", 2.5}, {99, "", "", 1.0}, {0, "", "", 0.5}, {2, "", "", 0.1}};
  }
  std::vector<std::string> seen_tools;
  std::string version, seen_query;
  std::size_t seen_limit = 0;
  bool fail = false;
};

TEST(DiscoveryHttp, SearchHandsTheCorpusToTheConfiguredSearcher) {
  RecordingSearcher searcher;
  DiscoveryConfig config;
  config.searcher = &searcher;
  MemoryStore s = store();
  s.disabled_sets[{"docs", "shared"}] = {"tool:fetch"};
  DiscoveryExchange x(config);
  Driven d = drive(x, s, get("/v1/search", "q=anything&limit=2"), CallerAuth::member("alice"));
  EXPECT_EQ(searcher.seen_tools, (std::vector<std::string>{"search", "inbox"}));
  EXPECT_EQ(searcher.seen_query, "anything");
  EXPECT_EQ(searcher.seen_limit, 2u);
  EXPECT_FALSE(searcher.version.empty());
  Json body = *parse_json(d.respond.response.body);
  ASSERT_EQ(body["results"].size(), 2u);
  EXPECT_EQ(body["results"][0]["tool"]["name"], "inbox");
  EXPECT_EQ(body["results"][0]["score"], 2.5);
  EXPECT_EQ(body["results"][0]["status"], "stale");
  EXPECT_EQ(body["results"][1]["tool"]["name"], "search");

  searcher.fail = true;
  DiscoveryExchange y(config);
  d = drive(y, s, get("/v1/search", "q=x"), CallerAuth::member("alice"));
  EXPECT_EQ(d.respond.response.status, 500);
  EXPECT_EQ(d.respond.response.body.find("fts5"), std::string::npos);
  EXPECT_NE(d.respond.log->message.find("fts5"), std::string::npos);
}

TEST(DiscoveryHttp, SearchListsConnectionsWithNothingToSearch) {
  MemoryStore s = store();
  s.add_connection("new", "shared");
  s.grant("alice", "new");
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  Driven d = drive(x, s, get("/v1/search", "q=inbox"), CallerAuth::member("alice"));
  Json body = *parse_json(d.respond.response.body);
  EXPECT_EQ(body["unavailable"], Json::parse(R"([{"id":"new","status":"pending"}])"));
  EXPECT_EQ(body["results"][0]["tool"]["name"], "inbox");
}

TEST(DiscoveryHttp, AQueryWithNothingToSearchForIs400) {
  for (const char* q : {"q=!!!", "q=%22*%22"}) {
    Driven d = run(get("/v1/search", q));
    EXPECT_EQ(d.respond.response.status, 400) << q;
    EXPECT_EQ(error_code(d.respond.response), "BAD_REQUEST") << q;
  }
}

TEST(DiscoveryHttp, IndexedSearcherBuildsOneIndexPerCorpusVersion) {
  SearchIndexCache cache(8, 1 << 24);
  IndexedToolSearcher searcher(&cache);
  DiscoveryConfig config;
  config.searcher = &searcher;
  MemoryStore s = store();
  for (int i = 0; i < 3; ++i) {
    DiscoveryExchange x(config);
    Driven d = drive(x, s, get("/v1/search", "q=inbox"), CallerAuth::member("alice"));
    EXPECT_EQ((*parse_json(d.respond.response.body))["results"][0]["tool"]["name"], "inbox");
  }
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().hits, 2u);
  s.disabled_sets[{"mail", "member/alice"}] = {
      "tool:inbox"};  // a toggle is a new version: no stale hit
  DiscoveryExchange x(config);
  Driven d = drive(x, s, get("/v1/search", "q=inbox"), CallerAuth::member("alice"));
  EXPECT_EQ((*parse_json(d.respond.response.body))["results"], Json::array());
  EXPECT_EQ(cache.stats().misses, 2u);
}

TEST(DiscoveryHttp, SearchEntriesTakeTheTitleFromAnnotationsWhenNeeded) {
  SearchCorpus corpus;
  corpus.tools = {
      ToolCandidate{"c", "C", EntryStatus::kFresh,
                    Json::parse(R"({"name":"a","annotations":{"title":"T"},
                                               "description":"d"})")},
      ToolCandidate{"c", "C", EntryStatus::kFresh, Json::parse(R"({"name":"b","title":"Own"})")}};
  std::vector<SearchEntry> e = search_entries(corpus);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].title, "T");
  EXPECT_EQ(e[0].description, "d");
  EXPECT_EQ(e[1].title, "Own");
  EXPECT_EQ(e[1].connection_id, "c");
}

// ---- the exchange's own contract ---------------------------------------------------------------

TEST(DiscoveryHttp, StepsOutOfTurnAreInternalErrors) {
  DiscoveryConfig config;
  DiscoveryExchange x(config);
  DiscoveryStep step = x.resume_snapshot(Error(ErrorCode::kUnknown, "x"), kNow);
  EXPECT_EQ(std::get<Respond>(step).response.status, 500);
  DiscoveryExchange y(config);
  step = y.start(get("/v1/manifests"), CallerAuth::member("alice"), kNow);
  ASSERT_TRUE(std::holds_alternative<NeedSnapshot>(step));
  step = y.resume_enqueue({}, kNow);
  EXPECT_EQ(std::get<Respond>(step).response.status, 500);

  DiscoveryExchange z(config);
  (void)z.start(get("/v1/manifests"), CallerAuth::member("alice"), kNow);
  DiscoverySnapshot bobs(member_principal("bob"));
  step = z.resume_snapshot(bobs, kNow);
  EXPECT_EQ(std::get<Respond>(step).response.status, 500);
}

TEST(DiscoveryHttp, ErrorCodesAreStable) {
  const std::vector<std::pair<const char*, int>> expected = {
      {"UNAUTHENTICATED", 401},    {"NOT_FOUND", 404},
      {"METHOD_NOT_ALLOWED", 405}, {"BAD_REQUEST", 400},
      {"PAYLOAD_TOO_LARGE", 413},  {"URI_TOO_LONG", 414},
      {"STORE_UNAVAILABLE", 503},  {"UPSTREAM_UNAVAILABLE", 503},
      {"INTERNAL", 500},           {"FORBIDDEN", 403}};
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kHttpErrorCodeCount));
  for (int i = 0; i < kHttpErrorCodeCount; ++i) {
    auto code = static_cast<HttpErrorCode>(i);
    EXPECT_STREQ(http_error_name(code), expected[i].first);
    EXPECT_EQ(http_error_status(code), expected[i].second);
    HttpResponse r = error_response(code, "m");
    EXPECT_EQ(r.status, expected[i].second);
    EXPECT_EQ(*parse_json(r.body), Json::parse(std::string(R"({"error":{"code":")") +
                                               expected[i].first + R"(","message":"m"}})"));
  }
}

TEST(DiscoveryHttp, OpenApiDescribesEveryRouteAndErrorCode) {
  std::ifstream file(std::string(QUIVER_SOURCE_DIR) + "/schema/openapi.yaml");
  ASSERT_TRUE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  const std::string doc = text.str();
  for (const char* path :
       {"/v1/manifests:", "/v1/mcp-connections/{id}/manifest:",
        "/v1/mcp-connections/{id}/refresh-tools:", "/v1/search:", "/v1/webhooks/refresh:"}) {
    EXPECT_NE(doc.find(std::string("  ") + path), std::string::npos) << path;
  }
  for (int i = 0; i < kHttpErrorCodeCount; ++i) {
    const std::string name = http_error_name(static_cast<HttpErrorCode>(i));
    EXPECT_NE(doc.find("- " + name + " "), std::string::npos) << name;
  }
  EXPECT_NE(doc.find("shared/caller_token.h"), std::string::npos);
}

}  // namespace
}  // namespace quiver
