// A minimal stdio MCP server for the listing benchmark: starts in a millisecond and uses ~1 MB, so
// that a hundred of them measure Quiver's scheduling rather than Node's start-up.
//
//   fake_upstream [--delay-ms D] [--hang] [--tools N]
// Answers initialize at once (protocol 2025-11-25, capability tools), tools/list after D ms (or
// never with --hang), ping with {}, any other request with -32601; exits when stdin closes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

using Json = nlohmann::json;

namespace {

void reply(const Json& message) {
  std::string line = message.dump();
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int delay_ms = 0, tools = 3;
  bool hang = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--delay-ms") && i + 1 < argc) {
      delay_ms = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--tools") && i + 1 < argc) {
      tools = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--hang")) {
      hang = true;
    } else {
      std::fprintf(stderr, "usage: fake_upstream [--delay-ms D] [--hang] [--tools N]\n");
      return 2;
    }
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    Json m = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!m.is_object() || !m.contains("id") || !m.contains("method")) continue;  // notifications
    Json id = m["id"];
    std::string method = m.value("method", "");
    if (method == "initialize") {
      reply({{"jsonrpc", "2.0"},
             {"id", id},
             {"result",
              {{"protocolVersion", "2025-11-25"},
               {"capabilities", {{"tools", Json::object()}}},
               {"serverInfo", {{"name", "fake-upstream"}, {"version", "1.0.0"}}}}}});
    } else if (method == "tools/list") {
      if (hang) continue;
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      Json list = Json::array();
      for (int t = 1; t <= tools; ++t) {
        list.push_back(
            {{"name", "tool_" + std::to_string(t)}, {"inputSchema", {{"type", "object"}}}});
      }
      reply({{"jsonrpc", "2.0"}, {"id", id}, {"result", {{"tools", list}}}});
    } else if (method == "ping") {
      reply({{"jsonrpc", "2.0"}, {"id", id}, {"result", Json::object()}});
    } else {
      reply({{"jsonrpc", "2.0"},
             {"id", id},
             {"error", {{"code", -32601}, {"message", "Method not found"}}}});
    }
  }
  return 0;
}
