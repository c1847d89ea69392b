// Pool bookkeeping: GPU shares, host CPU and memory, MIG instances and repartitions, the
// per-model cluster summaries placement prunes with, and re-applying allocations when an
// inventory is replaced.

#include "federation/mig.h"
#include "federation/pool.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/placement_fixtures.h"

namespace gpufed {
namespace {

using testing::ClusterOf;
using testing::GpuOf;
using testing::Gpus;
using testing::IsOk;
using testing::MigReplica;
using testing::Node;
using ::testing::Not;
using testing::ShareOn;
using testing::ShareReplica;
using testing::SlotOf;
using testing::WholeOn;

// One node "n" with two L4s, 8 cores and 32 GiB.
Pool TwoL4() {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("n", Gpus("n", 2, "L4"), "r0", "", 8000, 32768)}));
  return pool;
}

TEST(PoolSharesTest, TwoWorkloadsShareOneGpuAndAThirdIsRefused) {
  Pool pool = TwoL4();
  ASSERT_OK(pool.Allocate(1, ShareOn("c", "n", 0, 600)));
  EXPECT_EQ(SlotOf(pool, "c", "n", 0).milli_free, 400u);
  ASSERT_OK(pool.Allocate(2, ShareOn("c", "n", 0, 400)));
  EXPECT_EQ(SlotOf(pool, "c", "n", 0).milli_free, 0u);
  EXPECT_EQ(SlotOf(pool, "c", "n", 0).holders.size(), 2u);
  // A GPU with shares on it is not a free whole GPU.
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->free, 1u);

  const NodeSlots before = *pool.FindCluster("c")->FindNode("n");
  absl::Status s = pool.Allocate(3, ShareOn("c", "n", 0, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("has 0 milli-GPU free, needs 1"), std::string::npos) << s;
  EXPECT_FALSE(pool.Holds(3));
  const NodeSlots& after = *pool.FindCluster("c")->FindNode("n");
  EXPECT_EQ(after.gpus[0].holders.size(), before.gpus[0].holders.size());
  EXPECT_EQ(after.gpus[0].milli_free, 0u);
  EXPECT_EQ(after.cpu_free, before.cpu_free);
  EXPECT_EQ(after.free, before.free);

  // A whole GPU on the shared GPU is refused too.
  EXPECT_EQ(pool.Allocate(4, WholeOn("c", "n", {0})).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PoolSharesTest, ReleaseFreesExactlyItsShare) {
  Pool pool = TwoL4();
  ASSERT_OK(pool.Allocate(1, ShareOn("c", "n", 0, 600)));
  ASSERT_OK(pool.Allocate(2, ShareOn("c", "n", 0, 400)));
  pool.Release(1);
  const GpuSlot& slot = SlotOf(pool, "c", "n", 0);
  EXPECT_EQ(slot.milli_free, 600u);
  ASSERT_EQ(slot.holders.size(), 1u);
  EXPECT_EQ(slot.holders[0].id, 2);
  EXPECT_EQ(slot.holders[0].milli, 400u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->HolderOf(0), 2);
  // 601 does not fit, 600 does.
  EXPECT_THAT(pool.Allocate(3, ShareOn("c", "n", 0, 601)), Not(IsOk()));
  EXPECT_OK(pool.Allocate(3, ShareOn("c", "n", 0, 600)));
  pool.Release(2);
  pool.Release(3);
  EXPECT_EQ(SlotOf(pool, "c", "n", 0).milli_free, 1000u);
  EXPECT_TRUE(SlotOf(pool, "c", "n", 0).Idle());
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->free, 2u);
}

