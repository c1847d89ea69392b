#ifndef GPUFED_TESTS_AGENT_EVENT_COLLECTOR_H_
#define GPUFED_TESTS_AGENT_EVENT_COLLECTOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/backend.h"

namespace gpufed::testing {

// Records the events a backend delivers, for tests. Thread-safe.
class EventCollector {
 public:
  agent::EventCallback Callback() {
    return [this](agent::WorkloadEvent e) {
      absl::MutexLock lock(&mu_);
      events_.push_back(std::move(e));
    };
  }

  std::vector<agent::WorkloadEvent> Events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

  std::vector<agent::WorkloadEvent> EventsOf(const std::string& id) const {
    absl::MutexLock lock(&mu_);
    std::vector<agent::WorkloadEvent> out;
    for (const agent::WorkloadEvent& e : events_) {
      if (e.workload_id == id) out.push_back(e);
    }
    return out;
  }

  // Waits until `id` has a terminal event; returns it, or an UNSPECIFIED event on timeout.
  agent::WorkloadEvent WaitTerminal(const std::string& id,
                                    absl::Duration timeout = absl::Seconds(20)) const {
    agent::WorkloadEvent found;
    Wait(
        [&](const std::vector<agent::WorkloadEvent>& events) {
          for (const agent::WorkloadEvent& e : events) {
            if (e.workload_id == id && agent::IsTerminal(e.state)) {
              found = e;
              return true;
            }
          }
          return false;
        },
        timeout);
    return found;
  }

  // Waits until `pred` holds for the events so far.
  bool Wait(const std::function<bool(const std::vector<agent::WorkloadEvent>&)>& pred,
            absl::Duration timeout = absl::Seconds(20)) const {
    auto cond = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pred(events_); };
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }

  size_t CountState(v1::WorkloadState state) const {
    absl::MutexLock lock(&mu_);
    size_t n = 0;
    for (const agent::WorkloadEvent& e : events_) n += e.state == state ? 1 : 0;
    return n;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<agent::WorkloadEvent> events_ ABSL_GUARDED_BY(mu_);
};

// An assignment with `replicas` replicas of `gpus` GPUs each (indices counting up from 0).
inline v1::WorkAssignment MakeAssignment(const std::string& id, int replicas = 1, int gpus = 1) {
  v1::WorkAssignment a;
  a.set_workload_id(id);
  a.mutable_spec()->set_name(id);
  a.mutable_spec()->set_replicas(replicas);
  a.mutable_spec()->mutable_per_replica()->set_gpus(gpus);
  a.mutable_assignment()->set_cluster("test");
  uint32_t next = 0;
  for (int r = 0; r < replicas; ++r) {
    v1::ReplicaAssignment* ra = a.mutable_assignment()->add_replicas();
    ra->set_node("node-01");
    for (int g = 0; g < gpus; ++g) {
      ra->add_gpu_indices(next);
      ra->add_gpu_uuids("GPU-test-node-01-" + std::to_string(next));
      ++next;
    }
  }
  return a;
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_AGENT_EVENT_COLLECTOR_H_
