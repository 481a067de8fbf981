// RedisConversation: what Quiver says to Redis on one connection and how it reads the answers,
// without the connection. Both hosts drive it: the edge (shared/edge_service.cpp) with the bytes
// worker.mjs moves over its socket, the agent's Redis store (native-agent/store/redis_store.cpp)
// with the replies hiredis decodes.
//
// Why one piece: the rules of the conversation are the same at both hosts and easy to get subtly
// wrong twice: AUTH goes first on a new connection and its refusal is told apart from a Redis that
// cannot take commands yet; commands go out pipelined, one round trip; scripts go out as EVALSHA
// (the script text once per Redis, not once per request) and only the ones Redis answers NOSCRIPT
// to (a restart, SCRIPT FLUSH) go again, as EVAL, once, on the same connection, before the caller
// sees the replies, in the order of the commands; a stream out of step (a broken reply, more bytes
// than were asked for) poisons the connection.
//
//   RedisConversation c(limits, credentials);
//   RedisRound round = c.begin(commands);   // write round.bytes (open a connection first when
//                                           // round.new_connection), then, as bytes arrive:
//   switch (c.feed(bytes)) {                // or c.take(reply) with replies decoded elsewhere
//     case RedisTurn::kRead:  read more;
//     case RedisTurn::kWrite: write c.take_write() on the same connection, read more;
//     case RedisTurn::kDone:  use c.take_replies(), one per command, in order;
//     case RedisTurn::kFailed: c.error(); the connection is dropped, the next round opens one.
//   }
//   c.connection_failed(why)                // the host's I/O failed: the error, worded for the
//                                           // phase (before AUTH answered or after)
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/resp.h"
#include "shared/status.h"

namespace quiver {

using RedisCommand = std::vector<std::string>;

// AUTH on a new connection; none when `password` is empty. `username` for a Redis 6 ACL user.
struct RedisCredentials {
  std::string username;
  std::string password;
};

// A Redis error reply as an Error. States that pass (a restart loading its data, a busy script, a
// replica, memory full) are kStoreUnavailable like a dropped connection; a refusal of our
// credentials or rights is kUnauthenticated; the rest are our bugs (kInternal). `what` names the
// operation.
Error redis_reply_error(const RespValue& reply, std::string_view what);

// AUTH's reply when it is not +OK: WRONGPASS or an ACL refusal is about the credentials
// (kUnauthenticated); LOADING, BUSY and the like are a Redis that cannot take commands yet
// (kStoreUnavailable).
Error redis_auth_error(const RespValue& reply);

// The EVALSHA form of an EVAL (or EVAL_RO) of a script compiled in from schema/: the script text
// (argv[1]) replaced by its SHA-1, computed by the build (shared/schema_assets.h). Any other
// command comes back unchanged. Redis answers NOSCRIPT when its script cache lacks the script (a
// restart, SCRIPT FLUSH, a failover).
RedisCommand evalsha_form(const RedisCommand& command);

// True for Redis's NOSCRIPT error reply.
bool is_noscript_reply(const RespValue& reply);

// How a round sends the EVALs among its commands.
enum class ScriptForm {
  kBySha = 0,  // EVALSHA, then EVAL for the ones answered NOSCRIPT
  kText,       // EVAL as given (inside MULTI/EXEC, where a NOSCRIPT would abort the transaction)
};

enum class RedisTurn { kRead = 0, kWrite, kDone, kFailed };
const char* redis_turn_name(RedisTurn turn);  // "read", "write", "done", "failed"

struct RedisRound {
  std::string bytes;            // to write
  bool new_connection = false;  // open a fresh connection first (AUTH is already in `bytes`)
};

class RedisConversation {
 public:
  explicit RedisConversation(RespLimits limits = {}, RedisCredentials credentials = {});

  // Starts a round of `commands` (EVAL forms, as shared/discovery_redis.h and shared/lease.h build
  // them). A round in progress is abandoned. `keep_bytes`: remember the bytes of the replies
  // (reply_bytes()), for a host that caches them as they came.
  RedisRound begin(std::vector<RedisCommand> commands, ScriptForm form = ScriptForm::kBySha,
                   bool keep_bytes = false);

  // Bytes read from the connection, in chunks of any size.
  RedisTurn feed(std::string_view bytes);
  // One reply decoded by the host (hiredis natively), in order.
  RedisTurn take(RespValue reply);

  // After kWrite: the EVAL retry of the scripts Redis did not have.
  std::string take_write();
  // After kDone: one reply per command of the round, in order (error replies are values).
  std::vector<RespValue> take_replies();
  // After kFailed.
  const Error& error() const { return error_; }
  // After kDone with `keep_bytes`: the replies' bytes as Redis sent them (without AUTH's reply).
  // Meaningful for a round whose scripts all ran at once or all went again as EVAL; a round that
  // mixes the two gets only the EVAL replies' bytes.
  const std::string& reply_bytes() const { return received_; }

  // The host's read or write failed (`why`: its words; "timed out" in them marks a timeout):
  // kTimeout or kTransport, saying whether AUTH had answered. The connection is dropped.
  Error connection_failed(std::string_view why);
  // The host closed or lost the connection: the next round opens another.
  void drop();

  bool connected() const { return connected_; }
  bool in_round() const { return phase_ == Phase::kFirst || phase_ == Phase::kRetry; }
  bool auth_pending() const { return auth_pending_; }
  // The last feed() or take() completed the replies of a write (error replies and AUTH's refusal
  // included): Redis is not stalled, whatever the replies say.
  bool answered() const { return answered_; }
  // Replies the host should still read in this round.
  std::size_t awaiting() const { return in_round() ? expected_ - replies_.size() : 0; }

 private:
  enum class Phase { kIdle = 0, kFirst, kRetry, kDone, kFailed };

  RedisTurn complete();
  RedisTurn fail(Error error);

  RespLimits limits_;
  RedisCredentials credentials_;
  Phase phase_ = Phase::kIdle;
  bool connected_ = false;
  bool auth_pending_ = false;  // the first reply expected is AUTH's
  bool keep_bytes_ = false;
  bool answered_ = false;
  std::size_t expected_ = 0;
  std::vector<RedisCommand> commands_;  // EVAL forms
  std::vector<RespValue> replies_;
  // While the NOSCRIPT ones go again as EVAL: the first replies, and the places to fill.
  std::vector<RespValue> first_replies_;
  std::vector<std::size_t> noscript_slots_;
  std::string write_;
  std::string received_;
  std::optional<RespDecoder> decoder_;
  Error error_;
};

}  // namespace quiver
