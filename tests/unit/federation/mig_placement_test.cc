// MIG placement and the partitioning authority: free instances first, idle GPUs repartitioned to
// serve the queue (valid layouts only, with a reason, counted), busy GPUs only gain instances in
// free space, product-specific profile names, and MIG turned off for whole GPUs only as a last
// resort.

#include <algorithm>

#include "federation/mig.h"
#include "federation/placement.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/placement_fixtures.h"

namespace gpufed {
namespace {

using testing::ClusterOf;
using testing::GpuOf;
using testing::Gpus;
using testing::MigReplica;
using testing::MigSpec;
using testing::Node;
using testing::Options;
using testing::PlaceWith;
using testing::ShareSpec;
using testing::SlotOf;
using testing::Spec;
using testing::WholeOn;

PlacementDecision Place(const Pool& pool, const WorkloadSpec& spec, WorkloadId id = 0,
                        const MigQueue& queue = {}, bool partitioning = true) {
  PlacementOptions o = Options("gpufed");
  o.partitioning = partitioning;
  return PlaceWith(pool, spec, o, id, queue);
}

Assignment MigOn(const std::string& node, int gpu, const std::string& profile, int start) {
  Assignment a;
  a.cluster = "c";
  a.replicas.push_back(MigReplica(node, gpu, profile, start));
  return a;
}

// Node "m": `n` MIG-capable GPUs of `model`, none in MIG mode.
Pool MigCapable(const std::string& model, int n = 1) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("m", Gpus("m", n, model, "m-nvl", /*mig_capable=*/true))}));
  return pool;
}

int Count(const std::vector<MigInstance>& layout, const std::string& profile) {
  return static_cast<int>(std::count_if(
      layout.begin(), layout.end(), [&](const MigInstance& i) { return i.profile == profile; }));
}

TEST(MigPlacementTest, AFreeInstanceOfTheProfileIsUsedFirst) {
  std::vector<GpuInfo> gpus = Gpus("m", 2, "H100-80GB", "m-nvl", /*mig_capable=*/true);
  gpus[1].mig_enabled = true;
  gpus[1].mig_layout = {{"3g.40gb", 0}, {"3g.40gb", 4}};
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("m", gpus)}));
  ASSERT_OK(pool.Allocate(5, MigOn("m", 1, "3g.40gb", 0)));

  PlacementDecision d = Place(pool, MigSpec("3g.40gb"), 6, {{"3g.40gb", 1}});
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_TRUE(d.assignment->repartitions.empty());
  const ReplicaAssignment& r = d.assignment->replicas.at(0);
  EXPECT_EQ(r.gpu_indices, (std::vector<uint32_t>{1}));
  EXPECT_EQ(r.mig_profile, "3g.40gb");
  EXPECT_EQ(r.mig_start, 4);
  EXPECT_EQ(r.gpu_milli, 0u);
  ASSERT_OK(pool.Allocate(6, *d.assignment));
  EXPECT_EQ(pool.repartitions_applied(), 0u);
  EXPECT_TRUE(SlotOf(pool, "c", "m", 0).Idle()) << "the idle GPU stays whole";

  // Also with partitioning off.
  pool.Release(6);
  d = Place(pool, MigSpec("3g.40gb"), 6, {}, /*partitioning=*/false);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].mig_start, 4);
}

