// Explain: when a request does not fit, PlacementDecision.reason names the nearest blocker as a
// code with its figures, and never_fits() says whether waiting can help. The words made from
// them are tested in pending_reason_test.cc.

#include "absl/strings/str_cat.h"
#include "federation/placement.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/placement_fixtures.h"

namespace gpufed {
namespace {

using testing::ClusterOf;
using testing::Gpus;
using testing::HostOf;
using testing::MigSpec;
using testing::Node;
using testing::Options;
using testing::PlaceWith;
using testing::ShareOn;
using testing::ShareSpec;
using testing::Spec;
using testing::WholeOn;
using R = PendingReason;

PlacementDecision Place(const Pool& pool, const WorkloadSpec& spec, bool partitioning = true) {
  PlacementOptions o = Options("gpufed");
  o.partitioning = partitioning;
  return PlaceWith(pool, spec, o);
}

// A DGX node "name" (8 H100, one NVLink domain "<name>-nvl") with the first `busy` GPUs taken.
Cluster DgxCluster(const std::string& cluster, const std::string& node) {
  return ClusterOf(cluster, {Node(node, Gpus(node, 8, "H100-80GB", node + "-nvl"), "r0")});
}

TEST(ExplainTest, NoClusters) {
  Pool pool;
  PlacementDecision d = Place(pool, Spec(1, 1));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kNoClusters).Set(figure::kNeeds, "1 GPU"));
}

TEST(ExplainTest, ModelThatNoClusterHas) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("n", Gpus("n", 4, "L4")), Node("h", Gpus("h", 8, "H100-80GB"))}));
  WorkloadSpec spec = Spec(1, 1);
  spec.gpu_models = {"A100-80GB"};
  PlacementDecision d = Place(pool, spec);
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kNoMatchingGpu)
                          .Set(figure::kNeeds, "1 GPU of A100-80GB")
                          .Set(figure::kPoolModels, "H100-80GB, L4"));
  // The same for a memory floor nothing meets.
  spec.gpu_models.clear();
  spec.min_gpu_memory_mib = 100000;
  d = Place(pool, spec);
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kNoMatchingGpu) << d.reason;
  EXPECT_EQ(d.reason.Text(figure::kNeeds), "1 GPU with >= 100000 MiB");
}

TEST(ExplainTest, NeverFitsOnANode) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("n0", Gpus("n0", 4, "L4")), Node("n1", Gpus("n1", 4, "L4"))}));
  PlacementDecision d = Place(pool, Spec(1, 8));
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kGpuCountUnsatisfiable)
                          .Set(figure::kNeeds, "8 GPUs")
                          .Set(figure::kLevel, "node")
                          .Set(figure::kGpus, 8)
                          .Set(figure::kLargest, 4)
                          .Set(figure::kWhere, "c/n0"));
}

TEST(ExplainTest, FreeGpusAcrossClustersButNoDomainHoldsTheReplica) {
  // 14 H100 free across 3 clusters, 6 of them on dgx-03.
  Pool pool;
  pool.UpsertCluster(DgxCluster("east", "dgx-01"));
  pool.UpsertCluster(DgxCluster("west", "dgx-02"));
  pool.UpsertCluster(DgxCluster("north", "dgx-03"));
  ASSERT_OK(pool.Allocate(1, WholeOn("east", "dgx-01", {0, 1, 2, 3})));
  ASSERT_OK(pool.Allocate(2, WholeOn("west", "dgx-02", {4, 5, 6, 7})));
  ASSERT_OK(pool.Allocate(3, WholeOn("north", "dgx-03", {0, 7})));
  WorkloadSpec spec = Spec(1, 8);
  spec.topology = Topology::kSameNvlinkDomain;
  PlacementDecision d = Place(pool, spec);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits());
  R busy = R(ReasonCode::kGpusBusy)
               .Set(figure::kNeeds, "8 GPUs, same_nvlink_domain")
               .Set(figure::kUnit, "GPU")
               .Set(figure::kFree, 14)
               .Set(figure::kFreeByModel, "14 H100-80GB")
               .Set(figure::kClusters, 3)
               .Set(figure::kLevel, "NVLink domain")
               .Set(figure::kGpus, 8)
               .Set(figure::kLargest, 6)
               .Set(figure::kWhere, "north/dgx-03-nvl");
  EXPECT_EQ(d.reason, busy);
  // Without the requirement the blocker is the node.
  d = Place(pool, Spec(1, 8));
  EXPECT_EQ(d.reason, busy.Set(figure::kNeeds, "8 GPUs")
                          .Set(figure::kLevel, "node")
                          .Set(figure::kWhere, "north/dgx-03"));
}

