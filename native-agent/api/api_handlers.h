// The agent API's route handlers, by concern: each file answers one group of endpoints through
// the shared ApiContext (native-agent/api/api_context.h); ApiServer routes to them
// (native-agent/api/api_server.cpp). schema/openapi.yaml describes every endpoint.
//   api_discovery.cpp    the shared discovery endpoints, driven through the core's exchange
//   api_mcp.cpp          POST /mcp, the MCP endpoint (lists from the cache, calls to the relay)
//   api_health.cpp       GET /healthz, GET /metrics
//   api_connections.cpp  GET /v1/mcp-connections, POST .../{id}/test, POST .../{id}/evidence
//   api_preferences.cpp  GET / PUT / PATCH .../{id}/preferences
//   api_oauth.cpp        POST .../{id}/authorize, DELETE .../{id}/authorization,
//                        GET /v1/oauth/callback (no caller token: the state authenticates it)
//   api_webhook.cpp      POST /v1/webhooks/refresh
//   api_status.cpp       GET /status (+ .js, .css), GET /v1/admin/status,
//                        POST /v1/admin/connections/{id}/refresh (operators)
//   api_admin.cpp        /v1/admin/members, .../grants, /v1/admin/grants, /v1/admin/audit
//   api_admin_connections.cpp  /v1/admin/connections (operators only, as every /v1/admin route)
#pragma once

#include <httplib.h>

#include "native-agent/api/api_context.h"
#include "shared/identity.h"

namespace quiver::api {

// Takes the request as the front parsed it and answers in the core's shape: no cpp-httplib
// request or response in between (their header maps cost more than an answer from the render
// cache).
HttpResponse discovery_exchange(ApiContext& api, const HttpRequest& request);
// The same exchange, when it can finish without waiting (ApiContext::snapshot_now answers and no
// revalidation must be queued before the answer); nullopt otherwise, with nothing counted or
// queued, so that discovery_exchange can run it again from the start on a worker.
std::optional<HttpResponse> discovery_exchange_now(ApiContext& api, const HttpRequest& request);
// POST /mcp (api_mcp.cpp): the MCP endpoint of shared/mcp_endpoint.h; calls go to api.mcp_relay.
HttpResponse mcp_endpoint(ApiContext& api, const HttpRequest& request);

void healthz(ApiContext& api, const httplib::Request& req, httplib::Response& res);
void metrics(ApiContext& api, const httplib::Request& req, httplib::Response& res);

void list_connections(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Principal& member);
void test_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Principal& member);
void evidence(ApiContext& api, const httplib::Request& req, httplib::Response& res,
              const Principal& member);

void get_preferences(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Principal& member);
void set_preferences(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Caller& caller);

void webhook(ApiContext& api, const httplib::Request& req, httplib::Response& res);

// OAuth connections (api_oauth.cpp): the caller's token, the principal chosen as discovery does.
void oauth_authorize(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                     const Caller& caller);
void oauth_disconnect(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller);
// The redirect back from the authorization server: no caller token (the state authenticates it).
void oauth_callback(ApiContext& api, const httplib::Request& req, httplib::Response& res);

// The status page's static files (/status, /status.js, /status.css): no data, no token.
void status_page(ApiContext& api, const httplib::Request& req, httplib::Response& res);
// Operators only (ApiServer's operator_only has checked the caller).
void admin_status(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                  const Caller& caller);
void admin_refresh(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                   const Caller& caller);
// The admin API (api_admin.h): routed through operator_only.
using AdminHandler = void (*)(ApiContext&, const httplib::Request&, httplib::Response&,
                              const Caller&);
void admin_list_members(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                        const Caller& caller);
void admin_get_member(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller);
void admin_put_member(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller);
void admin_delete_member(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                         const Caller& caller);
void admin_get_grants(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller);
// PUT and PATCH .../members/{id}/grants.
void admin_set_grants(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                      const Caller& caller);
void admin_get_everyone(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                        const Caller& caller);
void admin_put_everyone(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                        const Caller& caller);
void admin_put_bulk_grants(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                           const Caller& caller);
void admin_audit(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                 const Caller& caller);
void admin_list_connections(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                            const Caller& caller);
void admin_get_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                          const Caller& caller);
void admin_put_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                          const Caller& caller);
void admin_patch_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                            const Caller& caller);
void admin_delete_connection(ApiContext& api, const httplib::Request& req, httplib::Response& res,
                             const Caller& caller);

}  // namespace quiver::api
