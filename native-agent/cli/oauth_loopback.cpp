#include "native-agent/cli/oauth_loopback.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <httplib.h>

#include "native-agent/api/api_http.h"
#include "shared/oauth_callback.h"

namespace quiver {

namespace {

// The page of a listener without a handler: the terminal that waits says the rest.
OAuthLoopbackListener::Answer plain_page(const Result<oauth::CallbackParams>& redirect) {
  OAuthCallbackResult result;
  if (!redirect.ok()) {
    result.outcome = OAuthCallbackOutcome::kFailed;
    result.message = redirect.error().message;
  } else if (redirect->error) {
    result.outcome = OAuthCallbackOutcome::kFailed;
    result.message = "the authorization server answered " + *redirect->error;
  } else {
    result.outcome = OAuthCallbackOutcome::kConnected;
  }
  return {oauth_callback_page(result), true};
}

}  // namespace

struct OAuthLoopbackListener::Impl {
  httplib::Server server;
  std::thread thread;
  std::string redirect_uri;
  Handler handler;
  std::mutex mu;  // one handler at a time; guards `result`
  std::condition_variable cv;
  std::optional<Result<oauth::CallbackParams>> result;
};

OAuthLoopbackListener::OAuthLoopbackListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

OAuthLoopbackListener::~OAuthLoopbackListener() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::unique_ptr<OAuthLoopbackListener>> OAuthLoopbackListener::start(Handler handler) {
  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  self->handler = handler ? std::move(handler) : Handler(plain_page);
  self->server.Get("/callback", [self](const httplib::Request& req, httplib::Response& res) {
    Result<oauth::CallbackParams> redirect = parse_oauth_callback(api::raw_query(req));
    std::lock_guard<std::mutex> lock(self->mu);
    if (self->result) {
      return api::send(oauth_callback_refusal(400, "This authorization has already finished"), res);
    }
    Answer answer = self->handler(redirect);
    api::send(std::move(answer.page), res);
    if (answer.done) {
      self->result = std::move(redirect);
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
