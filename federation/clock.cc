#include "federation/clock.h"

#include <algorithm>

namespace gpufed {

const Clock* ClockOrSystem(const Clock* clock) {
  static const SystemClock kSystemClock;
  return clock != nullptr ? clock : &kSystemClock;
}

bool WaitUntil(absl::CondVar& cv, absl::Mutex* mu, const Clock& clock, absl::Time deadline) {
  const absl::Duration left = deadline - AbslNow(clock);
  if (left <= absl::ZeroDuration()) return true;
  cv.WaitWithTimeout(mu, left);
  return AbslNow(clock) >= deadline;
}

MonotonicTime MonotonicAfter(const Clock& clock, absl::Duration d) {
  constexpr absl::Duration kCentury = absl::Hours(24 * 365 * 100);
  return clock.Monotonic() + absl::ToChronoNanoseconds(std::min(d, kCentury));
}

bool WaitUntil(absl::CondVar& cv, absl::Mutex* mu, const Clock& clock, MonotonicTime deadline) {
  const MonotonicTime::duration left = deadline - clock.Monotonic();
  if (left <= MonotonicTime::duration::zero()) return true;
  cv.WaitWithTimeout(mu, absl::FromChrono(left));
  return clock.Monotonic() >= deadline;
}

}  // namespace gpufed
