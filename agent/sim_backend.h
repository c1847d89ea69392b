#ifndef GPUFED_AGENT_SIM_BACKEND_H_
#define GPUFED_AGENT_SIM_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "agent/backend.h"
#include "federation/clock.h"

namespace gpufed::agent {

// A simulated cluster: a workload is RUNNING as soon as it starts, runs for its spec's
// estimated_duration (0 ends at once), then ends as spec.run.sim_outcome and sim_exit_code say.
// One timer thread serves every workload from a deadline queue, so thousands can run at once.
// Durations and event times are read from `clock` (null: the process's SystemClock).
// Thread-safe.
class SimBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<SimBackend>> Create(EventCallback callback,
                                                            const Clock* clock = nullptr);
  ~SimBackend() override;

  std::string_view name() const override { return "sim"; }
  absl::Status Start(const v1::WorkAssignment& work) override;
  absl::Status Cancel(std::string_view workload_id) override;
  size_t Active() const override;
  void Shutdown() override;

  // Looks at the clock again now rather than when the earliest workload was due by the clock's
  // reading at the last look: for a clock that jumps (a FakeClock moved by hand).
  void ClockMoved();

 private:
  struct Workload {
    uint64_t generation;  // tells this run's timer from a stale one
    v1::WorkloadState outcome;
    int32_t exit_code;
  };
  struct Timer {
    absl::Time deadline;
    uint64_t generation;
    std::string workload_id;
    // Earliest deadline first; the start order breaks ties, so equal durations end in order.
    bool operator>(const Timer& other) const {
      return deadline != other.deadline ? deadline > other.deadline : generation > other.generation;
    }
  };

  SimBackend(EventCallback callback, const Clock* clock);
  void Loop();

  const EventCallback callback_;
  const Clock& clock_;
  std::atomic<bool> stopped_{false};
  std::once_flag shutdown_once_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, Workload> active_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_ ABSL_GUARDED_BY(mu_);
  // Events due now (RUNNING, CANCELLED), delivered before any timer that fires in the same pass.
  std::vector<WorkloadEvent> ready_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_SIM_BACKEND_H_
