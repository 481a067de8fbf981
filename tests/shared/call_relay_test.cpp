#include "shared/call_relay.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/redis_cluster.h"
#include "shared/schema_assets.h"

namespace quiver {
namespace {

const std::string kRid(64, 'a');

RelayRequest echo_request() {
  RelayRequest r;
  r.rid = kRid;
  r.connection_id = "everything";
  r.member_id = "alice";
  r.method = "tools/call";
  r.params = {{"name", "echo"}, {"arguments", {{"message", "hi"}}}};
  r.deadline_ms = 1'700'000'005'000;
  r.at_ms = 1'700'000'000'000;
  return r;
}

TEST(CallRelay, EveryRelayedMethodNamesItsCapability) {
  EXPECT_TRUE(is_relayed_method("tools/call"));
  EXPECT_TRUE(is_relayed_method("completion/complete"));
  EXPECT_FALSE(is_relayed_method("tools/list"));
  struct Case {
    const char* method;
    Json params;
    CapabilityType type;
    const char* key;
  } cases[] = {
      {"tools/call", {{"name", "echo"}}, CapabilityType::kTool, "echo"},
      {"prompts/get", {{"name", "simple-prompt"}}, CapabilityType::kPrompt, "simple-prompt"},
      {"resources/read", {{"uri", "demo://r/1"}}, CapabilityType::kResource, "demo://r/1"},
      {"completion/complete",
       {{"ref", {{"type", "ref/prompt"}, {"name", "p"}}}},
       CapabilityType::kPrompt,
       "p"},
      {"completion/complete",
       {{"ref", {{"type", "ref/resource"}, {"uri", "file:///{path}"}}}},
       CapabilityType::kResourceTemplate,
       "file:///{path}"},
  };
  for (const Case& c : cases) {
    Result<CalledCapability> got = called_capability(c.method, c.params);
    ASSERT_TRUE(got.ok()) << c.method << ": " << got.error().message;
    EXPECT_EQ(got->type, c.type) << c.method;
    EXPECT_EQ(got->key, c.key) << c.method;
  }
  for (const auto& [method, params] : std::vector<std::pair<std::string, Json>>{
           {"tools/call", Json::object()},
           {"tools/call", {{"name", 3}}},
           {"resources/read", {{"name", "x"}}},
           {"completion/complete", {{"ref", {{"type", "ref/other"}}}}},
           {"tools/list", Json::object()},
           {"tools/call", Json::array()}}) {
    EXPECT_EQ(called_capability(method, params).error().code, ErrorCode::kInvalidArgument)
        << method << " " << params.dump();
  }
}

TEST(CallRelay, AnUnknownCapabilityAnswerIsEvidenceAndOtherAnswersAreNot) {
  auto error = [](int64_t code, std::string message) {
    return std::optional<JsonRpcError>(JsonRpcError{code, std::move(message), Json()});
  };
  // What the TypeScript SDK answers for an unknown tool or prompt, and MCP's resource not found.
  EXPECT_TRUE(is_unknown_capability_answer("tools/call", std::nullopt,
                                           error(kJsonRpcInvalidParams, "Tool nope not found")));
  EXPECT_TRUE(is_unknown_capability_answer(
      "tools/call", std::nullopt, error(kJsonRpcInvalidParams, "MCP error -32602: unknown tool")));
  EXPECT_TRUE(is_unknown_capability_answer("prompts/get", std::nullopt,
                                           error(kJsonRpcInvalidParams, "Prompt x not found")));
  EXPECT_TRUE(is_unknown_capability_answer("resources/read", std::nullopt,
                                           error(-32002, "Resource not found")));
  Json is_error = {{"isError", true},
                   {"content", {{{"type", "text"}, {"text", "Unknown tool: x"}}}}};
  EXPECT_TRUE(is_unknown_capability_answer("tools/call", is_error, std::nullopt));
  // Not evidence: bad arguments, another code, a failing tool, a plain result.
  EXPECT_FALSE(is_unknown_capability_answer("tools/call", std::nullopt,
                                            error(kJsonRpcInvalidParams, "message: Required")));
  EXPECT_FALSE(is_unknown_capability_answer("tools/call", std::nullopt,
                                            error(kJsonRpcInternalError, "Tool x not found")));
  Json failed = {{"isError", true}, {"content", {{{"type", "text"}, {"text", "disk full"}}}}};
  EXPECT_FALSE(is_unknown_capability_answer("tools/call", failed, std::nullopt));
  EXPECT_FALSE(
      is_unknown_capability_answer("tools/call", Json{{"content", Json::array()}}, std::nullopt));
}

TEST(CallRelay, FailuresBecomeTheEndpointsRelayFailures) {
  struct Case {
    ErrorCode code;
    RelayFailure failure;
  } cases[] = {{ErrorCode::kNotFound, RelayFailure::kRefused},
               {ErrorCode::kInvalidArgument, RelayFailure::kRefused},
               {ErrorCode::kStoreUnavailable, RelayFailure::kRefused},
               {ErrorCode::kTimeout, RelayFailure::kTimeout},
               {ErrorCode::kTooLarge, RelayFailure::kTooLarge},
               {ErrorCode::kUpstreamUnavailable, RelayFailure::kUpstreamUnavailable},
               {ErrorCode::kTransport, RelayFailure::kUpstreamUnavailable}};
  for (const Case& c : cases) {
    RelayReply r = relay_reply_for_failure(Error(c.code, "why"));
    EXPECT_EQ(r.kind, RelayReply::Kind::kFailed);
    EXPECT_EQ(r.failure, c.failure) << error_code_name(c.code);
    EXPECT_EQ(r.error.code, relay_failure_code(c.failure));
    EXPECT_EQ(r.error.message, "why");
    EXPECT_EQ(r.error.data["code"], error_code_name(c.code));
  }
  RelayReply gone = agent_unreachable_reply();
  EXPECT_EQ(gone.failure, RelayFailure::kAgentUnreachable);
  EXPECT_EQ(gone.error.code, kMcpErrorAgentUnreachable);
  EXPECT_EQ(gone.error.data["code"], kAgentUnreachable);
}

TEST(CallRelay, ReplyRecordsRoundTripEveryKindAndStayBounded) {
  std::vector<RelayReply> replies = {
      RelayReply::ok({{"content", {{{"type", "text"}, {"text", "Echo: hi"}}}}}),
      RelayReply::upstream_error(JsonRpcError{-32602, "Tool nope not found", Json{{"x", 1}}}),
      relay_reply_for_failure(Error(ErrorCode::kTimeout, "no answer within 3000 ms")),
      agent_unreachable_reply(), relay_store_failure_reply(true)};
  for (const RelayReply& r : replies) {
    Result<RelayReply> back = parse_relay_reply(relay_reply_record(r));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->kind, r.kind);
    EXPECT_EQ(back->result, r.result);
    EXPECT_EQ(back->error.code, r.error.code);
    EXPECT_EQ(back->error.message, r.error.message);
    EXPECT_EQ(back->error.data, r.error.data);
    if (r.kind == RelayReply::Kind::kFailed) {
      EXPECT_EQ(back->failure, r.failure);
    }
  }
  // Numbers as the upstream wrote them.
  JsonParseOptions keep;
  keep.keep_number_literals = true;
  Result<Json> literal = parse_json(R"({"n": 1.50, "big": 123456789012345678901234567890})", keep);
  ASSERT_TRUE(literal.ok());
  std::string record = relay_reply_record(RelayReply::ok(*literal));
  EXPECT_NE(record.find("1.50"), std::string::npos) << record;
  EXPECT_NE(record.find("123456789012345678901234567890"), std::string::npos) << record;
  // Over the bound: a TOO_LARGE failure, not the result.
  RelayReply big = RelayReply::ok({{"text", std::string(2000, 'x')}});
  Result<RelayReply> cut = parse_relay_reply(relay_reply_record(big, 1000));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->kind, RelayReply::Kind::kFailed);
  EXPECT_EQ(cut->failure, RelayFailure::kTooLarge);
  EXPECT_EQ(cut->error.code, kMcpErrorResultTooLarge);
  // Hostile records are errors, never a result.
  for (const char* bad : {"", "[]", "{}", R"({"kind":"result"})", R"({"kind":"failed"})",
                          R"({"kind":"failed","failure":"nope","error":{"code":1}})",
                          R"({"kind":"upstream_error","error":{"message":"x"}})"}) {
    EXPECT_EQ(parse_relay_reply(bad).error().code, ErrorCode::kInvalidReply) << bad;
  }
}

