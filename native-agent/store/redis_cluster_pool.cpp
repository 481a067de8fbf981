#include "native-agent/store/redis_cluster_pool.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/time.h>

#include "native-agent/store/redis_link.h"
#include "shared/ascii.h"
#include "shared/redis_conversation.h"

namespace quiver {
namespace {

// One node's connection: hiredis opens the socket (connect timeout, keep-alive, send and receive
// timeouts) and runs the TLS handshake for rediss:// (redis_link.h); the core's RedisConversation
// writes the bytes and decodes the answers, through hiredis' stream (plain or TLS). A SigpipeGuard
// around each round keeps a node that went away from raising SIGPIPE.
class NodeConnection {
 public:
  NodeConnection(ClusterNode node, const RedisClusterPoolOptions& options, const RedisTls* tls)
      : node_(std::move(node)),
        options_(options),
        tls_(tls),
        conversation_({}, RedisCredentials{options.username, options.password.has_value()
                                                                 ? options.password->reveal()
                                                                 : std::string()}) {}
  ~NodeConnection() { close(); }
  NodeConnection(const NodeConnection&) = delete;
  NodeConnection& operator=(const NodeConnection&) = delete;

  // Sends `commands` as one pipeline; one reply per command. `replica`: the connection must be in
  // READONLY mode (sent with AUTH on a new connection, or ahead of the commands on an open one).
  // `*after_send` tells whether a failure may have come after the commands reached the node.
  // `timeout_ms` > 0 replaces the command timeout for this round (a blocking read).
  Result<std::vector<RespValue>> round(std::vector<RedisCommand> commands, bool replica,
                                       ScriptForm form, bool* after_send, uint64_t* opened,
                                       int64_t timeout_ms = 0) {
    if (Status s = send(std::move(commands), replica, form, after_send, opened, timeout_ms);
        !s.ok()) {
      return s.error();
    }
    return receive();
  }

  // round()'s two halves, for a round over several nodes: send() writes the pipeline (opening
  // the connection first when there is none), receive() reads its replies (and sends a NOSCRIPT's
  // EVAL again on this connection). Between the two, other connections' pipelines go out. After
  // a failed send() the connection is closed and there is nothing to receive.
  Status send(std::vector<RedisCommand> commands, bool replica, ScriptForm form, bool* after_send,
              uint64_t* opened, int64_t timeout_ms = 0) {
    *after_send = false;
    SigpipeGuard no_sigpipe;
    // A connection whose node went away (killed, failed over and restarted) is found out before
    // anything is sent on it: the commands then count as not sent, and are retried elsewhere.
    if (ctx_ != nullptr && peer_closed()) close();
    if (ctx_ == nullptr) {
      if (Status s = open(replica); !s.ok()) return s;
      ++*opened;
    }
    prefix_ = replica && !readonly_;
    if (prefix_) commands.insert(commands.begin(), RedisCommand{"READONLY"});
    *after_send = true;
    timeout_set_ = timeout_ms > 0;
    if (timeout_set_) redisSetTimeout(ctx_, to_timeval(timeout_ms));
    if (Status s = start(std::move(commands), form); !s.ok()) return s;
    return Status::Ok();
  }

  Result<std::vector<RespValue>> receive() {
    SigpipeGuard no_sigpipe;
    Result<std::vector<RespValue>> replies = finish();
    if (!replies.ok()) return replies;
    if (timeout_set_) redisSetTimeout(ctx_, to_timeval(options_.command_timeout_ms));
    timeout_set_ = false;
    if (prefix_) {
      prefix_ = false;
      if (!replies->front().is_ok()) {
        close();
        return Error(ErrorCode::kStoreUnavailable,
                     "redis " + node_.address() + ": READONLY refused: " + replies->front().str);
      }
      readonly_ = true;
      replies->erase(replies->begin());
    }
    return replies;
  }

  void close() {
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
    readonly_ = false;
    prefix_ = false;
    timeout_set_ = false;
    answered_ = false;
    conversation_.drop();
  }

 private:
  static timeval to_timeval(int64_t ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    return tv;
  }

