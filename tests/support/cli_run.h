// Runs the real `quiver-agent` binary as a child process and collects what it printed and its
// exit code (tests/integration/cli_test.cpp, admin_api_test.cpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/upstream/child_process.h"
#include "tests/support/mcp_peers.h"

namespace quiver::testing {

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

inline CliRun run(const std::vector<std::string>& args, std::map<std::string, std::string> env = {},
                  const std::string& program = quiver_agent_binary()) {
  CliRun r;
  auto child = ChildProcess::spawn(ChildSpec(program, args, std::move(env)));
  if (!child.ok()) {
    r.err = child.error().message;
    return r;
  }
  ChildProcess& p = **child;
  std::optional<ExitStatus> status;
  wait_until(
      [&] {
        (void)p.wait_readable(50);
        Result<std::string> bytes = p.read_stdout();
        if (bytes.ok()) r.out += *bytes;
        p.drain_stderr();
        if (!p.stdout_eof()) return false;
        status = p.exit_status();
        return status.has_value();
      },
      30'000);
  r.err = p.stderr_tail();
  if (status && status->exited) r.code = status->code;
  return r;
}

}  // namespace quiver::testing
