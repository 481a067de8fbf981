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
      s = copy_page((*a)[1].elements);
      if (!s.ok()) return s.error();
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
    std::vector<std::string> cids;
    std::vector<RedisCommand> reads;
    for (const RespValue& id : ids->elements) {
      std::optional<std::string_view> cid = id.as_string();
      if (!cid) continue;
      Result<std::string> key = v1_.conn(*cid);
      if (!key.ok()) continue;
      cids.emplace_back(*cid);
      reads.push_back({"HGET", *key, "credential_mode"});
    }
    std::vector<Result<RespValue>> modes = read_all(reads);
    for (std::size_t i = 0; i < cids.size(); ++i) {
      Result<RespValue> mode = checked(std::move(modes[i]), "HGET");
      if (!mode.ok()) return mode.error();
      if (std::optional<std::string_view> m = mode->as_string()) modes_[cids[i]] = *m;
    }
    return Status();
  }

  // `commands` on the source, one result each: one pipeline when the I/O has one.
  std::vector<Result<RespValue>> read_all(const std::vector<RedisCommand>& commands) {
    if (commands.empty()) return {};
    if (io_.source_batch) {
      std::vector<Result<RespValue>> out = io_.source_batch(commands);
      if (out.size() == commands.size()) return out;
      return std::vector<Result<RespValue>>(
          commands.size(), Result<RespValue>(unavailable("read", "not one reply per command")));
    }
    std::vector<Result<RespValue>> out;
    for (const RedisCommand& c : commands) out.push_back(io_.source(c));
    return out;
  }

  // What a key of a SCAN page needs: its v2 name or kind, and where its reads start.
  struct Planned {
    std::string key;
    KeyKind kind;
    ParsedKey parsed;
    std::string to;         // restore: the v2 name
    std::size_t first = 0;  // its first read among the page's
  };

  // A SCAN page: every read its keys need in one pipeline, then the writes (batched by add).
  Status copy_page(const std::vector<RespValue>& keys) {
    std::vector<Planned> planned;
    std::vector<RedisCommand> reads;
    for (const RespValue& k : keys) {
      std::optional<std::string_view> key = k.as_string();
      if (!key) continue;
      ++stats_.keys_seen;
      Result<ParsedKey> parsed = v1_.parse(*key);
      if (!parsed.ok()) {
        ++stats_.not_copied["foreign"];
        continue;
      }
      const KeyKind kind = parsed->kind;
      if (is_not_copied(kind)) {
        ++stats_.not_copied[key_kind_name(kind)];
        continue;
      }
      Planned p{std::string(*key), kind, *parsed, {}, reads.size()};
      if (kind == KeyKind::kGrants) {
        reads.push_back({"SMEMBERS", p.key});
      } else if (is_split_kind(kind)) {
        reads.push_back(kind == KeyKind::kDue
                            ? RedisCommand{"ZRANGE", p.key, "0", "-1", "WITHSCORES"}
                            : RedisCommand{"SMEMBERS", p.key});
      } else {
        Result<std::string> name = v2_.key(kind, parsed->connection_id, parsed->principal,
                                           parsed->digest, parsed->catalog_kind);
        if (!name.ok()) return name.error();
        p.to = std::move(*name);
        reads.push_back({"DUMP", p.key});
        reads.push_back({"PTTL", p.key});
      }
      planned.push_back(std::move(p));
    }
    std::vector<Result<RespValue>> replies = read_all(reads);
    for (Planned& p : planned) {
      Status s;
      if (p.kind == KeyKind::kGrants) {
        s = copy_grants(p.key, p.parsed, std::move(replies[p.first]));
      } else if (is_split_kind(p.kind)) {
        s = split(p.key, p.kind, std::move(replies[p.first]));
      } else {
        s = restore(p.key, p.to, std::move(replies[p.first]), std::move(replies[p.first + 1]));
      }
      if (!s.ok()) return s;
    }
    return Status();
  }

  Status restore(const std::string& from, const std::string& to, Result<RespValue> dump_reply,
                 Result<RespValue> ttl_reply) {
    Result<RespValue> dump = checked(std::move(dump_reply), "DUMP " + from);
    if (!dump.ok()) return dump.error();
    Result<RespValue> ttl = checked(std::move(ttl_reply), "PTTL " + from);
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

  Status copy_grants(const std::string& key, const ParsedKey& parsed, Result<RespValue> reply) {
    Result<RespValue> ids = checked(std::move(reply), "SMEMBERS " + key);
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

  Status split(const std::string& key, KeyKind kind, Result<RespValue> reply) {
    const bool zset = kind == KeyKind::kDue;
    Result<RespValue> members = checked(std::move(reply), "read " + key);
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
