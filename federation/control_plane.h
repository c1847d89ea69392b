#ifndef GPUFED_FEDERATION_CONTROL_PLANE_H_
#define GPUFED_FEDERATION_CONTROL_PLANE_H_

// The use cases of the control plane, in one place: what a user, an admin or an agent can ask
// for, and what the control loop does with the clusters it stops hearing from. Each takes and
// returns plain structs and reaches the outside only through ports: the stores (store.h), the
// event sink, agent channels and metrics (ports.h), the clock (clock.h). gRPC handlers convert
// and call these; they hold no logic of their own. docs/architecture.md shows where a new use
// case goes.
//
// Every committed change goes through one after-commit sequence (AfterCommit): the scheduler
// learns of it, Watch streams get its events, agents get placements and cancellations, the
// scheduler is woken when there is something to do. A committed change to a cluster goes through
// AfterClusterCommit. No use case writes either sequence itself.
//
// Thread-safe: every method may be called from any thread at once.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/policy.h"
#include "auth/principal.h"
#include "federation/agent_registry.h"
#include "federation/audit.h"
#include "federation/clock.h"
#include "federation/ports.h"
#include "federation/scheduler.h"
#include "federation/store.h"
#include "federation/watch_filter.h"

namespace gpufed {

struct ControlPlanePorts {
  WorkloadStore* workloads = nullptr;
  ClusterStore* clusters = nullptr;
  TenantStore* tenants = nullptr;
  QuotaStore* quotas = nullptr;
  EventSink* events = nullptr;
  AgentRegistry* agents = nullptr;
  Scheduler* scheduler = nullptr;
  const Clock* clock = nullptr;
  ControlMetrics* metrics = nullptr;  // optional
  // Ends what a revoked token has open besides agent connections; optional.
  CredentialSink* credentials = nullptr;
  // Cluster certificates (mutual TLS): the record of those issued, and the CA that issues
  // them. Without an issuer EnrollCluster is FAILED_PRECONDITION; without the store both
  // cluster-identity calls are.
  ClusterCertificateStore* certificates = nullptr;
  ClusterCertificateIssuer* issuer = nullptr;
  // The audit trail (federation/audit.h); optional: null records nothing (tests, the simulator).
  AuditLog* audit = nullptr;
  // Metering (federation/metering.h); optional: null, MeterRunning meters nothing (runs that end
  // are still metered by the store that ends them).
  MeteringStore* metering = nullptr;
};

struct ControlPlaneOptions {
  // An agent's heartbeats are written to the store at most this often.
  std::chrono::nanoseconds heartbeat_write_interval = std::chrono::seconds(10);
  // A token made without a lifetime lives this long (agents' tokens: for ever, until mutual TLS
  // replaces them); none may live longer than max_token_ttl.
  std::chrono::seconds default_token_ttl = std::chrono::hours(24 * 90);
  std::chrono::seconds max_token_ttl = std::chrono::hours(24 * 366);
  // What cost allocation does with idle capacity when a request does not say
  // (docs/chargeback.md#cost-allocation).
  IdlePolicy idle_policy = IdlePolicy::kSeparate;
};

// What an agent says about one workload it was handed.
struct AgentReport {
  WorkloadId id = 0;
  // RUNNING, SUCCEEDED, FAILED, CANCELLED, or LOST: the agent stopped it by itself because its
  // lease ran out (the attempt ends as if the cluster had been lost).
  WorkloadState state = WorkloadState::kUnspecified;
  int32_t exit_code = 0;  // terminal states
  std::string message;
  std::optional<Timestamp> time;  // when it happened, by the agent's clock
  uint32_t attempt = 0;           // the attempt it is about; 0: not said (older agents)
};

// Why a workload is where it is, evaluated now.
struct Explanation {
  Workload workload;
  std::string text;
  PendingReason reason;     // PENDING and it does not fit now: why, as data
  bool never_fits = false;  // PENDING: no cluster could ever hold it
  std::string fits_now_on;  // PENDING and it fits now: the cluster the scheduler would choose
  // PENDING (not held back by quota): every cluster's rules, offers and prices as the workload
  // meets them, and the choice (docs/routing.md#explain-and-what-if).
  std::optional<RoutingExplanation> routing;
};

// What declaring a cluster lost did.
struct ClusterLoss {
  uint64_t epoch = 0;                // the cluster's epoch now
  std::vector<WorkloadId> requeued;  // back to PENDING for another attempt
  std::vector<WorkloadId> ended;     // LOST, or CANCELLED when a cancel was pending
};

// The clusters as stored, with the scheduler's view of their free capacity.
struct ClusterListing {
  std::vector<Cluster> clusters;
  std::shared_ptr<const Pool> pool;  // never null
  // The workloads the caller may see named on the pool's GPUs; nullopt: every one (platform
  // scope). A tenant sees its own; of the rest, only that capacity is held.
  std::optional<absl::flat_hash_set<WorkloadId>> visible;

