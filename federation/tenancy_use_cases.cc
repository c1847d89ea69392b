// The tenancy use cases of ControlPlane (control_plane.h): tenants, projects, tokens.

#include "absl/strings/str_cat.h"
#include "auth/token.h"
#include "federation/authorization.h"
#include "federation/control_plane.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {

using auth::Permission;

absl::StatusOr<Tenant> ControlPlane::CreateTenantUnaudited(const auth::Principal& who,
                                                           Tenant tenant,
                                                           const AuditEvent& record) {
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin, {}));
  RETURN_IF_ERROR(ValidateName("name", tenant.name));
  RETURN_IF_ERROR(ValidateText("display_name", tenant.display_name, kMaxDisplayNameBytes));
  if (tenant.display_name.empty()) tenant.display_name = tenant.name;
  return ports_.tenants->CreateTenant(tenant, record);
}

absl::StatusOr<std::vector<Tenant>> ControlPlane::ListTenants(const auth::Principal& who) {
  RETURN_IF_ERROR(Require(who, Permission::kTenancyRead));
  ASSIGN_OR_RETURN(std::vector<Tenant> tenants, ports_.tenants->ListTenants());
  std::vector<Tenant> visible;
  for (Tenant& t : tenants) {
    if (auth::AllowsSomeOf(who, Permission::kTenancyRead, {t.name, ""})) {
      visible.push_back(std::move(t));
    }
  }
  return visible;
}

absl::StatusOr<Project> ControlPlane::CreateProjectUnaudited(const auth::Principal& who,
                                                             const Project& project,
                                                             const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateName("tenant", project.tenant));
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin, {project.tenant, ""}));
  RETURN_IF_ERROR(ValidateName("name", project.name));
  return ports_.tenants->CreateProject(project, record);
}

absl::StatusOr<std::vector<Project>> ControlPlane::ListProjects(const auth::Principal& who,
                                                                const std::string& tenant) {
  RETURN_IF_ERROR(ValidateName("tenant", tenant));
  if (!auth::AllowsSomeOf(who, Permission::kTenancyRead, {tenant, ""})) {
    return absl::NotFoundError(absl::StrCat("tenant ", tenant, " not found"));
  }
  ASSIGN_OR_RETURN(std::vector<Project> projects, ports_.tenants->ListProjects(tenant));
  std::erase_if(projects, [&](const Project& p) {
    return !auth::Allows(who, Permission::kTenancyRead, {p.tenant, p.name});
  });
  return projects;
}

absl::Status ControlPlane::DeleteProjectUnaudited(const auth::Principal& who,
                                                  const std::string& tenant,
                                                  const std::string& name,
                                                  const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateName("tenant", tenant));
  RETURN_IF_ERROR(ValidateName("name", name));
  if (!auth::Allows(who, Permission::kTenancyAdmin, {tenant, ""})) {
    if (!auth::AllowsSomeOf(who, Permission::kTenancyRead, {tenant, ""})) {
      return absl::NotFoundError(absl::StrCat("project ", tenant, "/", name, " does not exist"));
    }
    return absl::PermissionDeniedError("permission denied");
  }
  RETURN_IF_ERROR(ports_.tenants->DeleteProject(tenant, name, record));
  // Its quotas and weight went with it.
  if (ports_.scheduler != nullptr) ports_.scheduler->NotifyQuotasChanged();
  return absl::OkStatus();
}

absl::Status ControlPlane::DeleteTenantUnaudited(const auth::Principal& who,
                                                 const std::string& name,
                                                 const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateName("name", name));
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin, {}));
  RETURN_IF_ERROR(ports_.tenants->DeleteTenant(name, record));
  if (ports_.scheduler != nullptr) ports_.scheduler->NotifyQuotasChanged();
  return absl::OkStatus();
}

absl::StatusOr<CreatedToken> ControlPlane::CreateTokenUnaudited(const auth::Principal& who,
                                                                const TokenRequest& request,
                                                                const AuditEvent& audit) {
  RETURN_IF_ERROR(ValidateSubject(request.subject));
  TokenRecord record;
  record.subject = request.subject;
  record.role = request.role;
  record.tenant = request.tenant;
  record.project = request.project;
  record.cluster = request.cluster;
  RETURN_IF_ERROR(ValidateTokenBinding(record));
  if (request.ttl &&
      (*request.ttl <= std::chrono::seconds(0) || *request.ttl > options_.max_token_ttl)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl: must be positive and at most ",
        std::chrono::duration_cast<std::chrono::hours>(options_.max_token_ttl).count() / 24,
        " days"));
  }
  const std::optional<std::chrono::seconds> ttl =
      request.ttl ? request.ttl
      : request.role == auth::Role::kAgent
          ? std::nullopt
          : std::optional<std::chrono::seconds>(options_.default_token_ttl);
  if (ttl) record.expire_time = ports_.clock->Now() + *ttl;
  // The scope the new token is bound at; agents and platform roles belong to the platform.
  const bool platform = request.role == auth::Role::kAgent || request.tenant.empty();
  if (!auth::MayGrant(who, request.role,
                      platform ? auth::Scope{} : auth::Scope{record.tenant, record.project})) {
    return absl::PermissionDeniedError("permission denied: may not grant this role at this scope");
  }
  CreatedToken created{auth::GenerateToken(), 0};
  const std::string hash = auth::HashToken(created.secret);
  ASSIGN_OR_RETURN(TokenRecord stored, ports_.tenants->CreateToken(hash, record, audit));
  created.id = stored.id;
  created.expire_time = stored.expire_time;
  return created;
}

