// The admin API's shared steps (api_admin.cpp: members, grants, audit; api_admin_connections.cpp:
// connections): reading a body, a page and an id, writing one catalog entry with its audit line,
// and publishing members' effective grants to the store readers. Every endpoint is operators only
// (api_server.cpp, operator_only); every change is a catalog write (native-agent/store/catalog.h)
// with origin "api" and revision = now, followed by one audit line and one INFO log line naming
// the actor, the action and the target (never a secret).
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>

#include "native-agent/api/api_context.h"
#include "native-agent/store/catalog.h"
#include "shared/json.h"

namespace quiver::api {

inline constexpr std::size_t kAdminDefaultPageSize = 100;
inline constexpr std::size_t kAdminMaxPageSize = 1000;
inline constexpr std::size_t kAdminMaxBulkMembers = 1000;
// A grant list may name at most this many connections.
inline constexpr std::size_t kAdminMaxGrantsPerList = 10000;

// The body of a write: a JSON object holding only `allowed` keys. nullopt when the 400 (naming
// the field) has been sent.
std::optional<Json> admin_body(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                               std::initializer_list<const char*> allowed);

// `cursor` and `limit` of a list endpoint. nullopt when the 400 has been sent.
struct AdminPage {
  std::string cursor;
  std::size_t limit = kAdminDefaultPageSize;
};
std::optional<AdminPage> admin_page(const httplib::Request& req, httplib::Response& res);

// No query parameters at all; false when the 400 has been sent.
bool admin_no_params(const httplib::Request& req, httplib::Response& res);

// Path segment `index` as a key of `kind` (a member or connection id); nullopt when the 400 has
// been sent.
std::optional<std::string> admin_key(const httplib::Request& req, httplib::Response& res,
                                     std::size_t index, CatalogKind kind);

// `field` as a list of grant targets: connection ids or "*", no repeats. An error message naming
// the field and the offending position, or nullopt when valid (`out` filled, sorted).
std::optional<std::string> parse_grant_list(const Json* value, const std::string& field,
                                            std::set<std::string>* out);

// One catalog entry written unconditionally by `caller` (value nullopt: a tombstone), then its
// audit line (`action`, `detail`) and the INFO line. The stored entry, or the store's error.
Result<CatalogEntry> admin_write(ApiContext& api, const Caller& caller, CatalogKind kind,
                                 const std::string& key, std::optional<Json> value,
                                 const std::string& action, Json detail);

// The live (not tombstoned) entry of (kind, key); nullopt when there is none.
Result<std::optional<CatalogEntry>> admin_live(ApiContext& api, CatalogKind kind,
                                               const std::string& key);

// The live entry of (kind, key), or nullopt with the 404 "no such member|connection" (or the
// store's error) sent.
std::optional<CatalogEntry> admin_existing(ApiContext& api, httplib::Response& res,
                                           CatalogKind kind, const std::string& key);

// Calls `visit` with every live entry of `kind`, paging through them all; stops at an error.
Status for_each_live(ApiContext& api, CatalogKind kind,
                     const std::function<Status(const CatalogEntry&)>& visit);

// The ids of every live, enabled connection of the catalog (paged through in full).
Result<std::set<std::string>> live_connection_ids(ApiContext& api);

// A member's effective grants: its own list and everyone's ("*" expanded to `live`), kept to the
// connections in `live`.
std::set<std::string> effective_grants(const std::set<std::string>& own,
                                       const std::set<std::string>& everyone,
                                       const std::set<std::string>& live);

// The grant list stored for `key` (a member id or "*"); empty when there is none.
Result<std::set<std::string>> stored_grants(ApiContext& api, const std::string& key);

// Publishes the effective grants of every live member to the store readers (set_member_grants),
// paging through the members: O(members). After a change that touches them all (the everyone
// grant, a connection added, removed, disabled or enabled). The number of members published.
Result<std::size_t> publish_all_member_grants(ApiContext& api);

// The entry's meta as JSON: origin, rev_ms, updated_at_ms, by.
void add_meta(Json& out, const CatalogMeta& meta);

}  // namespace quiver::api
