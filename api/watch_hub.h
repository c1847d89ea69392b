#ifndef GPUFED_API_WATCH_HUB_H_
#define GPUFED_API_WATCH_HUB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "federation/ports.h"
#include "federation/types.h"

namespace gpufed::api {

// Fans committed workload events out to Watch streams in this process. Publishers call Publish
// after their transaction commits; each subscriber's callback runs on the publisher's thread and
// must only enqueue (never block). Thread-safe.
class WatchHub final : public EventSink {
 public:
  using Callback = std::function<void(const WorkloadEvent&)>;

  // Returns a handle for Unsubscribe.
  uint64_t Subscribe(Callback callback);
  void Unsubscribe(uint64_t handle);
  void Publish(const std::vector<WorkloadEvent>& events) override;
  void Publish(const WorkloadEvent& event) { Publish(std::vector<WorkloadEvent>{event}); }

 private:
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Callback>> subscribers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed::api

#endif  // GPUFED_API_WATCH_HUB_H_
