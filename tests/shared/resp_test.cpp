#include "shared/resp.h"

#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

using Type = RespValue::Type;
using namespace std::string_literals;

RespValue S(std::string s) { return RespValue::simple_string(std::move(s)); }
RespValue B(std::string s) { return RespValue::bulk_string(std::move(s)); }
RespValue I(int64_t i) { return RespValue::integer_value(i); }
RespValue E(std::string s) { return RespValue::error(std::move(s)); }
RespValue A(std::vector<RespValue> v) { return RespValue::array(std::move(v)); }
RespValue Nil() { return RespValue::nil(); }

// Decodes `bytes` fed in one piece; fails the test on a decoder error.
std::vector<RespValue> decode_whole(std::string_view bytes, RespLimits limits = {}) {
  RespDecoder d(limits);
  std::vector<RespValue> out;
  EXPECT_TRUE(d.feed(bytes).ok());
  while (true) {
    auto r = d.next();
    EXPECT_TRUE(r.ok()) << r.error().message;
    if (!r.ok() || !r->has_value()) break;
    out.push_back(std::move(**r));
  }
  EXPECT_TRUE(d.at_boundary());
  return out;
}

// Feeds `bytes` in the pieces that `cuts` (ascending offsets) make, draining after each feed.
// Returns the replies, or the first error.
Result<std::vector<RespValue>> decode_in_pieces(std::string_view bytes,
                                                const std::vector<size_t>& cuts,
                                                RespLimits limits = {}) {
  RespDecoder d(limits);
  std::vector<RespValue> out;
  size_t from = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(bytes.size());
  for (size_t end : ends) {
    Status fed = d.feed(bytes.substr(from, end - from));
    if (!fed.ok()) return fed.error();
    from = end;
    while (true) {
      auto r = d.next();
      if (!r.ok()) return r.error();
      if (!r->has_value()) break;
      out.push_back(std::move(**r));
    }
  }
  return out;
}

Result<std::vector<RespValue>> decode_bytewise(std::string_view bytes, RespLimits limits = {}) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < bytes.size(); ++i) cuts.push_back(i);
  return decode_in_pieces(bytes, cuts, limits);
}

RespValue decode_one(std::string_view bytes) {
  auto all = decode_whole(bytes);
  EXPECT_EQ(all.size(), 1u) << bytes;
  return all.empty() ? E("no reply") : all.front();
}

// The first error `bytes` produce, fed whole.
Error decode_error(std::string_view bytes, RespLimits limits = {}) {
  auto r = decode_in_pieces(bytes, {}, limits);
  EXPECT_FALSE(r.ok()) << "decoded without error: " << bytes;
  return r.ok() ? Error() : r.error();
}

// Every reply type, nesting, nil of both kinds, binary bulk payloads, edge-of-range integers.
const std::string kCorpus =
    "+OK\r\n"
    "-ERR unknown command 'FOO'\r\n"
    ":0\r\n"
    ":-42\r\n"
    ":9223372036854775807\r\n"
    ":-9223372036854775808\r\n"
    "$5\r\nhello\r\n"
    "$0\r\n\r\n"
    "$-1\r\n"
    "*-1\r\n"
    "*0\r\n"
    "$11\r\na\r\nb\0c\r\n\r\n\xff\r\n"
    "*3\r\n:1\r\n*2\r\n$1\r\na\r\n*2\r\n+deep\r\n$-1\r\n*0\r\n"
    "*4\r\n-WRONGTYPE bad\r\n$4\r\n\r\n\r\n\r\n:7\r\n*-1\r\n"
    "+\r\n"s;

std::vector<RespValue> corpus_values() {
  return {S("OK"),
          E("ERR unknown command 'FOO'"),
          I(0),
          I(-42),
          I(std::numeric_limits<int64_t>::max()),
          I(std::numeric_limits<int64_t>::min()),
          B("hello"),
          B(""),
          Nil(),
          Nil(),
          A({}),
          B("a\r\nb\0c\r\n\r\n\xff"s),
          A({I(1), A({B("a"), A({S("deep"), Nil()})}), A({})}),
          A({E("WRONGTYPE bad"), B("\r\n\r\n"), I(7), Nil()}),
          S("")};
}

// --- Encoding -----------------------------------------------------------------------------------

