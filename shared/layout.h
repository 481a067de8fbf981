// The key layout record (RedisKeys::layout, `quiver:{<ns>}:layout`): which key layout a
// namespace's data is in (docs/design.md, "Migration from v1, and the `layout` record").
//
// Value `<version>:<state>:<at>`; absent means layout v1. Every reader follows it: a record naming
// v1 (`v1:...`), no record, or `v2:filling:<at>` (the copy to v2 is under way) reads as v1;
// `v2:ready:<at>` reads as v2 (the discovery read in rounds, shared/discovery_spread.h:
// `read_layout`); anything else (a record it cannot parse, a version it does not know) is a layout
// it does not know: the store is then unavailable to it (503 STORE_UNAVAILABLE at both hosts,
// never an empty list). Writers write v1 under no record or `v1:...`, v2 under `v2:ready:<at>`,
// and nothing under `v2:filling:<at>` (`write_layout`; RedisStore's layout gate).
// schema/lua/discovery_read.lua applies the read rule in Redis (a value starting `v1:` or
// `v2:filling:`, or none), webhook_refresh.lua the v1 write rule (`v1:` or none), and both answer
// {kLayoutUnknownTag, value, key} otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/redis_conversation.h"
#include "shared/redis_keys.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

// The one layout this build reads and writes.
inline constexpr char kLayoutV1[] = "v1";

// A script's reply when the namespace's layout record names a layout it does not read:
// {tag, the record as stored, the record's key}.
inline constexpr char kLayoutUnknownTag[] = "quiver.layout.v1";

// The layout record parsed: `<version>:<state>:<at>`, version [a-z0-9]{1,16}, state [a-z]{1,32},
// at a non-negative integer (epoch ms).
struct LayoutRecord {
  std::string version;
  std::string state;
  int64_t at_ms = 0;
};
// kInvalidArgument, naming what is wrong, for any other value.
Result<LayoutRecord> parse_layout_record(std::string_view value);

// The layouts this build reads and writes, in preference order: {"v1", "v2"} (an engine writes
// the one its namespace's record names when it starts: native-agent/engine/agent.cpp).
const std::vector<std::string>& supported_layouts();

// The record of a namespace being copied from v1 to v2 (`quiver-agent migrate-layout v2`,
// docs/design.md "Migration from v1"): its data is still v1's, so readers read v1; nobody writes.
inline constexpr char kLayoutV2FillingPrefix[] = "v2:filling:";

// Whether the namespace whose layout record is `value` (nullopt: absent) is read in layout v1,
// as the v1 scripts read it: absent, a value starting `v1:` (the rest of a v1 record is not
// interpreted), or `v2:filling:...` (the copy to v2 is under way: v1 holds the data).
bool layout_readable(std::optional<std::string_view> value);

// The shard count of layout v2: part of the version name (docs/design.md, "Hash tags").
inline constexpr uint32_t kLayoutV2Shards = 16;

// The key layout a reader of this build reads the namespace in: kV1 as layout_readable (so
// `v2:filling:<at>` reads v1, the copy's source); kV2 for a
// record that parses as version `v2`, state `ready` (the copy reached every key: docs/design.md,
// "Migration from v1"); nullopt for any other record (unknown_layout_error).
std::optional<KeyLayout> read_layout(std::optional<std::string_view> value);

// The key layout a writer may write the namespace in: kV1 for no record or `v1:...`, kV2 for
// `v2:ready:<at>`; nullopt for anything else, `v2:filling:<at>` included (while the copy runs no
// agent writes: what lands on v1 after its key was copied would be lost by the switch).
std::optional<KeyLayout> write_layout(std::optional<std::string_view> value);

// `<version>:<state>:<at>` (parse_layout_record's form): the records the migration writes.
std::string layout_record_value(KeyLayout layout, std::string_view state, int64_t at_ms);

// The keys of `ns` in `layout` (v2 with kLayoutV2Shards).
Result<RedisKeys> keys_for_layout(std::string_view ns, KeyLayout layout);

