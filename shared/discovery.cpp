#include "shared/discovery.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <utility>

#include "shared/canonical_json.h"
#include "shared/enum_names.h"
#include "shared/fingerprint.h"
#include "shared/json_splice.h"
#include "shared/numbers.h"
#include "shared/render_cache.h"
#include "shared/sha256.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

const std::string* field(const HashFields& fields, std::string_view name) {
  auto it = fields.find(name);
  return it == fields.end() ? nullptr : &it->second;
}

// The JSON field names a manifest may give each kind (the manifest model writes snake_case
// `resource_templates`; an MCP-shaped document says `resourceTemplates`).
std::vector<const char*> manifest_fields_for(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return {"tools"};
    case ListKind::kResources:
      return {"resources"};
    case ListKind::kResourceTemplates:
      return {"resource_templates", "resourceTemplates"};
    case ListKind::kPrompts:
      return {"prompts"};
  }
  return {};
}

Json filter_items(const Json& items, ListKind kind, const DisabledOverlay& disabled) {
  Json out = Json::array();
  const CapabilityType type = capability_type_for(kind);
  for (const Json& item : items) {
    std::optional<std::string> key = capability_key(kind, item);
    if (key && !visible(disabled, type, *key)) continue;
    out.push_back(item);
  }
  return out;
}

