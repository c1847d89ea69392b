#include "auth/policy.h"

#include <algorithm>
#include <array>

namespace gpufed::auth {
namespace {

using P = Permission;

struct RoleGrant {
  Role role;
  std::initializer_list<Permission> permissions;
};

// What each role may do, within the scope it is bound at.
const std::array<RoleGrant, 5>& RoleGrants() {
  static const std::array<RoleGrant, 5> kGrants{{
      {Role::kPlatformAdmin,
       {P::kWorkloadsRead, P::kWorkloadsWrite, P::kPoolRead, P::kPoolAdmin, P::kTenancyRead,
        P::kTenancyAdmin, P::kQuotasRead, P::kQuotasWrite, P::kAuditRead, P::kAuditVerify,
        P::kUsageRead}},
      {Role::kTenantAdmin,
       {P::kWorkloadsRead, P::kWorkloadsWrite, P::kPoolRead, P::kTenancyRead, P::kTenancyAdmin,
        P::kQuotasRead, P::kQuotasWrite, P::kAuditRead, P::kUsageRead}},
      {Role::kTenantUser,
       {P::kWorkloadsRead, P::kWorkloadsWrite, P::kPoolRead, P::kTenancyRead, P::kQuotasRead,
        P::kUsageRead}},
      {Role::kViewer,
       {P::kWorkloadsRead, P::kPoolRead, P::kTenancyRead, P::kQuotasRead, P::kAuditRead,
        P::kUsageRead}},
      {Role::kAgent, {P::kAgentConnect}},
  }};
  return kGrants;
}

constexpr MethodPolicy kMethods[] = {
    // WorkloadService
    {"gpufed.v1.WorkloadService.Submit", P::kWorkloadsWrite, Target::kProject},
    {"gpufed.v1.WorkloadService.Get", P::kWorkloadsRead, Target::kWorkload},
    {"gpufed.v1.WorkloadService.List", P::kWorkloadsRead, Target::kListing},
    {"gpufed.v1.WorkloadService.Cancel", P::kWorkloadsWrite, Target::kWorkload},
    {"gpufed.v1.WorkloadService.Watch", P::kWorkloadsRead, Target::kListing},
    {"gpufed.v1.WorkloadService.Explain", P::kWorkloadsRead, Target::kWorkload},
    {"gpufed.v1.WorkloadService.WhatIf", P::kWorkloadsWrite, Target::kProject},
    // ClusterService
    {"gpufed.v1.ClusterService.ListClusters", P::kPoolRead, Target::kShared},
    {"gpufed.v1.ClusterService.GetCluster", P::kPoolRead, Target::kShared},
    {"gpufed.v1.ClusterService.Cordon", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.Uncordon", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.Drain", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.DeleteCluster", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.ApplyClusters", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.EnrollCluster", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.RevokeCluster", P::kPoolAdmin, Target::kPlatform},
    {"gpufed.v1.ClusterService.ListDeclarations", P::kPoolRead, Target::kShared},
    // TenantService
    {"gpufed.v1.TenantService.CreateTenant", P::kTenancyAdmin, Target::kPlatform},
    {"gpufed.v1.TenantService.ListTenants", P::kTenancyRead, Target::kListing},
    {"gpufed.v1.TenantService.CreateProject", P::kTenancyAdmin, Target::kTenant},
    {"gpufed.v1.TenantService.ListProjects", P::kTenancyRead, Target::kListing},
    {"gpufed.v1.TenantService.DeleteProject", P::kTenancyAdmin, Target::kTenant},
    {"gpufed.v1.TenantService.DeleteTenant", P::kTenancyAdmin, Target::kPlatform},
    {"gpufed.v1.TenantService.CreateToken", P::kTenancyAdmin, Target::kToken},
    {"gpufed.v1.TenantService.RevokeToken", P::kTenancyAdmin, Target::kToken},
    {"gpufed.v1.TenantService.ListTokens", P::kTenancyAdmin, Target::kListing},
    {"gpufed.v1.TenantService.SetRoleBinding", P::kTenancyAdmin, Target::kToken},
    {"gpufed.v1.TenantService.DeleteRoleBinding", P::kTenancyAdmin, Target::kToken},
    {"gpufed.v1.TenantService.ListRoleBindings", P::kTenancyAdmin, Target::kListing},
    // QuotaService
    {"gpufed.v1.QuotaService.SetQuota", P::kQuotasWrite, Target::kQuotaKey},
    {"gpufed.v1.QuotaService.DeleteQuota", P::kQuotasWrite, Target::kQuotaKey},
    {"gpufed.v1.QuotaService.ListQuotas", P::kQuotasRead, Target::kListing},
    {"gpufed.v1.QuotaService.GetQuotaUsage", P::kQuotasRead, Target::kListing},
    {"gpufed.v1.QuotaService.ListPreemptions", P::kQuotasRead, Target::kListing},
    {"gpufed.v1.QuotaService.SetShareWeight", P::kQuotasWrite, Target::kQuotaKey},
    // AgentService
    {"gpufed.v1.AgentService.Connect", P::kAgentConnect, Target::kCluster},
    // AuditService
    {"gpufed.v1.AuditService.ListAuditEvents", P::kAuditRead, Target::kListing},
    {"gpufed.v1.AuditService.VerifyAudit", P::kAuditVerify, Target::kPlatform},
    // ReportService
    {"gpufed.v1.ReportService.GetUsageReport", P::kUsageRead, Target::kListing},
    {"gpufed.v1.ReportService.ListWorkloadTelemetry", P::kWorkloadsRead, Target::kWorkload},
    {"gpufed.v1.ReportService.GetCostAllocation", P::kUsageRead, Target::kPlatform},
};

// Higher ranks may grant lower ones; agents rank apart (0: only the platform issues them).
int Rank(Role role) {
  switch (role) {
    case Role::kPlatformAdmin:
      return 4;
    case Role::kTenantAdmin:
      return 3;
    case Role::kTenantUser:
      return 2;
    case Role::kViewer:
      return 1;
    case Role::kAgent:
      return 0;
  }
  return 0;
}

}  // namespace

absl::string_view PermissionName(Permission permission) {
  switch (permission) {
    case P::kWorkloadsRead:
      return "workloads.read";
    case P::kWorkloadsWrite:
      return "workloads.write";
    case P::kPoolRead:
      return "pool.read";
    case P::kPoolAdmin:
      return "pool.admin";
    case P::kTenancyRead:
      return "tenancy.read";
    case P::kTenancyAdmin:
      return "tenancy.admin";
    case P::kQuotasRead:
      return "quotas.read";
    case P::kQuotasWrite:
      return "quotas.write";
    case P::kAgentConnect:
      return "agent.connect";
    case P::kAuditRead:
      return "audit.read";
    case P::kAuditVerify:
      return "audit.verify";
    case P::kUsageRead:
      return "usage.read";
  }
  return "unknown";
}

bool Grants(Role role, Permission permission) {
  for (const RoleGrant& g : RoleGrants()) {
    if (g.role != role) continue;
    return std::find(g.permissions.begin(), g.permissions.end(), permission) != g.permissions.end();
  }
  return false;
}

bool Covers(const Principal& who, Scope object) {
  if (who.role == Role::kAgent) return false;
  if (who.tenant.empty()) return true;  // platform binding
  if (who.tenant != object.tenant) return false;
  return who.project.empty() || who.project == object.project;
}

bool ReachesInto(const Principal& who, Scope object) {
  if (Covers(who, object)) return true;
  if (who.role == Role::kAgent || who.tenant.empty()) return false;
  // Bound inside the object: a project binding reaches into its tenant.
  return object.project.empty() && who.tenant == object.tenant;
}

bool Allows(const Principal& who, Permission permission, Scope object) {
  return Grants(who.role, permission) && Covers(who, object);
}

bool AllowsSomeOf(const Principal& who, Permission permission, Scope object) {
  return Grants(who.role, permission) && ReachesInto(who, object);
}

bool MaySpeakFor(const Principal& who, absl::string_view cluster) {
  return Grants(who.role, P::kAgentConnect) && !who.cluster.empty() && who.cluster == cluster;
}

bool MayGrant(const Principal& who, Role role, Scope object) {
  if (!Allows(who, P::kTenancyAdmin, object)) return false;
  if (role == Role::kAgent || role == Role::kPlatformAdmin) return who.IsPlatformAdmin();
  return Rank(role) <= Rank(who.role);
}

bool Outranks(Role a, Role b) { return Rank(a) > Rank(b); }

std::span<const MethodPolicy> MethodPolicies() { return kMethods; }

std::optional<MethodPolicy> PolicyFor(absl::string_view method) {
  for (const MethodPolicy& m : kMethods) {
    if (m.method == method) return m;
  }
  return std::nullopt;
}

}  // namespace gpufed::auth