TEST(RespEncode, CommandIsAnArrayOfBulkStrings) {
  EXPECT_EQ(encode_command({"SET", "key", "value"}),
            "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n");
  EXPECT_EQ(encode_command({"PING"}), "*1\r\n$4\r\nPING\r\n");
}

TEST(RespEncode, ArgumentsAreBinarySafe) {
  std::string binary = "a\r\nb\0c"s;
  EXPECT_EQ(encode_command({"SET", binary, ""}),
            "*3\r\n$3\r\nSET\r\n$6\r\na\r\nb\0c\r\n$0\r\n\r\n"s);
  // Redis parses requests as RESP too: our decoder reads the command back unchanged.
  EXPECT_EQ(decode_one(encode_command({"SET", binary, ""})), A({B("SET"), B(binary), B("")}));
}

TEST(RespEncode, EmptyArgvIsNoCommand) {
  EXPECT_EQ(encode_command({}), "");
  std::string out = "x";
  append_command(out, {});
  EXPECT_EQ(out, "x");
}

TEST(RespEncode, PipelineCountsTheRepliesItWillGet) {
  Pipeline p;
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(p.add({"SET", "k", "v"}));
  EXPECT_TRUE(p.add({"GET", "k"}));
  EXPECT_FALSE(p.add({}));  // appends nothing, counts nothing: replies stay in step
  EXPECT_TRUE(p.add({"DEL", "k"}));
  EXPECT_EQ(p.expected_replies(), 3u);
  EXPECT_EQ(p.bytes(), encode_command({"SET", "k", "v"}) + encode_command({"GET", "k"}) +
                           encode_command({"DEL", "k"}));
  // The commands decode back as three arrays, in order.
  auto back = decode_all(p.bytes(), p.expected_replies());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ((*back)[1], A({B("GET"), B("k")}));

  std::string before = p.bytes();
  EXPECT_EQ(p.take_bytes(), before);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(p.expected_replies(), 0u);
  EXPECT_EQ(p.bytes(), "");
}

// --- Values -------------------------------------------------------------------------------------

TEST(RespValue, AccessorsAnswerOnlyForTheirType) {
  RespValue bulk = B("17");
  EXPECT_EQ(bulk.as_string(), "17");
  EXPECT_EQ(bulk.as_int(), 17);  // counters come back from GET/HGET as bulk strings
  EXPECT_EQ(bulk.as_array(), nullptr);
  EXPECT_FALSE(bulk.error_message().has_value());
  EXPECT_FALSE(bulk.is_nil());

  EXPECT_FALSE(B("17x").as_int().has_value());
  EXPECT_FALSE(B("+1").as_int().has_value());
  EXPECT_FALSE(B(" 1").as_int().has_value());
  EXPECT_FALSE(B("").as_int().has_value());
  EXPECT_FALSE(B("99999999999999999999").as_int().has_value());
  EXPECT_EQ(B("-9223372036854775808").as_int(), std::numeric_limits<int64_t>::min());

  RespValue err = E("ERR no");
  EXPECT_FALSE(err.as_string().has_value());
  EXPECT_FALSE(err.as_int().has_value());
  EXPECT_EQ(err.error_message(), "ERR no");
  EXPECT_TRUE(err.is_error());

  RespValue nil = Nil();
  EXPECT_TRUE(nil.is_nil());
  EXPECT_FALSE(nil.as_string().has_value());
  EXPECT_FALSE(nil.as_int().has_value());
  EXPECT_EQ(nil.as_array(), nullptr);

  RespValue arr = A({I(1), Nil()});
  ASSERT_NE(arr.as_array(), nullptr);
  EXPECT_EQ(arr.as_array()->size(), 2u);
  EXPECT_FALSE(arr.as_string().has_value());
  EXPECT_FALSE(arr.as_int().has_value());

  EXPECT_TRUE(S("OK").is_ok());
  EXPECT_FALSE(B("OK").is_ok());
  EXPECT_EQ(I(5).as_int(), 5);
  EXPECT_FALSE(I(5).as_string().has_value());
  EXPECT_STREQ(resp_type_name(Type::kBulkString), "bulk_string");
}

TEST(RespValue, EqualityLooksAtTypeAndContent) {
  EXPECT_EQ(B("x"), B("x"));
  EXPECT_NE(B("x"), S("x"));
  EXPECT_NE(E("x"), S("x"));
  EXPECT_NE(A({I(1)}), A({I(1), I(2)}));
  EXPECT_EQ(A({A({Nil()})}), A({A({Nil()})}));
}

