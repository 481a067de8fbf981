// A message transport to one upstream MCP server: moves JSON-RPC message texts, nothing else.
//
// The MCP session state machine (shared/mcp_session.h) decides what to send and when to give
// up; a transport only carries bytes and reports what arrived. Two implementations: stdio (a
// child process, newline-delimited JSON) and Streamable HTTP (POST per message, replies as JSON
// or SSE, an optional GET stream for server notifications). A transport is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"

namespace quiver {

struct TransportMessage {
  std::string text;  // one JSON-RPC message or batch, as received
};

class MessageTransport {
 public:
  virtual ~MessageTransport() = default;

  // Sends one JSON-RPC message (compact JSON text, no trailing newline). May block up to
  // `timeout_ms` (HTTP: the request). Replies it produced become readable through `receive`.
  virtual Status send(const std::string& message_text, int64_t timeout_ms) = 0;

  // Waits up to `timeout_ms` for incoming messages and returns those that arrived (possibly
  // none). A fatal transport failure (child exited, session expired, notification stream lost)
  // is an error; after it the transport is closed. Per-request failures over HTTP (refused,
  // 5xx, timeout) come back from `send` and leave the transport usable.
  virtual Result<std::vector<TransportMessage>> receive(int64_t timeout_ms) = 0;

  // Tells the transport which protocol version was negotiated (HTTP sends it as a header).
  virtual void set_protocol_version(const std::string& version) = 0;

  // Ends the session politely (HTTP DELETE, stdio: close stdin, then terminate). Idempotent.
  virtual void close() = 0;

  // A short description safe for logs: never a secret (no header values, no env values).
  virtual std::string describe() const = 0;
};

}  // namespace quiver
