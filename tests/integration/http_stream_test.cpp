// HttpFront's streams (native-agent/api/http_front.h): a worker's handler opens one; what a
// producer thread sends arrives as chunks of one chunked body; an idle stream gets its keep-alive;
// the client closing its side ends it for the producer; the buffer bound cuts a reader that does
// not read; stop() ends every open stream with its farewell and the terminating chunk. A real
// front on a free loopback port, spoken to over real sockets.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/api/http_front.h"

namespace quiver {
namespace {

Http1Response text(int status, std::string body) {
  Http1Response r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "text/plain");
  r.body = std::move(body);
  return r;
}

// A front whose worker opens a stream for /stream (first bytes "hello\n") and answers anything
// else plainly; the test takes the producer side from `stream`.
struct Front {
  std::mutex mu;
  std::shared_ptr<HttpStream> stream;
  HttpFront front;

  explicit Front(HttpFrontOptions options)
      : front(
            options,
            [this](const Http1Request& req, const HttpPeer&) {
              if (req.target == "/stream") {
                std::shared_ptr<HttpStream> s = HttpFront::open_stream(": ka\n\n", "bye\n");
                std::lock_guard<std::mutex> lock(mu);
                stream = s;
                Http1Response r = text(200, "hello\n");
                r.headers = {{"Content-Type", "text/event-stream"}};
                return r;
              }
              return text(200, "plain");
            },
            [](int status, const std::string& message) { return text(status, message); },
            [] { return text(503, "overloaded"); }) {
    Status started = front.start();
    EXPECT_TRUE(started.ok()) << (started.ok() ? "" : started.error().message);
  }
  std::shared_ptr<HttpStream> producer() {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stream) return stream;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return nullptr;
  }
};

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads until what arrived holds `marker` (or, with an empty marker, until the peer closes).
std::string read_until(int fd, std::string& got, const std::string& marker) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    if (!marker.empty() && got.find(marker) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

// The payload of the chunked body after the head, and whether its terminating chunk arrived.
struct Body {
  std::string payload;
  bool ended = false;
};
Body dechunk(const std::string& wire) {
  Body b;
  std::size_t at = wire.find("\r\n\r\n");
  if (at == std::string::npos) return b;
  at += 4;
  for (;;) {
    std::size_t eol = wire.find("\r\n", at);
    if (eol == std::string::npos) return b;
    const std::size_t size = std::stoul(wire.substr(at, eol - at), nullptr, 16);
    if (size == 0) {
      b.ended = wire.compare(eol, 4, "\r\n\r\n") == 0;
      return b;
    }
    if (eol + 2 + size + 2 > wire.size()) return b;
    b.payload += wire.substr(eol + 2, size);
    at = eol + 2 + size + 2;
  }
}

bool wait_for(const std::function<bool()>& done) {
  for (int i = 0; i < 4000 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

const char kGet[] = "GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

TEST(HttpStream, ChunksArriveInOrderAndStopEndsTheBodyWithTheFarewell) {
  auto f = std::make_unique<Front>(HttpFrontOptions{});
  int fd = connect_to(f->front.port());
  send_all(fd, kGet);
  std::string got;
  read_until(fd, got, "hello\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  EXPECT_EQ(got.find("Content-Length"), std::string::npos) << got;
  EXPECT_NE(got.find("\r\n\r\n6\r\nhello\n\r\n"), std::string::npos) << got;
  std::shared_ptr<HttpStream> s = f->producer();
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(wait_for([&] { return f->front.open_streams() == 1; }));
  EXPECT_TRUE(s->send("one\n"));
  EXPECT_TRUE(s->send("two\n"));
  read_until(fd, got, "two\n");
  EXPECT_EQ(dechunk(got).payload, "hello\none\ntwo\n") << got;  // sends may share a chunk
  f->front.stop();
  read_until(fd, got, "");
  Body body = dechunk(got);
  EXPECT_EQ(body.payload, "hello\none\ntwo\nbye\n") << got;
  EXPECT_TRUE(body.ended) << got;
  EXPECT_TRUE(s->ended());
  EXPECT_FALSE(s->send("late\n"));
  ::close(fd);
}

TEST(HttpStream, TheProducersCloseEndsItAndTheClientsCloseEndsItForTheProducer) {
  Front f{HttpFrontOptions{}};
  int fd = connect_to(f.front.port());
  send_all(fd, kGet);
  std::string got;
  read_until(fd, got, "hello\n");
  std::shared_ptr<HttpStream> s = f.producer();
  ASSERT_NE(s, nullptr);
  s->close("last\n");
  read_until(fd, got, "");
  Body body = dechunk(got);
  EXPECT_EQ(body.payload, "hello\nlast\n") << got;
  EXPECT_TRUE(body.ended) << got;
  ::close(fd);

  // A second stream whose client leaves: the producer learns it (the loop reads the end).
  f.stream.reset();
  int fd2 = connect_to(f.front.port());
  send_all(fd2, kGet);
  std::string got2;
  read_until(fd2, got2, "hello\n");
  std::shared_ptr<HttpStream> s2 = f.producer();
  ASSERT_NE(s2, nullptr);
  ::close(fd2);
  EXPECT_TRUE(wait_for([&] { return s2->ended(); }));
  EXPECT_FALSE(s2->send("nobody\n"));
  EXPECT_TRUE(wait_for([&] { return f.front.open_streams() == 0; }));
}

TEST(HttpStream, AnIdleStreamGetsItsKeepAliveAndABoundedBuffer) {
  HttpFrontOptions o;
  o.stream_keepalive_ms = 100;
  o.max_stream_buffer_bytes = 1024;
  Front f{o};
  int fd = connect_to(f.front.port());
  send_all(fd, kGet);
  std::string got;
  read_until(fd, got, "hello\n");
  read_until(fd, got, "6\r\n: ka\n\n\r\n");
  EXPECT_NE(got.find("6\r\n: ka\n\n\r\n"), std::string::npos) << got;
  std::shared_ptr<HttpStream> s = f.producer();
  ASSERT_NE(s, nullptr);
  // Over the bound in one send: refused, and the stream ends (cleanly) instead of growing.
  EXPECT_FALSE(s->send(std::string(2048, 'x')));
  EXPECT_TRUE(s->ended());
  read_until(fd, got, "");
  EXPECT_TRUE(dechunk(got).ended) << got;
  EXPECT_EQ(got.find("xxxx"), std::string::npos);
  ::close(fd);
}

// A plain request on the same front is answered as ever (a stream is per response).
TEST(HttpStream, OtherAnswersAreUnchanged) {
  Front f{HttpFrontOptions{}};
  int fd = connect_to(f.front.port());
  send_all(fd, "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  std::string got;
  read_until(fd, got, "plain");
  EXPECT_NE(got.find("Content-Length: 5\r\n"), std::string::npos) << got;
  EXPECT_EQ(HttpFront::open_stream("", ""), nullptr);  // not on a worker
  ::close(fd);
}

}  // namespace
}  // namespace quiver