TEST(PoolSharesTest, OneWorkloadWithTwoShareReplicasOnOneGpu) {
  Pool pool = TwoL4();
  Assignment a;
  a.cluster = "c";
  a.replicas = {ShareReplica("n", 1, 300), ShareReplica("n", 1, 300)};
  ASSERT_OK(pool.Allocate(7, a, {1000, 2048}));
  const NodeSlots& node = *pool.FindCluster("c")->FindNode("n");
  EXPECT_EQ(node.gpus[1].milli_free, 400u);
  EXPECT_EQ(node.gpus[1].holders.size(), 2u);
  // Host resources are per replica.
  EXPECT_EQ(node.cpu_free, 8000u - 2000u);
  EXPECT_EQ(node.memory_free, 32768u - 4096u);
  // 200 + 201 more would need 401 of the 400 left: refused as a whole.
  Assignment too_much;
  too_much.cluster = "c";
  too_much.replicas = {ShareReplica("n", 1, 200), ShareReplica("n", 1, 201)};
  EXPECT_EQ(pool.Allocate(8, too_much).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SlotOf(pool, "c", "n", 1).milli_free, 400u);
  pool.Release(7);
  EXPECT_EQ(SlotOf(pool, "c", "n", 1).milli_free, 1000u);
  EXPECT_TRUE(SlotOf(pool, "c", "n", 1).holders.empty());
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->cpu_free, 8000u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->memory_free, 32768u);
}

TEST(PoolHostTest, CpuAndMemoryAreAccountedAndEnforced) {
  Pool pool = TwoL4();
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "n", {0}), {6000, 1024}));
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->cpu_free, 2000u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->memory_free, 31744u);
  // The second GPU is free but the CPU is not.
  absl::Status s = pool.Allocate(2, WholeOn("c", "n", {1}), {3000, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("2000 CPU millis free, needs 3000"), std::string::npos)
      << s;
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->free, 1u);  // unchanged
  s = pool.Allocate(2, WholeOn("c", "n", {1}), {0, 40000});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("31744 MiB free, needs 40000"), std::string::npos) << s;
  ASSERT_OK(pool.Allocate(2, WholeOn("c", "n", {1}), {2000, 31744}));
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->cpu_free, 0u);
  pool.Release(1);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->cpu_free, 6000u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->memory_free, 1024u);
}

TEST(PoolHostTest, UnreportedHostResourcesAreUnlimited) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("n", Gpus("n", 1, "L4"))}));
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "n", {0}), {1000000, 1000000}));
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->cpu_free, kUnlimited);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->memory_free, kUnlimited);
}

// One node "m" with two H100-80GB: GPU 0 in MIG mode with two 3g.40gb instances, GPU 1 without.
Pool MigPool() {
  std::vector<GpuInfo> gpus = Gpus("m", 2, "H100-80GB", "m-nvl", /*mig_capable=*/true);
  gpus[0].mig_enabled = true;
  gpus[0].mig_layout = {{"3g.40gb", 0}, {"3g.40gb", 4}};
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("m", gpus, "r0")}));
  return pool;
}

Assignment MigOn(const std::string& node, int gpu, const std::string& profile, int start) {
  Assignment a;
  a.cluster = "c";
  a.replicas.push_back(MigReplica(node, gpu, profile, start));
  return a;
}

TEST(PoolMigTest, BindAndUnbindInstances) {
  Pool pool = MigPool();
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).milli_free, 0u) << "a MIG GPU has no shares";
  EXPECT_EQ(pool.FindCluster("c")->FindNode("m")->free, 1u);
  ASSERT_OK(pool.Allocate(1, MigOn("m", 0, "3g.40gb", 4)));
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{0, 1}));
  EXPECT_FALSE(SlotOf(pool, "c", "m", 0).Idle());
  EXPECT_EQ(pool.FindCluster("c")->FindNode("m")->HolderOf(0), 1);
  // The same instance cannot be bound twice; an instance that does not exist cannot be bound.
  EXPECT_EQ(pool.Allocate(2, MigOn("m", 0, "3g.40gb", 4)).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::Status s = pool.Allocate(2, MigOn("m", 0, "1g.10gb", 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("no MIG instance 1g.10gb at slot 0"), std::string::npos)
      << s;
  // Whole GPUs and shares do not go on a MIG GPU.
  EXPECT_EQ(pool.Allocate(2, WholeOn("c", "m", {0})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Allocate(2, ShareOn("c", "m", 0, 100)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(pool.Allocate(2, MigOn("m", 0, "3g.40gb", 0)));
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{2, 1}));
  pool.Release(1);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{2, 0}));
  pool.Release(2);
  EXPECT_TRUE(SlotOf(pool, "c", "m", 0).Idle());
  // Releasing keeps the layout.
  EXPECT_TRUE(GpuOf(pool, "c", "m", 0).mig_enabled);
  EXPECT_EQ(GpuOf(pool, "c", "m", 0).mig_layout.size(), 2u);
  EXPECT_EQ(pool.repartitions_applied(), 0u);
}

