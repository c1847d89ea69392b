// The scheduler against the real store: placements commit, reasons land in PostgreSQL, the pool
// is rebuilt from PostgreSQL exactly as a restarted (or newly elected) scheduler sees it.

#include "federation/scheduler.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "tests/storage/store_test_util.h"
#include "tests/support/status_matchers.h"

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
    ASSERT_OK(store_->RegisterCluster(info, {node}));
  }

  // A one-node cluster of `gpus` GPUs of `model`, each without NVLink peers.
  void AddCluster(const std::string& name, const std::string& model, uint32_t gpus,
                  bool mig_capable) {
    ClusterInfo info;
    info.name = name;
    info.provider = "onprem";
    NodeInfo node;
    node.name = name + "-01";
    for (uint32_t g = 0; g < gpus; ++g) {
      GpuInfo gpu;
      gpu.uuid = "GPU-" + node.name + "-" + std::to_string(g);
      gpu.index = g;
      gpu.model = model;
      gpu.memory_mib = 81559;
      gpu.mig_capable = mig_capable;
      node.gpus.push_back(gpu);
    }
    ASSERT_OK(store_->RegisterCluster(info, {node}));
  }

  static WorkloadSpec Share(const std::string& name, uint32_t milli, const std::string& model) {
    WorkloadSpec s = Gpus(name, 1);
    s.gpu_milli = milli;
    s.gpu_models = {model};
    return s;
  }

  static WorkloadSpec Mig(const std::string& name, const std::string& profile) {
    WorkloadSpec s = Gpus(name, 1);
    s.mig_profile = profile;
    s.gpu_models = {"H100-80GB"};
    return s;
  }

  // What an agent reports: PLACED -> RUNNING, or RUNNING -> `to`.
  static Transition AgentStep(WorkloadId id, WorkloadState to, const std::string& actor,
                              const std::string& reason) {
    Transition t;
    t.id = id;
    t.from = to == WorkloadState::kRunning ? WorkloadState::kPlaced : WorkloadState::kRunning;
    t.to = to;
    t.actor = actor;
    t.reason = reason;
    return t;
  }

  // The audit reason stored with the workload's transition into `to_state`.
  std::string EventReason(WorkloadId id, const std::string& to_state) {
    pqxx::connection conn(dsn());
    pqxx::nontransaction txn(conn);
    return txn
        .exec_params1("SELECT reason FROM workload_events WHERE workload_id = $1 AND to_state = $2",
                      id, to_state)[0]
        .as<std::string>();
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
  ASSERT_OK(scheduler.Rebuild());
  auto cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 2u);
  EXPECT_EQ(store_->Get(a.id)->state, WorkloadState::kPlaced);
  EXPECT_EQ(store_->Get(b.id)->state, WorkloadState::kPlaced);
  // Waiting for capacity: admitted, with its reason.
  Workload waiting = *store_->Get(c.id);
  EXPECT_EQ(waiting.state, WorkloadState::kAdmitted);
  EXPECT_EQ(waiting.pending_reason.code, ReasonCode::kNothingFree) << waiting.pending_reason;
  Workload never = *store_->Get(d.id);
  EXPECT_EQ(never.pending_reason.code, ReasonCode::kGpuCountUnsatisfiable) << never.pending_reason;
  EXPECT_TRUE(never.pending_reason.never_fits());
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
    ASSERT_OK(first.Rebuild());
    ASSERT_EQ(first.RunCycle()->placed.size(), 1u);
  }
  // A new scheduler (a restart, or another server taking over the lock).
  Scheduler second(store_.get(), store_.get());
  ASSERT_OK(second.Rebuild());
  // A late, stale PENDING copy of the placed workload must neither place it again nor free
  // the 4 GPUs it really holds.
  second.NotifySubmitted(a);
  EXPECT_TRUE(second.RunCycle()->placed.empty());
  Workload b = MustSubmit(Gpus("b", 8));
  second.NotifySubmitted(b);
  auto cycle = second.RunCycle();
  ASSERT_OK(cycle);
  EXPECT_TRUE(cycle->placed.empty()) << "4 of the node's 8 GPUs are still held by " << a.id;

  // a finishes: its GPUs come back and b goes.
  const Transition run = AgentStep(a.id, WorkloadState::kRunning, "agent:dgx", "started");
  const Transition done = AgentStep(a.id, WorkloadState::kSucceeded, "agent:dgx", "");
  ASSERT_OK(store_->ApplyTransitions({run, done}));
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
  ASSERT_OK(scheduler.Rebuild());
  ASSERT_OK(scheduler.RunCycle());
  EXPECT_EQ(store_->Get(behind.id)->pending_reason,
            PendingReason(ReasonCode::kQueueDepth).Set(figure::kConsidered, 1));
}

