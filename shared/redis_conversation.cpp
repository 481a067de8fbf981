#include "shared/redis_conversation.h"

#include <iterator>
#include <utility>

#include "shared/enum_names.h"
#include "shared/schema_assets.h"

namespace quiver {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The bytes of AUTH's +OK, which lead the replies of a round on a new connection.
constexpr std::string_view kAuthOk = "+OK\r\n";

}  // namespace

RedisCommand evalsha_form(const RedisCommand& command) {
  if (command.size() < 3 || (command[0] != "EVAL" && command[0] != "EVAL_RO")) return command;
  std::string_view sha1 = schema_asset_sha1_of(command[1]);
  if (sha1.empty()) return command;
  RedisCommand out;
  out.reserve(command.size());
  out.emplace_back(command[0] == "EVAL" ? "EVALSHA" : "EVALSHA_RO");
  out.emplace_back(sha1);
  out.insert(out.end(), command.begin() + 2, command.end());
  return out;
}

bool is_noscript_reply(const RespValue& reply) {
  if (!reply.is_error()) return false;
  std::optional<std::string_view> message = reply.error_message();
  return message && message->substr(0, 8) == "NOSCRIPT";
}

Error redis_reply_error(const RespValue& reply, std::string_view what) {
  const std::string& text = reply.str;
  ErrorCode code = ErrorCode::kInternal;
  for (std::string_view transient :
       {"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MISCONF", "OOM"}) {
    if (starts_with(text, transient)) code = ErrorCode::kStoreUnavailable;
  }
  if (starts_with(text, "NOAUTH") || starts_with(text, "WRONGPASS") ||
      starts_with(text, "NOPERM")) {
    code = ErrorCode::kUnauthenticated;
  }
  return Error(code, "redis " + std::string(what) + ": " + text);
}

Error redis_auth_error(const RespValue& reply) {
  std::string why = reply.is_error() ? std::string(*reply.error_message()) : "unexpected reply";
  const bool refused = starts_with(why, "WRONGPASS") || starts_with(why, "NOPERM") ||
                       why.find("invalid password") != std::string::npos ||
                       why.find("invalid username-password") != std::string::npos;
  return Error(refused ? ErrorCode::kUnauthenticated : ErrorCode::kStoreUnavailable,
               (refused ? "Redis refused AUTH: " : "Redis could not take AUTH: ") + why);
}

const char* redis_turn_name(RedisTurn turn) {
  static constexpr const char* const kNames[] = {"read", "write", "done", "failed"};
  static_assert(covers_enum(kNames, RedisTurn::kFailed));
  return name_of(kNames, turn, "failed");
}

RedisConversation::RedisConversation(RespLimits limits, RedisCredentials credentials)
    : limits_(limits), credentials_(std::move(credentials)) {}

RedisRound RedisConversation::begin(std::vector<RedisCommand> commands, ScriptForm form,
                                    bool keep_bytes) {
  RedisRound round;
  if (!connected_) {
    round.new_connection = true;
    connected_ = true;
    decoder_.emplace(limits_);
    if (!credentials_.password.empty()) {
      if (credentials_.username.empty()) {
        append_command(round.bytes, {"AUTH", credentials_.password});
      } else {
        append_command(round.bytes, {"AUTH", credentials_.username, credentials_.password});
      }
      auth_pending_ = true;
    }
  }
  Pipeline pipeline;
  for (const RedisCommand& command : commands) {
    pipeline.add(form == ScriptForm::kBySha ? evalsha_form(command) : command);
  }
  round.bytes += pipeline.bytes();
  expected_ = pipeline.expected_replies() + (auth_pending_ ? 1 : 0);
  commands_ = std::move(commands);
  replies_.clear();
  first_replies_.clear();
  noscript_slots_.clear();
  write_.clear();
  received_.clear();
  keep_bytes_ = keep_bytes;
  phase_ = expected_ == 0 ? Phase::kDone : Phase::kFirst;  // nothing to say: nothing to hear
  return round;
}