  // Whether the node closed or reset this idle connection (it answers nothing unasked, so a
  // hang-up is all an idle socket can report).
  bool peer_closed() const {
    pollfd p{};
    p.fd = ctx_->fd;
    p.events = POLLIN | POLLRDHUP;
    if (::poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  }

  Status open(bool replica) {
    Result<redisContext*> ctx = redis_open(node_.host, node_.port, options_.connect_timeout_ms,
                                           options_.command_timeout_ms, tls_);
    if (!ctx.ok()) {
      close();
      return Error(ctx.error().code, "redis " + node_.address() + ": " + ctx.error().message);
    }
    ctx_ = *ctx;
    // AUTH (when configured) and, for a replica, READONLY: one write.
    std::vector<RedisCommand> preamble = cluster_connection_preamble(replica);
    Result<std::vector<RespValue>> replies = converse(preamble, ScriptForm::kText);
    if (!replies.ok()) {
      close();
      return replies.error();
    }
    for (const RespValue& r : *replies) {
      if (!r.is_ok()) {
        close();
        return Error(ErrorCode::kStoreUnavailable,
                     "redis " + node_.address() + ": READONLY refused: " + r.str);
      }
    }
    readonly_ = replica;
    return Status::Ok();
  }

  Result<std::vector<RespValue>> converse(std::vector<RedisCommand> commands, ScriptForm form) {
    if (Status s = start(std::move(commands), form); !s.ok()) return s.error();
    return finish();
  }

  // The round's bytes written (AUTH first on a new connection: RedisConversation's).
  Status start(std::vector<RedisCommand> commands, ScriptForm form) {
    RedisRound round = conversation_.begin(std::move(commands), form);
    if (!write_all(round.bytes)) return io_failure("sending");
    return Status::Ok();
  }

  // The round's replies read, and a NOSCRIPT's EVAL written on the way.
  Result<std::vector<RespValue>> finish() {
    while (conversation_.awaiting() > 0) {
      char buf[16384];
      std::string why;
      std::ptrdiff_t n = redis_recv(ctx_, buf, sizeof buf, &why);
      if (n == 0) continue;  // interrupted
      if (n < 0) return io_failure(why);
      switch (conversation_.feed(std::string_view(buf, static_cast<std::size_t>(n)))) {
        case RedisTurn::kRead:
          break;
        case RedisTurn::kWrite:
          if (!write_all(conversation_.take_write())) return io_failure("sending");
          break;
        case RedisTurn::kDone:
          answered_ = true;
          return conversation_.take_replies();
        case RedisTurn::kFailed: {
          Error e = conversation_.error();
          close();
          return Error(e.code, "redis " + node_.address() + ": " + e.message);
        }
      }
    }
    return conversation_.take_replies();
  }

  bool write_all(const std::string& bytes) { return redis_send_all(ctx_, bytes, &write_error_); }

  Error io_failure(const std::string& why) {
    std::string reason = why == "sending" ? "sending: " + write_error_ : why;
    reason += tls_port_hint(tls_ != nullptr, answered_, reason);
    Error e = conversation_.connection_failed(reason);
    close();
    return Error(ErrorCode::kStoreUnavailable, "redis " + node_.address() + ": " + e.message);
  }

  ClusterNode node_;
  const RedisClusterPoolOptions& options_;
  const RedisTls* tls_;  // nullptr: plain TCP
  redisContext* ctx_ = nullptr;
  bool readonly_ = false;
  bool prefix_ = false;       // the round in flight starts with READONLY
  bool timeout_set_ = false;  // the round in flight replaced the command timeout
  bool answered_ = false;     // a round was answered on this connection
  RedisConversation conversation_;
  std::string write_error_;
};

bool is_unknown_subcommand(const RespValue& reply) {
  return reply.is_error() && (reply.str.find("unknown subcommand") != std::string::npos ||
                              reply.str.find("Unknown subcommand") != std::string::npos);
}

}  // namespace

struct RedisClusterPool::Impl {
  RedisClusterPoolOptions options;
  std::shared_ptr<RedisTls> tls;  // options.tls only
  mutable std::mutex mu;
  ClusterSlotMap map;
  bool have_map = false;
  std::map<std::string, std::unique_ptr<NodeConnection>> connections;  // by address
  RedisClusterPoolStats stats;
  uint64_t spread = 0;

