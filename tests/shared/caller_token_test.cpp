#include "shared/caller_token.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/json.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

constexpr int64_t kT0 = 1'780'000'000'000;  // ms
constexpr int64_t kHour = 3'600'000;
const std::string kSecretA = "caller-token-test-secret-A-0123456789abcdef";  // 43 bytes
const std::string kSecretB = "caller-token-test-secret-B-fedcba9876543210";

Keyring ring() {
  Result<Keyring> k = Keyring::create({{"a", kSecretA}, {"b", kSecretB}});
  EXPECT_TRUE(k.ok());
  return std::move(k).value();
}

std::string mint(std::string_view member = "alice", std::string_view kid = "a",
                 const std::string& secret = kSecretA, int64_t now = kT0, int64_t ttl = kHour,
                 const MintOptions& options = {}) {
  Result<std::string> t = mint_caller_token(member, secret, kid, now, ttl, options);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? t.value() : std::string();
}

// A token assembled by hand from raw header and claims JSON, signed with HS256 under `secret`.
std::string forge(const std::string& header_json, const std::string& claims_json,
                  const std::string& secret = kSecretA) {
  std::string input = base64url_encode(header_json) + "." + base64url_encode(claims_json);
  Digest256 mac = hmac_sha256(secret, input);
  return input + "." +
         base64url_encode(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

const char* kHeaderA = R"({"alg":"HS256","typ":"JWT","kid":"a"})";

std::string claims(const std::string& extra = "", int64_t exp_s = kT0 / 1000 + 3600) {
  return R"({"sub":"alice","iat":)" + std::to_string(kT0 / 1000) + R"(,"exp":)" +
         std::to_string(exp_s) + R"(,"aud":"quiver")" + extra + "}";
}

// Asserts a refusal: kUnauthenticated, the message mentions `why`, and it never quotes the token
// or a secret.
void expect_refused(const Result<CallerIdentity>& r, const std::string& why,
                    const std::string& token) {
  ASSERT_FALSE(r.ok()) << "accepted a token that should fail with: " << why;
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find(kSecretA), std::string::npos);
  EXPECT_EQ(r.error().message.find(kSecretB), std::string::npos);
  for (std::size_t i = 0; i + 12 <= token.size(); i += 12) {
    EXPECT_EQ(r.error().message.find(token.substr(i, 12)), std::string::npos)
        << "the message quotes the token: " << r.error().message;
  }
}

// ---- key ring ----------------------------------------------------------------------------------

TEST(CallerToken, KeyringRefusesShortSecretsAndBadKeyIds) {
  Result<Keyring> short_key = Keyring::create({{"a", std::string(31, 'x')}});
  ASSERT_FALSE(short_key.ok());
  EXPECT_EQ(short_key.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(short_key.error().message.find("32"), std::string::npos);
  EXPECT_EQ(short_key.error().message.find(std::string(31, 'x')), std::string::npos);
  EXPECT_TRUE(Keyring::create({{"a", std::string(32, 'x')}}).ok());

  EXPECT_FALSE(Keyring::create({}).ok());
  EXPECT_FALSE(Keyring::create({{"a", kSecretA}, {"a", kSecretB}}).ok());
  for (const std::string& kid : {std::string(""), std::string("a b"), std::string("a/b"),
                                 std::string(65, 'k'), std::string("k\xc3\xa9")}) {
    Result<Keyring> r = Keyring::create({{kid, kSecretA}});
    EXPECT_FALSE(r.ok()) << kid;
  }
  EXPECT_TRUE(Keyring::create({{std::string(64, 'k'), kSecretA}}).ok());
}

TEST(CallerToken, KeyringFromJson) {
  Result<Keyring> k =
      Keyring::from_json(R"({"2026-01": ")" + kSecretA + R"(", "2026-02": ")" + kSecretB + "\"}");
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(k->size(), 2u);
  ASSERT_NE(k->secret("2026-02"), nullptr);
  EXPECT_EQ(*k->secret("2026-02"), kSecretB);
  EXPECT_EQ(k->secret("2026-03"), nullptr);

  // Malformed text is reported without quoting it (it may hold a secret).
  Result<Keyring> broken = Keyring::from_json(R"({"a": ")" + kSecretA + R"(" "b": 1})");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().message.find(kSecretA.substr(0, 10)), std::string::npos)
      << broken.error().message;
  EXPECT_FALSE(Keyring::from_json(R"(["a"])").ok());
  EXPECT_FALSE(Keyring::from_json(R"({"a": 12})").ok());
  EXPECT_FALSE(Keyring::from_json(R"({"a": "short"})").ok());
  EXPECT_FALSE(Keyring::from_json("{}").ok());
  EXPECT_EQ(Keyring::from_json(std::string(70000, ' ')).error().code, ErrorCode::kTooLarge);
}

