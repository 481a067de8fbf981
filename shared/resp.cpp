#include "shared/resp.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <ostream>
#include <utility>

#include <hiredis/read.h>

#include "shared/enum_names.h"
#include "shared/numbers.h"

namespace quiver {

// --- RespValue ----------------------------------------------------------------------------------

RespValue RespValue::nil() { return RespValue(); }

RespValue RespValue::simple_string(std::string s) {
  return {Type::kSimpleString, std::move(s), 0, {}};
}

RespValue RespValue::error(std::string message) {
  return {Type::kError, std::move(message), 0, {}};
}

RespValue RespValue::integer_value(int64_t i) { return {Type::kInteger, {}, i, {}}; }

RespValue RespValue::bulk_string(std::string s) { return {Type::kBulkString, std::move(s), 0, {}}; }

RespValue RespValue::array(std::vector<RespValue> elements) {
  return {Type::kArray, {}, 0, std::move(elements)};
}

std::optional<std::string_view> RespValue::as_string() const {
  if (!is_string()) return std::nullopt;
  return std::string_view(str);
}

std::optional<int64_t> RespValue::as_int() const {
  if (type == Type::kInteger) return integer;
  if (is_string()) return parse_decimal_i64(str);
  return std::nullopt;
}

const std::vector<RespValue>* RespValue::as_array() const {
  return type == Type::kArray ? &elements : nullptr;
}

std::optional<std::string_view> RespValue::error_message() const {
  if (type != Type::kError) return std::nullopt;
  return std::string_view(str);
}

namespace {

void append_escaped(std::string& out, std::string_view s) {
  constexpr size_t kShown = 256;
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size() && i < kShown; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\r':
        out += "\\r";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  if (s.size() > kShown) out += "...(" + std::to_string(s.size()) + " bytes)";
}

void append_debug(std::string& out, const RespValue& v) {
  switch (v.type) {
    case RespValue::Type::kNil:
      out += "nil";
      return;
    case RespValue::Type::kInteger:
      out += std::to_string(v.integer);
      return;
    case RespValue::Type::kSimpleString:
      out += '+';
      append_escaped(out, v.str);
      return;
    case RespValue::Type::kError:
      out += '-';
      append_escaped(out, v.str);
      return;
    case RespValue::Type::kBulkString:
      out += '"';
      append_escaped(out, v.str);
      out += '"';
      return;
    case RespValue::Type::kArray:
      out += '[';
      for (size_t i = 0; i < v.elements.size(); ++i) {
        if (i > 0) out += ", ";
        append_debug(out, v.elements[i]);
      }
      out += ']';
      return;
  }
}

}  // namespace

std::string RespValue::debug_string() const {
  std::string out;
  append_debug(out, *this);
  return out;
}

bool operator==(const RespValue& a, const RespValue& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case RespValue::Type::kNil:
      return true;
    case RespValue::Type::kInteger:
      return a.integer == b.integer;
    case RespValue::Type::kSimpleString:
    case RespValue::Type::kError:
    case RespValue::Type::kBulkString:
      return a.str == b.str;
    case RespValue::Type::kArray:
      return a.elements == b.elements;
  }
  return false;
}

const char* resp_type_name(RespValue::Type type) {
  static constexpr const char* const kNames[] = {"nil",     "simple_string", "error",
                                                 "integer", "bulk_string",   "array"};
  static_assert(covers_enum(kNames, RespValue::Type::kArray));
  return name_of(kNames, type, "unknown");
}

std::ostream& operator<<(std::ostream& os, const RespValue& v) { return os << v.debug_string(); }

// --- Encoding -----------------------------------------------------------------------------------

void append_command(std::string& out, const std::vector<std::string>& argv) {
  if (argv.empty()) return;
  size_t size = 16;
  for (const std::string& arg : argv) size += arg.size() + 24;
  out.reserve(out.size() + size);
  out += '*';
  out += std::to_string(argv.size());
  out += "\r\n";
  for (const std::string& arg : argv) {
    out += '$';
    out += std::to_string(arg.size());
    out += "\r\n";
    out += arg;
    out += "\r\n";
  }
}

std::string encode_command(const std::vector<std::string>& argv) {
  std::string out;
  append_command(out, argv);
  return out;
}

