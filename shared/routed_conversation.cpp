#include "shared/routed_conversation.h"

#include <algorithm>
#include <utility>

namespace quiver {

namespace {

constexpr std::string_view kOk = "+OK\r\n";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

const char* part_turn_name(PartTurn turn) {
  switch (turn) {
    case PartTurn::kRead:
      return "read";
    case PartTurn::kWrite:
      return "write";
    case PartTurn::kWait:
      return "wait";
    case PartTurn::kRound:
      return "round";
  }
  return "round";
}

// ---- the isolate's map -------------------------------------------------------------------------

ClusterRouter::ClusterRouter(ClusterRouterSettings settings, uint16_t slot)
    : settings_(std::move(settings)), slot_(slot) {}

std::optional<ClusterNode> ClusterRouter::node_for_slot(bool read, bool* replica) {
  *replica = false;
  const ClusterShard* shard = have_map_ ? map_.shard_for_slot(slot_) : nullptr;
  if (shard == nullptr) return std::nullopt;
  if (read && settings_.replica_reads) {
    std::vector<const ClusterNode*> healthy;
    for (const ClusterNode& r : shard->replicas) {
      if (r.healthy) healthy.push_back(&r);
    }
    if (!healthy.empty()) {
      *replica = true;
      return *healthy[spread_++ % healthy.size()];
    }
  }
  return shard->master;
}

ClusterNode ClusterRouter::refresh_node() {
  std::vector<ClusterNode> candidates = settings_.seeds;
  if (have_map_) {
    for (ClusterNode& m : map_.masters()) {
      bool known = false;
      for (const ClusterNode& c : candidates) known = known || c.same_address(m);
      if (!known) candidates.push_back(std::move(m));
    }
  }
  return candidates[next_refresh_++ % candidates.size()];
}

RedisCommand ClusterRouter::map_command() const {
  return use_slots_ ? RedisCommand{"CLUSTER", "SLOTS"} : RedisCommand{"CLUSTER", "SHARDS"};
}

Status ClusterRouter::learn(const RespValue& reply, const ClusterNode& answered) {
  if (reply.is_error()) {
    const char* asked = use_slots_ ? "CLUSTER SLOTS" : "CLUSTER SHARDS";
    // A server before 7.0 knows no CLUSTER SHARDS: ask it for SLOTS next time.
    if (!use_slots_ && reply.str.find("nknown") != std::string::npos) use_slots_ = true;
    return redis_reply_error(reply, asked);
  }
  Result<ClusterSlotMap> map =
      use_slots_
          ? ClusterSlotMap::from_slots(reply, answered.host)
          : ClusterSlotMap::from_shards(reply, answered.host, {},
                                        settings_.tls ? ClusterPort::kTls : ClusterPort::kPlain);
  if (!map.ok()) return map.error();
  map_ = std::move(*map);
  have_map_ = true;
  ++stats_.refreshes;
  return Status();
}

void ClusterRouter::moved(uint16_t slot, const ClusterNode& node) {
  if (have_map_) map_.apply_moved(slot, node);
  ++stats_.moved;
}

// ---- one request's conversation -----------------------------------------------------------------

RoutedConversation::RoutedConversation(RespLimits limits, RedisCredentials credentials,
                                       ClusterRouter* router)
    : limits_(limits), credentials_(std::move(credentials)), router_(router) {
  if (router_ == nullptr)
    conns_.push_back(Conn{ClusterNode{}, RedisConversation(limits_, credentials_)});
}

RoutedWrite RoutedConversation::begin_spread(std::vector<RedisCommand> commands, ScriptForm form,
                                             RoundAccess access,
                                             std::vector<bool> hand_back_split) {
  // On one Redis every key is on the one server: one pipeline, as any round (and no slot is ever
  // split: nothing answers TRYAGAIN).
  if (router_ == nullptr) return begin(std::move(commands), form, /*keep_bytes=*/false, access);
  spread_next_ = true;
  hand_back_split_next_ = std::move(hand_back_split);
  return begin(std::move(commands), form, /*keep_bytes=*/false, access);
}

RoutedWrite RoutedConversation::begin(std::vector<RedisCommand> commands, ScriptForm form,
                                      bool keep_bytes, RoundAccess access) {
  spread_ = std::exchange(spread_next_, false);
  hand_back_split_ = std::exchange(hand_back_split_next_, {});
  parts_.clear();
  parts_error_.reset();
  asks_.clear();
  bytes_.clear();
  error_ = Error();
  sent_to_replica_ = false;
  if (router_ == nullptr) {
    in_round_ = true;
    RedisRound round = conns_[0].conv.begin(std::move(commands), form, keep_bytes);
    if (!conns_[0].conv.in_round()) in_round_ = false;
    RoutedWrite w;
    w.bytes = std::move(round.bytes);
    w.new_connection = round.new_connection;
    return w;
  }
  commands_ = std::move(commands);
  form_ = form;
  keep_bytes_ = keep_bytes;
  access_ = access;
  pending_.clear();
  for (std::size_t i = 0; i < commands_.size(); ++i) pending_.push_back(i);
  replies_.assign(commands_.size(), std::nullopt);
  attempts_ = 0;
  redirects_ = 0;
  ask_.reset();
  refresh_ = false;
  delay_ms_ = 0;
  in_round_ = true;
  if (!hand_back_split_.empty() && hand_back_split_.size() != commands_.size()) {
    give_up(Error(ErrorCode::kInvalidArgument,
                  "redis cluster: " + std::to_string(hand_back_split_.size()) +
                      " split flags for " + std::to_string(commands_.size()) + " commands"));
    return take_write();
  }
  // kFailed (no write to make: give_up ended the round): the caller sees !in_round(), error().
  dispatch();
  return take_write();
}

RoutedWrite RoutedConversation::take_write() { return std::exchange(write_, RoutedWrite{}); }

std::vector<RespValue> RoutedConversation::take_replies() {
  if (router_ == nullptr) return conns_[0].conv.take_replies();
  std::vector<RespValue> out;
  out.reserve(replies_.size());
  for (std::optional<RespValue>& r : replies_) out.push_back(r ? std::move(*r) : RespValue::nil());
  replies_.clear();
  return out;
}

std::size_t RoutedConversation::conn_for(const ClusterNode& node, std::vector<std::string>* close) {
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    if (conns_[i].node.same_address(node)) {
      conns_[i].used = ++use_;
      return i;
    }
  }
  if (conns_.size() >= kMaxNodesPerRequest) {
    // Workers' cap: the least recently used connection goes.
    std::size_t oldest = 0;
    for (std::size_t i = 1; i < conns_.size(); ++i) {
      if (conns_[i].used < conns_[oldest].used) oldest = i;
    }
    close->push_back(conns_[oldest].node.address());
    conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(oldest));
  }
  conns_.push_back(Conn{node, RedisConversation(limits_, credentials_), ++use_});
  return conns_.size() - 1;
}

