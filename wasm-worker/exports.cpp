// The wasm module's C ABI: moves bytes between worker.mjs and the core's EdgeService
// (shared/edge_service.h), nothing else. One EdgeService per instance (= per isolate); every
// request lives in its own handle inside it.
//
// Each call that yields a step returns a pointer to the step's wire bytes (edge_service.h: u32
// meta length, u32 payload length, meta JSON, payload), valid until the next call into the module;
// the host copies what it needs at once. Inputs are written by the host into buffers it got from
// `malloc` and frees after the call.
//
// Exceptions: the core returns errors as values; should anything throw anyway (a bug, or
// std::bad_alloc when memory cannot grow), the throw stops here and becomes a 500 INTERNAL
// response for that request, instead of aborting the instance and every request in it.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "shared/edge_service.h"

namespace {

std::unique_ptr<quiver::EdgeService> g_edge;  // the isolate's service, made by edge_init
std::string g_out;                            // the last step's wire bytes

std::string_view view(const uint8_t* data, size_t size) {
  return data == nullptr ? std::string_view()
                         : std::string_view(reinterpret_cast<const char*>(data), size);
}

const uint8_t* out(const quiver::EdgeStep& step) {
  g_out = quiver::edge_step_to_wire(step);
  return reinterpret_cast<const uint8_t*>(g_out.data());
}

// The service; before edge_init, one that answers every request 500 and says why in the log.
quiver::EdgeService& edge() {
  if (!g_edge) {
    g_edge = std::make_unique<quiver::EdgeService>(quiver::Result<quiver::EdgeSettings>(
        quiver::Error(quiver::ErrorCode::kInternal, "edge_init was not called")));
  }
  return *g_edge;
}

std::string what(const std::exception& e) { return std::string("exception: ") + e.what(); }

template <typename Call>
const uint8_t* guarded(uint32_t handle, Call&& call) {
  try {
    return out(call());
  } catch (const std::exception& e) {
    try {
      return out(edge().internal_error(handle, what(e)));
    } catch (...) {
      return nullptr;  // the host answers 500 itself
    }
  } catch (...) {
    try {
      return out(edge().internal_error(handle, "unknown exception"));
    } catch (...) {
      return nullptr;
    }
  }
}

}  // namespace

extern "C" {

// Builds the isolate's service from the worker's string-valued environment (a JSON object).
// Returns 1 when configured, 0 when the settings are bad (the service then answers 500 and
// /healthz explains) or the service could not be made.
int edge_init(const uint8_t* env_json, size_t size) {
  try {
    g_edge =
        std::make_unique<quiver::EdgeService>(quiver::edge_settings_from_env(view(env_json, size)));
    return g_edge->configured() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

const uint8_t* edge_begin(const uint8_t* request, size_t size, double now_ms, const uint8_t* random,
                          size_t random_size) {
  return guarded(0, [&] {
    return edge().begin_wire(view(request, size), static_cast<int64_t>(now_ms),
                             view(random, random_size));
  });
}

const uint8_t* edge_feed(uint32_t handle, const uint8_t* bytes, size_t size, double now_ms) {
  return guarded(
      handle, [&] { return edge().feed(handle, view(bytes, size), static_cast<int64_t>(now_ms)); });
}

const uint8_t* edge_fail(uint32_t handle, const uint8_t* why, size_t size, double now_ms) {
  return guarded(
      handle, [&] { return edge().fail(handle, view(why, size), static_cast<int64_t>(now_ms)); });
}

// A step in parts (a spread round over several Redis Cluster nodes): part `part`'s bytes, or the
// failure of its connection.
const uint8_t* edge_feed_part(uint32_t handle, uint32_t part, const uint8_t* bytes, size_t size,
                              double now_ms) {
  return guarded(handle, [&] {
    return edge().feed_part(handle, part, view(bytes, size), static_cast<int64_t>(now_ms));
  });
}

const uint8_t* edge_fail_part(uint32_t handle, uint32_t part, const uint8_t* why, size_t size,
                              double now_ms) {
  return guarded(handle, [&] {
    return edge().fail_part(handle, part, view(why, size), static_cast<int64_t>(now_ms));
  });
}

const uint8_t* edge_background(uint32_t handle, double now_ms) {
  return guarded(handle, [&] { return edge().background(handle, static_cast<int64_t>(now_ms)); });
}

// The client went away: the request ends; the step is a relayed call's cancel mark to send (under
// a new handle) or kDone (edge_service.h abandon).
const uint8_t* edge_abandon(uint32_t handle, double now_ms) {
  return guarded(handle, [&] { return edge().abandon(handle, static_cast<int64_t>(now_ms)); });
}

void edge_end(uint32_t handle) {
  try {
    if (g_edge) g_edge->end(handle);
  } catch (...) {
  }
}

}  // extern "C"
