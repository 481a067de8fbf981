#include "shared/manifest.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <utility>

#include "shared/canonical_json.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {
namespace {

constexpr std::size_t kIssueKeyMaxBytes = 256;
// Room kept while sizing the description cut for what the truncation record gains afterwards
// ("description_max_bytes", more digits in its counts).
constexpr std::size_t kTruncationReserve = 64;
constexpr const char kEllipsis[] = "\xE2\x80\xA6";  // U+2026
constexpr std::size_t kEllipsisBytes = 3;
constexpr std::size_t kHashChars = 50;  // "sha256-" + 43

constexpr ListKind kAllKinds[] = {ListKind::kTools, ListKind::kResources,
                                  ListKind::kResourceTemplates, ListKind::kPrompts};

// ---- Peer field reading ----

// Reads the MCP fields of one definition, tolerating wrong-typed optional fields (dropped and
// reported) and treating null as absent.
class FieldReader {
 public:
  FieldReader(const Json& object, std::vector<std::string>* problems)
      : object_(object), problems_(problems) {}

  std::optional<std::string> string(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    wrong(key, "a string");
    return std::nullopt;
  }
  std::optional<Json> object(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_object()) return *v;
    wrong(key, "an object");
    return std::nullopt;
  }
  std::optional<Json> array(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_array()) return *v;
    wrong(key, "an array");
    return std::nullopt;
  }
  std::optional<bool> boolean(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_boolean()) return v->get<bool>();
    wrong(key, "a boolean");
    return std::nullopt;
  }
  // A byte count: a non-negative integer (1024.0 counts; it is the same JSON number).
  std::optional<int64_t> count(const char* key) {
    const Json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned() && v->get<uint64_t>() <= uint64_t{INT64_MAX}) {
      return static_cast<int64_t>(v->get<uint64_t>());
    }
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return v->get<int64_t>();
    if (v->is_number_float() || json_number_literal_text(*v)) {
      double d = *json_number(*v);
      if (d >= 0 && d <= 9007199254740992.0 && d == static_cast<double>(static_cast<int64_t>(d))) {
        return static_cast<int64_t>(d);
      }
    }
    wrong(key, "a non-negative integer");
    return std::nullopt;
  }
  // Every field the definition type does not name, verbatim.
  Json extra(std::initializer_list<const char*> known) const {
    Json out = Json::object();
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool is_known = false;
      for (const char* k : known) is_known = is_known || it.key() == k;
      if (!is_known) out[it.key()] = it.value();
    }
    return out;
  }

 private:
  const Json* get(const char* key) const {
    const Json* v = json_field(object_, key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  void wrong(const char* key, const char* expected) {
    if (problems_ != nullptr) {
      problems_->push_back(std::string("field '") + key + "' is not " + expected +
                           "; field dropped");
    }
  }

  const Json& object_;
  std::vector<std::string>* problems_;
};

Error invalid_definition(const std::string& what) { return Error(ErrorCode::kInvalidReply, what); }

// A required string field: present and a string (non-empty when `non_empty`).
std::optional<std::string> required_string(const Json& item, const char* key, bool non_empty) {
  const Json* v = json_field(item, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  std::string s = v->get<std::string>();
  if (non_empty && s.empty()) return std::nullopt;
  return s;
}

Error missing(const char* key, bool non_empty) {
  return invalid_definition(std::string("'") + key + "' is missing" + (non_empty ? ", empty" : "") +
                            " or not a string");
}

void put(Json& j, const char* key, const std::optional<std::string>& v) {
  if (v) j[key] = *v;
}
void put(Json& j, const char* key, const std::optional<Json>& v) {
  if (v) j[key] = *v;
}
Json base(const Json& extra) { return extra.is_object() ? extra : Json::object(); }

// A prompt argument, tolerated like a definition: without a string name it is dropped, a
// wrong-typed optional field is dropped and reported with the argument's position.
Result<PromptArgument> prompt_argument_from_json(const Json& item, std::size_t index,
                                                 std::vector<std::string>* problems) {
  const std::string where = "argument " + std::to_string(index) + ": ";
  if (!item.is_object()) return invalid_definition(where + "not an object");
  std::optional<std::string> name = required_string(item, "name", false);
  if (!name) return invalid_definition(where + missing("name", false).message);
  std::vector<std::string> own;
  FieldReader r(item, &own);
  PromptArgument a;
  a.name = std::move(*name);
  a.title = r.string("title");
  a.description = r.string("description");
  a.required = r.boolean("required");
  a.extra = r.extra({"name", "title", "description", "required"});
  if (problems != nullptr) {
    for (std::string& p : own) problems->push_back(where + p);
  }
  return a;
}

// ---- Small codecs ----

std::string sanitized(std::string_view text, std::size_t max_bytes) {
  std::string out(text.substr(0, std::min(text.size(), max_bytes)));
  // Cut on a code point boundary, then make any invalid byte visible and harmless.
  for (std::size_t bad = find_invalid_utf8(out); bad != std::string::npos;
       bad = find_invalid_utf8(out)) {
    if (out.size() - bad < 4 && out.size() == max_bytes) {
      out.resize(bad);  // a sequence cut by the length limit
    } else {
      out[bad] = '?';
    }
  }
  return out;
}

Json cache_to_json(const CacheHints& hints) {
  Json j = Json::object();
  if (hints.ttl_ms) j["ttl_ms"] = *hints.ttl_ms;
  if (hints.cache_scope) j["scope"] = *hints.cache_scope;
  return j;
}

// Peer hints made safe: a negative ttl is 0, an unknown scope is treated as private (it never
// leaves its principal by mistake).
CacheHints normalized(const CacheHints& hints) {
  CacheHints out;
  if (hints.ttl_ms) out.ttl_ms = std::max<int64_t>(0, *hints.ttl_ms);
  if (hints.cache_scope) out.cache_scope = *hints.cache_scope == "public" ? "public" : "private";
  return out;
}

void combine(CacheHints* into, const CacheHints& hints) {
  if (hints.ttl_ms && (!into->ttl_ms || *hints.ttl_ms < *into->ttl_ms)) into->ttl_ms = hints.ttl_ms;
  if (hints.cache_scope && into->cache_scope != std::string("private")) {
    into->cache_scope = hints.cache_scope;
  }
}

Json error_to_json(const Error& e) {
  return Json{{"code", error_code_name(e.code)}, {"message", e.message}};
}

// ---- Generic access to the four lists ----

template <typename F>
void for_each_list(Manifest& m, F&& f) {
  f(ListKind::kTools, m.tools);
  f(ListKind::kResources, m.resources);
  f(ListKind::kResourceTemplates, m.resource_templates);
  f(ListKind::kPrompts, m.prompts);
}
template <typename F>
void for_each_list(const Manifest& m, F&& f) {
  f(ListKind::kTools, m.tools);
  f(ListKind::kResources, m.resources);
  f(ListKind::kResourceTemplates, m.resource_templates);
  f(ListKind::kPrompts, m.prompts);
}

Result<Tool> from_json_as(const Json& j, std::vector<std::string>* p, const Tool*) {
  return tool_from_json(j, p);
}
Result<Resource> from_json_as(const Json& j, std::vector<std::string>* p, const Resource*) {
  return resource_from_json(j, p);
}
Result<ResourceTemplate> from_json_as(const Json& j, std::vector<std::string>* p,
                                      const ResourceTemplate*) {
  return resource_template_from_json(j, p);
}
Result<Prompt> from_json_as(const Json& j, std::vector<std::string>* p, const Prompt*) {
  return prompt_from_json(j, p);
}

// The field holding the key of a raw definition of `kind`.
const char* key_field(ListKind kind) {
  switch (kind) {
    case ListKind::kResources:
      return "uri";
    case ListKind::kResourceTemplates:
      return "uriTemplate";
    default:
      return "name";
  }
}

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
    if (const Json* k = json_field(item, key_field(kind)); k != nullptr && k->is_string()) {
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

// ---- Strict reading of our own records ----

Error bad(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "manifest " + where + ": " + what);
}

Status only_keys(const Json& object, const std::string& where,
                 std::initializer_list<const char*> allowed) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : allowed) ok = ok || it.key() == k;
    if (!ok) return bad(where, "unknown field '" + sanitized(it.key(), 64) + "'");
  }
  return Status::Ok();
}

