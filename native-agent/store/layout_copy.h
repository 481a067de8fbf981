// The copy of one namespace from key layout v1 to v2 (docs/design.md "Migration from v1, and the
// `layout` record", step 2): every key of the v1 namespace is read from the node that holds its
// one slot and written under its v2 name, where the v2 layout spreads it.
//
// Per kind (schema/redis-keys.md, "Layout v2"):
//   - a key of one connection, one member, one body or one replay guard: DUMP, then RESTORE
//     <v2 name> <its remaining PTTL> REPLACE (values and TTLs as they are);
//   - the namespace-wide records ({ns} in both layouts: namespace, catalog, audit, OAuth): the
//     same, under the same name (on the same server that rewrites them in place);
//   - a registry v2 splits into S shards (`conns`, `due`, `removed-conns`, `grant-members`,
//     `grantees-pending`): each member added (SADD, ZADD with its score) to its shard's key — the
//     connection's shard for `<cid>` and `<cid>:<principal>` members, the member's for
//     `member/<id>` (grant-members) and for grantees-pending pairs;
//   - a member's grants: v2 holds them as a HASH connection id → credential mode (what the v2
//     discovery read pages and plans its reads with, shared/discovery_spread.h), the mode taken
//     from the connection's record ('' when the connection has none: the reader reads the record
//     and finds it removed);
//   - not copied: `epoch` (v2 has versions only), the v1 backfill markers (a copied namespace has
//     its due index and grant registry built), and what is in flight (the revalidation and call
//     streams, call replies and cancels, call-agents): a request lost that way is queued again by
//     the next stale read through its gate, and a call times out at its edge.
//
// Every write is idempotent (RESTORE REPLACE, SADD, ZADD, HSET), so a copy cut short is run again
// from the start. A key the v1 parser does not recognise is counted and left alone. The copy reads
// a live namespace: a write that lands on v1 after its key was copied is not in v2 — which is why
// the migration pauses every write while it runs (`v2:filling`: docs/design.md "Migration from
// v1"). Reads go a SCAN page at a time (one pipeline of DUMP, PTTL, SMEMBERS... for the page's
// keys, when the I/O offers `source_batch`), writes in batches of `batch`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "shared/identity.h"
#include "shared/redis_conversation.h"
#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

struct LayoutCopyIo {
  // One command on the node holding the v1 namespace's slot (SCAN, TYPE, DUMP, PTTL, SMEMBERS...).
  std::function<Result<RespValue>(const RedisCommand&)> source;
  // Optional: several of those in one pipeline, one result per command, in order (the copy reads
  // a SCAN page's keys at once; without it, one command at a time through `source`).
  std::function<std::vector<Result<RespValue>>(const std::vector<RedisCommand>&)> source_batch;
  // Commands to the v2 side, each routed by its key (a cluster pool's run_batch, or one node's
  // pipeline); one result per command, in order.
  std::function<std::vector<Result<RespValue>>(const std::vector<RedisCommand>&)> dest;
};

struct LayoutCopyStats {
  int64_t keys_seen = 0;                      // keys the SCAN returned
  int64_t keys_restored = 0;                  // DUMP/RESTORE under the v2 name
  int64_t members_split = 0;                  // registry members written to their shard
  int64_t grants_converted = 0;               // grant sets written as v2 hashes
  int64_t keys_gone = 0;                      // deleted between the SCAN and the read
  std::map<std::string, int64_t> not_copied;  // by key kind name, and "foreign"
};

struct LayoutCopyOptions {
  int64_t scan_count = 500;  // SCAN COUNT
  int64_t batch = 200;       // commands per `dest` call
};

// kInvalidArgument unless `v1` is a v1 and `v2` a v2 RedisKeys of the same namespace;
// kStoreUnavailable for a failed command (the copy stops; run it again).
Result<LayoutCopyStats> copy_namespace_to_v2(const RedisKeys& v1, const RedisKeys& v2,
                                             const LayoutCopyIo& io,
                                             const LayoutCopyOptions& options = {});

}  // namespace quiver