std::size_t RoutedConversation::conn_at(const ClusterNode& node) const {
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    if (conns_[i].node.same_address(node)) return i;
  }
  return conns_.size();
}

RedisTurn RoutedConversation::give_up(Error error) {
  error_ = std::move(error);
  parts_.clear();
  parts_error_.reset();
  in_round_ = false;
  return RedisTurn::kFailed;
}

RedisTurn RoutedConversation::dispatch() {
  std::vector<std::string> close;
  ClusterNode node;
  std::vector<RedisCommand> sent;
  ScriptForm form = form_;
  bool keep = false;
  bool replica = false;
  learning_ = false;
  asking_ = false;
  preamble_ = 0;
  parts_.clear();
  if (refresh_ || !router_->have_map() || router_->take_stale()) {
    refresh_ = false;
    learning_ = true;
    node = router_->refresh_node();
    sent.push_back(router_->map_command());
  } else if (spread_) {
    return dispatch_spread();
  } else {
    if (ask_) {
      node = *ask_;
      ask_.reset();
      asking_ = true;
      form = ScriptForm::kText;  // a NOSCRIPT retry would go without ASKING
    } else {
      std::optional<ClusterNode> n = router_->node_for_slot(first_try_at_replica(), &replica);
      if (!n) {
        ++attempts_;
        ClusterStep step =
            cluster_step_after_io_failure("no node serves slot " + std::to_string(router_->slot()),
                                          attempts_, router_->settings().retry);
        if (step.action == ClusterStep::Action::kGiveUp) return give_up(step.error);
        router_->note_retry();
        refresh_ = true;
        delay_ms_ = std::max(delay_ms_, step.backoff_ms);
        return dispatch();
      }
      node = *n;
    }
    keep = keep_bytes_ && pending_.size() == 1;
    for (std::size_t i : pending_) {
      if (asking_) sent.push_back({"ASKING"});
      sent.push_back(commands_[i]);
    }
  }
  current_ = conn_for(node, &close);
  RedisConversation& conv = current();
  sent_to_replica_ = sent_to_replica_ || replica;
  if (replica && !conv.connected()) {
    // AUTH + READONLY in one write (RedisConversation puts AUTH first).
    std::vector<RedisCommand> preamble = cluster_connection_preamble(true);
    preamble_ = preamble.size();
    sent.insert(sent.begin(), preamble.begin(), preamble.end());
  }
  RedisRound round = conv.begin(std::move(sent), form, keep);
  write_.bytes = std::move(round.bytes);
  write_.new_connection = round.new_connection;
  write_.node = node;
  write_.delay_ms = std::exchange(delay_ms_, 0);
  write_.close = std::move(close);
  return RedisTurn::kWrite;
}