TEST(MigPlacementTest, IdleGpuIsRepartitionedToServeTheQueue) {
  Pool pool = MigCapable("A100-80GB");
  const MigQueue queue = {
      {"3g.40gb", 1}, {"1g.10gb", 3}, {"1g.5gb", 9}};  // 1g.5gb: not an A100-80GB profile
  PlacementDecision d = Place(pool, MigSpec("3g.40gb"), 17, queue);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  const Repartition& r = d.assignment->repartitions[0];
  EXPECT_EQ(r.node, "m");
  EXPECT_EQ(r.gpu_uuid, testing::Uuid("m", 0));
  EXPECT_TRUE(r.mig_enabled);
  EXPECT_OK(ValidateMigLayout(*FindMigGeometry("A100-80GB"), r.layout));
  EXPECT_EQ(Count(r.layout, "3g.40gb"), 1);
  EXPECT_EQ(Count(r.layout, "1g.10gb"), 3) << "the queued 1g.10gb instances fit beside it";
  EXPECT_EQ(Count(r.layout, "1g.5gb"), 0);
  EXPECT_FALSE(r.reason.empty());
  EXPECT_NE(r.reason.find("17"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("3g.40gb"), std::string::npos) << r.reason;
  const ReplicaAssignment& rep = d.assignment->replicas.at(0);
  EXPECT_EQ(rep.gpu_uuids, (std::vector<std::string>{r.gpu_uuid}));
  EXPECT_EQ(rep.mig_profile, "3g.40gb");
  EXPECT_TRUE(std::find(r.layout.begin(), r.layout.end(), MigInstance{"3g.40gb", rep.mig_start}) !=
              r.layout.end());

  ASSERT_OK(pool.Allocate(17, *d.assignment));
  EXPECT_EQ(pool.repartitions_applied(), 1u);
  EXPECT_TRUE(GpuOf(pool, "c", "m", 0).mig_enabled);
  EXPECT_EQ(GpuOf(pool, "c", "m", 0).mig_layout, r.layout);

  // The queued 1g.10gb now finds free instances: no more repartitions.
  for (WorkloadId id = 18; id <= 20; ++id) {
    d = Place(pool, MigSpec("1g.10gb"), id, {{"1g.10gb", static_cast<uint32_t>(21 - id)}});
    ASSERT_TRUE(d.assignment.has_value()) << d.reason;
    EXPECT_TRUE(d.assignment->repartitions.empty()) << d.assignment->repartitions[0].reason;
    ASSERT_OK(pool.Allocate(id, *d.assignment));
  }
  EXPECT_EQ(pool.repartitions_applied(), 1u);
}

TEST(MigPlacementTest, PartitioningOffNeverRepartitions) {
  Pool pool = MigCapable("H100-80GB");
  PlacementDecision d =
      Place(pool, MigSpec("3g.40gb"), 1, {{"3g.40gb", 1}}, /*partitioning=*/false);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_EQ(d.reason.code, ReasonCode::kMigPartitioningOff) << d.reason;
  // Nor is MIG turned off for whole GPUs.
  std::vector<GpuInfo> gpus = Gpus("m", 1, "H100-80GB", "", /*mig_capable=*/true);
  gpus[0].mig_enabled = true;
  gpus[0].mig_layout = {{"7g.80gb", 0}};
  Pool mig;
  mig.UpsertCluster(ClusterOf("c", {Node("m", gpus)}));
  d = Place(mig, Spec(1, 1), 2, {}, /*partitioning=*/false);
  EXPECT_FALSE(d.assignment.has_value());
  d = Place(mig, ShareSpec(300), 3, {}, /*partitioning=*/false);
  EXPECT_FALSE(d.assignment.has_value());
}

TEST(MigPlacementTest, BusyGpuOnlyGainsInstancesInFreeSpace) {
  std::vector<GpuInfo> gpus = Gpus("m", 2, "H100-80GB", "m-nvl", /*mig_capable=*/true);
  gpus[0].mig_enabled = true;
  gpus[0].mig_layout = {{"3g.40gb", 0}};
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("m", gpus)}));
  ASSERT_OK(pool.Allocate(5, MigOn("m", 0, "3g.40gb", 0)));

  // A 1g.10gb goes beside the running 3g.40gb (keeping GPU 1 whole), in free space.
  PlacementDecision d = Place(pool, MigSpec("1g.10gb"), 6);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  const Repartition& r = d.assignment->repartitions[0];
  EXPECT_EQ(r.gpu_uuid, testing::Uuid("m", 0));
  ASSERT_FALSE(r.layout.empty());
  EXPECT_EQ(r.layout[0], (MigInstance{"3g.40gb", 0})) << "the bound instance stays";
  EXPECT_OK(ValidateMigLayout(*FindMigGeometry("H100-80GB"), r.layout));
  EXPECT_EQ(d.assignment->replicas[0].mig_start, 4);
  absl::Status s = pool.Allocate(6, *d.assignment);
  ASSERT_OK(s);
  EXPECT_EQ(pool.repartitions_applied(), 1u);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{5, 6}));

  // A 4g.40gb would need slots 0-3 of GPU 0: it goes to the idle GPU 1 instead.
  d = Place(pool, MigSpec("4g.40gb"), 7);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{1}));
  for (const Repartition& rp : d.assignment->repartitions) {
    EXPECT_NE(rp.gpu_uuid, testing::Uuid("m", 0)) << rp.reason;
  }
  ASSERT_OK(pool.Allocate(7, *d.assignment));
  // Now nothing can host a 7g.80gb: GPU 0 is busy, GPU 1 too.
  d = Place(pool, MigSpec("7g.80gb"), 8);
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_EQ(GpuOf(pool, "c", "m", 0).mig_layout.size(), 2u);
}

