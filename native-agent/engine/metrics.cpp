#include "native-agent/engine/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace quiver {

const std::vector<double> kListingDurationBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,    2.5,   5,    10};

namespace {

// A label value the code chose, or "other": nothing else reaches the exposition.
std::string safe_label(std::string_view value) {
  if (value.empty() || value.size() > 64) return "other";
  for (char c : value) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ':' || c == '.' || c == '-';
    if (!ok) return "other";
  }
  return std::string(value);
}

int64_t lookup(const std::map<std::string, int64_t, std::less<>>& map, std::string_view key) {
  auto it = map.find(safe_label(key));
  return it == map.end() ? 0 : it->second;
}

// The shortest text that reads back as `v` ("0.005", not "0.0050000000000000001").
std::string format_double(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v && std::strchr(buf, 'e') == nullptr) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void family(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << ' ' << help << '\n' << "# TYPE " << name << ' ' << type << '\n';
}

// A family of one unlabelled sample.
template <typename T>
void single(std::ostringstream& out, const char* name, const char* type, const char* help,
            const T& value) {
  family(out, name, type, help);
  out << name << ' ' << value << '\n';
}

// A counter family with one sample per value of `label`.
void labelled(std::ostringstream& out, const char* name, const char* help, const char* label,
              const std::map<std::string, int64_t, std::less<>>& samples) {
  family(out, name, "counter", help);
  for (const auto& [value, n] : samples) {
    out << name << '{' << label << "=\"" << value << "\"} " << n << '\n';
  }
}

// The field, read under the lock.
template <typename T>
T read_locked(std::mutex& mu, const T& field) {
  std::lock_guard<std::mutex> lock(mu);
  return field;
}

void add_locked(std::mutex& mu, int64_t& counter, int64_t n) {
  std::lock_guard<std::mutex> lock(mu);
  counter += n;
}

void count_locked(std::mutex& mu, std::map<std::string, int64_t, std::less<>>& counts,
                  std::string_view label) {
  std::lock_guard<std::mutex> lock(mu);
  ++counts[safe_label(label)];
}

int64_t lookup_locked(std::mutex& mu, const std::map<std::string, int64_t, std::less<>>& counts,
                      std::string_view label) {
  std::lock_guard<std::mutex> lock(mu);
  return lookup(counts, label);
}

}  // namespace

void Metrics::discovery_hit(int64_t n) { add_locked(mu_, hits_, n); }
void Metrics::discovery_stale_serve(int64_t n) { add_locked(mu_, stale_serves_, n); }
void Metrics::discovery_miss(int64_t n) { add_locked(mu_, misses_, n); }
void Metrics::refresh(std::string_view outcome) { count_locked(mu_, refreshes_, outcome); }
void Metrics::refresh_failure(std::string_view code) { count_locked(mu_, failures_, code); }
void Metrics::lease_contention() { add_locked(mu_, lease_contention_, 1); }
void Metrics::revalidation_dropped() { add_locked(mu_, dropped_, 1); }
void Metrics::listing_duration_ms(int64_t ms) {
  if (ms < 0) ms = 0;
  double seconds = static_cast<double>(ms) / 1000.0;
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < kListingDurationBuckets.size(); ++i) {
    if (seconds <= kListingDurationBuckets[i]) ++bucket_counts_[i];
  }
  ++listing_count_;
  listing_sum_seconds_ += seconds;
}

int64_t Metrics::discovery_hits() const { return read_locked(mu_, hits_); }
int64_t Metrics::discovery_stale_serves() const { return read_locked(mu_, stale_serves_); }
int64_t Metrics::discovery_misses() const { return read_locked(mu_, misses_); }
int64_t Metrics::refreshes(std::string_view outcome) const {
  return lookup_locked(mu_, refreshes_, outcome);
}
int64_t Metrics::refresh_failures(std::string_view code) const {
  return lookup_locked(mu_, failures_, code);
}
void Metrics::list_failure(std::string_view list) { count_locked(mu_, list_failures_, list); }

namespace {
void mark_key(std::set<std::string>& keys, const std::string& key, bool on) {
  if (on) {
    keys.insert(key);
  } else {
    keys.erase(key);
  }
}
}  // namespace

void Metrics::set_incomplete(const std::string& key, bool incomplete) {
  std::lock_guard<std::mutex> lock(mu_);
  mark_key(incomplete_, key, incomplete);
}

void Metrics::set_authorization_required(const std::string& key, bool required) {
  std::lock_guard<std::mutex> lock(mu_);
  mark_key(authorization_required_, key, required);
}

int64_t Metrics::authorization_required() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(authorization_required_.size());
}

int64_t Metrics::list_failures(std::string_view list) const {
  return lookup_locked(mu_, list_failures_, list);
}

