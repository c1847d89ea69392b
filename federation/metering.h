#ifndef GPUFED_FEDERATION_METERING_H_
#define GPUFED_FEDERATION_METERING_H_

// Metering (docs/chargeback.md): what a workload's run used, per replica and GPU, priced by the
// cluster's price-book line in force at each moment. Plain functions of their arguments, so the
// stores (which record usage in the transaction that ends or advances a run) and the reports
// compute the same figures.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "federation/mig.h"
#include "federation/types.h"

namespace gpufed {

// How a MIG instance's share of its GPU is counted: its compute slices over the GPU's (k/7 on an
// H100), its memory slices over the GPU's (m/8), or the larger of the two.
enum class MigBasis : uint8_t { kCompute = 0, kMemory = 1, kLarger = 2 };
absl::string_view MigBasisName(MigBasis basis);  // "compute", "memory", "larger"
std::optional<MigBasis> ParseMigBasis(absl::string_view name);

struct MeteringPolicy {
  MigBasis mig_basis = MigBasis::kCompute;
};

// A part of one GPU, as an exact fraction.
struct Fraction {
  int64_t num = 1;
  int64_t den = 1;
  bool operator==(const Fraction&) const = default;
};

// The share of its GPU a MIG instance of `profile` takes by `basis`.
Fraction MigFraction(const MigGeometry& geometry, const MigProfile& profile, MigBasis basis);

// One GPU's part of one replica of one run over one span with one price: the unit chargeback is
// built from. Stored append-only; (workload, attempt, replica, gpu_uuid, from) is unique.
struct UsageRecord {
  WorkloadId workload = 0;
  uint32_t attempt = 0;
  uint32_t replica = 0;  // index into the assignment's replicas
  std::string tenant;
  std::string project;
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  std::string cluster;
  std::string node;
  std::string gpu_uuid;
  std::string gpu_model;    // "" when the cluster no longer lists the GPU
  std::string mig_profile;  // set: a MIG instance of this profile
  uint32_t gpu_milli = 0;   // set: a share of the GPU of this many milli-GPUs
  CapacityType capacity = CapacityType::kOnDemand;
  Timestamp from{};  // [from, to)
  Timestamp to{};
  // The part of the GPU charged: 1/1 for a whole GPU, N/1000 for a share, a MIG instance's
  // fraction by the policy's basis.
  Fraction fraction;
  // The price line applied, per hour, micro-units: the whole GPU's (cost = price x fraction x
  // hours) or, when the book prices the MIG profile itself (profile_priced), the instance's (cost =
  // price x hours). nullopt: the book had no line (cost 0; reports show the hours as unpriced).
  std::optional<int64_t> price_micros_per_hour;
  bool profile_priced = false;
  int64_t cost_micros = 0;
  // The span at the whole GPU's line: cost_micros, or for a profile-priced record its fraction
  // of the GPU's line (0 when the book has none). Cost allocation (federation/cost_allocation.h)
  // counts capacity at GPU lines; the difference is the profile's premium.
  int64_t gpu_line_cost_micros = 0;

  // (to - from) x fraction, in GPU-seconds.
  [[nodiscard]] double GpuSeconds() const;
  bool operator==(const UsageRecord&) const = default;
};

// What `price_micros_per_hour` x num/den over `duration` costs, in micro-units, rounded to the
// nearest (halves away from zero). Exact: no overflow for any price, fraction or duration a record
// can hold.
int64_t CostMicros(int64_t price_micros_per_hour, Fraction fraction,
                   std::chrono::microseconds duration);

// How `node`'s GPUs are paid for: its capacity-type label, else the cluster's default (also for
// a node the cluster no longer lists: null).
CapacityType NodeCapacityType(const Cluster& cluster, const NodeInfo* node);

// The records of `run`'s current attempt (its assignment, spec, attempts) from `from` to `to` on
// `cluster` (whose nodes give each GPU's model and capacity type, and whose declaration gives the
// prices): one per GPU of each replica and per span, a span ending where a price line for that
// GPU takes effect and at every whole hour (UTC). Empty when `to` <= `from` or the run holds no
// GPU.
std::vector<UsageRecord> MeterSpan(const Workload& run, const Cluster& cluster, Timestamp from,
                                   Timestamp to, const MeteringPolicy& policy);
// MeterSpan's records for one GPU (`uuid`) of one replica (an index into the assignment's
// replicas), appended to `out`. Nothing when `replica` is out of range.
void MeterGpu(const Workload& run, size_t replica, const std::string& uuid, const Cluster& cluster,
              Timestamp from, Timestamp to, const MeteringPolicy& policy,
              std::vector<UsageRecord>& out);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_METERING_H_