  [[nodiscard]] bool Visible(WorkloadId id) const { return !visible || visible->contains(id); }
};

// What a drain did.
struct DrainResult {
  ClusterListing listing;  // the cluster as stored, with its nodes, and the scheduler's view
  // Told to stop (now or by an earlier drain); each returns to PENDING once its agent confirms.
  std::vector<WorkloadId> evicted;
  // Keep running there until they end by themselves: not evicted (not asked, or their retry
  // policy does not restart them after a preemption).
  std::vector<WorkloadId> staying;
};

// What applying declarations changes (or, on a dry run, would change) for one cluster.
struct DeclarationDiff {
  std::string cluster;
  enum class Kind { kUnchanged, kAdded, kChanged } kind = Kind::kUnchanged;
  // One line per change, for people: "jurisdiction: \"\" -> eu", "+ price H100-80GB on-demand
  // from 2026-12-01T00:00:00Z: 3.200000", "rtt eu-west: 12 ms -> 9 ms".
  std::vector<std::string> changes;
};

// A page of audit rows and the chain's check.
struct AuditListing {
  std::vector<AuditEvent> events;  // newest first
  int64_t next_before_id = 0;      // 0: no more
};

// A page of preemption records.
struct PreemptionPage {
  std::vector<PreemptionRecord> records;
  int64_t next_before = 0;  // the next page's before_id; 0: no more
};

// A token to create: the caller gets the secret once; only its hash is stored.
struct TokenRequest {
  std::string subject;
  auth::Role role = auth::Role::kViewer;
  std::string tenant;   // tenant roles; a viewer without one sees every tenant
  std::string project;  // bound to this project of `tenant` (auth/policy.h); empty: the tenant
  std::string cluster;  // agent role
  // How long it lives; nullopt: ControlPlaneOptions::default_token_ttl (agents: no expiry).
  std::optional<std::chrono::seconds> ttl;
};

// A token made: the secret (shown once) and the id it is revoked by.
struct CreatedToken {
  std::string secret;
  int64_t id = 0;
  std::optional<Timestamp> expire_time;  // nullopt: never
};

class ControlPlane {
 public:
  using SubmitDone = absl::AnyInvocable<void(absl::StatusOr<SubmitResult>) &&>;

  ControlPlane(ControlPlanePorts ports, ControlPlaneOptions options = {});

  // Called whenever a committed change may let the scheduler do something (the control loop's
  // Wake). Set once, before any use case runs.
  void SetWake(std::function<void()> wake) { wake_ = std::move(wake); }

  // ---- Workloads ----

  // Validates and stores a workload as PENDING. `spec.tenant` empty: the caller's tenant.
  // Returns at once; `done` runs exactly once: after the commit (on a store thread; it must not
  // block), or at once with the error. INVALID_ARGUMENT naming the field; PERMISSION_DENIED;
  // NOT_FOUND (tenant or project); ALREADY_EXISTS (idempotency key with another spec);
  // DEADLINE_EXCEEDED if `deadline` passed before the commit (nothing stored); UNAVAILABLE.
  // `spec` is what the transport made of the request: its error (a missing spec, one that does
  // not convert) is handed back to `done` as is. Every submission that ends in an error, these
  // included, is counted once as rejected (ControlMetrics::SubmissionRejected).
  void Submit(const auth::Principal& who, absl::StatusOr<WorkloadSpec> spec, absl::Time deadline,
              SubmitDone done);

  // NOT_FOUND also for another tenant's workload (ids do not leak existence).
  absl::StatusOr<Workload> GetWorkload(const auth::Principal& who, WorkloadId id);
  // `filter.tenant` empty: the caller's tenant (everyone's for platform-wide readers).
  // PERMISSION_DENIED for a tenant the caller may not read.
  absl::StatusOr<WorkloadPage> ListWorkloads(const auth::Principal& who, ListFilter filter);
  absl::StatusOr<Explanation> Explain(const auth::Principal& who, WorkloadId id);
  // Where `spec` would go now and what it would cost, without submitting it: checked as Submit
  // checks it (INVALID_ARGUMENT, PERMISSION_DENIED; tenant and project must exist), then routed
  // on the scheduler's latest pool. Quota admission is not judged.
  absl::StatusOr<RoutingExplanation> WhatIf(const auth::Principal& who, WorkloadSpec spec);
  // PENDING/ADMITTED: CANCELLED at once. PLACED/RUNNING: cancel requested, the agent stops it
  // and confirms. FAILED_PRECONDITION when already ended; PERMISSION_DENIED for a reader.
  absl::StatusOr<Workload> Cancel(const auth::Principal& who, WorkloadId id, std::string reason);

  // ---- Watch ----

