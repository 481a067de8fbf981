#include "shared/framing.h"

#include <fstream>
#include <iterator>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/decoder_run.h"

namespace quiver {

// gtest prints events readably (found by argument-dependent lookup, so outside the anonymous
// namespace).
void PrintTo(const SseEvent& e, std::ostream* os) {
  *os << "{type=" << e.type << " id=" << e.id << (e.priming ? " priming" : "") << " data=["
      << e.data << "]}";
}

namespace {

std::string read_fixture(const std::string& relative) {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/" + relative,
                   std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << relative;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Everything a caller observes from a decoder, as text, so that two runs compare in one
// assertion: each message or error in order, then what finish() said.
using Transcript = std::vector<std::string>;

// Feeds `chunks` to `decoder`: each message as `describe` has it, each error, then finish().
template <typename Decoder, typename Describe>
Transcript transcript(Decoder& decoder, const std::vector<std::string_view>& chunks,
                      Describe describe) {
  Transcript out;
  Status end = quiver::testing::feed_pieces(
      decoder, chunks, [&](const auto& message) { out.push_back(describe(message)); },
      [&](const Error& e) { out.push_back(std::string("error ") + error_code_name(e.code)); });
  out.push_back(std::string("finish ") + (end.ok() ? "OK" : error_code_name(end.error().code)));
  return out;
}

Transcript ndjson_transcript(const std::vector<std::string_view>& chunks,
                             std::size_t max_line = kDefaultMaxMessageBytes) {
  NdjsonDecoder decoder(max_line);
  return transcript(decoder, chunks, [](const std::string& line) { return "line " + line; });
}

std::string describe(const SseEvent& e) {
  return "event type=" + e.type + " id=" + e.id + (e.priming ? " priming" : "") + " data=[" +
         e.data + "]";
}

Transcript sse_transcript(const std::vector<std::string_view>& chunks,
                          std::size_t max_event = kDefaultMaxMessageBytes) {
  SseParser parser(max_event);
  Transcript out = transcript(parser, chunks, describe);
  out.push_back("last_event_id=" + parser.last_event_id());
  out.push_back("retry=" + (parser.retry() ? std::to_string(*parser.retry()) : "none"));
  return out;
}

// Feeds `input` in two pieces split at every byte boundary, and one byte at a time; every run
// must observe exactly what one whole feed observes. Returns the whole-feed transcript.
template <typename Run>
Transcript expect_split_invariant(std::string_view input, Run run) {
  Transcript whole = run(std::vector<std::string_view>{input});
  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    Transcript split = run(std::vector<std::string_view>{input.substr(0, cut), input.substr(cut)});
    EXPECT_EQ(split, whole) << "split at byte " << cut;
    if (split != whole) break;  // one failure says enough
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < input.size(); ++i) bytes.push_back(input.substr(i, 1));
  EXPECT_EQ(run(bytes), whole) << "fed one byte at a time";
  return whole;
}

Transcript sse_split_invariant(std::string_view input,
                               std::size_t max_event = kDefaultMaxMessageBytes) {
  return expect_split_invariant(input, [&](const std::vector<std::string_view>& chunks) {
    return sse_transcript(chunks, max_event);
  });
}

Transcript ndjson_split_invariant(std::string_view input,
                                  std::size_t max_line = kDefaultMaxMessageBytes) {
  return expect_split_invariant(input, [&](const std::vector<std::string_view>& chunks) {
    return ndjson_transcript(chunks, max_line);
  });
}

// Events only (no finish line, last id or retry) from a whole stream.
std::vector<SseEvent> sse_events(std::string_view input) {
  SseParser parser;
  parser.feed(input);
  std::vector<SseEvent> events;
  quiver::testing::drain_decoder(
      parser, [&](const SseEvent& e) { events.push_back(e); },
      [](const Error& e) { ADD_FAILURE() << e.message; });
  return events;
}

SseEvent message(std::string data, std::string id = "", std::string type = "message") {
  SseEvent e;
  e.type = std::move(type);
  e.id = std::move(id);
  e.priming = data.empty();
  e.data = std::move(data);
  return e;
}

// ---- NDJSON (stdio) ---------------------------------------------------------------------------

TEST(NdjsonDecoder, SplitsLinesToleratesCrLfAndSkipsBlankLines) {
  std::string input = "{\"a\":1}\n\n{\"b\":2}\r\n\r\n   \t\n{\"c\":3}\n";
  Transcript t = ndjson_split_invariant(input);
  EXPECT_EQ(t, (Transcript{"line {\"a\":1}", "line {\"b\":2}", "line {\"c\":3}", "finish OK"}));
}

TEST(NdjsonDecoder, WaitsForTheNewlineBeforeReturningALine) {
  NdjsonDecoder decoder;
  decoder.feed("{\"jsonrpc\":\"2.0\",");
  auto first = decoder.next();
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value());
  EXPECT_EQ(decoder.buffered_bytes(), 17u);
  decoder.feed("\"id\":1}\n");
  auto second = decoder.next();
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ(**second, "{\"jsonrpc\":\"2.0\",\"id\":1}");
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
}

TEST(NdjsonDecoder, OversizedLineIsReportedOnceAndTheStreamResyncsAtTheNextNewline) {
  std::string input = "short\n" + std::string(40, 'x') + "\nafter\n";
  Transcript t = ndjson_split_invariant(input, 16);
  EXPECT_EQ(t, (Transcript{"line short", "error TOO_LARGE", "line after", "finish OK"}));
}

TEST(NdjsonDecoder, OversizedLineIsRejectedBeforeItsNewlineArrives) {
  // Memory stays bounded: a peer that never sends a newline cannot make the decoder buffer it.
  NdjsonDecoder decoder(16);
  decoder.feed(std::string(40, 'x'));
  auto big = decoder.next();
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kTooLarge);
  EXPECT_NE(big.error().message.find("16 bytes"), std::string::npos) << big.error().message;
  decoder.feed(std::string(1000, 'x'));
  auto skipped = decoder.next();
  ASSERT_TRUE(skipped.ok());
  EXPECT_FALSE(skipped->has_value());
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
  decoder.feed("x\n{}\n");
  auto after = decoder.next();
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ(**after, "{}");
}

