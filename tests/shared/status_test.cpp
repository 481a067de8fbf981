#include "shared/status.h"

#include <gtest/gtest.h>

#include "shared/json.h"
#include "shared/schema_assets.h"

namespace quiver {
namespace {

TEST(Status, ResultCarriesValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = Error(ErrorCode::kTimeout, "listing deadline of 3500 ms passed");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kTimeout);
  EXPECT_STREQ(error_code_name(bad.error().code), "TIMEOUT");
  EXPECT_STREQ(error_code_name(ErrorCode::kUpstreamUnavailable), "UPSTREAM_UNAVAILABLE");
}

// A store outage and an upstream outage are told apart in logs and /metrics labels; only the
// host's own surroundings make a queued refresh wait rather than drop.
TEST(Status, StoreAndUpstreamOutagesHaveTheirOwnCodes) {
  EXPECT_STREQ(error_code_name(ErrorCode::kStoreUnavailable), "STORE_UNAVAILABLE");
  EXPECT_STREQ(error_code_name(ErrorCode::kResourceUnavailable), "RESOURCE_UNAVAILABLE");
  EXPECT_TRUE(passes_by_itself(ErrorCode::kStoreUnavailable));
  EXPECT_TRUE(passes_by_itself(ErrorCode::kResourceUnavailable));
  EXPECT_FALSE(passes_by_itself(ErrorCode::kUpstreamUnavailable));
  EXPECT_FALSE(passes_by_itself(ErrorCode::kTimeout));
  EXPECT_FALSE(passes_by_itself(ErrorCode::kInvalidArgument));
}

TEST(Json, MalformedInputIsAnErrorWithOffset) {
  auto r = parse_json(R"({"a": [1, 2,, 3]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("byte 13"), std::string::npos) << r.error().message;
}

TEST(Json, OversizedInputIsRejectedBeforeParsing) {
  std::string big(1000, ' ');
  auto r = parse_json(big, 999);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge);
}

TEST(Json, TypedAccessorsNeverThrow) {
  auto r = parse_json(R"({"s": 1, "i": "x", "b": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(json_string(*r, "s").has_value());
  EXPECT_FALSE(json_int(*r, "i").has_value());
  EXPECT_EQ(json_bool(*r, "b"), true);
  EXPECT_EQ(json_field(*r, "missing"), nullptr);
  EXPECT_EQ(json_field(Json::array(), "s"), nullptr);
}

TEST(SchemaAssets, LookupOfUnknownPathIsEmpty) {
  EXPECT_TRUE(schema_asset("no/such/file.lua").empty());
}

}  // namespace
}  // namespace quiver
