#include "native-agent/store/layout_copy.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

namespace quiver {

namespace {

Error unavailable(const std::string& what, const std::string& detail) {
  return Error(ErrorCode::kStoreUnavailable, "layout copy: " + what + ": " + detail);
}

// A reply that is not a Redis error, or why it failed.
Result<RespValue> checked(Result<RespValue> r, const std::string& what) {
  if (!r.ok()) return unavailable(what, r.error().message);
  if (r->is_error()) return unavailable(what, r->str);
  return std::move(*r);
}

bool is_split_kind(KeyKind k) {
  return k == KeyKind::kConns || k == KeyKind::kDue || k == KeyKind::kRemovedConns ||
         k == KeyKind::kGrantMembers || k == KeyKind::kGranteesPending;
}

bool is_not_copied(KeyKind k) {
  return k == KeyKind::kEpoch || k == KeyKind::kDueBackfill ||
         k == KeyKind::kGrantMembersBackfill || k == KeyKind::kRevalidate || k == KeyKind::kCalls ||
         k == KeyKind::kCallReply || k == KeyKind::kCallCancel || k == KeyKind::kCallAgents;
}

class Copier {
 public:
  Copier(const RedisKeys& v1, const RedisKeys& v2, const LayoutCopyIo& io,
         const LayoutCopyOptions& options)
      : v1_(v1), v2_(v2), io_(io), options_(options) {}

  Result<LayoutCopyStats> run() {
    Status s = read_modes();
    if (!s.ok()) return s.error();
    std::string cursor = "0";
    do {
      Result<RespValue> page =
          checked(io_.source({"SCAN", cursor, "MATCH", v1_.namespace_match_pattern(), "COUNT",
                              std::to_string(options_.scan_count)}),
                  "SCAN");
      if (!page.ok()) return page.error();
      const std::vector<RespValue>* a = page->as_array();
      if (a == nullptr || a->size() != 2 || !(*a)[0].as_string() || !(*a)[1].is_array()) {
        return unavailable("SCAN", "unexpected reply " + page->debug_string());
      }
      cursor = std::string(*(*a)[0].as_string());
      for (const RespValue& k : (*a)[1].elements) {
        std::optional<std::string_view> key = k.as_string();
        if (!key) continue;
        ++stats_.keys_seen;
        s = copy_key(std::string(*key));
        if (!s.ok()) return s.error();
      }
    } while (cursor != "0");
    s = flush();
    if (!s.ok()) return s.error();
    return stats_;
  }

 private:
  // credential_mode of every connection in the v1 registry, for the grants.
  Status read_modes() {
    Result<RespValue> ids = checked(io_.source({"SMEMBERS", v1_.conns()}), "SMEMBERS conns");
    if (!ids.ok()) return ids.error();
    for (const RespValue& id : ids->elements) {
      std::optional<std::string_view> cid = id.as_string();
      if (!cid) continue;
      Result<std::string> key = v1_.conn(*cid);
      if (!key.ok()) continue;
      Result<RespValue> mode = checked(io_.source({"HGET", *key, "credential_mode"}), "HGET");
      if (!mode.ok()) return mode.error();
      if (std::optional<std::string_view> m = mode->as_string()) modes_[std::string(*cid)] = *m;
    }
    return Status();
  }

  Status copy_key(const std::string& key) {
    Result<ParsedKey> parsed = v1_.parse(key);
    if (!parsed.ok()) {
      ++stats_.not_copied["foreign"];
      return Status();
    }
    const KeyKind kind = parsed->kind;
    if (is_not_copied(kind)) {
      ++stats_.not_copied[key_kind_name(kind)];
      return Status();
    }
    if (kind == KeyKind::kGrants) return copy_grants(key, *parsed);
    if (is_split_kind(kind)) return split(key, kind);
    Result<std::string> name = v2_.key(kind, parsed->connection_id, parsed->principal,
                                       parsed->digest, parsed->catalog_kind);
    if (!name.ok()) return name.error();
    return restore(key, *name);
  }

  Status restore(const std::string& from, const std::string& to) {
    Result<RespValue> dump = checked(io_.source({"DUMP", from}), "DUMP " + from);
    if (!dump.ok()) return dump.error();
    Result<RespValue> ttl = checked(io_.source({"PTTL", from}), "PTTL " + from);
    if (!ttl.ok()) return ttl.error();
    if (dump->is_nil() || ttl->integer == -2) {  // gone since the SCAN
      ++stats_.keys_gone;
      return Status();
    }
    std::optional<std::string_view> payload = dump->as_string();
    if (!payload) return unavailable("DUMP " + from, "not a string");
    // PTTL -1: no expiry (RESTORE's 0). A key that expired between the two reads is restored
    // with 1 ms, and goes as it would have.
    const int64_t ms = ttl->integer < 0 ? 0 : std::max<int64_t>(ttl->integer, 1);
    ++stats_.keys_restored;
    return add({"RESTORE", to, std::to_string(ms), std::string(*payload), "REPLACE"});
  }