  // Whether `who` may watch at all: PERMISSION_DENIED for a caller who reads no tenant's
  // workloads (an agent's credential), before anything is subscribed.
  static absl::Status AuthorizeWatch(const auth::Principal& who);
  // The first event of a Watch of one workload: the workload as it is now, as an event from its
  // state to itself. NOT_FOUND also for another tenant's workload (as GetWorkload). The
  // transport subscribes to the events before calling this, so that no change slips between
  // the read and the stream, and passes this event and every published one through one
  // WatchFilter (federation/watch_filter.h), which decides what the caller gets and when the
  // stream ends.
  absl::StatusOr<WorkloadEvent> WatchSnapshot(const auth::Principal& who, WorkloadId id);
  // One page of the catch-up of a resumed Watch of every workload: up to `limit` (1..1000) of the
  // workloads `who` may read, as they are now, in the order of their last change, after `after`
  // (the first page: WatchResumePoint; the next: the last workload of the page before). A page
  // shorter than `limit` is the last. The transport subscribes before reading the first page and
  // passes each workload through its WatchFilter's OfferResync. UNAVAILABLE.
  absl::StatusOr<std::vector<Workload>> WatchResync(const auth::Principal& who, ChangeCursor after,
                                                    int limit);

  // ---- The pool ----

  // PERMISSION_DENIED for agents. Nodes only when asked.
  absl::StatusOr<ClusterListing> ListClusters(const auth::Principal& who, bool include_nodes);
  // Declarative: makes the named clusters' declarations what `declarations` say (clusters not
  // named keep theirs), and returns what changed, one entry per declaration in the given order.
  // Applying the same declarations twice changes nothing the second time. With `dry_run`,
  // nothing is stored. Price lines in force (effective_from not after now) are history: one
  // left out keeps its place, one with another price for the same key is FAILED_PRECONDITION
  // ("declarations[0].prices[2]: ... is in force since ...; add a line with a later
  // effective_from"). Platform admins only (PERMISSION_DENIED); INVALID_ARGUMENT as
  // ValidateDeclaration, or for a cluster named twice.
  absl::StatusOr<std::vector<DeclarationDiff>> ApplyDeclarations(
      const auth::Principal& who, std::vector<ClusterDeclaration> declarations, bool dry_run);
  // Every declaration (platform admins and viewers of the pool).
  absl::StatusOr<std::vector<ClusterDeclaration>> ListDeclarations(const auth::Principal& who);
  absl::StatusOr<ClusterListing> GetCluster(const auth::Principal& who, const std::string& name);
  // Puts an operator's cordon on `cluster` (`node` empty) or one of its nodes, or lifts it
  // (`cordoned` false): no new placements there while it holds; what runs there keeps running.
  // The scheduler sees the change at once. Returns the cluster as stored, with its nodes, and
  // the scheduler's view (as GetCluster).
  // PERMISSION_DENIED unless `who` is a platform admin; INVALID_ARGUMENT naming `name` or `node`;
  // NOT_FOUND (ClusterStore::SetCordon).
  absl::StatusOr<ClusterListing> Cordon(const auth::Principal& who, const std::string& cluster,
                                        const std::string& node, bool cordoned);
  // Cordons `cluster` (or `node`) as Cordon does and, with `evict`, asks its agent to stop the
  // restartable work there (retry on preemption, attempts left): each stop the agent confirms
  // returns that workload to PENDING (reason Preempted) to run elsewhere as its next attempt.
  // Work that cannot be restarted keeps running. Errors as Cordon's.
  absl::StatusOr<DrainResult> Drain(const auth::Principal& who, const std::string& cluster,
                                    const std::string& node, bool evict);

  // Deletes a cluster nothing depends on any more (ClusterStore::DeleteCluster: cordoned, no
  // workload holding capacity there, no live agent token or certificate), with its declaration.
  // Afterwards its agent is forgotten (a connection still open is closed) and the scheduler holds
  // no capacity there. Platform admins only (PERMISSION_DENIED); INVALID_ARGUMENT naming `name`;
  // FAILED_PRECONDITION naming what is left; NOT_FOUND.
  absl::Status DeleteCluster(const auth::Principal& who, const std::string& name);

  // ---- Agents ----

