#include "native-agent/store/redis_store.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include "native-agent/base/clock.h"
#include "native-agent/store/redis_cluster_pool.h"
#include "native-agent/store/redis_link.h"
#include "shared/canonical_json.h"
#include "shared/discovery_redis.h"
#include "shared/discovery_spread.h"
#include "shared/layout.h"
#include "shared/numbers.h"
#include "shared/preferences_redis.h"
#include "shared/redis_cluster.h"
#include "shared/redis_conversation.h"
#include "shared/resp.h"
#include "shared/schema_assets.h"
#include "shared/webhook_spread.h"

namespace quiver {

namespace {

using SteadyClock = std::chrono::steady_clock;

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

// A non-negative decimal within [min, max] (stream ids, SCAN cursors).
bool parse_int(std::string_view text, int64_t min, int64_t max, int64_t* out) {
  std::optional<int64_t> v = parse_decimal_in(text, min, max);
  if (!v || text[0] == '-') return false;
  *out = *v;
  return true;
}

// A signed decimal int64 exactly (what Redis stores in counters and hash fields).
bool parse_i64(std::string_view text, int64_t* out) {
  std::optional<int64_t> v = parse_decimal_i64(text);
  if (!v) return false;
  *out = *v;
  return true;
}

// ---- replies -----------------------------------------------------------------------------------

RespValue to_resp(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STATUS:
      return RespValue::simple_string(std::string(r->str, r->len));
    case REDIS_REPLY_STRING:
      return RespValue::bulk_string(std::string(r->str, r->len));
    case REDIS_REPLY_ERROR:
      return RespValue::error(std::string(r->str, r->len));
    case REDIS_REPLY_INTEGER:
      return RespValue::integer_value(r->integer);
    case REDIS_REPLY_ARRAY: {
      std::vector<RespValue> elements;
      elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) elements.push_back(to_resp(r->element[i]));
      return RespValue::array(std::move(elements));
    }
    default:
      return RespValue::nil();
  }
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A Redis error reply as an Error: the core's mapping, the edge's too
// (shared/redis_conversation.h).
Error reply_error(const RespValue& reply, std::string_view what) {
  return redis_reply_error(reply, what);
}

std::string key_list_error(std::string_view what, const Error& e) {
  return std::string(what) + ": " + e.message;
}

// ---- what the store sends through --------------------------------------------------------------

// The one thing RedisStore needs of Redis, whether a single node or a Redis Cluster: `commands`
// as one pipeline, one reply per command in order (error replies are values; a MULTI ... EXEC
// block is sent whole, to one node). `timeout_ms` > 0 replaces the command timeout for this call
// (a blocking read). The store's logic is written once over it; each channel is one connection
// (or, on a cluster, one connection per node), so a blocking read holds only its own.
// One consumer of XINFO CONSUMERS: [name, <name>, pending, <n>, idle, <ms>, ...] (RESP2 flat
// map; 7.2 adds `inactive`). -1 for a count the reply lacks.
struct ConsumerInfo {
  std::string name;
  int64_t pending = -1;
  int64_t idle = -1;
};
ConsumerInfo consumer_info(const RespValue& c) {
  ConsumerInfo out;
  if (const std::vector<RespValue>* kv = c.as_array()) {
    for (std::size_t i = 0; i + 1 < kv->size(); i += 2) {
      std::optional<std::string_view> k = (*kv)[i].as_string();
      if (!k) continue;
      const RespValue& val = (*kv)[i + 1];
      if (*k == "name" && val.as_string()) out.name = std::string(*val.as_string());
      if (*k == "pending") out.pending = val.as_int().value_or(-1);
      if (*k == "idle") out.idle = val.as_int().value_or(-1);
    }
  }
  return out;
}

class RedisChannel {
 public:
  virtual ~RedisChannel() = default;
  virtual Result<std::vector<RespValue>> run(const std::vector<RedisCommand>& commands,
                                             int64_t timeout_ms = 0) = 0;
  // Commands that may each live in another slot (key layout v2: a round of the discovery read,
  // the separate commands around a one-slot script), each routed by its own keys, one reply per
  // command in order; no MULTI block (its commands would go apart: run_at). One Redis: run().
  virtual Result<std::vector<RespValue>> run_spread(const std::vector<RedisCommand>& commands) {
    return run(commands);
  }
  // run_spread, where a command flagged in `hand_back_split` (one flag per command) answered
  // TRYAGAIN (its slot split by a reshard: shared/redis_cluster.h cluster_reply_is_split_slot)
  // gets that reply as its own at once, rather than waiting the migration out (the discovery
  // read's scripts, a connection's or the member's: SpreadDiscoveryRead reads them key by key). One
  // Redis: run() (no slot is ever split).
  virtual Result<std::vector<RespValue>> run_spread_split(
      const std::vector<RedisCommand>& commands, const std::vector<bool>& hand_back_split) {
    (void)hand_back_split;
    return run(commands);
  }
  // `commands` whole (a MULTI ... EXEC block, or commands of one slot) to the node of `key`'s slot.
  // One Redis: run().
  virtual Result<std::vector<RespValue>> run_at(std::string_view key,
                                                const std::vector<RedisCommand>& commands) {
    (void)key;
    return run(commands);
  }
  // A walk of every node holding keys (a SCAN of key layout v2, whose keys are on every master):
  // each master named by the lowest slot it serves, ascending. One Redis: {0}.
  virtual Result<std::vector<uint16_t>> walk_slots() { return std::vector<uint16_t>{0}; }
  // `commands` whole to the master serving `slot` (one of walk_slots()). One Redis: run().
  virtual Result<std::vector<RespValue>> run_at_slot(uint16_t slot,
                                                     const std::vector<RedisCommand>& commands) {
    (void)slot;
    return run(commands);
  }
};

// A Redis Cluster (native-agent/store/redis_cluster_pool.h). Key layout v1 puts every key of the
// namespace under one hash tag, `quiver:{ns}:...`, so every key the store names lives in the
// slot of the namespace: each pipeline goes, whole, to the master serving that slot, found by a
// key of the namespace rather than by the commands' own keys. So a script that declares no key,
// a MULTI/EXEC block and SCAN all reach the namespace's node, and a failover or a resharding
// (MOVED, ASK) is followed there. Layout v2 (docs/design.md) spreads the keys: it routes each
// command by its keys (RedisClusterPool::run_batch) and walks every master
// (RedisClusterPool::run_on_masters) where v1 SCANs one node.
class ClusterChannel final : public RedisChannel {
 public:
  ClusterChannel(std::unique_ptr<RedisClusterPool> pool, uint16_t slot)
      : pool_(std::move(pool)), slot_(slot) {}
  Result<std::vector<RespValue>> run(const std::vector<RedisCommand>& commands,
                                     int64_t timeout_ms) override {
    return pool_->run_at_slot(slot_, commands, timeout_ms);
  }
  Result<std::vector<RespValue>> run_spread(const std::vector<RedisCommand>& commands) override {
    return run_spread_split(commands, {});
  }
  Result<std::vector<RespValue>> run_spread_split(
      const std::vector<RedisCommand>& commands,
      const std::vector<bool>& hand_back_split) override {
    if (!hand_back_split.empty() && hand_back_split.size() != commands.size()) {
      return Error(ErrorCode::kInternal, "redis: split flags that are not one per command");
    }
    std::vector<ClusterRequest> requests;
    requests.reserve(commands.size());
    for (std::size_t i = 0; i < commands.size(); ++i) {
      const RedisCommand& c = commands[i];
      if (c.size() == 1 && (c[0] == "MULTI" || c[0] == "EXEC")) {
        return Error(ErrorCode::kInternal, "redis: a MULTI block sent spread (use run_at)");
      }
      ClusterRequest request{c, false};
      request.hand_back_split = !hand_back_split.empty() && hand_back_split[i];
      requests.push_back(std::move(request));
    }
    std::vector<RespValue> out;
    out.reserve(commands.size());
    for (Result<RespValue>& r : pool_->run_batch(requests)) {
      if (!r.ok()) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }
  Result<std::vector<RespValue>> run_at(std::string_view key,
                                        const std::vector<RedisCommand>& commands) override {
    return pool_->run_at_slot(cluster_key_slot(key), commands);
  }
  Result<std::vector<uint16_t>> walk_slots() override {
    ClusterSlotMap map = pool_->map();  // a copy: the pool's may change under another call
    if (map.shards().empty()) {
      if (Status s = pool_->refresh(); !s.ok()) return s.error();
      map = pool_->map();
    }
    std::vector<uint16_t> out;
    for (const ClusterShard& shard : map.shards()) {
      if (shard.ranges.empty()) continue;  // a master serving nothing holds no key
      uint16_t lowest = shard.ranges.front().first;
      for (const ClusterSlotRange& r : shard.ranges) lowest = std::min(lowest, r.first);
      out.push_back(lowest);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  Result<std::vector<RespValue>> run_at_slot(uint16_t slot,
                                             const std::vector<RedisCommand>& commands) override {
    return pool_->run_at_slot(slot, commands);
  }
  RedisClusterPoolStats stats() const { return pool_->stats(); }

 private:
  std::unique_ptr<RedisClusterPool> pool_;
  uint16_t slot_;
};

// The key layout gate (shared/layout.h): a namespace whose layout record names a layout this build
// does not read gets no write from this store. Every pipeline of a channel passes here: one that
// only reads (redis_command_changes_nothing, and MULTI/EXEC around nothing else) goes through;
// any other is refused with kStoreUnavailable naming the record while the record is unknown.
// The record is read on the first write of the store's life and again by every read_namespace
// (the agent's store check): a record set back to v1 (or deleted) lets writes through again
// from the next store check on.
class LayoutGate {
  static inline const std::vector<RedisCommand> kNoCommands;

 public:
  // `writes`: the layout the store writes (RedisStoreOptions::key_layout).
  LayoutGate(std::string key, KeyLayout writes) : key_(std::move(key)), writes_(writes) {}
  const std::string& key() const { return key_; }

  // What the store check read: nullopt for no record.
  void seen(std::optional<std::string> value) {
    std::lock_guard<std::mutex> lock(mu_);
    checked_ = true;
    reads_ = read_layout(value);
    // Absent is layout v1: a store that writes v2 must not write there either. `v2:filling`
    // (the copy to v2 under way) is read as v1 and written by nobody.
    absent_ = !value.has_value();
    unknown_ = write_layout(value) == writes_ ? std::nullopt
                                              : std::optional<std::string>(value.value_or(""));
  }

  // The layout the record named when last read (nullopt: one this build does not read; v1 before
  // the first read).
  std::optional<KeyLayout> reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }

  // Ok, or why `commands` may not be sent; `inner` reads the record when it was never read.
  Status admit(const std::vector<RedisCommand>& commands, RedisChannel& inner) {
    // A key the store's layout does not have is spelled "" (RedisKeys' v1-only builders on a v2
    // object): a path not yet written for v2 fails here, loudly, instead of writing key "". v1's
    // builders spell every key, so a v1 store (the hot path of every deployment today) skips it.
    for (const RedisCommand& c : writes_ == KeyLayout::kV2 ? commands : kNoCommands) {
      Result<std::vector<std::string_view>> keys = command_keys(c);
      if (!keys.ok()) continue;  // malformed: Redis answers it
      for (std::string_view k : *keys) {
        if (k.empty()) {
          return Error(ErrorCode::kInternal,
                       "redis " + (c.empty() ? std::string() : c[0]) + ": a key that key layout " +
                           key_layout_name(writes_) + " does not have (a path not built for it)");
        }
      }
    }
    bool writes = false;
    for (const RedisCommand& c : commands) {
      if (c.empty() || redis_command_changes_nothing(c)) continue;
      if (c.size() == 1 && (c[0] == "MULTI" || c[0] == "EXEC" || c[0] == "DISCARD")) continue;
      writes = true;
      break;
    }
    if (!writes) return Status::Ok();
    bool checked = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checked = checked_;
    }
    if (!checked) {
      Result<std::vector<RespValue>> r = inner.run({{"GET", key_}});
      if (!r.ok()) return r.error();
      const RespValue& v = (*r)[0];
      if (v.is_error()) return reply_error(v, "GET layout");
      if (!v.is_nil() && !v.as_string()) {
        return Error(ErrorCode::kInvalidReply, "redis GET layout: not a string");
      }
      seen(v.is_nil() ? std::nullopt : std::optional<std::string>(*v.as_string()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!unknown_) return Status::Ok();
    if (absent_) {
      return Error(ErrorCode::kStoreUnavailable,
                   "redis write refused: the namespace's key layout record " + key_ +
                       " is absent (layout v1) and this store writes key layout " +
                       key_layout_name(writes_) +
                       ": nothing is written until the record names it (the migration's switch)");
    }
    return unknown_layout_error(key_, *unknown_, "redis write refused");
  }

 private:
  const std::string key_;
  const KeyLayout writes_;
  std::mutex mu_;
  bool checked_ = false;
  std::optional<KeyLayout> reads_ = KeyLayout::kV1;
  std::optional<std::string> unknown_;  // the record, while it names another layout than writes_
  bool absent_ = false;                 // ... and that record is absent (layout v1)
};

class LayoutGatedChannel final : public RedisChannel {
 public:
  LayoutGatedChannel(std::unique_ptr<RedisChannel> inner, std::shared_ptr<LayoutGate> gate)
      : inner_(std::move(inner)), gate_(std::move(gate)) {}
  Result<std::vector<RespValue>> run(const std::vector<RedisCommand>& commands,
                                     int64_t timeout_ms) override {
    if (Status st = gate_->admit(commands, *inner_); !st.ok()) return st.error();
    return inner_->run(commands, timeout_ms);
  }
  Result<std::vector<RespValue>> run_spread(const std::vector<RedisCommand>& commands) override {
    if (Status st = gate_->admit(commands, *inner_); !st.ok()) return st.error();
    return inner_->run_spread(commands);
  }
  Result<std::vector<RespValue>> run_spread_split(
      const std::vector<RedisCommand>& commands,
      const std::vector<bool>& hand_back_split) override {
    if (Status st = gate_->admit(commands, *inner_); !st.ok()) return st.error();
    return inner_->run_spread_split(commands, hand_back_split);
  }
  Result<std::vector<RespValue>> run_at(std::string_view key,
                                        const std::vector<RedisCommand>& commands) override {
    if (Status st = gate_->admit(commands, *inner_); !st.ok()) return st.error();
    return inner_->run_at(key, commands);
  }
  Result<std::vector<uint16_t>> walk_slots() override { return inner_->walk_slots(); }
  Result<std::vector<RespValue>> run_at_slot(uint16_t slot,
                                             const std::vector<RedisCommand>& commands) override {
    if (Status st = gate_->admit(commands, *inner_); !st.ok()) return st.error();
    return inner_->run_at_slot(slot, commands);
  }
  const RedisChannel& inner() const { return *inner_; }
  RedisChannel& inner() { return *inner_; }

 private:
  std::unique_ptr<RedisChannel> inner_;
  std::shared_ptr<LayoutGate> gate_;
};

// ---- one connection ----------------------------------------------------------------------------

class RedisConnection final : public RedisChannel {
 public:
  RedisConnection(const RedisStoreOptions& options, const RedisTls* tls)
      : redis_(options.redis),
        options_(options),
        tls_(tls),
        conversation_(
            {}, RedisCredentials{options.redis.username, options.redis.password.has_value()
                                                             ? options.redis.password->reveal()
                                                             : std::string()}) {}
  ~RedisConnection() {
    std::lock_guard<std::mutex> lock(mu_);
    drop_locked();
  }
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends `commands` as one pipeline and returns one reply per command, in order. Error replies
  // are values; a connection that fails or times out is dropped and the call is kStoreUnavailable.
  // `timeout_ms` > 0 replaces the command timeout for this call (a blocking read). Scripts go as
  // EVALSHA, and again as EVAL where Redis answers NOSCRIPT (the core's conversation), except
  // inside MULTI/EXEC, where a NOSCRIPT would abort the transaction at EXEC.
  Result<std::vector<RespValue>> run(const std::vector<RedisCommand>& commands,
                                     int64_t timeout_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    SigpipeGuard no_sigpipe;
    if (Status s = connect_locked(); !s.ok()) return s.error();
    if (timeout_ms > 0) redisSetTimeout(ctx_, to_timeval(timeout_ms));
    const bool transaction = !commands.empty() && commands.front() == RedisCommand{"MULTI"};
    Result<std::vector<RespValue>> replies =
        converse_locked(commands, transaction ? ScriptForm::kText : ScriptForm::kBySha);
    if (replies.ok() && timeout_ms > 0) {
      redisSetTimeout(ctx_, to_timeval(options_.command_timeout_ms));
    }
    return replies;
  }

 private:
  static timeval to_timeval(int64_t ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    return tv;
  }

  std::string address() const { return redis_.host + ":" + std::to_string(redis_.port); }

  void drop_locked() {
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
    answered_ = false;
    conversation_.drop();
  }

  Error fail_locked(const char* during) {
    std::string reason = ctx_ != nullptr && ctx_->errstr[0] != '\0' ? ctx_->errstr : "I/O error";
    if (ctx_ != nullptr && ctx_->err == REDIS_ERR_IO &&
        (reason.find("temporarily unavailable") != std::string::npos ||
         reason.find("timed out") != std::string::npos)) {
      reason = "timed out";
    }
    reason += tls_port_hint(redis_.tls, answered_, reason);
    drop_locked();  // the stream may be out of step with our requests: never reuse it
    return Error(ErrorCode::kStoreUnavailable,
                 "redis " + address() + ": connection lost " + during + " (" + reason + ")");
  }

  // Connects unless connected; spaces attempts after a failure by the backoff.
  Status connect_locked() {
    if (ctx_ != nullptr) return Status::Ok();
    SteadyClock::time_point now = SteadyClock::now();
    if (now < next_attempt_) {
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt_ - now);
      return Error(ErrorCode::kStoreUnavailable, "redis " + address() + ": unavailable (" +
                                                     last_error_ + "); next attempt in " +
                                                     std::to_string(wait.count()) + " ms");
    }
    Status s = open_locked();
    if (s.ok()) {
      backoff_ms_ = 0;
      next_attempt_ = {};
      return s;
    }
    drop_locked();
    last_error_ = s.error().message;
    backoff_ms_ = backoff_ms_ == 0 ? options_.reconnect_backoff_initial_ms
                                   : std::min(backoff_ms_ * 2, options_.reconnect_backoff_max_ms);
    next_attempt_ = now + std::chrono::milliseconds(backoff_ms_);
    return Error(s.error().code, "redis " + address() + ": " + s.error().message);
  }

  Status open_locked() {
    Result<redisContext*> ctx = redis_open(redis_.host, redis_.port, options_.connect_timeout_ms,
                                           options_.command_timeout_ms, tls_);
    if (!ctx.ok()) return ctx.error();
    ctx_ = *ctx;
    // AUTH alone (when configured), so that a refusal counts as a failed connection attempt.
    if (RedisRound auth = conversation_.begin({}); conversation_.awaiting() > 0) {
      if (!append_locked(auth.bytes)) return handshake_io_error("AUTH");
      std::optional<RedisTurn> turn = take_reply_locked();
      if (!turn) return handshake_io_error("AUTH");
      if (*turn == RedisTurn::kFailed) return conversation_.error();
    }
    if (redis_.db != 0) {
      if (Status s = handshake_locked({"SELECT", std::to_string(redis_.db)}, "SELECT"); !s.ok()) {
        return s;
      }
    }
    return Status::Ok();
  }

  // One command during connection set-up; `what` names it (never its arguments: AUTH's hold the
  // password).
  Status handshake_locked(const RedisCommand& argv, const char* what) {
    std::vector<const char*> parts;
    std::vector<std::size_t> lengths;
    for (const std::string& a : argv) {
      parts.push_back(a.data());
      lengths.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), parts.data(), lengths.data()));
    if (reply == nullptr) return handshake_io_error(what);
    RespValue v = to_resp(reply);
    freeReplyObject(reply);
    if (v.is_error()) {
      return Error(reply_error(v, what).code, std::string(what) + " refused: " + v.str);
    }
    return Status::Ok();
  }

  Error handshake_io_error(const char* what) const {
    // hiredis reports a read timeout as an I/O error with strerror(EAGAIN): a Redis that
    // stalls, not one that refused us.
    if (ctx_->err == REDIS_ERR_IO && std::strcmp(ctx_->errstr, std::strerror(EAGAIN)) == 0) {
      return Error(ErrorCode::kStoreUnavailable,
                   std::string(what) + " timed out (no answer within " +
                       std::to_string(options_.command_timeout_ms) + " ms)");
    }
    return Error(ErrorCode::kStoreUnavailable, std::string(what) + " failed: " + ctx_->errstr +
                                                   tls_port_hint(redis_.tls, false, ctx_->errstr));
  }

  // One round of the core's conversation over hiredis: its bytes out, hiredis' decoded replies in,
  // until the conversation has every reply (or wants the NOSCRIPT ones sent again as EVAL).
  Result<std::vector<RespValue>> converse_locked(std::vector<RedisCommand> commands,
                                                 ScriptForm form) {
    RedisRound round = conversation_.begin(std::move(commands), form);
    if (!append_locked(round.bytes)) return fail_locked("sending a command");
    if (conversation_.awaiting() == 0) return conversation_.take_replies();
    for (;;) {
      std::optional<RedisTurn> turn = take_reply_locked();
      if (!turn) return fail_locked("waiting for a reply");
      switch (*turn) {
        case RedisTurn::kRead:
          break;
        case RedisTurn::kWrite:
          if (!append_locked(conversation_.take_write())) return fail_locked("sending a command");
          break;
        case RedisTurn::kDone:
          return conversation_.take_replies();
        case RedisTurn::kFailed: {
          Error e = conversation_.error();
          drop_locked();
          return e;
        }
      }
    }
  }

  // One reply read by hiredis, handed to the conversation; nullopt when the read failed.
  std::optional<RedisTurn> take_reply_locked() {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) return std::nullopt;
    answered_ = true;
    auto* reply = static_cast<redisReply*>(raw);
    RedisTurn turn = conversation_.take(to_resp(reply));
    freeReplyObject(reply);
    return turn;
  }

  bool append_locked(const std::string& bytes) {
    return bytes.empty() ||
           redisAppendFormattedCommand(ctx_, bytes.data(), bytes.size()) == REDIS_OK;
  }

  const RedisConfig& redis_;
  const RedisStoreOptions& options_;
  const RedisTls* tls_;  // nullptr: plain TCP
  std::mutex mu_;
  redisContext* ctx_ = nullptr;
  bool answered_ = false;           // a reply came on this connection
  RedisConversation conversation_;  // AUTH, pipelining, EVALSHA then EVAL (shared/)
  SteadyClock::time_point next_attempt_{};
  int64_t backoff_ms_ = 0;
  std::string last_error_;
};

// HGETALL's flat [field, value, ...] as a map.
HashFields field_map(const RespValue& reply) {
  HashFields out;
  const std::vector<RespValue>* e = reply.as_array();
  if (e == nullptr) return out;
  for (std::size_t i = 0; i + 1 < e->size(); i += 2) {
    std::optional<std::string_view> f = (*e)[i].as_string();
    std::optional<std::string_view> v = (*e)[i + 1].as_string();
    if (f && v) out.emplace(std::string(*f), std::string(*v));
  }
  return out;
}

std::set<std::string> string_set(const RespValue& reply) {
  std::set<std::string> out;
  if (const std::vector<RespValue>* e = reply.as_array()) {
    for (const RespValue& v : *e) {
      if (std::optional<std::string_view> s = v.as_string()) out.emplace(*s);
    }
  }
  return out;
}

// The metadata fields of a manifest hash, in the order HMGET is asked for them.
const std::vector<std::string>& meta_fields() {
  static const std::vector<std::string> fields = {
      redis_field::kEtag,         redis_field::kConfigHash, redis_field::kFence,
      redis_field::kFetchedAt,    redis_field::kFreshUntil, redis_field::kExpiresAt,
      redis_field::kCacheScope,   redis_field::kTruncated,  redis_field::kErrorCode,
      redis_field::kErrorMessage, redis_field::kErrorAt,    redis_field::kAttemptAt,
      redis_field::kBody};
  return fields;
}

// The two keys that mark one (connection, principal) stale: its own and its connection's
// (a webhook for a per_member connection as a whole). Both are read with the manifest; the
// effective mark is the later one (effective_invalidation).
struct MarkKeys {
  std::string own;
  std::string connection;
};
Result<MarkKeys> mark_keys(const RedisKeys& keys, std::string_view cid,
                           const Principal& principal) {
  Result<std::string> own = keys.invalidated(cid, principal);
  if (!own.ok()) return own.error();
  Result<std::string> connection = keys.marked(cid);
  if (!connection.ok()) return connection.error();
  return MarkKeys{std::move(*own), std::move(*connection)};
}

// The four commands that read one manifest's metadata: its hash's fields (with `body`, the name
// of a body stored apart), the length of an inline body (data is a body that is not empty, the
// core's rule; records written before bodies were stored apart hold it inline) and its
// invalidation marks (keys of their own: schema/redis-keys.md).
constexpr std::size_t kMetaReadCommands = 4;
void append_meta_reads(std::vector<RedisCommand>& out, const std::string& manifest_key,
                       const MarkKeys& marks) {
  RedisCommand hmget = {"HMGET", manifest_key};
  for (const std::string& f : meta_fields()) hmget.push_back(f);
  out.push_back(std::move(hmget));
  out.push_back({"HSTRLEN", manifest_key, redis_field::kManifest});
  out.push_back({"GET", marks.own});
  out.push_back({"GET", marks.connection});
}

struct MetaFields {
  HashFields fields;
  bool has_data = false;
  // No record: nothing stored, or only a mark left behind by data dropped since.
  bool empty() const {
    return !has_data && fields.size() <= fields.count(redis_field::kInvalidatedAt);
  }
};

// The replies of append_meta_reads (starting at `at`) as fields, the mark as kInvalidatedAt.
Result<MetaFields> meta_reads_reply(const std::vector<RespValue>& replies, std::size_t at) {
  if (replies.size() < at + kMetaReadCommands) {
    return Error(ErrorCode::kInvalidReply, "manifest metadata: missing replies");
  }
  for (std::size_t i = at; i < at + kMetaReadCommands; ++i) {
    if (replies[i].is_error()) return Error(ErrorCode::kInvalidReply, replies[i].str);
  }
  MetaFields out;
  const std::vector<RespValue>* values = replies[at].as_array();
  for (std::size_t i = 0; values != nullptr && i < values->size() && i < meta_fields().size();
       ++i) {
    if (std::optional<std::string_view> v = (*values)[i].as_string()) {
      out.fields.emplace(meta_fields()[i], std::string(*v));
    }
  }
  // Data: a body inline (the layout before bodies were stored apart) or named by `body`.
  out.has_data = replies[at + 1].as_int().value_or(0) > 0 || out.fields.count(redis_field::kBody);
  if (std::optional<std::string> mark =
          effective_invalidation(replies[at + 2].as_string(), replies[at + 3].as_string())) {
    out.fields.emplace(redis_field::kInvalidatedAt, std::move(*mark));
  }
  return out;
}

