#include "agent/sim_backend.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpufed::agent {

absl::StatusOr<std::unique_ptr<SimBackend>> SimBackend::Create(EventCallback callback,
                                                               const Clock* clock) {
  if (!callback) return absl::InvalidArgumentError("sim backend: callback is required");
  return std::unique_ptr<SimBackend>(new SimBackend(std::move(callback), clock));
}

SimBackend::SimBackend(EventCallback callback, const Clock* clock)
    : callback_(std::move(callback)), clock_(*ClockOrSystem(clock)) {
  thread_ = std::thread([this] { Loop(); });
}

SimBackend::~SimBackend() { Shutdown(); }

absl::Status SimBackend::Start(const v1::WorkAssignment& work) {
  const v1::WorkloadSpec& spec = work.spec();
  if (work.workload_id().empty()) return absl::InvalidArgumentError("workload_id: required");
  const auto& d = spec.estimated_duration();
  if (d.seconds() < 0 || d.nanos() < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec.estimated_duration: must not be negative (got %ds %dns)", d.seconds(), d.nanos()));
  }
  const absl::Duration duration = absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
  const bool fail = spec.run().sim_outcome() == v1::SIM_OUTCOME_FAIL;

  const absl::Time now = AbslNow(clock_);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("sim backend: shutting down");
  const uint64_t generation = next_generation_++;
  if (!active_
           .try_emplace(
               work.workload_id(),
               Workload{generation, fail ? v1::WORKLOAD_STATE_FAILED : v1::WORKLOAD_STATE_SUCCEEDED,
                        spec.run().sim_exit_code()})
           .second) {
    return absl::AlreadyExistsError(absl::StrCat("workload ", work.workload_id(), " is active"));
  }
  ready_.push_back({work.workload_id(), v1::WORKLOAD_STATE_RUNNING, 0, "", now});
  timers_.push({now + duration, generation, work.workload_id()});
  wake_.Signal();
  return absl::OkStatus();
}

absl::Status SimBackend::Cancel(std::string_view id_view) {
  const std::string workload_id(id_view);
  absl::MutexLock lock(&mu_);
  auto it = active_.find(workload_id);
  if (it == active_.end()) {
    return absl::NotFoundError(absl::StrCat("workload ", workload_id, " is not active"));
  }
  // The timer stays queued; its generation no longer matches anything, so it fires as a no-op.
  active_.erase(it);
  ready_.push_back({workload_id, v1::WORKLOAD_STATE_CANCELLED, 0, "cancelled", AbslNow(clock_)});
  wake_.Signal();
  return absl::OkStatus();
}

size_t SimBackend::Active() const {
  absl::MutexLock lock(&mu_);
  return active_.size();
}

void SimBackend::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      stopped_.store(true);
      active_.clear();
      ready_.clear();
      wake_.Signal();
    }
    thread_.join();
  });
}

void SimBackend::ClockMoved() {
  absl::MutexLock lock(&mu_);
  wake_.Signal();
}

void SimBackend::Loop() {
  std::vector<WorkloadEvent> due;
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = AbslNow(clock_);
    due.swap(ready_);
    while (!timers_.empty() && timers_.top().deadline <= now) {
      Timer timer = timers_.top();
      timers_.pop();
      auto it = active_.find(timer.workload_id);
      if (it == active_.end() || it->second.generation != timer.generation) continue;
      const Workload& w = it->second;
      due.push_back({std::move(timer.workload_id), w.outcome, w.exit_code,
                     w.outcome == v1::WORKLOAD_STATE_FAILED
                         ? absl::StrCat("simulated failure, exit code ", w.exit_code)
                         : "simulated run finished",
                     now});
      active_.erase(it);
    }
    if (due.empty()) {
      const absl::Time deadline = timers_.empty() ? absl::InfiniteFuture() : timers_.top().deadline;
      WaitUntil(wake_, &mu_, clock_, deadline);
      continue;
    }
    // Deliver without the lock: the callback may take the agent's locks or call back in.
    mu_.Unlock();
    for (WorkloadEvent& event : due) {
      if (stopped_.load()) break;
      callback_(std::move(event));
    }
    due.clear();
    mu_.Lock();
  }
}

}  // namespace gpufed::agent
