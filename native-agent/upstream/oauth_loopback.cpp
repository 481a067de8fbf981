#include "native-agent/upstream/oauth_loopback.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <httplib.h>

namespace quiver {

struct OAuthLoopbackListener::Impl {
  httplib::Server server;
  std::thread thread;
  std::string redirect_uri;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<oauth::CallbackParams>> result;
};

OAuthLoopbackListener::OAuthLoopbackListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

OAuthLoopbackListener::~OAuthLoopbackListener() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::unique_ptr<OAuthLoopbackListener>> OAuthLoopbackListener::start() {
  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  self->server.Get("/callback", [self](const httplib::Request& req, httplib::Response& res) {
    // The query as received: from_query checks that state is there and nothing repeats.
    std::string query;
    std::size_t q = req.target.find('?');
    if (q != std::string::npos) query = req.target.substr(q + 1);
    Result<oauth::CallbackParams> params = oauth::CallbackParams::from_query(query);
    bool ok = params.ok() && !params->error;
    res.set_content(ok ? "<!doctype html><title>Quiver</title><p>Authorized. You can close this "
                         "window and return to the terminal.</p>"
                       : "<!doctype html><title>Quiver</title><p>The authorization did not "
                         "succeed; the terminal says why.</p>",
                    "text/html; charset=utf-8");
    std::lock_guard<std::mutex> lock(self->mu);
    if (!self->result) {
      self->result = std::move(params);
      self->cv.notify_all();
    }
  });
  int port = self->server.bind_to_any_port("127.0.0.1");
  if (port <= 0) {
    return Error(ErrorCode::kResourceUnavailable,
                 "cannot listen on 127.0.0.1 for the OAuth redirect");
  }
  self->redirect_uri = "http://127.0.0.1:" + std::to_string(port) + "/callback";
  self->thread = std::thread([self] { self->server.listen_after_bind(); });
  return std::unique_ptr<OAuthLoopbackListener>(new OAuthLoopbackListener(std::move(impl)));
}

const std::string& OAuthLoopbackListener::redirect_uri() const { return impl_->redirect_uri; }

Result<oauth::CallbackParams> OAuthLoopbackListener::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                          [&] { return impl_->result.has_value(); })) {
    return Error(ErrorCode::kTimeout, "no OAuth redirect arrived in time");
  }
  return *impl_->result;
}

}  // namespace quiver