TEST(CallRelay, TheEdgesPipelineQueuesTheRequestAndWaitsOnItsReplyList) {
  Result<RedisKeys> keys = RedisKeys::create("team");
  ASSERT_TRUE(keys.ok());
  Result<std::vector<RedisCommand>> cmds = relay_call_commands(*keys, echo_request(), 2500);
  ASSERT_TRUE(cmds.ok()) << cmds.error().message;
  ASSERT_EQ(cmds->size(), 2u);
  const RedisCommand& eval = (*cmds)[0];
  ASSERT_GE(eval.size(), 9u);
  EXPECT_EQ(eval[0], "EVAL");
  EXPECT_NE(eval[1].find("call-agents"), std::string::npos) << "the script's text";
  EXPECT_EQ(eval[2], "2");
  EXPECT_EQ(eval[3], "quiver:{team}:calls");
  EXPECT_EQ(eval[4], "quiver:{team}:call-reply:" + kRid);
  EXPECT_EQ(eval[5], "quiver:{team}:call-agents");
  Result<RelayReply> unreachable = parse_relay_reply(eval[8]);
  ASSERT_TRUE(unreachable.ok());
  EXPECT_EQ(unreachable->failure, RelayFailure::kAgentUnreachable);
  EXPECT_EQ((*cmds)[1], (RedisCommand{"BLPOP", "quiver:{team}:call-reply:" + kRid, "2.500"}));
  // The entry's fields, read back by the agent.
  std::map<std::string, std::string, std::less<>> fields;
  for (std::size_t i = 9; i + 1 < eval.size(); i += 2) fields[eval[i]] = eval[i + 1];
  EXPECT_EQ(fields.size(), key_fields(KeyKind::kCalls).size());
  Result<RelayRequest> back = relay_request_from_fields(fields);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->rid, kRid);
  EXPECT_EQ(back->member_id, "alice");
  EXPECT_EQ(back->params, echo_request().params);
  EXPECT_EQ(back->deadline_ms, echo_request().deadline_ms);

  // Refused before anything is queued: a bad rid, member, method; no time; oversized params.
  RelayRequest bad = echo_request();
  bad.rid = "x";
  EXPECT_EQ(relay_call_commands(*keys, bad, 100).error().code, ErrorCode::kInvalidArgument);
  bad = echo_request();
  bad.member_id = "no/slash";
  EXPECT_EQ(relay_call_commands(*keys, bad, 100).error().code, ErrorCode::kInvalidArgument);
  bad = echo_request();
  bad.method = "tools/list";
  EXPECT_EQ(relay_call_commands(*keys, bad, 100).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_call_commands(*keys, echo_request(), 0).error().code,
            ErrorCode::kInvalidArgument);
  bad = echo_request();
  bad.params["arguments"]["message"] = std::string(kMaxRelayParamsBytes, 'x');
  EXPECT_EQ(relay_call_commands(*keys, bad, 100).error().code, ErrorCode::kTooLarge);
}

