#include "federation/preemption.h"

#include <chrono>

namespace gpufed {
namespace {

struct CauseName {
  PreemptionCause cause;
  absl::string_view name;
};

constexpr CauseName kCauseNames[] = {
    {PreemptionCause::kGuaranteeReclaim, "guarantee_reclaim"},
    {PreemptionCause::kFairShare, "fair_share"},
    {PreemptionCause::kPriority, "priority"},
};

}  // namespace

absl::string_view PreemptionCauseName(PreemptionCause cause) {
  for (const CauseName& c : kCauseNames) {
    if (c.cause == cause) return c.name;
  }
  return "";
}

std::optional<PreemptionCause> ParsePreemptionCause(absl::string_view name) {
  for (const CauseName& c : kCauseNames) {
    if (c.name == name) return c.cause;
  }
  return std::nullopt;
}

int64_t WorkLostSeconds(const Workload& w, Timestamp now) {
  const Timestamp since = w.start_time.value_or(w.update_time);
  const int64_t ran =
      now > since ? std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count() : 0;
  const int64_t lost =
      w.spec.checkpoint_interval_ms > 0 ? ran % w.spec.checkpoint_interval_ms : ran;
  return lost / 1000;
}

}  // namespace gpufed
