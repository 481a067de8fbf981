// The probe report: what one listing of an upstream shows, as `quiver-agent probe` prints it and
// the agent's "test connection" (POST /v1/mcp-connections/{id}/test) answers it.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "native-agent/upstream/upstream.h"
#include "shared/json.h"
#include "shared/listing.h"
#include "shared/manifest_builder.h"
#include "shared/mcp_session.h"
#include "shared/status.h"

namespace quiver {

// {"code": "TIMEOUT", "message": ...}
Json probe_error_json(const Error& e);

// Whether no list of the listing failed (the report's status is then "ok", else "partial").
bool listing_complete(const Listing& listing);

struct ProbeReportOptions {
  ManifestLimits limits;  // of the manifest Quiver would cache
  // Applied to the upstream description and to every list's error message; null: as they are.
  std::function<std::string(const std::string&)> redact;
};

// The report of one listing: status, upstream (`upstream`, a description without secrets),
// protocol version, era (when known), server info, timings, each list's state (with count and
// pages when ok, the error when it failed), and the manifest Quiver would cache with its ETag and
// whether it was truncated. Fails when no manifest can be made of the listing.
Result<Json> probe_report(const std::string& upstream, const Listing& listing, const ListInfo& info,
                          std::optional<ProtocolEra> era, const ProbeReportOptions& options = {});

}  // namespace quiver
