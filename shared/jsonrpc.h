// JSON-RPC 2.0 messages as MCP uses them: requests, notifications and responses.
//
// `parse_jsonrpc` turns one JSON value from a peer into a `JsonRpcMessage` (or a clear error:
// the peer sent something that is not JSON-RPC); `parse_jsonrpc_batch` also accepts an array
// (batches were allowed in protocol 2025-03-26). The encoders produce compact JSON text without
// newlines, ready for either framing (NDJSON line, HTTP body). Request ids are integers or
// strings; ids we send are integers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

inline constexpr int64_t kJsonRpcParseError = -32700;
inline constexpr int64_t kJsonRpcInvalidRequest = -32600;
inline constexpr int64_t kJsonRpcMethodNotFound = -32601;
inline constexpr int64_t kJsonRpcInvalidParams = -32602;
inline constexpr int64_t kJsonRpcInternalError = -32603;

enum class JsonRpcKind { kRequest, kNotification, kResult, kError };

struct JsonRpcError {
  int64_t code = 0;
  std::string message;
  Json data;  // null when absent
};

struct JsonRpcMessage {
  JsonRpcKind kind = JsonRpcKind::kNotification;
  Json id;             // requests and responses: an integer or a string (null on errors to
                       // messages whose id could not be read)
  std::string method;  // requests and notifications
  Json params;         // requests and notifications; null when absent
  Json result;         // kResult
  JsonRpcError error;  // kError
  // Bytes of the text this message came in (its share of a batch): what a listing's byte budget
  // counts. 0 for messages not made by parse_jsonrpc_batch.
  std::size_t wire_bytes = 0;
};

// Takes the value by value: pass it with std::move and its members are moved, not copied.
Result<JsonRpcMessage> parse_jsonrpc(Json value);
// Parses text holding one message or a batch (array) of messages.
Result<std::vector<JsonRpcMessage>> parse_jsonrpc_batch(std::string_view text,
                                                        std::size_t max_bytes = kMaxJsonBytes);

// The integer id of a text that parse_jsonrpc_batch refused (nested past the depth limit, not
// JSON-RPC 2.0) but that is well-formed JSON, an object with a top-level "id" and a "result" or
// "error": a response, found without building anything (a SAX pass). Its request can fail at
// once as an invalid reply instead of waiting for its deadline; any other unreadable text (a
// notification, garbage) answers nothing and is skipped. nullopt when no such id is found.
std::optional<int64_t> unreadable_response_id(std::string_view text);

std::string encode_request(int64_t id, std::string_view method, const Json& params);
std::string encode_notification(std::string_view method, const Json& params);
std::string encode_result(const Json& id, const Json& result);
std::string encode_error(const Json& id, int64_t code, std::string_view message);

// A short, log-safe description of a message ("request 3 tools/list", "error -32601 on 5").
std::string describe(const JsonRpcMessage& message);

}  // namespace quiver
