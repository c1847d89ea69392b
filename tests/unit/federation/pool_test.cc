#include "federation/pool.h"

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using testing::MakeCluster;
using testing::WholeGpus;

Assignment TwoGpus(const std::string& node) {
  Assignment a;
  a.cluster = "a";
  a.replicas.push_back(WholeGpus(node, {0, 1}));
  return a;
}

TEST(PoolTest, AllocateAndReleaseTrackFreeCapacity) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 2, 4, "L4"));
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("a")).free, 8u);
  ASSERT_OK(pool.Allocate(10, TwoGpus("a-n0")));
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("a")).free, 6u);
  EXPECT_TRUE(pool.Holds(10));
  pool.Release(10);
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("a")).free, 8u);
  pool.Release(10);  // idempotent
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("a")).free, 8u);
}

TEST(PoolTest, ConflictingAllocationIsRefusedAndChangesNothing) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 1, 4, "L4"));
  ASSERT_OK(pool.Allocate(1, TwoGpus("a-n0")));
  absl::Status s = pool.Allocate(2, TwoGpus("a-n0"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(pool.Holds(2));
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("a")).free, 2u);
}

TEST(PoolTest, InventoryReplacementKeepsAllocations) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 2, 4, "L4"));
  ASSERT_OK(pool.Allocate(1, TwoGpus("a-n1")));
  // The agent re-registers with the same inventory (e.g. after a server restart).
  pool.UpsertCluster(MakeCluster("a", 2, 4, "L4"));
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("a")).free, 6u);
  const NodeSlots& n1 = pool.FindCluster("a")->nodes[1];
  EXPECT_EQ(n1.HolderOf(0), 1);
  EXPECT_EQ(n1.HolderOf(1), 1);
}

TEST(PoolTest, UnhealthyGpusAreNotFree) {
  Cluster c = MakeCluster("a", 1, 4, "L4");
  c.nodes[0].gpus[3].healthy = false;
  Pool pool;
  pool.UpsertCluster(c);
  ClusterCapacity cap = Pool::CapacityOf(*pool.FindCluster("a"));
  EXPECT_EQ(cap.total, 4u);
  EXPECT_EQ(cap.free, 3u);
}

TEST(PoolTest, ClustersAreKeptSortedByName) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("zeta", 1, 1, "L4"));
  pool.UpsertCluster(MakeCluster("alpha", 1, 1, "L4"));
  pool.UpsertCluster(MakeCluster("mid", 1, 1, "L4"));
  ASSERT_EQ(pool.clusters().size(), 3u);
  EXPECT_EQ(pool.clusters()[0].info.name, "alpha");
  EXPECT_EQ(pool.clusters()[2].info.name, "zeta");
  EXPECT_NE(pool.FindCluster("mid"), nullptr);
  EXPECT_EQ(pool.FindCluster("nope"), nullptr);
}

TEST(PoolTest, CopiesAreIndependentAndShareWhatNeitherChanged) {
  Pool pool;
  pool.UpsertCluster(MakeCluster("a", 2, 4, "L4"));
  pool.UpsertCluster(MakeCluster("b", 1, 4, "L4"));
  ASSERT_OK(pool.Allocate(1, TwoGpus("a-n0")));
  const Pool copy = pool;

  // The original changes: the copy keeps what it had.
  ASSERT_OK(pool.Allocate(2, TwoGpus("a-n1")));
  pool.Release(1);
  pool.SetClusterState("a", ClusterState::kDraining);
  EXPECT_EQ(Pool::CapacityOf(*copy.FindCluster("a")).free, 6u);
  EXPECT_EQ(copy.FindCluster("a")->nodes[0].HolderOf(0), 1);
  EXPECT_EQ(copy.FindCluster("a")->nodes[1].HolderOf(0), 0);
  EXPECT_EQ(copy.FindCluster("a")->state, ClusterState::kReady);
  EXPECT_TRUE(copy.Holds(1));
  EXPECT_FALSE(copy.Holds(2));
  EXPECT_EQ(pool.FindCluster("a")->nodes[1].HolderOf(0), 2);
  EXPECT_EQ(pool.FindCluster("a")->nodes[0].HolderOf(0), 0);
  // A cluster neither changed is one object; a changed one is not.
  EXPECT_EQ(copy.FindCluster("b"), pool.FindCluster("b"));
  EXPECT_NE(copy.FindCluster("a"), pool.FindCluster("a"));

  // The copy changes: the original keeps what it has.
  Pool second = copy;
  second.Release(1);
  second.UpsertCluster(MakeCluster("b", 1, 2, "L4"));
  EXPECT_EQ(Pool::CapacityOf(*copy.FindCluster("a")).free, 6u);
  EXPECT_EQ(Pool::CapacityOf(*pool.FindCluster("b")).total, 4u);
  EXPECT_EQ(Pool::CapacityOf(*second.FindCluster("b")).total, 2u);
}

}  // namespace
}  // namespace gpufed

namespace gpufed {
namespace {

TEST(PoolTest, AWorkloadIsNeverMovedBySecondAllocation) {
  Pool pool;
  pool.UpsertCluster(testing::MakeCluster("a", 2, 4, "L4"));
  Assignment first;
  first.cluster = "a";
  first.replicas.push_back(WholeGpus("a-n0", {0}));
  Assignment second;
  second.cluster = "a";
  second.replicas.push_back(WholeGpus("a-n1", {0}));
  ASSERT_OK(pool.Allocate(5, first));
  EXPECT_EQ(pool.Allocate(5, second).code(), absl::StatusCode::kFailedPrecondition);
  // The first allocation still stands: its GPU is not handed out again.
  EXPECT_EQ(pool.FindCluster("a")->nodes[0].HolderOf(0), 5);
  EXPECT_EQ(pool.FindCluster("a")->nodes[1].HolderOf(0), 0);
}

}  // namespace
}  // namespace gpufed
