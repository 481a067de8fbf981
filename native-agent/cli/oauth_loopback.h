// The native-app redirect of RFC 8252 §7.3: an HTTP listener on 127.0.0.1 at an ephemeral port
// that takes the authorization server's redirect (`GET /callback?...`, parsed by the one bounded
// parser, shared/oauth_callback.h), answers the browser a page, and hands the redirect to whoever
// waits. `quiver-agent login` completes the authorization inside its handler (the page says what
// happened, and a redirect for another authorization keeps it waiting); `probe --oauth` takes the
// first redirect as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shared/discovery_http.h"
#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

class OAuthLoopbackListener {
 public:
  // What the listener does with one redirect (its query parsed, or why it could not be): the
  // browser's page, and whether the wait is over (false: not the redirect being waited for; the
  // listener keeps listening). Handlers run one at a time, on the listener's thread.
  struct Answer {
    HttpResponse page;
    bool done = true;
  };
  using Handler = std::function<Answer(const Result<oauth::CallbackParams>& redirect)>;

  // Binds 127.0.0.1 on a port the system picks and starts serving. Without a handler every
  // redirect ends the wait with a plain page (authorized, or not).
  static Result<std::unique_ptr<OAuthLoopbackListener>> start(Handler handler = nullptr);
  ~OAuthLoopbackListener();
  OAuthLoopbackListener(const OAuthLoopbackListener&) = delete;
  OAuthLoopbackListener& operator=(const OAuthLoopbackListener&) = delete;

  // "http://127.0.0.1:PORT/callback".
  const std::string& redirect_uri() const;
  // The redirect that ended the wait (as parsed); kTimeout after `timeout_ms`.
  Result<oauth::CallbackParams> wait(int64_t timeout_ms);

 private:
  struct Impl;
  explicit OAuthLoopbackListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