TEST(ExplainTest, ShareThatNoGpuCanHoldNow) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("n", Gpus("n", 2, "L4"))}));
  ASSERT_OK(pool.Allocate(1, ShareOn("c", "n", 0, 600)));
  ASSERT_OK(pool.Allocate(2, ShareOn("c", "n", 1, 700)));
  PlacementDecision d = Place(pool, ShareSpec(500));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kGpuShareBusy)
                          .Set(figure::kNeeds, "500 milli-GPU")
                          .Set(figure::kUnit, "milli-GPU")
                          .Set(figure::kFree, 700)
                          .Set(figure::kFreeByModel, "700 on L4")
                          .Set(figure::kClusters, 1)
                          .Set(figure::kMilli, 500)
                          .Set(figure::kMost, 400));
  // 400 does fit.
  EXPECT_TRUE(Place(pool, ShareSpec(400)).assignment.has_value());
}

TEST(ExplainTest, MigProfileNobodyOffers) {
  Pool pool;
  pool.UpsertCluster(ClusterOf(
      "c", {Node("a", Gpus("a", 2, "A100-40GB", "", true, 40536)), Node("l", Gpus("l", 2, "L4"))}));
  PlacementDecision d = Place(pool, MigSpec("3g.40gb"));
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kMigProfileUnavailable)
                          .Set(figure::kNeeds, "MIG 3g.40gb")
                          .Set(figure::kProfile, "3g.40gb")
                          .Set(figure::kMigModels, "A100-80GB, H100-80GB")
                          .Set(figure::kPoolModels, "A100-40GB, L4"));
  d = Place(pool, MigSpec("5g.50gb"));
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kMigProfileUnavailable) << d.reason;
  EXPECT_EQ(d.reason.Text(figure::kMigModels), "") << "no GPU product has a MIG profile 5g.50gb";
}

TEST(ExplainTest, MigOnAGpuThatIsNotMigCapableNeverFits) {
  // An inventory that reports its H100s without MIG support (e.g. disabled by the operator).
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("h", Gpus("h", 2, "H100-80GB", "", /*mig_capable=*/false))}));
  PlacementDecision d = Place(pool, MigSpec("3g.40gb"));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kMigProfileUnavailable) << d.reason;
}

TEST(ExplainTest, HostCpuBlocker) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("n0", Gpus("n0", 2, "L4"), "r0", "", 8000, 65536),
                                     Node("n1", Gpus("n1", 2, "L4"), "r0", "", 16000, 65536)}));
  WorkloadSpec spec = Spec(1, 1);
  spec.cpu_millis = 32000;
  PlacementDecision d = Place(pool, spec);
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kHostCpuUnsatisfiable)
                          .Set(figure::kNeeds, "1 GPU, 32000 CPU millis")
                          .Set(figure::kCpuMillis, 32000)
                          .Set(figure::kLargest, 16000)
                          .Set(figure::kWhere, "c/n1"));
  spec.cpu_millis = 0;
  spec.memory_mib = 100000;
  d = Place(pool, spec);
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kHostMemoryUnsatisfiable) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kMemoryMib), 100000);
  EXPECT_EQ(d.reason.Int(figure::kLargest), 65536);
  EXPECT_EQ(d.reason.Text(figure::kWhere), "c/n0");

  // Fits an empty node, but the CPU is taken now.
  spec.memory_mib = 0;
  spec.cpu_millis = 10000;
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "n1", {0}), {12000, 0}));
  d = Place(pool, spec);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kHostResourcesBusy)
                          .Set(figure::kNeeds, "1 GPU, 10000 CPU millis")
                          .Set(figure::kUnit, "GPU")
                          .Set(figure::kFree, 3)
                          .Set(figure::kFreeByModel, "3 L4")
                          .Set(figure::kClusters, 1)
                          .Set(figure::kLevel, "node"));
}

TEST(ExplainTest, NotReadyClusters) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("a", {Node("n", Gpus("n", 1, "L4"))}));
  pool.UpsertCluster(ClusterOf("b", {Node("m", Gpus("m", 1, "L4"))}));
  pool.SetClusterState("a", ClusterState::kUnreachable);
  pool.SetClusterState("b", ClusterState::kDraining);
  PlacementDecision d = Place(pool, Spec(1, 1));
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kNoReadyCluster)
                          .Set(figure::kNeeds, "1 GPU")
                          .Set(figure::kNotReady, "a (unreachable), b (draining)"));

  // One ready cluster that is full, one that is not ready.
  pool.SetClusterState("a", ClusterState::kReady);
  ASSERT_OK(pool.Allocate(1, WholeOn("a", "n", {0})));
  d = Place(pool, Spec(1, 1));
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kNothingFree)
                          .Set(figure::kNeeds, "1 GPU")
                          .Set(figure::kUnit, "GPU")
                          .Set(figure::kNotReady, "b (draining)"));
}

TEST(ExplainTest, MigWithPartitioningOff) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("a", Gpus("a", 1, "A100-80GB", "", /*mig_capable=*/true))}));
  PlacementDecision d = Place(pool, MigSpec("3g.40gb"), /*partitioning=*/false);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason, R(ReasonCode::kMigPartitioningOff)
                          .Set(figure::kNeeds, "MIG 3g.40gb")
                          .Set(figure::kUnit, "3g.40gb")
                          .Set(figure::kProfile, "3g.40gb"));
}

