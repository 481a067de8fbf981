// Fingerprint128: a fast, non-cryptographic 128-bit digest of bytes, for names that only have to
// tell versions apart when nobody is trying to make two collide: weak HTTP validators and cache
// keys. A weak ETag changes with every answer's inputs and is compared on every discovery
// request; SHA-256 over those inputs (about a kilobyte) cost more than everything else the render
// cache leaves to do. Where an adversary could gain from a collision (content ids, webhook
// signatures, the key ring), SHA-256 (shared/sha256.h) stays.
//
// Two 64-bit lanes over 8-byte little-endian words, seeded with the length, each lane a
// multiply-rotate chain with its own constants, then mixed into each other and finalized with an
// avalanche step (every input bit flips about half the output bits). Stable across platforms,
// native and wasm: the value is part of ETags that clients keep.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace quiver {

using Fingerprint128 = std::array<uint64_t, 2>;

Fingerprint128 fingerprint128(std::string_view bytes);

// "fp-" + base64url (no padding) of the 16 bytes, little-endian lane by lane: 25 characters.
std::string fingerprint_tag(std::string_view bytes);

}  // namespace quiver
