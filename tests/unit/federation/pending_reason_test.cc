// Pending reasons as data: codes with stable names, figures compared as values, and the one
// place that turns them into the words people read (the same words as before reasons had codes).

#include "federation/pending_reason.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gpufed {
namespace {

using R = PendingReason;

constexpr ReasonCode kAllCodes[] = {
    ReasonCode::kNone,
    ReasonCode::kNoClusters,
    ReasonCode::kNoMatchingGpu,
    ReasonCode::kMigProfileUnavailable,
    ReasonCode::kGpuCountUnsatisfiable,
    ReasonCode::kHostCpuUnsatisfiable,
    ReasonCode::kHostMemoryUnsatisfiable,
    ReasonCode::kHostResourcesUnsatisfiable,
    ReasonCode::kTopologyUnsatisfiable,
    ReasonCode::kNoReadyCluster,
    ReasonCode::kHostResourcesBusy,
    ReasonCode::kMigPartitioningOff,
    ReasonCode::kNothingFree,
    ReasonCode::kGpusBusy,
    ReasonCode::kGpuShareBusy,
    ReasonCode::kMigInstanceBusy,
    ReasonCode::kGangBusy,
    ReasonCode::kQueueDepth,
    ReasonCode::kPlacementConflict,
    ReasonCode::kNotLoaded,
    ReasonCode::kRequeued,
    ReasonCode::kUnclassified,
};

TEST(PendingReasonTest, EveryCodeHasOneCamelCaseNameThatParsesBack) {
  std::set<std::string> names;
  for (ReasonCode code : kAllCodes) {
    const std::string name(ReasonCodeName(code));
    EXPECT_EQ(ParseReasonCode(name), code) << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    if (code == ReasonCode::kNone) {
      EXPECT_EQ(name, "");
    } else {
      ASSERT_FALSE(name.empty());
      EXPECT_TRUE(name[0] >= 'A' && name[0] <= 'Z') << name;
      EXPECT_EQ(name.find_first_of(" _-:"), std::string::npos) << name;
    }
  }
  EXPECT_EQ(ReasonCodeName(ReasonCode::kGpusBusy), "GpusBusy");
  EXPECT_EQ(ParseReasonCode("gpusbusy"), std::nullopt);
  EXPECT_EQ(ParseReasonCode("WaitingForSomethingNew"), std::nullopt);
}

TEST(PendingReasonTest, NeverFitsOnlyForTheCodesWaitingCannotResolve) {
  int never = 0;
  for (ReasonCode code : kAllCodes) never += NeverFits(code) ? 1 : 0;
  EXPECT_EQ(never, 8);
  EXPECT_TRUE(R(ReasonCode::kNoClusters).never_fits());
  EXPECT_TRUE(R(ReasonCode::kTopologyUnsatisfiable).never_fits());
  EXPECT_FALSE(R(ReasonCode::kNoReadyCluster).never_fits());
  EXPECT_FALSE(R(ReasonCode::kGangBusy).never_fits());
  EXPECT_FALSE(R(ReasonCode::kNotLoaded).never_fits());
  EXPECT_FALSE(R().never_fits());
}

TEST(PendingReasonTest, FiguresAreKeptSortedSoThatOrderDoesNotMatter) {
  R a = R(ReasonCode::kGpusBusy).Set(figure::kWhere, "c/n0").Set(figure::kLargest, 2);
  R b = R(ReasonCode::kGpusBusy).Set(figure::kLargest, 2).Set(figure::kWhere, "c/n0");
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.figures.size(), 2u);
  EXPECT_EQ(a.figures[0].name, "largest");
  // Set replaces.
  b.Set(figure::kLargest, 3);
  EXPECT_EQ(b.figures.size(), 2u);
  EXPECT_EQ(b.Int(figure::kLargest), 3);
  EXPECT_NE(a, b);
  // Absent, or of the other kind: 0 and "".
  EXPECT_EQ(a.Int(figure::kWhere), 0);
  EXPECT_EQ(a.Text(figure::kLargest), "");
  EXPECT_EQ(a.Text(figure::kNeeds), "");
  EXPECT_TRUE(a.Has(figure::kWhere));
  EXPECT_FALSE(a.Has(figure::kNeeds));
}