TEST(NdjsonDecoder, LineBoundIsExactAndExcludesTheLineEnd) {
  std::string at_limit(16, 'y');
  EXPECT_EQ(ndjson_split_invariant(at_limit + "\r\n", 16),
            (Transcript{"line " + at_limit, "finish OK"}));
  EXPECT_EQ(ndjson_split_invariant(at_limit + "z\r\nok\n", 16),
            (Transcript{"error TOO_LARGE", "line ok", "finish OK"}));
  // A huge blank line is still too large: otherwise the outcome would depend on the split.
  EXPECT_EQ(ndjson_split_invariant(std::string(40, ' ') + "\nok\n", 16),
            (Transcript{"error TOO_LARGE", "line ok", "finish OK"}));
}

TEST(NdjsonDecoder, TruncatedFinalLineIsATransportErrorAtFinish) {
  EXPECT_EQ(ndjson_split_invariant("{\"id\":1}\n{\"id\":2,\"res"),
            (Transcript{"line {\"id\":1}", "finish TRANSPORT"}));
  // A blank tail is not a message; an oversized tail was already reported.
  EXPECT_EQ(ndjson_split_invariant("{\"id\":1}\n \r"),
            (Transcript{"line {\"id\":1}", "finish OK"}));
  EXPECT_EQ(ndjson_split_invariant("{}\n" + std::string(40, 'x'), 16),
            (Transcript{"line {}", "error TOO_LARGE", "finish OK"}));
}