  NodeConnection& connection(const ClusterNode& node) {
    std::unique_ptr<NodeConnection>& c = connections[node.address()];
    if (c == nullptr) c = std::make_unique<NodeConnection>(node, options, tls.get());
    return *c;
  }

  Result<std::vector<RespValue>> round(const ClusterNode& node, std::vector<RedisCommand> commands,
                                       bool replica, ScriptForm form, bool* after_send,
                                       int64_t timeout_ms = 0) {
    return connection(node).round(std::move(commands), replica, form, after_send,
                                  &stats.connections, timeout_ms);
  }

  // Every node worth asking for the map: the known masters and replicas, then the seeds.
  std::vector<ClusterNode> map_sources() const {
    std::vector<ClusterNode> out;
    auto add = [&](const ClusterNode& n) {
      for (const ClusterNode& o : out) {
        if (o.same_address(n)) return;
      }
      out.push_back(n);
    };
    if (have_map) {
      for (const ClusterShard& s : map.shards()) {
        add(s.master);
        for (const ClusterNode& r : s.replicas) {
          if (r.healthy) add(r);
        }
      }
    }
    for (const ClusterNode& n : options.seeds) add(n);
    return out;
  }

  Status refresh_locked() {
    std::optional<ClusterSlotMap> best;
    std::string last = "no node to ask";
    ErrorCode code = ErrorCode::kStoreUnavailable;
    for (const ClusterNode& node : map_sources()) {
      bool after_send = false;
      Result<std::vector<RespValue>> r =
          round(node, {{"CLUSTER", "SHARDS"}}, false, ScriptForm::kText, &after_send);
      if (!r.ok()) {
        last = r.error().message;
        // Refused credentials are no passing state: say so rather than retry.
        if (r.error().code == ErrorCode::kUnauthenticated) code = ErrorCode::kUnauthenticated;
        continue;
      }
      Result<ClusterSlotMap> parsed = ClusterSlotMap::from_shards(
          r->front(), node.host, {}, options.tls ? ClusterPort::kTls : ClusterPort::kPlain);
      if (!parsed.ok() && is_unknown_subcommand(r->front())) {  // before Redis 7.0
        r = round(node, {{"CLUSTER", "SLOTS"}}, false, ScriptForm::kText, &after_send);
        if (!r.ok()) {
          last = r.error().message;
          continue;
        }
        parsed = ClusterSlotMap::from_slots(r->front(), node.host);
      }
      if (!parsed.ok()) {
        last = node.address() + ": " + parsed.error().message;
        continue;
      }
      if (!best || parsed->served_slots() > best->served_slots()) best = std::move(*parsed);
      if (best->covers_all_slots()) break;
    }
    if (!best || best->served_slots() == 0) {
      return Error(code, "redis cluster: no node answered with a slot map (last: " + last + ")");
    }
    map = std::move(*best);
    have_map = true;
    ++stats.refreshes;
    prune_connections();
    return Status::Ok();
  }

  // Connections to nodes that left the map (and are no seeds) are closed: the pool stays bounded
  // by the cluster's size however often nodes come and go.
  void prune_connections() {
    std::vector<ClusterNode> keep = map_sources();
    for (auto it = connections.begin(); it != connections.end();) {
      bool known = std::any_of(keep.begin(), keep.end(),
                               [&](const ClusterNode& n) { return n.address() == it->first; });
      it = known ? std::next(it) : connections.erase(it);
    }
  }

