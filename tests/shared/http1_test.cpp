#include "shared/http1.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

// Everything a host observes from the parser, as text, so that two runs compare in one assertion:
// each request (method, target, version, keep-alive, headers, body) or failure in order. A
// SendContinue depends on where the bytes split (it is skipped when the body is already there),
// so it is left out here and tested on its own.
using Transcript = std::vector<std::string>;

std::string describe(const Http1Request& r) {
  std::string s = r.method + " " + r.target + " 1." + std::to_string(r.minor_version) +
                  (r.keep_alive ? " keep" : " close");
  for (const auto& [n, v] : r.headers) s += " [" + n + "=" + v + "]";
  return s + " body=" + r.body;
}

Transcript transcript(const std::vector<std::string>& chunks, const Http1Limits& limits = {}) {
  Http1RequestParser parser(limits);
  Transcript out;
  for (const std::string& chunk : chunks) {
    parser.feed(chunk);
    for (;;) {
      Http1Step step = parser.next();
      if (std::holds_alternative<Http1NeedMore>(step)) break;
      if (std::holds_alternative<Http1SendContinue>(step)) continue;
      if (auto* f = std::get_if<Http1Failure>(&step)) {
        out.push_back("fail " + std::to_string(f->status));
        break;  // the host closes the connection
      }
      out.push_back(describe(std::get<Http1Request>(step)));
    }
    if (!out.empty() && out.back().rfind("fail ", 0) == 0) break;
  }
  return out;
}

// The same transcript whether the bytes come at once, split in two at every position, or one
// byte at a time.
Transcript same_at_every_split(const std::string& wire, const Http1Limits& limits = {}) {
  Transcript whole = transcript({wire}, limits);
  for (std::size_t cut = 1; cut < wire.size(); ++cut) {
    EXPECT_EQ(transcript({wire.substr(0, cut), wire.substr(cut)}, limits), whole) << "cut " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : wire) bytes.emplace_back(1, c);
  EXPECT_EQ(transcript(bytes, limits), whole) << "byte by byte";
  return whole;
}

Http1Limits small_limits() {
  Http1Limits l;
  l.max_request_line_bytes = 64;
  l.max_header_line_bytes = 48;
  l.max_header_count = 4;
  l.max_head_bytes = 160;
  l.max_body_bytes = 16;
  return l;
}

TEST(Http1Parser, ParsesARequestWithItsHeadersAndBody) {
  Transcript t = same_at_every_split(
      "POST /v1/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-Y:  spaced  \r\n\r\nhello");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], "POST /v1/x?a=1 1.1 keep [Host=h] [Content-Length=5] [X-Y=spaced] body=hello");
}

TEST(Http1Parser, PipelinedRequestsComeOutInOrder) {
  Transcript t = same_at_every_split(
      "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
      "\r\n"  // a stray empty line between requests is ignored
      "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer-X: t\r\n\r\n"
      "GET /c HTTP/1.0\r\n\r\n");
  EXPECT_EQ(t, (Transcript{"GET /a 1.1 keep [Host=h] body=",
                           "POST /b 1.1 keep [Host=h] [Transfer-Encoding=chunked] body=abcde",
                           "GET /c 1.0 close body="}));
}

TEST(Http1Parser, KeepAliveFollowsTheVersionAndConnectionHeader) {
  EXPECT_EQ(transcript({"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"}),
            Transcript{"GET / 1.1 close [Host=h] [Connection=close] body="});
  EXPECT_EQ(transcript({"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"}),
            Transcript{"GET / 1.0 keep [Connection=Keep-Alive] body="});
  EXPECT_EQ(transcript({"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade, close\r\n\r\n"}),
            Transcript{"GET / 1.1 close [Host=h] [Connection=upgrade, close] body="});
}

TEST(Http1Parser, LoneLineFeedsEndLinesToo) {
  EXPECT_EQ(same_at_every_split("GET / HTTP/1.1\nHost: h\n\n"),
            Transcript{"GET / 1.1 keep [Host=h] body="});
}

TEST(Http1Parser, ARequestWithoutLengthHasNoBody) {
  // What follows the head is the next request: here not a request line, so 400 and close.
  EXPECT_EQ(same_at_every_split("POST /p HTTP/1.1\r\nHost: h\r\n\r\nnot a request\r\n"),
            (Transcript{"POST /p 1.1 keep [Host=h] body=", "fail 400"}));
}

