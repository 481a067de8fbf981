#include "shared/manifest_builder.h"

#include <algorithm>
#include <set>
#include <utility>

#include "shared/canonical_json.h"
#include "shared/manifest_internal.h"
#include "shared/utf8.h"

namespace quiver {

using namespace manifest_internal;  // this file implements part of manifest.h

namespace {

// ---- Building: per-definition bookkeeping for the size bound ----

struct Slot {
  std::size_t size = 0;        // canonical bytes of the definition as it stands
  std::size_t hash_entry = 0;  // canonical bytes of its "key":"hash" member
  std::string original_description;
  bool description_cut = false;
};

// `text` cut to at most `max_bytes` raw bytes, ellipsis included.
std::string cut_to_bytes(const std::string& text, std::size_t max_bytes) {
  std::size_t keep = utf8_prefix_length(text, max_bytes - kEllipsisBytes);
  return text.substr(0, keep) + kEllipsis;
}

// `text` cut so that its canonical string (quotes included) takes at most `max_size` bytes.
// Requires max_size >= 2 + kEllipsisBytes.
std::string cut_to_canonical_size(const std::string& text, std::size_t max_size) {
  std::size_t budget = max_size - 2 - kEllipsisBytes;
  std::size_t used = 0, keep = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::size_t cost = canonical_string_size(std::string_view(&text[i], 1)) - 2;
    if (used + cost > budget) break;
    used += cost;
    if (i + 1 == text.size() || (static_cast<unsigned char>(text[i + 1]) & 0xC0) != 0x80) {
      keep = i + 1;  // a code point ends here
    }
  }
  return text.substr(0, keep) + kEllipsis;
}

class Builder {
 public:
  Builder(const Listing& listing, const ManifestLimits& limits)
      : listing_(listing), limits_(limits) {}

  Result<Manifest> build();

 private:
  template <typename T>
  Status convert(ListKind kind, const ListOutcome& outcome, ManifestList<T>* list);
  void issue(ListKind kind, std::size_t index, std::string_view key, std::string problem);
  Result<std::size_t> manifest_size() const;
  Status bound_size();
  bool drop_last();
  std::size_t savings_at(std::size_t cut) const;

  const Listing& listing_;
  const ManifestLimits& limits_;
  Manifest m_;
  std::vector<ManifestIssue> all_issues_;
  std::array<std::vector<Slot>, kListKindCount> slots_;
};

void Builder::issue(ListKind kind, std::size_t index, std::string_view key, std::string problem) {
  ManifestIssue i;
  i.list = kind;
  i.index = static_cast<int64_t>(index);
  i.key = sanitized(key, kIssueKeyMaxBytes);
  i.problem = sanitized(problem, 1024);
  all_issues_.push_back(std::move(i));
}

template <typename T>
Status Builder::convert(ListKind kind, const ListOutcome& outcome, ManifestList<T>* list) {
  list->cache = normalized(outcome.hints);
  switch (outcome.state) {
    case ListState::kNotListed:
      return Error(ErrorCode::kInvalidArgument,
                   std::string("the listing never attempted ") + list_method(kind));
    case ListState::kAbsent:
      list->state = ListState::kAbsent;
      return Status::Ok();
    case ListState::kFailed:
      list->state = ListState::kFailed;
      list->error = outcome.error.value_or(Error(ErrorCode::kUnknown, "listing failed"));
      list->error->message = sanitized(list->error->message, 1024);
      list->partial_items = static_cast<int64_t>(outcome.items.size());
      return Status::Ok();
    case ListState::kOk:
      break;
  }
  list->state = ListState::kOk;
  std::set<std::string> seen;
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < outcome.items.size(); ++i) {
    const Json& item = outcome.items[i];
    std::string raw_key;
    if (const Json* k = json_field(item, list_key_field(kind)); k != nullptr && k->is_string()) {
      raw_key = k->get<std::string>();
    }
    problems.clear();
    Result<T> def = from_json_as(item, &problems, static_cast<const T*>(nullptr));
    if (!def.ok()) {
      issue(kind, i, raw_key, def.error().message + "; definition dropped");
      continue;
    }
    for (std::string& p : problems) issue(kind, i, raw_key, std::move(p));
    const std::string& key = definition_key(*def);
    if (seen.count(key) != 0) {
      issue(kind, i, key, "duplicate key; definition dropped (the first one is kept)");
      continue;
    }
    Result<std::string> bytes = canonical_json(to_json(*def));
    if (!bytes.ok()) {
      issue(kind, i, key, bytes.error().message + "; definition dropped");
      continue;
    }
    seen.insert(key);
    Slot slot;
    slot.size = bytes->size();
    slot.hash_entry = canonical_string_size(key) + 1 + kHashChars + 2;
    list->hashes.push_back(content_hash(*bytes));
    list->items.push_back(std::move(*def));

    // One definition over its own bound: cut its description, or drop it.
    if (slot.size > limits_.max_definition_bytes) {
      std::optional<std::string>& desc = list->items.back().description;
      std::size_t rest = desc ? slot.size - canonical_string_size(*desc) : slot.size;
      if (desc && rest + 2 + kEllipsisBytes <= limits_.max_definition_bytes) {
        slot.original_description = *desc;
        *desc = cut_to_canonical_size(*desc, limits_.max_definition_bytes - rest);
        slot.size = rest + canonical_string_size(*desc);
        slot.description_cut = true;
        m_.truncation.descriptions++;
        m_.truncated = true;
      } else {
        list->items.pop_back();
        list->hashes.pop_back();
        m_.truncation.dropped[static_cast<int>(kind)]++;
        m_.truncated = true;
        continue;
      }
    }
    if (!slot.description_cut && list->items.back().description) {
      slot.original_description = *list->items.back().description;
    }
    slots_[static_cast<int>(kind)].push_back(std::move(slot));
  }
  return Status::Ok();
}

