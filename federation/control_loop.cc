#include "federation/control_loop.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace gpufed {

ControlLoop::ControlLoop(ControlPlane* plane, Scheduler* scheduler, AgentRegistry* agents,
                         LeaderElector* leader, const Clock* clock, ControlMetrics* metrics,
                         ControlLoopOptions options)
    : plane_(plane),
      scheduler_(scheduler),
      agents_(agents),
      leader_(leader),
      clock_(clock),
      metrics_(metrics != nullptr ? metrics : &default_metrics_),
      options_(options) {}

ControlLoop::~ControlLoop() {
  if (leading_) leader_->Release();
}

StepResult ControlLoop::RunOnce(MonotonicTime now) {
  StepResult step;
  if (!leading_) {
    // Notifications meant for an active scheduler would pile up; Rebuild reads the truth.
    scheduler_->ClearInbox();
    if (!leader_->TryAcquire()) return step;
    if (absl::Status rebuilt = scheduler_->Rebuild(); !rebuilt.ok()) {
      spdlog::error("scheduler: cannot load the pool: {}", rebuilt.ToString());
      leader_->Release();
      return step;
    }
    // A loss a crash (or a lost lock) interrupted is finished before anything is placed.
    if (absl::Status resumed = plane_->ResumeClusterLosses(); !resumed.ok()) {
      spdlog::error("scheduler: cannot finish interrupted cluster losses: {}", resumed.ToString());
      leader_->Release();
      return step;
    }
    leading_ = true;
    last_check_ = last_reload_ = last_meter_ = now;
    guarantees_from_ = clock_->Now();
    last_pool_report_.reset();
    metrics_->Leading(true);
    spdlog::info("scheduler: active (holds the scheduler lock)");
  }
  if (now - last_check_ >= options_.check_interval) {
    last_check_ = now;
    if (!leader_->StillHeld()) {
      leading_ = false;
      metrics_->Leading(false);
      metrics_->PoolState(PoolReport{});  // the new active scheduler reports the pool
      metrics_->TenantUsage({});          // and the tenants' usage
      spdlog::warn("scheduler: lost the scheduler lock; standing by");
      return step;
    }
    for (const std::string& cluster : agents_->TakeTimedOut(now, options_.heartbeat_timeout)) {
      const std::string detail = absl::StrCat(
          "no heartbeat for ", absl::FormatDuration(absl::FromChrono(options_.heartbeat_timeout)));
      absl::StatusOr<ClusterLoss> loss = plane_->LoseCluster(cluster, detail);
      if (!loss.ok()) {
        // Retried on the next check: the cluster is reported again until a loss commits.
        agents_->Unreport(cluster);
        spdlog::warn("cluster {}: cannot declare it lost: {}", cluster, loss.status().ToString());
        continue;
      }
      spdlog::warn("cluster {} lost ({}): epoch {} now; {} workload(s) requeued, {} ended", cluster,
                   detail, loss->epoch, loss->requeued.size(), loss->ended.size());
      step.lost_clusters.push_back(cluster);
    }
    // The audit rows recorded since (by this and every other replica) join the chain.
    if (absl::StatusOr<int> sealed = plane_->SealAudit(); !sealed.ok()) {
      spdlog::warn("audit: cannot seal the recorded rows: {}", sealed.status().ToString());
    }
  }
  step.leading = true;
  if (now - last_reload_ >= options_.reload_interval) {
    last_reload_ = now;
    // Quotas set through another API replica are read again too.
    scheduler_->NotifyQuotasChanged();
    if (absl::Status s = scheduler_->ReloadPending(); !s.ok()) {
      spdlog::warn("scheduler: reload of the pending queue failed: {}", s.ToString());
    }
    metrics_->Quotas(scheduler_->QuotaReport());
    metrics_->FairShares(scheduler_->FairShareReport());
    if (absl::Status s = scheduler_->SaveUsage(); !s.ok()) {
      spdlog::warn("fair-share usage: save failed: {}", s.ToString());
    }
    // Keeps the state gauges fresh without a scrape, and the store's count deltas folded.
    if (absl::Status s = plane_->RefreshGauges(); !s.ok()) {
      spdlog::warn("workload counts: {}", s.ToString());
    }
    if (options_.archive_after > std::chrono::nanoseconds::zero()) {
      absl::StatusOr<int> archived = plane_->ArchiveFinished(
          options_.archive_after, options_.archive_batch, options_.archive_max_batches);
      if (!archived.ok()) {
        spdlog::warn("archiving finished workloads: {}", archived.status().ToString());
      } else if (*archived > 0) {
        spdlog::info("archived {} finished workload(s)", *archived);
      }
    }
  }
  if (options_.meter_interval > std::chrono::nanoseconds::zero() &&
      now - last_meter_ >= options_.meter_interval) {
    last_meter_ = now;
    absl::StatusOr<int> metered =
        plane_->MeterRunning(options_.meter_batch, options_.meter_max_batches);
    if (!metered.ok()) {
      spdlog::warn("metering running workloads: {}", metered.status().ToString());
    }
    if (options_.telemetry_retention > std::chrono::nanoseconds::zero()) {
      absl::StatusOr<int> pruned =
          plane_->PruneTelemetry(options_.telemetry_retention, options_.telemetry_prune_batch,
                                 options_.telemetry_prune_max_batches);
      if (!pruned.ok()) spdlog::warn("pruning telemetry: {}", pruned.status().ToString());
    }
    if (absl::Status s = plane_->ReportTenantUsage(); !s.ok()) {
      spdlog::warn("tenant usage gauges: {}", s.ToString());
    }
    // Guarantees are sampled: the quota ledger as it is now stands for the span since the last
    // pass, at most two intervals (a stalled loop does not stretch one reading over hours). A
    // span whose write fails is not written again: a retry after an unknown outcome could count
    // it twice.
    const Timestamp wall = clock_->Now();
    const Timestamp from = std::max(guarantees_from_, wall - 2 * options_.meter_interval);
    if (from < wall) {
      if (absl::Status s = plane_->RecordGuarantees(scheduler_->QuotaReport(), from, wall);
          !s.ok()) {
        spdlog::warn("idle guarantees: {}", s.ToString());
      }
    }
    guarantees_from_ = std::max(guarantees_from_, wall);
  }
  const MonotonicTime start = clock_->Monotonic();
  absl::StatusOr<CycleResult> cycle = scheduler_->RunCycle();
  if (!cycle.ok()) {
    spdlog::warn("scheduler cycle failed: {}", cycle.status().ToString());
    return step;
  }
  metrics_->CycleDone(std::chrono::duration<double>(clock_->Monotonic() - start).count(),
                      cycle->placed.size(), cycle->stats.repartitions);
  for (const Workload& w : cycle->placed) {
    for (const Repartition& r : w.assignment.repartitions) {
      spdlog::info("MIG repartition on {}/{} GPU {}: {}", w.assignment.cluster, r.node, r.gpu_uuid,
                   r.reason);
    }
  }
  if (!cycle->events.empty()) plane_->Scheduled(cycle->events);
  // The cycle considers a bounded slice of the queue: more may fit.
  if (!cycle->placed.empty()) step.more = true;
  if (!cycle->reclaims.empty()) {
    if (absl::StatusOr<std::vector<Workload>> marked = plane_->Reclaim(cycle->reclaims);
        !marked.ok()) {
      spdlog::warn("reclaim: cannot stop the victims: {}", marked.status().ToString());
      scheduler_->NotifyReclaimFailed(cycle->reclaims);
    }
  }
  metrics_->PendingQueue(scheduler_->pending_count());
  if (!last_pool_report_ || now - *last_pool_report_ >= options_.pool_report_interval) {
    last_pool_report_ = now;
    metrics_->PoolState(scheduler_->Report());
  }
  step.cycle = std::move(*cycle);
  return step;
}

void ControlLoop::Run() {
  MonotonicTime last_cycle{};
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_ || stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&woken), absl::FromChrono(options_.idle_wait));
      if (stopping_) break;
      wake_ = false;
    }
    // Coalesce wake-ups: under a stream of submissions, one cycle every few milliseconds
    // decides a batch.
    if (auto since = clock_->Monotonic() - last_cycle; since < options_.min_cycle_interval) {
      std::this_thread::sleep_for(options_.min_cycle_interval - since);
    }
    last_cycle = clock_->Monotonic();
    if (RunOnce(last_cycle).more) Wake();
  }
  if (leading_) {
    leader_->Release();
    leading_ = false;
    metrics_->Leading(false);
    metrics_->PoolState(PoolReport{});
    metrics_->TenantUsage({});
  }
}

void ControlLoop::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void ControlLoop::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

}  // namespace gpufed