// A manifest hash's fields without the body, decoded by the core (manifest_entry_from_fields, the
// edge's reader) and with the agent's own fields; its errors name `key`.
Result<ManifestMeta> meta_from_fields(std::string_view cid, const Principal& principal,
                                      const HashFields& fields, bool has_data,
                                      const std::string& key) {
  ManifestMeta m;
  if (std::optional<ManifestEntry> entry = manifest_entry_from_fields(fields)) {
    static_cast<ManifestEntry&>(m) = std::move(*entry);
  }
  m.connection_id = std::string(cid);
  m.principal = principal;
  m.has_data = has_data;
  for (auto [name, out] : {std::pair{redis_field::kFence, &m.fence},
                           std::pair{redis_field::kExpiresAt, &m.expires_at_ms}}) {
    auto it = fields.find(name);
    if (it == fields.end() || it->second.empty() || parse_i64(it->second, out)) continue;
    if (m.unreadable.empty()) m.unreadable = std::string("field `") + name + "` is not an integer";
  }
  if (Status s = check_manifest_meta(m, "manifest record " + key); !s.ok()) return s.error();
  return m;
}

bool valid_stream_id(std::string_view id) {
  std::size_t dash = id.find('-');
  if (dash == std::string_view::npos) return false;
  int64_t ignored = 0;
  return parse_int(id.substr(0, dash), 0, INT64_MAX, &ignored) &&
         parse_int(id.substr(dash + 1), 0, INT64_MAX, &ignored);
}

}  // namespace

// ---- the store ---------------------------------------------------------------------------------

namespace {

// One member's grants going from `have` to `want`, as every grant write does it (the admin API's
// set_member_grants, the config sync): first one transaction of this member's keys only (its
// grants set, its registry entry, the due entries of the connections it lost, the grantees pairs
// it touches noted pending, the epoch), then the grantees:<cid> entries of the connections it
// gained or lost and the pending pairs taken out. The second step is idempotent and recomputed
// from the grants by the next sync if it never ran (repair_grantees): its cost follows this
// member's change, never the number of members.
struct MemberGrantWrite {
  std::vector<RedisCommand> transaction;
  std::vector<RedisCommand> grantees;
  // Key layout v2 only (member_grant_write_v2): the transaction runs on the slot of `at` (the
  // member's grants); `before` (the member's shard: its registry entry, its pairs noted pending)
  // goes ahead of it, `grantees` after it, and `settled` (the pairs taken out) last, each command
  // on its own slot. Empty on v1, where all of it is one pipeline on the namespace's slot.
  std::string at;
  std::vector<RedisCommand> before;
  std::vector<RedisCommand> settled;
};

// Key layout v2's grants of one member: connection id → the connection's credential mode when the
// grant was written ("" for a connection without a record), as its grants HASH holds them.
using GrantModes = std::map<std::string, std::string>;

// Key layout v2's member_grant_write (docs/design.md "What crosses slots"): the member's grants
// HASH (cid → credential mode) and its version in one transaction on the member's slot; before it,
// on the member's shard, its registry entry (when it keeps grants) and the pairs it touches noted
// pending, each an idempotent command of its own; after it, the grantees sets of the connections
// it gained or lost (each on its connection's slot), its registry entry dropped when emptied
// (after, so that a member never holds grants the registry does not list), and the due entries of
// the connections it lost made due on their shards; the pairs settled last. A change of modes
// alone (a grant written before its connection's record) rewrites the HASH and touches no pair.
MemberGrantWrite member_grant_write_v2(const RedisKeys& keys, const Principal& member,
                                       const GrantModes& have, const GrantModes& want) {
  MemberGrantWrite w;
  const uint32_t shard = *keys.member_shard(member);
  const std::string registry = *keys.grant_members(shard);
  w.at = *keys.grants(member);
  if (!want.empty()) w.before.push_back({"SADD", registry, member.str()});
  RedisCommand pending = {"SADD", *keys.grantees_pending(shard)};
  RedisCommand settled = {"SREM", *keys.grantees_pending(shard)};
  std::map<uint32_t, RedisCommand> due;  // connection shard → ZADD XX of the entries lost
  auto touch = [&](const std::string& cid, const char* op) {
    w.grantees.push_back({op, *keys.grantees(cid), member.str()});
    std::string pair = *due_member(cid, member);
    pending.push_back(pair);
    settled.push_back(std::move(pair));
  };
  for (const auto& [cid, mode] : have) {
    if (want.count(cid) != 0) continue;
    Result<uint32_t> k = keys.connection_shard(cid);
    if (!k.ok()) continue;  // not an id any agent wrote: the DEL below drops it
    touch(cid, "SREM");
    RedisCommand& zadd = due[*k];
    if (zadd.empty()) zadd = {"ZADD", *keys.due(*k), "XX"};
    zadd.push_back("0");
    zadd.push_back(*due_member(cid, member));
  }
  for (const auto& [cid, mode] : want) {
    if (have.count(cid) == 0) touch(cid, "SADD");
  }
  if (pending.size() > 2) w.before.push_back(std::move(pending));
  w.transaction.push_back({"DEL", w.at});
  if (!want.empty()) {
    RedisCommand hset = {"HSET", w.at};
    for (const auto& [cid, mode] : want) {
      hset.push_back(cid);
      hset.push_back(mode);
    }
    w.transaction.push_back(std::move(hset));
  }
  w.transaction.push_back({"INCR", *keys.member_version(member)});
  if (want.empty()) w.grantees.push_back({"SREM", registry, member.str()});
  for (auto& [k, zadd] : due) w.grantees.push_back(std::move(zadd));
  if (settled.size() > 2) w.settled.push_back(std::move(settled));
  return w;
}

}  // namespace

// read_revalidations on key layout v2: how long a read that found every shard empty waits before
// it reads them again (at most what is left of its block_ms).
constexpr int64_t kRevalidationPollMs = 100;

struct RedisStore::Impl {
  RedisStoreOptions options;
  RedisKeys keys;                 // the layout this store writes (options.key_layout)
  RedisKeys v1_keys;              // key layout v1's, for reads when the layout record says v1
  RedisKeys v2_keys;              // key layout v2's, for reads when the layout record says v2
  std::shared_ptr<RedisTls> tls;  // rediss:// only
  std::unique_ptr<RedisChannel> main;
  std::unique_ptr<RedisChannel> blocking;  // read_revalidations with block_ms > 0
  std::unique_ptr<RedisChannel> calls;     // read_relayed_calls with block_ms > 0
  // Key layout v2: where the next read of relayed calls starts among the shards holding some, so
  // that a busy shard does not starve the others when a read takes fewer than they hold.
  std::atomic<uint32_t> call_shard_turn{0};
  // Key layout v2: one call worker polls the shards at a time (read_relayed_calls_v2).
  std::timed_mutex calls_poll;
  // Every channel's writes pass it (LayoutGatedChannel); read_namespace keeps it current.
  std::shared_ptr<LayoutGate> layout_gate =
      std::make_shared<LayoutGate>(keys.layout(), keys.key_layout());
  LockedBodyCache bodies{options.body_cache_max_bytes};
  // The sweep of keys naming unconfigured connections (sync_connections) ran once in this
  // process: later syncs sweep only after a removal (removed-conns not empty).
  std::atomic<bool> swept{false};

  Impl(RedisStoreOptions o, RedisKeys k, std::shared_ptr<RedisTls> t)
      : options(std::move(o)),
        keys(std::move(k)),
        v1_keys(*keys_for_layout(keys.ns(), KeyLayout::kV1)),
        v2_keys(*keys_for_layout(keys.ns(), KeyLayout::kV2)),
        tls(std::move(t)) {}

  // The channels: three connections to one Redis, or three pools on a cluster.
  Status open_channels() {
    if (!options.redis.cluster) {
      for (std::unique_ptr<RedisChannel>* channel : {&main, &blocking, &calls}) {
        *channel = std::make_unique<LayoutGatedChannel>(
            std::make_unique<RedisConnection>(options, tls.get()), layout_gate);
      }
      return Status::Ok();
    }
    const uint16_t slot = cluster_key_slot(keys.namespace_record());
    for (std::unique_ptr<RedisChannel>* channel : {&main, &blocking, &calls}) {
      RedisClusterPoolOptions po;
      for (const RedisHostPort& seed : options.redis.seeds) {
        ClusterNode node;
        node.host = seed.host;
        node.port = seed.port;
        po.seeds.push_back(std::move(node));
      }
      po.username = options.redis.username;
      po.password = options.redis.password;
      po.tls = options.redis.tls;
      po.tls_files = options.redis.tls_files;
      po.connect_timeout_ms = options.connect_timeout_ms;
      po.command_timeout_ms = options.command_timeout_ms;
      Result<std::unique_ptr<RedisClusterPool>> pool = RedisClusterPool::create(std::move(po));
      if (!pool.ok()) return pool.error();
      *channel = std::make_unique<LayoutGatedChannel>(
          std::make_unique<ClusterChannel>(std::move(pool).value(), slot), layout_gate);
    }
    return Status::Ok();
  }

  std::optional<RedisClusterPoolStats> cluster_stats() const {
    if (!options.redis.cluster) return std::nullopt;
    RedisClusterPoolStats sum;
    for (const std::unique_ptr<RedisChannel>* channel : {&main, &blocking, &calls}) {
      RedisClusterPoolStats one = static_cast<const ClusterChannel&>(
                                      static_cast<const LayoutGatedChannel&>(**channel).inner())
                                      .stats();
      sum.moved += one.moved;
      sum.ask += one.ask;
      sum.retries += one.retries;
      sum.split += one.split;
      sum.refreshes += one.refreshes;
      sum.connections += one.connections;
    }
    return sum;
  }

  // One command whose error reply is a failure.
  Result<RespValue> one(const RedisCommand& argv, std::string_view what) {
    Result<std::vector<RespValue>> r = main->run({argv});
    if (!r.ok()) return r.error();
    RespValue& v = (*r)[0];
    if (v.is_error()) return reply_error(v, what);
    return std::move(v);
  }

  // An MGET of body keys on the main connection (native-agent/store/body_cache.h).
  BodyFetch body_fetch() {
    return [this](const RedisCommand& mget) { return one(mget, "MGET"); };
  }

  // The same on key layout v2, where each body is a slot of its own: one GET per body, routed
  // per node (RedisChannel::run_spread), answered as the MGET's array.
  BodyFetch body_fetch_spread() {
    return [this](const RedisCommand& mget) -> Result<RespValue> {
      std::vector<RedisCommand> gets;
      gets.reserve(mget.size());
      for (std::size_t i = 1; i < mget.size(); ++i) gets.push_back({"GET", mget[i]});
      Result<std::vector<RespValue>> r = spread(gets, "GET body");
      if (!r.ok()) return r.error();
      return RespValue::array(std::move(*r));
    };
  }

  // The discovery read of a namespace in key layout v2 (docs/design.md "The discovery read on v2,
  // round by round"): each round's commands routed by their keys. A namespace that moved back to
  // v1 meanwhile is read there (once: a record that keeps moving is an error, never a guess).
  Result<DiscoverySnapshot> read_in_rounds(const Principal& member, const SnapshotQuery& query) {
    Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(v2_keys, member, query);
    if (!read.ok()) return read.error();
    while (!read->done()) {
      Result<std::vector<RespValue>> replies =
          main->run_spread_split(read->commands(), read->hand_back_split());
      if (!replies.ok()) return replies.error();
      if (Status s = read->feed(*replies); !s.ok()) {
        if (read->layout_seen() == KeyLayout::kV1) return read_one_script(member, query, false);
        return s.error();
      }
    }
    DiscoverySnapshot snapshot = read->take_snapshot();
    Status bodies = fill_snapshot_bodies(this->bodies, v2_keys, snapshot, body_fetch_spread());
    if (!bodies.ok()) return bodies.error();
    return snapshot;
  }

  // The discovery read of layout v1: discovery_read.lua, one round trip, then the bodies. A
  // namespace the script finds in layout v2 (`v2:ready`, which this build reads) is read in rounds
  // when `follow` (once).
  Result<DiscoverySnapshot> read_one_script(const Principal& member, const SnapshotQuery& query,
                                            bool follow) {
    Result<RedisCommand> command = discovery_read_command(v1_keys, member, query);
    if (!command.ok()) return command.error();
    Result<std::vector<RespValue>> reply = main->run({*command});
    if (!reply.ok()) return reply.error();
    if (follow) {
      std::optional<std::string> record = layout_reply_readable_record((*reply)[0]);
      if (record && quiver::read_layout(*record) == KeyLayout::kV2) {
        layout_gate->seen(std::move(record));
        return read_in_rounds(member, query);
      }
    }
    Result<DiscoverySnapshot> snapshot = decode_discovery_reply((*reply)[0], member);
    if (!snapshot.ok()) return snapshot;
    // The bodies the records name (stored apart, once per content): those the body cache holds,
    // the rest in one more round trip.
    Status bodies = fill_snapshot_bodies(this->bodies, v1_keys, *snapshot, body_fetch());
    if (!bodies.ok()) return bodies.error();
    return snapshot;
  }

  // A pipeline whose every error reply is a failure.
  Result<std::vector<RespValue>> many(const std::vector<RedisCommand>& commands,
                                      std::string_view what) {
    if (commands.empty()) return std::vector<RespValue>{};
    Result<std::vector<RespValue>> r = main->run(commands);
    if (!r.ok()) return r.error();
    for (const RespValue& v : *r) {
      if (v.is_error()) return reply_error(v, what);
    }
    return r;
  }

  // MULTI, the commands, EXEC in one round trip: the commands' replies.
  // `at`: key layout v2, the block goes to the node of that key's slot (every command in it must
  // be of that slot); none: the namespace's (v1).
  Result<std::vector<RespValue>> transaction(const std::vector<RedisCommand>& commands,
                                             std::string_view what,
                                             std::optional<std::string_view> at = std::nullopt) {
    std::vector<RedisCommand> all;
    all.reserve(commands.size() + 2);
    all.push_back({"MULTI"});
    all.insert(all.end(), commands.begin(), commands.end());
    all.push_back({"EXEC"});
    Result<std::vector<RespValue>> r = at ? main->run_at(*at, all) : main->run(all);
    if (!r.ok()) return r.error();
    for (const RespValue& v : *r) {
      if (v.is_error()) return reply_error(v, what);
    }
    const RespValue& exec = r->back();
    if (!exec.is_array() || exec.elements.size() != commands.size()) {
      return Error(ErrorCode::kInvalidReply, "redis " + std::string(what) + ": EXEC aborted");
    }
    for (const RespValue& v : exec.elements) {
      if (v.is_error()) return reply_error(v, what);
    }
    return exec.elements;
  }

  // Member grant changes (member_grant_write): each member's transaction, pipelined in one round
  // trip (each MULTI/EXEC is atomic alone: Redis never runs more than one member's in a row), then
  // every grantees write of them in a second.
  Status write_member_grants(const std::vector<MemberGrantWrite>& writes, std::string_view what) {
    if (writes.empty()) return Status::Ok();
    if (!writes.front().at.empty()) return write_member_grants_v2(writes, what);
    std::vector<RedisCommand> all;
    std::vector<RedisCommand> grantees;
    for (const MemberGrantWrite& w : writes) {
      all.push_back({"MULTI"});
      all.insert(all.end(), w.transaction.begin(), w.transaction.end());
      all.push_back({"EXEC"});
      grantees.insert(grantees.end(), w.grantees.begin(), w.grantees.end());
    }
    Result<std::vector<RespValue>> r = main->run(all);
    if (!r.ok()) return r.error();
    std::size_t at = 0;
    for (const MemberGrantWrite& w : writes) {
      for (std::size_t i = 0; i < w.transaction.size() + 2; ++i) {
        if ((*r)[at + i].is_error()) return reply_error((*r)[at + i], what);
      }
      at += w.transaction.size() + 2;
      const RespValue& exec = (*r)[at - 1];
      if (!exec.is_array() || exec.elements.size() != w.transaction.size()) {
        return Error(ErrorCode::kInvalidReply, "redis " + std::string(what) + ": EXEC aborted");
      }
      for (const RespValue& v : exec.elements) {
        if (v.is_error()) return reply_error(v, what);
      }
    }
    Result<std::vector<RespValue>> g = many(grantees, what);
    return g.ok() ? Status::Ok() : Status(g.error());
  }

  // The registry of members with grants over a namespace written before it (grant-members-
  // backfill absent): one SCAN of the namespace's sets, once; every grants key found listed, and
  // its member added to the grantees set of each connection it holds (agents before the registry
  // kept that index in the grants' own transaction; this makes sure of it once, additively, since
  // later syncs write it only for members that change). Grant writes meanwhile list their members
  // themselves (SADD is idempotent).
  Status backfill_grant_members() {
    Result<RespValue> marker = one({"GET", keys.grant_members_backfill()}, "GET");
    if (!marker.ok()) return marker.error();
    if (std::optional<std::string_view> v = marker->as_string(); v && starts_with(*v, "done:")) {
      return Status::Ok();
    }
    Status s = scan_namespace("set", [&](const std::vector<std::string>& page) -> Status {
      std::vector<std::string> principals;
      std::vector<RedisCommand> reads;
      for (const std::string& key : page) {
        Result<ParsedKey> p = keys.parse(key);
        if (!p.ok() || p->kind != KeyKind::kGrants || !p->principal) continue;
        principals.push_back(p->principal->str());
        reads.push_back({"SMEMBERS", key});
      }
      if (principals.empty()) return Status::Ok();
      Result<std::vector<RespValue>> grants = many(reads, "SMEMBERS");
      if (!grants.ok()) return grants.error();
      RedisCommand listed = {"SADD", keys.grant_members()};
      std::vector<RedisCommand> writes;
      for (std::size_t i = 0; i < principals.size(); ++i) {
        listed.push_back(principals[i]);
        for (const std::string& cid : string_set((*grants)[i])) {
          Result<std::string> grantees = keys.grantees(cid);
          if (grantees.ok()) writes.push_back({"SADD", *grantees, principals[i]});
        }
      }
      writes.push_back(std::move(listed));
      Result<std::vector<RespValue>> w = many(writes, "SADD");
      return w.ok() ? Status::Ok() : Status(w.error());
    });
    if (!s.ok()) return s;
    Result<RespValue> done = one(
        {"SET", keys.grant_members_backfill(), "done:" + std::to_string(options.now_ms())}, "SET");
    return done.ok() ? Status::Ok() : Status(done.error());
  }

  // The registry, page by page (SSCAN: never one reply of a million members): member ids of the
  // principals listed; anything else listed (not a member principal) in `unlisted`.
  Status registry_members(std::set<std::string>& members, std::vector<std::string>& unlisted) {
    std::string cursor = "0";
    do {
      Result<RespValue> r = one({"SSCAN", keys.grant_members(), cursor, "COUNT", "1000"}, "SSCAN");
      if (!r.ok()) return r.error();
      const std::vector<RespValue>* e = r->as_array();
      if (e == nullptr || e->size() != 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
        return Error(ErrorCode::kInvalidReply, "redis SSCAN grant-members: unexpected reply");
      }
      cursor = std::string(*(*e)[0].as_string());
      for (const RespValue& v : (*e)[1].elements) {
        std::optional<std::string_view> text = v.as_string();
        if (!text) continue;
        Result<Principal> p = Principal::parse(*text);
        if (p.ok() && !p->is_shared()) {
          members.insert(std::string(p->member_id()));
        } else {
          unlisted.emplace_back(*text);
        }
      }
    } while (cursor != "0");
    return Status::Ok();
  }

  // ---- key layout v2: configuration, grants, overlays -------------------------------------------
  // Every key below lives in the slot of what it belongs to (docs/design.md "Key layout v2"):
  // plain commands go routed by their keys (RedisChannel::run_spread; one pipeline on one Redis),
  // a MULTI block to its one slot (transaction with `at`), and no step SCANs the namespace.

  bool v2() const { return keys.key_layout() == KeyLayout::kV2; }

  // Commands of any slots, routed by their keys, whose every error reply is a failure. The order
  // of commands on different nodes is not kept: a step that must follow another is a next call.
  Result<std::vector<RespValue>> spread(const std::vector<RedisCommand>& commands,
                                        std::string_view what) {
    if (commands.empty()) return std::vector<RespValue>{};
    Result<std::vector<RespValue>> r = main->run_spread(commands);
    if (!r.ok()) return r.error();
    for (const RespValue& v : *r) {
      if (v.is_error()) return reply_error(v, what);
    }
    return r;
  }

  Result<RespValue> one_spread(const RedisCommand& argv, std::string_view what) {
    Result<std::vector<RespValue>> r = spread({argv}, what);
    if (!r.ok()) return r.error();
    return std::move((*r)[0]);
  }

  // SMEMBERS of one registry on every shard (`key_of(k)`), one round: each member with its shard.
  Result<std::vector<std::pair<std::string, uint32_t>>> shard_members(
      const std::function<Result<std::string>(uint32_t)>& key_of, std::string_view what) {
    std::vector<RedisCommand> reads;
    for (uint32_t k = 0; k < keys.shard_count(); ++k) {
      Result<std::string> key = key_of(k);
      if (!key.ok()) return key.error();
      reads.push_back({"SMEMBERS", *key});
    }
    Result<std::vector<RespValue>> r = spread(reads, what);
    if (!r.ok()) return r.error();
    std::vector<std::pair<std::string, uint32_t>> out;
    for (uint32_t k = 0; k < keys.shard_count(); ++k) {
      for (const std::string& m : string_set((*r)[k])) out.emplace_back(m, k);
    }
    return out;
  }

  // The credential mode of each connection, from its record ("" for one without a record), in
  // pages of HGETs: what a v2 grant write stores beside each grant.
  Result<GrantModes> credential_modes(const std::set<std::string>& cids) {
    constexpr std::size_t kPage = 1000;
    GrantModes out;
    auto it = cids.begin();
    while (it != cids.end()) {
      std::vector<std::string> page;
      std::vector<RedisCommand> reads;
      for (; it != cids.end() && page.size() < kPage; ++it) {
        Result<std::string> key = keys.conn(*it);
        if (!key.ok()) return key.error();
        page.push_back(*it);
        reads.push_back({"HGET", *key, redis_field::kCredentialMode});
      }
      Result<std::vector<RespValue>> r = spread(reads, "HGET credential_mode");
      if (!r.ok()) return r.error();
      for (std::size_t i = 0; i < page.size(); ++i) {
        out[page[i]] = std::string((*r)[i].as_string().value_or(""));
      }
    }
    return out;
  }

  // write_member_grants on v2: every member's `before` in one round, then each member's
  // transaction on its own slot, then the grantees (and due, registry) writes, then the pairs
  // settled. A step that fails stops the rest: what ran is idempotent, and the pairs still
  // pending are repaired by the next sync (repair_grantees).
  // TODO(perf): one round trip per member's transaction (a MULTI block cannot go spread); a batch
  // per node would need the pool to send several slots' blocks in one pipeline.
  Status write_member_grants_v2(const std::vector<MemberGrantWrite>& writes,
                                std::string_view what) {
    std::vector<RedisCommand> before, grantees, settled;
    for (const MemberGrantWrite& w : writes) {
      before.insert(before.end(), w.before.begin(), w.before.end());
      grantees.insert(grantees.end(), w.grantees.begin(), w.grantees.end());
      settled.insert(settled.end(), w.settled.begin(), w.settled.end());
    }
    if (Result<std::vector<RespValue>> r = spread(before, what); !r.ok()) return r.error();
    for (const MemberGrantWrite& w : writes) {
      if (Result<std::vector<RespValue>> r = transaction(w.transaction, what, w.at); !r.ok()) {
        return r.error();
      }
    }
    if (Result<std::vector<RespValue>> r = spread(grantees, what); !r.ok()) return r.error();
    Result<std::vector<RespValue>> r = spread(settled, what);
    return r.ok() ? Status::Ok() : Status(r.error());
  }

  // The grantees pairs a grant change noted pending and never settled (a crash, or a lost
  // connection, between its two steps: member_grant_write): each recomputed from the member's
  // grants as they stand (granted: SADD grantees of the connection; not: SREM), then taken out.
  // Idempotent; normally the set is empty and this is one SMEMBERS (v1) or one per shard (v2,
  // where each member's pairs are on its shard and its grants are a HASH).
  Status repair_grantees() {
    Result<std::vector<std::pair<std::string, uint32_t>>> pending = shard_members(
        [&](uint32_t k) { return keys.grantees_pending(k); }, "SMEMBERS grantees-pending");
    if (!pending.ok()) return pending.error();
    if (pending->empty()) return Status::Ok();
    std::map<std::string, std::vector<std::string>> cids_of;  // principal → cids touched
    std::map<uint32_t, RedisCommand> settled;                 // shard → SREM of its pairs
    for (const auto& [pair, shard] : *pending) {
      RedisCommand& srem = settled[shard];
      if (srem.empty()) srem = {"SREM", *keys.grantees_pending(shard)};
      srem.push_back(pair);
      Result<DueMember> p = parse_due_member(pair);
      if (!p.ok() || p->principal.is_shared()) continue;  // not a pair any agent wrote: drop it
      cids_of[p->principal.str()].push_back(p->connection_id);
    }
    std::vector<std::string> principals;
    std::vector<RedisCommand> reads;
    for (const auto& [principal, cids] : cids_of) {
      principals.push_back(principal);
      reads.push_back({v2() ? "HKEYS" : "SMEMBERS", *keys.grants(*Principal::parse(principal))});
    }
    Result<std::vector<RespValue>> grants =
        v2() ? spread(reads, "HKEYS grants") : many(reads, "SMEMBERS");
    if (!grants.ok()) return grants.error();
    std::vector<RedisCommand> writes;
    for (std::size_t i = 0; i < principals.size(); ++i) {
      const std::set<std::string> granted = string_set((*grants)[i]);
      for (const std::string& cid : cids_of[principals[i]]) {
        writes.push_back(
            {granted.count(cid) != 0 ? "SADD" : "SREM", *keys.grantees(cid), principals[i]});
      }
    }
    std::vector<RedisCommand> srems;
    for (auto& [shard, srem] : settled) srems.push_back(std::move(srem));
    if (!v2()) {  // one slot: the writes and the settling in one pipeline, in that order
      writes.insert(writes.end(), srems.begin(), srems.end());
      Result<std::vector<RespValue>> w = many(writes, "repair grantees");
      return w.ok() ? Status::Ok() : Status(w.error());
    }
    // Spread, the order across nodes is not kept: the pairs are settled after the writes landed.
    if (Result<std::vector<RespValue>> w = spread(writes, "repair grantees"); !w.ok()) {
      return w.error();
    }
    Result<std::vector<RespValue>> w = spread(srems, "repair grantees");
    return w.ok() ? Status::Ok() : Status(w.error());
  }

