#ifndef GPUFED_API_EXECUTOR_H_
#define GPUFED_API_EXECUTOR_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpufed::api {

// A fixed set of threads with a bounded queue, for blocking work (database calls) that gRPC
// callback reactors must not do on their own threads. When the queue is full, TrySubmit refuses
// at once so the handler can answer UNAVAILABLE instead of piling up work.
//
// (Neither gRPC's public API nor the packaged Abseil offers a bounded executor; Boost.Asio's
// thread_pool has no bound, so this is the one small pool gpufed writes itself.)
class Executor {
 public:
  Executor(std::string name, int threads, size_t max_queue);
  ~Executor();  // drains queued work, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // False if the queue is full or the executor is shutting down; `fn` is then not run.
  bool TrySubmit(std::function<void()> fn);
  size_t queued() const;

 private:
  void Loop();

  const std::string name_;
  const size_t max_queue_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_EXECUTOR_H_
