#include "shared/sha256.h"

#include <optional>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace quiver {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEverySplit) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);
  std::string expected = sha256_hex(text);
  for (std::size_t split = 0; split <= text.size(); ++split) {
    Sha256 h;
    h.update(std::string_view(text).substr(0, split));
    h.update(std::string_view(text).substr(split));
    EXPECT_EQ(hex_encode(h.finish()), expected) << "split at " << split;
  }
}

TEST(HmacSha256, Rfc4231Vectors) {
  // Test case 2.
  EXPECT_EQ(hex_encode(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block size.
  EXPECT_EQ(hex_encode(hmac_sha256(std::string(131, '\xaa'),
                                   "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Base64Url, RoundTripsAndRejectsNonCanonical) {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "foobar", "\xff\xfe\x00"}) {
    std::string back;
    ASSERT_TRUE(base64url_decode(base64url_encode(s), &back)) << s;
    EXPECT_EQ(back, s);
  }
  EXPECT_EQ(base64url_encode("\xfb\xff"), "-_8");
  std::string out;
  EXPECT_FALSE(base64url_decode("Zm9v=", &out));  // padding
  EXPECT_FALSE(base64url_decode("Zm 9v", &out));  // whitespace
  EXPECT_FALSE(base64url_decode("Z", &out));      // impossible length
  EXPECT_FALSE(base64url_decode("Zh", &out));     // non-zero leftover bits
}

TEST(ConstantTimeEqual, ComparesWholeStrings) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
}

// RFC 4648 §10's test vectors; the decoder takes what PEM and headers carry (line breaks).
TEST(Base64, Rfc4648VectorsAndLenientDecoding) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded), std::optional<std::string>(plain));
  }
  EXPECT_EQ(base64_encode("\xfb\xff"), "+/8=");
  EXPECT_EQ(base64_decode("Zm9v\r\nYmFy"), std::optional<std::string>("foobar"));
  EXPECT_EQ(base64_decode("Zm9v*mFy"), std::nullopt);
}

}  // namespace
}  // namespace quiver
