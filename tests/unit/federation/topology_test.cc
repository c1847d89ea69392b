// Topology packing: DGX nodes (one NVLink domain of 8 per node), PCIe servers with NVLink pairs,
// GB200 NVL72 racks (one NVLink domain across 18 nodes), and the smallest-group preference of
// gangs (node < NVLink domain < rack < block < cluster).

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "federation/placement.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/placement_fixtures.h"

namespace gpufed {
namespace {

using testing::ClusterOf;
using testing::Gpus;
using testing::Node;
using testing::NodesOf;
using testing::Options;
using testing::PlaceWith;
using testing::Spec;
using testing::WholeOn;

constexpr char kH100[] = "H100-80GB";

// `n` DGX H100 nodes "dgx-0".. (8 GPUs, one NVLink domain each), two nodes per rack.
Cluster Dgx(const std::string& cluster, int n) {
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrCat("dgx-", i);
    nodes.push_back(
        Node(name, Gpus(name, 8, kH100, name + "-nvl"), absl::StrCat("r", i / 2), "b0"));
  }
  return ClusterOf(cluster, nodes);
}

// All policies must respect topology; the tests run each of them.
class TopologyTest : public ::testing::TestWithParam<std::string> {
 protected:
  PlacementDecision Place(const Pool& pool, const WorkloadSpec& spec) {
    return PlaceWith(pool, spec, Options(GetParam(), /*seed=*/7, /*random_ties=*/true));
  }
};

INSTANTIATE_TEST_SUITE_P(Policies, TopologyTest, ::testing::ValuesIn(PolicyNames()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST_P(TopologyTest, DgxGangOfTwoTimesEightTakesTwoWholeNodesInOneRack) {
  Pool pool;
  pool.UpsertCluster(Dgx("c", 4));
  // dgx-0 loses one GPU: rack r0 cannot hold the gang any more, rack r1 can.
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "dgx-0", {3})));
  PlacementDecision d = Place(pool, Spec(2, 8));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"dgx-2", "dgx-3"}));
  for (const ReplicaAssignment& r : d.assignment->replicas) {
    EXPECT_EQ(std::set<uint32_t>(r.gpu_indices.begin(), r.gpu_indices.end()).size(), 8u);
  }
  ASSERT_OK(pool.Allocate(2, *d.assignment));
}

TEST_P(TopologyTest, DgxReplicaOfFourStaysInOneDomain) {
  Pool pool;
  pool.UpsertCluster(Dgx("c", 2));
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "dgx-0", {0, 1, 2})));
  PlacementDecision d = Place(pool, Spec(1, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->replicas.size(), 1u);
  const ReplicaAssignment& r = d.assignment->replicas[0];
  ASSERT_EQ(r.gpu_uuids.size(), 4u);
  const NodeSlots* node = pool.FindCluster("c")->FindNode(r.node);
  std::set<std::string> domains;
  for (const std::string& uuid : r.gpu_uuids) {
    const int g = node->FindGpu(uuid);
    ASSERT_GE(g, 0);
    EXPECT_EQ(node->HolderOf(g), 0) << uuid << " is taken";
    domains.insert(node->info.gpus[g].nvlink_domain);
  }
  EXPECT_EQ(domains.size(), 1u);
}

TEST_P(TopologyTest, PcieServerTwoGpuReplicaTakesOnePair) {
  // A PCIe server with two NVLink pairs: GPUs 0-1 and 2-3.
  std::vector<GpuInfo> gpus = Gpus("p", 4, "A100-80GB");
  gpus[0].nvlink_domain = gpus[1].nvlink_domain = "p-pair0";
  gpus[2].nvlink_domain = gpus[3].nvlink_domain = "p-pair1";
  Pool pool;
  pool.UpsertCluster(ClusterOf("pcie", {Node("p", gpus)}));

  PlacementDecision d = Place(pool, Spec(1, 2));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  const std::vector<uint32_t> first = d.assignment->replicas[0].gpu_indices;
  EXPECT_TRUE(first == (std::vector<uint32_t>{0, 1}) || first == (std::vector<uint32_t>{2, 3}))
      << ::testing::PrintToString(first);
  ASSERT_OK(pool.Allocate(1, *d.assignment));
  d = Place(pool, Spec(1, 2));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  const std::vector<uint32_t> second = d.assignment->replicas[0].gpu_indices;
  EXPECT_TRUE(second == (std::vector<uint32_t>{0, 1}) || second == (std::vector<uint32_t>{2, 3}));
  EXPECT_NE(first, second);
}

