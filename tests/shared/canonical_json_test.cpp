#include "shared/canonical_json.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

std::string canon(const Json& value) {
  Result<std::string> r = canonical_json(value);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::string();
}

std::string canon_text(const std::string& text) {
  Result<Json> parsed = parse_json(text);
  EXPECT_TRUE(parsed.ok()) << text;
  return parsed.ok() ? canon(*parsed) : std::string();
}

TEST(CanonicalJson, SameValueSameBytesWhateverTheKeyOrder) {
  const std::string a = R"({"b":1,"a":{"y":[3,2,1],"x":null},"c":"z"})";
  const std::string b = R"({ "c" : "z", "a" : { "x" : null, "y" : [ 3, 2, 1 ] }, "b" : 1 })";
  const std::string c = "{\n  \"a\": {\"y\": [3,2,1],\n \"x\": null},\n\t\"c\": \"z\", \"b\": 1}\n";
  const std::string expected = R"({"a":{"x":null,"y":[3,2,1]},"b":1,"c":"z"})";
  EXPECT_EQ(canon_text(a), expected);
  EXPECT_EQ(canon_text(b), expected);
  EXPECT_EQ(canon_text(c), expected);

  Json built;
  built["c"] = "z";
  built["b"] = 1;
  built["a"]["y"] = Json::array({3, 2, 1});
  built["a"]["x"] = nullptr;
  EXPECT_EQ(canon(built), expected);
}

TEST(CanonicalJson, KeysSortByUtf8BytesNotUtf16) {
  // UTF-16 order (RFC 8785) would put U+1F600 before U+FF5A; UTF-8 byte order puts it after.
  Json value = Json::object();
  for (const char* key :
       {"\xF0\x9F\x98\x80", "\xEF\xBD\x9A", "\xC3\xA9", "\x7F", "ab", "a", "B", ""}) {
    value[key] = 0;
  }
  EXPECT_EQ(canon(value),
            "{\"\":0,\"B\":0,\"a\":0,\"ab\":0,\"\x7F\":0,\"\xC3\xA9\":0,"
            "\"\xEF\xBD\x9A\":0,\"\xF0\x9F\x98\x80\":0}");
}

TEST(CanonicalJson, NestedValuesKeepArrayOrderAndLiterals) {
  EXPECT_EQ(canon_text(R"([{"z":[true,false,null,{}],"a":[[],[{}]]},"s",-3])"),
            R"([{"a":[[],[{}]],"z":[true,false,null,{}]},"s",-3])");
  EXPECT_EQ(canon(Json::object()), "{}");
  EXPECT_EQ(canon(Json::array()), "[]");
  EXPECT_EQ(canon(Json("")), "\"\"");
}

TEST(CanonicalJson, StringsAreMinimallyEscapedAndUnicodeStaysRaw) {
  // Input escapes for non-ASCII characters come out as raw UTF-8.
  EXPECT_EQ(canon_text(R"("caf\u00e9 \ud83d\ude00 \u2028\u2029 \/")"),
            "\"caf\xC3\xA9 \xF0\x9F\x98\x80 \xE2\x80\xA8\xE2\x80\xA9 /\"");
  EXPECT_EQ(canon(Json("quote\" backslash\\ slash/")), R"("quote\" backslash\\ slash/")");
  EXPECT_EQ(canon(Json("\b\f\n\r\t")), R"("\b\f\n\r\t")");
  EXPECT_EQ(canon(Json(std::string("\x00\x01\x1f\x7f", 4))), "\"\\u0000\\u0001\\u001f\x7F\"");
  EXPECT_EQ(canon(Json("\xE6\x97\xA5\xE6\x9C\xAC")), "\"\xE6\x97\xA5\xE6\x9C\xAC\"");
}

TEST(CanonicalJson, StringSizeMatchesWhatIsWritten) {
  for (std::string s : {std::string(""), std::string("plain"), std::string("a\"b\\c"),
                        std::string("\n\t\x01\x1f", 4), std::string("\x00", 1),
                        std::string("\xC3\xA9\xF0\x9F\x98\x80")}) {
    EXPECT_EQ(canonical_string_size(s), canon(Json(s)).size()) << s;
  }
}

TEST(CanonicalJson, IntegersAreExact) {
  EXPECT_EQ(canon(Json(0)), "0");
  EXPECT_EQ(canon(Json(-42)), "-42");
  EXPECT_EQ(canon(Json(std::numeric_limits<int64_t>::min())), "-9223372036854775808");
  EXPECT_EQ(canon(Json(std::numeric_limits<uint64_t>::max())), "18446744073709551615");
  // Past 2^53, where a double would lose digits.
  EXPECT_EQ(canon_text("9007199254740993"), "9007199254740993");
}

