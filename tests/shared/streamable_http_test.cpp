#include "shared/streamable_http.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

constexpr const char* kWhere = "http://mcp.test/mcp";
using Action = ReplyReader::Next::Action;
using Step = StreamReconnector::Step;

// ---- the status classifier -----------------------------------------------------------------

TEST(StreamableHttpStatus, OneTableForEveryExchange) {
  using K = HttpExchangeKind;
  using C = HttpStatusClass;
  struct Row {
    K kind;
    int status;
    bool sent_session;
    C expected;
  };
  const Row rows[] = {
      // POST (and DELETE): a dead session is 404 or 400 to a request that carried its id.
      {K::kPost, 200, true, C::kSuccess},
      {K::kPost, 202, false, C::kSuccess},
      {K::kPost, 299, true, C::kSuccess},
      {K::kPost, 404, true, C::kSessionExpired},
      {K::kPost, 400, true, C::kSessionExpired},
      {K::kPost, 404, false, C::kFailed},
      {K::kPost, 400, false, C::kFailed},
      {K::kPost, 401, true, C::kUnauthenticated},
      {K::kPost, 403, false, C::kUnauthenticated},
      {K::kPost, 405, true, C::kFailed},
      {K::kPost, 500, true, C::kFailed},
      {K::kPost, 302, false, C::kFailed},
      // Resuming a POST's stream: 405 says there is no GET stream to resume from.
      {K::kResume, 405, true, C::kNotOffered},
      {K::kResume, 404, true, C::kSessionExpired},
      {K::kResume, 404, false, C::kFailed},
      {K::kResume, 401, true, C::kUnauthenticated},
      {K::kResume, 200, true, C::kSuccess},
      // Opening the GET stream: 404 and 405 both mean "not offered", even in a session.
      {K::kOpenStream, 405, true, C::kNotOffered},
      {K::kOpenStream, 404, true, C::kNotOffered},
      {K::kOpenStream, 404, false, C::kNotOffered},
      {K::kOpenStream, 400, true, C::kSessionExpired},
      {K::kOpenStream, 400, false, C::kFailed},
      {K::kOpenStream, 403, true, C::kUnauthenticated},
      {K::kOpenStream, 503, true, C::kFailed},
      // Reconnecting it: like a POST.
      {K::kReconnectStream, 404, true, C::kSessionExpired},
      {K::kReconnectStream, 405, true, C::kFailed},
      {K::kReconnectStream, 401, false, C::kUnauthenticated},
      {K::kReconnectStream, 502, true, C::kFailed},
      {K::kReconnectStream, 200, true, C::kSuccess},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(classify_http_status(r.kind, r.status, r.sent_session), r.expected)
        << "kind " << static_cast<int>(r.kind) << " status " << r.status << " session "
        << r.sent_session;
  }
}

