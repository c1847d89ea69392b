#include "federation/routing.h"

#include <chrono>
#include <set>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using testing::Gang;
using testing::MakeCluster;

const Timestamp kNow = Timestamp{} + std::chrono::hours(24 * 365 * 56);

PriceEntry Price(const std::string& model, CapacityType capacity, int64_t micros,
                 Timestamp from = Timestamp{} + std::chrono::hours(1),
                 const std::string& profile = "") {
  PriceEntry e;
  e.gpu_model = model;
  e.mig_profile = profile;
  e.capacity = capacity;
  e.micros_per_hour = micros;
  e.effective_from = from;
  return e;
}

// A cluster of `nodes` x 8 H100s declared in `jurisdiction`, priced on demand at `dollars`/h.
Cluster Priced(const std::string& name, const std::string& jurisdiction, int64_t micros,
               int nodes = 1) {
  Cluster c = MakeCluster(name, nodes, 8, "H100-80GB");
  c.declared.cluster = name;
  c.declared.jurisdiction = jurisdiction;
  c.declared.prices.push_back(Price("H100-80GB", CapacityType::kOnDemand, micros));
  return c;
}

PlacementDecision Route(const Pool& pool, const WorkloadSpec& spec) {
  PlacementOptions options;
  options.random_ties = false;
  auto engine = PlacementEngine::Create(options);
  return Router().Place(**engine, pool, spec, 1, {}, kNow);
}

TEST(PriceBookTest, TheLineInForceIsTheLatestNotAfterTheMoment) {
  ClusterDeclaration d;
  const Timestamp jan = Timestamp{} + std::chrono::hours(100);
  const Timestamp feb = Timestamp{} + std::chrono::hours(200);
  d.prices = {Price("H100-80GB", CapacityType::kOnDemand, 3'000'000, feb),
              Price("H100-80GB", CapacityType::kOnDemand, 4'000'000, jan)};
  EXPECT_EQ(PriceAt(d, "H100-80GB", "", CapacityType::kOnDemand, jan - std::chrono::hours(1)),
            std::nullopt);
  EXPECT_EQ(PriceAt(d, "H100-80GB", "", CapacityType::kOnDemand, jan), 4'000'000);
  EXPECT_EQ(PriceAt(d, "H100-80GB", "", CapacityType::kOnDemand, feb), 3'000'000);
  EXPECT_EQ(PriceAt(d, "H100-80GB", "", CapacityType::kSpot, feb), std::nullopt);
}

TEST(PriceBookTest, ReplicasArePricedByWhatTheyTake) {
  ClusterDeclaration d;
  d.prices = {Price("H100-80GB", CapacityType::kOnDemand, 7'000'000)};
  WorkloadSpec whole = Gang(1, 4);
  EXPECT_EQ(ReplicaPricePerHour(d, whole, "H100-80GB", CapacityType::kOnDemand, kNow), 28'000'000);
  EXPECT_EQ(PricePerGpuHour(d, whole, "H100-80GB", CapacityType::kOnDemand, kNow), 7'000'000);
  // Committed capacity is paid for already: its marginal price is 0.
  EXPECT_EQ(ReplicaPricePerHour(d, whole, "H100-80GB", CapacityType::kCommitted, kNow), 0);
  WorkloadSpec share = Gang(1, 1);
  share.gpu_milli = 250;
  EXPECT_EQ(ReplicaPricePerHour(d, share, "H100-80GB", CapacityType::kOnDemand, kNow), 1'750'000);
  // A MIG instance without a line of its own: its compute slices' share of the GPU (3/7).
  WorkloadSpec mig = Gang(1, 1);
  mig.mig_profile = "3g.40gb";
  EXPECT_EQ(ReplicaPricePerHour(d, mig, "H100-80GB", CapacityType::kOnDemand, kNow), 3'000'000);
  d.prices.push_back(
      Price("H100-80GB", CapacityType::kOnDemand, 2'500'000, Timestamp{}, "3g.40gb"));
  EXPECT_EQ(ReplicaPricePerHour(d, mig, "H100-80GB", CapacityType::kOnDemand, kNow), 2'500'000);
  EXPECT_EQ(ReplicaPricePerHour(d, whole, "A100-80GB", CapacityType::kOnDemand, kNow),
            std::nullopt);
}

