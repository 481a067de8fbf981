#include "shared/discovery_spread.h"

#include <algorithm>
#include <array>
#include <utility>

#include "shared/discovery_redis.h"
#include "shared/layout.h"
#include "shared/redis_cluster.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, "discovery read (v2): " + std::move(message));
}

Error bad_reply(const std::string& where, const std::string& what) {
  return Error(ErrorCode::kInvalidReply, "discovery reply (v2): " + where + ": " + what);
}

Status redis_error(const RespValue& reply) {
  return Error(ErrorCode::kStoreUnavailable, "discovery read: Redis error: " + reply.str);
}

// A string reply, or "" for nil (a version never written).
std::optional<std::string> string_or_empty(const RespValue& v) {
  if (v.is_nil()) return std::string();
  if (std::optional<std::string_view> s = v.as_string()) return std::string(*s);
  return std::nullopt;
}

// The credential mode in a flat HGETALL array of a connection record ("" when absent).
std::string credential_mode_of(const RespValue& conn_fields) {
  const std::vector<RespValue>* a = conn_fields.as_array();
  if (a == nullptr) return {};
  for (std::size_t i = 0; i + 1 < a->size(); i += 2) {
    if ((*a)[i].as_string() == std::optional<std::string_view>(redis_field::kCredentialMode)) {
      return std::string((*a)[i + 1].as_string().value_or(""));
    }
  }
  return {};
}

}  // namespace

SpreadDiscoveryRead::SpreadDiscoveryRead(RedisKeys keys, Principal member, SnapshotQuery query)
    : keys_(std::move(keys)),
      member_(member),
      query_(std::move(query)),
      snapshot_(std::move(member)) {}

Result<SpreadDiscoveryRead> SpreadDiscoveryRead::start(const RedisKeys& keys,
                                                       const Principal& member,
                                                       const SnapshotQuery& query) {
  if (member.is_shared()) return invalid("the caller must be a member principal");
  if (query.only && !validate_connection_id(*query.only).ok()) {
    return invalid("`only` is not a connection id");
  }
  if (query.limit == 0 || query.limit > kMaxSnapshotLimit) {
    return invalid("limit must be between 1 and " + std::to_string(kMaxSnapshotLimit));
  }
  if (query.after.size() > kMaxIdLength) return invalid("`after` is too long");
  Result<std::string> grants = keys.grants(member);
  if (!grants.ok()) return grants.error();
  Result<std::string> version = keys.member_version(member);
  if (!version.ok()) return version.error();

  SpreadDiscoveryRead read(keys, member, query);
  read.commands_.push_back({"GET", keys.layout()});
  read.commands_.push_back({"GET", keys.namespace_record()});
  read.commands_.push_back({"GET", std::move(*version)});
  if (query.only) {
    read.commands_.push_back({"HGET", std::move(*grants), *query.only});
  } else {
    read.commands_.push_back({"HGETALL", std::move(*grants)});
  }
  return read;
}

Status SpreadDiscoveryRead::feed(const std::vector<RespValue>& replies) {
  if (done_ || failed_) {
    return Error(ErrorCode::kInternal, "discovery read (v2): fed after it ended");
  }
  if (replies.size() != commands_.size()) {
    failed_ = true;
    return bad_reply("round " + std::to_string(round_),
                     std::to_string(replies.size()) + " replies to " +
                         std::to_string(commands_.size()) + " commands");
  }
  Status s = stage_ == Stage::kGrants    ? feed_grants(replies)
             : stage_ == Stage::kScripts ? feed_reads(replies)
                                         : feed_split(replies);
  if (!s.ok()) failed_ = true;
  return s;
}