TEST(RespValue, DebugStringEscapesBytes) {
  EXPECT_EQ(A({S("OK"), E("ERR x"), I(-1), Nil(), B("a\r\n\0\""s)}).debug_string(),
            "[+OK, -ERR x, -1, nil, \"a\\r\\n\\x00\\\"\"]");
  std::string big(1000, 'x');
  EXPECT_NE(B(big).debug_string().find("(1000 bytes)"), std::string::npos);
}

// --- Decoding: every type -----------------------------------------------------------------------

TEST(RespDecode, EveryReplyType) {
  EXPECT_EQ(decode_one("+OK\r\n"), S("OK"));
  EXPECT_EQ(decode_one("-ERR unknown command\r\n"), E("ERR unknown command"));
  EXPECT_EQ(decode_one(":1234\r\n"), I(1234));
  EXPECT_EQ(decode_one(":-1\r\n"), I(-1));
  EXPECT_EQ(decode_one("$5\r\nhello\r\n"), B("hello"));
  EXPECT_EQ(decode_one("$0\r\n\r\n"), B(""));
  EXPECT_EQ(decode_one("*2\r\n$1\r\na\r\n:2\r\n"), A({B("a"), I(2)}));
  EXPECT_EQ(decode_one("*0\r\n"), A({}));
}

TEST(RespDecode, NilBulkAndNilArrayAreNil) {
  RespValue nil_bulk = decode_one("$-1\r\n");
  RespValue nil_array = decode_one("*-1\r\n");
  EXPECT_TRUE(nil_bulk.is_nil());
  EXPECT_TRUE(nil_array.is_nil());
  EXPECT_EQ(decode_one("*3\r\n$-1\r\n*-1\r\n$0\r\n\r\n"), A({Nil(), Nil(), B("")}));
}

TEST(RespDecode, NestedArrays) {
  // What EVAL returns for {1, {"a", {"deep", false}}, {}}.
  EXPECT_EQ(decode_one("*3\r\n:1\r\n*2\r\n$1\r\na\r\n*2\r\n+deep\r\n$-1\r\n*0\r\n"),
            A({I(1), A({B("a"), A({S("deep"), Nil()})}), A({})}));
  // The deepest nesting the reader supports.
  std::string deep;
  for (int i = 0; i < RespLimits::kMaxSupportedDepth; ++i) deep += "*1\r\n";
  deep += ":7\r\n";
  RespValue v = decode_one(deep);
  for (int i = 0; i < RespLimits::kMaxSupportedDepth; ++i) {
    ASSERT_TRUE(v.is_array());
    ASSERT_EQ(v.elements.size(), 1u);
    RespValue inner = v.elements[0];
    v = inner;
  }
  EXPECT_EQ(v, I(7));
}

TEST(RespDecode, BulkStringsAreBinarySafe) {
  std::string payload = "\r\n$3\r\n*1\r\n\0\xff-ERR\r\n"s;
  std::string wire = "$" + std::to_string(payload.size()) + "\r\n" + payload + "\r\n+after\r\n";
  auto all = decode_whole(wire);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], B(payload));
  EXPECT_EQ(all[0].str.size(), 18u);
  EXPECT_EQ(all[1], S("after"));
}

TEST(RespDecode, CorpusDecodesToTheExpectedValues) {
  EXPECT_EQ(decode_whole(kCorpus), corpus_values());
}

TEST(RespDecode, SplitAtEveryByteBoundaryGivesTheSameReplies) {
  const std::vector<RespValue> expected = corpus_values();
  auto bytewise = decode_bytewise(kCorpus);
  ASSERT_TRUE(bytewise.ok()) << bytewise.error().message;
  EXPECT_EQ(*bytewise, expected);
  for (size_t cut = 0; cut <= kCorpus.size(); ++cut) {
    auto two = decode_in_pieces(kCorpus, {cut});
    ASSERT_TRUE(two.ok()) << "cut at " << cut << ": " << two.error().message;
    ASSERT_EQ(*two, expected) << "cut at " << cut;
  }
  for (size_t a = 1; a < kCorpus.size(); a += 7) {
    for (size_t b = a; b < kCorpus.size(); b += 3) {
      auto three = decode_in_pieces(kCorpus, {a, b});
      ASSERT_TRUE(three.ok()) << "cuts at " << a << "," << b;
      ASSERT_EQ(*three, expected) << "cuts at " << a << "," << b;
    }
  }
}

