#include "api/watch_hub.h"

#if defined(__GLIBC__)
#include <malloc.h>
#include <pthread.h>
#endif

#include <utility>

#include "absl/strings/str_cat.h"
#include "api/convert.h"

namespace gpufed::api {

WatchHub::WatchHub(size_t max_per_owner, size_t max_backlog)
    : max_per_owner_(max_per_owner),
      max_backlog_(max_backlog),
      dispatcher_([this] { DispatchLoop(); }),
      trimmer_([this] { TrimLoop(); }) {}

WatchHub::~WatchHub() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  {
    absl::MutexLock lock(&trim_mu_);
    trim_stopping_ = true;
  }
  dispatcher_.join();
  trimmer_.join();
}

void WatchHub::TrimLoop() {
  absl::MutexLock lock(&trim_mu_);
  for (;;) {
    trim_mu_.Await(absl::Condition(
        +[](WatchHub* hub) ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub->trim_mu_) {
          return hub->trim_wanted_ || hub->trim_stopping_;
        },
        this));
    // Let the rest of a burst of ended streams free their memory first.
    trim_mu_.AwaitWithTimeout(absl::Condition(&trim_stopping_), absl::Seconds(1));
    if (trim_stopping_) return;
    trim_wanted_ = false;
    trim_mu_.Unlock();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    trim_mu_.Lock();
  }
}

absl::StatusOr<uint64_t> WatchHub::Subscribe(const std::string& owner,
                                             std::shared_ptr<Subscriber> subscriber,
                                             int64_t token_id) {
  absl::MutexLock lock(&mu_);
  size_t& held = per_owner_[owner];
  if (held >= max_per_owner_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "watch: at most ", max_per_owner_, " streams per caller at once; close one first"));
  }
  ++held;
  uint64_t handle = next_++;
  subscribers_[handle] = Entry{owner, std::move(subscriber), token_id};
  return handle;
}

void WatchHub::EndCredential(int64_t token_id) {
  if (token_id == 0) return;
  std::vector<std::shared_ptr<Subscriber>> ended;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [handle, entry] : subscribers_) {
      if (entry.token_id == token_id) ended.push_back(entry.subscriber);
    }
  }
  for (const std::shared_ptr<Subscriber>& s : ended) s->OnRevoked();
}

void WatchHub::Unsubscribe(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(handle);
  if (it == subscribers_.end()) return;
  auto owner = per_owner_.find(it->second.owner);
  if (owner != per_owner_.end() && --owner->second == 0) per_owner_.erase(owner);
  subscribers_.erase(it);
  // Its place in the write turns, if any, is skipped when it comes up.
  absl::MutexLock trim_lock(&trim_mu_);
  trim_wanted_ = true;
}

void WatchHub::Publish(const std::vector<WorkloadEvent>& events) {
  if (events.empty()) return;
  absl::MutexLock lock(&mu_);
  // Nobody to tell: a committed change with no watcher costs the publisher one lock.
  if (subscribers_.empty() || stopping_) return;
  if (backlog_.size() + events.size() > max_backlog_) {
    // The dispatcher is this far behind: rather than make publishers wait or hold more, drop
    // what waits, and tell everyone who would have got it to watch again from their last event.
    backlog_.clear();
    backlog_.shrink_to_fit();
    lost_.clear();
    lost_.reserve(subscribers_.size());
    for (const auto& [handle, entry] : subscribers_) lost_.push_back(entry.subscriber);
    return;
  }
  backlog_.insert(backlog_.end(), events.begin(), events.end());
}

size_t WatchHub::backlog() const {
  absl::MutexLock lock(&mu_);
  return backlog_.size();
}

void WatchHub::Ready(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  AddReadyLocked(handle);
}

void WatchHub::AddReadyLocked(uint64_t handle) {
  auto it = subscribers_.find(handle);
  if (it == subscribers_.end()) return;
  std::deque<uint64_t>& waiting = ready_[it->second.owner];
  if (waiting.empty()) ready_owners_.push_back(it->second.owner);
  waiting.push_back(handle);
}

void WatchHub::DispatchLoop() {
#if defined(__GLIBC__)
  pthread_setname_np(pthread_self(), "watch-dispatch");
#endif
  struct Target {
    uint64_t handle;
    std::shared_ptr<Subscriber> subscriber;
  };
  std::vector<WorkloadEvent> batch;
  std::vector<std::shared_ptr<Subscriber>> lost;
  std::vector<Target> targets;
  std::vector<std::shared_ptr<Subscriber>> turns;
  std::vector<uint64_t> due;
  for (;;) {
    batch.clear();
    lost.clear();
    targets.clear();
    turns.clear();
    due.clear();
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WatchHub* hub) ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub->mu_) {
            return !hub->backlog_.empty() || !hub->lost_.empty() || !hub->ready_owners_.empty() ||
                   hub->stopping_;
          },
          this));
      if (stopping_) return;
      batch.swap(backlog_);
      lost.swap(lost_);
      if (!batch.empty()) {
        targets.reserve(subscribers_.size());
        for (const auto& [handle, entry] : subscribers_) {
          targets.push_back(Target{handle, entry.subscriber});
        }
      }
      // One round: a turn for each owner with a write due.
      for (size_t owners = ready_owners_.size(); owners > 0; --owners) {
        std::string owner = std::move(ready_owners_.front());
        ready_owners_.pop_front();
        auto waiting = ready_.find(owner);
        const uint64_t handle = waiting->second.front();
        waiting->second.pop_front();
        if (waiting->second.empty()) {
          ready_.erase(waiting);
        } else {
          ready_owners_.push_back(std::move(owner));
        }
        auto it = subscribers_.find(handle);
        if (it != subscribers_.end()) turns.push_back(it->second.subscriber);
      }
    }
    // What was dropped came before this batch.
    for (const auto& subscriber : lost) subscriber->OnLost();
    for (const WorkloadEvent& e : batch) {
      const Message message = ToMessage(e);
      const size_t bytes = message->ByteSizeLong();
      for (const Target& t : targets) {
        if (t.subscriber->OnEvent(e, message, bytes)) due.push_back(t.handle);
      }
    }
    for (const auto& subscriber : turns) subscriber->OnTurn();
    if (!due.empty()) {
      absl::MutexLock lock(&mu_);
      for (uint64_t handle : due) AddReadyLocked(handle);
    }
    // The batch's memory is not kept for the next one: a burst should not pin its peak.
    if (batch.capacity() > 1024) std::vector<WorkloadEvent>().swap(batch);
  }
}

WatchHub::Message WatchHub::ToMessage(const WorkloadEvent& e) {
  auto message = std::make_shared<v1::WorkloadEvent>(EventToProto(e));
  *message->mutable_resume_after() = ToProto(e.workload.update_time);
  return message;
}

}  // namespace gpufed::api
