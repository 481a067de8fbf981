// Fuzzes the refresh webhook of key layout v2 in rounds (shared/webhook_spread.h), which reads what
// several Redis nodes answer. Input: one byte of flags (1: requeue_after 0), then a RESP reply
// stream (seeds: tests/fuzz/seeds/webhook_spread, the rounds of a webhook); each round takes as
// many replies from the stream as it sent commands. The request: docs (no principal), mail for
// member/bob, mail (no principal), gone. Properties: every error is a store or reply error (never
// kInternal); a webhook ends within four rounds; round 1 writes nothing and every command of
// every round touches one slot; scripts declare three keys or two; the replay guard's SET is the
// last round, alone; a finished webhook is a replay without results or one result per target, in
// order, each with a status the v1 script answers and a principal exactly where it gives one.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/redis_cluster.h"
#include "shared/resp.h"
#include "shared/webhook_spread.h"
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

  const RedisKeys keys = *RedisKeys::create("fz", KeyLayout::kV2, 16);
  WebhookVerified verified;
  verified.replay_key = "wh:fuzz";
  verified.retain_for_ms = 600'000;
  WebhookRefreshRequest request;
  for (const auto& [cid, principal] : std::vector<std::pair<const char*, const char*>>{
           {"docs", ""}, {"mail", "member/bob"}, {"mail", ""}, {"gone", ""}}) {
    WebhookRefreshTarget t;
    t.connection_id = cid;
    if (*principal != '\0') t.principal = *Principal::parse(principal);
    request.targets.push_back(std::move(t));
  }
  EnqueueOptions options;
  if (flags & 1) options.manual_requeue_after_ms = 0;
  Result<SpreadWebhookRefresh> hook =
      SpreadWebhookRefresh::start(keys, verified, request, 1'800'000'000'000, options);
  fuzz::check(hook.ok(), "webhook: a valid request refused");

  std::size_t used = 0;
  while (!hook->done()) {
    const int round = hook->round();
    fuzz::check(round >= 1 && round <= 4, "webhook: a round out of 1..4");
    const std::vector<RedisCommand>& commands = hook->commands();
    fuzz::check(!commands.empty(), "webhook: a round without commands");
    for (const RedisCommand& c : commands) {
      Result<std::optional<uint16_t>> slot = command_slot(c);
      fuzz::check(slot.ok() && slot->has_value(), "webhook: a command not of one slot");
      if (round == 1) fuzz::check(redis_command_changes_nothing(c), "webhook: round 1 writes");
      if (c[0] == "EVAL") {
        fuzz::check(round == 2, "webhook: a script outside round 2");
        fuzz::check(c[2] == "3" || c[2] == "2", "webhook: a script with other keys");
      }
    }
    if (round == 4) {
      fuzz::check(commands.size() == 1 && commands[0][0] == "SET",
                  "webhook: the guard's round holds more than its SET");
    }
    if (replies.size() - used < commands.size()) return 0;
    std::vector<RespValue> batch(replies.begin() + used, replies.begin() + used + commands.size());
    used += commands.size();
    Status s = hook->feed(batch);
    if (!s.ok()) {
      const ErrorCode c = s.error().code;
      fuzz::check(c == ErrorCode::kStoreUnavailable || c == ErrorCode::kStoreNotReady ||
                      c == ErrorCode::kInvalidReply,
                  "webhook: an unexpected error code", s.error().message);
      return 0;
    }
  }
  WebhookRefreshReply reply = hook->take_reply();
  if (reply.replay) {
    fuzz::check(reply.results.empty(), "webhook: a replay with results");
    return 0;
  }
  fuzz::check(reply.results.size() == request.targets.size(), "webhook: not one result a target");
  static const std::set<std::string> kStatuses = {
      "queued", "already_queued", "in_progress", "unknown_connection", "unknown_principal",
      "marked"};
  for (std::size_t i = 0; i < reply.results.size(); ++i) {
    const WebhookRefreshResult& r = reply.results[i];
    fuzz::check(r.connection_id == request.targets[i].connection_id, "webhook: results reordered");
    fuzz::check(kStatuses.count(r.status) == 1, "webhook: a status v1 does not answer");
    const bool none = r.status == "unknown_connection" || r.status == "marked";
    fuzz::check(none == !r.principal.has_value(), "webhook: a principal where v1 gives none");
    if (r.status == "unknown_connection" || r.status == "unknown_principal") {
      fuzz::check(!r.marked_stale, "webhook: an unknown target marked");
    }
  }
  return 0;
}