  // An agent (re)connects for `info.name` with its inventory and what it still runs or
  // finished while away (`known`). Stores the cluster (READY; its epoch is kept), makes
  // `channel` its connection (an older one is closed), tells the agent its epoch, applies what
  // it reported, re-sends every assignment the cluster holds, and tells it to stop what it
  // must not run. PERMISSION_DENIED unless `who` is that cluster's agent; INVALID_ARGUMENT for
  // a bad inventory.
  absl::StatusOr<std::shared_ptr<AgentLink>> RegisterAgent(const auth::Principal& who,
                                                           const ClusterInfo& info,
                                                           const std::vector<NodeInfo>& nodes,
                                                           const std::vector<AgentReport>& known,
                                                           std::shared_ptr<AgentChannel> channel);
  // The three calls below answer UNAVAILABLE and change nothing when `link` no longer speaks
  // for its cluster: another connection registered, or the agent was silent past the heartbeat
  // timeout (the cluster was marked unreachable and its epoch moved on). The agent must
  // register again; the transport ends the connection with that answer.
  //
  // The agent's inventory changed: a MIG repartition done for the scheduler, or hardware that
  // failed or came back. Work on a node or GPU the inventory lost or reports unhealthy is
  // evicted (FailedHardwareEvictions): the agent is told to stop it, and its confirmed stop
  // ends the attempt as a node failure.
  absl::Status UpdateInventory(const AgentLink& link, const std::vector<NodeInfo>& nodes);
  // The agent is alive.
  absl::Status Heartbeat(AgentLink& link);
  // Applies status reports in one transaction. Reports on work not handed to this connection,
  // or about another attempt than the workload's current one, are ignored (and may be
  // acknowledged: they will never apply). A LOST report ends the attempt by the failover rule
  // (federation/failover.h). INVALID_ARGUMENT for a state an agent may not report. After OK,
  // everything reported may be acknowledged.
  absl::Status ApplyAgentReports(AgentLink& link, const std::vector<AgentReport>& reports);
  // The agent's telemetry (federation/telemetry.h): minutes more than kTelemetryMaxAge old or more
  // than kTelemetryMaxAhead ahead of this server's clock are ignored (so a report over a window
  // that ended longer ago never changes); the rest go to MeteringStore::RecordTelemetry.
  // INVALID_ARGUMENT naming the field (ValidateTelemetry): nothing is kept.
  absl::Status ApplyTelemetry(const AgentLink& link, const std::vector<TelemetryMinute>& minutes);
  // The connection ended.
  void AgentDisconnected(const AgentLink& link);

  // ---- Cluster identity (mutual TLS; docs/security.md#cluster-identity-mutual-tls) ----

  // Platform admins issue a certificate naming `cluster` (which need not have registered yet):
  // for the public key of `csr_pem`, whatever its subject says, or for a new key pair returned
  // once. The certificate is recorded before it is returned. INVALID_ARGUMENT naming cluster or
  // csr_pem; PERMISSION_DENIED for other roles; FAILED_PRECONDITION when the server has no
  // cluster CA.
  absl::StatusOr<IssuedClusterCertificate> EnrollCluster(const auth::Principal& who,
                                                         const std::string& cluster,
                                                         const std::string& csr_pem);
  // Platform admins cut `cluster` off: every certificate issued to it and every agent token
  // bound to it is revoked, and its live agent connection, whatever credential it registered
  // with, is closed (UNAUTHENTICATED) at once in this process, after the commit. Returns how
  // many certificates and tokens were revoked (0: nothing was live; the connection is closed
  // all the same). INVALID_ARGUMENT naming cluster; PERMISSION_DENIED for other roles.
  absl::StatusOr<int> RevokeCluster(const auth::Principal& who, const std::string& cluster);

  // ---- Tenancy ----

  absl::StatusOr<Tenant> CreateTenant(const auth::Principal& who, Tenant tenant);
  // Only the tenants the caller may read.
  absl::StatusOr<std::vector<Tenant>> ListTenants(const auth::Principal& who);
  absl::StatusOr<Project> CreateProject(const auth::Principal& who, const Project& project);
  absl::StatusOr<std::vector<Project>> ListProjects(const auth::Principal& who,
                                                    const std::string& tenant);
  // Platform admins and the tenant's admins delete a project no workload names (ended ones count
  // until archived), with its quotas and share weight. FAILED_PRECONDITION while workloads name
  // it; NOT_FOUND for none, and for a tenant the caller may not read; PERMISSION_DENIED for a
  // reader of the tenant who may not administer it.
  absl::Status DeleteProject(const auth::Principal& who, const std::string& tenant,
                             const std::string& name);
  // Platform admins delete a tenant without projects or live tokens, with its quotas, share
  // weights and revoked tokens. FAILED_PRECONDITION naming what is left; NOT_FOUND for none.
  absl::Status DeleteTenant(const auth::Principal& who, const std::string& name);
  // Returns the secret, shown once, the token's id and when it expires. INVALID_ARGUMENT naming
  // the field for a bad binding or a ttl that is not positive or beyond max_token_ttl;
  // PERMISSION_DENIED unless auth::MayGrant.
  absl::StatusOr<CreatedToken> CreateToken(const auth::Principal& who, const TokenRequest& request);
  // The tokens (never their secrets) of `tenant`/`project` the caller administers; naming no
  // tenant, those of the caller's own scope (every token in platform scope). NOT_FOUND for a
  // tenant or project the caller does not reach into; PERMISSION_DENIED without tenancy.admin.
  absl::StatusOr<std::vector<TokenRecord>> ListTokens(const auth::Principal& who,
                                                      const std::string& tenant,
                                                      const std::string& project);
  // Revokes token `id`: platform admins any, a tenant's admins their tenant's (NOT_FOUND for
  // any other, as for none: nothing learned). At once in this process, after the commit: the
  // token authenticates nothing more, an agent connection registered with it is closed
  // (UNAUTHENTICATED) and its Watch streams end. INVALID_ARGUMENT naming token_id for an id that
  // is not positive; PERMISSION_DENIED for other roles.
  absl::Status RevokeToken(const auth::Principal& who, int64_t id);
  // Binds `binding.subject` (a member) to `binding.role` at its scope, or changes the role it
  // holds there. The caller needs tenancy.admin covering the scope and may hand out no role
  // above its own (auth::MayGrant); no binding it reaches ranks above it (a tenant's roles stop
  // at tenant-admin, the platform's are the platform admins'). The subject's live tokens at that
  // scope that rank above the new role are lowered to it, at once (what they have open ends; their
  // next call authenticates with the new role). INVALID_ARGUMENT naming the field
  // (ValidateRoleBinding); PERMISSION_DENIED; NOT_FOUND (tenant, project); RESOURCE_EXHAUSTED past
  // TenantStore::kMaxBindingsPerTenant.
  absl::StatusOr<BindingChange> SetRoleBinding(const auth::Principal& who,
                                               const RoleBinding& binding);
  // Removes the binding of `subject` at (`tenant`, `project`) and revokes, at once, the subject's
  // live tokens bound there (as RevokeToken). NOT_FOUND for none, and for a scope the caller
  // does not administer (nothing learned); PERMISSION_DENIED for a caller without
  // tenancy.admin; INVALID_ARGUMENT naming the field.
  absl::StatusOr<BindingChange> DeleteRoleBinding(const auth::Principal& who,
                                                  const std::string& subject,
                                                  const std::string& tenant,
                                                  const std::string& project);
  // The bindings of `tenant`/`project` the caller administers; naming no tenant, those of the
  // caller's own scope (every binding in platform scope). Errors as ListTokens.
  absl::StatusOr<std::vector<RoleBinding>> ListRoleBindings(const auth::Principal& who,
                                                            const std::string& tenant,
                                                            const std::string& project);
  // On a database without tokens: makes a platform-admin token, hands the secret to `keep`
  // (which writes it where the operator finds it) and only then stores its hash, so that no
  // token exists that nobody can use. Returns whether one was made.
  absl::StatusOr<bool> BootstrapAdminToken(
      const std::function<absl::Status(const std::string& secret)>& keep);

