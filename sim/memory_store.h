#ifndef GPUFED_SIM_MEMORY_STORE_H_
#define GPUFED_SIM_MEMORY_STORE_H_

// The storage ports (federation/store.h) in memory: for the quota scenarios the simulator runs on
// the live scheduling code (sim/scenario.h), and for fast unit tests of the domain: no
// PostgreSQL, no threads, no sleeps, time from an injected clock.
//
// It behaves as storage::PgStore does (storage/pg_store.h lists the details: validation,
// status codes, guarded transitions with event rows, version bumps, cancel semantics, list
// order and paging, cluster epochs). tests/storage/store_contract_test.cc runs one suite
// against both so that they cannot drift; where they differ PgStore is the reference.
// What it does not model: group commit and its queue limit (Submit never answers
// UNAVAILABLE), connection pools, and token revocation (PgStore revokes by SQL only).
//
// Times: every time the store writes itself (create/update times, a transition without its
// own time, heartbeats at registration) comes from the clock port (federation/clock.h), read
// once per call, and is kept to the microsecond as PostgreSQL keeps it. The clock is either the
// one given to the constructor (the test's FakeClock, shared with the code under test) or, by
// default, the store's own FakeClock, which moves only when the test moves it
// (clock().Advance(...)).
//
// Thread-safe: one mutex guards everything, so every call is atomic (as a transaction).
// The clock is called with that mutex held and must not call back into the store.
//
// In CMake: part of gpufed_sim (tests: tests/support/memory_store.cmake, gpufed_test_memory).

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "federation/audit.h"
#include "federation/clock.h"
#include "federation/store.h"
#include "federation/types.h"

