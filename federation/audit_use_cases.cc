// The audit trail's side of ControlPlane (control_plane.h): every mutating use case records its
// outcome here, around the unrecorded one it calls, and the audit rows are read and verified
// here (docs/security.md#audit). A change made in one store transaction hands its row to the
// store, which records it in that transaction (Recorded); only a failure is recorded here
// afterwards (AuditFailure). A change made of several transactions is recorded after them
// (AuditCall).

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "federation/authorization.h"
#include "federation/control_plane.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "spdlog/spdlog.h"

namespace gpufed {
namespace {

using auth::Permission;

std::string Outcome(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return std::string(kAuditOk);
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return std::string(kAuditDenied);
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return std::string(kAuditInvalid);
    case absl::StatusCode::kNotFound:
      return std::string(kAuditNotFound);
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return std::string(kAuditConflict);
    default:
      return std::string(kAuditFailed);
  }
}

std::string WorkloadObject(WorkloadId id) { return absl::StrCat("workload/", id); }

AuditEvent CallRow(const auth::Principal& who, absl::string_view action, std::string object,
                   auth::Scope scope, const absl::Status& status, std::string detail) {
  AuditEvent row;
  row.actor = ActorName(who);
  // A refused or failed call belongs to the caller's scope: the target's readers must not
  // learn of calls that never reached them (nor, through them, of the caller).
  if (status.ok()) {
    row.tenant = std::string(scope.tenant);
    row.project = std::string(scope.project);
  } else {
    row.tenant = who.tenant;
    row.project = who.project;
  }
  row.action = std::string(action);
  row.object = std::move(object);
  row.outcome = Outcome(status);
  // Statuses name fields and values the caller sent, never a secret the server holds.
  row.reason = std::string(status.message());
  row.detail = std::move(detail);
  return row;
}

}  // namespace

AuditEvent ControlPlane::Recorded(const auth::Principal& who, absl::string_view action,
                                  std::string object, auth::Scope scope, std::string detail) const {
  if (ports_.audit == nullptr) return {};
  return CallRow(who, action, std::move(object), scope, absl::OkStatus(), std::move(detail));
}

void ControlPlane::AuditFailure(const auth::Principal& who, absl::string_view action,
                                std::string object, auth::Scope scope, const absl::Status& status,
                                std::string detail) {
  if (status.ok()) return;
  AuditCall(who, action, std::move(object), scope, status, std::move(detail));
}

void ControlPlane::AuditCall(const auth::Principal& who, absl::string_view action,
                             std::string object, auth::Scope scope, const absl::Status& status,
                             std::string detail) {
  if (ports_.audit == nullptr) return;
  const AuditEvent row = CallRow(who, action, std::move(object), scope, status, std::move(detail));
  if (absl::Status stored = ports_.audit->Append(row); !stored.ok()) {
    spdlog::error("audit: could not record {} {} by {} ({}): {}", row.action, row.object, row.actor,
                  row.outcome, stored.ToString());
  }
}

// ---- Recorded use cases ----------------------------------------------------------------------

void ControlPlane::Submit(const auth::Principal& who, absl::StatusOr<WorkloadSpec> spec,
                          absl::Time deadline, SubmitDone done) {
  // A stored submission is recorded by the store, in its own transaction (its event is the
  // audit row, actor and all); a replay changed nothing. Only a refused one is recorded here,
  // against the project it named.
  std::string target = spec.ok() ? absl::StrCat("project/", spec->tenant, "/", spec->project)
                                 : std::string("project/");
  SubmitUnaudited(who, std::move(spec), deadline,
                  [this, who, target = std::move(target),
                   done = std::move(done)](absl::StatusOr<SubmitResult> result) mutable {
                    if (!result.ok()) {
                      AuditCall(who, "workloads.submit", target, {}, result.status());
                    }
                    std::move(done)(std::move(result));
                  });
}

absl::StatusOr<Workload> ControlPlane::Cancel(const auth::Principal& who, WorkloadId id,
                                              std::string reason) {
  // The use case puts the row in the workload's scope; the store adds what the cancel did.
  absl::StatusOr<Workload> result = CancelUnaudited(
      who, id, std::move(reason), Recorded(who, "workloads.cancel", WorkloadObject(id), {}));
  AuditFailure(who, "workloads.cancel", WorkloadObject(id), {}, result.status());
  return result;
}