RedisTurn RoutedConversation::feed(std::string_view bytes) {
  if (router_ == nullptr) {
    RedisTurn turn = conns_[0].conv.feed(bytes);
    answered_ = conns_[0].conv.answered();
    if (turn == RedisTurn::kWrite) write_.bytes = conns_[0].conv.take_write();
    if (turn == RedisTurn::kFailed) error_ = conns_[0].conv.error();
    if (turn == RedisTurn::kDone || turn == RedisTurn::kFailed) in_round_ = false;
    return turn;
  }
  if (!in_round_) return give_up(Error(ErrorCode::kInvalidReply, "Redis sent bytes unasked"));
  if (!parts_.empty()) {
    if (parts_.size() > 1) {
      return give_up(Error(ErrorCode::kInvalidReply,
                           "redis cluster: bytes for a write in parts came without their part"));
    }
    return single_part(feed_part(0, bytes));
  }
  RedisConversation& conv = current();
  RedisTurn turn = conv.feed(bytes);
  answered_ = conv.answered();
  switch (turn) {
    case RedisTurn::kRead:
      return turn;
    case RedisTurn::kWrite:  // NOSCRIPT: EVAL on the same connection
      write_ = RoutedWrite{};
      write_.bytes = conv.take_write();
      write_.node = conns_[current_].node;
      return turn;
    case RedisTurn::kFailed:
      // AUTH refused or a broken reply: the connection is poisoned; no other node would do better.
      return give_up(conv.error());
    case RedisTurn::kDone:
      break;
  }
  return cluster_done();
}

