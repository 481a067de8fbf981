#include "shared/webhook_spread.h"

#include <algorithm>
#include <utility>

#include "shared/layout.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, "webhook (v2): " + std::move(message));
}

Error bad_reply(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kInvalidReply, "webhook reply (v2): " + where + ": " + what);
}

Status redis_error(const RespValue& reply) {
  return Error(ErrorCode::kStoreUnavailable, "webhook: Redis error: " + reply.str);
}

// An integer reply 0 or 1 (EXISTS, SISMEMBER, HEXISTS).
std::optional<bool> flag(const RespValue& v) {
  std::optional<int64_t> n = v.as_int();
  if (!n || (*n != 0 && *n != 1)) return std::nullopt;
  return *n == 1;
}

}  // namespace

SpreadWebhookRefresh::SpreadWebhookRefresh(RedisKeys keys, std::string replay_key,
                                           int64_t retain_ms, int64_t now_ms,
                                           EnqueueOptions options)
    : keys_(std::move(keys)),
      replay_key_(std::move(replay_key)),
      retain_ms_(retain_ms),
      at_ms_(now_ms),
      at_(std::to_string(now_ms)),
      options_(options) {}

Result<SpreadWebhookRefresh> SpreadWebhookRefresh::start(const RedisKeys& keys,
                                                         const WebhookVerified& verified,
                                                         const WebhookRefreshRequest& request,
                                                         int64_t now_ms,
                                                         const EnqueueOptions& options) {
  if (keys.key_layout() != KeyLayout::kV2) return invalid("the keys are not spelled in layout v2");
  if (options.window_ms <= 0 || options.stream_maxlen <= 0 || options.manual_requeue_after_ms < 0) {
    return invalid("window_ms and stream_maxlen must be positive");
  }
  if (request.targets.empty()) return invalid("no target");
  if (verified.replay_key.empty()) return invalid("no replay key");
  SpreadWebhookRefresh hook(keys, keys.replay(verified.replay_key),
                            std::max<int64_t>(1, verified.retain_for_ms), now_ms, options);
  hook.commands_.push_back({"GET", keys.layout()});
  hook.commands_.push_back({"GET", keys.namespace_record()});
  hook.commands_.push_back({"EXISTS", hook.replay_key_});
  for (const WebhookRefreshTarget& t : request.targets) {
    if (Status s = validate_connection_id(t.connection_id); !s.ok()) return s.error();
    Target target;
    target.cid = t.connection_id;
    target.principal = t.principal;
    // The principal whose data a refresh would mark: the member named, else `shared`.
    const Principal p = t.principal ? *t.principal : Principal::shared();
    Result<std::string> conn = keys.conn(t.connection_id);
    Result<std::string> grantees = keys.grantees(t.connection_id);
    Result<std::string> manifest = keys.manifest(t.connection_id, p);
    Result<std::string> lease = keys.lease(t.connection_id, p);
    for (const Result<std::string>* k : {&conn, &grantees, &manifest, &lease}) {
      if (!k->ok()) return k->error();
    }
    // kReadsPerTarget commands, in this order (feed_checks reads them so).
    hook.commands_.push_back({"HGET", *conn, redis_field::kCredentialMode});
    if (p.is_shared()) {
      hook.commands_.push_back({"EXISTS", *grantees});
    } else {
      hook.commands_.push_back({"SISMEMBER", *grantees, p.str()});
    }
    hook.commands_.push_back({"HEXISTS", *manifest, redis_field::kBody});
    hook.commands_.push_back({"HEXISTS", *manifest, redis_field::kManifest});
    hook.commands_.push_back({"EXISTS", *lease});
    target.refreshed = p;
    hook.targets_.push_back(std::move(target));
  }
  return hook;
}

Status SpreadWebhookRefresh::feed(const std::vector<RespValue>& replies) {
  if (done_ || failed_) return Error(ErrorCode::kInternal, "webhook (v2): fed after it ended");
  if (replies.size() != commands_.size()) {
    failed_ = true;
    return bad_reply("round " + std::to_string(round_),
                     std::to_string(replies.size()) + " replies to " +
                         std::to_string(commands_.size()) + " commands");
  }
  for (const RespValue& r : replies) {
    if (r.is_error()) {
      failed_ = true;
      return redis_error(r);
    }
  }
  Status s = round_ == 1   ? feed_checks(replies)
             : round_ == 2 ? feed_marks(replies)
             : round_ == 3 ? feed_queue(replies)
                           : feed_guard(replies);
  if (!s.ok()) failed_ = true;
  return s;
}