Result<CacheHints> cache_from_json(const Json* j, const std::string& where) {
  if (j == nullptr || !j->is_object()) return bad(where, "'cache' is not an object");
  Status st = only_keys(*j, where + ".cache", {"ttl_ms", "scope"});
  if (!st.ok()) return st.error();
  CacheHints hints;
  if (const Json* t = json_field(*j, "ttl_ms")) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0) {
      return bad(where, "'cache.ttl_ms' is not a non-negative integer");
    }
    hints.ttl_ms = t->get<int64_t>();
  }
  if (const Json* s = json_field(*j, "scope")) {
    if (!s->is_string() || (*s != "public" && *s != "private")) {
      return bad(where, "'cache.scope' is not \"public\" or \"private\"");
    }
    hints.cache_scope = s->get<std::string>();
  }
  return hints;
}

bool is_hash(const Json& j) {
  if (!j.is_string()) return false;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.size() != kHashChars || s.compare(0, 7, "sha256-") != 0) return false;
  std::string raw;
  return base64url_decode(std::string_view(s).substr(7), &raw) && raw.size() == 32;
}

std::optional<int64_t> non_negative(const Json& object, const char* key) {
  std::optional<int64_t> v = json_int(object, key);
  if (v && *v < 0) return std::nullopt;
  return v;
}

