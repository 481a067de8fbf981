// Drives a pull decoder of shared/framing.h (NdjsonDecoder, SseParser: feed, next, finish) over a
// byte stream cut into pieces, the way a transport does: after each piece, every message and
// every error `next()` has is handed on, then the stream is finished. The unit tests and the
// fuzz targets of the framings share it, so both observe the decoders the same way.
#pragma once

#include <string_view>

#include "shared/status.h"

namespace quiver::testing {

// Pulls from `decoder` until it has nothing more: each message to `on_message`, each error to
// `on_error` (the decoder goes on after an error).
template <typename Decoder, typename OnMessage, typename OnError>
void drain_decoder(Decoder& decoder, OnMessage&& on_message, OnError&& on_error) {
  for (;;) {
    auto next = decoder.next();
    if (!next.ok()) {
      on_error(next.error());
      continue;
    }
    if (!next->has_value()) return;
    on_message(**next);
  }
}

// Feeds `pieces` in order, draining after each, then finishes the stream: what finish() said.
template <typename Decoder, typename Pieces, typename OnMessage, typename OnError>
Status feed_pieces(Decoder& decoder, const Pieces& pieces, OnMessage&& on_message,
                   OnError&& on_error) {
  for (std::string_view piece : pieces) {
    decoder.feed(piece);
    drain_decoder(decoder, on_message, on_error);
  }
  return decoder.finish();
}

}  // namespace quiver::testing
