// No starvation (docs/quotas.md#no-starvation), through the control plane and its loop on the
// in-memory stores with a FakeClock: a gang that small work keeps overtaking gets GPUs held for
// it once it has been overtaken past the bound, and is placed when they add up; without the
// bound it waits for ever.

#include <chrono>
#include <deque>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/quota_fixtures.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"

namespace gpufed {
namespace {

using ::gpufed::testing::User;

constexpr auto kCycle = std::chrono::minutes(1);

WorkloadSpec Job(uint32_t gpus) {
  WorkloadSpec s;
  s.tenant = "acme";
  s.project = "p";
  s.name = "job";
  s.gpus_per_replica = gpus;
  s.estimated_duration_ms = int64_t{8} * 60 * 1000;
  return s;
}

SchedulerOptions WithBound(std::chrono::minutes bound) {
  SchedulerOptions options;
  options.starvation_bound = bound;
  return options;
}

class StarvationTest : public testing::PlaneLoopTestBase,
                       public ::testing::WithParamInterface<int> {
 protected:
  StarvationTest() : PlaneLoopTestBase(nullptr, WithBound(std::chrono::minutes(GetParam()))) {}

  // One node of 8 GPUs kept full by 1-GPU jobs: every cycle the oldest ends and a new one is
  // submitted, so one GPU frees at a time and there is always small work behind the gang.
  // Returns the cycle the gang was placed in (or `cycles` if never), and whether it was seen
  // waiting with kReserved.
  std::pair<int, bool> Run(int cycles) {
    Register("c1", /*nodes=*/1);
    std::deque<WorkloadId> running;
    for (int i = 0; i < 8; ++i) {
      absl::StatusOr<SubmitResult> r = Submit(User("acme"), Job(1));
      EXPECT_OK(r);
      running.push_back(r->workload.id);
    }
    Step();
    for (WorkloadId id : running) EXPECT_OK(Report("c1", id, WorkloadState::kRunning));
    absl::StatusOr<SubmitResult> gang = Submit(User("acme"), Job(8));
    EXPECT_OK(gang);
    const WorkloadId gang_id = gang->workload.id;
    bool reserved = false;
    for (int cycle = 0; cycle < cycles; ++cycle) {
      clock_.Advance(kCycle);
      EXPECT_OK(Report("c1", running.front(), WorkloadState::kSucceeded));
      running.pop_front();
      absl::StatusOr<SubmitResult> small = Submit(User("acme"), Job(1));
      EXPECT_OK(small);
      Step();
      if (HoldsCapacity(MustGet(gang_id).state)) return {cycle, reserved};
      reserved |= MustGet(gang_id).pending_reason.code == ReasonCode::kReserved;
      // What was placed starts; it is the newest running.
      absl::StatusOr<std::vector<Workload>> active = store_.ListActive("");
      EXPECT_OK(active);
      for (const Workload& w : *active) {
        if (w.state != WorkloadState::kPlaced) continue;
        EXPECT_OK(Report("c1", w.id, WorkloadState::kRunning));
        running.push_back(w.id);
      }
    }
    return {cycles, reserved};
  }
};

TEST_P(StarvationTest, AGangOvertakenPastTheBoundGetsItsGpusHeldAndIsPlaced) {
  const int bound = GetParam();
  const auto [placed, reserved] = Run(120);
  if (bound == 0) {
    // The baseline: each GPU that frees goes to the small job behind the gang.
    EXPECT_EQ(placed, 120) << "without a bound the gang is overtaken for ever";
    EXPECT_FALSE(reserved);
  } else {
    // Overtaken from the first cycle; held for from the bound on; one GPU frees a cycle.
    EXPECT_LE(placed, bound + 8 + 1);
    EXPECT_GE(placed, bound);
    EXPECT_TRUE(reserved);
  }
}

INSTANTIATE_TEST_SUITE_P(Bounds, StarvationTest, ::testing::Values(0, 5, 30));

}  // namespace
}  // namespace gpufed