Status SpreadWebhookRefresh::feed_checks(const std::vector<RespValue>& replies) {
  // The layout record: v2:ready, or nothing is written. A writer's rule (write_layout): a
  // namespace being copied (`v2:filling:<at>`, which readers read as v1) takes no write in either
  // layout, so it is unknown here, not v1.
  std::optional<std::string_view> layout = replies[0].as_string();
  if (!layout && !replies[0].is_nil())
    return bad_reply("layout record", "neither a string nor nil");
  layout_seen_ = write_layout(layout);
  if (!layout_seen_) return unknown_layout_error(keys_.layout(), *layout, "webhook");
  if (*layout_seen_ != KeyLayout::kV2) {
    return Error(ErrorCode::kStoreUnavailable,
                 std::string("webhook: the namespace is in key layout ") +
                     key_layout_name(*layout_seen_) +
                     ", not v2; nothing was written (its v1 script serves it)");
  }
  // The namespace record, as webhook_refresh.lua checks it: ready, or nothing is written.
  std::optional<std::string_view> record = replies[1].as_string();
  if (!record || record->substr(0, sizeof(kNamespaceReady)) != std::string(kNamespaceReady) + ":") {
    std::string state = "missing";
    if (record) {
      state.clear();
      for (char c : *record) {
        if (c < 'a' || c > 'z') break;
        state += c;
      }
      if (state.empty()) state = "unknown";
    } else if (!replies[1].is_nil()) {
      return bad_reply("namespace record", "neither a string nor nil");
    }
    return *namespace_not_ready(RespValue::array({RespValue::bulk_string(kNamespaceNotReadyTag),
                                                  RespValue::bulk_string(state)}),
                                "webhook");
  }
  std::optional<bool> seen = flag(replies[2]);
  if (!seen) return bad_reply("replay guard", "EXISTS did not answer 0 or 1");
  if (*seen) {
    finish(/*replay=*/true);
    return Status::Ok();
  }
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    Target& t = targets_[i];
    const std::size_t at = 3 + i * kReadsPerTarget;
    const std::string where = "target " + std::to_string(i);
    std::optional<std::string_view> mode = replies[at].as_string();
    if (!mode && !replies[at].is_nil()) return bad_reply(where, "credential_mode is no string");
    std::optional<bool> member_or_grantees = flag(replies[at + 1]);
    std::optional<bool> body = flag(replies[at + 2]);
    std::optional<bool> inline_manifest = flag(replies[at + 3]);
    std::optional<bool> lease = flag(replies[at + 4]);
    if (!member_or_grantees || !body || !inline_manifest || !lease) {
      return bad_reply(where, "a read did not answer 0 or 1");
    }
    const bool named_member = t.principal && !t.principal->is_shared();
    // webhook_refresh.lua's rules, target for target.
    if (mode == std::optional<std::string_view>("shared")) {
      t.action = named_member ? Action::kUnknownPrincipal : Action::kRefresh;
    } else if (mode == std::optional<std::string_view>("per_member")) {
      if (!t.principal) {
        t.action = Action::kMarkConnection;
        t.marked = *member_or_grantees;  // the connection has grantees
      } else if (named_member && *member_or_grantees) {
        t.action = Action::kRefresh;
      } else {
        t.action = Action::kUnknownPrincipal;
      }
    } else {
      t.action = Action::kUnknownConnection;
    }
    switch (t.action) {
      case Action::kUnknownConnection:
        t.status = "unknown_connection";
        t.marked = false;
        break;
      case Action::kUnknownPrincipal:
        t.status = "unknown_principal";
        t.marked = false;
        break;
      case Action::kMarkConnection:
        t.status = kWebhookConnectionMarked;
        break;
      case Action::kRefresh: {
        // Read here, passed to the script (which may not declare them: the edge only reads them).
        t.marked = *body || *inline_manifest;
        t.status = *lease ? "in_progress" : "";
        break;
      }
    }
  }
  return plan_marks();
}

