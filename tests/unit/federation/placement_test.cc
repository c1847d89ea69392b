#include "federation/placement.h"

#include <set>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using testing::Gang;
using testing::MakeCluster;
using testing::WholeGpus;

// The v0 expectations below are best-fit's: the fullest node that holds the request.
PlacementDecision PlaceBestFit(const Pool& pool, const WorkloadSpec& spec) {
  PlacementOptions options;
  options.policy = "best-fit";
  options.random_ties = false;
  auto engine = PlacementEngine::Create(options);
  return (*engine)->Place(pool, spec);
}

TEST(PlaceBestFitTest, SingleGpuLandsOnTheFullestNodeThatFits) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 2, 8, "H100-80GB"));
  // Node a-n1 has 2 free GPUs left, a-n0 has 8: best fit is a-n1.
  Assignment six;
  six.cluster = "a";
  six.replicas.push_back(WholeGpus("a-n1", {0, 1, 2, 3, 4, 5}));
  ASSERT_OK(pool.Allocate(1, six));

  PlacementDecision d = PlaceBestFit(pool, Gang(1, 1));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "a");
  ASSERT_EQ(d.assignment->replicas.size(), 1u);
  EXPECT_EQ(d.assignment->replicas[0].node, "a-n1");
  EXPECT_EQ(d.assignment->replicas[0].gpu_uuids.size(), 1u);
}

TEST(PlaceBestFitTest, GangIsAllOrNothingInsideOneCluster) {
  Pool pool;
  // Two clusters with one free 8-GPU node each: a 2 x 8 gang fits in neither.
  pool.UpsertCluster(MakeCluster("a", 1, 8, "H100-80GB"));
  pool.UpsertCluster(MakeCluster("b", 1, 8, "H100-80GB"));
  PlacementDecision d = PlaceBestFit(pool, Gang(2, 8));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kTopologyUnsatisfiable) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kFit), 1);
  EXPECT_EQ(d.reason.Int(figure::kReplicas), 2);

  pool.UpsertCluster(MakeCluster("c", 2, 8, "H100-80GB"));
  d = PlaceBestFit(pool, Gang(2, 8));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "c");
  ASSERT_EQ(d.assignment->replicas.size(), 2u);
  std::set<std::string> gpus;
  for (const auto& r : d.assignment->replicas) {
    EXPECT_EQ(r.gpu_uuids.size(), 8u);
    gpus.insert(r.gpu_uuids.begin(), r.gpu_uuids.end());
  }
  EXPECT_EQ(gpus.size(), 16u) << "no GPU may be given to two replicas";
}

TEST(PlaceBestFitTest, ModelFilterAndMemoryFilter) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("edge", 2, 4, "L4", 23034, /*nvlink=*/false));
  pool.UpsertCluster(MakeCluster("dgx", 1, 8, "H100-80GB"));
  PlacementDecision d = PlaceBestFit(pool, Gang(1, 1, {"L4"}));
  ASSERT_TRUE(d.assignment.has_value());
  EXPECT_EQ(d.assignment->cluster, "edge");

  WorkloadSpec big = Gang(1, 1);
  big.min_gpu_memory_mib = 40000;
  d = PlaceBestFit(pool, big);
  ASSERT_TRUE(d.assignment.has_value());
  EXPECT_EQ(d.assignment->cluster, "dgx");

  d = PlaceBestFit(pool, Gang(1, 1, {"A100-80GB"}));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kNoMatchingGpu) << d.reason;
}

TEST(PlaceBestFitTest, BusyPoolSaysWaitingForCapacity) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 1, 8, "H100-80GB"));
  Assignment all;
  all.cluster = "a";
  ReplicaAssignment r;
  r.node = "a-n0";
  for (int g = 0; g < 6; ++g) r.gpu_uuids.push_back("GPU-a-n0-" + std::to_string(g));
  all.replicas.push_back(r);
  ASSERT_OK(pool.Allocate(7, all));
  PlacementDecision d = PlaceBestFit(pool, Gang(1, 4));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kGpusBusy) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kFree), 2);
  EXPECT_EQ(d.reason.Text(figure::kFreeByModel), "2 H100-80GB");
  EXPECT_EQ(d.reason.Int(figure::kClusters), 1);
  EXPECT_EQ(d.reason.Text(figure::kLevel), "node");
  EXPECT_EQ(d.reason.Int(figure::kGpus), 4);
  EXPECT_EQ(d.reason.Int(figure::kLargest), 2);
  EXPECT_EQ(d.reason.Text(figure::kWhere), "a/a-n0");
}

TEST(PlaceBestFitTest, OnlyReadyClustersTakeWork) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 1, 8, "H100-80GB"));
  pool.SetClusterState("a", ClusterState::kUnreachable);
  PlacementDecision d = PlaceBestFit(pool, Gang(1, 1));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_NE(d.reason.Text(figure::kNotReady).find("a (unreachable)"), std::string::npos)
      << d.reason;
}

TEST(PlaceBestFitTest, SameNodeKeepsAllReplicasOnOneNode) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 2, 8, "H100-80GB"));
  WorkloadSpec spec = Gang(4, 2);
  spec.topology = Topology::kSameNode;
  PlacementDecision d = PlaceBestFit(pool, spec);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  for (const auto& r : d.assignment->replicas) EXPECT_EQ(r.node, d.assignment->replicas[0].node);

  spec.replicas = 5;  // 10 GPUs cannot sit on one 8-GPU node
  d = PlaceBestFit(pool, spec);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits());
}

TEST(PlaceBestFitTest, ReplicaStaysInsideOneNvlinkDomainOfANode) {
  // A PCIe server with NVLink pairs: 0-1 and 2-3.
  Cluster c = MakeCluster("pcie", 1, 4, "A100-80GB");
  c.nodes[0].gpus[0].nvlink_domain = "pair0";
  c.nodes[0].gpus[1].nvlink_domain = "pair0";
  c.nodes[0].gpus[2].nvlink_domain = "pair1";
  c.nodes[0].gpus[3].nvlink_domain = "pair1";
  Pool pool;
  pool.UpsertCluster(c);
  Assignment one;
  one.cluster = "pcie";
  one.replicas.push_back(WholeGpus("pcie-n0", {0}));
  ASSERT_OK(pool.Allocate(1, one));
  PlacementDecision d = PlaceBestFit(pool, Gang(1, 2));
  ASSERT_TRUE(d.assignment.has_value());
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{2, 3}));
}

TEST(PlaceBestFitTest, DeterministicForTheSameInput) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 4, 8, "H100-80GB"));
  pool.UpsertCluster(MakeCluster("b", 4, 8, "H100-80GB"));
  PlacementDecision first = PlaceBestFit(pool, Gang(2, 4));
  for (int i = 0; i < 5; ++i) {
    PlacementDecision again = PlaceBestFit(pool, Gang(2, 4));
    ASSERT_TRUE(again.assignment.has_value());
    EXPECT_EQ(*again.assignment, *first.assignment);
  }
}

TEST(PlaceBestFitTest, EmptyPoolExplainsThereAreNoClusters) {
  Pool pool;
  PlacementDecision d = PlaceBestFit(pool, Gang(1, 1));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_EQ(d.reason.code, ReasonCode::kNoClusters) << d.reason;
}

}  // namespace
}  // namespace gpufed