TEST(Http1Parser, EachBoundIsRefusedWithItsStatus) {
  const Http1Limits l = small_limits();
  struct Case {
    std::string wire;
    int status;
  } cases[] = {
      {"GET /" + std::string(80, 'a') + " HTTP/1.1\r\n", 414},
      {"GET /" + std::string(80, 'a'), 414},  // no newline yet: refused at the bound
      {"GET / HTTP/1.1\r\nX: " + std::string(60, 'v') + "\r\n", 431},
      {"GET / HTTP/1.1\r\nX: " + std::string(60, 'v'), 431},  // a header line without newline
      {"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nHost: " + std::string(40, 'h') + "\r\nAa: " + std::string(40, 'a') +
           "\r\nBb: " + std::string(40, 'b') + "\r\nCc: " + std::string(40, 'c') + "\r\n\r\n",
       431},  // every line within bounds, the head over its bound
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 17\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" +
           std::string(16, 'x') + "\r\n1\r\n",
       413},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
       413},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\n", 415},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n",
       415},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
       400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nExpect: something\r\nContent-Length: 1\r\n\r\n", 417},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTX/1.1\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"G@T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},  // no Host
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 400},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(same_at_every_split(c.wire, l), Transcript{"fail " + std::to_string(c.status)})
        << c.wire;
  }
}

TEST(Http1Parser, BoundsHoldWhatEverFollows) {
  // A header line that never ends and a body that never ends: the parser refuses at the bound
  // and keeps nothing, however much more is fed.
  const Http1Limits l = small_limits();
  Http1RequestParser p(l);
  p.feed("GET / HTTP/1.1\r\nX: ");
  std::string mb(1 << 20, 'v');
  p.feed(mb);
  Http1Step step = p.next();
  ASSERT_TRUE(std::holds_alternative<Http1Failure>(step));
  EXPECT_EQ(std::get<Http1Failure>(step).status, 431);
  p.feed(mb);
  EXPECT_EQ(p.buffered(), 0u);
  EXPECT_EQ(std::get<Http1Failure>(p.next()).status, 431);  // and stays failed
}

TEST(Http1Parser, ExpectContinueIsAStepBeforeTheBody) {
  Http1RequestParser p;
  p.feed("PUT /x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_TRUE(std::holds_alternative<Http1SendContinue>(p.next()));
  EXPECT_TRUE(std::holds_alternative<Http1NeedMore>(p.next()));
  EXPECT_TRUE(p.reading_body());
  p.feed("ok");
  Http1Step step = p.next();
  ASSERT_TRUE(std::holds_alternative<Http1Request>(step));
  EXPECT_EQ(std::get<Http1Request>(step).body, "ok");
  EXPECT_TRUE(p.idle());

  // A 413 for a declared length comes instead of the 100: the client never sends the body.
  Http1RequestParser q(small_limits());
  q.feed("PUT /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 99\r\n\r\n");
  ASSERT_TRUE(std::holds_alternative<Http1Failure>(q.next()));

  // Without a body there is nothing to continue.
  Http1RequestParser r;
  r.feed("GET /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_TRUE(std::holds_alternative<Http1Request>(r.next()));
}

TEST(Http1Parser, IdleSaysWhetherARequestHasBegun) {
  Http1RequestParser p;
  EXPECT_TRUE(p.idle());
  p.feed("G");
  EXPECT_TRUE(std::holds_alternative<Http1NeedMore>(p.next()));
  EXPECT_FALSE(p.idle());
  p.feed("ET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_TRUE(std::holds_alternative<Http1Request>(p.next()));
  EXPECT_TRUE(p.idle());
}

TEST(Http1Writer, FramesAResponse) {
  Http1Response r;
  r.status = 404;
  r.headers = {{"Content-Type", "application/json"},
               {"Content-Length", "999"},  // the writer's own
               {"X-Evil", "a\r\nSet-Cookie: b"}};
  r.body = "{}";
  EXPECT_EQ(http1_serialize(r, 1, true),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            "X-Evil: a  Set-Cookie: b\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(http1_serialize(r, 1, false, /*head_only=*/true),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            "X-Evil: a  Set-Cookie: b\r\nContent-Length: 2\r\nConnection: close\r\n\r\n");
  Http1Response ok;
  EXPECT_EQ(http1_serialize(ok, 0, true),
            "HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n");
  Http1Response not_modified;
  not_modified.status = 304;
  not_modified.body = "ignored";
  EXPECT_EQ(http1_serialize(not_modified, 1, true), "HTTP/1.1 304 Not Modified\r\n\r\n");
  EXPECT_FALSE(http1_response_closes(ok));
  ok.headers = {{"connection", "Close"}};
  EXPECT_TRUE(http1_response_closes(ok));
}

}  // namespace
}  // namespace quiver
