// Who may use what: `quiver.members`, `quiver.grants` and `quiver.operators`, and the principal
// (`shared` or `member/<id>`) and credential a member's request to a connection runs with.
#include <optional>
#include <set>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

std::vector<Principal> ConnectionConfig::principals() const {
  if (credential_mode == CredentialMode::kShared) return {Principal::shared()};
  std::vector<Principal> out;
  for (const std::string& member : granted_members) {
    Result<Principal> p = Principal::member(member);
    if (p.ok()) out.push_back(*p);
  }
  return out;
}

Result<Principal> ConnectionConfig::principal_for_member(std::string_view member_id) const {
  if (granted_members.count(std::string(member_id)) == 0) {
    return Error(ErrorCode::kNotFound,
                 "member `" + shown(member_id) + "` is not granted connection `" + id + "`");
  }
  return principal_for(credential_mode, member_id);
}

Result<UpstreamEndpoint> ConnectionConfig::upstream_for(const Principal& principal) const {
  UpstreamEndpoint u = endpoint;
  std::optional<Secret> secret;
  if (credential_mode == CredentialMode::kShared) {
    if (!principal.is_shared()) {
      return invalid("connection `" + id + "` uses shared credentials: its principal is `shared`");
    }
    secret = credential;
  } else {
    if (principal.is_shared()) {
      return invalid("connection `" + id +
                     "` uses per-member credentials: a member principal "
                     "is required");
    }
    auto it = member_credentials.find(std::string(principal.member_id()));
    // OAuth: the member's token comes from the token store (OAuthManager), not the config.
    if (it == member_credentials.end() && auth != AuthType::kOAuth) {
      return Error(ErrorCode::kNotFound, "connection `" + id + "` has no credential for member `" +
                                             std::string(principal.member_id()) + "`");
    }
    if (it != member_credentials.end()) secret = it->second;
  }
  if (auth == AuthType::kBearer || auth == AuthType::kApiKey) {
    if (!secret.has_value()) {
      return Error(ErrorCode::kNotFound, "connection `" + id + "` has no credential");
    }
    if (auth == AuthType::kBearer) {
      u.headers["Authorization"] = Secret("Bearer " + secret->reveal(), secret->source());
    } else if (endpoint.transport == TransportKind::kHttp) {
      u.headers[api_key_header] = *secret;
    } else {
      u.env[credential_env] = *secret;
    }
  }
  return u;
}

ConnectionIdentity ConnectionConfig::identity() const {
  ConnectionIdentity id;
  id.transport = endpoint.transport;
  id.auth_type = auth;
  id.credential_mode = credential_mode;
  id.credential_version = credential_version;
  if (endpoint.transport == TransportKind::kStdio) {
    id.command = endpoint.command;
    id.args = endpoint.args;
    for (const auto& [name, value] : endpoint.env) id.env[name] = "";
    if (!credential_env.empty()) id.env[credential_env] = "";
  } else {
    id.url = endpoint.url;
    for (const auto& [name, value] : endpoint.headers) id.headers[name] = "";
    if (auth == AuthType::kBearer || auth == AuthType::kOAuth) id.headers["Authorization"] = "";
    if (auth == AuthType::kApiKey) id.headers[api_key_header] = "";
    if (auth == AuthType::kOAuth && oauth.has_value()) id.oauth = oauth->identity_json().dump();
  }
  return id;
}