TEST(ExplainTest, GangThatNeverFitsInOneCluster) {
  Pool pool;
  pool.UpsertCluster(DgxCluster("a", "dgx-01"));
  pool.UpsertCluster(DgxCluster("b", "dgx-02"));
  PlacementDecision d = Place(pool, Spec(2, 8));
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason, R(ReasonCode::kTopologyUnsatisfiable)
                          .Set(figure::kNeeds, "2 replicas x 8 GPUs")
                          .Set(figure::kFit, 1)
                          .Set(figure::kReplicas, 2)
                          .Set(figure::kLevel, "cluster")
                          .Set(figure::kWhere, "a"));
}

TEST(ExplainTest, ReasonIsEmptyWhenItFits) {
  Pool pool;
  pool.UpsertCluster(DgxCluster("a", "dgx-01"));
  PlacementDecision d = Place(pool, Spec(1, 8));
  ASSERT_TRUE(d.assignment.has_value());
  EXPECT_EQ(d.reason.code, ReasonCode::kNone) << d.reason;
  EXPECT_TRUE(d.reason.figures.empty());
  EXPECT_FALSE(d.reason.never_fits());
}

// One engine remembers what each cluster would hold if it were empty, by inventory: a cluster
// that is given a new inventory is judged again.
TEST(ExplainTest, OneEngineSeesANewInventory) {
  auto engine = PlacementEngine::Create(Options("gpufed"));
  ASSERT_OK(engine);
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("n0", Gpus("n0", 4, "L4"))}));
  PlacementDecision d = (*engine)->Place(pool, Spec(1, 8));
  R too_small = R(ReasonCode::kGpuCountUnsatisfiable)
                    .Set(figure::kNeeds, "8 GPUs")
                    .Set(figure::kLevel, "node")
                    .Set(figure::kGpus, 8)
                    .Set(figure::kLargest, 4)
                    .Set(figure::kWhere, "c/n0");
  EXPECT_EQ(d.reason, too_small);
  pool.UpsertCluster(ClusterOf("c", {Node("n0", Gpus("n0", 8, "L4"))}));
  d = (*engine)->Place(pool, Spec(1, 8));
  EXPECT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_OK(pool.Allocate(1, *d.assignment));
  d = (*engine)->Place(pool, Spec(1, 8));
  EXPECT_EQ(d.reason,
            R(ReasonCode::kNothingFree).Set(figure::kNeeds, "8 GPUs").Set(figure::kUnit, "GPU"));
  pool.UpsertCluster(ClusterOf("c", {Node("n0", Gpus("n0", 2, "L4"))}));
  d = (*engine)->Place(pool, Spec(1, 8));
  EXPECT_EQ(d.reason, too_small.Set(figure::kLargest, 2));
}

// An engine that has placed and explained many requests explains as a new one does: what it
// remembers, and the clusters it skips as having nothing free, change no word.
TEST(ExplainTest, ALongLivedEngineExplainsAsANewOne) {
  Pool pool;
  for (int c = 0; c < 40; ++c) {
    std::vector<NodeInfo> nodes;
    for (int n = 0; n < 3; ++n) {
      const std::string name = absl::StrCat("c", c, "-n", n);
      const bool dgx = (c + n) % 3 != 0;
      nodes.push_back(Node(name,
                           dgx ? Gpus(name, 8, "H100-80GB", name + "-nvl") : Gpus(name, 4, "L4"),
                           absl::StrCat("c", c, "-r", n / 2)));
    }
    pool.UpsertCluster(ClusterOf(absl::StrCat("c", c), std::move(nodes)));
  }
  auto engine = PlacementEngine::Create(Options("gpufed"));
  ASSERT_OK(engine);
  std::vector<WorkloadSpec> shapes = {Spec(1, 1), Spec(1, 2), Spec(1, 4),    Spec(1, 8),
                                      Spec(2, 8), Spec(3, 4), ShareSpec(500)};
  shapes[3].gpu_models = {"H100-80GB"};
  shapes[4].topology = Topology::kSameRack;
  shapes[5].topology = Topology::kSameNvlinkDomain;
  WorkloadId id = 1;
  int failures = 0;
  int explained = 0;
  for (int round = 0; round < 60; ++round) {
    for (const WorkloadSpec& spec : shapes) {
      PlacementDecision d = (*engine)->Place(pool, spec, id);
      if (d.assignment) {
        ASSERT_OK(pool.Allocate(id++, *d.assignment, HostOf(spec)));
        continue;
      }
      ++failures;
      PlacementDecision fresh = PlaceWith(pool, spec, Options("gpufed"));
      ASSERT_FALSE(fresh.assignment.has_value());
      EXPECT_EQ(d.reason, fresh.reason);
      explained += d.reason.never_fits() ? 0 : 1;
    }
    if (round % 7 == 6) {  // free some, so that clusters come back
      for (WorkloadId w = id - 1; w > 0 && w > id - 12; w -= 3) pool.Release(w);
    }
  }
  EXPECT_GT(failures, 20);
  EXPECT_GT(explained, 20);
}

}  // namespace
}  // namespace gpufed
