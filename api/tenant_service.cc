#include "api/tenant_service.h"

#include "api/convert.h"
#include "api/workload_service.h"
#include "federation/status_macros.h"

namespace gpufed::api {

grpc::ServerUnaryReactor* TenantServiceImpl::CreateTenant(grpc::CallbackServerContext* context,
                                                          const v1::CreateTenantRequest* request,
                                                          v1::Tenant* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 Tenant t;
                 t.name = request->name();
                 t.display_name = request->display_name();
                 ASSIGN_OR_RETURN(Tenant created, ctx_.plane->CreateTenant(who, std::move(t)));
                 *response = TenantToProto(created);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::ListTenants(grpc::CallbackServerContext* context,
                                                         const v1::ListTenantsRequest* request,
                                                         v1::ListTenantsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(std::vector<Tenant> tenants, ctx_.plane->ListTenants(who));
                 for (const Tenant& t : tenants) *response->add_tenants() = TenantToProto(t);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::CreateProject(grpc::CallbackServerContext* context,
                                                           const v1::CreateProjectRequest* request,
                                                           v1::Project* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(Project created,
                                  ctx_.plane->CreateProject(
                                      who, Project{request->tenant(), request->name(), {}}));
                 *response = ProjectToProto(created);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::ListProjects(grpc::CallbackServerContext* context,
                                                          const v1::ListProjectsRequest* request,
                                                          v1::ListProjectsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(std::vector<Project> projects,
                                  ctx_.plane->ListProjects(who, request->tenant()));
                 for (const Project& p : projects) *response->add_projects() = ProjectToProto(p);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::CreateToken(grpc::CallbackServerContext* context,
                                                         const v1::CreateTokenRequest* request,
                                                         v1::CreateTokenResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 TokenRequest token;
                 token.subject = request->subject();
                 ASSIGN_OR_RETURN(token.role, RoleFromProto(request->role(), "role"));
                 token.tenant = request->tenant();
                 token.project = request->project();
                 token.cluster = request->cluster();
                 if (request->has_ttl()) {
                   ASSIGN_OR_RETURN(token.ttl, SecondsFromProto("ttl", request->ttl()));
                 }
                 ASSIGN_OR_RETURN(CreatedToken created, ctx_.plane->CreateToken(who, token));
                 response->set_token(created.secret);
                 response->set_token_id(created.id);
                 if (created.expire_time) {
                   *response->mutable_expire_time() = ToProto(*created.expire_time);
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::DeleteProject(
    grpc::CallbackServerContext* context, const v1::DeleteProjectRequest* request,
    v1::DeleteProjectResponse* /*response*/) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request](const auth::Principal& who) -> absl::Status {
                 return ctx_.plane->DeleteProject(who, request->tenant(), request->name());
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::DeleteTenant(grpc::CallbackServerContext* context,
                                                          const v1::DeleteTenantRequest* request,
                                                          v1::DeleteTenantResponse* /*response*/) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request](const auth::Principal& who) -> absl::Status {
                 return ctx_.plane->DeleteTenant(who, request->name());
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::RevokeToken(grpc::CallbackServerContext* context,
                                                         const v1::RevokeTokenRequest* request,
                                                         v1::RevokeTokenResponse* /*response*/) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request](const auth::Principal& who) -> absl::Status {
                 return ctx_.plane->RevokeToken(who, request->token_id());
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::ListTokens(grpc::CallbackServerContext* context,
                                                        const v1::ListTokensRequest* request,
                                                        v1::ListTokensResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(
                     std::vector<TokenRecord> tokens,
                     ctx_.plane->ListTokens(who, request->tenant(), request->project()));
                 for (const TokenRecord& t : tokens) *response->add_tokens() = TokenToProto(t);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::SetRoleBinding(
    grpc::CallbackServerContext* context, const v1::SetRoleBindingRequest* request,
    v1::SetRoleBindingResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(RoleBinding binding, RoleBindingFromProto(request->binding()));
                 ASSIGN_OR_RETURN(BindingChange change, ctx_.plane->SetRoleBinding(who, binding));
                 *response->mutable_binding() = RoleBindingToProto(change.binding);
                 response->mutable_lowered_token_ids()->Add(change.tokens.begin(),
                                                            change.tokens.end());
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TenantServiceImpl::DeleteRoleBinding(
    grpc::CallbackServerContext* context, const v1::DeleteRoleBindingRequest* request,
    v1::DeleteRoleBindingResponse* response) {
  return Serve(
      ctx_, context, *request, CallKind::kWrite,
      [this, request, response](const auth::Principal& who) -> absl::Status {
        ASSIGN_OR_RETURN(BindingChange change,
                         ctx_.plane->DeleteRoleBinding(who, request->subject(), request->tenant(),
                                                       request->project()));
        response->mutable_revoked_token_ids()->Add(change.tokens.begin(), change.tokens.end());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TenantServiceImpl::ListRoleBindings(
    grpc::CallbackServerContext* context, const v1::ListRoleBindingsRequest* request,
    v1::ListRoleBindingsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(
                     std::vector<RoleBinding> bindings,
                     ctx_.plane->ListRoleBindings(who, request->tenant(), request->project()));
                 for (const RoleBinding& b : bindings) {
                   *response->add_bindings() = RoleBindingToProto(b);
                 }
                 return absl::OkStatus();
               });
}

}  // namespace gpufed::api
