// Every routing decision against brute force (docs/routing.md): thousands of random workloads
// with random rules and objectives over dozens of random clusters, each decision checked at the
// moment it is made: no hard rule broken, and no offer the rules allow (a cluster, GPU model and
// capacity type) that would have held the workload has a lower key (price for `cost`, RTT for
// `latency`, the weighted sum for `balanced`). The rules are checked here from the clusters as
// the test built them, not with the router's own code.

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "federation/routing.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

const Timestamp kNow = Timestamp{} + std::chrono::hours(24 * 365 * 56);
constexpr double kInf = std::numeric_limits<double>::infinity();

struct World {
  std::vector<Cluster> clusters;  // as built: agent's info and the declaration apart
  Pool pool;
};

template <typename T>
const T& Pick(std::mt19937_64& rng, const std::vector<T>& from) {
  return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
}

bool Chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

World MakeWorld(std::mt19937_64& rng, int n_clusters) {
  const std::vector<std::string> models = {"H100-80GB", "A100-80GB", "L4"};
  const std::vector<std::string> jurisdictions = {"us", "eu", "de"};
  const std::vector<std::string> providers = {"onprem", "aws", "gcp", "edge"};
  const std::vector<std::string> regions = {"r1", "r2", "r3"};
  const std::vector<std::string> labels = {"gdpr", "hipaa", "sovereign"};
  World w;
  for (int c = 0; c < n_clusters; ++c) {
    Cluster cl;
    cl.info.name = absl::StrCat("c", c);
    cl.info.provider = Pick(rng, providers);
    cl.info.region = Pick(rng, regions);
    cl.info.jurisdiction = Pick(rng, jurisdictions);
    for (const std::string& l : labels) {
      if (Chance(rng, 0.4)) cl.info.compliance_labels.push_back(l);
    }
    ClusterDeclaration& d = cl.declared;
    d.cluster = cl.info.name;
    // The admin overrides some of what the agent says.
    if (Chance(rng, 0.3)) d.jurisdiction = Pick(rng, jurisdictions);
    if (Chance(rng, 0.2)) d.provider = Pick(rng, providers);
    if (Chance(rng, 0.3)) {
      d.compliance_labels.emplace();
      for (const std::string& l : labels) {
        if (Chance(rng, 0.5)) d.compliance_labels->push_back(l);
      }
    }
    d.default_capacity = Chance(rng, 0.2) ? CapacityType::kCommitted : CapacityType::kOnDemand;
    const int nodes = std::uniform_int_distribution<int>(1, 3)(rng);
    std::set<std::string> present;
    for (int n = 0; n < nodes; ++n) {
      NodeInfo node;
      node.name = absl::StrCat(cl.info.name, "-n", n);
      node.rack = "r0";
      const std::string& model = Pick(rng, models);
      present.insert(model);
      const int gpus = model == "L4" ? 4 : 8;
      if (Chance(rng, 0.3)) node.labels[std::string(kCapacityTypeLabel)] = "spot";
      if (Chance(rng, 0.1)) node.labels[std::string(kCapacityTypeLabel)] = "committed";
      for (int g = 0; g < gpus; ++g) {
        GpuInfo gpu;
        gpu.uuid = absl::StrCat("GPU-", node.name, "-", g);
        gpu.index = g;
        gpu.model = model;
        gpu.memory_mib = model == "L4" ? 23034 : 81559;
        gpu.mig_capable = model != "L4";
        gpu.nvlink_domain = model == "L4" ? "" : absl::StrCat(node.name, "-nvl");
        node.gpus.push_back(gpu);
      }
      cl.nodes.push_back(node);
    }
    // Prices in quarters, so that ties happen; some capacity has none; some lines are not in
    // force yet (and must not count).
    for (const std::string& model : present) {
      for (CapacityType t : {CapacityType::kOnDemand, CapacityType::kSpot}) {
        if (Chance(rng, 0.15)) continue;
        PriceEntry e;
        e.gpu_model = model;
        e.capacity = t;
        e.micros_per_hour = 250'000 * std::uniform_int_distribution<int64_t>(1, 24)(rng);
        e.effective_from = kNow - std::chrono::hours(24);
        d.prices.push_back(e);
        if (Chance(rng, 0.3)) {
          e.micros_per_hour = 250'000 * std::uniform_int_distribution<int64_t>(1, 24)(rng);
          e.effective_from = kNow + std::chrono::hours(1);
          d.prices.push_back(e);
        }
      }
      if (model != "L4" && Chance(rng, 0.5)) {
        PriceEntry e;
        e.gpu_model = model;
        e.mig_profile = "1g.10gb";
        e.micros_per_hour = 250'000 * std::uniform_int_distribution<int64_t>(1, 4)(rng);
        e.effective_from = kNow - std::chrono::hours(24);
        d.prices.push_back(e);
      }
    }
    for (const std::string& region : {"eu-west", "us-east"}) {
      if (Chance(rng, 0.85)) {
        d.rtt_micros[region] = 1000 * std::uniform_int_distribution<int64_t>(1, 30)(rng) * 5;
      }
    }
    w.pool.UpsertCluster(cl);
    w.clusters.push_back(std::move(cl));
  }
  return w;
}

