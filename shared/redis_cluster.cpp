#include "shared/redis_cluster.h"

#include <algorithm>
#include <array>
#include <utility>

#include "shared/ascii.h"
#include "shared/numbers.h"

namespace quiver {
namespace {

constexpr std::array<uint16_t, 256> make_crc16_table() {
  std::array<uint16_t, 256> table{};
  for (int i = 0; i < 256; ++i) {
    auto crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
    table[static_cast<std::size_t>(i)] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kCrc16Table = make_crc16_table();

Error invalid_reply(std::string message) {
  return Error(ErrorCode::kInvalidReply, "redis cluster: " + std::move(message));
}

// ---- command keys ------------------------------------------------------------------------------

// Commands Quiver (or a host) sends that name no key: they go to any node.
bool is_keyless(std::string_view name) {
  static constexpr std::string_view kKeyless[] = {
      "PING",      "ECHO",     "INFO", "TIME",     "SCRIPT", "CLUSTER",  "MULTI",     "EXEC",
      "DISCARD",   "ASKING",   "AUTH", "HELLO",    "CLIENT", "CONFIG",   "DBSIZE",    "FLUSHALL",
      "FLUSHDB",   "COMMAND",  "WAIT", "FUNCTION", "SCAN",   "READONLY", "READWRITE", "SELECT",
      "RANDOMKEY", "LASTSAVE", "ROLE", "QUIT",     "RESET",  "MEMORY",   "LATENCY",   "SLOWLOG"};
  for (std::string_view k : kKeyless) {
    if (ascii_iequals(name, k)) return true;
  }
  return false;
}

// Every argument from argv[1] is a key.
bool all_args_are_keys(std::string_view name) {
  static constexpr std::string_view kAll[] = {"DEL",    "UNLINK", "EXISTS", "TOUCH",   "MGET",
                                              "SINTER", "SUNION", "SDIFF",  "PFCOUNT", "WATCH"};
  for (std::string_view k : kAll) {
    if (ascii_iequals(name, k)) return true;
  }
  return false;
}

bool is_script_call(std::string_view name) {
  static constexpr std::string_view kScripts[] = {"EVAL",       "EVALSHA", "EVAL_RO",
                                                  "EVALSHA_RO", "FCALL",   "FCALL_RO"};
  for (std::string_view k : kScripts) {
    if (ascii_iequals(name, k)) return true;
  }
  return false;
}

}  // namespace

bool redis_command_changes_nothing(const RedisCommand& argv) {
  static constexpr std::string_view kReads[] = {
      "GET",    "MGET",      "STRLEN",  "EXISTS",    "TYPE",        "TTL",           "PTTL",
      "HGET",   "HMGET",     "HGETALL", "HLEN",      "HSTRLEN",     "HEXISTS",       "SMEMBERS",
      "SSCAN",  "SISMEMBER", "SCARD",   "ZRANGE",    "ZRANGEBYLEX", "ZRANGEBYSCORE", "ZMSCORE",
      "ZSCORE", "ZCARD",     "XRANGE",  "XREVRANGE", "XREAD",       "XLEN",          "XINFO",
      "SCAN",   "PING",      "TIME",    "DBSIZE",    "EVAL_RO",     "EVALSHA_RO",    "FCALL_RO"};
  if (argv.empty()) return false;
  for (std::string_view r : kReads) {
    if (ascii_iequals(argv[0], r)) return true;
  }
  return false;
}

namespace {

// ---- flat maps (RESP2 arrays of alternating keys and values; RESP3 maps as RespValue holds them)

const RespValue* map_get(const std::vector<RespValue>& flat, std::string_view key) {
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) {
    std::optional<std::string_view> k = flat[i].as_string();
    if (k && *k == key) return &flat[i + 1];
  }
  return nullptr;
}

bool is_flat_map(const RespValue& v) {
  const std::vector<RespValue>* e = v.as_array();
  if (e == nullptr || e->size() % 2 != 0) return false;
  for (std::size_t i = 0; i < e->size(); i += 2) {
    if (!(*e)[i].as_string()) return false;
  }
  return true;
}

std::optional<int64_t> number_in(const RespValue* v, int64_t min, int64_t max) {
  if (v == nullptr) return std::nullopt;
  std::optional<int64_t> n = v->as_int();
  if (!n || *n < min || *n > max) return std::nullopt;
  return n;
}

// A host we may dial: bounded, no space or control byte (it goes into logs and errors).
Status check_host(std::string_view host, std::size_t max_bytes) {
  if (host.size() > max_bytes) return invalid_reply("a node's host is too long");
  for (char c : host) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return invalid_reply("a node's host holds a control character or a space");
    }
  }
  return Status::Ok();
}

// An announced host: empty, "?" or nil means "the host you asked" (Redis's unknown endpoint).
Result<std::string> announced_host(const RespValue* v, std::string_view answered_host,
                                   const ClusterParseLimits& limits) {
  if (v == nullptr || v->is_nil()) return std::string(answered_host);
  std::optional<std::string_view> s = v->as_string();
  if (!s) return invalid_reply("a node's host is not a string");
  if (s->empty() || *s == "?") return std::string(answered_host);
  if (Status ok = check_host(*s, limits.max_host_bytes); !ok.ok()) return ok.error();
  return std::string(*s);
}

Result<ClusterSlotRange> slot_range(const RespValue* first, const RespValue* last) {
  std::optional<int64_t> a = number_in(first, 0, kClusterSlotCount - 1);
  std::optional<int64_t> b = number_in(last, 0, kClusterSlotCount - 1);
  if (!a || !b) return invalid_reply("a slot range is not two slots in 0..16383");
  if (*a > *b) return invalid_reply("a slot range ends before it starts");
  return ClusterSlotRange{static_cast<uint16_t>(*a), static_cast<uint16_t>(*b)};
}

// One node of CLUSTER SHARDS: a flat map of id, port, tls-port, ip, endpoint, hostname, role,
// replication-offset, health. Returns the node and whether it is the shard's master.
Result<std::pair<ClusterNode, bool>> shards_node(const RespValue& v, std::string_view answered_host,
                                                 const ClusterParseLimits& limits,
                                                 ClusterPort wanted) {
  if (!is_flat_map(v)) return invalid_reply("a CLUSTER SHARDS node is not a map");
  const std::vector<RespValue>& m = *v.as_array();
  ClusterNode node;
  const RespValue* endpoint = map_get(m, "endpoint");
  const RespValue* ip = map_get(m, "ip");
  const RespValue* chosen = endpoint;
  if (chosen == nullptr || chosen->is_nil() || chosen->as_string() == std::string_view() ||
      chosen->as_string() == std::string_view("?")) {
    chosen = ip;
  }
  Result<std::string> host = announced_host(chosen, answered_host, limits);
  if (!host.ok()) return host.error();
  node.host = std::move(*host);
  // The port of the client's kind first; the other when the node announces only that one.
  const char* first = wanted == ClusterPort::kTls ? "tls-port" : "port";
  const char* second = wanted == ClusterPort::kTls ? "port" : "tls-port";
  const RespValue* port = map_get(m, first);
  if (port == nullptr) port = map_get(m, second);
  std::optional<int64_t> p = number_in(port, 1, 65535);
  if (!p) return invalid_reply("a CLUSTER SHARDS node has no port in 1..65535");
  node.port = static_cast<int>(*p);
  if (const RespValue* id = map_get(m, "id")) {
    std::optional<std::string_view> s = id->as_string();
    if (!s || s->size() > limits.max_host_bytes) return invalid_reply("a node id is malformed");
    node.id = std::string(*s);
  }
  if (const RespValue* health = map_get(m, "health")) {
    node.healthy = health->as_string() == std::string_view("online");
  }
  const RespValue* role = map_get(m, "role");
  std::optional<std::string_view> r = role != nullptr ? role->as_string() : std::nullopt;
  if (!r) return invalid_reply("a CLUSTER SHARDS node has no role");
  return std::make_pair(std::move(node), *r == "master");
}

// One node of CLUSTER SLOTS: [host, port, id?, metadata?].
Result<ClusterNode> slots_node(const RespValue& v, std::string_view answered_host,
                               const ClusterParseLimits& limits) {
  const std::vector<RespValue>* e = v.as_array();
  if (e == nullptr || e->size() < 2)
    return invalid_reply("a CLUSTER SLOTS node is not [host, port]");
  ClusterNode node;
  Result<std::string> host = announced_host(&(*e)[0], answered_host, limits);
  if (!host.ok()) return host.error();
  node.host = std::move(*host);
  std::optional<int64_t> p = number_in(&(*e)[1], 1, 65535);
  if (!p) return invalid_reply("a CLUSTER SLOTS node has no port in 1..65535");
  node.port = static_cast<int>(*p);
  if (e->size() >= 3) {
    std::optional<std::string_view> id = (*e)[2].as_string();
    if (!id || id->size() > limits.max_host_bytes) return invalid_reply("a node id is malformed");
    node.id = std::string(*id);
  }
  return node;
}

Result<std::pair<uint16_t, ClusterNode>> slot_and_address(std::string_view rest,
                                                          std::string_view answered_host) {
  // "<slot> <host>:<port>", host possibly empty or an IPv6 literal (split at the last ':').
  std::size_t space = rest.find(' ');
  if (space == std::string_view::npos) return invalid_reply("a redirect without an address");
  std::optional<int64_t> slot = parse_decimal_in(rest.substr(0, space), 0, kClusterSlotCount - 1);
  if (!slot) return invalid_reply("a redirect names no slot in 0..16383");
  std::string_view address = rest.substr(space + 1);
  std::size_t end = address.find(' ');
  if (end != std::string_view::npos) address = address.substr(0, end);
  std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return invalid_reply("a redirect address has no port");
  std::optional<int64_t> port = parse_decimal_in(address.substr(colon + 1), 1, 65535);
  if (!port) return invalid_reply("a redirect address has no port in 1..65535");
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (Status ok = check_host(host, ClusterParseLimits{}.max_host_bytes); !ok.ok()) {
    return ok.error();
  }
  ClusterNode node;
  node.host = host.empty() || host == "?" ? std::string(answered_host) : std::string(host);
  node.port = static_cast<int>(*port);
  return std::make_pair(static_cast<uint16_t>(*slot), std::move(node));
}

bool error_word(std::string_view message, std::string_view word) {
  return message.size() >= word.size() && message.substr(0, word.size()) == word &&
         (message.size() == word.size() || message[word.size()] == ' ');
}

ClusterStep give_up(std::string message) {
  ClusterStep step;
  step.action = ClusterStep::Action::kGiveUp;
  step.error = Error(ErrorCode::kStoreUnavailable, "redis cluster: " + std::move(message));
  return step;
}

}  // namespace

