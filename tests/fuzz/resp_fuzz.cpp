// Fuzzes the RESP decoder (shared/resp.h), which reads whatever a Redis server (or anything
// listening where Redis should be) sends. The input is a reply stream fed once whole and once in
// random pieces: the replies decoded, the error (by code) that poisons the decoder, and whether
// the stream ends at a reply boundary must not depend on the split. A decoder with tight limits
// runs the kTooLarge paths; decode_all must agree with the incremental decoder.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/resp.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

struct Run {
  std::vector<RespValue> replies;
  std::optional<ErrorCode> error;
  bool at_boundary = false;
};

void check_value(const RespValue& v, int depth, int max_depth) {
  fuzz::check(depth <= max_depth, "resp: a reply nested deeper than the limit");
  (void)v.debug_string();
  (void)v.as_int();
  if (v.is_array()) {
    for (const RespValue& e : v.elements) check_value(e, depth + 1, max_depth);
  }
}

Run decode(const std::vector<std::string_view>& pieces, const RespLimits& limits) {
  RespDecoder d(limits);
  Run run;
  for (std::string_view p : pieces) {
    Status fed = d.feed(p);
    if (!fed.ok()) {
      run.error = fed.error().code;
      fuzz::check(d.poisoned(), "resp: a failed feed left the decoder usable");
      break;
    }
    for (;;) {
      auto r = d.next();
      if (!r.ok()) {
        run.error = r.error().code;
        fuzz::check(d.poisoned(), "resp: a failed next left the decoder usable");
        auto again = d.next();
        fuzz::check(!again.ok() && again.error().code == r.error().code,
                    "resp: a poisoned decoder answered differently");
        break;
      }
      if (!r->has_value()) break;
      check_value(**r, 0, limits.max_depth);
      run.replies.push_back(std::move(**r));
    }
    if (run.error) break;
  }
  fuzz::check(d.replies_decoded() == run.replies.size(), "resp: replies_decoded miscounts");
  run.at_boundary = !run.error && d.at_boundary();
  return run;
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  RespLimits roomy;
  Run whole = decode({input}, roomy);
  Run split = decode(fuzz::random_splits(input), roomy);
  fuzz::check(whole.replies == split.replies, "resp: the split changed the replies");
  fuzz::check(whole.error == split.error, "resp: the split changed the error");
  fuzz::check(whole.at_boundary == split.at_boundary, "resp: the split changed the boundary");

  // decode_all over exactly the replies the stream holds: the same replies, or the same error.
  auto all = decode_all(input, whole.replies.size(), roomy);
  if (whole.error) {
    fuzz::check(!all.ok(), "resp: decode_all accepted a stream the decoder refused");
  } else if (whole.at_boundary) {
    fuzz::check(all.ok() && *all == whole.replies, "resp: decode_all disagrees with the decoder");
  } else {
    fuzz::check(!all.ok(), "resp: decode_all accepted a stream ending inside a reply");
  }

  RespLimits tight;
  tight.max_bulk_bytes = 16;
  tight.max_depth = 3;
  tight.max_buffered_bytes = 256;
  (void)decode(fuzz::random_splits(input, 7), tight);
  return 0;
}