  // What a routing step asks of the pool, whichever call sent the command: MOVED updates the map,
  // a refresh or a backoff is noted, and the counters follow. The caller resends (ASK: to the
  // node named) or gives up.
  void note_step(const ClusterStep& step, bool* refresh, int64_t* backoff_ms) {
    switch (step.action) {
      case ClusterStep::Action::kRetryAt:
        map.apply_moved(step.slot, step.node);
        ++stats.moved;
        break;
      case ClusterStep::Action::kAskAt:
        ++stats.ask;
        break;
      case ClusterStep::Action::kRefreshThenRetry:
        *refresh = true;
        ++stats.retries;
        break;
      case ClusterStep::Action::kBackoffThenRetry:
        *refresh = *refresh || step.refresh_map;
        *backoff_ms = std::max(*backoff_ms, step.backoff_ms);
        ++stats.retries;
        break;
      case ClusterStep::Action::kUseReply:
      case ClusterStep::Action::kGiveUp:
        break;
    }
  }

  // One node's pipeline of a round over several nodes.
  struct RoundPart {
    ClusterNode node;
    bool replica = false;
    std::vector<RedisCommand> commands;
    // kBySha: scripts by SHA, NOSCRIPT answered with EVAL on the part's connection; kText:
    // scripts as EVAL (a part of ASKING-prefixed commands: a NOSCRIPT retry would go without).
    ScriptForm form = ScriptForm::kBySha;
  };

  // Runs `parts` (scripts in each part's `form`) and calls
  // `done(index, replies, after_send)` once per part, as the part's replies are read. With
  // options.concurrent_nodes, every part whose address is not already carrying one of this
  // round's pipelines is written before any reply is read: the parts cost one round trip
  // together. A second part for a busy address (one node in two roles) waits for a next wave.
  // Without it, each part is written and read before the next is written.
  template <typename Done>
  void fan_out(std::vector<RoundPart>& parts, Done&& done) {
    std::vector<std::size_t> waiting(parts.size());
    for (std::size_t p = 0; p < parts.size(); ++p) waiting[p] = p;
    struct InFlight {
      std::size_t part = 0;
      NodeConnection* connection = nullptr;
      bool after_send = false;
      std::optional<Error> unsent;  // send() failed: nothing to read
    };
    while (!waiting.empty()) {
      std::vector<std::size_t> later;
      std::vector<InFlight> wave;
      for (std::size_t p : waiting) {
        const bool busy = std::any_of(wave.begin(), wave.end(), [&](const InFlight& f) {
          return parts[f.part].node.same_address(parts[p].node);
        });
        if (busy || (!options.concurrent_nodes && !wave.empty())) {
          later.push_back(p);
          continue;
        }
        InFlight f;
        f.part = p;
        f.connection = &connection(parts[p].node);
        if (Status s = f.connection->send(std::move(parts[p].commands), parts[p].replica,
                                          parts[p].form, &f.after_send, &stats.connections);
            !s.ok()) {
          f.unsent = s.error();
        }
        wave.push_back(std::move(f));
      }
      for (InFlight& f : wave) {
        Result<std::vector<RespValue>> replies =
            f.unsent ? Result<std::vector<RespValue>>(std::move(*f.unsent))
                     : f.connection->receive();
        done(f.part, replies, f.after_send);
      }
      waiting.swap(later);
    }
  }

  std::vector<Result<RespValue>> run_batch_locked(std::unique_lock<std::mutex>& lock,
                                                  const std::vector<ClusterRequest>& requests);
  Result<std::vector<RespValue>> run_at_slot_locked(std::unique_lock<std::mutex>& lock,
                                                    uint16_t slot,
                                                    const std::vector<RedisCommand>& commands,
                                                    int64_t timeout_ms);
  std::vector<std::pair<ClusterNode, Result<RespValue>>> run_on_masters_locked(
      const RedisCommand& argv);
};

namespace {

// A backoff waited out without the pool's lock: other calls (the API's reads while a refresh
// waits for a slot to finish moving) go meanwhile. Whoever holds `lock` again re-reads the map.
void back_off(std::unique_lock<std::mutex>& lock, int64_t ms) {
  if (ms <= 0) return;
  lock.unlock();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  lock.lock();
}

// Per request, across the rounds of one run_batch.
struct RequestState {
  int attempts = 0;
  int redirects = 0;
  std::optional<ClusterNode> ask;  // the next try goes to this node, after ASKING
};

}  // namespace

std::vector<Result<RespValue>> RedisClusterPool::Impl::run_batch_locked(
    std::unique_lock<std::mutex>& lock, const std::vector<ClusterRequest>& requests) {
  const std::size_t n = requests.size();
  std::vector<std::optional<Result<RespValue>>> results(n);
  std::vector<RequestState> state(n);
  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < n; ++i) pending.push_back(i);

