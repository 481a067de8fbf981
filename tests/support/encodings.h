// Encodings a careless upstream applies to a credential it echoes (base64, base64url,
// JavaScript's encodeURIComponent), written independently of native-agent/base/redactor.cpp so that
// tests check the redactor against encoders it does not share code with.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace quiver::testing {

// Unpadded base64 (RFC 4648 §4) or base64url (§5).
inline std::string base64_encode(std::string_view bytes, bool url = false) {
  const char* alphabet = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                             : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    }
    if (i + 2 < bytes.size()) n |= static_cast<unsigned char>(bytes[i + 2]);
    const std::size_t chars = bytes.size() - i >= 3 ? 4 : bytes.size() - i + 1;
    for (std::size_t c = 0; c < chars; ++c) out += alphabet[(n >> (18 - 6 * c)) & 63];
  }
  return out;
}

// JavaScript's encodeURIComponent (upper-case hex).
inline std::string percent_encode(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (std::isalnum(static_cast<unsigned char>(c)) ||
        std::string_view("-_.!~*'()").find(c) != std::string_view::npos) {
      out += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  return out;
}

}  // namespace quiver::testing
