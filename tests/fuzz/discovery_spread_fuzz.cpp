// Fuzzes the discovery read of key layout v2 in rounds (shared/discovery_spread.h), which reads
// what several Redis nodes answer. Input: one byte of query flags, then a RESP reply stream (seeds:
// tests/fuzz/seeds/discovery_spread, the rounds of a real read); each round takes as many replies
// from the stream as it sent commands. Properties: every error is a store or reply error (never
// kInternal); a read ends within three rounds (a split connection's key-by-key rounds, after a
// TRYAGAIN, keep their round's number); every command of a read round is EVAL_RO of a schema
// script with its keys declared and no ARGV, of a split round a single-key read; a finished
// snapshot has strictly ascending ids, at most `limit` of them, no more than the grants counted,
// one version per entry, and each entry read under the principal its record's credential mode
// gives.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/discovery_spread.h"
#include "shared/resp.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::string_view stream = fuzz::as_view(data + 1, size - 1);

  RespDecoder decoder;
  if (!decoder.feed(stream).ok()) return 0;
  std::vector<RespValue> replies;
  for (;;) {
    auto r = decoder.next();
    if (!r.ok() || !r->has_value()) break;
    replies.push_back(std::move(**r));
  }

  SnapshotQuery q;
  if (flags & 1) q.only = "b";
  if (flags & 2) q.after = "a";
  q.limit = (flags & 4) ? 1 : 200;
  const Principal alice = *Principal::member("alice");
  const RedisKeys keys = *RedisKeys::create("fz");
  Result<SpreadDiscoveryRead> read = SpreadDiscoveryRead::start(keys, alice, q);
  fuzz::check(read.ok(), "spread: a valid query refused");

  std::size_t used = 0;
  while (!read->done()) {
    fuzz::check(read->round() <= 3, "spread: more than three rounds");
    const std::vector<RedisCommand>& commands = read->commands();
    fuzz::check(!commands.empty(), "spread: a round without commands");
    fuzz::check(
        read->hand_back_split().empty() || read->hand_back_split().size() == commands.size(),
        "spread: split flags that are not one per command");
    if (read->reading_split()) {
      // A script read key by key: one key per command, by the commands the script uses.
      for (const RedisCommand& c : commands) {
        fuzz::check(c.size() == 2 && (c[0] == "GET" || c[0] == "HGETALL" || c[0] == "SMEMBERS" ||
                                      c[0] == "EXISTS"),
                    "spread: a split read command is not a single-key read");
      }
    } else if (read->round() > 1) {
      for (const RedisCommand& c : commands) {
        fuzz::check(c.size() >= 4 && c[0] == "EVAL_RO",
                    "spread: a read round command is not EVAL_RO");
        fuzz::check(c.size() == 3 + std::stoul(c[2]), "spread: ARGV beside the declared keys");
      }
    }
    if (replies.size() - used < commands.size()) return 0;
    std::vector<RespValue> round(replies.begin() + used, replies.begin() + used + commands.size());
    used += commands.size();
    Status s = read->feed(round);
    if (!s.ok()) {
      const ErrorCode c = s.error().code;
      fuzz::check(c == ErrorCode::kStoreUnavailable || c == ErrorCode::kStoreNotReady ||
                      c == ErrorCode::kInvalidReply,
                  "spread: an unexpected error code", s.error().message);
      return 0;
    }
  }
  DiscoverySnapshot snapshot = read->take_snapshot();
  fuzz::check(snapshot.connections.size() <= q.limit, "spread: more entries than the limit");
  fuzz::check(static_cast<int64_t>(snapshot.connections.size()) <= snapshot.granted_total,
              "spread: more entries than grants");
  fuzz::check(snapshot.connection_versions.size() == snapshot.connections.size(),
              "spread: not one version per entry");
  for (std::size_t i = 0; i < snapshot.connections.size(); ++i) {
    const GrantedConnection& c = snapshot.connections[i];
    if (i > 0) {
      fuzz::check(snapshot.connections[i - 1].id < c.id, "spread: ids not strictly ascending");
    }
    if (q.only) fuzz::check(c.id == *q.only, "spread: another connection than `only`");
    if (!q.after.empty()) fuzz::check(q.after < c.id, "spread: an entry not after `after`");
    if (c.principal) {
      fuzz::check(c.record.has_value(), "spread: a principal without a record");
      const bool shared = c.record->credential_mode == CredentialMode::kShared;
      fuzz::check(c.principal->is_shared() == shared, "spread: the principal is not the mode's");
      if (!shared) fuzz::check(*c.principal == alice, "spread: another member's data");
    }
  }
  return 0;
}
