#include "api/watch_hub.h"

namespace gpufed::api {

uint64_t WatchHub::Subscribe(Callback callback) {
  absl::MutexLock lock(&mu_);
  uint64_t handle = next_++;
  subscribers_[handle] = std::make_shared<Callback>(std::move(callback));
  return handle;
}

void WatchHub::Unsubscribe(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  subscribers_.erase(handle);
}

void WatchHub::Publish(const std::vector<WorkloadEvent>& events) {
  if (events.empty()) return;
  std::vector<std::shared_ptr<Callback>> targets;
  {
    absl::MutexLock lock(&mu_);
    targets.reserve(subscribers_.size());
    for (const auto& [handle, cb] : subscribers_) targets.push_back(cb);
  }
  for (const auto& cb : targets) {
    for (const WorkloadEvent& e : events) (*cb)(e);
  }
}

}  // namespace gpufed::api