  // registry_members on v2: every shard's `grant-members`, SSCAN pages of all shards per round;
  // anything listed that is not a member principal in `unlisted`, with its shard.
  Status registry_members_v2(std::set<std::string>& members,
                             std::vector<std::pair<std::string, uint32_t>>& unlisted) {
    std::map<uint32_t, std::string> cursors;  // shards not walked to the end
    for (uint32_t k = 0; k < keys.shard_count(); ++k) cursors[k] = "0";
    while (!cursors.empty()) {
      std::vector<uint32_t> shards;
      std::vector<RedisCommand> scans;
      for (const auto& [k, cursor] : cursors) {
        shards.push_back(k);
        scans.push_back({"SSCAN", *keys.grant_members(k), cursor, "COUNT", "1000"});
      }
      Result<std::vector<RespValue>> r = spread(scans, "SSCAN");
      if (!r.ok()) return r.error();
      for (std::size_t i = 0; i < shards.size(); ++i) {
        const std::vector<RespValue>* e = (*r)[i].as_array();
        if (e == nullptr || e->size() != 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
          return Error(ErrorCode::kInvalidReply, "redis SSCAN grant-members: unexpected reply");
        }
        std::string next(*(*e)[0].as_string());
        for (const RespValue& v : (*e)[1].elements) {
          std::optional<std::string_view> text = v.as_string();
          if (!text) continue;
          Result<Principal> p = Principal::parse(*text);
          if (p.ok() && !p->is_shared()) {
            members.insert(std::string(p->member_id()));
          } else {
            unlisted.emplace_back(std::string(*text), shards[i]);
          }
        }
        if (next == "0") {
          cursors.erase(shards[i]);
        } else {
          cursors[shards[i]] = std::move(next);
        }
      }
    }
    return Status::Ok();
  }

  // Everything of a removed connection, per slot (the sweep v1 does with a SCAN of the namespace):
  // for each grantee, on the member's slot, the grant and that member's keys of the connection,
  // with the member's version; then the connection's own keys on its slot, with its version; then
  // its entries in the due index of its shard. Its preference rows stay (a user's choice outlives
  // the connection) and so do its versions (a connection added again must not repeat a value a
  // reader holds). Idempotent: a sweep cut short runs again from removed-conns.
  // TODO(perf): one round trip per grantee; the per-member manifests of members whose grant went
  // before the connection did are maintenance's (their due entries were made due).
  Status sweep_connection_v2(const std::string& cid) {
    Result<RespValue> grantees = one_spread({"SMEMBERS", *keys.grantees(cid)}, "SMEMBERS");
    if (!grantees.ok()) return grantees.error();
    const uint32_t shard = *keys.connection_shard(cid);
    RedisCommand unindex = {"ZREM", *keys.due(shard), *due_member(cid, Principal::shared())};
    auto owned = [&](const Principal& p) {
      return RedisCommand{"UNLINK",
                          *keys.manifest(cid, p),
                          *keys.lease(cid, p),
                          *keys.fence(cid, p),
                          *keys.disabled(cid, p),
                          *keys.revalidate_gate(cid, p),
                          *keys.invalidated(cid, p)};
    };
    // slot_drop_v2.lua: the version first, then the keys (after the UNLINK of `owned`).
    auto drop = [&](std::string version, std::optional<std::string> hash, RedisCommand unlink,
                    std::string field) -> Status {
      std::vector<std::string> slot_keys = {std::move(version)};
      if (hash) slot_keys.push_back(std::move(*hash));
      slot_keys.insert(slot_keys.end(), unlink.begin() + 1, unlink.end());
      Result<RedisCommand> command =
          schema_script_command("slot_drop_v2.lua", std::move(slot_keys), {std::move(field)});
      if (!command.ok()) return command.error();
      Result<RespValue> w = one_spread(*command, "sweep connection");
      return w.ok() ? Status::Ok() : Status(w.error());
    };
    for (const std::string& principal : string_set(*grantees)) {
      Result<Principal> p = Principal::parse(principal);
      if (!p.ok() || p->is_shared()) continue;
      if (Status s = drop(*keys.member_version(*p), *keys.grants(*p), owned(*p), cid); !s.ok()) {
        return s;
      }
      unindex.push_back(*due_member(cid, *p));
    }
    RedisCommand own = owned(Principal::shared());
    for (const std::string& key : {*keys.conn(cid), *keys.grantees(cid), *keys.marked(cid)}) {
      own.push_back(key);
    }
    if (Status s = drop(*keys.conn_version(cid), std::nullopt, std::move(own), ""); !s.ok()) {
      return s;
    }
    Result<RespValue> z = one_spread(unindex, "ZREM");
    return z.ok() ? Status::Ok() : Status(z.error());
  }

  Result<std::vector<ConnectionRecord>> list_connections_v2() {
    Result<std::vector<std::pair<std::string, uint32_t>>> listed =
        shard_members([&](uint32_t k) { return keys.conns(k); }, "SMEMBERS conns");
    if (!listed.ok()) return listed.error();
    std::set<std::string> sorted;
    for (const auto& [id, shard] : *listed) {
      if (validate_connection_id(id).ok()) sorted.insert(id);  // not ours to list otherwise
    }
    std::vector<std::string> ids(sorted.begin(), sorted.end());
    std::vector<RedisCommand> reads;
    for (const std::string& id : ids) reads.push_back({"HGETALL", *keys.conn(id)});
    Result<std::vector<RespValue>> stored = spread(reads, "HGETALL");
    if (!stored.ok()) return stored.error();
    std::vector<ConnectionRecord> out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Result<std::optional<ConnectionRecord>> r =
          connection_record_from_fields(ids[i], field_map((*stored)[i]));
      if (!r.ok()) return r.error();
      if (*r) out.push_back(std::move(**r));
    }
    return out;
  }

  // sync_connections on v2. Per connection added or changed: its registry entry on its shard
  // first (a listed connection without a record is added again by the next sync), then one
  // transaction on its slot (the record and its version); a removal is one transaction on its
  // shard (out of `conns`, into `removed-conns`), then the sweep (sweep_connection_v2). Then, on
  // each changed connection's shard, its entries due now; and where a connection's credential mode
  // is new (added, or changed), the mode in each grantee's grants HASH (grant_mode_set.lua, one
  // per grantee, after the connection's version moved: a reader that sees the new record with an
  // old field reads that connection again as the record says).
  Result<ConnectionSync> sync_connections_v2(
      const std::map<std::string, const ConnectionRecord*>& wanted) {
    Result<std::vector<std::pair<std::string, uint32_t>>> listing =
        shard_members([&](uint32_t k) { return keys.conns(k); }, "SMEMBERS conns");
    if (!listing.ok()) return listing.error();
    std::map<std::string, uint32_t> listed;
    std::vector<RedisCommand> first;  // registry writes, before the records
    for (const auto& [id, shard] : *listing) {
      if (validate_connection_id(id).ok()) {
        listed.emplace(id, shard);
      } else {
        first.push_back({"SREM", *keys.conns(shard), id});  // not an id any agent wrote: drop it
      }
    }
    std::vector<std::string> ids;  // listed or wanted, each once
    for (const auto& [id, shard] : listed) ids.push_back(id);
    for (const auto& [id, record] : wanted) {
      if (listed.count(id) == 0) ids.push_back(id);
    }
    std::vector<RedisCommand> reads;
    for (const std::string& id : ids) reads.push_back({"HGETALL", *keys.conn(id)});
    Result<std::vector<RespValue>> stored = spread(reads, "HGETALL");
    if (!stored.ok()) return stored.error();

    ConnectionSync sync;
    std::vector<std::pair<std::string, std::vector<RedisCommand>>> records;  // conn key, block
    std::map<uint32_t, std::vector<RedisCommand>> removals;                  // shard, block
    GrantModes new_modes;  // connections whose grantees' grants must name a new mode
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::string& id = ids[i];
      const uint32_t shard = *keys.connection_shard(id);
      HashFields fields = field_map((*stored)[i]);
      auto want = wanted.find(id);
      if (want == wanted.end()) {
        sync.removed.push_back(id);
        std::vector<RedisCommand>& block = removals[shard];
        block.push_back({"SREM", *keys.conns(shard), id});
        block.push_back({"SADD", *keys.removed_conns(shard), id});
        continue;
      }
      const ConnectionRecord& r = *want->second;
      Result<std::optional<ConnectionRecord>> current = connection_record_from_fields(id, fields);
      bool exists = listed.count(id) != 0 && !fields.empty();
      if (exists && current.ok() && (*current)->same_config(r)) continue;
      (exists ? sync.changed : sync.added).push_back(id);
      const std::string conn = *keys.conn(id);
      first.push_back({"SADD", *keys.conns(shard), id});
      RedisCommand hset = {"HSET", conn};
      for (auto& [name, value] : connection_record_fields(r)) {
        hset.push_back(name);
        hset.push_back(std::move(value));
      }
      records.emplace_back(conn,
                           std::vector<RedisCommand>{
                               {"DEL", conn}, std::move(hset), {"INCR", *keys.conn_version(id)}});
      const std::string mode = credential_mode_name(r.credential_mode);
      auto was = fields.find(redis_field::kCredentialMode);
      if (!exists || was == fields.end() || was->second != mode) new_modes[id] = mode;
    }
    if (Result<std::vector<RespValue>> w = spread(first, "sync connections"); !w.ok()) {
      return w.error();
    }
    for (const auto& [conn, block] : records) {
      if (Result<std::vector<RespValue>> w = transaction(block, "sync connections", conn);
          !w.ok()) {
        return w.error();
      }
    }
    for (const auto& [shard, block] : removals) {
      if (Result<std::vector<RespValue>> w =
              transaction(block, "sync connections", *keys.conns(shard));
          !w.ok()) {
        return w.error();
      }
    }

    // The grantees of the changed connections (their entries due now) and of those whose mode is
    // new (their grants' field).
    std::set<std::string> asked(sync.changed.begin(), sync.changed.end());
    for (const auto& [id, mode] : new_modes) asked.insert(id);
    std::vector<std::string> asked_ids(asked.begin(), asked.end());
    std::vector<RedisCommand> grantee_reads;
    for (const std::string& id : asked_ids)
      grantee_reads.push_back({"SMEMBERS", *keys.grantees(id)});
    Result<std::vector<RespValue>> grantees = spread(grantee_reads, "SMEMBERS");
    if (!grantees.ok()) return grantees.error();
    std::map<std::string, std::set<std::string>> grantees_of;
    for (std::size_t i = 0; i < asked_ids.size(); ++i) {
      grantees_of[asked_ids[i]] = string_set((*grantees)[i]);
    }
    std::map<uint32_t, RedisCommand> due;  // shard → ZADD XX 0 of its changed connections' entries
    for (const std::string& id : sync.changed) {
      const uint32_t shard = *keys.connection_shard(id);
      RedisCommand& zadd = due[shard];
      if (zadd.empty()) zadd = {"ZADD", *keys.due(shard), "XX"};
      std::set<std::string> principals = grantees_of[id];
      principals.insert(Principal::shared().str());
      for (const std::string& principal : principals) {
        Result<Principal> parsed = Principal::parse(principal);
        if (!parsed.ok()) continue;
        zadd.push_back("0");
        zadd.push_back(*due_member(id, *parsed));
      }
    }
    std::vector<RedisCommand> after;
    for (auto& [shard, zadd] : due) after.push_back(std::move(zadd));
    std::string_view script = schema_asset("lua/grant_mode_set.lua");
    if (script.empty()) {
      return Error(ErrorCode::kInternal, "schema/lua/grant_mode_set.lua is not compiled in");
    }
    for (const auto& [id, mode] : new_modes) {
      for (const std::string& principal : grantees_of[id]) {
        Result<Principal> p = Principal::parse(principal);
        if (!p.ok() || p->is_shared()) continue;
        after.push_back({"EVAL", std::string(script), "1", *keys.grants(*p), id, mode});
      }
    }
    if (Result<std::vector<RespValue>> w = spread(after, "sync connections"); !w.ok()) {
      return w.error();
    }

    // The sweep, per connection noted removed (now, or by a sync whose sweep did not finish):
    // never a SCAN of the namespace.
    Result<std::vector<std::pair<std::string, uint32_t>>> pending =
        shard_members([&](uint32_t k) { return keys.removed_conns(k); }, "SMEMBERS removed-conns");
    if (!pending.ok()) return pending.error();
    std::map<std::string, uint32_t> to_sweep(pending->begin(), pending->end());
    for (const std::string& id : sync.removed) to_sweep.emplace(id, *keys.connection_shard(id));
    std::map<uint32_t, RedisCommand> done;  // shard → SREM removed-conns
    for (const auto& [id, shard] : to_sweep) {
      // An id that is not one (never written by an agent) or a connection configured again
      // meanwhile is only taken out.
      if (validate_connection_id(id).ok() && wanted.count(id) == 0) {
        if (Status s = sweep_connection_v2(id); !s.ok()) return s.error();
      }
      RedisCommand& srem = done[shard];
      if (srem.empty()) srem = {"SREM", *keys.removed_conns(shard)};
      srem.push_back(id);
    }
    std::vector<RedisCommand> srems;
    for (auto& [shard, srem] : done) srems.push_back(std::move(srem));
    if (Result<std::vector<RespValue>> w = spread(srems, "SREM"); !w.ok()) return w.error();
    return sync;
  }

  // A connection's grantee set lost with its slot (one Redis Cluster shard restarted empty or
  // flushed) while its grantees' grants stayed: each pair the configuration grants is noted
  // pending, and repair_grantees writes it as the member's stored grants say. One EXISTS per
  // granted connection; then the pairs of the connections without a set, kPairsPerRound at a time
  // (each round noted, then repaired).
  Status rebuild_grantee_sets(const GrantMap& grants) {
    constexpr std::size_t kPairsPerRound = 10'000;
    std::map<std::string, std::vector<Principal>> granted_to;  // cid → members
    for (const auto& [id, cids] : grants) {
      Result<Principal> m = Principal::member(id);
      if (!m.ok()) continue;
      for (const std::string& cid : cids) granted_to[cid].push_back(*m);
    }
    std::vector<RedisCommand> exists;
    std::vector<const std::string*> asked;
    for (const auto& [cid, members] : granted_to) {
      Result<std::string> k = keys.grantees(cid);
      if (!k.ok()) continue;
      exists.push_back({"EXISTS", std::move(*k)});
      asked.push_back(&cid);
    }
    Result<std::vector<RespValue>> there = spread(exists, "EXISTS grantees");
    if (!there.ok()) return there.error();
    std::map<uint32_t, RedisCommand> pending;  // member shard → SADD of its pairs
    std::size_t pairs = 0;
    auto flush = [&]() -> Status {
      std::vector<RedisCommand> writes;
      for (auto& [shard, sadd] : pending) writes.push_back(std::move(sadd));
      pending.clear();
      pairs = 0;
      if (writes.empty()) return Status::Ok();
      Result<std::vector<RespValue>> w = spread(writes, "SADD grantees-pending");
      if (!w.ok()) return w.error();
      return repair_grantees();
    };
    for (std::size_t i = 0; i < asked.size(); ++i) {
      if ((*there)[i].integer == 1) continue;
      for (const Principal& m : granted_to[*asked[i]]) {
        const uint32_t shard = *keys.member_shard(m);
        RedisCommand& sadd = pending[shard];
        if (sadd.empty()) sadd = {"SADD", *keys.grantees_pending(shard)};
        sadd.push_back(*due_member(*asked[i], m));
        if (++pairs >= kPairsPerRound) {
          if (Status s = flush(); !s.ok()) return s;
        }
      }
    }
    return flush();
  }

  // sync_grants on v2: as on v1 (the members to compare are those wanted and those the shards'
  // registries list; each whose grants differ is written alone), with the grants a HASH whose
  // values are the connections' modes as their records say now: a grant whose mode is stale (a
  // grant written before its connection's record) is rewritten, though its member is not counted
  // as changed.
  Result<GrantSync> sync_grants_v2(const GrantMap& grants) {
    constexpr std::size_t kReadPage = 1000;   // HGETALL per round
    constexpr std::size_t kWriteBatch = 100;  // members per write_member_grants
    if (Status s = repair_grantees(); !s.ok()) return s.error();
    std::set<std::string> listed;
    std::vector<std::pair<std::string, uint32_t>> unlisted;
    if (Status s = registry_members_v2(listed, unlisted); !s.ok()) return s.error();
    std::set<std::string> members = listed;
    std::set<std::string> cids;
    for (const auto& [member, granted] : grants) {
      members.insert(member);
      cids.insert(granted.begin(), granted.end());
    }
    Result<GrantModes> modes = credential_modes(cids);
    if (!modes.ok()) return modes.error();

    GrantSync sync;
    std::vector<MemberGrantWrite> batch;
    std::vector<RedisCommand> drop;  // registry entries: SREM without grants, SADD lost ones
    for (const auto& [text, shard] : unlisted) {
      drop.push_back({"SREM", *keys.grant_members(shard), text});
    }
    auto flush = [&]() -> Status {
      Status s = write_member_grants(batch, "sync grants");
      batch.clear();
      return s;
    };
    auto it = members.begin();
    while (it != members.end()) {
      std::vector<std::string> page;
      std::vector<RedisCommand> reads;  // each member's grants, then its version
      for (; it != members.end() && page.size() < kReadPage; ++it) {
        page.push_back(*it);
        const Principal member = *Principal::member(*it);
        reads.push_back({"HGETALL", *keys.grants(member)});
        reads.push_back({"EXISTS", *keys.member_version(member)});
      }
      Result<std::vector<RespValue>> stored = spread(reads, "HGETALL");
      if (!stored.ok()) return stored.error();
      for (std::size_t i = 0; i < page.size(); ++i) {
        const Principal member = *Principal::member(page[i]);
        GrantModes desired;
        auto want = grants.find(page[i]);
        if (want != grants.end()) {
          for (const std::string& cid : want->second) desired[cid] = (*modes)[cid];
        }
        GrantModes have;
        for (const auto& [cid, mode] : field_map((*stored)[2 * i])) have[cid] = mode;
        // Every member of the configuration has a version, one without grants too: a reader
        // takes a member without one for a member whose slot lost its data (discovery_spread.h).
        const bool versioned = (*stored)[2 * i + 1].integer == 1 || want == grants.end();
        if (have == desired && versioned) {
          if (desired.empty() && listed.count(page[i]) != 0) {
            drop.push_back({"SREM", *keys.grant_members(*keys.member_shard(member)), member.str()});
          } else if (!desired.empty() && listed.count(page[i]) == 0) {
            // Its registry entry was lost with its shard (the grants stayed): without it a later
            // removal of the member from the configuration would leave its grants behind.
            drop.push_back({"SADD", *keys.grant_members(*keys.member_shard(member)), member.str()});
          }
          continue;
        }
        if (!std::equal(have.begin(), have.end(), desired.begin(), desired.end(),
                        [](const auto& a, const auto& b) { return a.first == b.first; })) {
          sync.changed_members.push_back(page[i]);
        }
        batch.push_back(member_grant_write_v2(keys, member, have, desired));
        if (batch.size() >= kWriteBatch) {
          if (Status s = flush(); !s.ok()) return s.error();
        }
      }
    }
    if (Status s = flush(); !s.ok()) return s.error();
    if (Result<std::vector<RespValue>> r = spread(drop, "SREM"); !r.ok()) return r.error();
    return sync;
  }

  // One script the core built (lease.h, discovery_redis.h); an invalid argument fails here.
  Result<RespValue> script(const Result<RedisCommand>& command, std::string_view what) {
    if (!command.ok()) return command.error();
    return one(*command, what);
  }

  Result<LeaseKeys> lease_keys(std::string_view cid, const Principal& principal) {
    LeaseKeys k;
    Result<std::string> manifest = keys.manifest(cid, principal);
    if (!manifest.ok()) return manifest.error();
    k.manifest = *manifest;
    k.lease = *keys.lease(cid, principal);
    k.fence = *keys.fence(cid, principal);
    k.connection = *keys.conn(cid);
    k.epoch = keys.epoch();
    k.due = keys.due();
    k.due_member = *due_member(cid, principal);
    k.version = *keys.version_of(cid, principal);
    return k;
  }

  // Every key of the namespace (SCAN MATCH "quiver:{ns}:*", optionally of one TYPE), page by page.
  // TODO(perf): O(keys of the namespace); run on config sync only.
  // On a cluster, layout v1 keeps every key of the namespace in the slot of `{ns}`: the SCAN goes
  // to that slot's master (ClusterChannel) and sees them all. Layout v2 spreads them, and walks
  // each master with its own cursor (RedisClusterPool::run_on_masters); so does
  // list_manifest_metas' SCAN.
  Status scan_namespace(const char* type,
                        const std::function<Status(const std::vector<std::string>&)>& page) {
    std::string cursor = "0";
    do {
      RedisCommand scan = {"SCAN",  cursor, "MATCH", keys.namespace_match_pattern(),
                           "COUNT", "1000"};
      if (type != nullptr) {
        scan.push_back("TYPE");
        scan.push_back(type);
      }
      Result<RespValue> r = one(scan, "SCAN");
      if (!r.ok()) return r.error();
      const std::vector<RespValue>* e = r->as_array();
      if (e == nullptr || e->size() != 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
        return Error(ErrorCode::kInvalidReply, "redis SCAN: unexpected reply");
      }
      cursor = std::string(*(*e)[0].as_string());
      std::vector<std::string> found;
      for (const RespValue& k : (*e)[1].elements) {
        if (std::optional<std::string_view> s = k.as_string()) found.emplace_back(*s);
      }
      if (!found.empty()) {
        if (Status s = page(found); !s.ok()) return s;
      }
    } while (cursor != "0");
    return Status::Ok();
  }

  // The group reads the stream from its start, so requests queued before any agent ran are
  // consumed. BUSYGROUP (it exists) is success.
  Status ensure_group() {
    Result<std::vector<RespValue>> r = main->run({{"XGROUP", "CREATE", keys.revalidate_stream(),
                                                   kRevalidateConsumerGroup, "0", "MKSTREAM"}});
    if (!r.ok()) return r.error();
    const RespValue& v = (*r)[0];
    if (v.is_error() && !starts_with(v.str, "BUSYGROUP")) return reply_error(v, "XGROUP CREATE");
    return Status::Ok();
  }

  // Stream entries [[id, [field, value, ...]], ...] as requests; malformed ones are acknowledged
  // and deleted here and reported by id.
  // On v2 `shard` names the stream the entries came from, and each id says it (shard_request_id).
  Result<RevalidationBatch> batch_from_entries(const std::vector<RespValue>& entries,
                                               std::optional<uint32_t> shard = std::nullopt) {
    RevalidationBatch batch;
    for (const RespValue& entry : entries) {
      const std::vector<RespValue>* e = entry.as_array();
      if (e == nullptr || e->empty() || !(*e)[0].as_string()) continue;
      std::string id = shard ? shard_request_id(*shard, *(*e)[0].as_string())
                             : std::string(*(*e)[0].as_string());
      bool ok = false;
      RevalidationRequest request;
      if (e->size() == 2 && (*e)[1].is_array()) {
        HashFields f = field_map((*e)[1]);
        request.id = id;
        request.connection_id = f[redis_field::kCid];
        request.reason = f[redis_field::kReason];
        Result<Principal> p = Principal::parse(f[redis_field::kPrincipal]);
        ok = p.ok() && validate_connection_id(request.connection_id).ok() &&
             validate_revalidation_reason(request.reason).ok() &&
             parse_i64(f[redis_field::kAt], &request.at_ms) && request.at_ms >= 0;
        if (p.ok()) request.principal = *p;
      }
      if (ok) {
        batch.requests.push_back(std::move(request));
      } else {
        batch.malformed_ids.push_back(id);
      }
    }
    if (!batch.malformed_ids.empty()) {
      if (Status s = ack(batch.malformed_ids); !s.ok()) return s.error();
    }
    return batch;
  }

  Status ack(const std::vector<std::string>& ids) {
    if (ids.empty()) return Status::Ok();
    if (v2()) return ack_v2(ids);
    RedisCommand xack = {"XACK", keys.revalidate_stream(), kRevalidateConsumerGroup};
    RedisCommand xdel = {"XDEL", keys.revalidate_stream()};
    for (const std::string& id : ids) {
      if (!valid_stream_id(id)) return invalid("revalidation id '" + id + "' is not a stream id");
      xack.push_back(id);
      xdel.push_back(id);
    }
    // Only one group reads the stream: a handled entry is deleted, so a group recreated from the
    // start never sees it again.
    Result<std::vector<RespValue>> r = many({xack, xdel}, "XACK");
    return r.ok() ? Status::Ok() : Status(r.error());
  }

  // ---- the revalidation queue on key layout v2 --------------------------------------------------
  // S streams, one per shard (`revalidate_stream(k)`), each with its own consumer group. A
  // request's id names its shard: "<k>/<stream id>" (shard_request_id), so an ack reaches the
  // stream that delivered it. No command names two shards' streams (several STREAMS of different
  // slots are CROSSSLOT on a cluster): each round sends one command per shard, routed by its key.

  // Requests delivered to a consumer by a read or a claim beyond the `max` it asked for (one
  // round reads every shard), handed out by its next reads before Redis is asked again. Pending
  // in Redis like any delivered request: lost with the process, they are claimed after
  // claim_idle_ms as any crashed consumer's are.
  std::mutex delivered_mu;
  std::map<std::string, std::vector<RevalidationRequest>, std::less<>> delivered;
  std::atomic<uint32_t> next_first_shard{0};  // the shard whose entries come first in a round

  static std::string shard_request_id(uint32_t shard, std::string_view stream_id) {
    return std::to_string(shard) + "/" + std::string(stream_id);
  }

  // "<k>/<stream id>" → (k, stream id); kInvalidArgument for anything else.
  Result<std::pair<uint32_t, std::string>> parse_shard_request_id(std::string_view id) const {
    std::size_t slash = id.find('/');
    int64_t shard = -1;
    if (slash == std::string_view::npos ||
        !parse_int(id.substr(0, slash), 0, int64_t{keys.shard_count()} - 1, &shard) ||
        !valid_stream_id(id.substr(slash + 1))) {
      return invalid("revalidation id '" + std::string(id) +
                     "' is not <shard>/<stream id> (key layout v2)");
    }
    return std::make_pair(static_cast<uint32_t>(shard), std::string(id.substr(slash + 1)));
  }

  Status ack_v2(const std::vector<std::string>& ids) {
    std::map<uint32_t, std::vector<std::string>> by_shard;
    for (const std::string& id : ids) {
      Result<std::pair<uint32_t, std::string>> parsed = parse_shard_request_id(id);
      if (!parsed.ok()) return parsed.error();
      by_shard[parsed->first].push_back(std::move(parsed->second));
    }
    std::vector<RedisCommand> commands;
    for (auto& [shard, stream_ids] : by_shard) {
      Result<std::string> stream = keys.revalidate_stream(shard);
      if (!stream.ok()) return stream.error();
      RedisCommand xack = {"XACK", *stream, kRevalidateConsumerGroup};
      RedisCommand xdel = {"XDEL", *stream};
      xack.insert(xack.end(), stream_ids.begin(), stream_ids.end());
      xdel.insert(xdel.end(), stream_ids.begin(), stream_ids.end());
      commands.push_back(std::move(xack));
      commands.push_back(std::move(xdel));
    }
    // As on v1: a handled entry is deleted, so a group recreated from the start never sees it.
    Result<std::vector<RespValue>> r = spread(commands, "XACK");
    return r.ok() ? Status::Ok() : Status(r.error());
  }

  // XGROUP CREATE ... 0 MKSTREAM on each of `shards`, one round; BUSYGROUP is success.
  Status ensure_groups_v2(const std::vector<uint32_t>& shards) {
    std::vector<RedisCommand> creates;
    for (uint32_t k : shards) {
      Result<std::string> stream = keys.revalidate_stream(k);
      if (!stream.ok()) return stream.error();
      creates.push_back({"XGROUP", "CREATE", *stream, kRevalidateConsumerGroup, "0", "MKSTREAM"});
    }
    if (creates.empty()) return Status::Ok();
    Result<std::vector<RespValue>> r = main->run_spread(creates);
    if (!r.ok()) return r.error();
    for (const RespValue& v : *r) {
      if (v.is_error() && !starts_with(v.str, "BUSYGROUP")) return reply_error(v, "XGROUP CREATE");
    }
    return Status::Ok();
  }

  // Hands out up to `max` of `all` (the rest kept for `consumer`'s next reads) and the malformed.
  RevalidationBatch hand_out(std::string_view consumer, RevalidationBatch all, std::size_t max) {
    if (all.requests.size() > max) {
      std::lock_guard<std::mutex> lock(delivered_mu);
      std::vector<RevalidationRequest>& kept = delivered[std::string(consumer)];
      kept.insert(kept.end(), std::make_move_iterator(all.requests.begin() + max),
                  std::make_move_iterator(all.requests.end()));
      all.requests.resize(max);
    }
    return all;
  }

  // Up to `max` requests delivered to `consumer` before and not yet handed out.
  RevalidationBatch take_delivered(std::string_view consumer, std::size_t max) {
    RevalidationBatch out;
    std::lock_guard<std::mutex> lock(delivered_mu);
    auto it = delivered.find(consumer);
    if (it == delivered.end()) return out;
    std::vector<RevalidationRequest>& kept = it->second;
    std::size_t n = std::min(max, kept.size());
    out.requests.assign(std::make_move_iterator(kept.begin()),
                        std::make_move_iterator(kept.begin() + n));
    kept.erase(kept.begin(), kept.begin() + n);
    if (kept.empty()) delivered.erase(it);
    return out;
  }

  // One XREADGROUP ... COUNT max STREAMS <stream k> > per shard, no BLOCK, one round on `conn`
  // (a shard without its group gets it and is read again, once); every entry read, the rotating
  // first shard's first.
  Result<RevalidationBatch> read_shards_once(RedisChannel& conn, std::string_view consumer,
                                             std::size_t max) {
    const uint32_t S = keys.shard_count();
    const uint32_t first = next_first_shard.fetch_add(1) % S;
    std::vector<uint32_t> shards;
    for (uint32_t i = 0; i < S; ++i) shards.push_back((first + i) % S);
    std::vector<RevalidationBatch> per_shard(S);
    for (int attempt = 0; attempt < 2 && !shards.empty(); ++attempt) {
      std::vector<RedisCommand> reads;
      for (uint32_t k : shards) {
        Result<std::string> stream = keys.revalidate_stream(k);
        if (!stream.ok()) return stream.error();
        reads.push_back({"XREADGROUP", "GROUP", kRevalidateConsumerGroup, std::string(consumer),
                         "COUNT", std::to_string(max), "STREAMS", *stream, ">"});
      }
      Result<std::vector<RespValue>> r = conn.run_spread(reads);
      if (!r.ok()) return r.error();
      std::vector<uint32_t> no_group;
      for (std::size_t i = 0; i < shards.size(); ++i) {
        const RespValue& v = (*r)[i];
        if (v.is_error()) {
          if (attempt == 0 && starts_with(v.str, "NOGROUP")) {
            no_group.push_back(shards[i]);
            continue;
          }
          return reply_error(v, "XREADGROUP");
        }
        if (v.is_nil()) continue;
        // [[stream, [[id, fields], ...]]]
        const std::vector<RespValue>* streams = v.as_array();
        if (streams == nullptr || streams->empty()) continue;
        const std::vector<RespValue>* s = (*streams)[0].as_array();
        if (s == nullptr || s->size() != 2 || !(*s)[1].is_array()) {
          return Error(ErrorCode::kInvalidReply, "redis XREADGROUP: unexpected reply");
        }
        Result<RevalidationBatch> batch = batch_from_entries((*s)[1].elements, shards[i]);
        if (!batch.ok()) return batch.error();
        per_shard[shards[i]] = std::move(*batch);
      }
      if (Status st = ensure_groups_v2(no_group); !st.ok()) return st.error();
      shards = std::move(no_group);
    }
    RevalidationBatch all;
    for (uint32_t i = 0; i < S; ++i) {
      RevalidationBatch& b = per_shard[(first + i) % S];
      for (RevalidationRequest& req : b.requests) all.requests.push_back(std::move(req));
      for (std::string& id : b.malformed_ids) all.malformed_ids.push_back(std::move(id));
    }
    return all;
  }

  // XAUTOCLAIM on every shard, one round per pass (a shard whose scan is done is not asked
  // again), as v1's passes: up to 16, until `max` are claimed. A round may claim more than `max`
  // (each shard is asked for what is still wanted): the rest waits for `consumer`'s next read.
  Result<RevalidationBatch> claim_v2(std::string_view consumer, int64_t min_idle_ms,
                                     std::size_t max) {
    const uint32_t S = keys.shard_count();
    std::vector<std::string> start(S, "0-0");
    std::vector<bool> done(S, false);
    RevalidationBatch out;
    for (int round = 0; round < 16 && out.requests.size() < max; ++round) {
      const std::size_t want = max - out.requests.size();
      std::vector<uint32_t> shards;
      std::vector<RedisCommand> claims;
      for (uint32_t k = 0; k < S; ++k) {
        if (done[k]) continue;
        Result<std::string> stream = keys.revalidate_stream(k);
        if (!stream.ok()) return stream.error();
        shards.push_back(k);
        claims.push_back({"XAUTOCLAIM", *stream, kRevalidateConsumerGroup, std::string(consumer),
                          std::to_string(min_idle_ms), start[k], "COUNT", std::to_string(want)});
      }
      if (claims.empty()) break;
      Result<std::vector<RespValue>> r = main->run_spread(claims);
      if (!r.ok()) return r.error();
      for (std::size_t i = 0; i < shards.size(); ++i) {
        const uint32_t k = shards[i];
        const RespValue& v = (*r)[i];
        if (v.is_error()) {
          if (starts_with(v.str, "NOGROUP")) {  // no group there: nothing was ever delivered
            done[k] = true;
            continue;
          }
          return reply_error(v, "XAUTOCLAIM");
        }
        const std::vector<RespValue>* e = v.as_array();
        if (e == nullptr || e->size() < 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
          return Error(ErrorCode::kInvalidReply, "redis XAUTOCLAIM: unexpected reply");
        }
        Result<RevalidationBatch> batch = batch_from_entries((*e)[1].elements, k);
        if (!batch.ok()) return batch.error();
        for (RevalidationRequest& req : batch->requests) out.requests.push_back(std::move(req));
        for (std::string& id : batch->malformed_ids) out.malformed_ids.push_back(std::move(id));
        start[k] = std::string(*(*e)[0].as_string());
        if (start[k] == "0-0") done[k] = true;
      }
    }
    return hand_out(consumer, std::move(out), max);
  }

  // XINFO CONSUMERS of every shard's group in one round; a consumer other than `self` idle at
  // least `min_idle_ms` with nothing pending on every shard where it is a member is removed from
  // each (consumer_remove.lua per shard, one round). Listed when every shard removed it (one that
  // got a delivery in between is kept there, and a later pass removes it).
  Result<std::vector<std::string>> remove_idle_consumers_v2(std::string_view self,
                                                            int64_t min_idle_ms) {
    const uint32_t S = keys.shard_count();
    std::vector<std::string> streams;
    std::vector<RedisCommand> infos;
    for (uint32_t k = 0; k < S; ++k) {
      Result<std::string> stream = keys.revalidate_stream(k);
      if (!stream.ok()) return stream.error();
      streams.push_back(*stream);
      infos.push_back({"XINFO", "CONSUMERS", *stream, kRevalidateConsumerGroup});
    }
    Result<std::vector<RespValue>> r = main->run_spread(infos);
    if (!r.ok()) return r.error();
    struct Seen {
      bool removable = true;
      std::vector<uint32_t> shards;
    };
    std::map<std::string, Seen> consumers;
    for (uint32_t k = 0; k < S; ++k) {
      const RespValue& v = (*r)[k];
      if (v.is_error()) {
        // No stream or no group there yet: nobody to remove on that shard.
        if (starts_with(v.str, "NOGROUP") || starts_with(v.str, "ERR no such key")) continue;
        return reply_error(v, "XINFO CONSUMERS");
      }
      const std::vector<RespValue>* list = v.as_array();
      if (list == nullptr) {
        return Error(ErrorCode::kInvalidReply, "redis XINFO CONSUMERS: unexpected reply");
      }
      for (const RespValue& c : *list) {
        const auto [name, pending, idle] = consumer_info(c);
        if (name.empty() || name == self) continue;
        Seen& seen = consumers[name];
        seen.shards.push_back(k);
        if (pending != 0 || idle < min_idle_ms) seen.removable = false;
      }
    }
    std::string_view text = schema_asset("lua/consumer_remove.lua");
    if (text.empty()) {
      return Error(ErrorCode::kInternal, "schema/lua/consumer_remove.lua is not compiled in");
    }
    std::vector<std::string> names;
    std::vector<RedisCommand> removes;
    for (const auto& [name, seen] : consumers) {
      if (!seen.removable) continue;
      for (uint32_t k : seen.shards) {
        names.push_back(name);
        removes.push_back(
            {"EVAL", std::string(text), "1", streams[k], kRevalidateConsumerGroup, name});
      }
    }
    Result<std::vector<RespValue>> done = spread(removes, "consumer_remove");
    if (!done.ok()) return done.error();
    std::map<std::string, bool> everywhere;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const bool one = (*done)[i].as_int() == std::optional<int64_t>(1);
      auto [it, fresh] = everywhere.emplace(names[i], one);
      if (!fresh) it->second = it->second && one;
    }
    std::vector<std::string> removed;
    for (const auto& [name, all] : everywhere) {
      if (all) removed.push_back(name);
    }
    return removed;  // sorted: a std::map's order
  }
};

