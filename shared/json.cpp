#include "shared/json.h"

namespace quiver {

Result<Json> parse_json(std::string_view text, std::size_t max_bytes) {
  if (text.size() > max_bytes) {
    return Error(ErrorCode::kTooLarge, "JSON input of " + std::to_string(text.size()) +
                                           " bytes exceeds the limit of " +
                                           std::to_string(max_bytes));
  }
  // The callback-free, exception-free overload: a parse failure yields a `discarded` value.
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    // Re-run with a SAX handler to find the offset without exceptions.
    struct Locator : nlohmann::json_sax<Json> {
      std::size_t where = 0;
      std::string what;
      bool null() override { return true; }
      bool boolean(bool) override { return true; }
      bool number_integer(number_integer_t) override { return true; }
      bool number_unsigned(number_unsigned_t) override { return true; }
      bool number_float(number_float_t, const string_t&) override { return true; }
      bool string(string_t&) override { return true; }
      bool binary(binary_t&) override { return true; }
      bool start_object(std::size_t) override { return true; }
      bool key(string_t&) override { return true; }
      bool end_object() override { return true; }
      bool start_array(std::size_t) override { return true; }
      bool end_array() override { return true; }
      bool parse_error(std::size_t position, const std::string&,
                       const nlohmann::detail::exception& ex) override {
        where = position;
        what = ex.what();
        return false;
      }
    } locator;
    Json::sax_parse(text.begin(), text.end(), &locator, nlohmann::detail::input_format_t::json,
                    /*strict=*/true);
    std::string message = "malformed JSON at byte " + std::to_string(locator.where);
    if (!locator.what.empty()) message += ": " + locator.what;
    return Error(ErrorCode::kInvalidArgument, std::move(message));
  }
  return value;
}

const Json* json_field(const Json& object, const char* key) {
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
