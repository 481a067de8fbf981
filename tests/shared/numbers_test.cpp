#include "shared/numbers.h"

#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

namespace quiver {
namespace {

TEST(Numbers, UnsignedTakesDigitsOnlyUpToTheLimit) {
  EXPECT_EQ(parse_decimal_u64("0"), 0u);
  EXPECT_EQ(parse_decimal_u64("007"), 7u);
  EXPECT_EQ(parse_decimal_u64("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"", "18446744073709551616", "99999999999999999999", "-1", "+1", " 1",
                          "1 ", "1x", "0x10", "1.0"}) {
    EXPECT_FALSE(parse_decimal_u64(bad).has_value()) << bad;
  }
  // A limit under 9: every digit above it is refused (max - digit must not wrap around).
  EXPECT_EQ(parse_decimal_u64("1", 1), 1u);
  EXPECT_FALSE(parse_decimal_u64("3", 1).has_value());
  EXPECT_FALSE(parse_decimal_u64("9", 0).has_value());
  EXPECT_EQ(parse_decimal_u64("0", 0), 0u);
  EXPECT_EQ(parse_decimal_u64("120", 120), 120u);
  EXPECT_FALSE(parse_decimal_u64("121", 120).has_value());
}

TEST(Numbers, SignedTakesOneLeadingMinusAndTheWholeRange) {
  EXPECT_EQ(parse_decimal_i64("-42"), -42);
  EXPECT_EQ(parse_decimal_i64("-0"), 0);
  EXPECT_EQ(parse_decimal_i64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_decimal_i64("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  for (const char* bad :
       {"", "-", "--1", "+5", "9223372036854775808", "-9223372036854775809", "1-", " -1"}) {
    EXPECT_FALSE(parse_decimal_i64(bad).has_value()) << bad;
  }
}

TEST(Numbers, BoundedFormChecksTheRange) {
  EXPECT_EQ(parse_decimal_in("600000", 1, 600000), 600000);
  EXPECT_FALSE(parse_decimal_in("0", 1, 600000).has_value());
  EXPECT_FALSE(parse_decimal_in("600001", 1, 600000).has_value());
  EXPECT_FALSE(parse_decimal_in("x", 1, 600000).has_value());
}

TEST(Numbers, UnsignedTakesAnUpperBound) {
  EXPECT_EQ(parse_decimal_u64("007"), 7u);
  EXPECT_EQ(parse_decimal_u64("65535", 65535), 65535u);
  EXPECT_FALSE(parse_decimal_u64("65536", 65535).has_value());
  for (const char* text : {"", "-1", "+1", " 1", "1 ", "1.0", "0x10", "1e3", "\u0661"}) {
    EXPECT_FALSE(parse_decimal_u64(text).has_value()) << text;
  }
  EXPECT_FALSE(parse_decimal_u64("100000000000000000000").has_value());
}

}  // namespace
}  // namespace quiver