TEST(CanonicalJson, FloatsUseTheShortestRoundTripInEcmaScriptForm) {
  struct Case {
    double value;
    const char* expected;
  };
  const Case cases[] = {
      {0.1, "0.1"},
      {-1.5, "-1.5"},
      {1.0, "1"},
      {-0.0, "0"},
      {100.0, "100"},
      {123.456, "123.456"},
      {0.30000000000000004, "0.30000000000000004"},
      {1e20, "100000000000000000000"},
      {1e21, "1e+21"},
      {1.5e300, "1.5e+300"},
      {1e-6, "0.000001"},
      {1.25e-6, "0.00000125"},
      {1e-7, "1e-7"},
      {-2.5e-8, "-2.5e-8"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {9007199254740992.0, "9007199254740992"},
      {123456789012345680000.0, "123456789012345680000"},
      {1.0 / 3.0, "0.3333333333333333"},
      {2.0 / 3.0, "0.6666666666666666"},
  };
  for (const Case& c : cases) {
    Result<std::string> n = canonical_number(c.value);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, c.expected) << c.expected;
    EXPECT_EQ(canon(Json(c.value)), c.expected);
  }
  // The same numbers written differently by a peer.
  EXPECT_EQ(canon_text("[1.0, 1E2, 1e+2, 100.00, -0, -0.0, 0.1e1, 2.50]"),
            "[1,100,100,100,0,0,1,2.5]");
}

TEST(CanonicalJson, ShortestDigitsReadBackExactly) {
  // A deterministic spread of doubles: each must read back to itself, and writing the read-back
  // value again gives the same bytes.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t bits = state;
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (!std::isfinite(d)) continue;
    Result<std::string> text = canonical_number(d);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(std::strtod(text->c_str(), nullptr), d) << *text;
    Result<Json> back = parse_json(*text);
    ASSERT_TRUE(back.ok()) << *text;
    EXPECT_EQ(canon(*back), *text);
  }
}

TEST(CanonicalJson, CanonicalBytesAreAFixedPoint) {
  const std::string text =
      R"({"n":[1.5e300,1e21,1e-7,0.1,12345678901234567000,18446744073709551616],)"
      R"("s":"\u0000\u00e9\"","o":{"\u00e9":1,"e":2}})";
  std::string once = canon_text(text);
  EXPECT_EQ(canon_text(once), once);
}

TEST(CanonicalJson, InvalidUtf8IsAnErrorNamingWhere) {
  const char* bad[] = {
      "\xFF",              // never valid
      "abc\xC3",           // truncated sequence
      "\xC0\xAF",          // overlong "/"
      "\xE0\x80\xAF",      // overlong, 3 bytes
      "\xED\xA0\x80",      // UTF-16 surrogate
      "\xF4\x90\x80\x80",  // past U+10FFFF
      "\x80",              // lone continuation byte
      "\xE2\x28\xA1",      // bad continuation
  };
  for (const char* s : bad) {
    Json value = {{"a", Json::array({"fine", s})}};
    Result<std::string> r = canonical_json(value);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("'/a/1'"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("invalid UTF-8"), std::string::npos);
  }
  Json bad_key = {{"ok", {{std::string("k\xFF"), 1}}}};
  Result<std::string> r = canonical_json(bad_key);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("invalid UTF-8 in key"), std::string::npos);
  EXPECT_NE(r.error().message.find("'/ok/k?'"), std::string::npos) << r.error().message;
}

TEST(CanonicalJson, FindsTheFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8(""), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF"),
            std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xC3"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xC3\xA9\xC3\x28"), 2u);
  EXPECT_EQ(find_invalid_utf8("xyz\xF5\x80\x80\x80"), 3u);
}

TEST(CanonicalJson, ValuesJsonCannotCarryAreErrors) {
  for (double d : {std::nan(""), std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()}) {
    Result<std::string> r = canonical_json(Json{{"x", d}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("'/x'"), std::string::npos) << r.error().message;
  }
  Result<std::string> bin = canonical_json(Json::binary({1, 2, 3}));
  ASSERT_FALSE(bin.ok());
  EXPECT_EQ(bin.error().code, ErrorCode::kInvalidArgument);
}

TEST(CanonicalJson, DepthIsBounded) {
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  for (int i = 0; i < 300; ++i) deep += "]";
  JsonParseOptions deeper;  // past parse_json's own limit, to reach canonical_json's
  deeper.max_depth = 300;
  Result<Json> parsed = parse_json(deep, deeper);
  ASSERT_TRUE(parsed.ok());
  Result<std::string> r = canonical_json(*parsed);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge);
  Result<std::string> allowed = canonical_json(*parsed, 300);
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(*allowed, deep);
}

TEST(CanonicalJson, PointerEscapesSlashAndTilde) {
  Json value = {{"a/b", {{"~c", std::string("\xFF")}}}};
  Result<std::string> r = canonical_json(value);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'/a~1b/~0c'"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace quiver
