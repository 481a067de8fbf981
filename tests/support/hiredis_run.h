// Runs a command argv through hiredis for the integration tests: set-up, inspection, and driving a
// real redis-server with exactly the argv the core builds. Replies come back as the core's
// RespValue (hiredis' status replies as simple strings, its strings as bulk strings).
//
//   RedisConnection c(server.connect());
//   RespValue v = run_argv(c.get(), {"SET", "k", "v"});
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shared/resp.h"

struct redisContext;

namespace quiver::testing {

struct RedisContextFree {
  void operator()(redisContext* c) const;
};
// A hiredis connection that frees itself.
using RedisConnection = std::unique_ptr<redisContext, RedisContextFree>;

// One command; a transport failure is an error reply "transport: <hiredis' message>".
RespValue run_argv(redisContext* c, const std::vector<std::string>& argv);

}  // namespace quiver::testing