WorkloadSpec RandomSpec(std::mt19937_64& rng) {
  WorkloadSpec s;
  s.tenant = "t";
  s.project = "p";
  s.name = "w";
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  if (kind < 6) {
    s.gpus_per_replica = Pick(rng, std::vector<uint32_t>{1, 2, 4, 8});
    s.replicas = Chance(rng, 0.2) ? 2 : 1;
  } else if (kind < 8) {
    s.gpu_milli = Pick(rng, std::vector<uint32_t>{250, 500});
  } else {
    s.mig_profile = "1g.10gb";
    s.gpu_models = {Pick(rng, std::vector<std::string>{"H100-80GB", "A100-80GB"})};
  }
  if (s.mig_profile.empty() && Chance(rng, 0.3)) s.gpu_models = {"H100-80GB", "L4"};
  PlacementConstraints& p = s.placement;
  if (Chance(rng, 0.3)) p.jurisdictions = {Pick(rng, std::vector<std::string>{"us", "eu", "de"})};
  if (Chance(rng, 0.2)) p.compliance_labels = {"gdpr"};
  if (Chance(rng, 0.1)) p.providers = {"aws", "onprem"};
  if (Chance(rng, 0.1)) p.regions = {"r1", "r2"};
  if (Chance(rng, 0.1)) p.denied_clusters = {"c0", "c1", "c2"};
  if (Chance(rng, 0.05)) p.clusters = {"c3", "c4", "c5", "c6"};
  if (Chance(rng, 0.2)) p.max_price_per_gpu_hour_micros = 3'000'000;
  p.spot_tolerated = Chance(rng, 0.5);
  p.objective = static_cast<Objective>(std::uniform_int_distribution<int>(0, 3)(rng));
  if (p.objective == Objective::kLatency || p.objective == Objective::kBalanced ||
      Chance(rng, 0.2)) {
    p.client_region = Pick(rng, std::vector<std::string>{"eu-west", "us-east"});
  }
  if (!p.client_region.empty() && Chance(rng, 0.3)) p.max_rtt_micros = 60'000;
  s.estimated_duration_ms = 3'600'000 * std::uniform_int_distribution<int64_t>(1, 5)(rng);
  return s;
}

