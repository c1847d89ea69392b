#ifndef GPUFED_STORAGE_PG_STORE_H_
#define GPUFED_STORAGE_PG_STORE_H_

// The PostgreSQL implementation of the storage ports (federation/store.h). Schema:
// migrations/*.sql; decisions: docs/storage.md.
//
// Submit is group-committed: callers enqueue their spec (SubmitAsync returns at once, Submit
// blocks); a committer thread takes everything queued (up to Options::max_group_size), drops
// what outlived its deadline, inserts the rest in ONE transaction (one WAL flush for the whole
// group), then runs each caller's callback with its own result. One caller's bad row
// (unknown project, idempotency conflict) does not fail the others. (Options::committers
// such threads may run; one is the default.)
//
// Everything else runs on bounded connection pools — one for the calls of people and programs,
// one for the control path (agents and the scheduler) — where a call waits at most
// Options::acquire_timeout (or its request's deadline) for a connection, then answers
// UNAVAILABLE (DEADLINE_EXCEEDED).
//
// Thread-safe. Behaviour beyond store.h's comments:
//   - Submit: INVALID_ARGUMENT if spec.tenant, spec.project or spec.name is empty; NOT_FOUND
//     naming spec.tenant / spec.project; ALREADY_EXISTS naming spec.idempotency_key.
//     UNAVAILABLE at once when Options::max_queued_submits are already waiting.
//   - ApplyTransitions: INVALID_ARGUMENT (and nothing applied) if any transition lacks id,
//     from or to, has from == to, or goes to PLACED without an assignment naming a cluster.
//     Several transitions of one workload in one batch apply in order. PLACED stores the
//     assignment (and its cluster/epoch); RUNNING sets the start time; SUCCEEDED, FAILED and
//     CANCELLED set the end time; exit_code and a non-empty message are stored when given.
//     Returning to PENDING clears the assignment and start time and sets pending_reason to
//     kRequeued with the transition's reason as its words; leaving PENDING clears
//     pending_reason. Every applied transition bumps version.
//   - pending_reason is stored as code, figures and words (migrations/0003); a row whose code
//     this build does not know reads back as kUnclassified with the stored words.
//   - RequestCancel: PREEMPTED and LOST (which hold no capacity) are cancelled at once like
//     PENDING and ADMITTED. NOT_FOUND for an unknown id. Repeating it on PLACED/RUNNING is a
//     no-op.
//   - SetClusterState: entering `unreachable` from another state bumps the cluster's epoch
//     (fencing its agent: docs/domain.md#agents-and-fencing). NOT_FOUND for an unknown cluster.
//   - RecordHeartbeat never moves last_heartbeat backwards. NOT_FOUND for an unknown cluster.
//   - RegisterCluster: INVALID_ARGUMENT for an inventory that federation/validation.h's
//     ValidateInventory refuses (fields named as it names them, "register.inventory.nodes[1]...")
//     or a figure a bigint column cannot hold. Also records a heartbeat. GetCluster includes
//     nodes; ListClusters only if asked.
//   - Declarations (migrations/0017) are one jsonb document per cluster, apart from the
//     clusters table: RegisterCluster never writes them, and every Cluster returned (Register,
//     Get, List, SetCordon, LoseCluster) carries its declaration (Cluster::declared).
//     PutDeclarations stores the batch in one statement, all or nothing: INVALID_ARGUMENT for
//     what ValidateDeclaration refuses ("declarations[i]...") or a cluster named twice.
//     Prices' effective_from is kept to the microsecond.
//   - LookupToken: NOT_FOUND for unknown or revoked tokens. CountTokens counts unrevoked ones.
//     CreateToken: INVALID_ARGUMENT for a role outside auth::Role, a tenant role without tenant
//     or an agent token without cluster; NOT_FOUND for an unknown tenant. Roles are stored by
//     auth::RoleName and read back with auth::ParseRole (INTERNAL for a name it does not know).
//   - ListProjects: NOT_FOUND for an unknown tenant.
//   - Cluster certificates (migrations/0021) are keyed by serial; a serial that is not upper-case
//     hexadecimal is refused by the table (INVALID_ARGUMENT).
//   - SetQuota takes transaction-scoped advisory locks on the tenant's quotas and then on the
//     resource (always in that order), so the per-tenant cap and `check` see every other write
//     to them committed or not yet started.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "federation/clock.h"
#include "federation/store.h"

