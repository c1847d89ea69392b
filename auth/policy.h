#ifndef GPUFED_AUTH_POLICY_H_
#define GPUFED_AUTH_POLICY_H_

// Who may do what, declared once (docs/security.md#rbac).
//
// A principal holds one role bound at one scope: the platform (every tenant), a tenant, or one
// project of a tenant; an agent is bound to one cluster. A role grants permissions (kRoleGrants);
// a permission on an object holds when the role grants it and the binding's scope covers the
// object's scope. Everything not granted is denied.
//
// Every RPC of the public and agent APIs names the permission it needs and where the object it
// acts on lives (kMethodPolicies). The use cases enforce it with Allows(); the RBAC matrix test
// derives every RPC × role × scope expectation from the same tables, and fails for an RPC that
// has no row.

#include <optional>
#include <span>

#include "absl/strings/string_view.h"
#include "auth/principal.h"

namespace gpufed::auth {

enum class Permission {
  kWorkloadsRead,   // get, list, watch and explain workloads
  kWorkloadsWrite,  // submit, cancel, what-if
  kPoolRead,        // clusters, nodes, free capacity, prices, declarations
  kPoolAdmin,       // apply clusters, cordon, drain
  kTenancyRead,     // tenants and projects
  kTenancyAdmin,    // create and delete tenants and projects, create and revoke tokens
  kQuotasRead,      // quotas, usage, fair shares, preemptions
  kQuotasWrite,     // quotas and share weights
  kAgentConnect,    // speak for a cluster on the agent stream
  kAuditRead,       // the audit trail of the scope the role is bound at
  kAuditVerify,     // check the whole audit chain (platform admins)
  kUsageRead,       // usage and cost reports of the scope the role is bound at
};

// "workloads.read", ...
absl::string_view PermissionName(Permission permission);

// Where an object lives: the platform (tenant empty), a tenant (project empty), or a project.
struct Scope {
  absl::string_view tenant;
  absl::string_view project;
};

// Whether `role` grants `permission` (at whatever scope the role is bound).
bool Grants(Role role, Permission permission);

// Whether the binding of `who` covers `object`: a platform binding covers everything; a tenant
// binding its tenant and the tenant's projects; a project binding that project only. Agents cover
// nothing here (their objects are clusters: see MaySpeakFor).
bool Covers(const Principal& who, Scope object);

// Whether `who` reaches into `object` at all: covers it, or is bound somewhere inside it (a
// project binding reaches into its tenant). A listing of a container the caller reaches into
// answers with the part it may see; one it does not reach into is refused.
bool ReachesInto(const Principal& who, Scope object);

// Grants(who.role, permission) && Covers(who, object).
bool Allows(const Principal& who, Permission permission, Scope object);

// Grants(who.role, permission) && ReachesInto(who, object).
bool AllowsSomeOf(const Principal& who, Permission permission, Scope object);

// An agent credential for `cluster`.
bool MaySpeakFor(const Principal& who, absl::string_view cluster);

// Whether `who` may hand out `role` at `object` (a token): it must hold tenancy.admin covering
// the object, and `role` must not rank above its own (platform-admin > tenant-admin >
// tenant-user > viewer). Agent and platform-admin credentials are the platform's to issue.
bool MayGrant(const Principal& who, Role role, Scope object);

// Whether `a` ranks above `b` (platform-admin > tenant-admin > tenant-user > viewer; agents rank
// below every other role).
bool Outranks(Role a, Role b);

// Where the object of an RPC lives, which decides the scope its permission is checked at.
enum class Target {
  kPlatform,  // the platform itself: tenants, cluster administration, a tenant's own quota
  kTenant,    // the tenant the request names (projects, sub-quotas, a tenant's tokens)
  kProject,   // the project the request names (submissions)
  kWorkload,  // the project of the workload the request names
  kListing,   // a listing: refused unless the caller reaches into the container it names (or,
              // naming none, holds the permission at all); answers only with what it may see
  kShared,    // shared read-only information any holder of the permission may see (the pool)
  kQuotaKey,  // a quota or share weight: a tenant's own lives at the platform, a project's in
              // its tenant (sub-quotas are the tenant admins')
  kToken,     // the scope of the token or role binding made, changed or removed (MayGrant to make)
  kCluster,   // the cluster an agent credential names
};

struct MethodPolicy {
  absl::string_view method;  // "gpufed.v1.WorkloadService.Submit": a full method name
  Permission permission;
  Target target;
};

// One row per RPC of gpufed.v1.
std::span<const MethodPolicy> MethodPolicies();

// The row of `method` ("gpufed.v1.WorkloadService.Submit"); nullopt: no policy (deny).
std::optional<MethodPolicy> PolicyFor(absl::string_view method);

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_POLICY_H_
