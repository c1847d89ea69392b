#ifndef GPUFED_API_WATCH_HUB_H_
#define GPUFED_API_WATCH_HUB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "federation/ports.h"
#include "federation/types.h"
#include "gpufed/v1/workload_service.pb.h"

namespace gpufed::api {

// Fans committed workload events out to Watch streams in this process. Publishers call Publish
// after their transaction commits; each subscriber's callback runs on the publisher's thread and
// must only enqueue (never block). Each event is converted to its message once, and every stream
// that queues it shares that one copy: a thousand streams behind by the same events hold one
// copy of them, not a thousand. Each owner (a caller's subject) holds at most
// max_per_owner subscriptions at once, so one caller's streams cannot take the server's memory.
// Thread-safe.
class WatchHub final : public EventSink {
 public:
  // The event, and its message as streams write it (resume_after: the workload's update_time).
  using Callback =
      std::function<void(const WorkloadEvent&, const std::shared_ptr<const v1::WorkloadEvent>&)>;

  static constexpr size_t kDefaultMaxPerOwner = 64;
  explicit WatchHub(size_t max_per_owner = kDefaultMaxPerOwner);
  ~WatchHub() override;

  // A handle for Unsubscribe; RESOURCE_EXHAUSTED when `owner` already holds max_per_owner.
  absl::StatusOr<uint64_t> Subscribe(const std::string& owner, Callback callback);
  void Unsubscribe(uint64_t handle);
  void Publish(const std::vector<WorkloadEvent>& events) override;
  void Publish(const WorkloadEvent& event) { Publish(std::vector<WorkloadEvent>{event}); }

  // The message of `e` as a live event of a Watch stream.
  static std::shared_ptr<const v1::WorkloadEvent> ToMessage(const WorkloadEvent& e);

 private:
  struct Subscriber {
    std::string owner;
    std::shared_ptr<Callback> callback;
  };

  // Gives the memory of ended streams back to the system: glibc keeps freed heap pages in its
  // arenas (1,000 cancelled unread streams left the server at 950 MiB RSS; malloc_trim took it
  // to 43 MiB), so a second after a stream ends (coalescing a burst of them), one malloc_trim(0).
  void TrimLoop();

  const size_t max_per_owner_;
  absl::Mutex trim_mu_;
  bool trim_wanted_ ABSL_GUARDED_BY(trim_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(trim_mu_) = false;
  std::thread trimmer_;
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Subscriber> subscribers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_owner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed::api

#endif  // GPUFED_API_WATCH_HUB_H_