  // ---- Quotas (federation/quota.h, docs/quotas.md) ----

  // Sets a tenant's quota (platform admins) or a project's (its tenant's admins too). The
  // guarantees on a resource must fit the capacity the pool has of it now (FAILED_PRECONDITION
  // naming the resource and the shortfall) unless `overcommit`; a project's must fit inside its
  // tenant's. INVALID_ARGUMENT naming the field; PERMISSION_DENIED; NOT_FOUND (tenant, project);
  // RESOURCE_EXHAUSTED past kMaxQuotasPerTenant.
  absl::StatusOr<Quota> SetQuota(const auth::Principal& who, const Quota& quota, bool overcommit);
  // The same callers as SetQuota; NOT_FOUND when there is none.
  absl::Status DeleteQuota(const auth::Principal& who, const QuotaKey& key);
  // The quotas of `tenant` (its own and its projects'), for those who may read the tenant
  // (NOT_FOUND otherwise, as for a tenant that does not exist); `tenant` empty: every tenant's,
  // for callers who see every tenant (PERMISSION_DENIED otherwise).
  absl::StatusOr<std::vector<Quota>> ListQuotas(const auth::Principal& who,
                                                const std::string& tenant);
  // What `tenant` (empty: every tenant, for callers who see all) and each of its projects hold
  // now of every resource it holds or has a quota on, against its quotas: the workloads that
  // hold capacity, as stored. Same callers and errors as ListQuotas. Ordered by tenant, project
  // (the tenant's total first), resource.
  absl::StatusOr<std::vector<QuotaUsage>> QuotaUsageOf(const auth::Principal& who,
                                                       const std::string& tenant);
  // Preemption records newest first: those involving `tenant` (empty: every tenant's), with an id
  // below `before_id` (0: from the newest), `limit` of them (0: 100; at most kMaxPreemptionPage).
  // The same callers and errors as ListQuotas; INVALID_ARGUMENT naming page_size or page_token.
  // A caller who does not see every tenant sees another tenant's victims by tenant and size
  // only (no workload id, no project).
  // Sets a fair-share weight: a tenant's (platform admins), a project's (its tenant's admins
  // too). INVALID_ARGUMENT naming the field; PERMISSION_DENIED; NOT_FOUND (tenant, project).
  absl::StatusOr<ShareWeight> SetShareWeight(const auth::Principal& who, const ShareWeight& weight);
  // The fair shares the active scheduler reports (Scheduler::FairShareReport) of `tenant`
  // (empty: every tenant). The same callers and errors as ListQuotas.
  absl::StatusOr<std::vector<FairShare>> FairSharesOf(const auth::Principal& who,
                                                      const std::string& tenant);
  absl::StatusOr<PreemptionPage> ListPreemptions(const auth::Principal& who,
                                                 const std::string& tenant, int64_t before_id,
                                                 int limit);