TEST(PoolMigTest, RepartitionOnAnIdleGpuIsAppliedAndCounted) {
  Pool pool = MigPool();
  Assignment a = MigOn("m", 1, "1g.10gb", 5);
  Repartition r;
  r.node = "m";
  r.gpu_uuid = testing::Uuid("m", 1);
  r.mig_enabled = true;
  r.layout = {{"4g.40gb", 0}, {"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}};
  r.reason = "test";
  a.repartitions.push_back(r);
  ASSERT_OK(ValidateMigLayout(*FindMigGeometry("H100-80GB"), r.layout));
  ASSERT_OK(pool.Allocate(1, a));
  EXPECT_EQ(pool.repartitions_applied(), 1u);
  const GpuInfo& gpu = GpuOf(pool, "c", "m", 1);
  EXPECT_TRUE(gpu.mig_enabled);
  EXPECT_EQ(gpu.mig_layout, r.layout);
  EXPECT_EQ(SlotOf(pool, "c", "m", 1).mig_owners, (std::vector<WorkloadId>{0, 0, 1, 0}));
  EXPECT_EQ(SlotOf(pool, "c", "m", 1).milli_free, 0u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("m")->free, 0u);

  // A repartition that changes nothing is not counted.
  Assignment same = MigOn("m", 1, "1g.10gb", 6);
  same.repartitions.push_back(r);
  ASSERT_OK(pool.Allocate(2, same));
  EXPECT_EQ(pool.repartitions_applied(), 1u);
}

TEST(PoolMigTest, BusyGpuIsNotRepartitionedUnlessBoundInstancesStay) {
  Pool pool = MigPool();
  ASSERT_OK(pool.Allocate(1, MigOn("m", 0, "3g.40gb", 0)));

  // Dropping the bound 3g.40gb@0 is refused, and nothing changes.
  Assignment drop = MigOn("m", 0, "7g.80gb", 0);
  drop.repartitions.push_back(
      {"m", testing::Uuid("m", 0), true, {{"7g.80gb", 0}}, "would evict workload 1"});
  absl::Status s = pool.Allocate(2, drop);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("in use"), std::string::npos) << s;
  EXPECT_EQ(GpuOf(pool, "c", "m", 0).mig_layout.size(), 2u);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{1, 0}));
  EXPECT_EQ(pool.repartitions_applied(), 0u);

  // Turning MIG off under a running instance is refused.
  Assignment off = WholeOn("c", "m", {0});
  off.repartitions.push_back({"m", testing::Uuid("m", 0), false, {}, "whole GPU"});
  EXPECT_EQ(pool.Allocate(3, off).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(GpuOf(pool, "c", "m", 0).mig_enabled);

  // Replacing the free 3g.40gb@4 by 2g.20gb@4 + 1g.20gb@6 is fine: the bound instance stays and
  // keeps its owner.
  Assignment keep = MigOn("m", 0, "2g.20gb", 4);
  keep.repartitions.push_back({"m",
                               testing::Uuid("m", 0),
                               true,
                               {{"3g.40gb", 0}, {"2g.20gb", 4}, {"1g.20gb", 6}},
                               "keeps workload 1"});
  s = pool.Allocate(4, keep);
  ASSERT_OK(s);
  EXPECT_EQ(pool.repartitions_applied(), 1u);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{1, 4, 0}));
  pool.Release(1);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{0, 4, 0}));
}

