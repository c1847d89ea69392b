#ifndef GPUFED_AGENT_PROCESS_BACKEND_H_
#define GPUFED_AGENT_PROCESS_BACKEND_H_

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "federation/clock.h"

namespace gpufed::agent {

struct ProcessBackendOptions {
  // Each workload's stdout and stderr (all replicas, appended) go to <work_dir>/logs/<id>.log.
  // Empty sends them to /dev/null.
  std::string work_dir;
  // The logs of this many ended workloads are kept (the oldest go first, those left by an
  // earlier run of the agent included); 0 keeps every one. Without a bound a long-lived agent
  // fills its disk and its inode table, one file per workload.
  size_t max_logs = 10000;
  // After SIGTERM, how long a process group may take to exit before SIGKILL.
  absl::Duration kill_grace = absl::Seconds(10);
  // What event times and kill_grace are read from. Null: the process's SystemClock.
  const Clock* clock = nullptr;
};

// Runs each replica of an assignment as a local process: the single-element command through
// `/bin/sh -c`, a longer command exec'd directly (PATH lookup). Every replica leads its own
// process group and sees
//   CUDA_VISIBLE_DEVICES  its gpu_indices, comma-separated (gpu_uuids if no indices are given)
//   GPUFED_WORKLOAD_ID, GPUFED_REPLICA_INDEX, GPUFED_REPLICA_COUNT, GPUFED_NODE
//   GPUFED_MIG_PROFILE, GPUFED_MIG_START  when it holds a MIG instance (CUDA_VISIBLE_DEVICES
//                         stays the GPU index here; a backend on real GPUs would resolve the MIG
//                         device's UUID, MIG-<uuid>, and pass that instead)
//   GPUFED_GPU_MILLI      when it holds a share of its GPU, in milli-GPUs
// on top of the spec's env and the agent's own environment minus every GPUFED_* variable (so
// the agent token never reaches a workload). stdin is /dev/null.
//
// Outcome: every replica exits 0 -> SUCCEEDED; the first one to exit otherwise -> FAILED with
// its exit code (128 + signal when killed) once the rest of the gang is stopped (SIGTERM, then
// SIGKILL after kill_grace); Cancel -> the same stop sequence, then CANCELLED. When a replica's
// main process exits, whatever is left in its process group is SIGKILLed before the replica
// counts as finished, so the terminal event means the GPUs are free. (Processes that leave
// their group, e.g. with setsid, escape; cgroups would close that gap.)
//
// One reaper thread waits on a pidfd per replica with epoll, so no thread per child and no
// waitpid(-1) that would steal other children of the process. Needs Linux >= 5.3.
// Thread-safe.
class ProcessBackend final : public Backend {
 public:
  // FAILED_PRECONDITION when the work dir cannot be created or the kernel lacks pidfds.
  static absl::StatusOr<std::unique_ptr<ProcessBackend>> Create(ProcessBackendOptions options,
                                                                EventCallback callback);
  ~ProcessBackend() override;

  std::string_view name() const override { return "process"; }
  absl::Status Start(const v1::WorkAssignment& work) override;
  absl::Status Cancel(std::string_view workload_id) override;
  size_t Active() const override;
  // Terminates every process group (SIGTERM, SIGKILL after kill_grace) and waits for them.
  void Shutdown() override;

  // Where the workload's output goes.
  [[nodiscard]] std::string LogPath(std::string_view workload_id) const;
  // <work_dir>/running/<id>: the boot id and the process groups of a running workload, so that
  // the next backend on this work dir kills them if this one's agent dies without stopping them.
  [[nodiscard]] std::string RunningPath(std::string_view workload_id) const;

 private:
  struct Replica {
    pid_t pid = -1;
    int pidfd = -1;
    bool done = false;
  };
  struct Workload {
    std::string id;
    std::vector<Replica> replicas;
    bool attached = false;  // replicas spawned and watched; until then Start owns them
    int live = 0;
    bool cancel_requested = false;
    bool failed = false;
    int32_t exit_code = 0;
    std::string message;
    absl::Time kill_deadline = absl::InfiniteFuture();
    bool killed = false;  // SIGKILL sent
  };

  ProcessBackend(ProcessBackendOptions options, EventCallback callback,
                 std::map<std::string, std::string> base_env, int epoll_fd, int wake_fd);
  void Loop();
  void Wake();
  void HandleExit(int pidfd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SIGTERM every live replica's group now, SIGKILL at the deadline (at once if no grace).
  void Terminate(Workload& w, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Signal(Workload& w, int sig) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinish(Workload& w, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ProcessBackendOptions options_;
  const Clock& clock_;
  const EventCallback callback_;
  const std::map<std::string, std::string> base_env_;  // inherited, GPUFED_* removed
  const int epoll_fd_;
  const int wake_fd_;
  std::atomic<bool> stopped_{false};
  std::once_flag shutdown_once_;

  mutable absl::Mutex mu_;
  absl::CondVar idle_;  // signalled when active_ empties
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_loop_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::unique_ptr<Workload>> active_ ABSL_GUARDED_BY(mu_);
  // pidfd -> (workload, replica index).
  absl::flat_hash_map<int, std::pair<Workload*, size_t>> by_pidfd_ ABSL_GUARDED_BY(mu_);
  // Workloads between SIGTERM and SIGKILL.
  absl::flat_hash_set<Workload*> terminating_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkloadEvent> ready_ ABSL_GUARDED_BY(mu_);
  // Logs of ended workloads, oldest first (max_logs).
  std::deque<std::string> ended_logs_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_PROCESS_BACKEND_H_
