// The signed refresh webhook on key layout v2, where a namespace is spread over many slots
// (docs/design.md, "The refresh webhook on v2"). Both hosts drive it: the agent's
// RedisStore::apply_webhook (native-agent/store/redis_store.cpp) and the edge's
// EdgeService::webhook (shared/edge_service.cpp).
//
// On layout v1 one script does everything (schema/lua/webhook_refresh.lua,
// webhook_refresh_command in shared/discovery_redis.h). On v2 the replay guard, each connection,
// each member and each shard is a slot of its own, so the webhook goes in rounds; every command
// touches one slot and every script declares every key it touches (the host routes them, grouped
// per node: plan_cluster_batch in shared/redis_cluster.h; on one node it pipelines them):
//
//   round 1  reads only: GET layout record, GET namespace record, EXISTS replay guard
//            (quiver:{<ns>:r:<sha256>}), then per target, on the connection's slot and on the
//            manifest's: HGET the record's credential_mode; SISMEMBER grantees (a member
//            principal) or EXISTS grantees (none or `shared`); HEXISTS the manifest's `body` and
//            `manifest` (whether it holds data); EXISTS its lease. Nothing is written unless the
//            layout record says v2:ready and the namespace record ready (the v1 script's order);
//            a replay guard that stands ends the webhook as a replay, nothing written.
//   round 2  per (connection, principal) to refresh, schema/lua/webhook_mark_v2.lua on the
//            manifest's slot (mark forward only + INCR of that slot's version when it holds data,
//            the lease, the gate); per per_member connection named as a whole,
//            schema/lua/webhook_conn_mark_v2.lua on the connection's slot (marked forward only +
//            INCR of its version, O(1)).
//   round 3  per result not already_queued, XADD to revalidate_stream(connection_shard(cid))
//            with v1's entry fields (cid, principal, reason, at), MAXLEN ~.
//   round 4  SET replay guard NX PX retain, alone: `OK` → accepted; nil → a replay (the same
//            signed request completed meanwhile: it was answered 202).
//
// The guard is set last, after everything it guards, so a webhook cut short (a Redis error or a
// lost connection in any round) leaves no guard and the sender's retry of the same signed request
// does it again: each step is idempotent (marks only move forward; a gate already set answers
// already_queued; a second XADD of a request is a second refresh request, which the agent drops
// when the data is current). docs/design.md says what each cut leaves. Empty rounds are skipped.
//
// The reply is the v1 script's, result for result (WebhookRefreshReply): statuses queued,
// already_queued, in_progress, unknown_connection, unknown_principal, marked. There is no epoch.
//
// Sans-I/O: `commands()` are this round's commands; the host sends them (any order across nodes,
// in order on one node) and hands the replies back to `feed` in the order of `commands()`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/discovery_redis.h"
#include "shared/redis_conversation.h"
#include "shared/redis_keys.h"
#include "shared/resp.h"
#include "shared/status.h"
#include "shared/webhook_signature.h"

namespace quiver {

class SpreadWebhookRefresh {
 public:
  // kInvalidArgument as webhook_refresh_command (no target, no replay key, a bad connection id,
  // options out of range), and for keys not spelled in layout v2.
  static Result<SpreadWebhookRefresh> start(const RedisKeys& keys, const WebhookVerified& verified,
                                            const WebhookRefreshRequest& request, int64_t now_ms,
                                            const EnqueueOptions& options);

  // This round's commands (empty once done).
  const std::vector<RedisCommand>& commands() const { return commands_; }
  int round() const { return round_; }
  bool done() const { return done_; }

  // The replies to commands(), in their order. Then done() or a next round. kStoreUnavailable for
  // a Redis error reply (in any round: what the earlier rounds wrote stays, the guard is not set),
  // for a layout record that does not say v2:ready (nothing written; layout_seen() says v1 when
  // the namespace is in v1, which the v1 script serves), kStoreNotReady when the namespace record
  // is not `ready` (nothing written), kInvalidReply for any other shape; after an error the
  // webhook is over.
  Status feed(const std::vector<RespValue>& replies);

  // The outcome, once done().
  WebhookRefreshReply take_reply();

  // After round 1: the layout the namespace's record says a writer writes it in (write_layout,
  // shared/layout.h: nullopt for a record this build does not write, `v2:filling:<at>` included).
  std::optional<KeyLayout> layout_seen() const { return layout_seen_; }

 private:
  enum class Action { kUnknownConnection, kUnknownPrincipal, kRefresh, kMarkConnection };
  struct Target {
    std::string cid;
    std::optional<Principal> principal;         // as sent
    Principal refreshed = Principal::shared();  // kRefresh: the principal marked and queued
    Action action = Action::kUnknownConnection;
    std::string status;
    bool marked = false;
  };
  static constexpr std::size_t kReadsPerTarget = 5;

  SpreadWebhookRefresh(RedisKeys keys, std::string replay_key, int64_t retain_ms, int64_t now_ms,
                       EnqueueOptions options);
  Status feed_checks(const std::vector<RespValue>& replies);
  Status feed_marks(const std::vector<RespValue>& replies);
  Status feed_queue(const std::vector<RespValue>& replies);
  Status feed_guard(const std::vector<RespValue>& replies);
  Status plan_marks();
  Status plan_queue();
  void plan_guard();
  void finish(bool replay);

  RedisKeys keys_;
  std::string replay_key_;  // the guard's key
  int64_t retain_ms_ = 1;
  int64_t at_ms_ = 0;
  std::string at_;  // at_ms_ as the scripts take it
  EnqueueOptions options_;
  std::vector<Target> targets_;
  std::vector<RedisCommand> commands_;
  std::vector<std::size_t> command_targets_;  // rounds 2 and 3: the target of each command
  WebhookRefreshReply reply_;
  std::optional<KeyLayout> layout_seen_;
  int round_ = 1;
  bool done_ = false;
  bool failed_ = false;
};

}  // namespace quiver