  // ---- Audit (docs/security.md#audit) ----
  //
  // Every workload state change (submitted, admitted, placed with its repartitions, running,
  // ended, cancelled, requeued or ended after preemption or a cluster loss) is recorded by the
  // workload store in the transaction that makes it, with its actor ("user:<subject>",
  // "agent:<cluster>", "scheduler"); it cannot commit without its row. Every other mutating use
  // case above records one row (AuditEvent) after it ran: who, what, on which object, the
  // outcome (ok, denied, invalid, ...) and why; so does a refused submission, a cluster loss and
  // a reclaim's evictions. A call that succeeded is the row of the object's scope; one refused
  // or failed is the row of the caller's scope (its admins see what their credentials tried; the
  // target's never learn of it). A row that cannot be written is logged (error) and the use
  // case's answer stands: the change it records has committed.

  // The rows `who` may read (audit.read): every row at platform scope (`filter.tenant` may
  // narrow it), its tenant's at tenant scope, its project's at project scope. PERMISSION_DENIED
  // without audit.read; NOT_FOUND for a tenant filter outside the caller's scope;
  // INVALID_ARGUMENT naming page_size; FAILED_PRECONDITION when no audit log is configured.
  absl::StatusOr<AuditListing> ListAuditEvents(const auth::Principal& who, AuditFilter filter);
  // Walks the whole chain (audit.verify: platform admins). PERMISSION_DENIED;
  // FAILED_PRECONDITION when no audit log (or key) is configured; UNAVAILABLE.
  absl::StatusOr<AuditVerification> VerifyAudit(const auth::Principal& who);
  // Chains the audit rows recorded and not chained yet (AuditLog::Seal); 0 without an audit
  // trail. The control loop calls it every check interval.
  absl::StatusOr<int> SealAudit();

  // ---- Reports (report_use_cases.cc, docs/chargeback.md#reports) ----

  // The usage report `who` may read (usage.read): every tenant's lines at platform scope
  // (`query.tenant` and `project` may narrow it), its tenant's at tenant scope, its project's at
  // project scope. PERMISSION_DENIED without usage.read; NOT_FOUND for a tenant or project outside
  // the caller's scope; INVALID_ARGUMENT naming the field (ValidateUsageQuery, names, a project
  // without its tenant); FAILED_PRECONDITION when nothing is metered or the report is too big.
  // The idle guarantees come with it, narrowed the same way (none when the query names a
  // cluster: guarantees are on the whole pool).
  absl::StatusOr<UsageReportResult> UsageReport(const auth::Principal& who, UsageQuery query);
  // Each cluster's capacity cost over the window split into tenants' charges, idle and
  // unallocated (federation/cost_allocation.h): the clusters stored now, and any other that
  // usage was metered on in the window (its capacity counted as what was held of it), ordered by
  // name. Platform readers only (usage.read at platform scope): it shows every tenant's charges.
  // PERMISSION_DENIED; INVALID_ARGUMENT naming the field (the window, a cluster name);
  // NOT_FOUND for a cluster neither stored nor metered; FAILED_PRECONDITION when nothing is
  // metered.
  absl::StatusOr<CostReport> CostAllocationReport(const auth::Principal& who,
                                                  const CostQuery& query);
  // The telemetry minutes kept for workload `id` in [from, to) (MeteringStore::ListTelemetry):
  // whoever may read the workload may read them. NOT_FOUND as GetWorkload; INVALID_ARGUMENT for
  // to <= from or a limit outside 1..10000; FAILED_PRECONDITION when nothing is metered.
  absl::StatusOr<std::vector<TelemetryRow>> WorkloadTelemetry(const auth::Principal& who,
                                                              WorkloadId id, Timestamp from,
                                                              Timestamp to, int limit);

  // ---- Operations ----

  // What the control plane does once, before it serves: the agent registry learns every stored
  // cluster, so that one whose agent never reconnects is marked unreachable after the heartbeat
  // timeout. The store's error (UNAVAILABLE) if it cannot be read.
  absl::Status Start();
  // Refreshes the gauges read from the store (workloads per state, every state reported, 0
  // included) through the metrics port; the metrics endpoint calls it before each scrape. The
  // scheduler's queue length is the control loop's to report (ControlMetrics::PendingQueue).
  // On a store error the gauges keep their last values and the error is returned.
  absl::Status RefreshGauges();

  // ---- The control loop's use cases ----

