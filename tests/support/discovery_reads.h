// What the discovery read tests against a real Redis share: a snapshot's bodies fetched the way a
// host fetches them, and the answer rendered as the tests compare it (ETag, Cache-Control, the
// revalidations it queues, the body), so that two reads of the same data compare byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/discovery.h"
#include "shared/discovery_redis.h"

namespace quiver::testing {

// Gives `s` every body it lacks. `fetch` answers the digests as body_read_command's MGET does
// (one reply per digest, in order).
inline void fill_bodies(DiscoverySnapshot& s,
                        const std::function<RespValue(const std::vector<std::string>&)>& fetch) {
  std::vector<std::string> digests = missing_bodies(s);
  if (digests.empty()) return;
  Result<std::vector<std::optional<std::string>>> bodies =
      decode_body_reply(fetch(digests), digests);
  ASSERT_TRUE(bodies.ok()) << bodies.error().message;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    ASSERT_TRUE((*bodies)[i].has_value()) << digests[i];
    fill_body(s, digests[i], *(*bodies)[i]);
  }
}

// The answer to `s` at `now` as one string: ETag, Cache-Control, the revalidations asked for
// (connection/principal/reason), the body.
inline std::string rendered_answer(const DiscoverySnapshot& s, int64_t now) {
  RenderedDiscovery d = render_manifests(s, FreshnessPolicy{}, now);
  std::string revalidations;
  for (const Revalidation& r : d.revalidations) {
    revalidations += r.connection_id + "/" + r.principal.str() + "/" + r.reason + ";";
  }
  return d.etag + "\n" + d.cache_control + "\n" + revalidations + "\n" + d.body;
}

}  // namespace quiver::testing