// Whether a reason is news is decided on codes and figures: a new code is written at once,
// figures that moved only after reason_refresh_cycles.
TEST_F(SchedulerTest, ANewReasonCodeIsWrittenAtOnceMovedFiguresOnlyNowAndThen) {
  MustSubmit(Gpus("six", 6));
  Workload eight = MustSubmit(Gpus("eight", 8));
  SchedulerOptions options;
  options.reason_refresh_cycles = 3;
  Scheduler scheduler(store_.get(), store_.get(), options);
  ASSERT_OK(scheduler.Rebuild());
  auto stored = [&] { return store_->Get(eight.id)->pending_reason; };

  // Cycle 1: six is placed; eight is admitted with its first reason (written with the
  // transition), 2 GPUs free on the node.
  auto cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 1u);
  EXPECT_EQ(cycle->stats.admitted, 1);
  EXPECT_EQ(cycle->stats.reasons_written, 0);
  EXPECT_EQ(store_->Get(eight.id)->state, WorkloadState::kAdmitted);
  EXPECT_EQ(stored().code, ReasonCode::kGpusBusy) << stored();
  EXPECT_EQ(stored().Int(figure::kLargest), 2);

  // Cycle 2: one more GPU is taken (after eight was looked at: it is behind eight in the queue).
  Workload one = MustSubmit(Gpus("one", 1));
  scheduler.NotifySubmitted(one);
  cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 1u);
  EXPECT_EQ(cycle->stats.reasons_written, 0);
  // Cycle 3: the same blocker with other figures (1 free) is not written yet...
  cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  EXPECT_EQ(cycle->stats.reasons_written, 0);
  EXPECT_EQ(stored().Int(figure::kLargest), 2);
  // ... but is after reason_refresh_cycles (cycle 4).
  cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  EXPECT_EQ(cycle->stats.reasons_written, 1);
  EXPECT_EQ(stored().code, ReasonCode::kGpusBusy);
  EXPECT_EQ(stored().Int(figure::kLargest), 1);

  // The last GPU goes (cycle 5); nothing free is a new code, written at once (cycle 6).
  Workload last = MustSubmit(Gpus("last", 1));
  scheduler.NotifySubmitted(last);
  cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 1u);
  cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  EXPECT_EQ(cycle->stats.reasons_written, 1);
  EXPECT_EQ(stored().code, ReasonCode::kNothingFree) << stored();
  // Unchanged: nothing more to write.
  cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  EXPECT_EQ(cycle->stats.reasons_written, 0);
}

TEST_F(SchedulerTest, CancelledWhilePendingIsNeverPlaced) {
  Workload a = MustSubmit(Gpus("a", 1));
  Scheduler scheduler(store_.get(), store_.get());
  ASSERT_OK(scheduler.Rebuild());  // a is in the in-memory queue now
  ASSERT_OK(store_->RequestCancel(a.id, "user:test", "changed my mind"));
  auto cycle = scheduler.RunCycle();  // the guarded commit refuses it
  ASSERT_OK(cycle);
  EXPECT_TRUE(cycle->placed.empty());
  EXPECT_EQ(cycle->stats.lost_races, 1);
  EXPECT_EQ(store_->Get(a.id)->state, WorkloadState::kCancelled);
  // Its GPU was not kept: an 8-GPU job fits.
  Workload full = MustSubmit(Gpus("full", 8));
  scheduler.NotifySubmitted(full);
  EXPECT_EQ(scheduler.RunCycle()->placed.size(), 1u);
}

