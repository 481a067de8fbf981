#include "shared/json.h"

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

  BoundedDomBuilder(Json& root, std::size_t max_depth)
      : dom_(root, /*allow_exceptions=*/false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
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
    return dom_.parse_error(position, token, ex);
  }

  bool too_deep() const { return too_deep_; }
  const std::string& what() const { return what_; }

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
  std::size_t depth_ = 0;
  bool too_deep_ = false;
  std::string what_;
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

}  // namespace

Result<Json> parse_json(std::string_view text, const JsonParseOptions& options) {
  if (text.size() > options.max_bytes) {
    return Error(ErrorCode::kTooLarge, "JSON input of " + std::to_string(text.size()) +
                                           " bytes exceeds the limit of " +
                                           std::to_string(options.max_bytes));
  }
  Json value;
  BoundedDomBuilder builder(value, options.max_depth);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &builder,
                                  nlohmann::detail::input_format_t::json, /*strict=*/true,
                                  options.allow_comments);
  if (ok) return value;
  if (builder.too_deep()) {
    return Error(ErrorCode::kInvalidArgument, "JSON nested deeper than " +
                                                  std::to_string(options.max_depth) +
                                                  " levels (the limit)");
  }
  std::string message = "malformed JSON";
  if (!builder.what().empty()) message += " at " + sanitized_parse_error(builder.what());
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

Result<Json> parse_json(std::string_view text, std::size_t max_bytes) {
  JsonParseOptions options;
  options.max_bytes = max_bytes;
  return parse_json(text, options);
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
