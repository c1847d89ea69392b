// ControlPlane's reports (docs/chargeback.md#reports).

#include <chrono>

#include "absl/strings/str_cat.h"
#include "auth/policy.h"
#include "federation/authorization.h"
#include "federation/control_plane.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {

using auth::Permission;

absl::StatusOr<std::vector<UsageLine>> ControlPlane::UsageReport(const auth::Principal& who,
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
  return ports_.metering->ReportUsage(query);
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