// ---- slots -------------------------------------------------------------------------------------

uint16_t crc16_xmodem(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

std::string_view cluster_hash_tag(std::string_view key) {
  std::size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

uint16_t cluster_key_slot(std::string_view key) {
  return static_cast<uint16_t>(crc16_xmodem(cluster_hash_tag(key)) & (kClusterSlotCount - 1));
}

Result<std::vector<std::string_view>> command_keys(const RedisCommand& argv) {
  if (argv.empty()) return Error(ErrorCode::kInvalidArgument, "redis cluster: an empty command");
  const std::string& name = argv[0];
  std::vector<std::string_view> keys;
  if (is_keyless(name)) return keys;
  if (is_script_call(name)) {
    if (argv.size() < 3) {
      return Error(ErrorCode::kInvalidArgument, "redis cluster: " + name + " without numkeys");
    }
    std::optional<uint64_t> n = parse_decimal_u64(argv[2]);
    if (!n || *n > argv.size() - 3) {
      return Error(ErrorCode::kInvalidArgument,
                   "redis cluster: " + name + "'s numkeys is not a count of its arguments");
    }
    for (std::size_t i = 0; i < *n; ++i) keys.emplace_back(argv[3 + i]);
    return keys;
  }
  if (all_args_are_keys(name)) {
    for (std::size_t i = 1; i < argv.size(); ++i) keys.emplace_back(argv[i]);
    return keys;
  }
  if (ascii_iequals(name, "MSET") || ascii_iequals(name, "MSETNX")) {
    for (std::size_t i = 1; i < argv.size(); i += 2) keys.emplace_back(argv[i]);
    return keys;
  }
  // A subcommand first: XGROUP CREATE <key> ..., XINFO GROUPS <key> (HELP names none).
  if (ascii_iequals(name, "XGROUP") || ascii_iequals(name, "XINFO")) {
    if (argv.size() >= 3) keys.emplace_back(argv[2]);
    return keys;
  }
  if (ascii_iequals(name, "XREAD") || ascii_iequals(name, "XREADGROUP")) {
    for (std::size_t i = 1; i < argv.size(); ++i) {
      if (ascii_iequals(argv[i], "STREAMS")) {
        std::size_t rest = argv.size() - i - 1;
        if (rest == 0 || rest % 2 != 0) break;
        for (std::size_t k = 0; k < rest / 2; ++k) keys.emplace_back(argv[i + 1 + k]);
        return keys;
      }
    }
    return Error(ErrorCode::kInvalidArgument,
                 "redis cluster: " + name + " without STREAMS and as many ids as streams");
  }
  if (argv.size() >= 2) keys.emplace_back(argv[1]);
  return keys;
}

Result<std::optional<uint16_t>> command_slot(const RedisCommand& argv) {
  Result<std::vector<std::string_view>> keys = command_keys(argv);
  if (!keys.ok()) return keys.error();
  std::optional<uint16_t> slot;
  for (std::string_view k : *keys) {
    uint16_t s = cluster_key_slot(k);
    if (slot && *slot != s) {
      return Error(ErrorCode::kInvalidArgument,
                   "redis cluster: " + argv[0] + " names keys in different slots (CROSSSLOT)");
    }
    slot = s;
  }
  return slot;
}

// ---- nodes and the map -------------------------------------------------------------------------

std::string ClusterNode::address() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

ClusterSlotMap::ClusterSlotMap() : owner_(kClusterSlotCount, -1) {}

Result<ClusterSlotMap> ClusterSlotMap::from_shard_list(std::vector<ClusterShard> shards) {
  ClusterSlotMap map;
  if (shards.size() > 32000) {
    return Error(ErrorCode::kInvalidArgument, "redis cluster: too many shards");
  }
  for (std::size_t i = 0; i < shards.size(); ++i) {
    for (const ClusterSlotRange& r : shards[i].ranges) {
      if (r.first > r.last || r.last >= kClusterSlotCount) {
        return Error(ErrorCode::kInvalidArgument, "redis cluster: a slot range out of bounds");
      }
      for (int s = r.first; s <= r.last; ++s) {
        if (map.owner_[static_cast<std::size_t>(s)] >= 0) {
          return Error(ErrorCode::kInvalidArgument,
                       "redis cluster: slot " + std::to_string(s) + " is claimed by two shards");
        }
        map.owner_[static_cast<std::size_t>(s)] = static_cast<int16_t>(i);
        ++map.served_;
      }
    }
  }
  map.shards_ = std::move(shards);
  return map;
}

Result<ClusterSlotMap> ClusterSlotMap::from_shards(const RespValue& reply,
                                                   std::string_view answered_host,
                                                   const ClusterParseLimits& limits,
                                                   ClusterPort port) {
  if (reply.is_error()) return invalid_reply("CLUSTER SHARDS refused: " + reply.str);
  const std::vector<RespValue>* list = reply.as_array();
  if (list == nullptr) return invalid_reply("CLUSTER SHARDS did not answer an array");
  if (list->size() > limits.max_shards)
    return invalid_reply("CLUSTER SHARDS lists too many shards");
  std::vector<ClusterShard> shards;
  std::size_t total_ranges = 0;
  for (const RespValue& s : *list) {
    if (!is_flat_map(s)) return invalid_reply("a CLUSTER SHARDS entry is not a map");
    const RespValue* slots = map_get(*s.as_array(), "slots");
    const RespValue* nodes = map_get(*s.as_array(), "nodes");
    if (slots == nullptr || !slots->is_array() || nodes == nullptr || !nodes->is_array()) {
      return invalid_reply("a CLUSTER SHARDS entry lacks `slots` or `nodes`");
    }
    const std::vector<RespValue>& bounds = *slots->as_array();
    if (bounds.size() % 2 != 0) return invalid_reply("a shard's `slots` is not start/end pairs");
    total_ranges += bounds.size() / 2;
    if (total_ranges > limits.max_ranges) return invalid_reply("too many slot ranges");
    if (nodes->as_array()->size() > limits.max_nodes_per_shard) {
      return invalid_reply("a shard lists too many nodes");
    }
    ClusterShard shard;
    for (std::size_t i = 0; i < bounds.size(); i += 2) {
      Result<ClusterSlotRange> r = slot_range(&bounds[i], &bounds[i + 1]);
      if (!r.ok()) return r.error();
      shard.ranges.push_back(*r);
    }
    bool has_master = false;
    for (const RespValue& n : *nodes->as_array()) {
      auto node = shards_node(n, answered_host, limits, port);
      if (!node.ok()) return node.error();
      if (node->second) {
        if (has_master) return invalid_reply("a shard names two masters");
        has_master = true;
        shard.master = std::move(node->first);
      } else {
        shard.replicas.push_back(std::move(node->first));
      }
    }
    // A shard without slots (an emptied master, a failed one whose replica took over) or without
    // a master (mid-failover) serves nothing: the slots stay unserved until the next refresh.
    if (!has_master || shard.ranges.empty()) continue;
    shards.push_back(std::move(shard));
  }
  Result<ClusterSlotMap> map = from_shard_list(std::move(shards));
  if (!map.ok()) return Error(ErrorCode::kInvalidReply, map.error().message);
  return map;
}

Result<ClusterSlotMap> ClusterSlotMap::from_slots(const RespValue& reply,
                                                  std::string_view answered_host,
                                                  const ClusterParseLimits& limits) {
  if (reply.is_error()) return invalid_reply("CLUSTER SLOTS refused: " + reply.str);
  const std::vector<RespValue>* list = reply.as_array();
  if (list == nullptr) return invalid_reply("CLUSTER SLOTS did not answer an array");
  if (list->size() > limits.max_ranges) return invalid_reply("too many slot ranges");
  std::vector<ClusterShard> shards;
  for (const RespValue& entry : *list) {
    const std::vector<RespValue>* e = entry.as_array();
    if (e == nullptr || e->size() < 3) {
      return invalid_reply("a CLUSTER SLOTS entry is not [start, end, master, replicas...]");
    }
    if (e->size() - 3 > limits.max_nodes_per_shard) return invalid_reply("too many replicas");
    Result<ClusterSlotRange> r = slot_range(&(*e)[0], &(*e)[1]);
    if (!r.ok()) return r.error();
    Result<ClusterNode> master = slots_node((*e)[2], answered_host, limits);
    if (!master.ok()) return master.error();
    std::vector<ClusterNode> replicas;
    for (std::size_t i = 3; i < e->size(); ++i) {
      Result<ClusterNode> replica = slots_node((*e)[i], answered_host, limits);
      if (!replica.ok()) return replica.error();
      replicas.push_back(std::move(*replica));
    }
    // One entry per range: ranges of one master make one shard.
    auto same = std::find_if(shards.begin(), shards.end(),
                             [&](const ClusterShard& s) { return s.master.same_address(*master); });
    if (same == shards.end()) {
      if (shards.size() >= limits.max_shards) return invalid_reply("too many shards");
      shards.push_back(ClusterShard{{}, std::move(*master), {}});
      same = shards.end() - 1;
    }
    same->ranges.push_back(*r);
    same->replicas = std::move(replicas);
  }
  Result<ClusterSlotMap> map = from_shard_list(std::move(shards));
  if (!map.ok()) return Error(ErrorCode::kInvalidReply, map.error().message);
  return map;
}

const ClusterShard* ClusterSlotMap::shard_for_slot(uint16_t slot) const {
  if (slot >= kClusterSlotCount) return nullptr;
  int16_t i = owner_[slot];
  return i < 0 ? nullptr : &shards_[static_cast<std::size_t>(i)];
}

void ClusterSlotMap::apply_moved(uint16_t slot, const ClusterNode& node) {
  if (slot >= kClusterSlotCount) return;
  auto it = std::find_if(shards_.begin(), shards_.end(),
                         [&](const ClusterShard& s) { return s.master.same_address(node); });
  if (it == shards_.end()) {
    if (shards_.size() >= 32000) return;  // bounded; the next refresh rebuilds the map
    ClusterShard shard;
    shard.master = node;
    shard.master.healthy = true;
    shards_.push_back(std::move(shard));
    it = shards_.end() - 1;
  }
  if (owner_[slot] < 0) ++served_;
  owner_[slot] = static_cast<int16_t>(it - shards_.begin());
  it->ranges.push_back({slot, slot});
}

std::vector<ClusterNode> ClusterSlotMap::masters() const {
  std::vector<ClusterNode> out;
  std::vector<bool> serving(shards_.size(), false);
  for (int16_t o : owner_) {
    if (o >= 0) serving[static_cast<std::size_t>(o)] = true;
  }
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (serving[i]) out.push_back(shards_[i].master);
  }
  return out;
}

// ---- replies -----------------------------------------------------------------------------------

const char* cluster_redirect_kind_name(ClusterRedirect::Kind kind) {
  switch (kind) {
    case ClusterRedirect::Kind::kNone:
      return "none";
    case ClusterRedirect::Kind::kMoved:
      return "moved";
    case ClusterRedirect::Kind::kAsk:
      return "ask";
    case ClusterRedirect::Kind::kTryAgain:
      return "tryagain";
    case ClusterRedirect::Kind::kClusterDown:
      return "clusterdown";
    case ClusterRedirect::Kind::kLoading:
      return "loading";
    case ClusterRedirect::Kind::kReadOnly:
      return "readonly";
    case ClusterRedirect::Kind::kMasterDown:
      return "masterdown";
  }
  return "unknown";
}

const char* cluster_action_name(ClusterStep::Action action) {
  switch (action) {
    case ClusterStep::Action::kUseReply:
      return "use_reply";
    case ClusterStep::Action::kRetryAt:
      return "retry_at";
    case ClusterStep::Action::kAskAt:
      return "ask_at";
    case ClusterStep::Action::kRefreshThenRetry:
      return "refresh_then_retry";
    case ClusterStep::Action::kBackoffThenRetry:
      return "backoff_then_retry";
    case ClusterStep::Action::kGiveUp:
      return "give_up";
  }
  return "unknown";
}

Result<ClusterRedirect> parse_cluster_redirect(const RespValue& reply,
                                               std::string_view answered_host) {
  ClusterRedirect out;
  if (!reply.is_error()) return out;
  std::string_view m = reply.str;
  using Kind = ClusterRedirect::Kind;
  if (error_word(m, "MOVED") || error_word(m, "ASK")) {
    const bool moved = m[0] == 'M';
    const std::size_t skip = moved ? 6 : 4;  // "MOVED " or "ASK "
    auto where =
        slot_and_address(m.size() > skip ? m.substr(skip) : std::string_view(), answered_host);
    if (!where.ok()) return where.error();
    out.kind = moved ? Kind::kMoved : Kind::kAsk;
    out.slot = where->first;
    out.node = std::move(where->second);
    return out;
  }
  if (error_word(m, "TRYAGAIN")) out.kind = Kind::kTryAgain;
  if (error_word(m, "CLUSTERDOWN")) out.kind = Kind::kClusterDown;
  if (error_word(m, "LOADING")) out.kind = Kind::kLoading;
  if (error_word(m, "READONLY")) out.kind = Kind::kReadOnly;
  if (error_word(m, "MASTERDOWN")) out.kind = Kind::kMasterDown;
  return out;
}

bool cluster_reply_is_split_slot(const RespValue& reply) {
  if (!reply.is_error()) return false;
  Result<ClusterRedirect> r = parse_cluster_redirect(reply, {});
  return r.ok() && r->kind == ClusterRedirect::Kind::kTryAgain;
}

int64_t cluster_backoff_ms(int retry, const ClusterRetryPolicy& policy) {
  int64_t ms = std::max<int64_t>(policy.backoff_initial_ms, 0);
  for (int i = 1; i < retry && ms < policy.backoff_max_ms; ++i) ms *= 2;
  return std::min(ms, policy.backoff_max_ms);
}

ClusterStep decide_cluster_step(const RespValue& reply, std::string_view answered_host, int attempt,
                                int redirects, const ClusterRetryPolicy& policy) {
  Result<ClusterRedirect> r = parse_cluster_redirect(reply, answered_host);
  ClusterStep step;
  if (!r.ok()) {
    step.action = ClusterStep::Action::kGiveUp;
    step.error = Error(r.error().code, r.error().message + " (" + reply.str.substr(0, 80) + ")");
    return step;
  }
  using Kind = ClusterRedirect::Kind;
  if (r->kind == Kind::kNone) return step;
  const std::string said = reply.str.substr(0, 120);
  // The migration's answers (TRYAGAIN while it lasts, the ASK or MOVED that follow it) may wait it
  // out; redirects keep their own budget.
  const bool migration =
      r->kind == Kind::kTryAgain || r->kind == Kind::kAsk || r->kind == Kind::kMoved;
  const int budget =
      migration ? std::max(policy.max_attempts, policy.max_tryagain_attempts) : policy.max_attempts;
  if (attempt >= budget) {
    return give_up("no answer after " + std::to_string(attempt) + " attempts (last: " + said + ")");
  }
  switch (r->kind) {
    case Kind::kMoved:
    case Kind::kAsk:
      if (redirects >= policy.max_redirects) {
        return give_up("slot " + std::to_string(r->slot) + " still redirected after " +
                       std::to_string(redirects) + " redirects (last: " + said + ")");
      }
      step.action =
          r->kind == Kind::kMoved ? ClusterStep::Action::kRetryAt : ClusterStep::Action::kAskAt;
      step.node = std::move(r->node);
      step.slot = r->slot;
      return step;
    case Kind::kReadOnly:
      step.action = ClusterStep::Action::kRefreshThenRetry;
      step.refresh_map = true;
      return step;
    case Kind::kClusterDown:
    case Kind::kMasterDown:
      step.refresh_map = true;
      [[fallthrough]];
    case Kind::kTryAgain:
    case Kind::kLoading:
      step.action = ClusterStep::Action::kBackoffThenRetry;
      step.backoff_ms = cluster_backoff_ms(attempt, policy);
      return step;
    case Kind::kNone:
      break;
  }
  return step;
}

ClusterStep hold_ask_for_round(ClusterStep step, const std::vector<RedisCommand>& round,
                               int attempt, const ClusterRetryPolicy& policy) {
  if (step.action != ClusterStep::Action::kAskAt) return step;
  const bool followable = std::none_of(round.begin(), round.end(), [](const RedisCommand& c) {
    return !c.empty() && (ascii_iequals(c[0], "MULTI") || is_script_call(c[0]));
  });
  if (followable) return step;
  ClusterStep wait;
  wait.action = ClusterStep::Action::kBackoffThenRetry;
  wait.slot = step.slot;
  wait.backoff_ms = cluster_backoff_ms(attempt, policy);
  return wait;
}

ClusterStep cluster_step_after_io_failure(std::string_view why, int attempt,
                                          const ClusterRetryPolicy& policy) {
  if (why.find(kTlsHandshakeFailed) != std::string_view::npos) {
    return give_up("not retried: " + std::string(why));
  }
  if (attempt >= policy.max_attempts) {
    return give_up("no node answered after " + std::to_string(attempt) +
                   " attempts (last: " + std::string(why) + ")");
  }
  ClusterStep step;
  step.action = ClusterStep::Action::kBackoffThenRetry;
  step.refresh_map = true;
  step.backoff_ms = cluster_backoff_ms(attempt, policy);
  return step;
}

// ---- planning ----------------------------------------------------------------------------------

ClusterPlan plan_cluster_batch(const ClusterSlotMap& map,
                               const std::vector<ClusterRequest>& requests,
                               const ClusterPlanOptions& options) {
  ClusterPlan plan;
  // A batch is a node in a role: a map that names one address as a master and as a replica (in
  // the middle of a failover) never puts a write on a READONLY connection.
  auto find_batch = [&](const ClusterNode& node, bool replica) -> ClusterNodeBatch* {
    for (ClusterNodeBatch& b : plan.batches) {
      if (b.replica == replica && b.node.same_address(node)) return &b;
    }
    return nullptr;
  };
  auto room = [&] { return options.max_nodes == 0 || plan.batches.size() < options.max_nodes; };
  // Only a command without a key needs the list of masters (a walk over every slot): found once,
  // when the first one comes.
  std::optional<std::vector<ClusterNode>> masters_cache;
  auto masters = [&]() -> const std::vector<ClusterNode>& {
    if (!masters_cache) masters_cache = map.masters();
    return *masters_cache;
  };

  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ClusterRequest& req = requests[i];
    Result<std::optional<uint16_t>> slot = command_slot(req.argv);
    if (!slot.ok()) {
      plan.refused.emplace_back(i, slot.error());
      continue;
    }
    if (!slot->has_value()) {  // no key: any master, preferably one already in the plan
      auto in_plan = std::find_if(plan.batches.begin(), plan.batches.end(),
                                  [](const ClusterNodeBatch& b) { return !b.replica; });
      if (in_plan != plan.batches.end()) {
        in_plan->indices.push_back(i);
      } else if (masters().empty()) {
        plan.refused.emplace_back(
            i, Error(ErrorCode::kStoreUnavailable, "redis cluster: no node serves any slot"));
      } else if (room()) {
        plan.batches.push_back(ClusterNodeBatch{masters().front(), false, {i}});
      } else {
        plan.deferred.push_back(i);
      }
      continue;
    }
    const ClusterShard* shard = map.shard_for_slot(**slot);
    if (shard == nullptr) {
      plan.refused.emplace_back(
          i, Error(ErrorCode::kStoreUnavailable,
                   "redis cluster: no node serves slot " + std::to_string(**slot) +
                       " (the cluster is down or the map is incomplete)"));
      continue;
    }
    // Candidates, best first: for a read that may use a replica, the healthy replicas (rotated by
    // `spread` so reads share them), then the master; otherwise the master alone.
    std::vector<std::pair<const ClusterNode*, bool>> candidates;
    if (req.read_only && options.replica_reads) {
      std::vector<const ClusterNode*> healthy;
      for (const ClusterNode& r : shard->replicas) {
        if (r.healthy) healthy.push_back(&r);
      }
      for (std::size_t k = 0; k < healthy.size(); ++k) {
        candidates.emplace_back(healthy[(options.spread + k) % healthy.size()], true);
      }
    }
    candidates.emplace_back(&shard->master, false);
    // A node already in the plan costs no socket: take the first such candidate.
    ClusterNodeBatch* chosen = nullptr;
    for (const auto& c : candidates) {
      if ((chosen = find_batch(*c.first, c.second)) != nullptr) break;
    }
    if (chosen == nullptr && room()) {
      plan.batches.push_back(
          ClusterNodeBatch{*candidates.front().first, candidates.front().second, {}});
      chosen = &plan.batches.back();
    }
    if (chosen == nullptr) {
      plan.deferred.push_back(i);
      continue;
    }
    chosen->indices.push_back(i);
  }
  return plan;
}

std::vector<RedisCommand> cluster_connection_preamble(bool replica) {
  if (replica) return {{"READONLY"}};
  return {};
}

}  // namespace quiver
