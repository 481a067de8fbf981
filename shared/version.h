// Quiver's version: the one place it is written. The top-level CMakeLists.txt reads it from here
// for project(VERSION) (and so the Debian package), and the code names it through kQuiverVersion:
// the MCP clientInfo the agent sends, the edge's /healthz and the OTLP resource.
#pragma once

namespace quiver {

inline constexpr char kQuiverVersion[] = "0.1.0";

}  // namespace quiver
