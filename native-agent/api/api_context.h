// ApiContext: what every handler of the agent's API shares: the agent, the options, the caller
// authentication, the store reads and the background queue of stale-while-revalidate requests.
// ApiServer (native-agent/api/api_server.cpp) owns one and wires it; the handlers (api_*.cpp) only
// use it. Every method may be called from any worker thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>

#include "native-agent/api/api_server.h"
#include "native-agent/api/http_front.h"
#include "native-agent/api/locked_render_cache.h"
#include "native-agent/api/mcp_notifier.h"
#include "native-agent/engine/service.h"
#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/mcp_endpoint.h"
#include "shared/search_index.h"

namespace quiver::api {

// A ToolSearcher shared by every worker thread: IndexedToolSearcher and its cache are not
// synchronized, so searches take turns (an index build is the slow part, and happens once per
// version of what a caller sees).
class LockedSearcher final : public ToolSearcher {
 public:
  LockedSearcher(std::size_t entries, std::size_t bytes)
      : cache_(entries, bytes), inner_(&cache_) {}
  Result<std::vector<SearchHit>> search(const SearchCorpus& corpus, std::string_view query,
                                        std::size_t limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.search(corpus, query, limit);
  }

 private:
  std::mutex mu_;
  SearchIndexCache cache_;
  IndexedToolSearcher inner_;
};

// An authenticated caller: the member its bearer token names, and whether the token claims the
// operator role (`"role": "operator"`, shared/caller_token.h).
struct Caller {
  Principal member;  // member/<id>
  bool operator_claim = false;
  std::string id() const { return std::string(member.member_id()); }
};

struct ApiContext {
  ApiContext(AgentService& a, ApiServerOptions o) : agent(a), options(std::move(o)) {}

  AgentService& agent;
  ApiServerOptions options;
  std::unique_ptr<HttpFront> front;

  std::optional<Keyring> keyring;
  std::string keyring_problem;  // why there is none
  VerifyOptions verify;
  mutable std::mutex tokens_mu;
  mutable VerifiedTokenCache tokens;  // bearer tokens already verified; shared by the workers
  std::vector<std::string> webhook_secrets;
  std::set<std::string> operators;  // quiver.operators (see is_operator)

  std::unique_ptr<LockedSearcher> searcher;
  LockedRenderCache render_cache;  // each servable entry's rendered payload, for every thread
  DiscoveryConfig discovery;
  McpEndpointConfig mcp;  // POST /mcp (api_mcp.cpp): the same freshness, render cache and searcher
  // THE RELAY HOOK of POST /mcp: performs one tools/call, resources/read, prompts/get or
  // completion/complete on the upstream through this agent's live sessions, for the caller (the
  // grant and the preference checked again at call time). Called on a worker thread. Unset: every
  // call is answered RelayFailure::kUnavailable (a JSON-RPC error saying calls are unavailable).
  std::function<RelayReply(const RelayCall&)> mcp_relay;
  // The change notifications of /mcp's listen streams (mcp_notifier.h); null: none are opened.
  std::unique_ptr<McpNotifier> notifier;

  // Held by every admin API write: one agent's operators' changes do not interleave (each is
  // read, catalog write, grant publication). Agents of a namespace do not share it.
  std::mutex admin_mu;

  std::atomic<int> tests_running{
      0};  // POST .../test calls in flight (options.max_concurrent_tests)

  // Stale-while-revalidate requests, queued after the answer went out.
  std::mutex bg_mu;
  std::condition_variable bg_cv;
  std::deque<Revalidation> bg_queue;
  bool bg_stop = false;
  std::thread bg_thread;

  // Routine events, not problems (INFO where `log` is WARN).
  void note(const std::string& line) const;
  void log(const std::string& line) const;

  // The one place a request becomes a member: its bearer token, through the core.
  CallerAuth authenticate(const HttpHeaders& headers) const;
  CallerAuth authenticate(const httplib::Request& req) const;
  // Whether `caller` is an operator (may use the admin API, toggle a shared connection): its
  // token claims the operator role, or its member id is in quiver.operators, or the runtime
  // catalog's member entry says {"operator": true} (native-agent/store/catalog.h). The catalog is
  // read only when neither of the first two says so; its failure is the error.
  Result<bool> is_operator(const Caller& caller);

  Result<DiscoverySnapshot> snapshot(const Principal& member, const SnapshotQuery& query);
  // The same read when the store can make it without waiting (ManifestStore::read_discovery_now);
  // nullopt when it would wait.
  std::optional<Result<DiscoverySnapshot>> snapshot_now(const Principal& member,
                                                        const SnapshotQuery& query);
  // The granted connection `cid` of `member` with its applicable principal, from one snapshot
  // read. kNotFound when not granted, unknown or removed (indistinguishable, by design).
  Result<GrantedConnection> granted(const Principal& member, const std::string& cid);
  // The connection a `/v1/mcp-connections/{id}/...` request without query parameters names,
  // granted to `member`; nullopt when the refusal (400, 404, 503) has been sent. `what` names the
  // endpoint in the log.
  std::optional<GrantedConnection> connection_of(const httplib::Request& req,
                                                 httplib::Response& res, const Principal& member,
                                                 const char* what);
  // Answers a store operation's failure; logs what the caller is not told.
  void fail_store(httplib::Response& res, const Error& e, const char* what);

  // Discovery statistics into the agent's metrics.
  void count(const DiscoveryStats& stats);
  // Queues one revalidation through the agent's gate.
  Result<RevalidationResult> enqueue(const Revalidation& r);
  // After an answer went out: queued by the background thread (a full queue is counted).
  void queue_background(std::vector<Revalidation> revalidations);
  void run_background();  // the background thread's loop, until bg_stop
};

}  // namespace quiver::api
