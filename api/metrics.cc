#include "api/metrics.h"

#include <algorithm>
#include <utility>

namespace gpufed::api {

Metrics::Metrics(prometheus::Registry& registry)
    : submissions(prometheus::BuildCounter()
                      .Name("gpufed_submissions_total")
                      .Help("Workload submissions by outcome")
                      .Register(registry)),
      submissions_created(submissions.Add({{"outcome", "created"}})),
      submissions_replayed(submissions.Add({{"outcome", "replayed"}})),
      submissions_rejected(submissions.Add({{"outcome", "rejected"}})),
      workloads_by_state(prometheus::BuildGauge()
                             .Name("gpufed_workloads")
                             .Help("Workloads in the store by state")
                             .Register(registry)),
      scheduler_cycle_seconds(
          prometheus::BuildHistogram()
              .Name("gpufed_scheduler_cycle_seconds")
              .Help("Duration of one scheduling cycle, commit included")
              .Register(registry)
              .Add({},
                   prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                           0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5})),
      scheduler_placements(prometheus::BuildCounter()
                               .Name("gpufed_scheduler_placements_total")
                               .Help("Workloads placed by the scheduler")
                               .Register(registry)
                               .Add({})),
      mig_repartitions(prometheus::BuildCounter()
                           .Name("gpufed_mig_repartitions_total")
                           .Help("MIG layout changes decided by the scheduler (partitioning "
                                 "authority); each is logged with its reason")
                           .Register(registry)
                           .Add({})),
      scheduler_pending(prometheus::BuildGauge()
                            .Name("gpufed_scheduler_pending")
                            .Help("Workloads in the scheduler's pending queue")
                            .Register(registry)
                            .Add({})),
      scheduler_leader(prometheus::BuildGauge()
                           .Name("gpufed_scheduler_leader")
                           .Help("1 if this server holds the scheduler lock")
                           .Register(registry)
                           .Add({})),
      agents_connected(prometheus::BuildGauge()
                           .Name("gpufed_agents_connected")
                           .Help("Agent streams connected to this server")
                           .Register(registry)
                           .Add({})),
      agent_status_updates(prometheus::BuildCounter()
                               .Name("gpufed_agent_status_updates_total")
                               .Help("Workload status updates received from agents")
                               .Register(registry)
                               .Add({})),
      clusters_lost(prometheus::BuildCounter()
                        .Name("gpufed_clusters_lost_total")
                        .Help("Clusters declared lost after their agent was silent past the "
                              "heartbeat timeout")
                        .Register(registry)
                        .Add({})),
      lost_workloads(prometheus::BuildCounter()
                         .Name("gpufed_lost_cluster_workloads_total")
                         .Help("Workloads that held capacity on a cluster declared lost, by "
                               "what became of them")
                         .Register(registry)),
      lost_workloads_requeued(lost_workloads.Add({{"outcome", "requeued"}})),
      lost_workloads_ended(lost_workloads.Add({{"outcome", "ended"}})),
      evictions(prometheus::BuildCounter()
                    .Name("gpufed_evictions_total")
                    .Help("Workloads told to stop so that they run elsewhere, by cause "
                          "(preemption: a drain or a reclaim; node_failure: a failed node or GPU)")
                    .Register(registry)),
      preemptions(prometheus::BuildCounter()
                      .Name("gpufed_preemptions_total")
                      .Help("Preemptions decided, by reason (guarantee_reclaim, fair_share, "
                            "priority); each is recorded (ListPreemptions)")
                      .Register(registry)),
      preempted_workloads(prometheus::BuildCounter()
                              .Name("gpufed_preempted_workloads_total")
                              .Help("Workloads stopped by preemptions, by reason")
                              .Register(registry)),
      gpu_seconds_lost(prometheus::BuildCounter()
                           .Name("gpufed_gpu_seconds_lost_to_preemption_total")
                           .Help("GPU-equivalent seconds of work preempted workloads lose "
                                 "(since their last checkpoint, or their start), by reason")
                           .Register(registry)),
      quota_guaranteed(prometheus::BuildGauge()
                           .Name("gpufed_quota_guaranteed")
                           .Help("A quota's guarantee (GPUs, or MIG instances for a profile)")
                           .Register(registry)),
      quota_limit(prometheus::BuildGauge()
                      .Name("gpufed_quota_limit")
                      .Help("A quota's limit (GPUs, or MIG instances for a profile)")
                      .Register(registry)),
      quota_used(prometheus::BuildGauge()
                     .Name("gpufed_quota_used")
                     .Help("What the quota's holder holds of its resource (placed work)")
                     .Register(registry)),
      quota_borrowed(prometheus::BuildGauge()
                         .Name("gpufed_quota_borrowed")
                         .Help("What the quota's holder holds above its guarantee")
                         .Register(registry)),
      fair_share(prometheus::BuildGauge()
                     .Name("gpufed_fair_share")
                     .Help("A tenant's (or project's, inside its tenant) weighted share of the "
                           "pool among the active ones, 0..1")
                     .Register(registry)),
      fair_share_held(prometheus::BuildGauge()
                          .Name("gpufed_fair_share_held_gpus")
                          .Help("GPU-equivalents a tenant (or project) holds now")
                          .Register(registry)),
      fair_share_decayed_gpu_seconds(
          prometheus::BuildGauge()
              .Name("gpufed_fair_share_decayed_gpu_seconds")
              .Help("A tenant's (or project's) GPU-seconds, decayed by the fair-share half-life")
              .Register(registry)),
      writes_rate_limited(prometheus::BuildCounter()
                              .Name("gpufed_writes_rate_limited_total")
                              .Help("Writes refused RESOURCE_EXHAUSTED because their caller (API "
                                    "token) was over its write rate")
                              .Register(registry)
                              .Add({})),
      audit_rows_dropped(prometheus::BuildCounter()
                             .Name("gpufed_audit_rows_dropped_total")
                             .Help("Audit rows of refused calls not recorded: the queue to the "
                                   "database was full, or the database refused them")
                             .Register(registry)
                             .Add({})),
      pool_capacity(prometheus::BuildGauge()
                        .Name("gpufed_pool_capacity_gpus")
                        .Help("GPUs in the pool by cluster and model, healthy or not (the active "
                              "scheduler's pool)")
                        .Register(registry)),
      pool_allocated(prometheus::BuildGauge()
                         .Name("gpufed_pool_allocated_gpus")
                         .Help("GPUs something runs on (a whole-GPU workload, a share or a MIG "
                               "instance), by cluster and model")
                         .Register(registry)),
      pool_free(prometheus::BuildGauge()
                    .Name("gpufed_pool_free_gpus")
                    .Help("Idle healthy GPUs on schedulable nodes, by cluster and model")
                    .Register(registry)),
      pool_fragmented(prometheus::BuildGauge()
                          .Name("gpufed_pool_fragmented_gpus")
                          .Help("Free GPU capacity the typical workloads cannot use (FGD expected "
                                "fragmentation), GPU-equivalents, by cluster and model")
                          .Register(registry)),
      pool_fragmentation_ratio(
          prometheus::BuildGauge()
              .Name("gpufed_pool_fragmentation_ratio")
              .Help("Fragmented share of the free GPU capacity (FGD fragmentation rate), 0..1, by "
                    "cluster and model")
              .Register(registry)),
      pending_by_reason(prometheus::BuildGauge()
                            .Name("gpufed_scheduler_pending_workloads")
                            .Help("Workloads in the scheduler's pending queue by the code of their "
                                  "pending reason")
                            .Register(registry)),
      rpcs_handled(prometheus::BuildCounter()
                       .Name("gpufed_grpc_server_handled_total")
                       .Help("RPCs answered, by service, method and status code")
                       .Register(registry)),
      rpc_seconds(prometheus::BuildHistogram()
                      .Name("gpufed_grpc_server_handling_seconds")
                      .Help("Time from a unary RPC's arrival to its status, by service, method "
                            "and status code")
                      .Register(registry)),
      tenant_gpu_seconds(prometheus::BuildGauge()
                             .Name("gpufed_tenant_gpu_seconds")
                             .Help("A tenant's allocated GPU-seconds this UTC month so far (MIG "
                                   "instances and shares by the part of the GPU charged)")
                             .Register(registry)),
      tenant_effective_gpu_seconds(
          prometheus::BuildGauge()
              .Name("gpufed_tenant_effective_gpu_seconds")
              .Help(
                  "A tenant's effective GPU-seconds this UTC month so far: measured GPU-seconds x "
                  "SM activity (engine activity, or the coarse counter, where missing)")
              .Register(registry)),
      tenant_cost(prometheus::BuildGauge()
                      .Name("gpufed_tenant_cost")
                      .Help("A tenant's metered cost this UTC month so far, in units of the price "
                            "book's currency")
                      .Register(registry)),
      telemetry_minutes(prometheus::BuildCounter()
                            .Name("gpufed_telemetry_records_total")
                            .Help("Agents' telemetry records (one per GPU and minute) by outcome: "
                                  "kept (counted once), or "
                                  "ignored (too old, ahead of the clock, a repeat, or of work "
                                  "not on the agent's cluster)")
                            .Register(registry)),
      telemetry_minutes_kept(telemetry_minutes.Add({{"outcome", "kept"}})),
      telemetry_minutes_ignored(telemetry_minutes.Add({{"outcome", "ignored"}})) {}

