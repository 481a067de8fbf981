// `${NAME}`, `${env:NAME}`, `${NAME:-default}` and `$${` in configuration strings, with the names
// of the variables used (they become the source of a secret: `env:NAME`).
#include <algorithm>

#include "native-agent/base/config_internal.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

namespace config_internal {

bool is_var_name(std::string_view name) {
  if (name.empty()) return false;
  if (is_digit(name[0])) return false;
  for (char c : name) {
    if (!is_alnum(c) && c != '_') return false;
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<Expanded> expand(std::string_view tmpl, EnvView& env, bool percent_decode) {
  Expanded out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl.compare(i, 3, "$${") == 0) {
      out.value += "${";
      i += 3;
      continue;
    }
    if (tmpl.compare(i, 2, "${") == 0) {
      const std::size_t close = tmpl.find('}', i + 2);
      if (close == std::string_view::npos) {
        return invalid("a `${` at position " + std::to_string(i) + " is not closed by `}`");
      }
      std::string_view body = tmpl.substr(i + 2, close - i - 2);
      if (body.substr(0, 4) == "env:") body = body.substr(4);
      std::optional<std::string_view> fallback;
      const std::size_t dash = body.find(":-");
      if (dash != std::string_view::npos) {
        fallback = body.substr(dash + 2);
        body = body.substr(0, dash);
      }
      if (!is_var_name(body)) {
        return invalid("the `${...}` at position " + std::to_string(i) +
                       " does not name an environment variable ([A-Za-z_][A-Za-z0-9_]*)");
      }
      const std::string name(body);
      std::optional<std::string> value = env.get(name);
      if (value.has_value()) {
        out.value += *value;
        out.refs.push_back(name);
      } else if (fallback.has_value()) {
        out.value += *fallback;
      } else {
        return invalid("references ${" + name + "}, which is not set");
      }
      i = close + 1;
      continue;
    }
    if (percent_decode && tmpl[i] == '%' && i + 2 < tmpl.size() && hex_value(tmpl[i + 1]) >= 0 &&
        hex_value(tmpl[i + 2]) >= 0) {
      out.value += static_cast<char>(hex_value(tmpl[i + 1]) * 16 + hex_value(tmpl[i + 2]));
      i += 3;
      continue;
    }
    out.value += tmpl[i++];
  }
  return out;
}

std::string template_source(const std::vector<std::string>& refs) {
  if (refs.empty()) return "inline";
  std::vector<std::string> unique;
  for (const std::string& r : refs) {
    if (std::find(unique.begin(), unique.end(), r) == unique.end()) unique.push_back(r);
  }
  return "env:" + join(unique, ",");
}

// Index of the first character of `chars` in `text` from `from`, outside `${...}`.
std::size_t find_outside_refs(std::string_view text, std::string_view chars, std::size_t from) {
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text.compare(i, 2, "${") == 0) {
      const std::size_t close = text.find('}', i + 2);
      if (close == std::string_view::npos) return std::string_view::npos;
      i = close;
      continue;
    }
    if (chars.find(text[i]) != std::string_view::npos) return i;
  }
  return std::string_view::npos;
}

std::size_t rfind_outside_refs(std::string_view text, char c) {
  std::size_t found = std::string_view::npos;
  std::size_t i = 0;
  while ((i = find_outside_refs(text, std::string_view(&c, 1), i)) != std::string_view::npos) {
    found = i++;
  }
  return found;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace config_internal

}  // namespace quiver
