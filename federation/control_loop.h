#ifndef GPUFED_FEDERATION_CONTROL_LOOP_H_
#define GPUFED_FEDERATION_CONTROL_LOOP_H_

// The control loop: one step (RunOnce) takes or keeps leadership, marks the clusters whose
// agents went quiet, re-reads the pending queue now and then, and runs one scheduling cycle
// whose placements go through the control plane's after-commit sequence. Tests drive RunOnce
// with a FakeClock; the server runs Run() on a thread of its own.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "federation/agent_registry.h"
#include "federation/clock.h"
#include "federation/control_plane.h"
#include "federation/ports.h"
#include "federation/scheduler.h"

namespace gpufed {

struct ControlLoopOptions {
  // A cluster whose agent is silent this long is marked unreachable.
  std::chrono::nanoseconds heartbeat_timeout = std::chrono::seconds(30);
  // How often leadership and heartbeat timeouts are checked and the audit rows recorded since
  // are chained (ControlPlane::SealAudit).
  std::chrono::nanoseconds check_interval = std::chrono::seconds(1);
  // How often the pending queue is re-read (catches work submitted through other API replicas)
  // and the workload-state gauges are refreshed (which keeps the store's count deltas folded).
  std::chrono::nanoseconds reload_interval = std::chrono::seconds(10);
  // Workloads that ended this long ago leave the hot table (ControlPlane::ArchiveFinished), at
  // each reload, up to archive_batch x archive_max_batches at a time. Zero: never.
  std::chrono::nanoseconds archive_after = std::chrono::hours(24 * 7);
  int archive_batch = 5000;
  int archive_max_batches = 10;
  // How often the runs still going are metered up to the last whole hour
  // (ControlPlane::MeterRunning): a report over hours that ended longer ago than this sees every
  // second of them. Zero: only when runs end.
  std::chrono::nanoseconds meter_interval = std::chrono::seconds(60);
  int meter_batch = 2000;
  int meter_max_batches = 50;
  // Telemetry minutes are kept this long (ControlPlane::PruneTelemetry, with each meter pass, up to
  // telemetry_prune_batch x telemetry_prune_max_batches at a time); report sums keep what they
  // added. Zero: kept for ever.
  std::chrono::nanoseconds telemetry_retention = std::chrono::hours(48);
  int telemetry_prune_batch = 10000;
  int telemetry_prune_max_batches = 20;
  // How often, at most, the pool and the queue are reported to the metrics port after a cycle
  // (ControlMetrics::PoolState; each report reads every node and queued workload).
  std::chrono::nanoseconds pool_report_interval = std::chrono::seconds(1);
  // Run(): at least this long between the starts of two cycles, so that a stream of
  // submissions is decided (and committed) in batches instead of one transaction each.
  std::chrono::nanoseconds min_cycle_interval = std::chrono::milliseconds(10);
  // Run(): the longest wait between steps when nothing wakes the loop.
  std::chrono::nanoseconds idle_wait = std::chrono::seconds(1);
};

// What one step did.
struct StepResult {
  bool leading = false;                    // this process is the active scheduler
  std::vector<std::string> lost_clusters;  // marked unreachable in this step
  std::optional<CycleResult> cycle;        // the scheduling cycle, if one ran and committed
  bool more = false;                       // placements were made: more may fit, go again
};

// RunOnce and Run must be called from one thread (the loop's); Wake and Stop from any.
class ControlLoop {
 public:
  ControlLoop(ControlPlane* plane, Scheduler* scheduler, AgentRegistry* agents,
              LeaderElector* leader, const Clock* clock, ControlMetrics* metrics,
              ControlLoopOptions options);
  ~ControlLoop();
  ControlLoop(const ControlLoop&) = delete;
  ControlLoop& operator=(const ControlLoop&) = delete;

  // One step at monotonic time `now`. Never sleeps.
  StepResult RunOnce(MonotonicTime now);

  // Steps until Stop(): after each, waits for Wake() or options.idle_wait. Releases
  // leadership when it returns.
  void Run();
  void Wake();
  void Stop();

 private:
  ControlPlane* const plane_;
  Scheduler* const scheduler_;
  AgentRegistry* const agents_;
  LeaderElector* const leader_;
  const Clock* const clock_;
  ControlMetrics default_metrics_;
  ControlMetrics* const metrics_;
  const ControlLoopOptions options_;

  // The loop thread's.
  bool leading_ = false;
  MonotonicTime last_check_{};
  MonotonicTime last_reload_{};
  MonotonicTime last_meter_{};
  // Where the next idle-guarantee span starts (the wall clock: spans are cut at UTC midnights).
  Timestamp guarantees_from_{};
  std::optional<MonotonicTime> last_pool_report_;  // none: report after the next cycle

  absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_CONTROL_LOOP_H_