Status SpreadWebhookRefresh::plan_marks() {
  commands_.clear();
  command_targets_.clear();
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const Target& t = targets_[i];
    Result<RedisCommand> command = Error(ErrorCode::kInternal, "no command");
    if (t.action == Action::kRefresh) {
      Result<std::string> mark = keys_.invalidated(t.cid, t.refreshed);
      Result<std::string> version = keys_.version_of(t.cid, t.refreshed);
      Result<std::string> gate = keys_.revalidate_gate(t.cid, t.refreshed);
      for (const Result<std::string>* k : {&mark, &version, &gate}) {
        if (!k->ok()) return k->error();
      }
      command =
          schema_script_command("webhook_mark_v2.lua", {*mark, *version, *gate},
                                {at_, std::to_string(options_.window_ms),
                                 std::to_string(options_.manual_requeue_after_ms),
                                 t.marked ? "1" : "0", t.status == "in_progress" ? "1" : "0"});
    } else if (t.action == Action::kMarkConnection) {
      Result<std::string> marked = keys_.marked(t.cid);
      Result<std::string> version = keys_.conn_version(t.cid);
      for (const Result<std::string>* k : {&marked, &version}) {
        if (!k->ok()) return k->error();
      }
      command = schema_script_command("webhook_conn_mark_v2.lua", {*marked, *version}, {at_});
    } else {
      continue;
    }
    if (!command.ok()) return command.error();
    commands_.push_back(std::move(*command));
    command_targets_.push_back(i);
  }
  round_ = 2;
  if (commands_.empty()) return plan_queue();
  return Status::Ok();
}

Status SpreadWebhookRefresh::feed_marks(const std::vector<RespValue>& replies) {
  for (std::size_t c = 0; c < replies.size(); ++c) {
    Target& t = targets_[command_targets_[c]];
    const std::string where = "mark of target " + std::to_string(command_targets_[c]);
    if (t.action == Action::kMarkConnection) {
      if (!flag(replies[c])) return bad_reply(where, "expected 0 or 1");
      continue;
    }
    const std::vector<RespValue>* a = replies[c].as_array();
    std::optional<std::string_view> status, marked;
    if (a != nullptr && a->size() == 2) {
      status = (*a)[0].as_string();
      marked = (*a)[1].as_string();
    }
    if (!status || !marked || (*marked != "0" && *marked != "1") ||
        (*status != "queued" && *status != "already_queued" && *status != "in_progress")) {
      return bad_reply(where, "unexpected reply " + replies[c].debug_string());
    }
    t.status = std::string(*status);
    t.marked = *marked == "1";
  }
  return plan_queue();
}

Status SpreadWebhookRefresh::plan_queue() {
  commands_.clear();
  command_targets_.clear();
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const Target& t = targets_[i];
    if (t.action != Action::kRefresh || t.status == "already_queued") continue;
    // webhook_refresh.lua's entry, field for field, on the connection's shard stream.
    Result<RedisCommand> xadd = revalidate_xadd_command(
        keys_, Revalidation{t.cid, t.refreshed, kWebhookRefreshReason, false}, at_ms_,
        options_.stream_maxlen);
    if (!xadd.ok()) return xadd.error();
    commands_.push_back(std::move(*xadd));
    command_targets_.push_back(i);
  }
  round_ = 3;
  if (commands_.empty()) plan_guard();
  return Status::Ok();
}

Status SpreadWebhookRefresh::feed_queue(const std::vector<RespValue>& replies) {
  for (std::size_t c = 0; c < replies.size(); ++c) {
    if (!replies[c].as_string()) {
      return bad_reply("queue of target " + std::to_string(command_targets_[c]),
                       "XADD answered no entry id: " + replies[c].debug_string());
    }
  }
  plan_guard();
  return Status::Ok();
}

void SpreadWebhookRefresh::plan_guard() {
  commands_.clear();
  command_targets_.clear();
  commands_.push_back({"SET", replay_key_, at_, "NX", "PX", std::to_string(retain_ms_)});
  round_ = 4;
}

Status SpreadWebhookRefresh::feed_guard(const std::vector<RespValue>& replies) {
  if (replies[0].is_nil()) {
    // The same signed request went through meanwhile (it was answered 202): this one is a replay.
    finish(/*replay=*/true);
    return Status::Ok();
  }
  if (replies[0].as_string() != std::optional<std::string_view>("OK")) {
    return bad_reply("replay guard", "SET answered " + replies[0].debug_string());
  }
  finish(/*replay=*/false);
  return Status::Ok();
}

void SpreadWebhookRefresh::finish(bool replay) {
  commands_.clear();
  command_targets_.clear();
  done_ = true;
  reply_.replay = replay;
  if (replay) return;
  for (const Target& t : targets_) {
    WebhookRefreshResult r;
    r.connection_id = t.cid;
    switch (t.action) {
      case Action::kUnknownConnection:
      case Action::kMarkConnection:
        break;  // no principal
      case Action::kUnknownPrincipal:
        r.principal = t.principal;
        break;
      case Action::kRefresh:
        r.principal = t.refreshed;
        break;
    }
    r.status = t.status;
    r.marked_stale = t.marked;
    reply_.results.push_back(std::move(r));
  }
}

WebhookRefreshReply SpreadWebhookRefresh::take_reply() { return std::move(reply_); }

}  // namespace quiver
