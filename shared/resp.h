// RESP: the Redis wire protocol, as bytes in and values out.
//
// The core never talks to Redis itself. It builds the commands it wants run (`encode_command`,
// or a `Pipeline` of many, for the one pipelined round trip per edge request), a host writes the
// bytes to its socket, feeds whatever comes back into a `RespDecoder` and hands the decoded
// `RespValue`s back to the core. The same code runs natively (agent, tests) and in wasm (edge).
//
// Decoding is hiredis' protocol reader (`read.c`, 1.2 in both builds) with our own reply
// builder, behind limits that keep a hostile or broken peer from making us buffer without end:
// a bulk string longer than `max_bulk_bytes`, arrays nested deeper than `max_depth`, or more
// than `max_buffered_bytes` of undecoded input plus partial reply are kTooLarge. Malformed bytes
// are kInvalidReply. Either error poisons the decoder: the stream is out of sync and every later
// call returns the same error — close the connection. A Redis error reply ("-ERR ...") is not a
// failure of the decoder: it is a `RespValue` of type kError, in its place in the pipeline.
//
// RESP2 only (what Redis speaks unless a client sends `HELLO 3`; never send it).
//
//   Pipeline p;
//   p.add({"HGETALL", manifest_key});
//   p.add({"SMEMBERS", grants_key});
//   host_write(p.bytes());
//   RespDecoder d;                          // one per connection
//   Status fed = d.feed(chunk);             // as bytes arrive, then drain:
//   for (auto r = d.next(); r.ok() && r->has_value(); r = d.next()) use(**r);
//   // (a failed feed or next() leaves the decoder poisoned: check d.poisoned(), drop the socket)
//   // or, with the whole response at hand:
//   Result<std::vector<RespValue>> replies = decode_all(bytes, p.expected_replies());
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace quiver {

// One decoded reply. A plain value: nested arrays hold their elements by value.
struct RespValue {
  enum class Type {
    kNil = 0,       // `$-1` (nil bulk) or `*-1` (nil array): GET of a missing key, Lua false
    kSimpleString,  // `+OK`
    kError,         // `-ERR unknown command`: `str` holds the line without the '-'
    kInteger,       // `:42`
    kBulkString,    // `$3\r\nabc`: binary safe
    kArray,         // `*2 ...`: `elements`, possibly nested, possibly empty
  };

  Type type = Type::kNil;
  std::string str;                  // kSimpleString, kError, kBulkString
  int64_t integer = 0;              // kInteger
  std::vector<RespValue> elements;  // kArray

  static RespValue nil();
  static RespValue simple_string(std::string s);
  static RespValue error(std::string message);
  static RespValue integer_value(int64_t v);
  static RespValue bulk_string(std::string s);
  static RespValue array(std::vector<RespValue> elements);

  bool is_nil() const { return type == Type::kNil; }
  bool is_error() const { return type == Type::kError; }
  bool is_integer() const { return type == Type::kInteger; }
  bool is_array() const { return type == Type::kArray; }
  // A simple or a bulk string (not an error).
  bool is_string() const { return type == Type::kSimpleString || type == Type::kBulkString; }
  // The simple string "+OK" that SET, HSET in MULTI, ... answer.
  bool is_ok() const { return type == Type::kSimpleString && str == "OK"; }

  // Non-throwing accessors: nullopt / nullptr when the value is of another type.
  // The text of a simple or bulk string; the view lives as long as this value.
  std::optional<std::string_view> as_string() const;
  // An integer reply, or a simple/bulk string that is exactly a base-10 int64 ("17", "-3"):
  // Redis returns counters stored in strings and hash fields (GET fence, HGET) as bulk strings.
  std::optional<int64_t> as_int() const;
  // The elements of an array.
  const std::vector<RespValue>* as_array() const;
  // The message of an error reply, e.g. "WRONGTYPE Operation against a key ...".
  std::optional<std::string_view> error_message() const;

  // A one-line rendering for logs and test failures: strings quoted, bytes escaped.
  std::string debug_string() const;

  friend bool operator==(const RespValue& a, const RespValue& b);
  friend bool operator!=(const RespValue& a, const RespValue& b) { return !(a == b); }
};

const char* resp_type_name(RespValue::Type type);  // "nil", "simple_string", ... "array"
std::ostream& operator<<(std::ostream& os, const RespValue& v);

// --- Encoding -----------------------------------------------------------------------------------

// One command as a RESP array of bulk strings: binary safe (arguments may hold any bytes, "\r\n"
// and NUL included). An empty argv is no command: it encodes to "" (Redis would not answer `*0`,
// which would silently shift every later reply of a pipeline).
std::string encode_command(const std::vector<std::string>& argv);
// The same, appended to `out`.
void append_command(std::string& out, const std::vector<std::string>& argv);

// Many commands for one round trip. `expected_replies()` always equals the number of commands in
// `bytes()`: Redis answers each with exactly one reply, in order.
class Pipeline {
 public:
  // Appends one command. Its reply will be number `expected_replies()` before the call
  // (0-based). An empty argv appends nothing and returns false.
  bool add(const std::vector<std::string>& argv);

  size_t expected_replies() const { return count_; }
  bool empty() const { return count_ == 0; }
  const std::string& bytes() const { return bytes_; }
  // Hands the bytes over and leaves the pipeline empty.
  std::string take_bytes();
  void clear();

 private:
  std::string bytes_;
  size_t count_ = 0;
};

// --- Decoding -----------------------------------------------------------------------------------

struct RespLimits {
  // Longest bulk string, simple string or error line. Redis' own default for requests is 512 MB;
  // Quiver's largest value is a 256 KiB manifest.
  size_t max_bulk_bytes = size_t{8} << 20;
  // Deepest nesting of arrays (a flat array is 1). At most kMaxSupportedDepth (Quiver's deepest
  // reply is 4 levels); larger settings are clamped to it.
  int max_depth = kMaxSupportedDepth;
  // Undecoded input plus the reply under construction. Drain the decoder with next() between
  // feeds: this bounds what one peer can make us hold, not the total over a connection.
  size_t max_buffered_bytes = size_t{64} << 20;

  static constexpr int kMaxSupportedDepth = 8;
};

// An incremental decoder for one connection's reply stream. Feed bytes as they arrive, in chunks
// of any size; next() returns each complete reply once, in order. Not copyable; movable.
class RespDecoder {
 public:
  explicit RespDecoder(RespLimits limits = {});
  ~RespDecoder();
  RespDecoder(RespDecoder&&) noexcept;
  RespDecoder& operator=(RespDecoder&&) noexcept;
  RespDecoder(const RespDecoder&) = delete;
  RespDecoder& operator=(const RespDecoder&) = delete;

  // Appends bytes. kTooLarge (and poisoned) when the undecoded bytes would exceed
  // max_buffered_bytes; the poisoning error when already poisoned.
  Status feed(std::string_view bytes);

  // The next complete reply; nullopt when more bytes are needed. kInvalidReply for malformed
  // input, kTooLarge past a limit; after either, the decoder is poisoned for good.
  Result<std::optional<RespValue>> next();

  bool poisoned() const;
  // Undecoded input plus the partial reply held right now (what max_buffered_bytes bounds).
  size_t buffered_bytes() const;
  // No partial reply and no undecoded byte: the stream is at a reply boundary.
  bool at_boundary() const;
  // Replies returned by next() so far.
  uint64_t replies_decoded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Decodes exactly `expected_count` replies from a complete response (a pipeline's answer).
// Fewer (the input ends inside or before a reply) or more bytes than that is kInvalidReply;
// decoder errors pass through. Error replies are values in the result, not a failure.
Result<std::vector<RespValue>> decode_all(std::string_view bytes, size_t expected_count,
                                          RespLimits limits = {});

}  // namespace quiver
