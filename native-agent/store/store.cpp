#include "native-agent/store/store.h"

#include <chrono>

#include "shared/canonical_json.h"

namespace quiver {

Clock system_clock_ms() {
  return [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
  };
}

CacheEntryMeta cache_entry_meta(const ManifestMeta& meta) {
  Result<CacheEntryMeta> out = cache_entry_meta(meta, meta.has_data);
  // Stores return only metadata that passes check_manifest_meta; anything else reads as nothing.
  return out.ok() ? std::move(out).value() : CacheEntryMeta{};
}

Status check_manifest_meta(const ManifestMeta& meta, std::string_view record) {
  Result<CacheEntryMeta> out = cache_entry_meta(meta, meta.has_data);
  if (out.ok()) return Status::Ok();
  return Error(ErrorCode::kInvalidReply, std::string(record) + ": " + out.error().message);
}

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

}  // namespace

Status validate_consumer_name(std::string_view consumer) {
  if (consumer.empty() || consumer.size() > 128) {
    return invalid("consumer name must be 1 to 128 characters");
  }
  for (char c : consumer) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '@' || c == ':' || c == '-';
    if (!ok) return invalid("consumer name may hold only [A-Za-z0-9._@:-]");
  }
  return Status::Ok();
}

Status validate_revalidation_read(std::string_view consumer, std::size_t max, int64_t block_ms) {
  if (Status s = validate_consumer_name(consumer); !s.ok()) return s;
  if (max == 0) return invalid("read_revalidations: max must be at least 1");
  if (block_ms < 0) return invalid("read_revalidations: block_ms must not be negative");
  return Status::Ok();
}

Status validate_revalidation_claim(std::string_view consumer, int64_t min_idle_ms,
                                   std::size_t max) {
  if (Status s = validate_consumer_name(consumer); !s.ok()) return s;
  if (max == 0) return invalid("claim_stale_revalidations: max must be at least 1");
  if (min_idle_ms < 0) return invalid("claim_stale_revalidations: min_idle_ms must be >= 0");
  return Status::Ok();
}

Status validate_overlay_member(std::string_view member) {
  std::size_t colon = member.find(':');
  if (colon == std::string_view::npos || colon + 1 == member.size()) {
    return invalid("overlay member must be <type>:<key>");
  }
  if (!parse_capability_type(member.substr(0, colon)).has_value()) {
    return invalid("overlay member has an unknown capability type '" +
                   std::string(member.substr(0, colon)) + "'");
  }
  if (member.size() - colon - 1 > kMaxCapabilityKeyBytes) {
    return invalid("overlay member key is longer than 2048 bytes");
  }
  return Status::Ok();
}

Status validate_connection_record(const ConnectionRecord& record) {
  if (Status s = validate_connection_id(record.id); !s.ok()) return s;
  if (record.config_hash.empty()) {
    return invalid("connection '" + record.id + "': config_hash is empty");
  }
  if (record.credential_mode != CredentialMode::kShared &&
      record.credential_mode != CredentialMode::kPerMember) {
    return invalid("connection '" + record.id + "': credential_mode must be shared or per_member");
  }
  if (record.transport.empty()) {
    return invalid("connection '" + record.id + "': transport is empty");
  }
  if (record.updated_at_ms < 0) {
    return invalid("connection '" + record.id + "': updated_at is negative");
  }
  return Status::Ok();
}

Status validate_revalidation_reason(std::string_view reason) {
  if (reason.empty() || reason.size() > kMaxRevalidationReasonBytes) {
    return invalid("revalidation reason must be 1 to 64 bytes");
  }
  return Status::Ok();
}

Status validate_catalog_key(CatalogKind kind, std::string_view key) {
  const std::string what = std::string(catalog_kind_name(kind)) + " key";
  Status s = Status::Ok();
  switch (kind) {
    case CatalogKind::kMember:
      s = validate_member_id(key);
      break;
    case CatalogKind::kGrant:
      if (key == kEveryoneGrantKey) return Status::Ok();
      s = validate_member_id(key);
      break;
    case CatalogKind::kConnection:
      s = validate_connection_id(key);
      break;
  }
  if (s.ok()) return s;
  return invalid(what + ": " + s.error().message);
}

Result<std::string> catalog_value_text(const CatalogEntry& entry) {
  if (Status s = validate_catalog_key(entry.kind, entry.key); !s.ok()) return s.error();
  const CatalogMeta& m = entry.meta;
  const std::string what = std::string(catalog_kind_name(entry.kind)) + " '" + entry.key + "'";
  if (m.origin != kCatalogOriginFile && m.origin != kCatalogOriginApi) {
    return invalid(what + ": origin must be \"file\" or \"api\"");
  }
  if (m.rev_ms < 0 || m.rev_ms > kMaxCatalogRevMs) {
    return invalid(what + ": rev_ms must be 0 to 2^53 - 1");
  }
  if (!m.file_hash.empty() &&
      (m.file_hash.size() != 64 ||
       m.file_hash.find_first_not_of("0123456789abcdef") != std::string::npos)) {
    return invalid(what + ": file_hash must be empty or 64 lowercase hex digits");
  }
  if (m.by.empty() || m.by.size() > kMaxCatalogByBytes) {
    return invalid(what + ": `by` must be 1 to 512 bytes");
  }
  if (!entry.value) return std::string();
  Result<std::string> text = canonical_json(*entry.value);
  if (!text.ok()) return invalid(what + ": " + text.error().message);
  if (text->size() > kMaxCatalogValueBytes) {
    return invalid(what + ": the value is " + std::to_string(text->size()) +
                   " bytes, over the limit of " + std::to_string(kMaxCatalogValueBytes));
  }
  return text;
}

Result<std::string> audit_detail_text(const AuditEntry& entry) {
  if (entry.actor.empty() || entry.actor.size() > kMaxCatalogByBytes) {
    return invalid("audit: actor must be 1 to 512 bytes");
  }
  if (entry.action.empty() || entry.action.size() > 64) {
    return invalid("audit: action must be 1 to 64 bytes");
  }
  if (entry.target.size() > 256) return invalid("audit: target is longer than 256 bytes");
  if (entry.at_ms < 0) return invalid("audit: at_ms is negative");
  if (!entry.detail.is_object()) return invalid("audit: detail must be a JSON object");
  Result<std::string> text = canonical_json(entry.detail);
  if (!text.ok()) return invalid("audit: detail: " + text.error().message);
  if (text->size() > kMaxCatalogValueBytes) return invalid("audit: detail is over 64 KiB");
  return text;
}

Status validate_catalog_page(std::size_t limit) {
  if (limit == 0 || limit > kMaxCatalogPage) {
    return invalid("page limit must be 1 to " + std::to_string(kMaxCatalogPage));
  }
  return Status::Ok();
}

const char* namespace_state_name(NamespaceState state) {
  switch (state) {
    case NamespaceState::kMissing:
      return "missing";
    case NamespaceState::kRestoring:
      return "restoring";
    case NamespaceState::kReady:
      return "ready";
  }
  return "missing";
}

}  // namespace quiver