TEST(DeclarationTest, DeclaredAttributesReplaceTheAgentsInThePool) {
  Pool pool;
  Cluster c = MakeCluster("a", 1, 8, "H100-80GB");
  c.info.jurisdiction = "us";
  c.info.compliance_labels = {"hipaa"};
  pool.UpsertCluster(c);
  EXPECT_EQ(pool.FindCluster("a")->info.jurisdiction, "us");

  ClusterDeclaration d;
  d.cluster = "a";
  d.jurisdiction = "eu";
  d.compliance_labels = std::vector<std::string>{};
  pool.SetDeclaration(d);
  EXPECT_EQ(pool.FindCluster("a")->info.jurisdiction, "eu");
  EXPECT_TRUE(pool.FindCluster("a")->info.compliance_labels.empty());
  // Lifting the declaration brings the agent's values back.
  d.jurisdiction.clear();
  d.compliance_labels.reset();
  pool.SetDeclaration(d);
  EXPECT_EQ(pool.FindCluster("a")->info.jurisdiction, "us");
  EXPECT_EQ(pool.FindCluster("a")->info.compliance_labels, std::vector<std::string>{"hipaa"});
}

TEST(RouterTest, JurisdictionIsAHardRuleAndItsReasonNamesIt) {
  Pool pool;
  pool.UpsertCluster(Priced("us-cheap", "us", 1'000'000));
  pool.UpsertCluster(Priced("eu-dear", "eu", 9'000'000));
  WorkloadSpec spec = Gang(1, 2);
  spec.placement.jurisdictions = {"eu"};
  spec.placement.objective = Objective::kCost;
  PlacementDecision d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "eu-dear");

  spec.placement.jurisdictions = {"de"};
  spec.mig_profile = "3g.40gb";
  spec.gpus_per_replica = 1;
  d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_EQ(d.reason.code, ReasonCode::kNoClusterAllowed);
  EXPECT_TRUE(d.reason.never_fits());
  EXPECT_EQ(d.reason.Text(figure::kRule), "in jurisdiction de");
  EXPECT_EQ(d.reason.Text(figure::kNeeds), "MIG 3g.40gb");
}

TEST(RouterTest, CostTakesTheCheapestClusterThatHoldsItThenTheNext) {
  Pool pool;
  pool.UpsertCluster(Priced("mid", "eu", 3'000'000));
  pool.UpsertCluster(Priced("cheap", "eu", 2'000'000));
  pool.UpsertCluster(Priced("dear", "eu", 5'000'000));
  WorkloadSpec spec = Gang(1, 8);
  spec.placement.objective = Objective::kCost;
  PlacementDecision d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "cheap");
  ASSERT_OK(pool.Allocate(1, *d.assignment));
  d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "mid");
  ASSERT_OK(pool.Allocate(2, *d.assignment));
  d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "dear");
  ASSERT_OK(pool.Allocate(3, *d.assignment));
  // Full everywhere: the reason is about capacity (waiting helps), not the rules.
  d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
}

TEST(RouterTest, CommittedCapacityIsFreeAndSpotOnlyForThoseWhoTolerateIt) {
  Pool pool;
  Cluster cloud = Priced("cloud", "eu", 4'000'000, 2);
  cloud.nodes[1].labels[std::string(kCapacityTypeLabel)] = "spot";
  cloud.declared.prices.push_back(Price("H100-80GB", CapacityType::kSpot, 1'000'000));
  pool.UpsertCluster(cloud);
  Cluster owned = Priced("owned", "eu", 0);
  owned.declared.default_capacity = CapacityType::kCommitted;
  owned.declared.prices.clear();  // owned: no price at all, and still free to use
  pool.UpsertCluster(owned);

  WorkloadSpec spec = Gang(1, 8);
  spec.placement.objective = Objective::kCost;
  PlacementDecision d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "owned");
  ASSERT_OK(pool.Allocate(1, *d.assignment));

  // Not tolerating spot: the on-demand node, never the cheaper spot one.
  d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].node, "cloud-n0");
  spec.placement.spot_tolerated = true;
  d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].node, "cloud-n1");

  // Away from owned capacity, a price cap below on-demand leaves only spot; without tolerating
  // spot, nothing.
  spec.placement.denied_clusters = {"owned"};
  spec.placement.max_price_per_gpu_hour_micros = 2'000'000;
  d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->replicas[0].node, "cloud-n1");
  spec.placement.spot_tolerated = false;
  d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_EQ(d.reason.code, ReasonCode::kNoClusterAllowed);
  EXPECT_EQ(d.reason.Text(figure::kRule), "at 2.00 or less per GPU-hour");
}

