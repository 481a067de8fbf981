#include "shared/fingerprint.h"

#include "shared/sha256.h"

namespace quiver {

namespace {

constexpr uint64_t kLaneA = 0x9fb21c651e98df25ULL;
constexpr uint64_t kLaneB = 0xc2b2ae3d27d4eb4fULL;
constexpr uint64_t kSeedA = 0x243f6a8885a308d3ULL;  // digits of pi: nothing up the sleeve
constexpr uint64_t kSeedB = 0x13198a2e03707344ULL;

uint64_t rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

// An avalanche finalizer: xor-shift and multiply, three rounds.
uint64_t avalanche(uint64_t v) {
  v ^= v >> 31;
  v *= 0x7fb5d329728ea185ULL;
  v ^= v >> 27;
  v *= 0x81dadef4bc2dd44dULL;
  v ^= v >> 33;
  return v;
}

uint64_t load_le(const unsigned char* p, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

Fingerprint128 fingerprint128(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  uint64_t a = kSeedA ^ (static_cast<uint64_t>(n) * kLaneA);
  uint64_t b = kSeedB ^ (static_cast<uint64_t>(n) * kLaneB);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = load_le(p + i, 8);
    a = rotl((a ^ w) * kLaneA, 29);
    b = rotl((b + w) * kLaneB, 31) ^ a;
  }
  if (i < n) {
    // The tail, with a marker byte past its end so that trailing zero bytes still count.
    const uint64_t w = load_le(p + i, n - i) | (uint64_t{0x80} << (8 * (n - i)));
    a = rotl((a ^ w) * kLaneA, 29);
    b = rotl((b + w) * kLaneB, 31) ^ a;
  }
  a = avalanche(a ^ rotl(b, 17));
  b = avalanche(b ^ rotl(a, 41) ^ kSeedA);
  return {a, b};
}

std::string fingerprint_tag(std::string_view bytes) {
  const Fingerprint128 f = fingerprint128(bytes);
  char raw[16];
  for (int lane = 0; lane < 2; ++lane) {
    for (int k = 0; k < 8; ++k) raw[lane * 8 + k] = static_cast<char>((f[lane] >> (8 * k)) & 0xff);
  }
  return "fp-" + base64url_encode(std::string_view(raw, sizeof raw));
}

}  // namespace quiver