TEST(MigPlacementTest, GpuWithSharesIsNeverPutInMigMode) {
  Pool pool = MigCapable("A100-80GB");
  ASSERT_OK(pool.Allocate(1, testing::ShareOn("c", "m", 0, 300)));
  PlacementDecision d = Place(pool, MigSpec("3g.40gb"), 2, {{"3g.40gb", 1}});
  EXPECT_FALSE(d.assignment.has_value());
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  EXPECT_FALSE(GpuOf(pool, "c", "m", 0).mig_enabled);
}

TEST(MigPlacementTest, IdleMigGpuWithoutTheProfileIsRepartitioned) {
  std::vector<GpuInfo> gpus = Gpus("m", 1, "H100-80GB", "", /*mig_capable=*/true);
  gpus[0].mig_enabled = true;
  gpus[0].mig_layout = {{"7g.80gb", 0}};
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("m", gpus)}));
  PlacementDecision d = Place(pool, MigSpec("3g.40gb"), 9, {{"3g.40gb", 2}});
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  const Repartition& r = d.assignment->repartitions[0];
  EXPECT_EQ(r.layout, (std::vector<MigInstance>{{"3g.40gb", 0}, {"3g.40gb", 4}}));
  EXPECT_NE(r.reason.find("repartition"), std::string::npos) << r.reason;
  ASSERT_OK(pool.Allocate(9, *d.assignment));
  EXPECT_EQ(pool.repartitions_applied(), 1u);
}

TEST(MigPlacementTest, ProfileNamesArePerProduct) {
  // 1g.10gb takes two memory slots on A100-40GB: four fit.
  Pool a100 = MigCapable("A100-40GB");
  PlacementDecision d = Place(a100, MigSpec("1g.10gb"), 1, {{"1g.10gb", 4}});
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  EXPECT_EQ(
      d.assignment->repartitions[0].layout,
      (std::vector<MigInstance>{{"1g.10gb", 0}, {"1g.10gb", 2}, {"1g.10gb", 4}, {"1g.10gb", 6}}));
  // One slot on H100-80GB: seven fit.
  Pool h100 = MigCapable("H100-80GB");
  d = Place(h100, MigSpec("1g.10gb"), 1, {{"1g.10gb", 7}});
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  const std::vector<MigInstance>& layout = d.assignment->repartitions.at(0).layout;
  EXPECT_EQ(Count(layout, "1g.10gb"), 7);
  EXPECT_OK(ValidateMigLayout(*FindMigGeometry("H100-80GB"), layout));
  // 1g.5gb is an A100-40GB name only; 3g.20gb likewise.
  EXPECT_TRUE(Place(h100, MigSpec("1g.5gb")).reason.never_fits());
  EXPECT_TRUE(Place(a100, MigSpec("1g.5gb")).assignment.has_value());
  EXPECT_TRUE(Place(a100, MigSpec("3g.40gb")).reason.never_fits());
  // In a pool with both, the profile picks the product.
  Pool both;
  both.UpsertCluster(ClusterOf("c", {Node("a", Gpus("a", 1, "A100-40GB", "", true, 40536)),
                                     Node("h", Gpus("h", 1, "H100-80GB", "", true))}));
  d = Place(both, MigSpec("3g.20gb"));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].node, "a");
  d = Place(both, MigSpec("3g.40gb"));
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].node, "h");
}