// ---- round trips -------------------------------------------------------------------------------

TEST(CallerToken, RoundTrip) {
  Keyring k = ring();
  std::string token = mint("alice@example.com", "a", kSecretA, kT0 + 999, kHour);
  EXPECT_EQ(std::count(token.begin(), token.end(), '.'), 2);
  Result<CallerIdentity> id = verify_caller_token(token, k, kT0 + 5000);
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->member_id, "alice@example.com");
  EXPECT_EQ(id->principal.str(), "member/alice@example.com");
  EXPECT_EQ(id->kid, "a");
  EXPECT_EQ(id->issued_at_ms, kT0);
  EXPECT_EQ(id->expires_at_ms, kT0 + kHour);
  EXPECT_FALSE(id->ns.has_value());
  EXPECT_FALSE(id->jti.has_value());
  EXPECT_FALSE(id->role.has_value());
  EXPECT_FALSE(id->is_operator());
}

TEST(CallerToken, TheOperatorRoleClaim) {
  Keyring k = ring();
  MintOptions options;
  options.role = kOperatorRole;
  std::string token = mint("ops", "a", kSecretA, kT0, kHour, options);
  Result<CallerIdentity> id = verify_caller_token(token, k, kT0);
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->role, "operator");
  EXPECT_TRUE(id->is_operator());
  // Any other role is carried but grants nothing; the claim is signed like the others, so a
  // member cannot add it to their own token.
  options.role = "auditor";
  id = verify_caller_token(mint("bob", "a", kSecretA, kT0, kHour, options), k, kT0);
  ASSERT_TRUE(id.ok());
  EXPECT_FALSE(id->is_operator());
  const std::string member = mint("bob");
  const std::string forged_claims = base64url_encode(claims(R"(,"role":"operator")"));
  const std::string tampered =
      member.substr(0, member.find('.') + 1) + forged_claims + member.substr(member.rfind('.'));
  expect_refused(verify_caller_token(tampered, k, kT0), "signature", tampered);
  // A role that is not a short printable string is refused, minting and verifying.
  for (const char* bad : {R"(,"role":7)", R"(,"role":"")", R"(,"role":["operator"])"}) {
    std::string t = forge(kHeaderA, claims(bad));
    expect_refused(verify_caller_token(t, k, kT0), "role", t);
  }
  options.role = "two words";
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, kHour, options).ok());
  options.role = std::string(kMaxTokenRoleLength + 1, 'r');
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, kHour, options).ok());
}

TEST(CallerToken, RoundTripWithNamespaceJtiAudienceAndRotation) {
  Keyring k = ring();
  MintOptions options;
  options.audience = "quiver-staging";
  options.ns = "team-a";
  options.jti = "0f8e7d";
  std::string token = mint("bob", "b", kSecretB, kT0, 10 * 60'000, options);
  VerifyOptions verify;
  verify.audience = "quiver-staging";
  verify.ns = "team-a";
  Result<CallerIdentity> id = verify_caller_token(token, k, kT0 + 1000, verify);
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->kid, "b");
  EXPECT_EQ(id->ns, "team-a");
  EXPECT_EQ(id->jti, "0f8e7d");
  // The default audience does not accept it, nor does another namespace.
  expect_refused(verify_caller_token(token, k, kT0 + 1000), "audience", token);
  verify.ns = "team-b";
  expect_refused(verify_caller_token(token, k, kT0 + 1000, verify), "namespace", token);

  // Rotation: a ring that dropped key "a" refuses tokens signed by it.
  std::string old_token = mint("alice", "a", kSecretA);
  Result<Keyring> rotated = Keyring::create({{"b", kSecretB}});
  ASSERT_TRUE(rotated.ok());
  expect_refused(verify_caller_token(old_token, *rotated, kT0), "unknown key id", old_token);
}

