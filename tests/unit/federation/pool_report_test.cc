// What the scheduler reports about its pool for monitoring (federation/pool_report.h): GPUs per
// cluster and model, allocated and free as `gpufedctl clusters` counts them, and fragmentation
// by the FGD measure (NodeFragmentation) summed over the schedulable nodes.

#include "federation/pool_report.h"

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using testing::MakeCluster;
using testing::WholeGpus;

// Typical workloads: one whole GPU, any model.
WorkloadMix OneGpuMix() {
  MixEntry e;
  e.demand.kind = Demand::Kind::kWhole;
  e.demand.gpus = 1;
  e.demand.milli = kMilliPerGpu;
  e.weight = 1;
  return {e};
}

class PoolReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_.UpsertCluster(MakeCluster("a", 2, 4, "L4"));
    Cluster b = MakeCluster("b", 1, 2, "H100-80GB");
    b.nodes[0].gpus[1].healthy = false;
    pool_.UpsertCluster(b);
    // On a-n0: GPUs 0 and 1 whole, half of GPU 2 shared.
    Assignment whole;
    whole.cluster = "a";
    whole.replicas.push_back(WholeGpus("a-n0", {0, 1}));
    ASSERT_OK(pool_.Allocate(1, whole));
    Assignment share;
    share.cluster = "a";
    share.replicas.push_back(WholeGpus("a-n0", {2}));
    share.replicas[0].gpu_milli = 500;
    ASSERT_OK(pool_.Allocate(2, share));
  }

  Pool pool_;
};

TEST_F(PoolReportTest, CountsGpusPerClusterAndModel) {
  const std::vector<PoolModelReport> report = ReportPool(pool_, OneGpuMix());
  ASSERT_EQ(report.size(), 2U);
  EXPECT_EQ(report[0].cluster, "a");
  EXPECT_EQ(report[0].model, "L4");
  EXPECT_EQ(report[0].gpus.total, 8U);
  // A GPU half taken counts as allocated, and not as free.
  EXPECT_EQ(report[0].gpus.allocated, 3U);
  EXPECT_EQ(report[0].gpus.free, 5U);
  EXPECT_EQ(report[1].cluster, "b");
  EXPECT_EQ(report[1].model, "H100-80GB");
  EXPECT_EQ(report[1].gpus.total, 2U);
  // The unhealthy GPU is neither allocated nor free.
  EXPECT_EQ(report[1].gpus.allocated, 0U);
  EXPECT_EQ(report[1].gpus.free, 1U);
}

TEST_F(PoolReportTest, FragmentationIsTheFreeShareTheTypicalWorkloadsCannotUse) {
  const std::vector<PoolModelReport> report = ReportPool(pool_, OneGpuMix());
  ASSERT_EQ(report.size(), 2U);
  // The half GPU left on a-n0 cannot take a whole-GPU workload; whole free GPUs can.
  EXPECT_DOUBLE_EQ(report[0].fragmented_milli, 500);
  EXPECT_EQ(report[0].free_milli, 500U + 1000U + 4000U);
  EXPECT_DOUBLE_EQ(report[1].fragmented_milli, 0);
  EXPECT_EQ(report[1].free_milli, 1000U);
  // Without typical workloads nothing is measured as fragmented.
  EXPECT_DOUBLE_EQ(ReportPool(pool_, {})[0].fragmented_milli, 0);
}

TEST_F(PoolReportTest, CapacityOnNodesThatAreNotSchedulableIsNeitherFreeNorFragmented) {
  Cluster a = MakeCluster("a", 2, 4, "L4");
  a.nodes[0].schedulable = false;
  pool_.UpsertCluster(a);  // the allocations on a-n0 are applied again
  const std::vector<PoolModelReport> report = ReportPool(pool_, OneGpuMix());
  ASSERT_EQ(report.size(), 2U);
  EXPECT_EQ(report[0].gpus.total, 8U);
  EXPECT_EQ(report[0].gpus.allocated, 3U);
  EXPECT_EQ(report[0].gpus.free, 4U);
  EXPECT_DOUBLE_EQ(report[0].fragmented_milli, 0);
  EXPECT_EQ(report[0].free_milli, 4000U);
}

}  // namespace
}  // namespace gpufed
