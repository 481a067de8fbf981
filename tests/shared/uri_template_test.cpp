// shared/uri_template.h: URIs against RFC 6570 templates (levels 1 and 2 exactly, 3 and 4
// over-matched), and the endpoint's use of it: a read of a URI that expands from a disabled
// resource template is refused as the disabled resource would be.
#include "shared/uri_template.h"

#include <cctype>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "shared/canonical_json.h"
#include "shared/mcp_endpoint.h"
#include "tests/support/discovery_fixture.h"

namespace quiver {
namespace {

TEST(UriTemplate, LevelOneAndTwoExpressions) {
  // {var}: unreserved characters and pct-encoded triplets only (a `/` would have been encoded).
  EXPECT_TRUE(uri_matches_template("file:///{name}", "file:///readme.md"));
  EXPECT_TRUE(uri_matches_template("file:///{name}", "file:///"));  // undefined: empty
  EXPECT_TRUE(uri_matches_template("file:///{name}", "file:///a%2Fb"));
  EXPECT_FALSE(uri_matches_template("file:///{name}", "file:///a/b"));
  EXPECT_FALSE(uri_matches_template("file:///{name}", "file:///a?b"));
  EXPECT_FALSE(uri_matches_template("file:///{name}", "file:///a%2"));
  // {+var}: reserved characters as they are.
  EXPECT_TRUE(uri_matches_template("file:///{+path}", "file:///a/b/c.txt"));
  EXPECT_TRUE(uri_matches_template("{+base}/x", "http://h/p/x"));
  // {#var}: nothing, or `#` and reserved characters.
  EXPECT_TRUE(uri_matches_template("doc://a{#frag}", "doc://a"));
  EXPECT_TRUE(uri_matches_template("doc://a{#frag}", "doc://a#sec/1"));
  EXPECT_FALSE(uri_matches_template("doc://a{#frag}", "doc://ab"));
  // Literals compare as written; every part must match, the whole URI.
  EXPECT_TRUE(uri_matches_template("test://template/{i}/{id}", "test://template/1/abc"));
  EXPECT_FALSE(uri_matches_template("test://template/{i}/{id}", "test://template/1"));
  EXPECT_FALSE(uri_matches_template("test://template/{i}/{id}", "test://other/1/abc"));
  EXPECT_FALSE(uri_matches_template("file:///{name}.txt", "file:///a.md"));
  EXPECT_TRUE(uri_matches_template("file:///{name}.txt", "file:///a.b.txt"));
  EXPECT_TRUE(uri_matches_template("no-vars", "no-vars"));
  EXPECT_FALSE(uri_matches_template("no-vars", "no-vars2"));
  // Levels 3 and 4 over-match (hiding more is the safe side); a malformed template only itself.
  EXPECT_TRUE(uri_matches_template("api://x{/seg}", "api://x/a/b"));
  EXPECT_TRUE(uri_matches_template("api://x{?q,page}", "api://x?q=1&page=2"));
  EXPECT_TRUE(uri_matches_template("api://{x,y}", "api://a/b"));
  EXPECT_FALSE(uri_matches_template("api://{x", "api://abc"));
  EXPECT_TRUE(uri_matches_template("api://{x", "api://{x"));
}

// RFC 6570 expansion of levels 1 and 2 (the test's own, from the RFC's rules): every expansion
// of random values into random templates matches its template.
std::string pct(unsigned char c) {
  const char* hex = "0123456789ABCDEF";
  return std::string("%") + hex[c >> 4] + hex[c & 15];
}
bool unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}
bool reserved(unsigned char c) {
  return std::string_view(":/?#[]@!$&'()*+,;=").find(static_cast<char>(c)) !=
         std::string_view::npos;
}
std::string expand(char op, const std::string& value, bool defined) {
  if (!defined) return "";
  std::string out = op == '#' ? "#" : "";
  for (unsigned char c : value) {
    if (unreserved(c) || (op != '\0' && reserved(c))) {
      out += static_cast<char>(c);
    } else {
      out += pct(c);
    }
  }
  return out;
}

TEST(UriTemplate, EveryExpansionMatchesItsTemplate) {
  std::mt19937 rng(6570);
  const std::string alphabet = "ab/?#%:.-_~ é{}";
  auto random_text = [&](std::size_t max) {
    std::string s;
    std::size_t n = rng() % (max + 1);
    for (std::size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  const char ops[] = {'\0', '+', '#'};
  for (int round = 0; round < 3000; ++round) {
    std::string tmpl;
    std::string uri;
    const int parts = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < parts; ++i) {
      std::string literal = "x://" + std::to_string(rng() % 3) + "/";
      tmpl += literal;
      uri += literal;
      const char op = ops[rng() % 3];
      tmpl += std::string("{") + (op ? std::string(1, op) : "") + "v" + std::to_string(i) + "}";
      uri += expand(op, random_text(6), rng() % 4 != 0);
    }
    EXPECT_TRUE(uri_matches_template(tmpl, uri)) << tmpl << " " << uri;
  }
}

TEST(UriTemplate, HostileInputStaysLinear) {
  // Many expressions against a long URI: reachable-position sets, never backtracking.
  std::string tmpl;
  for (int i = 0; i < 100; ++i) tmpl += "{a" + std::to_string(i) + "}a";
  std::string uri(20'000, 'a');
  uri += "!";
  EXPECT_FALSE(uri_matches_template(tmpl, uri));
}

TEST(UriTemplate, ADisabledTemplateHidesTheReadsItDescribes) {
  DisabledOverlay overlay{"resource_template:file:///{name}", "resource:file:///secret"};
  EXPECT_FALSE(resource_read_visible(overlay, "file:///notes"));
  EXPECT_FALSE(resource_read_visible(overlay, "file:///secret"));
  EXPECT_TRUE(resource_read_visible(overlay, "file:///dir/notes"));  // {name} has no `/`
  EXPECT_TRUE(resource_read_visible(overlay, "mem://notes"));
  EXPECT_TRUE(resource_read_visible(DisabledOverlay{}, "file:///notes"));
}

// Through the endpoint: alice disabled docs' template file:///{path}; a read of a URI it expands
// to is "not found (disabled)" without any relay, a URI of no template is relayed.
TEST(UriTemplate, TheEndpointRefusesAReadOfADisabledTemplatesUri) {
  using namespace testing;
  MemoryStore s;
  s.add_connection("docs", "shared");
  s.grant("alice", "docs");
  s.manifests[{"docs", "shared"}] =
      data_entry("h-docs", kNow - kMinute, kNow + 14 * kMinute,
                 manifest_json({"search"}, {"file:///readme"}, {"file:///{path}"}, {}, "docs"));
  s.disabled_sets[{"docs", "shared"}] = {"resource_template:file:///{path}"};
  McpEndpointConfig config;
  config.freshness = policy();
  for (const auto& [uri, relayed] : std::vector<std::pair<std::string, bool>>{
           {"quiver://docs/file:///other", false}, {"quiver://docs/http://x/y", true}}) {
    McpEndpoint e(config);
    Json body = Json::object({{"jsonrpc", "2.0"},
                              {"id", 1},
                              {"method", "resources/read"},
                              {"params", Json::object({{"uri", uri}})}});
    HttpRequest r{"POST",
                  "/mcp",
                  "",
                  {{"Content-Type", "application/json"}, {"Accept", "application/json"}},
                  serialize_json(body)};
    McpStep step = e.start(r, CallerAuth::member("alice"), kNow);
    bool asked_relay = false;
    for (int guard = 0; guard < 10 && !std::holds_alternative<Respond>(step); ++guard) {
      if (auto* n = std::get_if<NeedSnapshot>(&step)) {
        step = e.resume_snapshot(read_snapshot(s, n->member, n->query), kNow);
      } else {
        asked_relay = true;
        step = e.resume_relay({RelayReply::ok(Json::object({{"contents", Json::array()}}))}, kNow);
      }
    }
    ASSERT_TRUE(std::holds_alternative<Respond>(step));
    EXPECT_EQ(asked_relay, relayed) << uri;
    Result<Json> answer = parse_json(std::get<Respond>(step).response.body);
    ASSERT_TRUE(answer.ok());
    if (!relayed) {
      EXPECT_EQ((*answer)["error"]["code"], kMcpErrorResourceNotFound) << serialize_json(*answer);
    } else {
      EXPECT_TRUE(answer->contains("result")) << serialize_json(*answer);
    }
  }
}

}  // namespace
}  // namespace quiver
