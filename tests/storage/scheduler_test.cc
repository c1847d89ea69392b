// The scheduler against the real store: placements commit, reasons land in PostgreSQL, the pool
// is rebuilt from PostgreSQL exactly as a restarted (or newly elected) scheduler sees it.

#include "federation/scheduler.h"

#include <set>

#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"

namespace gpufed::storage {
namespace {

class SchedulerTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    if (HasFatalFailure()) return;
    AddTenant("acme", "research");
    ClusterInfo info;
    info.name = "dgx";
    info.provider = "onprem";
    NodeInfo node;
    node.name = "dgx-01";
    for (uint32_t g = 0; g < 8; ++g) {
      GpuInfo gpu;
      gpu.uuid = "GPU-dgx-01-" + std::to_string(g);
      gpu.index = g;
      gpu.model = "H100-80GB";
      gpu.memory_mib = 81559;
      gpu.nvlink_domain = "dgx-01-nvl";
      node.gpus.push_back(gpu);
    }
    ASSERT_TRUE(store_->RegisterCluster(info, {node}).ok());
  }

  static WorkloadSpec Gpus(const std::string& name, uint32_t gpus) {
    WorkloadSpec s = Spec(name);
    s.replicas = 1;
    s.gpus_per_replica = gpus;
    s.topology = Topology::kNone;
    return s;
  }
};

TEST_F(SchedulerTest, PlacesWhatFitsAndRecordsWhyTheRestWaits) {
  Workload a = MustSubmit(Gpus("a", 4));
  Workload b = MustSubmit(Gpus("b", 4));
  Workload c = MustSubmit(Gpus("c", 8));
  Workload d = MustSubmit(Gpus("d", 16));
  Scheduler scheduler(store_.get(), store_.get());
  ASSERT_TRUE(scheduler.Rebuild().ok());
  auto cycle = scheduler.RunCycle();
  ASSERT_TRUE(cycle.ok()) << cycle.status();
  ASSERT_EQ(cycle->placed.size(), 2u);
  EXPECT_EQ(store_->Get(a.id)->state, WorkloadState::kPlaced);
  EXPECT_EQ(store_->Get(b.id)->state, WorkloadState::kPlaced);
  Workload waiting = *store_->Get(c.id);
  EXPECT_EQ(waiting.state, WorkloadState::kPending);
  EXPECT_NE(waiting.pending_reason.find("waiting for capacity"), std::string::npos)
      << waiting.pending_reason;
  Workload never = *store_->Get(d.id);
  EXPECT_NE(never.pending_reason.find("no cluster can ever hold it"), std::string::npos)
      << never.pending_reason;
  // The two placements share no GPU.
  std::set<std::string> gpus;
  for (const Workload& w : cycle->placed) {
    for (const auto& r : w.assignment.replicas) gpus.insert(r.gpu_uuids.begin(), r.gpu_uuids.end());
  }
  EXPECT_EQ(gpus.size(), 8u);
}

TEST_F(SchedulerTest, ARebuiltSchedulerSeesTheCommittedAllocations) {
  Workload a = MustSubmit(Gpus("a", 4));
  {
    Scheduler first(store_.get(), store_.get());
    ASSERT_TRUE(first.Rebuild().ok());
    ASSERT_EQ(first.RunCycle()->placed.size(), 1u);
  }
  // A new scheduler (a restart, or another server taking over the lock).
  Scheduler second(store_.get(), store_.get());
  ASSERT_TRUE(second.Rebuild().ok());
  // A late, stale PENDING copy of the placed workload must neither place it again nor free
  // the 4 GPUs it really holds.
  second.NotifySubmitted(a);
  EXPECT_TRUE(second.RunCycle()->placed.empty());
  Workload b = MustSubmit(Gpus("b", 8));
  second.NotifySubmitted(b);
  auto cycle = second.RunCycle();
  ASSERT_TRUE(cycle.ok());
  EXPECT_TRUE(cycle->placed.empty()) << "4 of the node's 8 GPUs are still held by " << a.id;

  // a finishes: its GPUs come back and b goes.
  Transition run{a.id, WorkloadState::kPlaced, WorkloadState::kRunning, "agent:dgx", "started"};
  Transition done{a.id, WorkloadState::kRunning, WorkloadState::kSucceeded, "agent:dgx", ""};
  ASSERT_TRUE(store_->ApplyTransitions({run, done}).ok());
  second.NotifyReleased(a.id);
  cycle = second.RunCycle();
  ASSERT_EQ(cycle->placed.size(), 1u);
  EXPECT_EQ(cycle->placed[0].id, b.id);
}

TEST_F(SchedulerTest, WorkloadsBeyondTheCycleWindowStillGetAReason) {
  MustSubmit(Gpus("big", 16));
  Workload behind = MustSubmit(Gpus("behind", 16));
  SchedulerOptions options;
  options.max_considered = 1;
  Scheduler scheduler(store_.get(), store_.get(), options);
  ASSERT_TRUE(scheduler.Rebuild().ok());
  ASSERT_TRUE(scheduler.RunCycle().ok());
  EXPECT_NE(store_->Get(behind.id)->pending_reason.find("queued"), std::string::npos);
}

TEST_F(SchedulerTest, CancelledWhilePendingIsNeverPlaced) {
  Workload a = MustSubmit(Gpus("a", 1));
  Scheduler scheduler(store_.get(), store_.get());
  ASSERT_TRUE(scheduler.Rebuild().ok());  // a is in the in-memory queue now
  ASSERT_TRUE(store_->RequestCancel(a.id, "user:test", "changed my mind").ok());
  auto cycle = scheduler.RunCycle();  // the guarded commit refuses it
  ASSERT_TRUE(cycle.ok());
  EXPECT_TRUE(cycle->placed.empty());
  EXPECT_EQ(cycle->stats.lost_races, 1);
  EXPECT_EQ(store_->Get(a.id)->state, WorkloadState::kCancelled);
  // Its GPU was not kept: an 8-GPU job fits.
  Workload full = MustSubmit(Gpus("full", 8));
  scheduler.NotifySubmitted(full);
  EXPECT_EQ(scheduler.RunCycle()->placed.size(), 1u);
}

}  // namespace
}  // namespace gpufed::storage
