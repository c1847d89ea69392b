#ifndef GPUFED_FEDERATION_STORE_H_
#define GPUFED_FEDERATION_STORE_H_

// The storage ports the domain needs. storage/pg implements them on PostgreSQL; the domain
// and the API handlers only see these interfaces.
//
// Every method is thread-safe. Errors: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// FAILED_PRECONDITION (state must change first), ABORTED (conflict; retry),
// UNAVAILABLE (database unreachable or overloaded; retry).
//
// Audited changes (docs/security.md#audit). A mutating method that takes `record` records that
// audit row in the change's own transaction: the row exists if and only if the change
// committed, and a failed call records nothing (its caller records the refusal). The store sets
// the row's time; a `record` with an empty action records nothing. Each such method has an
// overload without `record`, which records nothing (set-up in tests, the server's bootstrap).

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/principal.h"
#include "federation/audit.h"
#include "federation/cost_allocation.h"
#include "federation/fair_share.h"
#include "federation/idle_guarantee.h"
#include "federation/metering.h"
#include "federation/preemption.h"
#include "federation/quota.h"
#include "federation/types.h"
#include "federation/usage_report.h"

namespace gpufed {

struct SubmitResult {
  Workload workload;
  bool created = false;  // false: the idempotency key matched an earlier identical spec
};

struct ListFilter {
  std::string tenant;
  std::string project;
  std::vector<WorkloadState> states;
  std::string cluster;
  int page_size = 100;
  WorkloadId before_id = 0;  // page cursor: only ids < before_id (newest first); 0: from the top
};

struct WorkloadPage {
  std::vector<Workload> workloads;
  WorkloadId next_before_id = 0;  // 0: last page
};

// One guarded state change. Applied only if the workload is still in `from` (and, when given,
// still on `on_cluster` at attempt `at_attempt`). A move to PLACED is applied only if the stored
// cluster it names, when there is one, is not unreachable and is still at the assignment's epoch
// (a placement decided before the cluster was lost is fenced). Every transition to PLACED adds
// one to the workload's attempts.
struct Transition {
  WorkloadId id = 0;
  WorkloadState from = WorkloadState::kUnspecified;
  WorkloadState to = WorkloadState::kUnspecified;
  std::string actor;                     // "scheduler", "agent:<cluster>", "user:<subject>"
  std::string reason;                    // recorded in the event row
  std::optional<Assignment> assignment;  // set with to == PLACED
  std::optional<int32_t> exit_code;
  std::string message;
  std::optional<Timestamp> time;  // when it happened (agent clock); default: now
  std::string on_cluster;         // guard: the workload holds capacity there; empty: anywhere
  uint32_t at_attempt = 0;        // guard: the workload is at this attempt; 0: any
  bool unless_evicting = false;   // guard: no eviction is pending (Workload::evicting unset)
  // to == PENDING: why it waits now. Unset: kRequeued with `reason` as its words.
  // to == ADMITTED: why it still waits (unset: no reason).
  std::optional<PendingReason> pending_reason;
};

struct TransitionResult {
  WorkloadId id = 0;
  bool applied = false;                // false: the workload was not in `from` (or does not exist)
  std::optional<WorkloadEvent> event;  // set when applied
  std::optional<Workload> current;     // the workload as it is now, if it exists
};

class WorkloadStore {
 public:
  virtual ~WorkloadStore() = default;

  // Inserts a PENDING workload, carrying `reason` as its pending reason, and its event in one
  // transaction; returns after commit. Concurrent callers may be committed together in one
  // transaction (group commit). Same tenant + idempotency key: the earlier workload (with its
  // reason as stored) if the spec is identical, ALREADY_EXISTS otherwise. NOT_FOUND if the
  // tenant or project does not exist. `actor` ("user:<subject>") is the event's, and so the
  // audit row's that the same transaction records (federation/audit.h); empty: "submit".
  virtual absl::StatusOr<SubmitResult> Submit(const WorkloadSpec& spec, const PendingReason& reason,
                                              const std::string& actor) = 0;
  absl::StatusOr<SubmitResult> Submit(const WorkloadSpec& spec, const PendingReason& reason) {
    return Submit(spec, reason, "");
  }
  // The same with no reason (kNone).
  absl::StatusOr<SubmitResult> Submit(const WorkloadSpec& spec) {
    return Submit(spec, PendingReason(), "");
  }