absl::StatusOr<std::vector<DeclarationDiff>> ControlPlane::ApplyDeclarations(
    const auth::Principal& who, std::vector<ClusterDeclaration> declarations, bool dry_run) {
  std::string names;
  for (const ClusterDeclaration& d : declarations) {
    absl::StrAppend(&names, names.empty() ? "" : ",", d.cluster);
  }
  std::string detail = absl::StrCat(dry_run ? "dry run; " : "", "clusters: ", names);
  // A dry run changes nothing and is recorded only when refused.
  absl::StatusOr<std::vector<DeclarationDiff>> result = ApplyDeclarationsUnaudited(
      who, std::move(declarations), dry_run,
      dry_run ? AuditEvent{} : Recorded(who, "clusters.apply", "declarations", {}, detail));
  AuditFailure(who, "clusters.apply", "declarations", {}, result.status(), std::move(detail));
  return result;
}

absl::StatusOr<ClusterListing> ControlPlane::Cordon(const auth::Principal& who,
                                                    const std::string& cluster,
                                                    const std::string& node, bool cordoned) {
  const absl::string_view action = cordoned ? "clusters.cordon" : "clusters.uncordon";
  const std::string object = absl::StrCat("cluster/", cluster, node.empty() ? "" : "/node/", node);
  absl::StatusOr<ClusterListing> result =
      CordonUnaudited(who, cluster, node, cordoned, Recorded(who, action, object, {}));
  AuditFailure(who, action, object, {}, result.status());
  return result;
}

absl::StatusOr<DrainResult> ControlPlane::Drain(const auth::Principal& who,
                                                const std::string& cluster, const std::string& node,
                                                bool evict) {
  // Several transactions (the cordon, then the evictions): recorded after them.
  absl::StatusOr<DrainResult> result = DrainUnaudited(who, cluster, node, evict);
  std::string detail = absl::StrCat("evict: ", evict ? "yes" : "no");
  if (result.ok()) {
    absl::StrAppend(&detail, "; evicted: ", result->evicted.size(),
                    "; staying: ", result->staying.size());
  }
  AuditCall(who, "clusters.drain",
            absl::StrCat("cluster/", cluster, node.empty() ? "" : "/node/", node), {},
            result.status(), std::move(detail));
  return result;
}

absl::StatusOr<std::shared_ptr<AgentLink>> ControlPlane::RegisterAgent(
    const auth::Principal& who, const ClusterInfo& info, const std::vector<NodeInfo>& nodes,
    const std::vector<AgentReport>& known, std::shared_ptr<AgentChannel> channel) {
  const std::string object = absl::StrCat("cluster/", info.name);
  // The store adds the epoch. A registration that failed after its commit (the certificate
  // revoked meanwhile, the database gone) has both rows: what changed, and what the agent got.
  std::string detail = absl::StrCat("nodes: ", nodes.size());
  absl::StatusOr<std::shared_ptr<AgentLink>> result =
      RegisterAgentUnaudited(who, info, nodes, known, std::move(channel),
                             Recorded(who, "agents.register", object, {}, detail));
  AuditFailure(who, "agents.register", object, {}, result.status(), std::move(detail));
  return result;
}

absl::StatusOr<Tenant> ControlPlane::CreateTenant(const auth::Principal& who, Tenant tenant) {
  const std::string object = absl::StrCat("tenant/", tenant.name);
  absl::StatusOr<Tenant> result =
      CreateTenantUnaudited(who, std::move(tenant), Recorded(who, "tenants.create", object, {}));
  AuditFailure(who, "tenants.create", object, {}, result.status());
  return result;
}

absl::StatusOr<Project> ControlPlane::CreateProject(const auth::Principal& who,
                                                    const Project& project) {
  const std::string object = absl::StrCat("project/", project.tenant, "/", project.name);
  const auth::Scope scope{project.tenant, project.name};
  absl::StatusOr<Project> result =
      CreateProjectUnaudited(who, project, Recorded(who, "projects.create", object, scope));
  AuditFailure(who, "projects.create", object, scope, result.status());
  return result;
}

absl::Status ControlPlane::DeleteProject(const auth::Principal& who, const std::string& tenant,
                                         const std::string& name) {
  const std::string object = absl::StrCat("project/", tenant, "/", name);
  // The project's own readers are gone with it: the row is its tenant's.
  const auth::Scope scope{tenant, ""};
  absl::Status result =
      DeleteProjectUnaudited(who, tenant, name, Recorded(who, "projects.delete", object, scope));
  AuditFailure(who, "projects.delete", object, scope, result);
  return result;
}

