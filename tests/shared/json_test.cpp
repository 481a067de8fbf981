#include "shared/json.h"

#include <string>

#include <gtest/gtest.h>

#include "shared/jsonrpc.h"

namespace quiver {
namespace {

std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// {"a":{"a":...{"a":1}...}}: `depth` objects.
std::string nested_objects(std::size_t depth) {
  std::string out;
  for (std::size_t i = 0; i < depth; ++i) out += "{\"a\":";
  out += "1";
  out += std::string(depth, '}');
  return out;
}

TEST(JsonDepth, ExactlyAtTheLimitParses) {
  auto arrays = parse_json(nested_arrays(kMaxJsonDepth));
  ASSERT_TRUE(arrays.ok()) << arrays.error().message;
  EXPECT_TRUE(arrays->is_array());
  auto objects = parse_json(nested_objects(kMaxJsonDepth));
  ASSERT_TRUE(objects.ok()) << objects.error().message;
  // The innermost value survived: the whole value was built.
  const Json* v = &*objects;
  for (std::size_t i = 0; i < kMaxJsonDepth; ++i) v = &(*v)["a"];
  EXPECT_EQ(*v, 1);
}

TEST(JsonDepth, OneLevelOverFailsWithAClearMessage) {
  for (const std::string& text :
       {nested_arrays(kMaxJsonDepth + 1), nested_objects(kMaxJsonDepth + 1)}) {
    auto r = parse_json(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message, "JSON nested deeper than 128 levels (the limit)");
  }
}

TEST(JsonDepth, MixedNestingCountsEveryLevel) {
  // Arrays and objects alternate: 64 of each is 128 levels, one more is over.
  std::string at_limit, over;
  for (int i = 0; i < 64; ++i) at_limit += "[{\"k\":";
  at_limit += "null";
  for (int i = 0; i < 64; ++i) at_limit += "}]";
  EXPECT_TRUE(parse_json(at_limit).ok());
  over = "[" + at_limit + "]";
  EXPECT_FALSE(parse_json(over).ok());
}

TEST(JsonDepth, SiblingsDoNotAddUp) {
  // Many shallow values side by side: depth is nesting, not count.
  std::string text = "[";
  for (int i = 0; i < 1000; ++i) text += std::string(i ? "," : "") + nested_arrays(100);
  text += "]";
  EXPECT_TRUE(parse_json(text).ok());
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  const std::string brackets(10000, '[');
  auto r = parse_json("{\"description\":\"" + brackets + std::string(10000, '{') + "\"}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)["description"].get<std::string>().size(), 20000u);
  // Escaped quotes do not end the string early.
  auto escaped = parse_json(R"(["\"[[[[[[\\\"{{{{"])");
  ASSERT_TRUE(escaped.ok()) << escaped.error().message;
  EXPECT_EQ((*escaped)[0], "\"[[[[[[\\\"{{{{");
  // Nor in keys.
  auto key = parse_json("{\"" + brackets + "\":[1]}");
  EXPECT_TRUE(key.ok());
}

TEST(JsonDepth, HostileDepthFailsWithoutBuildingIt) {
  // 200,000 levels: the old parse built the value and the first copy or dump overflowed the
  // stack. Now the parse stops at level 129.
  for (const std::string& text : {nested_arrays(200000), nested_objects(200000),
                                  "{\"ok\":[1,2,3],\"deep\":" + nested_arrays(200000) + "}"}) {
    auto r = parse_json(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("nested deeper than 128 levels"), std::string::npos);
  }
  // Unbalanced (never closed) deep input fails the same way, before the end of input.
  auto open_only = parse_json(std::string(200000, '['));
  ASSERT_FALSE(open_only.ok());
  EXPECT_NE(open_only.error().message.find("nested deeper"), std::string::npos);
}

TEST(JsonDepth, TheLimitIsAnOption) {
  JsonParseOptions options;
  options.max_depth = 3;
  EXPECT_TRUE(parse_json("[[[1]]]", options).ok());
  auto r = parse_json("[[[[1]]]]", options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "JSON nested deeper than 3 levels (the limit)");
  options.max_depth = 0;  // scalars only
  EXPECT_TRUE(parse_json("\"[\"", options).ok());
  EXPECT_FALSE(parse_json("[]", options).ok());
}

TEST(Json, MalformedInputNamesThePlaceNotTheText) {
  auto r = parse_json("{\"token\": tru-secret-value}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("malformed JSON at line 1, column"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(r.error().message.find("secret"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find("tru"), std::string::npos) << r.error().message;
  auto trailing = parse_json("{} x");
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.error().message.find("malformed JSON at line 1, column"), std::string::npos);
}

TEST(Json, CommentsOnlyWhenAllowed) {
  const std::string text = "{ // why\n \"a\": /* one */ 1 }";
  EXPECT_FALSE(parse_json(text).ok());
  JsonParseOptions options;
  options.allow_comments = true;
  auto r = parse_json(text, options);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)["a"], 1);
}

TEST(Json, SizeBoundComesFirst) {
  auto r = parse_json(nested_arrays(200000), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge);
}

// The JSON-RPC entry point goes through the same limit: a deep result, params or error.data is
// an invalid reply, whatever the message kind.
TEST(JsonDepth, JsonRpcMessagesAreBounded) {
  const std::string deep = nested_arrays(200000);
  for (const std::string& text : {
           R"({"jsonrpc":"2.0","id":1,"result":{"tools":)" + deep + "}}",
           R"({"jsonrpc":"2.0","method":"notifications/message","params":{"data":)" + deep + "}}",
           R"({"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x","data":)" + deep + "}}",
           "[" + std::string(R"({"jsonrpc":"2.0","id":1,"result":)") + deep + "}]",
       }) {
    auto r = parse_jsonrpc_batch(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply);
    EXPECT_NE(r.error().message.find("nested deeper than 128 levels"), std::string::npos)
        << r.error().message;
  }
  // A reply whose result reaches the limit exactly is a reply, moved intact into the message.
  const std::string at_limit =
      R"({"jsonrpc":"2.0","id":1,"result":)" + nested_arrays(kMaxJsonDepth - 1) + "}";
  auto ok = parse_jsonrpc_batch(at_limit);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].kind, JsonRpcKind::kResult);
  EXPECT_EQ((*ok)[0].result.dump(), nested_arrays(kMaxJsonDepth - 1));
}

}  // namespace
}  // namespace quiver