  // Submit without waiting: returns at once and runs `done` exactly once with what Submit
  // would return, after the commit (on a store thread: `done` must not block). A submission
  // still queued when `deadline` passes is dropped unstored: DEADLINE_EXCEEDED. The default
  // runs Submit on the calling thread (stores that commit at once have nothing to wait for).
  using SubmitCallback = absl::AnyInvocable<void(absl::StatusOr<SubmitResult>) &&>;
  virtual void SubmitAsync(const WorkloadSpec& spec, const PendingReason& reason,
                           const std::string& actor, absl::Time /*deadline*/, SubmitCallback done) {
    std::move(done)(Submit(spec, reason, actor));
  }

  virtual absl::StatusOr<Workload> Get(WorkloadId id) = 0;
  virtual absl::StatusOr<WorkloadPage> List(const ListFilter& filter) = 0;

  // Up to `limit` (1..1000) workloads in the order of their last change, (update_time, id)
  // ascending, strictly after `after`; only `tenant`'s unless it is empty. A resumed Watch reads
  // its catch-up with it, page after page (federation/watch_filter.h). INVALID_ARGUMENT for a
  // limit out of range.
  virtual absl::StatusOr<std::vector<Workload>> ListChangedAfter(const std::string& tenant,
                                                                 Timestamp after_time,
                                                                 WorkloadId after_id,
                                                                 int limit) = 0;

  // Waiting workloads (PENDING, and ADMITTED: quota granted, not placed yet) in scheduling order
  // (priority desc, id asc).
  virtual absl::StatusOr<std::vector<Workload>> ListPending(int limit) = 0;
  // The id and version of each workload ListPending(limit) would return, in the same order: a
  // reload of the queue reads again only the rows it does not hold at their version (a row's
  // version moves with every change). INVALID_ARGUMENT for a limit that is not positive. The
  // default reads the rows; stores that can list less do.
  struct PendingVersion {
    WorkloadId id = 0;
    uint64_t version = 0;
  };
  virtual absl::StatusOr<std::vector<PendingVersion>> ListPendingVersions(int limit);
  // The workloads of `ids` (at most kMaxGetWorkloads, repeats allowed) that exist, in id order;
  // unknown ids are left out, and so may be finished ones already archived. INVALID_ARGUMENT for
  // too many ids or one that is not positive. The default reads them one by one.
  static constexpr size_t kMaxGetWorkloads = 100000;
  virtual absl::StatusOr<std::vector<Workload>> GetWorkloads(std::vector<WorkloadId> ids);
  // GetWorkloads' argument check; sorts `ids` and drops repeats.
  static absl::Status CheckGetWorkloads(std::vector<WorkloadId>& ids);
  // Workloads that hold capacity (PLACED, RUNNING), optionally for one cluster.
  virtual absl::StatusOr<std::vector<Workload>> ListActive(const std::string& cluster) = 0;
  // The ids of `tenant`'s workloads (with `project` non-empty, that project's) that hold
  // capacity (PLACED, RUNNING), ascending: what the caller may see named on the pool's GPUs.
  // UNAVAILABLE.
  virtual absl::StatusOr<std::vector<WorkloadId>> ListHeldIds(const std::string& tenant,
                                                              const std::string& project) = 0;

  // Applies all transitions in one transaction, each with its event row. A transition whose
  // guard fails is skipped, not an error.
  virtual absl::StatusOr<std::vector<TransitionResult>> ApplyTransitions(
      const std::vector<Transition>& transitions) = 0;

  // Records why waiting workloads wait (only for those still PENDING or ADMITTED): the code, its
  // figures and RenderReason's words, which Get/List return as Workload::pending_reason. A later
  // entry for the same id wins. INVALID_ARGUMENT for an id that is not positive.
  virtual absl::Status SetPendingReasons(
      const std::vector<std::pair<WorkloadId, PendingReason>>& reasons) = 0;

  // PENDING/ADMITTED -> CANCELLED at once; PLACED/RUNNING -> cancel_requested (the agent
  // confirms). FAILED_PRECONDITION if already terminal. Returns the workload afterwards and
  // the event if its state changed. `record` is recorded with its detail replaced by
  // CancelAuditDetail of the workload afterwards.
  struct CancelResult {
    Workload workload;
    std::optional<WorkloadEvent> event;
  };
  virtual absl::StatusOr<CancelResult> RequestCancel(WorkloadId id, const std::string& actor,
                                                     const std::string& reason,
                                                     const AuditEvent& record) = 0;
  absl::StatusOr<CancelResult> RequestCancel(WorkloadId id, const std::string& actor,
                                             const std::string& reason) {
    return RequestCancel(id, actor, reason, AuditEvent{});
  }