TEST(PoolSummaryTest, SummaryFollowsAllocateAndRelease) {
  std::vector<GpuInfo> mig = Gpus("m", 2, "H100-80GB", "m-nvl", /*mig_capable=*/true);
  mig[0].mig_enabled = true;
  mig[0].mig_layout = {{"3g.40gb", 0}, {"3g.40gb", 4}};
  Pool pool;
  pool.UpsertCluster(ClusterOf(
      "c", {Node("a", Gpus("a", 4, "L4")), Node("b", Gpus("b", 2, "L4")), Node("m", mig)}));
  const int l4 = pool.FindModelId("L4");
  const int h100 = pool.FindModelId("H100-80GB");
  ASSERT_GE(l4, 0);
  ASSERT_GE(h100, 0);
  auto summary = [&](int model) { return pool.FindCluster("c")->summary.at(model); };

  EXPECT_EQ(summary(l4).whole_free, 6u);
  EXPECT_EQ(summary(l4).max_node_whole_free, 4u);
  EXPECT_EQ(summary(l4).max_gpu_milli_free, 1000u);
  EXPECT_EQ(summary(l4).milli_free, 6000u);
  EXPECT_EQ(summary(h100).whole_free, 1u);
  EXPECT_EQ(summary(h100).mig_free_instances, 2u);
  EXPECT_EQ(summary(h100).mig_idle_capable, 2u);  // the idle MIG GPU and the idle capable one
  EXPECT_EQ(summary(h100).milli_free, 1000u);

  ASSERT_OK(pool.Allocate(1, WholeOn("c", "a", {0, 1})));
  ASSERT_OK(pool.Allocate(2, ShareOn("c", "b", 0, 250)));
  ASSERT_OK(pool.Allocate(3, MigOn("m", 0, "3g.40gb", 4)));
  EXPECT_EQ(summary(l4).whole_free, 3u);
  EXPECT_EQ(summary(l4).max_node_whole_free, 2u);
  EXPECT_EQ(summary(l4).max_gpu_milli_free, 1000u);
  EXPECT_EQ(summary(l4).milli_free, 3750u);
  EXPECT_EQ(summary(h100).mig_free_instances, 1u);
  EXPECT_EQ(summary(h100).mig_idle_capable, 1u);

  ASSERT_OK(pool.Allocate(4, WholeOn("c", "a", {2, 3})));
  ASSERT_OK(pool.Allocate(5, WholeOn("c", "b", {1})));
  EXPECT_EQ(summary(l4).whole_free, 0u);
  EXPECT_EQ(summary(l4).max_node_whole_free, 0u);
  EXPECT_EQ(summary(l4).max_gpu_milli_free, 750u);
  EXPECT_EQ(summary(l4).milli_free, 750u);

  for (WorkloadId id : {1, 2, 3, 4, 5}) pool.Release(id);
  EXPECT_EQ(summary(l4).whole_free, 6u);
  EXPECT_EQ(summary(l4).max_node_whole_free, 4u);
  EXPECT_EQ(summary(l4).milli_free, 6000u);
  EXPECT_EQ(summary(h100).mig_free_instances, 2u);
  EXPECT_EQ(summary(h100).mig_idle_capable, 2u);
}

TEST(PoolSummaryTest, UnschedulableAndUnhealthyAreNotCounted) {
  std::vector<GpuInfo> gpus = Gpus("a", 4, "L4");
  gpus[3].healthy = false;
  NodeInfo cordoned = Node("b", Gpus("b", 4, "L4"));
  cordoned.schedulable = false;
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("a", gpus), cordoned}));
  const auto& s = pool.FindCluster("c")->summary.at(pool.FindModelId("L4"));
  EXPECT_EQ(s.whole_free, 3u);
  EXPECT_EQ(s.max_node_whole_free, 3u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("b")->free, 0u);
}

