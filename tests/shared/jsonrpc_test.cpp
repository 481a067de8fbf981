#include "shared/jsonrpc.h"

#include <gtest/gtest.h>

namespace quiver {
namespace {

JsonRpcMessage parse_one(std::string_view text) {
  auto r = parse_jsonrpc_batch(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok() || r->size() != 1) return {};
  return (*r)[0];
}

TEST(JsonRpc, ClassifiesTheFourKinds) {
  auto req = parse_one(R"({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}})");
  EXPECT_EQ(req.kind, JsonRpcKind::kRequest);
  EXPECT_EQ(req.method, "tools/list");
  auto note = parse_one(R"({"jsonrpc":"2.0","method":"notifications/tools/list_changed"})");
  EXPECT_EQ(note.kind, JsonRpcKind::kNotification);
  EXPECT_TRUE(note.params.is_null());
  auto res = parse_one(R"({"jsonrpc":"2.0","id":"a-1","result":{"tools":[]}})");
  EXPECT_EQ(res.kind, JsonRpcKind::kResult);
  EXPECT_EQ(res.id, "a-1");
  auto err =
      parse_one(R"({"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}})");
  EXPECT_EQ(err.kind, JsonRpcKind::kError);
  EXPECT_EQ(err.error.code, kJsonRpcMethodNotFound);
  EXPECT_EQ(err.error.message, "Method not found");
}

TEST(JsonRpc, RejectsWhatIsNotJsonRpc) {
  for (const char* bad : {
           R"([])",
           R"("hello")",
           R"({"id":1,"result":{}})",
           R"({"jsonrpc":"1.0","id":1,"result":{}})",
           R"({"jsonrpc":"2.0","id":1})",
           R"({"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1}})",
           R"({"jsonrpc":"2.0","id":{"x":1},"method":"a"})",
           R"({"jsonrpc":"2.0","id":1.5,"result":{}})",
           R"({"jsonrpc":"2.0","method":7})",
           R"({"jsonrpc":"2.0","method":"a","params":"x"})",
           R"({"jsonrpc":"2.0","id":1,"error":{"code":"x"}})",
           R"({"jsonrpc":"2.0","id":1,"error":"boom"})",
           R"({"jsonrpc":"2.0","id":null,"result":{}})",
           R"({"jsonrpc":"2.0")",
       }) {
    auto r = parse_jsonrpc_batch(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply) << bad;
  }
}

TEST(JsonRpc, AcceptsBatches) {
  auto r = parse_jsonrpc_batch(
      R"([{"jsonrpc":"2.0","method":"notifications/progress"},{"jsonrpc":"2.0","id":2,"result":{}}])");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].kind, JsonRpcKind::kResult);
}

TEST(JsonRpc, ErrorWithNullIdIsAllowed) {
  auto m = parse_one(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse"}})");
  EXPECT_EQ(m.kind, JsonRpcKind::kError);
  EXPECT_TRUE(m.id.is_null());
}

TEST(JsonRpc, EncodersRoundTripWithoutNewlines) {
  std::string req = encode_request(3, "tools/list", Json{{"cursor", "line\nbreak"}});
  EXPECT_EQ(req.find('\n'), std::string::npos);
  auto m = parse_one(req);
  EXPECT_EQ(m.kind, JsonRpcKind::kRequest);
  EXPECT_EQ(m.id, 3);
  EXPECT_EQ(m.params["cursor"], "line\nbreak");
  EXPECT_EQ(parse_one(encode_notification("notifications/initialized", Json())).params, Json());
  EXPECT_EQ(parse_one(encode_result(Json("x"), Json::object())).kind, JsonRpcKind::kResult);
  auto e = parse_one(encode_error(Json(9), kJsonRpcInvalidParams, "bad"));
  EXPECT_EQ(e.error.code, kJsonRpcInvalidParams);
  EXPECT_EQ(describe(e), "error -32602 for 9");
}

}  // namespace
}  // namespace quiver
