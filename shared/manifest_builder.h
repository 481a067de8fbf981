// Building a manifest from a finished listing under the size bound (descriptions cut, entries
// dropped, issues reported), and merging in the last good lists after a partial failure. The rules
// are described in shared/manifest.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/listing.h"
#include "shared/manifest_record.h"
#include "shared/status.h"

namespace quiver {

struct ManifestLimits {
  std::size_t max_bytes = 262144;            // the whole manifest's canonical JSON
  std::size_t max_definition_bytes = 65536;  // one definition's canonical JSON
  std::size_t min_description_bytes = 64;    // the uniform cut never goes below this
  std::size_t max_issues = 32;
};

// Builds the manifest of a finished listing. Fails (kInvalidArgument) when a list was never
// attempted (kNotListed) or serverInfo lacks a string name and version, (kTooLarge) when even an
// empty manifest would exceed the bound.
Result<Manifest> manifest_from_listing(const Listing& listing, const ManifestLimits& limits = {});

// Per-list merge after a listing in which some lists failed: each failed list of `fresh` is
// replaced by the same kind's list of `last_good` (listed at `last_good_fetched_at_ms`, under the
// same config: the caller checks) when that one is `ok` or `absent` and was listed less than
// `max_age_ms` before `now_ms`; it keeps its own `kept.listed_at_ms` when it was itself kept. The
// replaced list is marked `kept` with the failure's error. Lists that succeeded are untouched; the
// manifest's combined cache hints are recomputed. Returns the kinds that were replaced.
std::vector<ListKind> keep_last_good_lists(Manifest* fresh, const Manifest& last_good,
                                           int64_t last_good_fetched_at_ms, int64_t now_ms,
                                           int64_t max_age_ms);

// After keep_last_good_lists: a kept list may come from a manifest that was itself cut to the
// bound, and the merge (the kept marks, the new lists) can then exceed it. Drops entries from the
// end of the `kept` lists (the last kind first), counting them in `truncation.dropped` as the
// first cut did, until the encoded manifest fits `max_bytes`. kTooLarge when it cannot fit even
// with the kept lists emptied.
Status fit_kept_lists(Manifest* manifest, std::size_t max_bytes);

}  // namespace quiver
