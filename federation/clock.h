#ifndef GPUFED_FEDERATION_CLOCK_H_
#define GPUFED_FEDERATION_CLOCK_H_

// The one clock port. The domain, the API handlers, the stores and the agent never read the
// real clock: they ask the Clock they were given. The composition roots give SystemClock (a
// component given none falls back to one: ClockOrSystem); tests give FakeClock and move time by
// hand, so nothing in a test sleeps.

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "federation/types.h"

namespace gpufed {

using MonotonicTime = std::chrono::steady_clock::time_point;

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall time: what is recorded (event times, heartbeats written to the store).
  [[nodiscard]] virtual Timestamp Now() const = 0;
  // Monotonic time: what intervals and timeouts are measured with (never jumps with NTP).
  [[nodiscard]] virtual MonotonicTime Monotonic() const = 0;
};

// The real clocks. The only place outside the composition roots that reads them.
class SystemClock final : public Clock {
 public:
  [[nodiscard]] Timestamp Now() const override { return std::chrono::system_clock::now(); }
  [[nodiscard]] MonotonicTime Monotonic() const override {
    return std::chrono::steady_clock::now();
  }
};

// A clock that moves only when told. Both readings advance together. Thread-safe.
class FakeClock final : public Clock {
 public:
  // Starts at 2026-01-01T00:00:00Z wall time and an arbitrary monotonic origin.
  FakeClock()
      : wall_(std::chrono::system_clock::time_point(std::chrono::seconds(1767225600))),
        mono_(MonotonicTime(std::chrono::hours(1))) {}

  Timestamp Now() const override {
    absl::MutexLock lock(&mu_);
    return wall_;
  }
  MonotonicTime Monotonic() const override {
    absl::MutexLock lock(&mu_);
    return mono_;
  }
  template <typename Rep, typename Period>
  void Advance(std::chrono::duration<Rep, Period> d) {
    absl::MutexLock lock(&mu_);
    wall_ += std::chrono::duration_cast<Timestamp::duration>(d);
    mono_ += std::chrono::duration_cast<MonotonicTime::duration>(d);
  }

 private:
  mutable absl::Mutex mu_;
  Timestamp wall_ ABSL_GUARDED_BY(mu_);
  MonotonicTime mono_ ABSL_GUARDED_BY(mu_);
};

// `clock`, or one SystemClock shared by the process when it is null: components whose options
// leave the clock unset (most tests, tools) read the real time.
const Clock* ClockOrSystem(const Clock* clock);

// The clock's wall time as an absl::Time.
inline absl::Time AbslNow(const Clock& clock) { return absl::FromChrono(clock.Now()); }

// The monotonic reading `d` after now: a deadline for an interval or a timeout. Durations
// beyond a century (InfiniteDuration included) are a century, so the sum never overflows.
MonotonicTime MonotonicAfter(const Clock& clock, absl::Duration d);

// Waits on `cv` (the caller holds `mu`) until it is signalled or `deadline`, as `clock` reads it,
// has passed; true when the deadline has passed. The wait itself runs in real time for what is
// left by `clock`, so with SystemClock this is CondVar::WaitWithDeadline, and a FakeClock moved
// by hand is noticed at the next signal (or when the real wait for the old remainder ends).
bool WaitUntil(absl::CondVar& cv, absl::Mutex* mu, const Clock& clock, absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
// The same against the monotonic reading: what intervals and timeouts wait with, so a step of
// the wall clock (NTP, an operator) neither stretches nor cuts them.
bool WaitUntil(absl::CondVar& cv, absl::Mutex* mu, const Clock& clock, MonotonicTime deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_CLOCK_H_
