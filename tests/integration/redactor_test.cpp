// The Redactor (native-agent/base/redactor.h): every form of a configured secret an upstream may
// echo is replaced, nothing else is, and a JSON text stays the same JSON with its strings redacted.
#include "native-agent/base/redactor.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/json.h"
#include "tests/support/encodings.h"

namespace quiver {
namespace {

using testing::base64_encode;
using testing::percent_encode;

const std::string kToken = "qv-Token/with+symbols=9f3a";  // '/', '+', '=' percent-encode

TEST(Redactor, ReplacesTheValueLongestFirstAndLeavesShortValuesAlone) {
  Redactor r({"abcd", "abcdefgh", "", "1", "ro"});
  EXPECT_EQ(r.redact("x abcdefgh y abcd z abcdabcd"), "x *** y *** z ******");
  EXPECT_EQ(r.redact("read 1 row from a ro replica"), "read 1 row from a ro replica");
  EXPECT_EQ(r.redact(""), "");
  EXPECT_TRUE(Redactor().empty());
  EXPECT_EQ(Redactor().redact("abcd"), "abcd");
}

TEST(Redactor, FoldsTheCaseOfLongValuesOnly) {
  Redactor r({kToken, "info"});
  EXPECT_EQ(r.redact("got QV-TOKEN/WITH+SYMBOLS=9F3A and qv-token/with+symbols=9f3a"),
            "got *** and ***");
  // `info` (an env setting) is hidden as written, not as the INFO of a log line.
  EXPECT_EQ(r.redact("INFO level=info"), "INFO level=***");
}

TEST(Redactor, ReplacesJsonEscapedForms) {
  Redactor r({"q\"uo\\te/x", "caf\xc3\xa9-secret"});
  EXPECT_EQ(r.redact(R"({"k":"q\"uo\\te/x"})"), R"({"k":"***"})");
  EXPECT_EQ(r.redact(R"({"k":"q\"uo\\te\/x"})"), R"({"k":"***"})");  // '/' escaped
  EXPECT_EQ(r.redact("raw q\"uo\\te/x"), "raw ***");
  EXPECT_EQ(r.redact(R"(ascii caf\u00e9-secret and caf\u00E9-SECRET)"), "ascii *** and ***");
}

TEST(Redactor, ReplacesPercentEncodedForms) {
  Redactor r({kToken, "pass word&more"});
  const std::string encoded = percent_encode(kToken);
  ASSERT_NE(encoded, kToken);
  EXPECT_EQ(r.redact("?t=" + encoded + "&x=1"), "?t=***&x=1");
  std::string lower = encoded;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(r.redact("?t=" + lower), "?t=***");
  EXPECT_EQ(r.redact("form: p=pass+word%26more"), "form: p=***");
}

TEST(Redactor, ReplacesBase64AtEveryAlignment) {
  Redactor r({kToken});
  for (const std::string prefix : {"", "x", "xy", "Bearer ", "user:"}) {
    for (bool url : {false, true}) {
      const std::string encoded = base64_encode(prefix + kToken + " and more", url);
      const std::string out = r.redact("header " + encoded + " end");
      EXPECT_NE(out.find("***"), std::string::npos) << prefix << " " << encoded;
      // What is left of the run: at most the two characters shared with each neighbour.
      const std::size_t left =
          out.size() - std::string("header ").size() - std::string(" end").size() - 3;
      EXPECT_LE(left,
                base64_encode(prefix, url).size() + 1 + base64_encode(" and more", url).size() + 1)
          << prefix << ": " << out;
    }
  }
  // Case matters in base64: a different text of the same letters is left alone.
  std::string swapped = base64_encode(kToken);
  for (char& c : swapped)
    c = std::isupper(static_cast<unsigned char>(c)) ? std::tolower(c) : std::toupper(c);
  EXPECT_EQ(r.redact(swapped), swapped);
}

TEST(Redactor, RedactsInsideJsonStringsOnlyAndKeepsTheTextValid) {
  // `true` and `tools` are ordinary env values (>= 4 bytes, so secrets): the JSON structure
  // around them must survive.
  Redactor r({kToken, "true", "tools"});
  const std::string text =
      R"({"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","description":"echo )" + kToken +
      R"(","x":true,"title":"\u0071v-Token\/with+symbols=9f3a"}],"ok":true}})";
  const std::string out = r.redact_json_text(text);
  Result<Json> parsed = parse_json(out);
  ASSERT_TRUE(parsed.ok()) << out;
  // Keys are strings too: "tools" was redacted as a key as well.
  const Json& result = (*parsed)["result"];
  ASSERT_TRUE(result.contains("***")) << out;
  EXPECT_EQ(result["ok"], true);
  const Json& tool = result["***"][0];
  EXPECT_EQ(tool["description"], "echo ***");
  EXPECT_EQ(tool["x"], true);
  EXPECT_EQ(tool["title"], "***");  // seen through the \u and \/ escapes
  EXPECT_EQ(out.find("9f3a"), std::string::npos) << out;
  // A string without a secret is copied byte for byte, escapes and all.
  const std::string clean = R"({"a":"line\nbreak \u00e9","b":[1,2.5,null]})";
  EXPECT_EQ(r.redact_json_text(clean), clean);
  // Not JSON (a banner): redacted as text.
  EXPECT_EQ(r.redact_json_text("starting \"with " + kToken), "starting \"with ***");
}

}  // namespace
}  // namespace quiver