  bool refresh = !have_map;
  int64_t backoff_ms = 0;
  std::vector<std::size_t> next;
  ClusterRetryPolicy policy = options.retry;
  policy.max_tryagain_attempts =
      std::max(policy.max_tryagain_attempts, options.batch_tryagain_attempts);

  // `asked`: the node the reply came from when it was sent after ASKING. Its TRYAGAIN (the
  // command's keys not all moved yet) is retried there, after ASKING again: the source would
  // answer ASK again, each time a redirect of the budget.
  auto follow = [&](std::size_t i, const RespValue& reply, const ClusterNode* asked,
                    const std::string& host) {
    RequestState& st = state[i];
    ++st.attempts;
    if (requests[i].hand_back_split && cluster_reply_is_split_slot(reply)) {
      // Its slot is split (a reshard): the caller reads the data another way, at once.
      ++stats.split;
      results[i] = reply;
      return;
    }
    ClusterStep step = decide_cluster_step(reply, host, st.attempts, st.redirects, policy);
    if (step.action == ClusterStep::Action::kUseReply) {
      results[i] = reply;
      return;
    }
    if (step.action == ClusterStep::Action::kGiveUp) {
      results[i] = step.error;
      return;
    }
    note_step(step, &refresh, &backoff_ms);
    if (step.action == ClusterStep::Action::kRetryAt) ++st.redirects;
    if (step.action == ClusterStep::Action::kAskAt) {
      st.ask = step.node;
      ++st.redirects;
    }
    if (asked != nullptr && step.action == ClusterStep::Action::kBackoffThenRetry &&
        !step.refresh_map) {
      st.ask = *asked;
    }
    next.push_back(i);
  };
  // The node could not be reached or the connection failed (or no node serves the slot yet).
  auto failed = [&](std::size_t i, const Error& error, bool after_send) {
    RequestState& st = state[i];
    ++st.attempts;
    if (error.code == ErrorCode::kUnauthenticated) {
      results[i] = error;
      return;
    }
    if (after_send && !requests[i].read_only) {
      results[i] = Error(ErrorCode::kStoreUnavailable,
                         error.message + " (a write that may have run is not sent again)");
      return;
    }
    ClusterStep step = cluster_step_after_io_failure(error.message, st.attempts, policy);
    if (step.action == ClusterStep::Action::kGiveUp) {
      results[i] = step.error;
      return;
    }
    refresh = true;
    backoff_ms = std::max(backoff_ms, step.backoff_ms);
    ++stats.retries;
    next.push_back(i);
  };

