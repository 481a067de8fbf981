#include "shared/schema_assets.h"

namespace quiver {

std::string_view schema_asset(std::string_view path) {
  for (const SchemaAsset& asset : schema_assets()) {
    if (asset.path == path) return asset.text;
  }
  return {};
}

}  // namespace quiver