bool Pipeline::add(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  append_command(bytes_, argv);
  ++count_;
  return true;
}

std::string Pipeline::take_bytes() {
  std::string out = std::move(bytes_);
  clear();
  return out;
}

void Pipeline::clear() {
  bytes_.clear();
  count_ = 0;
}

// --- Decoding -----------------------------------------------------------------------------------
//
// hiredis' reader parses; the callbacks below build our RespValue tree. The reader hands every
// callback the read task of the value: its parent task's `obj` is the array being filled and
// `idx` the slot. The root is allocated with new and owned by the reader (`r->reply`) until
// redisReaderGetReply hands it out; children live inside their parent's `elements`, which is
// reserved to its final size up front so that pointers to them stay valid. On any error the
// reader frees the root through freeObject, which deletes the whole tree.

namespace {

// hiredis 1.2 grows its task stack without bound; create_array refuses past the limit, which is
// clamped to kMaxSupportedDepth.

// A length or integer line is at most 20 characters ("-9223372036854775808"); anything much
// longer without its CRLF is not RESP, and is refused without waiting for more.
constexpr size_t kMaxNumberLine = 32;

// Undecoded bytes per feed in decode_all.
constexpr size_t kDecodeAllChunk = size_t{64} << 10;

struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};

// What the builder callbacks share with the decoder (reached through the reader's privdata).
struct DecoderState {
  RespLimits limits;
  std::unique_ptr<redisReader, ReaderDeleter> reader;
  std::optional<Error> failure;         // set once: the decoder is poisoned
  std::optional<Error> callback_error;  // why a builder callback returned NULL
  size_t pending_bytes = 0;             // accounted size of the reply under construction
  uint64_t fed_total = 0;               // stream offset of the end of the input
  uint64_t reply_start = 0;             // stream offset of the reply being decoded
  uint64_t replies = 0;

  size_t unconsumed() const { return reader ? reader->len - reader->pos : 0; }

  std::string where() const {
    return "reply #" + std::to_string(replies + 1) + " (starting at stream byte " +
           std::to_string(reply_start) + ")";
  }

  Error poison(Error e) {
    failure = e;
    return e;
  }

  // Records why a callback refuses: "RESP <what><where> <verb> the limit of <limit> <unit>".
  template <typename Limit>
  void too_large(const std::string& what, const char* verb, Limit limit, const char* unit) {
    callback_error =
        Error(ErrorCode::kTooLarge, "RESP " + what + where() + " " + verb + " the limit of " +
                                        std::to_string(limit) + " " + unit);
  }

  // Returns false (and records why) when the reply under construction would outgrow the limits.
  bool account(size_t bytes) {
    if (bytes > limits.max_buffered_bytes || pending_bytes > limits.max_buffered_bytes - bytes) {
      too_large("", "needs more than", limits.max_buffered_bytes, "bytes");
      return false;
    }
    pending_bytes += bytes;
    return true;
  }
};

using Impl = DecoderState;

Impl* impl_of(const redisReadTask* task) { return static_cast<Impl*>(task->privdata); }

// Arrays a value sits in, plus one: the root is at depth 1.
int depth_of(const redisReadTask* task) {
  int depth = 1;
  for (const redisReadTask* t = task->parent; t != nullptr; t = t->parent) ++depth;
  return depth;
}

// Puts `v` where the task says and returns its address (NULL tells hiredis to fail). No
// allocation here can fail short of the process running out of memory: every byte was accounted
// against `max_buffered_bytes` before it was allocated, and the core is built without exceptions
// (a bad_alloc could not unwind through hiredis' C frames anyway).
void* place(const redisReadTask* task, RespValue&& v) {
  Impl* d = impl_of(task);
  if (task->parent == nullptr) return new RespValue(std::move(v));
  auto* parent = static_cast<RespValue*>(task->parent->obj);
  if (parent == nullptr || task->idx < 0 ||
      static_cast<size_t>(task->idx) != parent->elements.size() ||
      parent->elements.size() >= parent->elements.capacity()) {
    d->callback_error = Error(ErrorCode::kInternal, "RESP reader handed an unexpected slot");
    return nullptr;
  }
  parent->elements.push_back(std::move(v));
  return &parent->elements.back();
}