  while (!pending.empty()) {
    back_off(lock, backoff_ms);
    backoff_ms = 0;
    if (refresh) {
      refresh = false;
      if (Status s = refresh_locked(); !s.ok() && !have_map) {
        for (std::size_t i : pending) failed(i, s.error(), false);
        pending.swap(next);
        next.clear();
        continue;
      }
    }
    std::vector<std::size_t> routed;
    std::vector<std::size_t> asking;
    for (std::size_t i : pending) (state[i].ask ? asking : routed).push_back(i);
    std::vector<ClusterRequest> sub;
    sub.reserve(routed.size());
    for (std::size_t i : routed) sub.push_back(requests[i]);
    ClusterPlanOptions plan_options;
    plan_options.replica_reads = options.replica_reads;
    plan_options.spread = spread++;
    ClusterPlan plan = plan_cluster_batch(map, sub, plan_options);

    for (const auto& [k, error] : plan.refused) {
      // An unserved slot passes (a failover in progress); a malformed command does not.
      if (error.code == ErrorCode::kStoreUnavailable) {
        failed(routed[k], error, false);
      } else {
        results[routed[k]] = error;
      }
    }
    // Every node's pipeline written, then every node's replies read (fan_out): the round waits
    // for its slowest node, not for each node in turn. Each command is decided as its node's
    // replies come; a node that failed fails its own commands only.
    std::vector<RoundPart> parts;
    parts.reserve(plan.batches.size());
    for (const ClusterNodeBatch& batch : plan.batches) {
      RoundPart part;
      part.node = batch.node;
      part.replica = batch.replica;
      for (std::size_t k : batch.indices) part.commands.push_back(requests[routed[k]].argv);
      parts.push_back(std::move(part));
    }
    fan_out(parts, [&](std::size_t p, Result<std::vector<RespValue>>& replies, bool after_send) {
      const ClusterNodeBatch& batch = plan.batches[p];
      for (std::size_t j = 0; j < batch.indices.size(); ++j) {
        std::size_t i = routed[batch.indices[j]];
        if (replies.ok()) {
          follow(i, (*replies)[j], nullptr, batch.node.host);
        } else {
          failed(i, replies.error(), after_send);
        }
      }
    });
    // ASK: ASKING and the command, to the importing node, once. Every importing node gets its
    // commands in one pipeline (ASKING before each: it holds for the next command only), the
    // nodes written before any is read, as above: several ASKs of a round cost one round trip,
    // not one each. Scripts go as EVAL: a NOSCRIPT retry would go without ASKING.
    std::vector<RoundPart> ask_parts;
    std::vector<std::vector<std::size_t>> asked_of;  // each part's requests, in order
    for (std::size_t i : asking) {
      const ClusterNode node = *state[i].ask;
      state[i].ask.reset();
      std::size_t p = 0;
      while (p < ask_parts.size() && !ask_parts[p].node.same_address(node)) ++p;
      if (p == ask_parts.size()) {
        RoundPart part;
        part.node = node;
        part.form = ScriptForm::kText;
        ask_parts.push_back(std::move(part));
        asked_of.emplace_back();
      }
      ask_parts[p].commands.push_back({"ASKING"});
      ask_parts[p].commands.push_back(requests[i].argv);
      asked_of[p].push_back(i);
    }
    fan_out(ask_parts,
            [&](std::size_t p, Result<std::vector<RespValue>>& replies, bool after_send) {
              const ClusterNode& node = ask_parts[p].node;
              for (std::size_t j = 0; j < asked_of[p].size(); ++j) {
                const std::size_t i = asked_of[p][j];
                if (replies.ok()) {
                  follow(i, (*replies)[2 * j + 1], &node, node.host);
                } else {
                  failed(i, replies.error(), after_send);
                }
              }
            });
    pending.swap(next);
    next.clear();
  }

