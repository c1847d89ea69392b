#ifndef GPUFED_FEDERATION_PREEMPTION_H_
#define GPUFED_FEDERATION_PREEMPTION_H_

// What is recorded of every preemption (docs/quotas.md#preemption-records): why, for whom, whom
// it stopped, and what each tenant involved held of the contested resource before and after.
// Recorded in the transaction that marks its victims; append-only.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "federation/types.h"

namespace gpufed {

enum class PreemptionCause {
  kGuaranteeReclaim,  // an owner within its guarantee took back what borrowers held
  kFairShare,         // idle capacity moved between tenants by weight
  kPriority,          // higher priority work inside a tenant
};
// "guarantee_reclaim", "fair_share", "priority" (as stored and in metric labels).
absl::string_view PreemptionCauseName(PreemptionCause cause);
std::optional<PreemptionCause> ParsePreemptionCause(absl::string_view name);

struct PreemptionVictim {
  WorkloadId id = 0;
  std::string tenant;
  std::string project;
  int64_t gpu_milli = 0;  // GPU-equivalents it held, in milli

  bool operator==(const PreemptionVictim&) const = default;
};

// What one tenant held of the record's resource (milli, firm holdings: placed work).
struct TenantShare {
  std::string tenant;
  int64_t before_milli = 0;
  int64_t after_milli = 0;  // once the victims stopped and the preemptor is placed

  bool operator==(const TenantShare&) const = default;
};

struct PreemptionRecord {
  int64_t id = 0;  // assigned by the store, increasing
  Timestamp time{};
  PreemptionCause cause = PreemptionCause::kGuaranteeReclaim;
  WorkloadId preemptor = 0;
  std::string tenant;  // the preemptor's
  std::string project;
  std::string resource;       // what was contested: a GPU model, a MIG profile or `gpu`
  std::string cluster;        // where the victims ran and the preemptor goes
  int64_t needed_milli = 0;   // GPU-equivalents the preemptor needs
  int64_t evicted_milli = 0;  // GPU-equivalents the victims held
  // The victims' work lost: GPU-equivalents x the seconds of work each loses (WorkLostSeconds).
  double gpu_seconds_lost = 0;
  std::vector<PreemptionVictim> victims;
  std::vector<TenantShare> shares;  // the preemptor's tenant and each victim's

  bool operator==(const PreemptionRecord&) const = default;
};

// The seconds of work `w` loses if stopped at `now`: since it started (or, not yet confirmed
// running, since it was placed), or for checkpointable work since its last checkpoint as its
// interval puts it (the control plane hears of no checkpoint; it counts from the start).
int64_t WorkLostSeconds(const Workload& w, Timestamp now);

// Bounds of ListPreemptions.
inline constexpr int kMaxPreemptionPage = 500;

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_PREEMPTION_H_