  // Moves a cluster to `state` (unreachable: no new work goes there).
  absl::Status MarkClusterState(const std::string& cluster, ClusterState state);
  // The cluster's agent has been silent past the heartbeat timeout (`detail` says so). In one
  // transaction: the cluster becomes unreachable at a new epoch, and every workload it held
  // ends its attempt by the one rule of federation/failover.h (back to PENDING if it may retry,
  // else LOST). Then a connection of its agent still at the old epoch is closed: the agent
  // registers again, learns the new epoch and is told to stop what it runs. Calling it again
  // for a cluster already unreachable keeps the epoch and finishes what an interrupted call
  // left (nothing, if nothing is left). NOT_FOUND for an unknown cluster; UNAVAILABLE.
  absl::StatusOr<ClusterLoss> LoseCluster(const std::string& cluster, const std::string& detail);
  // Finishes the losses a crash interrupted: every cluster stored unreachable whose workloads
  // still hold capacity there. The control loop calls it when it becomes the active scheduler.
  absl::Status ResumeClusterLosses();
  // Moves workloads that ended more than `after` ago out of the hot table
  // (WorkloadStore::ArchiveFinished), `batch` at a time, at most `max_batches` batches so that a
  // backlog does not hold up scheduling; returns how many moved. The store's error (UNAVAILABLE)
  // after the batches that committed.
  absl::StatusOr<int> ArchiveFinished(std::chrono::nanoseconds after, int batch, int max_batches);
  // Meters the runs still going up to the last whole hour (MeteringStore::MeterRunning), `batch`
  // runs at a time,
  // at most `max_batches` batches; returns how many runs it metered. The store's error
  // (UNAVAILABLE) after the batches that committed.
  absl::StatusOr<int> MeterRunning(int batch, int max_batches);
  // Deletes telemetry minutes kept longer than `keep` (MeteringStore::PruneTelemetry), batched as
  // MeterRunning; returns how many.
  absl::StatusOr<int> PruneTelemetry(std::chrono::nanoseconds keep, int batch, int max_batches);
  // Tells the metrics port each tenant's usage this month so far (ControlMetrics::TenantUsage).
  absl::Status ReportTenantUsage();
  // Adds what the guarantees of `usage` (the active scheduler's quota ledger) reserved and left
  // idle over [from, to) to the idle-guarantee sums (MeteringStore::RecordGuarantees). Nothing
  // without a metering store. The store's error (UNAVAILABLE).
  absl::Status RecordGuarantees(const std::vector<QuotaUsage>& usage, Timestamp from, Timestamp to);
  // What a scheduling cycle committed (admissions and placements): Watch streams get the
  // events, agents the placements.
  void Scheduled(const std::vector<WorkloadEvent>& events);
  // Stops the victims of the scheduler's reclaims (docs/quotas.md#reclaim): each is marked to
  // be evicted (a preemption, with the plan's message) and its agent told to stop it; its
  // confirmed stop returns it to PENDING or ends it by the failover rule. Victims that moved on
  // meanwhile are skipped. Returns the workloads marked; the store's error (UNAVAILABLE), in
  // which case the caller tells the scheduler (Scheduler::NotifyReclaimFailed).
  absl::StatusOr<std::vector<Workload>> Reclaim(const std::vector<ReclaimPlan>& reclaims);

 private:
  // The mutating use cases as they run unrecorded; each public one above calls its own and
  // records the outcome (audit_use_cases.cc).
  void SubmitUnaudited(const auth::Principal& who, absl::StatusOr<WorkloadSpec> spec,
                       absl::Time deadline, SubmitDone done);
  absl::StatusOr<Workload> CancelUnaudited(const auth::Principal& who, WorkloadId id,
                                           std::string reason, AuditEvent record);
  //
  // Those that take `record` (the call's audit row, from Recorded) hand it to the store, which
  // records it in the change's own transaction (federation/store.h); some add to its detail
  // what only they know. The public one records only a failure.
  absl::StatusOr<std::vector<DeclarationDiff>> ApplyDeclarationsUnaudited(
      const auth::Principal& who, std::vector<ClusterDeclaration> declarations, bool dry_run,
      AuditEvent record);
  absl::StatusOr<ClusterListing> CordonUnaudited(const auth::Principal& who,
                                                 const std::string& cluster,
                                                 const std::string& node, bool cordoned,
                                                 const AuditEvent& record);
  absl::StatusOr<DrainResult> DrainUnaudited(const auth::Principal& who, const std::string& cluster,
                                             const std::string& node, bool evict);
  absl::StatusOr<std::shared_ptr<AgentLink>> RegisterAgentUnaudited(
      const auth::Principal& who, const ClusterInfo& info, const std::vector<NodeInfo>& nodes,
      const std::vector<AgentReport>& known, std::shared_ptr<AgentChannel> channel,
      const AuditEvent& record);
  absl::StatusOr<Tenant> CreateTenantUnaudited(const auth::Principal& who, Tenant tenant,
                                               const AuditEvent& record);
  absl::StatusOr<Project> CreateProjectUnaudited(const auth::Principal& who, const Project& project,
                                                 const AuditEvent& record);
  absl::Status DeleteProjectUnaudited(const auth::Principal& who, const std::string& tenant,
                                      const std::string& name, const AuditEvent& record);
  absl::Status DeleteTenantUnaudited(const auth::Principal& who, const std::string& name,
                                     const AuditEvent& record);
  absl::StatusOr<CreatedToken> CreateTokenUnaudited(const auth::Principal& who,
                                                    const TokenRequest& request,
                                                    const AuditEvent& audit);
  absl::Status RevokeTokenUnaudited(const auth::Principal& who, int64_t id,
                                    const AuditEvent& record);
  absl::StatusOr<Quota> SetQuotaUnaudited(const auth::Principal& who, const Quota& quota,
                                          bool overcommit, const AuditEvent& record);
  absl::Status DeleteQuotaUnaudited(const auth::Principal& who, const QuotaKey& key,
                                    const AuditEvent& record);
  absl::StatusOr<ShareWeight> SetShareWeightUnaudited(const auth::Principal& who,
                                                      const ShareWeight& weight,
                                                      const AuditEvent& record);
  absl::Status DeleteClusterUnaudited(const auth::Principal& who, const std::string& name,
                                      const AuditEvent& record);
  absl::StatusOr<IssuedClusterCertificate> EnrollClusterUnaudited(const auth::Principal& who,
                                                                  const std::string& cluster,
                                                                  const std::string& csr_pem,
                                                                  AuditEvent record);
  absl::StatusOr<int> RevokeClusterUnaudited(const auth::Principal& who, const std::string& cluster,
                                             const AuditEvent& record);
  absl::StatusOr<BindingChange> SetRoleBindingUnaudited(const auth::Principal& who,
                                                        const RoleBinding& binding,
                                                        const AuditEvent& record);
  absl::StatusOr<BindingChange> DeleteRoleBindingUnaudited(const auth::Principal& who,
                                                           const std::string& subject,
                                                           const std::string& tenant,
                                                           const std::string& project,
                                                           const AuditEvent& record);

