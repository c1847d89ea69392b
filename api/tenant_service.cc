#include "api/tenant_service.h"

#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "api/workload_service.h"
#include "auth/token.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed::api {

grpc::ServerUnaryReactor* TenantServiceImpl::CreateTenant(grpc::CallbackServerContext* context,
                                                          const v1::CreateTenantRequest* request,
                                                          v1::Tenant* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    if (!who.IsPlatformAdmin()) return absl::PermissionDeniedError("permission denied");
    RETURN_IF_ERROR(ValidateName("name", request->name()));
    RETURN_IF_ERROR(ValidateText("display_name", request->display_name(), kMaxDisplayNameBytes));
    Tenant t;
    t.name = request->name();
    t.display_name = request->display_name().empty() ? request->name() : request->display_name();
    ASSIGN_OR_RETURN(Tenant created, ctx_.tenants->CreateTenant(t));
    *response = TenantToProto(created);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TenantServiceImpl::ListTenants(grpc::CallbackServerContext* context,
                                                         const v1::ListTenantsRequest* request,
                                                         v1::ListTenantsResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(std::vector<Tenant> tenants, ctx_.tenants->ListTenants());
    for (const Tenant& t : tenants) {
      if (who.CanRead(t.name)) *response->add_tenants() = TenantToProto(t);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TenantServiceImpl::CreateProject(grpc::CallbackServerContext* context,
                                                           const v1::CreateProjectRequest* request,
                                                           v1::Project* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    RETURN_IF_ERROR(ValidateName("tenant", request->tenant()));
    if (!who.CanAdminTenant(request->tenant())) {
      return absl::PermissionDeniedError("permission denied");
    }
    RETURN_IF_ERROR(ValidateName("name", request->name()));
    ASSIGN_OR_RETURN(Project created,
                     ctx_.tenants->CreateProject(Project{request->tenant(), request->name(), {}}));
    *response = ProjectToProto(created);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TenantServiceImpl::ListProjects(grpc::CallbackServerContext* context,
                                                          const v1::ListProjectsRequest* request,
                                                          v1::ListProjectsResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    RETURN_IF_ERROR(ValidateName("tenant", request->tenant()));
    if (!who.CanRead(request->tenant())) {
      return absl::NotFoundError(absl::StrCat("tenant ", request->tenant(), " not found"));
    }
    ASSIGN_OR_RETURN(std::vector<Project> projects, ctx_.tenants->ListProjects(request->tenant()));
    for (const Project& p : projects) *response->add_projects() = ProjectToProto(p);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TenantServiceImpl::CreateToken(grpc::CallbackServerContext* context,
                                                         const v1::CreateTokenRequest* request,
                                                         v1::CreateTokenResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    RETURN_IF_ERROR(ValidateSubject(request->subject()));
    TokenRecord record;
    record.subject = request->subject();
    switch (request->role()) {
      case v1::ROLE_PLATFORM_ADMIN:
      case v1::ROLE_AGENT:
        if (!who.IsPlatformAdmin()) return absl::PermissionDeniedError("permission denied");
        break;
      case v1::ROLE_TENANT_ADMIN:
      case v1::ROLE_TENANT_USER:
      case v1::ROLE_VIEWER:
        if (request->role() != v1::ROLE_VIEWER || !request->tenant().empty()) {
          RETURN_IF_ERROR(ValidateName("tenant", request->tenant()));
          if (!who.CanAdminTenant(request->tenant())) {
            return absl::PermissionDeniedError("permission denied");
          }
        } else if (!who.IsPlatformAdmin()) {
          return absl::PermissionDeniedError("permission denied");  // platform-wide viewer
        }
        record.tenant = request->tenant();
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("role: must be set (got ", static_cast<int>(request->role()), ")"));
    }
    ASSIGN_OR_RETURN(auth::Role role, RoleFromProto(request->role(), "role"));
    record.role = std::string(auth::RoleName(role));
    if (request->role() == v1::ROLE_AGENT) {
      RETURN_IF_ERROR(ValidateName("cluster", request->cluster()));
      record.cluster = request->cluster();
    } else if (!request->cluster().empty()) {
      return absl::InvalidArgumentError("cluster: only for the agent role");
    }
    std::string token = auth::GenerateToken();
    RETURN_IF_ERROR(ctx_.tenants->CreateToken(auth::HashToken(token), record));
    response->set_token(token);
    return absl::OkStatus();
  });
}

}  // namespace gpufed::api