TEST(NdjsonDecoder, FinishKeepsCompleteLinesAndStartsAFreshStream) {
  NdjsonDecoder decoder;
  decoder.feed("{\"id\":1}\n{\"id\":");
  Status end = decoder.finish();
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().code, ErrorCode::kTransport);
  EXPECT_NE(end.error().message.find("6 bytes"), std::string::npos) << end.error().message;
  auto kept = decoder.next();
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ(**kept, "{\"id\":1}");
  decoder.feed("{\"id\":3}\n");
  auto fresh = decoder.next();
  ASSERT_TRUE(fresh.ok() && fresh->has_value());
  EXPECT_EQ(**fresh, "{\"id\":3}");
}

TEST(NdjsonDecoder, NextJsonParsesAndReportsALineThatIsNotJson) {
  NdjsonDecoder decoder;
  decoder.feed("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\nnot json\n[1]\n");
  auto first = decoder.next_json();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ(json_int(**first, "id"), 7);
  auto bad = decoder.next_json();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidReply);
  EXPECT_NE(bad.error().message.find("byte"), std::string::npos) << bad.error().message;
  auto third = decoder.next_json();  // the bad line does not poison the stream
  ASSERT_TRUE(third.ok() && third->has_value());
  EXPECT_EQ(**third, Json::array({1}));
  auto none = decoder.next_json();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(NdjsonDecoder, NextJsonReportsOversizedLines) {
  NdjsonDecoder decoder(8);
  decoder.feed("{\"a\":\"0123456789\"}\n{}\n");
  auto big = decoder.next_json();
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kTooLarge);
  auto next = decoder.next_json();
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, Json::object());
}

TEST(EncodeNdjson, OneCompactLineEvenWhenStringsHoldLineBreaks) {
  Json message = {{"jsonrpc", "2.0"},
                  {"id", 1},
                  {"method", "tools/call"},
                  {"params", {{"text", "line one\nline two\r\n\u2028 end"}}}};
  std::string line = encode_ndjson(message);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find_first_of("\r\n"), line.size() - 1) << line;
  NdjsonDecoder decoder;
  decoder.feed(line);
  auto back = decoder.next_json();
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ(**back, message);
}

TEST(EncodeNdjson, InvalidUtf8IsReplacedNotThrown) {
  Json message = {{"text", std::string("a\xFF"
                                       "b")}};
  EXPECT_EQ(encode_ndjson(message),
            "{\"text\":\"a\xEF\xBF\xBD"
            "b\"}\n");
}

TEST(EncodeNdjson, SerializedTextWithALineBreakIsRejected) {
  auto ok = encode_ndjson_text(R"({"id":1})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "{\"id\":1}\n");
  for (const char* pretty : {"{\n  \"id\": 1\n}", "{\"id\":1}\r"}) {
    auto bad = encode_ndjson_text(pretty);
    ASSERT_FALSE(bad.ok()) << pretty;
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  }
}

// server-everything over stdio: initialize, notifications/initialized, tools/list, as captured by
// tests/fixtures/ndjson/capture.mjs. The server announces tools/list_changed before it answers.
TEST(NdjsonDecoder, RealServerEverythingStdioOutput) {
  std::string bytes = read_fixture("ndjson/server-everything-stdio.txt");
  ASSERT_FALSE(bytes.empty());
  Transcript t = ndjson_split_invariant(bytes);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t.back(), "finish OK");

  NdjsonDecoder decoder;
  decoder.feed(bytes);
  std::vector<Json> messages;
  for (;;) {
    auto m = decoder.next_json();
    ASSERT_TRUE(m.ok()) << m.error().message;
    if (!m->has_value()) break;
    messages.push_back(std::move(**m));
  }
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(json_string(messages[0], "method"), "notifications/tools/list_changed");
  EXPECT_EQ(json_int(messages[1], "id"), 1);
  const Json* init = json_field(messages[1], "result");
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(json_string(*init, "protocolVersion"), "2025-11-25");
  EXPECT_EQ(json_int(messages[2], "id"), 2);
  const Json* list = json_field(messages[2], "result");
  ASSERT_NE(list, nullptr);
  const Json* tools = json_field(*list, "tools");
  ASSERT_TRUE(tools != nullptr && tools->is_array());
  EXPECT_EQ(tools->size(), 13u);
  EXPECT_TRUE(decoder.finish().ok());
}

