#ifndef GPUFED_API_RATE_LIMIT_H_
#define GPUFED_API_RATE_LIMIT_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "federation/clock.h"

namespace gpufed::api {

// A token bucket per caller (CallerKey, api/limits.h): each caller may make `rate_per_second`
// calls a second on average and up to `burst` at once. What a caller does not use accrues up to
// `burst`, never beyond. Time is the injected clock's monotonic reading.
//
// Memory: a bucket that has refilled to `burst` is the same as no bucket, so buckets idle that
// long are dropped, in one sweep at most every refill period (burst / rate, at least a second).
// The map holds only callers seen in about the last two refill periods. Thread-safe; Admit never
// blocks beyond one mutex.
class RateLimiter {
 public:
  struct Options {
    double rate_per_second = 0;  // 0: no limit (Admit always answers OK)
    double burst = 1;            // at least 1
  };

  RateLimiter(Options options, const Clock* clock);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // OK and charges one call to `key` when its bucket holds one; otherwise RESOURCE_EXHAUSTED
  // ("write rate limit: at most R writes/s (burst B) per caller; retry in N ms"), charging
  // nothing.
  absl::Status Admit(const std::string& key);

  // Buckets held (for tests).
  size_t buckets() const;

 private:
  struct Bucket {
    double tokens = 0;
    MonotonicTime at{};  // when `tokens` was computed
  };

  void SweepLocked(MonotonicTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock* const clock_;
  // How long an empty bucket takes to fill: the idle time after which a bucket is dropped.
  const std::chrono::nanoseconds refill_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  MonotonicTime next_sweep_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace gpufed::api

#endif  // GPUFED_API_RATE_LIMIT_H_
