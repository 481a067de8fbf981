// Fuzzes the JSON-RPC reader (shared/jsonrpc.h): one message or a batch as text. Every message
// it accepts must encode again with the matching encoder (compact, one line), parse back to the
// same message, and describe itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/jsonrpc.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

void roundtrip(const JsonRpcMessage& m) {
  (void)describe(m);
  std::string text;
  switch (m.kind) {
    case JsonRpcKind::kRequest:
      if (!m.id.is_number_integer()) return;  // we only ever send integer ids
      text = encode_request(m.id.get<int64_t>(), m.method, m.params);
      break;
    case JsonRpcKind::kNotification:
      text = encode_notification(m.method, m.params);
      break;
    case JsonRpcKind::kResult:
      text = encode_result(m.id, m.result);
      break;
    case JsonRpcKind::kError:
      text = encode_error(m.id, m.error.code, m.error.message);
      break;
  }
  fuzz::check(text.find('\n') == std::string::npos, "jsonrpc: an encoding holds a newline");
  auto back = parse_jsonrpc_batch(text);
  fuzz::check(back.ok() && back->size() == 1, "jsonrpc: an encoding does not parse back",
              back.ok() ? "" : back.error().message);
  const JsonRpcMessage& b = (*back)[0];
  fuzz::check(b.kind == m.kind && b.id == m.id && b.method == m.method,
              "jsonrpc: the round trip changed kind, id or method");
  switch (m.kind) {
    case JsonRpcKind::kRequest:
    case JsonRpcKind::kNotification:
      fuzz::check(b.params == m.params, "jsonrpc: the round trip changed params");
      break;
    case JsonRpcKind::kResult:
      fuzz::check(b.result == m.result, "jsonrpc: the round trip changed the result");
      break;
    case JsonRpcKind::kError:
      fuzz::check(b.error.code == m.error.code && b.error.message == m.error.message,
                  "jsonrpc: the round trip changed the error");
      break;
  }
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  auto batch = parse_jsonrpc_batch(fuzz::as_view(data, size));
  if (!batch.ok()) {
    fuzz::check(batch.error().code == ErrorCode::kInvalidReply ||
                    batch.error().code == ErrorCode::kTooLarge,
                "jsonrpc: a refusal with an unexpected code", error_code_name(batch.error().code));
    return 0;
  }
  fuzz::check(!batch->empty(), "jsonrpc: an accepted batch is empty");
  for (const JsonRpcMessage& m : *batch) roundtrip(m);
  return 0;
}
