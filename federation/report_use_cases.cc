// ControlPlane's reports (docs/chargeback.md#reports).

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auth/policy.h"
#include "federation/authorization.h"
#include "federation/control_plane.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {

using auth::Permission;

absl::StatusOr<UsageReportResult> ControlPlane::UsageReport(const auth::Principal& who,
                                                            UsageQuery query) {
  RETURN_IF_ERROR(Require(who, Permission::kUsageRead));
  if (ports_.metering == nullptr) {
    return absl::FailedPreconditionError("reports: this server meters nothing");
  }
  RETURN_IF_ERROR(ValidateUsageQuery(query));
  if (!query.tenant.empty()) RETURN_IF_ERROR(ValidateName("tenant", query.tenant));
  if (!query.project.empty()) RETURN_IF_ERROR(ValidateName("project", query.project));
  if (!query.cluster.empty()) RETURN_IF_ERROR(ValidateName("cluster", query.cluster));
  if (!query.project.empty() && query.tenant.empty() && who.tenant.empty()) {
    return absl::InvalidArgumentError(
        "tenant: required with project (project names are per tenant)");
  }
  // A tenant or project outside the caller's scope does not exist for it.
  if (!query.tenant.empty() &&
      !auth::AllowsSomeOf(who, Permission::kUsageRead, {query.tenant, query.project})) {
    return absl::NotFoundError(
        query.project.empty()
            ? absl::StrCat("tenant ", query.tenant, " not found")
            : absl::StrCat("project ", query.tenant, "/", query.project, " not found"));
  }
  if (!who.tenant.empty()) {
    if (!query.project.empty() && !who.project.empty() && query.project != who.project) {
      return absl::NotFoundError(
          absl::StrCat("project ", who.tenant, "/", query.project, " not found"));
    }
    // A tenant's readers see its lines only; a project's, that project's.
    query.tenant = who.tenant;
    if (!who.project.empty()) query.project = who.project;
  }
  UsageReportResult out;
  ASSIGN_OR_RETURN(out.lines, ports_.metering->ReportUsage(query));
  ASSIGN_OR_RETURN(out.guarantees, ports_.metering->ReportGuarantees(query));
  return out;
}

absl::StatusOr<CostReport> ControlPlane::CostAllocationReport(const auth::Principal& who,
                                                              const CostQuery& query) {
  RETURN_IF_ERROR(Require(who, Permission::kUsageRead, {}));
  if (ports_.metering == nullptr) {
    return absl::FailedPreconditionError("reports: this server meters nothing");
  }
  UsageQuery window;
  window.from = query.from;
  window.to = query.to;
  RETURN_IF_ERROR(ValidateUsageQuery(window));
  if (!query.cluster.empty()) RETURN_IF_ERROR(ValidateName("cluster", query.cluster));
  const IdlePolicy policy = query.policy.value_or(options_.idle_policy);
  ASSIGN_OR_RETURN(std::vector<HeldCost> held,
                   ports_.metering->ReportHeldCosts(query.from, query.to, query.cluster));
  std::map<std::string, Cluster> clusters;
  if (query.cluster.empty()) {
    ASSIGN_OR_RETURN(std::vector<Cluster> all, ports_.clusters->ListClusters(true));
    for (Cluster& c : all) clusters.emplace(c.info.name, std::move(c));
  } else if (absl::StatusOr<Cluster> c = ports_.clusters->GetCluster(query.cluster); c.ok()) {
    clusters.emplace(query.cluster, *std::move(c));
  } else if (!absl::IsNotFound(c.status()) || held.empty()) {
    return c.status();
  }
  std::map<std::string, std::vector<HeldCost>> held_by_cluster;
  for (HeldCost& h : held) held_by_cluster[h.cluster].push_back(std::move(h));
  // A cluster deleted since it was used: no capacity now, what was held of it counts.
  std::set<std::string> names;
  for (const auto& [name, c] : clusters) names.insert(name);
  for (const auto& [name, h] : held_by_cluster) names.insert(name);
  CostReport out;
  out.policy = policy;
  for (const std::string& name : names) {
    auto c = clusters.find(name);
    const std::map<ResourceType, int64_t> capacity =
        c == clusters.end() ? std::map<ResourceType, int64_t>{}
                            : CapacityCost(c->second, query.from, query.to);
    out.clusters.push_back(
        ClusterCost{name, AllocateCost(capacity, held_by_cluster[name], policy)});
  }
  return out;
}

absl::Status ControlPlane::RecordGuarantees(const std::vector<QuotaUsage>& usage, Timestamp from,
                                            Timestamp to) {
  if (ports_.metering == nullptr) return absl::OkStatus();
  const std::vector<GuaranteeUse> uses = GuaranteeUses(usage, from, to);
  if (uses.empty()) return absl::OkStatus();
  return ports_.metering->RecordGuarantees(uses);
}

absl::StatusOr<std::vector<TelemetryRow>> ControlPlane::WorkloadTelemetry(
    const auth::Principal& who, WorkloadId id, Timestamp from, Timestamp to, int limit) {
  ASSIGN_OR_RETURN(const Workload w, GetVisible(who, id));
  if (ports_.metering == nullptr) {
    return absl::FailedPreconditionError("telemetry: this server meters nothing");
  }
  if (to <= from) return absl::InvalidArgumentError("end_time: must be after start_time");
  if (limit < 1 || limit > 10000) return absl::InvalidArgumentError("page_size: must be 1..10000");
  return ports_.metering->ListTelemetry(w.id, from, to, limit);
}

absl::Status ControlPlane::ReportTenantUsage() {
  if (ports_.metering == nullptr || metrics_ == nullptr) return absl::OkStatus();
  const Timestamp now = ports_.clock->Now();
  const auto day = std::chrono::floor<std::chrono::days>(now);
  const std::chrono::year_month_day ymd{day};
  UsageQuery query;
  query.from = Timestamp(std::chrono::sys_days{ymd.year() / ymd.month() / 1});
  query.to = Timestamp(day + std::chrono::days(1));
  query.group_by = {ReportDimension::kTenant};
  ASSIGN_OR_RETURN(std::vector<UsageLine> lines, ports_.metering->ReportUsage(query));
  metrics_->TenantUsage(lines);
  return absl::OkStatus();
}

}  // namespace gpufed
