#include "native-agent/api/mcp_notifier.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "native-agent/api/api_context.h"
#include "shared/canonical_json.h"
#include "shared/discovery_render.h"
#include "shared/json.h"
#include "shared/listing.h"
#include "shared/render_cache.h"

namespace quiver::api {

namespace {

McpChangeKind change_kind(ListKind kind) {
  switch (kind) {
    case ListKind::kTools:
      return McpChangeKind::kTools;
    case ListKind::kResources:
    case ListKind::kResourceTemplates:
      return McpChangeKind::kResources;
    case ListKind::kPrompts:
      return McpChangeKind::kPrompts;
  }
  return McpChangeKind::kTools;
}

}  // namespace

McpNotifier::McpNotifier(ApiContext& api, McpNotifierOptions options)
    : api_(api), options_(options) {}

McpNotifier::~McpNotifier() { stop(); }

void McpNotifier::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stop_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void McpNotifier::stop() {
  std::map<std::string, Member> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    members.swap(members_);
    total_ = 0;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Every stream ends cleanly: a 2026-07-28 client reads the listen result (a graceful end).
  for (auto& [key, member] : members) {
    for (Sub& sub : member.subs) sub.stream->close(mcp_listen_end_event(sub.listen));
  }
}

bool McpNotifier::add(const McpListen& listen, std::shared_ptr<HttpStream> stream) {
  const std::string key = listen.member.str();
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || total_ >= options_.max_streams) return false;
    auto it = members_.find(key);
    known = it != members_.end() && it->second.known;
  }
  // The baseline, before the stream is announced to the client (the handler returns after this):
  // a change the client could miss is one it lists after anyway.
  std::optional<McpListDigests> baseline;
  auto pages = std::make_shared<std::vector<DiscoverySnapshot>>();
  if (!known) {
    Result<McpListDigests> d = digests(listen.member, api_.options.now_ms(), pages.get());
    if (d.ok()) baseline = *d;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || total_ >= options_.max_streams) return false;
  Member& m = members_[key];
  if (!m.known && baseline) {
    m.digests = *baseline;
    m.pages = std::move(pages);
    m.known = true;
  }
  while (m.subs.size() >= std::max<std::size_t>(1, options_.max_streams_per_member)) {
    Sub& oldest = m.subs.front();
    oldest.stream->close(mcp_listen_end_event(oldest.listen));
    m.subs.erase(m.subs.begin());
    --total_;
  }
  m.subs.push_back(Sub{listen, std::move(stream)});
  ++total_;
  cv_.notify_all();
  return true;
}

Result<McpListDigests> McpNotifier::digests(const Principal& member, int64_t now_ms,
                                            std::vector<DiscoverySnapshot>* pages) {
  std::array<Sha256, kMcpChangeKindCount> h;
  SnapshotQuery query;
  query.limit = std::min(api_.mcp.max_connections_per_read, kMaxSnapshotLimit);
  for (;;) {
    Result<DiscoverySnapshot> snapshot = api_.snapshot(member, query);
    if (!snapshot.ok()) return snapshot.error();
    // The endpoint's own lists (mcp_visible_lists): each servable connection's exposed items and
    // their digest per kind, kept in the render cache under the manifest's content id and the
    // disabled set, so an epoch move re-reads the snapshot and parses only the manifests that
    // changed (and those parses warm the cache the client's next */list reads). The digest mixes
    // the digests of the lists the member would see, so it changes exactly when a merged list
    // does: a new content id that lists the same items (a refresh that changed another kind, or
    // nothing visible) gives the same list digest, so no spurious notification either. A change
    // is never missed: the list digest names every item's exposed text in order, and a
    // connection's list appearing, failing or vanishing changes which digests are mixed.
    VisibleConnections visible = mcp_visible_lists(*snapshot, api_.mcp, now_ms);
    for (const VisibleConnection& c : visible.connections) {
      if (!c.servable || c.fragment == nullptr ||
          c.fragment->lists.size() != static_cast<std::size_t>(kListKindCount)) {
        continue;
      }
      for (int k = 0; k < kListKindCount; ++k) {
        const auto kind = static_cast<ListKind>(k);
        const McpChangeKind change = change_kind(kind);
        // Search mode lists three fixed tools: the tool list never changes.
        if (change == McpChangeKind::kTools && api_.mcp.search_mode) continue;
        const RenderedFragment::ItemList& list = c.fragment->lists[static_cast<std::size_t>(k)];
        if (list.state != RenderedFragment::ItemList::State::kListed) continue;
        Sha256& d = h[static_cast<int>(change)];
        d.update(c.id);
        d.update(std::string_view("\0", 1));
        d.update(list_kind_name(kind));
        d.update(std::string_view("\0", 1));
        d.update(list.digest);
        d.update("\n");
      }
    }
    const bool last = !snapshot->next_after || snapshot->connections.empty();
    if (!last) query.after = *snapshot->next_after;
    if (pages != nullptr) pages->push_back(std::move(*snapshot));
    if (last) break;
  }
  McpListDigests out;
  for (int k = 0; k < kMcpChangeKindCount; ++k) out[k] = h[k].finish();
  return out;
}