TEST(RouterTest, LatencyTakesTheClosestAndMaxRttIsAHardRule) {
  Pool pool;
  Cluster near = Priced("near", "eu", 9'000'000);
  near.declared.rtt_micros["eu-west"] = 8'000;
  Cluster far = Priced("far", "us", 1'000'000);
  far.declared.rtt_micros["eu-west"] = 95'000;
  Cluster unknown = Priced("unknown", "eu", 1'000'000);
  pool.UpsertCluster(near);
  pool.UpsertCluster(far);
  pool.UpsertCluster(unknown);

  WorkloadSpec spec = Gang(1, 8);
  spec.placement.objective = Objective::kLatency;
  spec.placement.client_region = "eu-west";
  PlacementDecision d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "near");
  ASSERT_OK(pool.Allocate(1, *d.assignment));

  spec.placement.max_rtt_micros = 50'000;
  d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_FALSE(d.reason.never_fits()) << "near is allowed, only busy: " << d.reason;

  // Balanced with the default weights: 8 ms + 9.00/h (9.16) loses to 95 ms + 1.00/h (2.9).
  pool.Release(1);
  spec.placement.max_rtt_micros = 0;
  spec.placement.objective = Objective::kBalanced;
  d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "far");
}

TEST(RouterTest, ComplianceProviderRegionAndClusterListsAreHardRules) {
  Pool pool;
  Cluster a = Priced("a", "eu", 1'000'000);
  a.declared.compliance_labels = std::vector<std::string>{"gdpr"};
  a.declared.provider = "aws";
  a.declared.region = "eu-west-1";
  Cluster b = Priced("b", "eu", 2'000'000);
  b.declared.compliance_labels = std::vector<std::string>{"gdpr", "hipaa"};
  b.declared.provider = "onprem";
  b.declared.region = "fra";
  pool.UpsertCluster(a);
  pool.UpsertCluster(b);
  WorkloadSpec spec = Gang(1, 1);
  spec.placement.objective = Objective::kCost;
  EXPECT_EQ(Route(pool, spec).assignment->cluster, "a");
  spec.placement.compliance_labels = {"hipaa"};
  EXPECT_EQ(Route(pool, spec).assignment->cluster, "b");
  spec.placement.compliance_labels = {};
  spec.placement.providers = {"onprem"};
  EXPECT_EQ(Route(pool, spec).assignment->cluster, "b");
  spec.placement.providers = {};
  spec.placement.regions = {"fra"};
  EXPECT_EQ(Route(pool, spec).assignment->cluster, "b");
  spec.placement.regions = {};
  spec.placement.denied_clusters = {"a"};
  EXPECT_EQ(Route(pool, spec).assignment->cluster, "b");
  spec.placement.denied_clusters = {};
  spec.placement.clusters = {"b"};
  EXPECT_EQ(Route(pool, spec).assignment->cluster, "b");
  spec.placement.compliance_labels = {"sovereign"};
  PlacementDecision d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_EQ(d.reason.Text(figure::kRule), "with compliance label sovereign");
}

TEST(VersionTest, VersionsCompareNumberByNumber) {
  EXPECT_LT(*PackVersion("550.54.15"), *PackVersion("550.90"));
  EXPECT_LT(*PackVersion("12.4"), *PackVersion("12.10"));
  EXPECT_EQ(*PackVersion("12"), *PackVersion("12.0.0"));
  for (const char* bad : {"", "12.", ".4", "12.4.1.1", "v12", "12.-1", "1 2", "99999999"}) {
    EXPECT_EQ(PackVersion(bad), std::nullopt) << bad;
  }
}

TEST(RouterTest, DriverAndCudaMinimumsKeepWorkOffOlderNodes) {
  Pool pool;
  Cluster c = MakeCluster("a", 2, 8, "H100-80GB");
  c.nodes[0].labels[std::string(kDriverVersionLabel)] = "535.161.08";
  c.nodes[0].labels[std::string(kCudaVersionLabel)] = "12.2";
  c.nodes[1].labels[std::string(kDriverVersionLabel)] = "550.54.15";
  c.nodes[1].labels[std::string(kCudaVersionLabel)] = "12.4";
  pool.UpsertCluster(c);
  pool.UpsertCluster(MakeCluster("b", 1, 8, "H100-80GB"));  // reports no versions
  WorkloadSpec spec = Gang(1, 8);
  spec.placement.min_driver_version = "550";
  spec.placement.min_cuda_version = "12.3";
  PlacementDecision d = Route(pool, spec);
  ASSERT_TRUE(d.assignment) << d.reason;
  EXPECT_EQ(d.assignment->cluster, "a");
  EXPECT_EQ(d.assignment->replicas[0].node, "a-n1");
  ASSERT_OK(pool.Allocate(1, *d.assignment));
  // The older node is free but too old: the reason is about capacity on what is allowed.
  d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_FALSE(d.reason.never_fits()) << d.reason;
  spec.placement.min_cuda_version = "12.8";
  d = Route(pool, spec);
  ASSERT_FALSE(d.assignment);
  EXPECT_EQ(d.reason.code, ReasonCode::kNoClusterAllowed);
  EXPECT_EQ(d.reason.Text(figure::kRule), "with CUDA 12.8 or newer");
}

}  // namespace
}  // namespace gpufed