  std::vector<Result<RespValue>> out;
  out.reserve(n);
  for (auto& r : results) {
    out.push_back(r.has_value() ? std::move(*r)
                                : Result<RespValue>(Error(ErrorCode::kStoreUnavailable,
                                                          "redis cluster: no answer")));
  }
  return out;
}

Result<std::vector<RespValue>> RedisClusterPool::Impl::run_at_slot_locked(
    std::unique_lock<std::mutex>& lock, uint16_t slot, const std::vector<RedisCommand>& commands,
    int64_t timeout_ms) {
  const std::size_t n = commands.size();
  std::vector<RespValue> replies(n);
  if (n == 0) return replies;
  const bool transaction = commands.front() == RedisCommand{"MULTI"};
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = i;
  std::vector<std::size_t> pending = all;
  std::optional<ClusterNode> ask;  // the next round goes there, each command after ASKING
  bool refresh = !have_map;
  int attempts = 0;
  int redirects = 0;
  int64_t backoff_ms = 0;
  // A node that could not be asked (or no node serving the slot): refresh the map and try again
  // after a backoff, within the attempts budget.
  auto unreachable = [&](const std::string& why) -> std::optional<Error> {
    ClusterStep step = cluster_step_after_io_failure(why, attempts, options.retry);
    if (step.action == ClusterStep::Action::kGiveUp) return step.error;
    refresh = true;
    backoff_ms = step.backoff_ms;
    ++stats.retries;
    return std::nullopt;
  };

  for (;;) {
    back_off(lock, backoff_ms);
    backoff_ms = 0;
    if (refresh) {
      refresh = false;
      if (Status s = refresh_locked(); !s.ok() && !have_map) {
        if (s.error().code == ErrorCode::kUnauthenticated) return s.error();
        ++attempts;
        if (std::optional<Error> e = unreachable(s.error().message)) return *e;
        continue;
      }
    }
    ClusterNode node;
    if (ask) {
      node = *ask;
    } else if (const ClusterShard* shard = map.shard_for_slot(slot)) {
      node = shard->master;
    } else {
      ++attempts;
      if (std::optional<Error> e = unreachable("no node serves slot " + std::to_string(slot))) {
        return *e;
      }
      continue;
    }
    // An ASK is followed command by command (ASKING holds for the next command only); a
    // transaction or a script waits for the migration to end instead (hold_ask_for_round).
    const bool asking = ask.has_value();
    ask.reset();
    std::vector<RedisCommand> sent;
    for (std::size_t i : pending) {
      if (asking) sent.push_back({"ASKING"});
      sent.push_back(commands[i]);
    }
    bool after_send = false;
    Result<std::vector<RespValue>> got =
        round(node, std::move(sent), false, transaction ? ScriptForm::kText : ScriptForm::kBySha,
              &after_send, timeout_ms);
    ++attempts;
    if (!got.ok()) {
      if (got.error().code == ErrorCode::kUnauthenticated) return got.error();
      bool reads = std::all_of(pending.begin(), pending.end(), [&](std::size_t i) {
        return redis_command_changes_nothing(commands[i]);
      });
      if (after_send && !reads) {
        return Error(ErrorCode::kStoreUnavailable,
                     got.error().message + " (a write that may have run is not sent again)");
      }
      if (std::optional<Error> e = unreachable(got.error().message)) return *e;
      continue;
    }
    std::vector<RespValue> answers;
    for (std::size_t k = asking ? 1 : 0; k < got->size(); k += asking ? 2 : 1) {
      answers.push_back(std::move((*got)[k]));
    }
    // Every command of the round went to one slot: the first routing answer decides for all.
    std::optional<ClusterStep> step;
    std::vector<std::size_t> again;
    for (std::size_t j = 0; j < answers.size() && j < pending.size(); ++j) {
      ClusterStep s =
          decide_cluster_step(answers[j], node.host, attempts, redirects, options.retry);
      if (s.action == ClusterStep::Action::kUseReply) {
        replies[pending[j]] = std::move(answers[j]);
        continue;
      }
      again.push_back(pending[j]);
      if (!step) step = std::move(s);
    }
    if (!step) return replies;
    const bool asked = step->action == ClusterStep::Action::kAskAt;
    if (asked) ++redirects;
    step = hold_ask_for_round(std::move(*step), commands, attempts, options.retry);
    if (asked && step->action != ClusterStep::Action::kAskAt) ++stats.ask;  // held, not followed
    if (step->action == ClusterStep::Action::kGiveUp) return step->error;
    if (step->action == ClusterStep::Action::kRetryAt && step->slot != slot) {
      return Error(ErrorCode::kInvalidArgument, "redis cluster: a command sent to slot " +
                                                    std::to_string(slot) + " names a key of slot " +
                                                    std::to_string(step->slot));
    }
    note_step(*step, &refresh, &backoff_ms);
    if (step->action == ClusterStep::Action::kRetryAt) ++redirects;
    if (step->action == ClusterStep::Action::kAskAt) ask = step->node;
    // A transaction is sent whole again (a redirected command aborted it: nothing ran).
    pending = transaction ? all : again;
  }
}

std::vector<std::pair<ClusterNode, Result<RespValue>>>
RedisClusterPool::Impl::run_on_masters_locked(const RedisCommand& argv) {
  std::vector<std::pair<ClusterNode, Result<RespValue>>> out;
  if (!have_map) {
    if (Status s = refresh_locked(); !s.ok()) {
      out.emplace_back(ClusterNode{}, s.error());
      return out;
    }
  }
  std::vector<RoundPart> parts;
  for (const ClusterNode& master : map.masters()) parts.push_back(RoundPart{master, false, {argv}});
  std::vector<std::optional<Result<RespValue>>> answers(parts.size());
  fan_out(parts, [&](std::size_t p, Result<std::vector<RespValue>>& r, bool) {
    answers[p] = r.ok() ? Result<RespValue>(std::move(r->front())) : Result<RespValue>(r.error());
  });
  for (std::size_t p = 0; p < parts.size(); ++p)
    out.emplace_back(parts[p].node, std::move(*answers[p]));
  return out;
}

Result<std::unique_ptr<RedisClusterPool>> RedisClusterPool::create(
    RedisClusterPoolOptions options) {
  if (options.seeds.empty()) {
    return Error(ErrorCode::kInvalidArgument, "redis cluster: no seed node");
  }
  for (const ClusterNode& s : options.seeds) {
    if (s.host.empty() || s.port <= 0 || s.port > 65535) {
      return Error(ErrorCode::kInvalidArgument, "redis cluster: a seed needs a host and a port");
    }
  }
  if (options.connect_timeout_ms <= 0 || options.command_timeout_ms <= 0) {
    return Error(ErrorCode::kInvalidArgument, "redis cluster: timeouts must be positive");
  }
  if (options.retry.max_attempts < 1 || options.retry.max_redirects < 0 ||
      options.retry.backoff_initial_ms < 0 ||
      options.retry.backoff_max_ms < options.retry.backoff_initial_ms ||
      options.retry.max_tryagain_attempts < 0 || options.batch_tryagain_attempts < 0) {
    return Error(ErrorCode::kInvalidArgument, "redis cluster: the retry policy is inconsistent");
  }
  auto impl = std::make_unique<Impl>();
  if (options.tls) {
    Result<std::shared_ptr<RedisTls>> tls = RedisTls::create(options.tls_files);
    if (!tls.ok()) return tls.error();
    impl->tls = std::move(tls).value();
  }
  impl->options = std::move(options);
  return std::unique_ptr<RedisClusterPool>(new RedisClusterPool(std::move(impl)));
}

RedisClusterPool::RedisClusterPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisClusterPool::~RedisClusterPool() = default;

Status RedisClusterPool::refresh() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->refresh_locked();
}