  Status copy_grants(const std::string& key, const ParsedKey& parsed) {
    Result<RespValue> ids = checked(io_.source({"SMEMBERS", key}), "SMEMBERS " + key);
    if (!ids.ok()) return ids.error();
    if (!parsed.principal) return Error(ErrorCode::kInternal, "layout copy: grants without member");
    Result<std::string> to = v2_.grants(*parsed.principal);
    if (!to.ok()) return to.error();
    if (ids->elements.empty()) {
      ++stats_.keys_gone;
      return Status();
    }
    RedisCommand hset = {"HSET", *to};
    for (const RespValue& id : ids->elements) {
      std::string cid(id.as_string().value_or(""));
      auto mode = modes_.find(cid);
      hset.push_back(cid);
      hset.push_back(mode == modes_.end() ? std::string() : mode->second);
    }
    ++stats_.grants_converted;
    return add(std::move(hset));
  }

  // The shard a registry member belongs to.
  Result<uint32_t> shard_of(KeyKind kind, std::string_view member) const {
    if (kind == KeyKind::kGrantMembers) {
      Result<Principal> p = Principal::parse(member);
      if (!p.ok()) return p.error();
      return v2_.member_shard(*p);
    }
    if (kind == KeyKind::kDue || kind == KeyKind::kGranteesPending) {
      Result<DueMember> pair = parse_due_member(member);
      if (!pair.ok()) return pair.error();
      if (kind == KeyKind::kGranteesPending) return v2_.member_shard(pair->principal);
      return v2_.connection_shard(pair->connection_id);
    }
    return v2_.connection_shard(member);  // conns, removed-conns: connection ids
  }

  Status split(const std::string& key, KeyKind kind) {
    const bool zset = kind == KeyKind::kDue;
    Result<RespValue> members =
        checked(io_.source(zset ? RedisCommand{"ZRANGE", key, "0", "-1", "WITHSCORES"}
                                : RedisCommand{"SMEMBERS", key}),
                "read " + key);
    if (!members.ok()) return members.error();
    const std::vector<RespValue>& m = members->elements;
    const std::size_t step = zset ? 2 : 1;
    for (std::size_t i = 0; i + step - 1 < m.size(); i += step) {
      std::string member(m[i].as_string().value_or(""));
      Result<uint32_t> shard = shard_of(kind, member);
      if (!shard.ok()) {
        ++stats_.not_copied[std::string(key_kind_name(kind)) + " member"];
        continue;
      }
      Result<std::string> to = v2_.key(kind, {}, std::nullopt, {}, {}, *shard);
      if (!to.ok()) return to.error();
      ++stats_.members_split;
      Status s = zset ? add({"ZADD", *to, std::string(m[i + 1].as_string().value_or("0")), member})
                      : add({"SADD", *to, member});
      if (!s.ok()) return s;
    }
    return Status();
  }

  Status add(RedisCommand c) {
    pending_.push_back(std::move(c));
    if (static_cast<int64_t>(pending_.size()) >= options_.batch) return flush();
    return Status();
  }

  Status flush() {
    if (pending_.empty()) return Status();
    std::vector<Result<RespValue>> replies = io_.dest(pending_);
    if (replies.size() != pending_.size()) {
      return unavailable("write", "not one reply per command");
    }
    for (std::size_t i = 0; i < replies.size(); ++i) {
      Result<RespValue> r = checked(std::move(replies[i]), pending_[i][0] + " " + pending_[i][1]);
      if (!r.ok()) return r.error();
    }
    pending_.clear();
    return Status();
  }

  const RedisKeys& v1_;
  const RedisKeys& v2_;
  const LayoutCopyIo& io_;
  LayoutCopyOptions options_;
  std::map<std::string, std::string> modes_;
  std::vector<RedisCommand> pending_;
  LayoutCopyStats stats_;
};

}  // namespace

Result<LayoutCopyStats> copy_namespace_to_v2(const RedisKeys& v1, const RedisKeys& v2,
                                             const LayoutCopyIo& io,
                                             const LayoutCopyOptions& options) {
  if (v1.key_layout() != KeyLayout::kV1 || v2.key_layout() != KeyLayout::kV2 ||
      v1.ns() != v2.ns()) {
    return Error(ErrorCode::kInvalidArgument,
                 "layout copy: needs the v1 and the v2 keys of one namespace");
  }
  if (!io.source || !io.dest || options.scan_count < 1 || options.batch < 1) {
    return Error(ErrorCode::kInvalidArgument, "layout copy: missing I/O or options out of range");
  }
  return Copier(v1, v2, io, options).run();
}

}  // namespace quiver
