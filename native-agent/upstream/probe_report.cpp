#include "native-agent/upstream/probe_report.h"

#include "shared/manifest.h"

namespace quiver {

Json probe_error_json(const Error& e) {
  return Json{{"code", error_code_name(e.code)}, {"message", e.message}};
}

bool listing_complete(const Listing& listing) {
  for (const auto& out : listing.lists) {
    if (out.state == ListState::kFailed) return false;
  }
  return true;
}

Result<Json> probe_report(const std::string& upstream, const Listing& listing, const ListInfo& info,
                          std::optional<ProtocolEra> era, const ProbeReportOptions& options) {
  auto redact = [&](const std::string& text) {
    return options.redact ? options.redact(text) : text;
  };
  auto manifest = manifest_from_listing(listing, options.limits);
  if (!manifest.ok()) return manifest.error();
  auto encoded = encode_manifest(*manifest);
  if (!encoded.ok()) return encoded.error();
  Json lists = Json::object();
  for (int i = 0; i < kListKindCount; ++i) {
    auto kind = static_cast<ListKind>(i);
    const ListOutcome& out = listing.list(kind);
    Json l = {{"state", list_state_name(out.state)}};
    if (out.state == ListState::kOk) {
      l["count"] = out.items.size();
      l["pages"] = out.pages;
    }
    if (out.error) {
      Error e = *out.error;
      e.message = redact(e.message);
      l["error"] = probe_error_json(e);
    }
    lists[list_kind_name(kind)] = l;
  }
  Json report = {
      {"status", listing_complete(listing) ? "ok" : "partial"},
      {"upstream", redact(upstream)},
      {"protocol_version", listing.protocol_version},
      {"server_info", listing.server_info},
      {"timings",
       {{"connect_ms", info.connect_ms}, {"list_ms", info.list_ms}, {"total_ms", info.total_ms}}},
      {"lists", lists},
      {"truncated", manifest->truncated},
      {"etag", encoded->etag},
      {"manifest", manifest_to_json(*manifest)},
  };
  if (era) report["era"] = protocol_era_name(*era);
  return report;
}

}  // namespace quiver
