// The scheduler's window (SchedulerOptions::max_considered) on the in-memory store: a cycle
// judges the window, and only what changed since the last cycle when capacity did not; the queue
// beyond the window carries the queued reason, written once.

#include <string>

#include "federation/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed::testing {
namespace {

class SchedulerWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(store_.CreateTenant(Tenant{"acme", "", {}}));
    ASSERT_OK(store_.CreateProject(Project{"acme", "research", {}}));
    ClusterInfo info;
    info.name = "dgx";
    ASSERT_OK(store_.RegisterCluster(info, {DgxNode()}));
  }

  // Stored as the control plane stores a submission (with the queued reason), and told to the
  // scheduler as the control plane tells it.
  Workload Submit(Scheduler& scheduler, const WorkloadSpec& spec) {
    absl::StatusOr<SubmitResult> r = store_.Submit(spec, scheduler.QueuedReason());
    EXPECT_OK(r);
    if (!r.ok()) return {};
    scheduler.NotifySubmitted(r->workload);
    return r->workload;
  }

  ReasonCode StoredCode(WorkloadId id) {
    absl::StatusOr<Workload> w = store_.Get(id);
    EXPECT_OK(w);
    return w.ok() ? w->pending_reason.code : ReasonCode::kNone;
  }

  static SchedulerOptions Window(int considered) {
    SchedulerOptions options;
    options.max_considered = considered;
    return options;
  }

  MemoryStore store_;
};

TEST_F(SchedulerWindowTest, TheQueueBeyondTheWindowIsWrittenOnlyWhenItsReasonChanges) {
  Scheduler scheduler(&store_, &store_, Window(2));
  ASSERT_OK(scheduler.Rebuild());
  Workload full = Submit(scheduler, Gpus("full", 8));
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler.RunCycle());
  ASSERT_EQ(cycle.placed.size(), 1u);

  // Nothing is free now. Two fill the window; three wait beyond it with the reason they were
  // stored with, so nothing is written for them.
  Workload in1 = Submit(scheduler, Gpus("in1", 1));
  Workload in2 = Submit(scheduler, Gpus("in2", 1));
  Workload out1 = Submit(scheduler, Gpus("out1", 1));
  Workload out2 = Submit(scheduler, Gpus("out2", 1));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.stats.considered, 2);
  // The two in the window are admitted, their reason written with the transition.
  EXPECT_EQ(cycle.stats.admitted, 2);
  EXPECT_EQ(cycle.stats.reasons_written, 0);
  EXPECT_EQ(StoredCode(in1.id), ReasonCode::kNothingFree);
  EXPECT_EQ(StoredCode(in2.id), ReasonCode::kNothingFree);
  EXPECT_EQ(StoredCode(out1.id), ReasonCode::kQueueDepth);
  EXPECT_EQ(StoredCode(out2.id), ReasonCode::kQueueDepth);

  // A higher-priority newcomer takes a place in the window: it is judged, and the one it
  // pushed out is told it waits its turn.
  WorkloadSpec urgent_spec = Gpus("urgent", 1);
  urgent_spec.priority = 10;
  Workload urgent = Submit(scheduler, urgent_spec);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.stats.admitted, 1);
  EXPECT_EQ(cycle.stats.reasons_written, 1);
  EXPECT_EQ(StoredCode(urgent.id), ReasonCode::kNothingFree);
  EXPECT_EQ(StoredCode(in1.id), ReasonCode::kNothingFree);
  EXPECT_EQ(StoredCode(in2.id), ReasonCode::kQueueDepth);

  // Nothing changed: nothing to write.
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.stats.reasons_written, 0);
  EXPECT_TRUE(cycle.placed.empty());

  // Capacity comes back: the whole window is judged again and placed.
  ASSERT_OK(store_.ApplyTransitions({[&] {
    Transition t;
    t.id = full.id;
    t.from = WorkloadState::kPlaced;
    t.to = WorkloadState::kSucceeded;
    return t;
  }()}));
  scheduler.NotifyReleased(full.id);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.placed.size(), 2u);
  // The next cycle reaches what was beyond the window.
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.placed.size(), 2u);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.placed.size(), 1u);
  EXPECT_EQ(scheduler.pending_count(), 0);
}

