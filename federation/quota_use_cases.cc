// The quota use cases of ControlPlane (control_plane.h): set, delete and list quotas.

#include "absl/strings/str_cat.h"
#include "federation/control_plane.h"
#include "federation/quota.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {
namespace {

// Tenant quotas are the platform's to set; a project's, its tenant admins' too.
bool MaySetQuota(const auth::Principal& who, const QuotaKey& key) {
  return key.project.empty() ? who.IsPlatformAdmin() : who.CanAdminTenant(key.tenant);
}

}  // namespace

absl::StatusOr<Quota> ControlPlane::SetQuota(const auth::Principal& who, const Quota& quota,
                                             bool overcommit) {
  RETURN_IF_ERROR(ValidateQuota(quota));
  if (!MaySetQuota(who, quota.key)) return absl::PermissionDeniedError("permission denied");
  // The capacity now, as stored: a quota is set rarely, and the store's view is the one every
  // API replica shares.
  ASSIGN_OR_RETURN(std::vector<Cluster> clusters, ports_.clusters->ListClusters(true));
  const int64_t capacity = QuotaCapacity(clusters, quota.key.resource);
  return ports_.quotas->SetQuota(
      quota, [&](Quota& proposed, const std::vector<Quota>& same_resource) {
        return CheckQuotaFits(proposed, same_resource, capacity, overcommit);
      });
}

absl::Status ControlPlane::DeleteQuota(const auth::Principal& who, const QuotaKey& key) {
  RETURN_IF_ERROR(ValidateName("tenant", key.tenant));
  if (!key.project.empty()) RETURN_IF_ERROR(ValidateName("project", key.project));
  RETURN_IF_ERROR(ValidateQuotaResource("resource", key.resource));
  if (!MaySetQuota(who, key)) return absl::PermissionDeniedError("permission denied");
  return ports_.quotas->DeleteQuota(key);
}

absl::StatusOr<std::vector<Quota>> ControlPlane::ListQuotas(const auth::Principal& who,
                                                            const std::string& tenant) {
  if (tenant.empty()) {
    if (!who.SeesAllTenants()) return absl::PermissionDeniedError("permission denied");
  } else {
    RETURN_IF_ERROR(ValidateName("tenant", tenant));
    if (!who.CanRead(tenant)) {
      return absl::NotFoundError(absl::StrCat("tenant ", tenant, " not found"));
    }
  }
  return ports_.quotas->ListQuotas(tenant);
}

}  // namespace gpufed
