#include "api/executor.h"

#include <utility>

namespace gpufed::api {

Executor::Executor(std::string name, int threads, size_t max_queue)
    : name_(std::move(name)), max_queue_(max_queue) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

Executor::~Executor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool Executor::TrySubmit(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= max_queue_) return false;
  queue_.push_back(std::move(fn));
  return true;
}

size_t Executor::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void Executor::Loop() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* e)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->stopping_ || !e->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping and drained
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace gpufed::api
