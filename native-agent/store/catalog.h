// The runtime catalog: the members, grants and connection definitions operators manage at
// runtime (the admin API, `quiver-agent members|grants|connections`), persisted in the store the
// agent uses — the namespace's source of truth for them. The config file is the bootstrap: its
// members, grants and connections are seeded into the catalog by the file rule below, and every
// agent of a namespace builds its effective configuration from the catalog (its own file's items
// included), so two agents with different files never undo each other.
//
// Entries. One per (kind, key):
//   member      key: member id                    value {"operator": bool}
//   grant       key: member id, or "*" (everyone)  value {"connections": ["<cid>" | "*", ...]}
//   connection  key: connection id                value {"name": "<mcpServers key>",
//                                                        "server": {<the mcpServers entry>},
//                                                        "settings": {<quiver.connections entry>}}
// Secrets in a value are references only ({"env": ...}, {"file": ...}, "${NAME}"): the catalog is
// stored in clear in Redis and SQLite, so the admin API refuses a literal (config.h, "Secrets").
//
// A deleted entry stays as a tombstone (value nullopt) with its revision, so that a config file
// older than the delete cannot bring it back.
//
// The file rule (catalog_seed_applies): an agent seeds an item of its config file — or the
// removal of an item an earlier file seeded — only when the file's definition of it is not the
// one last seeded (file_hash differs) and the file is newer than the entry (file revision >
// rev_ms). The file revision is `quiver.revision` when the file sets it, else the file's mtime in
// milliseconds. So: restarting or reloading on a file older than an operator's API change never
// reverts it (an API write clears file_hash and takes rev_ms = now, so a file deployed after the
// change, even with the same content, does win); an edited or newly deployed file wins over older
// state; an agent still running an older file (a rolling deploy) changes nothing and logs that it
// is behind. The store applies the rule atomically (CatalogWriteMode::kFileSeed): two agents
// seeding at once cannot interleave.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/json.h"
#include "shared/status.h"

namespace quiver {

enum class CatalogKind { kMember = 0, kGrant, kConnection };
const char* catalog_kind_name(CatalogKind kind);  // "member", "grant", "connection"
std::optional<CatalogKind> parse_catalog_kind(std::string_view name);

inline constexpr char kCatalogOriginFile[] = "file";
inline constexpr char kCatalogOriginApi[] = "api";
// The grant key that applies to every member.
inline constexpr char kEveryoneGrantKey[] = "*";
// The largest JSON value of one entry (a connection definition), in bytes.
inline constexpr std::size_t kMaxCatalogValueBytes = 64 * 1024;
// The audit log keeps at most this many lines (the oldest go first).
inline constexpr std::size_t kMaxAuditEntries = 100000;

struct CatalogMeta {
  std::string origin;     // kCatalogOriginFile or kCatalogOriginApi
  int64_t rev_ms = 0;     // the change's revision: an API change's time, a file's revision
  std::string file_hash;  // sha256 hex of the file's definition last seeded; "" never from a file
  std::string by;         // who: "operator:<member id>", "key:<operator key name>", "file:<path>"
  int64_t updated_at_ms = 0;  // when the store wrote it (the writer's clock)
};

struct CatalogEntry {
  CatalogKind kind = CatalogKind::kMember;
  std::string key;
  std::optional<Json> value;  // nullopt: a tombstone
  CatalogMeta meta;
};

enum class CatalogWriteMode {
  kAlways = 0,  // the admin API: write unconditionally
  kFileSeed,    // the file rule (catalog_seed_applies) against the stored entry, atomically
  // Only when nothing (not even a tombstone) is stored under the key, atomically: an agent putting
  // back its copy of the catalog into a namespace the store lost (a Redis restarted empty), meta
  // as it was. An entry another agent restored or wrote since is kept.
  kRestore,
};

struct CatalogWriteResult {
  bool applied = false;
  std::optional<CatalogEntry> current;  // the entry as stored after the call (none: never was)
};

// The file rule: whether a file item (or its removal, `file_hash` of the removal = "") with
// `file_hash` and `file_rev_ms` replaces `stored`.
bool catalog_seed_applies(const std::optional<CatalogEntry>& stored, std::string_view file_hash,
                          int64_t file_rev_ms);

struct CatalogPage {
  std::vector<CatalogEntry> entries;  // sorted by key; tombstones included
  std::string next_cursor;            // "" at the end
};

// Catalog versions: a counter per kind, bumped by every applied write of that kind. Agents watch
// them (the store check) to learn that the catalog changed without reading it.
struct CatalogVersions {
  int64_t member = 0;
  int64_t grant = 0;
  int64_t connection = 0;
  bool operator==(const CatalogVersions& o) const {
    return member == o.member && grant == o.grant && connection == o.connection;
  }
  bool operator!=(const CatalogVersions& o) const { return !(*this == o); }
};

// One line of the audit log: who changed what.
struct AuditEntry {
  std::string id;  // the store's (a stream id on Redis, a row id on SQLite); "" when appending
  int64_t at_ms = 0;
  std::string actor;   // as CatalogMeta::by
  std::string action;  // "member.put", "member.delete", "grants.put", "connection.put", ...
  std::string target;  // the key acted on
  Json detail = Json::object();  // what changed, never a secret value
};

struct AuditPage {
  std::vector<AuditEntry> entries;  // newest first
  std::string next_cursor;          // "" at the end
};

}  // namespace quiver
