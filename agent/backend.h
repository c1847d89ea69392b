#ifndef GPUFED_AGENT_BACKEND_H_
#define GPUFED_AGENT_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpufed/v1/agent_service.pb.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

// One state change of a workload as a backend observes it.
struct WorkloadEvent {
  std::string workload_id;
  // WORKLOAD_STATE_RUNNING, _SUCCEEDED, _FAILED or _CANCELLED.
  v1::WorkloadState state = v1::WORKLOAD_STATE_UNSPECIFIED;
  // Process exit code (terminal states); 128 + signal number when a process died by a signal.
  int32_t exit_code = 0;
  // A short explanation for people, e.g. "replica 1 exited with code 3".
  std::string message;
  // When the backend saw the change.
  absl::Time time;
};

// Receives the events of a backend. Called only from the backend's own thread(s), never from
// inside Start/Cancel and never while the backend holds a lock, so it may take the caller's
// locks and may call Start/Cancel/Active (but not Shutdown). Events of one workload arrive in
// order. It should return quickly: it delays the events of other workloads.
using EventCallback = std::function<void(WorkloadEvent)>;

// Runs assignments on a cluster's execution engine.
//
// For every Start that returns OK the backend delivers RUNNING once every replica has started,
// then exactly one terminal event: SUCCEEDED, FAILED (with the exit code) or CANCELLED. If it
// cannot start every replica it delivers FAILED without RUNNING. Nothing is delivered for work
// that Shutdown stops. All methods are thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;

  // "sim", "process", ...
  [[nodiscard]] virtual std::string_view name() const = 0;

  // Starts `work`. INVALID_ARGUMENT (naming the field) when the assignment cannot be run as
  // given; nothing is started and no event follows. ALREADY_EXISTS when the workload id is
  // active. FAILED_PRECONDITION after Shutdown.
  virtual absl::Status Start(const v1::WorkAssignment& work) = 0;

  // Asks an active workload to stop; its terminal event (CANCELLED, or the state it reached
  // first) follows asynchronously. NOT_FOUND when the id is not active: never started, or its
  // terminal event is already delivered or on its way.
  virtual absl::Status Cancel(std::string_view workload_id) = 0;

  // Workloads started and not yet ended.
  [[nodiscard]] virtual size_t Active() const = 0;

  // Changes one GPU's MIG mode and layout as the control plane decided (a repartition carried by
  // an assignment), before the agent starts that assignment. The agent has checked the request
  // against its inventory and keeps the new layout there; a backend on real GPUs would make it
  // so on the device (nvidia-smi mig / NVML) and return an error if it cannot. The sim and
  // process backends have no GPUs to change: the default accepts.
  virtual absl::Status Repartition(const v1::Repartition& change) { return absl::OkStatus(); }

  // Stops all work without reporting it and releases the backend's threads; blocks until done.
  // Idempotent. No callback runs after it returns.
  virtual void Shutdown() = 0;
};

// Creates a backend that reports through `callback`.
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(EventCallback callback)>;

// True for SUCCEEDED, FAILED and CANCELLED (and the server-side PREEMPTED and LOST).
bool IsTerminal(v1::WorkloadState state);

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_BACKEND_H_