  // Records what `who` asked for and how it ended. `scope` is where the object lives: the row's
  // scope when `status` is OK; otherwise the row is the caller's scope's.
  void AuditCall(const auth::Principal& who, absl::string_view action, std::string object,
                 auth::Scope scope, const absl::Status& status, std::string detail = {});
  // The row AuditCall would record for the call succeeding, for the store to record with the
  // change; an empty row (nothing recorded) when this control plane keeps no audit trail.
  [[nodiscard]] AuditEvent Recorded(const auth::Principal& who, absl::string_view action,
                                    std::string object, auth::Scope scope,
                                    std::string detail = {}) const;
  // AuditCall for a call that failed (the store recorded one that succeeded); nothing when
  // `status` is OK.
  void AuditFailure(const auth::Principal& who, absl::string_view action, std::string object,
                    auth::Scope scope, const absl::Status& status, std::string detail = {});

  // ClusterListing::visible for `who`: nullopt in platform scope, else its tenant's workloads
  // that hold capacity. UNAVAILABLE.
  absl::StatusOr<std::optional<absl::flat_hash_set<WorkloadId>>> VisibleHolders(
      const auth::Principal& who);

  // A committed change to one cluster: registered or given a new inventory (the cluster as
  // stored), or moved to another state.
  struct ClusterStateChange {
    std::string cluster;
    ClusterState state;
  };
  using ClusterChange = std::variant<std::reference_wrapper<const Cluster>, ClusterStateChange>;

  // The one after-commit sequence. `events` are committed state changes; `cancel_requested`
  // are workloads still on a cluster whose agent must now stop them.
  void AfterCommit(const std::vector<WorkloadEvent>& events,
                   const std::vector<Workload>& cancel_requested = {});
  // The transitions that end the attempts `lost` reports name (the agent stopped them when its
  // lease ran out), for those still on link's cluster at the reported attempt.
  absl::StatusOr<std::vector<Transition>> LeaseEnds(const AgentLink& link,
                                                    const std::vector<const AgentReport*>& lost);
  // The one after-commit sequence for a cluster: the scheduler learns of the change, then the
  // control loop is woken (work may fit there now, or must stop going there).
  void AfterClusterCommit(const ClusterChange& change);
  absl::Status ApplyReports(AgentLink& link, const std::vector<AgentReport>& reports);
  absl::StatusOr<Workload> GetVisible(const auth::Principal& who, WorkloadId id);
  // Stores `evictions` and tells the agents to stop what was marked; returns it.
  absl::StatusOr<std::vector<Workload>> Evict(
      const std::vector<WorkloadStore::Eviction>& evictions);
  // Stores `evictions` and counts them; returns what was marked. The caller tells the agents.
  absl::StatusOr<std::vector<Workload>> MarkEvictions(
      const std::vector<WorkloadStore::Eviction>& evictions);

  // The tokens `ids` changed (revoked, or their role lowered) in a committed transaction: what
  // they have open in this process ends now, not when they next ask.
  void CredentialsChanged(const std::vector<int64_t>& ids);
  // The scope a token or binding request names, as a ListTokens-style listing resolves it:
  // naming no tenant, the caller's own. INVALID_ARGUMENT naming the field; NOT_FOUND for a scope
  // the caller does not administer any of.
  static absl::StatusOr<std::pair<std::string, std::string>> AdministeredScope(
      const auth::Principal& who, const std::string& tenant, const std::string& project);

  // A committed quota change: the scheduler reads the quotas again.
  void QuotasChanged();

  void Wake() {
    if (wake_) wake_();
  }

  const ControlPlanePorts ports_;
  const ControlPlaneOptions options_;
  ControlMetrics default_metrics_;
  ControlMetrics* const metrics_;
  std::function<void()> wake_;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_CONTROL_PLANE_H_