template <typename T>
Status list_from_json(const Json& manifest, ListKind kind, ManifestList<T>* list) {
  const std::string where = list_kind_name(kind);
  const Json* j = json_field(manifest, where.c_str());
  if (j == nullptr || !j->is_object()) return bad(where, "missing or not an object");
  Status st =
      only_keys(*j, where, {"state", "items", "hashes", "error", "cache", "partial_items", "kept"});
  if (!st.ok()) return st;
  std::optional<std::string> state_name = json_string(*j, "state");
  std::optional<ListState> state =
      state_name ? manifest_list_state_from_name(*state_name) : std::nullopt;
  if (!state) return bad(where, "'state' is not \"ok\", \"absent\" or \"failed\"");
  list->state = *state;

  const Json* items = json_field(*j, "items");
  const Json* hashes = json_field(*j, "hashes");
  if (items == nullptr || !items->is_array()) return bad(where, "'items' is not an array");
  if (hashes == nullptr || !hashes->is_object()) return bad(where, "'hashes' is not an object");
  if (*state != ListState::kOk && (!items->empty() || !hashes->empty())) {
    return bad(where, "only an \"ok\" list has items");
  }
  std::set<std::string> keys;
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < items->size(); ++i) {
    problems.clear();
    Result<T> def = from_json_as((*items)[i], &problems, static_cast<const T*>(nullptr));
    if (!def.ok()) return bad(where + "[" + std::to_string(i) + "]", def.error().message);
    if (!problems.empty()) return bad(where + "[" + std::to_string(i) + "]", problems.front());
    const std::string& key = definition_key(*def);
    if (!keys.insert(key).second)
      return bad(where + "[" + std::to_string(i) + "]", "duplicate key");
    const Json* hash = json_field(*hashes, key.c_str());
    if (hash == nullptr || !is_hash(*hash)) {
      return bad(where + "[" + std::to_string(i) + "]", "no valid hash for its key");
    }
    list->hashes.push_back(hash->get<std::string>());
    list->items.push_back(std::move(*def));
  }
  if (hashes->size() != keys.size()) return bad(where, "'hashes' names keys without an item");

  const Json* error = json_field(*j, "error");
  if ((error != nullptr) != (*state == ListState::kFailed)) {
    return bad(where, "'error' is present exactly when the state is \"failed\"");
  }
  if (error != nullptr) {
    if (!error->is_object()) return bad(where, "'error' is not an object");
    st = only_keys(*error, where + ".error", {"code", "message"});
    if (!st.ok()) return st;
    std::optional<std::string> code_name = json_string(*error, "code");
    std::optional<ErrorCode> code = code_name ? error_code_from_name(*code_name) : std::nullopt;
    std::optional<std::string> message = json_string(*error, "message");
    if (!code || !message) return bad(where, "'error' needs a known 'code' and a 'message'");
    list->error = Error(*code, *message);
  }
  Result<CacheHints> cache = cache_from_json(json_field(*j, "cache"), where);
  if (!cache.ok()) return cache.error();
  list->cache = *cache;

  if (json_field(*j, "partial_items") != nullptr) {
    std::optional<int64_t> n = non_negative(*j, "partial_items");
    if (!n || *n == 0 || *state != ListState::kFailed) {
      return bad(where, "'partial_items' is a positive integer, only on a \"failed\" list");
    }
    list->partial_items = *n;
  }
  if (const Json* kept = json_field(*j, "kept")) {
    if (*state == ListState::kFailed || !kept->is_object()) {
      return bad(where, "'kept' is an object, never on a \"failed\" list");
    }
    st = only_keys(*kept, where + ".kept", {"listed_at", "error"});
    if (!st.ok()) return st;
    std::optional<int64_t> at = non_negative(*kept, "listed_at");
    const Json* e = json_field(*kept, "error");
    std::optional<ErrorCode> code;
    std::optional<std::string> message;
    if (e != nullptr && e->is_object() && only_keys(*e, where, {"code", "message"}).ok()) {
      std::optional<std::string> code_name = json_string(*e, "code");
      code = code_name ? error_code_from_name(*code_name) : std::nullopt;
      message = json_string(*e, "message");
    }
    if (!at || !code || !message) {
      return bad(where, "'kept' needs 'listed_at' and an 'error' with a known 'code' and a 'message'");
    }
    list->kept = KeptList{*at, Error(*code, *message)};
  }
  return Status::Ok();
}

