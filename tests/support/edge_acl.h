// The edge's least-privilege Redis user for the integration tests, exactly as
// schema/redis-acl-edge.txt describes it (tests/edge/harness.mjs does the same for the edge suite).
//
//   run_argv(admin.get(), edge_acl_setuser("acl", "edge-password"));   // ACL SETUSER quiver-edge
//   ... run_argv(edge.get(), {"AUTH", "quiver-edge", "edge-password"});
// or both at once:
//   RedisConnection edge = connect_as_edge(server, "acl");
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/hiredis_run.h"
#include "tests/support/markdown_table.h"
#include "tests/support/redis_server.h"

namespace quiver::testing {

// `ACL SETUSER quiver-edge reset <the file's rules, {ns → {<ns>}> ><password>`.
inline std::vector<std::string> edge_acl_setuser(const std::string& ns,
                                                 const std::string& password) {
  std::vector<std::string> setuser = {"ACL", "SETUSER", "quiver-edge", "reset"};
  std::istringstream lines(read_source_file("schema/redis-acl-edge.txt"));
  for (std::string line; std::getline(lines, line);) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    // `{ns` starts every tag of the namespace: `{ns}` (v1) and key layout v2's `{ns:c:`, ...
    for (std::size_t at = 0; (at = line.find("{ns", at)) != std::string::npos; at += ns.size()) {
      line.replace(at, 3, "{" + ns);
    }
    setuser.push_back(line);
  }
  setuser.push_back(">" + password);
  return setuser;
}

// Creates the edge's user on `server` (through a connection of its default user) and returns a
// connection authenticated as it: what the edge may and may not do, tried as the edge. Null, with
// the test failed, when a step fails.
inline RedisConnection connect_as_edge(const RedisServer& server, const std::string& ns,
                                       const std::string& password = "edge-password") {
  RedisConnection admin(server.connect());
  if (!admin) {
    ADD_FAILURE() << "no connection to redis-server";
    return nullptr;
  }
  RespValue created = run_argv(admin.get(), edge_acl_setuser(ns, password));
  if (created.str != "OK") {
    ADD_FAILURE() << "ACL SETUSER quiver-edge: " << created.str;
    return nullptr;
  }
  RedisConnection edge(server.connect());
  RespValue authed = edge ? run_argv(edge.get(), {"AUTH", "quiver-edge", password}) : RespValue();
  if (!edge || authed.str != "OK") {
    ADD_FAILURE() << "AUTH quiver-edge: " << authed.str;
    return nullptr;
  }
  return edge;
}

}  // namespace quiver::testing