// The core speaks RESP2 (it never sends HELLO 3): hiredis 1.x' reader also parses the RESP3 types
// (double, boolean, map, set, push, verbatim string, big number, attribute, null), and each is
// refused here as a protocol error, as a RESP2 reader would.
void* refuse_resp3(const redisReadTask* task) {
  Impl* d = impl_of(task);
  d->callback_error =
      Error(ErrorCode::kInvalidReply, "malformed RESP in " + d->where() + ": RESP3 reply type " +
                                          std::to_string(task->type) + " from a RESP2 connection");
  return nullptr;
}

void* create_string(const redisReadTask* task, char* str, size_t len) {
  Impl* d = impl_of(task);
  if (task->type != REDIS_REPLY_STRING && task->type != REDIS_REPLY_STATUS &&
      task->type != REDIS_REPLY_ERROR) {
    return refuse_resp3(task);
  }
  if (len > d->limits.max_bulk_bytes) {
    d->too_large("string of " + std::to_string(len) + " bytes in ", "exceeds",
                 d->limits.max_bulk_bytes, "bytes");
    return nullptr;
  }
  RespValue v;
  switch (task->type) {
    case REDIS_REPLY_STRING:
      // hiredis skips the two bytes after a bulk payload without looking at them. They
      // are in its buffer (it waited for them), so check them here: "$3\r\nabcXY" is malformed.
      if (str[len] != '\r' || str[len + 1] != '\n') {
        d->callback_error = Error(ErrorCode::kInvalidReply,
                                  "malformed RESP in " + d->where() + ": bulk string of " +
                                      std::to_string(len) + " bytes not followed by CRLF");
        return nullptr;
      }
      v.type = RespValue::Type::kBulkString;
      break;
    case REDIS_REPLY_STATUS:
      v.type = RespValue::Type::kSimpleString;
      break;
    case REDIS_REPLY_ERROR:
      v.type = RespValue::Type::kError;
      break;
    default:
      d->callback_error = Error(ErrorCode::kInternal, "RESP reader: unexpected string type");
      return nullptr;
  }
  if (!d->account(sizeof(RespValue) + len)) return nullptr;
  v.str.assign(str, len);
  return place(task, std::move(v));
}

void* create_array(const redisReadTask* task, size_t elements) {
  Impl* d = impl_of(task);
  if (task->type != REDIS_REPLY_ARRAY) return refuse_resp3(task);
  int depth = depth_of(task);
  if (depth > d->limits.max_depth) {
    d->too_large("arrays nested " + std::to_string(depth) + " deep in ", "exceed",
                 d->limits.max_depth, "levels");
    return nullptr;
  }
  // The reservation below is what the elements will cost.
  size_t n = elements;
  size_t max_elements = d->limits.max_buffered_bytes / sizeof(RespValue);
  if (n > max_elements || !d->account(sizeof(RespValue) * (n + 1))) {
    d->too_large("array of " + std::to_string(n) + " elements in ", "needs more than",
                 d->limits.max_buffered_bytes, "bytes");
    return nullptr;
  }
  RespValue v;
  v.type = RespValue::Type::kArray;
  v.elements.reserve(n);
  return place(task, std::move(v));
}

void* create_integer(const redisReadTask* task, long long value) {
  if (!impl_of(task)->account(sizeof(RespValue))) return nullptr;
  return place(task, RespValue::integer_value(static_cast<int64_t>(value)));
}

void* create_nil(const redisReadTask* task) {
  if (task->type == REDIS_REPLY_NIL)
    return refuse_resp3(task);  // RESP3's `_`; RESP2's are $-1, *-1
  if (!impl_of(task)->account(sizeof(RespValue))) return nullptr;
  return place(task, RespValue::nil());
}

void* create_double(const redisReadTask* task, double, char*, size_t) { return refuse_resp3(task); }

void* create_bool(const redisReadTask* task, int) { return refuse_resp3(task); }

void free_object(void* obj) { delete static_cast<RespValue*>(obj); }

// hiredis keeps this pointer (non-const in its API) for the reader's lifetime. Every callback is
// set: for a missing one hiredis would hand out a type number cast to a pointer.
redisReplyObjectFunctions kBuilderFunctions = {create_string, create_array, create_integer,
                                               create_double, create_nil,   create_bool,
                                               free_object};