const ConnectionConfig* AgentConfig::find_connection(std::string_view id) const {
  for (const ConnectionConfig& c : connections) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

const ConnectionConfig* AgentConfig::find_connection_by_name(std::string_view name) const {
  for (const ConnectionConfig& c : connections) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Result<Principal> AgentConfig::principal_for(std::string_view member_id,
                                             std::string_view connection_id) const {
  const ConnectionConfig* c = find_connection(connection_id);
  if (c == nullptr) {
    return Error(ErrorCode::kNotFound, "no connection `" + shown(connection_id) + "`");
  }
  return c->principal_for_member(member_id);
}

namespace config_internal {

void Parser::members_and_grants(const Json* quiver) {
  const Json* members = quiver != nullptr ? json_field(*quiver, "members") : nullptr;
  const Json* grants = quiver != nullptr ? json_field(*quiver, "grants") : nullptr;
  // Each valid member id of the array `quiver.<field>`, handed to `use` with its path; a wrong
  // shape or id is reported and skipped.
  auto member_ids = [&](const Json& list, const std::string& field, const auto& use) {
    if (!list.is_array()) {
      p_.error("quiver." + field,
               std::string("must be an array of member ids, not ") + json_type(list));
      return;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = "quiver." + field + "[" + std::to_string(i) + "]";
      const Json& m = list[i];
      if (!m.is_string()) {
        p_.error(path, std::string("must be a string, not ") + json_type(m));
        continue;
      }
      if (Status st = validate_member_id(m.get<std::string>()); !st.ok()) {
        p_.error(path, st.error().message);
        continue;
      }
      use(path, m.get<std::string>());
    }
  };
  std::optional<std::set<std::string>> listed;
  if (members != nullptr) {
    listed.emplace();
    member_ids(*members, "members", [&](const std::string& path, const std::string& id) {
      if (!listed->insert(id).second) p_.error(path, "`" + id + "` is listed twice");
    });
  }

  auto id_of = [&](const std::string& ref) -> std::optional<std::string> {
    for (const Server& s : servers_) {
      if (s.conn.name == ref) return s.conn.id;
    }
    for (const Server& s : servers_) {
      if (s.conn.id == ref) return s.conn.id;
    }
    return std::nullopt;
  };
  std::set<std::string> all_ids;
  for (const Server& s : servers_) all_ids.insert(s.conn.id);

  std::map<std::string, std::set<std::string>> direct;  // member or "*" -> ids
  if (grants != nullptr && !grants->is_object()) {
    p_.error("quiver.grants",
             std::string("must be an object (member id or * -> server names), not ") +
                 json_type(*grants));
    grants = nullptr;
  }
  if (grants != nullptr) {
    for (const auto& [member, list] : grants->items()) {
      const std::string path = "quiver.grants." + member;
      if (member != "*") {
        Status s = validate_member_id(member);
        if (!s.ok()) {
          p_.error(path, s.error().message + " (use `*` for every member)");
          continue;
        }
        if (listed.has_value() && listed->count(member) == 0) {
          p_.error(path, "`" + member + "` is not in quiver.members");
          continue;
        }
      }
      std::set<std::string>& ids = direct[member];
      if (!list.is_array()) {
        p_.error(path, std::string("must be an array of server names, not ") + json_type(list));
        continue;
      }
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string ip = path + "[" + std::to_string(i) + "]";
        if (!list[i].is_string()) {
          p_.error(ip, std::string("must be a server name, not ") + json_type(list[i]));
          continue;
        }
        const std::string ref = list[i].get<std::string>();
        if (ref == "*") {
          ids.insert(all_ids.begin(), all_ids.end());
        } else if (std::optional<std::string> id = id_of(ref)) {
          ids.insert(*id);
        } else if (disabled_names_.count(ref) > 0) {
          p_.warn(ip, "server `" + ref + "` is disabled (grant ignored)");
        } else if (broken_names_.count(ref) > 0) {
          continue;  // its entry's error is reported
        } else {
          p_.error(ip, "no server named `" + shown(ref) + "` in mcpServers");
        }
      }
    }
  }

  // Members: listed, or everyone named in grants and credentials.
  std::set<std::string> all_members;
  if (listed.has_value()) {
    all_members = *listed;
  } else {
    for (const auto& [member, ids] : direct) {
      if (member != "*") all_members.insert(member);
    }
  }
  for (const Server& s : servers_) {
    for (const auto& [member, secret] : s.conn.member_credentials) {
      if (listed.has_value() && listed->count(member) == 0) {
        p_.error("quiver.connections." + s.conn.name + ".credentials." + member,
                 "`" + member + "` is not in quiver.members");
      } else {
        all_members.insert(member);
      }
    }
  }
  cfg_.members = all_members;

  // Operators: members who may toggle a shared connection's capabilities (for everyone).
  if (const Json* ops = quiver != nullptr ? json_field(*quiver, "operators") : nullptr) {
    member_ids(*ops, "operators", [&](const std::string& path, const std::string& id) {
      if (listed.has_value() && listed->count(id) == 0) {
        p_.error(path, "`" + id + "` is not in quiver.members");
        return;
      }
      cfg_.operators.insert(id);
    });
  }

  const std::set<std::string> everyone =
      direct.count("*") > 0 ? direct["*"] : std::set<std::string>{};
  if (direct.count("*") > 0 && all_members.empty()) {
    p_.warn("quiver.grants.*", "there are no members to grant to");
  }
  for (const std::string& member : all_members) {
    std::set<std::string> ids = everyone;
    auto it = direct.find(member);
    if (it != direct.end()) ids.insert(it->second.begin(), it->second.end());
    cfg_.grants[member] = ids;
  }
  for (Server& s : servers_) {
    for (const auto& [member, ids] : cfg_.grants) {
      if (ids.count(s.conn.id) > 0) s.conn.granted_members.insert(member);
    }
    const std::string path = "quiver.connections." + s.conn.name + ".credentials";
    if (s.conn.credential_mode == CredentialMode::kPerMember &&
        (s.conn.auth == AuthType::kBearer || s.conn.auth == AuthType::kApiKey)) {
      for (const std::string& member : s.conn.granted_members) {
        if (s.conn.member_credentials.count(member) == 0) {
          p_.error(path,
                   "no credential for member `" + member + "`, who is granted this connection");
        }
      }
      for (const auto& [member, secret] : s.conn.member_credentials) {
        if (s.conn.granted_members.count(member) == 0) {
          p_.warn(path + "." + member, "`" + member + "` is not granted this connection");
        }
      }
    }
    if (grants != nullptr && !grants->empty() && s.conn.granted_members.empty()) {
      p_.warn("quiver.grants", "server `" + s.conn.name + "` is granted to no member");
    }
  }
}

}  // namespace config_internal

}  // namespace quiver
