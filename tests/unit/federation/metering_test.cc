#include "federation/metering.h"

#include <chrono>
#include <numeric>

#include "gtest/gtest.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using testing::MakeCluster;
using testing::Uuid;
using testing::WholeGpus;

const Timestamp kStart = Timestamp{} + hours(24 * 365 * 56);

PriceEntry Price(const std::string& model, CapacityType capacity, int64_t micros,
                 Timestamp from = Timestamp{}, const std::string& profile = "") {
  PriceEntry e;
  e.gpu_model = model;
  e.mig_profile = profile;
  e.capacity = capacity;
  e.micros_per_hour = micros;
  e.effective_from = from;
  return e;
}

// One node of 8 H100s, priced on demand at $4/h.
Cluster H100Cluster() {
  Cluster c = MakeCluster("dc", 1, 8, "H100-80GB");
  c.declared.cluster = "dc";
  c.declared.prices.push_back(Price("H100-80GB", CapacityType::kOnDemand, 4'000'000));
  return c;
}

Workload RunOf(WorkloadId id, std::vector<ReplicaAssignment> replicas) {
  Workload w;
  w.id = id;
  w.spec = testing::Gpus("job", 1);
  w.state = WorkloadState::kRunning;
  w.attempts = 1;
  w.assignment.cluster = "dc";
  w.assignment.epoch = 1;
  w.assignment.replicas = std::move(replicas);
  return w;
}

ReplicaAssignment Mig(int gpu, const std::string& profile, int start) {
  ReplicaAssignment r = WholeGpus("dc-n0", {static_cast<uint32_t>(gpu)});
  r.mig_profile = profile;
  r.mig_start = start;
  return r;
}

double GpuSeconds(const std::vector<UsageRecord>& records) {
  double total = 0;
  for (const UsageRecord& r : records) total += r.GpuSeconds();
  return total;
}

int64_t Cost(const std::vector<UsageRecord>& records) {
  int64_t total = 0;
  for (const UsageRecord& r : records) total += r.cost_micros;
  return total;
}

// The worked example of docs/chargeback.md: seven 1g.10gb instances fill an H100 for an hour.
std::vector<UsageRecord> SevenSlicesForAnHour(MigBasis basis) {
  const Cluster c = H100Cluster();
  std::vector<UsageRecord> all;
  for (int i = 0; i < 7; ++i) {
    const Workload w = RunOf(100 + i, {Mig(0, "1g.10gb", i)});
    for (UsageRecord& r : MeterSpan(w, c, kStart, kStart + hours(1), MeteringPolicy{basis})) {
      all.push_back(std::move(r));
    }
  }
  return all;
}

