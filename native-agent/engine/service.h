// AgentService: what the agent's HTTP API and CLI ask of the running agent.
//
// The refresh engine (native-agent/engine/agent.h, `Agent`) implements it; the HTTP API
// (native-agent/api/api_server.h) and the CLI commands only call it. It is the seam between
// "keeping manifests fresh" and "answering people": neither side reaches into the other.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/base/config.h"
#include "native-agent/engine/listing_log.h"
#include "native-agent/store/store.h"
#include "shared/call_relay.h"
#include "shared/identity.h"
#include "shared/json.h"
#include "shared/listing.h"
#include "shared/preferences.h"
#include "shared/status.h"

namespace quiver {

class Metrics;
class Tracer;
class OAuthManager;

// `trigger` says why a refresh was asked for (a short token stored with queued requests and
// counted in /metrics): "manual", "webhook", "list_changed", "maintenance", "stale", "miss",
// "config", "evidence" (an unknown-tool error seen by a caller), "seed".

struct RefreshReport {
  std::string connection_id;
  Principal principal = Principal::shared();
  bool committed = false;  // a new manifest is stored
  // "committed", "partial" (committed, but lists failed: see incomplete_lists and error),
  // "failed", "in_progress" (lease held elsewhere), "up_to_date" (a queued request a newer
  // listing already served), "refused:<lease_lost|stale_fence|config_changed|...>".
  std::string outcome;
  std::string etag;
  int64_t duration_ms = 0;
  std::optional<Error> error;  // the listing's error when it (or a list of it) failed (redacted)
  // "partial": the lists that failed (shown failed, or kept from the last good manifest).
  std::vector<ListKind> incomplete_lists;
};

// One call relayed to an upstream (issue 13; native-agent/engine/mcp_calls.h performs it).
struct UpstreamCall {
  std::string connection_id;
  std::string member_id;   // the caller, as its token authenticated it
  std::string method;      // a relayed method (shared/call_relay.h is_relayed_method)
  Json params;             // with the upstream's own tool / prompt name or resource URI
  int64_t timeout_ms = 0;  // the caller's budget (0: none): it caps the connection's
};

class AgentService {
 public:
  virtual ~AgentService() = default;

  virtual const AgentConfig& config() const = 0;
  virtual ManifestStore& store() = 0;
  virtual Metrics& metrics() = 0;
  // The agent's tracer (native-agent/engine/tracer.h); null when there is none.
  virtual Tracer* tracer() { return nullptr; }
  // The agent's OAuth side (native-agent/engine/oauth_manager.h: begin, complete, disconnect);
  // null when no connection has auth oauth.
  virtual OAuthManager* oauth() { return nullptr; }
  // This agent's record of its own listings of (connection, principal) (listing_log.h): in
  // flight, the last one's start and duration; nullopt when it has listed none since it started.
  virtual std::optional<ListingRecord> last_listing(const std::string& /*connection_id*/,
                                                    const Principal& /*principal*/) const {
    return std::nullopt;
  }

  // Queues a refresh of (connection, principal) for the background workers: queued,
  // already_queued, or in_progress (a lease is held: the refresh under way will serve it).
  virtual Result<RevalidationOutcome> request_refresh(const std::string& connection_id,
                                                      const Principal& principal,
                                                      const std::string& trigger) = 0;

  // A verified refresh webhook (shared/webhook_exchange.h step 6): ManifestStore::apply_webhook
  // with the agent's gate window (the edge's rules: the store's records say which principals a
  // target names; requests are queued for the revalidation workers, also behind a held lease),
  // then a change answered already_queued is followed up like any change trigger.
  virtual Result<WebhookRefreshReply> apply_webhook(const WebhookVerified& verified,
                                                    const WebhookRefreshRequest& request,
                                                    int64_t now_ms) = 0;

  // Refreshes now and waits (CLI `refresh`, tests): lease, list, reconcile, fenced commit.
  virtual Result<RefreshReport> refresh_now(const std::string& connection_id,
                                            const Principal& principal,
                                            const std::string& trigger) = 0;

  // "Test connection": a fresh transient upstream connection (not the pooled one), listed once,
  // nothing stored. The report `quiver-agent probe` prints (probe_report), with connection_id and
  // principal added and secrets redacted, or the error.
  virtual Result<Json> test_connection(const std::string& connection_id,
                                       const Principal& principal) = 0;

  // Preferences (ADR-004): the rows of one (connection, principal) — `shared` on a shared
  // connection, the member on a per-member one; never another principal's — and a toggle that
  // reaches discovery without re-listing (the principal's overlay is republished). Who may
  // toggle is the caller's business (the API: operators on shared connections).
  virtual Result<std::vector<PreferenceRow>> preferences(const std::string& connection_id,
                                                         const Principal& principal) = 0;
  virtual Status set_preference(const std::string& connection_id, const Principal& principal,
                                CapabilityType type, const std::string& key, bool enabled) = 0;

  // A call relayed to the upstream (tools/call, resources/read, prompts/get,
  // completion/complete) as `call.member_id`, the grant and the preference checked now, on that
  // principal's live session (McpCalls::perform, native-agent/engine/mcp_calls.h: the errors).
  // `cancelled` turning true (the client went away) cancels it upstream.
  virtual Result<RelayReply> call_upstream(const UpstreamCall& /*call*/,
                                           const std::function<bool()>& /*cancelled*/ = {}) {
    return Error(ErrorCode::kInternal, "this agent performs no upstream calls");
  }
};

}  // namespace quiver
