#include "shared/fingerprint.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace quiver {
namespace {

TEST(Fingerprint, IsStableAcrossBuildsAndPlatforms) {
  // ETags that clients keep carry this value: it must not change between native and wasm, or
  // between releases, without a reason. Pinned values; change them only on purpose.
  // The same values run natively and under wasm (this test is in both suites).
  EXPECT_EQ(fingerprint_tag(""), "fp-HElapJBoJfNUwrMCjn4OLA");
  EXPECT_EQ(fingerprint_tag("abc"), "fp-Es_4usPD_1ILuzbaUcsX8A");
  EXPECT_EQ(fingerprint_tag("{\"view\":\"manifest\"}"), "fp-vR0K-QB2Wwp7_I1Hk6Z-bA");
  EXPECT_EQ(fingerprint128("hello, world"), fingerprint128(std::string("hello, world")));
}

TEST(Fingerprint, EveryByteAndTheLengthCount) {
  // Every single-bit change of every byte, and every added trailing zero, changes the value.
  const std::string base = "{\"id\":\"github\",\"status\":\"fresh\",\"content\":\"sha256-x\"}";
  std::set<Fingerprint128> seen{fingerprint128(base)};
  for (std::size_t i = 0; i < base.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string changed = base;
      changed[i] = static_cast<char>(changed[i] ^ (1 << bit));
      EXPECT_TRUE(seen.insert(fingerprint128(changed)).second) << "byte " << i << " bit " << bit;
    }
  }
  std::string zeros;
  for (int n = 0; n < 40; ++n) {
    EXPECT_TRUE(seen.insert(fingerprint128(zeros)).second) << n << " zero bytes";
    zeros.push_back('\0');
  }
}

TEST(Fingerprint, NoCollisionsOverManySimilarInputs) {
  // Validators differ in a counter or a timestamp: 200,000 of them, no two alike, not even in
  // either 64-bit lane alone.
  std::set<uint64_t> lane_a;
  std::set<uint64_t> lane_b;
  for (int i = 0; i < 200'000; ++i) {
    const Fingerprint128 f =
        fingerprint128("{\"fetched_at\":" + std::to_string(1764700000000LL + i) + "}");
    EXPECT_TRUE(lane_a.insert(f[0]).second) << i;
    EXPECT_TRUE(lane_b.insert(f[1]).second) << i;
  }
}

TEST(Fingerprint, FlipsAboutHalfTheOutputBits) {
  // Avalanche: one input bit flips close to 64 of the 128 output bits on average.
  const std::string base(64, 'q');
  const Fingerprint128 b = fingerprint128(base);
  double total = 0;
  int samples = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string changed = base;
      changed[i] = static_cast<char>(changed[i] ^ (1 << bit));
      const Fingerprint128 c = fingerprint128(changed);
      total += __builtin_popcountll(b[0] ^ c[0]) + __builtin_popcountll(b[1] ^ c[1]);
      ++samples;
    }
  }
  const double mean = total / samples;
  EXPECT_GT(mean, 58.0);
  EXPECT_LT(mean, 70.0);
}

}  // namespace
}  // namespace quiver
