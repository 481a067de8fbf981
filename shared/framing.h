// Framing: how MCP JSON-RPC messages are cut out of a byte stream, without doing any I/O.
//
// MCP has two wire framings. Over stdio every message is one line of JSON ended by "\n"
// (newline-delimited JSON, NDJSON); over Streamable HTTP a response or the GET stream is a
// `text/event-stream` whose events each carry one message in `data`. The host reads bytes from a
// pipe or an HTTP body and hands them to `feed()` in whatever pieces they arrive; the core cuts
// them into messages. Where the pieces split never changes the result.
//
// When to call what:
//   - stdio: `NdjsonDecoder::feed(bytes)`, then `next()` (or `next_json()`) until it yields
//     nullopt; at EOF `finish()`. `encode_ndjson(message)` frames an outgoing message.
//   - HTTP:  `SseParser::feed(bytes)`, then `next()` until nullopt; at the end of the body
//     `finish()`. Reconnect with `last_event_id()` as `Last-Event-ID`, after `retry()`.
// Both are bounded (one message may not exceed a configured size, default 16 MiB): an oversized
// message is a kTooLarge error from `next()`, after which the decoder skips to the end of that
// message and carries on, so one bad message does not poison the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

// Default bound for one framed message (an NDJSON line, an SSE event).
inline constexpr std::size_t kDefaultMaxMessageBytes = std::size_t{16} << 20;

// ---- stdio: newline-delimited JSON ----------------------------------------------------------

// Splits a stdio byte stream into lines. A line ends at "\n"; one "\r" before it is dropped
// ("\r\n" is tolerated). Blank lines (empty or only spaces, tabs and "\r") are skipped. A line is
// returned as text: making JSON of it is `next_json()`'s or the caller's job.
//
// Bound: a line of more than `max_line_bytes` (line end excluded) makes `next()` return kTooLarge
// once. The decoder then discards bytes up to and including the next "\n", without buffering
// them, and the line after it is read normally (resync).
class NdjsonDecoder {
 public:
  explicit NdjsonDecoder(std::size_t max_line_bytes = kDefaultMaxMessageBytes);

  // Appends bytes read from the stream. Cheap: the work happens in `next()`.
  void feed(std::string_view bytes);

  // The next complete, non-blank line; nullopt when more bytes are needed. kTooLarge for an
  // oversized line (reported once; later calls continue after it).
  Result<std::optional<std::string>> next();

  // `next()` parsed as JSON. A line that is not JSON is kInvalidReply (the line is consumed, the
  // stream goes on); kTooLarge as for `next()`.
  Result<std::optional<Json>> next_json();

  // End of stream. kTransport when the stream ended inside a line (bytes after the last "\n"
  // that are not blank): the peer closed mid-message, the partial line is dropped. Lines that
  // were complete stay readable through `next()`. Afterwards the decoder accepts a new stream.
  Status finish();

  // Bytes held but not yet returned (complete lines not yet read plus a partial line).
  std::size_t buffered_bytes() const { return buffer_.size() - pos_; }

 private:
  std::size_t max_line_bytes_;
  std::string buffer_;
  std::size_t pos_ = 0;      // start of the unread part of `buffer_`
  std::size_t scanned_ = 0;  // bytes from `pos_` already known to hold no "\n"
  bool discarding_ = false;  // skipping the rest of an oversized line
};

// One outgoing stdio message: `message` serialized compactly plus "\n". Compact JSON escapes
// control characters inside strings, so the line cannot contain an embedded newline. Strings
// that are not valid UTF-8 are written with U+FFFD instead of failing.
std::string encode_ndjson(const Json& message);

// Frames JSON text that is already serialized. kInvalidArgument if it contains "\n" or "\r"
// (pretty-printed JSON must be re-serialized with `encode_ndjson`).
Result<std::string> encode_ndjson_text(std::string_view json_text);

// ---- Streamable HTTP: server-sent events ----------------------------------------------------

// One dispatched event.
struct SseEvent {
  std::string type = "message";  // the `event` field; "message" when absent or empty
  std::string data;              // `data` lines joined with "\n"
  std::string id;                // the stream's last event ID when this event was dispatched
  // True when `data` is empty: the event carries no JSON-RPC message. MCP servers send such an
  // event (`id: X` + `data:` with nothing after it) first on each stream of protocol 2025-11-25
  // to hand the client an event ID to resume from. It is surfaced (a proxy may need to relay it;
  // the id is in `last_event_id()` either way); an MCP client skips it.
  bool priming = false;

  bool operator==(const SseEvent& other) const {
    return type == other.type && data == other.data && id == other.id && priming == other.priming;
  }
};