  // Asks for PLACED/RUNNING workloads to be stopped so that their attempts end by `why` once
  // their agents confirm the stop (Workload::evicting; the agent's CANCELLED report is then
  // turned into EndAttempt's transition). Marks, in one transaction, each workload that still
  // holds capacity on `cluster` at `attempt`, has no cancel pending and no eviction already;
  // sets its message to `message`. Not a state change: the version moves, no event is written.
  // Returns the workloads marked. INVALID_ARGUMENT as ValidateEviction says (nothing marked).
  struct Eviction {
    WorkloadId id = 0;
    std::string cluster;
    uint32_t attempt = 0;
    AttemptEnd why = AttemptEnd::kPreempted;
    std::string message;
  };
  virtual absl::StatusOr<std::vector<Workload>> RequestEvictions(
      const std::vector<Eviction>& evictions) = 0;

  // A preemption: its record and the evictions of its victims (parallel to record.victims).
  struct Preemption {
    PreemptionRecord record;
    std::vector<Eviction> victims;
  };
  struct PreemptionResult {
    std::vector<Workload> marked;  // as RequestEvictions returns them
    // As stored, with their ids: only the victims that were marked; a record none of whose
    // victims was marked is not stored.
    std::vector<PreemptionRecord> recorded;
  };
  // In one transaction: marks the victims' evictions (as RequestEvictions), appends each
  // record, and records one audit row per victim marked, made from `record` by
  // PreemptionAuditRows. INVALID_ARGUMENT as ValidateEviction says, or when a record's victims do
  // not match its evictions (nothing marked or stored).
  virtual absl::StatusOr<PreemptionResult> RequestPreemptions(
      const std::vector<Preemption>& preemptions, const AuditEvent& record) = 0;
  absl::StatusOr<PreemptionResult> RequestPreemptions(const std::vector<Preemption>& preemptions) {
    return RequestPreemptions(preemptions, AuditEvent{});
  }
  // Preemption records, newest first: those involving `tenant` (its work preempted or
  // preempting; empty: every record), with an id below `before_id` (0: from the newest), at most
  // `limit` (1..kMaxPreemptionPage; INVALID_ARGUMENT otherwise).
  virtual absl::StatusOr<std::vector<PreemptionRecord>> ListPreemptions(const std::string& tenant,
                                                                        int64_t before_id,
                                                                        int limit) = 0;

  // Moves up to `limit` finished workloads (terminal states) that ended before `ended_before`
  // out of the hot table into the archive, in one transaction; returns how many moved. An
  // archived workload is still found by Get (and refused by RequestCancel as already ended); it
  // leaves List, CountByState and idempotency-key matching. INVALID_ARGUMENT for a limit that is
  // not positive.
  virtual absl::StatusOr<int> ArchiveFinished(Timestamp ended_before, int limit) = 0;

  // Number of workloads per state (for metrics); states with none may be absent.
  virtual absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> CountByState() = 0;
};

class ClusterStore {
 public:
  virtual ~ClusterStore() = default;

  // Creates or updates the cluster and replaces its inventory, in one transaction. The state
  // becomes READY; the epoch is kept. Returns the cluster as stored. `record` is recorded with
  // "; epoch: <epoch>" appended to its detail.
  virtual absl::StatusOr<Cluster> RegisterCluster(const ClusterInfo& info,
                                                  const std::vector<NodeInfo>& nodes,
                                                  const AuditEvent& record) = 0;
  absl::StatusOr<Cluster> RegisterCluster(const ClusterInfo& info,
                                          const std::vector<NodeInfo>& nodes) {
    return RegisterCluster(info, nodes, AuditEvent{});
  }
  virtual absl::Status RecordHeartbeat(const std::string& cluster, Timestamp at) = 0;
  // Moving a cluster to `unreachable` bumps its epoch (assignments made under the old epoch are
  // fenced: its agent refuses them); registering again keeps the epoch.
  virtual absl::Status SetClusterState(const std::string& cluster, ClusterState state) = 0;