TEST(MeteringTest, SevenSmallestMigInstancesOnAnH100AreOneGpuHourOnTheComputeBasis) {
  const std::vector<UsageRecord> records = SevenSlicesForAnHour(MigBasis::kCompute);
  ASSERT_EQ(records.size(), 7u);
  EXPECT_EQ(records[0].fraction, (Fraction{1, 7}));
  EXPECT_DOUBLE_EQ(GpuSeconds(records), 3600.0);
  // 4,000,000 / 7 = 571,428.57 each, rounded to 571,429: within a micro-unit per record.
  EXPECT_EQ(records[0].cost_micros, 571'429);
  EXPECT_NEAR(static_cast<double>(Cost(records)), 4'000'000.0, 7.0);
}

TEST(MeteringTest, TheMemoryBasisCountsEighthsAndTheLargerBasisTheGreaterShare) {
  const std::vector<UsageRecord> memory = SevenSlicesForAnHour(MigBasis::kMemory);
  EXPECT_EQ(memory[0].fraction, (Fraction{1, 8}));
  EXPECT_DOUBLE_EQ(GpuSeconds(memory), 7 * 450.0);
  EXPECT_EQ(Cost(memory), 7 * 500'000);

  const std::vector<UsageRecord> larger = SevenSlicesForAnHour(MigBasis::kLarger);
  EXPECT_EQ(larger[0].fraction, (Fraction{1, 7}));
  // 3g.40gb: 3/7 compute, 4/8 memory; the larger is the memory side.
  const MigGeometry* h100 = FindMigGeometry("H100-80GB");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(MigFraction(*h100, *h100->Find("3g.40gb"), MigBasis::kLarger), (Fraction{4, 8}));
  EXPECT_EQ(MigFraction(*h100, *h100->Find("3g.40gb"), MigBasis::kCompute), (Fraction{3, 7}));
}

TEST(MeteringTest, AProfileThePriceBookPricesIsChargedItsOwnPrice) {
  Cluster c = H100Cluster();
  c.declared.prices.push_back(
      Price("H100-80GB", CapacityType::kOnDemand, 700'000, Timestamp{}, "1g.10gb"));
  const std::vector<UsageRecord> records =
      MeterSpan(RunOf(1, {Mig(0, "1g.10gb", 0)}), c, kStart, kStart + hours(2), MeteringPolicy{});
  ASSERT_EQ(records.size(), 2u);  // one per hour
  EXPECT_TRUE(records[0].profile_priced);
  EXPECT_EQ(records[0].price_micros_per_hour, 700'000);
  EXPECT_EQ(Cost(records), 1'400'000);
  EXPECT_EQ(records[0].fraction, (Fraction{1, 7}));  // the GPU-hours still count its share
}

TEST(MeteringTest, AGpuShareIsChargedItsMilliOverAThousand) {
  ReplicaAssignment share = WholeGpus("dc-n0", {3});
  share.gpu_milli = 250;
  const std::vector<UsageRecord> records =
      MeterSpan(RunOf(1, {share}), H100Cluster(), kStart, kStart + hours(1), MeteringPolicy{});
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].fraction, (Fraction{250, 1000}));
  EXPECT_EQ(records[0].gpu_milli, 250u);
  EXPECT_EQ(records[0].cost_micros, 1'000'000);
  EXPECT_DOUBLE_EQ(records[0].GpuSeconds(), 900.0);
}

TEST(MeteringTest, APriceChangeMidRunSplitsTheRecord) {
  Cluster c = H100Cluster();
  c.declared.prices.push_back(
      Price("H100-80GB", CapacityType::kOnDemand, 8'000'000, kStart + minutes(30)));
  // A line of another capacity type changes nothing here.
  c.declared.prices.push_back(Price("H100-80GB", CapacityType::kSpot, 1, kStart + minutes(10)));
  const std::vector<UsageRecord> records = MeterSpan(RunOf(1, {WholeGpus("dc-n0", {0})}), c, kStart,
                                                     kStart + hours(1), MeteringPolicy{});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].from, kStart);
  EXPECT_EQ(records[0].to, kStart + minutes(30));
  EXPECT_EQ(records[0].cost_micros, 2'000'000);
  EXPECT_EQ(records[1].from, kStart + minutes(30));
  EXPECT_EQ(records[1].to, kStart + hours(1));
  EXPECT_EQ(records[1].price_micros_per_hour, 8'000'000);
  EXPECT_EQ(records[1].cost_micros, 4'000'000);
}

TEST(MeteringTest, EveryGpuOfEveryReplicaGetsItsRecordAtItsNodesCapacityType) {
  Cluster c = MakeCluster("dc", 2, 8, "H100-80GB");
  c.declared.cluster = "dc";
  c.declared.prices = {Price("H100-80GB", CapacityType::kOnDemand, 4'000'000),
                       Price("H100-80GB", CapacityType::kSpot, 1'500'000),
                       Price("H100-80GB", CapacityType::kCommitted, 2'000'000)};
  c.nodes[1].labels[std::string(kCapacityTypeLabel)] = "spot";
  Workload w = RunOf(1, {WholeGpus("dc-n0", {0, 1, 2, 3}), WholeGpus("dc-n1", {4, 5, 6, 7})});
  w.spec.replicas = 2;
  w.spec.gpus_per_replica = 4;
  std::vector<UsageRecord> records = MeterSpan(w, c, kStart, kStart + hours(1), MeteringPolicy{});
  ASSERT_EQ(records.size(), 8u);
  EXPECT_EQ(records[0].replica, 0u);
  EXPECT_EQ(records[0].gpu_uuid, Uuid("dc-n0", 0));
  EXPECT_EQ(records[0].capacity, CapacityType::kOnDemand);
  EXPECT_EQ(records[7].replica, 1u);
  EXPECT_EQ(records[7].gpu_uuid, Uuid("dc-n1", 7));
  EXPECT_EQ(records[7].capacity, CapacityType::kSpot);
  EXPECT_EQ(Cost(records), 4 * 4'000'000 + 4 * 1'500'000);

  // Committed capacity is charged its committed line (it is free only to the router).
  c.declared.default_capacity = CapacityType::kCommitted;
  c.nodes[1].labels.clear();
  records = MeterSpan(w, c, kStart, kStart + hours(1), MeteringPolicy{});
  EXPECT_EQ(Cost(records), 8 * 2'000'000);
}

TEST(MeteringTest, UnpricedGpusAreMeteredWithNoPriceAndNoCost) {
  Cluster c = MakeCluster("dc", 1, 8, "L4");
  const std::vector<UsageRecord> records = MeterSpan(RunOf(1, {WholeGpus("dc-n0", {0})}), c, kStart,
                                                     kStart + hours(1), MeteringPolicy{});
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].gpu_model, "L4");
  EXPECT_FALSE(records[0].price_micros_per_hour.has_value());
  EXPECT_EQ(records[0].cost_micros, 0);
  EXPECT_DOUBLE_EQ(records[0].GpuSeconds(), 3600.0);
}