TEST_P(TopologyTest, PcieServerSameDomainNeverSplitsAPair) {
  std::vector<GpuInfo> gpus = Gpus("p", 4, "A100-80GB");
  gpus[0].nvlink_domain = gpus[1].nvlink_domain = "p-pair0";
  gpus[2].nvlink_domain = gpus[3].nvlink_domain = "p-pair1";
  Pool pool;
  pool.UpsertCluster(ClusterOf("pcie", {Node("p", gpus)}));
  // One GPU of each pair is busy: two GPUs are free, but not two linked ones.
  ASSERT_OK(pool.Allocate(1, WholeOn("pcie", "p", {0})));
  ASSERT_OK(pool.Allocate(2, WholeOn("pcie", "p", {2})));
  WorkloadSpec linked = Spec(1, 2);
  linked.topology = Topology::kSameNvlinkDomain;
  PlacementDecision d = Place(pool, linked);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kGpusBusy) << d.reason;
  EXPECT_EQ(d.reason.Text(figure::kLevel), "NVLink domain");
  EXPECT_EQ(d.reason.Int(figure::kGpus), 2);
  EXPECT_EQ(d.reason.Int(figure::kLargest), 1);
  EXPECT_TRUE(absl::StartsWith(d.reason.Text(figure::kWhere), "pcie/p-pair")) << d.reason;
  // Without the requirement the two unlinked GPUs do.
  d = Place(pool, Spec(1, 2));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{1, 3}));
}

TEST_P(TopologyTest, PcieServerFourLinkedGpusNeverFit) {
  std::vector<GpuInfo> gpus = Gpus("p", 4, "A100-80GB");
  gpus[0].nvlink_domain = gpus[1].nvlink_domain = "p-pair0";
  gpus[2].nvlink_domain = gpus[3].nvlink_domain = "p-pair1";
  Pool pool;
  pool.UpsertCluster(ClusterOf("pcie", {Node("p", gpus)}));
  WorkloadSpec four = Spec(1, 4);
  four.topology = Topology::kSameNvlinkDomain;
  PlacementDecision d = Place(pool, four);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kGpuCountUnsatisfiable) << d.reason;
  EXPECT_EQ(d.reason.Text(figure::kLevel), "NVLink domain");
  EXPECT_EQ(d.reason.Int(figure::kGpus), 4);
  EXPECT_EQ(d.reason.Int(figure::kLargest), 2);
  EXPECT_TRUE(absl::StartsWith(d.reason.Text(figure::kWhere), "pcie/p-pair")) << d.reason;
  // The same four GPUs without the requirement are fine.
  d = Place(pool, Spec(1, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
}

TEST_P(TopologyTest, NodeWithTwoDomainsPicksTheDomainThatHoldsTheReplica) {
  // An 8-GPU node with two NVLink domains of four.
  std::vector<GpuInfo> gpus = Gpus("h", 8, kH100);
  for (int g = 0; g < 8; ++g) gpus[g].nvlink_domain = g < 4 ? "h-left" : "h-right";
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("h", gpus)}));
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "h", {1})));
  PlacementDecision d = Place(pool, Spec(1, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{4, 5, 6, 7}));
  // A 2-GPU replica goes into the smaller domain that holds it (three free on the left).
  d = Place(pool, Spec(1, 2));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  for (uint32_t g : d.assignment->replicas[0].gpu_indices) EXPECT_LT(g, 4u) << g;
}

// Two GB200 NVL72 racks in one cluster: per rack 18 nodes x 4 GPUs, one NVLink domain.
Cluster Nvl72() {
  std::vector<NodeInfo> nodes;
  for (const std::string rack : {"a", "b"}) {
    for (int i = 0; i < 18; ++i) {
      const std::string name = absl::StrCat(rack, "-", i < 10 ? "0" : "", i);
      nodes.push_back(Node(name, Gpus(name, 4, "GB200", "nvl72-" + rack, false, 189471),
                           "rack-" + rack, "block-0"));
    }
  }
  return ClusterOf("gb", nodes);
}