TEST(RespDecode, RepliesComeOutOneAtATimeAndOnlyWhenComplete) {
  RespDecoder d;
  EXPECT_TRUE(d.at_boundary());
  ASSERT_TRUE(d.feed("$5\r\nhel").ok());
  auto r = d.next();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE(d.at_boundary());
  ASSERT_TRUE(d.feed("lo\r\n:1\r\n").ok());
  r = d.next();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(**r, B("hello"));
  EXPECT_FALSE(d.at_boundary());  // ":1" is still undecoded
  r = d.next();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(**r, I(1));
  EXPECT_TRUE(d.at_boundary());
  EXPECT_EQ(d.replies_decoded(), 2u);
  r = d.next();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
}

TEST(RespDecode, ManyRepliesInOneFeed) {
  std::string wire;
  std::vector<RespValue> expected;
  for (int i = 0; i < 5000; ++i) {
    std::string s = "value-" + std::to_string(i);
    wire += ":" + std::to_string(i) + "\r\n$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
    wire += "*2\r\n+" + std::to_string(i) + "\r\n$-1\r\n";
    expected.push_back(I(i));
    expected.push_back(B(s));
    expected.push_back(A({S(std::to_string(i)), Nil()}));
  }
  EXPECT_EQ(decode_whole(wire), expected);
  auto all = decode_all(wire, expected.size());
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(*all, expected);
}

TEST(RespDecode, DecoderCanMoveMidReply) {
  RespDecoder a;
  ASSERT_TRUE(a.feed("*2\r\n$3\r\nfo").ok());
  ASSERT_TRUE(a.next().ok());
  RespDecoder b = std::move(a);
  ASSERT_TRUE(b.feed("o\r\n:9\r\n").ok());
  auto r = b.next();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(**r, A({B("foo"), I(9)}));
  EXPECT_FALSE(a.feed("+x\r\n").ok());  // NOLINT(bugprone-use-after-move): says so, no crash
}

// --- Decoding: malformed input ------------------------------------------------------------------

struct Malformed {
  std::string bytes;
  std::string says;  // part of the message
};

const std::vector<Malformed> kMalformed = {
    {"?x\r\n", "got \"?\" as reply type byte"},
    {"+OK\r\n!x\r\n", "got \"!\" as reply type byte"},
    {"$abc\r\nabc\r\n", "Bad bulk string length"},
    {"$\r\n", "Bad bulk string length"},
    {"$-2\r\n", "Bulk string length out of range"},
    {"$-100\r\n", "Bulk string length out of range"},
    {"*x\r\n", "Bad multi-bulk length"},
    {"*-2\r\n", "Multi-bulk length out of range"},
    {"*1\r\n$-5\r\n", "Bulk string length out of range"},
    {":12a\r\n", "Bad integer value"},
    {":\r\n", "Bad integer value"},
    {": 1\r\n", "Bad integer value"},
    {":99999999999999999999\r\n", "Bad integer value"},
    {"$3\r\nabcXY+OK\r\n", "bulk string of 3 bytes not followed by CRLF"},
    {":111111111111111111111111111111111111", "no CRLF within 32 bytes"},
    {"$111111111111111111111111111111111111", "no CRLF within 32 bytes"},
    // RESP3 types (hiredis 1.x parses them; the core speaks RESP2 and never sends HELLO 3).
    {",1.5\r\n", "RESP3 reply type"},
    {"#t\r\n", "RESP3 reply type"},
    {"_\r\n", "RESP3 reply type"},
    {"%1\r\n+a\r\n+b\r\n", "RESP3 reply type"},
    {"~1\r\n:1\r\n", "RESP3 reply type"},
    {">1\r\n:1\r\n", "RESP3 reply type"},
    {"*2\r\n:1\r\n=7\r\ntxt:abc\r\n", "RESP3 reply type"},
    {"(12345678901234567890123\r\n", "RESP3 reply type"},
};

