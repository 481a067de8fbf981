// The RESP codec against a real redis-server, over a plain TCP socket: our encoder writes the
// pipeline, our decoder reads what Redis answers (no hiredis context involved).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/resp.h"
#include "tests/support/loopback_socket.h"
#include "tests/support/redis_server.h"

namespace quiver {
namespace {

using namespace std::string_literals;

using Socket = testing::LoopbackSocket;

// Sends the pipeline and decodes replies as they arrive, in small reads so that replies straddle
// reads. Returns every reply and every raw byte received.
struct Exchange {
  std::vector<RespValue> replies;
  std::string raw;
  std::optional<Error> error;
};

Exchange run(Socket& socket, const Pipeline& pipeline, RespLimits limits = {}) {
  Exchange x;
  if (!socket.send_all(pipeline.bytes())) {
    x.error = Error(ErrorCode::kTransport, "send failed");
    return x;
  }
  RespDecoder decoder(limits);
  while (x.replies.size() < pipeline.expected_replies()) {
    std::string chunk = socket.receive(1000);
    if (chunk.empty()) {
      x.error = Error(ErrorCode::kTransport, "connection closed or timed out");
      return x;
    }
    x.raw += chunk;
    Status fed = decoder.feed(chunk);
    if (!fed.ok()) {
      x.error = fed.error();
      return x;
    }
    while (true) {
      auto r = decoder.next();
      if (!r.ok()) {
        x.error = r.error();
        return x;
      }
      if (!r->has_value()) break;
      x.replies.push_back(std::move(**r));
    }
  }
  EXPECT_TRUE(decoder.at_boundary());
  return x;
}

RespValue B(std::string s) { return RespValue::bulk_string(std::move(s)); }
RespValue I(int64_t i) { return RespValue::integer_value(i); }
RespValue S(std::string s) { return RespValue::simple_string(std::move(s)); }
RespValue A(std::vector<RespValue> v) { return RespValue::array(std::move(v)); }

// A real redis-server and one raw connection to it.
class RespRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis.ok()) << redis.error();
    ASSERT_TRUE(socket.ok());
  }

  testing::RedisServer redis;
  Socket socket{redis.port()};
};

TEST_F(RespRedis, PipelineOfEveryReplyTypeRoundTrips) {
  const std::string binary = "bin\r\n\0\xff\r\n$3\r\n*1\r\n-ERR not an error\r\n"s;
  const std::string big(100000, 'z');  // spans many reads
  Pipeline p;
  p.add({"SET", "quiver:{t}:bin", binary});                              // 0
  p.add({"GET", "quiver:{t}:bin"});                                      // 1
  p.add({"GET", "quiver:{t}:missing"});                                  // 2
  p.add({"HSET", "quiver:{t}:h", "config_hash", "abc", "fence", "12"});  // 3
  p.add({"HGETALL", "quiver:{t}:h"});                                    // 4
  p.add({"EVAL",
         "return {1, {'a', {2, 'b', {}}}, redis.status_reply('fine'), "
         "redis.error_reply('INNER failure'), false}",
         "0"});                           // 5
  p.add({"NOSUCHCOMMAND", "x"});          // 6
  p.add({"INCR", "quiver:{t}:h"});        // 7 (WRONGTYPE)
  p.add({"SET", "quiver:{t}:big", big});  // 8
  p.add({"GET", "quiver:{t}:big"});       // 9
  p.add({"EVAL", "return redis.call('HGET', KEYS[1], 'fence')", "1", "quiver:{t}:h"});  // 10
  p.add({"INCR", "quiver:{t}:counter"});                                                // 11
  ASSERT_EQ(p.expected_replies(), 12u);

  Exchange x = run(socket, p);
  ASSERT_FALSE(x.error.has_value()) << x.error->message;
  ASSERT_EQ(x.replies.size(), 12u);
  const auto& r = x.replies;

  EXPECT_TRUE(r[0].is_ok()) << r[0];
  EXPECT_EQ(r[1], B(binary));
  EXPECT_TRUE(r[2].is_nil()) << r[2];
  EXPECT_EQ(r[3], I(2));

  ASSERT_TRUE(r[4].is_array()) << r[4];
  ASSERT_EQ(r[4].elements.size(), 4u);
  std::map<std::string, std::string> hash;
  for (size_t i = 0; i + 1 < r[4].elements.size(); i += 2) {
    hash[std::string(r[4].elements[i].as_string().value_or(""))] =
        std::string(r[4].elements[i + 1].as_string().value_or(""));
  }
  EXPECT_EQ(hash, (std::map<std::string, std::string>{{"config_hash", "abc"}, {"fence", "12"}}));

  EXPECT_EQ(r[5], A({I(1), A({B("a"), A({I(2), B("b"), A({})})}), S("fine"),
                     RespValue::error("INNER failure"), RespValue::nil()}));

  ASSERT_TRUE(r[6].is_error()) << r[6];
  EXPECT_EQ(r[6].error_message()->rfind("ERR unknown command", 0), 0u) << r[6];
  ASSERT_TRUE(r[7].is_error()) << r[7];
  EXPECT_EQ(r[7].error_message()->rfind("WRONGTYPE", 0), 0u) << r[7];

  // The replies after the errors are still in step.
  EXPECT_TRUE(r[8].is_ok()) << r[8];
  EXPECT_EQ(r[9], B(big));
  EXPECT_EQ(r[10].as_int(), 12);  // a hash field holding a number comes back as a bulk string
  EXPECT_EQ(r[11], I(1));

  // The same bytes, decoded in one go.
  auto all = decode_all(x.raw, p.expected_replies());
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(*all, x.replies);
}

TEST_F(RespRedis, OversizedReplyFromRedisIsRefused) {
  Pipeline p;
  p.add({"SET", "quiver:{t}:big", std::string(50000, 'z')});
  p.add({"GET", "quiver:{t}:big"});
  RespLimits limits;
  limits.max_bulk_bytes = 4096;
  Exchange x = run(socket, p, limits);
  ASSERT_TRUE(x.error.has_value());
  EXPECT_EQ(x.error->code, ErrorCode::kTooLarge) << x.error->message;
  EXPECT_NE(x.error->message.find("50000 bytes"), std::string::npos) << x.error->message;
  EXPECT_EQ(x.replies.size(), 1u);  // the SET's +OK came through before the refusal
}

TEST_F(RespRedis, NestingBeyondTheReaderIsRefused) {
  Pipeline p;
  p.add({"EVAL", "return {{{{{{{{1}}}}}}}}", "0"});    // 8 levels: the most supported
  p.add({"EVAL", "return {{{{{{{{{1}}}}}}}}}", "0"});  // 9 levels
  Exchange x = run(socket, p);
  ASSERT_EQ(x.replies.size(), 1u);
  RespValue v = x.replies[0];
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(v.is_array() && v.elements.size() == 1) << x.replies[0];
    RespValue inner = v.elements[0];
    v = inner;
  }
  EXPECT_EQ(v, I(1));
  ASSERT_TRUE(x.error.has_value());
  EXPECT_EQ(x.error->code, ErrorCode::kTooLarge) << x.error->message;
}

}  // namespace
}  // namespace quiver
