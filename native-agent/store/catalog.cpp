#include "native-agent/store/catalog.h"

namespace quiver {

const char* catalog_kind_name(CatalogKind kind) {
  switch (kind) {
    case CatalogKind::kMember:
      return "member";
    case CatalogKind::kGrant:
      return "grant";
    case CatalogKind::kConnection:
      return "connection";
  }
  return "member";
}

std::optional<CatalogKind> parse_catalog_kind(std::string_view name) {
  for (CatalogKind k : {CatalogKind::kMember, CatalogKind::kGrant, CatalogKind::kConnection}) {
    if (name == catalog_kind_name(k)) return k;
  }
  return std::nullopt;
}

bool catalog_seed_applies(const std::optional<CatalogEntry>& stored, std::string_view file_hash,
                          int64_t file_rev_ms) {
  if (!stored) return !file_hash.empty();  // nothing to remove when the store never had it
  if (stored->meta.file_hash == file_hash) return false;  // the file says nothing new
  return file_rev_ms > stored->meta.rev_ms;               // only a newer file wins
}

}  // namespace quiver