absl::Status ControlPlane::DeleteTenant(const auth::Principal& who, const std::string& name) {
  const std::string object = absl::StrCat("tenant/", name);
  absl::Status result =
      DeleteTenantUnaudited(who, name, Recorded(who, "tenants.delete", object, {}));
  AuditFailure(who, "tenants.delete", object, {}, result);
  return result;
}

absl::StatusOr<CreatedToken> ControlPlane::CreateToken(const auth::Principal& who,
                                                       const TokenRequest& request) {
  // The binding, never the secret (nor its hash).
  std::string detail =
      absl::StrCat("subject: ", request.subject, "; role: ", auth::RoleName(request.role));
  if (!request.tenant.empty()) absl::StrAppend(&detail, "; tenant: ", request.tenant);
  if (!request.project.empty()) absl::StrAppend(&detail, "; project: ", request.project);
  if (!request.cluster.empty()) absl::StrAppend(&detail, "; cluster: ", request.cluster);
  const bool platform = request.role == auth::Role::kAgent || request.tenant.empty();
  const auth::Scope scope = platform ? auth::Scope{} : auth::Scope{request.tenant, request.project};
  // The store appends the new token's id to the object.
  absl::StatusOr<CreatedToken> result =
      CreateTokenUnaudited(who, request, Recorded(who, "tokens.create", "token/", scope, detail));
  AuditFailure(who, "tokens.create", "token/", scope, result.status(), std::move(detail));
  return result;
}

absl::Status ControlPlane::RevokeToken(const auth::Principal& who, int64_t id) {
  const std::string object = absl::StrCat("token/", id);
  // The store revokes it only inside the caller's binding: the caller's scope is the row's.
  const auth::Scope scope{who.tenant, who.project};
  absl::Status result =
      RevokeTokenUnaudited(who, id, Recorded(who, "tokens.revoke", object, scope));
  AuditFailure(who, "tokens.revoke", object, scope, result);
  return result;
}

absl::StatusOr<Quota> ControlPlane::SetQuota(const auth::Principal& who, const Quota& quota,
                                             bool overcommit) {
  std::string detail = absl::StrCat("guaranteed_milli: ", quota.guaranteed_milli);
  if (quota.limit_milli) absl::StrAppend(&detail, "; limit_milli: ", *quota.limit_milli);
  if (overcommit) absl::StrAppend(&detail, "; overcommit");
  const std::string object =
      absl::StrCat("quota/", quota.key.tenant, "/", quota.key.project, "/", quota.key.resource);
  const auth::Scope scope{quota.key.tenant, quota.key.project};
  absl::StatusOr<Quota> result =
      SetQuotaUnaudited(who, quota, overcommit, Recorded(who, "quotas.set", object, scope, detail));
  AuditFailure(who, "quotas.set", object, scope, result.status(), std::move(detail));
  return result;
}

absl::Status ControlPlane::DeleteQuota(const auth::Principal& who, const QuotaKey& key) {
  const std::string object =
      absl::StrCat("quota/", key.tenant, "/", key.project, "/", key.resource);
  const auth::Scope scope{key.tenant, key.project};
  absl::Status result =
      DeleteQuotaUnaudited(who, key, Recorded(who, "quotas.delete", object, scope));
  AuditFailure(who, "quotas.delete", object, scope, result);
  return result;
}

absl::StatusOr<ShareWeight> ControlPlane::SetShareWeight(const auth::Principal& who,
                                                         const ShareWeight& weight) {
  const std::string object = absl::StrCat("share_weight/", weight.tenant, "/", weight.project);
  const auth::Scope scope{weight.tenant, weight.project};
  std::string detail = absl::StrCat("weight: ", weight.weight);
  absl::StatusOr<ShareWeight> result = SetShareWeightUnaudited(
      who, weight, Recorded(who, "share_weights.set", object, scope, detail));
  AuditFailure(who, "share_weights.set", object, scope, result.status(), std::move(detail));
  return result;
}

absl::Status ControlPlane::DeleteCluster(const auth::Principal& who, const std::string& name) {
  const std::string object = absl::StrCat("cluster/", name);
  absl::Status result =
      DeleteClusterUnaudited(who, name, Recorded(who, "clusters.delete", object, {}));
  AuditFailure(who, "clusters.delete", object, {}, result);
  return result;
}

