#include "auth/principal.h"

#include <array>
#include <utility>

namespace gpufed::auth {
namespace {

constexpr std::array<std::pair<Role, absl::string_view>, 5> kRoles{{
    {Role::kPlatformAdmin, "platform-admin"},
    {Role::kTenantAdmin, "tenant-admin"},
    {Role::kTenantUser, "tenant-user"},
    {Role::kViewer, "viewer"},
    {Role::kAgent, "agent"},
}};

}  // namespace

absl::string_view RoleName(Role role) {
  for (const auto& [r, name] : kRoles) {
    if (r == role) return name;
  }
  return "unknown";
}

std::optional<Role> ParseRole(absl::string_view name) {
  for (const auto& [r, n] : kRoles) {
    if (n == name) return r;
  }
  return std::nullopt;
}

}  // namespace gpufed::auth
