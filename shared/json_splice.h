// Splicing JSON text a writer keeps serialized (the render cache's fragments) into a value it
// writes, without parsing the text back.
#pragma once

#include <string>

#include "shared/canonical_json.h"
#include "shared/json.h"

namespace quiver {

// Appends the JSON text of `object` (an object) with raw JSON text as the value of `key` (which
// must not be in `object`): exactly what serialize_json would give with that value in place, keys
// in the object's order (nlohmann's object is a std::map, so `key` takes its sorted place).
// `raw(out)` appends the value's text. Lets a writer splice text it keeps serialized (the render
// cache's fragments) without parsing it back.
template <typename Raw>
void append_json_object_with(std::string& out, const Json& object, const std::string& key,
                             Raw&& raw) {
  Json shaped = object;
  shaped[key] = nullptr;  // a placeholder where `raw` goes
  out += '{';
  bool first = true;
  for (auto it = shaped.begin(); it != shaped.end(); ++it) {
    if (!first) out += ',';
    first = false;
    out += serialize_json(Json(it.key()));
    out += ':';
    if (it.key() == key) {
      raw(out);
    } else {
      out += serialize_json(it.value());
    }
  }
  out += '}';
}

}  // namespace quiver
