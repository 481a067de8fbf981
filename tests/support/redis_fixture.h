// A gtest fixture for the integration tests that drive one real redis-server: the server starts
// once per suite and stops after it; each test gets an emptied server (FLUSHALL) and its own
// hiredis connection.
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

class RedisFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new RedisServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(server_->ok()) << server_->error();
    c_.reset(server_->connect());
    ASSERT_NE(c_, nullptr);
    cmd({"FLUSHALL"});
  }

  RespValue cmd(const std::vector<std::string>& argv) { return run_argv(c_.get(), argv); }

  static inline RedisServer* server_ = nullptr;  // one suite's at a time
  RedisConnection c_;
};

}  // namespace quiver::testing
