// Numbers kept as written (shared/json.h "Numbers kept as written"): a definition's numbers reach
// the manifest, its hash and every serializer byte for byte, however long or odd they are.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/canonical_json.h"
#include "shared/json.h"
#include "shared/jsonrpc.h"
#include "shared/manifest.h"

namespace quiver {
namespace {

Json parse_kept(const std::string& text) {
  JsonParseOptions options;
  options.keep_number_literals = true;
  Result<Json> j = parse_json(text, options);
  EXPECT_TRUE(j.ok()) << text << ": " << (j.ok() ? "" : j.error().message);
  return j.ok() ? *j : Json();
}

// Every literal the issue names, and the neighbours that must stay ordinary numbers.
const char* const kOddNumbers[] = {
    "123456789012345678901234567890",  // past uint64
    "-98765432109876543210987654321",  // past int64
    "18446744073709551616",            // uint64 max + 1
    "1.0",
    "1e400",  // past the double range
    "-1e400",
    "0.1000000000000000055511151231257827",  // more digits than a double keeps
    "1E-7",
    "1e-7",  // ECMAScript would write 1e-7, nlohmann 1e-07: kept either way
    "2.50",
    "100e0",
    "9007199254740993.0",
    "-0",  // the parser reports it as the integer 0 (issue 10)
    "-0.0",
    "0e5",
    "-0E-3",
};

TEST(NumberLiteral, OddNumbersRoundTripByteForByteThroughCanonicalAndSerialize) {
  for (const char* n : kOddNumbers) {
    const std::string text = std::string(R"({"a":[)") + n + R"(],"b":)" + n + "}";
    Json j = parse_kept(text);
    Result<std::string> canonical = canonical_json(j);
    ASSERT_TRUE(canonical.ok()) << n << ": " << canonical.error().message;
    EXPECT_EQ(*canonical, text) << n;
    EXPECT_EQ(serialize_json(j), text) << n;
  }
}

// `-0` is found by a scan outside strings: the same characters inside a string (a date, a
// sentence) stay a string, and a plain 0 stays an integer.
TEST(NumberLiteral, NegativeZeroIsKeptAndLookalikesInStringsAreNot) {
  const std::string text = R"({"d":"2026-07-28","s":"x -0 y","z":[0,-0,-0.0,0e5,-0E-3],"n":-10})";
  Json j = parse_kept(text);
  EXPECT_EQ(j["d"], "2026-07-28");
  EXPECT_EQ(j["s"], "x -0 y");
  EXPECT_TRUE(j["z"][0].is_number_integer());
  EXPECT_EQ(json_number_literal_text(j["z"][1]).value(), "-0");
  EXPECT_EQ(json_number_literal_text(j["z"][2]).value(), "-0.0");
  EXPECT_EQ(json_number_literal_text(j["z"][3]).value(), "0e5");
  EXPECT_EQ(json_number_literal_text(j["z"][4]).value(), "-0E-3");
  EXPECT_EQ(j["n"], -10);
  EXPECT_EQ(serialize_json(j),
            R"({"d":"2026-07-28","n":-10,"s":"x -0 y","z":[0,-0,-0.0,0e5,-0E-3]})");
  // A text without a -0 token (only lookalikes) parses as before.
  Json plain = parse_kept(R"({"d":"2026-07-28","s":"x -0 y"})");
  EXPECT_EQ(plain["s"], "x -0 y");
}

TEST(NumberLiteral, OrdinaryNumbersStayNumbersAndAreNotLiterals) {
  Json j =
      parse_kept(R"([0,-1,42,18446744073709551615,-9223372036854775808,0.5,1e+21,1.5e-7,3.14])");
  EXPECT_TRUE(j[0].is_number_integer());
  EXPECT_TRUE(j[3].is_number_unsigned());
  EXPECT_TRUE(j[4].is_number_integer());
  EXPECT_TRUE(j[5].is_number_float());
  EXPECT_TRUE(j[6].is_number_float());
  EXPECT_TRUE(j[8].is_number_float());
  for (const Json& v : j) EXPECT_FALSE(json_number_literal_text(v).has_value()) << v;
  EXPECT_EQ(*canonical_json(j),
            R"([0,-1,42,18446744073709551615,-9223372036854775808,0.5,1e+21,1.5e-7,3.14])");
}

TEST(NumberLiteral, WithoutTheOptionNumbersAreDoublesAsBefore) {
  Result<Json> j = parse_json(R"({"n":123456789012345678901234567890,"one":1.0})");
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE((*j)["n"].is_number_float());
  EXPECT_TRUE((*j)["one"].is_number_float());
  EXPECT_EQ(*canonical_json(*j), R"({"n":1.2345678901234568e+29,"one":1})");
}

TEST(NumberLiteral, LiteralIsNeitherAStringNorAnObjectAndReadsAsADouble) {
  Json j = parse_kept(R"({"big":123456789012345678901234567890,"inf":1e400,"one":1.0,"s":"1.0"})");
  EXPECT_FALSE(j["big"].is_string());
  EXPECT_FALSE(j["big"].is_object());
  EXPECT_FALSE(j["big"].is_number());
  EXPECT_EQ(json_number_literal_text(j["big"]).value(), "123456789012345678901234567890");
  EXPECT_DOUBLE_EQ(json_number(j["big"]).value(), 1.2345678901234568e+29);
  EXPECT_TRUE(std::isinf(json_number(j["inf"]).value()));
  EXPECT_DOUBLE_EQ(json_number(j["one"]).value(), 1.0);
  EXPECT_FALSE(json_number(j["s"]).has_value());
  EXPECT_FALSE(json_number_literal_text(j["s"]).has_value());
  // A binary value of another subtype is no literal, and canonical JSON still refuses it.
  Json other = Json::binary({1, 2, 3}, 7);
  EXPECT_FALSE(json_number_literal_text(other).has_value());
  EXPECT_FALSE(canonical_json(other).ok());
}

TEST(NumberLiteral, EqualInputHashesEquallyAndDifferentTextsDiffer) {
  const std::string a =
      R"({"name":"t","inputSchema":{"type":"object","maximum":123456789012345678901234567890}})";
  const std::string b =
      R"({"inputSchema":{"maximum":123456789012345678901234567890,"type":"object"},"name":"t"})";
  const std::string c =
      R"({"name":"t","inputSchema":{"type":"object","maximum":123456789012345678901234567891}})";
  Result<std::string> ha = definition_hash(parse_kept(a));
  Result<std::string> hb = definition_hash(parse_kept(b));
  Result<std::string> hc = definition_hash(parse_kept(c));
  ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
  EXPECT_EQ(*ha, *hb);  // key order does not matter
  EXPECT_NE(*ha, *hc);  // the last digit does (as doubles, both are 1.2345678901234568e+29)
  // Stable: the hash of a definition without odd numbers is what it was before literals.
  const std::string plain = R"({"inputSchema":{"maximum":5,"type":"object"},"name":"t"})";
  EXPECT_EQ(*definition_hash(parse_kept(plain)), *definition_hash(*parse_json(plain)));
}

TEST(NumberLiteral, UpstreamReplyToManifestAndBackKeepsTheNumbers) {
  const std::string tool =
      R"({"description":"d","inputSchema":{"properties":{"id":{"maximum":123456789012345678901234567890,)"
      R"("type":"integer"},"r":{"default":1.0,"multipleOf":0.1000000000000000055511151231257827,)"
      R"("type":"number"},"x":{"maximum":1e400}},"type":"object"},"name":"big"})";
  const std::string reply = R"({"jsonrpc":"2.0","id":2,"result":{"tools":[)" + tool + "]}}";
  auto messages = parse_jsonrpc_batch(reply, 1 << 20);
  ASSERT_TRUE(messages.ok()) << messages.error().message;
  ASSERT_EQ(messages->size(), 1u);
  Json item = (*messages)[0].result["tools"][0];
  EXPECT_EQ(*canonical_json(item), tool);

  Listing listing;
  listing.protocol_version = "2026-07-28";
  listing.server_info = Json{{"name", "big"}, {"version", "1.0.0"}};
  for (ListOutcome& out : listing.lists) out.state = ListState::kAbsent;
  listing.list(ListKind::kTools).state = ListState::kOk;
  listing.list(ListKind::kTools).items.push_back(item);
  Result<Manifest> m = manifest_from_listing(listing);
  ASSERT_TRUE(m.ok()) << m.error().message;
  Result<EncodedManifest> encoded = encode_manifest(*m);
  ASSERT_TRUE(encoded.ok()) << encoded.error().message;
  EXPECT_NE(encoded->bytes.find("123456789012345678901234567890"), std::string::npos);
  EXPECT_NE(encoded->bytes.find(R"("default":1.0)"), std::string::npos);
  EXPECT_NE(encoded->bytes.find("1e400"), std::string::npos);
  EXPECT_EQ(encoded->bytes.find("e+29"), std::string::npos);

  Result<Manifest> back = decode_manifest(encoded->bytes);
  ASSERT_TRUE(back.ok()) << back.error().message;
  Result<EncodedManifest> again = encode_manifest(*back);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes, encoded->bytes);
  EXPECT_EQ(again->etag, encoded->etag);
}

// Fuzz-safe: any number text the parser accepts comes back out unchanged, and text it refuses
// is an error value (never a crash, never a literal with bad grammar).
TEST(NumberLiteral, RandomNumberTextsRoundTripOrAreRefused) {
  std::mt19937 rng(20261202);
  const std::string alphabet = "0123456789-+.eE";
  for (int i = 0; i < 20000; ++i) {
    std::string n;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) n += alphabet[rng() % alphabet.size()];
    const std::string text = "[" + n + "]";
    JsonParseOptions options;
    options.keep_number_literals = true;
    Result<Json> j = parse_json(text, options);
    if (!j.ok()) continue;
    Result<std::string> canonical = canonical_json(*j);
    ASSERT_TRUE(canonical.ok()) << text;
    EXPECT_EQ(*canonical, text);  // -0 included (issue 10)
    EXPECT_EQ(serialize_json(*j), text);
  }
}

