#include "shared/canonical_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace quiver {
namespace {

// RFC 6901: "~" -> "~0", "/" -> "~1".
std::string pointer_segment(std::string_view key) {
  std::string out = "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// Escaped form of one byte below 0x80, or nullptr when the byte is written as is.
const char* short_escape(unsigned char c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      return nullptr;
  }
}

void append_string(std::string_view text, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  std::size_t run = 0;  // start of the pending run of bytes copied as they are
  for (std::size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(text.data() + run, i - run);
    run = i + 1;
    if (const char* esc = short_escape(c)) {
      out->append(esc);
    } else {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xf]);
    }
  }
  out->append(text.data() + run, text.size() - run);
  out->push_back('"');
}

Status check_utf8(std::string_view text, const char* what) {
  std::size_t bad = find_invalid_utf8(text);
  if (bad == std::string_view::npos) return Status::Ok();
  return Error(ErrorCode::kInvalidArgument,
               std::string("invalid UTF-8 in ") + what + " at byte " + std::to_string(bad));
}

// On error, `*where` receives the JSON pointer of the bad value, built up segment by segment as
// the recursion unwinds; the error message says only what is wrong.
Status append_value(const Json& value, std::string* out, int depth_left, std::string* where) {
  switch (value.type()) {
    case Json::value_t::null:
      out->append("null");
      return Status::Ok();
    case Json::value_t::boolean:
      out->append(value.get<bool>() ? "true" : "false");
      return Status::Ok();
    case Json::value_t::number_integer:
      out->append(std::to_string(value.get<int64_t>()));
      return Status::Ok();
    case Json::value_t::number_unsigned:
      out->append(std::to_string(value.get<uint64_t>()));
      return Status::Ok();
    case Json::value_t::number_float: {
      Result<std::string> n = canonical_number(value.get<double>());
      if (!n.ok()) return n.error();
      out->append(*n);
      return Status::Ok();
    }
    case Json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      Status st = check_utf8(s, "string");
      if (!st.ok()) return st;
      append_string(s, out);
      return Status::Ok();
    }
    case Json::value_t::array: {
      if (depth_left <= 0) return Error(ErrorCode::kTooLarge, "nesting too deep");
      out->push_back('[');
      std::size_t i = 0;
      for (const Json& element : value) {
        if (i != 0) out->push_back(',');
        Status st = append_value(element, out, depth_left - 1, where);
        if (!st.ok()) {
          *where = "/" + std::to_string(i) + *where;
          return st;
        }
        ++i;
      }
      out->push_back(']');
      return Status::Ok();
    }
    case Json::value_t::object: {
      if (depth_left <= 0) return Error(ErrorCode::kTooLarge, "nesting too deep");
      // nlohmann::json keeps object members in a std::map<std::string, ...>, whose order is
      // std::string's: char_traits<char>::compare, which compares as unsigned char, i.e. by
      // UTF-8 bytes. Sorting again here would only cost time; the tests pin the order down.
      out->push_back('{');
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out->push_back(',');
        first = false;
        Status st = check_utf8(it.key(), "key");
        if (st.ok()) {
          append_string(it.key(), out);
          out->push_back(':');
          st = append_value(it.value(), out, depth_left - 1, where);
        }
        if (!st.ok()) {
          *where = pointer_segment(it.key()) + *where;
          return st;
        }
      }
      out->push_back('}');
      return Status::Ok();
    }
    case Json::value_t::binary:
      // A number literal (shared/json.h) is written as it arrived.
      if (auto literal = json_number_literal_text(value)) {
        out->append(literal->data(), literal->size());
        return Status::Ok();
      }
      return Error(ErrorCode::kInvalidArgument, "binary values have no JSON form");
    case Json::value_t::discarded:
      return Error(ErrorCode::kInvalidArgument, "discarded value");
  }
  return Error(ErrorCode::kInternal, "unknown JSON type");
}