std::optional<ListKind> list_kind_from_name(std::string_view name) {
  for (ListKind k : kAllKinds) {
    if (name == list_kind_name(k)) return k;
  }
  return std::nullopt;
}

}  // namespace

// ---- Definitions ----

Result<Tool> tool_from_json(const Json& item, std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> name = required_string(item, "name", true);
  if (!name) return missing("name", true);
  const Json* input = json_field(item, "inputSchema");
  if (input == nullptr || !input->is_object()) {
    return invalid_definition("'inputSchema' is missing or not an object");
  }
  FieldReader r(item, problems);
  Tool t;
  t.name = std::move(*name);
  t.title = r.string("title");
  t.description = r.string("description");
  t.input_schema = *input;
  t.output_schema = r.object("outputSchema");
  t.annotations = r.object("annotations");
  t.execution = r.object("execution");
  t.icons = r.array("icons");
  t.meta = r.object("_meta");
  t.extra = r.extra({"name", "title", "description", "inputSchema", "outputSchema", "annotations",
                     "execution", "icons", "_meta"});
  return t;
}

Json to_json(const Tool& t) {
  Json j = base(t.extra);
  j["name"] = t.name;
  put(j, "title", t.title);
  put(j, "description", t.description);
  j["inputSchema"] = t.input_schema;
  put(j, "outputSchema", t.output_schema);
  put(j, "annotations", t.annotations);
  put(j, "execution", t.execution);
  put(j, "icons", t.icons);
  put(j, "_meta", t.meta);
  return j;
}

Result<Resource> resource_from_json(const Json& item, std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> uri = required_string(item, "uri", true);
  if (!uri) return missing("uri", true);
  std::optional<std::string> name = required_string(item, "name", false);
  if (!name) return missing("name", false);
  FieldReader r(item, problems);
  Resource res;
  res.uri = std::move(*uri);
  res.name = std::move(*name);
  res.title = r.string("title");
  res.description = r.string("description");
  res.mime_type = r.string("mimeType");
  res.size = r.count("size");
  res.annotations = r.object("annotations");
  res.icons = r.array("icons");
  res.meta = r.object("_meta");
  res.extra = r.extra(
      {"uri", "name", "title", "description", "mimeType", "size", "annotations", "icons", "_meta"});
  return res;
}

Json to_json(const Resource& r) {
  Json j = base(r.extra);
  j["uri"] = r.uri;
  j["name"] = r.name;
  put(j, "title", r.title);
  put(j, "description", r.description);
  put(j, "mimeType", r.mime_type);
  if (r.size) j["size"] = *r.size;
  put(j, "annotations", r.annotations);
  put(j, "icons", r.icons);
  put(j, "_meta", r.meta);
  return j;
}