void PrometheusControlMetrics::Preempted(PreemptionCause cause, size_t victims,
                                         double gpu_seconds_lost) {
  const prometheus::Labels labels{{"reason", std::string(PreemptionCauseName(cause))}};
  m_.preemptions.Add(labels).Increment();
  m_.preempted_workloads.Add(labels).Increment(static_cast<double>(victims));
  m_.gpu_seconds_lost.Add(labels).Increment(gpu_seconds_lost);
}

void PrometheusControlMetrics::Quotas(const std::vector<QuotaUsage>& rows) {
  absl::MutexLock lock(&quota_mu_);
  std::vector<prometheus::Labels> now;
  now.reserve(rows.size());
  for (const QuotaUsage& u : rows) {
    if (!u.quota) continue;
    prometheus::Labels labels{{"tenant", u.key.tenant},
                              {"project", u.key.project.empty() ? "-" : u.key.project},
                              {"resource", u.key.resource}};
    m_.quota_guaranteed.Add(labels).Set(static_cast<double>(u.quota->guaranteed_milli) / 1000);
    m_.quota_limit.Add(labels).Set(static_cast<double>(u.quota->EffectiveLimit()) / 1000);
    m_.quota_used.Add(labels).Set(static_cast<double>(u.used_milli) / 1000);
    m_.quota_borrowed.Add(labels).Set(static_cast<double>(u.borrowed_milli) / 1000);
    now.push_back(std::move(labels));
  }
  // A quota deleted since the last report leaves the series.
  for (const prometheus::Labels& old : quota_labels_) {
    if (std::find(now.begin(), now.end(), old) != now.end()) continue;
    for (auto* family :
         {&m_.quota_guaranteed, &m_.quota_limit, &m_.quota_used, &m_.quota_borrowed}) {
      family->Remove(&family->Add(old));
    }
  }
  quota_labels_ = std::move(now);
}