RedisTurn RoutedConversation::cluster_done() {
  RedisConversation& conv = current();
  const ClusterNode node = conns_[current_].node;
  std::vector<RespValue> got = conv.take_replies();
  if (learning_) {
    Status learned = got.empty() ? Status(Error(ErrorCode::kInvalidReply, "no reply"))
                                 : router_->learn(got.front(), node);
    if (!learned.ok()) return retry_after_failure("the cluster map: " + learned.error().message);
    return dispatch();
  }
  // The commands' replies, without READONLY's and ASKING's.
  std::vector<RespValue> answers;
  bool preamble_ok = true;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const bool extra = k < preamble_ || (asking_ && (k - preamble_) % 2 == 0);
    if (extra) {
      preamble_ok = preamble_ok && got[k].is_ok();
      continue;
    }
    answers.push_back(std::move(got[k]));
  }
  if (keep_bytes_ && pending_.size() == 1) {
    bytes_ = conv.reply_bytes();
    const std::size_t extras = preamble_ + (asking_ ? 1 : 0);
    if (!preamble_ok) {
      bytes_.clear();
    } else {
      // After a NOSCRIPT retry only the EVAL's bytes were kept: strip what is there.
      for (std::size_t k = 0; k < extras && starts_with(bytes_, kOk); ++k) {
        bytes_.erase(0, kOk.size());
      }
    }
  }
  ++attempts_;
  // Every command went to one slot: the first routing answer decides for the rest.
  std::optional<ClusterStep> step;
  std::vector<std::size_t> again;
  for (std::size_t j = 0; j < answers.size() && j < pending_.size(); ++j) {
    ClusterStep s = decide_cluster_step(answers[j], node.host, attempts_, redirects_,
                                        router_->settings().retry);
    if (s.action == ClusterStep::Action::kUseReply) {
      replies_[pending_[j]] = std::move(answers[j]);
      continue;
    }
    again.push_back(pending_[j]);
    if (!step) step = std::move(s);
  }
  if (!step) {
    in_round_ = false;
    return RedisTurn::kDone;
  }
  if (step->action == ClusterStep::Action::kAskAt) {
    router_->note_ask();
    ++redirects_;
    step = hold_ask_for_round(std::move(*step), commands_, attempts_, router_->settings().retry);
  }
  switch (step->action) {
    case ClusterStep::Action::kGiveUp:
      return give_up(step->error);
    case ClusterStep::Action::kRetryAt:
      router_->moved(step->slot, step->node);
      ++redirects_;
      break;
    case ClusterStep::Action::kAskAt:
      ask_ = step->node;
      break;
    case ClusterStep::Action::kRefreshThenRetry:
      router_->note_retry();
      refresh_ = true;
      break;
    case ClusterStep::Action::kBackoffThenRetry:
      router_->note_retry();
      refresh_ = refresh_ || step->refresh_map;
      delay_ms_ = std::max(delay_ms_, step->backoff_ms);
      break;
    case ClusterStep::Action::kUseReply:
      break;
  }
  pending_ = std::move(again);
  bytes_.clear();
  return dispatch();
}

RedisTurn RoutedConversation::retry_after_failure(std::string_view why) {
  ++attempts_;
  ClusterStep step = cluster_step_after_io_failure(why, attempts_, router_->settings().retry);
  if (step.action == ClusterStep::Action::kGiveUp) return give_up(step.error);
  router_->note_retry();
  refresh_ = true;
  delay_ms_ = std::max(delay_ms_, step.backoff_ms);
  return dispatch();
}