// Parses a `text/event-stream` per the WHATWG HTML standard ("Parsing an event stream",
// "Interpreting an event stream"):
//   - lines end in "\r\n", "\n" or "\r" (a "\r" ending one feed and a "\n" starting the next
//     are one line end); one UTF-8 BOM at the start of the stream is skipped; bytes that are
//     not UTF-8 are decoded to U+FFFD as the standard's UTF-8 decoder does;
//   - `field: value` with one optional space after the colon; a line without a colon is a field
//     with an empty value; lines starting with ":" are comments; unknown fields are ignored;
//   - `data` appends its value and "\n" to the data buffer; `event` sets the type; `id` sets the
//     last event ID buffer unless the value contains NUL; `retry` sets the reconnection time if
//     the value is only ASCII digits;
//   - a blank line dispatches: the last event ID buffer becomes the stream's last event ID
//     (it persists across events until another `id` changes it); then, if the data buffer is
//     empty, nothing is dispatched, else the event is, with the final "\n" of the data removed.
//     Note the data buffer of `data:` with no payload is "\n", not empty: per the standard such
//     an event IS dispatched, with data "" (that is MCP's priming event, flagged `priming`).
//     A block with no `data` line at all (e.g. only `id: 7`) is not dispatched, but its id is
//     recorded;
//   - at the end of the stream a partly received event is discarded, never dispatched.
//
// Bound: an event may hold at most `max_event_bytes` bytes: its field lines so far plus the line
// being read, line ends excluded (a comment line is not kept but must fit beside them). Past it
// `next()` returns kTooLarge once; the parser then skips everything up to the blank line that ends
// the event without buffering it (`id` and `retry` lines inside the skipped part are lost; those
// before it stay in effect) and continues with the next event. The blank line still commits the
// last event ID, so a reconnecting client does not ask for the oversized event again.
class SseParser {
 public:
  explicit SseParser(std::size_t max_event_bytes = kDefaultMaxMessageBytes);

  // Appends bytes of the body. Cheap: the work happens in `next()`.
  void feed(std::string_view bytes);

  // The next dispatched event; nullopt when more bytes are needed. kTooLarge for an oversized
  // event (reported once; later calls continue with the next event).
  Result<std::optional<SseEvent>> next();

  // End of the body. Returns kTransport when the stream ended inside an event (a partial line,
  // or fields without their closing blank line): that event is discarded, as the standard says,
  // and the caller decides whether to reconnect. Ok when the stream ended between events.
  // An event already reported as kTooLarge is not reported again. Call after `next()` has
  // yielded nullopt (bytes not parsed yet are discarded). The last event ID and the reconnection
  // time survive (they are what a reconnection needs); everything else is reset for a new body,
  // including the last event ID buffer: as the standard says, a new stream starts with an empty
  // one, so its first blank line before any `id` field sets the last event ID to "".
  Status finish();

  // The last event ID as of the most recent blank line ("" until an `id` field was seen).
  // Send it as `Last-Event-ID` when reconnecting.
  const std::string& last_event_id() const { return last_event_id_; }

  // The latest reconnection time in milliseconds from a `retry` field; nullopt when none was
  // sent (or the digits did not fit in 64 bits).
  std::optional<int64_t> retry() const { return retry_ms_; }

 private:
  // Applies one complete, non-blank, non-comment line to the event being built.
  void process_field(std::string_view raw_line);
  // The blank-line step: commits the last event ID; true (and `*out` filled) if an event is
  // dispatched.
  bool dispatch(SseEvent* out);
  // Starts skipping the current event; returns the kTooLarge error to report.
  Error start_discarding(bool mid_line);
  void reset_event();

  std::size_t max_event_bytes_;
  std::string buffer_;
  std::size_t pos_ = 0;            // start of the current (partial) line in `buffer_`
  std::size_t scanned_ = 0;        // bytes from `pos_` already known to hold no line end
  bool bom_checked_ = false;       // the start of the stream was examined for a BOM
  bool skip_lf_ = false;           // the previous line ended in "\r": a leading "\n" belongs to it
  bool discarding_ = false;        // skipping the rest of an oversized event
  bool discard_mid_line_ = false;  // while skipping: inside a line, so a line end is not blank
  bool event_started_ = false;     // a field line of the current event was seen
  std::size_t event_bytes_ = 0;    // bytes of the current event's field lines
  std::string data_;
  std::string type_;
  std::string id_buffer_;
  std::string last_event_id_;
  std::optional<int64_t> retry_ms_;
};

}  // namespace quiver