std::string digest_tag(std::string_view bytes) {
  Digest256 d = sha256(bytes);
  return "sha256-" +
         base64url_encode(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

std::string revalidation_reason(const Classification& c) {
  switch (c.state) {
    case Freshness::kStale:
      return "stale";
    case Freshness::kExpired:
      return "expired";
    case Freshness::kMiss:
      return c.miss_reason == MissReason::kConfigChanged ? "config_changed" : "miss";
    case Freshness::kFresh:
      break;
  }
  return "";
}

// Everything the renderers need to know about one shown entry.
struct EntryView {
  const GrantedConnection* conn = nullptr;
  EntryStatus status = EntryStatus::kPending;
  std::optional<Principal> principal;
  std::optional<Classification> classification;  // when the entry could be classified
  std::optional<CacheEntryMeta> meta;
  std::optional<RefreshError> shown_error;  // the `error` object
  std::string pending_reason;               // miss reason for pending / error-by-miss
  std::optional<std::string> revalidate;    // reason, when one is to be queued
  bool refresh_in_progress = false;
  bool servable = false;
  // Servable: the stored manifest, parsed (and with the disabled capabilities hidden when
  // `filtered`), unless `fragment` came from the render cache (then it is null: not parsed).
  Json manifest;
  bool filtered = false;
  std::shared_ptr<const RenderedFragment> fragment;  // servable: the payload, once rendered
  std::string cache_key;                             // servable, with a render cache
  std::string content_id;  // servable or expired: the manifest's content hash
};

// The state table: what each classification becomes. Entries that cannot be classified
// (unreadable, no principal) are decided in `evaluate` before this.
EntryStatus status_of(const Classification& c) {
  switch (c.state) {
    case Freshness::kFresh:
      return EntryStatus::kFresh;
    case Freshness::kStale:
      return EntryStatus::kStale;
    case Freshness::kExpired:
      return EntryStatus::kExpired;
    case Freshness::kMiss:
      return c.last_refresh_failed ? EntryStatus::kError : EntryStatus::kPending;
  }
  return EntryStatus::kPending;
}

void queue_unless_leased(EntryView* v, std::string reason) {
  if (v->conn->lease_held) {
    v->refresh_in_progress = true;
  } else {
    v->revalidate = std::move(reason);
  }
}

// What the caller of `evaluate` needs of a servable manifest: the rendered payload (answers; the
// render cache may supply it), the filtered manifest itself (search), or a host's own fragment
// (kFragment, under the FragmentRenderer's view: the render cache may supply it, else the
// filtered manifest to render it from).
enum class Need { kPayload = 0, kJson, kFragment };

EntryView evaluate(const GrantedConnection& conn, const Principal& member,
                   const FreshnessPolicy& policy, int64_t now_ms, const RenderOptions& options,
                   Need need, std::string_view fragment_view = {}) {
  EntryView v;
  v.conn = &conn;
  const ConnectionRecord& record = *conn.record;

  Result<Principal> principal = applicable_principal(record, member);
  if (!principal.ok()) {
    v.status = EntryStatus::kError;
    v.shown_error = RefreshError{error_code_name(ErrorCode::kInvalidArgument),
                                 "the connection record has an unknown credential_mode", 0};
    return v;
  }
  v.principal = *principal;
  // The reader derived the principal on its own (a script must): it has to agree, or the data
  // may be somebody else's. Never served, never queued.
  if (!conn.principal.has_value() || *conn.principal != *principal) {
    v.status = EntryStatus::kError;
    v.shown_error = RefreshError{error_code_name(ErrorCode::kInternal),
                                 "the store read this connection under another principal", 0};
    return v;
  }

  auto unreadable = [&](const std::string& why) {
    v.status = EntryStatus::kError;
    v.servable = false;
    v.manifest = Json();
    v.shown_error = RefreshError{error_code_name(ErrorCode::kInvalidReply),
                                 "the cached manifest is unreadable: " + why, 0};
    queue_unless_leased(&v, "corrupt");
  };

  Result<std::optional<CacheEntryMeta>> meta = cache_entry_meta(conn.manifest);
  if (!meta.ok()) {
    unreadable(meta.error().message);
    return v;
  }
  v.meta = *meta;
  const Classification c = classify(*meta, policy, record.config_hash, now_ms);
  v.classification = c;
  v.status = status_of(c);
  if (c.state == Freshness::kMiss) v.pending_reason = miss_reason_name(c.miss_reason);
  if (c.last_refresh_failed && v.meta && v.meta->last_error) v.shown_error = v.meta->last_error;
  if (v.shown_error && v.shown_error->code == error_code_name(ErrorCode::kAuthorizationRequired)) {
    // Someone must authorize (an OAuth connection without a usable authorization): a listing
    // would fail the same way, so nothing is queued; completing the authorization lists at once.
    // The last good data, if any, is still served below (as the classification says).
    v.status = EntryStatus::kAuthorizationRequired;
  } else if (c.revalidate) {
    queue_unless_leased(&v, revalidation_reason(c));
  }

  if (c.state != Freshness::kMiss) {
    // Not a miss: the entry is there (cache_entry_meta gave a meta).
    const ManifestEntry& entry = *conn.manifest;
    v.content_id = (entry.etag && !entry.etag->empty()) ? *entry.etag : digest_tag(entry.text);
  }
  if (c.servable && conn.manifest->body_missing()) {
    // The record names a body the store no longer holds (evicted, lost) or the read could not
    // fetch: a store failure of this entry, never an empty manifest. A refresh writes it again.
    v.status = EntryStatus::kError;
    v.servable = false;
    v.shown_error = RefreshError{error_code_name(ErrorCode::kStoreUnavailable),
                                 "the cached manifest's body is missing from the store", 0};
    queue_unless_leased(&v, "body_missing");
    return v;
  }
  if (c.servable) {
    const std::string& text = conn.manifest->text;
    if (need != Need::kJson && options.cache != nullptr) {
      // A hit means this exact text parsed into an object before: servable, nothing to parse.
      v.cache_key = render_cache_key(
          conn.id, *v.principal, v.content_id, conn.disabled,
          need == Need::kFragment ? fragment_view : discovery_view_name(options.view),
          options.max_manifest_bytes);
      v.fragment = options.cache->find(v.cache_key, text, conn.disabled);
      if (v.fragment != nullptr) {
        v.servable = true;
        return v;
      }
    }
    JsonParseOptions parse_options;
    parse_options.max_bytes = options.max_manifest_bytes;
    parse_options.keep_number_literals = true;  // definitions keep their numbers as written
    Result<Json> parsed = parse_json(text, parse_options);
    if (!parsed.ok()) {
      unreadable(parsed.error().message);
      return v;
    }
    if (!parsed->is_object()) {
      unreadable("not a JSON object");
      return v;
    }
    v.servable = true;
    v.manifest = std::move(*parsed);
    if (need != Need::kPayload) {
      v.manifest = hide_disabled(std::move(v.manifest), conn.disabled);
      v.filtered = true;
    }
  }
  return v;
}

std::vector<EntryView> evaluate_all(const DiscoverySnapshot& snapshot,
                                    const FreshnessPolicy& policy, int64_t now_ms,
                                    const RenderOptions& options, Need need,
                                    std::string_view fragment_view = {}) {
  std::vector<EntryView> out;
  std::set<std::string_view> seen;
  for (const GrantedConnection& conn : snapshot.connections) {
    if (!conn.record.has_value()) continue;  // removed: never shown
    if (!validate_connection_id(conn.id).ok()) continue;
    if (!seen.insert(conn.id).second) continue;
    out.push_back(evaluate(conn, snapshot.member, policy, now_ms, options, need, fragment_view));
  }
  std::sort(out.begin(), out.end(),
            [](const EntryView& a, const EntryView& b) { return a.conn->id < b.conn->id; });
  return out;
}

// The entry's clock-free metadata: what the validator covers.
Json entry_meta_json(const EntryView& v) {
  const ConnectionRecord& record = *v.conn->record;
  Json m = Json::object();
  m["id"] = v.conn->id;
  m["name"] = record.name;
  m["transport"] = record.transport;
  m["credential_mode"] = credential_mode_name(record.credential_mode);
  if (v.principal) m["principal"] = v.principal->str();
  m["status"] = entry_status_name(v.status);
  if (!v.pending_reason.empty() &&
      (v.status == EntryStatus::kPending || v.status == EntryStatus::kError)) {
    m["pending_reason"] = v.pending_reason;
  }
  const Classification* c = v.classification ? &*v.classification : nullptr;
  if (c && c->state != Freshness::kMiss && v.status != EntryStatus::kError) {
    m["fetched_at"] = v.meta->fetched_at_ms;
    m["fresh_until"] = c->fresh_until_ms;
    m["expires_at"] = c->expires_at_ms;
    const ManifestEntry& entry = *v.conn->manifest;  // not a miss: the entry is there
    m["truncated"] = entry.truncated;
    if (entry.etag) m["etag"] = *entry.etag;
    if (v.meta->cache_scope != CacheScope::kUnspecified) {
      m["cache_scope"] = cache_scope_name(v.meta->cache_scope);
    }
  }
  if (v.status == EntryStatus::kAuthorizationRequired) m["authorize"] = authorize_path(v.conn->id);
  if (v.shown_error) {
    Json e = Json::object();
    e["code"] = v.shown_error->code;
    e["message"] = v.shown_error->message;
    if (v.shown_error->at_ms != 0) e["at"] = v.shown_error->at_ms;
    m["error"] = std::move(e);
  }
  if (v.refresh_in_progress) {
    m["refresh"] = "in_progress";
  } else if (v.revalidate) {
    m["refresh"] = "requested";
  }
  return m;
}

// What the validator adds to the metadata: the content the body carries besides it.
Json entry_validator(const EntryView& v, Json meta) {
  meta["content"] = v.servable ? v.content_id : "";
  Json disabled = Json::array();
  if (v.servable) {
    for (const std::string& d : v.conn->disabled) disabled.push_back(d);
  }
  meta["disabled"] = std::move(disabled);
  return meta;
}

// The manifest's list object of `kind` (the state-carrying form), or null.
const Json* list_object(const Json& manifest, ListKind kind) {
  if (!manifest.is_object()) return nullptr;
  for (const char* name : manifest_fields_for(kind)) {
    const Json* list = json_field(manifest, name);
    if (list != nullptr) return list->is_object() ? list : nullptr;
  }
  return nullptr;
}

// A list that could not be loaded, as the mcp view shows it: {"error": {"code", "message"}}
// (plus `partial_items` when pages arrived before the failure). Never an empty result (ADR-004).
std::optional<Json> failed_list_part(const Json& manifest, ListKind kind) {
  const Json* list = list_object(manifest, kind);
  if (list == nullptr || json_string(*list, "state") != std::optional<std::string>("failed")) {
    return std::nullopt;
  }
  const Json* e = json_field(*list, "error");
  std::optional<std::string> code = e ? json_string(*e, "code") : std::nullopt;
  std::optional<std::string> message = e ? json_string(*e, "message") : std::nullopt;
  Json err = Json::object();
  err["code"] = code.value_or(error_code_name(ErrorCode::kUnknown));
  err["message"] = std::string(list_method(kind)) +
                   " could not be loaded: " + message.value_or("no reason recorded");
  Json part = Json::object();
  part["error"] = std::move(err);
  if (const Json* n = json_field(*list, "partial_items"); n != nullptr && n->is_number_integer()) {
    part["partial_items"] = *n;
  }
  return part;
}

Json mcp_view(const Json& manifest, int64_t ttl_ms) {
  Json out = Json::object();
  for (int i = 0; i < kListKindCount; ++i) {
    auto kind = static_cast<ListKind>(i);
    std::optional<std::vector<Json>> items = listed_items(manifest, kind);
    if (!items) {
      if (std::optional<Json> failed = failed_list_part(manifest, kind)) {
        out[list_method(kind)] = std::move(*failed);
      }
      continue;
    }
    Json result = Json::object();
    result[list_result_field(kind)] = std::move(*items);
    result["ttlMs"] = ttl_ms;
    result["cacheScope"] = "private";
    // The last good list, kept because the latest listing of it failed: say so.
    if (const Json* list = list_object(manifest, kind)) {
      if (const Json* kept = json_field(*list, "kept")) {
        result["_meta"] = Json::object({{"quiver/kept", *kept}});
      }
    }
    out[list_method(kind)] = std::move(result);
  }
  return out;
}

// The payload of a servable entry in `view`, cut where the per-request ttlMs goes (see
// RenderedFragment): the manifest view is the filtered manifest's text; the mcp view is
// mcp_view()'s text with every `ttlMs` value left out.
std::shared_ptr<const RenderedFragment> render_fragment(const Json& filtered, DiscoveryView view) {
  auto fragment = std::make_shared<RenderedFragment>();
  if (view != DiscoveryView::kMcp) {
    fragment->parts.push_back(json_text(filtered));
    return fragment;
  }
  const Json mcp = mcp_view(filtered, 0);
  std::vector<std::string>& parts = fragment->parts;
  parts.emplace_back("{");
  bool first = true;
  for (auto method = mcp.begin(); method != mcp.end(); ++method) {
    if (!first) parts.back() += ',';
    first = false;
    parts.back() += json_text(Json(method.key()));
    parts.back() += ":{";
    bool first_field = true;
    for (auto f = method->begin(); f != method->end(); ++f) {
      if (!first_field) parts.back() += ',';
      first_field = false;
      parts.back() += json_text(Json(f.key()));
      parts.back() += ':';
      if (f.key() == "ttlMs") {
        parts.emplace_back();  // the ttl goes between this part and the next
      } else {
        parts.back() += json_text(f.value());
      }
    }
    parts.back() += '}';
  }
  parts.back() += '}';
  return fragment;
}

// The payload of a servable entry: from the render cache, or rendered now (and then cached).
const RenderedFragment& payload(EntryView& v, const RenderOptions& options) {
  if (v.fragment == nullptr) {
    if (!v.filtered) v.manifest = hide_disabled(std::move(v.manifest), v.conn->disabled);
    v.filtered = true;
    v.fragment = render_fragment(v.manifest, options.view);
    if (options.cache != nullptr && !v.cache_key.empty()) {
      options.cache->insert(v.cache_key, v.conn->manifest->text, v.conn->disabled, v.fragment);
    }
  }
  return *v.fragment;
}

// The clock fields an entry's body shows beside its metadata.
void add_age(Json& meta, const EntryView& v) {
  const Classification* c = v.classification ? &*v.classification : nullptr;
  if (c && c->state != Freshness::kMiss && v.status != EntryStatus::kError) {
    meta["age_ms"] = c->age_ms;
  }
}

// Timestamps come from peers: the difference saturates instead of overflowing (as classify's).
int64_t clock_sub(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (b < 0 && a > kMax + b) return kMax;
  if (b > 0 && a < kMin + b) return kMin;
  return a - b;
}

// The value of a clock hole at `now_ms` (ClockHole): what the renderer writes there at that time.
int64_t hole_value(const ClockHole& hole, int64_t now_ms) {
  return hole.kind == ClockHole::Kind::kAge ? std::max<int64_t>(0, clock_sub(now_ms, hole.base))
                                            : std::max<int64_t>(0, clock_sub(hole.base, now_ms));
}

// The clock holes of a body being rendered (RenderOptions::record_clock). Each is found by
// position where the renderer wrote it and its bytes are checked: a hole not where it was
// expected leaves `ok` false and nothing is recorded.
struct ClockRecorder {
  std::vector<ClockHole> holes;
  bool ok = true;
  void add(const std::string& body, std::size_t offset, ClockHole::Kind kind, int64_t base,
           int64_t now_ms) {
    ClockHole hole{offset, 0, kind, base};
    const std::string digits = std::to_string(hole_value(hole, now_ms));
    hole.length = digits.size();
    const std::size_t end = offset + digits.size();
    if (end >= body.size() || body.compare(offset, digits.size(), digits) != 0 ||
        (body[end] != ',' && body[end] != '}') ||
        (!holes.empty() && holes.back().offset + holes.back().length > offset)) {
      ok = false;
      return;
    }
    holes.push_back(hole);
  }
};

// The entry's text as the body shows it: metadata, clock fields, payload.
void append_entry_body(std::string& out, EntryView& v, Json meta, int64_t now_ms,
                       const RenderOptions& options, ClockRecorder* clock = nullptr) {
  const Classification* c = v.classification ? &*v.classification : nullptr;
  add_age(meta, v);
  const std::size_t start = out.size();
  // nlohmann's objects keep their keys sorted: `age_ms` is the entry's first (checked).
  auto record_age = [&]() {
    if (clock == nullptr || !meta.contains("age_ms")) return;
    static constexpr std::string_view kAgeKey = "{\"age_ms\":";
    if (out.compare(start, kAgeKey.size(), kAgeKey) != 0) {
      clock->ok = false;
      return;
    }
    clock->add(out, start + kAgeKey.size(), ClockHole::Kind::kAge, v.meta->fetched_at_ms, now_ms);
  };
  if (!v.servable) {
    out += json_text(meta);
    record_age();
    return;
  }
  const RenderedFragment& fragment = payload(v, options);
  out.reserve(out.size() + fragment.bytes() + 1024);  // one allocation, not a doubling series
  int64_t ttl = 0;
  const bool ttl_moves = options.view == DiscoveryView::kMcp && v.status == EntryStatus::kFresh;
  if (ttl_moves) ttl = std::max<int64_t>(0, c->fresh_until_ms - now_ms);
  const std::string key = options.view == DiscoveryView::kMcp ? "mcp" : "manifest";
  std::vector<std::size_t> ttl_offsets;
  std::vector<std::size_t>* ttl_at = clock != nullptr && ttl_moves ? &ttl_offsets : nullptr;
  append_json_object_with(out, meta, key,
                          [&](std::string& o) { fragment.append_to(o, ttl, ttl_at); });
  record_age();
  for (std::size_t offset : ttl_offsets) {
    clock->add(out, offset, ClockHole::Kind::kTtl, c->fresh_until_ms, now_ms);
  }
}

// The first time after `now_ms` at which an entry shown may render otherwise than at `now_ms`
// (its status, `refresh`, the revalidations, the validator), besides the clock holes: each
// classified entry's next boundary (fresh: fresh_until, and refresh_at when still ahead; stale:
// expires_at); `now_ms` itself when an entry is clock-skewed (its fresh_until is now: never
// spliced). Entries that are not classified, or are misses, do not move with the clock.
int64_t clock_window_end(const std::vector<const EntryView*>& shown, int64_t now_ms) {
  int64_t end = std::numeric_limits<int64_t>::max();
  for (const EntryView* v : shown) {
    if (!v->classification) continue;
    const Classification& c = *v->classification;
    if (c.state == Freshness::kMiss) continue;
    if (c.clock_skewed) return now_ms;
    if (c.state == Freshness::kFresh) {
      end = std::min(end, c.fresh_until_ms);
      if (c.refresh_at_ms > now_ms) end = std::min(end, c.refresh_at_ms);
    } else if (c.state == Freshness::kStale) {
      end = std::min(end, c.expires_at_ms);
    }
  }
  return end;
}

// The template of a body just rendered at `now_ms` with `recorder`'s holes, or nullopt.
std::optional<ClockTemplate> clock_template(const ClockRecorder& recorder,
                                            const std::vector<const EntryView*>& shown,
                                            int64_t now_ms, const RenderOptions& options) {
  if (!recorder.ok) return std::nullopt;
  ClockTemplate t;
  t.rendered_at = now_ms;
  t.valid_until = clock_window_end(shown, now_ms);
  t.holes = recorder.holes;
  t.max_cache_age_s = std::max<int64_t>(0, options.max_cache_age_s);
  for (const EntryView* v : shown) {
    if (v->status != EntryStatus::kFresh) {
      t.all_fresh = false;
    } else {
      t.min_fresh_until = std::min(t.min_fresh_until, v->classification->fresh_until_ms);
    }
  }
  return t;
}

int64_t max_age_for(const std::vector<const EntryView*>& entries, int64_t now_ms,
                    const RenderOptions& options) {
  int64_t cap = std::max<int64_t>(0, options.max_cache_age_s);
  int64_t age = cap;
  for (const EntryView* v : entries) {
    if (v->status != EntryStatus::kFresh) return 0;
    int64_t left_ms = std::max<int64_t>(0, v->classification->fresh_until_ms - now_ms);
    age = std::min(age, left_ms / 1000);
  }
  return age;
}

// The statuses counted and the revalidations to queue for the entries an answer shows.
void tally(const EntryView& v, DiscoveryStats* stats, std::vector<Revalidation>* revalidations) {
  switch (v.status) {
    case EntryStatus::kFresh:
      ++stats->fresh;
      break;
    case EntryStatus::kStale:
      ++stats->stale;
      break;
    case EntryStatus::kPending:
      ++stats->pending;
      break;
    case EntryStatus::kError:
      ++stats->error;
      break;
    case EntryStatus::kExpired:
      ++stats->expired;
      break;
    case EntryStatus::kAuthorizationRequired:
      ++stats->authorization_required;
      break;
  }
  if (v.revalidate) {
    revalidations->push_back(Revalidation{v.conn->id, *v.principal, *v.revalidate, false});
  }
}

// Everything but the body, which needs only the validator (the inputs) and the statuses.
RenderedDiscovery finish(const Json& validator, const std::vector<const EntryView*>& shown,
                         int64_t now_ms, const RenderOptions& options) {
  RenderedDiscovery out;
  out.etag = weak_etag(json_text(validator));
  out.not_modified =
      !options.if_none_match.empty() && if_none_match_matches(options.if_none_match, out.etag);
  out.max_age_s = max_age_for(shown, now_ms, options);
  out.cache_control = "private, max-age=" + std::to_string(out.max_age_s);
  for (const EntryView* v : shown) tally(*v, &out.stats, &out.revalidations);
  return out;
}

// Per list of a (filtered) manifest: its state and, when it loaded, its item count.
void add_list_summary(Json& entry, const Json& manifest) {
  Json counts = Json::object();
  Json lists = Json::object();
  for (const char* list : {"tools", "resources", "resource_templates", "prompts"}) {
    const Json* l = json_field(manifest, list);
    if (l == nullptr) continue;
    const Json* items = l->is_array() ? l : json_field(*l, "items");
    std::optional<std::string> state =
        l->is_object() ? json_string(*l, "state") : std::optional<std::string>("ok");
    Json shown = Json::object({{"state", state.value_or("unknown")}});
    if (state == std::optional<std::string>("ok") && items != nullptr && items->is_array()) {
      counts[list] = items->size();
      shown["count"] = items->size();
    }
    if (l->is_object()) {
      for (const char* f : {"error", "partial_items", "kept"}) {
        if (const Json* v = json_field(*l, f)) shown[f] = *v;
      }
    }
    lists[list] = std::move(shown);
  }
  entry["counts"] = std::move(counts);
  entry["lists"] = std::move(lists);
}

}  // namespace

// ---- snapshot ----------------------------------------------------------------------------------

bool ManifestEntry::operator==(const ManifestEntry& o) const {
  return text == o.text && has_body() == o.has_body() && etag == o.etag &&
         config_hash == o.config_hash && fetched_at_ms == o.fetched_at_ms &&
         fresh_until_ms == o.fresh_until_ms && cache_scope == o.cache_scope &&
         truncated == o.truncated && error_code == o.error_code &&
         error_message == o.error_message && error_at_ms == o.error_at_ms &&
         attempt_at_ms == o.attempt_at_ms && invalidated_at_ms == o.invalidated_at_ms &&
         unreadable == o.unreadable;
}

bool GrantedConnection::operator==(const GrantedConnection& o) const {
  return id == o.id && record == o.record && principal == o.principal && manifest == o.manifest &&
         disabled == o.disabled && lease_held == o.lease_held;
}

bool Revalidation::operator==(const Revalidation& o) const {
  return connection_id == o.connection_id && principal == o.principal && reason == o.reason &&
         manual == o.manual;
}

bool DiscoveryStats::operator==(const DiscoveryStats& o) const {
  return fresh == o.fresh && stale == o.stale && pending == o.pending && error == o.error &&
         expired == o.expired && authorization_required == o.authorization_required;
}

Result<Principal> applicable_principal(const ConnectionRecord& record, const Principal& member) {
  if (member.is_shared()) return invalid("discovery: the caller must be a member principal");
  return principal_for(record.credential_mode, member.member_id());
}

std::vector<std::string> DiscoverySnapshot::granted_ids() const {
  std::vector<std::string> ids;
  ids.reserve(connections.size());
  for (const GrantedConnection& c : connections) ids.push_back(c.id);
  return ids;
}

const GrantedConnection* DiscoverySnapshot::find(std::string_view id) const {
  for (const GrantedConnection& c : connections) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

Result<DiscoverySnapshot> read_snapshot(SnapshotSource& source, const Principal& member,
                                        const SnapshotQuery& query) {
  if (member.is_shared()) return invalid("discovery: the caller must be a member principal");
  if (query.limit == 0 || query.limit > kMaxSnapshotLimit) {
    return invalid("discovery: limit must be between 1 and " + std::to_string(kMaxSnapshotLimit));
  }
  DiscoverySnapshot snapshot(member);
  Result<std::vector<std::string>> granted = source.granted(member);
  if (!granted.ok()) return granted.error();

  std::vector<std::string> ids;
  if (query.only.has_value()) {
    // Like SISMEMBER: the one id, if granted. An invalid id cannot be granted.
    if (validate_connection_id(*query.only).ok() &&
        std::find(granted->begin(), granted->end(), *query.only) != granted->end()) {
      ids.push_back(*query.only);
    }
  } else {
    for (std::string& id : *granted) {
      if (validate_connection_id(id).ok()) {
        ids.push_back(std::move(id));
      } else {
        ++snapshot.ignored_grants;
      }
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  snapshot.granted_total = static_cast<int64_t>(ids.size());

  std::size_t taken = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    if (!query.after.empty() && !(query.after < id)) continue;
    if (taken == query.limit) {
      snapshot.next_after = snapshot.connections.back().id;
      break;
    }
    ++taken;
    GrantedConnection conn;
    conn.id = id;
    Result<std::optional<ConnectionRecord>> record = source.record(id);
    if (!record.ok()) return record.error();
    conn.record = *record;
    if (conn.record) {
      Result<Principal> principal = applicable_principal(*conn.record, member);
      if (principal.ok()) {
        conn.principal = *principal;
        // The overlay of the principal that applies: on a per-member connection the caller's own.
        Result<DisabledOverlay> disabled = source.disabled(id, *principal);
        if (!disabled.ok()) return disabled.error();
        conn.disabled = std::move(*disabled);
        Result<std::optional<ManifestEntry>> manifest = source.manifest(id, *principal);
        if (!manifest.ok()) return manifest.error();
        conn.manifest = std::move(*manifest);
        Result<bool> lease = source.lease_held(id, *principal);
        if (!lease.ok()) return lease.error();
        conn.lease_held = *lease;
      }
    }
    snapshot.connections.push_back(std::move(conn));
  }
  Result<int64_t> epoch = source.epoch();
  if (!epoch.ok()) return epoch.error();
  snapshot.epoch = *epoch;
  return snapshot;
}

// ---- classification ----------------------------------------------------------------------------

namespace {

constexpr const char* const kEntryStatusNames[] = {"pending", "fresh", "stale",
                                                   "expired", "error", "authorization_required"};
static_assert(covers_enum(kEntryStatusNames, EntryStatus::kAuthorizationRequired));

constexpr const char* const kRevalidationOutcomeNames[] = {"queued", "already_queued",
                                                           "in_progress"};
static_assert(covers_enum(kRevalidationOutcomeNames, RevalidationOutcome::kInProgress));

constexpr const char* const kViewNames[] = {"manifest", "mcp"};
static_assert(covers_enum(kViewNames, DiscoveryView::kMcp));

}  // namespace

const char* entry_status_name(EntryStatus status) {
  return name_of(kEntryStatusNames, status, "pending");
}

std::string authorize_path(std::string_view connection_id) {
  return "/v1/mcp-connections/" + std::string(connection_id) + "/authorize";
}

const char* revalidation_outcome_name(RevalidationOutcome outcome) {
  return name_of(kRevalidationOutcomeNames, outcome, "queued");
}

std::optional<ManifestEntry> manifest_entry_from_fields(const HashFields& m) {
  if (m.empty()) return std::nullopt;
  ManifestEntry e;
  // The time fields, in the order a malformed one is reported.
  for (auto [name, out] : {std::pair{redis_field::kFetchedAt, &e.fetched_at_ms},
                           std::pair{redis_field::kFreshUntil, &e.fresh_until_ms},
                           std::pair{redis_field::kErrorAt, &e.error_at_ms},
                           std::pair{redis_field::kAttemptAt, &e.attempt_at_ms},
                           std::pair{redis_field::kInvalidatedAt, &e.invalidated_at_ms}}) {
    const std::string* v = field(m, name);
    if (v == nullptr || v->empty()) continue;
    *out = parse_decimal_i64(*v);
    if (!*out && e.unreadable.empty()) {
      e.unreadable = std::string("field `") + name + "` is not an integer";
    }
  }
  if (const std::string* v = field(m, redis_field::kManifest)) e.text = *v;
  if (const std::string* v = field(m, redis_field::kBody); v != nullptr && e.text.empty()) {
    if (v->size() == 64 && v->find_first_not_of("0123456789abcdef") == std::string::npos) {
      e.body_digest = *v;
    } else if (e.unreadable.empty()) {
      e.unreadable = "field `body` is not a SHA-256 in hex";
    }
  }
  if (const std::string* v = field(m, redis_field::kEtag)) e.etag = *v;
  if (const std::string* v = field(m, redis_field::kConfigHash)) e.config_hash = *v;
  if (const std::string* v = field(m, redis_field::kCacheScope)) {
    e.cache_scope = cache_scope_from_string(*v);
  }
  const std::string* truncated = field(m, redis_field::kTruncated);
  e.truncated = truncated != nullptr && *truncated == "1";
  if (const std::string* v = field(m, redis_field::kErrorCode)) e.error_code = *v;
  if (const std::string* v = field(m, redis_field::kErrorMessage)) e.error_message = *v;
  return e;
}

Result<std::optional<CacheEntryMeta>> cache_entry_meta(const std::optional<ManifestEntry>& entry) {
  if (!entry) return std::optional<CacheEntryMeta>();
  Result<CacheEntryMeta> meta = cache_entry_meta(*entry, entry->has_body());
  if (!meta.ok()) return meta.error();
  return std::optional<CacheEntryMeta>(std::move(meta).value());
}

Result<CacheEntryMeta> cache_entry_meta(const ManifestEntry& m, bool has_data) {
  if (!m.unreadable.empty()) return invalid(m.unreadable);
  CacheEntryMeta e;
  e.has_data = has_data;
  if (e.has_data) {
    if (!m.fetched_at_ms) return invalid("a manifest without `fetched_at`");
    const int64_t fetched_at = *m.fetched_at_ms;
    e.fetched_at_ms = fetched_at;
    e.config_hash = m.config_hash;
    if (m.fresh_until_ms) {
      if (*m.fresh_until_ms < fetched_at) {
        return invalid("`fresh_until` lies before `fetched_at`");
      }
      // The TTL the writer applied; it only ever shortens the reader's own fresh TTL.
      e.upstream_ttl_ms = *m.fresh_until_ms - fetched_at;
      // The writer stored it as never fresh: a list of it failed (schema/redis-keys.md).
      e.never_fresh = *m.fresh_until_ms == fetched_at;
    }
  }
  e.cache_scope = m.cache_scope;
  if (!m.error_code.empty()) {
    e.last_error = RefreshError{m.error_code, m.error_message, m.error_at_ms.value_or(0)};
  }
  e.last_attempt_at_ms = m.attempt_at_ms;
  e.invalidated_at_ms = m.invalidated_at_ms;
  return e;
}

// ---- rendering ---------------------------------------------------------------------------------

const char* discovery_view_name(DiscoveryView view) {
  return name_of(kViewNames, view, "manifest");
}

std::optional<DiscoveryView> discovery_view_from_name(std::string_view name) {
  return find_value<DiscoveryView>(kViewNames, name);
}

Json hide_disabled(Json manifest, const DisabledOverlay& disabled) {
  if (disabled.empty() || !manifest.is_object()) return manifest;
  for (int i = 0; i < kListKindCount; ++i) {
    auto kind = static_cast<ListKind>(i);
    for (const char* name : manifest_fields_for(kind)) {
      auto it = manifest.find(name);
      if (it == manifest.end()) continue;
      if (it->is_array()) {
        *it = filter_items(*it, kind, disabled);
        continue;
      }
      if (!it->is_object()) continue;
      auto items = it->find("items");
      if (items != it->end() && items->is_array()) *items = filter_items(*items, kind, disabled);
      auto hashes = it->find("hashes");
      if (hashes != it->end() && hashes->is_object()) {
        Json kept = Json::object();
        for (auto h = hashes->begin(); h != hashes->end(); ++h) {
          if (visible(disabled, capability_type_for(kind), h.key())) kept[h.key()] = h.value();
        }
        *hashes = std::move(kept);
      }
    }
  }
  return manifest;
}

std::optional<std::vector<Json>> listed_items(const Json& manifest, ListKind kind) {
  if (!manifest.is_object()) return std::nullopt;
  for (const char* name : manifest_fields_for(kind)) {
    const Json* list = json_field(manifest, name);
    if (list == nullptr) continue;
    const Json* items = nullptr;
    if (list->is_array()) {
      items = list;
    } else if (list->is_object()) {
      std::optional<std::string> state = json_string(*list, "state");
      if (state && *state != "ok") return std::nullopt;
      items = json_field(*list, "items");
      if (items == nullptr || !items->is_array()) return std::nullopt;
    } else {
      return std::nullopt;
    }
    return std::vector<Json>(items->begin(), items->end());
  }
  return std::nullopt;
}

RenderedDiscovery render_manifests(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                                   int64_t now_ms, const RenderOptions& options) {
  std::vector<EntryView> views = evaluate_all(snapshot, policy, now_ms, options, Need::kPayload);
  Json body = Json::object();
  Json validator = Json::object();
  body["principal"] = snapshot.member.str();
  validator["principal"] = snapshot.member.str();
  validator["view"] = discovery_view_name(options.view);
  if (snapshot.next_after) {
    body["next_after"] = *snapshot.next_after;
    validator["next_after"] = *snapshot.next_after;
  }
  std::vector<Json> metas;
  Json validators = Json::array();
  std::vector<const EntryView*> shown;
  for (EntryView& v : views) {
    metas.push_back(entry_meta_json(v));
    validators.push_back(entry_validator(v, metas.back()));
    shown.push_back(&v);
  }
  validator["connections"] = std::move(validators);
  RenderedDiscovery out = finish(validator, shown, now_ms, options);
  if (out.not_modified || options.omit_body) return out;
  ClockRecorder recorder;
  ClockRecorder* clock = options.record_clock ? &recorder : nullptr;
  append_json_object_with(out.body, body, "connections", [&](std::string& o) {
    o += '[';
    for (std::size_t i = 0; i < views.size(); ++i) {
      if (i > 0) o += ',';
      append_entry_body(o, views[i], std::move(metas[i]), now_ms, options, clock);
    }
    o += ']';
  });
  if (clock != nullptr) out.clock = clock_template(recorder, shown, now_ms, options);
  return out;
}

Result<RenderedDiscovery> render_connection_manifest(const DiscoverySnapshot& snapshot,
                                                     std::string_view id,
                                                     const FreshnessPolicy& policy, int64_t now_ms,
                                                     const RenderOptions& options) {
  const GrantedConnection* conn = snapshot.find(id);
  if (conn == nullptr || !conn->record.has_value() || !validate_connection_id(id).ok()) {
    return Error(ErrorCode::kNotFound, "no such connection");
  }
  EntryView v = evaluate(*conn, snapshot.member, policy, now_ms, options, Need::kPayload);
  Json meta = entry_meta_json(v);
  Json validator = entry_validator(v, meta);
  validator["view"] = discovery_view_name(options.view);
  RenderedDiscovery out = finish(validator, {&v}, now_ms, options);
  if (out.not_modified || options.omit_body) return out;
  ClockRecorder recorder;
  ClockRecorder* clock = options.record_clock ? &recorder : nullptr;
  append_entry_body(out.body, v, std::move(meta), now_ms, options, clock);
  if (clock != nullptr) out.clock = clock_template(recorder, {&v}, now_ms, options);
  return out;
}

std::optional<RenderedDiscovery> splice_rendered(const RenderedDiscovery& rendered, int64_t now_ms,
                                                 bool with_body) {
  if (!rendered.clock || rendered.not_modified) return std::nullopt;
  const ClockTemplate& t = *rendered.clock;
  if (now_ms < t.rendered_at || now_ms >= t.valid_until) return std::nullopt;
  RenderedDiscovery out;
  out.etag = rendered.etag;
  out.revalidations = rendered.revalidations;
  out.stats = rendered.stats;
  // max_age_for's arithmetic: the floor of the soonest fresh entry's time left, capped.
  out.max_age_s = 0;
  if (t.all_fresh) {
    const int64_t left_ms = std::max<int64_t>(0, clock_sub(t.min_fresh_until, now_ms));
    out.max_age_s = std::min(t.max_cache_age_s, left_ms / 1000);
  }
  out.cache_control = "private, max-age=" + std::to_string(out.max_age_s);
  if (!with_body) return out;
  const std::string& body = rendered.body;
  out.body.reserve(body.size() + 8 * t.holes.size());
  std::size_t at = 0;
  for (const ClockHole& hole : t.holes) {
    out.body.append(body, at, hole.offset - at);
    out.body += std::to_string(hole_value(hole, now_ms));
    at = hole.offset + hole.length;
  }
  out.body.append(body, at, std::string::npos);
  return out;
}

ConnectionList connection_list(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                               int64_t now_ms, const RenderOptions& options) {
  std::vector<EntryView> views = evaluate_all(snapshot, policy, now_ms, options, Need::kJson);
  ConnectionList out;
  Json connections = Json::array();
  for (const EntryView& v : views) {
    Json entry = entry_meta_json(v);
    add_age(entry, v);
    if (v.servable && v.manifest.is_object()) add_list_summary(entry, v.manifest);
    connections.push_back(std::move(entry));
    tally(v, &out.stats, &out.revalidations);
  }
  out.body =
      Json::object({{"principal", snapshot.member.str()}, {"connections", std::move(connections)}});
  if (snapshot.next_after) out.body["next_after"] = *snapshot.next_after;
  return out;
}

// ---- search ------------------------------------------------------------------------------------

SearchCorpus search_corpus(const DiscoverySnapshot& snapshot, const FreshnessPolicy& policy,
                           int64_t now_ms, const RenderOptions& options) {
  std::vector<EntryView> views = evaluate_all(snapshot, policy, now_ms, options, Need::kJson);
  SearchCorpus corpus;
  corpus.member = snapshot.member;
  Sha256 version;
  auto mix = [&](std::string_view s) {
    version.update(std::to_string(s.size()) + ":");
    version.update(s);
  };
  mix(snapshot.member.str());
  for (EntryView& v : views) {
    if (v.revalidate) {
      corpus.revalidations.push_back(Revalidation{v.conn->id, *v.principal, *v.revalidate, false});
    }
    if (!v.servable) {
      corpus.unavailable.emplace_back(v.conn->id, v.status);
      continue;
    }
    mix(v.conn->id);
    mix(v.principal->str());
    mix(v.content_id);
    mix(v.conn->record->name);
    for (const std::string& d : v.conn->disabled) mix(d);
    mix("|");
    std::optional<std::vector<Json>> tools = listed_items(v.manifest, ListKind::kTools);
    if (!tools) continue;
    for (Json& tool : *tools) {
      corpus.tools.push_back(
          ToolCandidate{v.conn->id, v.conn->record->name, v.status, std::move(tool)});
    }
  }
  Digest256 d = version.finish();
  corpus.version = "sha256-" + base64url_encode(std::string_view(
                                   reinterpret_cast<const char*>(d.data()), d.size()));
  return corpus;
}

// ---- serving lists -----------------------------------------------------------------------------

VisibleConnections visible_connections(const DiscoverySnapshot& snapshot,
                                       const FreshnessPolicy& policy, int64_t now_ms,
                                       const RenderOptions& options,
                                       const FragmentRenderer* renderer) {
  std::vector<EntryView> views =
      renderer != nullptr
          ? evaluate_all(snapshot, policy, now_ms, options, Need::kFragment, renderer->view)
          : evaluate_all(snapshot, policy, now_ms, options, Need::kJson);
  VisibleConnections out;
  for (EntryView& v : views) {
    tally(v, &out.stats, &out.revalidations);
    VisibleConnection c;
    c.id = v.conn->id;
    c.status = v.status;
    c.principal = v.principal;
    c.servable = v.servable;
    if (v.servable && renderer != nullptr) {
      if (v.fragment == nullptr) {
        // Not in the render cache: render it from the filtered manifest, and keep it.
        v.fragment = renderer->render(v.conn->id, v.manifest);
        if (options.cache != nullptr && !v.cache_key.empty() && v.fragment != nullptr) {
          options.cache->insert(v.cache_key, v.conn->manifest->text, v.conn->disabled, v.fragment);
        }
      }
      c.fragment = std::move(v.fragment);
    } else if (v.servable) {
      c.manifest = std::move(v.manifest);
    }
    if (v.servable) {
      if (v.status == EntryStatus::kFresh && v.classification) {
        c.ttl_ms = std::max<int64_t>(0, v.classification->fresh_until_ms - now_ms);
      }
    }
    out.connections.push_back(std::move(c));
  }
  return out;
}

// ---- validators --------------------------------------------------------------------------------

bool if_none_match_matches(std::string_view header, std::string_view etag) {
  auto opaque = [](std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (t.size() >= 2 && t[0] == 'W' && t[1] == '/') t.remove_prefix(2);
    return t;
  };
  std::string_view mine = opaque(etag);
  if (mine.size() < 2 || mine.front() != '"' || mine.back() != '"') return false;
  if (opaque(header) == "*") return true;
  while (!header.empty()) {
    std::size_t comma = header.find(',');
    std::string_view part = header.substr(0, comma);
    if (opaque(part) == mine) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

// Weak: a fast fingerprint of the validator (every discovery request computes one); strong: the
// body's SHA-256.
std::string weak_etag(std::string_view bytes) { return "W/\"" + fingerprint_tag(bytes) + "\""; }
std::string strong_etag(std::string_view bytes) { return "\"" + digest_tag(bytes) + "\""; }

std::string json_text(const Json& value) { return serialize_json(value); }

}  // namespace quiver
