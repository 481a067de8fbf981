// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), plus the hex and base64url encodings they are
// shown in.
//
// Why our own: the core must compile to wasm without OpenSSL, and the edge needs the same digests
// as the agent (ETags, per-definition hashes, config_hash, webhook and token signatures).
// Incremental use: `Sha256 h; h.update(a); h.update(b); h.finish()`. One-shot: `sha256_hex(s)`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace quiver {

using Digest256 = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  void update(const uint8_t* data, std::size_t size);
  Digest256 finish();  // the object is spent afterwards

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest256 sha256(std::string_view data);
std::string sha256_hex(std::string_view data);  // 64 lowercase hex digits
Digest256 hmac_sha256(std::string_view key, std::string_view message);

std::string hex_encode(const uint8_t* data, std::size_t size);
inline std::string hex_encode(const Digest256& d) { return hex_encode(d.data(), d.size()); }

// RFC 4648 §5 base64url without padding (JWT style), and its strict decoder (rejects padding,
// whitespace and characters outside the alphabet; returns false on failure).
std::string base64url_encode(std::string_view data);
bool base64url_decode(std::string_view text, std::string* out);
// RFC 4648 §4 base64 with padding (HTTP Basic, SEP-2243 header values, PEM), and its lenient
// decoder (whitespace and padding skipped, either alphabet; nullopt for anything else).
std::string base64_encode(std::string_view data);
std::optional<std::string> base64_decode(std::string_view text);

// Compares in time independent of where the inputs differ (for signatures and tokens).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace quiver