TEST(StreamableHttpStatus, ErrorsNameTheStatusAndSayWhatToDo) {
  Error expired = http_status_error(HttpExchangeKind::kPost, 404, true, kWhere, ": gone");
  EXPECT_EQ(expired.code, ErrorCode::kTransport);
  EXPECT_EQ(expired.message,
            "session expired: HTTP 404 from http://mcp.test/mcp to a request in a session; "
            "re-initialize on a new transport: gone");
  Error auth = http_status_error(HttpExchangeKind::kPost, 401, false, kWhere, "");
  EXPECT_EQ(auth.code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(auth.message, "HTTP 401 from http://mcp.test/mcp (credentials missing or refused)");
  Error other = http_status_error(HttpExchangeKind::kPost, 503, true, kWhere, ": busy");
  EXPECT_EQ(other.code, ErrorCode::kTransport);
  EXPECT_EQ(other.message, "HTTP 503 from http://mcp.test/mcp: busy");

  Error resume = http_status_error(HttpExchangeKind::kResume, 405, true, kWhere, ": ignored");
  EXPECT_EQ(resume.code, ErrorCode::kTransport);
  EXPECT_NE(resume.message.find("offers no GET stream to resume it (HTTP 405)"), std::string::npos);

  Error open = http_status_error(HttpExchangeKind::kOpenStream, 400, true, kWhere, "");
  EXPECT_EQ(open.message.rfind("session expired: HTTP 400", 0), 0u) << open.message;
  EXPECT_NE(open.message.find("to the GET stream"), std::string::npos);
  EXPECT_EQ(http_status_error(HttpExchangeKind::kOpenStream, 403, true, kWhere, "").code,
            ErrorCode::kUnauthenticated);
  EXPECT_EQ(http_status_error(HttpExchangeKind::kOpenStream, 500, true, kWhere, "").message,
            "HTTP 500 from http://mcp.test/mcp to the GET stream");

  Error again = http_status_error(HttpExchangeKind::kReconnectStream, 404, true, kWhere, "");
  EXPECT_EQ(again.message.rfind("session expired: HTTP 404", 0), 0u) << again.message;
  EXPECT_NE(again.message.find("when the GET stream reconnected"), std::string::npos);
  EXPECT_EQ(http_status_error(HttpExchangeKind::kReconnectStream, 200, true, kWhere, "").code,
            ErrorCode::kInvalidReply);
}

// ---- outgoing requests and text -------------------------------------------------------------

TEST(StreamableHttpRequest, DescribesWhatAMessageWaitsFor) {
  OutgoingMessage init =
      describe_outgoing(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}});
  EXPECT_TRUE(init.is_initialize);
  EXPECT_FALSE(init.is_listen);
  EXPECT_EQ(init.request_ids, (std::set<std::string>{"1"}));

  OutgoingMessage note =
      describe_outgoing(Json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
  EXPECT_TRUE(note.request_ids.empty());

  OutgoingMessage batch = describe_outgoing(Json::array(
      {Json{{"id", "a"}, {"method", "ping"}}, Json{{"id", nullptr}, {"method", "ping"}},
       Json{{"id", 3}, {"result", Json::object()}}, Json{{"method", "notifications/x"}}}));
  EXPECT_EQ(batch.request_ids, (std::set<std::string>{"\"a\""}));

  EXPECT_TRUE(describe_outgoing(Json{{"id", 7}, {"method", "subscriptions/listen"}}).is_listen);
  EXPECT_FALSE(describe_outgoing(Json{{"method", "subscriptions/listen"}}).is_listen);
  EXPECT_FALSE(describe_outgoing(Json::array({Json{{"id", 7}, {"method", "subscriptions/listen"}}}))
                   .is_listen);
}

TEST(StreamableHttpRequest, ConfiguredHeadersAreTokensTheTransportDoesNotManage) {
  EXPECT_TRUE(check_configured_headers({{"Authorization", "Bearer x"}, {"X-Api-Key", "k"}}).ok());
  for (const char* name : {"Accept", "content-type", "MCP-SESSION-ID", "Last-Event-ID",
                           "Mcp-Protocol-Version", "mcp-param-city", "Host", "TE"}) {
    Status st = check_configured_headers({{name, "v"}});
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_NE(st.error().message.find("managed"), std::string::npos) << st.error().message;
  }
  EXPECT_FALSE(check_configured_headers({{"Bad Name", "v"}}).ok());
  EXPECT_FALSE(check_configured_headers({{"", "v"}}).ok());
  Status control = check_configured_headers({{"X-Key", "se\ncret"}});
  ASSERT_FALSE(control.ok());
  EXPECT_EQ(control.error().message.find("cret"), std::string::npos) << "values are secrets";
  EXPECT_TRUE(check_configured_headers({{"X-Key", "tab\tok"}}).ok());
}

TEST(StreamableHttpRequest, SecretTermsIncludeLongWordsOfAValue) {
  EXPECT_EQ(secret_header_terms(
                {{"Authorization", "Bearer sk-0123456789"}, {"X-Empty", ""}, {"X-Key", "short"}}),
            (std::vector<std::string>{"Bearer sk-0123456789", "sk-0123456789", "short"}));
}

