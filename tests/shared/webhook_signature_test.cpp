#include "shared/webhook_signature.h"

#include <cctype>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/sha256.h"

namespace quiver {
namespace {

constexpr int64_t kNow = 1'780'000'000'000;  // ms; a whole second
const std::string kSecret = "webhook-test-secret-0123456789abcdef";
const std::string kNewSecret = "webhook-rotated-secret-ZYXWVUTSRQ";
const std::string kBody = R"({"connection_id":"github","reason":"deploy"})";
const std::string kNs = "team-a";

// What any other implementation would send: hex HMAC-SHA256 over "<ns>\n<t>.<body>".
std::string v2(const std::string& secret, int64_t t_seconds, const std::string& body,
               const std::string& ns = kNs) {
  return hex_encode(hmac_sha256(secret, ns + "\n" + std::to_string(t_seconds) + "." + body));
}
// The deprecated form: over "<t>.<body>", no namespace.
std::string v1(const std::string& secret, int64_t t_seconds, const std::string& body) {
  return hex_encode(hmac_sha256(secret, std::to_string(t_seconds) + "." + body));
}

void expect_refused(const Result<WebhookVerified>& r, const std::string& why) {
  ASSERT_FALSE(r.ok()) << "accepted; expected: " << why;
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find(kSecret), std::string::npos);
  EXPECT_EQ(r.error().message.find(v2(kSecret, kNow / 1000, kBody).substr(0, 16)),
            std::string::npos);
}

// ---- signing and verification ------------------------------------------------------------------

TEST(WebhookSignature, SignsTheDocumentedFormat) {
  Result<std::string> header = sign_webhook(kSecret, kNs, kBody, kNow + 999);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(*header, "t=1780000000,v2=" + v2(kSecret, kNow / 1000, kBody));

  Result<std::string> both = sign_webhook({kSecret, kNewSecret}, kNs, kBody, kNow);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(*both, "t=1780000000,v2=" + v2(kSecret, kNow / 1000, kBody) +
                       ",v2=" + v2(kNewSecret, kNow / 1000, kBody));

  EXPECT_EQ(sign_webhook(std::vector<std::string>{}, kNs, kBody, kNow).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(sign_webhook(std::string(15, 's'), kNs, kBody, kNow).ok());
  EXPECT_FALSE(sign_webhook(kSecret, kNs, kBody, -1).ok());
}

TEST(WebhookSignature, RoundTrip) {
  Result<std::string> header = sign_webhook(kSecret, kNs, kBody, kNow);
  ASSERT_TRUE(header.ok());
  Result<WebhookVerified> v = verify_webhook(*header, kBody, {kSecret}, kNs, kNow + 2000);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->timestamp_ms, kNow);
  EXPECT_EQ(v->replay_key, "wh:" + sha256_hex("1780000000." + kBody));
  // Kept until t leaves the window: t + 300 s - now (+1).
  EXPECT_EQ(v->retain_for_ms, kNow + kDefaultWebhookToleranceMs - (kNow + 2000) + 1);
}

TEST(WebhookSignature, AcceptsAHeaderWrittenByHandWithSpacesAndUpperCaseHex) {
  std::string sig = v2(kSecret, kNow / 1000, kBody);
  for (char& c : sig) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string header = "  t=1780000000 , v0=legacy,  v2=" + sig + "  ";
  EXPECT_TRUE(verify_webhook(header, kBody, {kSecret}, kNs, kNow).ok());
  // Order of items does not matter.
  EXPECT_TRUE(verify_webhook("v2=" + sig + ",t=1780000000", kBody, {kSecret}, kNs, kNow).ok());
}

TEST(WebhookSignature, SecretRotation) {
  // Sender on the old secret, receiver already holding both.
  Result<std::string> old_only = sign_webhook(kSecret, kNs, kBody, kNow);
  ASSERT_TRUE(old_only.ok());
  EXPECT_TRUE(verify_webhook(*old_only, kBody, {kNewSecret, kSecret}, kNs, kNow).ok());
  // Sender signing with both, receiver on the new one only.
  Result<std::string> both = sign_webhook({kSecret, kNewSecret}, kNs, kBody, kNow);
  ASSERT_TRUE(both.ok());
  Result<WebhookVerified> v = verify_webhook(*both, kBody, {kNewSecret}, kNs, kNow);
  ASSERT_TRUE(v.ok());
  // Receiver on the new secret only refuses the old-only sender.
  expect_refused(verify_webhook(*old_only, kBody, {kNewSecret}, kNs, kNow), "no signature matches");
  // The replay key does not depend on which signature matched: dropping one of two v2 entries
  // from a captured request still replays the same key.
  std::string stripped = "t=1780000000,v2=" + v2(kNewSecret, kNow / 1000, kBody);
  Result<WebhookVerified> again = verify_webhook(stripped, kBody, {kSecret, kNewSecret}, kNs, kNow);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->replay_key, v->replay_key);
}