Result<std::unique_ptr<RedisStore>> RedisStore::create(RedisStoreOptions options) {
  if (options.redis.host.empty()) return invalid("redis store: no host");
  if (options.redis.port <= 0 || options.redis.port > 65535) {
    return invalid("redis store: the port must be 1 to 65535");
  }
  if (options.redis.db < 0) return invalid("redis store: the database must not be negative");
  if (options.redis.cluster) {
    if (options.redis.seeds.empty()) return invalid("redis store: a cluster needs a seed node");
    if (options.redis.db != 0) {
      return invalid("redis store: a Redis Cluster has only database 0 (it refuses SELECT)");
    }
  }
  Result<RedisKeys> keys = keys_for_layout(options.ns, options.key_layout);
  if (!keys.ok()) return keys.error();
  if (options.connect_timeout_ms <= 0 || options.command_timeout_ms <= 0) {
    return invalid("redis store: timeouts must be positive");
  }
  if (options.reconnect_backoff_initial_ms <= 0 ||
      options.reconnect_backoff_max_ms < options.reconnect_backoff_initial_ms) {
    return invalid("redis store: need 0 < reconnect backoff initial <= max");
  }
  if (options.revalidate_stream_max_len <= 0) {
    return invalid("redis store: revalidate_stream_max_len must be positive");
  }
  if (!options.now_ms) return invalid("redis store: no clock");
  std::shared_ptr<RedisTls> tls;
  if (options.redis.tls) {
    Result<std::shared_ptr<RedisTls>> t = RedisTls::create(options.redis.tls_files);
    if (!t.ok()) return t.error();
    tls = std::move(t).value();
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(keys).value(), std::move(tls));
  if (Status s = impl->open_channels(); !s.ok()) return s.error();
  return std::unique_ptr<RedisStore>(new RedisStore(std::move(impl)));
}

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisStore::~RedisStore() = default;

BodyCacheCounts RedisStore::body_cache_counts() const { return impl_->bodies.counts(); }

std::optional<RedisClusterPoolStats> RedisStore::cluster_stats() const {
  return impl_->cluster_stats();
}

std::string RedisStore::metrics_text() const {
  std::optional<RedisClusterPoolStats> stats = impl_->cluster_stats();
  if (!stats) return "";
  std::string out;
  auto counter = [&out](const char* name, const char* help, uint64_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
           " " + std::to_string(value) + "\n";
  };
  counter("quiver_redis_cluster_moved_total",
          "MOVED answers the Redis Cluster gave and the agent followed (a failover, a resharding).",
          stats->moved);
  counter("quiver_redis_cluster_ask_total",
          "ASK answers followed (a slot in the middle of a migration).", stats->ask);
  counter("quiver_redis_cluster_retries_total",
          "Commands sent again after TRYAGAIN, LOADING, CLUSTERDOWN, MASTERDOWN, READONLY or a "
          "node that could not be reached.",
          stats->retries);
  counter("quiver_redis_cluster_split_total",
          "Discovery reads of a connection whose slot was split by a resharding (TRYAGAIN), "
          "read key by key instead.",
          stats->split);
  counter("quiver_redis_cluster_map_refreshes_total", "Slot maps read from the cluster.",
          stats->refreshes);
  counter("quiver_redis_cluster_connections_total", "Connections opened to cluster nodes.",
          stats->connections);
  return out;
}

std::string RedisStore::describe() const {
  return impl_->options.redis.describe() + " namespace " + impl_->keys.ns();
}

Status RedisStore::health() {
  Result<RespValue> r = impl_->one({"PING"}, "PING");
  if (!r.ok()) return r.error();
  if (r->as_string() != std::optional<std::string_view>("PONG")) {
    return Error(ErrorCode::kInvalidReply, "redis PING: unexpected reply " + r->debug_string());
  }
  return Status::Ok();
}

// ---- the namespace record ----------------------------------------------------------------------

Result<NamespaceRecord> RedisStore::read_namespace() {
  // The layout record with it (shared/layout.h): a layout this build does not read makes the
  // store unavailable, and keeps this store's writes refused until a check reads v1 again.
  Result<std::vector<RespValue>> got = impl_->many(
      {{"GET", impl_->keys.layout()}, {"GET", impl_->keys.namespace_record()}}, "GET namespace");
  if (!got.ok()) return got.error();
  if (!((*got)[0].is_nil() || (*got)[0].as_string())) {
    return Error(ErrorCode::kInvalidReply, "redis GET layout: not a string");
  }
  const std::optional<std::string> layout =
      (*got)[0].is_nil() ? std::nullopt : std::optional<std::string>(*(*got)[0].as_string());
  impl_->layout_gate->seen(layout);
  if (quiver::write_layout(layout) != impl_->keys.key_layout()) {
    // A layout it reads but does not write (v2 for a store that writes v1, a copy to v2 under
    // way) is as unavailable to an agent as one it does not know: none of its refreshes could
    // land.
    return unknown_layout_error(impl_->keys.layout(), layout.value_or("(none: v1)"),
                                std::string("store check (this agent writes key layout ") +
                                    key_layout_name(impl_->keys.key_layout()) + ")");
  }
  const RespValue* r = &(*got)[1];
  NamespaceRecord out;
  if (r->is_nil()) return out;
  std::optional<std::string_view> v = r->as_string();
  if (!v) return Error(ErrorCode::kInvalidReply, "redis namespace record: not a string");
  out.value = std::string(*v);
  // `restoring:` or anything else a reader would not serve counts as restoring.
  out.state = starts_with(*v, std::string(kNamespaceReady) + ":") ? NamespaceState::kReady
                                                                  : NamespaceState::kRestoring;
  return out;
}

Status RedisStore::begin_namespace_restore(int64_t now_ms) {
  Result<RespValue> r =
      impl_->one({"SET", impl_->keys.namespace_record(),
                  std::string(kNamespaceRestoring) + ":" + std::to_string(now_ms), "NX"},
                 "SET namespace");
  return r.ok() ? Status::Ok() : Status(r.error());
}

Result<bool> RedisStore::mark_namespace_ready(int64_t now_ms) {
  Result<RespValue> r =
      impl_->one({"SET", impl_->keys.namespace_record(),
                  std::string(kNamespaceReady) + ":" + std::to_string(now_ms), "XX"},
                 "SET namespace");
  if (!r.ok()) return r.error();
  return r->is_ok();  // nil: no record to update (wiped since the restore began)
}

Result<std::vector<bool>> RedisStore::versions_present(
    const std::vector<std::string>& connection_ids, const std::vector<Principal>& members) {
  if (!impl_->v2()) return std::vector<bool>{};  // one slot: the namespace record tells
  std::vector<RedisCommand> exists;
  exists.reserve(connection_ids.size() + members.size());
  for (const std::string& cid : connection_ids) {
    Result<std::string> k = impl_->keys.conn_version(cid);
    if (!k.ok()) return k.error();
    exists.push_back({"EXISTS", std::move(*k)});
  }
  for (const Principal& m : members) {
    Result<std::string> k = impl_->keys.member_version(m);
    if (!k.ok()) return k.error();
    exists.push_back({"EXISTS", std::move(*k)});
  }
  Result<std::vector<RespValue>> r = impl_->spread(exists, "EXISTS version");
  if (!r.ok()) return r.error();
  std::vector<bool> out;
  out.reserve(r->size());
  for (const RespValue& v : *r) {
    if (!v.is_integer()) return Error(ErrorCode::kInvalidReply, "redis EXISTS: not an integer");
    out.push_back(v.integer == 1);
  }
  return out;
}

Status RedisStore::rebuild_grantee_sets(const GrantMap& grants) {
  if (!impl_->v2()) return Status::Ok();  // one slot: lost with everything else, or not at all
  return impl_->rebuild_grantee_sets(grants);
}

Status RedisStore::demote_namespace(int64_t now_ms) {
  Result<RespValue> r =
      impl_->one({"SET", impl_->keys.namespace_record(),
                  std::string(kNamespaceRestoring) + ":" + std::to_string(now_ms)},
                 "SET namespace");
  return r.ok() ? Status::Ok() : Status(r.error());
}

Result<std::optional<int64_t>> RedisStore::store_time_ms() {
  Result<RespValue> r = impl_->one({"TIME"}, "TIME");
  if (!r.ok()) return r.error();
  const std::vector<RespValue>* a = r->as_array();
  int64_t sec = 0, usec = 0;
  if (a == nullptr || a->size() != 2 || !(*a)[0].as_string() || !(*a)[1].as_string() ||
      !parse_i64(std::string(*(*a)[0].as_string()), &sec) ||
      !parse_i64(std::string(*(*a)[1].as_string()), &usec)) {
    return Error(ErrorCode::kInvalidReply, "redis TIME: unexpected reply");
  }
  return std::optional<int64_t>(sec * 1000 + usec / 1000);
}

// ---- key layout v2: the fenced path -------------------------------------------------------------

namespace {

// docs/design.md "What crosses slots, and what it changes": on v2 each script below touches one
// slot (the record's: the connection's for `shared`, the member's for a member), and what v1's
// scripts wrote beside the record (the body, the due entry) is a command of its own, routed by its
// key. The lease scripts need no v2 twin: their keys (lease, fence, manifest) share the record's
// slot in both layouts.

bool writes_v2(const RedisKeys& keys) { return keys.key_layout() == KeyLayout::kV2; }

// Commands that may each be in another slot, routed per command (RedisChannel::run_spread), every
// error reply a failure.
Result<std::vector<RespValue>> run_spread_checked(RedisChannel& channel,
                                                  const std::vector<RedisCommand>& commands,
                                                  std::string_view what) {
  if (commands.empty()) return std::vector<RespValue>{};
  Result<std::vector<RespValue>> r = channel.run_spread(commands);
  if (!r.ok()) return r.error();
  for (const RespValue& v : *r) {
    if (v.is_error()) return reply_error(v, what);
  }
  return r;
}

// One script of the core (lease.h), routed by its keys (each declares one slot's); an invalid
// argument fails here.
Result<RespValue> spread_script(RedisChannel& channel, const Result<RedisCommand>& command,
                                std::string_view what) {
  if (!command.ok()) return command.error();
  Result<std::vector<RespValue>> r = run_spread_checked(channel, {*command}, what);
  if (!r.ok()) return r.error();
  return std::move((*r)[0]);
}

// MULTI, `commands`, EXEC to the node of `key`'s slot (every command in that slot): their replies.
Result<std::vector<RespValue>> transaction_at(RedisChannel& channel, const std::string& key,
                                              const std::vector<RedisCommand>& commands,
                                              std::string_view what) {
  std::vector<RedisCommand> all;
  all.reserve(commands.size() + 2);
  all.push_back({"MULTI"});
  all.insert(all.end(), commands.begin(), commands.end());
  all.push_back({"EXEC"});
  Result<std::vector<RespValue>> r = channel.run_at(key, all);
  if (!r.ok()) return r.error();
  for (const RespValue& v : *r) {
    if (v.is_error()) return reply_error(v, what);
  }
  const RespValue& exec = r->back();
  if (!exec.is_array() || exec.elements.size() != commands.size()) {
    return Error(ErrorCode::kInvalidReply, "redis " + std::string(what) + ": EXEC aborted");
  }
  for (const RespValue& v : exec.elements) {
    if (v.is_error()) return reply_error(v, what);
  }
  return exec.elements;
}

// The refresh-due index that holds (cid, *)'s entries: the connection's shard's on v2 (one key,
// shard 0, on v1).
Result<std::string> due_key_of(const RedisKeys& keys, std::string_view cid) {
  Result<uint32_t> shard = keys.connection_shard(cid);
  if (!shard.ok()) return shard.error();
  return keys.due(*shard);
}

// The keys of a v2 fenced script: the record's slot only, so a member's write names no connection
// record (its config_hash is checked by readers: manifest_commit_v2.lua).
LeaseKeys v2_fenced_keys(LeaseKeys k, const Principal& principal) {
  if (!principal.is_shared()) k.connection.clear();
  return k;
}

// After a v2 fenced write went through: its due entry, scored as v1's script scores it, on the
// connection's shard. A write whose entry could not be scored is reported as failed, saying that
// its data is written: the refresh that sent it is retried, and that retry scores it.
Result<FencedWriteResult> score_due_v2(RedisChannel& main, const RedisKeys& keys,
                                       std::string_view cid, const LeaseKeys& k,
                                       const FencedWriteOptions& options,
                                       Result<FencedWriteResult> written) {
  if (!written.ok() || !written->ok()) return written;
  Result<std::string> due = due_key_of(keys, cid);
  if (!due.ok()) return due.error();
  Result<std::vector<RespValue>> r = run_spread_checked(
      main, {{"ZADD", *due, std::to_string(options.due_at_ms), k.due_member}}, "ZADD due");
  if (!r.ok()) {
    return Error(r.error().code,
                 "written, but its refresh-due entry was not: " + r.error().message);
  }
  return written;
}

Result<FencedWriteResult> commit_manifest_v2(RedisChannel& main, const RedisKeys& keys,
                                             std::string_view cid, const Principal& principal,
                                             const LeaseKeys& lease_keys, const Lease& lease,
                                             const ManifestWrite& write,
                                             const FencedWriteOptions& options) {
  const LeaseKeys k = v2_fenced_keys(lease_keys, principal);
  // Every argument checked before the first write: a commit the builder refuses stores no body.
  Result<RedisCommand> commit = commit_manifest_v2_command(k, lease, write, options);
  if (!commit.ok()) return commit.error();
  Result<std::string> body = keys.body(manifest_body_digest(write.manifest));
  if (!body.ok()) return body.error();
  // The body first, by its SHA-256 alone (need_body: as v1, the bytes go only when Redis lacks
  // them), so the commit below never names a body that is not there.
  for (CommitBody send : {CommitBody::kIfStored, CommitBody::kSend}) {
    Result<RedisCommand> store = store_body_command(*body, write, options, send);
    if (!store.ok()) return store.error();
    Result<std::vector<RespValue>> r = run_spread_checked(main, {*store}, "body_store");
    if (!r.ok()) return r.error();
    Result<bool> stored = parse_store_body_reply((*r)[0]);
    if (!stored.ok()) return stored.error();
    if (*stored) break;
    if (send == CommitBody::kSend) {
      return Error(ErrorCode::kInvalidReply, "body_store.lua: need_body with the body sent");
    }
  }
  Result<std::vector<RespValue>> r = run_spread_checked(main, {*commit}, "manifest_commit");
  if (!r.ok()) return r.error();
  return score_due_v2(main, keys, cid, k, options, parse_commit_reply((*r)[0]));
}

Result<FencedWriteResult> record_failure_v2(RedisChannel& main, const RedisKeys& keys,
                                            std::string_view cid, const Principal& principal,
                                            const LeaseKeys& lease_keys, const Lease& lease,
                                            const RefreshFailure& failure,
                                            const FencedWriteOptions& options) {
  const LeaseKeys k = v2_fenced_keys(lease_keys, principal);
  Result<RedisCommand> fail = record_failure_v2_command(k, lease, failure, options);
  if (!fail.ok()) return fail.error();
  Result<std::vector<RespValue>> r = run_spread_checked(main, {*fail}, "manifest_fail");
  if (!r.ok()) return r.error();
  return score_due_v2(main, keys, cid, k, options, parse_failure_reply((*r)[0]));
}

}  // namespace