TEST_F(SchedulerTest, SharesOfOneGpuAreStoredAndSurviveARebuild) {
  AddCluster("infer", "L4", 1, /*mig_capable=*/false);
  Workload a = MustSubmit(Share("a", 600, "L4"));
  Workload b = MustSubmit(Share("b", 400, "L4"));
  Workload c = MustSubmit(Share("c", 100, "L4"));
  {
    Scheduler scheduler(store_.get(), store_.get());
    ASSERT_OK(scheduler.Rebuild());
    auto cycle = scheduler.RunCycle();
    ASSERT_OK(cycle);
    EXPECT_EQ(cycle->placed.size(), 2u);
    EXPECT_EQ(cycle->stats.repartitions, 0);
  }
  for (const auto& [w, milli] : {std::pair{a, 600u}, std::pair{b, 400u}}) {
    Workload got = *store_->Get(w.id);
    ASSERT_EQ(got.state, WorkloadState::kPlaced) << w.spec.name;
    EXPECT_EQ(got.assignment.cluster, "infer");
    ASSERT_EQ(got.assignment.replicas.size(), 1u);
    EXPECT_EQ(got.assignment.replicas[0].gpu_milli, milli);
    EXPECT_EQ(got.assignment.replicas[0].gpu_uuids, std::vector<std::string>{"GPU-infer-01-0"});
  }
  // Waiting for capacity: admitted, with its reason.
  Workload waiting = *store_->Get(c.id);
  EXPECT_EQ(waiting.state, WorkloadState::kAdmitted);
  EXPECT_EQ(waiting.pending_reason, PendingReason(ReasonCode::kNothingFree)
                                        .Set(figure::kNeeds, "100 milli-GPU of L4")
                                        .Set(figure::kUnit, "milli-GPU"));

  // A restarted scheduler reads the shares back: the GPU is still full.
  Scheduler second(store_.get(), store_.get());
  ASSERT_OK(second.Rebuild());
  EXPECT_TRUE(second.RunCycle()->placed.empty());
  EXPECT_FALSE(second.Explain(c.spec).assignment.has_value());

  // b ends: its 400 come back, and c takes 100 of them on the same GPU.
  const Transition run = AgentStep(b.id, WorkloadState::kRunning, "agent:infer", "");
  const Transition done = AgentStep(b.id, WorkloadState::kSucceeded, "agent:infer", "");
  ASSERT_OK(store_->ApplyTransitions({run, done}));
  second.NotifyReleased(b.id);
  auto cycle = second.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 1u);
  EXPECT_EQ(cycle->placed[0].id, c.id);
  EXPECT_EQ(cycle->placed[0].assignment.replicas[0].gpu_milli, 100u);
  EXPECT_EQ(cycle->placed[0].assignment.replicas[0].gpu_uuids[0], "GPU-infer-01-0");
}