TEST(CallerToken, MintRefusesBadInput) {
  EXPECT_FALSE(mint_caller_token("alice", std::string(31, 's'), "a", kT0, kHour).ok());
  EXPECT_FALSE(mint_caller_token("member/alice", kSecretA, "a", kT0, kHour).ok());
  EXPECT_FALSE(mint_caller_token("", kSecretA, "a", kT0, kHour).ok());
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "", kT0, kHour).ok());
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a b", kT0, kHour).ok());
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, 0).ok());
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, -5).ok());
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", -1, kHour).ok());
  MintOptions bad_ns;
  bad_ns.ns = "a}b";
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, kHour, bad_ns).ok());
  MintOptions bad_jti;
  bad_jti.jti = "has space";
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, kHour, bad_jti).ok());
  MintOptions bad_aud;
  bad_aud.audience = "";
  EXPECT_FALSE(mint_caller_token("alice", kSecretA, "a", kT0, kHour, bad_aud).ok());
}

// ---- time --------------------------------------------------------------------------------------

TEST(CallerToken, ExpiryHonoursTheLeeway) {
  Keyring k = ring();
  std::string token = mint("alice", "a", kSecretA, kT0, kHour);
  const int64_t exp = kT0 + kHour;
  VerifyOptions strict;
  strict.leeway_ms = 0;
  EXPECT_TRUE(verify_caller_token(token, k, exp - 1, strict).ok());
  expect_refused(verify_caller_token(token, k, exp, strict), "expired", token);
  // With the default leeway (60 s) it is still good 59.999 s after exp, not at 60 s.
  EXPECT_TRUE(verify_caller_token(token, k, exp + kDefaultTokenLeewayMs - 1).ok());
  expect_refused(verify_caller_token(token, k, exp + kDefaultTokenLeewayMs), "expired", token);
}

