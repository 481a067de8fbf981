// Secrets in the configuration: references (`{"env"}`, `{"file"}`, `${NAME}`), the agent's own
// keys (caller-token keys, webhook secrets), and redaction of every resolved value.
#include <ostream>
#include <utility>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"
#include "native-agent/base/redactor.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

std::ostream& operator<<(std::ostream& out, const Secret& secret) {
  return out << secret.describe();
}

std::string redact(std::string_view text, const std::vector<Secret>& secrets) {
  std::vector<std::string> values;
  values.reserve(secrets.size());
  for (const Secret& s : secrets) values.push_back(s.reveal());
  return Redactor(values).redact(text);
}

std::vector<Secret> ConnectionConfig::secrets() const {
  std::vector<Secret> out;
  for (const auto& [k, v] : endpoint.env) out.push_back(v);
  for (const auto& [k, v] : endpoint.headers) out.push_back(v);
  if (credential.has_value()) out.push_back(*credential);
  for (const auto& [k, v] : member_credentials) out.push_back(v);
  for (const Secret& v : url_substitutions) out.push_back(v);
  if (oauth.has_value()) {
    if (oauth->client_secret.has_value()) out.push_back(*oauth->client_secret);
    if (oauth->private_key.has_value()) out.push_back(*oauth->private_key);
  }
  return out;
}

std::vector<Secret> AgentConfig::secrets() const {
  std::vector<Secret> out;
  if (redis.has_value() && redis->password.has_value()) out.push_back(*redis->password);
  for (const auto& [k, v] : caller_token_keys) out.push_back(v);
  for (const auto& [k, v] : webhook_secrets) out.push_back(v);
  if (oauth.key.has_value()) out.push_back(*oauth.key);
  for (const ConnectionConfig& c : connections) {
    for (Secret& s : c.secrets()) out.push_back(std::move(s));
  }
  return out;
}

std::string AgentConfig::redact(std::string_view text) const {
  return redactor ? redactor->redact(text) : quiver::redact(text, secrets());
}

namespace config_internal {

std::optional<Secret> Parser::secret_ref(const Json& v, const std::string& path) {
  const char* kShape =
      "must be a secret reference: {\"env\": NAME}, {\"file\": PATH} or \"${NAME}\"";
  if (v.is_string()) {
    const std::string tmpl = v.get<std::string>();
    if (tmpl.find("${") == std::string::npos) {
      p_.error(path,
               "an inline secret is not allowed here; use {\"env\": NAME}, "
               "{\"file\": PATH} or \"${NAME}\"");
      return std::nullopt;
    }
    std::optional<Secret> s = expand_secret(tmpl, path);
    if (s.has_value() && s->empty()) {
      p_.error(path, "the secret is empty");
      return std::nullopt;
    }
    return s;
  }
  if (!v.is_object() || v.size() != 1) {
    p_.error(path, kShape);
    return std::nullopt;
  }
  if (const Json* env = json_field(v, "env")) {
    if (!env->is_string() || !is_var_name(env->get<std::string>())) {
      p_.error(path + ".env", "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
      return std::nullopt;
    }
    const std::string name = env->get<std::string>();
    std::optional<std::string> value = env_.get(name);
    if (!value.has_value()) {
      p_.error(path, "environment variable " + name + " is not set");
      return std::nullopt;
    }
    if (value->empty()) {
      p_.error(path, "environment variable " + name + " is empty");
      return std::nullopt;
    }
    Secret s(*value, "env:" + name);
    secrets_.push_back(s);
    return s;
  }
  if (const Json* file = json_field(v, "file")) {
    if (!file->is_string() || file->get<std::string>().empty()) {
      p_.error(path + ".file", "must be a file path");
      return std::nullopt;
    }
    std::optional<std::string> file_path = expand_plain(file->get<std::string>(), path + ".file");
    if (!file_path.has_value()) return std::nullopt;
    const std::string full = join_path(src_.working_dir, *file_path);
    if (!src_.read_file) {
      p_.error(path, "cannot read file `" + full + "`: no file reader");
      return std::nullopt;
    }
    Result<std::string> content = src_.read_file(full);
    if (!content.ok()) {
      p_.error(path, "cannot read file `" + full + "`: " + content.error().message);
      return std::nullopt;
    }
    std::string value = std::move(*content);
    if (value.size() > kMaxSecretFileBytes) {
      p_.error(path, "file `" + full + "` is larger than " + std::to_string(kMaxSecretFileBytes) +
                         " bytes");
      return std::nullopt;
    }
    while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
    if (value.empty()) {
      p_.error(path, "file `" + full + "` is empty");
      return std::nullopt;
    }
    Secret s(std::move(value), "file:" + full);
    secrets_.push_back(s);
    return s;
  }
  p_.error(path, kShape);
  return std::nullopt;
}

// ---- keys and secrets of the agent itself ------------------------------------------------------

void Parser::named_secrets(const Json& quiver, const char* field, const char* names,
                           const char* what, const NamedSecretUse& use) {
  const Json* object = json_field(quiver, field);
  if (object == nullptr) return;
  const std::string at = std::string("quiver.") + field;
  if (!object->is_object()) {
    p_.error(at, std::string("must be an object (") + names + " -> secret reference), not " +
                     json_type(*object));
    return;
  }
  for (const auto& [name, ref] : object->items()) {
    const std::string path = at + "." + name;
    Status s = check_key_name(what, name);
    if (!s.ok()) {
      p_.error(path, s.error().message);
      continue;
    }
    std::optional<Secret> secret = secret_ref(ref, path);
    if (secret.has_value()) use(path, name, *secret);
  }
}

void Parser::keys(const Json* quiver) {
  if (quiver == nullptr) return;
  named_secrets(*quiver, "caller_token_keys", "key id", "a key id",
                [&](const std::string& path, const std::string& kid, const Secret& secret) {
                  if (secret.reveal().size() < kMinCallerTokenKeyBytes) {
                    p_.error(path, "the key is " + std::to_string(secret.reveal().size()) +
                                       " bytes; HMAC-SHA256 token keys need at least " +
                                       std::to_string(kMinCallerTokenKeyBytes));
                    return;
                  }
                  cfg_.caller_token_keys[kid] = secret;
                });
  if (std::optional<std::string> kid =
          string_field(*quiver, "caller_token_signing_kid", "quiver")) {
    const Json* keys = json_field(*quiver, "caller_token_keys");
    if (keys == nullptr || !keys->is_object() || json_field(*keys, kid->c_str()) == nullptr) {
      p_.error("quiver.caller_token_signing_kid",
               "`" + shown(*kid) + "` is not a key id in caller_token_keys");
    } else {
      cfg_.caller_token_signing_kid = *kid;
    }
  } else if (cfg_.caller_token_keys.size() == 1) {
    cfg_.caller_token_signing_kid = cfg_.caller_token_keys.begin()->first;
  }
  named_secrets(*quiver, "webhook_secrets", "name", "a webhook secret name",
                [&](const std::string& path, const std::string& name, const Secret& secret) {
                  if (secret.reveal().size() < 16) {
                    p_.warn(path, "shorter than 16 bytes: easy to guess");
                  }
                  cfg_.webhook_secrets[name] = secret;
                });
}

Json secret_json(const Secret& s) { return Json{{"value", s.describe()}, {"from", s.source()}}; }

}  // namespace config_internal

}  // namespace quiver
