// quiver-agent's exit codes (stable, for scripts): 0 ok, 1 the command ran and failed (upstream
// unreachable, refresh failed), 2 usage or configuration error, 3 a store (Redis/SQLite) is
// unavailable. Apart from the command line (cli.h) because the configuration, below it, names the
// code a bad configuration exits with.
#pragma once

namespace quiver {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitStoreUnavailable = 3;

}  // namespace quiver
