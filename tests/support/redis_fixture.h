// gtest fixtures for the integration tests that drive one real redis-server, started once per
// suite and stopped after it. WithRedisServer<Base> holds just the server (`redis_`);
// RedisFixture adds an emptied server (FLUSHALL) and a hiredis connection for each test.
//
//   class MyRedisTest : public quiver::testing::RedisFixture {
//     void SetUp() override {
//       RedisFixture::SetUp();
//       if (HasFatalFailure()) return;
//       cmd({"SET", "k", "v"});  // the test's own set-up
//     }
//   };
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/resp.h"
#include "tests/support/hiredis_run.h"
#include "tests/support/redis_server.h"

namespace quiver::testing {

template <typename Base = ::testing::Test>
class WithRedisServer : public Base {
 protected:
  static void SetUpTestSuite() { redis_ = new RedisServer(); }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
  }

  static inline RedisServer* redis_ = nullptr;  // one suite's at a time
};

class RedisFixture : public WithRedisServer<> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_->ok()) << redis_->error();
    c_.reset(redis_->connect());
    ASSERT_NE(c_, nullptr);
    cmd({"FLUSHALL"});
  }

  RespValue cmd(const std::vector<std::string>& argv) { return run_argv(c_.get(), argv); }

  RedisConnection c_;
};

}  // namespace quiver::testing