RedisTurn RoutedConversation::dispatch_spread() {
  std::vector<Part> parts;
  std::vector<bool> replica;  // per part: a replica's connection (READONLY first)
  if (!asks_.empty()) {
    // Each importing node's asked commands, ASKING + each, once; at most the socket cap at once.
    const std::size_t n = std::min(asks_.size(), kMaxNodesPerRequest);
    for (std::size_t g = 0; g < n; ++g) {
      Part p;
      p.node = std::move(asks_[g].first);
      p.commands = std::move(asks_[g].second);
      p.asking = true;
      parts.push_back(std::move(p));
      replica.push_back(false);
    }
    asks_.erase(asks_.begin(), asks_.begin() + static_cast<std::ptrdiff_t>(n));
  } else {
    std::vector<ClusterRequest> requests;
    requests.reserve(pending_.size());
    for (std::size_t i : pending_) requests.push_back({commands_[i], first_try_at_replica()});
    ClusterPlanOptions options;
    options.max_nodes = kMaxNodesPerRequest;
    options.replica_reads = router_->settings().replica_reads;
    options.spread = use_;
    ClusterPlan plan = plan_cluster_batch(router_->map(), requests, options);
    if (!plan.refused.empty()) {
      const Error& why = plan.refused.front().second;
      // CROSSSLOT or a command without a key: the round is wrong, no map would route it.
      if (why.code != ErrorCode::kStoreUnavailable) return give_up(why);
      // No node serves a slot: the map first.
      ++attempts_;
      ClusterStep step =
          cluster_step_after_io_failure(why.message, attempts_, router_->settings().retry);
      if (step.action == ClusterStep::Action::kGiveUp) return give_up(step.error);
      router_->note_retry();
      refresh_ = true;
      delay_ms_ = std::max(delay_ms_, step.backoff_ms);
      return dispatch();
    }
    if (plan.batches.empty()) {
      return give_up(
          Error(ErrorCode::kInvalidArgument, "redis cluster: a spread round of nothing"));
    }
    // Every group of the plan in this write; what it deferred past the socket cap stays pending
    // and is planned again once this write settled.
    std::vector<bool> taken(pending_.size(), false);
    for (const ClusterNodeBatch& batch : plan.batches) {
      Part p;
      p.node = batch.node;
      for (std::size_t k : batch.indices) {
        p.commands.push_back(pending_[k]);
        taken[k] = true;
      }
      parts.push_back(std::move(p));
      replica.push_back(batch.replica);
    }
    std::vector<std::size_t> rest;
    for (std::size_t k = 0; k < pending_.size(); ++k) {
      if (!taken[k]) rest.push_back(pending_[k]);
    }
    pending_ = std::move(rest);
  }
  // The parts' nodes are distinct and at most kMaxNodesPerRequest: a connection closed for the
  // cap is never one of this write's (they are the most recently used).
  std::vector<std::string> close;
  std::vector<RoutedPart> out;
  out.reserve(parts.size());
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Part& p = parts[k];
    std::vector<RedisCommand> sent;
    for (std::size_t i : p.commands) {
      if (p.asking) sent.push_back({"ASKING"});
      sent.push_back(commands_[i]);
    }
    RedisConversation& conv = conns_[conn_for(p.node, &close)].conv;
    sent_to_replica_ = sent_to_replica_ || replica[k];
    if (replica[k] && !conv.connected()) {
      // AUTH + READONLY in one write (RedisConversation puts AUTH first).
      std::vector<RedisCommand> preamble = cluster_connection_preamble(true);
      p.preamble = preamble.size();
      sent.insert(sent.begin(), preamble.begin(), preamble.end());
    }
    // An asked command goes as EVAL: a NOSCRIPT retry would go without ASKING.
    RedisRound round =
        conv.begin(std::move(sent), p.asking ? ScriptForm::kText : form_, /*keep_bytes=*/false);
    out.push_back(RoutedPart{std::move(round.bytes), round.new_connection, p.node});
  }
  parts_ = std::move(parts);
  write_ = RoutedWrite{};
  write_.delay_ms = std::exchange(delay_ms_, 0);
  write_.close = std::move(close);
  if (out.size() == 1) {
    // One node: an ordinary write, fed by feed().
    current_ = conn_at(out[0].node);
    write_.bytes = std::move(out[0].bytes);
    write_.new_connection = out[0].new_connection;
    write_.node = std::move(out[0].node);
  } else {
    write_.parts = std::move(out);
  }
  return RedisTurn::kWrite;
}