TEST(CallerToken, NotYetValid) {
  Keyring k = ring();
  const int64_t s = kT0 / 1000;
  // nbf 10 min ahead: refused now, accepted from nbf - leeway.
  std::string nbf = forge(kHeaderA, claims(R"(,"nbf":)" + std::to_string(s + 600)));
  expect_refused(verify_caller_token(nbf, k, kT0), "not valid yet", nbf);
  EXPECT_TRUE(verify_caller_token(nbf, k, kT0 + 600'000 - kDefaultTokenLeewayMs).ok());
  // A token minted on a clock 5 minutes fast: iat in the future beyond the leeway.
  std::string ahead = mint("alice", "a", kSecretA, kT0 + 300'000, kHour);
  expect_refused(verify_caller_token(ahead, k, kT0), "future", ahead);
  // ... but 30 s of skew is within the leeway.
  std::string skewed = mint("alice", "a", kSecretA, kT0 + 30'000, kHour);
  EXPECT_TRUE(verify_caller_token(skewed, k, kT0).ok());
}

TEST(CallerToken, ClaimTypes) {
  Keyring k = ring();
  const std::string s = std::to_string(kT0 / 1000);
  const std::string later = std::to_string(kT0 / 1000 + 3600);
  struct Case {
    std::string claims;
    std::string why;
  };
  const std::vector<Case> cases = {
      {R"({"iat":)" + s + R"(,"exp":)" + later + R"(,"aud":"quiver"})", "subject"},
      {R"({"sub":42,"exp":)" + later + R"(,"aud":"quiver"})", "subject"},
      {R"({"sub":"member/alice","exp":)" + later + R"(,"aud":"quiver"})", "subject"},
      {R"({"sub":"a b","exp":)" + later + R"(,"aud":"quiver"})", "subject"},
      {R"({"sub":"alice","aud":"quiver"})", "expiry"},
      {R"({"sub":"alice","exp":")" + later + R"(","aud":"quiver"})", "NumericDate"},
      {R"({"sub":"alice","exp":-1,"aud":"quiver"})", "NumericDate"},
      {R"({"sub":"alice","exp":1e300,"aud":"quiver"})", "NumericDate"},
      {R"({"sub":"alice","exp":)" + later + R"(,"iat":true,"aud":"quiver"})", "NumericDate"},
      {R"({"sub":"alice","exp":)" + later + "}", "audience"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":"api"})", "audience"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":["api","web"]})", "audience"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":[]})", "audience"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":{"quiver":1}})", "audience"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":"quiver","ns":"a:b"})", "namespace"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":"quiver","ns":7})", "namespace"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":"quiver","jti":""})", "jti"},
      {R"({"sub":"alice","exp":)" + later + R"(,"aud":"quiver","jti":["x"]})", "jti"},
      {R"(["sub","alice"])", "not a JSON object"},
      {R"({"sub":"alice")", "not JSON"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.claims);
    std::string token = forge(kHeaderA, c.claims);
    expect_refused(verify_caller_token(token, k, kT0), c.why, token);
  }
  // An audience array that holds ours is accepted; unknown claims are ignored.
  std::string ok =
      forge(kHeaderA, R"({"sub":"alice","exp":)" + later + R"(,"aud":["api","quiver"],"iss":"x"})");
  EXPECT_TRUE(verify_caller_token(ok, k, kT0).ok());
}

// ---- header and signature ----------------------------------------------------------------------

TEST(CallerToken, RefusesEveryAlgorithmButHs256) {
  Keyring k = ring();
  // alg none, unsigned (the classic forgery) and with a signature appended.
  const std::string c = claims();
  const std::string none_header = R"({"alg":"none","typ":"JWT","kid":"a"})";
  std::string unsigned_token = base64url_encode(none_header) + "." + base64url_encode(c) + ".";
  expect_refused(verify_caller_token(unsigned_token, k, kT0), "algorithm", unsigned_token);
  std::string none_signed = forge(none_header, c);
  expect_refused(verify_caller_token(none_signed, k, kT0), "algorithm", none_signed);
  for (const char* alg : {"None", "NONE", "hs256", "HS384", "HS512", "RS256", "ES256", "PS256",
                          "EdDSA", "HS256 ", ""}) {
    std::string token = forge(std::string(R"({"alg":")") + alg + R"(","typ":"JWT","kid":"a"})", c);
    SCOPED_TRACE(alg);
    expect_refused(verify_caller_token(token, k, kT0), "algorithm", token);
  }
  std::string no_alg = forge(R"({"typ":"JWT","kid":"a"})", c);
  expect_refused(verify_caller_token(no_alg, k, kT0), "no alg", no_alg);
  std::string alg_array = forge(R"({"alg":["HS256"],"typ":"JWT","kid":"a"})", c);
  expect_refused(verify_caller_token(alg_array, k, kT0), "no alg", alg_array);
}

TEST(CallerToken, HeaderRules) {
  Keyring k = ring();
  const std::string c = claims();
  struct Case {
    std::string header;
    std::string why;
  };
  const std::vector<Case> cases = {
      {R"({"alg":"HS256","typ":"JWT"})", "no key id"},
      {R"({"alg":"HS256","typ":"JWT","kid":7})", "no key id"},
      {R"({"alg":"HS256","typ":"JWT","kid":"zz"})", "unknown key id"},
      {R"({"alg":"HS256","typ":"JWT","kid":"a/../b"})", "key id is malformed"},
      {R"({"alg":"HS256","typ":"JWE","kid":"a"})", "type"},
      {R"({"alg":"HS256","typ":"JWT","kid":"a","crit":["exp"]})", "crit"},
      {R"("HS256")", "not a JSON object"},
      {R"({"alg":"HS256",)", "not JSON"},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.header);
    std::string token = forge(cs.header, c);
    expect_refused(verify_caller_token(token, k, kT0), cs.why, token);
  }
  // typ may be absent, and is compared case-insensitively (a media type).
  EXPECT_TRUE(verify_caller_token(forge(R"({"alg":"HS256","kid":"a"})", c), k, kT0).ok());
  EXPECT_TRUE(
      verify_caller_token(forge(R"({"alg":"HS256","typ":"jwt","kid":"a"})", c), k, kT0).ok());
}

TEST(CallerToken, RefusesBadSignatures) {
  Keyring k = ring();
  std::string good = mint();
  ASSERT_TRUE(verify_caller_token(good, k, kT0).ok());

  std::string wrong_key = forge(kHeaderA, claims(), kSecretB);  // kid a, signed with b's secret
  expect_refused(verify_caller_token(wrong_key, k, kT0), "signature", wrong_key);

  // A claim changed after signing (alice → admin).
  std::size_t d1 = good.find('.');
  std::size_t d2 = good.rfind('.');
  std::string tampered = good.substr(0, d1 + 1) +
                         base64url_encode(R"({"sub":"admin","iat":1780000000,"exp":1780003600,)"
                                          R"("aud":"quiver"})") +
                         good.substr(d2);
  expect_refused(verify_caller_token(tampered, k, kT0), "signature", tampered);

  std::string no_signature = good.substr(0, d2 + 1);
  expect_refused(verify_caller_token(no_signature, k, kT0), "no signature", no_signature);
  std::string short_signature = good.substr(0, good.size() - 4);
  expect_refused(verify_caller_token(short_signature, k, kT0), "signature", short_signature);

  // Every single-character change of the signature is refused.
  for (std::size_t i = d2 + 1; i < good.size(); ++i) {
    std::string t = good;
    t[i] = t[i] == 'A' ? 'B' : 'A';
    EXPECT_FALSE(verify_caller_token(t, k, kT0).ok()) << i;
  }
  // A non-canonical spelling of the same signature bytes (last character's unused bits set).
  std::string sig = good.substr(d2 + 1);  // 43 chars: the last holds 4 bits + 2 unused ones
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::size_t v = alphabet.find(sig.back());
  std::string noncanonical =
      good.substr(0, d2 + 1) + sig.substr(0, sig.size() - 1) + alphabet[v | 1];
  ASSERT_NE(noncanonical, good);
  expect_refused(verify_caller_token(noncanonical, k, kT0), "signature", noncanonical);
}

TEST(CallerToken, RefusesMalformedText) {
  Keyring k = ring();
  std::string good = mint();
  struct Case {
    std::string token;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "empty"},
      {"abc", "three"},
      {"abc.def", "three"},
      {good + ".", "more than three"},
      {good + ".xyz", "more than three"},
      {" " + good, "base64url"},
      {good + "\n", "base64url"},
      {good.substr(0, 10) + " " + good.substr(10), "base64url"},
      {good.substr(0, 10) + "=" + good.substr(11), "base64url"},
      {good.substr(0, 10) + "+" + good.substr(11), "base64url"},
      {"Bearer " + good, "base64url"},
      {good.substr(good.find('.')), "header is not JSON"},
      {"eee" + good, "canonical base64url"},  // a 53-character header: no base64 length
      {std::string(kMaxTokenBytes + 1, 'A'), "4096"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    expect_refused(verify_caller_token(c.token, k, kT0), c.why, c.token);
  }
  // Every truncation of a good token is refused (and nothing crashes).
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(verify_caller_token(good.substr(0, n), k, kT0).ok()) << n;
  }
}

TEST(CallerToken, OversizedButOtherwiseValidTokenIsRefusedUnread) {
  Keyring k = ring();
  // A token just under the bound passes; padding the claims past it is refused before parsing.
  std::string big = forge(kHeaderA, claims(R"(,"pad":")" + std::string(2900, 'p') + "\""));
  ASSERT_LE(big.size(), kMaxTokenBytes);
  EXPECT_TRUE(verify_caller_token(big, k, kT0).ok());
  std::string huge = forge(kHeaderA, claims(R"(,"pad":")" + std::string(3100, 'p') + "\""));
  ASSERT_GT(huge.size(), kMaxTokenBytes);
  expect_refused(verify_caller_token(huge, k, kT0), "over 4096 bytes", huge);
}

// ---- Authorization header ----------------------------------------------------------------------

TEST(CallerToken, ParseBearer) {
  const std::string token = mint();
  for (const std::string& header :
       {"Bearer " + token, "bearer " + token, "BEARER " + token, "BeArEr   " + token,
        "  Bearer " + token + "  ", "Bearer\t" + token}) {
    Result<std::string> t = parse_bearer(header);
    ASSERT_TRUE(t.ok()) << header;
    EXPECT_EQ(*t, token);
  }
  struct Case {
    std::string header;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "missing"},
      {"   ", "missing"},
      {"Bearer", "empty"},
      {"Bearer   ", "empty"},
      {"Basic dXNlcjpwYXNz", "not Bearer"},
      {"Bearer" + token, "not Bearer"},
      {"Token " + token, "not Bearer"},
      {token, "not Bearer"},
      {"Bearer " + token + " extra", "whitespace"},
      {"Bearer " + token + "\r\nX: y", "whitespace"},
      {"Bearer " + std::string(kMaxTokenBytes + 1, 'a'), "4096"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    Result<std::string> t = parse_bearer(c.header);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, ErrorCode::kUnauthenticated);
    EXPECT_NE(t.error().message.find(c.why), std::string::npos) << t.error().message;
    EXPECT_EQ(t.error().message.find(token.substr(0, 20)), std::string::npos);
  }
}