Status SpreadDiscoveryRead::feed_grants(const std::vector<RespValue>& replies) {
  for (const RespValue& r : replies) {
    if (r.is_error()) return redis_error(r);
  }
  // The layout record: the keys must be spelled in the layout it names.
  std::optional<std::string_view> layout = replies[0].as_string();
  if (!layout && !replies[0].is_nil())
    return bad_reply("layout record", "neither a string nor nil");
  layout_seen_ = read_layout(layout);
  if (!layout_seen_) {
    return unknown_layout_error(keys_.layout(), *layout, "discovery read");
  }
  if (*layout_seen_ != keys_.key_layout()) {
    return Error(ErrorCode::kStoreUnavailable,
                 std::string("discovery read: the namespace moved to key layout ") +
                     key_layout_name(*layout_seen_) + " while it was read in " +
                     key_layout_name(keys_.key_layout()) + "; read again");
  }
  snapshot_.layout_record = std::string(layout.value_or(""));
  // The namespace record, as discovery_read.lua checks it.
  const std::size_t n = 1;  // replies before the namespace record
  std::optional<std::string_view> record = replies[n].as_string();
  if (!record || record->substr(0, sizeof(kNamespaceReady)) != std::string(kNamespaceReady) + ":") {
    std::string state = "missing";
    if (record) {
      state.clear();
      for (char c : *record) {
        if (c < 'a' || c > 'z') break;
        state += c;
      }
      if (state.empty()) state = "unknown";
    } else if (!replies[n].is_nil()) {
      return bad_reply("namespace record", "neither a string nor nil");
    }
    return *namespace_not_ready(RespValue::array({RespValue::bulk_string(kNamespaceNotReadyTag),
                                                  RespValue::bulk_string(state)}),
                                "discovery read");
  }
  snapshot_.namespace_record = std::string(*record);
  std::optional<std::string> member_version = string_or_empty(replies[n + 1]);
  if (!member_version) return bad_reply("member version", "neither a string nor nil");
  snapshot_.member_version = std::move(*member_version);
  if (snapshot_.member_version.empty()) {
    // Agents write a version for every member they know, one without grants too, and never
    // delete it: none means the member's slot lost its data (or no agent wrote the member yet),
    // and its grants cannot be told from "nothing granted".
    return Error(ErrorCode::kStoreUnavailable,
                 "discovery read: the store holds no version for " + member_.str() +
                     ": the part of the store that keeps its grants lost its data, or no agent "
                     "has written this member yet");
  }

  // The grants: connection id → the credential mode the grant was written with.
  std::vector<std::pair<std::string, std::string>> granted;
  if (query_.only) {
    if (std::optional<std::string_view> mode = replies[n + 2].as_string()) {
      granted.emplace_back(*query_.only, std::string(*mode));
    } else if (!replies[n + 2].is_nil()) {
      return bad_reply("grant", "neither a string nor nil");
    }
  } else {
    const std::vector<RespValue>* a = replies[n + 2].as_array();
    if (a == nullptr || a->size() % 2 != 0) {
      return bad_reply("grants", "expected a flat array of field/value pairs");
    }
    for (std::size_t i = 0; i < a->size(); i += 2) {
      std::optional<std::string_view> cid = (*a)[i].as_string();
      std::optional<std::string_view> mode = (*a)[i + 1].as_string();
      if (!cid || !mode) return bad_reply("grants", "element is no string");
      if (validate_connection_id(*cid).ok()) {
        granted.emplace_back(std::string(*cid), std::string(*mode));
      } else {
        ++snapshot_.ignored_grants;
      }
    }
    // Byte order (std::string compares as unsigned char), as discovery_read.lua sorts.
    std::sort(granted.begin(), granted.end());
  }
  snapshot_.granted_total = static_cast<int64_t>(granted.size());
  for (auto& [cid, mode] : granted) {
    if (!query_.after.empty() && !(query_.after < cid)) continue;
    if (page_.size() == query_.limit) {
      snapshot_.next_after = page_.back().cid;
      break;
    }
    PageEntry e;
    e.cid = std::move(cid);
    e.grant_mode = std::move(mode);
    e.read_shared = e.grant_mode == kGrantModeShared;
    e.read_member = e.grant_mode == kGrantModePerMember;
    page_.push_back(std::move(e));
  }
  if (page_.empty()) return finish();
  std::vector<std::size_t> all(page_.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  round_ = 2;
  return plan_reads(all);
}

namespace {

// The replies of split 2 for one connection: record, mark, and (shared) the principal's four.
constexpr std::size_t kSplitConnReads = 2;
constexpr std::size_t kPrincipalReads = 4;

// One principal's data on one connection, as discovery_conn_read.lua (the `shared` principal)
// and discovery_member_read.lua (a member) read it: each key with the command the scripts read it
// with. The scripts' KEYS are these keys in this order.
struct PrincipalRead {
  const char* command;
  Result<std::string> key;
};
std::array<PrincipalRead, kPrincipalReads> principal_reads(const RedisKeys& keys,
                                                           std::string_view cid,
                                                           const Principal& p) {
  return {PrincipalRead{"HGETALL", keys.manifest(cid, p)},
          PrincipalRead{"SMEMBERS", keys.disabled(cid, p)},
          PrincipalRead{"EXISTS", keys.lease(cid, p)},
          PrincipalRead{"GET", keys.invalidated(cid, p)}};
}

Status add_principal_keys(const RedisKeys& keys, std::string_view cid, const Principal& p,
                          std::vector<std::string>& out) {
  for (PrincipalRead& r : principal_reads(keys, cid, p)) {
    if (!r.key.ok()) return r.key.error();
    out.push_back(std::move(*r.key));
  }
  return Status();
}

Status add_principal_commands(const RedisKeys& keys, std::string_view cid, const Principal& p,
                              std::vector<RedisCommand>& out) {
  for (PrincipalRead& r : principal_reads(keys, cid, p)) {
    if (!r.key.ok()) return r.key.error();
    out.push_back({r.command, std::move(*r.key)});
  }
  return Status();
}

bool string_or_nil(const RespValue& r) { return r.is_nil() || r.as_string(); }

// The four replies of add_principal_commands at `at`: HASH fields, SET members, 0/1, mark.
bool principal_values_ok(const std::vector<RespValue>& v, std::size_t at) {
  return v[at].is_array() && v[at + 1].is_array() && v[at + 2].is_integer() &&
         string_or_nil(v[at + 3]);
}

RespValue principal_part(std::vector<RespValue>& v, std::size_t at) {
  return RespValue::array(
      {std::move(v[at]), std::move(v[at + 1]), std::move(v[at + 2]), std::move(v[at + 3])});
}

}  // namespace

Status SpreadDiscoveryRead::plan_reads(const std::vector<std::size_t>& which) {
  commands_.clear();
  hand_back_split_.clear();
  conn_commands_.clear();
  member_commands_.clear();
  pass_ = which;
  split_.clear();
  stage_ = Stage::kScripts;
  std::vector<std::string> member_keys;
  for (std::size_t i : which) {
    const PageEntry& e = page_[i];
    std::vector<std::string> keys;
    for (Result<std::string> k :
         {keys_.conn(e.cid), keys_.conn_version(e.cid), keys_.marked(e.cid)}) {
      if (!k.ok()) return k.error();
      keys.push_back(std::move(*k));
    }
    if (e.read_shared) {
      Status s = add_principal_keys(keys_, e.cid, Principal::shared(), keys);
      if (!s.ok()) return s;
    }
    if (e.read_member) {
      Status s = add_principal_keys(keys_, e.cid, member_, member_keys);
      if (!s.ok()) return s;
      member_commands_.push_back(i);
    }
    Result<RedisCommand> c = schema_script_command("discovery_conn_read.lua", std::move(keys), {},
                                                   /*read_only=*/true);
    if (!c.ok()) return c.error();
    commands_.push_back(std::move(*c));
    hand_back_split_.push_back(true);
    conn_commands_.push_back(i);
  }
  if (!member_keys.empty()) {
    Result<RedisCommand> c = schema_script_command("discovery_member_read.lua",
                                                   std::move(member_keys), {}, /*read_only=*/true);
    if (!c.ok()) return c.error();
    commands_.push_back(std::move(*c));
    hand_back_split_.push_back(true);
  }
  return Status();
}

Status SpreadDiscoveryRead::feed_reads(const std::vector<RespValue>& replies) {
  for (std::size_t k = 0; k < replies.size(); ++k) {
    // A read script refused because its slot is split: read what it reads key by key.
    if (hand_back_split_[k] && cluster_reply_is_split_slot(replies[k])) continue;
    if (replies[k].is_error()) return redis_error(replies[k]);
  }
  for (std::size_t k = 0; k < conn_commands_.size(); ++k) {
    PageEntry& e = page_[conn_commands_[k]];
    if (cluster_reply_is_split_slot(replies[k])) {
      e.conn_reply = RespValue();
      split_.push_back(SplitRead{conn_commands_[k], {}, {}, {}, false});
      continue;
    }
    const std::vector<RespValue>* a = replies[k].as_array();
    if (a == nullptr || a->size() != 5 ||
        (*a)[0].as_string() != std::optional<std::string_view>(kDiscoveryConnReplyTag)) {
      return bad_reply(
          "connection '" + e.cid + "'",
          "not a " + std::string(kDiscoveryConnReplyTag) + " reply: " + replies[k].debug_string());
    }
    const std::vector<RespValue>* shared = (*a)[4].as_array();
    bool conn_present = (*a)[1].is_array() && !(*a)[1].elements.empty();
    if (!(*a)[1].is_array() || !string_or_empty((*a)[2]) || shared == nullptr ||
        (shared->size() != 0 && shared->size() != 4) ||
        // The shared part is there exactly when it was asked for and the connection exists.
        (shared->size() == 4) != (e.read_shared && conn_present)) {
      return bad_reply("connection '" + e.cid + "'", "malformed: " + replies[k].debug_string());
    }
    e.conn_reply = RespValue::array(std::vector<RespValue>(a->begin() + 1, a->end()));
  }
  if (!member_commands_.empty() && cluster_reply_is_split_slot(replies.back())) {
    for (std::size_t i : member_commands_) page_[i].member_part = RespValue();
    split_.push_back(SplitRead{std::nullopt, member_commands_, {}, {}, false});
  } else if (!member_commands_.empty()) {
    const RespValue& r = replies.back();
    const std::vector<RespValue>* a = r.as_array();
    const std::vector<RespValue>* parts =
        a != nullptr && a->size() == 2 ? (*a)[1].as_array() : nullptr;
    if (parts == nullptr ||
        (*a)[0].as_string() != std::optional<std::string_view>(kDiscoveryMemberReplyTag) ||
        parts->size() != member_commands_.size()) {
      return bad_reply("member data", "not a " + std::string(kDiscoveryMemberReplyTag) +
                                          " reply with one part "
                                          "per connection: " +
                                          r.debug_string());
    }
    for (std::size_t k = 0; k < parts->size(); ++k) {
      const std::vector<RespValue>* part = (*parts)[k].as_array();
      if (part == nullptr || part->size() != 4) {
        return bad_reply("member data", "part " + std::to_string(k) + " is not 4 elements");
      }
      page_[member_commands_[k]].member_part = (*parts)[k];
    }
  }

  if (!split_.empty()) {
    // Split 1: the version of each split script's slot, before anything else of it is read.
    split_reads_ += split_.size();
    return plan_split_versions(Stage::kSplitBefore);
  }
  return check_modes();
}

std::string SpreadDiscoveryRead::split_name(const SplitRead& split) const {
  if (split.entry) return "connection '" + page_[*split.entry].cid + "'";
  return "the per-member data of '" + member_.str() + "'";
}

Result<std::string> SpreadDiscoveryRead::split_version_key(const SplitRead& split) const {
  if (split.entry) return keys_.conn_version(page_[*split.entry].cid);
  return keys_.member_version(member_);
}

// Split 2's commands for one split script: what it reads, each key by the command it uses.
Status SpreadDiscoveryRead::add_split_reads(const SplitRead& split) {
  if (!split.entry) {
    // discovery_member_read.lua: the member's four keys of each of its connections, in order.
    for (std::size_t i : split.entries) {
      Status s = add_principal_commands(keys_, page_[i].cid, member_, commands_);
      if (!s.ok()) return s;
    }
    return Status();
  }
  // discovery_conn_read.lua: record, connection-wide mark, then the `shared` principal's data.
  const PageEntry& e = page_[*split.entry];
  Result<std::string> record = keys_.conn(e.cid);
  if (!record.ok()) return record.error();
  Result<std::string> marked = keys_.marked(e.cid);
  if (!marked.ok()) return marked.error();
  commands_.push_back({"HGETALL", std::move(*record)});
  commands_.push_back({"GET", std::move(*marked)});
  if (!e.read_shared) return Status();
  return add_principal_commands(keys_, e.cid, Principal::shared(), commands_);
}

bool SpreadDiscoveryRead::split_values_ok(const SplitRead& split) const {
  const std::vector<RespValue>& v = split.values;
  if (!split.entry) {
    for (std::size_t at = 0; at < v.size(); at += kPrincipalReads) {
      if (!principal_values_ok(v, at)) return false;
    }
    return true;
  }
  return v[0].is_array() && string_or_nil(v[1]) &&
         (!page_[*split.entry].read_shared || principal_values_ok(v, kSplitConnReads));
}

// The script's reply, as it would have been, from split 2's replies.
void SpreadDiscoveryRead::take_split_values(SplitRead& split) {
  std::vector<RespValue>& v = split.values;
  if (!split.entry) {
    // discovery_member_read.lua's part of each connection: {manifest, disabled, lease, mark}.
    for (std::size_t k = 0; k < split.entries.size(); ++k) {
      page_[split.entries[k]].member_part = principal_part(v, k * kPrincipalReads);
    }
  } else {
    // discovery_conn_read.lua's {conn, version, marked, shared}; the shared part only with a
    // record, as the script.
    PageEntry& e = page_[*split.entry];
    const bool conn_present = !v[0].elements.empty();
    RespValue shared =
        e.read_shared && conn_present ? principal_part(v, kSplitConnReads) : RespValue::array({});
    e.conn_reply = RespValue::array({std::move(v[0]), RespValue::bulk_string(split.version),
                                     std::move(v[1]), std::move(shared)});
  }
  v.clear();
}

// Split 1 and 3: a GET of each split script's version.
Status SpreadDiscoveryRead::plan_split_versions(Stage stage) {
  stage_ = stage;
  commands_.clear();
  hand_back_split_.clear();
  for (const SplitRead& split : split_) {
    Result<std::string> version = split_version_key(split);
    if (!version.ok()) return version.error();
    commands_.push_back({"GET", std::move(*version)});
    hand_back_split_.push_back(false);
  }
  return Status();
}

Status SpreadDiscoveryRead::plan_split_read() {
  stage_ = Stage::kSplitRead;
  commands_.clear();
  for (SplitRead& split : split_) {
    Status s = add_split_reads(split);
    if (!s.ok()) return s;
  }
  hand_back_split_.assign(commands_.size(), false);
  return Status();
}

Status SpreadDiscoveryRead::feed_split(const std::vector<RespValue>& replies) {
  for (const RespValue& r : replies) {
    if (r.is_error()) return redis_error(r);
  }
  if (stage_ == Stage::kSplitBefore) {
    for (std::size_t k = 0; k < split_.size(); ++k) {
      std::optional<std::string> v = string_or_empty(replies[k]);
      if (!v) return bad_reply(split_name(split_[k]), "version not a string");
      split_[k].version = std::move(*v);
    }
    return plan_split_read();
  }
  if (stage_ == Stage::kSplitRead) {
    // Each split script's replies, in the order plan_split_read added its commands.
    std::size_t at = 0;
    for (SplitRead& split : split_) {
      const std::size_t n =
          split.entry ? kSplitConnReads + (page_[*split.entry].read_shared ? kPrincipalReads : 0)
                      : split.entries.size() * kPrincipalReads;
      split.values.assign(replies.begin() + static_cast<std::ptrdiff_t>(at),
                          replies.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
      if (!split_values_ok(split)) {
        return bad_reply(split_name(split), "a key read apart has the wrong type");
      }
    }
    // Split 3: the versions again, after every read of split 2.
    return plan_split_versions(Stage::kSplitAfter);
  }
  // Split 3: an unchanged version makes the reads between the two GETs one snapshot.
  std::vector<SplitRead> moved;
  for (std::size_t k = 0; k < split_.size(); ++k) {
    SplitRead& split = split_[k];
    std::optional<std::string> after = string_or_empty(replies[k]);
    if (!after) return bad_reply(split_name(split), "version not a string");
    if (*after != split.version) {
      if (split.again) {
        return Error(ErrorCode::kStoreUnavailable,
                     "discovery read: " + split_name(split) +
                         " changed twice while it was read key by key (its slot is split by a "
                         "reshard); read again");
      }
      split.again = true;
      split.version = std::move(*after);  // the next split 1
      moved.push_back(std::move(split));
      continue;
    }
    take_split_values(split);
  }
  if (!moved.empty()) {
    split_ = std::move(moved);
    return plan_split_read();
  }
  split_.clear();
  return check_modes();
}

Status SpreadDiscoveryRead::check_modes() {
  // The record decides whose data applies; where it says otherwise than the grant the data was
  // read for, read that connection again as the record says (once).
  std::vector<std::size_t> again;
  for (std::size_t i : pass_) {
    PageEntry& e = page_[i];
    std::string mode = credential_mode_of(e.conn_reply.elements[0]);
    bool want_shared = mode == kGrantModeShared;
    bool want_member = mode == kGrantModePerMember;
    if ((want_shared && !e.read_shared) || (want_member && !e.read_member)) {
      if (reread_) {
        return Error(ErrorCode::kStoreUnavailable,
                     "discovery read: the credential mode of connection '" + e.cid +
                         "' changed while it was read; read again");
      }
      e.read_shared = want_shared;
      e.read_member = want_member;
      again.push_back(i);
    }
  }
  if (!again.empty()) {
    round_ = 3;
    reread_ = true;
    return plan_reads(again);
  }
  return finish();
}

// A connection granted with a mode (the grant was written when its record existed: a grant
// written before its connection's record holds '') whose record and version are both gone lost
// them with its slot: a version is never deleted, not even with the connection (a removed one
// keeps it). The part of the store that held them restarted empty or was flushed (docs/design.md
// "A part of the store that lost its data"): the list is refused rather than served without the
// connection.
Status SpreadDiscoveryRead::refuse_lost_connection(const PageEntry& e, bool conn_present,
                                                   const std::string& version) const {
  if (conn_present || !version.empty() ||
      (e.grant_mode != kGrantModeShared && e.grant_mode != kGrantModePerMember)) {
    return Status();
  }
  return Error(ErrorCode::kStoreUnavailable,
               "discovery read: connection '" + e.cid + "' is granted (" + e.grant_mode +
                   ") but the store holds neither its record nor its version: the part of the "
                   "store that keeps it lost its data (an agent restores it)");
}

Status SpreadDiscoveryRead::finish() {
  commands_.clear();
  hand_back_split_.clear();
  stage_ = Stage::kScripts;
  for (std::size_t i = 0; i < page_.size(); ++i) {
    const PageEntry& e = page_[i];
    const std::vector<RespValue>& c = e.conn_reply.elements;  // {conn, version, marked, shared}
    std::string mode = credential_mode_of(c[0]);
    bool conn_present = !c[0].elements.empty();
    if (Status lost = refuse_lost_connection(e, conn_present, *string_or_empty(c[1])); !lost.ok()) {
      return lost;
    }
    const RespValue* data = nullptr;  // {manifest, disabled, lease, invalidated}
    std::string principal;
    if (conn_present && mode == kGrantModeShared) {
      data = &c[3];
      principal = Principal::shared().str();
    } else if (conn_present && mode == kGrantModePerMember) {
      data = &e.member_part;
      principal = member_.str();
    }
    std::vector<RespValue> entry;
    entry.push_back(RespValue::bulk_string(e.cid));
    entry.push_back(c[0]);
    entry.push_back(RespValue::bulk_string(principal));
    if (data != nullptr) {
      const std::vector<RespValue>& d = data->elements;
      std::optional<std::string_view> own = d[3].as_string();
      std::optional<std::string_view> whole = c[2].as_string();
      if ((!own && !d[3].is_nil()) || (!whole && !c[2].is_nil())) {
        return bad_reply("entry " + std::to_string(i), "a mark is neither a string nor nil");
      }
      std::optional<std::string> mark = effective_invalidation(own, whole);
      entry.push_back(d[0]);
      entry.push_back(d[1]);
      entry.push_back(d[2]);
      entry.push_back(mark ? RespValue::bulk_string(*mark) : RespValue::nil());
    } else {
      entry.push_back(RespValue::array({}));
      entry.push_back(RespValue::array({}));
      entry.push_back(RespValue::integer_value(0));
      entry.push_back(RespValue::nil());
    }
    Result<GrantedConnection> conn =
        decode_discovery_entry(RespValue::array(std::move(entry)), i, member_);
    if (!conn.ok()) return conn.error();
    snapshot_.connections.push_back(std::move(*conn));
    snapshot_.connection_versions.push_back(*string_or_empty(c[1]));
  }
  done_ = true;
  return Status();
}

DiscoverySnapshot SpreadDiscoveryRead::take_snapshot() { return std::move(snapshot_); }

Result<std::vector<RedisCommand>> spread_conditional_commands(
    const RedisKeys& keys, const DiscoverySnapshot& held,
    const std::vector<std::size_t>& lease_entries) {
  if (held.namespace_record.empty() || held.connection_versions.size() != held.connections.size()) {
    return invalid("conditional read: the snapshot holds no versions of a full read");
  }
  Result<std::string> member_version = keys.member_version(held.member);
  if (!member_version.ok()) return member_version.error();
  std::vector<RedisCommand> out;
  out.reserve(3 + held.connections.size() + lease_entries.size());
  out.push_back({"GET", keys.layout()});
  out.push_back({"GET", keys.namespace_record()});
  out.push_back({"GET", std::move(*member_version)});
  for (const GrantedConnection& c : held.connections) {
    Result<std::string> k = keys.conn_version(c.id);
    if (!k.ok()) return k.error();
    out.push_back({"GET", std::move(*k)});
  }
  for (std::size_t i : lease_entries) {
    if (i >= held.connections.size() || !held.connections[i].principal) {
      return invalid("conditional read: a lease entry out of range or without principal");
    }
    Result<std::string> k = keys.lease(held.connections[i].id, *held.connections[i].principal);
    if (!k.ok()) return k.error();
    out.push_back({"EXISTS", std::move(*k)});
  }
  return out;
}

namespace {

// Whether the versions in `replies` ({layout, namespace record, member version, connection
// versions..., then `leases` lease flags}) are the ones `held` was read at.
Result<bool> versions_unchanged(const std::vector<RespValue>& replies,
                                const DiscoverySnapshot& held, std::size_t leases) {
  constexpr std::size_t kVersions = 3;
  std::size_t n = held.connections.size();
  if (replies.size() != kVersions + n + leases || held.connection_versions.size() != n) {
    return bad_reply("conditional read", "not one reply per command");
  }
  for (const RespValue& r : replies) {
    if (r.is_error()) return Error(redis_error(r).error());
  }
  std::optional<std::string> layout = string_or_empty(replies[0]);
  if (!layout)
    return bad_reply("conditional read", "the layout record is neither a string nor nil");
  bool same = *layout == held.layout_record &&
              replies[1].as_string() == std::optional<std::string_view>(held.namespace_record);
  for (std::size_t i = 2; i < kVersions + n; ++i) {
    std::optional<std::string> v = string_or_empty(replies[i]);
    if (!v) return bad_reply("conditional read", "a version is neither a string nor nil");
    const std::string& mine =
        i == 2 ? held.member_version : held.connection_versions[i - kVersions];
    same = same && *v == mine;
  }
  return same;
}

}  // namespace

Result<bool> decode_spread_conditional(const std::vector<RespValue>& replies,
                                       DiscoverySnapshot& held,
                                       const std::vector<std::size_t>& lease_entries) {
  Result<bool> same = versions_unchanged(replies, held, lease_entries.size());
  if (!same.ok()) return same;
  const std::size_t n = held.connections.size();
  const std::size_t first_lease = replies.size() - lease_entries.size();
  std::vector<bool> leases;
  for (std::size_t k = 0; k < lease_entries.size(); ++k) {
    const RespValue& r = replies[first_lease + k];
    if (!r.is_integer() || (r.integer != 0 && r.integer != 1)) {
      return bad_reply("conditional read", "a lease flag is not 0 or 1");
    }
    if (lease_entries[k] >= n) return bad_reply("conditional read", "a lease entry out of range");
    leases.push_back(r.integer == 1);
  }
  if (!*same) return false;
  for (std::size_t k = 0; k < lease_entries.size(); ++k) {
    held.connections[lease_entries[k]].lease_held = leases[k];
  }
  return true;
}

Result<bool> decode_spread_unchanged(const std::vector<RespValue>& replies,
                                     const DiscoverySnapshot& held) {
  return versions_unchanged(replies, held, 0);
}

}  // namespace quiver
