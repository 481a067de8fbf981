// The edge's least-privilege Redis user for the integration tests, exactly as
// schema/redis-acl-edge.txt describes it (tests/edge/harness.mjs does the same for the edge suite).
//
//   run_argv(admin.get(), edge_acl_setuser("acl", "edge-password"));   // ACL SETUSER quiver-edge
//   ... run_argv(edge.get(), {"AUTH", "quiver-edge", "edge-password"});
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "tests/support/markdown_table.h"

namespace quiver::testing {

// `ACL SETUSER quiver-edge reset <the file's rules, {ns} → {<ns>}> ><password>`.
inline std::vector<std::string> edge_acl_setuser(const std::string& ns,
                                                 const std::string& password) {
  std::vector<std::string> setuser = {"ACL", "SETUSER", "quiver-edge", "reset"};
  std::istringstream lines(read_source_file("schema/redis-acl-edge.txt"));
  for (std::string line; std::getline(lines, line);) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    for (std::size_t at; (at = line.find("{ns}")) != std::string::npos;) {
      line.replace(at, 4, "{" + ns + "}");
    }
    setuser.push_back(line);
  }
  setuser.push_back(">" + password);
  return setuser;
}

}  // namespace quiver::testing