TEST(PendingReasonTest, CompareReasonsTellsACodeChangeFromAFiguresChange) {
  const R busy = R(ReasonCode::kGpusBusy).Set(figure::kFree, 3).Set(figure::kWhere, "c/n0");
  EXPECT_EQ(CompareReasons(busy, busy), ReasonChange::kNone);
  EXPECT_EQ(CompareReasons(busy, R(busy).Set(figure::kFree, 2)), ReasonChange::kFigures);
  EXPECT_EQ(CompareReasons(busy, R(busy).Set(figure::kWhere, "c/n1")), ReasonChange::kFigures);
  EXPECT_EQ(CompareReasons(busy, R(busy).Set(figure::kNotReady, "b (draining)")),
            ReasonChange::kFigures);
  R nothing = busy;
  nothing.code = ReasonCode::kNothingFree;
  EXPECT_EQ(CompareReasons(busy, nothing), ReasonChange::kCode);
  EXPECT_EQ(CompareReasons(R(), busy), ReasonChange::kCode);
  // Words from elsewhere are figures too: the same code with other words is not a new code.
  EXPECT_EQ(CompareReasons(ReasonWithText(ReasonCode::kUnclassified, "a"),
                           ReasonWithText(ReasonCode::kUnclassified, "b")),
            ReasonChange::kFigures);
}

// Each code's words, with the figures the placement engine gives it (explain_test.cc checks that
// it does). These are the words users saw before reasons had codes.
TEST(PendingReasonTest, RenderNeverFits) {
  EXPECT_EQ(RenderReason(R(ReasonCode::kNoClusters).Set(figure::kNeeds, "1 GPU")),
            "no clusters are registered; needs 1 GPU");
  EXPECT_EQ(RenderReason(R(ReasonCode::kNoMatchingGpu)
                             .Set(figure::kNeeds, "1 GPU of A100-80GB")
                             .Set(figure::kPoolModels, "H100-80GB, L4")),
            "no cluster can ever hold it: needs 1 GPU of A100-80GB, but no cluster has GPUs that "
            "match (GPU models in the pool: H100-80GB, L4)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kNoMatchingGpu).Set(figure::kNeeds, "1 GPU")),
            "no cluster can ever hold it: needs 1 GPU, but no cluster has GPUs that match (the "
            "pool has no GPUs)");
  R mig = R(ReasonCode::kMigProfileUnavailable)
              .Set(figure::kNeeds, "MIG 3g.40gb")
              .Set(figure::kProfile, "3g.40gb")
              .Set(figure::kMigModels, "A100-80GB, H100-80GB")
              .Set(figure::kPoolModels, "A100-40GB, L4");
  EXPECT_EQ(RenderReason(mig),
            "no cluster can ever hold it: needs MIG 3g.40gb, but no cluster has a MIG-capable GPU "
            "offering 3g.40gb that matches (3g.40gb is a profile of A100-80GB, H100-80GB; GPU "
            "models in the pool: A100-40GB, L4)");
  EXPECT_EQ(RenderReason(mig.Set(figure::kNeeds, "MIG 5g.50gb")
                             .Set(figure::kProfile, "5g.50gb")
                             .Set(figure::kMigModels, "")),
            "no cluster can ever hold it: needs MIG 5g.50gb, but no cluster has a MIG-capable GPU "
            "offering 5g.50gb that matches (no GPU product has a MIG profile 5g.50gb; GPU models "
            "in the pool: A100-40GB, L4)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kGpuCountUnsatisfiable)
                             .Set(figure::kNeeds, "8 GPUs")
                             .Set(figure::kLevel, "node")
                             .Set(figure::kGpus, 8)
                             .Set(figure::kLargest, 4)
                             .Set(figure::kWhere, "c/n0")),
            "no cluster can ever hold it: needs 8 GPUs, but no node has 8 matching GPUs (largest: "
            "4 on c/n0)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kHostCpuUnsatisfiable)
                             .Set(figure::kNeeds, "1 GPU, 32000 CPU millis")
                             .Set(figure::kCpuMillis, 32000)
                             .Set(figure::kLargest, 16000)
                             .Set(figure::kWhere, "c/n1")),
            "no cluster can ever hold it: needs 1 GPU, 32000 CPU millis, but no node with matching "
            "GPUs has 32000 CPU millis (largest: 16000 on c/n1)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kHostMemoryUnsatisfiable)
                             .Set(figure::kNeeds, "1 GPU, 100000 MiB host memory")
                             .Set(figure::kMemoryMib, 100000)
                             .Set(figure::kLargest, 65536)
                             .Set(figure::kWhere, "c/n0")),
            "no cluster can ever hold it: needs 1 GPU, 100000 MiB host memory, but no node with "
            "matching GPUs has 100000 MiB of host memory (largest: 65536 on c/n0)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kHostResourcesUnsatisfiable)
                             .Set(figure::kNeeds, "2 replicas x 1 GPU, 8000 CPU millis")
                             .Set(figure::kLevel, "rack")),
            "no cluster can ever hold it: needs 2 replicas x 1 GPU, 8000 CPU millis, but no rack "
            "has the CPU and memory for it");
  EXPECT_EQ(RenderReason(R(ReasonCode::kTopologyUnsatisfiable)
                             .Set(figure::kNeeds, "2 replicas x 8 GPUs")
                             .Set(figure::kFit, 1)
                             .Set(figure::kReplicas, 2)
                             .Set(figure::kLevel, "cluster")
                             .Set(figure::kWhere, "a")),
            "no cluster can ever hold it: needs 2 replicas x 8 GPUs, but at most 1 of 2 replicas "
            "fit in one cluster (largest: a)");
}

