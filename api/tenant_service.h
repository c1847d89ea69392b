#ifndef GPUFED_API_TENANT_SERVICE_H_
#define GPUFED_API_TENANT_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.TenantService: tenants, projects and API tokens (only hashes are stored).
class TenantServiceImpl final : public v1::TenantService::CallbackService {
 public:
  explicit TenantServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerUnaryReactor* CreateTenant(grpc::CallbackServerContext* context,
                                         const v1::CreateTenantRequest* request,
                                         v1::Tenant* response) override;
  grpc::ServerUnaryReactor* ListTenants(grpc::CallbackServerContext* context,
                                        const v1::ListTenantsRequest* request,
                                        v1::ListTenantsResponse* response) override;
  grpc::ServerUnaryReactor* CreateProject(grpc::CallbackServerContext* context,
                                          const v1::CreateProjectRequest* request,
                                          v1::Project* response) override;
  grpc::ServerUnaryReactor* ListProjects(grpc::CallbackServerContext* context,
                                         const v1::ListProjectsRequest* request,
                                         v1::ListProjectsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteProject(grpc::CallbackServerContext* context,
                                          const v1::DeleteProjectRequest* request,
                                          v1::DeleteProjectResponse* response) override;
  grpc::ServerUnaryReactor* DeleteTenant(grpc::CallbackServerContext* context,
                                         const v1::DeleteTenantRequest* request,
                                         v1::DeleteTenantResponse* response) override;
  grpc::ServerUnaryReactor* RevokeToken(grpc::CallbackServerContext* context,
                                        const v1::RevokeTokenRequest* request,
                                        v1::RevokeTokenResponse* response) override;
  grpc::ServerUnaryReactor* CreateToken(grpc::CallbackServerContext* context,
                                        const v1::CreateTokenRequest* request,
                                        v1::CreateTokenResponse* response) override;
  grpc::ServerUnaryReactor* ListTokens(grpc::CallbackServerContext* context,
                                       const v1::ListTokensRequest* request,
                                       v1::ListTokensResponse* response) override;
  grpc::ServerUnaryReactor* SetRoleBinding(grpc::CallbackServerContext* context,
                                           const v1::SetRoleBindingRequest* request,
                                           v1::SetRoleBindingResponse* response) override;
  grpc::ServerUnaryReactor* DeleteRoleBinding(grpc::CallbackServerContext* context,
                                              const v1::DeleteRoleBindingRequest* request,
                                              v1::DeleteRoleBindingResponse* response) override;
  grpc::ServerUnaryReactor* ListRoleBindings(grpc::CallbackServerContext* context,
                                             const v1::ListRoleBindingsRequest* request,
                                             v1::ListRoleBindingsResponse* response) override;

 private:
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_TENANT_SERVICE_H_
