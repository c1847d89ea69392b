#include "federation/clock.h"

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

}  // namespace gpufed
