// The wasm module's C ABI: moves bytes between worker.mjs and the core's EdgeService
// (shared/edge_service.h), nothing else. One EdgeService per instance (= per isolate); every
// request lives in its own handle inside it.
//
// Each call that yields a step returns a pointer to four u32s: the step's meta JSON length, its
// payload length, and where each lies in wasm memory (edge_wire.h: edge_step_wire; the payload is
// not copied into a buffer of its own), valid until the next call into the module; the host
// copies what it needs at once. Inputs are written by the host into buffers it got from `malloc`
// and frees after the call.
//
// A request whose answer needs no background work is ended here, with that answer (the step says
// "ended"): the host makes no end() call for it, one call across the boundary fewer per request.
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
// The last step, its meta, its parts' joined bytes, and the head the host reads (out()).
quiver::EdgeStep g_step;
std::string g_meta;
std::string g_joined;
uint32_t g_head[4];

std::string_view view(const uint8_t* data, size_t size) {
  return data == nullptr ? std::string_view()
                         : std::string_view(reinterpret_cast<const char*>(data), size);
}

uint32_t address(const void* p) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)); }

const uint8_t* out(quiver::EdgeStep step) {
  if (step.action == quiver::EdgeAction::kRespond && !step.background && step.handle != 0 &&
      g_edge) {
    g_edge->end(step.handle);
    step.ended = true;
  }
  g_step = std::move(step);
  quiver::EdgeStepWire wire = quiver::edge_step_wire(g_step, &g_joined);
  g_meta = std::move(wire.meta);
  g_head[0] = static_cast<uint32_t>(g_meta.size());
  g_head[1] = static_cast<uint32_t>(wire.payload.size());
  g_head[2] = address(g_meta.data());
  g_head[3] = address(wire.payload.data());
  return reinterpret_cast<const uint8_t*>(g_head);
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
