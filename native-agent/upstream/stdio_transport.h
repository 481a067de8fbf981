// The MCP stdio transport: the upstream is a child process speaking newline-delimited JSON-RPC
// on its stdin/stdout; its stderr goes to the agent's log, bounded.
//
// `StdioTransport::start` spawns the command (see ChildProcess for what the child inherits: only
// PATH, HOME, LANG plus the configured env). `send` queues one message line; `receive` waits for
// complete lines. The child exiting, closing stdout, or sending a line over the size bound is a
// transport error (kTransport / kTooLarge); after it the transport is closed. `close` terminates
// the child (stdin closed, SIGTERM, SIGKILL after the grace) and reaps it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "native-agent/upstream/child_process.h"
#include "native-agent/upstream/transport.h"
#include "shared/framing.h"

namespace quiver {

struct StdioTransportOptions {
  std::size_t max_message_bytes = 16u << 20;
  int terminate_grace_ms = 2000;
  // Called with each stderr line of the child (already bounded); may be empty.
  std::function<void(const std::string& line)> on_stderr_line;
};

class StdioTransport : public MessageTransport {
 public:
  // `label` names the upstream in logs and errors (the connection name, never args or env).
  static Result<std::unique_ptr<StdioTransport>> start(const ChildSpec& spec, std::string label,
                                                       StdioTransportOptions options = {});
  ~StdioTransport() override;

  Status send(const std::string& message_text, int64_t timeout_ms) override;
  Result<std::vector<TransportMessage>> receive(int64_t timeout_ms) override;
  void set_protocol_version(const std::string&) override {}
  void close() override;
  std::string describe() const override { return "stdio upstream " + label_; }

  ChildProcess* child() { return child_.get(); }

 private:
  StdioTransport(std::unique_ptr<ChildProcess> child, std::string label,
                 StdioTransportOptions options);
  void forward_stderr();
  Error closed_error(const char* what);

  std::unique_ptr<ChildProcess> child_;
  std::string label_;
  StdioTransportOptions options_;
  NdjsonDecoder decoder_;
  bool closed_ = false;
};

}  // namespace quiver