// The error a reader answers for a record it cannot read (kStoreUnavailable): names the key and
// the value (a value of more than 64 bytes is cut; control bytes are escaped), and what to do.
Error unknown_layout_error(std::string_view key, std::string_view value, std::string_view what);

// The layout record a script's {kLayoutUnknownTag, value, key} reply names, when it is one this
// build reads (`v2:ready:<at>` from a v1 script: the host reads again in rounds); nullopt for any
// other reply or record.
std::optional<std::string> layout_reply_readable_record(const RespValue& reply);

// Whether `error` is one unknown_layout_error made (hosts answer it with a message of its own).
bool is_unknown_layout_error(const Error& error);
// ... for a `v2:filling:<at>` record: the namespace is being copied to v2 (writes wait for it).
bool is_layout_migrating_error(const Error& error);

// A script's reply {kLayoutUnknownTag, value, key} as unknown_layout_error(key, value, what);
// nullopt for any other reply. kInvalidReply for that tag with a value or key that is no string.
std::optional<Error> layout_unknown_reply(const RespValue& reply, std::string_view what);

// ---- the agents' layout capability, in their call-agents heartbeat
// ---------------------------------
//
// RedisKeys::call_agents holds `<consumer> layouts=<l1>,<l2>...` since this record exists; an
// older agent wrote `<consumer>` alone (it reads v1 only). The edge only checks that the key
// exists, so either value keeps relayed calls working.

// `<consumer> layouts=v1,v2` (supported_layouts()).
std::string call_agents_mark(std::string_view consumer);

struct CallAgentsMark {
  std::string consumer;
  // The layouts the agent reads and writes; {"v1"} for a mark without `layouts=` (an agent
  // older than the layout record, which reads v1 only).
  std::vector<std::string> layouts;
  bool declared = false;  // the mark said `layouts=` itself
};
// kInvalidArgument for an empty value or a `layouts=` list that is empty or holds a bad name.
Result<CallAgentsMark> parse_call_agents_mark(std::string_view value);

// ---- the census of agents (RedisKeys::agents) ---------------------------------------------------
//
// `call-agents` names only the agent that marked it last; a switch of layout must know every
// agent writing the namespace. So each heartbeat also adds the agent's mark (call_agents_mark) to
// the ZSET `agents`, scored by when it said so, and drops the marks no agent repeated for
// kAgentCensusKeepMs. The census is the marks seen within a window: an agent that writes v1 only
// and was seen within it is why `migrate-layout` must not switch (docs/design.md, "Migration").

// How long a mark stays in the ZSET after its agent's last heartbeat (shown by `quiver-agent
// layout`; the census itself looks at a shorter window).
inline constexpr int64_t kAgentCensusKeepMs = 60 * 60 * 1000;
// The census's default window: an agent heartbeats every second while it consumes relayed calls;
// a minute without one is an agent gone (or stalled long enough to be restarted).
inline constexpr int64_t kAgentCensusWindowMs = 60 * 1000;

// The heartbeat's census commands, one slot (`{<ns>}`): ZADD the mark at now, ZREMRANGEBYSCORE
// the marks older than kAgentCensusKeepMs.
std::vector<RedisCommand> agents_census_heartbeat(const RedisKeys& keys, std::string_view consumer,
                                                  int64_t now_ms);
// The read: the marks seen since now - window_ms, with their scores.
RedisCommand agents_census_read(const RedisKeys& keys, int64_t now_ms, int64_t window_ms);

struct CensusEntry {
  CallAgentsMark mark;
  std::string value;    // as stored
  int64_t seen_ms = 0;  // its last heartbeat (the agent's clock, epoch ms)
  std::string problem;  // a value parse_call_agents_mark refuses (then mark is empty)
};
// The read's reply (a flat [member, score, ...] array), newest first. kInvalidReply for another
// shape; kStoreUnavailable for an error reply.
Result<std::vector<CensusEntry>> decode_agents_census(const RespValue& reply);

// The agents of `census` that do not declare `layout` (those that would keep writing the old
// layout, or cannot read the new one, across a switch to it).
std::vector<const CensusEntry*> agents_without(const std::vector<CensusEntry>& census,
                                               std::string_view layout);

}  // namespace quiver