Result<RespValue> RedisClusterPool::run(const RedisCommand& argv, bool read_only) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return std::move(impl_->run_batch_locked(lock, {ClusterRequest{argv, read_only}}).front());
}

std::vector<Result<RespValue>> RedisClusterPool::run_batch(
    const std::vector<ClusterRequest>& requests) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->run_batch_locked(lock, requests);
}

Result<std::vector<RespValue>> RedisClusterPool::run_at_slot(
    uint16_t slot, const std::vector<RedisCommand>& commands, int64_t timeout_ms) {
  if (slot >= kClusterSlotCount) {
    return Error(ErrorCode::kInvalidArgument,
                 "redis cluster: slot " + std::to_string(slot) + " is past 16383");
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->run_at_slot_locked(lock, slot, commands, timeout_ms);
}

std::vector<std::pair<ClusterNode, Result<RespValue>>> RedisClusterPool::run_on_masters(
    const RedisCommand& argv) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->run_on_masters_locked(argv);
}

ClusterSlotMap RedisClusterPool::map() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->map;
}

RedisClusterPoolStats RedisClusterPool::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

std::string RedisClusterPool::describe() const {
  std::string out = impl_->options.tls ? "rediss-cluster:" : "redis-cluster:";
  for (std::size_t i = 0; i < impl_->options.seeds.size(); ++i) {
    if (i > 0) out += ",";
    out += impl_->options.seeds[i].address();
  }
  return out;
}

}  // namespace quiver
