// gpufed.v1.TenantService: every RPC's request as the handler (api/tenant_service.cc) and the
// use case before its store call (federation/tenancy_use_cases.cc) convert and check it.

#include <cstddef>
#include <cstdint>

#include "api/convert.h"
#include "federation/validation.h"
#include "gpufed/v1/tenant_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

void CheckNames(std::initializer_list<std::pair<const char*, const std::string*>> names) {
  for (const auto& [field, value] : names) {
    if (!OkOrInvalid(ValidateName(field, *value), field)) return;
  }
}

const RpcTable& Table() {
  static const RpcTable* table = [] {
    std::vector<Rpc> rpcs;
    rpcs.push_back(Unary<v1::ListTenantsRequest>("ListTenants", [](const auto&) {}));
    rpcs.push_back(
        Unary<v1::CreateTenantRequest>("CreateTenant", [](const v1::CreateTenantRequest& r) {
          if (!OkOrInvalid(ValidateName("name", r.name()), "name")) return;
          OkOrInvalid(ValidateText("display_name", r.display_name(), kMaxDisplayNameBytes),
                      "display_name");
        }));
    rpcs.push_back(
        Unary<v1::CreateProjectRequest>("CreateProject", [](const v1::CreateProjectRequest& r) {
          CheckNames({{"tenant", &r.tenant()}, {"name", &r.name()}});
        }));
    rpcs.push_back(
        Unary<v1::ListProjectsRequest>("ListProjects", [](const v1::ListProjectsRequest& r) {
          CheckNames({{"tenant", &r.tenant()}});
        }));
    rpcs.push_back(
        Unary<v1::DeleteProjectRequest>("DeleteProject", [](const v1::DeleteProjectRequest& r) {
          CheckNames({{"tenant", &r.tenant()}, {"name", &r.name()}});
        }));
    rpcs.push_back(
        Unary<v1::DeleteTenantRequest>("DeleteTenant", [](const v1::DeleteTenantRequest& r) {
          CheckNames({{"name", &r.name()}});
        }));
    rpcs.push_back(
        Unary<v1::CreateTokenRequest>("CreateToken", [](const v1::CreateTokenRequest& r) {
          absl::StatusOr<auth::Role> role = api::RoleFromProto(r.role(), "role");
          if (!OkOrInvalid(role.status(), "RoleFromProto")) return;
          if (!OkOrInvalid(ValidateSubject(r.subject()), "subject")) return;
          // ControlPlane::CreateToken: a tenant for the tenant roles (optional for a viewer),
          // a cluster for agents only.
          if (*role == auth::Role::kTenantAdmin || *role == auth::Role::kTenantUser ||
              (*role == auth::Role::kViewer && !r.tenant().empty())) {
            if (!OkOrInvalid(ValidateName("tenant", r.tenant()), "tenant")) return;
          }
          if (*role == auth::Role::kAgent) {
            OkOrInvalid(ValidateName("cluster", r.cluster()), "cluster");
          }
        }));
    // A token id is an int64; the use case refuses ids below 1 before its store call.
    rpcs.push_back(Unary<v1::RevokeTokenRequest>("RevokeToken", [](const auto&) {}));
    // ControlPlane::ListTokens: the names, when given, before its store call.
    rpcs.push_back(Unary<v1::ListTokensRequest>("ListTokens", [](const v1::ListTokensRequest& r) {
      if (!r.tenant().empty()) OkOrInvalid(ValidateName("tenant", r.tenant()), "tenant");
      if (!r.project().empty()) OkOrInvalid(ValidateName("project", r.project()), "project");
    }));
    // ControlPlane::SetRoleBinding: RoleBindingFromProto, then ValidateRoleBinding before the
    // store call; a binding it passes has a role other than agent and a scope its role fits.
    rpcs.push_back(
        Unary<v1::SetRoleBindingRequest>("SetRoleBinding", [](const v1::SetRoleBindingRequest& r) {
          absl::StatusOr<RoleBinding> binding = api::RoleBindingFromProto(r.binding());
          if (!OkOrInvalid(binding.status(), "RoleBindingFromProto")) return;
          if (!OkOrInvalid(ValidateRoleBinding(*binding), "binding")) return;
          Check(binding->role != auth::Role::kAgent, "SetRoleBinding: an agent binding passed");
          Check(binding->project.empty() || !binding->tenant.empty(),
                "SetRoleBinding: a project without its tenant passed");
        }));
    // ControlPlane::DeleteRoleBinding and ListRoleBindings: the names, when given, before their
    // store calls.
    rpcs.push_back(Unary<v1::DeleteRoleBindingRequest>(
        "DeleteRoleBinding", [](const v1::DeleteRoleBindingRequest& r) {
          if (!OkOrInvalid(ValidateSubject(r.subject()), "subject")) return;
          if (!r.tenant().empty()) OkOrInvalid(ValidateName("tenant", r.tenant()), "tenant");
          if (!r.project().empty()) OkOrInvalid(ValidateName("project", r.project()), "project");
        }));
    rpcs.push_back(Unary<v1::ListRoleBindingsRequest>(
        "ListRoleBindings", [](const v1::ListRoleBindingsRequest& r) {
          if (!r.tenant().empty()) OkOrInvalid(ValidateName("tenant", r.tenant()), "tenant");
          if (!r.project().empty()) OkOrInvalid(ValidateName("project", r.project()), "project");
        }));
    return new RpcTable("gpufed.v1.TenantService", std::move(rpcs));
  }();
  return *table;
}

}  // namespace
}  // namespace gpufed::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  gpufed::fuzz::Table();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpufed::fuzz::Table().Run(data, size);
  return 0;
}