// ---- leases and fenced writes ------------------------------------------------------------------

Result<AcquireResult> RedisStore::acquire_lease(std::string_view cid, const Principal& principal,
                                                std::string_view token, int64_t lease_ms) {
  Result<LeaseKeys> k = impl_->lease_keys(cid, principal);
  if (!k.ok()) return k.error();
  // The same script in both layouts; on v2 it goes to the record's slot.
  Result<RespValue> r =
      writes_v2(impl_->keys)
          ? spread_script(*impl_->main, acquire_lease_command(*k, token, lease_ms), "lease_acquire")
          : impl_->script(acquire_lease_command(*k, token, lease_ms), "lease_acquire");
  if (!r.ok()) return r.error();
  return parse_acquire_reply(*r, token);
}

Result<LeaseOutcome> RedisStore::renew_lease(std::string_view cid, const Principal& principal,
                                             const Lease& lease, int64_t lease_ms) {
  Result<LeaseKeys> k = impl_->lease_keys(cid, principal);
  if (!k.ok()) return k.error();
  // The same script in both layouts; on v2 it goes to the record's slot.
  Result<RespValue> r =
      writes_v2(impl_->keys)
          ? spread_script(*impl_->main, renew_lease_command(*k, lease, lease_ms), "lease_renew")
          : impl_->script(renew_lease_command(*k, lease, lease_ms), "lease_renew");
  if (!r.ok()) return r.error();
  return parse_renew_reply(*r);
}

Result<LeaseOutcome> RedisStore::release_lease(std::string_view cid, const Principal& principal,
                                               const Lease& lease) {
  Result<LeaseKeys> k = impl_->lease_keys(cid, principal);
  if (!k.ok()) return k.error();
  // The same script in both layouts; on v2 it goes to the record's slot.
  Result<RespValue> r =
      writes_v2(impl_->keys)
          ? spread_script(*impl_->main, release_lease_command(*k, lease), "lease_release")
          : impl_->script(release_lease_command(*k, lease), "lease_release");
  if (!r.ok()) return r.error();
  return parse_release_reply(*r);
}

Result<FencedWriteResult> RedisStore::commit_manifest(std::string_view cid,
                                                      const Principal& principal,
                                                      const Lease& lease,
                                                      const ManifestWrite& write,
                                                      const FencedWriteOptions& options) {
  Result<LeaseKeys> k = impl_->lease_keys(cid, principal);
  if (!k.ok()) return k.error();
  if (writes_v2(impl_->keys)) {
    return commit_manifest_v2(*impl_->main, impl_->keys, cid, principal, *k, lease, write, options);
  }
  Result<std::string> body = impl_->keys.body(manifest_body_digest(write.manifest));
  if (!body.ok()) return body.error();
  k->body = std::move(*body);
  // The SHA-256 first: the usual commit lists content Redis holds already (a refresh that found
  // nothing changed, or content another principal listed), and then the body's bytes stay here.
  // New content (or a body key evicted meanwhile) costs one more round trip, with the bytes; the
  // script's fenced checks run again in it (manifest_commit.lua).
  Result<RespValue> r = impl_->script(
      commit_manifest_command(*k, lease, write, options, CommitBody::kIfStored), "manifest_commit");
  if (!r.ok()) return r.error();
  Result<std::optional<FencedWriteResult>> stored = parse_commit_if_stored_reply(*r);
  if (!stored.ok()) return stored.error();
  if (stored->has_value()) return **stored;
  r = impl_->script(commit_manifest_command(*k, lease, write, options, CommitBody::kSend),
                    "manifest_commit");
  if (!r.ok()) return r.error();
  return parse_commit_reply(*r);
}

Result<FencedWriteResult> RedisStore::record_failure(std::string_view cid,
                                                     const Principal& principal, const Lease& lease,
                                                     const RefreshFailure& failure,
                                                     const FencedWriteOptions& options) {
  Result<LeaseKeys> k = impl_->lease_keys(cid, principal);
  if (!k.ok()) return k.error();
  if (writes_v2(impl_->keys)) {
    return record_failure_v2(*impl_->main, impl_->keys, cid, principal, *k, lease, failure,
                             options);
  }
  Result<RespValue> r =
      impl_->script(record_failure_command(*k, lease, failure, options), "manifest_fail");
  if (!r.ok()) return r.error();
  return parse_failure_reply(*r);
}

// ---- manifest reads ----------------------------------------------------------------------------

Result<std::optional<ManifestMeta>> RedisStore::read_manifest_meta(std::string_view cid,
                                                                   const Principal& principal) {
  Result<std::string> key = impl_->keys.manifest(cid, principal);
  if (!key.ok()) return key.error();
  Result<MarkKeys> marks = mark_keys(impl_->keys, cid, principal);
  if (!marks.ok()) return marks.error();
  std::vector<RedisCommand> reads;
  append_meta_reads(reads, *key, *marks);
  // v2: the connection's mark is in the connection's slot, the rest in the record's.
  Result<std::vector<RespValue>> r = writes_v2(impl_->keys)
                                         ? run_spread_checked(*impl_->main, reads, "HMGET")
                                         : impl_->many(reads, "HMGET");
  if (!r.ok()) return r.error();
  Result<MetaFields> read = meta_reads_reply(*r, 0);
  if (!read.ok()) return read.error();
  if (read->empty()) return std::optional<ManifestMeta>();
  Result<ManifestMeta> meta = meta_from_fields(cid, principal, read->fields, read->has_data, *key);
  if (!meta.ok()) return meta.error();
  return std::optional<ManifestMeta>(std::move(meta).value());
}

Result<std::optional<StoredManifest>> RedisStore::read_manifest(std::string_view cid,
                                                                const Principal& principal) {
  Result<std::string> key = impl_->keys.manifest(cid, principal);
  if (!key.ok()) return key.error();
  Result<MarkKeys> marks = mark_keys(impl_->keys, cid, principal);
  if (!marks.ok()) return marks.error();
  const std::vector<RedisCommand> reads = {
      {"HGETALL", *key}, {"GET", marks->own}, {"GET", marks->connection}};
  Result<std::vector<RespValue>> r = writes_v2(impl_->keys)
                                         ? run_spread_checked(*impl_->main, reads, "HGETALL")
                                         : impl_->many(reads, "HGETALL");
  if (!r.ok()) return r.error();
  HashFields fields = field_map((*r)[0]);
  if (fields.empty()) return std::optional<StoredManifest>();
  if (std::optional<std::string> at =
          effective_invalidation((*r)[1].as_string(), (*r)[2].as_string())) {
    fields[redis_field::kInvalidatedAt] = std::move(*at);
  }
  std::string body;
  if (auto it = fields.find(redis_field::kManifest); it != fields.end()) {
    body = std::move(it->second);  // inline: written before bodies were stored apart
    fields.erase(it);
  }
  const bool has_data = !body.empty() || fields.count(redis_field::kBody) != 0;
  Result<ManifestMeta> meta = meta_from_fields(cid, principal, fields, has_data, *key);
  if (!meta.ok()) return meta.error();
  if (!meta->body_digest.empty()) {
    // Stored apart, once per content, and kept here by content. Absent (evicted, lost, or past
    // its retention): the meta keeps naming it and the text stays empty, which readers show as a
    // store failure.
    Result<std::optional<std::string>> read =
        read_body(impl_->bodies, impl_->keys, meta->body_digest,
                  writes_v2(impl_->keys) ? impl_->body_fetch_spread() : impl_->body_fetch());
    if (!read.ok()) return read.error();
    if (*read) body = std::move(**read);
  }
  StoredManifest out{std::move(meta).value(), std::move(body)};
  return std::optional<StoredManifest>(std::move(out));
}

namespace {

// One SCAN step's reply: the next cursor, and the keys not seen before appended to `found`.
Result<std::string> take_scan_page(const RespValue& reply, std::vector<std::string>& found,
                                   std::set<std::string>& seen) {
  const std::vector<RespValue>* e = reply.as_array();
  if (e == nullptr || e->size() != 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
    return Error(ErrorCode::kInvalidReply, "redis SCAN: unexpected reply");
  }
  for (const RespValue& k : (*e)[1].elements) {
    std::optional<std::string_view> s = k.as_string();
    if (s && seen.emplace(*s).second) found.emplace_back(*s);
  }
  return std::string(*(*e)[0].as_string());
}

}  // namespace

Result<ManifestPage> RedisStore::list_manifest_metas(std::string_view cursor, std::size_t batch) {
  if (batch == 0) return invalid("list_manifest_metas: batch must be at least 1");
  const bool v2 = writes_v2(impl_->keys);
  // v1: SCAN's cursor, on the namespace's node. v2 (its keys on every master):
  // `<slot>.<SCAN cursor>`, the master walked named by the lowest slot it serves
  // (RedisChannel::walk_slots), masters in ascending order. A cluster resharded or failed over
  // mid-walk is walked as SCAN walks a rehashed table: a key may be listed twice or, if it moved
  // to a master already walked, missed by this walk (maintenance does not depend on it: it reads
  // the due index).
  int64_t slot = 0, scan_cursor = 0;
  if (!cursor.empty()) {
    bool ok = false;
    if (v2) {
      std::size_t dot = cursor.find('.');
      ok = dot != std::string_view::npos &&
           parse_int(cursor.substr(0, dot), 0, kClusterSlotCount - 1, &slot) &&
           parse_int(cursor.substr(dot + 1), 0, INT64_MAX, &scan_cursor);
    } else {
      ok = parse_int(cursor, 0, INT64_MAX, &scan_cursor);
    }
    if (!ok) return invalid("list_manifest_metas: malformed cursor");
  }
  std::vector<uint16_t> walk{0};
  if (v2) {
    Result<std::vector<uint16_t>> slots = impl_->main->walk_slots();
    if (!slots.ok()) return slots.error();
    walk = std::move(slots).value();
    if (walk.empty()) return Error(ErrorCode::kStoreUnavailable, "redis: no master serves slots");
    if (cursor.empty()) slot = walk.front();
  }
  std::string next = std::to_string(scan_cursor);
  std::vector<std::string> found;
  std::set<std::string> seen;
  bool done = false;
  const RedisCommand scan_tail = {"MATCH", impl_->keys.manifest_match_pattern(), "COUNT",
                                  std::to_string(std::max<std::size_t>(batch, 100))};
  do {
    RedisCommand scan = {"SCAN", next};
    scan.insert(scan.end(), scan_tail.begin(), scan_tail.end());
    Result<std::vector<RespValue>> r =
        v2 ? impl_->main->run_at_slot(static_cast<uint16_t>(slot), {scan})
           : impl_->main->run({scan});
    if (!r.ok()) return r.error();
    if ((*r)[0].is_error()) return reply_error((*r)[0], "SCAN");
    Result<std::string> after = take_scan_page((*r)[0], found, seen);
    if (!after.ok()) return after.error();
    next = std::move(after).value();
    if (next == "0") {
      // This node is walked: on v2, the next master (the lowest slot past this one's).
      auto it = std::upper_bound(walk.begin(), walk.end(), static_cast<uint16_t>(slot));
      if (!v2 || it == walk.end()) {
        done = true;
      } else {
        slot = *it;
      }
    }
  } while (found.size() < batch && !done);

  ManifestPage page;
  if (!done) page.next_cursor = v2 ? std::to_string(slot) + "." + next : next;
  std::vector<RedisCommand> commands;
  std::vector<ParsedKey> parsed;
  std::vector<std::string> keys;
  for (const std::string& key : found) {
    Result<ParsedKey> p = impl_->keys.parse_manifest_key(key);
    if (!p.ok()) {
      page.unreadable.push_back(key + ": " + p.error().message);
      continue;
    }
    append_meta_reads(commands, key, *mark_keys(impl_->keys, p->connection_id, *p->principal));
    parsed.push_back(std::move(p).value());
    keys.push_back(key);
  }
  if (commands.empty()) return page;
  // v2: each record's reads are on its slot, the connection's mark on the connection's.
  Result<std::vector<RespValue>> r =
      v2 ? impl_->main->run_spread(commands) : impl_->main->run(commands);
  if (!r.ok()) return r.error();
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    Result<MetaFields> read = meta_reads_reply(*r, kMetaReadCommands * i);
    if (!read.ok()) {
      page.unreadable.push_back(keys[i] + ": " + read.error().message);
      continue;
    }
    if (read->empty()) continue;  // deleted since the SCAN
    Result<ManifestMeta> meta = meta_from_fields(parsed[i].connection_id, *parsed[i].principal,
                                                 read->fields, read->has_data, keys[i]);
    if (!meta.ok()) {
      page.unreadable.push_back(meta.error().message);
      continue;
    }
    page.metas.push_back(std::move(meta).value());
  }
  return page;
}

// ---- the refresh-due index ---------------------------------------------------------------------

namespace {

// A score of the due index as Redis answers it: writers score integral ms, which Redis prints
// as integers.
bool parse_score(std::string_view text, int64_t* out) { return parse_i64(text, out); }

// A member whose grants go from `have` to `want`: each connection it lost has its entry (if
// any) due now, so the next maintenance pass drops that manifest (the principal is no longer
// cached there). ZADD XX: a key never listed gets no entry. nullopt: nothing was revoked.
std::optional<RedisCommand> due_now_command(const RedisKeys& keys, const Principal& member,
                                            const std::set<std::string>& have,
                                            const std::set<std::string>& want) {
  RedisCommand due = {"ZADD", keys.due(), "XX"};
  for (const std::string& cid : have) {
    if (want.count(cid) != 0) continue;
    Result<std::string> m = due_member(cid, member);
    if (!m.ok()) continue;  // not an id any agent wrote
    due.push_back("0");
    due.push_back(std::move(m).value());
  }
  if (due.size() == 3) return std::nullopt;
  return due;
}

// Where a member's grant change is counted, inside that change's transaction: the namespace
// epoch (readers' L1 caches, the notifier) and the member's version (conditional reads). The one
// place a grant write bumps anything.
void bump_for_member_grants(const RedisKeys& keys, const Principal& member,
                            std::vector<RedisCommand>& transaction) {
  transaction.push_back({"INCR", keys.epoch()});
  transaction.push_back({"INCR", *keys.member_version(member)});
}

MemberGrantWrite member_grant_write(const RedisKeys& keys, const Principal& member,
                                    const std::set<std::string>& have,
                                    const std::set<std::string>& want) {
  MemberGrantWrite w;
  const std::string grants_key = *keys.grants(member);
  w.transaction.push_back({"DEL", grants_key});
  if (!want.empty()) {
    RedisCommand sadd = {"SADD", grants_key};
    sadd.insert(sadd.end(), want.begin(), want.end());
    w.transaction.push_back(std::move(sadd));
    w.transaction.push_back({"SADD", keys.grant_members(), member.str()});
  } else {
    w.transaction.push_back({"SREM", keys.grant_members(), member.str()});
  }
  if (std::optional<RedisCommand> due = due_now_command(keys, member, have, want)) {
    w.transaction.push_back(std::move(*due));
  }
  RedisCommand pending = {"SADD", keys.grantees_pending()};
  RedisCommand settled = {"SREM", keys.grantees_pending()};
  auto touch = [&](const std::string& cid, const char* op) {
    w.grantees.push_back({op, *keys.grantees(cid), member.str()});
    std::string pair = *due_member(cid, member);
    pending.push_back(pair);
    settled.push_back(std::move(pair));
  };
  for (const std::string& cid : have) {
    if (want.count(cid) == 0) touch(cid, "SREM");
  }
  for (const std::string& cid : want) {
    if (have.count(cid) == 0) touch(cid, "SADD");
  }
  if (pending.size() > 2) w.transaction.push_back(std::move(pending));
  bump_for_member_grants(keys, member, w.transaction);
  if (settled.size() > 2) w.grantees.push_back(std::move(settled));
  return w;
}

// schema/lua/due_settle.lua for one settlement.
Result<RedisCommand> due_settle_command(const RedisKeys& keys, const DueSettlement& settle) {
  Result<std::string> member = due_member(settle.connection_id, settle.principal);
  if (!member.ok()) return member.error();
  if (Status s = validate_due_at(settle.due_at_ms.value_or(0)); !s.ok()) return s.error();
  std::string_view text = schema_asset("lua/due_settle.lua");
  if (text.empty())
    return Error(ErrorCode::kInternal, "schema/lua/due_settle.lua is not compiled in");
  if (writes_v2(keys)) {
    // The connection's shard's index alone: the record is in another slot, read absent by the
    // caller before a forget (settle_due).
    Result<std::string> due = due_key_of(keys, settle.connection_id);
    if (!due.ok()) return due.error();
    return RedisCommand{"EVAL",
                        std::string(text),
                        "1",
                        *due,
                        *member,
                        std::to_string(settle.seen_due_at_ms),
                        settle.due_at_ms ? std::to_string(*settle.due_at_ms) : std::string()};
  }
  return RedisCommand{"EVAL",
                      std::string(text),
                      "2",
                      keys.due(),
                      *keys.manifest(settle.connection_id, settle.principal),
                      *member,
                      std::to_string(settle.seen_due_at_ms),
                      settle.due_at_ms ? std::to_string(*settle.due_at_ms) : std::string()};
}

}  // namespace

namespace {

// One member a ZRANGEBYSCORE of a due index answered, with its score, as Redis answered them, and
// that index's key.
struct ListedDue {
  std::optional<std::string_view> member;
  std::optional<std::string_view> score;
  const std::string* due_key = nullptr;
};

// A page of the due index from the members listed: each entry's metadata read (one pipeline, or
// one round routed per command on v2, `run`), and a member no writer makes taken out of its index
// (it would come back on every page).
Result<DuePage> due_page(
    const RedisKeys& keys, const std::vector<ListedDue>& listed,
    const std::function<Result<std::vector<RespValue>>(const std::vector<RedisCommand>&)>& run) {
  DuePage page;
  page.listed = listed.size();
  std::vector<RedisCommand> commands;
  std::vector<std::string> unindex_keys;  // in the order first seen: one ZREM per index
  std::map<std::string, RedisCommand> unindex;
  for (const ListedDue& l : listed) {
    Result<DueMember> parsed =
        l.member ? parse_due_member(*l.member) : Result<DueMember>(invalid("not a string"));
    DueEntry entry;
    if (parsed.ok() && l.score && parse_score(*l.score, &entry.due_at_ms)) {
      entry.connection_id = std::move(parsed->connection_id);
      entry.principal = std::move(parsed->principal);
      Result<MarkKeys> marks = mark_keys(keys, entry.connection_id, entry.principal);
      if (marks.ok()) {
        append_meta_reads(commands, *keys.manifest(entry.connection_id, entry.principal), *marks);
        page.entries.push_back(std::move(entry));
        continue;
      }
      parsed = marks.error();
    }
    std::string what = l.member ? std::string(*l.member) : std::string("(not a string)");
    page.unreadable.push_back(
        "due index member `" + what +
        "`: " + (parsed.ok() ? std::string("score is not a number") : parsed.error().message));
    if (!l.member) continue;
    auto [it, added] = unindex.try_emplace(*l.due_key, RedisCommand{"ZREM", *l.due_key});
    if (added) unindex_keys.push_back(*l.due_key);
    it->second.push_back(std::string(*l.member));
  }
  for (const std::string& k : unindex_keys) commands.push_back(std::move(unindex[k]));
  if (commands.empty()) return page;
  Result<std::vector<RespValue>> replies = run(commands);
  if (!replies.ok()) return replies.error();
  for (std::size_t i = 0; i < page.entries.size(); ++i) {
    DueEntry& entry = page.entries[i];
    const std::string key = *keys.manifest(entry.connection_id, entry.principal);
    Result<MetaFields> read = meta_reads_reply(*replies, kMetaReadCommands * i);
    if (!read.ok()) {
      entry.unreadable = key + ": " + read.error().message;
      continue;
    }
    if (read->empty()) continue;  // the record is gone: meta stays nullopt
    Result<ManifestMeta> meta =
        meta_from_fields(entry.connection_id, entry.principal, read->fields, read->has_data, key);
    if (!meta.ok()) {
      entry.unreadable = meta.error().message;
      continue;
    }
    entry.meta = std::move(meta).value();
  }
  return page;
}

// ZRANGEBYSCORE ... WITHSCORES's flat [member, score, ...] of `due_key`, appended to `out`.
Status append_listed(const RespValue& reply, const std::string& due_key,
                     std::vector<ListedDue>& out) {
  const std::vector<RespValue>* e = reply.as_array();
  if (e == nullptr || e->size() % 2 != 0) {
    return Error(ErrorCode::kInvalidReply, "redis ZRANGEBYSCORE due: unexpected reply");
  }
  for (std::size_t i = 0; i < e->size(); i += 2) {
    out.push_back({(*e)[i].as_string(), (*e)[i + 1].as_string(), &due_key});
  }
  return Status::Ok();
}

// The due entries of every shard (key layout v2), soonest first, `offset` skipped, at most
// `batch`: each shard's first offset + batch due entries (one ZRANGEBYSCORE per shard, one round
// routed per node), merged by (score, member) as one index would order them. A pass's offset only
// counts the entries it left due (docs/design.md "Maintenance in O(work due)"), so each page costs
// S ranges of about the work due.
Result<DuePage> list_due_spread(RedisChannel& main, const RedisKeys& keys, int64_t now_ms,
                                std::size_t offset, std::size_t batch) {
  std::vector<std::string> due_keys;
  std::vector<RedisCommand> ranges;
  for (uint32_t shard = 0; shard < keys.shard_count(); ++shard) {
    due_keys.push_back(*keys.due(shard));
    ranges.push_back({"ZRANGEBYSCORE", due_keys.back(), "-inf", std::to_string(now_ms),
                      "WITHSCORES", "LIMIT", "0", std::to_string(offset + batch)});
  }
  Result<std::vector<RespValue>> r = run_spread_checked(main, ranges, "ZRANGEBYSCORE");
  if (!r.ok()) return r.error();
  std::vector<ListedDue> all;
  for (std::size_t i = 0; i < r->size(); ++i) {
    if (Status s = append_listed((*r)[i], due_keys[i], all); !s.ok()) return s.error();
  }
  // A score that is no integer (no writer makes one) sorts as Redis read it, as a double.
  auto order = [](const ListedDue& l) {
    return l.score ? std::strtod(std::string(*l.score).c_str(), nullptr) : 0.0;
  };
  std::stable_sort(all.begin(), all.end(), [&](const ListedDue& a, const ListedDue& b) {
    const double sa = order(a);
    const double sb = order(b);
    if (sa != sb) return sa < sb;
    return a.member.value_or("") < b.member.value_or("");
  });
  const std::size_t from = std::min(offset, all.size());
  const std::size_t to = std::min(offset + batch, all.size());
  const std::vector<ListedDue> listed(all.begin() + static_cast<std::ptrdiff_t>(from),
                                      all.begin() + static_cast<std::ptrdiff_t>(to));
  return due_page(keys, listed, [&](const std::vector<RedisCommand>& commands) {
    return main.run_spread(commands);
  });
}

}  // namespace

Result<DuePage> RedisStore::list_due(int64_t now_ms, std::size_t offset, std::size_t batch) {
  if (batch == 0) return invalid("list_due: batch must be at least 1");
  RedisKeys& keys = impl_->keys;
  if (writes_v2(keys)) return list_due_spread(*impl_->main, keys, now_ms, offset, batch);
  Result<RespValue> r =
      impl_->one({"ZRANGEBYSCORE", keys.due(), "-inf", std::to_string(now_ms), "WITHSCORES",
                  "LIMIT", std::to_string(offset), std::to_string(batch)},
                 "ZRANGEBYSCORE");
  if (!r.ok()) return r.error();
  const std::string due = keys.due();
  std::vector<ListedDue> listed;
  if (Status s = append_listed(*r, due, listed); !s.ok()) return s.error();
  return due_page(keys, listed, [&](const std::vector<RedisCommand>& commands) {
    return impl_->main->run(commands);
  });
}

Result<std::vector<bool>> RedisStore::settle_due(const std::vector<DueSettlement>& settlements) {
  if (writes_v2(impl_->keys)) {
    // A forget needs its record absent, read first (another slot than the index); one that
    // exists again is left, as due_settle.lua leaves it on v1.
    std::vector<RedisCommand> exists;
    for (const DueSettlement& settle : settlements) {
      if (settle.due_at_ms) continue;
      Result<std::string> manifest = impl_->keys.manifest(settle.connection_id, settle.principal);
      if (!manifest.ok()) return manifest.error();
      exists.push_back({"EXISTS", *manifest});
    }
    Result<std::vector<RespValue>> found = run_spread_checked(*impl_->main, exists, "EXISTS");
    if (!found.ok()) return found.error();
    std::vector<RedisCommand> commands;
    std::vector<std::size_t> sent;  // settlements[sent[i]] is commands[i]
    std::size_t forget = 0;
    for (std::size_t i = 0; i < settlements.size(); ++i) {
      if (!settlements[i].due_at_ms && (*found)[forget++].as_int().value_or(1) != 0) continue;
      Result<RedisCommand> c = due_settle_command(impl_->keys, settlements[i]);
      if (!c.ok()) return c.error();
      commands.push_back(std::move(c).value());
      sent.push_back(i);
    }
    Result<std::vector<RespValue>> r = run_spread_checked(*impl_->main, commands, "due_settle");
    if (!r.ok()) return r.error();
    std::vector<bool> out(settlements.size(), false);
    for (std::size_t i = 0; i < sent.size(); ++i) out[sent[i]] = (*r)[i].as_int().value_or(0) == 1;
    return out;
  }
  std::vector<RedisCommand> commands;
  for (const DueSettlement& settle : settlements) {
    Result<RedisCommand> c = due_settle_command(impl_->keys, settle);
    if (!c.ok()) return c.error();
    commands.push_back(std::move(c).value());
  }
  Result<std::vector<RespValue>> r = impl_->many(commands, "due_settle");
  if (!r.ok()) return r.error();
  std::vector<bool> out;
  for (const RespValue& v : *r) out.push_back(v.as_int().value_or(0) == 1);
  return out;
}