TEST(StreamableHttpText, MediaTypesSessionIdsAndServerText) {
  EXPECT_EQ(http_media_type("Text/Event-Stream; charset=utf-8"), "text/event-stream");
  EXPECT_EQ(http_media_type("  application/json  "), "application/json");
  EXPECT_EQ(http_media_type(""), "");
  EXPECT_TRUE(is_visible_ascii("abc-123", 7));
  EXPECT_FALSE(is_visible_ascii("abc-123", 6));
  EXPECT_FALSE(is_visible_ascii("a b", 10));
  EXPECT_FALSE(is_visible_ascii("", 10));
  EXPECT_EQ(*reply_session_id("", kWhere), "");
  EXPECT_EQ(*reply_session_id("s-1", kWhere), "s-1");
  EXPECT_EQ(reply_session_id("s 1", kWhere).error().code, ErrorCode::kInvalidReply);
  EXPECT_FALSE(reply_session_id(std::string(kMaxSessionIdBytes + 1, 'x'), kWhere).ok());
  EXPECT_EQ(clip_server_text("a\nb\x7f", 10), "a b ");
  EXPECT_EQ(clip_server_text("abcdef", 3), "abc\xE2\x80\xA6");
  EXPECT_EQ(clip_server_text("a\xC3\xA9", 2), "a\xE2\x80\xA6") << "never half a character";
  EXPECT_EQ(mcp_header_value("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
}

// ---- reading replies ------------------------------------------------------------------------

ReplyReader reader_for(std::set<std::string> pending, std::size_t max_bytes = 1 << 20) {
  return ReplyReader(kWhere, max_bytes, std::move(pending));
}

TEST(StreamableHttpReply, JsonAnswerIsDone) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(200, "application/json");
  EXPECT_EQ(r.feed(R"({"jsonrpc":"2.0","id":1,"result":{}})"), ReplyReader::Feed::kContinue);
  EXPECT_EQ(r.after_post(true).action, Action::kDone);
  EXPECT_EQ(r.take_messages(),
            (std::vector<std::string>{R"({"jsonrpc":"2.0","id":1,"result":{}})"}));
}

TEST(StreamableHttpReply, AcknowledgementsCarryNoMessage) {
  for (int status : {202, 204}) {
    ReplyReader r = reader_for({});
    r.begin_response(status, "text/plain");
    r.feed("Accepted");
    EXPECT_EQ(r.after_post(true).action, Action::kDone) << status;
    EXPECT_TRUE(r.take_messages().empty());
  }
  ReplyReader blank = reader_for({});
  blank.begin_response(200, "application/json");
  blank.feed(" \r\n");
  EXPECT_EQ(blank.after_post(true).action, Action::kDone);
}

TEST(StreamableHttpReply, OtherContentTypesFail) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(200, "text/html\n");
  r.feed("<html>");
  ReplyReader::Next next = r.after_post(true);
  ASSERT_EQ(next.action, Action::kFail);
  EXPECT_EQ(next.error->code, ErrorCode::kInvalidReply);
  EXPECT_NE(next.error->message.find("Content-Type 'text/html '"), std::string::npos)
      << next.error->message;
}

TEST(StreamableHttpReply, JsonWithoutTheResponseFails) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(200, "application/json");
  r.feed(R"({"jsonrpc":"2.0","method":"notifications/message"})");
  ReplyReader::Next next = r.after_post(true);
  ASSERT_EQ(next.action, Action::kFail);
  EXPECT_NE(next.error->message.find("carries no response"), std::string::npos);
}