// ---- interoperability: tokens minted by node's crypto (tests/fixtures/tokens/mint.mjs) --------

Json load_fixture() {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/tokens/caller-tokens.json",
                   std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  Result<Json> j = parse_json(buffer.str());
  EXPECT_TRUE(j.ok()) << "cannot read tests/fixtures/tokens/caller-tokens.json";
  return j.ok() ? j.value() : Json();
}

TEST(CallerToken, VerifiesTokensMintedByNode) {
  Json fixture = load_fixture();
  ASSERT_TRUE(fixture.is_object());
  Result<Keyring> k = Keyring::from_json(fixture["keys"].dump());
  ASSERT_TRUE(k.ok()) << k.error().message;
  const int64_t now = fixture["verify_at_ms"].get<int64_t>();
  int valid = 0;
  int invalid = 0;
  for (const Json& c : fixture["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string token = c["token"].get<std::string>();
    SCOPED_TRACE(name);
    Result<CallerIdentity> id = verify_caller_token(token, *k, now);
    if (!c["valid"].get<bool>()) {
      ++invalid;
      expect_refused(id, c["reason"].get<std::string>(), token);
      continue;
    }
    ++valid;
    ASSERT_TRUE(id.ok()) << id.error().message;
    const Json& e = c["expect"];
    EXPECT_EQ(id->member_id, e["member_id"].get<std::string>());
    EXPECT_EQ(id->principal.str(), e["principal"].get<std::string>());
    EXPECT_EQ(id->kid, e["kid"].get<std::string>());
    EXPECT_EQ(id->issued_at_ms, e["issued_at_ms"].get<int64_t>());
    EXPECT_EQ(id->expires_at_ms, e["expires_at_ms"].get<int64_t>());
    EXPECT_EQ(id->ns, json_string(e, "ns"));
    EXPECT_EQ(id->jti, json_string(e, "jti"));
  }
  EXPECT_GE(valid, 4);
  EXPECT_GE(invalid, 10);
}

TEST(CallerToken, MintsTheSameBytesAsNode) {
  Json fixture = load_fixture();
  ASSERT_TRUE(fixture.is_object());
  int compared = 0;
  for (const Json& c : fixture["cases"]) {
    const Json* m = json_field(c, "mint");
    if (m == nullptr || m->is_null()) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string kid = (*m)["kid"].get<std::string>();
    MintOptions options;
    options.ns = json_string(*m, "ns");
    options.jti = json_string(*m, "jti");
    Result<std::string> token = mint_caller_token(
        (*m)["member_id"].get<std::string>(), fixture["keys"][kid].get<std::string>(), kid,
        (*m)["now_ms"].get<int64_t>(), (*m)["ttl_ms"].get<int64_t>(), options);
    ASSERT_TRUE(token.ok()) << token.error().message;
    EXPECT_EQ(*token, c["token"].get<std::string>());
    ++compared;
  }
  EXPECT_GE(compared, 2);
}

// ---- VerifiedTokenCache: the same answers as verify_caller_token, fewer HMACs ----

void expect_same(const Result<CallerIdentity>& cached, const Result<CallerIdentity>& fresh) {
  ASSERT_EQ(cached.ok(), fresh.ok());
  if (!fresh.ok()) {
    EXPECT_EQ(cached.error().code, fresh.error().code);
    EXPECT_EQ(cached.error().message, fresh.error().message);
    return;
  }
  EXPECT_EQ(cached->member_id, fresh->member_id);
  EXPECT_EQ(cached->principal, fresh->principal);
  EXPECT_EQ(cached->kid, fresh->kid);
  EXPECT_EQ(cached->issued_at_ms, fresh->issued_at_ms);
  EXPECT_EQ(cached->expires_at_ms, fresh->expires_at_ms);
  EXPECT_EQ(cached->not_before_ms, fresh->not_before_ms);
  EXPECT_EQ(cached->ns, fresh->ns);
  EXPECT_EQ(cached->jti, fresh->jti);
  EXPECT_EQ(cached->role, fresh->role);
}

TEST(VerifiedTokenCache, ASecondRequestIsAHitWithTheSameIdentity) {
  Keyring k = ring();
  VerifiedTokenCache cache;
  const std::string token = mint("alice");
  Result<CallerIdentity> first = cache.verify(token, k, kT0);
  Result<CallerIdentity> second = cache.verify(token, k, kT0 + 1000);
  ASSERT_TRUE(first.ok());
  expect_same(second, verify_caller_token(token, k, kT0 + 1000));
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.size(), 1u);
  // A ring built again from the same keys (a reload that changed nothing) keeps the entries.
  Keyring same = ring();
  EXPECT_EQ(same.fingerprint(), k.fingerprint());
  ASSERT_TRUE(cache.verify(token, same, kT0 + 2000).ok());
  EXPECT_EQ(cache.stats().hits, 2u);
}

