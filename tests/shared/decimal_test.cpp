#include "shared/decimal.h"

#include <gtest/gtest.h>

namespace quiver {
namespace {

TEST(ParseDecimal, AcceptsDigitsUpToTheBound) {
  EXPECT_EQ(parse_decimal("0"), 0u);
  EXPECT_EQ(parse_decimal("007"), 7u);
  EXPECT_EQ(parse_decimal("65535", 65535), 65535u);
  EXPECT_EQ(parse_decimal("18446744073709551615"), UINT64_MAX);
}

TEST(ParseDecimal, RefusesEverythingElse) {
  for (const char* text : {"", "-1", "+1", " 1", "1 ", "1.0", "0x10", "1e3", "١"}) {
    EXPECT_FALSE(parse_decimal(text).has_value()) << text;
  }
  EXPECT_FALSE(parse_decimal("65536", 65535).has_value());
  EXPECT_FALSE(parse_decimal("18446744073709551616").has_value());  // overflows uint64
  EXPECT_FALSE(parse_decimal("100000000000000000000").has_value());
}

}  // namespace
}  // namespace quiver