bool Has(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

// The cluster-level rules, from the cluster as built: declared attributes over the agent's.
bool ClusterAllowed(const Cluster& c, const PlacementConstraints& p) {
  const ClusterDeclaration& d = c.declared;
  const std::string& jurisdiction = d.jurisdiction.empty() ? c.info.jurisdiction : d.jurisdiction;
  const std::string& provider = d.provider.empty() ? c.info.provider : d.provider;
  const std::string& region = d.region.empty() ? c.info.region : d.region;
  const std::vector<std::string>& labels =
      d.compliance_labels ? *d.compliance_labels : c.info.compliance_labels;
  if (!p.clusters.empty() && !Has(p.clusters, c.info.name)) return false;
  if (Has(p.denied_clusters, c.info.name)) return false;
  if (!p.jurisdictions.empty() && !Has(p.jurisdictions, jurisdiction)) return false;
  for (const std::string& l : p.compliance_labels) {
    if (!Has(labels, l)) return false;
  }
  if (!p.providers.empty() && !Has(p.providers, provider)) return false;
  if (!p.regions.empty() && !Has(p.regions, region)) return false;
  if (p.max_rtt_micros > 0) {
    auto it = d.rtt_micros.find(p.client_region);
    if (it == d.rtt_micros.end() || it->second > p.max_rtt_micros) return false;
  }
  return true;
}

CapacityType CapacityOf(const Cluster& c, const std::string& node) {
  for (const NodeInfo& n : c.nodes) {
    if (n.name != node) continue;
    auto it = n.labels.find(std::string(kCapacityTypeLabel));
    if (it != n.labels.end()) return *ParseCapacityType(it->second);
  }
  return c.declared.default_capacity;
}

// The GPU-level rules for (model, capacity) of cluster `c`.
bool GpuAllowed(const Cluster& c, const WorkloadSpec& s, const std::string& model, CapacityType t) {
  if (t == CapacityType::kSpot && !s.placement.spot_tolerated) return false;
  if (!s.gpu_models.empty() && !Has(s.gpu_models, model)) return false;
  if (s.placement.max_price_per_gpu_hour_micros > 0 && t != CapacityType::kCommitted) {
    std::optional<int64_t> price = PricePerGpuHour(c.declared, s, model, t, kNow);
    if (!price || *price > s.placement.max_price_per_gpu_hour_micros) return false;
  }
  return true;
}

double KeyOf(const Cluster& c, const WorkloadSpec& s, const std::string& model, CapacityType t) {
  const PlacementConstraints& p = s.placement;
  std::optional<int64_t> rtt;
  if (auto it = c.declared.rtt_micros.find(p.client_region);
      !p.client_region.empty() && it != c.declared.rtt_micros.end()) {
    rtt = it->second;
  }
  switch (p.objective) {
    case Objective::kPack:
      return 0;
    case Objective::kCost: {
      std::optional<int64_t> price = ReplicaPricePerHour(c.declared, s, model, t, kNow);
      return price ? static_cast<double>(*price) : kInf;
    }
    case Objective::kLatency:
      return rtt ? static_cast<double>(*rtt) : kInf;
    case Objective::kBalanced: {
      std::optional<int64_t> price = PricePerGpuHour(c.declared, s, model, t, kNow);
      const RoutingWeights w;
      return price && rtt ? w.cost * static_cast<double>(*price) / 1e6 +
                                w.latency * static_cast<double>(*rtt) / 1000.0
                          : kInf;
    }
  }
  return kInf;
}

size_t PoolIndex(const Pool& pool, const std::string& name) {
  for (size_t i = 0; i < pool.clusters().size(); ++i) {
    if (pool.clusters()[i].info.name == name) return i;
  }
  return pool.clusters().size();
}

TEST(RoutingPropertyTest, EveryDecisionKeepsTheRulesAndNoAllowedOfferWasBetter) {
  std::mt19937_64 rng(20261126);
  World w = MakeWorld(rng, 30);
  PlacementOptions options;
  options.random_ties = false;
  auto live = PlacementEngine::Create(options);
  ASSERT_OK(live.status());
  auto brute = PlacementEngine::Create(options);
  ASSERT_OK(brute.status());
  const Router router;
  std::vector<WorkloadId> held;
  int placed = 0;
  int ruled_out = 0;
  int better_busy = 0;  // decisions where a better allowed offer existed but was full
  for (WorkloadId id = 1; id <= 3000; ++id) {
    const WorkloadSpec spec = RandomSpec(rng);
    PlacementDecision d = router.Place(**live, w.pool, spec, id, {}, kNow);

    // Brute force, at this moment: every allowed (cluster, model, capacity) alone, and the allowed
    // ones of a cluster with one key together (a gang may span them) when no other capacity of
    // that cluster hides among their models and capacity types.
    double best = kInf;
    bool any_fits = false;
    std::set<double> allowed_keys;
    for (const Cluster& cluster : w.clusters) {
      if (!ClusterAllowed(cluster, spec.placement)) continue;
      std::set<std::pair<std::string, CapacityType>> present;
      for (const NodeInfo& n : cluster.nodes) {
        present.emplace(n.gpus.front().model, CapacityOf(cluster, n.name));
      }
      std::map<double, std::set<std::pair<std::string, CapacityType>>> by_key;
      for (const auto& [model, t] : present) {
        if (GpuAllowed(cluster, spec, model, t))
          by_key[KeyOf(cluster, spec, model, t)].emplace(model, t);
      }
      for (const auto& [key, pairs] : by_key) {
        allowed_keys.insert(key);
        std::vector<std::set<std::pair<std::string, CapacityType>>> tries;
        for (const auto& pair : pairs) tries.push_back({pair});
        std::set<std::string> models;
        std::set<CapacityType> types;
        for (const auto& [m, t] : pairs) {
          models.insert(m);
          types.insert(t);
        }
        bool exact = pairs.size() > 1;
        for (const std::string& m : models) {
          for (CapacityType t : types) {
            if (present.contains({m, t}) && !pairs.contains({m, t})) exact = false;
          }
        }
        if (exact) tries.push_back(pairs);
        for (const auto& group : tries) {
          PlacementScope scope;
          scope.clusters.assign(w.pool.clusters().size(), false);
          scope.clusters[PoolIndex(w.pool, cluster.info.name)] = true;
          scope.models.assign(w.pool.model_count(), false);
          scope.capacity = 0;
          for (const auto& [m, t] : group) {
            scope.models[w.pool.FindModelId(m)] = true;
            scope.capacity |= static_cast<uint8_t>(1U << static_cast<int>(t));
          }
          scope.explain = false;
          if ((*brute)->Place(w.pool, spec, id, {}, &scope).assignment) {
            any_fits = true;
            best = std::min(best, key);
          }
        }
      }
    }

    if (!d.assignment) {
      EXPECT_FALSE(any_fits) << "workload " << id
                             << " held nowhere, but an allowed offer fits: " << d.reason;
      if (allowed_keys.empty()) {
        ++ruled_out;
        EXPECT_EQ(d.reason.code, ReasonCode::kNoClusterAllowed) << d.reason;
      } else {
        EXPECT_NE(d.reason.code, ReasonCode::kNoClusterAllowed) << d.reason;
      }
      continue;
    }
    const Assignment& a = *d.assignment;
    const auto cluster = std::find_if(w.clusters.begin(), w.clusters.end(),
                                      [&](const Cluster& c) { return c.info.name == a.cluster; });
    ASSERT_NE(cluster, w.clusters.end());
    EXPECT_TRUE(ClusterAllowed(*cluster, spec.placement))
        << "workload " << id << " broke a cluster rule on " << a.cluster;
    std::set<double> keys;
    for (const ReplicaAssignment& r : a.replicas) {
      const NodeInfo* node = nullptr;
      for (const NodeInfo& n : cluster->nodes) {
        if (n.name == r.node) node = &n;
      }
      ASSERT_NE(node, nullptr);
      const std::string& model = node->gpus.front().model;
      const CapacityType t = CapacityOf(*cluster, r.node);
      EXPECT_TRUE(GpuAllowed(*cluster, spec, model, t))
          << "workload " << id << " broke a GPU rule on " << a.cluster << "/" << r.node << " ("
          << CapacityTypeName(t) << ")";
      keys.insert(KeyOf(*cluster, spec, model, t));
    }
    ASSERT_EQ(keys.size(), 1u) << "the replicas of workload " << id << " sit at different keys";
    EXPECT_LE(*keys.begin(), best)
        << "workload " << id << " objective " << ObjectiveName(spec.placement.objective) << " on "
        << a.cluster << ": a better allowed offer held it";
    better_busy += *allowed_keys.begin() < *keys.begin() ? 1 : 0;
    ASSERT_OK(w.pool.Allocate(id, a, HostDemand{}));
    held.push_back(id);
    ++placed;
    // Work ends now and then, keeping the pool busy but not full.
    while (held.size() > 40 || (!held.empty() && Chance(rng, 0.3))) {
      const size_t i = std::uniform_int_distribution<size_t>(0, held.size() - 1)(rng);
      w.pool.Release(held[i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  // The run must exercise every branch: placements, rules that leave nothing, and decisions
  // where the best allowed offer was busy.
  EXPECT_GT(placed, 1000);
  EXPECT_GT(ruled_out, 20);
  EXPECT_GT(better_busy, 50);
}

}  // namespace
}  // namespace gpufed
