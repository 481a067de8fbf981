// Fuzzes the stdio and Streamable HTTP framings (shared/framing.h): the input is a byte stream
// handed to an NdjsonDecoder and to an SseParser once whole and once in random pieces. Besides
// the sanitizers, it checks the promise that where the pieces split never changes the result
// (messages, errors, last event id, retry, the end-of-stream status), with the default bound and
// with a small one that makes the oversized-message paths run; and that every line `next_json`
// accepts is framed back by `encode_ndjson` as one line that parses again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/framing.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/decoder_run.h"

namespace quiver {
namespace {

// Errors compare by code: the message may say more when the decoder already knows more (an
// oversized line whose end it has seen), which depends on where the pieces end.
std::string error_text(const Error& e) { return std::string("E:") + error_code_name(e.code); }

// Everything an NDJSON decoder yields for `pieces`, as comparable text.
std::vector<std::string> ndjson_run(const std::vector<std::string_view>& pieces,
                                    std::size_t max_line) {
  NdjsonDecoder d(max_line);
  std::vector<std::string> out;
  auto on_line = [&](const std::string& line) {
    fuzz::check(!line.empty(), "ndjson: a blank line was returned");
    fuzz::check(line.find('\n') == std::string::npos, "ndjson: a line holds a newline");
    out.push_back("L:" + line);
  };
  auto on_error = [&](const Error& e) { out.push_back(error_text(e)); };
  Status end = testing::feed_pieces(d, pieces, on_line, on_error);
  out.push_back(end.ok() ? "end:ok" : "end:" + error_text(end.error()));
  testing::drain_decoder(d, on_line, on_error);
  fuzz::check(d.buffered_bytes() == 0, "ndjson: bytes left after finish and drain");
  return out;
}

std::vector<std::string> sse_run(const std::vector<std::string_view>& pieces,
                                 std::size_t max_event) {
  SseParser p(max_event);
  std::vector<std::string> out;
  Status end = testing::feed_pieces(
      p, pieces,
      [&](const SseEvent& e) {
        fuzz::check(e.priming == e.data.empty(), "sse: priming flag disagrees with empty data");
        fuzz::check(!e.type.empty(), "sse: empty event type");
        fuzz::check(e.id == p.last_event_id(), "sse: event id is not the last event id");
        fuzz::check(e.id.find('\0') == std::string::npos, "sse: an id holds NUL");
        out.push_back("ev:" + e.type + "|" + e.id + "|" + e.data);
      },
      [&](const Error& e) { out.push_back(error_text(e) + " id=" + p.last_event_id()); });
  out.push_back(end.ok() ? "end:ok" : "end:" + error_text(end.error()));
  out.push_back("last_id:" + p.last_event_id());
  out.push_back("retry:" + (p.retry() ? std::to_string(*p.retry()) : std::string("none")));
  return out;
}

void check_same(const std::vector<std::string>& whole, const std::vector<std::string>& split,
                const char* what) {
  if (whole == split) return;
  std::size_t i = 0;
  while (i < whole.size() && i < split.size() && whole[i] == split[i]) ++i;
  fuzz::fail(what, "first difference at output " + std::to_string(i) +
                       ": whole=" + (i < whole.size() ? whole[i].substr(0, 200) : "<end>") +
                       " split=" + (i < split.size() ? split[i].substr(0, 200) : "<end>"));
}

void ndjson_json_roundtrip(std::string_view data) {
  NdjsonDecoder d(4096);
  d.feed(data);
  (void)d.finish();
  for (int guard = 0; guard < 100000; ++guard) {
    auto r = d.next_json();
    if (!r.ok()) continue;
    if (!r->has_value()) break;
    std::string line = encode_ndjson(**r);
    fuzz::check(!line.empty() && line.back() == '\n' && line.find('\n') == line.size() - 1,
                "encode_ndjson: not exactly one line");
    NdjsonDecoder again;
    again.feed(line);
    auto back = again.next_json();
    fuzz::check(back.ok() && back->has_value(), "encode_ndjson: its line does not parse back");
    fuzz::check(**back == **r, "encode_ndjson: the line parses to another value");
    auto text = encode_ndjson_text(line.substr(0, line.size() - 1));
    fuzz::check(text.ok() && *text == line, "encode_ndjson_text disagrees with encode_ndjson");
  }
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  const std::vector<std::string_view> whole = {input};
  const std::vector<std::string_view> split = fuzz::random_splits(input);
  const std::vector<std::string_view> split2 = fuzz::random_splits(input, 0x5eed);

  check_same(ndjson_run(whole, kDefaultMaxMessageBytes), ndjson_run(split, kDefaultMaxMessageBytes),
             "ndjson: the split changed the result");
  check_same(ndjson_run(whole, 16), ndjson_run(split2, 16),
             "ndjson (16-byte lines): the split changed the result");
  check_same(sse_run(whole, kDefaultMaxMessageBytes), sse_run(split, kDefaultMaxMessageBytes),
             "sse: the split changed the result");
  check_same(sse_run(whole, 24), sse_run(split2, 24),
             "sse (24-byte events): the split changed the result");
  ndjson_json_roundtrip(input);
  return 0;
}