Result<std::vector<bool>> RedisStore::has_due_entries(const std::vector<DueKey>& keys) {
  if (keys.empty()) return std::vector<bool>{};
  if (writes_v2(impl_->keys)) {
    // One ZMSCORE per shard the keys' connections are in, one round routed per node.
    std::map<std::string, std::pair<RedisCommand, std::vector<std::size_t>>> per_index;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      Result<std::string> member = due_member(keys[i].connection_id, keys[i].principal);
      if (!member.ok()) return member.error();
      Result<std::string> due = due_key_of(impl_->keys, keys[i].connection_id);
      if (!due.ok()) return due.error();
      auto [it, added] = per_index.try_emplace(*due);
      if (added) it->second.first = {"ZMSCORE", *due};
      it->second.first.push_back(std::move(member).value());
      it->second.second.push_back(i);
    }
    std::vector<RedisCommand> commands;
    for (const auto& [due, one] : per_index) commands.push_back(one.first);
    Result<std::vector<RespValue>> r = run_spread_checked(*impl_->main, commands, "ZMSCORE");
    if (!r.ok()) return r.error();
    std::vector<bool> out(keys.size(), false);
    std::size_t at = 0;
    for (const auto& [due, one] : per_index) {
      const std::vector<RespValue>* e = (*r)[at++].as_array();
      if (e == nullptr || e->size() != one.second.size()) {
        return Error(ErrorCode::kInvalidReply, "redis ZMSCORE due: unexpected reply");
      }
      for (std::size_t j = 0; j < e->size(); ++j) out[one.second[j]] = !(*e)[j].is_nil();
    }
    return out;
  }
  RedisCommand zmscore = {"ZMSCORE", impl_->keys.due()};
  for (const DueKey& k : keys) {
    Result<std::string> member = due_member(k.connection_id, k.principal);
    if (!member.ok()) return member.error();
    zmscore.push_back(std::move(member).value());
  }
  Result<RespValue> r = impl_->one(zmscore, "ZMSCORE");
  if (!r.ok()) return r.error();
  const std::vector<RespValue>* e = r->as_array();
  if (e == nullptr || e->size() != keys.size()) {
    return Error(ErrorCode::kInvalidReply, "redis ZMSCORE due: unexpected reply");
  }
  std::vector<bool> out;
  for (const RespValue& v : *e) out.push_back(!v.is_nil());
  return out;
}

Result<DueBackfill> RedisStore::backfill_due_index(std::size_t max_keys) {
  RedisKeys& keys = impl_->keys;
  if (writes_v2(keys)) {
    // A v2 namespace is filled with its index built (the copy splits v1's into the shards).
    DueBackfill built;
    built.done = true;
    return built;
  }
  Result<RespValue> marker = impl_->one({"GET", keys.due_backfill()}, "GET due-backfill");
  if (!marker.ok()) return marker.error();
  DueBackfill out;
  std::string cursor = "0";
  if (std::optional<std::string_view> v = marker->as_string()) {
    if (starts_with(*v, "done:")) {
      out.done = true;
      return out;
    }
    int64_t ignored = 0;
    if (starts_with(*v, "scan:") && parse_int(v->substr(5), 0, INT64_MAX, &ignored)) {
      cursor = std::string(v->substr(5));
    }  // anything else: start again (the ZADDs below are idempotent)
  }
  // Paced by the keys walked: each SCAN page walks about kPage keys of the namespace.
  constexpr std::size_t kPage = 1000;
  const std::size_t pages = std::max<std::size_t>(1, max_keys / kPage);
  std::size_t walked = 0;
  do {
    ++walked;
    Result<RespValue> r = impl_->one(
        {"SCAN", cursor, "MATCH", keys.manifest_match_pattern(), "COUNT", std::to_string(kPage)},
        "SCAN");
    if (!r.ok()) return r.error();
    const std::vector<RespValue>* e = r->as_array();
    if (e == nullptr || e->size() != 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
      return Error(ErrorCode::kInvalidReply, "redis SCAN: unexpected reply");
    }
    cursor = std::string(*(*e)[0].as_string());
    // NX: an entry a write scored (or an earlier backfill added) keeps its score.
    RedisCommand zadd = {"ZADD", keys.due(), "NX"};
    for (const RespValue& k : (*e)[1].elements) {
      std::optional<std::string_view> key = k.as_string();
      if (!key) continue;
      ++out.scanned;
      Result<ParsedKey> p = keys.parse_manifest_key(*key);
      if (!p.ok()) continue;  // maintenance never read it either
      zadd.push_back("0");
      zadd.push_back(*due_member(p->connection_id, *p->principal));
    }
    std::vector<RedisCommand> writes;
    if (zadd.size() > 3) writes.push_back(zadd);
    const bool finished = cursor == "0";
    writes.push_back(
        {"SET", keys.due_backfill(),
         finished ? "done:" + std::to_string(impl_->options.now_ms()) : "scan:" + cursor});
    Result<std::vector<RespValue>> w = impl_->many(writes, "ZADD due");
    if (!w.ok()) return w.error();
    if (zadd.size() > 3) out.added += static_cast<std::size_t>((*w)[0].as_int().value_or(0));
    out.done = finished;
  } while (!out.done && walked < pages);
  return out;
}

// ---- connection records, grants, overlays, epoch -----------------------------------------------

Result<ConnectionSync> RedisStore::sync_connections(const std::vector<ConnectionRecord>& records) {
  RedisKeys& keys = impl_->keys;
  std::map<std::string, const ConnectionRecord*> wanted;
  for (const ConnectionRecord& r : records) {
    if (Status s = validate_connection_record(r); !s.ok()) return s.error();
    if (!wanted.emplace(r.id, &r).second) {
      return invalid("sync_connections: connection '" + r.id + "' appears twice");
    }
  }
  if (impl_->v2()) return impl_->sync_connections_v2(wanted);
  Result<RespValue> members = impl_->one({"SMEMBERS", keys.conns()}, "SMEMBERS");
  if (!members.ok()) return members.error();
  std::set<std::string> listed = string_set(*members);
  std::vector<std::string> ids;  // listed or wanted, each once
  std::vector<RedisCommand> writes;
  for (const std::string& id : listed) {
    if (validate_connection_id(id).ok()) {
      ids.push_back(id);
    } else {
      writes.push_back({"SREM", keys.conns(), id});  // not an id any agent wrote: drop it
    }
  }
  for (const auto& [id, record] : wanted) {
    if (listed.count(id) == 0) ids.push_back(id);
  }
  std::vector<RedisCommand> reads;
  for (const std::string& id : ids) reads.push_back({"HGETALL", *keys.conn(id)});
  Result<std::vector<RespValue>> stored = impl_->many(reads, "HGETALL");
  if (!stored.ok()) return stored.error();

  ConnectionSync sync;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    HashFields fields = field_map((*stored)[i]);
    auto want = wanted.find(id);
    if (want == wanted.end()) {
      sync.removed.push_back(id);
      writes.push_back({"SREM", keys.conns(), id});
      writes.push_back({"DEL", *keys.conn(id)});
      // Its other keys go in the sweep below; noted in the same step, so a sweep that is
      // interrupted runs again at the next sync.
      writes.push_back({"SADD", keys.removed_conns(), id});
      continue;
    }
    const ConnectionRecord& r = *want->second;
    Result<std::optional<ConnectionRecord>> current = connection_record_from_fields(id, fields);
    bool exists = listed.count(id) != 0 && !fields.empty();
    if (exists && current.ok() && (*current)->same_config(r)) continue;
    (exists ? sync.changed : sync.added).push_back(id);
    std::string conn = *keys.conn(id);
    writes.push_back({"DEL", conn});
    RedisCommand hset = {"HSET", conn};
    for (auto& [name, value] : connection_record_fields(r)) {
      hset.push_back(name);
      hset.push_back(std::move(value));
    }
    writes.push_back(std::move(hset));
    writes.push_back({"SADD", keys.conns(), id});
  }
  if (!sync.changed.empty()) {
    // A changed connection (its config_hash, credential mode, ...): each of its entries is due
    // now (a miss under the new config, or a principal it is no longer cached under), in the
    // same transaction; its principals are `shared` and its grantees.
    std::vector<RedisCommand> grantee_reads;
    for (const std::string& id : sync.changed)
      grantee_reads.push_back({"SMEMBERS", *keys.grantees(id)});
    Result<std::vector<RespValue>> grantees = impl_->many(grantee_reads, "SMEMBERS");
    if (!grantees.ok()) return grantees.error();
    RedisCommand due = {"ZADD", keys.due(), "XX"};
    for (std::size_t i = 0; i < sync.changed.size(); ++i) {
      std::set<std::string> principals = string_set((*grantees)[i]);
      principals.insert(Principal::shared().str());
      for (const std::string& principal : principals) {
        Result<Principal> parsed = Principal::parse(principal);
        if (!parsed.ok()) continue;
        due.push_back("0");
        due.push_back(*due_member(sync.changed[i], *parsed));
      }
    }
    writes.push_back(std::move(due));
  }
  if (!writes.empty()) {
    writes.push_back({"INCR", keys.epoch()});
    for (const std::vector<std::string>* ids : {&sync.added, &sync.changed, &sync.removed}) {
      for (const std::string& id : *ids) writes.push_back({"INCR", *keys.conn_version(id)});
    }
    Result<std::vector<RespValue>> w = impl_->transaction(writes, "sync connections");
    if (!w.ok()) return w.error();
  }

  // Everything else that names a connection no longer configured: manifests (and their
  // refresh-due index entries), leases, fences, gates, overlays, grants; also leftovers of an
  // interrupted sync. A SCAN of the whole namespace, so it runs only when a connection was
  // removed (now, or by a sync whose sweep did not finish: removed-conns), and once per process
  // as a safety net for keys that name no configured connection some other way (docs/design.md
  // "Maintenance in O(work due)").
  Result<RespValue> pending = impl_->one({"SMEMBERS", keys.removed_conns()}, "SMEMBERS");
  if (!pending.ok()) return pending.error();
  const std::set<std::string> to_sweep = string_set(*pending);
  if (to_sweep.empty() && sync.removed.empty() && impl_->swept.load()) return sync;
  bool cleaned = false;
  std::vector<std::string> grant_keys;
  Status s = impl_->scan_namespace(nullptr, [&](const std::vector<std::string>& page) -> Status {
    RedisCommand del = {"UNLINK"};
    RedisCommand unindex = {"ZREM", keys.due()};
    for (const std::string& key : page) {
      Result<ParsedKey> p = keys.parse(key);
      if (!p.ok()) continue;
      if (p->kind == KeyKind::kGrants) {
        grant_keys.push_back(key);
      } else if (key_has_connection_id(p->kind) && p->kind != KeyKind::kPrefs &&
                 p->kind != KeyKind::kConnVersion && wanted.count(p->connection_id) == 0) {
        // Everything of a removed connection goes, its overlays too; its preference rows stay
        // (a user's choice outlives the connection, as in every agent's local copy), and so
        // does its version (a connection added again must not repeat a value a reader holds).
        del.push_back(key);
        if (p->kind == KeyKind::kManifest) {
          unindex.push_back(*due_member(p->connection_id, *p->principal));
        }
      }
    }
    if (del.size() == 1) return Status::Ok();
    cleaned = true;
    std::vector<RedisCommand> commands = {del};
    if (unindex.size() > 2) commands.push_back(std::move(unindex));
    Result<std::vector<RespValue>> r = impl_->many(commands, "UNLINK");
    return r.ok() ? Status::Ok() : Status(r.error());
  });
  if (!s.ok()) return Error(s.error().code, key_list_error("sync_connections", s.error()));
  std::vector<RedisCommand> grant_reads;
  for (const std::string& key : grant_keys) grant_reads.push_back({"SMEMBERS", key});
  Result<std::vector<RespValue>> grants = impl_->many(grant_reads, "SMEMBERS");
  if (!grants.ok()) return grants.error();
  std::vector<RedisCommand> grant_writes;
  for (std::size_t i = 0; i < grant_keys.size(); ++i) {
    RedisCommand srem = {"SREM", grant_keys[i]};
    for (const std::string& cid : string_set((*grants)[i])) {
      if (wanted.count(cid) == 0) srem.push_back(cid);
    }
    if (srem.size() > 2) {
      grant_writes.push_back(std::move(srem));
      Result<ParsedKey> g = keys.parse(grant_keys[i]);
      if (g.ok() && g->principal)
        grant_writes.push_back({"INCR", *keys.member_version(*g->principal)});
    }
  }
  if (!grant_writes.empty() || (cleaned && writes.empty())) {
    grant_writes.push_back({"INCR", keys.epoch()});
    Result<std::vector<RespValue>> w = impl_->transaction(grant_writes, "sync connections");
    if (!w.ok()) return w.error();
  }
  // Swept: the removals noted before this sweep began are done (one noted meanwhile stays).
  std::vector<std::string> done(to_sweep.begin(), to_sweep.end());
  done.insert(done.end(), sync.removed.begin(), sync.removed.end());
  RedisCommand srem = {"SREM", keys.removed_conns()};
  srem.insert(srem.end(), done.begin(), done.end());
  if (srem.size() > 2) {
    Result<RespValue> r = impl_->one(srem, "SREM");
    if (!r.ok()) return r.error();
  }
  impl_->swept = true;
  return sync;
}

Result<std::vector<ConnectionRecord>> RedisStore::list_connections() {
  if (impl_->v2()) return impl_->list_connections_v2();
  Result<RespValue> members = impl_->one({"SMEMBERS", impl_->keys.conns()}, "SMEMBERS");
  if (!members.ok()) return members.error();
  std::vector<std::string> ids;
  std::vector<RedisCommand> reads;
  for (const std::string& id : string_set(*members)) {
    Result<std::string> key = impl_->keys.conn(id);
    if (!key.ok()) continue;  // not ours to list
    ids.push_back(id);
    reads.push_back({"HGETALL", *key});
  }
  Result<std::vector<RespValue>> stored = impl_->many(reads, "HGETALL");
  if (!stored.ok()) return stored.error();
  std::vector<ConnectionRecord> out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Result<std::optional<ConnectionRecord>> r =
        connection_record_from_fields(ids[i], field_map((*stored)[i]));
    if (!r.ok()) return r.error();
    if (*r) out.push_back(std::move(**r));
  }
  return out;  // ids came from a std::set: sorted
}

// ---- the discovery read -------------------------------------------------------------------------

// The edge's own script (schema/lua/discovery_read.lua via shared/discovery_redis.h): grants,
// records, manifests, overlays and leases of one member in one round trip, decoded strictly.
Result<DiscoverySnapshot> RedisStore::read_discovery(const Principal& member,
                                                     const SnapshotQuery& query) {
  // The layout the last store check read decides where to start; each read checks it again.
  if (impl_->layout_gate->reads() == KeyLayout::kV2) return impl_->read_in_rounds(member, query);
  return impl_->read_one_script(member, query, /*follow=*/true);
}

Result<std::optional<ConnectionRecord>> RedisStore::read_connection(std::string_view cid) {
  Result<std::string> key = impl_->keys.conn(cid);
  if (!key.ok()) return key.error();
  Result<RespValue> r = impl_->v2() ? impl_->one_spread({"HGETALL", *key}, "HGETALL")
                                    : impl_->one({"HGETALL", *key}, "HGETALL");
  if (!r.ok()) return r.error();
  return connection_record_from_fields(cid, field_map(*r));
}

// Per member, never one transaction over all members (docs/design.md "Webhooks, maintenance and
// grants in O(work due)"): the members to compare are those wanted and those the registry lists
// (no SCAN once it is built), their grants read in pipelined pages; each member whose set differs
// is written by member_grant_write, a bounded batch of members per round trip. A sync with no
// difference writes nothing; the grantees index is written only for members that changed (and
// repaired from the grants for pairs a crash left pending).
Result<GrantSync> RedisStore::sync_grants(const GrantMap& grants) {
  constexpr std::size_t kReadPage = 1000;   // SMEMBERS per pipeline
  constexpr std::size_t kWriteBatch = 100;  // members' transactions per pipeline
  RedisKeys& keys = impl_->keys;
  for (const auto& [member, cids] : grants) {
    Result<Principal> p = Principal::member(member);
    if (!p.ok()) return p.error();
    for (const std::string& cid : cids) {
      if (Status s = validate_connection_id(cid); !s.ok()) return s.error();
    }
  }
  if (impl_->v2()) return impl_->sync_grants_v2(grants);
  if (Status s = impl_->repair_grantees(); !s.ok()) return s.error();
  if (Status s = impl_->backfill_grant_members(); !s.ok()) {
    return Error(s.error().code, key_list_error("sync_grants", s.error()));
  }
  std::set<std::string> listed;  // member ids the registry lists
  std::vector<std::string> unlisted;
  if (Status s = impl_->registry_members(listed, unlisted); !s.ok()) return s.error();
  std::set<std::string> members = listed;
  for (const auto& [member, cids] : grants) members.insert(member);

  GrantSync sync;
  static const std::set<std::string> kNone;
  std::vector<MemberGrantWrite> batch;
  RedisCommand drop = {"SREM", keys.grant_members()};  // listed, without grants, none wanted
  drop.insert(drop.end(), unlisted.begin(), unlisted.end());
  auto flush = [&]() -> Status {
    Status s = impl_->write_member_grants(batch, "sync grants");
    batch.clear();
    return s;
  };
  auto it = members.begin();
  while (it != members.end()) {
    std::vector<std::string> page;
    std::vector<RedisCommand> reads;
    for (; it != members.end() && page.size() < kReadPage; ++it) {
      page.push_back(*it);
      reads.push_back({"SMEMBERS", *keys.grants(*Principal::member(*it))});
    }
    Result<std::vector<RespValue>> stored = impl_->many(reads, "SMEMBERS");
    if (!stored.ok()) return stored.error();
    for (std::size_t i = 0; i < page.size(); ++i) {
      auto want = grants.find(page[i]);
      const std::set<std::string>& desired = want == grants.end() ? kNone : want->second;
      const std::set<std::string> have = string_set((*stored)[i]);
      const Principal member = *Principal::member(page[i]);
      if (have == desired) {
        if (desired.empty() && listed.count(page[i]) != 0) drop.push_back(member.str());
        continue;
      }
      sync.changed_members.push_back(page[i]);
      batch.push_back(member_grant_write(keys, member, have, desired));
      if (batch.size() >= kWriteBatch) {
        if (Status s = flush(); !s.ok()) return s.error();
      }
    }
  }
  if (Status s = flush(); !s.ok()) return s.error();
  if (drop.size() > 2) {
    Result<RespValue> r = impl_->one(drop, "SREM");
    if (!r.ok()) return r.error();
  }
  return sync;
}

Result<std::set<std::string>> RedisStore::read_grants(std::string_view member_id) {
  Result<Principal> p = Principal::member(member_id);
  if (!p.ok()) return p.error();
  // v2: a HASH whose fields are the connections granted.
  Result<RespValue> r = impl_->v2() ? impl_->one_spread({"HKEYS", *impl_->keys.grants(*p)}, "HKEYS")
                                    : impl_->one({"SMEMBERS", *impl_->keys.grants(*p)}, "SMEMBERS");
  if (!r.ok()) return r.error();
  return string_set(*r);
}

Result<MergedPreferences> RedisStore::merge_preferences(std::string_view cid,
                                                        const Principal& principal,
                                                        const std::vector<PreferenceRow>& rows) {
  Result<RedisCommand> command = merge_preferences_command(impl_->keys, cid, principal, rows);
  if (!command.ok()) return command.error();
  // v2: the script's keys are all in (cid, principal)'s slot, where it is routed.
  Result<RespValue> r = impl_->v2() ? impl_->one_spread(*command, "preferences_merge")
                                    : impl_->one(*command, "preferences_merge");
  if (!r.ok()) return r.error();
  return parse_merge_preferences_reply(*r, cid, principal);
}

Result<DisabledOverlay> RedisStore::read_disabled(std::string_view cid,
                                                  const Principal& principal) {
  Result<std::string> key = impl_->keys.disabled(cid, principal);
  if (!key.ok()) return key.error();
  Result<RespValue> r = impl_->v2() ? impl_->one_spread({"SMEMBERS", *key}, "SMEMBERS")
                                    : impl_->one({"SMEMBERS", *key}, "SMEMBERS");
  if (!r.ok()) return r.error();
  DisabledOverlay out;
  for (const std::string& m : string_set(*r)) out.insert(m);
  return out;
}

bool RedisStore::has_epoch() const { return !impl_->v2(); }

Result<bool> RedisStore::discovery_unchanged(const DiscoverySnapshot& held) {
  if (impl_->layout_gate->reads() != KeyLayout::kV2) return false;
  // A snapshot without v2 versions (read in v1 before a switch) cannot be compared: read again.
  Result<std::vector<RedisCommand>> commands =
      spread_conditional_commands(impl_->v2_keys, held, {});
  if (!commands.ok()) return false;
  Result<std::vector<RespValue>> replies = impl_->main->run_spread(*commands);
  if (!replies.ok()) return replies.error();
  return decode_spread_unchanged(*replies, held);
}

namespace {
Error no_epoch_on_v2() {
  return Error(ErrorCode::kStoreUnavailable,
               "key layout v2 has no epoch (per-connection and per-member versions replace it)");
}
}  // namespace

Result<int64_t> RedisStore::bump_epoch() {
  if (!has_epoch()) return no_epoch_on_v2();
  Result<RespValue> r = impl_->one({"INCR", impl_->keys.epoch()}, "INCR");
  if (!r.ok()) return r.error();
  std::optional<int64_t> v = r->as_int();
  if (!v) return Error(ErrorCode::kInvalidReply, "redis INCR epoch: not an integer");
  return *v;
}

Result<int64_t> RedisStore::read_epoch() {
  if (!has_epoch()) return no_epoch_on_v2();
  Result<RespValue> r = impl_->one({"GET", impl_->keys.epoch()}, "GET");
  if (!r.ok()) return r.error();
  if (r->is_nil()) return int64_t{0};
  std::optional<int64_t> v = r->as_int();
  if (!v) return Error(ErrorCode::kInvalidReply, "redis epoch: not an integer");
  return *v;
}

// ---- revalidation queue ------------------------------------------------------------------------

Result<RevalidationOutcome> RedisStore::enqueue_revalidation(std::string_view cid,
                                                             const Principal& principal,
                                                             std::string_view reason,
                                                             int64_t window_ms) {
  if (Result<std::string> lease = impl_->keys.lease(cid, principal); !lease.ok()) {
    return lease.error();
  }
  if (Status s = validate_revalidation_reason(reason); !s.ok()) return s.error();
  if (window_ms <= 0) return invalid("enqueue_revalidation: window_ms must be positive");
  // One EVAL of schema/lua/revalidate_enqueue.lua, as the edge queues: nothing while a refresh
  // holds the lease, then one request per key per window, atomically however many readers race.
  // A manual refresh (refresh-tools) is queued again once the gate is a second old.
  Revalidation r{std::string(cid), principal, std::string(reason), reason == "manual"};
  EnqueueOptions options;
  options.window_ms = window_ms;
  options.stream_maxlen = impl_->options.revalidate_stream_max_len;
  if (writes_v2(impl_->keys)) {
    // Two one-slot steps (shared/discovery_redis.h): the gate with the lease declared, on the
    // manifest's slot; then, only when won, the XADD on the connection's shard. A failure between
    // them loses this request; the gate expires and the next stale read queues it again.
    const int64_t at = impl_->options.now_ms();
    Result<RespValue> gate = spread_script(
        *impl_->main, revalidate_gate_command(impl_->keys, r, at, options, /*declare_lease=*/true),
        "revalidate_gate");
    if (!gate.ok()) return gate.error();
    Result<RevalidationGate> won = parse_gate_reply(*gate);
    if (!won.ok()) return won.error();
    if (*won == RevalidationGate::kInProgress) return RevalidationOutcome::kInProgress;
    if (*won == RevalidationGate::kAlreadyQueued) return RevalidationOutcome::kAlreadyQueued;
    Result<RedisCommand> xadd = revalidate_xadd_command(impl_->keys, r, at, options.stream_maxlen);
    if (!xadd.ok()) return xadd.error();
    Result<RespValue> added = impl_->one_spread(*xadd, "XADD");
    if (!added.ok()) return added.error();
    Result<RevalidationResult> queued = parse_xadd_reply(*added);
    if (!queued.ok()) return queued.error();
    return queued->outcome;
  }
  Result<RespValue> reply =
      impl_->script(revalidate_enqueue_command(impl_->keys, r, impl_->options.now_ms(), options),
                    "revalidate_enqueue");
  if (!reply.ok()) return reply.error();
  Result<RevalidationResult> result = parse_enqueue_reply(*reply);
  if (!result.ok()) return result.error();
  return result->outcome;
}

Result<bool> RedisStore::drop_manifest(std::string_view cid, const Principal& principal) {
  Result<std::string> manifest = impl_->keys.manifest(cid, principal);
  if (!manifest.ok()) return manifest.error();
  if (writes_v2(impl_->keys)) {
    // The record's keys and its slot's version in one transaction there; the due entry after it,
    // on the connection's shard (lost, it comes due and maintenance forgets it: no record).
    // slot_drop_v2.lua: the version INCRed only where it exists (a missing one says the slot
    // lost its data).
    const RedisKeys& keys = impl_->keys;
    Result<RedisCommand> drop = schema_script_command(
        "slot_drop_v2.lua",
        {*keys.version_of(cid, principal), *manifest, *keys.revalidate_gate(cid, principal),
         *keys.invalidated(cid, principal)},
        {""});
    if (!drop.ok()) return drop.error();
    Result<RespValue> r = impl_->one_spread(*drop, "drop manifest");
    if (!r.ok()) return r.error();
    Result<std::string> due = due_key_of(keys, cid);
    if (!due.ok()) return due.error();
    Result<std::vector<RespValue>> unindexed =
        run_spread_checked(*impl_->main, {{"ZREM", *due, *due_member(cid, principal)}}, "ZREM due");
    if (!unindexed.ok()) return unindexed.error();
    return r->is_integer() && r->integer > 0;
  }
  Result<std::vector<RespValue>> r =
      impl_->transaction({{"DEL", *manifest, *impl_->keys.revalidate_gate(cid, principal),
                           *impl_->keys.invalidated(cid, principal)},
                          {"ZREM", impl_->keys.due(), *due_member(cid, principal)},
                          {"INCR", impl_->keys.epoch()},
                          {"INCR", *impl_->keys.version_of(cid, principal)}},
                         "drop manifest");
  if (!r.ok()) return r.error();
  return !r->empty() && (*r)[0].type == RespValue::Type::kInteger && (*r)[0].integer > 0;
}

