// Fuzzes the MCP client session (shared/mcp_session.h) with arbitrary server messages: the
// upstream's whole attack surface. The input is a script, one line per step:
//   "#p<0|1|2>" (first line only)  the era policy: probe, legacy, modern
//   "#t"            time jumps to the next deadline: handle_timeout
//   "#f<id>"        on_request_failed(id): the request got no JSON-RPC answer (HTTP 404, 5xx)
//   "#e"            on_transport_error: the pipe broke
//   "#r"            relist() every kind
//   "#c"            close()
//   anything else   handle_text(line): one message or a batch from the server
// Every step advances the clock by 1 ms. The session runs with ids from 1 as always, so a
// script recorded against a real server's answers (make_seeds.cpp does that with the
// tests/fixtures/mcp captures) replays. Properties: every message the session sends is one
// line of valid JSON-RPC; every ListingReady that yields a manifest encodes and decodes back to
// the same bytes; and once time runs past every deadline the session is no longer busy (Ready
// or Closed: a hostile server cannot keep a listing open forever).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/manifest.h"
#include "shared/mcp_session.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

void drain(McpSession& s) {
  while (auto text = s.poll_transmit()) {
    fuzz::check(text->find('\n') == std::string::npos, "session: a message holds a newline");
    auto parsed = parse_jsonrpc_batch(*text);
    fuzz::check(parsed.ok() && parsed->size() == 1, "session: sent invalid JSON-RPC",
                text->substr(0, 300));
  }
  while (auto event = s.poll_event()) {
    if (auto* ready = std::get_if<McpSession::ListingReady>(&*event)) {
      auto manifest = manifest_from_listing(ready->listing);
      if (!manifest.ok()) continue;
      auto encoded = encode_manifest(*manifest);
      fuzz::check(encoded.ok(), "manifest_from_listing built a manifest that does not encode",
                  encoded.ok() ? "" : encoded.error().message);
      auto decoded = decode_manifest(encoded->bytes);
      fuzz::check(decoded.ok(), "a manifest from a listing does not decode",
                  decoded.ok() ? "" : decoded.error().message);
      auto again = encode_manifest(*decoded);
      fuzz::check(again.ok() && again->bytes == encoded->bytes,
                  "a manifest from a listing changes in a round trip");
    } else if (auto* failed = std::get_if<McpSession::Failed>(&*event)) {
      fuzz::check(!failed->error.message.empty(), "session: Failed without a reason");
    }
  }
}

bool busy(SessionState s) {
  return s == SessionState::kDiscovering || s == SessionState::kInitializing ||
         s == SessionState::kListing;
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view script = fuzz::as_view(data, size);
  McpSessionConfig config;
  config.max_pages_per_list = 20;
  config.max_items_per_list = 500;
  config.max_message_bytes = std::size_t{1} << 20;
  if (script.size() >= 3 && script.substr(0, 2) == "#p") {
    config.era = script[2] == '1'   ? EraPolicy::kLegacy
                 : script[2] == '2' ? EraPolicy::kModern
                                    : EraPolicy::kProbe;
  }

  int64_t now = 1'000'000;
  McpSession session(config);
  fuzz::check(session.start(now).ok(), "session: start refused the config");
  drain(session);

  std::size_t pos = 0;
  while (pos < script.size()) {
    std::size_t nl = script.find('\n', pos);
    if (nl == std::string_view::npos) nl = script.size();
    std::string_view line = script.substr(pos, nl - pos);
    pos = nl + 1;
    now += 1;
    if (line.size() >= 2 && line[0] == '#') {
      switch (line[1]) {
        case 't':
          if (auto d = session.next_deadline()) now = std::max(now, *d);
          session.handle_timeout(now);
          break;
        case 'f':
          session.on_request_failed(std::atoll(std::string(line.substr(2)).c_str()),
                                    Error(ErrorCode::kUnknown, "HTTP 404"), now);
          break;
        case 'e':
          session.on_transport_error(Error(ErrorCode::kTransport, "pipe closed"), now);
          break;
        case 'r':
          (void)session.relist({ListKind::kTools, ListKind::kResources,
                                ListKind::kResourceTemplates, ListKind::kPrompts},
                               now);
          break;
        case 'c':
          session.close(now);
          break;
        default:
          break;  // "#p..." and unknown controls
      }
    } else {
      (void)session.handle_text(line, now);
    }
    drain(session);
  }

  // Silence from here on: every deadline passes.
  for (int i = 0; i < 64 && busy(session.state()); ++i) {
    auto d = session.next_deadline();
    fuzz::check(d.has_value(), "session: busy without a deadline",
                session_state_name(session.state()));
    now = std::max(now + 1, *d);
    session.handle_timeout(now);
    drain(session);
  }
  fuzz::check(!busy(session.state()), "session: still busy after every deadline passed",
              session_state_name(session.state()));
  return 0;
}
