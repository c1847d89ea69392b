// Conservation (docs/chargeback.md#cost-allocation): over random histories -- clusters of random
// GPUs and capacity types, price books that change mid-window, whole GPUs, shares and MIG
// instances held by random tenants -- the tenants' charges, the idle and the unallocated
// capacity add up to the cluster's capacity cost, and the idle capacity is what an independent
// count of the unheld GPU-time says it is.

#include "federation/cost_allocation.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/routing.h"
#include "gtest/gtest.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::minutes;

const Timestamp kStart = Timestamp{} + hours(24 * 365 * 56);
const char* const kModels[] = {"H100-80GB", "A100-80GB", "L4"};
const char* const kTenants[] = {"acme", "globex", "initech"};

struct History {
  Cluster cluster;
  std::vector<UsageRecord> records;
  Timestamp from{};
  Timestamp to{};
};

PriceEntry Line(const std::string& model, CapacityType capacity, int64_t micros, Timestamp from,
                const std::string& profile = "") {
  PriceEntry e;
  e.gpu_model = model;
  e.mig_profile = profile;
  e.capacity = capacity;
  e.micros_per_hour = micros;
  e.effective_from = from;
  return e;
}

History RandomHistory(std::mt19937_64& rng, MigBasis basis) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  History h;
  h.from = kStart + hours(uniform(0, 48));
  h.to = h.from + hours(uniform(1, 72));
  Cluster& c = h.cluster;
  c.info.name = "c";
  c.declared.cluster = "c";
  const int nodes = uniform(1, 3);
  for (int n = 0; n < nodes; ++n) {
    NodeInfo node;
    node.name = absl::StrCat("n", n);
    if (uniform(0, 2) == 0) node.labels[std::string(kCapacityTypeLabel)] = "spot";
    const std::string model = kModels[uniform(0, 2)];
    const int gpus = uniform(1, 8);
    for (int g = 0; g < gpus; ++g) {
      GpuInfo gpu;
      gpu.uuid = absl::StrCat("GPU-", n, "-", g);
      gpu.index = g;
      gpu.model = model;
      node.gpus.push_back(gpu);
    }
    c.nodes.push_back(node);
  }
  // Prices: each (model, capacity) priced from before the window, some changing inside it; L4 on
  // demand left unpriced; a MIG profile priced by its own line now and then.
  for (const char* model : kModels) {
    for (CapacityType cap : {CapacityType::kOnDemand, CapacityType::kSpot}) {
      if (std::string(model) == "L4" && cap == CapacityType::kOnDemand) continue;
      c.declared.prices.push_back(Line(model, cap, uniform(100'000, 9'000'000), kStart));
      for (int k = uniform(0, 2); k > 0; --k) {
        const Timestamp at = h.from + minutes(uniform(1, 72 * 60));
        c.declared.prices.push_back(Line(model, cap, uniform(100'000, 9'000'000), at));
      }
      if (uniform(0, 3) == 0) {
        c.declared.prices.push_back(
            Line(model, cap, uniform(10'000, 2'000'000), kStart, "1g.10gb"));
      }
    }
  }
  // Holds: each GPU's window cut into intervals; each interval idle, one whole-GPU run, shares
  // adding up to at most a GPU, or (MIG models) up to seven 1g.10gb instances.
  const MeteringPolicy policy{basis};
  WorkloadId next = 1;
  for (const NodeInfo& node : c.nodes) {
    for (const GpuInfo& gpu : node.gpus) {
      Timestamp t = h.from;
      while (t < h.to) {
        const Timestamp end = std::min(h.to, t + minutes(uniform(1, 20 * 60)));
        const int kind = uniform(0, 3);
        std::vector<ReplicaAssignment> holds;
        ReplicaAssignment base;
        base.node = node.name;
        base.gpu_uuids = {gpu.uuid};
        base.gpu_indices = {gpu.index};
        if (kind == 1) {
          holds.push_back(base);
        } else if (kind == 2) {
          int left = 1000;
          for (int s = uniform(1, 4); s > 0 && left > 0; --s) {
            ReplicaAssignment share = base;
            share.gpu_milli = static_cast<uint32_t>(uniform(1, left));
            left -= static_cast<int>(share.gpu_milli);
            holds.push_back(share);
          }
        } else if (kind == 3 && FindMigGeometry(gpu.model) != nullptr) {
          for (int s = uniform(1, 7), slot = 0; s > 0; --s, ++slot) {
            ReplicaAssignment mig = base;
            mig.mig_profile = "1g.10gb";
            mig.mig_start = slot;
            holds.push_back(mig);
          }
        }
        for (const ReplicaAssignment& hold : holds) {
          // Each hold is a run of its own, by a random tenant, over part of the interval.
          Workload run;
          run.id = next++;
          run.attempts = 1;
          run.spec.tenant = kTenants[uniform(0, 2)];
          run.spec.project = "p";
          run.assignment.cluster = "c";
          run.assignment.replicas = {hold};
          const Timestamp a = t + minutes(uniform(0, 30));
          const Timestamp b = end - minutes(uniform(0, 30));
          for (UsageRecord& r : MeterSpan(run, c, a, b, policy)) h.records.push_back(std::move(r));
        }
        t = end;
      }
    }
  }
  return h;
}

// The cost of the GPU-time nobody held, counted independently: per GPU and per span between
// price changes, the unheld microseconds times the GPU's line, in floating point.
double IndependentIdle(const History& h) {
  double idle = 0;
  for (const NodeInfo& node : h.cluster.nodes) {
    CapacityType cap = CapacityType::kOnDemand;
    if (node.labels.contains(std::string(kCapacityTypeLabel))) cap = CapacityType::kSpot;
    for (const GpuInfo& gpu : node.gpus) {
      std::vector<Timestamp> cuts = {h.from, h.to};
      for (const PriceEntry& e : h.cluster.declared.prices) {
        if (e.gpu_model == gpu.model && e.capacity == cap && e.mig_profile.empty() &&
            e.effective_from > h.from && e.effective_from < h.to) {
          cuts.push_back(e.effective_from);
        }
      }
      std::sort(cuts.begin(), cuts.end());
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        const std::optional<int64_t> price =
            PriceAt(h.cluster.declared, gpu.model, "", cap, cuts[i]);
        if (!price) continue;
        double unheld = std::chrono::duration<double, std::micro>(cuts[i + 1] - cuts[i]).count();
        for (const UsageRecord& r : h.records) {
          if (r.gpu_uuid != gpu.uuid) continue;
          const Timestamp a = std::max(r.from, cuts[i]);
          const Timestamp b = std::min(r.to, cuts[i + 1]);
          if (b <= a) continue;
          unheld -= std::chrono::duration<double, std::micro>(b - a).count() *
                    static_cast<double>(r.fraction.num) / static_cast<double>(r.fraction.den);
        }
        idle += static_cast<double>(*price) * unheld / 3.6e9;
      }
    }
  }
  return idle;
}

int64_t Sum(const std::map<std::string, int64_t>& m) {
  int64_t s = 0;
  for (const auto& [k, v] : m) s += v;
  return s;
}

TEST(CostAllocationTest, ChargesIdleAndUnallocatedAddUpToTheClustersCostOverRandomHistories) {
  std::mt19937_64 rng(20261127);
  for (int i = 0; i < 300; ++i) {
    const auto basis = static_cast<MigBasis>(i % 3);
    const History h = RandomHistory(rng, basis);
    SCOPED_TRACE(absl::StrCat("history ", i, ": ", h.records.size(), " records"));
    for (IdlePolicy policy : {IdlePolicy::kSeparate, IdlePolicy::kSpread}) {
      const CostAllocation a = AllocateCost(h.cluster, h.records, h.from, h.to, policy);
      EXPECT_EQ(a.overheld_gpu_microseconds, 0);
      // Exactly: every micro-unit of the capacity is somebody's charge, idle or unallocated.
      EXPECT_EQ(Sum(a.tenant_micros) + a.idle_micros + a.unallocated_micros, a.total_micros);
      EXPECT_EQ(
          Sum(a.idle_share_micros) + a.idle_micros + a.unallocated_micros,
          AllocateCost(h.cluster, h.records, h.from, h.to, IdlePolicy::kSeparate).idle_micros);
      EXPECT_GE(a.idle_micros, 0);
      EXPECT_GE(a.unallocated_micros, 0);
      if (policy == IdlePolicy::kSeparate) {
        EXPECT_EQ(a.unallocated_micros, 0);
        // Within 0.01 % of the cost, or half a micro-unit of rounding per record and per hour of
        // each GPU, whichever is larger.
        const double rounding =
            0.5 * static_cast<double>(h.records.size()) +
            0.5 * std::chrono::duration<double>(h.to - h.from).count() / 3600 * 24;
        EXPECT_NEAR(static_cast<double>(a.idle_micros), IndependentIdle(h),
                    std::max(static_cast<double>(a.total_micros) * 1e-4, rounding + 1));
      } else {
        EXPECT_EQ(a.idle_micros, 0);
      }
    }
  }
}

TEST(CostAllocationTest, SpreadIdleFollowsEachTenantsChargesPerResourceType) {
  // Two H100s on demand at 3,600,000 an hour for one hour: 7,200,000. acme holds one GPU for
  // the hour (3,600,000), globex half of the other for half an hour (900,000): 2,700,000 idle.
  Cluster c = testing::MakeCluster("c", 1, 2, "H100-80GB");
  c.declared.cluster = "c";
  c.declared.prices = {Line("H100-80GB", CapacityType::kOnDemand, 3'600'000, kStart)};
  auto run = [&](const std::string& tenant, int gpu, uint32_t milli, Timestamp a, Timestamp b) {
    Workload w;
    w.id = gpu + 1;
    w.attempts = 1;
    w.spec.tenant = tenant;
    w.assignment.cluster = "c";
    ReplicaAssignment r = testing::WholeGpus("c-n0", {static_cast<uint32_t>(gpu)});
    r.gpu_milli = milli;
    w.assignment.replicas = {r};
    return MeterSpan(w, c, a, b, MeteringPolicy{});
  };
  std::vector<UsageRecord> records = run("acme", 0, 0, kStart, kStart + hours(1));
  for (UsageRecord& r : run("globex", 1, 500, kStart, kStart + minutes(30))) records.push_back(r);

  const CostAllocation separate =
      AllocateCost(c, records, kStart, kStart + hours(1), IdlePolicy::kSeparate);
  EXPECT_EQ(separate.total_micros, 7'200'000);
  EXPECT_EQ(separate.tenant_micros.at("acme"), 3'600'000);
  EXPECT_EQ(separate.tenant_micros.at("globex"), 900'000);
  EXPECT_EQ(separate.idle_micros, 2'700'000);

  // Spread: acme 4/5 of the charges, globex 1/5.
  const CostAllocation spread =
      AllocateCost(c, records, kStart, kStart + hours(1), IdlePolicy::kSpread);
  EXPECT_EQ(spread.tenant_micros.at("acme"), 3'600'000 + 2'160'000);
  EXPECT_EQ(spread.tenant_micros.at("globex"), 900'000 + 540'000);
  EXPECT_EQ(spread.idle_micros, 0);
  EXPECT_EQ(spread.unallocated_micros, 0);

  // Nobody used the cluster: under spread the whole cost is unallocated.
  const CostAllocation empty = AllocateCost(c, {}, kStart, kStart + hours(1), IdlePolicy::kSpread);
  EXPECT_EQ(empty.unallocated_micros, 7'200'000);
  EXPECT_TRUE(empty.tenant_micros.empty());
}

TEST(CostAllocationTest, HeldBeyondWhatTheClusterListsNowCountsAsCapacityAndPremiumsStandApart) {
  // One H100 on demand listed now (3,600,000 for the hour); acme's records held two GPUs' worth
  // at the GPU line (a GPU since removed), globex a MIG instance whose profile line billed more.
  const std::map<ResourceType, int64_t> capacity = {
      {{"H100-80GB", CapacityType::kOnDemand}, 3'600'000}};
  const std::vector<HeldCost> held = {
      {"c", "acme", "H100-80GB", CapacityType::kOnDemand, 7'200'000, 7'200'000},
      {"c", "globex", "L4", CapacityType::kSpot, 100'000, 150'000}};
  const CostAllocation a = AllocateCost(capacity, held, IdlePolicy::kSeparate);
  EXPECT_EQ(a.total_micros, 7'300'000);
  EXPECT_EQ(a.idle_micros, 0);
  EXPECT_EQ(a.tenant_micros.at("acme"), 7'200'000);
  EXPECT_EQ(a.tenant_micros.at("globex"), 100'000);
  EXPECT_EQ(a.profile_premium_micros.at("globex"), 50'000);
  EXPECT_FALSE(a.profile_premium_micros.contains("acme"));
  EXPECT_EQ(Sum(a.tenant_micros) + a.idle_micros + a.unallocated_micros, a.total_micros);
}

TEST(CostAllocationTest, CapacityCostFollowsThePriceLineInForceAndCountsEachGpu) {
  // Two H100s: 3,600,000 an hour, then 7,200,000 from half past: 2 x (1.8 + 3.6) million.
  Cluster c = testing::MakeCluster("c", 1, 2, "H100-80GB");
  c.declared.cluster = "c";
  c.declared.prices = {Line("H100-80GB", CapacityType::kOnDemand, 3'600'000, kStart),
                       Line("H100-80GB", CapacityType::kOnDemand, 7'200'000, kStart + minutes(30)),
                       Line("H100-80GB", CapacityType::kOnDemand, 1, kStart, "1g.10gb")};
  const std::map<ResourceType, int64_t> cost = CapacityCost(c, kStart, kStart + hours(1));
  ASSERT_EQ(cost.size(), 1u);
  EXPECT_EQ(cost.at({"H100-80GB", CapacityType::kOnDemand}), 10'800'000);
  EXPECT_TRUE(CapacityCost(c, kStart, kStart).empty());
  // Before any line is in force the capacity has no price.
  EXPECT_TRUE(CapacityCost(c, kStart - hours(2), kStart - hours(1)).empty());
}

TEST(CostAllocationTest, AMeteringThatCountedAGpuTwiceShowsAsOverheld) {
  Cluster c = testing::MakeCluster("c", 1, 1, "H100-80GB");
  c.declared.cluster = "c";
  c.declared.prices = {Line("H100-80GB", CapacityType::kOnDemand, 3'600'000, kStart)};
  Workload w;
  w.id = 1;
  w.attempts = 1;
  w.spec.tenant = "acme";
  w.assignment.cluster = "c";
  w.assignment.replicas = {testing::WholeGpus("c-n0", {0})};
  std::vector<UsageRecord> records = MeterSpan(w, c, kStart, kStart + hours(1), MeteringPolicy{});
  w.id = 2;  // another run on the same whole GPU at the same time
  for (UsageRecord& r : MeterSpan(w, c, kStart, kStart + hours(1), MeteringPolicy{})) {
    records.push_back(r);
  }
  const CostAllocation a =
      AllocateCost(c, records, kStart, kStart + hours(1), IdlePolicy::kSeparate);
  EXPECT_EQ(a.overheld_gpu_microseconds, int64_t{3'600'000'000});
}

}  // namespace
}  // namespace gpufed
