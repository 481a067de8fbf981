#include "shared/redis_conversation.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/schema_assets.h"
#include "tests/support/resp_values.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/resp_values.h

RespValue E(std::string message) { return RespValue::error(std::move(message)); }

RedisCommand script(const char* name, std::string key) {
  return {"EVAL", std::string(schema_asset(std::string("lua/") + name)), "1", std::move(key)};
}

std::string encoded(const std::vector<RedisCommand>& commands) {
  std::string out;
  for (const RedisCommand& c : commands) append_command(out, c);
  return out;
}

std::string replies(const std::vector<RespValue>& values) {
  std::string out;
  for (const RespValue& v : values) out += encode_reply(v);
  return out;
}

const RedisCredentials kUserAndPassword{"quiver", "hunter2-hunter2"};

TEST(RedisConversation, EvalshaFormNamesTheScriptBySha1) {
  RedisCommand eval = {"EVAL", std::string(schema_asset("lua/discovery_read.lua")), "1", "k", "a"};
  RedisCommand sha = evalsha_form(eval);
  ASSERT_EQ(sha.size(), eval.size());
  EXPECT_EQ(sha[0], "EVALSHA");
  EXPECT_EQ(sha[1].size(), 40u);
  EXPECT_EQ(sha[1], schema_asset_sha1_of(eval[1]));
  EXPECT_EQ(sha[2], "1");
  EXPECT_EQ(sha[4], "a");
  // A read-only script keeps its form.
  RedisCommand ro = {"EVAL_RO", std::string(schema_asset("lua/discovery_read.lua")), "1", "k", "a"};
  EXPECT_EQ(evalsha_form(ro)[0], "EVALSHA_RO");
  EXPECT_EQ(evalsha_form(ro)[1], sha[1]);
  // Not a compiled-in script, or not EVAL: unchanged.
  RedisCommand other = {"EVAL", "return 1", "0"};
  EXPECT_EQ(evalsha_form(other), other);
  EXPECT_EQ(evalsha_form({"GET", "k"}), (RedisCommand{"GET", "k"}));
  EXPECT_TRUE(is_noscript_reply(RespValue::error("NOSCRIPT No matching script.")));
  EXPECT_FALSE(is_noscript_reply(RespValue::error("ERR other")));
  EXPECT_FALSE(is_noscript_reply(S("NOSCRIPT")));
}

TEST(RedisConversation, AuthGoesFirstOnANewConnectionOnly) {
  RedisConversation c({}, kUserAndPassword);
  RedisRound first = c.begin({{"GET", "a"}});
  EXPECT_TRUE(first.new_connection);
  EXPECT_EQ(first.bytes, encoded({{"AUTH", "quiver", "hunter2-hunter2"}, {"GET", "a"}}));
  EXPECT_TRUE(c.auth_pending());
  EXPECT_EQ(c.awaiting(), 2u);
  EXPECT_EQ(c.feed(replies({RespValue::simple_string("OK"), S("1")})), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), std::vector<RespValue>{S("1")});  // AUTH's +OK is not the caller's

  RedisRound second = c.begin({{"GET", "b"}});
  EXPECT_FALSE(second.new_connection);
  EXPECT_EQ(second.bytes, encoded({{"GET", "b"}}));
  EXPECT_FALSE(c.auth_pending());

  // Without a password, no AUTH; a password alone is the default user's.
  RedisConversation open({}, {});
  EXPECT_EQ(open.begin({{"PING"}}).bytes, encoded({{"PING"}}));
  RedisConversation default_user({}, {"", "pw-pw-pw"});
  EXPECT_EQ(default_user.begin({{"PING"}}).bytes, encoded({{"AUTH", "pw-pw-pw"}, {"PING"}}));
}

TEST(RedisConversation, ScriptsGoBySha1UnlessSentAsText) {
  RedisCommand eval = script("discovery_read.lua", "k");
  RedisConversation c;
  EXPECT_EQ(c.begin({eval, {"GET", "x"}}).bytes, encoded({evalsha_form(eval), {"GET", "x"}}));
  RedisConversation text;
  EXPECT_EQ(text.begin({eval}, ScriptForm::kText).bytes, encoded({eval}));
}

TEST(RedisConversation, PipelinedRepliesSplitAtEveryByte) {
  const std::vector<RespValue> expected = {
      S("one"), I(2), A({S("a"), RespValue::nil(), A({I(-1)})}), E("ERR kept as a value")};
  const std::string wire = replies(expected);
  for (std::size_t cut = 0; cut <= wire.size(); ++cut) {
    RedisConversation c;
    (void)c.begin({{"GET", "1"}, {"INCR", "2"}, {"X"}, {"Y"}});
    RedisTurn t = RedisTurn::kRead;
    if (cut > 0) t = c.feed(std::string_view(wire).substr(0, cut));
    if (cut < wire.size()) {
      ASSERT_EQ(t, RedisTurn::kRead) << cut;
      t = c.feed(std::string_view(wire).substr(cut));
    }
    ASSERT_EQ(t, RedisTurn::kDone) << cut;
    EXPECT_EQ(c.take_replies(), expected) << cut;
  }
  // And one byte at a time, with AUTH ahead of them.
  RedisConversation c({}, kUserAndPassword);
  (void)c.begin({{"GET", "1"}, {"INCR", "2"}, {"X"}, {"Y"}});
  const std::string with_auth = "+OK\r\n" + wire;
  RedisTurn t = RedisTurn::kRead;
  for (std::size_t i = 0; i < with_auth.size(); ++i) {
    ASSERT_EQ(t, RedisTurn::kRead) << i;
    t = c.feed(std::string_view(with_auth).substr(i, 1));
  }
  ASSERT_EQ(t, RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), expected);
}