TEST(StreamableHttpReply, UnreadableAnswerIsHandedOnAndFails) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(200, "application/json");
  r.feed(R"({"jsonrpc":"2.0","method":5})");
  ReplyReader::Next next = r.after_post(true);
  ASSERT_EQ(next.action, Action::kFail);
  EXPECT_EQ(next.error->code, ErrorCode::kInvalidReply);
  EXPECT_NE(next.error->message.find("is not JSON-RPC"), std::string::npos);
  EXPECT_EQ(r.take_messages().size(), 1u);
}

TEST(StreamableHttpReply, TooLargeFails) {
  ReplyReader r = reader_for({"1"}, 10);
  r.begin_response(200, "application/json");
  EXPECT_EQ(r.feed("0123456789"), ReplyReader::Feed::kContinue);
  EXPECT_EQ(r.feed("x"), ReplyReader::Feed::kFailed);
  EXPECT_EQ(r.failure()->code, ErrorCode::kTooLarge);
}

TEST(StreamableHttpReply, ErrorBodiesKeepTheirHeadOnly) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(500, "text/plain");
  EXPECT_EQ(r.feed(std::string(ReplyReader::kErrorBodyKeep, 'a')), ReplyReader::Feed::kContinue);
  EXPECT_EQ(r.feed("b"), ReplyReader::Feed::kBodyCut);
  EXPECT_TRUE(r.body_cut());
  EXPECT_EQ(r.body_text().size(), ReplyReader::kErrorBodyKeep);
  ReplyReader::Next next = r.after_post(true);
  EXPECT_EQ(next.action, Action::kStatusError);
  EXPECT_EQ(next.status_class, HttpStatusClass::kFailed);
}

TEST(StreamableHttpReply, StatusErrorsCarryTheirClass) {
  struct Row {
    int status;
    bool sent_session;
    HttpStatusClass expected;
  };
  for (const Row& row : {Row{404, true, HttpStatusClass::kSessionExpired},
                         Row{400, true, HttpStatusClass::kSessionExpired},
                         Row{403, true, HttpStatusClass::kUnauthenticated},
                         Row{404, false, HttpStatusClass::kFailed}}) {
    ReplyReader r = reader_for({"1"});
    r.begin_response(row.status, "application/json");
    r.feed(R"({"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"x"}})");
    ReplyReader::Next next = r.after_post(row.sent_session);
    // A JSON-RPC answer in a 4xx counts only when the status says nothing else.
    if (row.expected == HttpStatusClass::kFailed) {
      EXPECT_EQ(next.action, Action::kDone) << row.status;
      EXPECT_EQ(r.take_messages().size(), 1u);
      continue;
    }
    EXPECT_EQ(next.action, Action::kStatusError) << row.status;
    EXPECT_EQ(next.status_class, row.expected) << row.status;
    EXPECT_TRUE(r.take_messages().empty());
  }
}

TEST(StreamableHttpReply, FourHundredAnswersMustAnswerThisRequest) {
  struct Row {
    const char* content_type;
    const char* body;
    Action expected;
  };
  const Row rows[] = {
      {"application/json", R"({"jsonrpc":"2.0","id":2,"error":{"code":-32020,"message":"x"}})",
       Action::kStatusError},
      {"application/json", R"({"jsonrpc":"2.0","method":"x"})", Action::kStatusError},
      {"text/plain", R"({"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"x"}})",
       Action::kStatusError},
      {"application/json", R"({"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"x"}})",
       Action::kDone},
  };
  for (const Row& row : rows) {
    ReplyReader r = reader_for({"1"});
    r.begin_response(400, row.content_type);
    r.feed(row.body);
    EXPECT_EQ(r.after_post(false).action, row.expected) << row.content_type << " " << row.body;
  }
}