  // Declares `cluster` lost, in one transaction: moves it to `unreachable`, bumps its epoch
  // (assignments made under the old one are fenced) and applies the transitions `plan` makes of
  // the workloads that hold capacity there, as read inside the transaction, so that none placed
  // meanwhile is missed. A cluster already unreachable keeps its epoch, and its workloads that
  // still hold capacity (a loss interrupted before) are planned again. NOT_FOUND for an unknown
  // cluster; the transitions are validated as ApplyTransitions does (INVALID_ARGUMENT, nothing
  // changed).
  using LossPlan = std::function<std::vector<Transition>(const Cluster& lost,
                                                         const std::vector<Workload>& held)>;
  // `record` is recorded with LossAuditDetail appended to its detail.
  struct LossResult {
    Cluster cluster;  // as stored afterwards (no nodes)
    std::vector<TransitionResult> transitions;
  };
  virtual absl::StatusOr<LossResult> LoseCluster(const std::string& cluster, const LossPlan& plan,
                                                 const AuditEvent& record) = 0;
  absl::StatusOr<LossResult> LoseCluster(const std::string& cluster, const LossPlan& plan) {
    return LoseCluster(cluster, plan, AuditEvent{});
  }
  // An operator's cordon on `cluster` (`node` empty) or on one of its nodes: no new placements
  // there while it holds (a placement naming a cordoned cluster or node is fenced like one on an
  // unreachable cluster, so that none decided before the cordon was seen slips in after it)
  // (`cordoned` false lifts it). A cordoned cluster is `draining` (unless unreachable) and stays so
  // when its agent registers again; lifting it makes it `ready` (unless unreachable). A cordoned
  // node reads as not schedulable whatever its agent reports. Idempotent. Returns the cluster as
  // stored, with its nodes. NOT_FOUND for an unknown cluster, or a node the cluster does not have
  // (lifting a cordon on a node its agent no longer reports is allowed).
  virtual absl::StatusOr<Cluster> SetCordon(const std::string& cluster, const std::string& node,
                                            bool cordoned, const AuditEvent& record) = 0;
  absl::StatusOr<Cluster> SetCordon(const std::string& cluster, const std::string& node,
                                    bool cordoned) {
    return SetCordon(cluster, node, cordoned, AuditEvent{});
  }
  // Deletes `cluster` with its inventory, cordons and declaration, in one transaction (a name
  // that only has a declaration loses that). A registered cluster must be cordoned first, so that
  // no placement lands there meanwhile (SetCordon's fence), and nothing may depend on it any
  // more: FAILED_PRECONDITION naming what is left (and nothing changes) while it is not
  // cordoned, workloads hold capacity there, or a live agent token or certificate names it
  // (ClusterCertificateStore). NOT_FOUND when there
  // is neither a cluster nor a declaration by that name.
  virtual absl::Status DeleteCluster(const std::string& cluster, const AuditEvent& record) = 0;
  absl::Status DeleteCluster(const std::string& cluster) {
    return DeleteCluster(cluster, AuditEvent{});
  }
  // Clusters come with their admin's declaration (Cluster::declared; empty when none).
  virtual absl::StatusOr<std::vector<Cluster>> ListClusters(bool include_nodes) = 0;
  virtual absl::StatusOr<Cluster> GetCluster(const std::string& name) = 0;

  // Every admin declaration, by cluster name, including those of clusters that never registered.
  virtual absl::StatusOr<std::vector<ClusterDeclaration>> ListDeclarations() = 0;
  // Replaces the declarations of the clusters they name (adding the new ones), in one
  // transaction; a registering agent never changes them. Each must pass ValidateDeclaration
  // (INVALID_ARGUMENT naming "declarations[i].<field>", nothing stored); the price history rule
  // is the use case's (ControlPlane::ApplyDeclarations), not the store's.
  virtual absl::Status PutDeclarations(const std::vector<ClusterDeclaration>& declarations,
                                       const AuditEvent& record) = 0;
  absl::Status PutDeclarations(const std::vector<ClusterDeclaration>& declarations) {
    return PutDeclarations(declarations, AuditEvent{});
  }
};

// The audit rows of a preemption's victims: `record` (actor, action, outcome; an empty action
// makes none) for each workload marked, in its tenant's and project's scope, with the cause as
// reason (never the preemptor, which may be another tenant's) and its cluster as detail.
std::vector<AuditEvent> PreemptionAuditRows(const AuditEvent& record,
                                            const WorkloadStore::PreemptionResult& result);

// What a cancel did, for its audit row: "state <STATE>", and ", agent asked to stop it" while
// the workload's agent has yet to stop it.
std::string CancelAuditDetail(const Workload& after);

// What a loss did, for its audit row: "epoch: <n>; requeued: <transitions applied to PENDING>;
// ended: <the other applied ones>" (each workload's own transition has its own row).
std::string LossAuditDetail(const ClusterStore::LossResult& loss);

class QuotaStore {
 public:
  virtual ~QuotaStore() = default;

