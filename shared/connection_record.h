// The connection record: the non-secret facts of one configured connection that the agent
// publishes for readers — `quiver:{ns}:conn:<cid>` in Redis (schema/redis-keys.md), a row of the
// `connections` table in SQLite (schema/sqlite.sql). The agent writes it
// (ManifestStore::sync_connections); discovery reads it for the principal that applies
// (applicable_principal, shared/discovery_snapshot.h) and the config_hash data must be listed
// under. This header is its one model and the one codec of its Redis hash.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "shared/principal.h"
#include "shared/status.h"

namespace quiver {

// A hash's fields as read (HGETALL) or to write (HSET): field → value.
using HashFields = std::map<std::string, std::string, std::less<>>;

struct ConnectionRecord {
  std::string id;           // validate_connection_id; the key's, not a field of the hash
  std::string config_hash;  // shared/config_hash.h config_hash(); never empty when written
  CredentialMode credential_mode = CredentialMode::kShared;  // kShared or kPerMember when written
  std::string name;                                          // display name
  std::string transport;                                     // "stdio" or "http"
  int64_t updated_at_ms = 0;

  // Equal apart from updated_at: what decides whether sync rewrites the record.
  bool same_config(const ConnectionRecord& other) const;
  bool operator==(const ConnectionRecord& other) const;
  bool operator!=(const ConnectionRecord& other) const { return !(*this == other); }
};

// The fields of `conn:<cid>` for HSET (every field of the record but the id).
HashFields connection_record_fields(const ConnectionRecord& record);

// The record of connection `cid` in its hash's fields (HGETALL). nullopt when the hash is empty
// (the connection was removed). Unknown fields are ignored; a missing or unknown credential_mode
// reads as kUnknown; a missing field reads as empty (updated_at as 0). kInvalidReply when
// updated_at is not a decimal integer.
Result<std::optional<ConnectionRecord>> connection_record_from_fields(std::string_view cid,
                                                                      const HashFields& fields);

// The same for a reader that does not use updated_at (discovery): a malformed one reads as 0, so
// the record is never refused for it.
std::optional<ConnectionRecord> connection_record_for_discovery(std::string_view cid,
                                                                const HashFields& fields);

}  // namespace quiver