// An event stream with a notification, a priming event, an event of another type and the answer:
// fed split at every byte, reading stops exactly when the answer's event is complete.
TEST(StreamableHttpReply, EventStreamAnsweredSplitAtEveryByte) {
  const std::string head =
      "id: p1\nretry: 250\ndata:\n\n"
      "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n"
      "event: ping\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
      "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
  const std::string stream = head + "data: {\"jsonrpc\":\"2.0\",\"method\":\"late\"}\n\n";
  for (std::size_t split = 0; split <= stream.size(); ++split) {
    ReplyReader r = reader_for({"1"});
    r.begin_response(200, "text/event-stream");
    ReplyReader::Feed first = r.feed(std::string_view(stream).substr(0, split));
    ReplyReader::Feed last = first;
    if (first == ReplyReader::Feed::kContinue)
      last = r.feed(std::string_view(stream).substr(split));
    ASSERT_EQ(last, ReplyReader::Feed::kAnswered) << split;
    EXPECT_EQ(first == ReplyReader::Feed::kAnswered, split >= head.size()) << split;
    EXPECT_EQ(r.take_messages().size(), 2u) << split;
    EXPECT_EQ(r.sse().last_event_id(), "e2");
    EXPECT_EQ(r.sse().retry(), 250);
    EXPECT_EQ(r.after_post(true).action, Action::kDone);
  }
}

// A POST's whole event stream is bounded, so the bound on one event never comes first.
TEST(StreamableHttpReply, OversizedEventStreamFails) {
  ReplyReader r = reader_for({"1"}, 64);
  r.begin_response(200, "text/event-stream");
  EXPECT_EQ(r.feed("data: " + std::string(50, 'x')), ReplyReader::Feed::kContinue);
  EXPECT_EQ(r.feed(std::string(50, 'x')), ReplyReader::Feed::kFailed);
  EXPECT_EQ(r.failure()->code, ErrorCode::kTooLarge);
  EXPECT_EQ(r.failure()->message, "the reply of http://mcp.test/mcp exceeds 64 bytes");
}