  // Sets `quota` (creates it, or replaces the one stored under its key) in one transaction in
  // which `check` sees every quota on the same resource as stored, while no other quota write on
  // that resource runs; `check` may refuse (its status comes back, nothing changed) or mark the
  // quota (overcommitted). Returns the quota as stored (update_time set). NOT_FOUND for an
  // unknown tenant, or a project the tenant does not have; RESOURCE_EXHAUSTED when the tenant
  // already has kMaxQuotasPerTenant quotas and this is a new one; INVALID_ARGUMENT for what
  // ValidateQuota refuses.
  using QuotaCheck =
      std::function<absl::Status(Quota& proposed, const std::vector<Quota>& same_resource)>;
  virtual absl::StatusOr<Quota> SetQuota(const Quota& quota, const QuotaCheck& check,
                                         const AuditEvent& record) = 0;
  absl::StatusOr<Quota> SetQuota(const Quota& quota, const QuotaCheck& check) {
    return SetQuota(quota, check, AuditEvent{});
  }
  // NOT_FOUND when there is none under `key`.
  virtual absl::Status DeleteQuota(const QuotaKey& key, const AuditEvent& record) = 0;
  absl::Status DeleteQuota(const QuotaKey& key) { return DeleteQuota(key, AuditEvent{}); }
  // The quotas of `tenant` (its own and its projects'), or of every tenant when it is empty;
  // ordered by tenant, project (the tenant's own first), resource.
  virtual absl::StatusOr<std::vector<Quota>> ListQuotas(const std::string& tenant) = 0;

  // Sets the fair-share weight of a tenant (project empty) or a project. INVALID_ARGUMENT
  // (ValidateShareWeight); NOT_FOUND for an unknown tenant or project.
  virtual absl::StatusOr<ShareWeight> SetShareWeight(const ShareWeight& weight,
                                                     const AuditEvent& record) = 0;
  absl::StatusOr<ShareWeight> SetShareWeight(const ShareWeight& weight) {
    return SetShareWeight(weight, AuditEvent{});
  }
  // Every weight set, by tenant then project (the tenant's own first); the rest weigh 1.
  virtual absl::StatusOr<std::vector<ShareWeight>> ListShareWeights() = 0;

  // Fair-share usage: the active scheduler saves its decayed usage now and then, replacing what
  // was saved; a newly active one goes on from it. INVALID_ARGUMENT for a negative or non-finite
  // figure, or more than kMaxUsageHolders holders.
  virtual absl::Status SaveUsage(const UsageSnapshot& usage) = 0;
  // What was saved last; as_of zero when nothing was.
  virtual absl::StatusOr<UsageSnapshot> LoadUsage() = 0;
};

// An API token as stored: only the hash of the secret is kept.
struct TokenRecord {
  std::string subject;
  auth::Role role = auth::Role::kViewer;  // stored by auth::RoleName
  std::string tenant;                     // tenant roles; empty: bound at the platform
  std::string project;                    // bound to this project of `tenant`; empty: the tenant
  std::string cluster;                    // agent role
  int64_t id = 0;                         // set by the store
  std::optional<Timestamp> expire_time;   // nullopt: never expires
  // Set by the store: when it was made, last looked up (authenticated), revoked.
  Timestamp create_time{};
  std::optional<Timestamp> last_used_time;
  std::optional<Timestamp> revoke_time;
};

// A member's role at one scope (docs/security.md#members-and-role-bindings): `subject` (a person
// or program, by name) holds `role` at the platform (tenant empty), a tenant, or one project of
// it. A subject has at most one binding per scope. Tokens made for a bound subject at that scope
// may not rank above the binding's role.
struct RoleBinding {
  std::string subject;
  auth::Role role = auth::Role::kViewer;  // never kAgent (agents are bound to clusters)
  std::string tenant;                     // empty: the platform (platform-admin, viewer)
  std::string project;                    // a project of `tenant`; empty: the whole tenant
  Timestamp create_time{};                // set by the store
  Timestamp update_time{};                // set by the store: when the role last changed
};

// What setting or removing a binding did: the binding (as stored, or as it was before removal)
// and the subject's live tokens at that scope it changed (lowered to the new role, or revoked).
struct BindingChange {
  RoleBinding binding;
  std::vector<int64_t> tokens;
};

class TenantStore {
 public:
  virtual ~TenantStore() = default;

