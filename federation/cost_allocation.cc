#include "federation/cost_allocation.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include "absl/numeric/int128.h"
#include "federation/routing.h"

namespace gpufed {
namespace {

using std::chrono::microseconds;

// One span of one GPU at one price: a record of the pseudo-run that holds every GPU whole.
struct Piece {
  Timestamp to{};
  std::pair<std::string, CapacityType> type;  // (GPU model, capacity type)
  int64_t cost = 0;                           // the whole GPU over the span
  int64_t span_us = 0;
  int64_t held_cost = 0;  // what records held of it, at the GPU's line
  int64_t held_us = 0;    // GPU-microseconds they held
};

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

}  // namespace

CostAllocation AllocateCost(const Cluster& cluster, const std::vector<UsageRecord>& records,
                            Timestamp from, Timestamp to, IdlePolicy policy) {
  CostAllocation out;
  // The capacity: every GPU whole over the window, cut as records are (hours, price changes).
  Workload all;
  all.assignment.cluster = cluster.info.name;
  for (const NodeInfo& node : cluster.nodes) {
    ReplicaAssignment r;
    r.node = node.name;
    for (const GpuInfo& g : node.gpus) r.gpu_uuids.push_back(g.uuid);
    all.assignment.replicas.push_back(std::move(r));
  }
  std::map<std::pair<std::string, Timestamp>, Piece> pieces;  // by (GPU, from)
  for (const UsageRecord& c : MeterSpan(all, cluster, from, to, MeteringPolicy{})) {
    Piece p;
    p.to = c.to;
    p.type = {c.gpu_model, c.capacity};
    p.cost = c.cost_micros;
    p.span_us = Micros(c.from, c.to);
    out.total_micros += p.cost;
    pieces.emplace(std::make_pair(c.gpu_uuid, c.from), p);
  }

  std::map<std::pair<std::string, CapacityType>, std::map<std::string, int64_t>> charges_by_type;
  for (const UsageRecord& r : records) {
    const int64_t us = Micros(r.from, r.to);
    const std::optional<int64_t> gpu_price =
        PriceAt(cluster.declared, r.gpu_model, "", r.capacity, r.from);
    const int64_t at_gpu = gpu_price ? CostMicros(*gpu_price, r.fraction, microseconds(us)) : 0;
    out.tenant_micros[r.tenant] += at_gpu;
    charges_by_type[{r.gpu_model, r.capacity}][r.tenant] += at_gpu;
    if (r.profile_priced) out.profile_premium_micros[r.tenant] += r.cost_micros - at_gpu;
    // The capacity span the record lies in (records never cross one).
    auto it = pieces.upper_bound({r.gpu_uuid, r.from});
    if (it != pieces.begin()) --it;
    if (it == pieces.end() || it->first.first != r.gpu_uuid || r.from < it->first.second ||
        r.to > it->second.to) {
      // A GPU the cluster no longer lists: what was held of it was there, at its price.
      out.total_micros += at_gpu;
      continue;
    }
    it->second.held_cost += at_gpu;
    it->second.held_us += static_cast<int64_t>(absl::int128(us) * r.fraction.num / r.fraction.den);
  }

  std::map<std::pair<std::string, CapacityType>, int64_t> idle_by_type;
  for (auto& [key, p] : pieces) {
    if (p.held_us > p.span_us) out.overheld_gpu_microseconds += p.held_us - p.span_us;
    idle_by_type[p.type] += p.cost - p.held_cost;
  }
  for (const auto& [type, idle] : idle_by_type) {
    if (policy == IdlePolicy::kSeparate) {
      out.idle_micros += idle;
      continue;
    }
    auto charged = charges_by_type.find(type);
    std::map<std::string, int64_t> shares;
    if (charged != charges_by_type.end()) shares = Apportion(idle, charged->second);
    if (shares.empty()) {
      out.unallocated_micros += idle;
      continue;
    }
    for (const auto& [tenant, share] : shares) out.tenant_micros[tenant] += share;
  }
  return out;
}

}  // namespace gpufed