TEST(VerifiedTokenCache, AnEntryNeverOutlivesItsToken) {
  Keyring k = ring();
  VerifiedTokenCache cache;
  const std::string token = mint("alice", "a", kSecretA, kT0, kHour);
  ASSERT_TRUE(cache.verify(token, k, kT0).ok());
  const int64_t after = kT0 + kHour + kDefaultTokenLeewayMs;  // exp + leeway: expired
  Result<CallerIdentity> late = cache.verify(token, k, after);
  expect_refused(late, "expired", token);
  expect_same(late, verify_caller_token(token, k, after));
  EXPECT_EQ(cache.size(), 0u);
  // Just before the end it is still a hit.
  ASSERT_TRUE(cache.verify(token, k, kT0).ok());
  EXPECT_TRUE(cache.verify(token, k, after - 1).ok());
}

TEST(VerifiedTokenCache, ANewKeyRingOrOtherOptionsEmptyIt) {
  Keyring k = ring();
  VerifiedTokenCache cache;
  const std::string token = mint("alice", "a");
  ASSERT_TRUE(cache.verify(token, k, kT0).ok());

  // Key "a" rotated to another secret: the token signed with the old one no longer passes.
  Result<Keyring> rotated =
      Keyring::create({{"a", "another-secret-for-key-a-0123456789abcdef"}, {"b", kSecretB}});
  ASSERT_TRUE(rotated.ok());
  expect_refused(cache.verify(token, *rotated, kT0), "signature", token);
  // Key "a" dropped from the ring.
  Result<Keyring> dropped = Keyring::create({{"b", kSecretB}});
  ASSERT_TRUE(dropped.ok());
  expect_same(cache.verify(token, *dropped, kT0), verify_caller_token(token, *dropped, kT0));
  EXPECT_FALSE(cache.verify(token, *dropped, kT0).ok());

  // Back on the first ring, then another audience / namespace.
  ASSERT_TRUE(cache.verify(token, k, kT0).ok());
  VerifyOptions other;
  other.audience = "elsewhere";
  expect_refused(cache.verify(token, k, kT0, other), "audience", token);
  const std::string scoped =
      mint("alice", "a", kSecretA, kT0, kHour, MintOptions{"quiver", "ns-one", {}, {}});
  ASSERT_TRUE(cache.verify(scoped, k, kT0).ok());
  VerifyOptions ns_two;
  ns_two.ns = "ns-two";
  expect_refused(cache.verify(scoped, k, kT0, ns_two), "namespace", scoped);
}