int64_t Metrics::incomplete_manifests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(incomplete_.size());
}

int64_t Metrics::lease_contentions() const { return read_locked(mu_, lease_contention_); }
int64_t Metrics::revalidations_dropped() const { return read_locked(mu_, dropped_); }
int64_t Metrics::listing_count() const { return read_locked(mu_, listing_count_); }

void Metrics::store_namespace(std::string_view state) {
  std::lock_guard<std::mutex> lock(mu_);
  namespace_state_ = std::string(state);
}
void Metrics::namespace_restored() { add_locked(mu_, namespace_restores_, 1); }
void Metrics::part_lost() { add_locked(mu_, parts_lost_, 1); }
void Metrics::clock_skew_ms(int64_t skew) {
  std::lock_guard<std::mutex> lock(mu_);
  clock_skew_ms_ = skew;
}
void Metrics::consumers_removed(int64_t n) { add_locked(mu_, consumers_removed_, n); }
std::string Metrics::store_namespace() const { return read_locked(mu_, namespace_state_); }
std::optional<int64_t> Metrics::clock_skew_ms() const { return read_locked(mu_, clock_skew_ms_); }
int64_t Metrics::namespace_restores() const { return read_locked(mu_, namespace_restores_); }
int64_t Metrics::parts_lost() const { return read_locked(mu_, parts_lost_); }
int64_t Metrics::consumers_removed() const { return read_locked(mu_, consumers_removed_); }

std::string Metrics::prometheus_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream out;
  single(out, "quiver_discovery_hits_total", "counter", "Manifests served fresh.", hits_);
  single(out, "quiver_discovery_stale_serves_total", "counter",
         "Manifests served stale while a revalidation was queued.", stale_serves_);
  single(out, "quiver_discovery_misses_total", "counter",
         "Discovery reads that found no usable manifest.", misses_);
  labelled(out, "quiver_refreshes_total", "Refresh attempts by outcome.", "outcome", refreshes_);
  labelled(out, "quiver_refresh_failures_total", "Failed refreshes by error code.", "code",
           failures_);
  single(out, "quiver_lease_contention_total", "counter",
         "Refreshes skipped because another worker held the lease.", lease_contention_);
  single(out, "quiver_revalidations_dropped_total", "counter",
         "Revalidation requests that could not be queued or handled.", dropped_);
  labelled(out, "quiver_list_failures_total",
           "Lists that could not be loaded in a listing that was still committed, by list.", "list",
           list_failures_);
  single(out, "quiver_incomplete_manifests", "gauge",
         "Connections whose latest listing left a list failed or kept from an earlier listing.",
         incomplete_.size());
  single(out, "quiver_oauth_authorization_required", "gauge",
         "OAuth connections and principals whose latest listing by this agent found no usable "
         "authorization (someone must connect: POST /v1/mcp-connections/{id}/authorize).",
         authorization_required_.size());
  family(out, "quiver_listing_duration_seconds", "histogram",
         "Time to list one upstream (every page of every list).");
  for (std::size_t i = 0; i < kListingDurationBuckets.size(); ++i) {
    out << "quiver_listing_duration_seconds_bucket{le=\""
        << format_double(kListingDurationBuckets[i]) << "\"} " << bucket_counts_[i] << '\n';
  }
  out << "quiver_listing_duration_seconds_bucket{le=\"+Inf\"} " << listing_count_ << '\n';
  out << "quiver_listing_duration_seconds_sum " << format_double(listing_sum_seconds_) << '\n';
  out << "quiver_listing_duration_seconds_count " << listing_count_ << '\n';
  single(out, "quiver_store_namespace_ready", "gauge",
         "1 while the store's namespace record says ready; 0 while it is missing (the store lost "
         "its data) or being restored.",
         namespace_state_ == "ready" ? 1 : 0);
  single(out, "quiver_store_namespace_restores_total", "counter",
         "Namespaces this agent restored after the store lost them.", namespace_restores_);
  single(out, "quiver_store_parts_lost_total", "counter",
         "Parts of the namespace (key layout v2: a Redis Cluster shard's slots) this agent found "
         "lost alone, by versions it had seen gone; each marked the namespace restoring.",
         parts_lost_);
  single(out, "quiver_revalidation_consumers_removed_total", "counter",
         "Dead consumers (idle, nothing pending) removed from the revalidation group.",
         consumers_removed_);
  if (clock_skew_ms_) {
    single(out, "quiver_clock_skew_seconds", "gauge",
           "This agent's clock minus the store's clock (Redis TIME), in seconds.",
           format_double(static_cast<double>(*clock_skew_ms_) / 1000));
  }
  return out.str();
}

}  // namespace quiver