TEST(NumberLiteral, NumbersPastTheDoubleRangeAreKeptAndNoStringPosesAsOne) {
  Json j = parse_kept(R"({"a":1e400,"b":["x",-2E+999,{"c":1e400}],"s":"1e400"})");
  EXPECT_EQ(*canonical_json(j), R"({"a":1e400,"b":["x",-2E+999,{"c":1e400}],"s":"1e400"})");
  EXPECT_TRUE(j["s"].is_string());
  // Without the option such a number is a parse error, as before.
  EXPECT_FALSE(parse_json(R"([1e400])").ok());
  // A text holding an escaped U+0000 is not rewritten: the overflow stays an error.
  JsonParseOptions options;
  options.keep_number_literals = true;
  Result<Json> clash = parse_json(R"(["\u0000N0",1e400])", options);
  EXPECT_FALSE(clash.ok());
}

TEST(NumberLiteral, SerializeIndentsLikeDumpAndNeverFails) {
  Json j = parse_kept(R"({"a":[1,1.0,"x"],"b":{},"c":[]})");
  EXPECT_EQ(serialize_json(j, 2),
            "{\n  \"a\": [\n    1,\n    1.0,\n    \"x\"\n  ],\n  \"b\": {},\n  \"c\": []\n}");
  Json odd = Json::object();
  odd["bad"] = std::string("\xff");
  odd["nan"] = std::nan("");
  EXPECT_EQ(serialize_json(odd), "{\"bad\":\"\xef\xbf\xbd\",\"nan\":null}");
}

}  // namespace
}  // namespace quiver