std::set<std::string> RacksOf(const Pool& pool, const Assignment& a) {
  std::set<std::string> racks;
  for (const ReplicaAssignment& r : a.replicas) {
    racks.insert(pool.FindCluster(a.cluster)->FindNode(r.node)->info.rack);
  }
  return racks;
}

// Takes all GPUs of the first `n` nodes of rack `rack`.
void FillRack(Pool& pool, const std::string& rack, int n, WorkloadId first_id) {
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrCat(rack, "-", i < 10 ? "0" : "", i);
    ASSERT_OK(pool.Allocate(first_id + i, WholeOn("gb", name, {0, 1, 2, 3})));
  }
}

TEST_P(TopologyTest, Nvl72GangLandsInOneRackDomain) {
  Pool pool;
  pool.UpsertCluster(Nvl72());
  WorkloadSpec gang = Spec(16, 4);
  gang.topology = Topology::kSameNvlinkDomain;
  PlacementDecision d = Place(pool, gang);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas.size(), 16u);
  EXPECT_EQ(NodesOf(*d.assignment).size(), 16u);
  EXPECT_EQ(RacksOf(pool, *d.assignment).size(), 1u);

  // With rack b one node short of a, the gang goes to the tighter rack b.
  FillRack(pool, "b", 1, 100);
  d = Place(pool, gang);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(RacksOf(pool, *d.assignment), (std::set<std::string>{"rack-b"}));
  ASSERT_OK(pool.Allocate(1, *d.assignment));
  // Rack b is full now (17 nodes taken, one left); the next gang goes to rack a.
  d = Place(pool, gang);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(RacksOf(pool, *d.assignment), (std::set<std::string>{"rack-a"}));
}

TEST_P(TopologyTest, Nvl72GangIsNeverSplitAcrossRacks) {
  Pool pool;
  pool.UpsertCluster(Nvl72());
  // 10 free nodes in each rack: 20 free nodes in all, but no domain has 16.
  FillRack(pool, "a", 8, 100);
  FillRack(pool, "b", 8, 200);
  WorkloadSpec gang = Spec(16, 4);
  gang.topology = Topology::kSameNvlinkDomain;
  PlacementDecision d = Place(pool, gang);
  EXPECT_FALSE(d.assignment.has_value()) << ::testing::PrintToString(NodesOf(*d.assignment));
  EXPECT_FALSE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kGangBusy) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kFree), 80);
  EXPECT_EQ(d.reason.Text(figure::kFreeByModel), "80 GB200");
  EXPECT_EQ(d.reason.Int(figure::kClusters), 1);
  EXPECT_EQ(d.reason.Text(figure::kLevel), "NVLink domain");
  EXPECT_EQ(d.reason.Int(figure::kReplicas), 16);
  EXPECT_EQ(d.reason.Int(figure::kFit), 10);
  EXPECT_TRUE(absl::StartsWith(d.reason.Text(figure::kWhere), "gb/nvl72-")) << d.reason;
  // Without the requirement the gang spreads over both racks (same block).
  d = Place(pool, Spec(16, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(RacksOf(pool, *d.assignment).size(), 2u);
  // 19 nodes never fit in one domain of 18.
  WorkloadSpec huge = Spec(19, 4);
  huge.topology = Topology::kSameNvlinkDomain;
  d = Place(pool, huge);
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.code, ReasonCode::kTopologyUnsatisfiable) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kFit), 18);
  EXPECT_EQ(d.reason.Int(figure::kReplicas), 19);
  EXPECT_EQ(d.reason.Text(figure::kLevel), "NVLink domain");
}

TEST_P(TopologyTest, Nvl72GangWithoutRequirementStillPrefersOneDomain) {
  Pool pool;
  pool.UpsertCluster(Nvl72());
  PlacementDecision d = Place(pool, Spec(16, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(RacksOf(pool, *d.assignment).size(), 1u);
}

// Smallest group that holds a 2 x 4 gang, with topology none.
TEST_P(TopologyTest, GangPrefersNodeOverDomain) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("s1", Gpus("s1", 4, kH100, "d1"), "r1", "b1"),
                                     Node("s2", Gpus("s2", 4, kH100, "d1"), "r1", "b1"),
                                     Node("big", Gpus("big", 8, kH100, "big-nvl"), "r2", "b1")}));
  PlacementDecision d = Place(pool, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"big"}));
}

