// Fuzzes the manifest decoder (shared/manifest.h), the strict reader of manifests read back from
// Redis or SQLite (which another agent version, or anyone with write access to the store, wrote).
// A manifest it accepts must encode to canonical JSON that decodes to a manifest encoding to the
// same bytes (a stable round trip), with the etag being the content hash of those bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/manifest.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  auto manifest = decode_manifest(fuzz::as_view(data, size));
  if (!manifest.ok()) return 0;
  (void)manifest_to_json(*manifest);
  auto encoded = encode_manifest(*manifest);
  if (!encoded.ok()) {
    // Only the size bound may refuse what was read (a record written under a larger bound).
    fuzz::check(encoded.error().code == ErrorCode::kTooLarge,
                "encode_manifest refused a decoded manifest", encoded.error().message);
    return 0;
  }
  fuzz::check(encoded->etag == content_hash(encoded->bytes), "encode_manifest: etag mismatch");
  auto again = decode_manifest(encoded->bytes);
  fuzz::check(again.ok(), "decode_manifest refused its own encoding",
              again.ok() ? "" : again.error().message);
  auto twice = encode_manifest(*again);
  fuzz::check(twice.ok() && twice->bytes == encoded->bytes, "manifest round trip is not stable");
  return 0;
}
