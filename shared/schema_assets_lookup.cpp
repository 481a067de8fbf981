#include "shared/schema_assets.h"

namespace quiver {

std::string_view schema_asset(std::string_view path) {
  for (const SchemaAsset& asset : schema_assets()) {
    if (asset.path == path) return asset.text;
  }
  return {};
}

std::string_view schema_asset_sha1_of(std::string_view text) {
  for (const SchemaAsset& asset : schema_assets()) {
    if (asset.text.size() == text.size() && asset.text == text) return asset.sha1;
  }
  return {};
}

}  // namespace quiver