TEST(PendingReasonTest, RenderWaiting) {
  EXPECT_EQ(RenderReason(R(ReasonCode::kNoReadyCluster)
                             .Set(figure::kNeeds, "1 GPU")
                             .Set(figure::kNotReady, "a (unreachable), b (draining)")),
            "waiting for a cluster to become ready (a (unreachable), b (draining)); needs 1 GPU");
  EXPECT_EQ(RenderReason(R(ReasonCode::kNothingFree)
                             .Set(figure::kNeeds, "1 GPU")
                             .Set(figure::kUnit, "GPU")
                             .Set(figure::kNotReady, "b (draining)")),
            "waiting for capacity: needs 1 GPU; nothing that matches is free (0 free GPUs); not "
            "ready: b (draining)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kNothingFree)
                             .Set(figure::kNeeds, "100 milli-GPU of L4")
                             .Set(figure::kUnit, "milli-GPU")),
            "waiting for capacity: needs 100 milli-GPU of L4; nothing that matches is free (0 "
            "milli-GPU free)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kHostResourcesBusy).Set(figure::kNeeds, "no GPU")),
            "waiting for capacity: needs no GPU; no node has the CPU and memory free");
  EXPECT_EQ(RenderReason(R(ReasonCode::kHostResourcesBusy)
                             .Set(figure::kNeeds, "1 GPU, 10000 CPU millis")
                             .Set(figure::kUnit, "GPU")
                             .Set(figure::kFree, 3)
                             .Set(figure::kFreeByModel, "3 L4")
                             .Set(figure::kClusters, 1)
                             .Set(figure::kLevel, "node")),
            "waiting for capacity: needs 1 GPU, 10000 CPU millis; 3 free GPUs (3 L4) across 1 "
            "cluster, but no node with them has the CPU and memory free");
  EXPECT_EQ(RenderReason(R(ReasonCode::kMigPartitioningOff)
                             .Set(figure::kNeeds, "MIG 3g.40gb")
                             .Set(figure::kUnit, "3g.40gb")
                             .Set(figure::kProfile, "3g.40gb")),
            "waiting for capacity: needs MIG 3g.40gb; no free 3g.40gb instance, and partitioning "
            "is off (the engine does not change MIG layouts)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kGpusBusy)
                             .Set(figure::kNeeds, "8 GPUs, same_nvlink_domain")
                             .Set(figure::kUnit, "GPU")
                             .Set(figure::kFree, 14)
                             .Set(figure::kFreeByModel, "14 H100-80GB")
                             .Set(figure::kClusters, 3)
                             .Set(figure::kLevel, "NVLink domain")
                             .Set(figure::kGpus, 8)
                             .Set(figure::kLargest, 6)
                             .Set(figure::kWhere, "north/dgx-03-nvl")),
            "waiting for capacity: needs 8 GPUs, same_nvlink_domain; 14 free GPUs (14 H100-80GB) "
            "across 3 clusters, but no NVLink domain has 8 free (largest: 6 on north/dgx-03-nvl)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kGpuShareBusy)
                             .Set(figure::kNeeds, "500 milli-GPU")
                             .Set(figure::kUnit, "milli-GPU")
                             .Set(figure::kFree, 700)
                             .Set(figure::kFreeByModel, "700 on L4")
                             .Set(figure::kClusters, 1)
                             .Set(figure::kMilli, 500)
                             .Set(figure::kMost, 400)),
            "waiting for capacity: needs 500 milli-GPU; 700 milli-GPU free (700 on L4) across 1 "
            "cluster, but no GPU has 500 milli-GPU free (most on one GPU: 400)");
  R mig = R(ReasonCode::kMigInstanceBusy)
              .Set(figure::kNeeds, "MIG 1g.10gb")
              .Set(figure::kUnit, "1g.10gb")
              .Set(figure::kFree, 1)
              .Set(figure::kFreeByModel, "1 on H100-80GB")
              .Set(figure::kClusters, 1)
              .Set(figure::kProfile, "1g.10gb")
              .Set(figure::kPartitioning, 1);
  EXPECT_EQ(RenderReason(mig),
            "waiting for capacity: needs MIG 1g.10gb; 1 possible 1g.10gb instance (1 on "
            "H100-80GB) across 1 cluster, but no free 1g.10gb instance and no idle GPU to "
            "repartition");
  EXPECT_EQ(RenderReason(mig.Set(figure::kPartitioning, 0).Set(figure::kFree, 2)),
            "waiting for capacity: needs MIG 1g.10gb; 2 possible 1g.10gb instances (1 on "
            "H100-80GB) across 1 cluster, but no free 1g.10gb instance and no idle GPU to use "
            "(partitioning is off)");
  EXPECT_EQ(RenderReason(R(ReasonCode::kGangBusy)
                             .Set(figure::kNeeds, "16 replicas x 4 GPUs, same_nvlink_domain")
                             .Set(figure::kUnit, "GPU")
                             .Set(figure::kFree, 80)
                             .Set(figure::kFreeByModel, "80 GB200")
                             .Set(figure::kClusters, 1)
                             .Set(figure::kLevel, "NVLink domain")
                             .Set(figure::kReplicas, 16)
                             .Set(figure::kFit, 10)
                             .Set(figure::kWhere, "gb/nvl72-a")),
            "waiting for capacity: needs 16 replicas x 4 GPUs, same_nvlink_domain; 80 free GPUs "
            "(80 GB200) across 1 cluster, but no NVLink domain holds 16 replicas now (largest: 10 "
            "in gb/nvl72-a)");
}