Result<std::size_t> Builder::manifest_size() const {
  Result<std::string> bytes = canonical_json(manifest_to_json(m_));
  if (!bytes.ok()) return bytes.error();
  return bytes->size();
}

// Bytes saved if every description (and the instructions) longer than `cut` raw bytes were cut
// to `cut` bytes, measured against the originals.
std::size_t Builder::savings_at(std::size_t cut) const {
  std::size_t saved = 0;
  auto one = [&](const std::string& text) {
    if (text.size() <= cut) return;
    std::size_t keep = utf8_prefix_length(text, cut - kEllipsisBytes);
    std::size_t removed = canonical_string_size(std::string_view(text).substr(keep)) - 2;
    saved += removed - kEllipsisBytes;
  };
  for (const auto& list : slots_) {
    for (const Slot& s : list) one(s.original_description);
  }
  if (listing_.instructions) one(*listing_.instructions);
  return saved;
}

// Drops the last entry in drop order (resources, templates, prompts, tools). False when empty.
bool Builder::drop_last() {
  bool dropped = false;
  auto drop = [&](ListKind kind, auto& list) {
    if (dropped || list.items.empty()) return;
    list.items.pop_back();
    list.hashes.pop_back();
    auto& slots = slots_[static_cast<int>(kind)];
    if (slots.back().description_cut) m_.truncation.descriptions--;  // counts kept entries only
    slots.pop_back();
    m_.truncation.dropped[static_cast<int>(kind)]++;
    dropped = true;
  };
  drop(ListKind::kResources, m_.resources);
  drop(ListKind::kResourceTemplates, m_.resource_templates);
  drop(ListKind::kPrompts, m_.prompts);
  drop(ListKind::kTools, m_.tools);
  return dropped;
}

