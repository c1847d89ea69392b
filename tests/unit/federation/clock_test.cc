#include "federation/clock.h"

#include <gtest/gtest.h>

#include <chrono>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpufed {
namespace {

TEST(ClockOrSystemTest, KeepsAGivenClockAndSharesOneSystemClockOtherwise) {
  FakeClock fake;
  EXPECT_EQ(ClockOrSystem(&fake), &fake);
  ASSERT_NE(ClockOrSystem(nullptr), nullptr);
  EXPECT_EQ(ClockOrSystem(nullptr), ClockOrSystem(nullptr));
}

TEST(WaitUntilTest, AnswersByTheGivenClockNotByRealTime) {
  FakeClock clock;
  // A century ahead of the wall clock: a wait measured by the wall clock would never end.
  clock.Advance(std::chrono::hours(24 * 365 * 100));
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  const absl::Time now = AbslNow(clock);
  EXPECT_TRUE(WaitUntil(cv, &mu, clock, now - absl::Hours(1)));
  EXPECT_TRUE(WaitUntil(cv, &mu, clock, now));
  // Not yet passed by the fake clock, which does not move by itself: waits out the remainder
  // (a millisecond of real time) and says the deadline has not passed.
  EXPECT_FALSE(WaitUntil(cv, &mu, clock, now + absl::Milliseconds(1)));
}

TEST(WaitUntilTest, MonotonicDeadlinesAnswerByTheMonotonicReading) {
  FakeClock clock;
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  const MonotonicTime now = clock.Monotonic();
  EXPECT_TRUE(WaitUntil(cv, &mu, clock, now - std::chrono::hours(1)));
  EXPECT_TRUE(WaitUntil(cv, &mu, clock, now));
  const MonotonicTime later = MonotonicAfter(clock, absl::Milliseconds(1));
  EXPECT_EQ(later, now + std::chrono::milliseconds(1));
  EXPECT_FALSE(WaitUntil(cv, &mu, clock, later));
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(WaitUntil(cv, &mu, clock, later));
}

TEST(MonotonicAfterTest, AnInfiniteDurationDoesNotOverflow) {
  FakeClock clock;
  const MonotonicTime now = clock.Monotonic();
  const MonotonicTime never = MonotonicAfter(clock, absl::InfiniteDuration());
  EXPECT_GT(never, now + std::chrono::hours(24 * 365 * 99));
}

}  // namespace
}  // namespace gpufed
