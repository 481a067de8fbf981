// Helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cpp): deterministic "random" splits of an
// input, and a check that stops the run like a crash when a property the code promises fails.
//
// Splits come from a generator seeded with a hash of the input itself, so a seed file can be
// any raw capture (an NDJSON stream, an SSE body) and a crash reproduces from the file alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace quiver::fuzz {

// Stops the run: libFuzzer records the input as a crash. `what` says which promise broke.
[[noreturn]] inline void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz property failed: %s%s%s\n", what, detail.empty() ? "" : ": ",
               detail.c_str());
  std::abort();
}

inline void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) fail(what, detail);
}

// A small deterministic generator (splitmix64).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }

 private:
  uint64_t state_;
};

inline uint64_t hash_bytes(std::string_view data) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// `data` cut into consecutive pieces whose sizes vary from 1 byte to a few KiB; the cut depends
// only on `data` and `salt`. Concatenated, the pieces are `data`.
inline std::vector<std::string_view> random_splits(std::string_view data, uint64_t salt = 0) {
  Rng rng(hash_bytes(data) ^ salt);
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < data.size()) {
    std::size_t n;
    switch (rng.below(4)) {
      case 0:
        n = 1;
        break;
      case 1:
        n = 1 + rng.below(8);
        break;
      case 2:
        n = 1 + rng.below(64);
        break;
      default:
        n = 1 + rng.below(4096);
        break;
    }
    if (n > data.size() - pos) n = data.size() - pos;
    out.push_back(data.substr(pos, n));
    pos += n;
  }
  return out;
}

inline std::string_view as_view(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace quiver::fuzz