// ---- SSE (Streamable HTTP) --------------------------------------------------------------------
// The "Spec example" tests are the examples of the WHATWG HTML standard, section 9.2.

TEST(SseParser, SpecExampleMultiLineDataJoinsWithNewlines) {
  EXPECT_EQ(sse_split_invariant("data: YHOO\ndata: +2\ndata: 10\n\n"),
            (Transcript{"event type=message id= data=[YHOO\n+2\n10]", "finish OK",
                        "last_event_id=", "retry=none"}));
}

TEST(SseParser, SpecExampleIdPersistsUntilAnEmptyIdResetsIt) {
  std::string stream =
      ": test stream\n\n"
      "data: first event\nid: 1\n\n"
      "data:second event\nid\n\n"
      "data:  third event\n";
  // The third event has no blank line after it: not dispatched, and the stream ended inside it.
  EXPECT_EQ(sse_split_invariant(stream),
            (Transcript{"event type=message id=1 data=[first event]",
                        "event type=message id= data=[second event]", "finish TRANSPORT",
                        "last_event_id=", "retry=none"}));
  // Without the reset, the id carries over to later events.
  EXPECT_EQ(sse_events("id: 1\ndata: a\n\ndata: b\n\n"),
            (std::vector<SseEvent>{message("a", "1"), message("b", "1")}));
}

TEST(SseParser, SpecExampleDataWithoutValueGivesEmptyDataAndANewlinePerLine) {
  // "The first block fires events with the data set to the empty string, as would the last block
  // if it was followed by a blank line. The middle block fires an event with the data set to a
  // single newline character. The last block is discarded".
  EXPECT_EQ(
      sse_split_invariant("data\n\ndata\ndata\n\ndata:"),
      (Transcript{"event type=message id= priming data=[]", "event type=message id= data=[\n]",
                  "finish TRANSPORT", "last_event_id=", "retry=none"}));
}

TEST(SseParser, SpecExampleOneSpaceAfterTheColonIsOptional) {
  EXPECT_EQ(sse_events("data:test\n\ndata: test\n\n"),
            (std::vector<SseEvent>{message("test"), message("test")}));
  // Only one space is removed.
  EXPECT_EQ(sse_events("data:  two spaces\n\n"), (std::vector<SseEvent>{message(" two spaces")}));
}

TEST(SseParser, SpecExampleIntroductionStreams) {
  EXPECT_EQ(sse_events("data: This is the first message.\n\n"
                       "data: This is the second message, it\ndata: has two lines.\n\n"
                       "data: This is the third message.\n\n"),
            (std::vector<SseEvent>{message("This is the first message."),
                                   message("This is the second message, it\nhas two lines."),
                                   message("This is the third message.")}));
  EXPECT_EQ(sse_events("event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\n"
                       "event: add\ndata: 113411\n\n"),
            (std::vector<SseEvent>{message("73857293", "", "add"), message("2153", "", "remove"),
                                   message("113411", "", "add")}));
}

TEST(SseParser, EventTypeAppliesToOneEventAndEmptyMeansMessage) {
  EXPECT_EQ(sse_events("event: add\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n"),
            (std::vector<SseEvent>{message("1", "", "add"), message("2"), message("3")}));
}

TEST(SseParser, CommentsUnknownFieldsAndSpacedFieldNamesAreIgnored) {
  std::string stream =
      ": keep-alive\n\n"
      "data: a\n: a comment between data lines\ndata: b\n\n"
      "foo: unknown field\ndata : the field name is \"data \", not data\n\n"
      "this line has no colon and is a field with no value\n\n"
      "data: c:d:e\n\n";
  EXPECT_EQ(sse_events(stream), (std::vector<SseEvent>{message("a\nb"), message("c:d:e")}));
}