PartTurn RoutedConversation::feed_part(std::size_t part, std::string_view bytes) {
  const std::size_t at = part < parts_.size() ? conn_at(parts_[part].node) : conns_.size();
  if (!in_round_ || at == conns_.size() || parts_[part].state != PartState::kInFlight) {
    parts_.clear();
    round_turn_ = give_up(Error(ErrorCode::kInvalidReply,
                                "Redis sent bytes unasked (part " + std::to_string(part) + ")"));
    return PartTurn::kRound;
  }
  Part& p = parts_[part];
  RedisConversation& conv = conns_[at].conv;
  RedisTurn turn = conv.feed(bytes);
  answered_ = conv.answered();
  switch (turn) {
    case RedisTurn::kRead:
      return PartTurn::kRead;
    case RedisTurn::kWrite:  // NOSCRIPT: EVAL on the same connection
      write_ = RoutedWrite{};
      write_.bytes = conv.take_write();
      write_.node = p.node;
      return PartTurn::kWrite;
    case RedisTurn::kFailed:
      // AUTH refused or a broken reply: the round fails once the other parts settled.
      p.state = PartState::kFailed;
      if (!parts_error_) parts_error_ = conv.error();
      break;
    case RedisTurn::kDone: {
      // The commands' replies, without READONLY's and ASKING's.
      std::vector<RespValue> got = conv.take_replies();
      for (std::size_t k = 0; k < got.size(); ++k) {
        const bool extra = k < p.preamble || (p.asking && (k - p.preamble) % 2 == 0);
        if (!extra) p.answers.push_back(std::move(got[k]));
      }
      p.state = PartState::kAnswered;
      break;
    }
  }
  return part_settled();
}

PartTurn RoutedConversation::connection_failed_part(std::size_t part, std::string_view why) {
  const std::size_t at = part < parts_.size() ? conn_at(parts_[part].node) : conns_.size();
  if (!in_round_ || at == conns_.size() || parts_[part].state != PartState::kInFlight) {
    parts_.clear();
    round_turn_ = give_up(Error(ErrorCode::kInvalidReply,
                                "a connection failed that was not in "
                                "flight (part " +
                                    std::to_string(part) + ")"));
    return PartTurn::kRound;
  }
  Part& p = parts_[part];
  Error e = conns_[at].conv.connection_failed(why);
  p.state = PartState::kFailed;
  if (e.code == ErrorCode::kTimeout) {
    // Waiting again would hold the request for attempts × the timeout: fail, refresh later.
    router_->mark_stale();
    if (!parts_error_) parts_error_ = std::move(e);
  } else if (access_ != RoundAccess::kWrite || starts_with(why, "connect")) {
    // Nothing was written (the connection never opened), or nothing written changes anything.
    p.unsent = std::move(e.message);
  } else if (!parts_error_) {
    parts_error_ = Error(e.code, e.message + " (a write that may have run is not sent again)");
  }
  return part_settled();
}

PartTurn RoutedConversation::part_settled() {
  for (const Part& p : parts_) {
    if (p.state == PartState::kInFlight) return PartTurn::kWait;
  }
  round_turn_ = parts_done();
  return PartTurn::kRound;
}

RedisTurn RoutedConversation::single_part(PartTurn turn) {
  switch (turn) {
    case PartTurn::kRead:
      return RedisTurn::kRead;
    case PartTurn::kWrite:
      return RedisTurn::kWrite;
    case PartTurn::kWait:  // one part only: settling it settles the write
      break;
    case PartTurn::kRound:
      return round_turn_;
  }
  return give_up(Error(ErrorCode::kInternal, "redis cluster: a one-part write left unsettled"));
}