// Position of the first CRLF in [p, p + n), or n.
size_t find_crlf(const char* p, size_t n) {
  for (size_t i = 0; i + 1 < n; ++i) {
    if (p[i] == '\r' && p[i + 1] == '\n') return i;
  }
  return n;
}

}  // namespace

struct RespDecoder::Impl : DecoderState {};

RespDecoder::RespDecoder(RespLimits limits) : impl_(std::make_unique<Impl>()) {
  limits.max_depth = std::clamp(limits.max_depth, 1, RespLimits::kMaxSupportedDepth);
  impl_->limits = limits;
  impl_->reader.reset(redisReaderCreateWithFunctions(&kBuilderFunctions));
  if (!impl_->reader) {
    impl_->poison(Error(ErrorCode::kInternal, "out of memory creating the RESP reader"));
    return;
  }
  // Not redisReaderSetPrivdata: the macro casts the pointer to int.
  impl_->reader->privdata = static_cast<DecoderState*>(impl_.get());
  // An array header past INT_MAX elements is out of range (malformed), as RESP2 readers take it;
  // hiredis 1.x would otherwise accept up to 2^32 - 1 and leave it to create_array's limit.
  impl_->reader->maxelements = INT_MAX;
}

RespDecoder::~RespDecoder() = default;
RespDecoder::RespDecoder(RespDecoder&&) noexcept = default;
RespDecoder& RespDecoder::operator=(RespDecoder&&) noexcept = default;

Status RespDecoder::feed(std::string_view bytes) {
  if (!impl_) return Error(ErrorCode::kInternal, "RespDecoder used after move");
  Impl& d = *impl_;
  if (d.failure) return *d.failure;
  size_t held = d.unconsumed() + d.pending_bytes;
  if (bytes.size() > d.limits.max_buffered_bytes - std::min(held, d.limits.max_buffered_bytes)) {
    return d.poison(Error(ErrorCode::kTooLarge,
                          "RESP input of " + std::to_string(held + bytes.size()) +
                              " undecoded bytes at " + d.where() + " exceeds the limit of " +
                              std::to_string(d.limits.max_buffered_bytes) +
                              " bytes (drain the decoder with next() between feeds)"));
  }
  if (bytes.empty()) return Status::Ok();
  if (redisReaderFeed(d.reader.get(), bytes.data(), bytes.size()) != REDIS_OK) {
    return d.poison(Error(ErrorCode::kTooLarge, "out of memory buffering RESP input"));
  }
  d.fed_total += bytes.size();
  return Status::Ok();
}