absl::StatusOr<std::pair<std::string, std::string>> ControlPlane::AdministeredScope(
    const auth::Principal& who, const std::string& tenant, const std::string& project) {
  if (tenant.empty()) {
    if (!project.empty()) {
      return absl::InvalidArgumentError("project: needs the tenant it belongs to");
    }
    return std::make_pair(who.tenant, who.project);
  }
  RETURN_IF_ERROR(ValidateName("tenant", tenant));
  if (!project.empty()) RETURN_IF_ERROR(ValidateName("project", project));
  if (!auth::AllowsSomeOf(who, Permission::kTenancyAdmin, {tenant, project})) {
    return absl::NotFoundError(
        absl::StrCat("tenant ", tenant, project.empty() ? "" : "/", project, " not found"));
  }
  return std::make_pair(tenant, project);
}

void ControlPlane::CredentialsChanged(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) {
    ports_.agents->CloseCredential(id);
    if (ports_.credentials != nullptr) ports_.credentials->Revoked(id);
  }
}

absl::StatusOr<std::vector<TokenRecord>> ControlPlane::ListTokens(const auth::Principal& who,
                                                                  const std::string& tenant,
                                                                  const std::string& project) {
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin));
  ASSIGN_OR_RETURN(const auto scope, AdministeredScope(who, tenant, project));
  ASSIGN_OR_RETURN(std::vector<TokenRecord> tokens,
                   ports_.tenants->ListTokens(scope.first, scope.second));
  std::erase_if(tokens, [&](const TokenRecord& r) {
    return !auth::Allows(who, Permission::kTenancyAdmin,
                         r.tenant.empty() ? auth::Scope{} : auth::Scope{r.tenant, r.project});
  });
  return tokens;
}

absl::Status ControlPlane::RevokeTokenUnaudited(const auth::Principal& who, int64_t id,
                                                const AuditEvent& record) {
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin));
  if (id <= 0) return absl::InvalidArgumentError("token_id: must be a positive token id");
  // The store revokes only a token inside the caller's binding (NOT_FOUND for any other).
  RETURN_IF_ERROR(ports_.tenants->RevokeToken(id, who.tenant, who.project, record).status());
  // Committed: what the token still has open ends now, not when it next asks.
  CredentialsChanged({id});
  return absl::OkStatus();
}

namespace {

// The scope a binding is checked at: a platform role's is the platform.
auth::Scope BindingScope(const RoleBinding& binding) {
  return binding.tenant.empty() ? auth::Scope{} : auth::Scope{binding.tenant, binding.project};
}

}  // namespace

absl::StatusOr<BindingChange> ControlPlane::SetRoleBindingUnaudited(const auth::Principal& who,
                                                                    const RoleBinding& binding,
                                                                    const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateRoleBinding(binding));
  if (!auth::MayGrant(who, binding.role, BindingScope(binding))) {
    return absl::PermissionDeniedError("permission denied: may not grant this role at this scope");
  }
  ASSIGN_OR_RETURN(BindingChange change, ports_.tenants->SetRoleBinding(binding, record));
  CredentialsChanged(change.tokens);
  return change;
}

absl::StatusOr<BindingChange> ControlPlane::DeleteRoleBindingUnaudited(const auth::Principal& who,
                                                                       const std::string& subject,
                                                                       const std::string& tenant,
                                                                       const std::string& project,
                                                                       const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateSubject(subject));
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin));
  if (!tenant.empty()) RETURN_IF_ERROR(ValidateName("tenant", tenant));
  if (!project.empty()) {
    if (tenant.empty())
      return absl::InvalidArgumentError("project: needs the tenant it belongs to");
    RETURN_IF_ERROR(ValidateName("project", project));
  }
  // Another scope's binding is NOT_FOUND, as one that does not exist.
  if (!auth::Allows(who, Permission::kTenancyAdmin,
                    tenant.empty() ? auth::Scope{} : auth::Scope{tenant, project})) {
    return absl::NotFoundError("subject: no role binding for it at this scope");
  }
  ASSIGN_OR_RETURN(BindingChange change,
                   ports_.tenants->DeleteRoleBinding(subject, tenant, project, record));
  CredentialsChanged(change.tokens);
  return change;
}

absl::StatusOr<std::vector<RoleBinding>> ControlPlane::ListRoleBindings(
    const auth::Principal& who, const std::string& tenant, const std::string& project) {
  RETURN_IF_ERROR(Require(who, Permission::kTenancyAdmin));
  ASSIGN_OR_RETURN(const auto scope, AdministeredScope(who, tenant, project));
  ASSIGN_OR_RETURN(std::vector<RoleBinding> bindings,
                   ports_.tenants->ListRoleBindings(scope.first, scope.second));
  std::erase_if(bindings, [&](const RoleBinding& b) {
    return !auth::Allows(who, Permission::kTenancyAdmin, BindingScope(b));
  });
  return bindings;
}

absl::StatusOr<bool> ControlPlane::BootstrapAdminToken(
    const std::function<absl::Status(const std::string& secret)>& keep) {
  ASSIGN_OR_RETURN(int64_t tokens, ports_.tenants->CountTokens());
  if (tokens > 0) return false;
  std::string token = auth::GenerateToken();
  TokenRecord record;
  record.subject = "bootstrap-admin";
  record.role = auth::Role::kPlatformAdmin;
  RETURN_IF_ERROR(keep(token));
  // Recorded as the server's own act: no caller made it.
  AuditEvent row;
  if (ports_.audit != nullptr) {
    row.actor = "server";
    row.action = "tokens.create";
    row.object = "token/";
    row.outcome = std::string(kAuditOk);
    row.detail = "subject: bootstrap-admin; role: platform-admin; no token existed";
  }
  RETURN_IF_ERROR(ports_.tenants->CreateToken(auth::HashToken(token), record, row).status());
  return true;
}

}  // namespace gpufed