absl::StatusOr<IssuedClusterCertificate> ControlPlane::EnrollCluster(const auth::Principal& who,
                                                                     const std::string& cluster,
                                                                     const std::string& csr_pem) {
  const std::string object = absl::StrCat("cluster/", cluster);
  // The use case adds the serial and validity, never the key made for it.
  std::string detail = csr_pem.empty() ? "key pair made by the server" : "from a CSR";
  absl::StatusOr<IssuedClusterCertificate> result = EnrollClusterUnaudited(
      who, cluster, csr_pem, Recorded(who, "clusters.enroll", object, {}, detail));
  AuditFailure(who, "clusters.enroll", object, {}, result.status(), std::move(detail));
  return result;
}

absl::StatusOr<int> ControlPlane::RevokeCluster(const auth::Principal& who,
                                                const std::string& cluster) {
  const std::string object = absl::StrCat("cluster/", cluster);
  // The store adds what it revoked.
  absl::StatusOr<int> result =
      RevokeClusterUnaudited(who, cluster, Recorded(who, "clusters.revoke", object, {}));
  AuditFailure(who, "clusters.revoke", object, {}, result.status());
  return result;
}

namespace {

std::string BindingObject(absl::string_view subject, absl::string_view tenant,
                          absl::string_view project) {
  return absl::StrCat("binding/", subject, "@", tenant.empty() ? "platform" : tenant,
                      project.empty() ? "" : "/", project);
}

}  // namespace

absl::StatusOr<BindingChange> ControlPlane::SetRoleBinding(const auth::Principal& who,
                                                           const RoleBinding& binding) {
  const std::string object = BindingObject(binding.subject, binding.tenant, binding.project);
  const auth::Scope scope{binding.tenant, binding.project};
  // The store adds the tokens it lowered.
  std::string detail = absl::StrCat("role: ", auth::RoleName(binding.role));
  absl::StatusOr<BindingChange> result =
      SetRoleBindingUnaudited(who, binding, Recorded(who, "members.set", object, scope, detail));
  AuditFailure(who, "members.set", object, scope, result.status(), std::move(detail));
  return result;
}

absl::StatusOr<BindingChange> ControlPlane::DeleteRoleBinding(const auth::Principal& who,
                                                              const std::string& subject,
                                                              const std::string& tenant,
                                                              const std::string& project) {
  const std::string object = BindingObject(subject, tenant, project);
  const auth::Scope scope{tenant, project};
  // The store adds the tokens it revoked.
  absl::StatusOr<BindingChange> result = DeleteRoleBindingUnaudited(
      who, subject, tenant, project, Recorded(who, "members.remove", object, scope));
  AuditFailure(who, "members.remove", object, scope, result.status());
  return result;
}

// ---- Reading and verifying -------------------------------------------------------------------

absl::StatusOr<AuditListing> ControlPlane::ListAuditEvents(const auth::Principal& who,
                                                           AuditFilter filter) {
  RETURN_IF_ERROR(Require(who, Permission::kAuditRead));
  if (ports_.audit == nullptr) {
    return absl::FailedPreconditionError("audit: this server keeps no audit trail");
  }
  if (filter.tenant && !filter.tenant->empty()) {
    RETURN_IF_ERROR(ValidateName("tenant", *filter.tenant));
    if (!auth::AllowsSomeOf(who, Permission::kAuditRead, {*filter.tenant, ""})) {
      return absl::NotFoundError(absl::StrCat("tenant ", *filter.tenant, " not found"));
    }
  }
  if (!who.tenant.empty()) {
    // A tenant's readers see its rows only; a project's, that project's.
    filter.tenant = who.tenant;
    filter.project = who.project;
  } else if (filter.tenant && filter.tenant->empty()) {
    filter.tenant.reset();
  }
  if (filter.page_size == 0) filter.page_size = 100;
  if (filter.page_size < 0 || filter.page_size > kMaxAuditPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be 1 to ", kMaxAuditPage, ", got ", filter.page_size));
  }
  if (filter.before_id < 0) return absl::InvalidArgumentError("page_token: not a page token");
  ASSIGN_OR_RETURN(AuditPage page, ports_.audit->List(filter));
  return AuditListing{std::move(page.events), page.next_before_id};
}

absl::StatusOr<int> ControlPlane::SealAudit() {
  if (ports_.audit == nullptr) return 0;
  return ports_.audit->Seal();
}

absl::StatusOr<AuditVerification> ControlPlane::VerifyAudit(const auth::Principal& who) {
  RETURN_IF_ERROR(Require(who, Permission::kAuditVerify, {}));
  if (ports_.audit == nullptr) {
    return absl::FailedPreconditionError("audit: this server keeps no audit trail");
  }
  return ports_.audit->Verify();
}

}  // namespace gpufed
