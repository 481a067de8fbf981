#include "shared/render_cache.h"

#include <utility>

#include "shared/fingerprint.h"

namespace quiver {

namespace {

// Bookkeeping per entry and per string beyond their characters (list and map nodes, headers).
constexpr std::size_t kNodeOverhead = 160;
constexpr std::size_t kStringOverhead = 32;

void put_part(std::string& key, std::string_view part) {
  key += std::to_string(part.size());
  key += ':';
  key += part;
}

}  // namespace

std::size_t RenderedFragment::bytes() const {
  std::size_t n = 0;
  for (const std::string& p : parts) n += p.size() + kStringOverhead;
  for (const ItemList& l : lists) {
    n += l.digest.size() + kStringOverhead;
    for (const std::string& item : l.items) n += item.size() + kStringOverhead;
  }
  return n;
}

void RenderedFragment::append_to(std::string& out, int64_t ttl_ms,
                                 std::vector<std::size_t>* ttl_offsets) const {
  const std::string ttl = std::to_string(ttl_ms);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      if (ttl_offsets != nullptr) ttl_offsets->push_back(out.size());
      out += ttl;
    }
    out += parts[i];
  }
}

std::string render_cache_key(std::string_view connection_id, const Principal& principal,
                             std::string_view content_id, const DisabledOverlay& disabled,
                             std::string_view view, std::size_t max_manifest_bytes) {
  std::string key;
  put_part(key, connection_id);
  put_part(key, principal.str());
  put_part(key, content_id);
  put_part(key, view);
  put_part(key, std::to_string(max_manifest_bytes));
  // The set is sorted (std::set): its fingerprint names it (a lookup also compares the set
  // itself). Members are length-delimited.
  std::string members;
  for (const std::string& d : disabled) put_part(members, d);
  put_part(key, fingerprint_tag(members));
  return key;
}

RenderCache::RenderCache(std::size_t max_entries, std::size_t max_bytes)
    : lru_(max_entries, max_bytes) {}

RenderCache::~RenderCache() = default;

std::shared_ptr<const RenderedFragment> RenderCache::find(std::string_view key,
                                                          std::string_view source,
                                                          const DisabledOverlay& disabled) {
  const Entry* e = lru_.find_if(key, [&](const Entry& entry) {
    return entry.source == source && entry.disabled == disabled;
  });
  return e != nullptr ? e->fragment : nullptr;
}

bool RenderCache::insert(std::string key, std::string source, DisabledOverlay disabled,
                         std::shared_ptr<const RenderedFragment> fragment) {
  if (fragment == nullptr) {
    lru_.erase(key);
    return false;
  }
  std::size_t bytes = kNodeOverhead + 2 * key.size() + source.size() + fragment->bytes();
  for (const std::string& d : disabled) bytes += d.size() + kStringOverhead;
  return lru_.insert(std::move(key),
                     Entry{std::move(source), std::move(disabled), std::move(fragment)}, bytes);
}

}  // namespace quiver
