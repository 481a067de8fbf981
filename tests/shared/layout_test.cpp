// The key layout record (shared/layout.h) and the agents' layout capability in `call-agents`.
#include "shared/layout.h"

#include <gtest/gtest.h>

#include "shared/redis_cluster.h"
#include "shared/redis_keys.h"

namespace quiver {
namespace {

TEST(Layout, TheRecordIsVersionStateAndTime) {
  Result<LayoutRecord> r = parse_layout_record("v2:filling:1700000000000");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->version, "v2");
  EXPECT_EQ(r->state, "filling");
  EXPECT_EQ(r->at_ms, 1700000000000);
  r = parse_layout_record("v1:ready:0");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->version, "v1");
  for (const char* bad :
       {"", "v2", "v2:filling", "v2:filling:", ":filling:1", "v2::1", "V2:filling:1",
        "v2:Filling:1", "v2:filling:-1", "v2:filling:1x", "v2:filling:1:2",
        "v2:filling:1234567890123456789", "v2345678901234567:filling:1"}) {
    Result<LayoutRecord> p = parse_layout_record(bad);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok()) {
      EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
    }
  }
}

TEST(Layout, ThisBuildReadsV1AndNothingElse) {
  EXPECT_EQ(supported_layouts(), (std::vector<std::string>{"v1", "v2"}));
  EXPECT_TRUE(layout_readable(std::nullopt));  // no record: layout v1
  EXPECT_TRUE(layout_readable(std::string_view("v1:ready:1")));
  EXPECT_TRUE(layout_readable(std::string_view("v1:anything")));
  // The copy to v2 under way: v1 holds the data until the switch.
  EXPECT_TRUE(layout_readable(std::string_view("v2:filling:1")));
  for (const char* other : {"v2:ready:1", "v10:ready:1", "v1", "", "garbage", "V1:ready:1",
                            " v1:ready:1", "v2:filling", "v2:fillingx:1"}) {
    EXPECT_FALSE(layout_readable(std::string_view(other))) << other;
  }
  Error e = unknown_layout_error("quiver:{team}:layout", "v3:ready:1", "discovery read");
  EXPECT_EQ(e.code, ErrorCode::kStoreUnavailable);
  EXPECT_NE(e.message.find("quiver:{team}:layout"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("`v3:ready:1`"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("discovery read"), std::string::npos) << e.message;
  EXPECT_TRUE(is_unknown_layout_error(e));
  EXPECT_FALSE(is_layout_migrating_error(e));
  // While filling, a writer's refusal says the copy is under way.
  Error filling = unknown_layout_error("quiver:{team}:layout", "v2:filling:1", "store check");
  EXPECT_NE(filling.message.find("`v2:filling:1`"), std::string::npos) << filling.message;
  EXPECT_NE(filling.message.find("migrate-layout"), std::string::npos) << filling.message;
  EXPECT_TRUE(is_layout_migrating_error(filling));
  EXPECT_TRUE(is_unknown_layout_error(filling));
}

TEST(Layout, WritersWriteV1OrV2AndNothingWhileTheCopyRuns) {
  EXPECT_EQ(write_layout(std::nullopt), KeyLayout::kV1);
  EXPECT_EQ(write_layout(std::string_view("v1:ready:1")), KeyLayout::kV1);
  EXPECT_EQ(write_layout(std::string_view("v2:ready:1765000000000")), KeyLayout::kV2);
  for (const char* other : {"v2:filling:1", "v2:ready:x", "v3:ready:1", "", "garbage"}) {
    EXPECT_EQ(write_layout(std::string_view(other)), std::nullopt) << other;
  }
  EXPECT_EQ(layout_record_value(KeyLayout::kV2, "filling", 17), "v2:filling:17");
  EXPECT_EQ(layout_record_value(KeyLayout::kV2, "ready", 18), "v2:ready:18");
  EXPECT_TRUE(parse_layout_record(layout_record_value(KeyLayout::kV2, "ready", 18)).ok());
}

TEST(Layout, ReadersReadV2OnlyOnceItIsReady) {
  EXPECT_EQ(read_layout(std::nullopt), KeyLayout::kV1);
  EXPECT_EQ(read_layout(std::string_view("v1:ready:1")), KeyLayout::kV1);
  EXPECT_EQ(read_layout(std::string_view("v2:ready:1765000000000")), KeyLayout::kV2);
  // The copy is not complete while filling: v1 is read; a record that does not parse names
  // nothing.
  EXPECT_EQ(read_layout(std::string_view("v2:filling:1")), KeyLayout::kV1);
  for (const char* other : {"v2:ready:", "v2:ready:x", "v2:ready", "v3:ready:1", "v20:ready:1",
                            "V2:ready:1", "v2:Ready:1", ""}) {
    EXPECT_EQ(read_layout(std::string_view(other)), std::nullopt) << other;
  }
  auto reply = [](RespValue value) {
    return RespValue::array({RespValue::bulk_string(kLayoutUnknownTag), std::move(value),
                             RespValue::bulk_string("quiver:{team}:layout")});
  };
  EXPECT_EQ(layout_reply_readable_record(reply(RespValue::bulk_string("v2:ready:7"))),
            std::optional<std::string>("v2:ready:7"));
  EXPECT_EQ(layout_reply_readable_record(reply(RespValue::bulk_string("v2:filling:7"))),
            std::nullopt);
  EXPECT_EQ(layout_reply_readable_record(reply(RespValue::integer_value(1))), std::nullopt);
  EXPECT_EQ(layout_reply_readable_record(RespValue::bulk_string("v2:ready:7")), std::nullopt);
  Result<RedisKeys> v2 = keys_for_layout("team", KeyLayout::kV2);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->key_layout(), KeyLayout::kV2);
  EXPECT_EQ(v2->shard_count(), kLayoutV2Shards);
  EXPECT_EQ(keys_for_layout("team", KeyLayout::kV1)->key_layout(), KeyLayout::kV1);
  // The records every reader starts from keep their names in both layouts.
  EXPECT_EQ(v2->layout(), RedisKeys::create("team")->layout());
  EXPECT_EQ(v2->namespace_record(), RedisKeys::create("team")->namespace_record());
}

TEST(Layout, TheKeyIsInTheNamespaceTagAndParsesBack) {
  RedisKeys keys = *RedisKeys::create("team");
  EXPECT_EQ(keys.layout(), "quiver:{team}:layout");
  EXPECT_EQ(cluster_key_slot(keys.layout()), cluster_key_slot(keys.namespace_record()));
  Result<ParsedKey> parsed = keys.parse(keys.layout());
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->kind, KeyKind::kLayout);
  EXPECT_EQ(std::string(key_redis_type(KeyKind::kLayout)), "STRING");
}