TEST_P(TopologyTest, GangPrefersDomainOverRack) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("t1", Gpus("t1", 4, kH100, "t1-nvl"), "r1", "b1"),
                                     Node("t2", Gpus("t2", 4, kH100, "t2-nvl"), "r1", "b1"),
                                     Node("s1", Gpus("s1", 4, kH100, "d1"), "r2", "b1"),
                                     Node("s2", Gpus("s2", 4, kH100, "d1"), "r2", "b1")}));
  PlacementDecision d = Place(pool, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"s1", "s2"}));
}

TEST_P(TopologyTest, GangPrefersRackOverBlockOverCluster) {
  auto node = [](const std::string& name, const std::string& rack, const std::string& block) {
    return Node(name, Gpus(name, 4, kH100, name + "-nvl"), rack, block);
  };
  Pool pool;
  // Rack r1 holds the gang; so do block b1 (two racks) and the cluster.
  pool.UpsertCluster(
      ClusterOf("c", {node("u1", "r2", "b1"), node("u2", "r3", "b1"), node("v1", "r4", "b2"),
                      node("t1", "r1", "b3"), node("t2", "r1", "b3")}));
  PlacementDecision d = Place(pool, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"t1", "t2"}));

  // Without rack r1, block b1 (racks r2 and r3) beats spreading across blocks.
  Pool blocks;
  blocks.UpsertCluster(ClusterOf("c", {node("v1", "r4", "b2"), node("u1", "r2", "b1"),
                                       node("w1", "r5", "b3"), node("u2", "r3", "b1")}));
  d = Place(blocks, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"u1", "u2"}));

  // Only the cluster holds it: the gang spreads across blocks.
  Pool spread;
  spread.UpsertCluster(ClusterOf("c", {node("v1", "r4", "b2"), node("w1", "r5", "b3")}));
  d = Place(spread, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"v1", "w1"}));
}

TEST_P(TopologyTest, AmongGroupsOfOneLevelTheTightestWins) {
  auto node = [](const std::string& name, const std::string& rack) {
    return Node(name, Gpus(name, 4, kH100, name + "-nvl"), rack, "b1");
  };
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {node("x1", "r2"), node("x2", "r2"), node("x3", "r2"),
                                     node("t1", "r1"), node("t2", "r1")}));
  PlacementDecision d = Place(pool, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"t1", "t2"}));
}

TEST_P(TopologyTest, SameRackKeepsTheGangInOneRack) {
  auto node = [](const std::string& name, const std::string& rack) {
    return Node(name, Gpus(name, 4, kH100, name + "-nvl"), rack, "b1");
  };
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {node("u1", "r2"), node("u2", "r3")}));
  WorkloadSpec gang = Spec(2, 4);
  gang.topology = Topology::kSameRack;
  PlacementDecision d = Place(pool, gang);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_TRUE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kTopologyUnsatisfiable) << d.reason;
  EXPECT_EQ(d.reason.Int(figure::kFit), 1);
  EXPECT_EQ(d.reason.Int(figure::kReplicas), 2);
  EXPECT_EQ(d.reason.Text(figure::kLevel), "rack");
  // Topology none may use the block.
  d = Place(pool, Spec(2, 4));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;

  // A rack that holds the gang when empty, but one GPU is busy now.
  Pool busy;
  busy.UpsertCluster(ClusterOf("c", {node("t1", "r1"), node("t2", "r1"), node("u1", "r2")}));
  ASSERT_OK(busy.Allocate(1, WholeOn("c", "t2", {0})));
  d = Place(busy, gang);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(d.reason.code, ReasonCode::kGangBusy) << d.reason;
  EXPECT_EQ(d.reason.Text(figure::kLevel), "rack");
  EXPECT_EQ(d.reason.Int(figure::kReplicas), 2);
  EXPECT_EQ(d.reason.Int(figure::kFit), 1);
  EXPECT_TRUE(absl::StartsWith(d.reason.Text(figure::kWhere), "c/r")) << d.reason;
  busy.Release(1);
  d = Place(busy, gang);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(NodesOf(*d.assignment), (std::set<std::string>{"t1", "t2"}));
}

}  // namespace
}  // namespace gpufed