TEST(SseParser, LinesEndInCrLfCrOrLf) {
  std::string stream =
      "data: crlf\r\n\r\n"
      "data: cr\r\r"
      "data: lf\n\n"
      "data: mixed 1\r\ndata: mixed 2\rdata: mixed 3\n\r\n";
  EXPECT_EQ(sse_split_invariant(stream),
            (Transcript{"event type=message id= data=[crlf]", "event type=message id= data=[cr]",
                        "event type=message id= data=[lf]",
                        "event type=message id= data=[mixed 1\nmixed 2\nmixed 3]", "finish OK",
                        "last_event_id=", "retry=none"}));
}

TEST(SseParser, CrAtTheEndOfOneFeedAndLfAtTheStartOfTheNextAreOneLineEnd) {
  SseParser parser;
  parser.feed("data: a\r");
  auto none = parser.next();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  parser.feed("\ndata: b\r");  // this "\n" completes "\r\n": it is not a blank line
  none = parser.next();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  parser.feed("\n\r\n");
  auto event = parser.next();
  ASSERT_TRUE(event.ok() && event->has_value());
  EXPECT_EQ((*event)->data, "a\nb");
  EXPECT_TRUE(parser.finish().ok());
}

TEST(SseParser, ByteOrderMarkIsSkippedOnlyOnceAtTheStart) {
  EXPECT_EQ(
      sse_split_invariant("\xEF\xBB\xBF"
                          "data: x\n\n"),
      (Transcript{"event type=message id= data=[x]", "finish OK", "last_event_id=", "retry=none"}));
  // A second BOM is part of the field name, which is then unknown.
  EXPECT_EQ(sse_events("\xEF\xBB\xBF\xEF\xBB\xBF"
                       "data: x\n\ndata: y\n\n"),
            (std::vector<SseEvent>{message("y")}));
  EXPECT_EQ(sse_events("data: x\n\n\xEF\xBB\xBF"
                       "data: y\n\n"),
            (std::vector<SseEvent>{message("x")}));
  // Two bytes of a BOM are not a BOM: they decode to U+FFFD and spoil the field name.
  EXPECT_EQ(sse_events("\xEF\xBB"
                       "data: x\n\ndata: y\n\n"),
            (std::vector<SseEvent>{message("y")}));
}

TEST(SseParser, InvalidUtf8DecodesToReplacementCharacters) {
  EXPECT_EQ(sse_split_invariant("data: a\xFF"
                                "b \xE2\x82 c \xE2\x82\xAC\n\n"),
            (Transcript{"event type=message id= data=[a\xEF\xBF\xBD"
                        "b \xEF\xBF\xBD c \xE2\x82\xAC]",
                        "finish OK", "last_event_id=", "retry=none"}));
  // Surrogates and overlong forms are invalid too (one U+FFFD per maximal subpart).
  EXPECT_EQ(sse_events("data: \xED\xA0\x80|\xC0\xAF\n\n"),
            (std::vector<SseEvent>{message("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|"
                                           "\xEF\xBF\xBD\xEF\xBF\xBD")}));
}

TEST(SseParser, IdContainingNulIsIgnored) {
  std::string stream = std::string("id: 1\ndata: a\n\nid: x\0y\ndata: b\n\n", 32);
  EXPECT_EQ(sse_events(stream), (std::vector<SseEvent>{message("a", "1"), message("b", "1")}));
}

TEST(SseParser, IdWithoutDataIsRecordedButNotDispatched) {
  SseParser parser;
  parser.feed("id: 7\n\n");
  auto none = parser.next();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(parser.last_event_id(), "7");
  parser.feed("data: later\n\n");
  auto later = parser.next();
  ASSERT_TRUE(later.ok() && later->has_value());
  EXPECT_EQ(**later, message("later", "7"));
}

TEST(SseParser, LastEventIdChangesOnlyAtTheBlankLine) {
  SseParser parser;
  parser.feed("id: 1\ndata: a\n\nid: 2\ndata: b\n");
  auto a = parser.next();
  ASSERT_TRUE(a.ok() && a->has_value());
  auto none = parser.next();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(parser.last_event_id(), "1");  // event 2 is not complete
  parser.feed("\n");
  auto b = parser.next();
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->id, "2");
  EXPECT_EQ(parser.last_event_id(), "2");
}