namespace gpufed::sim {

class MemoryStore final : public WorkloadStore,
                          public ClusterStore,
                          public TenantStore,
                          public QuotaStore,
                          public ClusterCertificateStore,
                          public MeteringStore {
 public:
  // Time from the store's own FakeClock (clock()).
  MemoryStore();
  // Time from `clock`, which must outlive the store; clock() is then unused.
  explicit MemoryStore(const Clock* clock);
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // The clock of a default-constructed store.
  FakeClock& clock() { return own_clock_; }

  // One row of a workload's history, as PgStore writes to workload_events.
  struct EventRow {
    WorkloadId workload_id = 0;
    Timestamp time{};
    WorkloadState from = WorkloadState::kUnspecified;  // unspecified: the submission
    WorkloadState to = WorkloadState::kUnspecified;
    std::string actor;
    std::string reason;
  };
  // The event rows of workload `id` (0: of every workload), oldest first.
  std::vector<EventRow> Events(WorkloadId id = 0) const;
  // From now on, every event row is recorded in `audit` too, as it is written (what
  // PostgreSQL's trigger on workload_events does, migrations/0023_audit.sql). `audit` must
  // outlive the store; null stops it.
  void RecordAuditIn(AuditLog* audit);

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
  absl::StatusOr<Workload> Get(WorkloadId id) override;
  absl::StatusOr<WorkloadPage> List(const ListFilter& filter) override;
  absl::StatusOr<std::vector<Workload>> ListChangedAfter(const std::string& tenant,
                                                         Timestamp after_time, WorkloadId after_id,
                                                         int limit) override;
  absl::StatusOr<std::vector<Workload>> ListPending(int limit) override;
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
  absl::StatusOr<int> ArchiveFinished(Timestamp ended_before, int limit) override;
  absl::StatusOr<std::vector<Workload>> RequestEvictions(
      const std::vector<Eviction>& evictions) override;
  absl::StatusOr<PreemptionResult> RequestPreemptions(const std::vector<Preemption>& preemptions,
                                                      const AuditEvent& record) override;
  absl::StatusOr<std::vector<PreemptionRecord>> ListPreemptions(const std::string& tenant,
                                                                int64_t before_id,
                                                                int limit) override;
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
  absl::StatusOr<int64_t> CountTokens() override;
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
  absl::Status SaveUsage(const UsageSnapshot& usage) override;
  absl::StatusOr<UsageSnapshot> LoadUsage() override;

  // ---- MeteringStore ----
  // How runs are metered from now on (default: MeteringPolicy's).
  void SetMeteringPolicy(const MeteringPolicy& policy);
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

 private:
  // RequestCancel with the lock held, recording nothing.
  absl::StatusOr<CancelResult> CancelLocked(WorkloadId id, const std::string& actor,
                                            const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ApplyTransitions on valid transitions, with the lock held.
  std::vector<TransitionResult> ApplyLocked(const std::vector<Transition>& transitions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks valid evictions; returns the workloads marked, in id order.
  std::vector<Workload> MarkLocked(const std::vector<Eviction>& evictions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A move to PLACED on a cluster that is unreachable or at another epoch (PgStore's fence).
  bool Fenced(const Transition& t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `c` as the store hands it out: node cordons applied to its nodes, its declaration set.
  Cluster AsStored(Cluster c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The declaration of `cluster`; empty (cluster "") when there is none.
  ClusterDeclaration DeclaredLocked(const std::string& cluster) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The clock's time, to the microsecond.
  Timestamp Now() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `run`'s span [from, to) on its cluster as stored (PgStore's MeterSpan call).
  void MeterLocked(const Workload& run, Timestamp from, Timestamp to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `record` in audit_ when RecordAuditIn set one (and it has an action).
  void Record(const AuditEvent& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `row` to events_ and, with RecordAuditIn set, its audit row for `w` (the workload
  // after the change).
  void RecordEvent(EventRow row, const Workload& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FakeClock own_clock_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  std::map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, Project> projects_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TokenRecord> tokens_ ABSL_GUARDED_BY(mu_);      // live ones, by hash
  std::map<int64_t, TokenRecord> revoked_tokens_ ABSL_GUARDED_BY(mu_);  // by id
  std::set<std::string> revoked_hashes_ ABSL_GUARDED_BY(mu_);           // never live again
  int64_t next_token_id_ ABSL_GUARDED_BY(mu_) = 1;
  // By (tenant, project, subject): the order ListRoleBindings promises.
  std::map<std::tuple<std::string, std::string, std::string>, RoleBinding> bindings_
      ABSL_GUARDED_BY(mu_);
  std::vector<PreemptionRecord> preemptions_ ABSL_GUARDED_BY(mu_);               // oldest first
  std::map<std::string, ClusterCertificate> certificates_ ABSL_GUARDED_BY(mu_);  // by serial
  std::map<std::pair<std::string, std::string>, ShareWeight> weights_ ABSL_GUARDED_BY(mu_);
  UsageSnapshot usage_ ABSL_GUARDED_BY(mu_);
  // By (tenant, project, resource): the order ListQuotas promises.
  std::map<std::tuple<std::string, std::string, std::string>, Quota> quotas_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Cluster> clusters_ ABSL_GUARDED_BY(mu_);
  // Admin declarations by cluster name, apart from clusters_ (which registration rewrites): one
  // may exist before its cluster registers.
  std::map<std::string, ClusterDeclaration> declarations_ ABSL_GUARDED_BY(mu_);
  // (cluster, node) an operator cordoned; applied when a cluster is read (AsStored).
  std::set<std::pair<std::string, std::string>> node_cordons_ ABSL_GUARDED_BY(mu_);
  std::map<WorkloadId, Workload> workloads_ ABSL_GUARDED_BY(mu_);
  std::map<WorkloadId, Workload> archive_ ABSL_GUARDED_BY(mu_);  // ArchiveFinished
  // (tenant, idempotency key) -> workload.
  std::map<std::pair<std::string, std::string>, WorkloadId> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<EventRow> events_ ABSL_GUARDED_BY(mu_);
  MeteringPolicy metering_ ABSL_GUARDED_BY(mu_);
  // RUNNING workloads' metering marks (migrations/0024's workloads.metered_until).
  std::map<WorkloadId, Timestamp> marks_ ABSL_GUARDED_BY(mu_);
  // Usage records by their primary key (workload, attempt, replica, gpu_uuid, from).
  std::map<std::tuple<WorkloadId, uint32_t, uint32_t, std::string, Timestamp>, UsageRecord>
      usage_records_ ABSL_GUARDED_BY(mu_);
  // Telemetry minutes kept, by migrations/0025's key (cluster, gpu_uuid, mig_profile, mig_start,
  // minute, workload), and every minute that measured something, for reports (usage_daily's
  // sums, which pruning does not change).
  std::map<std::tuple<std::string, std::string, std::string, uint32_t, Timestamp, WorkloadId>,
           TelemetryRow>
      telemetry_ ABSL_GUARDED_BY(mu_);
  std::vector<TelemetryUse> measured_ ABSL_GUARDED_BY(mu_);
  // Idle guarantees, by (day, tenant, project, resource) as migrations/0026's guarantee_daily.
  std::map<std::tuple<Timestamp, std::string, std::string, std::string>, GuaranteeUse> guarantees_
      ABSL_GUARDED_BY(mu_);
  AuditLog* audit_ ABSL_GUARDED_BY(mu_) = nullptr;
  WorkloadId last_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_MEMORY_STORE_H_
