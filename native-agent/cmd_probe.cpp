#include <cstdio>

#include "native-agent/cli.h"

namespace quiver {

// TODO(upstream): replaced by the real probe (issue 3) — lists one upstream and prints its manifest.
int cmd_probe(const std::vector<std::string>& args) {
  std::fprintf(stderr, "quiver-agent probe: not available in this build yet\n");
  return kExitFailed;
}

}  // namespace quiver