// Without a change in capacity the window is not judged again, yet a newcomer that fits is
// placed at once.
TEST_F(SchedulerWindowTest, ANewcomerThatFitsIsPlacedWhileTheRestOfTheWindowWaits) {
  Scheduler scheduler(&store_, &store_, Window(10));
  ASSERT_OK(scheduler.Rebuild());
  Workload big = Submit(scheduler, Gpus("big", 16));
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler.RunCycle());
  EXPECT_TRUE(cycle.placed.empty());
  EXPECT_EQ(StoredCode(big.id), ReasonCode::kGpuCountUnsatisfiable);

  Workload small = Submit(scheduler, Gpus("small", 2));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  ASSERT_EQ(cycle.placed.size(), 1u);
  EXPECT_EQ(cycle.placed[0].id, small.id);
  EXPECT_EQ(cycle.stats.reasons_written, 0);
}

// A full window whose answers stand is not walked again, unless figures in it wait for their
// refresh: those are still written once reason_refresh_cycles have passed.
TEST_F(SchedulerWindowTest, FiguresWaitingInAFullWindowAreStillRefreshed) {
  SchedulerOptions options = Window(2);
  options.reason_refresh_cycles = 3;
  Scheduler scheduler(&store_, &store_, options);
  ASSERT_OK(scheduler.Rebuild());
  Submit(scheduler, Gpus("six", 6));
  Workload eight = Submit(scheduler, Gpus("eight", 8));
  auto largest = [&] {
    absl::StatusOr<Workload> w = store_.Get(eight.id);
    EXPECT_OK(w);
    return w.ok() ? w->pending_reason.Int(figure::kLargest) : -1;
  };

  // Cycle 1: six is placed; eight is told 2 GPUs are free.
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler.RunCycle());
  ASSERT_EQ(cycle.placed.size(), 1u);
  EXPECT_EQ(StoredCode(eight.id), ReasonCode::kGpusBusy);
  EXPECT_EQ(largest(), 2);
  // Cycle 2 places one more GPU; in cycle 3 eight's figure moves (1 free), not yet written.
  Submit(scheduler, Gpus("one", 1));
  Workload tail = Submit(scheduler, Gpus("tail", 8));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  ASSERT_EQ(cycle.placed.size(), 1u);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_TRUE(cycle.placed.empty());
  EXPECT_EQ(StoredCode(tail.id), ReasonCode::kGpusBusy);
  EXPECT_EQ(largest(), 2);

  // Cycle 4: capacity did not change and the newcomer queues behind the full window, yet eight's
  // figure is due.
  Workload behind = Submit(scheduler, Gpus("behind", 1));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.stats.considered, 2);
  EXPECT_EQ(largest(), 1);
  EXPECT_EQ(StoredCode(behind.id), ReasonCode::kQueueDepth);

  // Cycle 5: nothing is due; nothing is written.
  ASSERT_OK_AND_ASSIGN(cycle, scheduler.RunCycle());
  EXPECT_EQ(cycle.stats.considered, 2);
  EXPECT_EQ(cycle.stats.reasons_written, 0);
}

// A submission waits its turn until the scheduler has judged it: the reason the queue beyond
// the window carries.
TEST_F(SchedulerWindowTest, QueuedReasonIsWhatSubmissionsAreStoredWith) {
  Scheduler scheduler(&store_, &store_, Window(7));
  EXPECT_EQ(scheduler.QueuedReason().code, ReasonCode::kQueueDepth);
  EXPECT_EQ(scheduler.QueuedReason().Int(figure::kConsidered), 7);
}

}  // namespace
}  // namespace gpufed::testing