TEST(SseParser, RetryTakesOnlyAsciiDigitsAndPersists) {
  SseParser parser;
  parser.feed("retry: 1500\n\n");
  ASSERT_TRUE(parser.next().ok());
  EXPECT_EQ(parser.retry(), 1500);
  for (const char* ignored : {"retry: 15x\n\n", "retry: -1\n\n", "retry: +3\n\n", "retry:\n\n",
                              "retry: 1 \n\n", "retry: 99999999999999999999999\n\n"}) {
    parser.feed(ignored);
    ASSERT_TRUE(parser.next().ok());
    EXPECT_EQ(parser.retry(), 1500) << ignored;
  }
  parser.feed("retry:0\ndata: x\n\n");
  auto x = parser.next();
  ASSERT_TRUE(x.ok() && x->has_value());
  EXPECT_EQ(parser.retry(), 0);
  EXPECT_EQ(sse_split_invariant("retry: 3000\ndata: x\n\n").back(), "retry=3000");
}

TEST(SseParser, McpPrimingEventIsSurfacedFlaggedAndSetsTheLastEventId) {
  // What an MCP server of protocol 2025-11-25 sends first on a stream.
  SseParser parser;
  parser.feed("id: 0a1b\nretry: 1000\ndata: \n\nevent: message\nid: 0a1c\ndata: {\"id\":1}\n\n");
  auto priming = parser.next();
  ASSERT_TRUE(priming.ok() && priming->has_value());
  EXPECT_TRUE((*priming)->priming);
  EXPECT_EQ((*priming)->data, "");
  EXPECT_EQ((*priming)->id, "0a1b");
  EXPECT_EQ(parser.last_event_id(), "0a1b");
  EXPECT_EQ(parser.retry(), 1000);
  auto reply = parser.next();
  ASSERT_TRUE(reply.ok() && reply->has_value());
  EXPECT_EQ(**reply, message("{\"id\":1}", "0a1c"));
  EXPECT_EQ(parser.last_event_id(), "0a1c");
}

TEST(SseParser, TruncatedFinalEventIsNotDispatched) {
  EXPECT_EQ(sse_split_invariant("id: 1\ndata: a\n\nid: 2\ndata: partial\n"),
            (Transcript{"event type=message id=1 data=[a]", "finish TRANSPORT", "last_event_id=1",
                        "retry=none"}));
  EXPECT_EQ(sse_split_invariant("data: a\n\ndata: part"),
            (Transcript{"event type=message id= data=[a]", "finish TRANSPORT",
                        "last_event_id=", "retry=none"}));
  // Ending between events, even after a trailing comment line, is clean.
  EXPECT_EQ(
      sse_split_invariant("data: a\n\n: bye\n"),
      (Transcript{"event type=message id= data=[a]", "finish OK", "last_event_id=", "retry=none"}));
}

TEST(SseParser, OversizedEventIsReportedOnceAndSkippedToItsBlankLine) {
  std::string stream = "id: 9\ndata: " + std::string(100, 'x') +
                       "\nid: lost\ndata: more\n\n"
                       "data: ok\n\n";
  // The id before the oversized line stays in effect; the one after it is skipped with it.
  EXPECT_EQ(sse_split_invariant(stream, 32),
            (Transcript{"error TOO_LARGE", "event type=message id=9 data=[ok]", "finish OK",
                        "last_event_id=9", "retry=none"}));
  // Many short lines add up; a long comment counts too.
  std::string many;
  for (int i = 0; i < 10; ++i) many += "data: 12345\n";
  EXPECT_EQ(sse_split_invariant(many + "\ndata: ok\n\n", 32),
            (Transcript{"error TOO_LARGE", "event type=message id= data=[ok]", "finish OK",
                        "last_event_id=", "retry=none"}));
  EXPECT_EQ(sse_split_invariant(":" + std::string(40, 'c') + "\r\n\r\ndata: ok\r\n\r\n", 32),
            (Transcript{"error TOO_LARGE", "event type=message id= data=[ok]", "finish OK",
                        "last_event_id=", "retry=none"}));
  // At the bound exactly is fine ("data: " + 26 bytes = 32).
  EXPECT_EQ(sse_split_invariant("data: " + std::string(26, 'y') + "\n\n", 32)[0],
            "event type=message id= data=[" + std::string(26, 'y') + "]");
  // The stream ending inside the skipped event is not reported a second time.
  EXPECT_EQ(sse_split_invariant("data: " + std::string(40, 'z'), 32),
            (Transcript{"error TOO_LARGE", "finish OK", "last_event_id=", "retry=none"}));
}

