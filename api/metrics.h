#ifndef GPUFED_API_METRICS_H_
#define GPUFED_API_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "federation/ports.h"
#include "federation/quota.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gpufed::api {

// The Prometheus series the API layer and the scheduler loop update. Created once per server;
// the prometheus-cpp metric objects are thread-safe.
struct Metrics {
  explicit Metrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& submissions;
  prometheus::Counter& submissions_created;   // new workloads committed
  prometheus::Counter& submissions_replayed;  // idempotent replays
  prometheus::Counter& submissions_rejected;  // any error
  prometheus::Family<prometheus::Gauge>& workloads_by_state;
  prometheus::Histogram& scheduler_cycle_seconds;
  prometheus::Counter& scheduler_placements;
  prometheus::Counter& mig_repartitions;  // MIG layout changes decided (partitioning authority)
  prometheus::Gauge& scheduler_pending;
  prometheus::Gauge& scheduler_leader;
  prometheus::Gauge& agents_connected;
  prometheus::Counter& agent_status_updates;
  prometheus::Counter& clusters_lost;  // clusters declared lost (heartbeat timeout)
  prometheus::Family<prometheus::Counter>& lost_workloads;
  prometheus::Counter& lost_workloads_requeued;        // back to PENDING for another attempt
  prometheus::Counter& lost_workloads_ended;           // LOST (no retry left) or CANCELLED
  prometheus::Family<prometheus::Counter>& evictions;  // by cause: preemption, node_failure
  // Quotas (docs/quotas.md): preemptions by reason and what they cost; per tenant, project and
  // resource the quota and what its holder holds (units: GPUs, or instances of a MIG profile).
  prometheus::Family<prometheus::Counter>& preemptions;
  prometheus::Family<prometheus::Counter>& preempted_workloads;
  prometheus::Family<prometheus::Counter>& gpu_seconds_lost;
  prometheus::Family<prometheus::Gauge>& quota_guaranteed;
  prometheus::Family<prometheus::Gauge>& quota_limit;
  prometheus::Family<prometheus::Gauge>& quota_used;
  prometheus::Family<prometheus::Gauge>& quota_borrowed;
  // Fair share (docs/quotas.md#fair-share) per tenant and project ("-" for the tenant's own row):
  // its weighted share of the pool (0..1), the GPU-equivalents it holds, its decayed usage.
  prometheus::Family<prometheus::Gauge>& fair_share;
  prometheus::Family<prometheus::Gauge>& fair_share_held;
  prometheus::Family<prometheus::Gauge>& fair_share_decayed_gpu_seconds;
  prometheus::Counter& writes_rate_limited;  // writes refused: their caller was over its rate
  prometheus::Counter& audit_rows_dropped;   // refused calls' rows not recorded (QueuedAuditLog)
  // The active scheduler's pool per cluster and GPU model (GPUs; fragmented: GPU-equivalents)
  // and its queue per reason code (PoolState).
  prometheus::Family<prometheus::Gauge>& pool_capacity;
  prometheus::Family<prometheus::Gauge>& pool_allocated;
  prometheus::Family<prometheus::Gauge>& pool_free;
  prometheus::Family<prometheus::Gauge>& pool_fragmented;
  prometheus::Family<prometheus::Gauge>& pool_fragmentation_ratio;
  prometheus::Family<prometheus::Gauge>& pending_by_reason;
  // Every RPC answered, by service, method and status code; unary ones timed (api/rpc_metrics.h).
  prometheus::Family<prometheus::Counter>& rpcs_handled;
  prometheus::Family<prometheus::Histogram>& rpc_seconds;
  // Chargeback (docs/chargeback.md#prometheus): each tenant's usage this UTC month so far, from
  // the report sums after each meter pass of the active scheduler: allocated and effective
  // GPU-hours, and cost (price-book currency units).
  prometheus::Family<prometheus::Gauge>& tenant_gpu_seconds;
  prometheus::Family<prometheus::Gauge>& tenant_effective_gpu_seconds;
  prometheus::Family<prometheus::Gauge>& tenant_cost;
  // Agents' telemetry minutes counted and ignored (docs/chargeback.md#telemetry).
  prometheus::Family<prometheus::Counter>& telemetry_minutes;
  prometheus::Counter& telemetry_minutes_kept;
  prometheus::Counter& telemetry_minutes_ignored;
};

// The control plane's metrics port, exported to Prometheus.
class PrometheusControlMetrics final : public ControlMetrics {
 public:
  explicit PrometheusControlMetrics(Metrics& metrics) : m_(metrics) {}
  void SubmissionCreated() override { m_.submissions_created.Increment(); }
  void SubmissionReplayed() override { m_.submissions_replayed.Increment(); }
  void SubmissionRejected() override { m_.submissions_rejected.Increment(); }
  void AgentReports(size_t count) override {
    m_.agent_status_updates.Increment(static_cast<double>(count));
  }
  void Leading(bool leading) override { m_.scheduler_leader.Set(leading ? 1 : 0); }
  void CycleDone(double seconds, size_t placed, int repartitions) override {
    m_.scheduler_cycle_seconds.Observe(seconds);
    if (placed > 0) m_.scheduler_placements.Increment(static_cast<double>(placed));
    if (repartitions > 0) m_.mig_repartitions.Increment(repartitions);
  }
  void PendingQueue(int length) override { m_.scheduler_pending.Set(length); }
  void ClusterLost(size_t requeued, size_t ended) override {
    m_.clusters_lost.Increment();
    m_.lost_workloads_requeued.Increment(static_cast<double>(requeued));
    m_.lost_workloads_ended.Increment(static_cast<double>(ended));
  }
  void Evicted(AttemptEnd why, size_t count) override {
    m_.evictions.Add({{"cause", std::string(AttemptEndName(why))}})
        .Increment(static_cast<double>(count));
  }
  void Preempted(PreemptionCause cause, size_t victims, double gpu_seconds_lost) override;
  void Quotas(const std::vector<QuotaUsage>& rows) override;
  void FairShares(const std::vector<FairShare>& rows) override;
  void PoolState(const PoolReport& report) override;
  void TelemetryMinutes(size_t kept, size_t ignored) override {
    m_.telemetry_minutes_kept.Increment(static_cast<double>(kept));
    m_.telemetry_minutes_ignored.Increment(static_cast<double>(ignored));
  }
  void TenantUsage(const std::vector<UsageLine>& month_to_date) override;
  void WorkloadsInState(WorkloadState state, int64_t count) override {
    m_.workloads_by_state.Add({{"state", std::string(StateName(state))}})
        .Set(static_cast<double>(count));
  }

 private:
  Metrics& m_;
  absl::Mutex quota_mu_;
  std::vector<prometheus::Labels> quota_labels_ ABSL_GUARDED_BY(quota_mu_);  // reported last
  std::vector<prometheus::Labels> share_labels_ ABSL_GUARDED_BY(quota_mu_);  // reported last
  absl::Mutex pool_mu_;
  std::vector<prometheus::Labels> pool_labels_ ABSL_GUARDED_BY(pool_mu_);    // reported last
  std::vector<prometheus::Labels> reason_labels_ ABSL_GUARDED_BY(pool_mu_);  // reported last
  absl::Mutex usage_mu_;
  std::vector<prometheus::Labels> usage_labels_ ABSL_GUARDED_BY(usage_mu_);  // reported last
};

}  // namespace gpufed::api

#endif  // GPUFED_API_METRICS_H_
