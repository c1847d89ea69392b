#include "api/watch_hub.h"

#include "absl/strings/str_cat.h"

namespace gpufed::api {

absl::StatusOr<uint64_t> WatchHub::Subscribe(const std::string& owner, Callback callback) {
  absl::MutexLock lock(&mu_);
  size_t& held = per_owner_[owner];
  if (held >= max_per_owner_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "watch: at most ", max_per_owner_, " streams per caller at once; close one first"));
  }
  ++held;
  uint64_t handle = next_++;
  subscribers_[handle] = Subscriber{owner, std::make_shared<Callback>(std::move(callback))};
  return handle;
}

void WatchHub::Unsubscribe(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(handle);
  if (it == subscribers_.end()) return;
  auto owner = per_owner_.find(it->second.owner);
  if (owner != per_owner_.end() && --owner->second == 0) per_owner_.erase(owner);
  subscribers_.erase(it);
}

void WatchHub::Publish(const std::vector<WorkloadEvent>& events) {
  if (events.empty()) return;
  std::vector<std::shared_ptr<Callback>> targets;
  {
    absl::MutexLock lock(&mu_);
    targets.reserve(subscribers_.size());
    for (const auto& [handle, sub] : subscribers_) targets.push_back(sub.callback);
  }
  for (const auto& cb : targets) {
    for (const WorkloadEvent& e : events) (*cb)(e);
  }
}

}  // namespace gpufed::api