Status Builder::bound_size() {
  Result<std::size_t> full = manifest_size();
  if (!full.ok()) return full.error();
  if (*full <= limits_.max_bytes) return Status::Ok();
  if (!m_.truncated) {
    m_.truncated = true;  // measure again with the truncation record in place
    full = manifest_size();
    if (!full.ok()) return full.error();
  }
  // The record grows a little once the cut is known (its length, larger counts).
  const std::size_t budget =
      limits_.max_bytes > kTruncationReserve ? limits_.max_bytes - kTruncationReserve : 0;

  // (1) A uniform cut of the longest descriptions. Savings are measured against the original
  // descriptions, so first express the current size (per-definition cuts applied) in them.
  std::size_t original = *full;
  for_each_list(m_, [&](ListKind kind, auto& list) {
    const auto& slots = slots_[static_cast<int>(kind)];
    for (std::size_t i = 0; i < list.items.size(); ++i) {
      if (!slots[i].description_cut) continue;
      original = original - canonical_string_size(*list.items[i].description) +
                 canonical_string_size(slots[i].original_description);
    }
  });

  std::size_t longest = listing_.instructions ? listing_.instructions->size() : 0;
  for (const auto& list : slots_) {
    for (const Slot& s : list) longest = std::max(longest, s.original_description.size());
  }
  const std::size_t floor =
      std::max<std::size_t>(limits_.min_description_bytes, kEllipsisBytes + 1);
  std::optional<std::size_t> cut;
  if (longest > floor && original > budget) {
    const std::size_t over = original - budget;
    if (savings_at(floor) < over) {
      cut = floor;  // as far as descriptions go; entries must go too
    } else {
      std::size_t lo = floor, hi = longest;  // savings_at(lo) >= over > savings_at(hi)
      while (hi - lo > 1) {
        std::size_t mid = lo + (hi - lo) / 2;
        (savings_at(mid) >= over ? lo : hi) = mid;
      }
      cut = lo;
    }
  }
  if (cut) {
    m_.truncation.description_max_bytes = static_cast<int64_t>(*cut);
    auto apply = [&](ListKind kind, auto& list) {
      auto& slots = slots_[static_cast<int>(kind)];
      for (std::size_t i = 0; i < list.items.size(); ++i) {
        Slot& s = slots[i];
        std::optional<std::string>& d = list.items[i].description;
        if (!d || s.original_description.size() <= *cut) continue;
        std::size_t before = canonical_string_size(*d);
        std::string shorter = cut_to_bytes(s.original_description, *cut);
        if (canonical_string_size(shorter) >= before) continue;  // a per-definition cut was deeper
        *d = std::move(shorter);
        s.size = s.size - before + canonical_string_size(*d);
        if (!s.description_cut) m_.truncation.descriptions++;
        s.description_cut = true;
      }
    };
    for_each_list(m_, apply);
    if (m_.instructions && m_.instructions->size() > *cut) {
      m_.instructions = cut_to_bytes(*m_.instructions, *cut);
      m_.truncation.instructions = true;
    }
  }
  // (2) Drop entries from the end until the estimate fits, then check the real bytes.
  Result<std::size_t> now = manifest_size();
  if (!now.ok()) return now.error();
  std::size_t estimate = *now;
  while (estimate > limits_.max_bytes) {
    std::size_t saved = 0;
    for (ListKind kind : {ListKind::kResources, ListKind::kResourceTemplates, ListKind::kPrompts,
                          ListKind::kTools}) {
      auto& slots = slots_[static_cast<int>(kind)];
      if (slots.empty()) continue;
      const Slot& s = slots.back();
      saved = s.size + s.hash_entry + (slots.size() > 1 ? 2 : 0);
      break;
    }
    if (!drop_last()) break;
    estimate -= std::min(estimate, saved);
  }
  for (;;) {
    now = manifest_size();
    if (!now.ok()) return now.error();
    if (*now <= limits_.max_bytes) return Status::Ok();
    if (!drop_last()) {
      return Error(ErrorCode::kTooLarge,
                   "the manifest takes " + std::to_string(*now) + " bytes with every entry " +
                       "dropped, over the bound of " + std::to_string(limits_.max_bytes));
    }
  }
}

