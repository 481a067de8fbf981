#include "shared/connection_record.h"

#include <gtest/gtest.h>

namespace quiver {
namespace {

ConnectionRecord github() {
  ConnectionRecord r;
  r.id = "github";
  r.config_hash = std::string(64, 'a');
  r.credential_mode = CredentialMode::kPerMember;
  r.name = "GitHub";
  r.transport = "http";
  r.updated_at_ms = 1'700'000'000'000;
  return r;
}

TEST(ConnectionRecord, FieldsRoundTrip) {
  const ConnectionRecord r = github();
  HashFields fields = connection_record_fields(r);
  EXPECT_EQ(fields, (HashFields{{"config_hash", r.config_hash},
                                {"credential_mode", "per_member"},
                                {"name", "GitHub"},
                                {"transport", "http"},
                                {"updated_at", "1700000000000"}}));
  Result<std::optional<ConnectionRecord>> back = connection_record_from_fields("github", fields);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ(**back, r);
  EXPECT_EQ(connection_record_for_discovery("github", fields), r);
}

TEST(ConnectionRecord, AnEmptyHashIsARemovedConnection) {
  EXPECT_FALSE(connection_record_from_fields("github", {}).value().has_value());
  EXPECT_FALSE(connection_record_for_discovery("github", {}).has_value());
}

TEST(ConnectionRecord, MissingAndUnknownFieldsReadAsEmpty) {
  HashFields fields = {{"credential_mode", "sometimes"}, {"color", "blue"}};
  std::optional<ConnectionRecord> r = connection_record_from_fields("x", fields).value();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->id, "x");
  EXPECT_EQ(r->credential_mode, CredentialMode::kUnknown);
  EXPECT_EQ(r->config_hash, "");
  EXPECT_EQ(r->updated_at_ms, 0);
}

// The store refuses a record whose updated_at it cannot read; discovery does not use it.
TEST(ConnectionRecord, AMalformedUpdatedAtIsAnErrorOnlyWhereItIsUsed) {
  HashFields fields = connection_record_fields(github());
  fields["updated_at"] = "soon";
  EXPECT_EQ(connection_record_from_fields("github", fields).error().code, ErrorCode::kInvalidReply);
  std::optional<ConnectionRecord> shown = connection_record_for_discovery("github", fields);
  ASSERT_TRUE(shown.has_value());
  EXPECT_TRUE(shown->same_config(github()));
  EXPECT_EQ(shown->updated_at_ms, 0);
}

}  // namespace
}  // namespace quiver
