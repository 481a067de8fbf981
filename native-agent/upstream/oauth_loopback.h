// The native-app redirect of RFC 8252 §7.3: a one-shot HTTP listener on 127.0.0.1 at an
// ephemeral port that takes the authorization server's redirect (`GET /callback?...`), answers
// the browser a small page, and hands the query to whoever waits. Used by `probe --oauth`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

class OAuthLoopbackListener {
 public:
  // Binds 127.0.0.1 on a port the system picks and starts serving.
  static Result<std::unique_ptr<OAuthLoopbackListener>> start();
  ~OAuthLoopbackListener();
  OAuthLoopbackListener(const OAuthLoopbackListener&) = delete;
  OAuthLoopbackListener& operator=(const OAuthLoopbackListener&) = delete;

  // "http://127.0.0.1:PORT/callback".
  const std::string& redirect_uri() const;
  // The first callback's parameters; kTimeout after `timeout_ms`.
  Result<oauth::CallbackParams> wait(int64_t timeout_ms);

 private:
  struct Impl;
  explicit OAuthLoopbackListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
