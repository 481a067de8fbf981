// Redis replies for the unit tests that feed the core canned answers: short builders for reply
// values (bulk strings, integers, arrays, hashes) and their RESP2 bytes as Redis sends them.
// A test takes them all with `using namespace testing;` inside namespace quiver.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared/resp.h"

namespace quiver::testing {

inline RespValue S(std::string s) { return RespValue::bulk_string(std::move(s)); }
inline RespValue I(int64_t v) { return RespValue::integer_value(v); }
inline RespValue A(std::vector<RespValue> e) { return RespValue::array(std::move(e)); }

// A hash as HGETALL (and the scripts) answer it: field, value, field, value, ... in the order of
// `fields` (pairs of strings: a vector, or a map such as HashFields).
template <typename Fields>
RespValue flat(const Fields& fields) {
  std::vector<RespValue> out;
  for (const auto& [k, v] : fields) {
    out.push_back(S(k));
    out.push_back(S(v));
  }
  return A(std::move(out));
}
inline RespValue flat(const std::vector<std::pair<std::string, std::string>>& fields) {
  return flat<std::vector<std::pair<std::string, std::string>>>(fields);
}

// RESP2 bytes of a reply value, as Redis would send them.
inline std::string encode_reply(const RespValue& v) {
  switch (v.type) {
    case RespValue::Type::kNil:
      return "$-1\r\n";
    case RespValue::Type::kSimpleString:
      return "+" + v.str + "\r\n";
    case RespValue::Type::kError:
      return "-" + v.str + "\r\n";
    case RespValue::Type::kInteger:
      return ":" + std::to_string(v.integer) + "\r\n";
    case RespValue::Type::kBulkString:
      return "$" + std::to_string(v.str.size()) + "\r\n" + v.str + "\r\n";
    case RespValue::Type::kArray: {
      std::string out = "*" + std::to_string(v.elements.size()) + "\r\n";
      for (const RespValue& e : v.elements) out += encode_reply(e);
      return out;
    }
  }
  return "";
}

}  // namespace quiver::testing
