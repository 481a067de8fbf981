#include "shared/http1.h"

#include <algorithm>

#include "shared/ascii.h"
#include "shared/numbers.h"

namespace quiver {

namespace {

bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls `f` with each comma-separated, trimmed, non-empty element of a list header value.
template <typename F>
void for_each_element(std::string_view value, F f) {
  while (!value.empty()) {
    std::size_t comma = value.find(',');
    std::string_view item = trim_ows(value.substr(0, comma));
    if (!item.empty()) f(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool http1_iequals(std::string_view a, std::string_view b) { return ascii_iequals(a, b); }

bool http1_is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

const std::string* Http1Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (http1_iequals(n, name)) return &v;
  }
  return nullptr;
}

std::size_t Http1Request::header_count(std::string_view name) const {
  return static_cast<std::size_t>(std::count_if(
      headers.begin(), headers.end(), [&](const auto& h) { return http1_iequals(h.first, name); }));
}

Http1RequestParser::Http1RequestParser(Http1Limits limits) : limits_(limits) {}

void Http1RequestParser::feed(std::string_view bytes) {
  if (state_ == State::kFailed) return;  // nothing more is read from a failed connection
  buf_.append(bytes.data(), bytes.size());
}

bool Http1RequestParser::idle() const {
  return state_ == State::kRequestLine && head_bytes_ == 0 && buffered() == 0;
}

bool Http1RequestParser::reading_body() const {
  return state_ == State::kBody || state_ == State::kChunkSize || state_ == State::kChunkData ||
         state_ == State::kChunkEnd || state_ == State::kTrailers;
}

Http1Step Http1RequestParser::fail(int status, std::string message) {
  state_ = State::kFailed;
  failure_ = Http1Failure{status, std::move(message)};
  buf_.clear();
  buf_.shrink_to_fit();
  pos_ = scan_ = 0;
  return failure_;
}

void Http1RequestParser::compact() {
  if (pos_ == buf_.size()) {
    buf_.clear();
    // A large body read earlier leaves no capacity behind on an idle keep-alive connection.
    if (buf_.capacity() > 16 * 1024) buf_.shrink_to_fit();
    pos_ = scan_ = 0;
  } else if (pos_ >= 4096 && pos_ * 2 >= buf_.size()) {
    buf_.erase(0, pos_);
    scan_ -= pos_;
    pos_ = 0;
  }
}

bool Http1RequestParser::take_line(std::size_t limit, std::string_view* line, bool* too_long) {
  *too_long = false;
  std::size_t nl = buf_.find('\n', scan_);
  if (nl == std::string::npos) {
    scan_ = buf_.size();
    // The "\r" of a "\r\n" may be the last byte so far: it does not count yet.
    std::size_t have = buf_.size() - pos_;
    if (have > 0 && buf_.back() == '\r') --have;
    *too_long = have > limit;
    return false;
  }
  std::size_t end = nl;
  if (end > pos_ && buf_[end - 1] == '\r') --end;
  if (end - pos_ > limit) {
    *too_long = true;
    return false;
  }
  *line = std::string_view(buf_).substr(pos_, end - pos_);
  head_bytes_ += nl + 1 - pos_;
  pos_ = nl + 1;
  scan_ = pos_;
  return true;
}

std::optional<Http1Step> Http1RequestParser::take_head_line(std::size_t limit, int too_long_status,
                                                            const char* too_long_message,
                                                            std::string_view* line) {
  bool too_long = false;
  if (!take_line(limit, line, &too_long)) {
    if (too_long) return fail(too_long_status, too_long_message);
    if (head_bytes_ + buffered() > limits_.max_head_bytes) {
      return fail(431, "the request head is larger than the limit");
    }
    compact();
    return Http1NeedMore{};
  }
  if (head_bytes_ > limits_.max_head_bytes) {
    return fail(431, "the request head is larger than the limit");
  }
  return std::nullopt;
}

Http1Step Http1RequestParser::next() {
  for (;;) {
    std::string_view line;
    bool too_long = false;
    switch (state_) {
      case State::kFailed:
        return failure_;

      case State::kRequestLine: {
        if (std::optional<Http1Step> stop =
                take_head_line(limits_.max_request_line_bytes, 414,
                               "the request line is longer than the limit", &line)) {
          return *stop;
        }
        if (line.empty()) continue;  // RFC 9112 2.2: empty lines before a request line
        Http1Step step = parse_request_line(line);
        if (!std::holds_alternative<Http1NeedMore>(step)) return step;
        state_ = State::kHeaders;
        continue;
      }

      case State::kHeaders:
      case State::kTrailers: {
        if (std::optional<Http1Step> stop =
                take_head_line(limits_.max_header_line_bytes, 431,
                               "a header line is longer than the limit", &line)) {
          return *stop;
        }
        if (line.empty()) {
          if (state_ == State::kTrailers) return finish_request();
          Http1Step step = end_of_head();
          if (!std::holds_alternative<Http1NeedMore>(step)) return step;
          continue;
        }
        Http1Step step = parse_header_line(line);
        if (!std::holds_alternative<Http1NeedMore>(step)) return step;
        continue;
      }

      case State::kBody:
      case State::kChunkData: {
        std::size_t n = std::min(body_left_, buffered());
        req_.body.append(buf_, pos_, n);
        pos_ += n;
        scan_ = pos_;
        body_left_ -= n;
        if (body_left_ > 0) {
          compact();
          return Http1NeedMore{};
        }
        if (state_ == State::kBody) return finish_request();
        state_ = State::kChunkEnd;
        continue;
      }

      case State::kChunkEnd: {
        // The CRLF after a chunk's data: nothing else may stand there.
        if (!take_line(0, &line, &too_long)) {
          if (too_long) return fail(400, "a chunk is longer than its size says");
          compact();
          return Http1NeedMore{};
        }
        state_ = State::kChunkSize;
        continue;
      }

      case State::kChunkSize: {
        if (!take_line(limits_.max_header_line_bytes, &line, &too_long)) {
          if (too_long) return fail(400, "a chunk size line is longer than the limit");
          compact();
          return Http1NeedMore{};
        }
        std::string_view digits = line.substr(0, line.find(';'));
        digits = trim_ows(digits);
        if (digits.empty() || digits.size() > 15) {
          if (digits.size() > 15 &&
              std::all_of(digits.begin(), digits.end(), [](char c) { return hex_digit(c) >= 0; })) {
            return fail(413, "the request body is larger than the limit");
          }
          return fail(400, "a chunk size is not a hexadecimal number");
        }
        uint64_t size = 0;
        for (char c : digits) {
          int d = hex_digit(c);
          if (d < 0) return fail(400, "a chunk size is not a hexadecimal number");
          size = size * 16 + static_cast<uint64_t>(d);
        }
        if (size > limits_.max_body_bytes - req_.body.size()) {
          return fail(413, "the request body is larger than the limit");
        }
        if (size == 0) {
          // Trailers get a head's bounds of their own (the size lines before are not a head).
          head_bytes_ = 0;
          header_count_ = 0;
          state_ = State::kTrailers;
          continue;
        }
        body_left_ = static_cast<std::size_t>(size);
        state_ = State::kChunkData;
        continue;
      }
    }
  }
}

Http1Step Http1RequestParser::parse_request_line(std::string_view line) {
  std::size_t sp1 = line.find(' ');
  std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "the request line is not `METHOD target HTTP/1.1`");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!http1_is_token(method)) return fail(400, "the request method is not a token");
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
      })) {
    return fail(400, "the request target is empty or holds a character it may not");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return fail(400, "the request line names no HTTP version");
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  }
  req_.method.assign(method);
  req_.target.assign(target);
  req_.minor_version = version[7] - '0';
  return Http1NeedMore{};
}

