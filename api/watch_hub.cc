#include "api/watch_hub.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "api/convert.h"

namespace gpufed::api {

WatchHub::WatchHub(size_t max_per_owner)
    : max_per_owner_(max_per_owner), trimmer_([this] { TrimLoop(); }) {}

WatchHub::~WatchHub() {
  {
    absl::MutexLock lock(&trim_mu_);
    stopping_ = true;
  }
  trimmer_.join();
}

void WatchHub::TrimLoop() {
  absl::MutexLock lock(&trim_mu_);
  for (;;) {
    trim_mu_.Await(absl::Condition(
        +[](WatchHub* hub) ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub->trim_mu_) {
          return hub->trim_wanted_ || hub->stopping_;
        },
        this));
    // Let the rest of a burst of ended streams free their memory first.
    trim_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
    if (stopping_) return;
    trim_wanted_ = false;
    trim_mu_.Unlock();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    trim_mu_.Lock();
  }
}

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
  absl::MutexLock trim_lock(&trim_mu_);
  trim_wanted_ = true;
}

void WatchHub::Publish(const std::vector<WorkloadEvent>& events) {
  if (events.empty()) return;
  std::vector<std::shared_ptr<Callback>> targets;
  {
    absl::MutexLock lock(&mu_);
    targets.reserve(subscribers_.size());
    for (const auto& [handle, sub] : subscribers_) targets.push_back(sub.callback);
  }
  if (targets.empty()) return;
  for (const WorkloadEvent& e : events) {
    const std::shared_ptr<const v1::WorkloadEvent> message = ToMessage(e);
    for (const auto& cb : targets) (*cb)(e, message);
  }
}

std::shared_ptr<const v1::WorkloadEvent> WatchHub::ToMessage(const WorkloadEvent& e) {
  auto message = std::make_shared<v1::WorkloadEvent>(EventToProto(e));
  *message->mutable_resume_after() = ToProto(e.workload.update_time);
  return message;
}

}  // namespace gpufed::api