namespace gpufed::storage {

class PgPool;
struct PendingSubmit;

struct PgStoreOptions {
  // Connections for the calls of people and programs (reads, cancels, tenancy).
  int pool_size = 8;
  // Connections, apart from those, for the control path: agents' status reports, heartbeats and
  // inventories, and the scheduler's reads and commits. A burst of user calls never makes an
  // agent or the scheduler wait for a connection.
  int control_pool_size = 4;
  // Longest wait for a free connection before UNAVAILABLE.
  absl::Duration acquire_timeout = absl::Seconds(5);
  // Server-side cap on one statement (DEADLINE_EXCEEDED past it).
  absl::Duration statement_timeout = absl::Seconds(30);
  // Most submits committed in one transaction.
  int max_group_size = 512;
  // Committer threads, each with its own connection. One is best measured (docs/storage.md):
  // more split the queue into smaller groups, each paying its own WAL flush.
  int committers = 1;
  // Threads that run the callbacks of committed submissions (answering the callers), so that
  // the committer starts the next group at once.
  int completion_threads = 2;
  // Submits waiting for the committer beyond which Submit answers UNAVAILABLE at once.
  int max_queued_submits = 8192;
  // What deadlines are measured against (a submit's, a request's). Null: the process's
  // SystemClock; the server passes its own.
  const Clock* clock = nullptr;
  // How runs are metered (federation/metering.h); times are the database's.
  MeteringPolicy metering;
};

class PgStore final : public WorkloadStore,
                      public ClusterStore,
                      public TenantStore,
                      public QuotaStore,
                      public ClusterCertificateStore,
                      public MeteringStore {
 public:
  using Options = PgStoreOptions;

  // Connects (UNAVAILABLE if the database cannot be reached) and checks that the schema is
  // the one this build knows (FAILED_PRECONDITION otherwise: run MigrateDatabase first).
  static absl::StatusOr<std::unique_ptr<PgStore>> Create(const std::string& dsn, Options options);
  static absl::StatusOr<std::unique_ptr<PgStore>> Create(const std::string& dsn) {
    return Create(dsn, Options());
  }

  // Commits the submits already queued, then stops the committer.
  ~PgStore() override;
  PgStore(const PgStore&) = delete;
  PgStore& operator=(const PgStore&) = delete;

  // ---- WorkloadStore ----
  using WorkloadStore::RequestCancel;
  using WorkloadStore::RequestPreemptions;
  using WorkloadStore::Submit;
  // The overloads that record nothing (federation/store.h).
  using ClusterCertificateStore::AddClusterCertificate;
  using ClusterCertificateStore::RevokeCluster;
  using ClusterStore::DeleteCluster;
  using ClusterStore::LoseCluster;
  using ClusterStore::PutDeclarations;
  using ClusterStore::RegisterCluster;
  using ClusterStore::SetCordon;
  using QuotaStore::DeleteQuota;
  using QuotaStore::SetQuota;
  using QuotaStore::SetShareWeight;
  using TenantStore::CreateProject;
  using TenantStore::CreateTenant;
  using TenantStore::CreateToken;
  using TenantStore::DeleteProject;
  using TenantStore::DeleteRoleBinding;
  using TenantStore::DeleteTenant;
  using TenantStore::RevokeToken;
  using TenantStore::SetRoleBinding;
  absl::StatusOr<SubmitResult> Submit(const WorkloadSpec& spec, const PendingReason& reason,
                                      const std::string& actor) override;
  void SubmitAsync(const WorkloadSpec& spec, const PendingReason& reason, const std::string& actor,
                   absl::Time deadline, SubmitCallback done) override;
  absl::StatusOr<Workload> Get(WorkloadId id) override;
  absl::StatusOr<WorkloadPage> List(const ListFilter& filter) override;
  absl::StatusOr<std::vector<Workload>> ListChangedAfter(const std::string& tenant,
                                                         Timestamp after_time, WorkloadId after_id,
                                                         int limit) override;
  absl::StatusOr<std::vector<Workload>> ListPending(int limit) override;
  absl::StatusOr<std::vector<PendingVersion>> ListPendingVersions(int limit) override;
  absl::StatusOr<std::vector<Workload>> GetWorkloads(std::vector<WorkloadId> ids) override;
  absl::StatusOr<std::vector<Workload>> ListActive(const std::string& cluster) override;
  absl::StatusOr<std::vector<WorkloadId>> ListHeldIds(const std::string& tenant,
                                                      const std::string& project) override;
  absl::StatusOr<std::vector<TransitionResult>> ApplyTransitions(
      const std::vector<Transition>& transitions) override;
  absl::Status SetPendingReasons(
      const std::vector<std::pair<WorkloadId, PendingReason>>& reasons) override;
  absl::StatusOr<CancelResult> RequestCancel(WorkloadId id, const std::string& actor,
                                             const std::string& reason,
                                             const AuditEvent& record) override;
  absl::StatusOr<std::vector<Workload>> RequestEvictions(
      const std::vector<Eviction>& evictions) override;
  absl::StatusOr<PreemptionResult> RequestPreemptions(const std::vector<Preemption>& preemptions,
                                                      const AuditEvent& record) override;
  absl::StatusOr<std::vector<PreemptionRecord>> ListPreemptions(const std::string& tenant,
                                                                int64_t before_id,
                                                                int limit) override;
  absl::StatusOr<int> ArchiveFinished(Timestamp ended_before, int limit) override;
  absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> CountByState() override;

  // ---- ClusterStore ----
  absl::StatusOr<Cluster> RegisterCluster(const ClusterInfo& info,
                                          const std::vector<NodeInfo>& nodes,
                                          const AuditEvent& record) override;
  absl::Status RecordHeartbeat(const std::string& cluster, Timestamp at) override;
  absl::Status SetClusterState(const std::string& cluster, ClusterState state) override;
  absl::StatusOr<LossResult> LoseCluster(const std::string& cluster, const LossPlan& plan,
                                         const AuditEvent& record) override;
  absl::StatusOr<Cluster> SetCordon(const std::string& cluster, const std::string& node,
                                    bool cordoned, const AuditEvent& record) override;
  absl::Status DeleteCluster(const std::string& cluster, const AuditEvent& record) override;
  absl::StatusOr<std::vector<Cluster>> ListClusters(bool include_nodes) override;
  absl::StatusOr<Cluster> GetCluster(const std::string& name) override;
  absl::StatusOr<std::vector<ClusterDeclaration>> ListDeclarations() override;
  absl::Status PutDeclarations(const std::vector<ClusterDeclaration>& declarations,
                               const AuditEvent& record) override;

  // ---- TenantStore ----
  absl::StatusOr<Tenant> CreateTenant(const Tenant& tenant, const AuditEvent& record) override;
  absl::StatusOr<std::vector<Tenant>> ListTenants() override;
  absl::StatusOr<Project> CreateProject(const Project& project, const AuditEvent& record) override;
  absl::StatusOr<std::vector<Project>> ListProjects(const std::string& tenant) override;
  absl::StatusOr<TokenRecord> CreateToken(const std::string& token_hash, const TokenRecord& record,
                                          const AuditEvent& audit) override;
  absl::StatusOr<TokenRecord> LookupToken(const std::string& token_hash) override;
  absl::StatusOr<std::vector<TokenRecord>> ListTokens(const std::string& tenant,
                                                      const std::string& project) override;
  absl::StatusOr<TokenRecord> RevokeToken(int64_t id, const std::string& tenant,
                                          const std::string& project,
                                          const AuditEvent& record) override;
  absl::Status DeleteProject(const std::string& tenant, const std::string& name,
                             const AuditEvent& record) override;
  absl::Status DeleteTenant(const std::string& name, const AuditEvent& record) override;
  absl::StatusOr<BindingChange> SetRoleBinding(const RoleBinding& binding,
                                               const AuditEvent& record) override;
  absl::StatusOr<BindingChange> DeleteRoleBinding(const std::string& subject,
                                                  const std::string& tenant,
                                                  const std::string& project,
                                                  const AuditEvent& record) override;
  absl::StatusOr<std::vector<RoleBinding>> ListSubjectRoleBindings(
      const std::string& subject) override;
  absl::StatusOr<std::vector<RoleBinding>> ListRoleBindings(const std::string& tenant,
                                                            const std::string& project) override;
  absl::StatusOr<int64_t> CountTokens() override;

  // ---- ClusterCertificateStore ----
  absl::StatusOr<ClusterCertificate> AddClusterCertificate(const ClusterCertificate& certificate,
                                                           const AuditEvent& record) override;
  absl::StatusOr<ClusterCertificate> LookupClusterCertificate(const std::string& serial,
                                                              const std::string& cluster) override;
  absl::StatusOr<ClusterRevocation> RevokeCluster(const std::string& cluster,
                                                  const AuditEvent& record) override;

  // ---- QuotaStore ----
  absl::StatusOr<Quota> SetQuota(const Quota& quota, const QuotaCheck& check,
                                 const AuditEvent& record) override;
  absl::Status DeleteQuota(const QuotaKey& key, const AuditEvent& record) override;
  absl::StatusOr<std::vector<Quota>> ListQuotas(const std::string& tenant) override;
  absl::StatusOr<ShareWeight> SetShareWeight(const ShareWeight& weight,
                                             const AuditEvent& record) override;
  absl::StatusOr<std::vector<ShareWeight>> ListShareWeights() override;

  // ---- MeteringStore ----
  absl::StatusOr<int> MeterRunning(Timestamp until, int limit) override;
  absl::StatusOr<std::vector<UsageRecord>> ListUsage(const UsageFilter& filter) override;
  absl::StatusOr<std::vector<UsageLine>> ReportUsage(const UsageQuery& query) override;
  absl::StatusOr<int> RecordTelemetry(const std::string& cluster,
                                      const std::vector<TelemetryMinute>& minutes) override;
  absl::StatusOr<std::vector<TelemetryRow>> ListTelemetry(WorkloadId workload, Timestamp from,
                                                          Timestamp to, int limit) override;
  absl::StatusOr<int> PruneTelemetry(Timestamp before, int limit) override;
  absl::StatusOr<std::vector<HeldCost>> ReportHeldCosts(Timestamp from, Timestamp to,
                                                        const std::string& cluster) override;
  absl::Status RecordGuarantees(const std::vector<GuaranteeUse>& uses) override;
  absl::StatusOr<std::vector<GuaranteeLine>> ReportGuarantees(const UsageQuery& query) override;
  absl::Status SaveUsage(const UsageSnapshot& usage) override;
  absl::StatusOr<UsageSnapshot> LoadUsage() override;

  // ---- Operations ----
  // The applied schema version, read through the pool (for /readyz): proves the database
  // answers. UNAVAILABLE if it does not.
  absl::StatusOr<int64_t> SchemaVersion();

  struct Stats {
    int64_t submits = 0;        // submits committed or answered by the committer
    int64_t submit_groups = 0;  // transactions they took
    int64_t largest_group = 0;
    int64_t queued = 0;  // submits waiting for the committer right now
  };
  Stats GetStats() const;

 private:
  PgStore(Options options, std::unique_ptr<PgPool> pool, std::unique_ptr<PgPool> committer_pool,
          std::unique_ptr<PgPool> control_pool);

  void CommitterLoop();
  void CompletionLoop();
  // Commits a group and wakes its callers.
  void CommitGroup(const std::vector<PendingSubmit*>& group);
  // One attempt at a group: an outcome per entry, or an error for the whole group.
  absl::StatusOr<std::vector<absl::StatusOr<SubmitResult>>> CommitOnce(
      const std::vector<PendingSubmit*>& group);

  const Options options_;
  const std::unique_ptr<PgPool> pool_;
  // One connection per committer, so that submits never wait behind reads.
  const std::unique_ptr<PgPool> committer_pool_;
  // The control path's connections (Options::control_pool_size).
  const std::unique_ptr<PgPool> control_pool_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<PendingSubmit>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> committers_;

  // Committed submissions whose callers are still to be answered (CompletionLoop).
  absl::Mutex done_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::deque<std::unique_ptr<PendingSubmit>> done_ ABSL_GUARDED_BY(done_mu_);
  bool completers_stopping_ ABSL_GUARDED_BY(done_mu_) = false;
  std::vector<std::thread> completers_;
};

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_PG_STORE_H_
