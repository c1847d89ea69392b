#include "api/rate_limit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gpufed::api {
namespace {

std::chrono::nanoseconds RefillTime(const RateLimiter::Options& o) {
  if (o.rate_per_second <= 0) return std::chrono::seconds(1);
  const double seconds = std::max(1.0, std::max(1.0, o.burst) / o.rate_per_second);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(seconds));
}

}  // namespace

RateLimiter::RateLimiter(Options options, const Clock* clock)
    : options_{options.rate_per_second, std::max(1.0, options.burst)},
      clock_(ClockOrSystem(clock)),
      refill_(RefillTime(options)) {}

absl::Status RateLimiter::Admit(const std::string& key) {
  if (options_.rate_per_second <= 0) return absl::OkStatus();
  const MonotonicTime now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  if (now >= next_sweep_) SweepLocked(now);
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{options_.burst, now});
  Bucket& b = it->second;
  if (!fresh && now > b.at) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(options_.burst, b.tokens + elapsed * options_.rate_per_second);
    b.at = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return absl::OkStatus();
  }
  const double wait_ms = std::ceil((1 - b.tokens) / options_.rate_per_second * 1000);
  return absl::ResourceExhaustedError(
      absl::StrCat("write rate limit: at most ", options_.rate_per_second, " writes/s (burst ",
                   options_.burst, ") per caller; retry in ", wait_ms, " ms"));
}

void RateLimiter::SweepLocked(MonotonicTime now) {
  // A bucket last touched a refill period ago is full again: dropping it changes nothing.
  absl::erase_if(buckets_, [&](const auto& kv) { return now - kv.second.at >= refill_; });
  next_sweep_ = now + refill_;
}

size_t RateLimiter::buckets() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

}  // namespace gpufed::api
