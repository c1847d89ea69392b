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

// Who is calling, as established from a bearer token.
struct Principal {
  std::string subject;
  Role role = Role::kViewer;
  std::string tenant;   // tenant roles and tenant-scoped viewers; empty: platform scope
  std::string cluster;  // agents only
  // The API token the caller presented (TokenRecord::id); 0: none. Revoking it ends what it has
  // open (ControlPlane::RevokeToken).
  int64_t token_id = 0;

  [[nodiscard]] bool IsPlatformAdmin() const { return role == Role::kPlatformAdmin; }
  // Platform-wide viewers (finance) and platform admins see every tenant.
  [[nodiscard]] bool SeesAllTenants() const {
    return role == Role::kPlatformAdmin || (role == Role::kViewer && tenant.empty());
  }
  [[nodiscard]] bool CanRead(absl::string_view t) const {
    return SeesAllTenants() || (role != Role::kAgent && tenant == t);
  }
  [[nodiscard]] bool CanSubmit(absl::string_view t) const {
    return role == Role::kPlatformAdmin ||
           ((role == Role::kTenantAdmin || role == Role::kTenantUser) && tenant == t);
  }
  [[nodiscard]] bool CanAdminTenant(absl::string_view t) const {
    return role == Role::kPlatformAdmin || (role == Role::kTenantAdmin && tenant == t);
  }
  [[nodiscard]] bool CanActForCluster(absl::string_view c) const {
    return role == Role::kAgent && cluster == c;
  }
  // Pool-wide views (clusters, nodes, free capacity).
  [[nodiscard]] bool CanViewPool() const { return role != Role::kAgent; }
};

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_PRINCIPAL_H_
