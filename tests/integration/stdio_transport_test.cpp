#include "native-agent/upstream/stdio_transport.h"

#include <string>

#include <gtest/gtest.h>

#include "shared/jsonrpc.h"

namespace quiver {
namespace {

std::string everything_js() {
  return std::string(QUIVER_NODE_MODULES) +
         "/@modelcontextprotocol/server-everything/dist/index.js";
}

TEST(StdioTransport, InitializesRealServerEverything) {
  auto t = StdioTransport::start(ChildSpec("node", {everything_js(), "stdio"}), "everything");
  ASSERT_TRUE(t.ok()) << t.error().message;
  Json params = {{"protocolVersion", "2025-11-25"},
                 {"capabilities", Json::object()},
                 {"clientInfo", {{"name", "quiver-test"}, {"version", "0"}}}};
  ASSERT_TRUE((*t)->send(encode_request(1, "initialize", params), 2000).ok());
  // server-everything may send notifications first; wait for our result.
  bool got = false;
  for (int i = 0; i < 50 && !got; ++i) {
    auto msgs = (*t)->receive(200);
    ASSERT_TRUE(msgs.ok()) << msgs.error().message;
    for (auto& m : *msgs) {
      auto parsed = parse_jsonrpc_batch(m.text);
      ASSERT_TRUE(parsed.ok()) << m.text;
      for (auto& msg : *parsed) {
        if (msg.kind == JsonRpcKind::kResult && msg.id == 1) {
          got = true;
          EXPECT_TRUE(msg.result.contains("serverInfo"));
        }
      }
    }
  }
  EXPECT_TRUE(got);
  (*t)->close();
  EXPECT_FALSE((*t)->send("{}", 100).ok());
}

TEST(StdioTransport, ChildExitIsATransportErrorNamingTheExit) {
  auto t = StdioTransport::start(ChildSpec("sh", {"-c", "echo '{\"a\":1}'; exit 3"}), "quitter");
  ASSERT_TRUE(t.ok());
  auto first = (*t)->receive(2000);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].text, "{\"a\":1}");
  Result<std::vector<TransportMessage>> next = std::vector<TransportMessage>{};
  for (int i = 0; i < 20 && next.ok(); ++i) next = (*t)->receive(200);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.error().code, ErrorCode::kTransport);
  EXPECT_NE(next.error().message.find("quitter"), std::string::npos) << next.error().message;
}

TEST(StdioTransport, OversizedLineIsRefused) {
  StdioTransportOptions options;
  options.max_message_bytes = 1024;
  auto t = StdioTransport::start(
      ChildSpec("sh", {"-c", "head -c 5000 /dev/zero | tr '\\0' 'x'; echo; sleep 5"}), "big",
      options);
  ASSERT_TRUE(t.ok());
  Result<std::vector<TransportMessage>> r = std::vector<TransportMessage>{};
  for (int i = 0; i < 20 && r.ok(); ++i) r = (*t)->receive(200);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge);
}

TEST(StdioTransport, SpawnFailureNamesTheUpstreamNotItsArguments) {
  auto t =
      StdioTransport::start(ChildSpec("/nonexistent/quiver-upstream", {"--token=s3cret"}), "ghost");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("ghost"), std::string::npos);
  EXPECT_EQ(t.error().message.find("s3cret"), std::string::npos);
}

}  // namespace
}  // namespace quiver