RedisTurn RoutedConversation::parts_done() {
  std::vector<Part> parts = std::move(parts_);
  parts_.clear();
  if (parts_error_) {
    Error e = std::move(*parts_error_);
    parts_error_.reset();
    return give_up(std::move(e));
  }
  // Each command's reply decides for that command alone: the others of the write are answered.
  const int attempt = attempts_ + 1;
  std::vector<std::size_t> again;
  std::string unsent;  // a part's connection failed before anything was written
  bool redo = false;
  bool redirected = false;
  for (Part& p : parts) {
    if (p.state == PartState::kFailed) {
      again.insert(again.end(), p.commands.begin(), p.commands.end());
      if (unsent.empty()) unsent = std::move(p.unsent);
      redo = true;
      continue;
    }
    if (p.answers.size() != p.commands.size()) {
      return give_up(
          Error(ErrorCode::kInvalidReply, "redis cluster: " + std::to_string(p.answers.size()) +
                                              " replies from " + p.node.address() + " for " +
                                              std::to_string(p.commands.size()) + " commands"));
    }
    for (std::size_t j = 0; j < p.answers.size(); ++j) {
      const std::size_t i = p.commands[j];
      if (i < hand_back_split_.size() && hand_back_split_[i] &&
          cluster_reply_is_split_slot(p.answers[j])) {
        // Its slot is split: the reader reads it another way, now rather than after the budget.
        router_->note_split();
        replies_[i] = std::move(p.answers[j]);
        continue;
      }
      ClusterStep s = decide_cluster_step(p.answers[j], p.node.host, attempt, redirects_,
                                          router_->settings().retry);
      switch (s.action) {
        case ClusterStep::Action::kUseReply:
          replies_[i] = std::move(p.answers[j]);
          continue;
        case ClusterStep::Action::kGiveUp:
          return give_up(s.error);
        case ClusterStep::Action::kRetryAt:
          router_->moved(s.slot, s.node);
          redirected = true;
          again.push_back(i);
          break;
        case ClusterStep::Action::kAskAt: {
          router_->note_ask();
          redirected = true;
          auto group = std::find_if(asks_.begin(), asks_.end(),
                                    [&](const auto& g) { return g.first.same_address(s.node); });
          if (group == asks_.end()) {
            asks_.emplace_back(s.node, std::vector<std::size_t>{i});
          } else {
            group->second.push_back(i);
          }
          break;
        }
        case ClusterStep::Action::kRefreshThenRetry:
          router_->note_retry();
          refresh_ = true;
          again.push_back(i);
          break;
        case ClusterStep::Action::kBackoffThenRetry:
          router_->note_retry();
          refresh_ = refresh_ || s.refresh_map;
          delay_ms_ = std::max(delay_ms_, s.backoff_ms);
          again.push_back(i);
          break;
      }
      redo = true;
    }
  }
  // The budgets count writes that had something to redo, as a one-slot round's do.
  if (redo) attempts_ = attempt;
  if (redirected) ++redirects_;
  if (!unsent.empty()) {
    // Sent again, routed by a refreshed map (a failover may be under way).
    ClusterStep step = cluster_step_after_io_failure(unsent, attempts_, router_->settings().retry);
    if (step.action == ClusterStep::Action::kGiveUp) return give_up(step.error);
    router_->note_retry();
    refresh_ = true;
    delay_ms_ = std::max(delay_ms_, step.backoff_ms);
  }
  pending_.insert(pending_.end(), again.begin(), again.end());
  if (pending_.empty() && asks_.empty()) {
    in_round_ = false;
    return RedisTurn::kDone;
  }
  return dispatch();
}

RedisTurn RoutedConversation::connection_failed(std::string_view why) {
  if (router_ == nullptr) {
    error_ = conns_[0].conv.connection_failed(why);
    in_round_ = false;
    return RedisTurn::kFailed;
  }
  if (!parts_.empty()) {
    // The host failed the write as a whole: every part still in flight failed so.
    PartTurn turn = PartTurn::kWait;
    for (std::size_t k = 0; k < parts_.size() && turn != PartTurn::kRound; ++k) {
      if (parts_[k].state == PartState::kInFlight) turn = connection_failed_part(k, why);
    }
    if (turn == PartTurn::kRound) return round_turn_;
    return give_up(Error(ErrorCode::kInvalidReply, "redis cluster: a write in parts failed twice"));
  }
  Error e = current().connection_failed(why);
  if (!in_round_) return give_up(std::move(e));
  if (e.code == ErrorCode::kTimeout) {
    // Waiting again would hold the request for attempts × the timeout: fail now, refresh later.
    router_->mark_stale();
    return give_up(std::move(e));
  }
  // Nothing was written (the connection never opened), or nothing written changes anything.
  const bool unsent = starts_with(why, "connect");
  if (learning_ || access_ != RoundAccess::kWrite || unsent) {
    return retry_after_failure(e.message);
  }
  return give_up(Error(e.code, e.message + " (a write that may have run is not sent again)"));
}

void RoutedConversation::drop() {
  for (Conn& c : conns_) c.conv.drop();
  parts_.clear();
  parts_error_.reset();
  in_round_ = false;
}

}  // namespace quiver