TEST(MigPlacementTest, GangOfInstancesSharesOneRepartition) {
  Pool pool = MigCapable("H100-80GB");
  PlacementDecision d = Place(pool, MigSpec("3g.40gb", 2), 4, {{"3g.40gb", 2}});
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->replicas.size(), 2u);
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  EXPECT_EQ(d.assignment->repartitions[0].layout,
            (std::vector<MigInstance>{{"3g.40gb", 0}, {"3g.40gb", 4}}));
  EXPECT_NE(d.assignment->replicas[0].mig_start, d.assignment->replicas[1].mig_start);
  ASSERT_OK(pool.Allocate(4, *d.assignment));
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{4, 4}));

  EXPECT_EQ(pool.repartitions_applied(), 1u);

  // Without a queue the first replica's layout is extended by the second: still one change.
  Pool bare = MigCapable("H100-80GB");
  d = Place(bare, MigSpec("3g.40gb", 2), 4);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  EXPECT_EQ(d.assignment->repartitions[0].layout,
            (std::vector<MigInstance>{{"3g.40gb", 0}, {"3g.40gb", 4}}));
  absl::Status s = bare.Allocate(4, *d.assignment);
  ASSERT_OK(s);
  EXPECT_EQ(SlotOf(bare, "c", "m", 0).mig_owners, (std::vector<WorkloadId>{4, 4}));
  EXPECT_EQ(bare.repartitions_applied(), 1u);
}

TEST(MigPlacementTest, WholeGpuTurnsAnIdleMigGpuOffOnlyWhenNothingElseFits) {
  std::vector<GpuInfo> gpus = Gpus("m", 2, "H100-80GB", "m-nvl", /*mig_capable=*/true);
  gpus[0].mig_enabled = true;
  gpus[0].mig_layout = {{"7g.80gb", 0}};
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("m", gpus)}));

  PlacementDecision d = Place(pool, Spec(1, 1), 1);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{1}));
  EXPECT_TRUE(d.assignment->repartitions.empty());
  ASSERT_OK(pool.Allocate(1, *d.assignment));

  // Only the idle MIG GPU is left: MIG goes off for it, with a reason.
  d = Place(pool, Spec(1, 1), 2);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{0}));
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  EXPECT_FALSE(d.assignment->repartitions[0].mig_enabled);
  EXPECT_EQ(d.assignment->repartitions[0].gpu_uuid, testing::Uuid("m", 0));
  EXPECT_FALSE(d.assignment->repartitions[0].reason.empty());

  // But not while an instance on it is bound.
  ASSERT_OK(pool.Allocate(3, MigOn("m", 0, "7g.80gb", 0)));
  PlacementDecision busy = Place(pool, Spec(1, 1), 2);
  EXPECT_FALSE(busy.assignment.has_value());
  pool.Release(3);

  ASSERT_OK(pool.Allocate(2, *d.assignment));
  EXPECT_FALSE(GpuOf(pool, "c", "m", 0).mig_enabled);
  EXPECT_EQ(pool.repartitions_applied(), 1u);
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).holders.size(), 1u);
}

TEST(MigPlacementTest, ShareTurnsAnIdleMigGpuOffOnlyWhenNothingElseFits) {
  std::vector<GpuInfo> gpus = Gpus("m", 2, "A100-80GB", "", /*mig_capable=*/true);
  gpus[0].mig_enabled = true;
  gpus[0].mig_layout = {{"3g.40gb", 0}, {"3g.40gb", 4}};
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("m", gpus)}));
  PlacementDecision d = Place(pool, ShareSpec(600), 1);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{1}));
  EXPECT_TRUE(d.assignment->repartitions.empty());
  ASSERT_OK(pool.Allocate(1, *d.assignment));
  d = Place(pool, ShareSpec(600), 2);
  ASSERT_TRUE(d.assignment.has_value()) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].gpu_indices, (std::vector<uint32_t>{0}));
  ASSERT_EQ(d.assignment->repartitions.size(), 1u);
  EXPECT_FALSE(d.assignment->repartitions[0].mig_enabled);
  ASSERT_OK(pool.Allocate(2, *d.assignment));
  EXPECT_EQ(SlotOf(pool, "c", "m", 0).milli_free, 400u);
}

}  // namespace
}  // namespace gpufed