TEST(PendingReasonTest, RenderSchedulerAndStoreReasons) {
  EXPECT_EQ(RenderReason(R()), "");
  EXPECT_EQ(RenderReason(R(ReasonCode::kQueueDepth).Set(figure::kConsidered, 2000)),
            "queued: 2000 higher-priority or older workloads are considered first");
  EXPECT_EQ(RenderReason(R(ReasonCode::kPlacementConflict)),
            "internal: placement conflicted with the pool; retrying next cycle");
  EXPECT_EQ(RenderReason(R(ReasonCode::kNotLoaded)),
            "cannot judge yet: the scheduler on this server has not loaded the pool (it is "
            "starting, or another server is the active scheduler); try again shortly");
  EXPECT_EQ(RenderReason(ReasonWithText(ReasonCode::kRequeued, "requeued after c1 was lost")),
            "requeued after c1 was lost");
  EXPECT_EQ(RenderReason(ReasonWithText(ReasonCode::kUnclassified, "quota")), "quota");
}

TEST(PendingReasonTest, EveryCodeButNoneHasWords) {
  for (ReasonCode code : kAllCodes) {
    if (code == ReasonCode::kNone || code == ReasonCode::kRequeued ||
        code == ReasonCode::kUnclassified) {
      continue;  // words from elsewhere
    }
    EXPECT_FALSE(RenderReason(R(code)).empty()) << ReasonCodeName(code);
  }
}

}  // namespace
}  // namespace gpufed