TEST(MeteringTest, NoRecordCrossesAWholeHour) {
  const Timestamp from = kStart + minutes(50);
  const Timestamp to = kStart + hours(3) + minutes(5);
  const std::vector<UsageRecord> records =
      MeterSpan(RunOf(1, {WholeGpus("dc-n0", {0})}), H100Cluster(), from, to, MeteringPolicy{});
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].from, from);
  EXPECT_EQ(records[0].to, kStart + hours(1));
  EXPECT_EQ(records[3].from, kStart + hours(3));
  EXPECT_EQ(records[3].to, to);
  for (size_t i = 1; i < records.size(); ++i) EXPECT_EQ(records[i].from, records[i - 1].to);
  EXPECT_EQ(Cost(records), 4'000'000 * 135 / 60);
}

TEST(MeteringTest, AnEmptyOrBackwardSpanMetersNothing) {
  const Workload w = RunOf(1, {WholeGpus("dc-n0", {0})});
  EXPECT_TRUE(MeterSpan(w, H100Cluster(), kStart, kStart, MeteringPolicy{}).empty());
  EXPECT_TRUE(MeterSpan(w, H100Cluster(), kStart, kStart - hours(1), MeteringPolicy{}).empty());
}

TEST(MeteringTest, CostIsExactForLargePricesAndLongSpans) {
  // $1,000,000 an hour for a year: 8.76e15 micro-units, beyond what a double holds exactly in a
  // product with the span in microseconds.
  const auto year = std::chrono::duration_cast<std::chrono::microseconds>(hours(24 * 365));
  EXPECT_EQ(CostMicros(1'000'000'000'000, Fraction{1, 1}, year), int64_t{8'760'000'000'000'000});
  EXPECT_EQ(CostMicros(3, Fraction{1, 2}, std::chrono::hours(1)), 2);  // 1.5 rounds up
  EXPECT_EQ(CostMicros(1, Fraction{1, 3}, std::chrono::hours(1)), 0);  // 0.33 rounds down
}

TEST(MeteringTest, MigBasisNamesRoundTrip) {
  for (MigBasis b : {MigBasis::kCompute, MigBasis::kMemory, MigBasis::kLarger}) {
    EXPECT_EQ(ParseMigBasis(MigBasisName(b)), b);
  }
  EXPECT_FALSE(ParseMigBasis("slices").has_value());
}

}  // namespace
}  // namespace gpufed