TEST(RedisConversation, NoscriptIsRetriedAsEvalOnceInPlace) {
  RedisCommand read = script("discovery_read.lua", "k1");
  RedisCommand enqueue = script("revalidate_enqueue.lua", "k2");
  RedisConversation c({}, kUserAndPassword);
  (void)c.begin({read, {"GET", "g"}, enqueue});
  // Redis lost its scripts: both EVALSHAs answer NOSCRIPT, the GET is answered.
  EXPECT_EQ(c.feed(replies({RespValue::simple_string("OK"), E("NOSCRIPT No matching script."),
                            S("g"), E("NOSCRIPT No matching script.")})),
            RedisTurn::kWrite);
  EXPECT_TRUE(c.answered());
  EXPECT_EQ(c.take_write(), encoded({read, enqueue}));  // the text, in command order
  EXPECT_EQ(c.awaiting(), 2u);
  EXPECT_EQ(c.feed(replies({S("read")})), RedisTurn::kRead);
  EXPECT_EQ(c.feed(replies({I(1)})), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{S("read"), S("g"), I(1)}));
}

TEST(RedisConversation, NoscriptIsRetriedOnlyOnce) {
  RedisCommand read = script("discovery_read.lua", "k1");
  RedisConversation c;
  (void)c.begin({read});
  EXPECT_EQ(c.feed(replies({E("NOSCRIPT No matching script.")})), RedisTurn::kWrite);
  (void)c.take_write();
  // A second NOSCRIPT (EVAL never answers it, but a broken proxy might): the error, passed on.
  EXPECT_EQ(c.feed(replies({E("NOSCRIPT again")})), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), std::vector<RespValue>{E("NOSCRIPT again")});
  // The next round starts over: its scripts go by SHA-1 again.
  EXPECT_EQ(c.begin({read}).bytes, encoded({evalsha_form(read)}));
}

TEST(RedisConversation, DecodedRepliesTakeTheSamePath) {
  RedisCommand read = script("discovery_read.lua", "k1");
  RedisConversation c({}, kUserAndPassword);
  (void)c.begin({{"PING"}, read});
  EXPECT_EQ(c.awaiting(), 3u);
  EXPECT_EQ(c.take(RespValue::simple_string("OK")), RedisTurn::kRead);
  EXPECT_EQ(c.take(RespValue::simple_string("PONG")), RedisTurn::kRead);
  EXPECT_EQ(c.take(E("NOSCRIPT No matching script.")), RedisTurn::kWrite);
  EXPECT_EQ(c.take_write(), encoded({read}));
  EXPECT_EQ(c.take(I(7)), RedisTurn::kDone);
  EXPECT_EQ(c.take_replies(), (std::vector<RespValue>{RespValue::simple_string("PONG"), I(7)}));
}

TEST(RedisConversation, AuthRefusedOrNotYetPossible) {
  struct Case {
    const char* reply;
    ErrorCode code;
    const char* message;
  };
  for (const Case& k : {
           Case{"WRONGPASS invalid username-password pair", ErrorCode::kUnauthenticated,
                "Redis refused AUTH: WRONGPASS invalid username-password pair"},
           Case{"ERR invalid password", ErrorCode::kUnauthenticated,
                "Redis refused AUTH: ERR invalid password"},
           Case{"NOPERM this user has no permissions", ErrorCode::kUnauthenticated,
                "Redis refused AUTH: NOPERM this user has no permissions"},
           Case{"LOADING Redis is loading the dataset in memory", ErrorCode::kStoreUnavailable,
                "Redis could not take AUTH: LOADING Redis is loading the dataset in memory"},
       }) {
    RedisConversation c({}, kUserAndPassword);
    (void)c.begin({{"GET", "a"}});
    EXPECT_EQ(c.feed(replies({E(k.reply), E("NOAUTH Authentication required.")})),
              RedisTurn::kFailed);
    EXPECT_EQ(c.error().code, k.code) << k.reply;
    EXPECT_EQ(c.error().message, k.message);
    EXPECT_TRUE(c.answered());  // Redis answered: refused, not stalled
    EXPECT_FALSE(c.connected());
    EXPECT_TRUE(c.take_replies().empty());
    // The next round opens a new connection and authenticates again.
    RedisRound again = c.begin({{"GET", "a"}});
    EXPECT_TRUE(again.new_connection);
    EXPECT_EQ(again.bytes.rfind("*3\r\n$4\r\nAUTH", 0), 0u);
  }
  RedisConversation odd({}, kUserAndPassword);
  (void)odd.begin({});
  EXPECT_EQ(odd.take(S("OK")), RedisTurn::kFailed);  // a bulk "OK" is not AUTH's +OK
  EXPECT_EQ(odd.error().message, "Redis could not take AUTH: unexpected reply");
}

