#include "federation/metering.h"

#include <algorithm>
#include <set>

#include "absl/numeric/int128.h"
#include "federation/pool.h"
#include "federation/routing.h"
#include "federation/store.h"

namespace gpufed {

absl::string_view MigBasisName(MigBasis basis) {
  switch (basis) {
    case MigBasis::kCompute:
      return "compute";
    case MigBasis::kMemory:
      return "memory";
    case MigBasis::kLarger:
      return "larger";
  }
  return "compute";
}

std::optional<MigBasis> ParseMigBasis(absl::string_view name) {
  for (MigBasis b : {MigBasis::kCompute, MigBasis::kMemory, MigBasis::kLarger}) {
    if (MigBasisName(b) == name) return b;
  }
  return std::nullopt;
}

Fraction MigFraction(const MigGeometry& geometry, const MigProfile& profile, MigBasis basis) {
  const Fraction compute{profile.compute_slices, geometry.compute_slices};
  const Fraction memory{profile.memory_slices, geometry.memory_slots};
  switch (basis) {
    case MigBasis::kCompute:
      return compute;
    case MigBasis::kMemory:
      return memory;
    case MigBasis::kLarger:
      // a/b >= c/d  <=>  a*d >= c*b (denominators are positive).
      return compute.num * memory.den >= memory.num * compute.den ? compute : memory;
  }
  return compute;
}

double UsageRecord::GpuSeconds() const {
  const double seconds = std::chrono::duration<double>(to - from).count();
  return seconds * static_cast<double>(fraction.num) / static_cast<double>(fraction.den);
}

int64_t CostMicros(int64_t price_micros_per_hour, Fraction fraction,
                   std::chrono::microseconds duration) {
  constexpr int64_t kMicrosPerHour = 3'600'000'000;
  if (fraction.den <= 0) return 0;
  const absl::int128 n =
      absl::int128(price_micros_per_hour) * fraction.num * absl::int128(duration.count());
  const absl::int128 d = absl::int128(fraction.den) * kMicrosPerHour;
  // Round half away from zero.
  const absl::int128 half = d / 2;
  const absl::int128 q = n >= 0 ? (n + half) / d : -((-n + half) / d);
  return static_cast<int64_t>(q);
}

namespace {

// The geometry for a MIG instance of `profile` on `model`; for a model the catalogue does not
// know (a GPU the cluster no longer lists), the first catalogue geometry with that profile.
std::pair<const MigGeometry*, const MigProfile*> FindProfile(absl::string_view model,
                                                             absl::string_view profile) {
  if (const MigGeometry* geo = FindMigGeometry(model); geo != nullptr) {
    return {geo, geo->Find(profile)};
  }
  for (absl::string_view m : MigModels()) {
    const MigGeometry* geo = FindMigGeometry(m);
    if (const MigProfile* p = geo->Find(profile); p != nullptr) return {geo, p};
  }
  return {nullptr, nullptr};
}

const GpuInfo* FindGpu(const NodeInfo& node, absl::string_view uuid) {
  for (const GpuInfo& g : node.gpus) {
    if (g.uuid == uuid) return &g;
  }
  return nullptr;
}

const NodeInfo* FindNode(const Cluster& cluster, absl::string_view name) {
  for (const NodeInfo& n : cluster.nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

}  // namespace

CapacityType NodeCapacityType(const Cluster& cluster, const NodeInfo* node) {
  if (node != nullptr) {
    if (auto it = node->labels.find(std::string(kCapacityTypeLabel)); it != node->labels.end()) {
      if (std::optional<CapacityType> c = ParseCapacityType(it->second)) return *c;
    }
  }
  return cluster.declared.default_capacity;
}

void MeterGpu(const Workload& run, size_t replica, const std::string& uuid, const Cluster& cluster,
              Timestamp from, Timestamp to, const MeteringPolicy& policy,
              std::vector<UsageRecord>& out) {
  if (to <= from || replica >= run.assignment.replicas.size()) return;
  const std::vector<PriceEntry>& book = cluster.declared.prices;
  const ReplicaAssignment& r = run.assignment.replicas[replica];
  const NodeInfo* node = FindNode(cluster, r.node);
  const GpuInfo* gpu = node == nullptr ? nullptr : FindGpu(*node, uuid);
  UsageRecord base;
  base.workload = run.id;
  base.attempt = run.attempts;
  base.replica = static_cast<uint32_t>(replica);
  base.tenant = run.spec.tenant;
  base.project = run.spec.project;
  base.workload_class = run.spec.workload_class;
  base.cluster = cluster.info.name;
  base.node = r.node;
  base.gpu_uuid = uuid;
  base.gpu_model = gpu == nullptr ? "" : gpu->model;
  base.mig_profile = r.mig_profile;
  base.gpu_milli = r.mig_profile.empty() ? r.gpu_milli : 0;
  base.capacity = NodeCapacityType(cluster, node);
  if (!r.mig_profile.empty()) {
    const auto [geo, profile] = FindProfile(base.gpu_model, r.mig_profile);
    base.fraction =
        profile == nullptr ? Fraction{1, 1} : MigFraction(*geo, *profile, policy.mig_basis);
  } else if (r.gpu_milli > 0) {
    base.fraction = Fraction{r.gpu_milli, kMilliPerGpu};
  }
  // Where a line of this GPU's (model, capacity) -- the whole GPU's or the MIG profile's --
  // takes effect inside the span, the price may change: a new record starts there. A record
  // never crosses a whole hour (UTC) either: reports by hour, day, week or month then add
  // whole records, never parts of one.
  std::set<Timestamp> cuts = {from, to};
  for (Timestamp hour = std::chrono::floor<std::chrono::hours>(from) + std::chrono::hours(1);
       hour < to; hour += std::chrono::hours(1)) {
    cuts.insert(hour);
  }
  for (const PriceEntry& e : book) {
    if (e.gpu_model == base.gpu_model && e.capacity == base.capacity &&
        (e.mig_profile.empty() || e.mig_profile == base.mig_profile) && e.effective_from > from &&
        e.effective_from < to) {
      cuts.insert(e.effective_from);
    }
  }
  for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
    UsageRecord rec = base;
    rec.from = *it;
    rec.to = *std::next(it);
    const auto duration = std::chrono::duration_cast<std::chrono::microseconds>(rec.to - rec.from);
    std::optional<int64_t> own;
    if (!rec.mig_profile.empty()) {
      own = PriceAt(cluster.declared, rec.gpu_model, rec.mig_profile, rec.capacity, rec.from);
    }
    const std::optional<int64_t> whole =
        PriceAt(cluster.declared, rec.gpu_model, "", rec.capacity, rec.from);
    if (whole) rec.gpu_line_cost_micros = CostMicros(*whole, rec.fraction, duration);
    if (own) {
      rec.price_micros_per_hour = own;
      rec.profile_priced = true;
      rec.cost_micros = CostMicros(*own, Fraction{1, 1}, duration);
    } else if (whole) {
      rec.price_micros_per_hour = whole;
      rec.cost_micros = rec.gpu_line_cost_micros;
    }
    out.push_back(std::move(rec));
  }
}

std::vector<UsageRecord> MeterSpan(const Workload& run, const Cluster& cluster, Timestamp from,
                                   Timestamp to, const MeteringPolicy& policy) {
  std::vector<UsageRecord> out;
  if (to <= from) return out;
  for (size_t i = 0; i < run.assignment.replicas.size(); ++i) {
    for (const std::string& uuid : run.assignment.replicas[i].gpu_uuids) {
      MeterGpu(run, i, uuid, cluster, from, to, policy, out);
    }
  }
  return out;
}

absl::Status ValidateUsageFilter(const UsageFilter& filter) {
  if (filter.page_size < 1 || filter.page_size > 10000) {
    return absl::InvalidArgumentError("page_size: must be 1..10000");
  }
  if (filter.to <= filter.from) return absl::InvalidArgumentError("to: must be after from");
  return absl::OkStatus();
}

}  // namespace gpufed
