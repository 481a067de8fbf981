#include "shared/json.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "shared/canonical_json.h"

namespace quiver {

namespace {

// The DOM builder nlohmann's own `parse` uses, with a depth count in front: it refuses the first
// object or array past the limit, so the parser stops before building it.
class BoundedDomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  BoundedDomBuilder(Json& root, std::size_t max_depth, bool keep_number_literals)
      : dom_(root, /*allow_exceptions=*/false),
        max_depth_(max_depth),
        keep_number_literals_(keep_number_literals) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) {
    // Integers past 64 bits arrive here too (the lexer falls back to a double for them).
    if (keep_number_literals_) {
      bool same = false;
      if (std::isfinite(v)) {
        Result<std::string> canonical = canonical_number(v);
        same = canonical.ok() && *canonical == s;
      }
      if (!same) {
        binary_t literal(std::vector<std::uint8_t>(s.begin(), s.end()), kNumberLiteralSubtype);
        return dom_.binary(literal);
      }
    }
    return dom_.number_float(v, s);
  }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool key(string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) { return enter() && dom_.start_object(n); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& ex) {
    what_ = ex.what();
    position_ = position;
    return dom_.parse_error(position, token, ex);
  }

  bool too_deep() const { return too_deep_; }
  const std::string& what() const { return what_; }
  std::size_t position() const { return position_; }

 private:
  bool enter() {
    if (depth_ >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    ++depth_;
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::size_t max_depth_;
  bool keep_number_literals_;
  std::size_t depth_ = 0;
  bool too_deep_ = false;
  std::string what_;
  std::size_t position_ = 0;
};

// nlohmann's message ("[json.exception.parse_error.101] parse error at line 1, column 5: syntax
// error while parsing value - invalid literal; last read: 'tru'; expected ...") without its tag
// and without the text it last read, which may be part of a secret (a token, a config value).
std::string sanitized_parse_error(std::string what) {
  const std::size_t at = what.find("parse error at ");
  if (at != std::string::npos) what = what.substr(at + 15);
  const std::size_t last_read = what.find("; last read: '");
  if (last_read != std::string::npos) {
    const std::size_t expected = what.rfind("'; expected ");
    what = what.substr(0, last_read) + (expected != std::string::npos && expected > last_read
                                            ? what.substr(expected + 1)
                                            : std::string());
  }
  return what;
}

// nlohmann's parser stops at a number past the double range ("1e400": error 406) before the
// SAX builder sees it, and hands `-0` to it as the integer 0 without its text. With number
// literals on, such numbers are swapped for marker strings ("\u0000N<i>"; not tried when the
// text holds any escaped U+0000, so no peer string can pose as one), the text parsed again, and
// the markers replaced by the literals.
constexpr std::string_view kOverflowMarker = "\\u0000N";

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// RFC 8259's number grammar, whole token.
bool is_json_number(std::string_view t) {
  auto digit = [&](std::size_t i) { return i < t.size() && t[i] >= '0' && t[i] <= '9'; };
  std::size_t i = 0;
  if (i < t.size() && t[i] == '-') ++i;
  if (!digit(i)) return false;
  if (t[i] == '0') {
    ++i;
  } else {
    while (digit(i)) ++i;
  }
  if (i < t.size() && t[i] == '.') {
    if (!digit(++i)) return false;
    while (digit(i)) ++i;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digit(i)) return false;
    while (digit(i)) ++i;
  }
  return i == t.size();
}

void restore_overflow_literals(Json& value, const std::vector<std::string>& literals) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s.size() > 2 && s[0] == '\0' && s[1] == 'N') {
      std::size_t i = std::strtoul(s.c_str() + 2, nullptr, 10);
      if (i < literals.size()) value = json_number_literal(literals[i]);
    }
  } else if (value.is_structured()) {
    for (Json& child : value) restore_overflow_literals(child, literals);
  }
}

// Whether `text` may hold the number token `-0` (a cheap filter: "-0" inside strings such as
// "2026-07-28" passes only when it looks like a token of its own).
bool may_hold_negative_zero(std::string_view text) {
  for (std::size_t at = text.find("-0"); at != std::string_view::npos;
       at = text.find("-0", at + 2)) {
    char before = at == 0 ? ' ' : text[at - 1];
    char after = at + 2 < text.size() ? text[at + 2] : ' ';
    if (!std::isalnum(static_cast<unsigned char>(before)) && !is_number_char(after)) return true;
  }
  return false;
}

