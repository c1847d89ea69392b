// The quota use cases of ControlPlane (control_plane.h): set, delete and list quotas.

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "federation/authorization.h"
#include "federation/control_plane.h"
#include "federation/quota.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {
namespace {

using auth::Permission;

// Tenant quotas are the platform's to set; a project's, its tenant admins' too.
absl::Status MaySetQuota(const auth::Principal& who, const QuotaKey& key) {
  return Require(who, Permission::kQuotasWrite,
                 key.project.empty() ? auth::Scope{} : auth::Scope{key.tenant, ""});
}

// Whether `who` may read the quota, usage or share of `tenant`'s `project` (empty: the tenant's
// own).
bool MayReadQuota(const auth::Principal& who, const std::string& tenant,
                  const std::string& project) {
  return auth::Allows(who, Permission::kQuotasRead, {tenant, project});
}

// The tenant a quota listing reads: the one named, or with none named, every tenant for a
// platform binding and the caller's own otherwise. NOT_FOUND for a tenant the caller does not
// reach into; PERMISSION_DENIED for callers that read no quotas.
absl::StatusOr<std::string> QuotaListingTenant(const auth::Principal& who,
                                               const std::string& tenant) {
  if (tenant.empty()) {
    RETURN_IF_ERROR(Require(who, Permission::kQuotasRead));
    return who.tenant;
  }
  RETURN_IF_ERROR(ValidateName("tenant", tenant));
  if (!auth::AllowsSomeOf(who, Permission::kQuotasRead, {tenant, ""})) {
    return absl::NotFoundError(absl::StrCat("tenant ", tenant, " not found"));
  }
  return tenant;
}

}  // namespace

absl::StatusOr<Quota> ControlPlane::SetQuotaUnaudited(const auth::Principal& who,
                                                      const Quota& quota, bool overcommit,
                                                      const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateQuota(quota));
  RETURN_IF_ERROR(MaySetQuota(who, quota.key));
  // The capacity now, as stored: a quota is set rarely, and the store's view is the one every
  // API replica shares.
  ASSIGN_OR_RETURN(std::vector<Cluster> clusters, ports_.clusters->ListClusters(true));
  const int64_t capacity = QuotaCapacity(clusters, quota.key.resource);
  ASSIGN_OR_RETURN(Quota stored, ports_.quotas->SetQuota(
                                     quota,
                                     [&](Quota& proposed, const std::vector<Quota>& same_resource) {
                                       return CheckQuotaFits(proposed, same_resource, capacity,
                                                             overcommit);
                                     },
                                     record));
  QuotasChanged();
  return stored;
}

absl::Status ControlPlane::DeleteQuotaUnaudited(const auth::Principal& who, const QuotaKey& key,
                                                const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateName("tenant", key.tenant));
  if (!key.project.empty()) RETURN_IF_ERROR(ValidateName("project", key.project));
  RETURN_IF_ERROR(ValidateQuotaResource("resource", key.resource));
  RETURN_IF_ERROR(MaySetQuota(who, key));
  RETURN_IF_ERROR(ports_.quotas->DeleteQuota(key, record));
  QuotasChanged();
  return absl::OkStatus();
}

void ControlPlane::QuotasChanged() {
  // Admission reads them from the next cycle on (another API replica's scheduler at its next
  // reload: ControlLoopOptions::reload_interval).
  if (ports_.scheduler != nullptr) ports_.scheduler->NotifyQuotasChanged();
  Wake();
}

absl::StatusOr<std::vector<Quota>> ControlPlane::ListQuotas(const auth::Principal& who,
                                                            const std::string& named) {
  ASSIGN_OR_RETURN(const std::string tenant, QuotaListingTenant(who, named));
  ASSIGN_OR_RETURN(std::vector<Quota> quotas, ports_.quotas->ListQuotas(tenant));
  std::erase_if(quotas,
                [&](const Quota& q) { return !MayReadQuota(who, q.key.tenant, q.key.project); });
  return quotas;
}

