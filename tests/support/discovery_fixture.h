// Test fixtures for discovery: an in-memory store with the Redis layout's shape (a SnapshotSource),
// and builders for manifest hashes and manifest JSON. Header-only: the unit tests (native and
// wasm) and the Redis integration test share it, so the same store contents go through
// read_snapshot in memory and through discovery_read.lua in a real Redis.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "shared/discovery.h"
#include "shared/json.h"

namespace quiver::testing {

// The clock the discovery tests read their fixtures at.
inline constexpr int64_t kNow = 100'000'000;
inline constexpr int64_t kMinute = 60'000;

// A manifest JSON in the manifest model's shape (schema/manifest.schema.json): each list an
// object {state, items, hashes, cache}. `marker` goes into every description, so a test can tell
// whose manifest it is looking at.
inline std::string manifest_json(const std::vector<std::string>& tools,
                                 const std::vector<std::string>& resources = {},
                                 const std::vector<std::string>& templates = {},
                                 const std::vector<std::string>& prompts = {},
                                 const std::string& marker = "") {
  auto list = [&](const std::vector<std::string>& keys, const char* key_field, bool tool) {
    Json items = Json::array();
    Json hashes = Json::object();
    for (const std::string& k : keys) {
      Json item = Json::object();
      item[key_field] = k;
      if (std::string(key_field) != "name") item["name"] = "n-" + k;
      item["description"] = "about " + k + (marker.empty() ? "" : " for " + marker);
      if (tool) item["inputSchema"] = Json::object({{"type", "object"}});
      items.push_back(std::move(item));
      hashes[k] = "sha256-" + std::string(43, 'A');
    }
    return Json::object({{"state", "ok"},
                         {"items", std::move(items)},
                         {"hashes", std::move(hashes)},
                         {"cache", Json::object()}});
  };
  Json m = Json::object();
  m["format"] = "quiver.manifest.v1";
  m["protocol_version"] = "2025-11-25";
  m["server"] = Json::object({{"name", "test-server"}, {"version", "1.0.0"}});
  m["capabilities"] = Json::object();
  m["tools"] = list(tools, "name", true);
  m["resources"] = list(resources, "uri", false);
  m["resource_templates"] = list(templates, "uriTemplate", false);
  m["prompts"] = list(prompts, "name", false);
  m["cache"] = Json::object();
  m["truncated"] = false;
  m["issues"] = Json::array();
  m["issues_omitted"] = 0;
  return json_text(m);
}

// The fields a successful commit writes (manifest_commit.lua).
inline HashFields data_entry(const std::string& config_hash, int64_t fetched_at,
                             int64_t fresh_until, const std::string& manifest,
                             const std::string& etag = "sha256-etag") {
  return HashFields{{"manifest", manifest},
                    {"etag", etag},
                    {"config_hash", config_hash},
                    {"fence", "1"},
                    {"fetched_at", std::to_string(fetched_at)},
                    {"fresh_until", std::to_string(fresh_until)},
                    {"expires_at", std::to_string(fetched_at + 86'400'000)},
                    {"truncated", "0"},
                    {"attempt_at", std::to_string(fetched_at)}};
}

// The fields a failed refresh adds (manifest_fail.lua).
inline void add_failure(HashFields* fields, const std::string& code, const std::string& message,
                        int64_t at) {
  (*fields)["error_code"] = code;
  (*fields)["error_message"] = message;
  (*fields)["error_at"] = std::to_string(at);
  (*fields)["attempt_at"] = std::to_string(at);
}

// The store, as plain maps keyed like the Redis layout.
class MemoryStore : public SnapshotSource {
 public:
  std::map<std::string, std::vector<std::string>> grants;               // member principal → ids
  std::map<std::string, HashFields> conns;                              // cid → record fields
  std::map<std::pair<std::string, std::string>, HashFields> manifests;  // (cid, principal)
  std::map<std::pair<std::string, std::string>, DisabledOverlay> disabled_sets;  // (cid, principal)
  std::set<std::pair<std::string, std::string>> leases;                          // (cid, principal)
  int64_t epoch_value = 7;
  std::optional<Error> failure;  // every call fails with it when set

  void add_connection(const std::string& cid, const std::string& mode,
                      const std::string& config_hash = "") {
    conns[cid] = HashFields{{"config_hash", config_hash.empty() ? "h-" + cid : config_hash},
                            {"credential_mode", mode},
                            {"name", "Name of " + cid},
                            {"transport", "stdio"},
                            {"updated_at", "1"}};
  }
  void grant(const std::string& member_id, const std::string& cid) {
    grants["member/" + member_id].push_back(cid);
  }

  Result<std::vector<std::string>> granted(const Principal& member) override {
    if (failure) return *failure;
    auto it = grants.find(member.str());
    return it == grants.end() ? std::vector<std::string>{} : it->second;
  }
  // Records and manifests decode as the Redis readers decode them.
  Result<std::optional<ConnectionRecord>> record(std::string_view cid) override {
    if (failure) return *failure;
    auto it = conns.find(std::string(cid));
    if (it == conns.end()) return std::optional<ConnectionRecord>();
    return connection_record_for_discovery(cid, it->second);
  }
  Result<std::optional<ManifestEntry>> manifest(std::string_view cid,
                                                const Principal& principal) override {
    if (failure) return *failure;
    auto it = manifests.find({std::string(cid), principal.str()});
    return it == manifests.end() ? std::optional<ManifestEntry>()
                                 : manifest_entry_from_fields(it->second);
  }
  Result<DisabledOverlay> disabled(std::string_view cid, const Principal& principal) override {
    if (failure) return *failure;
    auto it = disabled_sets.find({std::string(cid), principal.str()});
    return it == disabled_sets.end() ? DisabledOverlay{} : it->second;
  }
  Result<bool> lease_held(std::string_view cid, const Principal& principal) override {
    if (failure) return *failure;
    return leases.count({std::string(cid), principal.str()}) > 0;
  }
  Result<int64_t> epoch() override {
    if (failure) return *failure;
    return epoch_value;
  }
};

inline Principal member_principal(const std::string& id) { return *Principal::member(id); }

// The design brief's freshness policy: 15 min fresh, 24 h max age.
inline FreshnessPolicy policy() {
  FreshnessPolicy p;
  p.fresh_ttl_ms = 15 * 60'000;
  p.max_age_ms = 24 * 60 * 60'000;
  return p;
}

// What `member` reads from `store` (a failure fails the test).
inline DiscoverySnapshot snapshot_of(MemoryStore& store, const std::string& member,
                                     SnapshotQuery query = {}) {
  Result<DiscoverySnapshot> s = read_snapshot(store, member_principal(member), query);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return std::move(s).value();
}

}  // namespace quiver::testing
