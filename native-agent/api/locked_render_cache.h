// The agent's render cache (shared/render_cache.h): one per API server, shared by the HTTP worker
// threads. The core's cache is not synchronized, so every find and insert holds a mutex; they are
// short (a map lookup and a string comparison, or a splice), and the fragment returned is shared,
// so a request keeps using it after the lock is released even if it is evicted meanwhile.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "shared/render_cache.h"

namespace quiver {

class LockedRenderCache final : public RenderCache {
 public:
  using RenderCache::RenderCache;

  std::shared_ptr<const RenderedFragment> find(std::string_view key, std::string_view source,
                                               const DisabledOverlay& disabled) override {
    std::lock_guard<std::mutex> lock(mu_);
    return RenderCache::find(key, source, disabled);
  }
  bool insert(std::string key, std::string source, DisabledOverlay disabled,
              std::shared_ptr<const RenderedFragment> fragment) override {
    std::lock_guard<std::mutex> lock(mu_);
    return RenderCache::insert(std::move(key), std::move(source), std::move(disabled),
                               std::move(fragment));
  }

 private:
  std::mutex mu_;
};

}  // namespace quiver