  // ALREADY_EXISTS for a tenant by that name.
  virtual absl::StatusOr<Tenant> CreateTenant(const Tenant& tenant, const AuditEvent& record) = 0;
  absl::StatusOr<Tenant> CreateTenant(const Tenant& tenant) {
    return CreateTenant(tenant, AuditEvent{});
  }
  virtual absl::StatusOr<std::vector<Tenant>> ListTenants() = 0;
  // NOT_FOUND for an unknown tenant; ALREADY_EXISTS for a project by that name in it.
  virtual absl::StatusOr<Project> CreateProject(const Project& project,
                                                const AuditEvent& record) = 0;
  absl::StatusOr<Project> CreateProject(const Project& project) {
    return CreateProject(project, AuditEvent{});
  }
  virtual absl::StatusOr<std::vector<Project>> ListProjects(const std::string& tenant) = 0;
  // Deletes a project no workload names (ended ones count until they are archived) and no live
  // token is bound to, with its quotas, share weight, role bindings and revoked tokens;
  // FAILED_PRECONDITION (and nothing changes) while workloads or live tokens name it.
  // NOT_FOUND when there is no such project.
  virtual absl::Status DeleteProject(const std::string& tenant, const std::string& name,
                                     const AuditEvent& record) = 0;
  absl::Status DeleteProject(const std::string& tenant, const std::string& name) {
    return DeleteProject(tenant, name, AuditEvent{});
  }
  // Deletes a tenant without projects or live tokens, with its quotas, share weights, role
  // bindings and revoked tokens; FAILED_PRECONDITION naming what is left (and nothing changes)
  // otherwise. NOT_FOUND when there is no such tenant.
  virtual absl::Status DeleteTenant(const std::string& name, const AuditEvent& record) = 0;
  absl::Status DeleteTenant(const std::string& name) { return DeleteTenant(name, AuditEvent{}); }

  // Returns the token as stored (its id and create_time set). FAILED_PRECONDITION when the
  // subject has a role binding at the token's scope and the token's role ranks above it. The
  // audit row `audit` is recorded with the new token's id appended to its object ("token/" ->
  // "token/7").
  virtual absl::StatusOr<TokenRecord> CreateToken(const std::string& token_hash,
                                                  const TokenRecord& record,
                                                  const AuditEvent& audit) = 0;
  absl::StatusOr<TokenRecord> CreateToken(const std::string& token_hash,
                                          const TokenRecord& record) {
    return CreateToken(token_hash, record, AuditEvent{});
  }
  // A live token (neither revoked nor expired as of the store's clock), whose last-used time
  // becomes now; NOT_FOUND otherwise.
  virtual absl::StatusOr<TokenRecord> LookupToken(const std::string& token_hash) = 0;
  // The tokens (live, expired and revoked; never their hashes) of `tenant` (empty: every one,
  // platform tokens included) and, with `project` non-empty, bound to that project; by id, at
  // most kMaxTokenList.
  static constexpr int kMaxTokenList = 1000;
  virtual absl::StatusOr<std::vector<TokenRecord>> ListTokens(const std::string& tenant,
                                                              const std::string& project) = 0;
  // Revokes token `id` at once (LookupToken stops finding it); with `tenant` non-empty, only a
  // token of that tenant, and with `project` too, only one bound to that project. Returns the
  // token. Revoking a revoked token changes nothing and returns it again. NOT_FOUND when there
  // is no such token (in that scope).
  virtual absl::StatusOr<TokenRecord> RevokeToken(int64_t id, const std::string& tenant,
                                                  const std::string& project,
                                                  const AuditEvent& record) = 0;
  absl::StatusOr<TokenRecord> RevokeToken(int64_t id, const std::string& tenant,
                                          const std::string& project) {
    return RevokeToken(id, tenant, project, AuditEvent{});
  }
  virtual absl::StatusOr<int64_t> CountTokens() = 0;

