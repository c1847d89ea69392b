#ifndef GPUFED_FEDERATION_FAIR_SHARE_H_
#define GPUFED_FEDERATION_FAIR_SHARE_H_

// Fair share (docs/quotas.md#fair-share): idle capacity is shared between tenants, and between
// the projects of a tenant, by weight, judged by usage that decays with a half-life: GPU-seconds
// held, each worth half as much one half-life later (as Slurm's Fair Tree counts usage), not a
// moving average of what is held now.
//
// Plain C++, deterministic; time is given. Not thread-safe: the scheduler's thread owns it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "federation/types.h"

namespace gpufed {

// A tenant's (project empty) or a project's weight; 1 unless set.
struct ShareWeight {
  std::string tenant;
  std::string project;
  int64_t weight = 1;

  bool operator==(const ShareWeight&) const = default;
};

// What a tenant (project empty) or project is due and has, for reports and metrics.
struct FairShare {
  std::string tenant;
  std::string project;
  int64_t weight = 1;
  // Its share of the pool by weight among the active tenants (holding or waiting); a project's
  // is its part of its tenant's, among the tenant's active projects.
  double share = 0;
  int64_t held_milli = 0;  // GPU-equivalents held now
  double decayed_gpu_hours = 0;
  size_t waiting = 0;  // workloads in the queue
};

// Weights are 1..kMaxShareWeight.
inline constexpr int64_t kMaxShareWeight = 1'000'000;

// Decayed usage as saved (QuotaStore::SaveUsage): GPU-seconds per holder, decayed to `as_of`.
struct UsageSnapshot {
  Timestamp as_of{};  // zero: nothing saved
  std::map<std::pair<std::string, std::string>, double> gpu_seconds;

  bool operator==(const UsageSnapshot&) const = default;
};

// Bounds of a saved snapshot: holders (tenants and projects) at most.
inline constexpr size_t kMaxUsageHolders = 100'000;

// INVALID_ARGUMENT naming the holder for a negative or non-finite figure, or too many holders.
absl::Status ValidateUsage(const UsageSnapshot& usage);

// Decayed usage per holder: (tenant, "") for a tenant in all, (tenant, project) for a project.
class DecayedUsage {
 public:
  using Holder = std::pair<std::string, std::string>;

  // `half_life` must be positive (at least a nanosecond is used).
  explicit DecayedUsage(std::chrono::nanoseconds half_life)
      : half_life_(std::max(half_life, std::chrono::nanoseconds(1))) {}

  // Moves to `now`: what was counted decays, and each holder adds what it held over the interval
  // (`held_milli`: GPU-equivalents in milli, held at a constant rate since the last call). The
  // first call only sets the clock. A `now` before the last is ignored.
  void Advance(Timestamp now, const std::map<Holder, int64_t>& held_milli);

  // Decayed GPU-seconds of `holder`.
  [[nodiscard]] double GpuSeconds(const Holder& holder) const;
  // The same, as the GPUs held on average over the decay: a holder that held g GPUs for many
  // half-lives reads g. Comparable with GPUs held now.
  [[nodiscard]] double AverageGpus(const Holder& holder) const;

  // What it has counted, as of the last Advance (as_of zero before the first).
  [[nodiscard]] UsageSnapshot Snapshot() const;
  // Goes on from a snapshot (a newly active scheduler from what the last one saved): the next
  // Advance decays it from its as_of. A snapshot with as_of zero changes nothing.
  void Restore(const UsageSnapshot& snapshot);

  [[nodiscard]] std::chrono::nanoseconds half_life() const { return half_life_; }
  [[nodiscard]] const std::map<Holder, double>& all() const { return gpu_seconds_; }

 private:
  std::chrono::nanoseconds half_life_;
  std::optional<Timestamp> last_;
  std::map<Holder, double> gpu_seconds_;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_FAIR_SHARE_H_