std::optional<Json> parse_with_overflow_literals(std::string_view text,
                                                 const JsonParseOptions& options) {
  if (text.find("\\u0000") != std::string_view::npos) return std::nullopt;
  std::string swapped;
  std::vector<std::string> literals;
  bool in_string = false;
  std::size_t copied = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && !(c >= '0' && c <= '9')) continue;
    std::size_t end = i;
    while (end < text.size() && is_number_char(text[end])) ++end;
    std::string token(text.substr(i, end - i));
    if (is_json_number(token) &&
        (token == "-0" || std::isinf(std::strtod(token.c_str(), nullptr)))) {
      swapped.append(text.data() + copied, i - copied);
      swapped += "\"" + std::string(kOverflowMarker) + std::to_string(literals.size()) + "\"";
      literals.push_back(std::move(token));
      copied = end;
    }
    i = end - 1;
  }
  if (literals.empty()) return std::nullopt;
  swapped.append(text.data() + copied, text.size() - copied);
  Json value;
  BoundedDomBuilder builder(value, options.max_depth, /*keep_number_literals=*/true);
  if (!Json::sax_parse(swapped.begin(), swapped.end(), &builder,
                       nlohmann::detail::input_format_t::json, /*strict=*/true,
                       options.allow_comments)) {
    return std::nullopt;
  }
  restore_overflow_literals(value, literals);
  return value;
}

}  // namespace

Result<Json> parse_json(std::string_view text, const JsonParseOptions& options) {
  if (text.size() > options.max_bytes) {
    return Error(ErrorCode::kTooLarge, "JSON input of " + std::to_string(text.size()) +
                                           " bytes exceeds the limit of " +
                                           std::to_string(options.max_bytes));
  }
  Json value;
  BoundedDomBuilder builder(value, options.max_depth, options.keep_number_literals);
  const bool ok =
      Json::sax_parse(text.begin(), text.end(), &builder, nlohmann::detail::input_format_t::json,
                      /*strict=*/true, options.allow_comments);
  if (ok) {
    // `-0` came through as the integer 0: keep it as written (a literal).
    if (options.keep_number_literals && may_hold_negative_zero(text)) {
      if (std::optional<Json> kept = parse_with_overflow_literals(text, options)) return *kept;
    }
    return value;
  }
  if (options.keep_number_literals && !builder.too_deep() &&
      builder.what().find("number overflow") != std::string::npos) {
    if (std::optional<Json> kept = parse_with_overflow_literals(text, options)) return *kept;
  }
  if (builder.too_deep()) {
    return Error(
        ErrorCode::kInvalidArgument,
        "JSON nested deeper than " + std::to_string(options.max_depth) + " levels (the limit)");
  }
  // "malformed JSON at line 1, column 13 (byte 13): syntax error while parsing value - ..."
  std::string where = sanitized_parse_error(builder.what());
  const std::string byte = "byte " + std::to_string(builder.position());
  const std::size_t colon = where.find(':');
  where = colon == std::string::npos
              ? byte + where
              : where.substr(0, colon) + " (" + byte + ")" + where.substr(colon);
  return Error(ErrorCode::kInvalidArgument, "malformed JSON at " + where);
}

Result<Json> parse_json(std::string_view text, std::size_t max_bytes) {
  JsonParseOptions options;
  options.max_bytes = max_bytes;
  return parse_json(text, options);
}

Json json_number_literal(std::string_view text) {
  return Json::binary(std::vector<std::uint8_t>(text.begin(), text.end()), kNumberLiteralSubtype);
}

std::optional<std::string_view> json_number_literal_text(const Json& value) {
  if (!value.is_binary()) return std::nullopt;
  const Json::binary_t& b = value.get_binary();
  if (!b.has_subtype() || b.subtype() != kNumberLiteralSubtype) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
}

std::optional<double> json_number(const Json& value) {
  if (value.is_number_unsigned()) return static_cast<double>(value.get<uint64_t>());
  if (value.is_number_integer()) return static_cast<double>(value.get<int64_t>());
  if (value.is_number_float()) return value.get<double>();
  if (auto text = json_number_literal_text(value)) {
    std::string copy(*text);
    return std::strtod(copy.c_str(), nullptr);  // HUGE_VAL past the range, as documented
  }
  return std::nullopt;
}

const Json* json_field(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

Json* json_field(Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::optional<std::string> json_string(const Json& object, const char* key) {
  const Json* v = json_field(object, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::optional<int64_t> json_int(const Json& object, const char* key) {
  const Json* v = json_field(object, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  return std::nullopt;
}

std::optional<bool> json_bool(const Json& object, const char* key) {
  const Json* v = json_field(object, key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

}  // namespace quiver