TEST(WebhookSignature, ReplayKeyDiffersPerDelivery) {
  Result<std::string> a = sign_webhook(kSecret, kNs, kBody, kNow);
  Result<std::string> b = sign_webhook(kSecret, kNs, kBody, kNow + 1000);
  Result<std::string> c = sign_webhook(kSecret, kNs, kBody + " ", kNow);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::string ka = verify_webhook(*a, kBody, {kSecret}, kNs, kNow)->replay_key;
  std::string kb = verify_webhook(*b, kBody, {kSecret}, kNs, kNow)->replay_key;
  std::string kc = verify_webhook(*c, kBody + " ", {kSecret}, kNs, kNow)->replay_key;
  EXPECT_NE(ka, kb);
  EXPECT_NE(ka, kc);
  EXPECT_EQ(ka.rfind("wh:", 0), 0u);
  EXPECT_EQ(ka.size(), 3u + 64u);
}

TEST(WebhookSignature, TimestampTolerance) {
  Result<std::string> header = sign_webhook(kSecret, kNs, kBody, kNow);
  ASSERT_TRUE(header.ok());
  // Exactly at the edge of the window either way: accepted. One ms beyond: refused.
  EXPECT_TRUE(verify_webhook(*header, kBody, {kSecret}, kNs, kNow + 300'000).ok());
  expect_refused(verify_webhook(*header, kBody, {kSecret}, kNs, kNow + 300'001), "older");
  EXPECT_TRUE(verify_webhook(*header, kBody, {kSecret}, kNs, kNow - 300'000).ok());
  expect_refused(verify_webhook(*header, kBody, {kSecret}, kNs, kNow - 300'001), "future");
  // A custom tolerance.
  expect_refused(verify_webhook(*header, kBody, {kSecret}, kNs, kNow + 10'001, 10'000), "older");
  Result<WebhookVerified> v = verify_webhook(*header, kBody, {kSecret}, kNs, kNow - 299'000);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->retain_for_ms, 599'001);  // a future t is kept until t + tolerance
  EXPECT_EQ(verify_webhook(*header, kBody, {kSecret}, kNs, kNow, 0).error().code,
            ErrorCode::kInvalidArgument);
}

TEST(WebhookSignature, RefusesBadSignatures) {
  Result<std::string> header = sign_webhook(kSecret, kNs, kBody, kNow);
  ASSERT_TRUE(header.ok());
  expect_refused(verify_webhook(*header, kBody + " ", {kSecret}, kNs, kNow),
                 "no signature matches");
  expect_refused(verify_webhook(*header, R"({"connection_id":"gitlab","reason":"deploy"})",
                                {kSecret}, kNs, kNow),
                 "no signature matches");
  expect_refused(verify_webhook(*header, kBody, {kNewSecret}, kNs, kNow), "no signature matches");
  // The signed timestamp cannot be moved: a fresh t with the old signature fails.
  std::string moved = "t=1780000100,v2=" + v2(kSecret, kNow / 1000, kBody);
  expect_refused(verify_webhook(moved, kBody, {kSecret}, kNs, kNow), "no signature matches");
  // Every single-character change of the signature is refused.
  const std::size_t at = header->find("v2=") + 3;
  for (std::size_t i = at; i < header->size(); ++i) {
    std::string h = *header;
    h[i] = h[i] == '0' ? '1' : '0';
    EXPECT_FALSE(verify_webhook(h, kBody, {kSecret}, kNs, kNow).ok()) << i;
  }
}

TEST(WebhookSignature, RefusesMalformedHeaders) {
  const std::string sig = v2(kSecret, kNow / 1000, kBody);
  struct Case {
    std::string header;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "missing X-Quiver-Signature"},
      {"   ", "missing"},
      {"v2=" + sig, "no timestamp"},
      {"t=1780000000", "no v2 signature"},
      {"t=1780000000,v0=" + sig, "no v2 signature"},
      {"t=1780000000,t=1780000000,v2=" + sig, "more than one timestamp"},
      {"t=,v2=" + sig, "unix seconds"},
      {"t=-1780000000,v2=" + sig, "unix seconds"},
      {"t=01780000000,v2=" + sig, "unix seconds"},
      {"t=1780000000.5,v2=" + sig, "unix seconds"},
      {"t=1780000000000000,v2=" + sig, "unix seconds"},
      {"t=1780000000,v2=" + sig.substr(1), "64 hex"},
      {"t=1780000000,v2=" + sig + "0", "64 hex"},
      {"t=1780000000,v2=" + sig.substr(0, 63) + "g", "64 hex"},
      {"t=1780000000,v2=sha256=" + sig, "64 hex"},
      {"t=1780000000;v2=" + sig, "unix seconds"},
      {"t=1780000000,,v2=" + sig, "key=value"},
      {"t=1780000000,v2=" + sig + ",", "key=value"},
      {"t=1780000000 v2=" + sig, "unix seconds"},
      {"1780000000," + sig, "key=value"},
      {"=1780000000,v2=" + sig, "key=value"},
      {"t=1780000000,v2=" + sig + ",x=" + std::string(2100, 'a'), "2048"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header.substr(0, 80));
    expect_refused(verify_webhook(c.header, kBody, {kSecret}, kNs, kNow), c.why);
  }
  std::string many = "t=1780000000";
  for (int i = 0; i < 9; ++i) many += ",v2=" + sig;
  expect_refused(verify_webhook(many, kBody, {kSecret}, kNs, kNow), "more than 8");
  // Every truncation of a good header is refused (and nothing crashes).
  Result<std::string> good = sign_webhook(kSecret, kNs, kBody, kNow);
  ASSERT_TRUE(good.ok());
  for (std::size_t n = 0; n < good->size(); ++n) {
    EXPECT_FALSE(verify_webhook(good->substr(0, n), kBody, {kSecret}, kNs, kNow).ok()) << n;
  }
}

TEST(WebhookSignature, SecretsAreConfiguration) {
  Result<std::string> header = sign_webhook(kSecret, kNs, kBody, kNow);
  ASSERT_TRUE(header.ok());
  Result<WebhookVerified> none = verify_webhook(*header, kBody, {}, kNs, kNow);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(none.error().message.find("no webhook secret"), std::string::npos);
  Result<WebhookVerified> empty = verify_webhook(*header, kBody, {kSecret, ""}, kNs, kNow);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(verify_webhook(*header, kBody, {std::string(15, 'x')}, kNs, kNow).ok());
}

TEST(WebhookSignature, EmptyAndBinaryBodies) {
  for (const std::string& body : {std::string(), std::string("\0\xff\n.", 4)}) {
    Result<std::string> header = sign_webhook(kSecret, kNs, body, kNow);
    ASSERT_TRUE(header.ok());
    EXPECT_TRUE(verify_webhook(*header, body, {kSecret}, kNs, kNow).ok());
  }
}

// One secret shared by two namespaces: a request signed for one does not verify in the other, so
// a captured request cannot be replayed once into each namespace (each has its own replay guard).
TEST(WebhookSignature, TheNamespaceIsSigned) {
  Result<std::string> header = sign_webhook(kSecret, "team-a", kBody, kNow);
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(verify_webhook(*header, kBody, {kSecret}, "team-a", kNow).ok());
  expect_refused(verify_webhook(*header, kBody, {kSecret}, "team-b", kNow),
                 "no signature matches a configured secret for namespace team-b");
  EXPECT_EQ(sign_webhook(kSecret, "bad namespace", kBody, kNow).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(verify_webhook(*header, kBody, {kSecret}, "", kNow).error().code,
            ErrorCode::kInvalidArgument);
}

// Deprecated, accepted for one release: the v1 form without the namespace, flagged so hosts log
// it. A header carrying both forms (a sender in transition) counts as v2.
TEST(WebhookSignature, TheDeprecatedV1FormIsStillAcceptedAndFlagged) {
  Result<std::string> old_form = sign_webhook_v1(kSecret, kBody, kNow);
  ASSERT_TRUE(old_form.ok());
  EXPECT_EQ(*old_form, "t=1780000000,v1=" + v1(kSecret, kNow / 1000, kBody));
  Result<WebhookVerified> v = verify_webhook(*old_form, kBody, {kSecret}, kNs, kNow);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_TRUE(v->legacy_v1);
  EXPECT_EQ(v->replay_key, "wh:" + sha256_hex("1780000000." + kBody));  // same guard as v2
  expect_refused(verify_webhook(*old_form, kBody + " ", {kSecret}, kNs, kNow),
                 "no signature matches");

  const std::string both =
      *sign_webhook(kSecret, kNs, kBody, kNow) + ",v1=" + v1(kSecret, kNow / 1000, kBody);
  Result<WebhookVerified> b = verify_webhook(both, kBody, {kSecret}, kNs, kNow);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->legacy_v1);
  EXPECT_EQ(b->replay_key, v->replay_key);
  EXPECT_FALSE(verify_webhook(*sign_webhook(kSecret, kNs, kBody, kNow), kBody, {kSecret}, kNs, kNow)
                   ->legacy_v1);
}

// ---- the body ----------------------------------------------------------------------------------

Principal member(const char* id) { return Principal::member(id).value(); }

TEST(WebhookSignature, ParsesOneConnection) {
  Result<WebhookRefreshRequest> r = parse_webhook_refresh(kBody);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->targets.size(), 1u);
  EXPECT_EQ(r->targets[0].connection_id, "github");
  EXPECT_FALSE(r->targets[0].principal.has_value());
  EXPECT_EQ(r->targets[0].reason, "deploy");

  r = parse_webhook_refresh(
      R"({"connection_id":"jira.prod","principal":"member/alice@example.com","extra":[1]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->targets.size(), 1u);
  EXPECT_EQ(r->targets[0].principal, member("alice@example.com"));
  EXPECT_EQ(r->targets[0].reason, kDefaultWebhookReason);

  r = parse_webhook_refresh(R"({"connection_id":"a","principal":null,"reason":null})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->targets[0].principal.has_value());
  EXPECT_EQ(r->targets[0].reason, kDefaultWebhookReason);

  r = parse_webhook_refresh(R"({"connection_id":"a","principal":"shared"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->targets[0].principal, Principal::shared());
}

TEST(WebhookSignature, ParsesAListOfConnections) {
  Result<WebhookRefreshRequest> r = parse_webhook_refresh(R"({
    "reason": "plugin reload",
    "connections": [
      "github",
      {"connection_id": "jira", "principal": "member/bob", "reason": "token rotated"},
      {"connection_id": "jira", "principal": "member/bob"},
      "github",
      {"connection_id": "github", "principal": "shared"}
    ]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::vector<WebhookRefreshTarget> expected = {
      {"github", std::nullopt, "plugin reload"},
      {"jira", member("bob"), "token rotated"},
      {"github", Principal::shared(), "plugin reload"},
  };
  EXPECT_EQ(r->targets, expected);
}

TEST(WebhookSignature, BodyErrorsNameTheField) {
  struct Case {
    std::string body;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "malformed JSON"},
      {"{", "malformed JSON"},
      {R"(["github"])", "JSON object"},
      {"{}", "needs connection_id or connections"},
      {R"({"connection_id":"a","connections":["b"]})", "both"},
      {R"({"connection_id":7})", "connection_id must be a string"},
      {R"({"connection_id":""})", "connection_id: connection id is empty"},
      {R"({"connection_id":"a:b"})", "connection_id: connection id has a character"},
      {R"({"connection_id":"a","principal":"alice"})", "principal:"},
      {R"({"connection_id":"a","principal":"member/a b"})", "principal:"},
      {R"({"connection_id":"a","principal":{"id":"x"}})", "principal must be a string"},
      {R"({"connection_id":"a","reason":""})", "reason must be 1..200"},
      {R"({"connection_id":"a","reason":"line\nbreak"})", "reason must be"},
      {R"({"connection_id":"a","reason":")" + std::string(201, 'r') + "\"}", "reason must be"},
      {R"({"connections":"github"})", "connections must be an array"},
      {R"({"connections":[]})", "connections is empty"},
      {R"({"connections":["a",5]})", "connections[1] must be"},
      {R"({"connections":["a",{"principal":"shared"}]})",
       "connections[1].connection_id is missing"},
      {R"({"connections":["a","b/c"]})", "connections[1].connection_id: "},
      {R"({"connections":[{"connection_id":"a","principal":"x"}]})", "connections[0].principal:"},
      {R"({"connections":["a"],"reason":5})", "reason must be a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    Result<WebhookRefreshRequest> r = parse_webhook_refresh(c.body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find(c.why), std::string::npos) << r.error().message;
  }
}

TEST(WebhookSignature, BodyBounds) {
  std::string list = R"({"connections":[)";
  for (std::size_t i = 0; i < kMaxWebhookTargets; ++i) {
    list += (i ? ",\"c" : "\"c") + std::to_string(i) + "\"";
  }
  Result<WebhookRefreshRequest> full = parse_webhook_refresh(list + "]}");
  ASSERT_TRUE(full.ok()) << full.error().message;
  EXPECT_EQ(full->targets.size(), kMaxWebhookTargets);
  Result<WebhookRefreshRequest> over = parse_webhook_refresh(list + ",\"one-more\"]}");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, ErrorCode::kTooLarge);

  std::string huge =
      R"({"connection_id":"a","pad":")" + std::string(kMaxWebhookBodyBytes, 'p') + "\"}";
  Result<WebhookRefreshRequest> big = parse_webhook_refresh(huge);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kTooLarge);
}

}  // namespace
}  // namespace quiver
