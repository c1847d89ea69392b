#ifndef GPUFED_FEDERATION_AUTHORIZATION_H_
#define GPUFED_FEDERATION_AUTHORIZATION_H_

// The use cases' side of auth/policy.h: the checks as statuses. A denial never names anything
// the caller did not send (docs/security.md#rbac).

#include <string>

#include "absl/status/status.h"
#include "auth/policy.h"
#include "auth/principal.h"
#include "federation/types.h"

namespace gpufed {

// PERMISSION_DENIED unless the role of `who` grants `permission` (shared objects: the pool).
absl::Status Require(const auth::Principal& who, auth::Permission permission);

// PERMISSION_DENIED unless auth::Allows(who, permission, object).
absl::Status Require(const auth::Principal& who, auth::Permission permission, auth::Scope object);

// The project a workload belongs to.
inline auth::Scope ScopeOf(const WorkloadSpec& spec) { return {spec.tenant, spec.project}; }

// Fills an unnamed spec.tenant (and, for a project binding, spec.project) from the binding of
// `who`; INVALID_ARGUMENT for a malformed tenant name, PERMISSION_DENIED unless `who` may submit
// to the spec's project.
absl::Status MaySubmit(const auth::Principal& who, WorkloadSpec& spec);

// How `who` is named as the actor of an event or audit row: "agent:<cluster>" for a cluster's
// agent, "user:<subject>" for anyone else.
std::string ActorName(const auth::Principal& who);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_AUTHORIZATION_H_