Result<RevalidationBatch> RedisStore::read_revalidations(std::string_view consumer, std::size_t max,
                                                         int64_t block_ms) {
  if (Status s = validate_revalidation_read(consumer, max, block_ms); !s.ok()) {
    return s.error();
  }
  if (writes_v2(impl_->keys)) {
    // S streams in S slots: no one XREADGROUP reads them all, and S blocking connections are too
    // many. Every shard is read without BLOCK in one round; while all are empty, the read waits
    // kRevalidationPollMs (at most what is left of block_ms) and reads again, until block_ms is
    // spent. Not interrupted otherwise, as v1's BLOCK is not: the caller checks whether to go on
    // between reads (docs/design.md "The revalidation queue on v2").
    RevalidationBatch kept = impl_->take_delivered(consumer, max);
    if (!kept.requests.empty()) return kept;
    RedisChannel& conn = block_ms > 0 ? *impl_->blocking : *impl_->main;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(block_ms);
    for (;;) {
      Result<RevalidationBatch> all = impl_->read_shards_once(conn, consumer, max);
      if (!all.ok()) return all.error();
      if (!all->requests.empty() || !all->malformed_ids.empty()) {
        return impl_->hand_out(consumer, std::move(*all), max);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return RevalidationBatch{};
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(kRevalidationPollMs)));
    }
  }
  RedisCommand read = {"XREADGROUP",          "GROUP", kRevalidateConsumerGroup,
                       std::string(consumer), "COUNT", std::to_string(max)};
  if (block_ms > 0) {  // BLOCK 0 would wait forever
    read.push_back("BLOCK");
    read.push_back(std::to_string(block_ms));
  }
  read.insert(read.end(), {"STREAMS", impl_->keys.revalidate_stream(), ">"});
  RedisChannel& conn = block_ms > 0 ? *impl_->blocking : *impl_->main;
  int64_t timeout = block_ms > 0 ? block_ms + impl_->options.command_timeout_ms : 0;
  Result<std::vector<RespValue>> r = conn.run({read}, timeout);
  if (r.ok() && (*r)[0].is_error() && starts_with((*r)[0].str, "NOGROUP")) {
    if (Status s = impl_->ensure_group(); !s.ok()) return s.error();
    r = conn.run({read}, timeout);
  }
  if (!r.ok()) return r.error();
  const RespValue& v = (*r)[0];
  if (v.is_error()) return reply_error(v, "XREADGROUP");
  if (v.is_nil()) return RevalidationBatch{};
  // [[stream, [[id, fields], ...]]]
  const std::vector<RespValue>* streams = v.as_array();
  if (streams == nullptr || streams->empty()) return RevalidationBatch{};
  const std::vector<RespValue>* s = (*streams)[0].as_array();
  if (s == nullptr || s->size() != 2 || !(*s)[1].is_array()) {
    return Error(ErrorCode::kInvalidReply, "redis XREADGROUP: unexpected reply");
  }
  return impl_->batch_from_entries((*s)[1].elements);
}

Status RedisStore::ack_revalidations(const std::vector<std::string>& ids) {
  return impl_->ack(ids);
}

Result<RevalidationBatch> RedisStore::claim_stale_revalidations(std::string_view consumer,
                                                                int64_t min_idle_ms,
                                                                std::size_t max) {
  if (Status s = validate_revalidation_claim(consumer, min_idle_ms, max); !s.ok()) {
    return s.error();
  }
  if (writes_v2(impl_->keys)) return impl_->claim_v2(consumer, min_idle_ms, max);
  RevalidationBatch out;
  std::string start = "0-0";
  // XAUTOCLAIM scans the pending list COUNT entries at a time; a few rounds reach `max` unless
  // the list is mostly younger entries, which the next call finds.
  for (int round = 0; round < 16 && out.requests.size() < max; ++round) {
    std::size_t want = max - out.requests.size();
    Result<std::vector<RespValue>> r =
        impl_->main->run({{"XAUTOCLAIM", impl_->keys.revalidate_stream(), kRevalidateConsumerGroup,
                           std::string(consumer), std::to_string(min_idle_ms), start, "COUNT",
                           std::to_string(want)}});
    if (!r.ok()) return r.error();
    const RespValue& v = (*r)[0];
    if (v.is_error()) {
      if (starts_with(v.str, "NOGROUP")) return out;  // no group: nothing was ever delivered
      return reply_error(v, "XAUTOCLAIM");
    }
    // [next start, [[id, fields], ...], [deleted ids]] (Redis 7; 6.2 has no third element and
    // reports a deleted entry with nil fields, which batch_from_entries acknowledges).
    const std::vector<RespValue>* e = v.as_array();
    if (e == nullptr || e->size() < 2 || !(*e)[0].as_string() || !(*e)[1].is_array()) {
      return Error(ErrorCode::kInvalidReply, "redis XAUTOCLAIM: unexpected reply");
    }
    Result<RevalidationBatch> batch = impl_->batch_from_entries((*e)[1].elements);
    if (!batch.ok()) return batch.error();
    for (RevalidationRequest& req : batch->requests) out.requests.push_back(std::move(req));
    for (std::string& id : batch->malformed_ids) out.malformed_ids.push_back(std::move(id));
    start = std::string(*(*e)[0].as_string());
    if (start == "0-0") break;
  }
  return out;
}

