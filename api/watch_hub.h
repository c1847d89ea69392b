#ifndef GPUFED_API_WATCH_HUB_H_
#define GPUFED_API_WATCH_HUB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "federation/ports.h"
#include "federation/types.h"

namespace gpufed::api {

// Fans committed workload events out to Watch streams in this process. Publishers call Publish
// after their transaction commits; each subscriber's callback runs on the publisher's thread and
// must only enqueue (never block). Each owner (a caller's subject) holds at most
// max_per_owner subscriptions at once, so one caller's streams cannot take the server's memory.
// Thread-safe.
class WatchHub final : public EventSink {
 public:
  using Callback = std::function<void(const WorkloadEvent&)>;

  static constexpr size_t kDefaultMaxPerOwner = 64;
  explicit WatchHub(size_t max_per_owner = kDefaultMaxPerOwner) : max_per_owner_(max_per_owner) {}

  // A handle for Unsubscribe; RESOURCE_EXHAUSTED when `owner` already holds max_per_owner.
  absl::StatusOr<uint64_t> Subscribe(const std::string& owner, Callback callback);
  void Unsubscribe(uint64_t handle);
  void Publish(const std::vector<WorkloadEvent>& events) override;
  void Publish(const WorkloadEvent& event) { Publish(std::vector<WorkloadEvent>{event}); }

 private:
  struct Subscriber {
    std::string owner;
    std::shared_ptr<Callback> callback;
  };

  const size_t max_per_owner_;
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Subscriber> subscribers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_owner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed::api

#endif  // GPUFED_API_WATCH_HUB_H_
