// Redis replies for the unit tests that feed the core canned answers: short builders for reply
// values (bulk strings, integers, arrays) and their RESP2 bytes as Redis sends them.
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