std::size_t McpNotifier::streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

int64_t McpNotifier::checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checks_;
}

int64_t McpNotifier::digested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return digested_;
}

int64_t McpNotifier::unchanged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unchanged_;
}

void McpNotifier::run() {
  int64_t last_epoch = -1;
  int64_t next_recheck = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms), [&] { return stop_; });
      if (stop_) return;
      if (total_ == 0) {
        last_epoch = -1;  // nothing to tell anyone: no read at all
        continue;
      }
    }
    const int64_t now = api_.options.now_ms();
    bool full = now >= next_recheck;
    if (api_.agent.store().has_epoch()) {
      Result<int64_t> epoch = api_.agent.store().read_epoch();
      if (!epoch.ok()) continue;  // the store cannot say: no change is a change we know of
      if (*epoch == last_epoch && !full) continue;
      last_epoch = *epoch;
      full = true;
    }
    // Without an epoch (Redis key layout v2) each member's versions are asked (check).
    if (full) next_recheck = now + options_.recheck_ms;
    check(now, full);
  }
}

void McpNotifier::check(int64_t now_ms, bool full) {
  std::vector<std::pair<Principal, std::shared_ptr<const std::vector<DiscoverySnapshot>>>> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = members_.begin(); it != members_.end();) {
      std::vector<Sub>& subs = it->second.subs;
      const std::size_t before = subs.size();
      subs.erase(
          std::remove_if(subs.begin(), subs.end(), [](const Sub& s) { return s.stream->ended(); }),
          subs.end());
      total_ -= before - subs.size();
      if (subs.empty()) {
        it = members_.erase(it);  // its digests go too: nothing tracks it until a new stream
      } else {
        todo.emplace_back(subs.front().listen.member,
                          full || !it->second.known ? nullptr : it->second.pages);
        ++it;
      }
    }
  }
  for (const auto& [member, held] : todo) {
    if (held && !held->empty()) {
      bool failed = false;
      bool same = true;
      for (const DiscoverySnapshot& page : *held) {
        Result<bool> unchanged = api_.agent.store().discovery_unchanged(page);
        failed = !unchanged.ok();
        same = !failed && *unchanged;
        if (!same) break;
      }
      if (failed) continue;  // the store cannot say: nothing to tell (as a failed read)
      if (same) {
        std::lock_guard<std::mutex> lock(mu_);
        ++unchanged_;
        continue;
      }
    }
    auto pages = std::make_shared<std::vector<DiscoverySnapshot>>();
    Result<McpListDigests> d = digests(member, now_ms, pages.get());
    if (!d.ok()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    ++digested_;
    auto it = members_.find(member.str());
    if (it == members_.end()) continue;
    Member& m = it->second;
    if (m.known) {
      for (int k = 0; k < kMcpChangeKindCount; ++k) {
        if (m.digests[k] == (*d)[k]) continue;
        for (Sub& sub : m.subs) {
          std::string event = mcp_list_changed_event(sub.listen, static_cast<McpChangeKind>(k));
          if (!event.empty()) (void)sub.stream->send(std::move(event));
        }
      }
    }
    m.digests = *d;
    m.pages = std::move(pages);
    m.known = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++checks_;
}

}  // namespace quiver::api