TEST(VerifiedTokenCache, FailuresAreNotKeptAndItIsBounded) {
  Keyring k = ring();
  VerifiedTokenCache cache(2, 1 << 20);
  const std::string good = mint("alice");
  std::string bad = good;
  bad.back() = bad.back() == 'A' ? 'B' : 'A';
  expect_refused(cache.verify(bad, k, kT0), "signature", bad);
  expect_refused(cache.verify(bad, k, kT0), "signature", bad);
  EXPECT_EQ(cache.size(), 0u);
  for (const char* member : {"alice", "bob", "carol"}) {
    ASSERT_TRUE(cache.verify(mint(member), k, kT0).ok());
  }
  EXPECT_EQ(cache.size(), 2u);
}

// Any sequence of tokens, rings, options and times: the cache answers what verify answers.
TEST(VerifiedTokenCache, AgreesWithVerifyOnRandomSequences) {
  Keyring k1 = ring();
  Result<Keyring> k2 = Keyring::create({{"b", kSecretB}});
  ASSERT_TRUE(k2.ok());
  std::vector<std::string> tokens = {
      mint("alice"),
      mint("bob", "b", kSecretB),
      mint("carol", "a", kSecretA, kT0, 10'000),
      mint("dave", "a", kSecretA, kT0 + 5 * 60'000, kHour),  // iat in the future at first
      mint("erin", "a", kSecretA, kT0, kHour, MintOptions{"quiver", "ns-one", {}, {}}),
      forge(kHeaderA, claims(R"(,"nbf":)" + std::to_string(kT0 / 1000 + 120))),
      "not.a.token"};
  VerifyOptions plain;
  VerifyOptions scoped;
  scoped.ns = "ns-two";
  VerifyOptions strict;
  strict.leeway_ms = 0;
  const VerifyOptions* options[] = {&plain, &scoped, &strict};
  const Keyring* rings[] = {&k1, &*k2};
  VerifiedTokenCache cache(3, 1 << 20);
  uint32_t seed = 12345;
  auto next = [&seed](uint32_t n) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 8) % n;
  };
  for (int i = 0; i < 4000; ++i) {
    const std::string& token = tokens[next(tokens.size())];
    const Keyring& k = *rings[next(8) == 0 ? 1 : 0];
    const VerifyOptions& o = *options[next(10) == 0 ? next(3) : 0];
    const int64_t now = kT0 + static_cast<int64_t>(next(2 * 3600)) * 1000 - 120'000;
    SCOPED_TRACE(i);
    expect_same(cache.verify(token, k, now, o), verify_caller_token(token, k, now, o));
  }
  EXPECT_GT(cache.stats().hits, 100u);
}

}  // namespace
}  // namespace quiver
