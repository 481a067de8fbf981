// wasm-worker/memcmp.c: the word-at-a-time memcmp the wasm build uses in place of the C
// library's, checked against the C library's (natively) on every length, alignment and position
// of the first difference up to three words, including bytes over 0x7f (compared unsigned).
#include <cstddef>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

extern "C" int quiver_memcmp(const void* left, const void* right, std::size_t n);

namespace quiver {
namespace {

int sign(int v) { return (v > 0) - (v < 0); }

TEST(WasmMemcmp, AgreesWithTheCLibraryOnEveryLengthOffsetAndDifference) {
  std::string a(40, '\0'), b(40, '\0');
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = static_cast<char>('a' + i % 26);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t n = 0; n + offset <= 32; ++n) {
      const char* x = a.data() + offset;
      EXPECT_EQ(quiver_memcmp(x, b.data() + offset, n), 0) << offset << " " << n;
      for (std::size_t at = 0; at < n; ++at) {
        for (unsigned char other : {0x00, 0x41, 0x7f, 0x80, 0xff}) {
          std::string c = b;
          c[offset + at] = static_cast<char>(other);
          const char* y = c.data() + offset;
          EXPECT_EQ(sign(quiver_memcmp(x, y, n)), sign(std::memcmp(x, y, n)))
              << offset << " " << n << " " << at << " " << int(other);
          EXPECT_EQ(sign(quiver_memcmp(y, x, n)), sign(std::memcmp(y, x, n)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace quiver