TEST(RespDecode, MalformedInputIsAClearError) {
  for (const Malformed& m : kMalformed) {
    Error e = decode_error(m.bytes);
    EXPECT_EQ(e.code, ErrorCode::kInvalidReply) << m.bytes << ": " << e.message;
    EXPECT_NE(e.message.find(m.says), std::string::npos) << m.bytes << ": " << e.message;
    EXPECT_NE(e.message.find("malformed RESP"), std::string::npos) << e.message;
  }
}

TEST(RespDecode, MalformedInputFedByteByByteFailsTheSameWay) {
  for (const Malformed& m : kMalformed) {
    auto r = decode_bytewise(m.bytes);
    ASSERT_FALSE(r.ok()) << m.bytes;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply) << m.bytes;
    EXPECT_NE(r.error().message.find(m.says), std::string::npos) << r.error().message;
  }
}

TEST(RespDecode, ErrorNamesTheReplyAndWhereItStarted) {
  Error e = decode_error("+OK\r\n:1\r\n$x\r\n");
  EXPECT_NE(e.message.find("reply #3 (starting at stream byte 9)"), std::string::npos) << e.message;
}

TEST(RespDecode, DecoderIsPoisonedAfterAnError) {
  RespDecoder d;
  ASSERT_TRUE(d.feed("+OK\r\n$-2\r\n").ok());
  auto first = d.next();
  ASSERT_TRUE(first.ok() && first->has_value());
  auto bad = d.next();
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(d.poisoned());
  // Valid bytes afterwards do not resynchronize it: the stream position is unknown.
  Status fed = d.feed("+OK\r\n");
  ASSERT_FALSE(fed.ok());
  EXPECT_EQ(fed.error().message, bad.error().message);
  auto again = d.next();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidReply);
  EXPECT_EQ(again.error().message, bad.error().message);
}

// --- Decoding: limits ---------------------------------------------------------------------------

TEST(RespDecode, BulkOverTheLimitIsTooLarge) {
  RespLimits limits;
  limits.max_bulk_bytes = 16;
  std::string at_limit = "$16\r\n" + std::string(16, 'a') + "\r\n";
  EXPECT_EQ(decode_whole(at_limit, limits), std::vector<RespValue>{B(std::string(16, 'a'))});

  std::string over = "$17\r\n" + std::string(17, 'a') + "\r\n";
  Error e = decode_error(over, limits);
  EXPECT_EQ(e.code, ErrorCode::kTooLarge);
  EXPECT_NE(e.message.find("17 bytes"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("limit of 16 bytes"), std::string::npos) << e.message;

  // Refused as soon as the length is known, before any of the payload is buffered.
  RespDecoder d(limits);
  ASSERT_TRUE(d.feed("*2\r\n+x\r\n$1000000000\r\n").ok());
  auto r = d.next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge);
  EXPECT_TRUE(d.poisoned());

  auto bytewise = decode_bytewise(over, limits);
  ASSERT_FALSE(bytewise.ok());
  EXPECT_EQ(bytewise.error().code, ErrorCode::kTooLarge);
}

TEST(RespDecode, StatusLineOverTheLimitIsTooLarge) {
  RespLimits limits;
  limits.max_bulk_bytes = 16;
  EXPECT_EQ(decode_error("+" + std::string(17, 'a') + "\r\n", limits).code, ErrorCode::kTooLarge);
  EXPECT_EQ(decode_error("-" + std::string(17, 'a') + "\r\n", limits).code, ErrorCode::kTooLarge);
  // A line that never ends is refused once it is past the limit.
  EXPECT_EQ(decode_error("+" + std::string(100, 'a'), limits).code, ErrorCode::kTooLarge);
}

TEST(RespDecode, NestingOverTheLimitIsTooLarge) {
  RespLimits limits;
  limits.max_depth = 3;
  EXPECT_EQ(decode_whole("*1\r\n*1\r\n*1\r\n:1\r\n", limits),
            std::vector<RespValue>{A({A({A({I(1)})})})});
  Error e = decode_error("*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", limits);
  EXPECT_EQ(e.code, ErrorCode::kTooLarge);
  EXPECT_NE(e.message.find("nested 4 deep"), std::string::npos) << e.message;

  // Past what hiredis' reader supports, whatever the configured limit.
  limits.max_depth = 100;
  std::string deep;
  for (int i = 0; i <= RespLimits::kMaxSupportedDepth; ++i) deep += "*1\r\n";
  deep += ":1\r\n";
  e = decode_error(deep, limits);
  EXPECT_EQ(e.code, ErrorCode::kTooLarge);
  EXPECT_NE(e.message.find("nested"), std::string::npos) << e.message;
  auto bytewise = decode_bytewise(deep, limits);
  ASSERT_FALSE(bytewise.ok());
  EXPECT_EQ(bytewise.error().code, ErrorCode::kTooLarge);
}