void PrometheusControlMetrics::FairShares(const std::vector<FairShare>& rows) {
  absl::MutexLock lock(&quota_mu_);
  std::vector<prometheus::Labels> now;
  now.reserve(rows.size());
  for (const FairShare& f : rows) {
    prometheus::Labels labels{{"tenant", f.tenant},
                              {"project", f.project.empty() ? "-" : f.project}};
    m_.fair_share.Add(labels).Set(f.share);
    m_.fair_share_held.Add(labels).Set(static_cast<double>(f.held_milli) / 1000);
    m_.fair_share_decayed_gpu_seconds.Add(labels).Set(f.decayed_gpu_hours * 3600);
    now.push_back(std::move(labels));
  }
  // A tenant or project no longer active leaves the series.
  for (const prometheus::Labels& old : share_labels_) {
    if (std::find(now.begin(), now.end(), old) != now.end()) continue;
    for (auto* family : {&m_.fair_share, &m_.fair_share_held, &m_.fair_share_decayed_gpu_seconds}) {
      family->Remove(&family->Add(old));
    }
  }
  share_labels_ = std::move(now);
}

void PrometheusControlMetrics::PoolState(const PoolReport& report) {
  absl::MutexLock lock(&pool_mu_);
  std::vector<prometheus::Labels> now;
  now.reserve(report.models.size());
  for (const PoolModelReport& r : report.models) {
    prometheus::Labels labels{{"cluster", r.cluster}, {"model", r.model}};
    m_.pool_capacity.Add(labels).Set(r.gpus.total);
    m_.pool_allocated.Add(labels).Set(r.gpus.allocated);
    m_.pool_free.Add(labels).Set(r.gpus.free);
    m_.pool_fragmented.Add(labels).Set(r.fragmented_milli / kMilliPerGpu);
    m_.pool_fragmentation_ratio.Add(labels).Set(
        r.free_milli == 0 ? 0 : r.fragmented_milli / static_cast<double>(r.free_milli));
    now.push_back(std::move(labels));
  }
  // A cluster (or a model in it) no longer in the pool, or no pool at all (standing by), leaves
  // the series.
  for (const prometheus::Labels& old : pool_labels_) {
    if (std::find(now.begin(), now.end(), old) != now.end()) continue;
    for (auto* family : {&m_.pool_capacity, &m_.pool_allocated, &m_.pool_free, &m_.pool_fragmented,
                         &m_.pool_fragmentation_ratio}) {
      family->Remove(&family->Add(old));
    }
  }
  pool_labels_ = std::move(now);

  std::vector<prometheus::Labels> reasons;
  reasons.reserve(report.pending.size());
  for (const auto& [code, count] : report.pending) {
    // kNone (a workload nothing was recorded for yet) has no name of its own.
    const absl::string_view name = ReasonCodeName(code);
    prometheus::Labels labels{{"reason", name.empty() ? "None" : std::string(name)}};
    m_.pending_by_reason.Add(labels).Set(static_cast<double>(count));
    reasons.push_back(std::move(labels));
  }
  for (const prometheus::Labels& old : reason_labels_) {
    if (std::find(reasons.begin(), reasons.end(), old) != reasons.end()) continue;
    m_.pending_by_reason.Remove(&m_.pending_by_reason.Add(old));
  }
  reason_labels_ = std::move(reasons);
}