TEST(StreamableHttpReply, ListenStreamReadsPastItsAnswer) {
  ReplyReader r(kWhere, 64, {"1"}, ReplyReader::Mode::kListen);
  r.begin_response(200, "text/event-stream");
  EXPECT_EQ(r.feed("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
            ReplyReader::Feed::kContinue);
  EXPECT_TRUE(r.pending().empty());
  EXPECT_EQ(r.feed(std::string(100, 'x')), ReplyReader::Feed::kFailed) << "each event bounded";
  EXPECT_NE(r.failure()->message.find("notification stream of"), std::string::npos);
}

// ---- resuming a POST's stream (SEP-1699) ----------------------------------------------------

TEST(StreamableHttpResume, StreamClosedBeforeTheAnswerIsResumed) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(200, "text/event-stream");
  r.feed("id: e1\nretry: 40\ndata:\n\n");
  ASSERT_EQ(r.after_post(true).action, Action::kResume);

  ReplyReader::Next plan = r.plan_resume(1, 10000, r.sse().retry(), 100, 500, 30000);
  ASSERT_EQ(plan.action, Action::kResume);
  EXPECT_EQ(plan.delay_ms, 100) << "retry clamped to the minimum";
  EXPECT_EQ(r.plan_resume(1, 10000, std::nullopt, 100, 500, 30000).delay_ms, 500);
  EXPECT_EQ(r.plan_resume(1, 100000, 99999, 100, 500, 30000).delay_ms, 30000);
  ReplyReader::Next late = r.plan_resume(1, 500, std::nullopt, 100, 500, 30000);
  ASSERT_EQ(late.action, Action::kFail);
  EXPECT_EQ(late.error->code, ErrorCode::kTimeout);
  ReplyReader::Next many =
      r.plan_resume(ReplyReader::kMaxResumptions + 1, 10000, std::nullopt, 100, 500, 30000);
  ASSERT_EQ(many.action, Action::kFail);
  EXPECT_NE(many.error->message.find("32 resumptions"), std::string::npos);

  r.begin_response(200, "text/event-stream");
  r.feed("id: e2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\n");
  EXPECT_EQ(r.after_resume(true).action, Action::kResume);
  r.begin_response(200, "text/event-stream");
  EXPECT_EQ(r.feed("id: e3\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
            ReplyReader::Feed::kAnswered);
  EXPECT_EQ(r.after_resume(true).action, Action::kDone);
  EXPECT_EQ(r.take_messages().size(), 2u);
}

TEST(StreamableHttpResume, WithoutAnEventIdThereIsNothingToResume) {
  ReplyReader r = reader_for({"1"});
  r.begin_response(200, "text/event-stream");
  r.feed("data:\n\n");
  ASSERT_EQ(r.after_post(true).action, Action::kResume);
  ReplyReader::Next plan = r.plan_resume(1, 10000, std::nullopt, 100, 500, 30000);
  ASSERT_EQ(plan.action, Action::kFail);
  EXPECT_NE(plan.error->message.find("no event id"), std::string::npos);
}

TEST(StreamableHttpResume, ResumptionRefusals) {
  ReplyReader no_get = reader_for({"1"});
  no_get.begin_response(405, "");
  ReplyReader::Next next = no_get.after_resume(true);
  ASSERT_EQ(next.action, Action::kStatusError);
  EXPECT_EQ(next.status_class, HttpStatusClass::kNotOffered);
  ReplyReader gone = reader_for({"1"});
  gone.begin_response(404, "");
  EXPECT_EQ(gone.after_resume(true).status_class, HttpStatusClass::kSessionExpired);
  ReplyReader json = reader_for({"1"});
  json.begin_response(200, "application/json");
  ASSERT_EQ(json.after_resume(true).action, Action::kFail);
}

// ---- the listen stream ----------------------------------------------------------------------

StreamAttempt open_attempt(int status, bool is_stream = false) {
  StreamAttempt a;
  a.first = true;
  a.status = status;
  a.is_stream = is_stream;
  a.sent_session = true;
  return a;
}

StreamAttempt later_attempt(int status, bool is_stream = false, bool delivered = false) {
  StreamAttempt a = open_attempt(status, is_stream);
  a.first = false;
  a.delivered = delivered;
  return a;
}

TEST(StreamableHttpListen, OpeningOutcomes) {
  StreamReconnector r({});
  EXPECT_EQ(r.after(open_attempt(405), std::nullopt, kWhere).action, Step::Action::kNotOffered);
  EXPECT_EQ(r.after(open_attempt(404), std::nullopt, kWhere).action, Step::Action::kNotOffered);
  Step auth = r.after(open_attempt(401), std::nullopt, kWhere);
  ASSERT_EQ(auth.action, Step::Action::kOpenFailed);
  EXPECT_EQ(auth.error->code, ErrorCode::kUnauthenticated);
  Step gone = r.after(open_attempt(400), std::nullopt, kWhere);
  ASSERT_EQ(gone.action, Step::Action::kOpenFailed);
  EXPECT_TRUE(gone.session_expired);
  EXPECT_EQ(gone.error->message.rfind("session expired", 0), 0u);
  StreamAttempt refused = open_attempt(0);
  refused.no_response = Error(ErrorCode::kTransport, "could not connect");
  Step none = r.after(refused, std::nullopt, kWhere);
  ASSERT_EQ(none.action, Step::Action::kOpenFailed);
  EXPECT_EQ(none.error->message, "could not connect");
  Step json = r.after(open_attempt(200), std::nullopt, kWhere);
  ASSERT_EQ(json.action, Step::Action::kOpenFailed);
  EXPECT_EQ(json.error->message, "HTTP 200 from http://mcp.test/mcp to the GET stream");
}

TEST(StreamableHttpListen, BackoffDoublesToItsBoundAndResetsOnDelivery) {
  ReconnectBounds bounds;
  bounds.min_retry_ms = 100;
  bounds.initial_backoff_ms = 500;
  bounds.max_backoff_ms = 3000;
  bounds.max_failures = 100;
  StreamReconnector r(bounds);
  std::vector<int64_t> delays;
  delays.push_back(r.after(open_attempt(200, true), std::nullopt, kWhere).delay_ms);
  for (int i = 0; i < 5; ++i) {
    Step s = r.after(later_attempt(503), std::nullopt, kWhere);
    ASSERT_EQ(s.action, Step::Action::kReconnect);
    delays.push_back(s.delay_ms);
  }
  EXPECT_EQ(delays, (std::vector<int64_t>{500, 1000, 2000, 3000, 3000, 3000}));
  EXPECT_EQ(r.failures(), 5);
  // A stream that stayed quiet keeps the backoff; one that delivered resets it.
  EXPECT_EQ(r.after(later_attempt(200, true), std::nullopt, kWhere).delay_ms, 3000);
  EXPECT_EQ(r.failures(), 0);
  EXPECT_EQ(r.after(later_attempt(200, true, true), std::nullopt, kWhere).delay_ms, 500);
  // The server's retry: wins, clamped, and leaves the backoff alone.
  EXPECT_EQ(r.after(later_attempt(503), 5, kWhere).delay_ms, 100);
  EXPECT_EQ(r.after(later_attempt(503), 700, kWhere).delay_ms, 700);
  EXPECT_EQ(r.after(later_attempt(503), 99999, kWhere).delay_ms, 3000);
  EXPECT_EQ(r.backoff_ms(), 1000);
}

TEST(StreamableHttpListen, ReconnectDelayIsAPureFunction) {
  ReconnectBounds b;
  EXPECT_EQ(reconnect_delay_ms(std::nullopt, 800, b), 800);
  EXPECT_EQ(reconnect_delay_ms(0, 800, b), b.min_retry_ms);
  EXPECT_EQ(reconnect_delay_ms(1234, 800, b), 1234);
  EXPECT_EQ(reconnect_delay_ms(int64_t{1} << 40, 800, b), b.max_backoff_ms);
}

TEST(StreamableHttpListen, LostAfterTooManyFailures) {
  ReconnectBounds bounds;
  bounds.max_failures = 3;
  StreamReconnector r(bounds);
  EXPECT_EQ(r.after(later_attempt(502), std::nullopt, kWhere).action, Step::Action::kReconnect);
  StreamAttempt refused = later_attempt(0);
  refused.no_response = Error(ErrorCode::kTransport, "could not connect to x");
  EXPECT_EQ(r.after(refused, std::nullopt, kWhere).action, Step::Action::kReconnect);
  Step lost = r.after(refused, std::nullopt, kWhere);
  ASSERT_EQ(lost.action, Step::Action::kLost);
  EXPECT_EQ(lost.error->message,
            "notification stream of http://mcp.test/mcp lost after 3 failed reconnections "
            "(last: could not connect to x)");
}

TEST(StreamableHttpListen, FatalAnswersToAReconnection) {
  StreamReconnector r({});
  Step gone = r.after(later_attempt(404), std::nullopt, kWhere);
  ASSERT_EQ(gone.action, Step::Action::kLost);
  EXPECT_TRUE(gone.session_expired);
  Step auth = r.after(later_attempt(403), std::nullopt, kWhere);
  ASSERT_EQ(auth.action, Step::Action::kLost);
  EXPECT_EQ(auth.error->code, ErrorCode::kUnauthenticated);
  Step json = r.after(later_attempt(200), std::nullopt, kWhere);
  ASSERT_EQ(json.action, Step::Action::kLost);
  EXPECT_EQ(json.error->code, ErrorCode::kInvalidReply);
  StreamAttempt broken = later_attempt(200, true);
  broken.read_failure = Error(ErrorCode::kTooLarge, "backlog");
  Step backlog = r.after(broken, std::nullopt, kWhere);
  ASSERT_EQ(backlog.action, Step::Action::kLost);
  EXPECT_EQ(backlog.error->message, "backlog");
}

}  // namespace
}  // namespace quiver