TEST_F(SchedulerTest, MigRepartitionIsDecidedCountedStoredAndRebuilt) {
  AddCluster("mig", "H100-80GB", 1, /*mig_capable=*/true);
  Workload a = MustSubmit(Mig("a", "1g.10gb"));
  Workload b = MustSubmit(Mig("b", "1g.10gb"));
  Scheduler scheduler(store_.get(), store_.get());
  ASSERT_OK(scheduler.Rebuild());
  auto cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 2u);

  // The GPU had MIG off: the first placement turns it on, with a layout for the queue.
  int repartitions = 0;
  std::set<int32_t> starts;
  for (const Workload& w : cycle->placed) {
    repartitions += static_cast<int>(w.assignment.repartitions.size());
    ASSERT_EQ(w.assignment.replicas.size(), 1u);
    const ReplicaAssignment& r = w.assignment.replicas[0];
    EXPECT_EQ(r.mig_profile, "1g.10gb");
    EXPECT_GE(r.mig_start, 0);
    EXPECT_EQ(r.gpu_uuids, std::vector<std::string>{"GPU-mig-01-0"});
    EXPECT_EQ(r.gpu_milli, 0u);
    starts.insert(r.mig_start);
  }
  EXPECT_EQ(starts.size(), 2u) << "two instances, not one shared";
  EXPECT_GE(repartitions, 1);
  EXPECT_EQ(cycle->stats.repartitions, repartitions) << "every repartition is counted";

  Workload first = *store_->Get(a.id);
  ASSERT_EQ(first.state, WorkloadState::kPlaced);
  ASSERT_FALSE(first.assignment.repartitions.empty()) << "stored with the assignment";
  const Repartition& rp = first.assignment.repartitions[0];
  EXPECT_EQ(rp.node, "mig-01");
  EXPECT_EQ(rp.gpu_uuid, "GPU-mig-01-0");
  EXPECT_TRUE(rp.mig_enabled);
  EXPECT_NE(std::find(rp.layout.begin(), rp.layout.end(),
                      MigInstance{"1g.10gb", first.assignment.replicas[0].mig_start}),
            rp.layout.end())
      << "the new layout holds the assigned instance";
  EXPECT_NE(rp.reason.find(std::to_string(a.id)), std::string::npos) << rp.reason;
  // The audit trail says why: the PLACED event carries the repartition and its reason.
  const std::string reason = EventReason(a.id, "PLACED");
  EXPECT_NE(reason.find("placed on mig"), std::string::npos) << reason;
  EXPECT_NE(reason.find("mig-01/GPU-mig-01-0: " + rp.reason), std::string::npos) << reason;

  // A restarted scheduler re-applies the committed layout from the assignments (the inventory
  // still says MIG off until the agent reports): the instances in use stay taken.
  Scheduler second(store_.get(), store_.get());
  ASSERT_OK(second.Rebuild());
  Workload c = MustSubmit(Mig("c", "1g.10gb"));
  second.NotifySubmitted(c);
  cycle = second.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 1u);
  const ReplicaAssignment& rc = cycle->placed[0].assignment.replicas[0];
  EXPECT_EQ(rc.mig_profile, "1g.10gb");
  EXPECT_EQ(starts.count(rc.mig_start), 0u) << "slot " << rc.mig_start << " is already in use";
}

TEST_F(SchedulerTest, WithoutPartitioningAuthorityMigWaitsAndSaysWhy) {
  AddCluster("mig", "H100-80GB", 1, /*mig_capable=*/true);
  Workload a = MustSubmit(Mig("a", "3g.40gb"));
  SchedulerOptions options;
  options.placement.partitioning = false;
  Scheduler scheduler(store_.get(), store_.get(), options);
  ASSERT_OK(scheduler.Rebuild());
  auto cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  EXPECT_TRUE(cycle->placed.empty());
  EXPECT_EQ(cycle->stats.repartitions, 0);
  Workload waiting = *store_->Get(a.id);
  EXPECT_EQ(waiting.state, WorkloadState::kAdmitted);
  EXPECT_EQ(waiting.pending_reason.code, ReasonCode::kMigPartitioningOff) << waiting.pending_reason;
  const PlacementDecision explained = scheduler.Explain(a.spec);
  EXPECT_FALSE(explained.reason.never_fits()) << "an operator can turn the authority on";
}

