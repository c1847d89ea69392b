#include "federation/authorization.h"

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {

absl::Status Require(const auth::Principal& who, auth::Permission permission) {
  if (auth::Grants(who.role, permission)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("permission denied: needs ", auth::PermissionName(permission)));
}

absl::Status Require(const auth::Principal& who, auth::Permission permission, auth::Scope object) {
  if (auth::Allows(who, permission, object)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("permission denied: needs ",
                                                  auth::PermissionName(permission), " on this ",
                                                  object.tenant.empty()    ? "platform"
                                                  : object.project.empty() ? "tenant"
                                                                           : "project"));
}

absl::Status MaySubmit(const auth::Principal& who, WorkloadSpec& spec) {
  if (spec.tenant.empty()) spec.tenant = who.tenant;
  if (spec.project.empty() && spec.tenant == who.tenant) spec.project = who.project;
  RETURN_IF_ERROR(ValidateName("spec.tenant", spec.tenant));
  return Require(who, auth::Permission::kWorkloadsWrite, ScopeOf(spec));
}

std::string ActorName(const auth::Principal& who) {
  if (who.role == auth::Role::kAgent) return absl::StrCat("agent:", who.cluster);
  return absl::StrCat("user:", who.subject);
}

}  // namespace gpufed