absl::StatusOr<std::vector<QuotaUsage>> ControlPlane::QuotaUsageOf(const auth::Principal& who,
                                                                   const std::string& named) {
  ASSIGN_OR_RETURN(const std::string tenant, QuotaListingTenant(who, named));
  ASSIGN_OR_RETURN(std::vector<Quota> quotas, ports_.quotas->ListQuotas(tenant));
  ASSIGN_OR_RETURN(std::vector<Workload> active, ports_.workloads->ListActive(""));
  ASSIGN_OR_RETURN(std::vector<Cluster> clusters, ports_.clusters->ListClusters(true));
  std::map<std::pair<std::string, std::string>, std::string> models;  // (cluster, uuid)
  for (const Cluster& c : clusters) {
    for (const NodeInfo& n : c.nodes) {
      for (const GpuInfo& g : n.gpus) models[{c.info.name, g.uuid}] = g.model;
    }
  }
  const GpuModelLookup model_of = [&](const std::string& cluster, const std::string& /*node*/,
                                      const std::string& uuid) {
    auto it = models.find({cluster, uuid});
    return it == models.end() ? std::string() : it->second;
  };
  // By (tenant, project, resource): the order the report promises.
  std::map<std::tuple<std::string, std::string, std::string>, QuotaUsage> rows;
  auto row = [&](const std::string& t, const std::string& p, const std::string& r) -> QuotaUsage& {
    QuotaUsage& u = rows[{t, p, r}];
    u.key = QuotaKey{t, p, r};
    return u;
  };
  for (const Quota& q : quotas) row(q.key.tenant, q.key.project, q.key.resource).quota = q;
  for (const Workload& w : active) {
    if (!tenant.empty() && w.spec.tenant != tenant) continue;
    if (!auth::AllowsSomeOf(who, Permission::kQuotasRead, {w.spec.tenant, ""})) continue;
    for (const auto& [resource, milli] : HeldResources(w, model_of)) {
      row(w.spec.tenant, "", resource).used_milli += milli;
      row(w.spec.tenant, w.spec.project, resource).used_milli += milli;
    }
  }
  std::vector<QuotaUsage> out;
  out.reserve(rows.size());
  for (auto& [key, u] : rows) {
    if (!MayReadQuota(who, u.key.tenant, u.key.project)) continue;
    const int64_t guaranteed = u.quota ? u.quota->guaranteed_milli : 0;
    u.borrowed_milli = std::max<int64_t>(0, u.used_milli - guaranteed);
    out.push_back(std::move(u));
  }
  return out;
}

absl::StatusOr<ShareWeight> ControlPlane::SetShareWeightUnaudited(const auth::Principal& who,
                                                                  const ShareWeight& weight,
                                                                  const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateShareWeight(weight));
  RETURN_IF_ERROR(MaySetQuota(who, QuotaKey{weight.tenant, weight.project, ""}));
  ASSIGN_OR_RETURN(ShareWeight stored, ports_.quotas->SetShareWeight(weight, record));
  QuotasChanged();
  return stored;
}

absl::StatusOr<std::vector<FairShare>> ControlPlane::FairSharesOf(const auth::Principal& who,
                                                                  const std::string& named) {
  ASSIGN_OR_RETURN(const std::string tenant, QuotaListingTenant(who, named));
  std::vector<FairShare> out = ports_.scheduler->FairShareReport();
  std::erase_if(out, [&](const FairShare& f) {
    return (!tenant.empty() && f.tenant != tenant) || !MayReadQuota(who, f.tenant, f.project);
  });
  return out;
}

absl::StatusOr<PreemptionPage> ControlPlane::ListPreemptions(const auth::Principal& who,
                                                             const std::string& named,
                                                             int64_t before_id, int limit) {
  ASSIGN_OR_RETURN(const std::string tenant, QuotaListingTenant(who, named));
  if (limit == 0) limit = 100;
  if (limit < 0 || limit > kMaxPreemptionPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be 0 to ", kMaxPreemptionPage, ", got ", limit));
  }
  if (before_id < 0)
    return absl::InvalidArgumentError("page_token: not a token this server issued");
  PreemptionPage page;
  ASSIGN_OR_RETURN(page.records, ports_.workloads->ListPreemptions(tenant, before_id, limit));
  // A record shows its reader its own tenant's part only: another tenant's preemptor, victims
  // and shares are not named, not counted (docs/security.md#rbac).
  for (PreemptionRecord& r : page.records) {
    if (!auth::Allows(who, Permission::kQuotasRead, {r.tenant, r.project})) {
      r.preemptor = 0;
      r.tenant.clear();
      r.project.clear();
    }
    std::erase_if(r.victims, [&](const PreemptionVictim& v) {
      return !auth::Allows(who, Permission::kQuotasRead, {v.tenant, v.project});
    });
    std::erase_if(r.shares, [&](const TenantShare& s) {
      return !auth::Allows(who, Permission::kQuotasRead, {s.tenant, ""});
    });
  }
  if (static_cast<int>(page.records.size()) == limit) page.next_before = page.records.back().id;
  return page;
}

}  // namespace gpufed