Result<std::vector<std::string>> RedisStore::remove_idle_consumers(std::string_view self,
                                                                   int64_t min_idle_ms) {
  if (min_idle_ms < 0) return invalid("remove_idle_consumers: min_idle_ms must be >= 0");
  if (writes_v2(impl_->keys)) return impl_->remove_idle_consumers_v2(self, min_idle_ms);
  const std::string stream = impl_->keys.revalidate_stream();
  Result<std::vector<RespValue>> info =
      impl_->main->run({{"XINFO", "CONSUMERS", stream, kRevalidateConsumerGroup}});
  if (!info.ok()) return info.error();
  const RespValue& v = (*info)[0];
  std::vector<std::string> removed;
  if (v.is_error()) {
    // No stream or no group yet (a fresh or wiped store): nobody to remove.
    if (starts_with(v.str, "NOGROUP") || starts_with(v.str, "ERR no such key")) return removed;
    return reply_error(v, "XINFO CONSUMERS");
  }
  const std::vector<RespValue>* consumers = v.as_array();
  if (consumers == nullptr) {
    return Error(ErrorCode::kInvalidReply, "redis XINFO CONSUMERS: unexpected reply");
  }
  std::string_view text = schema_asset("lua/consumer_remove.lua");
  if (text.empty()) {
    return Error(ErrorCode::kInternal, "schema/lua/consumer_remove.lua is not compiled in");
  }
  for (const RespValue& c : *consumers) {
    const auto [name, pending, idle] = consumer_info(c);
    if (name.empty() || name == self || pending != 0 || idle < min_idle_ms) continue;
    Result<RespValue> r =
        impl_->one({"EVAL", std::string(text), "1", stream, kRevalidateConsumerGroup, name},
                   "consumer_remove");
    if (!r.ok()) return r.error();
    if (r->as_int() == std::optional<int64_t>(1)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

// ---- the refresh webhook ------------------------------------------------------------------------

// The edge's own step (shared/discovery_redis.h webhook_refresh_command): the same script, the
// same arguments (the gate's window, the stream's bound, a manual refresh's requeue age). On key
// layout v2 the same state machine as the edge's (shared/webhook_spread.h), each round's commands
// routed by their keys; a Redis error in any round fails the call (the replay guard, set last,
// is not set: the sender's retry of the same signed request does it again).
Result<WebhookRefreshReply> RedisStore::apply_webhook(const WebhookVerified& verified,
                                                      const WebhookRefreshRequest& request,
                                                      int64_t now_ms, int64_t window_ms) {
  EnqueueOptions options;
  options.window_ms = window_ms;
  options.stream_maxlen = impl_->options.revalidate_stream_max_len;
  if (writes_v2(impl_->keys)) {
    Result<SpreadWebhookRefresh> hook =
        SpreadWebhookRefresh::start(impl_->keys, verified, request, now_ms, options);
    if (!hook.ok()) return hook.error();
    while (!hook->done()) {
      Result<std::vector<RespValue>> replies =
          run_spread_checked(*impl_->main, hook->commands(), "webhook");
      if (!replies.ok()) return replies.error();
      if (Status fed = hook->feed(*replies); !fed.ok()) return fed.error();
    }
    return hook->take_reply();
  }
  Result<RespValue> reply = impl_->script(
      webhook_refresh_command(impl_->keys, verified, request, now_ms, options), "webhook_refresh");
  if (!reply.ok()) return reply.error();
  return parse_webhook_refresh_reply(*reply);
}

// ---- per-member grants, the runtime catalog, the audit log ----------------------------------

Result<bool> RedisStore::set_member_grants(std::string_view member_id,
                                           const std::set<std::string>& cids) {
  Result<Principal> p = Principal::member(member_id);
  if (!p.ok()) return p.error();
  for (const std::string& cid : cids) {
    if (Status st = validate_connection_id(cid); !st.ok()) return st.error();
  }
  RedisKeys& keys = impl_->keys;
  if (impl_->v2()) {
    // The grants with their connections' modes now; a difference of modes alone is rewritten
    // (a grant written before its connection's record), and is no change of grants.
    Result<GrantModes> want = impl_->credential_modes(cids);
    if (!want.ok()) return want.error();
    Result<std::vector<RespValue>> stored = impl_->spread(
        {{"HGETALL", *keys.grants(*p)}, {"EXISTS", *keys.member_version(*p)}}, "HGETALL");
    if (!stored.ok()) return stored.error();
    GrantModes have;
    for (const auto& [cid, mode] : field_map((*stored)[0])) have[cid] = mode;
    // A member without a version is written even without grants: a reader takes a member
    // without one for a member whose slot lost its data (shared/discovery_spread.h).
    if (have == *want && (*stored)[1].integer == 1) return false;
    if (Status s = impl_->write_member_grants({member_grant_write_v2(keys, *p, have, *want)},
                                              "set member grants");
        !s.ok()) {
      return s.error();
    }
    std::set<std::string> had;
    for (const auto& [cid, mode] : have) had.insert(cid);
    return had != cids;
  }
  Result<RespValue> stored = impl_->one({"SMEMBERS", *keys.grants(*p)}, "SMEMBERS");
  if (!stored.ok()) return stored.error();
  const std::set<std::string> have = string_set(*stored);
  if (have == cids) return false;
  // The member's set, and its principal in the grantees set of each connection added or removed:
  // the cost follows this member's grants, never the number of members.
  if (Status s = impl_->write_member_grants({member_grant_write(keys, *p, have, cids)},
                                            "set member grants");
      !s.ok()) {
    return s.error();
  }
  return true;
}

Result<std::set<std::string>> RedisStore::read_grantees(std::string_view cid) {
  Result<std::string> key = impl_->keys.grantees(cid);
  if (!key.ok()) return key.error();
  Result<RespValue> r = impl_->v2() ? impl_->one_spread({"SMEMBERS", *key}, "SMEMBERS")
                                    : impl_->one({"SMEMBERS", *key}, "SMEMBERS");
  if (!r.ok()) return r.error();
  std::set<std::string> out;
  for (const std::string& principal : string_set(*r)) {
    Result<Principal> p = Principal::parse(principal);
    if (p.ok() && !p->is_shared()) out.insert(std::string(p->member_id()));
  }
  return out;
}

namespace {

// An entry as the hash holds it (schema/redis-keys.md, catalog:<kind>): canonical JSON of the meta
// with "value" last (keys sorted), the value's canonical text spliced in as it is.
std::string catalog_entry_json(const CatalogMeta& meta, const std::string& value_text) {
  Json m = {{"by", meta.by},
            {"file_hash", meta.file_hash},
            {"origin", meta.origin},
            {"rev_ms", meta.rev_ms},
            {"updated_at", meta.updated_at_ms}};
  std::string out = serialize_json(m);  // strings and integers only: canonical
  out.pop_back();                       // the closing brace
  out += ",\"value\":";
  out += value_text.empty() ? "null" : value_text;
  out += '}';
  return out;
}

Result<CatalogEntry> catalog_entry_from_json(CatalogKind kind, std::string_view key,
                                             std::string_view text) {
  const std::string record =
      std::string("catalog entry ") + catalog_kind_name(kind) + " " + std::string(key);
  Result<Json> parsed = parse_json(text);
  if (!parsed.ok() || !parsed->is_object()) {
    return Error(ErrorCode::kInvalidReply, record + ": not a JSON object");
  }
  CatalogEntry e;
  e.kind = kind;
  e.key = std::string(key);
  std::optional<std::string> origin = json_string(*parsed, "origin");
  std::optional<std::string> file_hash = json_string(*parsed, "file_hash");
  std::optional<std::string> by = json_string(*parsed, "by");
  std::optional<int64_t> rev = json_int(*parsed, "rev_ms");
  std::optional<int64_t> updated = json_int(*parsed, "updated_at");
  Json* value = json_field(*parsed, "value");
  if (!origin || !file_hash || !by || !rev || !updated || value == nullptr) {
    return Error(ErrorCode::kInvalidReply, record + ": a field is missing or of the wrong type");
  }
  e.meta.origin = std::move(*origin);
  e.meta.file_hash = std::move(*file_hash);
  e.meta.by = std::move(*by);
  e.meta.rev_ms = *rev;
  e.meta.updated_at_ms = *updated;
  if (!value->is_null()) e.value = std::move(*value);
  return e;
}

// ARGV[3] of schema/lua/catalog_write.lua.
const char* catalog_mode_name(CatalogWriteMode mode) {
  switch (mode) {
    case CatalogWriteMode::kFileSeed:
      return "seed";
    case CatalogWriteMode::kRestore:
      return "restore";
    case CatalogWriteMode::kAlways:
      break;
  }
  return "always";
}

}  // namespace

Result<CatalogWriteResult> RedisStore::catalog_write(const CatalogEntry& entry,
                                                     CatalogWriteMode mode) {
  Result<std::string> value = catalog_value_text(entry);
  if (!value.ok()) return value.error();
  std::string_view script = schema_asset("lua/catalog_write.lua");
  if (script.empty()) {
    return Error(ErrorCode::kInternal, "schema/lua/catalog_write.lua is not compiled in");
  }
  RedisKeys& keys = impl_->keys;
  const char* kind = catalog_kind_name(entry.kind);
  CatalogEntry written = entry;
  written.meta.updated_at_ms = impl_->options.now_ms();
  Result<RespValue> r = impl_->one(
      {"EVAL", std::string(script), "3", *keys.catalog(kind), *keys.catalog_keys(kind),
       keys.catalog_versions(), kind, entry.key, catalog_mode_name(mode), entry.meta.file_hash,
       std::to_string(entry.meta.rev_ms), catalog_entry_json(written.meta, *value)},
      "catalog_write");
  if (!r.ok()) return r.error();
  const std::vector<RespValue>* reply = r->as_array();
  if (reply == nullptr || reply->size() < 1 || !(*reply)[0].as_int()) {
    return Error(ErrorCode::kInvalidReply, "redis catalog_write: unexpected reply");
  }
  CatalogWriteResult out;
  out.applied = *(*reply)[0].as_int() == 1;
  if (out.applied) {
    out.current = std::move(written);
    return out;
  }
  if (reply->size() > 1) {
    if (std::optional<std::string_view> stored = (*reply)[1].as_string()) {
      Result<CatalogEntry> e = catalog_entry_from_json(entry.kind, entry.key, *stored);
      if (!e.ok()) return e.error();
      out.current = std::move(e).value();
    }
  }
  return out;
}

Result<std::optional<CatalogEntry>> RedisStore::catalog_read(CatalogKind kind,
                                                             std::string_view key) {
  if (Status st = validate_catalog_key(kind, key); !st.ok()) return st.error();
  Result<RespValue> r =
      impl_->one({"HGET", *impl_->keys.catalog(catalog_kind_name(kind)), std::string(key)}, "HGET");
  if (!r.ok()) return r.error();
  std::optional<std::string_view> text = r->as_string();
  if (!text) return std::optional<CatalogEntry>();
  Result<CatalogEntry> e = catalog_entry_from_json(kind, key, *text);
  if (!e.ok()) return e.error();
  return std::optional<CatalogEntry>(std::move(e).value());
}

Result<CatalogPage> RedisStore::catalog_list(CatalogKind kind, std::string_view cursor,
                                             std::size_t limit) {
  if (Status st = validate_catalog_page(limit); !st.ok()) return st.error();
  RedisKeys& keys = impl_->keys;
  const char* name = catalog_kind_name(kind);
  // One key past the page says whether there is a next one.
  Result<RespValue> listed = impl_->one(
      {"ZRANGEBYLEX", *keys.catalog_keys(name), cursor.empty() ? "-" : "(" + std::string(cursor),
       "+", "LIMIT", "0", std::to_string(limit + 1)},
      "ZRANGEBYLEX");
  if (!listed.ok()) return listed.error();
  const std::vector<RespValue>* names = listed->as_array();
  if (names == nullptr) return Error(ErrorCode::kInvalidReply, "redis ZRANGEBYLEX: not an array");
  CatalogPage page;
  RedisCommand hmget = {"HMGET", *keys.catalog(name)};
  for (const RespValue& n : *names) {
    if (hmget.size() - 2 == limit) break;
    std::optional<std::string_view> k = n.as_string();
    if (!k) return Error(ErrorCode::kInvalidReply, "redis ZRANGEBYLEX: not a string");
    hmget.emplace_back(*k);
  }
  if (hmget.size() == 2) return page;
  if (names->size() > limit) page.next_cursor = hmget.back();
  Result<RespValue> values = impl_->one(hmget, "HMGET");
  if (!values.ok()) return values.error();
  const std::vector<RespValue>* texts = values->as_array();
  if (texts == nullptr || texts->size() != hmget.size() - 2) {
    return Error(ErrorCode::kInvalidReply, "redis HMGET: unexpected reply");
  }
  for (std::size_t i = 0; i < texts->size(); ++i) {
    std::optional<std::string_view> text = (*texts)[i].as_string();
    if (!text) continue;  // indexed but gone (nothing deletes entries: a foreign writer)
    Result<CatalogEntry> e = catalog_entry_from_json(kind, hmget[i + 2], *text);
    if (!e.ok()) return e.error();
    page.entries.push_back(std::move(e).value());
  }
  return page;
}

Result<CatalogVersions> RedisStore::catalog_versions() {
  Result<RespValue> r = impl_->one(
      {"HMGET", impl_->keys.catalog_versions(), "member", "grant", "connection"}, "HMGET");
  if (!r.ok()) return r.error();
  const std::vector<RespValue>* v = r->as_array();
  if (v == nullptr || v->size() != 3) {
    return Error(ErrorCode::kInvalidReply, "redis HMGET catalog versions: unexpected reply");
  }
  CatalogVersions out;
  int64_t* fields[] = {&out.member, &out.grant, &out.connection};
  for (std::size_t i = 0; i < 3; ++i) {
    std::optional<std::string_view> text = (*v)[i].as_string();
    if (text && !parse_i64(*text, fields[i])) {
      return Error(ErrorCode::kInvalidReply, "redis catalog versions: not an integer");
    }
  }
  return out;
}

Status RedisStore::append_audit(const AuditEntry& entry) {
  Result<std::string> detail = audit_detail_text(entry);
  if (!detail.ok()) return detail.error();
  namespace f = redis_field;
  const int64_t at = entry.at_ms != 0 ? entry.at_ms : impl_->options.now_ms();
  Result<RespValue> r =
      impl_->one({"XADD", impl_->keys.audit(), "MAXLEN", "~",
                  std::to_string(std::max<int64_t>(impl_->options.max_audit_entries, 1)), "*",
                  f::kAt, std::to_string(at), f::kActor, entry.actor, f::kAction, entry.action,
                  f::kTarget, entry.target, f::kDetail, *detail},
                 "XADD");
  return r.ok() ? Status::Ok() : Status(r.error());
}

Result<AuditPage> RedisStore::read_audit(std::string_view cursor, std::size_t limit) {
  if (Status st = validate_catalog_page(limit); !st.ok()) return st.error();
  if (!cursor.empty() && !valid_stream_id(cursor)) {
    return invalid("read_audit: the cursor is not an audit line id");
  }
  Result<RespValue> r = impl_->one(
      {"XREVRANGE", impl_->keys.audit(), cursor.empty() ? "+" : "(" + std::string(cursor), "-",
       "COUNT", std::to_string(limit + 1)},
      "XREVRANGE");
  if (!r.ok()) return r.error();
  const std::vector<RespValue>* lines = r->as_array();
  if (lines == nullptr) return Error(ErrorCode::kInvalidReply, "redis XREVRANGE: not an array");
  AuditPage page;
  for (const RespValue& line : *lines) {
    if (page.entries.size() == limit) {
      page.next_cursor = page.entries.back().id;
      break;
    }
    const std::vector<RespValue>* parts = line.as_array();
    if (parts == nullptr || parts->size() != 2 || !(*parts)[0].as_string() ||
        !(*parts)[1].is_array()) {
      return Error(ErrorCode::kInvalidReply, "redis XREVRANGE: unexpected entry");
    }
    AuditEntry e;
    e.id = std::string(*(*parts)[0].as_string());
    const std::vector<RespValue>& kv = (*parts)[1].elements;
    for (std::size_t i = 0; i + 1 < kv.size(); i += 2) {
      std::optional<std::string_view> k = kv[i].as_string();
      std::optional<std::string_view> v = kv[i + 1].as_string();
      if (!k || !v) continue;
      if (*k == redis_field::kAt) {
        (void)parse_i64(*v, &e.at_ms);
      } else if (*k == redis_field::kActor) {
        e.actor = std::string(*v);
      } else if (*k == redis_field::kAction) {
        e.action = std::string(*v);
      } else if (*k == redis_field::kTarget) {
        e.target = std::string(*v);
      } else if (*k == redis_field::kDetail) {
        Result<Json> detail = parse_json(*v);
        if (detail.ok()) e.detail = std::move(detail).value();
      }
    }
    page.entries.push_back(std::move(e));
  }
  return page;
}

// ---- OAuth callbacks the edge queued ----------------------------------------------------------

Result<OAuthCallbackBatch> RedisStore::read_oauth_callbacks(std::string_view after_id,
                                                            std::size_t max) {
  if (max == 0) return invalid("read_oauth_callbacks: max must be positive");
  if (!after_id.empty() && !valid_stream_id(after_id)) {
    return invalid("read_oauth_callbacks: after_id is not a stream id");
  }
  const std::string stream = impl_->keys.oauth_callbacks();
  OAuthCallbackBatch batch;
  batch.last_id = after_id.empty() ? "0-0" : std::string(after_id);
  RedisCommand read = after_id.empty()
                          ? RedisCommand{"XREVRANGE", stream, "+", "-", "COUNT", "1"}
                          : RedisCommand{"XRANGE", stream,  "(" + std::string(after_id),
                                         "+",      "COUNT", std::to_string(max)};
  Result<RespValue> r = impl_->one(read, read[0]);
  if (!r.ok()) return r.error();
  const std::vector<RespValue>* lines = r->as_array();
  if (lines == nullptr)
    return Error(ErrorCode::kInvalidReply, "redis " + read[0] + ": not an array");
  for (const RespValue& line : *lines) {
    const std::vector<RespValue>* parts = line.as_array();
    if (parts == nullptr || parts->size() != 2 || !(*parts)[0].as_string() ||
        !(*parts)[1].is_array()) {
      return Error(ErrorCode::kInvalidReply, "redis " + read[0] + ": unexpected entry");
    }
    batch.last_id = std::string(*(*parts)[0].as_string());
    if (after_id.empty()) break;  // where to start; older callbacks are not this run's
    OAuthCallbackEntry e;
    e.id = batch.last_id;
    const std::vector<RespValue>& kv = (*parts)[1].elements;
    for (std::size_t i = 0; i + 1 < kv.size(); i += 2) {
      std::optional<std::string_view> k = kv[i].as_string();
      std::optional<std::string_view> v = kv[i + 1].as_string();
      if (!k || !v) continue;
      auto set_if = [&](std::optional<std::string>& field) {
        if (!v->empty()) field = std::string(*v);
      };
      if (*k == redis_field::kAt) {
        (void)parse_i64(*v, &e.at_ms);
      } else if (*k == redis_field::kState) {
        e.params.state = std::string(*v);
      } else if (*k == redis_field::kCode) {
        set_if(e.params.code);
      } else if (*k == redis_field::kIss) {
        set_if(e.params.iss);
      } else if (*k == redis_field::kError) {
        set_if(e.params.error);
      } else if (*k == redis_field::kErrorDescription) {
        set_if(e.params.error_description);
      }
    }
    batch.entries.push_back(std::move(e));
  }
  return batch;
}

Status RedisStore::put_oauth_result(std::string_view state, std::string_view record,
                                    int64_t ttl_ms) {
  if (state.empty() || ttl_ms <= 0) return invalid("put_oauth_result: no state or no lifetime");
  Result<RespValue> r = impl_->one(
      {"SET", impl_->keys.oauth_result(state), std::string(record), "PX", std::to_string(ttl_ms)},
      "SET");
  return r.ok() ? Status::Ok() : Status(r.error());
}

// ---- calls relayed from the edge ---------------------------------------------------------------

namespace {

// The entries of an XREADGROUP reply on one stream ([[stream, [[id, fields], ...]]], or nil) as
// requests into `batch`; the ids of entries that are no valid request into `bad` (and
// batch.malformed_ids, with why).
Status take_relayed_calls(const RespValue& v, RelayedCallBatch& batch,
                          std::vector<std::string>& bad) {
  if (v.is_nil()) return Status::Ok();
  const std::vector<RespValue>* streams = v.as_array();
  if (streams == nullptr || streams->empty()) return Status::Ok();
  const std::vector<RespValue>* s = (*streams)[0].as_array();
  if (s == nullptr || s->size() != 2 || !(*s)[1].is_array()) {
    return Error(ErrorCode::kInvalidReply, "redis XREADGROUP: unexpected reply");
  }
  for (const RespValue& entry : (*s)[1].elements) {
    const std::vector<RespValue>* e = entry.as_array();
    if (e == nullptr || e->empty() || !(*e)[0].as_string()) continue;
    std::string id(*(*e)[0].as_string());
    Result<RelayRequest> request = e->size() == 2 && (*e)[1].is_array()
                                       ? relay_request_from_fields(field_map((*e)[1]))
                                       : Result<RelayRequest>(invalid("no fields"));
    if (request.ok()) {
      batch.requests.push_back(std::move(*request));
    } else {
      bad.push_back(id);
      batch.malformed_ids.push_back(id + " (" + request.error().message + ")");
    }
  }
  return Status::Ok();
}

// Key layout v2's read of relayed calls polls the S shard streams (an XREADGROUP BLOCK over
// streams in different slots is CROSSSLOT) at most this often while they are empty.
constexpr int64_t kRelayedCallPollMs = 100;

// What XINFO GROUPS says of the calls group on one shard's stream.
struct CallGroupState {
  bool exists = false;
  // Entries the group has not had: nullopt when Redis cannot tell (an entry deleted past the
  // group's position: XDEL, a trim), so the shard is read to find out.
  std::optional<int64_t> lag;
};

// XINFO GROUPS' reply (RESP2: an array of flat maps; "ERR no such key" when the stream is absent).
Result<CallGroupState> call_group_state(const RespValue& v) {
  CallGroupState out;
  if (v.is_error()) {
    if (v.str.find("no such key") != std::string::npos) return out;
    return reply_error(v, "XINFO GROUPS");
  }
  const std::vector<RespValue>* groups = v.as_array();
  if (groups == nullptr) return Error(ErrorCode::kInvalidReply, "redis XINFO GROUPS: not an array");
  for (const RespValue& g : *groups) {
    const std::vector<RespValue>* flat = g.as_array();
    if (flat == nullptr || flat->size() % 2 != 0) {
      return Error(ErrorCode::kInvalidReply, "redis XINFO GROUPS: a group is not a map");
    }
    std::optional<std::string_view> name;
    const RespValue* lag = nullptr;
    for (std::size_t i = 0; i + 1 < flat->size(); i += 2) {
      std::optional<std::string_view> field = (*flat)[i].as_string();
      if (!field) continue;
      if (*field == "name") name = (*flat)[i + 1].as_string();
      if (*field == "lag") lag = &(*flat)[i + 1];
    }
    if (name != std::optional<std::string_view>(kCallsConsumerGroup)) continue;
    out.exists = true;
    // Redis < 7.0 has no lag: unknown, read the shard.
    if (lag != nullptr && !lag->is_nil()) {
      std::optional<int64_t> n = lag->as_int();
      if (!n || *n < 0) {
        return Error(ErrorCode::kInvalidReply, "redis XINFO GROUPS: lag is not a count");
      }
      out.lag = *n;
    }
    return out;
  }
  return out;
}

}  // namespace

Result<RelayedCallBatch> RedisStore::read_relayed_calls(std::string_view consumer, std::size_t max,
                                                        int64_t block_ms) {
  if (Status s = validate_revalidation_read(consumer, max, block_ms); !s.ok()) return s.error();
  if (writes_v2(impl_->keys)) return read_relayed_calls_v2(consumer, max, block_ms);
  const std::string stream = impl_->keys.calls();
  RedisCommand read = {
      "XREADGROUP",        "GROUP", kCallsConsumerGroup, std::string(consumer), "COUNT",
      std::to_string(max), "NOACK"};
  if (block_ms > 0) {  // BLOCK 0 would wait forever
    read.push_back("BLOCK");
    read.push_back(std::to_string(block_ms));
  }
  read.insert(read.end(), {"STREAMS", stream, ">"});
  RedisChannel& conn = block_ms > 0 ? *impl_->calls : *impl_->main;
  int64_t timeout = block_ms > 0 ? block_ms + impl_->options.command_timeout_ms : 0;
  Result<std::vector<RespValue>> r = conn.run({read}, timeout);
  if (r.ok() && (*r)[0].is_error() && starts_with((*r)[0].str, "NOGROUP")) {
    // From the stream's end ($): a call queued while no agent consumed is past its use (the
    // edge answered agent_unreachable or timed out); BUSYGROUP (another agent made it) is fine.
    Result<std::vector<RespValue>> made =
        impl_->main->run({{"XGROUP", "CREATE", stream, kCallsConsumerGroup, "$", "MKSTREAM"}});
    if (!made.ok()) return made.error();
    const RespValue& v = (*made)[0];
    if (v.is_error() && !starts_with(v.str, "BUSYGROUP")) return reply_error(v, "XGROUP CREATE");
    r = conn.run({read}, timeout);
  }
  if (!r.ok()) return r.error();
  const RespValue& v = (*r)[0];
  if (v.is_error()) return reply_error(v, "XREADGROUP");
  RelayedCallBatch batch;
  std::vector<std::string> bad;
  if (Status st = take_relayed_calls(v, batch, bad); !st.ok()) return st.error();
  if (!bad.empty()) {
    RedisCommand del = {"XDEL", stream};
    del.insert(del.end(), bad.begin(), bad.end());
    (void)impl_->main->run({del});
  }
  return batch;
}

// Key layout v2: one calls stream per shard (a call is on its connection's shard). XREADGROUP
// cannot block on streams in several slots, and reading every shard with COUNT `max` could take
// up to S × max calls (NOACK: taken is delivered, never given back), so a read is two spread
// rounds: (1) XINFO GROUPS of every shard (S commands, one round; the group's `lag` says which
// shards hold calls it has not had; a shard without the group gets it, from its end, as on v1);
// (2) XREADGROUP ... NOACK on those shards only, at most `max` in all, starting from a rotating
// shard. While every shard is empty it polls again every kRelayedCallPollMs until block_ms is
// spent. One worker of the store polls at a time (the others wait for their turn, up to their
// block_ms): an agent's call workers take turns reading and share the polling, so an idle agent
// sends S commands every 100 ms (160/s with S = 16) whatever its number of workers (before: each
// worker polled, 640/s with 4), spread over the masters; a worker that read calls hands the
// polling on as it returns them. A call waits up to 100 ms more than on v1 before an agent sees it
// (half that on average); the calls' own Redis work is the same.
Result<RelayedCallBatch> RedisStore::read_relayed_calls_v2(std::string_view consumer,
                                                           std::size_t max, int64_t block_ms) {
  const RedisKeys& keys = impl_->keys;
  std::vector<std::string> streams;
  std::vector<RedisCommand> probes;
  for (uint32_t k = 0; k < keys.shard_count(); ++k) {
    Result<std::string> stream = keys.calls(k);
    if (!stream.ok()) return stream.error();
    probes.push_back({"XINFO", "GROUPS", *stream});
    streams.push_back(std::move(*stream));
  }
  RedisChannel& conn = *impl_->calls;
  const SteadyClock::time_point until =
      SteadyClock::now() + std::chrono::milliseconds(std::max<int64_t>(block_ms, 0));
  std::unique_lock<std::timed_mutex> turn(impl_->calls_poll, std::defer_lock);
  if (!turn.try_lock_until(until)) return RelayedCallBatch{};  // another worker polled meanwhile
  while (true) {
    Result<std::vector<RespValue>> probed = conn.run_spread(probes);
    if (!probed.ok()) return probed.error();
    std::vector<RedisCommand> make;
    std::vector<std::pair<uint32_t, std::optional<int64_t>>> waiting;  // shard, lag
    for (uint32_t k = 0; k < streams.size(); ++k) {
      Result<CallGroupState> state = call_group_state((*probed)[k]);
      if (!state.ok()) return state.error();
      if (!state->exists) {
        make.push_back({"XGROUP", "CREATE", streams[k], kCallsConsumerGroup, "$", "MKSTREAM"});
      } else if (!state->lag || *state->lag > 0) {
        waiting.emplace_back(k, state->lag);
      }
    }
    if (!make.empty()) {
      Result<std::vector<RespValue>> made = conn.run_spread(make);
      if (!made.ok()) return made.error();
      for (const RespValue& v : *made) {
        if (v.is_error() && !starts_with(v.str, "BUSYGROUP"))
          return reply_error(v, "XGROUP CREATE");
      }
    }
    RelayedCallBatch batch;
    if (!waiting.empty()) {
      const std::size_t first = impl_->call_shard_turn.fetch_add(1) % waiting.size();
      std::size_t left = max;
      std::vector<RedisCommand> reads;
      std::vector<uint32_t> read_shards;
      for (std::size_t i = 0; i < waiting.size() && left > 0; ++i) {
        const auto& [k, lag] = waiting[(first + i) % waiting.size()];
        const std::size_t count = lag ? std::min<std::size_t>(left, *lag) : left;
        left -= count;
        reads.push_back({"XREADGROUP", "GROUP", kCallsConsumerGroup, std::string(consumer), "COUNT",
                         std::to_string(count), "NOACK", "STREAMS", streams[k], ">"});
        read_shards.push_back(k);
      }
      Result<std::vector<RespValue>> r = conn.run_spread(reads);
      if (!r.ok()) return r.error();
      std::vector<RedisCommand> dels;
      for (std::size_t j = 0; j < reads.size(); ++j) {
        const RespValue& v = (*r)[j];
        // The group went since the probe (the stream deleted): the next probe makes it again.
        if (v.is_error() && starts_with(v.str, "NOGROUP")) continue;
        if (v.is_error()) return reply_error(v, "XREADGROUP");
        std::vector<std::string> bad;
        if (Status st = take_relayed_calls(v, batch, bad); !st.ok()) return st.error();
        if (!bad.empty()) {
          RedisCommand del = {"XDEL", streams[read_shards[j]]};
          del.insert(del.end(), bad.begin(), bad.end());
          dels.push_back(std::move(del));
        }
      }
      if (!dels.empty()) (void)conn.run_spread(dels);
      if (!batch.requests.empty() || !batch.malformed_ids.empty()) return batch;
    }
    const SteadyClock::time_point now = SteadyClock::now();
    if (block_ms <= 0 || now >= until) return batch;
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(
        until - now, std::chrono::milliseconds(kRelayedCallPollMs)));
  }
}

Status RedisStore::put_call_reply(const RelayedCallRef& call, std::string_view record,
                                  int64_t ttl_ms) {
  if (ttl_ms <= 0) return invalid("put_call_reply: no lifetime");
  if (writes_v2(impl_->keys)) {
    // The list the edge BLPOPs: on the shard of the call's connection (relay_call_commands_v2).
    Result<std::string> key = relay_reply_key_v2(impl_->keys, call.rid, call.connection_id);
    if (!key.ok()) return key.error();
    Result<std::vector<RespValue>> r = run_spread_checked(
        *impl_->main,
        {{"RPUSH", *key, std::string(record)}, {"PEXPIRE", *key, std::to_string(ttl_ms)}}, "RPUSH");
    return r.ok() ? Status::Ok() : Status(r.error());
  }
  Result<std::string> key = impl_->keys.call_reply(call.rid);
  if (!key.ok()) return key.error();
  Result<std::vector<RespValue>> r = impl_->many(
      {{"RPUSH", *key, std::string(record)}, {"PEXPIRE", *key, std::to_string(ttl_ms)}}, "RPUSH");
  return r.ok() ? Status::Ok() : Status(r.error());
}

Result<std::vector<bool>> RedisStore::call_cancel_marks(const std::vector<RelayedCallRef>& calls) {
  if (calls.empty()) return std::vector<bool>{};
  std::vector<RedisCommand> mgets;
  // Per MGET, the calls it reads (in its order).
  std::vector<std::vector<std::size_t>> of;
  if (writes_v2(impl_->keys)) {
    // One MGET per shard the calls are on (each MGET one slot), one round.
    std::map<uint32_t, std::size_t> mget_of_shard;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      Result<uint32_t> shard = impl_->keys.connection_shard(calls[i].connection_id);
      if (!shard.ok()) return shard.error();
      Result<std::string> key = impl_->keys.call_cancel(calls[i].rid, *shard);
      if (!key.ok()) return key.error();
      auto [at, added] = mget_of_shard.emplace(*shard, mgets.size());
      if (added) {
        mgets.push_back({"MGET"});
        of.emplace_back();
      }
      mgets[at->second].push_back(std::move(*key));
      of[at->second].push_back(i);
    }
  } else {
    RedisCommand mget = {"MGET"};
    for (const RelayedCallRef& call : calls) {
      Result<std::string> key = impl_->keys.call_cancel(call.rid);
      if (!key.ok()) return key.error();
      mget.push_back(std::move(*key));
    }
    mgets.push_back(std::move(mget));
    of.emplace_back();
    for (std::size_t i = 0; i < calls.size(); ++i) of[0].push_back(i);
  }
  Result<std::vector<RespValue>> r = writes_v2(impl_->keys)
                                         ? run_spread_checked(*impl_->main, mgets, "MGET")
                                         : impl_->many(mgets, "MGET");
  if (!r.ok()) return r.error();
  std::vector<bool> out(calls.size(), false);
  for (std::size_t m = 0; m < mgets.size(); ++m) {
    const std::vector<RespValue>* marks = (*r)[m].as_array();
    if (marks == nullptr || marks->size() != of[m].size()) {
      return Error(ErrorCode::kInvalidReply, "redis MGET call-cancel: unexpected reply");
    }
    for (std::size_t j = 0; j < marks->size(); ++j) out[of[m][j]] = !(*marks)[j].is_nil();
  }
  return out;
}

Status RedisStore::mark_call_agent_alive(std::string_view consumer, int64_t ttl_ms) {
  if (ttl_ms <= 0) return invalid("mark_call_agent_alive: no lifetime");
  const RedisKeys& keys = impl_->keys;
  if (writes_v2(keys)) {
    // Every shard's group and `call-agents` (an edge checks the mark of its call's shard), the
    // groups first, in a round of their own: a spread round keeps no order across commands, and
    // a mark set before its shard's group would let an edge queue a call the group (made at the
    // stream's end) never delivers. Then the marks and the census (`{<ns>}`, as on v1).
    std::vector<RedisCommand> groups;
    std::vector<RedisCommand> marks;
    for (uint32_t k = 0; k < keys.shard_count(); ++k) {
      Result<std::string> stream = keys.calls(k);
      Result<std::string> agents = keys.call_agents(k);
      if (!stream.ok()) return stream.error();
      if (!agents.ok()) return agents.error();
      groups.push_back({"XGROUP", "CREATE", *stream, kCallsConsumerGroup, "$", "MKSTREAM"});
      marks.push_back({"SET", *agents, call_agents_mark(consumer), "PX", std::to_string(ttl_ms)});
    }
    for (RedisCommand& c : agents_census_heartbeat(keys, consumer, impl_->options.now_ms())) {
      marks.push_back(std::move(c));
    }
    Result<std::vector<RespValue>> made = impl_->main->run_spread(groups);
    if (!made.ok()) return made.error();
    for (const RespValue& v : *made) {
      if (v.is_error() && !starts_with(v.str, "BUSYGROUP")) return reply_error(v, "XGROUP CREATE");
    }
    Result<std::vector<RespValue>> r = run_spread_checked(*impl_->main, marks, "SET call-agents");
    return r.ok() ? Status::Ok() : Status(r.error());
  }
  // The group first (from the stream's end; BUSYGROUP: it exists): an edge queues only while
  // `call-agents` exists, so every request it queues is after the group's start.
  // The census with it (shared/layout.h): every agent, not only the last to mark call-agents.
  std::vector<RedisCommand> commands = {
      {"XGROUP", "CREATE", keys.calls(), kCallsConsumerGroup, "$", "MKSTREAM"},
      {"SET", keys.call_agents(), call_agents_mark(consumer), "PX", std::to_string(ttl_ms)}};
  for (RedisCommand& c : agents_census_heartbeat(keys, consumer, impl_->options.now_ms())) {
    commands.push_back(std::move(c));
  }
  Result<std::vector<RespValue>> r = impl_->main->run(commands);
  if (!r.ok()) return r.error();
  if ((*r)[0].is_error() && !starts_with((*r)[0].str, "BUSYGROUP")) {
    return reply_error((*r)[0], "XGROUP CREATE");
  }
  for (std::size_t i = 1; i < r->size(); ++i) {
    if ((*r)[i].is_error()) return reply_error((*r)[i], commands[i][0]);
  }
  return Status::Ok();
}

std::optional<KeyLayout> RedisStore::written_layout() const { return impl_->keys.key_layout(); }

Result<std::optional<std::string>> RedisStore::read_layout_record() {
  Result<RespValue> r = impl_->one({"GET", impl_->keys.layout()}, "GET layout");
  if (!r.ok()) return r.error();
  if (r->is_nil()) return std::optional<std::string>();
  std::optional<std::string_view> text = r->as_string();
  if (!text) return Error(ErrorCode::kInvalidReply, "redis GET layout: not a string");
  return std::optional<std::string>(std::string(*text));
}

namespace {

// A layout record as a message shows it: '' is "no record"; bytes outside printable ASCII as \xNN.
std::string quoted_value(std::string_view value) {
  if (value.empty()) return "(no record)";
  std::string out = "`";
  for (char c : value.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + (value.size() > 64 ? "...`" : "`");
}

}  // namespace

namespace {
// A pipeline's replies one by one, as the layout copy takes them: each the pipeline's failure
// when the pipeline failed.
std::vector<Result<RespValue>> each_reply(Result<std::vector<RespValue>> r, std::size_t n) {
  std::vector<Result<RespValue>> out;
  for (std::size_t i = 0; i < n; ++i) {
    if (r.ok() && i < r->size()) {
      out.emplace_back(std::move((*r)[i]));
    } else {
      out.emplace_back(r.ok() ? Error(ErrorCode::kStoreUnavailable, "a reply is missing")
                              : r.error());
    }
  }
  return out;
}
}  // namespace

Result<LayoutMigration> RedisStore::migrate_layout_to_v2(const LayoutMigrationOptions& options) {
  if (impl_->v2()) {
    return Error(ErrorCode::kInvalidArgument, "migrate-layout: this store writes v2 already");
  }
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  // Past the layout gate: the migration writes the record and the v2 keys while the record
  // refuses every agent's writes, its own store's included.
  RedisChannel& channel = static_cast<LayoutGatedChannel&>(*impl_->main).inner();
  const std::string key = impl_->keys.layout();
  std::string_view switch_script = schema_asset("lua/layout_switch.lua");
  if (switch_script.empty()) {
    return Error(ErrorCode::kInternal, "schema/lua/layout_switch.lua is not compiled in");
  }
  // The record from `from` ('' none) to `to`; kConflict when someone else moved it.
  auto move = [&](const std::string& from, const std::string& to) -> Status {
    Result<std::vector<RespValue>> r =
        channel.run({{"EVAL", std::string(switch_script), "1", key, from, to}});
    if (!r.ok()) return r.error();
    const RespValue& v = (*r)[0];
    if (v.is_error()) return reply_error(v, "layout_switch");
    const std::vector<RespValue>* a = v.as_array();
    if (a == nullptr || a->size() != 2 || !(*a)[0].as_int() || !(*a)[1].as_string()) {
      return Error(ErrorCode::kInvalidReply, "redis layout_switch: unexpected reply");
    }
    if (*(*a)[0].as_int() == 1) return Status::Ok();
    return Error(ErrorCode::kConflict, "migrate-layout: the layout record " + key + " is now " +
                                           quoted_value(*(*a)[1].as_string()) + ", not " +
                                           quoted_value(from) + ": someone else moved it; stopped");
  };

  Result<std::vector<RespValue>> got = channel.run({{"GET", key}});
  if (!got.ok()) return got.error();
  if ((*got)[0].is_error()) return reply_error((*got)[0], "GET layout");
  const std::optional<std::string> record =
      (*got)[0].is_nil() ? std::nullopt
                         : std::optional<std::string>((*got)[0].as_string().value_or(""));
  LayoutMigration out;
  if (write_layout(record) == KeyLayout::kV2) {
    out.already_v2 = true;
    out.ready_record = *record;
    return out;
  }
  const bool resuming = record && starts_with(*record, kLayoutV2FillingPrefix);
  if (write_layout(record) != KeyLayout::kV1 && !resuming) {
    return unknown_layout_error(key, record.value_or(""), "migrate-layout");
  }
  if (resuming) {
    out.filling_record = *record;
    say("the record says " + *record + ": a migration was cut short; copying again");
  } else {
    out.filling_record = layout_record_value(KeyLayout::kV2, "filling", impl_->options.now_ms());
    if (Status s = move(record.value_or(""), out.filling_record); !s.ok()) return s.error();
    say("layout record " + key + " = " + out.filling_record +
        ": readers read v1, agents stop writing at their next store check");
  }
  if (options.settle_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options.settle_ms));
  }

  Result<RedisKeys> v2 = keys_for_layout(impl_->keys.ns(), KeyLayout::kV2);
  if (!v2.ok()) return v2.error();
  LayoutCopyIo io;
  io.source = [&](const RedisCommand& c) -> Result<RespValue> {
    Result<std::vector<RespValue>> r = channel.run({c});
    if (!r.ok()) return r.error();
    return std::move((*r)[0]);
  };
  io.source_batch = [&](const std::vector<RedisCommand>& commands) {
    return each_reply(channel.run(commands), commands.size());
  };
  io.dest = [&](const std::vector<RedisCommand>& commands) {
    return each_reply(channel.run_spread(commands), commands.size());
  };
  const int64_t started = steady_ms();
  Result<LayoutCopyStats> copied = copy_namespace_to_v2(impl_->keys, *v2, io);
  if (!copied.ok()) {
    return Error(copied.error().code,
                 "migrate-layout: the copy stopped (the record stays " + out.filling_record +
                     "; run it again to copy again): " + copied.error().message);
  }
  out.copy = std::move(copied).value();
  out.copy_ms = steady_ms() - started;
  say("copied " + std::to_string(out.copy.keys_seen) + " keys in " + std::to_string(out.copy_ms) +
      " ms");
  out.ready_record = layout_record_value(KeyLayout::kV2, "ready", impl_->options.now_ms());
  if (Status s = move(out.filling_record, out.ready_record); !s.ok()) return s.error();
  impl_->layout_gate->seen(out.ready_record);
  say("layout record " + key + " = " + out.ready_record +
      ": readers read v2 from their next read; agents write it once restarted");
  return out;
}

Result<LayoutCleanup> RedisStore::cleanup_layout_v1(int64_t min_age_ms) {
  if (impl_->v2()) {
    return Error(ErrorCode::kInvalidArgument, "cleanup-v1: open the store as a v1 store");
  }
  RedisChannel& channel = static_cast<LayoutGatedChannel&>(*impl_->main).inner();
  const std::string key = impl_->keys.layout();
  Result<std::vector<RespValue>> got = channel.run({{"GET", key}});
  if (!got.ok()) return got.error();
  if ((*got)[0].is_error()) return reply_error((*got)[0], "GET layout");
  const std::optional<std::string> record =
      (*got)[0].is_nil() ? std::nullopt
                         : std::optional<std::string>((*got)[0].as_string().value_or(""));
  Result<LayoutRecord> parsed =
      record ? parse_layout_record(*record) : Result<LayoutRecord>(Error(ErrorCode::kNotFound, ""));
  if (write_layout(record) != KeyLayout::kV2 || !parsed.ok()) {
    return Error(ErrorCode::kConflict,
                 "cleanup-v1: the layout record " + key + " is " +
                     quoted_value(record.value_or("")) +
                     ", not v2:ready: the v1 keys are the namespace's data; nothing deleted");
  }
  const int64_t age = impl_->options.now_ms() - parsed->at_ms;
  if (age < min_age_ms) {
    return Error(ErrorCode::kConflict,
                 "cleanup-v1: the namespace switched to v2 " + std::to_string(age) +
                     " ms ago; wait until " + std::to_string(min_age_ms) +
                     " ms have passed (reads under way at the switch); nothing deleted");
  }
  Result<RedisKeys> v2 = keys_for_layout(impl_->keys.ns(), KeyLayout::kV2);
  if (!v2.ok()) return v2.error();
  LayoutCleanup out;
  std::string cursor = "0";
  do {
    // SCAN on the node of the v1 namespace's slot (a cluster's ClusterChannel sends it there).
    Result<std::vector<RespValue>> r = channel.run(
        {{"SCAN", cursor, "MATCH", "quiver:{" + impl_->keys.ns() + "}:*", "COUNT", "500"}});
    if (!r.ok()) return r.error();
    if ((*r)[0].is_error()) return reply_error((*r)[0], "SCAN");
    std::vector<std::string> found;
    std::set<std::string> seen;
    Result<std::string> next = take_scan_page((*r)[0], found, seen);
    if (!next.ok()) return next.error();
    cursor = *next;
    RedisCommand unlink = {"UNLINK"};
    for (const std::string& k : found) {
      if (v2->parse(k).ok()) {
        ++out.kept;  // a name v2 keeps (namespace, layout, catalog, audit, OAuth, census)
      } else {
        unlink.push_back(k);
      }
    }
    if (unlink.size() > 1) {
      Result<std::vector<RespValue>> d = channel.run({unlink});
      if (!d.ok()) return d.error();
      if ((*d)[0].is_error()) return reply_error((*d)[0], "UNLINK");
      out.deleted += (*d)[0].as_int().value_or(0);
    }
  } while (cursor != "0");
  return out;
}

Result<StoreLayout> RedisStore::read_layout() {
  // Key layout v2: agents mark every shard's `call-agents` with the same value; shard 0's says it.
  const bool v2 = writes_v2(impl_->keys);
  Result<std::string> agents = v2 ? impl_->keys.call_agents(0) : impl_->keys.call_agents();
  if (!agents.ok()) return agents.error();
  const std::vector<RedisCommand> reads = {
      {"GET", impl_->keys.layout()},
      {"GET", *agents},
      {"PTTL", *agents},
      agents_census_read(impl_->keys, impl_->options.now_ms(), kAgentCensusWindowMs)};
  Result<std::vector<RespValue>> r =
      v2 ? run_spread_checked(*impl_->main, reads, "GET layout") : impl_->many(reads, "GET layout");
  if (!r.ok()) return r.error();
  StoreLayout out;
  out.key = impl_->keys.layout();
  for (int i : {0, 1}) {
    const RespValue& v = (*r)[i];
    if (v.is_nil()) continue;
    std::optional<std::string_view> text = v.as_string();
    if (!text) return Error(ErrorCode::kInvalidReply, "redis GET layout: not a string");
    (i == 0 ? out.record : out.call_agents) = std::string(*text);
  }
  std::optional<int64_t> ttl = (*r)[2].as_int();
  if (!ttl) return Error(ErrorCode::kInvalidReply, "redis PTTL call-agents: not an integer");
  out.call_agents_ttl_ms = out.call_agents ? std::max<int64_t>(*ttl, 0) : 0;
  Result<std::vector<CensusEntry>> census = decode_agents_census((*r)[3]);
  if (!census.ok()) return census.error();
  out.census = std::move(*census);
  return out;
}

}  // namespace quiver