Http1Step Http1RequestParser::parse_header_line(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') {
    return fail(400, "folded header lines (obs-fold) are not accepted");
  }
  if (++header_count_ > limits_.max_header_count) {
    return fail(431, "the request has more header fields than the limit");
  }
  std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || !http1_is_token(line.substr(0, colon))) {
    return fail(400, "a header line is not `Name: value`");
  }
  std::string_view value = trim_ows(line.substr(colon + 1));
  for (char ch : value) {
    auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      return fail(400, "a header value holds a control character");
    }
  }
  if (state_ == State::kTrailers) return Http1NeedMore{};  // trailers are counted, not kept
  req_.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  return Http1NeedMore{};
}

Http1Step Http1RequestParser::end_of_head() {
  const Http1Request& r = req_;
  std::size_t hosts = r.header_count("Host");
  if (hosts > 1 || (r.minor_version == 1 && hosts == 0)) {
    return fail(400, "an HTTP/1.1 request needs exactly one Host header");
  }

  // Connection: keep-alive per version, `close` always wins.
  bool close = false;
  bool keep_alive_token = false;
  for (const auto& [name, value] : r.headers) {
    if (!http1_iequals(name, "Connection")) continue;
    for_each_element(value, [&](std::string_view t) {
      close = close || http1_iequals(t, "close");
      keep_alive_token = keep_alive_token || http1_iequals(t, "keep-alive");
    });
  }
  req_.keep_alive = !close && (r.minor_version == 1 || keep_alive_token);

  // Nothing is ever inflated: a compressed body would be a bound on the wire, not in memory.
  for (const auto& [name, value] : r.headers) {
    if (!http1_iequals(name, "Content-Encoding")) continue;
    bool other = false;
    for_each_element(value,
                     [&](std::string_view t) { other = other || !http1_iequals(t, "identity"); });
    if (other) return fail(415, "a Content-Encoding other than identity is not accepted");
  }

  bool chunked = false;
  std::size_t te_headers = r.header_count("Transfer-Encoding");
  if (te_headers > 0) {
    if (r.minor_version == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (r.header_count("Content-Length") > 0) {
      return fail(400, "a request may not carry both Content-Length and Transfer-Encoding");
    }
    std::vector<std::string_view> codings;
    for (const auto& [name, value] : r.headers) {
      if (http1_iequals(name, "Transfer-Encoding")) {
        for_each_element(value, [&](std::string_view t) { codings.push_back(t); });
      }
    }
    if (codings.size() != 1 || !http1_iequals(codings.front(), "chunked")) {
      return fail(501, "the only transfer coding accepted is `chunked`");
    }
    chunked = true;
  }

  uint64_t length = 0;
  bool has_length = false;
  for (const auto& [name, value] : r.headers) {
    if (!http1_iequals(name, "Content-Length")) continue;
    bool bad = false;
    for_each_element(value, [&](std::string_view t) {
      if (bad) return;
      if (!std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        bad = true;
        return;
      }
      // Digits past 64 bits are a length too large (413), not a malformed one.
      uint64_t v = t.empty() ? 0 : parse_decimal_u64(t).value_or(UINT64_MAX);
      if (has_length && v != length) bad = true;
      length = v;
      has_length = true;
    });
    if (bad) return fail(400, "Content-Length is not one decimal number");
  }
  if (has_length && length > limits_.max_body_bytes) {
    return fail(413, "the request body is larger than the limit (" +
                         std::to_string(limits_.max_body_bytes) + " bytes)");
  }

  bool has_body = chunked || length > 0;
  if (const std::string* expect = r.header("Expect")) {
    if (!http1_iequals(trim_ows(*expect), "100-continue") || r.header_count("Expect") > 1) {
      return fail(417, "the only expectation accepted is `100-continue`");
    }
    expect_continue_ = has_body && r.minor_version == 1;
  }

  if (chunked) {
    state_ = State::kChunkSize;
  } else if (length > 0) {
    body_left_ = static_cast<std::size_t>(length);
    state_ = State::kBody;
  } else {
    return finish_request();
  }
  if (expect_continue_ && buffered() == 0) {
    expect_continue_ = false;
    return Http1SendContinue{};
  }
  expect_continue_ = false;  // the client sent its body without waiting
  return Http1NeedMore{};
}

Http1Step Http1RequestParser::finish_request() {
  Http1Request done = std::move(req_);
  req_ = Http1Request();
  state_ = State::kRequestLine;
  head_bytes_ = 0;
  header_count_ = 0;
  body_left_ = 0;
  expect_continue_ = false;
  compact();
  return done;
}

// ---- responses ----------------------------------------------------------------------------------

const char* http1_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 421:
      return "Misdirected Request";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

namespace {

void append_clean(std::string& out, std::string_view s) {
  for (char c : s) out.push_back(c == '\r' || c == '\n' || c == '\0' ? ' ' : c);
}

}  // namespace

bool http1_response_closes(const Http1Response& response) {
  for (const auto& [name, value] : response.headers) {
    if (!http1_iequals(name, "Connection")) continue;
    bool close = false;
    for_each_element(value,
                     [&](std::string_view t) { close = close || http1_iequals(t, "close"); });
    if (close) return true;
  }
  return false;
}

std::string http1_serialize(const Http1Response& response, int minor_version, bool keep_alive,
                            bool head_only) {
  std::string out;
  out.reserve(128 + response.body.size());
  out += minor_version == 0 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(response.status);
  out += ' ';
  out += http1_reason(response.status);
  out += "\r\n";
  for (const auto& [name, value] : response.headers) {
    if (http1_iequals(name, "Content-Length") || http1_iequals(name, "Transfer-Encoding") ||
        http1_iequals(name, "Connection")) {
      continue;
    }
    append_clean(out, name);
    out += ": ";
    append_clean(out, value);
    out += "\r\n";
  }
  bool bodiless = (response.status >= 100 && response.status < 200) || response.status == 204 ||
                  response.status == 304;
  if (!bodiless) out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (minor_version == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  if (!head_only && !bodiless) out += response.body;
  return out;
}

}  // namespace quiver