RedisTurn RedisConversation::feed(std::string_view bytes) {
  answered_ = false;
  if (!in_round()) return fail(Error(ErrorCode::kInvalidReply, "Redis sent bytes unasked"));
  if (keep_bytes_) received_.append(bytes);
  if (Status st = decoder_->feed(bytes); !st.ok()) return fail(st.error());
  while (replies_.size() < expected_) {
    Result<std::optional<RespValue>> next = decoder_->next();
    if (!next.ok()) return fail(next.error());
    if (!next->has_value()) return RedisTurn::kRead;
    replies_.push_back(std::move(**next));
  }
  if (!decoder_->at_boundary()) {
    return fail(Error(ErrorCode::kInvalidReply, "Redis sent more than was asked"));
  }
  return complete();
}

RedisTurn RedisConversation::take(RespValue reply) {
  answered_ = false;
  if (!in_round()) return fail(Error(ErrorCode::kInvalidReply, "Redis sent a reply unasked"));
  replies_.push_back(std::move(reply));
  if (replies_.size() < expected_) return RedisTurn::kRead;
  return complete();
}

RedisTurn RedisConversation::complete() {
  answered_ = true;
  std::size_t first = 0;
  if (auth_pending_) {
    if (!replies_[0].is_ok()) return fail(redis_auth_error(replies_[0]));
    auth_pending_ = false;
    first = 1;
    if (keep_bytes_ && starts_with(received_, kAuthOk)) received_.erase(0, kAuthOk.size());
  }
  if (phase_ == Phase::kFirst) {
    // Scripts Redis does not have: those once more as EVAL, which also loads them for the next
    // round. Never a failure for that.
    for (std::size_t i = first; i < replies_.size(); ++i) {
      if (is_noscript_reply(replies_[i])) noscript_slots_.push_back(i - first);
    }
    if (!noscript_slots_.empty()) {
      first_replies_.assign(std::make_move_iterator(replies_.begin() + first),
                            std::make_move_iterator(replies_.end()));
      Pipeline pipeline;
      for (std::size_t slot : noscript_slots_) pipeline.add(commands_[slot]);
      write_ = pipeline.take_bytes();
      expected_ = noscript_slots_.size();
      replies_.clear();
      received_.clear();  // what is kept is now the EVAL replies' bytes alone
      phase_ = Phase::kRetry;
      return RedisTurn::kWrite;
    }
    if (first > 0) replies_.erase(replies_.begin());
  } else {
    // The EVAL replies, in the order sent, into the places of the NOSCRIPT ones. A second NOSCRIPT
    // (EVAL never answers it) would be passed on as the error it is: once and only once.
    for (std::size_t k = 0; k < noscript_slots_.size(); ++k) {
      first_replies_[noscript_slots_[k]] = std::move(replies_[k]);
    }
    replies_ = std::move(first_replies_);
    first_replies_.clear();
    noscript_slots_.clear();
  }
  phase_ = Phase::kDone;
  return RedisTurn::kDone;
}

RedisTurn RedisConversation::fail(Error error) {
  error_ = std::move(error);
  drop();
  phase_ = Phase::kFailed;
  return RedisTurn::kFailed;
}

std::string RedisConversation::take_write() { return std::move(write_); }

std::vector<RespValue> RedisConversation::take_replies() {
  if (phase_ != Phase::kDone) return {};
  phase_ = Phase::kIdle;
  return std::move(replies_);
}

Error RedisConversation::connection_failed(std::string_view why) {
  // Before AUTH answered, the failure is the connection's (a timeout, a reset), not a refusal of
  // the credentials: say so, and say which.
  const bool timed_out = why.find("timed out") != std::string_view::npos;
  const std::string what = auth_pending_
                               ? (timed_out ? "Redis: AUTH timed out (no reply): "
                                            : "Redis: the connection failed before AUTH answered: ")
                               : "Redis: ";
  Error error(timed_out ? ErrorCode::kTimeout : ErrorCode::kTransport, what + std::string(why));
  fail(error);
  return error;
}

void RedisConversation::drop() {
  connected_ = false;
  auth_pending_ = false;
  decoder_.reset();
  if (in_round()) phase_ = Phase::kIdle;
  commands_.clear();
  replies_.clear();
  first_replies_.clear();
  noscript_slots_.clear();
  received_.clear();
}

}  // namespace quiver