TEST(PoolUpsertTest, ReplacingTheInventoryReappliesSharesHostAndMig) {
  auto inventory = [] {
    std::vector<GpuInfo> mig = Gpus("m", 1, "H100-80GB", "", /*mig_capable=*/true);
    mig[0].mig_enabled = true;
    mig[0].mig_layout = {{"3g.40gb", 0}, {"3g.40gb", 4}};
    return ClusterOf("c", {Node("n", Gpus("n", 2, "L4"), "r0", "", 8000, 32768), Node("m", mig)});
  };
  Pool pool;
  pool.UpsertCluster(inventory());
  ASSERT_OK(pool.Allocate(1, ShareOn("c", "n", 0, 600), {3000, 1000}));
  ASSERT_OK(pool.Allocate(2, WholeOn("c", "n", {1}), {1000, 0}));
  ASSERT_OK(pool.Allocate(3, MigOn("m", 0, "3g.40gb", 4)));

  pool.UpsertCluster(inventory());
  const NodeSlots& n = *pool.FindCluster("c")->FindNode("n");
  EXPECT_EQ(n.gpus[0].milli_free, 400u);
  EXPECT_EQ(n.gpus[1].milli_free, 0u);
  EXPECT_EQ(n.HolderOf(1), 2);
  EXPECT_EQ(n.cpu_free, 4000u);
  EXPECT_EQ(n.memory_free, 31768u);
  EXPECT_EQ(n.free, 0u);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{0, 3}));
  const auto& s = pool.FindCluster("c")->summary.at(pool.FindModelId("L4"));
  EXPECT_EQ(s.whole_free, 0u);
  EXPECT_EQ(s.max_gpu_milli_free, 400u);

  // An inventory that lost GPU 0 of n (and then brings it back).
  Cluster lost = inventory();
  lost.nodes[0].gpus.erase(lost.nodes[0].gpus.begin());
  pool.UpsertCluster(lost);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->gpus.size(), 1u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->HolderOf(0), 2);
  pool.UpsertCluster(inventory());
  EXPECT_EQ(SlotOf(pool, "c", "n", 0).milli_free, 400u);
  EXPECT_EQ(SlotOf(pool, "c", "n", 0).holders.front().id, 1);

  // Releases still work against the replaced inventory.
  pool.Release(1);
  pool.Release(2);
  pool.Release(3);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->free, 2u);
  EXPECT_EQ(pool.FindCluster("c")->FindNode("n")->cpu_free, 8000u);
  EXPECT_TRUE(SlotOf(pool, "c", "m", 0).Idle());
}

TEST(PoolUpsertTest, RepartitionIsReappliedToAnInventoryThatPredatesIt) {
  Pool pool;
  auto inventory = [] {
    return ClusterOf("c", {Node("m", Gpus("m", 1, "A100-80GB", "", /*mig_capable=*/true))});
  };
  pool.UpsertCluster(inventory());
  Assignment a = MigOn("m", 0, "3g.40gb", 0);
  a.repartitions.push_back(
      {"m", testing::Uuid("m", 0), true, {{"3g.40gb", 0}, {"3g.40gb", 4}}, "test"});
  ASSERT_OK(pool.Allocate(1, a));
  // The agent re-registers before it applied the layout: the pool keeps the decision.
  pool.UpsertCluster(inventory());
  EXPECT_TRUE(GpuOf(pool, "c", "m", 0).mig_enabled);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{1, 0}));
}

TEST(PoolUpsertTest, AllocationOnAnUnknownClusterIsAppliedWhenItArrives) {
  Pool pool;
  ASSERT_OK(pool.Allocate(9, WholeOn("later", "x", {0, 1})));
  EXPECT_TRUE(pool.Holds(9));
  pool.UpsertCluster(ClusterOf("later", {Node("x", Gpus("x", 4, "L4"))}));
  EXPECT_EQ(pool.FindCluster("later")->FindNode("x")->free, 2u);
  EXPECT_EQ(pool.FindCluster("later")->FindNode("x")->HolderOf(1), 9);
  EXPECT_EQ(pool.FindCluster("later")->summary.at(pool.FindModelId("L4")).whole_free, 2u);
}

}  // namespace
}  // namespace gpufed