Result<ResourceTemplate> resource_template_from_json(const Json& item,
                                                     std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> uri_template = required_string(item, "uriTemplate", true);
  if (!uri_template) return missing("uriTemplate", true);
  std::optional<std::string> name = required_string(item, "name", false);
  if (!name) return missing("name", false);
  FieldReader r(item, problems);
  ResourceTemplate t;
  t.uri_template = std::move(*uri_template);
  t.name = std::move(*name);
  t.title = r.string("title");
  t.description = r.string("description");
  t.mime_type = r.string("mimeType");
  t.annotations = r.object("annotations");
  t.icons = r.array("icons");
  t.meta = r.object("_meta");
  t.extra = r.extra(
      {"uriTemplate", "name", "title", "description", "mimeType", "annotations", "icons", "_meta"});
  return t;
}

Json to_json(const ResourceTemplate& t) {
  Json j = base(t.extra);
  j["uriTemplate"] = t.uri_template;
  j["name"] = t.name;
  put(j, "title", t.title);
  put(j, "description", t.description);
  put(j, "mimeType", t.mime_type);
  put(j, "annotations", t.annotations);
  put(j, "icons", t.icons);
  put(j, "_meta", t.meta);
  return j;
}

Result<Prompt> prompt_from_json(const Json& item, std::vector<std::string>* problems) {
  if (!item.is_object()) return invalid_definition("not an object");
  std::optional<std::string> name = required_string(item, "name", true);
  if (!name) return missing("name", true);
  FieldReader r(item, problems);
  Prompt p;
  p.name = std::move(*name);
  p.title = r.string("title");
  p.description = r.string("description");
  if (std::optional<Json> args = r.array("arguments")) {
    p.arguments.emplace();
    for (std::size_t i = 0; i < args->size(); ++i) {
      Result<PromptArgument> a = prompt_argument_from_json((*args)[i], i, problems);
      if (a.ok()) {
        p.arguments->push_back(std::move(*a));
      } else if (problems != nullptr) {
        problems->push_back(a.error().message + "; argument dropped");
      }
    }
  }
  p.icons = r.array("icons");
  p.meta = r.object("_meta");
  p.extra = r.extra({"name", "title", "description", "arguments", "icons", "_meta"});
  return p;
}

Json to_json(const PromptArgument& a) {
  Json j = base(a.extra);
  j["name"] = a.name;
  put(j, "title", a.title);
  put(j, "description", a.description);
  if (a.required) j["required"] = *a.required;
  return j;
}

Json to_json(const Prompt& p) {
  Json j = base(p.extra);
  j["name"] = p.name;
  put(j, "title", p.title);
  put(j, "description", p.description);
  if (p.arguments) {
    Json args = Json::array();
    for (const PromptArgument& a : *p.arguments) args.push_back(to_json(a));
    j["arguments"] = std::move(args);
  }
  put(j, "icons", p.icons);
  put(j, "_meta", p.meta);
  return j;
}

// ---- Names and hashes ----

std::optional<ListState> manifest_list_state_from_name(std::string_view name) {
  for (ListState s : {ListState::kOk, ListState::kAbsent, ListState::kFailed}) {
    if (name == list_state_name(s)) return s;
  }
  return std::nullopt;
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (int c = static_cast<int>(ErrorCode::kUnknown); c <= static_cast<int>(ErrorCode::kInternal);
       ++c) {
    if (name == error_code_name(static_cast<ErrorCode>(c))) return static_cast<ErrorCode>(c);
  }
  return std::nullopt;
}

