#include "shared/connection_record.h"

#include <utility>

#include "shared/numbers.h"
#include "shared/redis_keys.h"

namespace quiver {

namespace {

// The record in `fields`; `updated_at_ok` says whether updated_at was absent, empty or a number.
ConnectionRecord decode(std::string_view cid, const HashFields& fields, bool* updated_at_ok) {
  auto text = [&](const char* name) {
    auto it = fields.find(name);
    return it == fields.end() ? std::string() : it->second;
  };
  ConnectionRecord r;
  r.id = std::string(cid);
  r.config_hash = text(redis_field::kConfigHash);
  r.credential_mode = credential_mode_from_string(text(redis_field::kCredentialMode));
  r.name = text(redis_field::kName);
  r.transport = text(redis_field::kTransport);
  const std::string updated = text(redis_field::kUpdatedAt);
  std::optional<int64_t> at =
      updated.empty() ? std::optional<int64_t>(0) : parse_decimal_i64(updated);
  *updated_at_ok = at.has_value();
  r.updated_at_ms = at.value_or(0);
  return r;
}

}  // namespace

bool ConnectionRecord::same_config(const ConnectionRecord& other) const {
  return id == other.id && config_hash == other.config_hash &&
         credential_mode == other.credential_mode && name == other.name &&
         transport == other.transport;
}

bool ConnectionRecord::operator==(const ConnectionRecord& other) const {
  return same_config(other) && updated_at_ms == other.updated_at_ms;
}

HashFields connection_record_fields(const ConnectionRecord& record) {
  return HashFields{{redis_field::kConfigHash, record.config_hash},
                    {redis_field::kCredentialMode, credential_mode_name(record.credential_mode)},
                    {redis_field::kName, record.name},
                    {redis_field::kTransport, record.transport},
                    {redis_field::kUpdatedAt, std::to_string(record.updated_at_ms)}};
}

Result<std::optional<ConnectionRecord>> connection_record_from_fields(std::string_view cid,
                                                                      const HashFields& fields) {
  if (fields.empty()) return std::optional<ConnectionRecord>();
  bool updated_at_ok = true;
  ConnectionRecord r = decode(cid, fields, &updated_at_ok);
  if (!updated_at_ok) {
    return Error(ErrorCode::kInvalidReply,
                 "connection record " + std::string(cid) + ": updated_at is not a number");
  }
  return std::optional<ConnectionRecord>(std::move(r));
}

std::optional<ConnectionRecord> connection_record_for_discovery(std::string_view cid,
                                                                const HashFields& fields) {
  if (fields.empty()) return std::nullopt;
  bool ignored = true;
  return decode(cid, fields, &ignored);
}

}  // namespace quiver