  // Role bindings (docs/security.md#members-and-role-bindings).
  //
  // Creates or replaces the binding of `binding.subject` at its scope, in one transaction that
  // also lowers that subject's live tokens bound at exactly that scope whose role ranks above the
  // new one (auth::Outranks) to it. INVALID_ARGUMENT as ValidateRoleBinding; NOT_FOUND for an
  // unknown tenant or project; RESOURCE_EXHAUSTED past kMaxBindingsPerTenant bindings in a tenant.
  // `record` is recorded with "; tokens lowered: <ids>" appended to its detail when there were
  // any (AppendAuditIds).
  static constexpr int kMaxBindingsPerTenant = 10000;
  virtual absl::StatusOr<BindingChange> SetRoleBinding(const RoleBinding& binding,
                                                       const AuditEvent& record) = 0;
  absl::StatusOr<BindingChange> SetRoleBinding(const RoleBinding& binding) {
    return SetRoleBinding(binding, AuditEvent{});
  }
  // Removes the binding of `subject` at (`tenant`, `project`) and revokes, in the same
  // transaction, that subject's live tokens bound at exactly that scope. NOT_FOUND when there is
  // no such binding. `record` is recorded with "tokens revoked: <ids>" appended to its detail
  // when there were any.
  virtual absl::StatusOr<BindingChange> DeleteRoleBinding(const std::string& subject,
                                                          const std::string& tenant,
                                                          const std::string& project,
                                                          const AuditEvent& record) = 0;
  absl::StatusOr<BindingChange> DeleteRoleBinding(const std::string& subject,
                                                  const std::string& tenant,
                                                  const std::string& project) {
    return DeleteRoleBinding(subject, tenant, project, AuditEvent{});
  }
  // The bindings of `tenant` (empty: every binding, the platform's included) and, with `project`
  // non-empty, of that project only; by tenant, project (the tenant's own first), subject; at most
  // kMaxBindingList.
  static constexpr int kMaxBindingList = 1000;
  virtual absl::StatusOr<std::vector<RoleBinding>> ListRoleBindings(const std::string& tenant,
                                                                    const std::string& project) = 0;
  // The bindings of `subject`, at every scope: the platform's first, then by tenant and project;
  // at most kMaxBindingList. (What decides the role of a JWT's subject: api/authn.h.)
  virtual absl::StatusOr<std::vector<RoleBinding>> ListSubjectRoleBindings(
      const std::string& subject) = 0;
};

// A certificate the cluster CA issued (docs/security.md#cluster-identity-mutual-tls).
struct ClusterCertificate {
  std::string serial;  // upper-case hexadecimal, as auth::ClusterCa writes it
  std::string cluster;
  Timestamp not_before{};
  Timestamp not_after{};
  // Set by the store: when it was recorded, and revoked.
  Timestamp issue_time{};
  std::optional<Timestamp> revoke_time;
};

// The cluster certificates issued: an agent's certificate speaks for its cluster only while it
// is recorded here for that cluster and not revoked.
class ClusterCertificateStore {
 public:
  virtual ~ClusterCertificateStore() = default;

  // Records an issued certificate; returns it as stored. INVALID_ARGUMENT for a serial that is
  // not 1 to 40 upper-case hexadecimal digits, an empty cluster, or not_after not after not_before;
  // ALREADY_EXISTS for a serial recorded before.
  virtual absl::StatusOr<ClusterCertificate> AddClusterCertificate(
      const ClusterCertificate& certificate, const AuditEvent& record) = 0;
  absl::StatusOr<ClusterCertificate> AddClusterCertificate(const ClusterCertificate& certificate) {
    return AddClusterCertificate(certificate, AuditEvent{});
  }
  // The certificate `serial` when it is recorded for `cluster`, not revoked and not past its
  // not_after (the store's clock); NOT_FOUND otherwise, whatever the reason.
  virtual absl::StatusOr<ClusterCertificate> LookupClusterCertificate(
      const std::string& serial, const std::string& cluster) = 0;
  // Cuts `cluster` off, in one transaction: revokes every unrevoked certificate of it (lookups
  // stop finding them; revoked ones keep their first revocation time) and every live agent token
  // bound to it (TenantStore::LookupToken stops finding them), however many. Returns how many
  // certificates and which tokens (ascending). `record` is recorded with "certificates revoked:
  // <n>; tokens revoked: <ids>" appended to its detail.
  struct ClusterRevocation {
    int certificates = 0;
    std::vector<int64_t> tokens;
  };
  virtual absl::StatusOr<ClusterRevocation> RevokeCluster(const std::string& cluster,
                                                          const AuditEvent& record) = 0;
  absl::StatusOr<ClusterRevocation> RevokeCluster(const std::string& cluster) {
    return RevokeCluster(cluster, AuditEvent{});
  }
};

// Which usage records ListUsage returns: those of `tenant` (and `project`; '' for all) on
// `cluster` ('' for all) that overlap [from, to), in (from, workload, attempt, replica, gpu_uuid)
// order, one page at a time.
struct UsageFilter {
  std::string tenant;
  std::string project;
  std::string cluster;
  Timestamp from{};
  Timestamp to{};
  int page_size = 1000;  // 1..10000
  // Page cursor: the position of the last record of the previous page (from empty: the start).
  std::optional<UsageRecord> after;
};

// OK, or INVALID_ARGUMENT naming the field (page_size, to).
absl::Status ValidateUsageFilter(const UsageFilter& filter);

// Metering (docs/chargeback.md). The stores meter the runs themselves, by the MeteringPolicy
// they were made with:
// - a transition that takes a workload out of RUNNING records, in its own transaction, the run's
//   span from the workload's metering mark to the transition's time;
// - MeterRunning records the spans of runs still going and moves their marks.
// A run's mark starts at its agent-reported start, raised to the time it was placed and capped
// at the store's clock; an end is taken as reported, but never before the mark nor after the
// store's clock: so an agent's clock running fast or slow can neither bill time that has not
// passed nor time the workload was not placed for, and every second is metered once.
// Records are append-only.
class MeteringStore {
 public:
  virtual ~MeteringStore() = default;