Result<std::optional<RespValue>> RespDecoder::next() {
  if (!impl_) return Error(ErrorCode::kInternal, "RespDecoder used after move");
  Impl& d = *impl_;
  if (d.failure) return *d.failure;
  redisReader* r = d.reader.get();

  void* raw = nullptr;
  d.callback_error.reset();
  if (redisReaderGetReply(r, &raw) != REDIS_OK) {
    if (d.callback_error) return d.poison(*d.callback_error);
    std::string why = r->errstr;
    if (r->err == REDIS_ERR_OOM) {
      return d.poison(Error(ErrorCode::kTooLarge, "out of memory decoding RESP " + d.where()));
    }
    return d.poison(Error(ErrorCode::kInvalidReply, "malformed RESP in " + d.where() + ": " + why));
  }

  if (raw != nullptr) {
    std::unique_ptr<RespValue> root(static_cast<RespValue*>(raw));
    ++d.replies;
    d.pending_bytes = 0;
    d.reply_start = d.fed_total - d.unconsumed();
    return std::optional<RespValue>(std::move(*root));
  }

  // Need more bytes. Refuse now what can only end in a refusal, rather than buffer toward it.
  if (r->ridx >= 0) {
    const redisReadTask& cur = *r->task[r->ridx];
    const char* p = r->buf + r->pos;
    size_t avail = d.unconsumed();
    size_t eol = find_crlf(p, avail);
    switch (cur.type) {
      case REDIS_REPLY_STRING:
        if (eol < avail) {
          // The length line is complete (hiredis accepted it); the payload is still coming.
          auto len = parse_decimal_i64(std::string_view(p, eol));
          if (len && *len >= 0 && static_cast<uint64_t>(*len) > d.limits.max_bulk_bytes) {
            return d.poison(Error(ErrorCode::kTooLarge,
                                  "RESP bulk string of " + std::to_string(*len) + " bytes in " +
                                      d.where() + " exceeds the limit of " +
                                      std::to_string(d.limits.max_bulk_bytes) + " bytes"));
          }
          break;
        }
        [[fallthrough]];
      case REDIS_REPLY_ARRAY:
      case REDIS_REPLY_INTEGER:
        if (eol == avail && avail > kMaxNumberLine) {
          return d.poison(Error(ErrorCode::kInvalidReply,
                                "malformed RESP in " + d.where() + ": no CRLF within " +
                                    std::to_string(kMaxNumberLine) +
                                    " bytes of a length or integer line"));
        }
        break;
      case REDIS_REPLY_STATUS:
      case REDIS_REPLY_ERROR:
        if (eol == avail && avail > d.limits.max_bulk_bytes &&
            avail - 1 > d.limits.max_bulk_bytes) {
          return d.poison(Error(ErrorCode::kTooLarge, "RESP status or error line in " + d.where() +
                                                          " exceeds the limit of " +
                                                          std::to_string(d.limits.max_bulk_bytes) +
                                                          " bytes"));
        }
        break;
      default:
        break;
    }
  }
  if (d.unconsumed() + d.pending_bytes > d.limits.max_buffered_bytes) {
    return d.poison(
        Error(ErrorCode::kTooLarge, "RESP " + d.where() + " holds more than the limit of " +
                                        std::to_string(d.limits.max_buffered_bytes) + " bytes"));
  }
  return std::optional<RespValue>();
}

bool RespDecoder::poisoned() const { return !impl_ || impl_->failure.has_value(); }

size_t RespDecoder::buffered_bytes() const {
  return impl_ ? impl_->unconsumed() + impl_->pending_bytes : 0;
}

bool RespDecoder::at_boundary() const {
  if (!impl_ || !impl_->reader || impl_->unconsumed() != 0) return false;
  const redisReader* r = impl_->reader.get();
  // With its buffer drained, the reader may sit at task 0 waiting for a type byte: no reply
  // has begun.
  return r->ridx < 0 || (r->ridx == 0 && r->task[0]->type < 0);
}

uint64_t RespDecoder::replies_decoded() const { return impl_ ? impl_->replies : 0; }

Result<std::vector<RespValue>> decode_all(std::string_view bytes, size_t expected_count,
                                          RespLimits limits) {
  RespDecoder decoder(limits);
  std::vector<RespValue> out;
  out.reserve(std::min(expected_count, bytes.size() / 3));  // a reply is at least 3 bytes
  size_t offset = 0;
  while (true) {
    auto next = decoder.next();
    if (!next.ok()) return next.error();
    if (next->has_value()) {
      if (out.size() == expected_count) {
        return Error(ErrorCode::kInvalidReply, "RESP input holds more than the " +
                                                   std::to_string(expected_count) +
                                                   " expected replies");
      }
      out.push_back(std::move(**next));
      continue;
    }
    if (offset == bytes.size()) break;
    size_t held = decoder.buffered_bytes();
    size_t room = limits.max_buffered_bytes > held ? limits.max_buffered_bytes - held : 0;
    size_t n = std::min({bytes.size() - offset, kDecodeAllChunk, std::max<size_t>(room, 1)});
    Status fed = decoder.feed(bytes.substr(offset, n));
    if (!fed.ok()) return fed.error();
    offset += n;
  }
  if (out.size() < expected_count) {
    std::string where = decoder.at_boundary()
                            ? ""
                            : " (it ends inside reply #" + std::to_string(out.size() + 1) + ")";
    return Error(ErrorCode::kInvalidReply, "RESP input holds " + std::to_string(out.size()) +
                                               " of " + std::to_string(expected_count) +
                                               " expected replies" + where);
  }
  if (!decoder.at_boundary()) {
    return Error(
        ErrorCode::kInvalidReply,
        "RESP input has bytes after the " + std::to_string(expected_count) + " expected replies");
  }
  return out;
}

}  // namespace quiver