std::string content_hash(std::string_view bytes) {
  Digest256 d = sha256(bytes);
  return "sha256-" +
         base64url_encode(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

Result<std::string> definition_hash(const Json& definition) {
  Result<std::string> bytes = canonical_json(definition);
  if (!bytes.ok()) return bytes.error();
  return content_hash(*bytes);
}

// ---- The manifest ----

Result<Manifest> manifest_from_listing(const Listing& listing, const ManifestLimits& limits) {
  return Builder(listing, limits).build();
}

Json manifest_to_json(const Manifest& m) {
  Json j = Json::object();
  j["format"] = kManifestFormat;
  j["protocol_version"] = m.protocol_version;
  Json server = base(m.server.extra);
  server["name"] = m.server.name;
  server["version"] = m.server.version;
  put(server, "title", m.server.title);
  j["server"] = std::move(server);
  j["capabilities"] = m.capabilities.is_object() ? m.capabilities : Json::object();
  put(j, "instructions", m.instructions);
  for_each_list(m, [&](ListKind kind, const auto& list) {
    Json l = Json::object();
    l["state"] = list_state_name(list.state);
    Json items = Json::array();
    Json hashes = Json::object();
    for (std::size_t i = 0; i < list.items.size(); ++i) {
      items.push_back(to_json(list.items[i]));
      hashes[definition_key(list.items[i])] = i < list.hashes.size() ? list.hashes[i] : "";
    }
    l["items"] = std::move(items);
    l["hashes"] = std::move(hashes);
    if (list.state == ListState::kFailed) {
      l["error"] = error_to_json(list.error.value_or(Error(ErrorCode::kUnknown, "")));
      if (list.partial_items > 0) l["partial_items"] = list.partial_items;
    } else if (list.kept) {
      l["kept"] = Json{{"listed_at", list.kept->listed_at_ms},
                       {"error", error_to_json(list.kept->error)}};
    }
    l["cache"] = cache_to_json(list.cache);
    j[list_kind_name(kind)] = std::move(l);
  });
  j["cache"] = cache_to_json(m.cache);
  j["truncated"] = m.truncated;
  if (m.truncated) {
    Json t = Json::object();
    t["descriptions"] = m.truncation.descriptions;
    if (m.truncation.description_max_bytes) {
      t["description_max_bytes"] = *m.truncation.description_max_bytes;
    }
    t["instructions"] = m.truncation.instructions;
    Json dropped = Json::object();
    for (ListKind k : kAllKinds)
      dropped[list_kind_name(k)] = m.truncation.dropped[static_cast<int>(k)];
    t["dropped"] = std::move(dropped);
    j["truncation"] = std::move(t);
  }
  Json issues = Json::array();
  for (const ManifestIssue& i : m.issues) {
    issues.push_back(Json{{"list", list_kind_name(i.list)},
                          {"index", i.index},
                          {"key", i.key},
                          {"problem", i.problem}});
  }
  j["issues"] = std::move(issues);
  j["issues_omitted"] = m.issues_omitted;
  return j;
}

Result<Manifest> manifest_from_json(const Json& j) {
  if (!j.is_object()) return bad("", "not an object");
  Status st = only_keys(j, "",
                        {"format", "protocol_version", "server", "capabilities", "instructions",
                         "tools", "resources", "resource_templates", "prompts", "cache",
                         "truncated", "truncation", "issues", "issues_omitted"});
  if (!st.ok()) return st.error();
  if (json_string(j, "format") != std::optional<std::string>(kManifestFormat)) {
    return bad("format", std::string("is not \"") + kManifestFormat + "\"");
  }
  Manifest m;
  std::optional<std::string> protocol = json_string(j, "protocol_version");
  if (!protocol) return bad("protocol_version", "is not a string");
  m.protocol_version = std::move(*protocol);

  const Json* server = json_field(j, "server");
  if (server == nullptr || !server->is_object()) return bad("server", "is not an object");
  std::optional<std::string> name = json_string(*server, "name");
  std::optional<std::string> version = json_string(*server, "version");
  if (!name || !version) return bad("server", "needs a string 'name' and 'version'");
  m.server.name = std::move(*name);
  m.server.version = std::move(*version);
  if (const Json* title = json_field(*server, "title")) {
    if (!title->is_string()) return bad("server", "'title' is not a string");
    m.server.title = title->get<std::string>();
  }
  m.server.extra = FieldReader(*server, nullptr).extra({"name", "version", "title"});

  const Json* caps = json_field(j, "capabilities");
  if (caps == nullptr || !caps->is_object()) return bad("capabilities", "is not an object");
  m.capabilities = *caps;
  if (const Json* instr = json_field(j, "instructions")) {
    if (!instr->is_string()) return bad("instructions", "is not a string");
    m.instructions = instr->get<std::string>();
  }

  st = list_from_json(j, ListKind::kTools, &m.tools);
  if (st.ok()) st = list_from_json(j, ListKind::kResources, &m.resources);
  if (st.ok()) st = list_from_json(j, ListKind::kResourceTemplates, &m.resource_templates);
  if (st.ok()) st = list_from_json(j, ListKind::kPrompts, &m.prompts);
  if (!st.ok()) return st.error();

  Result<CacheHints> cache = cache_from_json(json_field(j, "cache"), "");
  if (!cache.ok()) return cache.error();
  m.cache = *cache;

  std::optional<bool> truncated = json_bool(j, "truncated");
  if (!truncated) return bad("truncated", "is not a boolean");
  m.truncated = *truncated;
  const Json* t = json_field(j, "truncation");
  if ((t != nullptr) != m.truncated) {
    return bad("truncation", "is present exactly when 'truncated' is true");
  }
  if (t != nullptr) {
    if (!t->is_object()) return bad("truncation", "is not an object");
    st = only_keys(*t, "truncation",
                   {"descriptions", "description_max_bytes", "instructions", "dropped"});
    if (!st.ok()) return st.error();
    std::optional<int64_t> descriptions = non_negative(*t, "descriptions");
    std::optional<bool> instructions = json_bool(*t, "instructions");
    const Json* dropped = json_field(*t, "dropped");
    if (!descriptions || !instructions || dropped == nullptr || !dropped->is_object()) {
      return bad("truncation", "needs 'descriptions', 'instructions' and 'dropped'");
    }
    m.truncation.descriptions = *descriptions;
    m.truncation.instructions = *instructions;
    if (json_field(*t, "description_max_bytes") != nullptr) {
      m.truncation.description_max_bytes = non_negative(*t, "description_max_bytes");
      if (!m.truncation.description_max_bytes) {
        return bad("truncation", "'description_max_bytes' is not a non-negative integer");
      }
    }
    st = only_keys(*dropped, "truncation.dropped",
                   {"tools", "resources", "resource_templates", "prompts"});
    if (!st.ok()) return st.error();
    for (ListKind k : kAllKinds) {
      std::optional<int64_t> n = non_negative(*dropped, list_kind_name(k));
      if (!n) return bad("truncation.dropped", std::string("needs '") + list_kind_name(k) + "'");
      m.truncation.dropped[static_cast<int>(k)] = *n;
    }
  }

  const Json* issues = json_field(j, "issues");
  if (issues == nullptr || !issues->is_array()) return bad("issues", "is not an array");
  for (const Json& i : *issues) {
    if (!i.is_object()) return bad("issues", "holds a non-object");
    st = only_keys(i, "issues", {"list", "index", "key", "problem"});
    if (!st.ok()) return st.error();
    std::optional<std::string> list = json_string(i, "list");
    std::optional<ListKind> kind = list ? list_kind_from_name(*list) : std::nullopt;
    std::optional<int64_t> index = non_negative(i, "index");
    std::optional<std::string> key = json_string(i, "key");
    std::optional<std::string> problem = json_string(i, "problem");
    if (!kind || !index || !key || !problem) {
      return bad("issues", "an issue needs 'list', 'index', 'key' and 'problem'");
    }
    m.issues.push_back(ManifestIssue{*kind, *index, std::move(*key), std::move(*problem)});
  }
  std::optional<int64_t> omitted = non_negative(j, "issues_omitted");
  if (!omitted) return bad("issues_omitted", "is not a non-negative integer");
  m.issues_omitted = *omitted;
  return m;
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

std::vector<ListKind> incomplete_lists(const Manifest& manifest) {
  std::vector<ListKind> out;
  for_each_list(manifest, [&](ListKind kind, const auto& list) {
    if (list.state == ListState::kFailed || list.kept) out.push_back(kind);
  });
  return out;
}

std::string list_kinds_text(const std::vector<ListKind>& kinds) {
  std::string out;
  for (ListKind k : kinds) {
    if (!out.empty()) out += ',';
    out += list_kind_name(k);
  }
  return out;
}

std::optional<std::vector<ListKind>> list_kinds_from_text(std::string_view text) {
  std::vector<ListKind> out;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::optional<ListKind> k = list_kind_from_name(text.substr(0, comma));
    if (!k) return std::nullopt;
    out.push_back(*k);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}

Result<EncodedManifest> encode_manifest(const Manifest& manifest) {
  Result<std::string> bytes = canonical_json(manifest_to_json(manifest));
  if (!bytes.ok()) return bytes.error();
  EncodedManifest out;
  out.etag = content_hash(*bytes);
  out.bytes = std::move(*bytes);
  return out;
}

Result<Manifest> decode_manifest(std::string_view bytes) {
  JsonParseOptions options;
  options.keep_number_literals = true;  // definitions keep their numbers as written
  Result<Json> json = parse_json(bytes, options);
  if (!json.ok()) return json.error();
  return manifest_from_json(*json);
}

}  // namespace quiver