// serialize_json's writer: canonical_json's forms, and nlohmann's dump for what canonical_json
// refuses (invalid UTF-8 becomes U+FFFD, NaN and infinities null, other binaries nlohmann's
// object form).
void write_value(const Json& value, std::string* out, int indent, int level) {
  auto newline = [&](int at) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(at), ' ');
  };
  switch (value.type()) {
    case Json::value_t::number_float: {
      Result<std::string> n = canonical_number(value.get<double>());
      out->append(n.ok() ? *n : std::string("null"));
      return;
    }
    case Json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (find_invalid_utf8(s) == std::string_view::npos) {
        append_string(s, out);
      } else {
        out->append(value.dump(-1, ' ', false, Json::error_handler_t::replace));
      }
      return;
    }
    case Json::value_t::binary:
      if (auto literal = json_number_literal_text(value)) {
        out->append(literal->data(), literal->size());
      } else {
        out->append(value.dump(-1, ' ', false, Json::error_handler_t::replace));
      }
      return;
    case Json::value_t::array: {
      if (value.empty()) {
        out->append("[]");
        return;
      }
      out->push_back('[');
      bool first = true;
      for (const Json& element : value) {
        if (!first) out->push_back(',');
        first = false;
        newline(level + 1);
        write_value(element, out, indent, level + 1);
      }
      newline(level);
      out->push_back(']');
      return;
    }
    case Json::value_t::object: {
      if (value.empty()) {
        out->append("{}");
        return;
      }
      out->push_back('{');
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out->push_back(',');
        first = false;
        newline(level + 1);
        write_value(Json(it.key()), out, indent, level + 1);
        out->append(indent < 0 ? ":" : ": ");
        write_value(it.value(), out, indent, level + 1);
      }
      newline(level);
      out->push_back('}');
      return;
    }
    default: {
      std::string where;
      if (!append_value(value, out, 1, &where).ok()) out->append("null");
      return;
    }
  }
}

}  // namespace

std::size_t canonical_string_size(std::string_view text) {
  std::size_t size = 2;
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != '"' && c != '\\') {
      size += 1;
    } else {
      size += short_escape(c) != nullptr ? 2 : 6;
    }
  }
  return size;
}

Result<std::string> canonical_number(double value) {
  if (!std::isfinite(value)) {
    return Error(ErrorCode::kInvalidArgument, "NaN and infinities have no JSON form");
  }
  if (value == 0) return std::string("0");  // -0 included, as in ECMAScript
  std::string out;
  if (value < 0) {
    out.push_back('-');
    value = -value;
  }
  // The shortest decimal that reads back to the same double: try 1..17 significant digits.
  // snprintf rounds correctly, so the first precision that round-trips gives the nearest
  // shortest digits.
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  // buf is "d[.ddd]e[+-]xx": split into the digits and the exponent.
  std::string digits;
  const char* p = buf;
  for (; *p != 'e'; ++p) {
    if (*p != '.') digits.push_back(*p);
  }
  int exponent = std::atoi(p + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();

  // ECMAScript Number::toString: value = 0.d1d2...dk x 10^n.
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<std::size_t>(n));
    out.push_back('.');
    out += digits.substr(static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-n), '0');
    out += digits;
  } else {
    out.push_back(digits[0]);
    if (k > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    out.push_back('e');
    out.push_back(n - 1 < 0 ? '-' : '+');
    out += std::to_string(n - 1 < 0 ? -(n - 1) : n - 1);
  }
  return out;
}

Status append_canonical_json(const Json& value, std::string* out, int max_depth) {
  std::string where;
  Status st = append_value(value, out, max_depth, &where);
  if (st.ok()) return st;
  // A key's pointer segment is peer data and may contain anything but invalid UTF-8 has been
  // caught: a bad key shows up in its own segment. Keep the message readable for huge keys.
  if (find_invalid_utf8(where) != std::string::npos || where.size() > 512) {
    where = where.substr(0, std::min<std::size_t>(where.size(), 512));
    std::size_t bad = find_invalid_utf8(where);
    while (bad != std::string::npos) {
      where.replace(bad, 1, "?");
      bad = find_invalid_utf8(where);
    }
  }
  return Error(st.error().code,
               "cannot write canonical JSON at '" + where + "': " + st.error().message);
}

std::string serialize_json(const Json& value, int indent) {
  std::string out;
  write_value(value, &out, indent, 0);
  return out;
}

Result<std::string> canonical_json(const Json& value, int max_depth) {
  std::string out;
  Status st = append_canonical_json(value, &out, max_depth);
  if (!st.ok()) return st.error();
  return out;
}

}  // namespace quiver