TEST(Layout, AgentsDeclareTheirLayoutsInTheCallAgentsMark) {
  EXPECT_EQ(call_agents_mark("agent-h-1-ab"), "agent-h-1-ab layouts=v1,v2");
  Result<CallAgentsMark> m = parse_call_agents_mark(call_agents_mark("agent-h-1-ab"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->consumer, "agent-h-1-ab");
  EXPECT_EQ(m->layouts, (std::vector<std::string>{"v1", "v2"}));
  EXPECT_TRUE(m->declared);
  // An agent older than the layout record wrote its consumer name alone: it reads v1 only.
  m = parse_call_agents_mark("agent-old:7");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->consumer, "agent-old:7");
  EXPECT_EQ(m->layouts, std::vector<std::string>{"v1"});
  EXPECT_FALSE(m->declared);
  m = parse_call_agents_mark("a layouts=v1,v2");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->layouts, (std::vector<std::string>{"v1", "v2"}));
  for (const char* bad : {"", " layouts=v1", "a layouts=", "a layouts=v1,", "a layouts=V1",
                          "a versions=v1", "a layouts=v1 x"}) {
    EXPECT_FALSE(parse_call_agents_mark(bad).ok()) << bad;
  }
}

// What RedisStore's layout gate lets through to a namespace in a layout it does not know, and what
// RedisClusterPool sends again after a failed connection: reads only.
TEST(Layout, OnlyReadsChangeNothing) {
  for (const RedisCommand& read :
       {RedisCommand{"GET", "k"}, RedisCommand{"MGET", "a", "b"}, RedisCommand{"hgetall", "k"},
        RedisCommand{"SCAN", "0"}, RedisCommand{"ZRANGEBYSCORE", "k", "-inf", "1"},
        RedisCommand{"ZMSCORE", "k", "m"}, RedisCommand{"SSCAN", "k", "0"},
        RedisCommand{"XREAD", "STREAMS", "s", "0"}, RedisCommand{"EVAL_RO", "x", "0"},
        RedisCommand{"PTTL", "k"}}) {
    EXPECT_TRUE(redis_command_changes_nothing(read)) << read[0];
  }
  for (const RedisCommand& write :
       {RedisCommand{}, RedisCommand{"SET", "k", "v"}, RedisCommand{"EVAL", "x", "0"},
        RedisCommand{"EVALSHA", "x", "0"}, RedisCommand{"XREADGROUP", "GROUP", "g", "c"},
        RedisCommand{"XADD", "s", "*", "a", "b"}, RedisCommand{"INCR", "k"},
        RedisCommand{"DEL", "k"}, RedisCommand{"XGROUP", "CREATE", "s", "g", "$"},
        RedisCommand{"BLPOP", "k", "1"}, RedisCommand{"MULTI"}}) {
    EXPECT_FALSE(redis_command_changes_nothing(write)) << (write.empty() ? "" : write[0]);
  }
}

}  // namespace
}  // namespace quiver