TEST(RedisConversation, ABrokenStreamFailsTheConnection) {
  RedisConversation c;
  (void)c.begin({{"GET", "a"}});
  EXPECT_EQ(c.feed("$1\r\nx\r\n:2\r\n"), RedisTurn::kFailed);
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidReply);
  EXPECT_EQ(c.error().message, "Redis sent more than was asked");
  EXPECT_FALSE(c.connected());
  EXPECT_FALSE(c.answered() && c.in_round());

  RedisConversation bad;
  (void)bad.begin({{"GET", "a"}});
  EXPECT_EQ(bad.feed("?what\r\n"), RedisTurn::kFailed);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidReply);
  EXPECT_FALSE(bad.answered());
  EXPECT_TRUE(bad.begin({{"GET", "a"}}).new_connection);

  RedisConversation idle;
  EXPECT_EQ(idle.feed(":1\r\n"), RedisTurn::kFailed);  // nothing was asked
}

TEST(RedisConversation, ConnectionFailuresSayWhetherAuthAnswered) {
  RedisConversation c({}, kUserAndPassword);
  (void)c.begin({{"GET", "a"}});
  Error e = c.connection_failed("timed out after 1000 ms");
  EXPECT_EQ(e.code, ErrorCode::kTimeout);
  EXPECT_EQ(e.message, "Redis: AUTH timed out (no reply): timed out after 1000 ms");
  EXPECT_FALSE(c.connected());
  (void)c.begin({{"GET", "a"}});
  e = c.connection_failed("reset by peer");
  EXPECT_EQ(e.code, ErrorCode::kTransport);
  EXPECT_EQ(e.message, "Redis: the connection failed before AUTH answered: reset by peer");
  // Once AUTH has answered (with the round that carried it), a failure is the connection's alone.
  (void)c.begin({{"GET", "a"}});
  EXPECT_EQ(c.feed("+OK\r\n:1\r\n"), RedisTurn::kDone);
  (void)c.begin({{"GET", "b"}});
  e = c.connection_failed("reset by peer");
  EXPECT_EQ(e.code, ErrorCode::kTransport);
  EXPECT_EQ(e.message, "Redis: reset by peer");
}

TEST(RedisConversation, KeepsTheRepliesBytesWithoutAuth) {
  RedisCommand read = script("discovery_read.lua", "k1");
  RedisConversation c({}, kUserAndPassword);
  (void)c.begin({read}, ScriptForm::kBySha, /*keep_bytes=*/true);
  EXPECT_EQ(c.feed("+OK\r\n$5\r\nhel"), RedisTurn::kRead);
  EXPECT_EQ(c.feed("lo\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.reply_bytes(), "$5\r\nhello\r\n");
  // After a NOSCRIPT retry: the EVAL's reply alone.
  (void)c.begin({read}, ScriptForm::kBySha, true);
  EXPECT_EQ(c.feed("-NOSCRIPT No matching script.\r\n"), RedisTurn::kWrite);
  EXPECT_EQ(c.feed(":3\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.reply_bytes(), ":3\r\n");
  // Not asked: nothing kept.
  (void)c.begin({{"GET", "a"}});
  EXPECT_EQ(c.feed(":3\r\n"), RedisTurn::kDone);
  EXPECT_EQ(c.reply_bytes(), "");
}

TEST(RedisConversation, ReplyErrorsAreMappedByKind) {
  EXPECT_EQ(redis_reply_error(E("LOADING Redis is loading"), "read").code,
            ErrorCode::kStoreUnavailable);
  EXPECT_EQ(redis_reply_error(E("OOM command not allowed"), "write").code,
            ErrorCode::kStoreUnavailable);
  EXPECT_EQ(redis_reply_error(E("NOPERM no"), "read").code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(redis_reply_error(E("NOAUTH Authentication required."), "read").code,
            ErrorCode::kUnauthenticated);
  Error bug = redis_reply_error(E("WRONGTYPE Operation against a key"), "lease");
  EXPECT_EQ(bug.code, ErrorCode::kInternal);
  EXPECT_EQ(bug.message, "redis lease: WRONGTYPE Operation against a key");
}

TEST(RedisConversation, TurnNames) {
  EXPECT_STREQ(redis_turn_name(RedisTurn::kRead), "read");
  EXPECT_STREQ(redis_turn_name(RedisTurn::kWrite), "write");
  EXPECT_STREQ(redis_turn_name(RedisTurn::kDone), "done");
  EXPECT_STREQ(redis_turn_name(RedisTurn::kFailed), "failed");
}

}  // namespace
}  // namespace quiver
