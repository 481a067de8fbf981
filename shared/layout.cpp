#include "shared/layout.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace quiver {
namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

bool all_of(std::string_view s, bool (*ok)(char)) {
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return true;
}

bool lower_or_digit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool lower(char c) { return c >= 'a' && c <= 'z'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

bool valid_layout_name(std::string_view v) {
  return !v.empty() && v.size() <= 16 && all_of(v, lower_or_digit);
}

// A record quoted for a message: at most 64 bytes, control and non-ASCII bytes as \xNN.
std::string quoted(std::string_view value) {
  constexpr std::size_t kMax = 64;
  std::string out = "`";
  for (std::size_t i = 0; i < value.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c >= 0x7f || c == '`' || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += value.size() > kMax ? "`..." : "`";
  return out;
}

}  // namespace

Result<LayoutRecord> parse_layout_record(std::string_view value) {
  const std::size_t a = value.find(':');
  const std::size_t b = a == std::string_view::npos ? a : value.find(':', a + 1);
  if (b == std::string_view::npos) {
    return invalid("layout record " + quoted(value) + " is not `<version>:<state>:<at>`");
  }
  LayoutRecord r;
  r.version = std::string(value.substr(0, a));
  r.state = std::string(value.substr(a + 1, b - a - 1));
  const std::string_view at = value.substr(b + 1);
  if (!valid_layout_name(r.version)) {
    return invalid("layout record " + quoted(value) + ": the version is not [a-z0-9]{1,16}");
  }
  if (r.state.empty() || r.state.size() > 32 || !all_of(r.state, lower)) {
    return invalid("layout record " + quoted(value) + ": the state is not [a-z]{1,32}");
  }
  if (at.empty() || at.size() > 18 || !all_of(at, digit)) {
    return invalid("layout record " + quoted(value) + ": `at` is not a time in epoch ms");
  }
  for (char c : at) r.at_ms = r.at_ms * 10 + (c - '0');
  return r;
}

const std::vector<std::string>& supported_layouts() {
  static const std::vector<std::string> kSupported = {kLayoutV1, "v2"};
  return kSupported;
}

bool layout_readable(std::optional<std::string_view> value) {
  return !value || value->substr(0, 3) == std::string_view("v1:") ||
         value->substr(0, std::size(kLayoutV2FillingPrefix) - 1) == kLayoutV2FillingPrefix;
}

std::optional<KeyLayout> read_layout(std::optional<std::string_view> value) {
  if (layout_readable(value)) return KeyLayout::kV1;
  Result<LayoutRecord> record = parse_layout_record(*value);
  if (record.ok() && record->version == "v2" && record->state == "ready") return KeyLayout::kV2;
  return std::nullopt;
}

std::optional<KeyLayout> write_layout(std::optional<std::string_view> value) {
  if (!value || value->substr(0, 3) == std::string_view("v1:")) return KeyLayout::kV1;
  std::optional<KeyLayout> reads = read_layout(value);
  return reads == KeyLayout::kV2 ? reads : std::nullopt;
}

std::string layout_record_value(KeyLayout layout, std::string_view state, int64_t at_ms) {
  return std::string(key_layout_name(layout)) + ":" + std::string(state) + ":" +
         std::to_string(at_ms);
}

Result<RedisKeys> keys_for_layout(std::string_view ns, KeyLayout layout) {
  return layout == KeyLayout::kV2 ? RedisKeys::create(ns, KeyLayout::kV2, kLayoutV2Shards)
                                  : RedisKeys::create(ns);
}

// The words every unknown_layout_error holds, and that is_unknown_layout_error looks for; and
// those of one for a namespace being copied to v2 (is_layout_migrating_error).
constexpr std::string_view kUnknownLayoutWords = "a layout this build does not read";
constexpr std::string_view kLayoutMigratingWords = "the copy to key layout v2 is under way";

Error unknown_layout_error(std::string_view key, std::string_view value, std::string_view what) {
  if (value.substr(0, std::size(kLayoutV2FillingPrefix) - 1) == kLayoutV2FillingPrefix) {
    return Error(ErrorCode::kStoreUnavailable,
                 std::string(what) + ": the namespace's key layout record " + std::string(key) +
                     " is " + quoted(value) + ": " + std::string(kLayoutMigratingWords) +
                     " (quiver-agent migrate-layout v2); readers read v1 meanwhile, and nothing "
                     "is written until the switch");
  }
  return Error(ErrorCode::kStoreUnavailable,
               std::string(what) + ": the namespace's key layout record " + std::string(key) +
                   " is " + quoted(value) + ", " + std::string(kUnknownLayoutWords) +
                   " (it reads " + kLayoutV1 +
                   " only): upgrade this agent or edge, or set the record back to v1; nothing is "
                   "served or written meanwhile");
}

std::optional<std::string> layout_reply_readable_record(const RespValue& reply) {
  const std::vector<RespValue>* a = reply.as_array();
  if (a == nullptr || a->size() != 3 ||
      (*a)[0].as_string() != std::optional<std::string_view>(kLayoutUnknownTag)) {
    return std::nullopt;
  }
  std::optional<std::string_view> value = (*a)[1].as_string();
  if (!value || read_layout(*value) != KeyLayout::kV2) return std::nullopt;
  return std::string(*value);
}

bool is_unknown_layout_error(const Error& error) {
  return error.code == ErrorCode::kStoreUnavailable &&
         (error.message.find(kUnknownLayoutWords) != std::string::npos ||
          is_layout_migrating_error(error));
}

bool is_layout_migrating_error(const Error& error) {
  return error.code == ErrorCode::kStoreUnavailable &&
         error.message.find(kLayoutMigratingWords) != std::string::npos;
}

std::optional<Error> layout_unknown_reply(const RespValue& reply, std::string_view what) {
  const std::vector<RespValue>* a = reply.as_array();
  if (a == nullptr || a->size() != 3 ||
      (*a)[0].as_string() != std::optional<std::string_view>(kLayoutUnknownTag)) {
    return std::nullopt;
  }
  std::optional<std::string_view> value = (*a)[1].as_string();
  std::optional<std::string_view> key = (*a)[2].as_string();
  if (!value || !key) {
    return Error(ErrorCode::kInvalidReply,
                 std::string(what) + " reply: the layout record read, or its key, is no string");
  }
  return unknown_layout_error(*key, *value, what);
}

std::string call_agents_mark(std::string_view consumer) {
  std::string out = std::string(consumer) + " layouts=";
  for (std::size_t i = 0; i < supported_layouts().size(); ++i) {
    out += (i == 0 ? "" : ",") + supported_layouts()[i];
  }
  return out;
}

Result<CallAgentsMark> parse_call_agents_mark(std::string_view value) {
  CallAgentsMark out;
  const std::size_t space = value.find(' ');
  out.consumer = std::string(value.substr(0, space));
  if (out.consumer.empty()) return invalid("call-agents mark without a consumer name");
  if (space == std::string_view::npos) {
    out.layouts = {kLayoutV1};  // an agent older than the layout record reads v1 only
    return out;
  }
  constexpr std::string_view kLayouts = "layouts=";
  std::string_view rest = value.substr(space + 1);
  if (rest.substr(0, kLayouts.size()) != kLayouts) {
    return invalid("call-agents mark " + quoted(value) + ": expected `<consumer> layouts=...`");
  }
  rest.remove_prefix(kLayouts.size());
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (!valid_layout_name(name)) {
      return invalid("call-agents mark " + quoted(value) + ": a layout is not [a-z0-9]{1,16}");
    }
    out.layouts.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  out.declared = true;
  return out;
}

std::vector<RedisCommand> agents_census_heartbeat(const RedisKeys& keys, std::string_view consumer,
                                                  int64_t now_ms) {
  return {{"ZADD", keys.agents(), std::to_string(now_ms), call_agents_mark(consumer)},
          {"ZREMRANGEBYSCORE", keys.agents(), "-inf",
           "(" + std::to_string(now_ms - kAgentCensusKeepMs)}};
}

RedisCommand agents_census_read(const RedisKeys& keys, int64_t now_ms, int64_t window_ms) {
  return {"ZRANGEBYSCORE", keys.agents(), std::to_string(now_ms - window_ms), "+inf", "WITHSCORES"};
}

Result<std::vector<CensusEntry>> decode_agents_census(const RespValue& reply) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable, "agents census: Redis error: " + reply.str);
  }
  const std::vector<RespValue>* a = reply.as_array();
  if (a == nullptr || a->size() % 2 != 0) {
    return Error(ErrorCode::kInvalidReply, "agents census: not a [member, score, ...] array");
  }
  std::vector<CensusEntry> out;
  for (std::size_t i = 0; i < a->size(); i += 2) {
    std::optional<std::string_view> value = (*a)[i].as_string();
    std::optional<std::string_view> score = (*a)[i + 1].as_string();
    if (!value || !score || score->empty() || score->size() > 18 || !all_of(*score, digit)) {
      return Error(ErrorCode::kInvalidReply, "agents census: a member or score of another shape");
    }
    CensusEntry e;
    e.value = std::string(*value);
    for (char c : *score) e.seen_ms = e.seen_ms * 10 + (c - '0');
    Result<CallAgentsMark> mark = parse_call_agents_mark(*value);
    if (mark.ok()) {
      e.mark = std::move(*mark);
    } else {
      e.problem = mark.error().message;
    }
    out.push_back(std::move(e));
  }
  std::stable_sort(out.begin(), out.end(), [](const CensusEntry& x, const CensusEntry& y) {
    return x.seen_ms > y.seen_ms;
  });
  return out;
}

std::vector<const CensusEntry*> agents_without(const std::vector<CensusEntry>& census,
                                               std::string_view layout) {
  std::vector<const CensusEntry*> out;
  for (const CensusEntry& e : census) {
    bool has = false;
    for (const std::string& l : e.mark.layouts) has = has || l == layout;
    if (!has) out.push_back(&e);
  }
  return out;
}

}  // namespace quiver
