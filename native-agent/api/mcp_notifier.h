// McpNotifier: the agent's MCP change notifications (notifications/{tools,resources,prompts}/
// list_changed) to the listen streams its /mcp opened (shared/mcp_endpoint.h: the 2025-era GET
// stream and 2026-07-28 subscriptions/listen).
//
// How the agent learns of a change: the store's epoch (schema/redis-keys.md `epoch`; the SQLite
// store keeps the same counter) moves on every commit, grant change and preference change, by
// this agent (its own refreshes, its admin API, `quiver-agent prefs`) or by any other agent of the
// namespace through Redis. One thread reads it every `poll_ms` while a stream is open (nothing
// otherwise); when it moved (or `recheck_ms` passed: an entry that expired changes a list without
// a write), it recomputes, per member
// with an open stream, a digest of each merged list exactly
// as the member's `tools/list`, `resources/list` + `resources/templates/list` and `prompts/list`
// would serve it (discovery's classification, disabled capabilities hidden, connections the
// member is not granted absent), and writes one notification per kind whose digest changed to
// each of that member's streams. So: per member (another member's change never reaches it),
// coalesced (any number of writes between two reads make at most one notification per kind), and
// never sent for a change the member cannot see. A read that fails sends nothing (could-not-load
// is not a change) and keeps the last digest.
//
// A store without an epoch (Redis key layout v2: a namespace-wide counter would pin every write
// to one slot) is asked per member instead, at every poll, whether the pages its digests were
// computed from are unchanged (Store::discovery_unchanged: the versions the edge's conditional
// read asks, G + 1 GETs in one round); only a member whose versions moved is read and digested
// again, and every member is at `recheck_ms`. /metrics counts both (quiver_mcp_notify_*).
//
// Bounds: at most `max_streams_per_member` streams per member (a new one ends the oldest,
// cleanly), `max_streams` in all (past it a new stream is refused: `add` returns false). The
// front writes the keep-alives (HttpFrontOptions::stream_keepalive_ms). `stop()` ends every stream
// with its farewell (2026-07-28: the listen result); the front's stop does the same for any
// stream still open.
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "native-agent/api/http_front.h"
#include "shared/discovery.h"
#include "shared/mcp_endpoint.h"
#include "shared/sha256.h"
#include "shared/status.h"

namespace quiver::api {

struct ApiContext;

struct McpNotifierOptions {
  int64_t poll_ms = 250;
  int64_t recheck_ms = 30'000;
  std::size_t max_streams_per_member = 8;
  std::size_t max_streams = 1'024;
};

// The digest of each list a member's /mcp serves (McpChangeKind order).
using McpListDigests = std::array<Digest256, kMcpChangeKindCount>;

class McpNotifier {
 public:
  McpNotifier(ApiContext& api, McpNotifierOptions options);
  ~McpNotifier();  // stop()
  McpNotifier(const McpNotifier&) = delete;
  McpNotifier& operator=(const McpNotifier&) = delete;

  void start();
  void stop();

  // A stream the endpoint opened. Computes the member's digests first when it has no stream yet
  // (the baseline a change is measured against). False when the stream is refused (over
  // `max_streams`, or the notifier is stopped): the caller ends it.
  bool add(const McpListen& listen, std::shared_ptr<HttpStream> stream);

  // The member's digests now, read through the API's snapshot (every page of its grants).
  // `pages`: when given, the snapshot pages the digests were computed from.
  Result<McpListDigests> digests(const Principal& member, int64_t now_ms,
                                 std::vector<DiscoverySnapshot>* pages = nullptr);

  std::size_t streams() const;
  int64_t checks() const;     // recomputations done (each a pass over the members with streams)
  int64_t digested() const;   // members read and digested again by those passes
  int64_t unchanged() const;  // members whose versions said unchanged (no read; key layout v2)

 private:
  struct Sub {
    McpListen listen;
    std::shared_ptr<HttpStream> stream;
  };
  struct Member {
    std::vector<Sub> subs;  // oldest first
    bool known = false;     // `digests` holds a successful read
    McpListDigests digests{};
    // The pages `digests` was computed from (for a store without an epoch to compare).
    std::shared_ptr<const std::vector<DiscoverySnapshot>> pages;
  };
  void run();
  // `full`: every member is read again; else (a store without an epoch) only those whose
  // versions moved.
  void check(int64_t now_ms, bool full);

  ApiContext& api_;
  McpNotifierOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::map<std::string, Member> members_;  // by principal text
  std::size_t total_ = 0;
  int64_t checks_ = 0;
  int64_t digested_ = 0;
  int64_t unchanged_ = 0;
  std::thread thread_;
};

}  // namespace quiver::api
