#include "shared/jsonrpc.h"

#include <limits>

#include "shared/canonical_json.h"

namespace quiver {
namespace {

bool valid_id(const Json& id) { return id.is_number_integer() || id.is_string(); }

Error invalid(std::string what) {
  return Error(ErrorCode::kInvalidReply, "not a JSON-RPC 2.0 message: " + std::move(what));
}

std::string dump(const Json& j) { return serialize_json(j); }

}  // namespace

Result<JsonRpcMessage> parse_jsonrpc(Json value) {
  if (!value.is_object()) return invalid("expected an object");
  auto version = json_string(value, "jsonrpc");
  if (!version || *version != "2.0") return invalid("\"jsonrpc\" must be \"2.0\"");

  // The members are moved out of `value`, not copied: a copy recurses once per level and
  // allocates every byte of a large listing page a second time.
  JsonRpcMessage m;
  Json* method = json_field(value, "method");
  Json* id = json_field(value, "id");
  Json* result = json_field(value, "result");
  Json* error = json_field(value, "error");

  if (method != nullptr) {
    if (!method->is_string()) return invalid("\"method\" must be a string");
    if (result != nullptr || error != nullptr) return invalid("a request cannot carry a result");
    m.method = method->get<std::string>();
    if (Json* params = json_field(value, "params")) {
      if (!params->is_object() && !params->is_array()) {
        return invalid("\"params\" must be an object or an array");
      }
      m.params = std::move(*params);
    }
    if (id != nullptr) {
      if (!valid_id(*id)) return invalid("request \"id\" must be an integer or a string");
      m.kind = JsonRpcKind::kRequest;
      m.id = std::move(*id);
    } else {
      m.kind = JsonRpcKind::kNotification;
    }
    return m;
  }

  if (id == nullptr) return invalid("neither \"method\" nor \"id\"");
  if (!valid_id(*id) && !id->is_null()) return invalid("\"id\" must be an integer or a string");
  if ((result != nullptr) == (error != nullptr)) {
    return invalid("a response needs exactly one of \"result\" and \"error\"");
  }
  if (result != nullptr) {
    if (id->is_null()) return invalid("a result needs an id");
    m.kind = JsonRpcKind::kResult;
    m.id = std::move(*id);
    m.result = std::move(*result);
    return m;
  }
  if (!error->is_object()) return invalid("\"error\" must be an object");
  auto code = json_int(*error, "code");
  if (!code) return invalid("\"error.code\" must be an integer");
  m.kind = JsonRpcKind::kError;
  m.id = std::move(*id);
  m.error.code = *code;
  m.error.message = json_string(*error, "message").value_or("");
  if (Json* data = json_field(*error, "data")) m.error.data = std::move(*data);
  return m;
}

Result<std::vector<JsonRpcMessage>> parse_jsonrpc_batch(std::string_view text,
                                                        std::size_t max_bytes) {
  JsonParseOptions options;
  options.max_bytes = max_bytes;
  options.keep_number_literals = true;  // peers' numbers stay as written (shared/json.h)
  auto parsed = parse_json(text, options);
  if (!parsed.ok()) {
    Error e = parsed.error();
    if (e.code == ErrorCode::kInvalidArgument) e.code = ErrorCode::kInvalidReply;
    return e;
  }
  std::vector<JsonRpcMessage> out;
  if (parsed->is_array()) {
    if (parsed->empty()) return invalid("empty batch");
    const std::size_t share = (text.size() + parsed->size() - 1) / parsed->size();
    for (Json& item : *parsed) {
      auto m = parse_jsonrpc(std::move(item));
      if (!m.ok()) return m.error();
      m->wire_bytes = share;
      out.push_back(std::move(*m));
    }
    return out;
  }
  auto m = parse_jsonrpc(std::move(*parsed));
  if (!m.ok()) return m.error();
  m->wire_bytes = text.size();
  out.push_back(std::move(*m));
  return out;
}

std::string encode_request(int64_t id, std::string_view method, const Json& params) {
  Json j = {{"jsonrpc", "2.0"}, {"id", id}, {"method", std::string(method)}};
  if (!params.is_null()) j["params"] = params;
  return dump(j);
}

std::string encode_notification(std::string_view method, const Json& params) {
  Json j = {{"jsonrpc", "2.0"}, {"method", std::string(method)}};
  if (!params.is_null()) j["params"] = params;
  return dump(j);
}

std::string encode_result(const Json& id, const Json& result) {
  return dump(Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
}

std::string encode_error(const Json& id, int64_t code, std::string_view message) {
  return dump(Json{{"jsonrpc", "2.0"},
                   {"id", id},
                   {"error", {{"code", code}, {"message", std::string(message)}}}});
}

std::string describe(const JsonRpcMessage& m) {
  switch (m.kind) {
    case JsonRpcKind::kRequest:
      return "request " + dump(m.id) + " " + m.method;
    case JsonRpcKind::kNotification:
      return "notification " + m.method;
    case JsonRpcKind::kResult:
      return "result for " + dump(m.id);
    case JsonRpcKind::kError:
      return "error " + std::to_string(m.error.code) + " for " + dump(m.id);
  }
  return "message";
}

std::optional<int64_t> unreadable_response_id(std::string_view text) {
  struct Scan {
    using number_integer_t = Json::number_integer_t;
    using number_unsigned_t = Json::number_unsigned_t;
    using number_float_t = Json::number_float_t;
    using string_t = Json::string_t;
    using binary_t = Json::binary_t;
    std::size_t depth = 0;
    bool id_next = false;
    bool response = false;
    std::optional<int64_t> id;
    bool top_level_object = false;

    bool scalar() {
      id_next = false;
      return true;
    }
    bool null() { return scalar(); }
    bool boolean(bool) { return scalar(); }
    bool number_integer(number_integer_t v) {
      if (id_next && depth == 1) id = v;
      return scalar();
    }
    bool number_unsigned(number_unsigned_t v) {
      if (id_next && depth == 1 &&
          v <= static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max())) {
        id = static_cast<int64_t>(v);
      }
      return scalar();
    }
    bool number_float(number_float_t, const string_t&) { return scalar(); }
    bool string(string_t&) { return scalar(); }
    bool binary(binary_t&) { return scalar(); }
    bool key(string_t& k) {
      if (depth == 1) {
        id_next = k == "id";
        response = response || k == "result" || k == "error";
      }
      return true;
    }
    bool start_object(std::size_t) {
      if (depth == 0) top_level_object = true;
      id_next = false;
      ++depth;
      return true;
    }
    bool end_object() {
      --depth;
      return true;
    }
    bool start_array(std::size_t) {
      id_next = false;
      ++depth;
      return true;
    }
    bool end_array() {
      --depth;
      return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
      return false;
    }
  } scan;
  if (!Json::sax_parse(text.begin(), text.end(), &scan)) return std::nullopt;
  if (!scan.top_level_object || !scan.response) return std::nullopt;
  return scan.id;
}

}  // namespace quiver