  // For up to `limit` (1..10000) RUNNING workloads whose mark is before `until` (capped at the
  // store's clock), oldest mark first: records the span from the mark to `until` and moves the
  // mark there, in one transaction. Returns how many runs it metered (fewer than `limit`: none
  // is left behind `until`).
  virtual absl::StatusOr<int> MeterRunning(Timestamp until, int limit) = 0;
  // A page of records (UsageFilter). INVALID_ARGUMENT for a bad page size or to <= from.
  virtual absl::StatusOr<std::vector<UsageRecord>> ListUsage(const UsageFilter& filter) = 0;

  // The most lines ReportUsage answers with.
  static constexpr int kMaxReportLines = 50000;
  // The records of the query's window (those that start inside it: windows are whole days and no
  // record crosses an hour) and filters, summed as federation/usage_report.h's SumUsage does,
  // lines in the same order. INVALID_ARGUMENT for a query ValidateUsageQuery refuses;
  // FAILED_PRECONDITION when there would be more than kMaxReportLines lines.
  virtual absl::StatusOr<std::vector<UsageLine>> ReportUsage(const UsageQuery& query) = 0;

  // Telemetry (federation/telemetry.h), in one transaction: attributes each of `minutes`, sent
  // by `cluster`'s agent, to the run it names (AttributeMinute, against the workload and the
  // cluster as stored, by the store's MeteringPolicy), keeps it until PruneTelemetry, and adds its
  // measured, effective and coarse GPU-time to its report line. A minute already kept (same
  // cluster, GPU, instance, minute and workload) is ignored, so a repeat never counts twice; so
  // is one AttributeMinute refuses. Returns how many were kept. Minutes must be valid
  // (ValidateTelemetry).
  virtual absl::StatusOr<int> RecordTelemetry(const std::string& cluster,
                                              const std::vector<TelemetryMinute>& minutes) = 0;
  // The kept minutes of `workload` in [from, to), oldest first (then GPU, instance), at most
  // `limit` (1..10000; INVALID_ARGUMENT otherwise).
  virtual absl::StatusOr<std::vector<TelemetryRow>> ListTelemetry(WorkloadId workload,
                                                                  Timestamp from, Timestamp to,
                                                                  int limit) = 0;
  // Deletes up to `limit` kept minutes older than `before`, oldest first; returns how many (fewer
  // than `limit`: none older is left). Report sums are not changed.
  virtual absl::StatusOr<int> PruneTelemetry(Timestamp before, int limit) = 0;

  // Cost allocation's input (federation/cost_allocation.h): what the records of [from, to)
  // (whole days, as a report's window) held, summed by cluster, tenant, GPU model and capacity
  // type, in that order; only `cluster`'s ('' for all). INVALID_ARGUMENT for a window
  // ValidateUsageQuery refuses.
  virtual absl::StatusOr<std::vector<HeldCost>> ReportHeldCosts(Timestamp from, Timestamp to,
                                                                const std::string& cluster) = 0;

  // Idle guarantees (federation/idle_guarantee.h): adds each of `uses` to its day's sums, in one
  // transaction. INVALID_ARGUMENT for a negative figure or idle above reserved.
  virtual absl::Status RecordGuarantees(const std::vector<GuaranteeUse>& uses) = 0;
  // The sums of the query's window by period and quota (SumGuarantees; group_by is ignored).
  // INVALID_ARGUMENT for a query ValidateUsageQuery refuses; FAILED_PRECONDITION beyond
  // kMaxReportLines lines.
  virtual absl::StatusOr<std::vector<GuaranteeLine>> ReportGuarantees(const UsageQuery& query) = 0;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_STORE_H_
