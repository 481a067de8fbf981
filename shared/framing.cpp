#include "shared/framing.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "shared/ascii.h"
#include "shared/canonical_json.h"
#include "shared/numbers.h"

namespace quiver {
namespace {

// Buffers keep consumed bytes at their front until it is worth moving the rest down: at most
// one copy of the live bytes per time the buffer doubles.
constexpr std::size_t kCompactAfter = 64 * 1024;

void compact(std::string& buffer, std::size_t& pos) {
  if (pos == buffer.size()) {
    buffer.clear();
    pos = 0;
  } else if (pos >= kCompactAfter && pos * 2 >= buffer.size()) {
    buffer.erase(0, pos);
    pos = 0;
  }
}

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

// The WHATWG Encoding standard's UTF-8 decoder, writing UTF-8 back out: valid sequences are
// copied, each maximal ill-formed subpart becomes one U+FFFD. Returns false (and leaves `out`
// alone) when `in` is valid, the common case, so that no copy is made.
bool utf8_replace_invalid(std::string_view in, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string result;
  bool changed = false;
  std::size_t copied = 0;  // bytes of `in` accounted for in `result`
  std::size_t i = 0;
  auto replace = [&](std::size_t bad_begin, std::size_t bad_end) {
    if (!changed) {
      result.reserve(in.size() + 8);
      changed = true;
    }
    result.append(in.data() + copied, bad_begin - copied);
    result.append(kReplacement, 3);
    copied = bad_end;
  };
  while (i < in.size()) {
    auto b = static_cast<unsigned char>(in[i]);
    std::size_t needed = 0;
    unsigned char lower = 0x80, upper = 0xBF;
    if (b <= 0x7F) {
      ++i;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      needed = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      needed = 2;
      if (b == 0xE0) lower = 0xA0;
      if (b == 0xED) upper = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      needed = 3;
      if (b == 0xF0) lower = 0x90;
      if (b == 0xF4) upper = 0x8F;
    } else {
      replace(i, i + 1);
      ++i;
      continue;
    }
    std::size_t start = i++;
    std::size_t seen = 0;
    while (seen < needed && i < in.size()) {
      auto c = static_cast<unsigned char>(in[i]);
      if (c < lower || c > upper) break;
      lower = 0x80;
      upper = 0xBF;
      ++seen;
      ++i;
    }
    // An incomplete sequence is one error; the byte that broke it is decoded afresh.
    if (seen < needed) replace(start, i);
  }
  if (!changed) return false;
  result.append(in.data() + copied, in.size() - copied);
  *out = std::move(result);
  return true;
}

Error too_large(const char* what, std::size_t limit) {
  return Error(ErrorCode::kTooLarge,
               std::string(what) + " exceeds the limit of " + std::to_string(limit) + " bytes");
}

}  // namespace

// ---- NdjsonDecoder ----------------------------------------------------------------------------

NdjsonDecoder::NdjsonDecoder(std::size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

void NdjsonDecoder::feed(std::string_view bytes) {
  compact(buffer_, pos_);
  buffer_.append(bytes.data(), bytes.size());
}

Result<std::optional<std::string>> NdjsonDecoder::next() {
  for (;;) {
    std::size_t newline = buffer_.find('\n', pos_ + scanned_);
    if (discarding_) {
      if (newline == std::string::npos) {
        pos_ = buffer_.size();
        scanned_ = 0;
        return std::optional<std::string>();
      }
      pos_ = newline + 1;
      scanned_ = 0;
      discarding_ = false;
      continue;
    }
    if (newline == std::string::npos) {
      scanned_ = buffer_.size() - pos_;
      // One byte of slack: a "\r" at the end may belong to a "\r\n" line end.
      if (scanned_ > max_line_bytes_ + 1) {
        discarding_ = true;
        pos_ = buffer_.size();
        scanned_ = 0;
        Error error = too_large("stdio message line", max_line_bytes_);
        error.message += "; skipping to the next newline";
        return error;
      }
      return std::optional<std::string>();
    }
    std::string_view line(buffer_.data() + pos_, newline - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = newline + 1;
    scanned_ = 0;
    // The bound comes before the blank-line check so that a huge blank line is an error however
    // the bytes were split (split, it is detected before its newline arrives).
    if (line.size() > max_line_bytes_) return too_large("stdio message line", max_line_bytes_);
    if (is_blank(line)) continue;
    return std::optional<std::string>(std::string(line));
  }
}

Result<std::optional<Json>> NdjsonDecoder::next_json() {
  auto line = next();
  if (!line.ok()) return line.error();
  if (!line->has_value()) return std::optional<Json>();
  auto parsed = parse_json(**line, max_line_bytes_);
  if (!parsed.ok()) {
    return Error(ErrorCode::kInvalidReply, "stdio message is not JSON: " + parsed.error().message);
  }
  return std::optional<Json>(std::move(*parsed));
}

Status NdjsonDecoder::finish() {
  std::size_t last_newline = buffer_.rfind('\n');
  bool has_newline = last_newline != std::string::npos && last_newline >= pos_;
  std::size_t tail_begin = has_newline ? last_newline + 1 : pos_;
  std::string_view tail(buffer_.data() + tail_begin, buffer_.size() - tail_begin);
  // Without a newline in the buffer, a line being discarded is the tail: already reported.
  bool tail_reported = discarding_ && !has_newline;
  Status status;
  if (!tail_reported && !is_blank(tail)) {
    status = Error(ErrorCode::kTransport,
                   "stdio stream ended inside a message: " + std::to_string(tail.size()) +
                       " bytes after the last newline were dropped");
  }
  buffer_.resize(tail_begin);
  scanned_ = 0;
  if (!has_newline) discarding_ = false;
  return status;
}

std::string encode_ndjson(const Json& message) {
  std::string line = serialize_json(message);
  line.push_back('\n');
  return line;
}

Result<std::string> encode_ndjson_text(std::string_view json_text) {
  if (json_text.find_first_of("\r\n") != std::string_view::npos) {
    return Error(ErrorCode::kInvalidArgument,
                 "a stdio message must not contain a line break; serialize it compactly");
  }
  std::string line;
  line.reserve(json_text.size() + 1);
  line.append(json_text.data(), json_text.size());
  line.push_back('\n');
  return line;
}

// ---- SseParser --------------------------------------------------------------------------------

SseParser::SseParser(std::size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}

void SseParser::feed(std::string_view bytes) {
  compact(buffer_, pos_);
  buffer_.append(bytes.data(), bytes.size());
}

void SseParser::reset_event() {
  data_.clear();
  type_.clear();
  event_bytes_ = 0;
  event_started_ = false;
}

Error SseParser::start_discarding(bool mid_line) {
  reset_event();
  discarding_ = true;
  discard_mid_line_ = mid_line;
  Error error = too_large("server-sent event", max_event_bytes_);
  error.message += "; skipping to the end of the event";
  return error;
}

bool SseParser::dispatch(SseEvent* out) {
  // The standard: the last event ID is committed on every blank line, before the data check.
  last_event_id_ = id_buffer_;
  if (data_.empty()) {
    reset_event();
    return false;
  }
  data_.pop_back();  // the "\n" after the last data line
  out->type = type_.empty() ? "message" : std::move(type_);
  out->data = std::move(data_);
  out->id = last_event_id_;
  out->priming = out->data.empty();
  reset_event();
  return true;
}

void SseParser::process_field(std::string_view raw_line) {
  std::string decoded;
  std::string_view line = raw_line;
  if (utf8_replace_invalid(raw_line, &decoded)) line = decoded;
  std::string_view field = line;
  std::string_view value;
  std::size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value.data(), value.size());
    data_.push_back('\n');
  } else if (field == "event") {
    type_.assign(value.data(), value.size());
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_buffer_.assign(value.data(), value.size());
  } else if (field == "retry") {
    // Only ASCII digits (at least one); a value that does not fit in 64 bits is ignored too.
    auto ms = parse_decimal_u64(value, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (ms) retry_ms_ = static_cast<int64_t>(*ms);
  }
  // Any other field name is ignored.
}

Result<std::optional<SseEvent>> SseParser::next() {
  if (!bom_checked_) {
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    std::string_view head(buffer_.data() + pos_, std::min(buffer_.size() - pos_, kBom.size()));
    if (head == kBom.substr(0, head.size())) {
      if (head.size() < kBom.size()) return std::optional<SseEvent>();  // could still be a BOM
      pos_ += kBom.size();
    }
    bom_checked_ = true;
  }
  for (;;) {
    if (skip_lf_) {
      if (pos_ == buffer_.size()) return std::optional<SseEvent>();
      if (buffer_[pos_] == '\n') ++pos_;
      skip_lf_ = false;
    }
    std::size_t end = buffer_.find_first_of("\r\n", pos_ + scanned_);
    if (discarding_) {
      if (end == std::string::npos) {
        if (pos_ < buffer_.size()) discard_mid_line_ = true;
        pos_ = buffer_.size();
        scanned_ = 0;
        return std::optional<SseEvent>();
      }
      bool blank = end == pos_ && !discard_mid_line_;
      discard_mid_line_ = false;
      skip_lf_ = buffer_[end] == '\r';
      pos_ = end + 1;
      scanned_ = 0;
      if (blank) {
        discarding_ = false;
        last_event_id_ = id_buffer_;  // the blank line still ends an event
      }
      continue;
    }
    if (end == std::string::npos) {
      scanned_ = buffer_.size() - pos_;
      if (event_bytes_ + scanned_ > max_event_bytes_) {
        pos_ = buffer_.size();
        scanned_ = 0;
        return start_discarding(/*mid_line=*/true);
      }
      return std::optional<SseEvent>();
    }
    std::string_view line(buffer_.data() + pos_, end - pos_);
    skip_lf_ = buffer_[end] == '\r';
    pos_ = end + 1;
    scanned_ = 0;
    if (line.empty()) {
      SseEvent event;
      if (dispatch(&event)) return std::optional<SseEvent>(std::move(event));
      continue;
    }
    if (event_bytes_ + line.size() > max_event_bytes_) {
      return start_discarding(/*mid_line=*/false);
    }
    if (line.front() == ':') continue;  // a comment
    event_bytes_ += line.size();
    event_started_ = true;
    process_field(line);
  }
}

Status SseParser::finish() {
  std::size_t pending = buffer_.size() - pos_;
  if (skip_lf_ && pending > 0 && buffer_[pos_] == '\n') --pending;
  Status status;
  if (!discarding_ && (pending > 0 || event_started_)) {
    status = Error(ErrorCode::kTransport,
                   "event stream ended inside an event; the partial event was discarded");
  }
  buffer_.clear();
  pos_ = 0;
  scanned_ = 0;
  bom_checked_ = false;
  skip_lf_ = false;
  discarding_ = false;
  discard_mid_line_ = false;
  reset_event();
  id_buffer_.clear();
  return status;
}

}  // namespace quiver