void PrometheusControlMetrics::TenantUsage(const std::vector<UsageLine>& month_to_date) {
  absl::MutexLock lock(&usage_mu_);
  std::vector<prometheus::Labels> now;
  now.reserve(month_to_date.size());
  for (const UsageLine& line : month_to_date) {
    if (line.keys.empty()) continue;
    prometheus::Labels labels{{"tenant", line.keys.front()}};
    m_.tenant_gpu_seconds.Add(labels).Set(static_cast<double>(line.gpu_microseconds) / 1e6);
    m_.tenant_effective_gpu_seconds.Add(labels).Set(
        static_cast<double>(line.effective_gpu_microseconds) / 1e6);
    m_.tenant_cost.Add(labels).Set(static_cast<double>(line.cost_micros) / 1e6);
    now.push_back(std::move(labels));
  }
  // A tenant without usage this month (a new month began) leaves the series.
  for (const prometheus::Labels& old : usage_labels_) {
    if (std::find(now.begin(), now.end(), old) != now.end()) continue;
    for (auto* family :
         {&m_.tenant_gpu_seconds, &m_.tenant_effective_gpu_seconds, &m_.tenant_cost}) {
      family->Remove(&family->Add(old));
    }
  }
  usage_labels_ = std::move(now);
}

}  // namespace gpufed::api