TEST(SseParser, OversizedEventIsRejectedBeforeItsLineEndArrives) {
  SseParser parser(32);
  parser.feed("data: " + std::string(100, 'x'));
  auto big = parser.next();
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kTooLarge);
  EXPECT_NE(big.error().message.find("32 bytes"), std::string::npos) << big.error().message;
  parser.feed(std::string(1000, 'x') + "\n");  // skipped without being buffered
  parser.feed("\ndata: ok\n\n");
  auto ok = parser.next();
  ASSERT_TRUE(ok.ok() && ok->has_value());
  EXPECT_EQ(**ok, message("ok"));
}

TEST(SseParser, FinishStartsANewStreamKeepingLastEventIdAndRetry) {
  SseParser parser;
  parser.feed("retry: 500\nid: 4\ndata: a\n\n");
  auto a = parser.next();
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_TRUE(parser.finish().ok());
  EXPECT_EQ(parser.last_event_id(), "4");
  EXPECT_EQ(parser.retry(), 500);
  // The reconnected stream may start with a BOM again and resumes with its own ids.
  parser.feed("\xEF\xBB\xBFid: 5\ndata: b\n\n");
  auto b = parser.next();
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(**b, message("b", "5"));
  // Per the standard, a new stream's last event ID buffer starts empty.
  EXPECT_TRUE(parser.finish().ok());
  parser.feed("data: c\n\n");
  auto c = parser.next();
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ(**c, message("c", ""));
  EXPECT_EQ(parser.last_event_id(), "");
}

// server-everything over Streamable HTTP, 2025-11-25, as captured by
// tests/fixtures/sse/capture.mjs: each response stream opens with a priming event.
void expect_real_stream(const std::string& fixture, int64_t id, const char* result_field) {
  std::string bytes = read_fixture(fixture);
  ASSERT_FALSE(bytes.empty());
  Transcript t = sse_split_invariant(bytes);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[2], "finish OK");

  SseParser parser;
  parser.feed(bytes);
  auto priming = parser.next();
  ASSERT_TRUE(priming.ok() && priming->has_value());
  EXPECT_TRUE((*priming)->priming);
  EXPECT_EQ((*priming)->id.size(), 36u) << (*priming)->id;  // a UUID
  auto reply = parser.next();
  ASSERT_TRUE(reply.ok() && reply->has_value());
  EXPECT_FALSE((*reply)->priming);
  EXPECT_EQ((*reply)->type, "message");
  EXPECT_NE((*reply)->id, (*priming)->id);
  EXPECT_EQ(parser.last_event_id(), (*reply)->id);
  auto json = parse_json((*reply)->data);
  ASSERT_TRUE(json.ok()) << json.error().message;
  EXPECT_EQ(json_int(*json, "id"), id);
  const Json* result = json_field(*json, "result");
  ASSERT_NE(result, nullptr);
  EXPECT_NE(json_field(*result, result_field), nullptr);
  if (id == 1) {
    EXPECT_EQ(json_string(*result, "protocolVersion"), "2025-11-25");
  }
  auto none = parser.next();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_TRUE(parser.finish().ok());
}

TEST(SseParser, RealServerEverythingInitializeStream) {
  expect_real_stream("sse/server-everything-initialize.txt", 1, "serverInfo");
}

TEST(SseParser, RealServerEverythingToolsListStream) {
  expect_real_stream("sse/server-everything-tools-list.txt", 2, "tools");
}

}  // namespace
}  // namespace quiver
