/* memcmp for the wasm build: eight bytes at a time.
 *
 * The C library Emscripten links (musl) compares one byte per loop turn. The core compares long
 * byte strings on every request: the render cache checks that a manifest's exact text is what it
 * rendered (shared/render_cache.h: kilobytes per entry), a script's text is matched to its
 * EVALSHA name, map keys are compared. Measured in V8 (bench/edge_core.mjs) the byte loop was a
 * tenth of a small answer's core time. In a wasm build, `memcmp` defined here, in the module's own
 * code, replaces the library's for the whole module (bcmp and std::string's compare call it);
 * native builds keep their C library's and only test quiver_memcmp against it
 * (tests/shared/wasm_memcmp_test.cpp). Same contract as C's memcmp: the sign of the first
 * differing byte, as unsigned char. */
#include <stddef.h>
#include <stdint.h>

int quiver_memcmp(const void* left, const void* right, size_t n) {
  const unsigned char* a = (const unsigned char*)left;
  const unsigned char* b = (const unsigned char*)right;
  while (n >= 8) {
    uint64_t x, y;
    __builtin_memcpy(&x, a, 8); /* unaligned loads: wasm allows them */
    __builtin_memcpy(&y, b, 8);
    if (x != y) break; /* the byte loop below finds the first difference */
    a += 8;
    b += 8;
    n -= 8;
  }
  for (; n > 0; --n, ++a, ++b) {
    if (*a != *b) return (int)*a - (int)*b;
  }
  return 0;
}

#ifdef __EMSCRIPTEN__
int memcmp(const void* left, const void* right, size_t n) { return quiver_memcmp(left, right, n); }
#endif