Result<Manifest> Builder::build() {
  const Json& info = listing_.server_info;
  std::optional<std::string> name = json_string(info, "name");
  std::optional<std::string> version = json_string(info, "version");
  if (!name || !version) {
    return Error(ErrorCode::kInvalidReply, "serverInfo lacks a string 'name' and 'version'");
  }
  m_.protocol_version = listing_.protocol_version;
  m_.server.name = std::move(*name);
  m_.server.version = std::move(*version);
  std::vector<std::string> ignored;  // a wrong-typed serverInfo.title is dropped unreported
  FieldReader r(info, &ignored);
  m_.server.title = r.string("title");
  m_.server.extra = r.extra({"name", "version", "title"});
  if (listing_.server_capabilities.is_object()) m_.capabilities = listing_.server_capabilities;
  m_.instructions = listing_.instructions;

  Status st;
  auto convert_one = [&](ListKind kind, auto& list) {
    if (st.ok()) st = convert(kind, listing_.list(kind), &list);
    combine(&m_.cache, list.cache);
  };
  for_each_list(m_, convert_one);
  if (!st.ok()) return st.error();

  for (ManifestIssue& i : all_issues_) {
    if (m_.issues.size() < limits_.max_issues) {
      m_.issues.push_back(std::move(i));
    } else {
      m_.issues_omitted++;
    }
  }
  st = bound_size();
  if (!st.ok()) return st.error();
  return std::move(m_);
}

}  // namespace

Result<Manifest> manifest_from_listing(const Listing& listing, const ManifestLimits& limits) {
  return Builder(listing, limits).build();
}

std::vector<ListKind> keep_last_good_lists(Manifest* fresh, const Manifest& last_good,
                                           int64_t last_good_fetched_at_ms, int64_t now_ms,
                                           int64_t max_age_ms) {
  std::vector<ListKind> replaced;
  auto merge = [&](ListKind kind, auto& list, const auto& old) {
    if (list.state != ListState::kFailed || old.state == ListState::kFailed) return;
    const int64_t listed_at = old.kept ? old.kept->listed_at_ms : last_good_fetched_at_ms;
    if (now_ms - listed_at >= max_age_ms) return;  // too old to be served as data
    Error why = list.error.value_or(Error(ErrorCode::kUnknown, "listing failed"));
    list = old;
    list.kept = KeptList{listed_at, std::move(why)};
    replaced.push_back(kind);
  };
  merge(ListKind::kTools, fresh->tools, last_good.tools);
  merge(ListKind::kResources, fresh->resources, last_good.resources);
  merge(ListKind::kResourceTemplates, fresh->resource_templates, last_good.resource_templates);
  merge(ListKind::kPrompts, fresh->prompts, last_good.prompts);
  if (!replaced.empty()) {
    fresh->cache = CacheHints{};
    for_each_list(*fresh, [&](ListKind, const auto& list) { combine(&fresh->cache, list.cache); });
  }
  return replaced;
}

Status fit_kept_lists(Manifest* manifest, std::size_t max_bytes) {
  for (;;) {
    Result<EncodedManifest> encoded = encode_manifest(*manifest);
    if (!encoded.ok()) return encoded.error();
    if (encoded->bytes.size() <= max_bytes) return Status::Ok();
    std::size_t over = encoded->bytes.size() - max_bytes;
    bool cut = false;
    // Each dropped entry frees at least its own canonical bytes and a comma.
    auto drop = [&](ListKind kind, auto& list) {
      while (over > 0 && list.kept && !list.items.empty()) {
        Result<std::string> bytes = canonical_json(to_json(list.items.back()));
        const std::size_t freed = (bytes.ok() ? bytes->size() : 0) + 1;
        list.items.pop_back();
        if (!list.hashes.empty()) list.hashes.pop_back();
        manifest->truncation.dropped[static_cast<int>(kind)]++;
        manifest->truncated = true;
        over -= std::min(over, freed);
        cut = true;
      }
    };
    drop(ListKind::kPrompts, manifest->prompts);
    drop(ListKind::kResourceTemplates, manifest->resource_templates);
    drop(ListKind::kResources, manifest->resources);
    drop(ListKind::kTools, manifest->tools);
    if (!cut) {
      return Error(ErrorCode::kTooLarge, "the manifest exceeds its bound of " +
                                             std::to_string(max_bytes) +
                                             " bytes even without the kept lists' entries");
    }
  }
}

}  // namespace quiver
