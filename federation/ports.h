#ifndef GPUFED_FEDERATION_PORTS_H_
#define GPUFED_FEDERATION_PORTS_H_

// The ports the use cases reach the outside through, besides the stores (store.h) and the clock
// (clock.h). Each is implemented once for real (api/ for events and agent channels, storage/
// for the leader lock, api/metrics for Prometheus) and faked in tests.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/fair_share.h"
#include "federation/pool_report.h"
#include "federation/preemption.h"
#include "federation/quota.h"
#include "federation/store.h"
#include "federation/types.h"

namespace gpufed {

// Where committed workload events go (Watch streams in this process). Publish is called after
// the transaction that made the events committed; it must only enqueue, never block.
// Thread-safe.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void Publish(const std::vector<WorkloadEvent>& events) = 0;
};

// One agent's connection, as the transport provides it. Sends never block (they queue); a
// closed channel drops what it is given. Thread-safe.
class AgentChannel {
 public:
  virtual ~AgentChannel() = default;
  // The agent is registered under `cluster` at `epoch`; sent once, first.
  virtual void SendRegistered(const Cluster& cluster) = 0;
  // Run these (the agent ignores work it already runs).
  virtual void SendAssignments(const std::vector<Workload>& workloads) = 0;
  // Stop these.
  virtual void SendCancels(const std::vector<WorkloadId>& ids) = 0;
  // Why a connection is ended: a newer one for the same cluster took over (the agent should not
  // come straight back: it would take the cluster back and flap), the cluster moved on to a
  // new epoch without it (the agent should register again at once), or the credential it
  // registered with was revoked (it may not come back with it).
  enum class CloseReason { kReplaced, kFenced, kRevoked };
  // Ends the connection.
  virtual void Close(CloseReason reason, const std::string& why) = 0;
};

// Ends what a revoked API token still has open in this process besides agent connections
// (which the control plane closes itself): remembered authentications and Watch streams. Called
// after the revocation committed; must only enqueue or flag, never block. Thread-safe.
class CredentialSink {
 public:
  virtual ~CredentialSink() = default;
  virtual void Revoked(int64_t token_id) = 0;
};

// A certificate issued to a cluster, with what the agent needs to use it.
struct IssuedClusterCertificate {
  std::string cert_pem;
  std::string key_pem;  // PEM; empty when issued for the caller's CSR
  std::string ca_cert_pem;
  ClusterCertificate certificate;  // what the store records of it (serial, cluster, validity)
};

// Issues the certificates agents present on mutual TLS (the cluster CA, auth/cluster_ca.h,
// behind it). Thread-safe.
class ClusterCertificateIssuer {
 public:
  virtual ~ClusterCertificateIssuer() = default;
  // A certificate naming `cluster`, valid from `now` for the configured lifetime: for the public
  // key of `csr_pem` (its subject ignored), or, when it is empty, for a new key pair.
  // INVALID_ARGUMENT naming csr_pem for a CSR that is too big, does not parse or whose signature
  // does not verify; FAILED_PRECONDITION when the CA has expired.
  virtual absl::StatusOr<IssuedClusterCertificate> Issue(const std::string& cluster,
                                                         const std::string& csr_pem,
                                                         Timestamp now) = 0;
};

// "Only one scheduler is active." Not thread-safe: one owner (the control loop).
class LeaderElector {
 public:
  virtual ~LeaderElector() = default;
  // True if this process leads afterwards. Never blocks for long.
  virtual bool TryAcquire() = 0;
  // False when leadership was lost: stop acting as leader before trying again.
  virtual bool StillHeld() = 0;
  virtual void Release() = 0;
};

// What the use cases count, for dashboards. The default does nothing. Thread-safe.
class ControlMetrics {
 public:
  virtual ~ControlMetrics() = default;
  virtual void SubmissionCreated() {}
  virtual void SubmissionReplayed() {}
  virtual void SubmissionRejected() {}
  virtual void AgentReports(size_t /*count*/) {}
  virtual void Leading(bool /*leading*/) {}
  virtual void CycleDone(double /*seconds*/, size_t /*placed*/, int /*repartitions*/) {}
  virtual void PendingQueue(int /*length*/) {}
  // Workloads in the store in `state` (ControlPlane::RefreshGauges reports every state).
  virtual void WorkloadsInState(WorkloadState /*state*/, int64_t /*count*/) {}
  // A cluster was declared lost: `requeued` workloads went back to PENDING for another attempt,
  // `ended` ended (LOST, or CANCELLED when a cancel was pending).
  virtual void ClusterLost(size_t /*requeued*/, size_t /*ended*/) {}
  // `count` workloads were told to stop so that their attempts end by `why` (evictions).
  virtual void Evicted(AttemptEnd /*why*/, size_t /*count*/) {}
  // One preemption stopped `victims` workloads, losing `gpu_seconds_lost` GPU-seconds of work.
  virtual void Preempted(PreemptionCause /*cause*/, size_t /*victims*/,
                         double /*gpu_seconds_lost*/) {}
  // Every quota with what its holder holds now (the active scheduler's ledger); a quota missing
  // from `rows` was deleted.
  virtual void Quotas(const std::vector<QuotaUsage>& /*rows*/) {}
  // Every active tenant's and project's fair share (Scheduler::FairShareReport); one missing
  // from `rows` is no longer active.
  virtual void FairShares(const std::vector<FairShare>& /*rows*/) {}
  // The active scheduler's pool by cluster and GPU model and its queue by reason code
  // (Scheduler::Report), after a cycle at most every ControlLoopOptions::pool_report_interval; an
  // empty report when this server stops being the active scheduler (a standby reports nothing).
  virtual void PoolState(const PoolReport& /*report*/) {}
  // An agent's telemetry report: `kept` minutes counted, `ignored` refused (too old, from the
  // future, a repeat, or of work not on its cluster).
  virtual void TelemetryMinutes(size_t /*kept*/, size_t /*ignored*/) {}
  // Each tenant's usage this month so far (UTC), one line per tenant (keys: the tenant), after
  // each meter pass of the active scheduler.
  virtual void TenantUsage(const std::vector<UsageLine>& /*month_to_date*/) {}
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_PORTS_H_
