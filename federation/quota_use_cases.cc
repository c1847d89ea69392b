// The quota use cases of ControlPlane (control_plane.h): set, delete and list quotas.

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

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

// Whether `who` may read the quotas of `tenant` (empty: of every tenant).
absl::Status MayReadQuotas(const auth::Principal& who, const std::string& tenant) {
  if (tenant.empty()) {
    if (!who.SeesAllTenants()) return absl::PermissionDeniedError("permission denied");
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ValidateName("tenant", tenant));
  if (!who.CanRead(tenant)) {
    return absl::NotFoundError(absl::StrCat("tenant ", tenant, " not found"));
  }
  return absl::OkStatus();
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
  ASSIGN_OR_RETURN(
      Quota stored,
      ports_.quotas->SetQuota(quota, [&](Quota& proposed, const std::vector<Quota>& same_resource) {
        return CheckQuotaFits(proposed, same_resource, capacity, overcommit);
      }));
  QuotasChanged();
  return stored;
}

absl::Status ControlPlane::DeleteQuota(const auth::Principal& who, const QuotaKey& key) {
  RETURN_IF_ERROR(ValidateName("tenant", key.tenant));
  if (!key.project.empty()) RETURN_IF_ERROR(ValidateName("project", key.project));
  RETURN_IF_ERROR(ValidateQuotaResource("resource", key.resource));
  if (!MaySetQuota(who, key)) return absl::PermissionDeniedError("permission denied");
  RETURN_IF_ERROR(ports_.quotas->DeleteQuota(key));
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
                                                            const std::string& tenant) {
  RETURN_IF_ERROR(MayReadQuotas(who, tenant));
  return ports_.quotas->ListQuotas(tenant);
}

absl::StatusOr<std::vector<QuotaUsage>> ControlPlane::QuotaUsageOf(const auth::Principal& who,
                                                                   const std::string& tenant) {
  RETURN_IF_ERROR(MayReadQuotas(who, tenant));
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
    if (!who.CanRead(w.spec.tenant)) continue;
    for (const auto& [resource, milli] : HeldResources(w, model_of)) {
      row(w.spec.tenant, "", resource).used_milli += milli;
      row(w.spec.tenant, w.spec.project, resource).used_milli += milli;
    }
  }
  std::vector<QuotaUsage> out;
  out.reserve(rows.size());
  for (auto& [key, u] : rows) {
    const int64_t guaranteed = u.quota ? u.quota->guaranteed_milli : 0;
    u.borrowed_milli = std::max<int64_t>(0, u.used_milli - guaranteed);
    out.push_back(std::move(u));
  }
  return out;
}

absl::StatusOr<ShareWeight> ControlPlane::SetShareWeight(const auth::Principal& who,
                                                         const ShareWeight& weight) {
  RETURN_IF_ERROR(ValidateShareWeight(weight));
  if (!MaySetQuota(who, QuotaKey{weight.tenant, weight.project, ""})) {
    return absl::PermissionDeniedError("permission denied");
  }
  ASSIGN_OR_RETURN(ShareWeight stored, ports_.quotas->SetShareWeight(weight));
  QuotasChanged();
  return stored;
}

absl::StatusOr<std::vector<FairShare>> ControlPlane::FairSharesOf(const auth::Principal& who,
                                                                  const std::string& tenant) {
  RETURN_IF_ERROR(MayReadQuotas(who, tenant));
  std::vector<FairShare> out = ports_.scheduler->FairShareReport();
  std::erase_if(out, [&](const FairShare& f) {
    return (!tenant.empty() && f.tenant != tenant) || !who.CanRead(f.tenant);
  });
  return out;
}

absl::StatusOr<PreemptionPage> ControlPlane::ListPreemptions(const auth::Principal& who,
                                                             const std::string& tenant,
                                                             int64_t before_id, int limit) {
  RETURN_IF_ERROR(MayReadQuotas(who, tenant));
  if (limit == 0) limit = 100;
  if (limit < 0 || limit > kMaxPreemptionPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be 0 to ", kMaxPreemptionPage, ", got ", limit));
  }
  if (before_id < 0)
    return absl::InvalidArgumentError("page_token: not a token this server issued");
  PreemptionPage page;
  ASSIGN_OR_RETURN(page.records, ports_.workloads->ListPreemptions(tenant, before_id, limit));
  if (!who.SeesAllTenants()) {
    for (PreemptionRecord& r : page.records) {
      for (PreemptionVictim& v : r.victims) {
        if (v.tenant == who.tenant) continue;
        v.id = 0;
        v.project.clear();
      }
    }
  }
  if (static_cast<int>(page.records.size()) == limit) page.next_before = page.records.back().id;
  return page;
}

}  // namespace gpufed
