// Metrics: the agent's counters and its listing-latency histogram, exposed as Prometheus text.
//
// One `Metrics` per agent, shared by the refresh engine (refreshes, failures, lease contention,
// dropped revalidations, listing latency) and the HTTP API (discovery hits, stale serves,
// misses), which serves `prometheus_text()` at GET /metrics. Every method is thread-safe and
// cheap (a mutex around a few maps; nothing here is on a path measured in microseconds).
//
// Labels never carry secrets: label values are short tokens chosen by the code (an outcome such
// as "committed", an error code such as "UPSTREAM_UNAVAILABLE"), never a message, URL or key.
// A label value outside [A-Za-z0-9_:.-]{1,64} is counted under "other", so a careless caller
// cannot leak text (or break the exposition format) through a label.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace quiver {

// The upper bounds (seconds) of quiver_listing_duration_seconds: 5 ms .. 10 s.
extern const std::vector<double> kListingDurationBuckets;

class Metrics {
 public:
  Metrics() = default;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // --- discovery (incremented by the API) ---
  void discovery_hit(int64_t n = 1);          // quiver_discovery_hits_total
  void discovery_stale_serve(int64_t n = 1);  // quiver_discovery_stale_serves_total
  void discovery_miss(int64_t n = 1);         // quiver_discovery_misses_total

  // --- refresh (incremented by the engine) ---
  // quiver_refreshes_total{outcome}: "committed", "failed", "in_progress", "refused_lease_lost",
  // "refused_stale_fence", "refused_config_changed", "error" (the store could not be reached).
  void refresh(std::string_view outcome);
  // quiver_refresh_failures_total{code}: the error code name of a failed listing or store op.
  void refresh_failure(std::string_view code);
  void lease_contention();               // quiver_lease_contention_total
  void revalidation_dropped();           // quiver_revalidations_dropped_total
  void listing_duration_ms(int64_t ms);  // quiver_listing_duration_seconds
  // quiver_list_failures_total{list}: lists ("tools", "resources", "resource_templates",
  // "prompts") that could not be loaded in a listing whose manifest was still committed.
  void list_failure(std::string_view list);
  // quiver_incomplete_manifests: the (connection, principal) keys whose latest listing by this
  // agent left a list failed or kept from an earlier listing (`key` is an opaque local name).
  void set_incomplete(const std::string& key, bool incomplete);
  // quiver_oauth_authorization_required: the (connection, principal) keys whose latest listing by
  // this agent failed AUTHORIZATION_REQUIRED (an OAuth connection nobody has connected yet, or
  // whose refresh token stopped working). Principals awaiting authorization; no identity in it.
  void set_authorization_required(const std::string& key, bool required);

  // --- the store (set by the agent's store check and maintenance pass) ---
  // The namespace record as last seen: "ready", "restoring", "missing", or "unknown" (the store
  // could not be asked). quiver_store_namespace_ready is 1 only for "ready".
  void store_namespace(std::string_view state);
  void namespace_restored();  // quiver_store_namespace_restores_total
  // A part of the namespace found lost alone (key layout v2: versions seen, then gone), each time
  // the store check marks the namespace restoring for it: quiver_store_parts_lost_total.
  void part_lost();
  // This agent's clock minus the store's (Redis TIME), ms: quiver_clock_skew_seconds. Unset until
  // measured (and for a store without a clock of its own): the gauge is absent.
  void clock_skew_ms(int64_t skew);
  void consumers_removed(int64_t n);  // quiver_revalidation_consumers_removed_total

  std::string store_namespace() const;           // "unknown" before the first check
  std::optional<int64_t> clock_skew_ms() const;  // nullopt until measured
  int64_t namespace_restores() const;
  int64_t parts_lost() const;
  int64_t consumers_removed() const;

  // Reads for tests and status output (0 when never incremented).
  int64_t discovery_hits() const;
  int64_t discovery_stale_serves() const;
  int64_t discovery_misses() const;
  int64_t refreshes(std::string_view outcome) const;
  int64_t refresh_failures(std::string_view code) const;
  int64_t lease_contentions() const;
  int64_t revalidations_dropped() const;
  int64_t listing_count() const;
  int64_t list_failures(std::string_view list) const;
  int64_t incomplete_manifests() const;
  int64_t authorization_required() const;

  // The Prometheus text exposition format (version 0.0.4): HELP and TYPE lines, every family
  // present even when zero, labelled series sorted by label value.
  std::string prometheus_text() const;

 private:
  mutable std::mutex mu_;
  int64_t hits_ = 0;
  int64_t stale_serves_ = 0;
  int64_t misses_ = 0;
  std::map<std::string, int64_t, std::less<>> refreshes_;
  std::map<std::string, int64_t, std::less<>> failures_;
  int64_t lease_contention_ = 0;
  int64_t dropped_ = 0;
  std::map<std::string, int64_t, std::less<>> list_failures_;
  std::set<std::string> incomplete_;
  std::set<std::string> authorization_required_;
  std::vector<int64_t> bucket_counts_ = std::vector<int64_t>(kListingDurationBucketCount, 0);
  int64_t listing_count_ = 0;
  std::string namespace_state_ = "unknown";
  int64_t namespace_restores_ = 0;
  int64_t parts_lost_ = 0;
  std::optional<int64_t> clock_skew_ms_;
  int64_t consumers_removed_ = 0;
  double listing_sum_seconds_ = 0;

  static constexpr std::size_t kListingDurationBucketCount = 11;
};

}  // namespace quiver