TEST(RespDecode, HugeArrayHeaderIsRefusedWithoutAllocating) {
  Error e = decode_error("*2147483647\r\n");
  EXPECT_EQ(e.code, ErrorCode::kTooLarge);
  EXPECT_NE(e.message.find("2147483647 elements"), std::string::npos) << e.message;
  // Over INT_MAX is out of the protocol's range altogether.
  EXPECT_EQ(decode_error("*2147483648\r\n").code, ErrorCode::kInvalidReply);
}

TEST(RespDecode, BufferedBytesStayUnderTheLimit) {
  RespLimits limits;
  limits.max_buffered_bytes = 4096;
  // Fed without draining: the decoder refuses to hold more.
  {
    RespDecoder d(limits);
    ASSERT_TRUE(d.feed(std::string(3000, '+')).ok());
    Status fed = d.feed(std::string(3000, '+'));
    ASSERT_FALSE(fed.ok());
    EXPECT_EQ(fed.error().code, ErrorCode::kTooLarge);
    EXPECT_NE(fed.error().message.find("drain"), std::string::npos) << fed.error().message;
    EXPECT_TRUE(d.poisoned());
  }
  // A reply that grows without end in small, drained feeds: the partial reply counts too.
  {
    RespDecoder d(limits);
    ASSERT_TRUE(d.feed("*20\r\n").ok());
    ASSERT_TRUE(d.next().ok());
    std::string element = "$300\r\n" + std::string(300, 'x') + "\r\n";
    Error error;
    int fed_elements = 0;
    for (; fed_elements < 20 && error.code == ErrorCode::kUnknown; ++fed_elements) {
      Status fed = d.feed(element);
      if (!fed.ok()) {
        error = fed.error();
        break;
      }
      auto r = d.next();
      if (!r.ok()) error = r.error();
      EXPECT_LE(d.buffered_bytes(), limits.max_buffered_bytes);
    }
    EXPECT_EQ(error.code, ErrorCode::kTooLarge) << error.message;
    EXPECT_GT(fed_elements, 3);  // refused while growing, not at the array header
    EXPECT_TRUE(d.poisoned());
  }
  // Many small replies in one big input are fine: decode_all feeds in bounded pieces.
  std::string wire;
  for (int i = 0; i < 2000; ++i) wire += "+" + std::to_string(i) + "\r\n";
  ASSERT_GT(wire.size(), limits.max_buffered_bytes);
  auto all = decode_all(wire, 2000, limits);
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->back(), S("1999"));
}

// --- decode_all ---------------------------------------------------------------------------------

TEST(RespDecodeAll, ReturnsExactlyTheExpectedReplies) {
  auto all = decode_all(kCorpus, corpus_values().size());
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(*all, corpus_values());
  auto none = decode_all("", 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(RespDecodeAll, ErrorRepliesAreValuesNotFailures) {
  auto all = decode_all("+OK\r\n-ERR wrong number of arguments\r\n:1\r\n", 3);
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ((*all)[1].error_message(), "ERR wrong number of arguments");
}

TEST(RespDecodeAll, CountMismatchIsAnError) {
  struct Case {
    const char* bytes;
    std::size_t expected_count;
    const char* message;  // a part of the error's message
  };
  const Case cases[] = {
      {"+OK\r\n:1\r\n", 3, "2 of 3"},
      {"+OK\r\n:1\r\n$5\r\nhel", 3, "ends inside reply #3"},
      {"+OK\r\n:1\r\n+extra\r\n", 2, "more than the 2 expected"},
      {"+OK\r\n:1\r\n$3\r\n", 2, "bytes after the 2 expected"},
      {"+OK\r\n:x\r\n", 2, "Bad integer value"},
  };
  for (const Case& c : cases) {
    auto r = decode_all(c.bytes, c.expected_count);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply) << c.message;
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace quiver
