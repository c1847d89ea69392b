#include "federation/cost_allocation.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>
#include <utility>

#include "absl/numeric/int128.h"
#include "federation/routing.h"

namespace gpufed {
namespace {

using std::chrono::microseconds;

int64_t Micros(Timestamp from, Timestamp to) {
  return std::chrono::duration_cast<microseconds>(to - from).count();
}

// `total` split over `weights` in proportion, exactly: floors, then the remainder one unit at a
// time to the largest fractional parts (ties: the first key).
std::map<std::string, int64_t> Apportion(int64_t total,
                                         const std::map<std::string, int64_t>& weights) {
  std::map<std::string, int64_t> out;
  absl::int128 sum = 0;
  for (const auto& [key, w] : weights) sum += w;
  if (sum <= 0) return out;
  int64_t given = 0;
  std::vector<std::pair<absl::int128, std::string>> remainders;
  for (const auto& [key, w] : weights) {
    const absl::int128 n = absl::int128(total) * w;
    const auto share = static_cast<int64_t>(n / sum);
    out[key] = share;
    given += share;
    remainders.emplace_back(n % sum, key);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < total && i < remainders.size(); ++i, ++given) {
    ++out[remainders[i].second];
  }
  return out;
}

// GPU-time held beyond each GPU's capacity, per GPU and hour (records never cross an hour).
int64_t OverheldGpuMicroseconds(const std::vector<UsageRecord>& records, Timestamp from,
                                Timestamp to) {
  std::map<std::pair<std::string, Timestamp>, absl::int128> held;  // by (GPU, hour)
  for (const UsageRecord& r : records) {
    held[{r.gpu_uuid, std::chrono::floor<std::chrono::hours>(r.from)}] +=
        absl::int128(Micros(r.from, r.to)) * r.fraction.num / r.fraction.den;
  }
  int64_t over = 0;
  for (const auto& [key, us] : held) {
    const Timestamp start = std::max(key.second, from);
    const Timestamp end = std::min(key.second + std::chrono::hours(1), to);
    const absl::int128 span = Micros(start, end);
    if (us > span) over += static_cast<int64_t>(us - span);
  }
  return over;
}

}  // namespace

absl::string_view IdlePolicyName(IdlePolicy policy) {
  return policy == IdlePolicy::kSpread ? "spread" : "separate";
}

std::optional<IdlePolicy> ParseIdlePolicy(absl::string_view name) {
  if (name == "separate") return IdlePolicy::kSeparate;
  if (name == "spread") return IdlePolicy::kSpread;
  return std::nullopt;
}

std::vector<HeldCost> SumHeldCosts(const std::vector<UsageRecord>& records) {
  std::map<std::tuple<std::string, std::string, std::string, CapacityType>, HeldCost> sums;
  for (const UsageRecord& r : records) {
    HeldCost& h = sums[{r.cluster, r.tenant, r.gpu_model, r.capacity}];
    h.cluster = r.cluster;
    h.tenant = r.tenant;
    h.gpu_model = r.gpu_model;
    h.capacity = r.capacity;
    h.gpu_line_micros += r.gpu_line_cost_micros;
    h.billed_micros += r.cost_micros;
  }
  std::vector<HeldCost> out;
  out.reserve(sums.size());
  for (auto& [key, h] : sums) out.push_back(std::move(h));
  return out;
}

std::map<ResourceType, int64_t> CapacityCost(const Cluster& cluster, Timestamp from, Timestamp to) {
  std::map<ResourceType, int64_t> gpus;
  for (const NodeInfo& node : cluster.nodes) {
    const CapacityType capacity = NodeCapacityType(cluster, &node);
    for (const GpuInfo& g : node.gpus) ++gpus[{g.model, capacity}];
  }
  std::map<ResourceType, int64_t> out;
  if (to <= from) return out;
  for (const auto& [type, count] : gpus) {
    // The GPU line may change inside the window: one span per line in force.
    std::set<Timestamp> cuts = {from, to};
    for (const PriceEntry& e : cluster.declared.prices) {
      if (e.gpu_model == type.first && e.mig_profile.empty() && e.capacity == type.second &&
          e.effective_from > from && e.effective_from < to) {
        cuts.insert(e.effective_from);
      }
    }
    int64_t cost = 0;
    for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
      if (std::optional<int64_t> price =
              PriceAt(cluster.declared, type.first, "", type.second, *it)) {
        cost += CostMicros(*price, Fraction{count, 1}, microseconds(Micros(*it, *std::next(it))));
      }
    }
    if (cost > 0) out[type] = cost;
  }
  return out;
}

CostAllocation AllocateCost(const std::map<ResourceType, int64_t>& capacity,
                            const std::vector<HeldCost>& held, IdlePolicy policy) {
  CostAllocation out;
  std::map<ResourceType, std::map<std::string, int64_t>> charges_by_type;
  std::map<ResourceType, int64_t> held_by_type;
  for (const HeldCost& h : held) {
    out.tenant_micros[h.tenant] += h.gpu_line_micros;
    if (h.billed_micros != h.gpu_line_micros) {
      out.profile_premium_micros[h.tenant] += h.billed_micros - h.gpu_line_micros;
    }
    const ResourceType type{h.gpu_model, h.capacity};
    charges_by_type[type][h.tenant] += h.gpu_line_micros;
    held_by_type[type] += h.gpu_line_micros;
  }
  std::map<ResourceType, int64_t> idle_by_type;
  for (const auto& [type, cost] : capacity) {
    out.total_micros += cost;
    idle_by_type[type] = cost;
  }
  for (const auto& [type, h] : held_by_type) {
    int64_t& idle = idle_by_type[type];
    if (h > idle) {
      // Held beyond what the cluster lists of the type now: that capacity was there.
      out.total_micros += h - idle;
      idle = 0;
    } else {
      idle -= h;
    }
  }
  for (const auto& [type, idle] : idle_by_type) {
    if (idle == 0) continue;
    if (policy == IdlePolicy::kSeparate) {
      out.idle_micros += idle;
      continue;
    }
    std::map<std::string, int64_t> shares;
    if (auto charged = charges_by_type.find(type); charged != charges_by_type.end()) {
      shares = Apportion(idle, charged->second);
    }
    if (shares.empty()) {
      out.unallocated_micros += idle;
      continue;
    }
    for (const auto& [tenant, share] : shares) {
      out.tenant_micros[tenant] += share;
      out.idle_share_micros[tenant] += share;
    }
  }
  return out;
}

CostAllocation AllocateCost(const Cluster& cluster, const std::vector<UsageRecord>& records,
                            Timestamp from, Timestamp to, IdlePolicy policy) {
  CostAllocation out = AllocateCost(CapacityCost(cluster, from, to), SumHeldCosts(records), policy);
  out.overheld_gpu_microseconds = OverheldGpuMicroseconds(records, from, to);
  return out;
}

}  // namespace gpufed
