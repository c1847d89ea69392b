#ifndef GPUFED_AUTH_PRINCIPAL_H_
#define GPUFED_AUTH_PRINCIPAL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace gpufed::auth {

// The roles (docs/domain.md#roles).
enum class Role { kPlatformAdmin, kTenantAdmin, kTenantUser, kViewer, kAgent };

// "platform-admin", "tenant-admin", "tenant-user", "viewer", "agent".
absl::string_view RoleName(Role role);
std::optional<Role> ParseRole(absl::string_view name);

// Who is calling, as established from a credential: one role bound at one scope (auth/policy.h
// decides what that allows).
struct Principal {
  std::string subject;
  Role role = Role::kViewer;
  // The scope: empty tenant: the platform; a tenant; with project, one project of the tenant.
  std::string tenant;
  std::string project;
  std::string cluster;  // agents only: the cluster they speak for
  // The API token the caller presented (TokenRecord::id); 0: none. Revoking it ends what it has
  // open (ControlPlane::RevokeToken).
  int64_t token_id = 0;
  // The cluster certificate an agent presented (its serial, upper-case hexadecimal); empty:
  // none. Revoking the cluster ends its connection (ControlPlane::RevokeCluster).
  std::string certificate_serial;

  [[nodiscard]] bool IsPlatformAdmin() const { return role == Role::kPlatformAdmin; }
};

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_PRINCIPAL_H_
