#include "tests/support/redis_server.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

namespace quiver::testing {
namespace {

TEST(RedisServer, StartsOnLoopbackAndComesBackAfterStop) {
  RedisServer redis;
  ASSERT_TRUE(redis.ok()) << redis.error();
  redisContext* c = redis.connect();
  ASSERT_NE(c, nullptr);
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SET k v"));
  ASSERT_NE(reply, nullptr);
  freeReplyObject(reply);
  redisFree(c);
  redis.stop();
  EXPECT_EQ(redis.connect(), nullptr);
  ASSERT_TRUE(redis.start()) << redis.error();
  c = redis.connect();
  ASSERT_NE(c, nullptr);
  reply = static_cast<redisReply*>(redisCommand(c, "PING"));
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->type, REDIS_REPLY_STATUS);
  freeReplyObject(reply);
  redisFree(c);
}

}  // namespace
}  // namespace quiver::testing
