// quiver-agent: wires the pieces together; the commands live in cli.cpp and cmd_*.cpp.
#include <sys/prctl.h>

#include "native-agent/cli/cli.h"

int main(int argc, char** argv) {
  // First, before any secret is read: not dumpable. Stdio upstreams run as the agent's user, and
  // a process of the same user may otherwise read /proc/<agent>/environ (secrets passed as
  // environment variables), /proc/<agent>/mem, or ptrace the agent. Non-dumpable, those files
  // belong to root and ptrace is refused; no core dump holds the agent's memory either. Children
  // are not affected: execve makes them dumpable again. Secrets read from files never enter the
  // agent's environment (nothing calls setenv); a child gets its env only through posix_spawn's
  // envp (child_process.cpp).
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  return quiver::run_cli(argc, argv);
}