TEST_F(SchedulerTest, ExplainBeforeThePoolIsLoadedDoesNotSayNever) {
  Workload a = MustSubmit(Gpus("a", 4));
  Scheduler scheduler(store_.get(), store_.get());
  PlacementDecision d = scheduler.Explain(a.spec);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kNotLoaded) << d.reason;

  ASSERT_OK(scheduler.Rebuild());
  d = scheduler.Explain(a.spec);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "dgx");
  // Explain places nothing.
  EXPECT_EQ(store_->Get(a.id)->state, WorkloadState::kPending);
  WorkloadSpec h200 = Gpus("h200", 8);
  h200.gpu_models = {"H200"};
  d = scheduler.Explain(h200);
  EXPECT_TRUE(d.reason.never_fits()) << d.reason;
}

// Explain works on its own copy of the latest snapshot: it follows what a cycle placed, places
// nothing itself, and answers many threads at once while the scheduler runs cycles.
TEST_F(SchedulerTest, ExplainFollowsEachSnapshotAndAnswersManyThreads) {
  Scheduler scheduler(store_.get(), store_.get());
  ASSERT_OK(scheduler.Rebuild());
  const WorkloadSpec eight = Gpus("eight", 8);
  ASSERT_TRUE(scheduler.Explain(eight).assignment.has_value());

  // A cycle places six GPUs' worth: eight no longer fit now, but would on an empty pool.
  Workload six = MustSubmit(Gpus("six", 6));
  scheduler.NotifySubmitted(six);
  auto cycle = scheduler.RunCycle();
  ASSERT_OK(cycle);
  ASSERT_EQ(cycle->placed.size(), 1u);
  PlacementDecision d = scheduler.Explain(eight);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kGpusBusy) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kLargest), 2);
  EXPECT_EQ(d.reason.Text(figure::kWhere), "dgx/dgx-01");

  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  readers.reserve(4);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const PlacementDecision two = scheduler.Explain(Gpus("two", 2));
        const PlacementDecision big = scheduler.Explain(eight);
        // Two GPUs stay free throughout (the cycles below place and free nothing).
        if (!two.assignment.has_value() || big.assignment.has_value() || big.reason.never_fits()) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  // Each cycle sees a cluster notification and publishes a new snapshot.
  for (int c = 0; c < 20; ++c) {
    scheduler.NotifyClusterState("dgx", ClusterState::kReady);
    ASSERT_OK(scheduler.RunCycle());
  }
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(store_->Get(six.id)->state, WorkloadState::kPlaced);
}

// A restarted scheduler measures fragmentation against what runs and waits now, from its first
// cycle: Rebuild seeds the workload mix from the active and pending workloads it loads.
TEST_F(SchedulerTest, RebuildSeedsTheMixFromActiveAndPendingWorkloads) {
  AddCluster("shares", "L4", 4, /*mig_capable=*/false);
  Workload running = MustSubmit(Share("running", 500, "L4"));
  {
    Scheduler first(store_.get(), store_.get());
    ASSERT_OK(first.Rebuild());
    ASSERT_EQ(first.mix().size(), 1u);  // the pending share
    EXPECT_EQ(first.mix()[0].demand.milli, 500u);
    auto cycle = first.RunCycle();
    ASSERT_OK(cycle);
    ASSERT_EQ(cycle->placed.size(), 1u);
  }
  Workload waiting = MustSubmit(Gpus("waiting", 16));  // never fits: stays pending
  Scheduler second(store_.get(), store_.get());
  ASSERT_OK(second.Rebuild());
  ASSERT_EQ(second.mix().size(), 2u);
  std::set<std::pair<uint32_t, uint32_t>> shapes;  // (GPUs, milli per GPU)
  double weight = 0;
  for (const MixEntry& e : second.mix()) {
    shapes.emplace(e.demand.gpus, e.demand.milli);
    weight += e.weight;
  }
  EXPECT_EQ(shapes, (std::set<std::pair<uint32_t, uint32_t>>{{1, 500}, {16, 1000}}));
  EXPECT_DOUBLE_EQ(weight, 1.0);
  EXPECT_EQ(store_->Get(running.id)->state, WorkloadState::kPlaced);
  EXPECT_EQ(store_->Get(waiting.id)->state, WorkloadState::kPending);
}

}  // namespace
}  // namespace gpufed::storage