TEST(CallRelay, TheCancelMarkOfAnAbandonedCallLivesUntilItsDeadlinePlusAGrace) {
  Result<RedisKeys> keys = RedisKeys::create("team");
  ASSERT_TRUE(keys.ok());
  Result<RedisCommand> mark = relay_cancel_command(*keys, kRid, 10'000, 7'500);
  ASSERT_TRUE(mark.ok()) << mark.error().message;
  EXPECT_EQ(*mark, (RedisCommand{"SET", "quiver:{team}:call-cancel:" + kRid, "1", "PX",
                                 std::to_string(2'500 + kCallCancelGraceMs)}));
  EXPECT_EQ(*keys->call_cancel(kRid), "quiver:{team}:call-cancel:" + kRid);
  // A deadline already past: the grace alone (the agent may still be running it).
  Result<RedisCommand> late = relay_cancel_command(*keys, kRid, 10'000, 20'000);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)[4], std::to_string(kCallCancelGraceMs));
  // Only a call's own rid names a mark.
  for (const char* bad : {"", "x", "../calls", "ABCDEF"}) {
    EXPECT_EQ(relay_cancel_command(*keys, bad, 10'000, 0).error().code, ErrorCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(relay_cancel_command(*keys, std::string(64, 'A'), 10'000, 0).error().code,
            ErrorCode::kInvalidArgument);
}

// Key layout v2: every key of a call on its connection's shard, one slot (the XADD and the BLPOP
// share a node); the script declares call-agents too.
TEST(CallRelay, OnV2TheCallsKeysAreOnItsConnectionsShard) {
  Result<RedisKeys> keys = RedisKeys::create("team", KeyLayout::kV2);
  ASSERT_TRUE(keys.ok());
  const uint32_t k = *keys->connection_shard("everything");
  const std::string tag = "quiver:{team:s:" + std::to_string(k) + "}:";
  Result<std::vector<RedisCommand>> cmds = relay_call_commands_v2(*keys, echo_request(), 2500);
  ASSERT_TRUE(cmds.ok()) << cmds.error().message;
  ASSERT_EQ(cmds->size(), 2u);
  const RedisCommand& eval = (*cmds)[0];
  ASSERT_GE(eval.size(), 9u);
  EXPECT_EQ(eval[0], "EVAL");
  EXPECT_EQ(eval[1], std::string(schema_asset("lua/call_enqueue_v2.lua")));
  EXPECT_EQ(eval[2], "3");
  EXPECT_EQ(eval[3], tag + "calls");
  EXPECT_EQ(eval[4], tag + "call-reply:" + kRid);
  EXPECT_EQ(eval[5], tag + "call-agents");
  EXPECT_EQ(eval[6], std::to_string(kCallStreamMaxLen));
  EXPECT_EQ(eval[7], std::to_string(kCallReplyTtlMs));
  Result<RelayReply> unreachable = parse_relay_reply(eval[8]);
  ASSERT_TRUE(unreachable.ok());
  EXPECT_EQ(unreachable->failure, RelayFailure::kAgentUnreachable);
  EXPECT_EQ((*cmds)[1], (RedisCommand{"BLPOP", tag + "call-reply:" + kRid, "2.500"}));
  // The same entry as v1's (the agents read both the same way).
  Result<std::vector<RedisCommand>> v1 =
      relay_call_commands(*RedisKeys::create("team"), echo_request(), 2500);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(RedisCommand(eval.begin() + 9, eval.end()),
            RedisCommand((*v1)[0].begin() + 9, (*v1)[0].end()));
  Result<std::optional<uint16_t>> a = command_slot(eval);
  Result<std::optional<uint16_t>> b = command_slot((*cmds)[1]);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*relay_reply_key_v2(*keys, kRid, "everything"), tag + "call-reply:" + kRid);

  Result<RedisCommand> mark = relay_cancel_command_v2(*keys, kRid, "everything", 10'000, 7'500);
  ASSERT_TRUE(mark.ok()) << mark.error().message;
  EXPECT_EQ(*mark, (RedisCommand{"SET", tag + "call-cancel:" + kRid, "1", "PX",
                                 std::to_string(2'500 + kCallCancelGraceMs)}));
  EXPECT_EQ(*relay_cancel_key_v2(*keys, kRid, "everything"), tag + "call-cancel:" + kRid);

  // Refused: v1 keys, a bad connection id, the v1 checks.
  Result<RedisKeys> v1_keys = RedisKeys::create("team");
  EXPECT_EQ(relay_call_commands_v2(*v1_keys, echo_request(), 100).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_cancel_command_v2(*v1_keys, kRid, "everything", 1, 0).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_cancel_command_v2(*keys, kRid, "no:colon", 1, 0).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_cancel_command_v2(*keys, "x", "everything", 1, 0).error().code,
            ErrorCode::kInvalidArgument);
  RelayRequest bad = echo_request();
  bad.rid = "x";
  EXPECT_EQ(relay_call_commands_v2(*keys, bad, 100).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_call_commands_v2(*keys, echo_request(), 0).error().code,
            ErrorCode::kInvalidArgument);
  bad = echo_request();
  bad.params["arguments"]["message"] = std::string(kMaxRelayParamsBytes, 'x');
  EXPECT_EQ(relay_call_commands_v2(*keys, bad, 100).error().code, ErrorCode::kTooLarge);
}

TEST(CallRelay, AgentsRefuseMalformedEntries) {
  std::map<std::string, std::string, std::less<>> fields;
  std::vector<std::string> flat = relay_request_fields(echo_request());
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) fields[flat[i]] = flat[i + 1];
  ASSERT_TRUE(relay_request_from_fields(fields).ok());
  for (const char* field : {"rid", "cid", "member", "method", "params", "deadline", "at"}) {
    auto broken = fields;
    broken[field] = field == std::string("params") ? "{not json" : "";
    EXPECT_EQ(relay_request_from_fields(broken).error().code, ErrorCode::kInvalidArgument) << field;
  }
  auto array_params = fields;
  array_params["params"] = "[1]";
  EXPECT_EQ(relay_request_from_fields(array_params).error().code, ErrorCode::kInvalidArgument);
}

TEST(CallRelay, TheEdgeReadsTheReplyOrATimeout) {
  RespValue queued =
      RespValue::array({RespValue::bulk_string("queued"), RespValue::bulk_string("1-0")});
  std::string record = relay_reply_record(RelayReply::ok({{"content", Json::array()}}));
  Result<RelayReply> got = parse_relay_call_replies(
      {queued, RespValue::array({RespValue::bulk_string("k"), RespValue::bulk_string(record)})});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kind, RelayReply::Kind::kResult);
  Result<RelayReply> late = parse_relay_call_replies({queued, RespValue::nil()});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->failure, RelayFailure::kTimeout);
  EXPECT_EQ(parse_relay_call_replies({RespValue::error("NOPERM"), RespValue::nil()}).error().code,
            ErrorCode::kStoreUnavailable);
  EXPECT_EQ(parse_relay_call_replies({queued}).error().code, ErrorCode::kInvalidReply);
}

TEST(CallRelay, TheRequestOfARelayCallCarriesTheCallerAndTheDeadline) {
  RelayCall call{"everything",
                 *Principal::member("alice"),
                 Principal::shared(),
                 "prompts/get",
                 {{"name", "simple-prompt"}},
                 "everything__simple-prompt",
                 Json(7),
                 5000,
                 "2026-07-28"};
  RelayRequest r = relay_request_for(call, kRid, 1000);
  EXPECT_EQ(r.member_id, "alice");
  EXPECT_EQ(r.deadline_ms, 5000);
  EXPECT_EQ(r.at_ms, 1000);
  EXPECT_TRUE(validate_relay_request(r).ok());
}

// The edge's rids: one draw of the host's CSPRNG per request, a distinct rid per call of it.
TEST(CallRelay, RidsComeFromTheHostsSeedOnePerCallAndNeedTheSeed) {
  const std::string seed(kRelaySeedBytes, '\x42');
  Result<std::string> first = relay_rid(seed, 0);
  Result<std::string> second = relay_rid(seed, 1);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(second.ok());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(*first, *relay_rid(seed, 0));  // a function of the seed and the index
  EXPECT_NE(*first, *relay_rid(std::string(kRelaySeedBytes, '\x43'), 0));
  // A valid rid for a request (64 lowercase hex digits).
  RelayRequest r;
  r.rid = *first;
  r.connection_id = "docs";
  r.member_id = "alice";
  r.method = "tools/call";
  r.params = Json{{"name", "search"}};
  r.deadline_ms = 1;
  EXPECT_TRUE(validate_relay_request(r).ok());
  // No randomness from the host: no rid (and no call).
  EXPECT_EQ(relay_rid(std::string(kRelaySeedBytes - 1, 'x'), 0).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay_rid("", 0).error().code, ErrorCode::kInvalidArgument);
}

TEST(CallRelay, AStoreFailureAtTheEdgeIsStoreUnavailableNeverAResult) {
  for (bool maybe_sent : {false, true}) {
    RelayReply r = relay_store_failure_reply(maybe_sent);
    EXPECT_EQ(r.kind, RelayReply::Kind::kFailed);
    EXPECT_EQ(r.failure, RelayFailure::kStoreUnavailable);
    EXPECT_EQ(r.error.code, kMcpErrorStoreUnavailable);
    EXPECT_EQ(r.error.data, (Json{{"code", "STORE_UNAVAILABLE"}}));
    EXPECT_EQ(r.error.message.find("outcome is unknown") != std::string::npos, maybe_sent)
        << r.error.message;
  }
}

}  // namespace
}  // namespace quiver
